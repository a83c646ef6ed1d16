// The entry format: round trips, canonical bytes, alignment, and that every kind of damage is
// rejected with the documented status (docs/entry-format.md).
#include "storage/entry_format.h"

#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "core/hash.h"
#include "storage/synthetic_entry.h"
#include "tests/support/check_ok.h"
#include "tests/support/seeded_rng.h"

namespace hypic::storage {
namespace {

std::shared_ptr<const HostBuffer> Bytes(uint64_t seed, uint64_t size = 64 << 10,
                                        std::string ns = "tenant") {
  auto e = MakeSyntheticEntry({seed, std::move(ns), size, 40});
  REQUIRE_OK(e);
  auto b = Serialize(**e);
  REQUIRE_OK(b);
  return *b;
}

std::shared_ptr<const HostBuffer> Mutated(const HostBuffer& src, size_t at, std::byte x) {
  auto copy = HostBuffer::CopyOf(src.span());
  REQUIRE_OK(copy);
  copy->data()[at] ^= x;
  return std::make_shared<HostBuffer>(std::move(*copy));
}

template <typename T>
T LoadAt(const HostBuffer& b, size_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}

// Rewrites the header and trailer checksums so that a deliberate edit reaches the deeper checks.
void Reseal(HostBuffer& b) {
  uint32_t ns_len = LoadAt<uint32_t>(b, 64);
  std::vector<std::byte> prefix(b.data(), b.data() + kEntryHeaderSize + ns_len);
  std::memset(prefix.data() + 120, 0, 8);
  uint64_t h = Xxh3_64(prefix.data(), prefix.size());
  std::memcpy(b.data() + 120, &h, 8);
  size_t body = b.size() - 8;
  uint64_t t = Xxh3_64(b.data(), body);
  std::memcpy(b.data() + body, &t, 8);
}

TEST_CASE("serialize then parse gives back the same entry, viewing into the buffer") {
  auto e = MakeSyntheticEntry({7, "tenant-a", 256 << 10, 100});
  REQUIRE_OK(e);
  auto bytes = Serialize(**e);
  REQUIRE_OK(bytes);
  CHECK_OK(Verify((*bytes)->span()));
  auto parsed = Parse(*bytes);
  REQUIRE_OK(parsed);
  const SegmentEntry& a = **e;
  const SegmentEntry& b = **parsed;
  CHECK(a.key() == b.key());
  CHECK(a.meta().model == b.meta().model);
  CHECK(a.meta().name_space == b.meta().name_space);
  CHECK(a.meta().tokens == b.meta().tokens);
  CHECK(a.meta().conv_k == b.meta().conv_k);
  CHECK(a.meta().num_layers == b.meta().num_layers);
  CHECK(a.meta().settings.seam_w == b.meta().settings.seam_w);
  REQUIRE(a.tensors().size() == b.tensors().size());
  const auto* base = (*bytes)->data();
  for (const auto& t : a.tensors()) {
    const EntryTensor* u = b.Find(t.layer, t.kind);
    REQUIRE(u != nullptr);
    CHECK(u->view.dtype() == t.view.dtype());
    CHECK(u->view.shape() == t.view.shape());
    REQUIRE(u->view.NumBytes() == t.view.NumBytes());
    CHECK(std::memcmp(u->view.data(), t.view.data(), t.view.NumBytes()) == 0);
    auto off = static_cast<const std::byte*>(u->view.data()) - base;
    CHECK(off % static_cast<long>(kEntryDataAlignment) == 0);  // zero-copy and aligned
    CHECK(off > 0);
    CHECK(static_cast<size_t>(off) < (*bytes)->size());
  }
  // Canonical: re-serializing the parsed entry reproduces the bytes exactly.
  auto again = Serialize(b);
  REQUIRE_OK(again);
  REQUIRE((*again)->size() == (*bytes)->size());
  CHECK(std::memcmp((*again)->data(), (*bytes)->data(), (*bytes)->size()) == 0);
  auto info = InfoOf(a);
  REQUIRE_OK(info);
  CHECK(info->bytes == (*bytes)->size());
  CHECK(info->Cost() == uint64_t{100} * a.meta().num_layers);
}

TEST_CASE("the header sits where docs/entry-format.md says") {
  auto b = Bytes(3);
  CHECK(std::memcmp(b->data(), "HYPICENT", 8) == 0);
  CHECK(LoadAt<uint32_t>(*b, 8) == kEntryFormatVersion);
  CHECK(LoadAt<uint32_t>(*b, 12) == kEntryHeaderSize);
  auto e = MakeSyntheticEntry({3, "tenant", 64 << 10, 40});
  REQUIRE_OK(e);
  CHECK(Hash128::FromBytes(b->data() + 16) == (*e)->key().hash());
  CHECK(Hash128::FromBytes(b->data() + 32) == (*e)->meta().model);
  CHECK(LoadAt<uint32_t>(*b, 48) == 8);   // seam w
  CHECK(LoadAt<uint32_t>(*b, 56) == 4);   // layers
  CHECK(LoadAt<uint32_t>(*b, 60) == 40);  // tokens
  CHECK(LoadAt<uint32_t>(*b, 64) == 6);   // "tenant"
  CHECK(LoadAt<uint32_t>(*b, 68) == 11);  // 3 x (T, S, conv) + K + V
  CHECK(LoadAt<uint64_t>(*b, 72) == b->size());
  CHECK(LoadAt<uint64_t>(*b, 88) % kEntryDataAlignment == 0);
  CHECK(std::memcmp(b->data() + 128, "tenant", 6) == 0);
  CHECK(LoadAt<uint32_t>(*b, 136) == (*e)->meta().tokens[0]);  // tokens at align4(128 + 6)
  CHECK(LoadAt<uint64_t>(*b, b->size() - 8) == Xxh3_64(b->data(), b->size() - 8));
}

TEST_CASE("every flipped byte is caught by Verify and by Parse") {
  auto b = Bytes(11, 16 << 10);
  testing::SeededRng rng(11);
  std::vector<size_t> positions = {0, 8, 16, 40, 60, 72, 120, 130, 200, b->size() - 1};
  for (int i = 0; i < 200; ++i) positions.push_back(rng.UniformInt(0, uint32_t(b->size() - 1)));
  for (size_t at : positions) {
    CAPTURE(at);
    auto bad = Mutated(*b, at, std::byte{0x10});
    CHECK(!Verify(bad->span()).ok());
    CHECK(!Parse(bad).ok());
  }
}

TEST_CASE("truncated or extended bytes are rejected") {
  auto b = Bytes(12, 8 << 10);
  for (size_t n : {size_t{0}, size_t{7}, size_t{127}, size_t{128}, size_t{500}, b->size() - 1}) {
    CAPTURE(n);
    auto cut = HostBuffer::CopyOf(b->span().first(n));
    REQUIRE_OK(cut);
    auto shared = std::make_shared<HostBuffer>(std::move(*cut));
    CHECK(!Verify(shared->span()).ok());
    CHECK(Parse(shared).status().code() == StatusCode::kCorruption);
  }
  std::vector<std::byte> longer(b->data(), b->data() + b->size());
  longer.push_back(std::byte{0});
  CHECK(Verify(longer).code() == StatusCode::kCorruption);
}

TEST_CASE("a checksum that matches but a key that does not is still refused") {
  auto b = Bytes(13);
  auto copy = HostBuffer::CopyOf(b->span());
  REQUIRE_OK(copy);
  copy->data()[16] ^= std::byte{1};  // the key's first byte
  Reseal(*copy);
  auto shared = std::make_shared<HostBuffer>(std::move(*copy));
  CHECK_OK(Verify(shared->span()));  // Verify is checksum-only by design
  CHECK(Parse(shared).status().code() == StatusCode::kBadChecksum);
}

TEST_CASE("a damaged tensor is named by its per-tensor checksum") {
  auto b = Bytes(14);
  auto copy = HostBuffer::CopyOf(b->span());
  REQUIRE_OK(copy);
  uint64_t data_offset = LoadAt<uint64_t>(*copy, 88);
  copy->data()[data_offset + 3] ^= std::byte{0x80};
  Reseal(*copy);
  auto st = Parse(std::make_shared<HostBuffer>(std::move(*copy))).status();
  CHECK(st.code() == StatusCode::kBadChecksum);
  CHECK(st.message().find("tensor 0") != std::string::npos);
}

TEST_CASE("unknown versions, bad layouts and over-cap counts get their own codes") {
  auto b = Bytes(15);
  auto edit = [&](size_t off, uint32_t v) {
    auto copy = HostBuffer::CopyOf(b->span());
    REQUIRE_OK(copy);
    std::memcpy(copy->data() + off, &v, 4);
    Reseal(*copy);
    return Parse(std::make_shared<HostBuffer>(std::move(*copy))).status().code();
  };
  CHECK(edit(8, 2) == StatusCode::kVersionMismatch);
  CHECK(edit(60, kMaxEntryTokens + 1) == StatusCode::kTooLarge);
  CHECK(edit(68, kMaxEntryTensors + 1) == StatusCode::kTooLarge);
  CHECK(edit(64, kMaxNamespaceBytes + 1) == StatusCode::kTooLarge);
  CHECK(edit(60, 41) == StatusCode::kCorruption);  // tokens no longer fit the offsets
  CHECK(edit(100, 1) == StatusCode::kCorruption);  // flags must be zero
  CHECK(edit(56, 3) == StatusCode::kCorruption);   // a tensor of layer 3 >= layer count
}

TEST_CASE("ReadEntryInfo needs only the header and namespace") {
  auto b = Bytes(16, 32 << 10, "ns-x");
  auto n = EntryPrefixSize(b->span());
  REQUIRE_OK(n);
  CHECK(*n == kEntryHeaderSize + 4);
  auto info = ReadEntryInfo(b->span().first(*n));
  REQUIRE_OK(info);
  CHECK(info->name_space == "ns-x");
  CHECK(info->bytes == b->size());
  CHECK(info->n_tokens == 40);
  CHECK(info->key == SyntheticKey({16, "ns-x", 32 << 10, 40}));
  auto bad = Mutated(*b, 130, std::byte{1});
  CHECK(ReadEntryInfo(bad->span().first(*n)).status().code() == StatusCode::kBadChecksum);
}

TEST_CASE("ParseDeviceView reads the table from a host prefix and views the data elsewhere") {
  auto b = Bytes(17, 96 << 10, "ns-dev");
  auto data_offset = EntryDataOffset(b->span());
  REQUIRE_OK(data_offset);
  CHECK(*data_offset == LoadAt<uint64_t>(*b, 88));
  // The "device" copy: the whole entry somewhere else (here host memory, labelled as device 3).
  auto device = HostBuffer::CopyOf(b->span());
  REQUIRE_OK(device);
  auto prefix = HostBuffer::CopyOf(b->span().first(*data_offset));
  REQUIRE_OK(prefix);
  auto view = ParseDeviceView(prefix->span(), device->data(), MemoryKind::kDevice, 3, nullptr);
  REQUIRE_OK(view);
  auto parsed = Parse(b);
  REQUIRE_OK(parsed);
  CHECK((*view)->key() == (*parsed)->key());
  CHECK((*view)->meta().tokens == (*parsed)->meta().tokens);
  REQUIRE((*view)->tensors().size() == (*parsed)->tensors().size());
  for (const EntryTensor& t : (*parsed)->tensors()) {
    const EntryTensor* u = (*view)->Find(t.layer, t.kind);
    REQUIRE(u != nullptr);
    CHECK(u->view.memory() == MemoryKind::kDevice);
    CHECK(u->view.device() == 3);
    CHECK(u->view.dtype() == t.view.dtype());
    CHECK(u->view.shape() == t.view.shape());
    // The same offset from the start of the entry, in the device copy.
    CHECK(static_cast<const std::byte*>(u->view.data()) - device->data() ==
          static_cast<const std::byte*>(t.view.data()) - b->data());
  }
  // The data are not read: damage there is not the prefix's to see (it was verified before
  // the copy), but every damage to the prefix is refused.
  device->data()[*data_offset + 5] ^= std::byte{1};
  CHECK_OK(ParseDeviceView(prefix->span(), device->data(), MemoryKind::kDevice, 3, nullptr));
  auto parse_prefix = [&](const HostBuffer& p) {
    return ParseDeviceView(p.span(), device->data(), MemoryKind::kDevice, 3, nullptr)
        .status()
        .code();
  };
  CHECK(parse_prefix(*Mutated(*prefix, 20, std::byte{1})) == StatusCode::kBadChecksum);
  {
    auto whole = HostBuffer::CopyOf(b->span());  // a table edit, resealed
    REQUIRE_OK(whole);
    const uint64_t table = LoadAt<uint64_t>(*whole, 80);
    whole->data()[table + 64] ^= std::byte{8};  // tensor 0's length
    Reseal(*whole);
    auto p = HostBuffer::CopyOf(whole->span().first(*data_offset));
    REQUIRE_OK(p);
    CHECK(parse_prefix(*p) == StatusCode::kCorruption);
  }
  {
    auto whole = HostBuffer::CopyOf(b->span());  // a token edit: the key no longer matches
    REQUIRE_OK(whole);
    const uint32_t ns_len = LoadAt<uint32_t>(*whole, 64);
    whole->data()[(kEntryHeaderSize + ns_len + 3) / 4 * 4] ^= std::byte{1};
    Reseal(*whole);
    auto p = HostBuffer::CopyOf(whole->span().first(*data_offset));
    REQUIRE_OK(p);
    CHECK(parse_prefix(*p) == StatusCode::kBadChecksum);
  }
  auto short_prefix = HostBuffer::CopyOf(b->span().first(*data_offset - 8));
  REQUIRE_OK(short_prefix);
  CHECK(parse_prefix(*short_prefix) == StatusCode::kCorruption);
  CHECK(parse_prefix(*b) == StatusCode::kCorruption);  // the whole entry is not a prefix
  CHECK(ParseDeviceView(prefix->span(), nullptr, MemoryKind::kDevice, 3, nullptr).status().code() ==
        StatusCode::kBadRequest);
}

TEST_CASE("Serialize refuses entries it could not parse back") {
  auto e = MakeSyntheticEntry({17, "t", 4096, 16});
  REQUIRE_OK(e);
  SegmentEntry& entry = **e;
  SUBCASE("wrong key") {
    entry.mutable_meta().key = SegmentKey(Hash128{1, 2});
    CHECK(Serialize(entry).status().code() == StatusCode::kBadRequest);
  }
  SUBCASE("namespace over the cap") {
    auto& m = entry.mutable_meta();
    m.name_space.assign(kMaxNamespaceBytes + 1, 'x');
    m.key = SegmentKey::Compute(m.name_space, m.model, m.settings, m.tokens);
    CHECK(Serialize(entry).status().code() == StatusCode::kTooLarge);
  }
  SUBCASE("tensor of a layer beyond the layer count") {
    entry.mutable_meta().num_layers = 2;
    CHECK(Serialize(entry).status().code() == StatusCode::kBadRequest);
  }
  SUBCASE("another format version") {
    auto& m = entry.mutable_meta();
    m.settings.format_version = 2;
    m.key = SegmentKey::Compute(m.name_space, m.model, m.settings, m.tokens);
    CHECK(Serialize(entry).status().code() == StatusCode::kVersionMismatch);
  }
  SUBCASE("device memory") {
    SegmentEntry dev(entry.meta());
    float x = 0;
    CHECK_OK(dev.AddView(0, TensorKind::kState,
                         TensorView(&x, DType::kF32, Shape{1}, MemoryKind::kDevice), nullptr));
    CHECK(Serialize(dev).status().code() == StatusCode::kBadRequest);
  }
}

TEST_CASE("an entry without tensors or namespace round-trips") {
  EntryMeta m;
  m.num_layers = 1;
  m.tokens = {5, 6, 7};
  m.key = SegmentKey::Compute(m.name_space, m.model, m.settings, m.tokens);
  SegmentEntry e(m);
  auto b = Serialize(e);
  REQUIRE_OK(b);
  auto p = Parse(*b);
  REQUIRE_OK(p);
  CHECK((*p)->tensors().empty());
  CHECK((*p)->meta().tokens == m.tokens);
}

TEST_CASE("synthetic entries are deterministic per seed and distinct across seeds") {
  auto a = Bytes(21), b = Bytes(21), c = Bytes(22);
  REQUIRE(a->size() == b->size());
  CHECK(std::memcmp(a->data(), b->data(), a->size()) == 0);
  CHECK(SyntheticKey({21, "tenant", 64 << 10, 40}) != SyntheticKey({22, "tenant", 64 << 10, 40}));
  CHECK(SyntheticKey({21, "tenant", 64 << 10, 40}) != SyntheticKey({21, "other", 64 << 10, 40}));
  CHECK(std::memcmp(a->data() + 16, c->data() + 16, 16) != 0);  // different keys in the bytes
  auto big = Bytes(23, 1 << 20);
  CHECK(big->size() > (1 << 20) * 9 / 10);
  CHECK(big->size() < (1 << 20) * 11 / 10);
}

}  // namespace
}  // namespace hypic::storage
