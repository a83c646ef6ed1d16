#include "storage/rocks_tier.h"

#include <fmt/format.h>
#include <rocksdb/cache.h>
#include <rocksdb/rate_limiter.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/logging.h"

namespace hypic::storage {
namespace {

constexpr char kMetaPrefix = 'm';
constexpr char kDataPrefix = 'd';
constexpr size_t kRecordKeySize = 17;

std::string RecordKey(char prefix, const SegmentKey& key) {
  std::string s(kRecordKeySize, '\0');
  s[0] = prefix;
  key.hash().ToBytes(reinterpret_cast<std::byte*>(s.data() + 1));
  return s;
}

std::span<const std::byte> AsBytes(const rocksdb::Slice& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

rocksdb::Slice AsSlice(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  std::string msg = fmt::format("ssd tier {}: {}", what, s.ToString());
  if (s.IsNoSpace()) return NoSpace(std::move(msg));
  if (s.IsCorruption()) return Corruption(std::move(msg));
  if (s.IsNotFound()) return NotFound(std::move(msg));
  return IoError(std::move(msg));
}

const char* WalModeName(WalMode m) {
  switch (m) {
    case WalMode::kOff: return "off";
    case WalMode::kAsync: return "async";
    case WalMode::kSync: return "sync";
  }
  return "?";
}

// Moves a DB directory that will not open out of the way, next to it.
Result<std::string> Quarantine(const std::string& path) {
  namespace fs = std::filesystem;
  auto stamp = std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count();
  std::error_code ec;
  for (int i = 0; i < 1000; ++i) {
    std::string dst = fmt::format("{}.quarantine-{}-{}", path, stamp, i);
    if (fs::exists(dst, ec)) continue;
    fs::rename(path, dst, ec);
    if (ec) return IoError(fmt::format("cannot quarantine {}: {}", path, ec.message()));
    return dst;
  }
  return IoError("cannot find a free quarantine directory name for " + path);
}

}  // namespace

RocksTier::RocksTier(const RocksTierOptions& options) : options_(options) {}

RocksTier::~RocksTier() {
  std::unique_lock db_lock(db_mu_);
  if (db_ != nullptr) {
    rocksdb::Status s = db_->Close();
    if (!s.ok()) HYPIC_LOG_WARN("ssd tier: close: {}", s.ToString());
  }
}

Status RocksTier::OpenDb() {
  rocksdb::Options o;
  o.create_if_missing = true;
  o.paranoid_checks = true;  // refuse to run on a DB whose files fail their checks
  o.env = options_.env != nullptr ? options_.env : rocksdb::Env::Default();
  o.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;  // torn tail after kill
  o.compression = rocksdb::kNoCompression;  // the LSM holds only small header records
  o.enable_blob_files = true;
  o.min_blob_size = options_.min_blob_size;
  o.blob_file_size = 256ull << 20;
  o.blob_compression_type = rocksdb::kNoCompression;  // fp16/fp32 tensors do not compress
  o.enable_blob_garbage_collection = true;
  o.blob_garbage_collection_age_cutoff = 0.25;
  o.write_buffer_size = options_.write_buffer_size;
  o.max_write_buffer_number = 4;
  o.max_background_jobs = 2;
  o.max_open_files = 512;
  o.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  if (options_.rate_limit_bytes_per_sec > 0) {
    rate_limiter_.reset(
        rocksdb::NewGenericRateLimiter(static_cast<int64_t>(options_.rate_limit_bytes_per_sec)));
    o.rate_limiter = rate_limiter_;
  }
  rocksdb::BlockBasedTableOptions t;
  t.checksum = rocksdb::kXXH3;
  t.block_cache = rocksdb::NewLRUCache(8ull << 20);
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));

  HYPIC_LOG_INFO(
      "ssd tier: opening {} (capacity {} B; blob files for values >= {} B, blob GC on; "
      "compression none; block checksums xxh3; paranoid checks on; WAL {}; "
      "WAL recovery point-in-time; rate limit {} B/s; read checksums verified)",
      options_.path, options_.capacity, options_.min_blob_size, WalModeName(options_.wal),
      options_.rate_limit_bytes_per_sec);
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(o, options_.path, &raw);
  if (!s.ok()) return FromRocks(s, "open");
  db_.reset(raw);
  return Status::Ok();
}

