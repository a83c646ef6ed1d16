#include "storage/redis_tier.h"

#include <fmt/format.h>
#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <functional>
#include <initializer_list>

#include "core/logging.h"
#include "storage/entry_format.h"
#include "storage/redis_manifest.h"

namespace hypic::storage {

namespace {

// Pipelined commands in flight on one connection: enough to keep the link busy, few enough
// that hiredis never buffers more than a few chunks.
constexpr size_t kPipelineWindow = 8;

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

// One command's arguments, binary-safe. Views into strings the caller keeps alive.
struct Args {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  Args(std::initializer_list<std::string_view> parts) {
    for (std::string_view p : parts) Add(p);
  }
  void Add(std::string_view p) {
    argv.push_back(p.data());
    lens.push_back(p.size());
  }
};

timeval ToTimeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

Reply Command(redisContext* c, Args a) {
  return Reply(static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(a.argv.size()), a.argv.data(), a.lens.data())));
}

Status ConnectionError(redisContext* c, std::string_view what) {
  return IoError(
      fmt::format("redis {}: {}", what, c != nullptr && c->err ? c->errstr : "no reply"));
}

// Sends n commands with at most kPipelineWindow unanswered, handing each reply to on_reply in
// order. kIoError when the connection fails (the replies stop); a reply's content is the
// callback's business.
Status Pipeline(redisContext* c, size_t n, const std::function<Args(size_t)>& make,
                const std::function<void(size_t, const redisReply&)>& on_reply) {
  size_t sent = 0;
  for (size_t got = 0; got < n; ++got) {
    while (sent < n && sent < got + kPipelineWindow) {
      Args a = make(sent);
      if (redisAppendCommandArgv(c, static_cast<int>(a.argv.size()), a.argv.data(),
                                 a.lens.data()) != REDIS_OK) {
        return ConnectionError(c, "pipeline");
      }
      ++sent;
    }
    void* raw = nullptr;
    if (redisGetReply(c, &raw) != REDIS_OK || raw == nullptr) return ConnectionError(c, "reply");
    Reply r(static_cast<redisReply*>(raw));
    on_reply(got, *r);
  }
  return Status::Ok();
}

std::string_view ReplyText(const redisReply& r) { return {r.str, r.len}; }

std::span<const std::byte> ReplyBytes(const redisReply& r) {
  return {reinterpret_cast<const std::byte*>(r.str), r.len};
}

}  // namespace

Result<RedisAddress> ParseRedisUrl(std::string_view url) {
  constexpr std::string_view kScheme = "redis://";
  if (url.substr(0, kScheme.size()) != kScheme) {
    return BadRequest(
        fmt::format("remote store '{}': want redis://[[user]:password@]host[:port]", url));
  }
  std::string_view rest = url.substr(kScheme.size());
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  RedisAddress a;
  if (size_t at = rest.rfind('@'); at != std::string_view::npos) {
    std::string_view userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    size_t colon = userinfo.find(':');
    if (colon == std::string_view::npos) {
      return BadRequest(fmt::format("remote store: '{}@' lacks ':' before the password", userinfo));
    }
    a.user = std::string(userinfo.substr(0, colon));
    a.password = std::string(userinfo.substr(colon + 1));
  }
  std::string_view port;
  if (!rest.empty() && rest.front() == '[') {  // [v6 address]:port
    size_t close = rest.find(']');
    if (close == std::string_view::npos) return BadRequest("remote store: unclosed '[' in host");
    a.host = std::string(rest.substr(1, close - 1));
    rest = rest.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return BadRequest("remote store: junk after ']'");
    if (!rest.empty()) port = rest.substr(1);
  } else {
    size_t colon = rest.find(':');
    a.host = std::string(rest.substr(0, colon));
    if (colon != std::string_view::npos) port = rest.substr(colon + 1);
  }
  if (a.host.empty() || a.host.find('/') != std::string::npos) {
    return BadRequest(fmt::format("remote store '{}': no host", url));
  }
  if (!port.empty()) {
    unsigned v = 0;
    auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), v);
    if (ec != std::errc() || p != port.data() + port.size() || v == 0 || v > 65535) {
      return BadRequest(fmt::format("remote store '{}': bad port '{}'", url, port));
    }
    a.port = static_cast<uint16_t>(v);
  }
  return a;
}

