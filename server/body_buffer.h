// BodyBuffer: the body of one large frame while it arrives. It grows with the bytes received
// and is never allocated from the length the header declares: the capacity starts at
// kInitialCapacity, doubles while it is below kMaxGrowStep, then grows by kMaxGrowStep, and
// never passes the declared length, so a complete body is a HostBuffer of exactly that length.
// Below HostBuffer::kMapThreshold a growth copies (the copies of the doublings add up to less
// than the body); above it the pages are remapped, not copied. Every byte of capacity is
// reserved from the daemon's ByteBudget before the buffer grows, and given back by Take
// (the complete body, then the connection's in-flight bytes) or by the destructor (a body
// dropped). So an attacker holds at most what it sent plus one growth step, and all of them
// together at most the budget. Move-only; not thread-safe (one per session, on its strand).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "core/byte_budget.h"
#include "core/host_buffer.h"
#include "core/status.h"

namespace hypic::server {

class BodyBuffer {
 public:
  static constexpr size_t kInitialCapacity = 64 << 10;
  static constexpr size_t kMaxGrowStep = 32 << 20;

  // REQUIRES: `budget` outlives the buffer.
  BodyBuffer(ByteBudget& budget, uint64_t length);
  ~BodyBuffer();
  BodyBuffer(BodyBuffer&& other) noexcept;
  BodyBuffer& operator=(BodyBuffer&& other) noexcept;
  BodyBuffer(const BodyBuffer&) = delete;
  BodyBuffer& operator=(const BodyBuffer&) = delete;

  // Where the next bytes go: the unfilled part of the buffer, at most `max_bytes`, grown first
  // when the buffer is full. Errors (the buffer is then unchanged): kBusy when the budget cannot
  // cover the growth, kNoSpace when the memory cannot be had.
  // REQUIRES: !complete(), max_bytes > 0.
  [[nodiscard]] Result<std::span<std::byte>> Room(size_t max_bytes);
  // Counts `n` bytes written at the start of the last Room. REQUIRES: n <= its size.
  void Commit(size_t n) { received_ += n; }
  // Copies `bytes` in (Room and Commit until done). Errors as Room's; the bytes copied before
  // an error stay. REQUIRES: received() + bytes.size() <= length().
  [[nodiscard]] Status Append(std::span<const std::byte> bytes);

  uint64_t length() const { return length_; }
  uint64_t received() const { return received_; }
  // Bytes allocated, all of them reserved from the budget.
  uint64_t capacity() const { return buffer_.size(); }
  bool complete() const { return received_ == length_; }

  // The complete body; its reservation is given back. REQUIRES: complete().
  std::shared_ptr<HostBuffer> Take();

 private:
  void ReleaseAll();

  ByteBudget* budget_;
  uint64_t length_;
  uint64_t received_ = 0;
  HostBuffer buffer_;  // its size() is the capacity
};

}  // namespace hypic::server
