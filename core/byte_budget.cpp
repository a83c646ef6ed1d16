#include "core/byte_budget.h"

#include <utility>

namespace hypic {

ByteBudget::ByteBudget(uint64_t limit, std::function<void(int64_t)> on_change)
    : limit_(limit), on_change_(std::move(on_change)) {}

bool ByteBudget::TryReserve(uint64_t n) {
  uint64_t held = bytes_.load(std::memory_order_relaxed);
  do {
    if (n > limit_ || held > limit_ - n) return false;
  } while (!bytes_.compare_exchange_weak(held, held + n, std::memory_order_relaxed));
  if (on_change_ && n > 0) on_change_(static_cast<int64_t>(n));
  return true;
}

void ByteBudget::Release(uint64_t n) {
  if (n == 0) return;
  bytes_.fetch_sub(n, std::memory_order_relaxed);
  if (on_change_) on_change_(-static_cast<int64_t>(n));
}

}  // namespace hypic
