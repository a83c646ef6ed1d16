// Helpers shared by the storage tests: serialized synthetic entries and a scratch directory
// removed at scope exit. Not thread-safe.
#pragma once

#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>

#include "storage/entry_format.h"
#include "storage/synthetic_entry.h"
#include "tests/support/check_ok.h"

namespace hypic::storage::testing {

inline std::shared_ptr<const HostBuffer> EntryBytes(uint64_t seed, uint64_t size = 16 << 10,
                                                    const std::string& ns = "t") {
  auto e = MakeSyntheticEntry({seed, ns, size, 32});
  REQUIRE_OK(e);
  auto b = Serialize(**e);
  REQUIRE_OK(b);
  return *b;
}

inline SegmentKey KeyOf(uint64_t seed, uint64_t size = 16 << 10, const std::string& ns = "t") {
  return SyntheticKey({seed, ns, size, 32});
}

// True when `h` holds exactly the bytes of the synthetic entry of `seed`.
inline bool SameBytes(const EntryHandle& h, const HostBuffer& expected) {
  return h != nullptr && h->host.size() == expected.size() &&
         std::memcmp(h->host.data(), expected.data(), expected.size()) == 0;
}

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("hypic-storage-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string Sub(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace hypic::storage::testing
