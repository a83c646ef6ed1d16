// Transports: the host copy, and the device transport's moves into the combine device (from
// host memory, from its own device and, with two devices, peer to peer), concurrently too.
#include "gpu/runtime/transport.h"

#include <doctest/doctest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "tests/support/check_ok.h"
#include "tests/support/seeded_rng.h"
#if defined(HYPIC_WITH_CUDA)
#include "gpu/cuda/runtime/device_transport.h"
#endif

namespace hypic::runtime {
namespace {

EntryPtr MakeEntry(uint64_t seed) {
  EntryMeta meta;
  meta.key = SegmentKey(Hash128{seed, seed + 1});
  meta.name_space = "tenant";
  meta.num_layers = 2;
  meta.tokens = {1, 2, 3, 4, 5};
  auto entry = std::make_shared<SegmentEntry>(meta);
  testing::SeededRng rng(seed);
  auto fill = [&](uint32_t layer, TensorKind kind, Shape shape) {
    auto view = entry->AddTensor(layer, kind, DType::kF32, shape);
    REQUIRE_OK(view);
    auto values = rng.NormalVector(static_cast<size_t>(view->NumElements()));
    std::memcpy(view->data(), values.data(), view->NumBytes());
  };
  fill(0, TensorKind::kTransition, Shape{2, 8, 8});
  fill(0, TensorKind::kState, Shape{2, 8, 8});
  fill(1, TensorKind::kKey, Shape{3, 1, 8});
  fill(1, TensorKind::kValue, Shape{3, 1, 8});
  return entry;
}

void CheckSameContents(const SegmentEntry& a, const SegmentEntry& b) {
  CHECK(a.key() == b.key());
  CHECK(a.meta().tokens == b.meta().tokens);
  CHECK(a.meta().name_space == b.meta().name_space);
  REQUIRE(a.tensors().size() == b.tensors().size());
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    const EntryTensor& x = a.tensors()[i];
    const EntryTensor* y = b.Find(x.layer, x.kind);
    REQUIRE(y != nullptr);
    CHECK(y->view.shape() == x.view.shape());
    CHECK(y->view.dtype() == x.view.dtype());
    CHECK(std::memcmp(y->view.data(), x.view.data(), x.view.NumBytes()) == 0);
  }
}

TEST_CASE("the host transport hands over an equal entry in memory of its own") {
  EntryPtr e = MakeEntry(3);
  HostTransport transport;
  auto moved = transport.Deliver(e, 1);
  REQUIRE_OK(moved);
  CheckSameContents(*e, **moved);
  for (const EntryTensor& t : e->tensors()) {
    CHECK((*moved)->Find(t.layer, t.kind)->view.data() != t.view.data());
  }
  CHECK(transport.Deliver(nullptr, 0).status().code() == StatusCode::kInternal);
}

TEST_CASE("the host copy refuses tensors in device memory") {
  auto entry = std::make_shared<SegmentEntry>(EntryMeta{});
  static float fake[4];
  TensorView device_view(fake, DType::kF32, Shape{4}, MemoryKind::kDevice, 0);
  REQUIRE_OK(entry->AddView(0, TensorKind::kState, device_view, nullptr));
  CHECK(CopyEntryToHost(*entry).status().code() == StatusCode::kBadRequest);
}

TEST_CASE("the device transport moves entries into the combine device from host and devices") {
#if defined(HYPIC_WITH_CUDA)
  auto to0 = gpu::MakeDeviceTransport(0);
  if (to0.status().code() == StatusCode::kUnsupported) {
    MESSAGE("skipped: " << to0.status().message());
    return;
  }
  REQUIRE_OK(to0);
  auto check_on0 = [](const EntryPtr& moved, const SegmentEntry& want) {
    for (const EntryTensor& t : moved->tensors()) {
      CHECK(t.view.memory() == MemoryKind::kDevice);
      CHECK(t.view.device() == 0);
    }
    auto back = gpu::DownloadEntry(*moved);
    REQUIRE_OK(back);
    CheckSameContents(want, **back);
  };
  const EntryPtr host = MakeEntry(9);
  auto on0 = (*to0)->Deliver(host, 0);  // host to device
  REQUIRE_OK(on0);
  check_on0(*on0, *host);
  auto again = (*to0)->Deliver(*on0, 0);  // within the combine's own device
  REQUIRE_OK(again);
  check_on0(*again, *host);
  auto to1 = gpu::MakeDeviceTransport(1);
  if (to1.ok()) {  // peer to peer
    auto on1 = (*to1)->Deliver(host, 0);
    REQUIRE_OK(on1);
    CHECK((*on1)->tensors()[0].view.device() == 1);
    auto moved = (*to0)->Deliver(*on1, 1);
    REQUIRE_OK(moved);
    check_on0(*moved, *host);
  } else {
    MESSAGE("peer copy skipped: " << to1.status().message());
  }
  // Concurrent deliveries (blocks reused from the pool as entries are dropped).
  std::vector<std::thread> threads;
  std::vector<Status> results(4);
  for (size_t t = 0; t < results.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 8 && results[t].ok(); ++i) {
        const EntryPtr e = MakeEntry(100 + t * 8 + static_cast<uint64_t>(i));
        auto moved = (*to0)->Deliver(e, static_cast<int>(t));
        if (!moved.ok()) {
          results[t] = moved.status();
          break;
        }
        auto back = gpu::DownloadEntry(**moved);
        if (!back.ok()) results[t] = back.status();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const Status& st : results) CHECK_OK(st);
#else
  MESSAGE("skipped: no CUDA device (built without CUDA)");
#endif
}

}  // namespace
}  // namespace hypic::runtime
