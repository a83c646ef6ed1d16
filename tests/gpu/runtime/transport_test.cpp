// Transports: the host copy in CPU mode, and the NCCL GPU-to-GPU move where two devices exist.
#include "gpu/runtime/transport.h"

#include <doctest/doctest.h>

#include <cstring>

#include "tests/support/check_ok.h"
#include "tests/support/seeded_rng.h"
#if defined(HYPIC_WITH_NCCL)
#include "gpu/cuda/runtime/nccl_transport.h"
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

TEST_CASE("NCCL moves an entry from GPU 1 to GPU 0 unchanged") {
#if defined(HYPIC_WITH_NCCL)
  auto transport = gpu::MakeNcclTransport(0);
  if (transport.status().code() == StatusCode::kUnsupported) {
    MESSAGE("skipped: " << transport.status().message());
    return;
  }
  REQUIRE_OK(transport);
  EntryPtr e = MakeEntry(9);
  for (int from : {1, 0}) {  // across GPUs over NCCL, and within the combine's own device
    auto moved = (*transport)->Deliver(e, from);
    REQUIRE_OK(moved);
    for (const EntryTensor& t : (*moved)->tensors()) {
      CHECK(t.view.memory() == MemoryKind::kDevice);
      CHECK(t.view.device() == 0);
    }
    auto back = gpu::DownloadEntry(**moved);
    REQUIRE_OK(back);
    CheckSameContents(*e, **back);
  }
#else
  MESSAGE("skipped: no CUDA device (built without CUDA/NCCL)");
#endif
}

}  // namespace
}  // namespace hypic::runtime
