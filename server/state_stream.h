// StateStreamer: sends a composed state as the tensor stream of a COMPOSE reply
// (protocol/README.md §4 and §5.3) through the request's ChunkWriter, layer by layer, in chunks
// of at most `max_chunk` bytes. Both reply layouts use it:
//   head first:  the reply head is the prefix, and the handler passes the finished state's
//                layers once the compose is done;
//   state first: the compose's on_layer hook passes each layer as the pass completes it, while
//                the later layers still compute; the head (with the logits) ends the reply.
//
// Memory (issue 16): Layer() first waits until everything queued before it is written, then
// converts the layer into a buffer of its own (rounded to nearest even for bf16/f16, copied for
// f32) and queues it without waiting. So a reply holds at most one converted layer beside the
// composed state: the one being written while the caller computes the next. The buffer is freed
// when its last chunk is written, or dropped unwritten when the connection closes. With an
// `owner`, f32 tensors are queued as views of the caller's memory (which the owner keeps alive
// until written) instead of being copied.
//
// Also the stream's encoding for a reply sent in one frame (StreamBytes, AppendTensor).
//
// Thread-compatible: one thread calls a StateStreamer (the compute worker running the compose);
// the ChunkWriter it queues through is thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>

#include "core/dtype.h"
#include "core/status.h"
#include "gpu/model/model.h"
#include "protocol/frame.h"
#include "server/request.h"

namespace hypic::server {

// The bytes of a tensor stream of `tensors` in `dtype`: the count, each header and its data.
uint64_t StreamBytes(std::span<const model::StateTensorView> tensors, DType dtype);
// Appends one tensor (header, then its F32 data converted to `dtype`) to `out`.
void AppendTensor(protocol::Bytes& out, const model::StateTensorView& tensor, DType dtype);

class StateStreamer {
 public:
  // `prefix` goes before the stream (the head of a head-first reply; empty state first), and
  // `n_tensors` is the stream's count. Layer() waits at most `flush_timeout` for the previous
  // layer to be written. REQUIRES: req.chunks (the client announced CHUNKED), which must outlive
  // this object, as must `req`.
  StateStreamer(const Request& req, DType dtype, uint32_t n_tensors, protocol::Bytes prefix,
                uint64_t max_chunk, std::chrono::milliseconds flush_timeout);

  // Queues one layer's tensors (F32 host data, valid during the call unless `owner` keeps it
  // alive), after the prefix and the count on the first call. Errors: the ChunkWriter's
  // (kCancelled: the connection closed; kDeadlineExceeded: the previous layer was not read
  // within flush_timeout).
  Status Layer(std::span<const model::StateTensorView> tensors,
               const std::shared_ptr<const void>& owner = nullptr);

 private:
  Status QueueOwned(protocol::Bytes bytes);
  Status QueueView(const std::shared_ptr<const void>& owner, const std::byte* data, uint64_t n);

  const Request& req_;
  const DType dtype_;
  const uint32_t n_tensors_;
  protocol::Bytes prefix_;
  const uint64_t max_chunk_;
  const std::chrono::milliseconds flush_timeout_;
  bool started_ = false;
};

}  // namespace hypic::server
