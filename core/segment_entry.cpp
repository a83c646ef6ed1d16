#include "core/segment_entry.h"

#include <fmt/format.h>

namespace hypic {

std::string_view TensorKindName(TensorKind kind) {
  switch (kind) {
    case TensorKind::kTransition: return "T";
    case TensorKind::kState: return "S";
    case TensorKind::kConvTail: return "conv_tail";
    case TensorKind::kKey: return "K";
    case TensorKind::kValue: return "V";
  }
  return "?";
}

std::string StateFileTensorName(uint32_t layer, TensorKind kind) {
  std::string_view name = "?";
  switch (kind) {
    case TensorKind::kState: name = "state"; break;
    case TensorKind::kConvTail: name = "conv_tail"; break;
    case TensorKind::kKey: name = "key"; break;
    case TensorKind::kValue: name = "value"; break;
    case TensorKind::kTransition: break;
  }
  return fmt::format("layers.{}.{}", layer, name);
}

Status SegmentEntry::CheckNew(uint32_t layer, TensorKind kind, const Shape& shape) const {
  if (shape.NumElements() < 0) {
    return BadRequest(fmt::format("entry tensor layer {} {}: bad shape {}", layer,
                                  TensorKindName(kind), shape.ToString()));
  }
  if (Find(layer, kind) != nullptr) {
    return BadRequest(
        fmt::format("entry tensor layer {} {} added twice", layer, TensorKindName(kind)));
  }
  return Status::Ok();
}

Result<TensorView> SegmentEntry::AddTensor(uint32_t layer, TensorKind kind, DType dtype,
                                           const Shape& shape, HostBuffer::Init init) {
  HYPIC_RETURN_IF_ERROR(CheckNew(layer, kind, shape));
  size_t bytes = static_cast<size_t>(shape.NumElements()) * DTypeSize(dtype);
  HYPIC_ASSIGN_OR_RETURN(HostBuffer buf, HostBuffer::Allocate(bytes, 64, init));
  auto owner = std::make_shared<HostBuffer>(std::move(buf));
  TensorView view(owner->data(), dtype, shape);
  tensors_.push_back({layer, kind, view});
  owners_.push_back(std::move(owner));
  return view;
}

Status SegmentEntry::AddView(uint32_t layer, TensorKind kind, TensorView view,
                             std::shared_ptr<const void> owner) {
  HYPIC_RETURN_IF_ERROR(CheckNew(layer, kind, view.shape()));
  tensors_.push_back({layer, kind, view});
  owners_.push_back(std::move(owner));
  return Status::Ok();
}

const EntryTensor* SegmentEntry::Find(uint32_t layer, TensorKind kind) const {
  for (const auto& t : tensors_) {
    if (t.layer == layer && t.kind == kind) return &t;
  }
  return nullptr;
}

size_t SegmentEntry::TensorBytes() const {
  size_t n = 0;
  for (const auto& t : tensors_) n += t.view.NumBytes();
  return n;
}

}  // namespace hypic
