// HbmTransport (server/hbm_transport.h) over a store whose HBM tier runs on the CPU backend: an
// entry the store holds in HBM is delivered as views into the tier's copy, with the same
// contents; one it does not hold comes as a host copy; the store keeps its bytes either way.
#include "server/hbm_transport.h"

#include <doctest/doctest.h>

#include <cstring>

#include "gpu/backend.h"
#include "storage/entry_format.h"
#include "storage/hbm_tier.h"
#include "storage/host_tier.h"
#include "storage/synthetic_entry.h"
#include "tests/support/check_ok.h"

namespace hypic::server {
namespace {

std::shared_ptr<const SegmentEntry> Entry(uint64_t seed) {
  auto e = storage::MakeSyntheticEntry({seed, "tenant", 64 << 10, 40});
  REQUIRE_OK(e);
  return *e;
}

// Same tensors (kind, dtype, shape, bytes) at other addresses than `original`'s.
void CheckCopyOf(const SegmentEntry& got, const SegmentEntry& original) {
  CHECK(got.key() == original.key());
  REQUIRE(got.tensors().size() == original.tensors().size());
  for (const EntryTensor& t : original.tensors()) {
    const EntryTensor* u = got.Find(t.layer, t.kind);
    REQUIRE(u != nullptr);
    CHECK(u->view.dtype() == t.view.dtype());
    CHECK(u->view.shape() == t.view.shape());
    CHECK(u->view.data() != t.view.data());
    CHECK(std::memcmp(u->view.data(), t.view.data(), t.view.NumBytes()) == 0);
  }
}

TEST_CASE("HbmTransport delivers the store's HBM copy in place, else a host copy") {
  const uint64_t entry_bytes = (*storage::InfoOf(*Entry(1))).bytes;
  auto hbm = storage::HbmTier::Create(gpu::CpuBackend(), 0, 2 * entry_bytes);
  REQUIRE_OK(hbm);
  storage::TierManagerOptions o;
  o.placement = storage::TierKind::kHbm;
  auto store = storage::TierManager::Create(
      o, std::move(*hbm), std::make_unique<storage::HostTier>(8 * entry_bytes), nullptr);
  REQUIRE_OK(store);
  HbmTransport transport(**store, 0);

  auto stored = Entry(1);
  auto bytes = storage::Serialize(*stored);
  REQUIRE_OK(bytes);
  REQUIRE_OK((*store)->Put(*bytes));
  auto delivered = transport.Deliver(stored, 0);
  REQUIRE_OK(delivered);
  CheckCopyOf(**delivered, *stored);
  // The views are the HBM tier's copy: the same addresses as a device read of the store.
  auto handle = (*store)->Get(stored->key(), storage::Access::kDevice);
  REQUIRE_OK(handle);
  REQUIRE((*handle)->device != nullptr);
  const auto* base = static_cast<const std::byte*>((*handle)->device->data());
  const auto* first = static_cast<const std::byte*>((*delivered)->tensors().front().view.data());
  CHECK(first >= base);
  CHECK(first < base + (*handle)->info.bytes);

  auto absent = Entry(2);  // never stored: a host copy
  auto copied = transport.Deliver(absent, 0);
  REQUIRE_OK(copied);
  CheckCopyOf(**copied, *absent);
  CHECK(transport.Deliver(nullptr, 0).status().code() == StatusCode::kInternal);

  HbmTransport other_device(**store, 1);  // HBM copies on device 0 are not device 1's
  auto elsewhere = other_device.Deliver(stored, 0);
  REQUIRE_OK(elsewhere);
  CheckCopyOf(**elsewhere, *stored);
  const auto* at = static_cast<const std::byte*>((*elsewhere)->tensors().front().view.data());
  CHECK((at < base || at >= base + (*handle)->info.bytes));
}

}  // namespace
}  // namespace hypic::server
