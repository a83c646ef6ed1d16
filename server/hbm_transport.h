// HbmTransport: how a computed entry reaches a combine pass on a CUDA device whose store has an
// HBM tier there. The miss scheduler's store callback has just put the entry (new entries are
// placed in HBM first), so Deliver reads it back where it lies: TierManager::Get with
// Access::kDevice, then ParseHandle, which views the tensors in that device's memory. The
// combine then reads memory the store already holds, with no second upload of the entry. An
// entry the HBM tier does not hold (the store refused it, every entry there is pinned) is
// delivered as HostTransport would: a host copy, uploaded by the pass.
//
// Delivered device entries are for passes on `device` only; host code that needs an entry's
// bytes (a PREFILL returning entries) reads them from the store. Thread-safe: Deliver runs on
// every worker thread at once (the store is thread-safe).
#pragma once

#include "gpu/runtime/transport.h"
#include "storage/tier_manager.h"

namespace hypic::server {

class HbmTransport final : public runtime::Transport {
 public:
  // REQUIRES: `store` outlives the transport.
  HbmTransport(storage::TierManager& store, int device) : store_(store), device_(device) {}

  Result<runtime::EntryPtr> Deliver(const runtime::EntryPtr& entry, int from) override;

 private:
  storage::TierManager& store_;
  const int device_;
};

}  // namespace hypic::server