Status RocksTier::RebuildIndex() {
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  ro.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  std::vector<std::string> bad;
  MutexLock lock(&mu_);
  index_.clear();
  usage_ = 0;
  for (it->Seek(rocksdb::Slice(&kMetaPrefix, 1)); it->Valid(); it->Next()) {
    rocksdb::Slice k = it->key();
    if (k.size() == 0 || k[0] != kMetaPrefix) break;
    Result<EntryInfo> info = ReadEntryInfo(AsBytes(it->value()));
    if (k.size() != kRecordKeySize || !info.ok() ||
        RecordKey(kMetaPrefix, info->key) != k.ToString()) {
      bad.push_back(k.ToString());
      continue;
    }
    usage_ += info->bytes;
    SegmentKey key = info->key;
    index_[key] = std::move(info).value();
  }
  if (!it->status().ok()) return FromRocks(it->status(), "index scan");
  if (!bad.empty()) {
    checksum_failures_.fetch_add(bad.size());
    HYPIC_LOG_WARN("ssd tier: {} index records failed their checks and were dropped", bad.size());
    rocksdb::WriteBatch batch;
    for (const std::string& k : bad) {
      (void)batch.Delete(k);
      std::string d = k;
      d[0] = kDataPrefix;
      (void)batch.Delete(d);
    }
    (void)db_->Write(rocksdb::WriteOptions(), &batch);
  }
  return Status::Ok();
}

Result<std::unique_ptr<RocksTier>> RocksTier::Open(const RocksTierOptions& options) {
  std::unique_ptr<RocksTier> tier(new RocksTier(options));
  std::error_code ec;
  std::filesystem::create_directories(options.path, ec);
  if (ec) return IoError(fmt::format("ssd tier: cannot create {}: {}", options.path, ec.message()));
  Status st = tier->OpenDb();
  if (st.ok()) {
    st = tier->RebuildIndex();
    if (!st.ok()) tier->db_.reset();
  }
  if (!st.ok()) {
    // Another process holding the DB is not damage: never move a live DB away.
    if (st.message().find("lock") != std::string::npos && st.code() == StatusCode::kIoError) {
      return st;
    }
    HYPIC_ASSIGN_OR_RETURN(tier->quarantined_to_, Quarantine(options.path));
    HYPIC_LOG_CRITICAL(
        "ssd tier: the DB at {} will not open ({}); moved it to {} and starting EMPTY. "
        "Inspect or delete the quarantined copy.",
        options.path, st.ToString(), tier->quarantined_to_);
    tier->checksum_failures_.fetch_add(1);
    HYPIC_RETURN_IF_ERROR(tier->OpenDb());
    HYPIC_RETURN_IF_ERROR(tier->RebuildIndex());
  }
  TierCounters c = tier->Counters();
  HYPIC_LOG_INFO("ssd tier: {} entries, {} bytes indexed", c.entries, c.bytes);
  return tier;
}

Status RocksTier::OnWriteError(const rocksdb::Status& s, std::string_view what) {
  io_errors_.fetch_add(1);
  {
    MutexLock lock(&mu_);
    last_error_ = std::chrono::steady_clock::now();
  }
  if (!degraded_.exchange(true)) {
    HYPIC_LOG_ERROR("ssd tier: {} failed ({}); degraded, retrying in {} ms", what, s.ToString(),
                    options_.retry_interval.count());
  }
  return FromRocks(s, what);
}

Status RocksTier::CheckWritable() {
  if (!degraded_.load()) return Status::Ok();
  {
    MutexLock lock(&mu_);
    auto now = std::chrono::steady_clock::now();
    if (now - last_error_ < options_.retry_interval) {
      return IoError("ssd tier degraded: writes refused until the next retry");
    }
    last_error_ = now;
  }
  rocksdb::Status s;
  {
    std::shared_lock db_lock(db_mu_);
    s = db_ != nullptr ? db_->Resume() : rocksdb::Status::IOError("not open");
  }
  if (!s.ok()) {
    HYPIC_LOG_WARN("ssd tier: resume failed ({}); reopening the DB", s.ToString());
    Status reopened = Reopen();
    if (!reopened.ok()) {
      (void)OnWriteError(rocksdb::Status::IOError(reopened.message()), "reopen");
      return reopened;
    }
  }
  degraded_.store(false);
  HYPIC_LOG_WARN("ssd tier: recovered; writes accepted again");
  return Status::Ok();
}

