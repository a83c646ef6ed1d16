// A synthetic entry (storage/synthetic_entry.h) serialized for PUT, for the e2e tests that
// store entries in a running hypicd. Header-only; each call builds its own value.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/hash.h"
#include "core/host_buffer.h"
#include "storage/entry_format.h"
#include "storage/synthetic_entry.h"
#include "tests/support/check_ok.h"

namespace hypic::e2e {

struct Entry {
  Hash128 key;
  std::shared_ptr<const HostBuffer> bytes;
};

inline Entry MakeEntry(uint64_t seed, uint64_t bytes, const std::string& ns = "default") {
  storage::SyntheticSpec spec;
  spec.seed = seed;
  spec.target_bytes = bytes;
  spec.name_space = ns;
  auto entry = storage::MakeSyntheticEntry(spec);
  REQUIRE_OK(entry);
  auto serialized = storage::Serialize(**entry);
  REQUIRE_OK(serialized);
  return {(*entry)->key().hash(), *serialized};
}

}  // namespace hypic::e2e
