// TensorStreamParser: fed in pieces of any size it yields exactly the tensors DecodeTensorStream
// gives for the whole stream, and it rejects what DecodeTensorStream rejects (truncation,
// trailing bytes, bad enums, lying sizes), with tensors over its limit refused before any
// allocation; FeedPrefix takes a stream that other bytes follow and leaves them.
#include "protocol/tensor_stream_parser.h"

#include <doctest/doctest.h>

#include <cstring>

#include "tests/support/check_ok.h"
#include "tests/support/seeded_rng.h"

namespace hypic::protocol {
namespace {

using testing::SeededRng;

struct Stream {
  std::vector<std::vector<float>> f32;
  std::vector<std::vector<uint16_t>> u16;
  Bytes bytes;
};

Stream MakeStream(SeededRng& rng, uint32_t n_tensors) {
  Stream s;
  std::vector<StreamTensor> tensors;
  s.f32.reserve(n_tensors);
  s.u16.reserve(n_tensors);
  for (uint32_t i = 0; i < n_tensors; ++i) {
    int64_t a = rng.UniformInt(0, 5), b = rng.UniformInt(1, 7);
    StreamTensor t;
    t.layer = i / 2;
    t.kind = static_cast<TensorKind>(rng.UniformInt(0, kMaxTensorKind));
    if (rng.UniformInt(0, 1) == 1) {
      s.f32.push_back(rng.NormalVector(static_cast<size_t>(a * b)));
      t.dtype = DType::kF32;
      t.data = ByteSpan(reinterpret_cast<const std::byte*>(s.f32.back().data()),
                        s.f32.back().size() * 4);
    } else {
      s.u16.emplace_back(static_cast<size_t>(a * b));
      for (auto& x : s.u16.back()) x = static_cast<uint16_t>(rng.UniformInt(0, 65535));
      t.dtype = DType::kBF16;
      t.data = ByteSpan(reinterpret_cast<const std::byte*>(s.u16.back().data()),
                        s.u16.back().size() * 2);
    }
    t.shape = rng.UniformInt(0, 1) == 1 ? Shape{a, b} : Shape{a, 1, b};
    tensors.push_back(t);
  }
  s.bytes = EncodeTensorStream(tensors).value();
  return s;
}

// Feeds `bytes` in pieces whose sizes `next` picks; returns Finish's status.
Status FeedInPieces(ByteSpan bytes, std::vector<OwnedStreamTensor>* out,
                    const std::function<size_t()>& next, uint64_t limit = uint64_t{1} << 40) {
  TensorStreamParser p(
      [out](OwnedStreamTensor&& t) {
        out->push_back(std::move(t));
        return Status::Ok();
      },
      limit);
  while (!bytes.empty()) {
    size_t n = std::min(bytes.size(), next());
    HYPIC_RETURN_IF_ERROR(p.Feed(bytes.first(n)));
    bytes = bytes.subspan(n);
  }
  return p.Finish();
}

void CheckSame(const std::vector<OwnedStreamTensor>& got, const std::vector<StreamTensor>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].layer == want[i].layer);
    CHECK(got[i].kind == want[i].kind);
    CHECK(got[i].dtype == want[i].dtype);
    CHECK(got[i].shape == want[i].shape);
    REQUIRE(got[i].data.size() == want[i].data.size());
    CHECK(std::equal(got[i].data.begin(), got[i].data.end(), want[i].data.begin()));
  }
}

TEST_CASE("fed byte by byte, in random pieces or whole, the parser gives the decoder's tensors") {
  SeededRng rng(1601);
  for (int iter = 0; iter < 30; ++iter) {
    CAPTURE(iter);
    Stream s = MakeStream(rng, rng.UniformInt(0, 9));
    auto whole = DecodeTensorStream(ByteSpan(s.bytes));
    REQUIRE_OK(whole);
    for (int mode = 0; mode < 3; ++mode) {
      std::vector<OwnedStreamTensor> got;
      auto next = [&]() -> size_t {
        if (mode == 0) return 1;
        if (mode == 1) return rng.UniformInt(1, 40);
        return s.bytes.size();
      };
      REQUIRE_OK(FeedInPieces(ByteSpan(s.bytes), &got, next));
      CheckSame(got, *whole);
    }
  }
}

TEST_CASE("every truncation fails at Finish; a trailing byte fails at Feed") {
  SeededRng rng(1602);
  Stream s = MakeStream(rng, 4);
  for (size_t n = 0; n < s.bytes.size(); ++n) {
    CAPTURE(n);
    std::vector<OwnedStreamTensor> got;
    Status st = FeedInPieces(ByteSpan(s.bytes).first(n), &got, [] { return size_t{3}; });
    CHECK(st.code() == StatusCode::kBadRequest);
    CHECK_FALSE(DecodeTensorStream(ByteSpan(s.bytes).first(n)).ok());
  }
  Bytes longer = s.bytes;
  longer.push_back(std::byte{0});
  std::vector<OwnedStreamTensor> got;
  Status st = FeedInPieces(ByteSpan(longer), &got, [] { return size_t{1}; });
  CHECK(st.code() == StatusCode::kBadRequest);
  CHECK(st.message().find("after the last tensor") != std::string::npos);
}

