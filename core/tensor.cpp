#include "core/tensor.h"

#include <limits>

namespace hypic {

Shape::Shape(std::initializer_list<int64_t> dims) {
  for (int64_t d : dims) {
    if (rank_ == kMaxRank) break;
    dims_[static_cast<size_t>(rank_++)] = d;
  }
}

Result<Shape> Shape::FromDims(std::span<const int64_t> dims) {
  if (dims.size() > static_cast<size_t>(kMaxRank)) {
    return Unsupported("rank " + std::to_string(dims.size()) + " exceeds the maximum rank " +
                       std::to_string(kMaxRank));
  }
  Shape s;
  for (int64_t d : dims) s.dims_[static_cast<size_t>(s.rank_++)] = d;
  return s;
}

int64_t Shape::NumElements() const {
  // A zero dim makes the product 0 even where the other dims alone would overflow.
  bool empty = false;
  for (int i = 0; i < rank_; ++i) {
    int64_t d = dims_[static_cast<size_t>(i)];
    if (d < 0) return -1;
    empty = empty || d == 0;
  }
  if (empty) return 0;
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) {
    int64_t d = dims_[static_cast<size_t>(i)];
    if (n > std::numeric_limits<int64_t>::max() / d) return -1;
    n *= d;
  }
  return n;
}

std::string Shape::ToString() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[static_cast<size_t>(i)]);
  }
  return s + "]";
}

TensorView::TensorView(void* data, DType dtype, Shape shape, MemoryKind memory, int device)
    : data_(data), dtype_(dtype), shape_(shape), memory_(memory), device_(device) {
  int64_t stride = 1;
  for (int i = shape_.rank() - 1; i >= 0; --i) {
    strides_[static_cast<size_t>(i)] = stride;
    stride *= shape_[i];
  }
}

bool TensorView::IsContiguous() const {
  int64_t expect = 1;
  for (int i = shape_.rank() - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[static_cast<size_t>(i)] != expect) return false;
    expect *= shape_[i];
  }
  return true;
}

}  // namespace hypic
