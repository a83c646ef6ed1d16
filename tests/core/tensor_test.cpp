#include "core/tensor.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "core/host_buffer.h"
#include "tests/support/check_ok.h"

namespace hypic {
namespace {

TEST_CASE("Shape counts elements and reports overflow as -1") {
  CHECK(Shape{}.NumElements() == 1);  // a scalar
  CHECK(Shape{}.rank() == 0);
  CHECK(Shape{2, 3, 4}.NumElements() == 24);
  CHECK(Shape{2, 0, 4}.NumElements() == 0);
  CHECK(Shape{5}.NumElements() == 5);
  CHECK(Shape{-1, 3}.NumElements() == -1);
  const int64_t big = int64_t{1} << 32;
  CHECK(Shape{big, big / 4}.NumElements() == int64_t{1} << 62);
  CHECK(Shape{big, big / 2}.NumElements() == -1);  // 2^63
  CHECK(Shape{big, big}.NumElements() == -1);      // 2^64 overflows int64
  CHECK(Shape{std::numeric_limits<int64_t>::max(), 1}.NumElements() ==
        std::numeric_limits<int64_t>::max());
  CHECK(Shape{std::numeric_limits<int64_t>::max(), 2}.NumElements() == -1);
  // A zero dim makes the product 0 even when other dims would overflow.
  CHECK(Shape{big, big, 0}.NumElements() == 0);
  CHECK(Shape{0, big, big}.NumElements() == 0);
  CHECK(Shape{0, -1}.NumElements() == -1);  // a negative dim is never valid
}

TEST_CASE("Shape prints, compares and builds from runtime dims") {
  CHECK(Shape{2, 3, 4}.ToString() == "[2, 3, 4]");
  CHECK(Shape{}.ToString() == "[]");
  CHECK(Shape{7}.ToString() == "[7]");
  CHECK(Shape{2, 3} == Shape{2, 3});
  CHECK_FALSE(Shape{2, 3} == Shape{3, 2});
  CHECK_FALSE(Shape{2} == Shape{2, 1});

  std::vector<int64_t> dims = {4, 5, 6};
  Result<Shape> s = Shape::FromDims(dims);
  REQUIRE_OK(s);
  CHECK(*s == Shape{4, 5, 6});
  CHECK(s->rank() == 3);
  REQUIRE_OK(Shape::FromDims({}));
  CHECK(Shape::FromDims({})->rank() == 0);
  std::vector<int64_t> max_rank(kMaxRank, 2);
  REQUIRE_OK(Shape::FromDims(max_rank));
  CHECK(Shape::FromDims(max_rank)->NumElements() == 64);
  std::vector<int64_t> too_deep(kMaxRank + 1, 1);
  Result<Shape> deep = Shape::FromDims(too_deep);
  CHECK(deep.status().code() == StatusCode::kUnsupported);
  CHECK(deep.status().message().find("rank 7") != std::string::npos);
}

TEST_CASE("TensorView is row-major contiguous with element strides") {
  std::vector<float> data(2 * 3 * 4);
  TensorView v(data.data(), DType::kF32, Shape{2, 3, 4});
  CHECK(v.rank() == 3);
  CHECK(v.stride(0) == 12);
  CHECK(v.stride(1) == 4);
  CHECK(v.stride(2) == 1);
  CHECK(v.dim(1) == 3);
  CHECK(v.NumElements() == 24);
  CHECK(v.NumBytes() == 96);
  CHECK(v.IsContiguous());
  CHECK(v.data_as<float>() == data.data());
  CHECK(v.memory() == MemoryKind::kHost);
  CHECK(v.device() == 0);

  TensorView half(data.data(), DType::kBF16, Shape{3, 1, 5}, MemoryKind::kDevice, 2);
  CHECK(half.NumBytes() == 30);
  CHECK(half.stride(0) == 5);
  CHECK(half.stride(1) == 5);
  CHECK(half.IsContiguous());
  CHECK(half.memory() == MemoryKind::kDevice);
  CHECK(half.device() == 2);

  TensorView scalar(data.data(), DType::kI64, Shape{});
  CHECK(scalar.NumElements() == 1);
  CHECK(scalar.NumBytes() == 8);
  CHECK(scalar.IsContiguous());

  TensorView empty(nullptr, DType::kU8, Shape{0, 7});
  CHECK(empty.NumElements() == 0);
  CHECK(empty.NumBytes() == 0);
  CHECK(empty.stride(0) == 7);
  CHECK(empty.IsContiguous());

  CHECK(TensorView().data() == nullptr);
  CHECK(TensorView().NumElements() == 1);  // rank 0
}

TEST_CASE("HostBuffer is aligned and zero-filled") {
  for (size_t alignment : {size_t{64}, size_t{256}, HostBuffer::kDefaultAlignment}) {
    for (size_t size : {size_t{1}, size_t{100}, size_t{4097}, size_t{1} << 20}) {
      Result<HostBuffer> b = HostBuffer::Allocate(size, alignment);
      REQUIRE_OK(b);
      CHECK(b->size() == size);
      CHECK_FALSE(b->empty());
      CHECK(reinterpret_cast<uintptr_t>(b->data()) % alignment == 0);
      bool zero = true;
      for (std::byte x : b->span()) zero = zero && x == std::byte{0};
      CHECK(zero);
    }
  }
  Result<HostBuffer> none = HostBuffer::Allocate(0);
  REQUIRE_OK(none);
  CHECK(none->empty());
  CHECK(none->data() == nullptr);
}

TEST_CASE("HostBuffer refuses an impossible allocation") {
  Result<HostBuffer> huge = HostBuffer::Allocate(std::numeric_limits<size_t>::max() - 10);
  CHECK(huge.status().code() == StatusCode::kNoSpace);
}

TEST_CASE("HostBuffer moves ownership and CopyOf copies") {
  std::vector<std::byte> src(1000);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 7);
  Result<HostBuffer> copy = HostBuffer::CopyOf(src);
  REQUIRE_OK(copy);
  REQUIRE(copy->size() == src.size());
  CHECK(std::equal(src.begin(), src.end(), copy->data()));
  CHECK(copy->data() != src.data());

