#include "server/state_stream.h"

#include <algorithm>
#include <cstring>

#include "protocol/wire_codec.h"

namespace hypic::server {
namespace {

uint64_t DataBytes(const model::StateTensorView& t, DType dtype) {
  return static_cast<uint64_t>(t.shape.NumElements()) * DTypeSize(dtype);
}

// A tensor's header in the stream (README §5.3).
void AppendHeader(protocol::Bytes& out, const model::StateTensorView& t, DType dtype) {
  protocol::WireWriter w(&out);
  w.U32(t.layer);
  w.U8(static_cast<uint8_t>(t.kind));
  w.U8(static_cast<uint8_t>(dtype));
  w.U8(static_cast<uint8_t>(t.shape.rank()));
  w.U8(0);
  for (int i = 0; i < t.shape.rank(); ++i) w.I64(t.shape[i]);
  w.U64(DataBytes(t, dtype));
}

// Appends the F32 data of `t` in `dtype` (rounded to nearest even once, or copied).
void AppendData(protocol::Bytes& out, const model::StateTensorView& t, DType dtype) {
  const auto n = static_cast<size_t>(t.shape.NumElements());
  const size_t at = out.size();
  out.resize(at + n * DTypeSize(dtype));
  if (n == 0) return;
  if (dtype == DType::kF32) {
    std::memcpy(out.data() + at, t.data, n * sizeof(float));
  } else {
    ConvertElements(DType::kF32, t.data, dtype, out.data() + at, n);
  }
}

}  // namespace

uint64_t StreamBytes(std::span<const model::StateTensorView> tensors, DType dtype) {
  uint64_t n = 4;
  for (const auto& t : tensors) {
    n += 8 + 8 * static_cast<uint64_t>(t.shape.rank()) + 8 + DataBytes(t, dtype);
  }
  return n;
}

void AppendTensor(protocol::Bytes& out, const model::StateTensorView& tensor, DType dtype) {
  AppendHeader(out, tensor, dtype);
  AppendData(out, tensor, dtype);
}

StateStreamer::StateStreamer(const Request& req, DType dtype, uint32_t n_tensors,
                             protocol::Bytes prefix, uint64_t max_chunk,
                             std::chrono::milliseconds flush_timeout)
    : req_(req),
      dtype_(dtype),
      n_tensors_(n_tensors),
      prefix_(std::move(prefix)),
      max_chunk_(max_chunk),
      flush_timeout_(flush_timeout) {}

Status StateStreamer::QueueOwned(protocol::Bytes bytes) {
  return req_.chunks->Queue(Reply::Ok(req_, std::move(bytes)));
}

Status StateStreamer::QueueView(const std::shared_ptr<const void>& owner, const std::byte* data,
                                uint64_t n) {
  for (uint64_t at = 0; at < n; at += max_chunk_) {
    Reply r = Reply::Ok(req_);
    r.view_owner = owner;
    r.view = protocol::ByteSpan(data + at, std::min(max_chunk_, n - at));
    HYPIC_RETURN_IF_ERROR(req_.chunks->Queue(std::move(r)));
  }
  return Status::Ok();
}

Status StateStreamer::Layer(std::span<const model::StateTensorView> tensors,
                            const std::shared_ptr<const void>& owner) {
  // The previous layer's chunks first: its buffer is gone before this one is made.
  if (started_) HYPIC_RETURN_IF_ERROR(req_.chunks->Flush(flush_timeout_));
  const bool views = owner != nullptr && dtype_ == DType::kF32;
  std::shared_ptr<protocol::Bytes> converted;
  if (!views) {
    uint64_t n = 0;
    for (const auto& t : tensors) n += DataBytes(t, dtype_);
    converted = std::make_shared<protocol::Bytes>();
    converted->reserve(n);
    for (const auto& t : tensors) AppendData(*converted, t, dtype_);
  }
  protocol::Bytes head;
  if (!started_) {
    head = std::move(prefix_);
    protocol::WireWriter w(&head);
    w.U32(n_tensors_);
    started_ = true;
  }
  uint64_t at = 0;  // of this tensor's data in `converted`
  for (const auto& t : tensors) {
    AppendHeader(head, t, dtype_);
    HYPIC_RETURN_IF_ERROR(QueueOwned(std::move(head)));
    head = protocol::Bytes();
    const uint64_t n = DataBytes(t, dtype_);
    if (views) {
      // Aliasing: the chunk keeps the owner alive and views this tensor.
      HYPIC_RETURN_IF_ERROR(QueueView(std::shared_ptr<const void>(owner, t.data),
                                      static_cast<const std::byte*>(t.data), n));
    } else {
      HYPIC_RETURN_IF_ERROR(QueueView(converted, converted->data() + at, n));
      at += n;
    }
  }
  return Status::Ok();
}

}  // namespace hypic::server
