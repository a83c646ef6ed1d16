#include "storage/redis_tier.h"

#include <fmt/format.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "core/logging.h"
#include "storage/entry_format.h"
#include "storage/redis_manifest.h"

namespace hypic::storage {

namespace {

std::string_view ReplyText(const redisReply& r) { return {r.str, r.len}; }

std::span<const std::byte> ReplyBytes(const redisReply& r) {
  return {reinterpret_cast<const std::byte*>(r.str), r.len};
}

RedisClientOptions ClientOptions(const RedisTierOptions& o) {
  RedisClientOptions c;
  c.address = o.address;
  c.connect_timeout = o.connect_timeout;
  c.command_timeout = o.command_timeout;
  c.backoff_min = o.backoff_min;
  c.backoff_max = o.backoff_max;
  c.max_idle_connections = o.max_idle_connections;
  // The largest reply the tier reads is a chunk or a manifest (one checksum per chunk of the
  // largest entry); the slack is for CLUSTER SLOTS, whatever the chunk size.
  constexpr uint64_t kSlack = uint64_t{4} << 20;
  const uint64_t manifest =
      kRedisManifestFixedBytes +
      sizeof(uint64_t) * ((kMaxEntryBytes + o.chunk_bytes - 1) / o.chunk_bytes + 1);
  c.max_reply_bytes = std::max(o.chunk_bytes, manifest) + kSlack;
  return c;
}

}  // namespace

Result<std::unique_ptr<RedisTier>> RedisTier::Create(const RedisTierOptions& options) {
  if (options.chunk_bytes < kMinRedisChunkBytes || options.chunk_bytes > kMaxRedisChunkBytes) {
    return BadRequest(fmt::format("remote chunk size {} is outside [{}, {}]", options.chunk_bytes,
                                  kMinRedisChunkBytes, kMaxRedisChunkBytes));
  }
  if (options.address.nodes.empty()) return BadRequest("remote store: no host");
  for (const RedisEndpoint& e : options.address.nodes) {
    if (e.host.empty()) return BadRequest("remote store: a node without a host");
  }
  std::unique_ptr<RedisTier> t(new RedisTier(options));
  t->writer_ = std::thread([raw = t.get()] { raw->WriterLoop(); });
  HYPIC_LOG_INFO(
      "remote tier: {}, key prefix '{}', chunks of {} bytes, connect timeout {} ms, command "
      "timeout {} ms, backoff {}-{} ms, write queue {} bytes",
      t->client_.Describe(), options.prefix, options.chunk_bytes, options.connect_timeout.count(),
      options.command_timeout.count(), options.backoff_min.count(), options.backoff_max.count(),
      options.max_queued_bytes);
  return t;
}

RedisTier::RedisTier(const RedisTierOptions& options)
    : options_(options), client_(ClientOptions(options)), write_ids_(std::random_device{}()) {}

RedisTier::~RedisTier() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  writer_cv_.notify_one();
  writer_.join();  // the loop empties the queue first
}

void RedisTier::DropManifest(const std::string& manifest_key) {
  // Best effort: a failure here is counted by the client, and the next reader drops it again.
  (void)client_.Run(
      manifest_key, 1,
      [&](size_t) {
        return RedisArgs{"DEL", manifest_key};
      },
      [](size_t, const redisReply&) {});
}

Result<std::shared_ptr<const HostBuffer>> RedisTier::Get(const SegmentKey& key) {
  ++misses_;  // until the entry is complete and checked
  const std::string mkey = RedisManifestKey(options_.prefix, key);
  std::optional<Result<RedisManifest>> parsed;  // unset: no manifest
  Status reply_error;
  HYPIC_RETURN_IF_ERROR(client_.Run(
      mkey, 1,
      [&](size_t) {
        return RedisArgs{"GET", mkey};
      },
      [&](size_t, const redisReply& r) {
        if (r.type == REDIS_REPLY_STRING) {
          parsed = ParseRedisManifest(ReplyBytes(r));
        } else if (r.type != REDIS_REPLY_NIL) {
          reply_error = IoError(fmt::format("redis GET {}: {}", mkey, ReplyText(r)));
        }
      }));
  if (!reply_error.ok()) {
    ++reply_errors_;
    return reply_error;
  }
  if (!parsed.has_value()) return NotFound("remote tier: no entry " + key.ToHex());
  if (parsed->ok() && (*parsed)->key != key) *parsed = Corruption("the manifest names another key");
  if (!parsed->ok()) {
    ++checksum_failures_;
    HYPIC_LOG_WARN("remote tier: manifest {} is bad ({}); dropped, a miss", mkey,
                   parsed->status().message());
    DropManifest(mkey);
    return NotFound("remote tier: bad manifest: " + parsed->status().message());
  }
  const RedisManifest& m = **parsed;
  HYPIC_ASSIGN_OR_RETURN(HostBuffer buf, HostBuffer::Allocate(m.entry_bytes));
  bool missing = false;
  Status bad;
  std::vector<std::string> chunk_keys(m.chunk_count());
  HYPIC_RETURN_IF_ERROR(client_.Run(
      mkey, m.chunk_count(),
      [&](size_t i) {
        chunk_keys[i] = RedisChunkKey(options_.prefix, key, m.write_id, i);
        return RedisArgs{"GET", chunk_keys[i]};
      },
      [&](size_t i, const redisReply& chunk) {
        if (chunk.type == REDIS_REPLY_NIL) {
          missing = true;
        } else if (chunk.type != REDIS_REPLY_STRING) {
          reply_error = IoError(fmt::format("redis GET chunk: {}", ReplyText(chunk)));
        } else if (Status st = CheckRedisChunk(m, i, ReplyBytes(chunk)); !st.ok()) {
          bad = st;
        } else {
          std::memcpy(buf.data() + m.ChunkOffset(i), chunk.str, chunk.len);
        }
      }));
  if (!reply_error.ok()) {
    ++reply_errors_;
    return reply_error;
  }
  if (bad.ok() && !missing) {
    bad = Verify(buf.span());
    if (bad.ok()) {
      Result<EntryInfo> info = ReadEntryInfo(buf.span());
      if (!info.ok()) {
        bad = info.status();
      } else if (info->key != key) {
        bad = BadChecksum("the entry header names another key");
      }
    }
  }
  if (missing || !bad.ok()) {
    if (missing) {
      ++incomplete_;
    } else {
      ++checksum_failures_;
      HYPIC_LOG_WARN("remote tier: entry {} fails its checks ({}); dropped, a miss", key.ToHex(),
                     bad.message());
    }
    DropManifest(mkey);
    return NotFound(missing ? "remote tier: a chunk of " + key.ToHex() + " is gone"
                            : "remote tier: " + bad.message());
  }
  --misses_;
  ++hits_;
  bytes_read_ += m.entry_bytes;
  return std::make_shared<const HostBuffer>(std::move(buf));
}

