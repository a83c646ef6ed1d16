#include "server/hbm_transport.h"

namespace hypic::server {

Result<runtime::EntryPtr> HbmTransport::Deliver(const runtime::EntryPtr& entry, int /*from*/) {
  if (entry == nullptr) return Internal("transport: null entry");
  auto handle = store_.Get(entry->key(), storage::Access::kDevice);
  if (handle.ok() && (*handle)->device != nullptr && (*handle)->device->device() == device_) {
    auto in_place = storage::ParseHandle(*handle);
    if (in_place.ok()) return runtime::EntryPtr(std::move(in_place).value());
  }
  return runtime::CopyEntryToHost(*entry);
}

}  // namespace hypic::server