TEST_CASE("FeedPrefix stops at the stream's end, in any pieces, and leaves the rest") {
  SeededRng rng(1604);
  for (int iter = 0; iter < 20; ++iter) {
    CAPTURE(iter);
    Stream s = MakeStream(rng, rng.UniformInt(0, 6));
    auto whole = DecodeTensorStream(ByteSpan(s.bytes));
    REQUIRE_OK(whole);
    Bytes tail(rng.UniformInt(0, 30));
    for (auto& b : tail) b = std::byte(rng.UniformInt(0, 255));
    Bytes all = s.bytes;
    all.insert(all.end(), tail.begin(), tail.end());
    for (size_t piece : {size_t{1}, size_t{7}, all.size()}) {
      CAPTURE(piece);
      std::vector<OwnedStreamTensor> got;
      TensorStreamParser p([&](OwnedStreamTensor&& t) {
        got.push_back(std::move(t));
        return Status::Ok();
      });
      Bytes rest;
      for (size_t at = 0; at < all.size(); at += piece) {
        const ByteSpan bytes = ByteSpan(all).subspan(at, std::min(piece, all.size() - at));
        size_t used = 0;
        REQUIRE_OK(p.FeedPrefix(bytes, &used));
        CHECK(used <= bytes.size());
        CHECK((used == bytes.size() || p.complete()));  // stops early only at the end
        rest.insert(rest.end(), bytes.begin() + static_cast<ptrdiff_t>(used), bytes.end());
      }
      CHECK(p.complete());
      REQUIRE_OK(p.Finish());
      CHECK(rest == tail);
      CheckSame(got, *whole);
    }
  }
}

TEST_CASE("bad enums, rank, reserved byte and sizes are rejected; a big tensor before allocation") {
  std::vector<float> d(6, 1.0f);
  std::vector<StreamTensor> one = {{2, TensorKind::kKey, DType::kF32, Shape{2, 3},
                                    ByteSpan(reinterpret_cast<const std::byte*>(d.data()), 24)}};
  const Bytes good = EncodeTensorStream(one).value();
  auto parse = [](const Bytes& b, uint64_t limit = uint64_t{1} << 40) {
    std::vector<OwnedStreamTensor> got;
    return FeedInPieces(
        ByteSpan(b), &got, [] { return size_t{5}; }, limit);
  };
  REQUIRE_OK(parse(good));
  // Offsets: count 0..3, layer 4..7, kind 8, dtype 9, rank 10, reserved 11, dims 12..27,
  // nbytes 28..35.
  for (auto [at, value] : std::vector<std::pair<size_t, uint8_t>>{
           {8, kMaxTensorKind + 1}, {9, kMaxDType + 1}, {10, 7}, {11, 1}, {28, 25}}) {
    CAPTURE(at);
    Bytes bad = good;
    bad[at] = std::byte{value};
    CHECK(parse(bad).code() == StatusCode::kBadRequest);
    CHECK_FALSE(DecodeTensorStream(ByteSpan(bad)).ok());
  }
  Bytes negative = good;
  int64_t dim = -1;
  std::memcpy(negative.data() + 12, &dim, 8);
  CHECK(parse(negative).code() == StatusCode::kBadRequest);
  Bytes many = good;
  uint32_t count = kMaxStreamTensors + 1;
  std::memcpy(many.data(), &count, 4);
  CHECK(parse(many).code() == StatusCode::kTooLarge);
  // 24 data bytes against a 16-byte limit: refused at the header.
  CHECK(parse(good, 16).code() == StatusCode::kTooLarge);
}

TEST_CASE("a callback error stops the parser and sticks") {
  SeededRng rng(1603);
  Stream s = MakeStream(rng, 3);
  int calls = 0;
  TensorStreamParser p([&](OwnedStreamTensor&&) {
    ++calls;
    return Cancelled("enough");
  });
  CHECK(p.Feed(ByteSpan(s.bytes)).code() == StatusCode::kCancelled);
  CHECK(calls == 1);
  CHECK(p.Feed(ByteSpan(s.bytes)).code() == StatusCode::kCancelled);
  CHECK(p.Finish().code() == StatusCode::kCancelled);
}

TEST_CASE("an empty stream is complete after its count") {
  Bytes empty = EncodeTensorStream({}).value();
  std::vector<OwnedStreamTensor> got;
  REQUIRE_OK(FeedInPieces(ByteSpan(empty), &got, [] { return size_t{1}; }));
  CHECK(got.empty());
}

}  // namespace
}  // namespace hypic::protocol