void RedisTier::ContextDeleter::operator()(redisContext* c) const { redisFree(c); }

Result<std::unique_ptr<RedisTier>> RedisTier::Create(const RedisTierOptions& options) {
  if (options.chunk_bytes < kMinRedisChunkBytes || options.chunk_bytes > kMaxRedisChunkBytes) {
    return BadRequest(fmt::format("remote chunk size {} is outside [{}, {}]", options.chunk_bytes,
                                  kMinRedisChunkBytes, kMaxRedisChunkBytes));
  }
  if (options.address.host.empty()) return BadRequest("remote store: no host");
  std::unique_ptr<RedisTier> t(new RedisTier(options));
  t->writer_ = std::thread([raw = t.get()] { raw->WriterLoop(); });
  HYPIC_LOG_INFO(
      "remote tier: redis at {}:{} (auth {}), key prefix '{}', chunks of {} bytes, connect "
      "timeout {} ms, command timeout {} ms, backoff {}-{} ms, write queue {} bytes",
      options.address.host, options.address.port, options.address.password.empty() ? "off" : "on",
      options.prefix, options.chunk_bytes, options.connect_timeout.count(),
      options.command_timeout.count(), options.backoff_min.count(), options.backoff_max.count(),
      options.max_queued_bytes);
  return t;
}

RedisTier::RedisTier(const RedisTierOptions& options)
    : options_(options), write_ids_(std::random_device{}()) {}

RedisTier::~RedisTier() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  writer_cv_.notify_one();
  writer_.join();  // the loop empties the queue first
}

