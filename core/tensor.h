// TensorView: a non-owning view of a strided tensor in host or device memory. It carries
// shape, strides (in elements), dtype and memory kind; it never frees anything. The owner of
// the memory (a HostBuffer, a device Buffer, a SegmentEntry) must outlive every view of it.
// Thread-compatible value type.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "core/dtype.h"
#include "core/status.h"

namespace hypic {

enum class MemoryKind : uint8_t {
  kHost = 0,        // pageable host memory
  kHostPinned = 1,  // page-locked host memory (cudaHostAlloc)
  kDevice = 2,      // device memory of `device` index
};

inline constexpr int kMaxRank = 6;

// A shape of rank <= kMaxRank. dims beyond rank are 0.
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  // A shape of runtime rank (parsers). Returns kUnsupported when dims.size() > kMaxRank; the
  // dims are stored as given (NumElements reports negative ones).
  static Result<Shape> FromDims(std::span<const int64_t> dims);

  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[static_cast<size_t>(i)]; }
  int64_t& operator[](int i) { return dims_[static_cast<size_t>(i)]; }
  // Product of dims; 1 for rank 0. Returns -1 on overflow of int64.
  int64_t NumElements() const;
  std::string ToString() const;  // "[2, 3, 4]"

  friend bool operator==(const Shape& a, const Shape& b) {
    return a.rank_ == b.rank_ && a.dims_ == b.dims_;
  }

 private:
  int rank_ = 0;
  std::array<int64_t, kMaxRank> dims_{};
};

class TensorView {
 public:
  TensorView() = default;
  // A contiguous row-major view.
  TensorView(void* data, DType dtype, Shape shape, MemoryKind memory = MemoryKind::kHost,
             int device = 0);

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i]; }
  int rank() const { return shape_.rank(); }
  int64_t stride(int i) const { return strides_[static_cast<size_t>(i)]; }
  MemoryKind memory() const { return memory_; }
  int device() const { return device_; }

  int64_t NumElements() const { return shape_.NumElements(); }
  size_t NumBytes() const { return static_cast<size_t>(NumElements()) * DTypeSize(dtype_); }
  bool IsContiguous() const;

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Shape shape_;
  std::array<int64_t, kMaxRank> strides_{};
  MemoryKind memory_ = MemoryKind::kHost;
  int device_ = 0;
};

}  // namespace hypic
