// FaultFs: a fault-injecting RocksDB FileSystem for the SSD tier's tests and the stress tool,
// after RocksDB's FaultInjectionTestFS. It forwards to the default file system and can
//   - fail every write (new files, appends, syncs) with an I/O error or "no space";
//   - simulate a power loss: after Deactivate() writes, renames and deletes are dropped
//     silently, and DropUnsyncedData() truncates every file written through it back to its last
//     synced size (never-synced files to zero).
// Thread-safe (RocksDB's background threads write through it).
#pragma once

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>

#include "core/status.h"
#include "core/thread_annotations.h"

namespace hypic::storage::testing {

enum class WriteFault : uint8_t { kNone = 0, kIoError = 1, kNoSpace = 2 };

// Use through an Env: auto fs = std::make_shared<FaultFs>(); auto env = NewCompositeEnv(fs).
class FaultFs : public rocksdb::FileSystemWrapper {
 public:
  FaultFs();
  const char* Name() const override { return "HypicFaultFs"; }

  void SetWriteFault(WriteFault f) { fault_.store(f); }
  // From now on every write, rename and delete is dropped (the "power" is off).
  void Deactivate() { active_.store(false); }
  void Activate() { active_.store(true); }
  // REQUIRES: the DB is closed. Truncates files to their synced sizes.
  Status DropUnsyncedData();
  uint64_t injected() const { return injected_.load(); }

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus RenameFile(const std::string& s, const std::string& t,
                               const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus DeleteFile(const std::string& f, const rocksdb::IOOptions& o,
                               rocksdb::IODebugContext* dbg) override;

  // Called by the wrapped files.
  rocksdb::IOStatus Fault();
  bool active() const { return active_.load(); }
  void OnAppend(const std::string& f, uint64_t n);
  void OnSync(const std::string& f);

 private:
  struct FileState {
    uint64_t size = 0;
    uint64_t synced = 0;
  };
  rocksdb::IOStatus Wrap(const std::string& f, std::unique_ptr<rocksdb::FSWritableFile>* r,
                         bool fresh);

  std::atomic<WriteFault> fault_{WriteFault::kNone};
  std::atomic<bool> active_{true};
  std::atomic<uint64_t> injected_{0};
  Mutex mu_;
  std::map<std::string, FileState> files_ GUARDED_BY(mu_);
};

}  // namespace hypic::storage::testing
