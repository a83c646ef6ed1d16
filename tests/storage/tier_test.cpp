// The memory tiers: exact usage accounting, the hard capacity bound, handles that keep bytes
// alive after removal, pinned copies, the HBM tier through the backend interface (CPU backend
// here; the CUDA half skips without a device), and the forwarding TierWrapper.
#include <doctest/doctest.h>

#include <cstring>

#include "gpu/backend.h"
#include "storage/hbm_tier.h"
#include "storage/host_tier.h"
#include "tests/storage/storage_test_util.h"

namespace hypic::storage {
namespace {

using testing::EntryBytes;
using testing::SameBytes;

EntryHandle Handle(const std::shared_ptr<const HostBuffer>& b) {
  auto h = MakeHostHandle(b);
  REQUIRE_OK(h);
  return *h;
}

TEST_CASE("host tier: usage is exact and bounded; handles outlive removal") {
  auto a = EntryBytes(1), b = EntryBytes(2), c = EntryBytes(3);
  const uint64_t n = a->size();
  HostTier tier(2 * n + n / 2);
  CHECK_OK(tier.Insert(*Handle(a)));
  CHECK_OK(tier.Insert(*Handle(b)));
  CHECK(tier.Usage() == 2 * n);
  CHECK(tier.Insert(*Handle(c)).code() == StatusCode::kNoSpace);  // never over capacity
  CHECK(tier.Usage() == 2 * n);

  auto got = tier.Lookup(Handle(a)->info.key);
  REQUIRE_OK(got);
  CHECK(SameBytes(*got, *a));
  CHECK_OK(tier.Remove((*got)->info.key));
  CHECK(!tier.Contains((*got)->info.key));
  CHECK(tier.Lookup((*got)->info.key).status().code() == StatusCode::kNotFound);
  // The removed entry leaves the usage at once; the reader's handle still reads its bytes.
  CHECK(tier.Usage() == n);
  CHECK(SameBytes(*got, *a));
  CHECK_OK(tier.Insert(*Handle(c)));
  auto counters = tier.Counters();
  CHECK(counters.entries == 2);
  CHECK(counters.bytes == 2 * n);
  CHECK(counters.capacity == 2 * n + n / 2);
  CHECK(counters.inserts == 3);
  CHECK(tier.List().size() == 2);
}

TEST_CASE("host tier: replacing a key does not double-count it") {
  auto a = EntryBytes(4);
  HostTier tier(10 * a->size());
  CHECK_OK(tier.Insert(*Handle(a)));
  CHECK_OK(tier.Insert(*Handle(a)));
  CHECK(tier.Usage() == a->size());
  CHECK(tier.Counters().entries == 1);
}

TEST_CASE("host tier: with a pinning backend the bytes are copied out of the caller's buffer") {
  auto a = EntryBytes(5);
  HostTier tier(1 << 20, &gpu::CpuBackend());
  CHECK_OK(tier.Insert(*Handle(a)));
  auto got = tier.Lookup(Handle(a)->info.key);
  REQUIRE_OK(got);
  CHECK(SameBytes(*got, *a));
  CHECK((*got)->host.data() != a->data());  // a copy in backend host memory
  CHECK_OK(Verify((*got)->host));
}

void ExerciseDeviceTier(gpu::Backend& backend) {
  auto a = EntryBytes(6), b = EntryBytes(7);
  auto tier = HbmTier::Create(backend, 0, a->size() + b->size());
  REQUIRE_OK(tier);
  CHECK_OK((*tier)->Insert(*Handle(a)));
  CHECK_OK((*tier)->Insert(*Handle(b)));
  CHECK((*tier)->Insert(*Handle(EntryBytes(8))).code() == StatusCode::kNoSpace);
  auto got = (*tier)->Lookup(Handle(a)->info.key);
  REQUIRE_OK(got);
  CHECK((*got)->host.empty());
  REQUIRE((*got)->device != nullptr);
  auto back = CopyToHost(**got);
  REQUIRE_OK(back);
  REQUIRE((*back)->size() == a->size());
  CHECK(std::memcmp((*back)->data(), a->data(), a->size()) == 0);
  CHECK((*tier)->kind() == TierKind::kHbm);
  // The handle's tensors, viewed where they are in the tier's memory.
  auto in_place = ParseHandle(*got);
  REQUIRE_OK(in_place);
  auto original = Parse(a);
  REQUIRE_OK(original);
  CHECK((*in_place)->key() == (*original)->key());
  REQUIRE((*in_place)->tensors().size() == (*original)->tensors().size());
  const auto* device_base = static_cast<const std::byte*>((*got)->device->data());
  for (const EntryTensor& t : (*original)->tensors()) {
    const EntryTensor* u = (*in_place)->Find(t.layer, t.kind);
    REQUIRE(u != nullptr);
    CHECK(u->view.memory() == (*got)->device->memory());
    const auto at = static_cast<const std::byte*>(u->view.data()) - device_base;
    CHECK(at == static_cast<const std::byte*>(t.view.data()) - a->data());
    if (u->view.memory() == MemoryKind::kHost) {  // the CPU backend's "device": readable here
      CHECK(std::memcmp(u->view.data(), t.view.data(), t.view.NumBytes()) == 0);
    }
  }
  auto prefix = EntryDataOffset(a->span());
  REQUIRE_OK(prefix);
  CHECK((*got)->device_prefix.size() == *prefix);
}

TEST_CASE("hbm tier logic on the CPU backend") { ExerciseDeviceTier(gpu::CpuBackend()); }

TEST_CASE("hbm tier on a CUDA device") {
  gpu::Backend* cuda = gpu::FindBackend(gpu::BackendKind::kCuda);
  if (cuda == nullptr) {
    MESSAGE("skipped: no CUDA device");
    return;
  }
  ExerciseDeviceTier(*cuda);
  HostTier pinned(1 << 20, cuda);
  auto a = EntryBytes(9);
  CHECK_OK(pinned.Insert(*Handle(a)));
  auto got = pinned.Lookup(Handle(a)->info.key);
  REQUIRE_OK(got);
  CHECK(SameBytes(*got, *a));
}

TEST_CASE("CopyToHost refuses bytes that fail verification") {
  auto a = EntryBytes(10);
  auto copy = HostBuffer::CopyOf(a->span());
  REQUIRE_OK(copy);
  copy->data()[copy->size() / 2] ^= std::byte{4};
  auto bad = std::make_shared<const HostBuffer>(std::move(*copy));
  auto h = MakeHostHandle(bad);  // the header is intact, so the handle is made
  REQUIRE_OK(h);
  CHECK(CopyToHost(**h).status().code() == StatusCode::kBadChecksum);
}

// A decorator overrides one call; everything else is forwarded.
class CountingLookups : public TierWrapper {
 public:
  using TierWrapper::TierWrapper;
  Result<EntryHandle> Lookup(const SegmentKey& key) override {
    ++lookups;
    return TierWrapper::Lookup(key);
  }
  int lookups = 0;
};

TEST_CASE("TierWrapper forwards every call") {
  auto a = EntryBytes(11);
  CountingLookups w(std::make_unique<HostTier>(1 << 20));
  CHECK(w.kind() == TierKind::kHost);
  CHECK_OK(w.Insert(*Handle(a)));
  SegmentKey k = Handle(a)->info.key;
  CHECK(w.Contains(k));
  CHECK_OK(w.Lookup(k));
  CHECK(w.lookups == 1);
  CHECK(w.Usage() == a->size());
  CHECK(w.Capacity() == (1 << 20));
  CHECK(w.Counters().entries == 1);
  CHECK(w.List().size() == 1);
  CHECK_OK(w.Flush());
  CHECK_OK(w.Remove(k));
  CHECK(!w.target().Contains(k));
}

}  // namespace
}  // namespace hypic::storage
