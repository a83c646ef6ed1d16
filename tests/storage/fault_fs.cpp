#include "tests/storage/fault_fs.h"

#include <filesystem>
#include <system_error>

namespace hypic::storage::testing {
namespace {

using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;

class FaultFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  FaultFile(std::unique_ptr<rocksdb::FSWritableFile> t, FaultFs* fs, std::string name)
      : FSWritableFileOwnerWrapper(std::move(t)), fs_(fs), name_(std::move(name)) {}

  IOStatus Append(const Slice& data, const IOOptions& o, IODebugContext* dbg) override {
    IOStatus s = fs_->Fault();
    if (!s.ok()) return s;
    if (!fs_->active()) return IOStatus::OK();  // dropped: the power is off
    s = FSWritableFileOwnerWrapper::Append(data, o, dbg);
    if (s.ok()) fs_->OnAppend(name_, data.size());
    return s;
  }
  IOStatus Append(const Slice& data, const IOOptions& o, const rocksdb::DataVerificationInfo&,
                  IODebugContext* dbg) override {
    return Append(data, o, dbg);
  }
  IOStatus PositionedAppend(const Slice&, uint64_t, const IOOptions&, IODebugContext*) override {
    return IOStatus::NotSupported("FaultFs: positioned appends");
  }
  IOStatus PositionedAppend(const Slice&, uint64_t, const IOOptions&,
                            const rocksdb::DataVerificationInfo&, IODebugContext*) override {
    return IOStatus::NotSupported("FaultFs: positioned appends");
  }
  IOStatus Sync(const IOOptions& o, IODebugContext* dbg) override { return DoSync(o, dbg, false); }
  IOStatus Fsync(const IOOptions& o, IODebugContext* dbg) override { return DoSync(o, dbg, true); }
  IOStatus RangeSync(uint64_t, uint64_t, const IOOptions&, IODebugContext*) override {
    return IOStatus::OK();  // not a durability point: only Sync/Fsync count as synced
  }
  bool use_direct_io() const override { return false; }

 private:
  IOStatus DoSync(const IOOptions& o, IODebugContext* dbg, bool full) {
    IOStatus s = fs_->Fault();
    if (!s.ok()) return s;
    if (!fs_->active()) return IOStatus::OK();
    s = full ? FSWritableFileOwnerWrapper::Fsync(o, dbg) : FSWritableFileOwnerWrapper::Sync(o, dbg);
    if (s.ok()) fs_->OnSync(name_);
    return s;
  }

  FaultFs* fs_;
  std::string name_;
};

}  // namespace

FaultFs::FaultFs() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}

IOStatus FaultFs::Fault() {
  switch (fault_.load()) {
    case WriteFault::kNone: return IOStatus::OK();
    case WriteFault::kIoError: injected_.fetch_add(1); return IOStatus::IOError("injected fault");
    case WriteFault::kNoSpace: injected_.fetch_add(1); return IOStatus::NoSpace("injected fault");
  }
  return IOStatus::OK();
}

void FaultFs::OnAppend(const std::string& f, uint64_t n) {
  MutexLock lock(&mu_);
  files_[f].size += n;
}

void FaultFs::OnSync(const std::string& f) {
  MutexLock lock(&mu_);
  FileState& st = files_[f];
  st.synced = st.size;
}

IOStatus FaultFs::Wrap(const std::string& f, std::unique_ptr<rocksdb::FSWritableFile>* r,
                       bool fresh) {
  {
    MutexLock lock(&mu_);
    FileState& st = files_[f];
    if (fresh) st = FileState{};
  }
  *r = std::make_unique<FaultFile>(std::move(*r), this, f);
  return IOStatus::OK();
}

IOStatus FaultFs::NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                  std::unique_ptr<rocksdb::FSWritableFile>* r,
                                  IODebugContext* dbg) {
  IOStatus s = Fault();
  if (!s.ok()) return s;
  if (!active()) {  // create a scratch file that the drop will empty again
    s = target()->NewWritableFile(f + ".dropped", o, r, dbg);
    if (!s.ok()) return s;
    return Wrap(f + ".dropped", r, true);
  }
  s = target()->NewWritableFile(f, o, r, dbg);
  if (!s.ok()) return s;
  return Wrap(f, r, true);
}

IOStatus FaultFs::ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                     std::unique_ptr<rocksdb::FSWritableFile>* r,
                                     IODebugContext* dbg) {
  IOStatus s = Fault();
  if (!s.ok()) return s;
  s = target()->ReopenWritableFile(f, o, r, dbg);
  if (!s.ok()) return s;
  std::error_code ec;
  uint64_t existing = std::filesystem::file_size(f, ec);
  {
    MutexLock lock(&mu_);
    FileState& st = files_[f];
    if (st.size == 0 && !ec) st = FileState{existing, existing};
  }
  return Wrap(f, r, false);
}

IOStatus FaultFs::RenameFile(const std::string& s, const std::string& t, const IOOptions& o,
                             IODebugContext* dbg) {
  IOStatus st = Fault();
  if (!st.ok()) return st;
  if (!active()) return IOStatus::OK();
  st = target()->RenameFile(s, t, o, dbg);
  if (st.ok()) {
    MutexLock lock(&mu_);
    auto it = files_.find(s);
    if (it != files_.end()) {
      files_[t] = it->second;
      files_.erase(s);
    }
  }
  return st;
}

IOStatus FaultFs::DeleteFile(const std::string& f, const IOOptions& o, IODebugContext* dbg) {
  if (!active()) return IOStatus::OK();
  IOStatus s = target()->DeleteFile(f, o, dbg);
  if (s.ok()) {
    MutexLock lock(&mu_);
    files_.erase(f);
  }
  return s;
}

Status FaultFs::DropUnsyncedData() {
  MutexLock lock(&mu_);
  for (const auto& [name, st] : files_) {
    std::error_code ec;
    if (!std::filesystem::exists(name, ec)) continue;
    if (name.ends_with(".dropped")) {  // written while the power was off: never existed
      std::filesystem::remove(name, ec);
      continue;
    }
    std::filesystem::resize_file(name, st.synced, ec);
    if (ec) return IoError("truncate " + name + ": " + ec.message());
  }
  files_.clear();
  return Status::Ok();
}

}  // namespace hypic::storage::testing