Result<RedisTier::Context> RedisTier::Acquire() {
  {
    MutexLock lock(&mu_);
    if (degraded_ && std::chrono::steady_clock::now() < retry_at_) {
      return IoError("remote tier degraded: Redis is retried after a backoff");
    }
    if (!idle_.empty()) {
      Context c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  const RedisAddress& a = options_.address;
  Context c(redisConnectWithTimeout(a.host.c_str(), a.port, ToTimeval(options_.connect_timeout)));
  if (c == nullptr || c->err) {
    return Fail(ConnectionError(c.get(), fmt::format("connect to {}:{}", a.host, a.port)));
  }
  if (redisSetTimeout(c.get(), ToTimeval(options_.command_timeout)) != REDIS_OK) {
    return Fail(ConnectionError(c.get(), "set timeout"));
  }
  if (!a.password.empty()) {
    Reply r = a.user.empty() ? Command(c.get(), {"AUTH", a.password})
                             : Command(c.get(), {"AUTH", a.user, a.password});
    if (r == nullptr) return Fail(ConnectionError(c.get(), "AUTH"));
    if (r->type == REDIS_REPLY_ERROR) {
      return Fail(IoError(fmt::format("redis AUTH refused: {}", ReplyText(*r))));
    }
  }
  return c;
}

void RedisTier::Release(Context c) {
  if (c->err != 0) return;  // failed meanwhile (Fail has run): closed, the breaker untouched
  MutexLock lock(&mu_);
  if (degraded_) {
    degraded_ = false;
    backoff_ = std::chrono::milliseconds(0);
    HYPIC_LOG_WARN("remote tier: redis at {}:{} answers again; the tier has recovered",
                   options_.address.host, options_.address.port);
  }
  if (idle_.size() < options_.max_idle_connections) idle_.push_back(std::move(c));
}

Status RedisTier::Fail(const Status& why) {
  ++io_errors_;
  MutexLock lock(&mu_);
  const auto now = std::chrono::steady_clock::now();
  idle_.clear();  // the others share the cause
  if (!degraded_) {
    degraded_ = true;
    backoff_ = options_.backoff_min;
    HYPIC_LOG_WARN("remote tier degraded ({}): misses until redis answers, first retry in {} ms",
                   why.message(), backoff_.count());
  } else if (now >= retry_at_) {  // the retry after a backoff failed too
    backoff_ = std::min(backoff_ * 2, options_.backoff_max);
    HYPIC_LOG_DEBUG("remote tier: retry failed ({}); next in {} ms", why.message(),
                    backoff_.count());
  }
  retry_at_ = now + backoff_;
  return why;
}

void RedisTier::DropManifest(redisContext* c, const std::string& manifest_key) {
  Reply r = Command(c, {"DEL", manifest_key});
  if (r == nullptr) (void)Fail(ConnectionError(c, "DEL"));
}

Result<std::shared_ptr<const HostBuffer>> RedisTier::Get(const SegmentKey& key) {
  ++misses_;  // until the entry is complete and checked
  Result<Context> conn = Acquire();
  if (!conn.ok()) return conn.status();
  Context c = std::move(conn).value();
  const std::string mkey = RedisManifestKey(options_.prefix, key);
  Reply r = Command(c.get(), {"GET", mkey});
  if (r == nullptr) return Fail(ConnectionError(c.get(), "GET manifest"));
  if (r->type == REDIS_REPLY_NIL) {
    Release(std::move(c));
    return NotFound("remote tier: no entry " + key.ToHex());
  }
  if (r->type != REDIS_REPLY_STRING) {
    ++io_errors_;
    Status st = IoError(fmt::format("redis GET {}: {}", mkey, ReplyText(*r)));
    Release(std::move(c));
    return st;
  }
  Result<RedisManifest> parsed = ParseRedisManifest(ReplyBytes(*r));
  if (parsed.ok() && parsed->key != key) parsed = Corruption("the manifest names another key");
  if (!parsed.ok()) {
    ++checksum_failures_;
    HYPIC_LOG_WARN("remote tier: manifest {} is bad ({}); dropped, a miss", mkey,
                   parsed.status().message());
    DropManifest(c.get(), mkey);
    Release(std::move(c));
    return NotFound("remote tier: bad manifest: " + parsed.status().message());
  }
  const RedisManifest& m = *parsed;
  Result<HostBuffer> buf = HostBuffer::Allocate(m.entry_bytes);
  if (!buf.ok()) {
    Release(std::move(c));
    return buf.status();
  }
  bool missing = false;
  Status bad, reply_error;
  std::vector<std::string> chunk_keys(m.chunk_count());
  Status net = Pipeline(
      c.get(), m.chunk_count(),
      [&](size_t i) {
        chunk_keys[i] = RedisChunkKey(options_.prefix, key, m.write_id, i);
        return Args{"GET", chunk_keys[i]};
      },
      [&](size_t i, const redisReply& chunk) {
        if (chunk.type == REDIS_REPLY_NIL) {
          missing = true;
        } else if (chunk.type != REDIS_REPLY_STRING) {
          reply_error = IoError(fmt::format("redis GET chunk: {}", ReplyText(chunk)));
        } else if (Status st = CheckRedisChunk(m, i, ReplyBytes(chunk)); !st.ok()) {
          bad = st;
        } else if (bad.ok() && !missing) {
          std::memcpy(buf->data() + m.ChunkOffset(i), chunk.str, chunk.len);
        }
      });
  if (!net.ok()) return Fail(net);
  if (!reply_error.ok()) {
    ++io_errors_;
    Release(std::move(c));
    return reply_error;
  }
  if (bad.ok() && !missing) {
    bad = Verify(buf->span());
    if (bad.ok()) {
      Result<EntryInfo> info = ReadEntryInfo(buf->span());
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
    DropManifest(c.get(), mkey);
    Release(std::move(c));
    return NotFound(missing ? "remote tier: a chunk of " + key.ToHex() + " is gone"
                            : "remote tier: " + bad.message());
  }
  Release(std::move(c));
  --misses_;
  ++hits_;
  bytes_read_ += m.entry_bytes;
  return std::make_shared<const HostBuffer>(std::move(buf).value());
}

void RedisTier::Write(EntryHandle entry) {
  if (entry == nullptr || entry->host.empty()) return;
  const uint64_t n = entry->host.size();
  {
    MutexLock lock(&mu_);
    const bool refused = stopping_ || queued_bytes_ + n > options_.max_queued_bytes ||
                         (degraded_ && std::chrono::steady_clock::now() < retry_at_);
    if (!refused) {
      queued_bytes_ += n;
      queue_.push_back(std::move(entry));
      writer_cv_.notify_one();
      return;
    }
  }
  HYPIC_LOG_DEBUG("remote tier: write of {} dropped (queue full or degraded)",
                  entry->info.key.ToHex());
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
  HYPIC_ASSIGN_OR_RETURN(Context c, Acquire());
  const SegmentKey& key = entry.info.key;
  const std::string mkey = RedisManifestKey(options_.prefix, key);
  Reply exists = Command(c.get(), {"EXISTS", mkey});
  if (exists == nullptr) return Fail(ConnectionError(c.get(), "EXISTS"));
  if (exists->type == REDIS_REPLY_INTEGER && exists->integer == 1) {
    Release(std::move(c));  // another daemon stored it: keys are content addresses
    return Status::Ok();
  }
  const RedisManifest m = MakeRedisManifest(key, entry.host, options_.chunk_bytes, write_ids_());
  auto set = [](std::string_view k, std::string_view v) { return Args{"SET", k, v}; };
  Status reply_error;
  std::vector<std::string> chunk_keys(m.chunk_count());
  Status net = Pipeline(
      c.get(), m.chunk_count(),
      [&](size_t i) {
        chunk_keys[i] = RedisChunkKey(options_.prefix, key, m.write_id, i);
        const auto* p = reinterpret_cast<const char*>(entry.host.data() + m.ChunkOffset(i));
        return set(chunk_keys[i], std::string_view(p, m.ChunkLength(i)));
      },
      [&](size_t, const redisReply& r) {
        if (r.type == REDIS_REPLY_ERROR && reply_error.ok()) {
          reply_error = IoError(fmt::format("redis SET chunk: {}", ReplyText(r)));
        }
      });
  if (!net.ok()) return Fail(net);
  if (reply_error.ok()) {
    const std::string manifest = EncodeRedisManifest(m);  // last: the entry is whole now
    Reply r = Command(c.get(), set(mkey, manifest));
    if (r == nullptr) return Fail(ConnectionError(c.get(), "SET manifest"));
    if (r->type == REDIS_REPLY_ERROR) {
      reply_error = IoError(fmt::format("redis SET manifest: {}", ReplyText(*r)));
    }
  }
  if (!reply_error.ok()) {
    ++io_errors_;
    Release(std::move(c));
    return reply_error;
  }
  Release(std::move(c));
  ++inserts_;
  bytes_written_ += entry.host.size();
  return Status::Ok();
}

TierCounters RedisTier::Counters() const {
  TierCounters c;
  c.hits = hits_.load();
  c.misses = misses_.load();
  c.inserts = inserts_.load();
  c.evictions = incomplete_.load();
  c.checksum_failures = checksum_failures_.load();
  c.io_errors = io_errors_.load();
  c.bytes_read = bytes_read_.load();
  c.bytes_written = bytes_written_.load();
  MutexLock lock(&mu_);
  c.degraded = degraded_;
  return c;
}

}  // namespace hypic::storage
