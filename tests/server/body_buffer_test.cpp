// BodyBuffer and ByteBudget: a body grows with the bytes received (never from its declared
// length), keeps every byte across its growth, holds in the budget exactly its capacity, and
// gives it back when taken or dropped; the budget never passes its limit, under contention too.
#include "server/body_buffer.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "core/byte_budget.h"
#include "tests/support/check_ok.h"

namespace hypic::server {
namespace {

std::vector<std::byte> Pattern(size_t n, size_t seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed) >> 3);
  return v;
}

TEST_CASE("a body grows with what arrives, not with what its header declares") {
  ByteBudget budget(uint64_t{1} << 40);
  const uint64_t declared = uint64_t{256} << 20;
  BodyBuffer body(budget, declared);
  CHECK(body.capacity() == 0);  // nothing up front
  CHECK(budget.bytes() == 0);

  std::vector<std::byte> chunk = Pattern(100 << 10, 1);
  CHECK_OK(body.Append(chunk));
  CHECK(body.received() == chunk.size());
  // Doubling from 64 KiB: at most twice what arrived, and all of it in the budget.
  CHECK(body.capacity() <= 2 * body.received());
  CHECK(budget.bytes() == body.capacity());

  // Up to 100 MiB, read-sized pieces: past kMaxGrowStep, growth is additive.
  std::vector<std::byte> piece = Pattern(256 << 10, 2);
  while (body.received() < (uint64_t{100} << 20)) {
    auto room = body.Room(piece.size());
    REQUIRE_OK(room);
    REQUIRE(!room->empty());
    std::memcpy(room->data(), piece.data(), room->size());
    body.Commit(room->size());
    CHECK(body.capacity() <= body.received() + BodyBuffer::kMaxGrowStep);
    CHECK(budget.bytes() == body.capacity());
  }
  CHECK_FALSE(body.complete());
}

TEST_CASE("every byte survives the growth and the complete body is exactly its length") {
  for (uint64_t length :
       {uint64_t{1}, uint64_t{64} << 10, (uint64_t{300} << 10) + 7, (uint64_t{40} << 20) + 4097}) {
    CAPTURE(length);
    ByteBudget budget(uint64_t{1} << 30);
    BodyBuffer body(budget, length);
    std::vector<std::byte> want = Pattern(length, length);
    // Uneven pieces, as reads deliver them.
    size_t off = 0;
    size_t step = 1;
    while (off < length) {
      size_t n = std::min<size_t>(length - off, step);
      CHECK_OK(body.Append(std::span(want).subspan(off, n)));
      off += n;
      step = step * 3 + 1;
    }
    REQUIRE(body.complete());
    CHECK(body.capacity() == length);
    CHECK(budget.bytes() == length);
    std::shared_ptr<HostBuffer> got = body.Take();
    CHECK(budget.bytes() == 0);  // from the budget to the connection's in-flight bytes
    REQUIRE(got->size() == length);
    CHECK(std::memcmp(got->data(), want.data(), length) == 0);
  }
}

TEST_CASE("a growth past the budget is BUSY and changes nothing; a dropped body gives back") {
  ByteBudget budget(1 << 20);
  BodyBuffer a(budget, 64 << 20);
  std::vector<std::byte> bytes = Pattern(700 << 10, 3);
  CHECK_OK(a.Append(bytes));  // 64 -> 128 -> 256 -> 512 -> 1024 KiB
  CHECK(budget.bytes() == 1 << 20);
  {
    BodyBuffer b(budget, 1 << 20);
    auto room = b.Room(1);
    CHECK(room.status().code() == StatusCode::kBusy);
    CHECK(b.capacity() == 0);
  }
  std::vector<std::byte> more = Pattern(400 << 10, 4);
  Status st = a.Append(more);  // fills 1 MiB, then the growth is refused
  CHECK(st.code() == StatusCode::kBusy);
  CHECK(a.received() == 1 << 20);
  CHECK(a.capacity() == 1 << 20);
  CHECK(budget.bytes() == 1 << 20);
  BodyBuffer moved = std::move(a);
  CHECK(budget.bytes() == 1 << 20);  // a move transfers the reservation, once
  moved = BodyBuffer(budget, 10);    // the old body is dropped: its bytes go back
  CHECK(budget.bytes() == 0);
}

TEST_CASE("the budget never passes its limit under contention") {
  constexpr uint64_t kLimit = 10'000;
  std::atomic<uint64_t> peak{0};
  std::atomic<uint64_t> refused{0};
  std::atomic<int64_t> observed{0};
  ByteBudget budget(kLimit, [&](int64_t delta) { observed += delta; });
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      // Two reservations held at once, each up to 6,000: one thread alone passes the limit
      // now and then, so refusals are certain, and the threads contend besides.
      for (int i = 0; i < 20'000; ++i) {
        uint64_t held[2] = {0, 0};
        for (uint64_t& n : held) {
          n = 1 + (i * 7919 + t * 104729 + (&n - held) * 31) % 6000;
          if (!budget.TryReserve(n)) {
            ++refused;
            n = 0;
          }
          uint64_t now = budget.bytes();
          uint64_t p = peak.load();
          while (now > p && !peak.compare_exchange_weak(p, now)) {
          }
        }
        for (uint64_t n : held) budget.Release(n);
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(peak.load() <= kLimit);
  CHECK(refused.load() > 0);
  CHECK(budget.bytes() == 0);
  CHECK(observed.load() == 0);  // every change was reported
  CHECK_FALSE(budget.TryReserve(kLimit + 1));
  CHECK(budget.TryReserve(kLimit));
  CHECK_FALSE(budget.TryReserve(1));
  budget.Release(kLimit);
}

}  // namespace
}  // namespace hypic::server