  HostBuffer a = std::move(copy).value();
  const std::byte* p = a.data();
  HostBuffer b(std::move(a));
  CHECK(b.data() == p);
  CHECK(b.size() == 1000);
  CHECK(a.data() == nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  CHECK(a.size() == 0);

  Result<HostBuffer> other = HostBuffer::Allocate(16);
  REQUIRE_OK(other);
  HostBuffer c = std::move(other).value();
  c = std::move(b);  // frees c's old block (ASan checks the leak)
  CHECK(c.data() == p);
  CHECK(b.empty());  // NOLINT(bugprone-use-after-move)
  HostBuffer& alias = c;
  c = std::move(alias);  // self-move keeps the block
  CHECK(c.data() == p);
  CHECK(c.as<const uint8_t>()[3] == 21);

  Result<HostBuffer> empty_copy = HostBuffer::CopyOf({});
  REQUIRE_OK(empty_copy);
  CHECK(empty_copy->empty());
}

TEST_CASE("HostBuffer::Resize keeps the contents, across the heap and the mapped blocks") {
  HostBuffer b;
  size_t filled = 0;
  // 64 KiB doubling to 128 MiB: heap blocks, the switch to a mapping at kMapThreshold, then
  // remaps; the bytes written before every resize must survive it, and stay page-aligned.
  for (size_t size = 64 << 10; size <= (size_t{128} << 20); size *= 2) {
    CHECK_OK(b.Resize(size));
    REQUIRE(b.size() == size);
    CHECK(reinterpret_cast<uintptr_t>(b.data()) % HostBuffer::kDefaultAlignment == 0);
    for (size_t i = 0; i < filled; i += 4093) {
      REQUIRE(b.data()[i] == static_cast<std::byte>(i * 31));
    }
    for (size_t i = 0; i < size; i += 4093) b.data()[i] = static_cast<std::byte>(i * 31);
    filled = size;
  }
  CHECK_OK(b.Resize(3 << 20));  // a mapped block shrinks in place of a copy
  CHECK(b.size() == size_t{3} << 20);
  CHECK(b.data()[4093] == static_cast<std::byte>(4093 * 31));
  CHECK_OK(b.Resize(0));
  CHECK(b.empty());
  CHECK(b.data() == nullptr);
  CHECK(b.Resize(std::numeric_limits<size_t>::max() - 10).code() == StatusCode::kNoSpace);
  CHECK(b.empty());  // unchanged by the failure
}

}  // namespace
}  // namespace hypic