void RedisTier::Write(EntryHandle entry) {
  if (entry == nullptr || entry->host.empty()) return;
  const uint64_t n = entry->host.size();
  {
    MutexLock lock(&mu_);
    if (!stopping_ && queued_bytes_ + n <= options_.max_queued_bytes) {
      queued_bytes_ += n;
      queue_.push_back(std::move(entry));
      writer_cv_.notify_one();
      return;
    }
  }
  HYPIC_LOG_DEBUG("remote tier: write of {} dropped (queue full)", entry->info.key.ToHex());
}

void RedisTier::WaitForWrites() {
  MutexLock lock(&mu_);
  while (!queue_.empty() || writer_busy_) drained_cv_.wait(mu_);
}

void RedisTier::WriterLoop() {
  for (;;) {
    EntryHandle entry;
    {
      MutexLock lock(&mu_);
      writer_busy_ = false;
      if (queue_.empty()) drained_cv_.notify_all();
      while (queue_.empty() && !stopping_) writer_cv_.wait(mu_);
      if (queue_.empty()) return;
      entry = std::move(queue_.front());
      queue_.pop_front();
      queued_bytes_ -= entry->host.size();
      writer_busy_ = true;
    }
    if (Status st = WriteEntry(*entry); !st.ok()) {
      HYPIC_LOG_DEBUG("remote tier: write of {} dropped: {}", entry->info.key.ToHex(),
                      st.ToString());
    }
  }
}

Status RedisTier::WriteEntry(const TierEntry& entry) {
  const SegmentKey& key = entry.info.key;
  const std::string mkey = RedisManifestKey(options_.prefix, key);
  bool exists = false;
  HYPIC_RETURN_IF_ERROR(client_.Run(
      mkey, 1,
      [&](size_t) {
        return RedisArgs{"EXISTS", mkey};
      },
      [&](size_t, const redisReply& r) {
        exists = r.type == REDIS_REPLY_INTEGER && r.integer == 1;
      }));
  if (exists) return Status::Ok();  // another daemon stored it: keys are content addresses
  const RedisManifest m = MakeRedisManifest(key, entry.host, options_.chunk_bytes, write_ids_());
  Status reply_error;
  auto on_reply = [&](size_t, const redisReply& r) {
    if (r.type == REDIS_REPLY_ERROR && reply_error.ok()) {
      reply_error = IoError(fmt::format("redis SET: {}", ReplyText(r)));
    }
  };
  std::vector<std::string> chunk_keys(m.chunk_count());
  HYPIC_RETURN_IF_ERROR(client_.Run(
      mkey, m.chunk_count(),
      [&](size_t i) {
        chunk_keys[i] = RedisChunkKey(options_.prefix, key, m.write_id, i);
        const auto* p = reinterpret_cast<const char*>(entry.host.data() + m.ChunkOffset(i));
        return RedisArgs{"SET", chunk_keys[i], std::string_view(p, m.ChunkLength(i))};
      },
      on_reply));
  if (reply_error.ok()) {
    const std::string manifest = EncodeRedisManifest(m);  // last: the entry is whole now
    HYPIC_RETURN_IF_ERROR(client_.Run(
        mkey, 1,
        [&](size_t) {
          return RedisArgs{"SET", mkey, manifest};
        },
        on_reply));
  }
  if (!reply_error.ok()) {
    ++reply_errors_;
    return reply_error;
  }
  ++inserts_;
  bytes_written_ += entry.host.size();
  return Status::Ok();
}

TierCounters RedisTier::Counters() const {
  const RedisClientCounters net = client_.Counters();
  TierCounters c;
  c.hits = hits_.load();
  c.misses = misses_.load();
  c.inserts = inserts_.load();
  c.evictions = incomplete_.load();
  c.checksum_failures = checksum_failures_.load();
  c.io_errors = reply_errors_.load() + net.io_errors;
  c.bytes_read = bytes_read_.load();
  c.bytes_written = bytes_written_.load();
  c.degraded = net.degraded;
  c.nodes = net.nodes;
  c.nodes_degraded = net.nodes_degraded;
  c.redirects = net.redirects;
  return c;
}

}  // namespace hypic::storage
