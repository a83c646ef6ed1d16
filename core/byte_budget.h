// ByteBudget: a count of bytes held against a limit, reserved before memory is taken and
// released when it is given back; a reservation that would pass the limit is refused, so the
// caller can answer BUSY (or TOO_LARGE, where the request alone passes the limit) instead of
// growing. Its users: the daemon's partially received requests (server/body_buffer.h, against
// `max_pending_request_bytes`; docs/operations-server.md, "Bounded memory") and the working
// memory of a model's forward passes (gpu/model/pass_memory.h, against `max_pass_bytes`).
// Thread-safe and lock-free.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <utility>

namespace hypic {

class ByteBudget {
 public:
  // `on_change` (optional) is told every change of bytes() as a signed delta, e.g. to keep a
  // gauge; it is called without any lock, from the reserving or releasing thread.
  explicit ByteBudget(uint64_t limit, std::function<void(int64_t)> on_change = {});
  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  // Reserves `n` bytes; false, reserving nothing, when bytes() + n would pass limit().
  [[nodiscard]] bool TryReserve(uint64_t n);
  // Gives back `n` reserved bytes. REQUIRES: they were reserved.
  void Release(uint64_t n);

  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  uint64_t limit() const { return limit_; }

 private:
  const uint64_t limit_;
  const std::function<void(int64_t)> on_change_;
  std::atomic<uint64_t> bytes_{0};
};

// Bytes reserved from a ByteBudget, released when it ends (or never reserved: empty).
// Movable, not copyable; thread-compatible.
class ByteReservation {
 public:
  ByteReservation() = default;
  // Takes over `bytes` that the caller has reserved from `budget`.
  ByteReservation(ByteBudget* budget, uint64_t bytes) : budget_(budget), bytes_(bytes) {}
  ByteReservation(ByteReservation&& other) noexcept
      : budget_(std::exchange(other.budget_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  ByteReservation& operator=(ByteReservation&& other) noexcept {
    ByteReservation old(std::move(other));
    std::swap(budget_, old.budget_);
    std::swap(bytes_, old.bytes_);
    return *this;
  }
  ~ByteReservation() {
    if (budget_ != nullptr) budget_->Release(bytes_);
  }

  uint64_t bytes() const { return bytes_; }

 private:
  ByteBudget* budget_ = nullptr;
  uint64_t bytes_ = 0;
};

}  // namespace hypic
