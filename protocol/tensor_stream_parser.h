// TensorStreamParser: the incremental decoder of a tensor stream (README §5.3), for a receiver
// that takes a streamed COMPOSE state chunk by chunk (a frontend loading layer i while layer
// i+1 is in flight), alone (Feed) or followed by other bytes (FeedPrefix). Bytes go in in pieces of
// any size; each tensor is handed to the callback as soon as its last byte is in, with its own copy
// of the data (so the receiver never keeps the whole stream).
//
// It accepts exactly what DecodeTensorStream accepts (the fuzz target tensor_stream checks the
// two against each other on every split of the input): the tensor count capped at
// kMaxStreamTensors, enums and the reserved byte checked, every dim in 0..2^40, nbytes equal to
// product(dims) x dtype size. Everything is checked before anything is sized from it, and a
// tensor's data is allocated only once its header is whole and valid and its size is within
// `max_tensor_bytes` (kTooLarge above: the constructor's limit).
//
// After an error every later call returns that error. Single-threaded value type.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "protocol/frame.h"
#include "protocol/messages.h"

namespace hypic::protocol {

// One tensor of the stream with its own bytes.
struct OwnedStreamTensor {
  uint32_t layer = 0;
  TensorKind kind = TensorKind::kState;
  DType dtype = DType::kF32;
  Shape shape;
  Bytes data;  // row-major, little-endian

  // A view of this tensor (valid while it lives).
  StreamTensor View() const { return StreamTensor{layer, kind, dtype, shape, ByteSpan(data)}; }
};

class TensorStreamParser {
 public:
  // Returning an error from the callback stops the parser with that error.
  using OnTensor = std::function<Status(OwnedStreamTensor&&)>;

  TensorStreamParser(OnTensor on_tensor, uint64_t max_tensor_bytes = uint64_t{1} << 40);

  // Consumes all of `bytes`. Errors: kBadRequest (malformed; bytes past the last tensor
  // included), kTooLarge (a count or tensor over its limit), or the callback's error.
  Status Feed(ByteSpan bytes);
  // As Feed, for a stream that other bytes follow (a state-first COMPOSE reply, whose head
  // comes after its state): stops after the last tensor and sets *consumed to the bytes of
  // `bytes` that were the stream's; the rest are the caller's.
  Status FeedPrefix(ByteSpan bytes, size_t* consumed);
  // Whether the count was read and every tensor delivered.
  bool complete() const { return step_ == Step::kEnd; }
  // OK when the stream is complete (the count read and every tensor delivered); kBadRequest
  // when it ended early.
  Status Finish() const;

  uint32_t tensors_total() const { return total_; }
  uint32_t tensors_done() const { return done_; }

 private:
  enum class Step : uint8_t { kCount, kFixed, kDims, kNbytes, kData, kEnd };
  // Takes up to `want` bytes of `bytes` into head_; true once head_ holds `want`.
  bool Gather(ByteSpan& bytes, size_t want);
  // Takes bytes from the front of `bytes` until it is empty or the stream complete.
  Status Consume(ByteSpan& bytes);
  Status OnHead();
  Status Fail(Status s);

  OnTensor on_tensor_;
  uint64_t max_tensor_bytes_;
  Status error_;
  Step step_ = Step::kCount;
  std::vector<std::byte> head_;  // the piece of the current fixed-size item gathered so far
  uint32_t total_ = 0;
  uint32_t done_ = 0;
  uint8_t rank_ = 0;
  uint64_t numel_ = 1;
  std::array<int64_t, kMaxRank> dims_{};
  OwnedStreamTensor cur_;
  size_t filled_ = 0;  // data bytes of cur_ received
};

}  // namespace hypic::protocol