Status RocksTier::Reopen() {
  std::unique_lock db_lock(db_mu_);
  if (db_ != nullptr) {
    (void)db_->Close();  // the error that brought us here may repeat; the reopen decides
    db_.reset();
  }
  HYPIC_RETURN_IF_ERROR(OpenDb());
  Status st = RebuildIndex();
  if (!st.ok()) db_.reset();
  return st;
}

Status RocksTier::Insert(const TierEntry& entry) {
  const EntryInfo& info = entry.info;
  const uint64_t n = info.bytes;
  if (entry.host.size() != n) return BadRequest("ssd tier: insert needs the entry's host bytes");
  HYPIC_RETURN_IF_ERROR(CheckWritable());
  HYPIC_ASSIGN_OR_RETURN(size_t prefix, EntryPrefixSize(entry.host));
  // A replacement (the key already stored) stays indexed while its new record is written: the
  // old record serves reads meanwhile. Dropping it from the index first made a concurrent
  // Lookup of a stored, indexed entry miss ("no entry"), and TierManager then dropped the
  // entry (hypic-stress: "pinned key missed"). Only the bytes beyond the old record's are
  // reserved, so concurrent inserts cannot overshoot the capacity together.
  uint64_t reserved = 0;
  {
    MutexLock lock(&mu_);
    auto it = index_.find(info.key);
    const uint64_t replaced = it != index_.end() ? it->second.bytes : 0;
    reserved = n > replaced ? n - replaced : 0;
    if (n > options_.capacity || usage_ > options_.capacity - reserved) {
      return NoSpace(fmt::format("ssd tier: {} bytes do not fit ({} of {} used)", n, usage_,
                                 options_.capacity));
    }
    usage_ += reserved;
  }
  rocksdb::WriteBatch batch;
  rocksdb::Status s =
      batch.Put(RecordKey(kMetaPrefix, info.key), AsSlice(entry.host.first(prefix)));
  if (s.ok()) s = batch.Put(RecordKey(kDataPrefix, info.key), AsSlice(entry.host));
  rocksdb::WriteOptions wo;
  wo.disableWAL = options_.wal == WalMode::kOff;
  wo.sync = options_.wal == WalMode::kSync;
  if (s.ok()) {
    std::shared_lock db_lock(db_mu_);
    s = db_ != nullptr ? db_->Write(wo, &batch) : rocksdb::Status::IOError("not open");
  }
  if (!s.ok()) {
    {
      MutexLock lock(&mu_);
      usage_ -= reserved;
    }
    return OnWriteError(s, "insert");
  }
  MutexLock lock(&mu_);
  // Usage counts the record written, n, once: in place of whatever record of the key is
  // indexed now (the one replaced, or a concurrent insert's), which it overwrote.
  auto [it, inserted] = index_.try_emplace(info.key, info);
  usage_ += n - reserved;
  if (!inserted) {
    usage_ -= it->second.bytes;
    it->second = info;
  }
  inserts_.fetch_add(1);
  return Status::Ok();
}

void RocksTier::DropCorrupt(const SegmentKey& key, const Status& why) {
  checksum_failures_.fetch_add(1);
  HYPIC_LOG_WARN("ssd tier: entry {} failed verification ({}); dropped", key.ToHex(),
                 why.ToString());
  {
    MutexLock lock(&mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      usage_ -= it->second.bytes;
      index_.erase(it);
    }
  }
  rocksdb::WriteBatch batch;
  (void)batch.Delete(RecordKey(kMetaPrefix, key));
  (void)batch.Delete(RecordKey(kDataPrefix, key));
  rocksdb::Status s;
  {
    std::shared_lock db_lock(db_mu_);
    s = db_ != nullptr ? db_->Write(rocksdb::WriteOptions(), &batch)
                       : rocksdb::Status::IOError("not open");
  }
  if (!s.ok()) (void)OnWriteError(s, "delete of a corrupt entry");
}

