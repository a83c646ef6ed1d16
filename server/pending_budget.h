// PendingBudget: the daemon-wide count of bytes held by partially received requests (the
// growing bodies of server/body_buffer.h) against `max_pending_request_bytes`. A session
// reserves before its body buffer grows and releases when the body is complete (it is then
// the connection's in-flight bytes) or dropped; a reservation that would pass the limit is
// refused, and the session answers that request BUSY (docs/operations-server.md, "Bounded
// memory"). Thread-safe and lock-free: sessions on every io thread share one.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

namespace hypic::server {

class PendingBudget {
 public:
  // `on_change` (optional) is told every change of bytes() as a signed delta, e.g. to keep a
  // gauge; it is called without any lock, from the reserving or releasing thread.
  explicit PendingBudget(uint64_t limit, std::function<void(int64_t)> on_change = {});
  PendingBudget(const PendingBudget&) = delete;
  PendingBudget& operator=(const PendingBudget&) = delete;

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

}  // namespace hypic::server