Result<EntryHandle> RocksTier::Lookup(const SegmentKey& key) {
  {
    MutexLock lock(&mu_);
    if (index_.count(key) == 0) return NotFound("ssd tier: no entry");
  }
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  ro.fill_cache = false;
  HostBuffer buf;
  rocksdb::Status s;
  {
    std::shared_lock db_lock(db_mu_);
    rocksdb::PinnableSlice value;
    s = db_ != nullptr
            ? db_->Get(ro, db_->DefaultColumnFamily(), RecordKey(kDataPrefix, key), &value)
            : rocksdb::Status::IOError("not open");
    if (s.ok()) {
      Result<HostBuffer> copy = HostBuffer::CopyOf(AsBytes(value));
      if (!copy.ok()) return copy.status();
      buf = std::move(copy).value();
    }
  }
  if (s.IsCorruption()) {
    Status why = FromRocks(s, "read");
    DropCorrupt(key, why);
    return BadChecksum(why.message());
  }
  if (s.IsNotFound()) {
    MutexLock lock(&mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      usage_ -= it->second.bytes;
      index_.erase(it);
    }
    return NotFound("ssd tier: entry vanished");
  }
  if (!s.ok()) {
    io_errors_.fetch_add(1);
    return FromRocks(s, "read");
  }
  Status st = Verify(buf.span());
  if (st.ok()) {
    Result<EntryInfo> info = ReadEntryInfo(buf.span());
    if (!info.ok()) {
      st = info.status();
    } else if (info->key != key) {
      st = BadChecksum("stored under another key");
    }
  }
  if (!st.ok()) {
    DropCorrupt(key, st);
    return BadChecksum("ssd tier: " + st.message());
  }
  return MakeHostHandle(std::make_shared<const HostBuffer>(std::move(buf)));
}

Status RocksTier::Remove(const SegmentKey& key) {
  {
    MutexLock lock(&mu_);
    auto it = index_.find(key);
    if (it == index_.end()) return NotFound("ssd tier: no entry");
    usage_ -= it->second.bytes;
    index_.erase(it);
  }
  rocksdb::WriteBatch batch;
  rocksdb::Status s = batch.Delete(RecordKey(kMetaPrefix, key));
  if (s.ok()) s = batch.Delete(RecordKey(kDataPrefix, key));
  rocksdb::WriteOptions wo;
  wo.disableWAL = options_.wal == WalMode::kOff;
  if (s.ok()) {
    std::shared_lock db_lock(db_mu_);
    s = db_ != nullptr ? db_->Write(wo, &batch) : rocksdb::Status::IOError("not open");
  }
  // A lost delete leaves a valid entry behind, which the next open indexes again: no harm.
  if (!s.ok()) return OnWriteError(s, "remove");
  return Status::Ok();
}

bool RocksTier::Contains(const SegmentKey& key) const {
  MutexLock lock(&mu_);
  return index_.count(key) != 0;
}

uint64_t RocksTier::Usage() const {
  MutexLock lock(&mu_);
  return usage_;
}

TierCounters RocksTier::Counters() const {
  TierCounters c;
  {
    MutexLock lock(&mu_);
    c.entries = index_.size();
    c.bytes = usage_;
  }
  c.capacity = options_.capacity;
  c.inserts = inserts_.load();
  c.checksum_failures = checksum_failures_.load();
  c.io_errors = io_errors_.load();
  c.degraded = degraded_.load();
  return c;
}

std::vector<EntryInfo> RocksTier::List() const {
  MutexLock lock(&mu_);
  std::vector<EntryInfo> out;
  out.reserve(index_.size());
  for (const auto& [key, info] : index_) out.push_back(info);
  return out;
}

Status RocksTier::Flush() {
  rocksdb::FlushOptions fo;
  fo.wait = true;
  rocksdb::Status s;
  {
    std::shared_lock db_lock(db_mu_);
    s = db_ != nullptr ? db_->Flush(fo) : rocksdb::Status::IOError("not open");
  }
  if (!s.ok()) return OnWriteError(s, "flush");
  return Status::Ok();
}

}  // namespace hypic::storage
