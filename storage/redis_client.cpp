#include "storage/redis_client.h"

#include <fmt/format.h>
#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <cstdio>
#include <optional>

#include "core/logging.h"

namespace hypic::storage {

namespace {

// Pipelined commands in flight on one connection: enough to keep the link busy, few enough
// that hiredis never buffers more than a few chunks.
constexpr size_t kPipelineWindow = 8;

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

timeval ToTimeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

// What the reply being read on one connection may still hold (RedisClientOptions): the reader's
// object functions below count into it and refuse, before hiredis allocates, what would exceed
// it. Owned by the connection (ContextDeleter); the reader reaches it through its privdata.
struct ReplyBudget {
  const redisReplyObjectFunctions* hiredis = nullptr;  // the reader's own object functions
  uint64_t max_bytes = 0;
  uint64_t max_elements = 0;
  uint64_t bytes = 0;     // of strings in the reply so far
  uint64_t elements = 0;  // array elements it has declared so far
  std::string refused;    // why the reply was refused; empty when it was not

  void Reset() {
    bytes = elements = 0;
    refused.clear();
  }
};

ReplyBudget* BudgetOf(const redisReadTask* task) {
  return static_cast<ReplyBudget*>(task->privdata);
}

// A null return makes hiredis fail the read (as out of memory) with nothing allocated.
void* CreateString(const redisReadTask* task, char* str, size_t len) {
  ReplyBudget* b = BudgetOf(task);
  if (len > b->max_bytes - b->bytes) {
    b->refused = fmt::format("a reply holding more than {} bytes of strings", b->max_bytes);
    return nullptr;
  }
  b->bytes += len;
  return b->hiredis->createString(task, str, len);
}

void* CreateArray(const redisReadTask* task, int elements) {
  ReplyBudget* b = BudgetOf(task);
  const auto n = static_cast<uint64_t>(elements < 0 ? 0 : elements);
  if (n > b->max_elements - b->elements) {
    b->refused = fmt::format("a reply declaring more than {} array elements (an array of {})",
                             b->max_elements, elements);
    return nullptr;
  }
  b->elements += n;
  return b->hiredis->createArray(task, elements);
}

void* CreateInteger(const redisReadTask* task, long long value) {
  return BudgetOf(task)->hiredis->createInteger(task, value);
}

void* CreateNil(const redisReadTask* task) { return BudgetOf(task)->hiredis->createNil(task); }

const redisReplyObjectFunctions kBudgetedFunctions = {CreateString, CreateArray, CreateInteger,
                                                      CreateNil, freeReplyObject};

// Puts a fresh connection's reader on a budget. REQUIRES: nothing read on `c` yet.
void InstallBudget(redisContext* c, const RedisClientOptions& o) {
  auto* b = new ReplyBudget;  // freed by ContextDeleter
  b->hiredis = c->reader->fn;
  b->max_bytes = o.max_reply_bytes;
  b->max_elements = o.max_reply_elements;
  c->reader->fn = const_cast<redisReplyObjectFunctions*>(&kBudgetedFunctions);  // never written
  c->reader->privdata = b;
}

// Marks `c` failed (so it is never pooled again) and says why.
Status FailConnection(redisContext* c, std::string_view why) {
  c->err = REDIS_ERR_PROTOCOL;
  std::snprintf(c->errstr, sizeof(c->errstr), "%.*s", static_cast<int>(why.size()), why.data());
  return IoError(fmt::format("redis reply refused: {}", why));
}

Status ConnectionError(redisContext* c, std::string_view what) {
  return IoError(
      fmt::format("redis {}: {}", what, c != nullptr && c->err ? c->errstr : "no reply"));
}

// hiredis's redisGetReply, with the budget applied to what waits unparsed in the buffer.
// kIoError when the connection fails or the reply is refused.
Result<Reply> NextReply(redisContext* c, std::string_view what) {
  auto* budget = static_cast<ReplyBudget*>(c->reader->privdata);
  budget->Reset();  // no reply is half read here: every call reads one whole reply or fails
  auto failed = [&]() -> Status {
    if (!budget->refused.empty()) return FailConnection(c, budget->refused).WithContext(what);
    return ConnectionError(c, what);
  };
  void* raw = nullptr;
  if (redisGetReplyFromReader(c, &raw) != REDIS_OK) return failed();
  if (raw == nullptr) {
    for (int done = 0; !done;) {
      if (redisBufferWrite(c, &done) != REDIS_OK) return failed();
    }
  }
  while (raw == nullptr) {
    if (redisBufferRead(c) != REDIS_OK) return failed();
    if (c->reader->len - c->reader->pos > budget->max_bytes) {
      return FailConnection(c, fmt::format("more than {} bytes of one reply", budget->max_bytes))
          .WithContext(what);
    }
    if (redisGetReplyFromReader(c, &raw) != REDIS_OK) return failed();
  }
  return Reply(static_cast<redisReply*>(raw));
}

Result<Reply> Command(redisContext* c, RedisArgs a, std::string_view what) {
  if (redisAppendCommandArgv(c, static_cast<int>(a.argv.size()), a.argv.data(), a.lens.data()) !=
      REDIS_OK) {
    return ConnectionError(c, what);
  }
  return NextReply(c, what);
}

std::string_view ReplyText(const redisReply& r) { return {r.str, r.len}; }

// Error replies that say the node cannot serve at all (as against one command failing).
bool NodeUnavailable(std::string_view error) {
  return error.starts_with("CLUSTERDOWN") || error.starts_with("LOADING") ||
         error.starts_with("MASTERDOWN");
}

Result<RedisEndpoint> ParseEndpoint(std::string_view url, std::string_view text) {
  RedisEndpoint e;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {  // [v6 address]:port
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return BadRequest("remote store: unclosed '[' in host");
    e.host = std::string(text.substr(1, close - 1));
    text = text.substr(close + 1);
    if (!text.empty() && text.front() != ':') return BadRequest("remote store: junk after ']'");
    if (!text.empty()) port = text.substr(1);
    if (text == ":") port = ":";  // a colon without a port
  } else {
    const size_t colon = text.find(':');
    e.host = std::string(text.substr(0, colon));
    if (colon != std::string_view::npos) port = text.substr(colon + 1);
    if (colon != std::string_view::npos && port.empty()) port = ":";
  }
  if (e.host.empty() || e.host.find_first_of("/@,") != std::string::npos) {
    return BadRequest(fmt::format("remote store '{}': no host or a bad one in '{}'", url, text));
  }
  if (!port.empty()) {
    const std::optional<uint16_t> p = ParseRedisPort(port);
    if (!p) return BadRequest(fmt::format("remote store '{}': bad port '{}'", url, port));
    e.port = *p;
  }
  return e;
}

}  // namespace

Result<RedisStoreAddress> ParseRedisUrl(std::string_view url) {
  constexpr std::string_view kSingle = "redis://", kCluster = "redis-cluster://";
  RedisStoreAddress a;
  std::string_view rest;
  if (url.starts_with(kSingle)) {
    rest = url.substr(kSingle.size());
  } else if (url.starts_with(kCluster)) {
    a.cluster = true;
    rest = url.substr(kCluster.size());
  } else {
    return BadRequest(
        fmt::format("remote store '{}': want redis://[[user]:password@]host[:port] or "
                    "redis-cluster://[[user]:password@]host[:port],host[:port],...",
                    url));
  }
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (size_t at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const size_t colon = userinfo.find(':');
    if (colon == std::string_view::npos) {
      return BadRequest(fmt::format("remote store: '{}@' lacks ':' before the password", userinfo));
    }
    a.user = std::string(userinfo.substr(0, colon));
    a.password = std::string(userinfo.substr(colon + 1));
  }
  for (;;) {
    const size_t comma = rest.find(',');
    if (comma != std::string_view::npos && !a.cluster) {
      return BadRequest(
          fmt::format("remote store '{}': a list of hosts needs redis-cluster://", url));
    }
    HYPIC_ASSIGN_OR_RETURN(RedisEndpoint e, ParseEndpoint(url, rest.substr(0, comma)));
    if (a.nodes.size() == kMaxRedisNodes) {
      return BadRequest(fmt::format("remote store: more than {} hosts", kMaxRedisNodes));
    }
    a.nodes.push_back(std::move(e));
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return a;
}

struct RedisClient::Node {
  RedisEndpoint endpoint;  // fixed once the node is in the table
  std::vector<Context> idle;
  bool serves = false;  // owns slots in the current map (always, for a single server)
  bool degraded = false;
  uint64_t errors = 0;
  std::chrono::milliseconds backoff{0};
  std::chrono::steady_clock::time_point retry_at;
};

struct RedisClient::Pending {
  size_t index = 0;                       // the command, as make() numbers it
  std::optional<RedisRedirect> redirect;  // where its last pass sent it
};

void RedisClient::ContextDeleter::operator()(redisContext* c) const {
  ReplyBudget* budget =
      c->reader != nullptr ? static_cast<ReplyBudget*>(c->reader->privdata) : nullptr;
  redisFree(c);
  delete budget;
}

RedisClient::RedisClient(const RedisClientOptions& options) : options_(options) {
  MutexLock lock(&mu_);
  for (const RedisEndpoint& e : options_.address.nodes) {
    auto n = std::make_unique<Node>();
    n->endpoint = e;
    n->serves = !options_.address.cluster;
    nodes_.push_back(std::move(n));
  }
}

RedisClient::~RedisClient() = default;

std::string RedisClient::Describe() const {
  std::string nodes;
  for (const RedisEndpoint& e : options_.address.nodes) {
    nodes += (nodes.empty() ? "" : ",") + e.ToString();
  }
  return fmt::format("{} {} (auth {})",
                     options_.address.cluster ? "redis cluster seeded by" : "redis at", nodes,
                     options_.address.password.empty() ? "off" : "on");
}

Result<RedisClient::Context> RedisClient::Acquire(size_t node) {
  RedisEndpoint e;
  {
    MutexLock lock(&mu_);
    Node& n = *nodes_[node];
    if (n.degraded && std::chrono::steady_clock::now() < n.retry_at) {
      return IoError(
          fmt::format("redis {} is degraded: retried after a backoff", n.endpoint.ToString()));
    }
    if (!n.idle.empty()) {
      Context c = std::move(n.idle.back());
      n.idle.pop_back();
      return c;
    }
    e = n.endpoint;
  }
  Context c(redisConnectWithTimeout(e.host.c_str(), e.port, ToTimeval(options_.connect_timeout)));
  if (c == nullptr || c->err) {
    return FailNode(node, ConnectionError(c.get(), "connect to " + e.ToString()));
  }
  if (redisSetTimeout(c.get(), ToTimeval(options_.command_timeout)) != REDIS_OK) {
    return FailNode(node, ConnectionError(c.get(), "set timeout"));
  }
  InstallBudget(c.get(), options_);
  const RedisStoreAddress& a = options_.address;
  if (!a.password.empty()) {
    Result<Reply> r = a.user.empty() ? Command(c.get(), {"AUTH", a.password}, "AUTH")
                                     : Command(c.get(), {"AUTH", a.user, a.password}, "AUTH");
    if (!r.ok()) return FailNode(node, r.status());
    if ((*r)->type == REDIS_REPLY_ERROR) {
      return FailNode(
          node, IoError(fmt::format("redis {} refused AUTH: {}", e.ToString(), ReplyText(**r))));
    }
  }
  return c;
}

void RedisClient::Release(size_t node, Context c) {
  if (c->err != 0) return;  // failed meanwhile (FailNode has run): closed, the breaker untouched
  MutexLock lock(&mu_);
  Node& n = *nodes_[node];
  if (n.degraded) {
    n.degraded = false;
    n.backoff = std::chrono::milliseconds(0);
    HYPIC_LOG_WARN("remote tier: redis {} answers again; it has recovered", n.endpoint.ToString());
  }
  if (n.idle.size() < options_.max_idle_connections) n.idle.push_back(std::move(c));
}

Status RedisClient::FailNode(size_t node, const Status& why) {
  ++io_errors_;
  MutexLock lock(&mu_);
  Node& n = *nodes_[node];
  const auto now = std::chrono::steady_clock::now();
  ++n.errors;
  n.idle.clear();  // the others share the cause
  if (!n.degraded) {
    n.degraded = true;
    n.backoff = options_.backoff_min;
    HYPIC_LOG_WARN(
        "remote tier degraded ({}): misses from {} until it answers, first retry in {} ms",
        why.message(), n.endpoint.ToString(), n.backoff.count());
  } else if (now >= n.retry_at) {  // the retry after a backoff failed too
    n.backoff = std::min(n.backoff * 2, options_.backoff_max);
    HYPIC_LOG_DEBUG("remote tier: retry of {} failed ({}); next in {} ms", n.endpoint.ToString(),
                    why.message(), n.backoff.count());
  }
  n.retry_at = now + n.backoff;
  if (options_.address.cluster) refresh_wanted_ = true;  // a replica may have taken over
  return why;
}

std::string RedisClient::NodeName(size_t node) const {
  MutexLock lock(&mu_);
  return nodes_[node]->endpoint.ToString();
}

Result<size_t> RedisClient::NodeAt(const RedisEndpoint& endpoint) {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i]->endpoint == endpoint) return i;
  }
  if (nodes_.size() >= kMaxRedisNodes) {
    return IoError(fmt::format("redis cluster: more than {} nodes", kMaxRedisNodes));
  }
  auto n = std::make_unique<Node>();
  n->endpoint = endpoint;
  nodes_.push_back(std::move(n));
  return nodes_.size() - 1;
}

void RedisClient::MaybeRefresh() {
  std::vector<size_t> candidates;
  {
    MutexLock lock(&mu_);
    const auto now = std::chrono::steady_clock::now();
    if ((!refresh_wanted_ && !slots_.empty()) || refreshing_ || now < refresh_after_) return;
    refreshing_ = true;
    refresh_after_ = now + options_.backoff_min;
    for (int pass = 0; pass < 2; ++pass) {  // the nodes serving slots first, then the seeds
      for (size_t i = 0; i < nodes_.size(); ++i) {
        if (nodes_[i]->serves == (pass == 0)) candidates.push_back(i);
      }
    }
  }
  bool done = false;
  Status last = IoError("redis cluster: no node to ask for the slot map");
  for (size_t i : candidates) {
    Result<Context> c = Acquire(i);
    if (!c.ok()) {
      last = c.status();
      continue;
    }
    Result<Reply> r = Command(c->get(), {"CLUSTER", "SLOTS"}, "CLUSTER SLOTS");
    if (!r.ok()) {
      last = FailNode(i, r.status());
      continue;
    }
    Result<std::vector<RedisSlotRange>> ranges =
        (*r)->type == REDIS_REPLY_ERROR
            ? Result<std::vector<RedisSlotRange>>(IoError(std::string(ReplyText(**r))))
            : ParseClusterSlots(**r);
    if (!ranges.ok()) {
      last = ranges.status().WithContext("CLUSTER SLOTS from " + NodeName(i));
      Release(i, std::move(c).value());
      continue;
    }
    Release(i, std::move(c).value());
    MutexLock lock(&mu_);
    std::vector<int32_t> map(kRedisClusterSlots, -1);
    const std::string asked_host = nodes_[i]->endpoint.host;
    for (auto& n : nodes_) n->serves = false;
    size_t served = 0, owners = 0;
    for (RedisSlotRange& range : *ranges) {
      if (range.master.host.empty()) range.master.host = asked_host;
      Result<size_t> owner = NodeAt(range.master);
      if (!owner.ok()) continue;  // the table is full: those slots stay unserved
      owners += nodes_[*owner]->serves ? 0 : 1;
      nodes_[*owner]->serves = true;
      for (uint32_t s = range.first; s <= range.last; ++s) map[s] = static_cast<int32_t>(*owner);
      served += range.last - range.first + 1u;
    }
    if (slots_.empty()) {
      HYPIC_LOG_INFO("remote tier: redis cluster slot map: {} masters serve {} of {} slots", owners,
                     served, kRedisClusterSlots);
    }
    slots_ = std::move(map);
    refresh_wanted_ = false;
    refresh_failed_ = false;
    done = true;
    break;
  }
  MutexLock lock(&mu_);
  refreshing_ = false;
  if (done) return;
  if (!refresh_failed_) {  // once per outage, not once per attempt
    HYPIC_LOG_WARN("remote tier: no redis cluster slot map ({}); retried every {} ms",
                   last.message(), options_.backoff_min.count());
  }
  refresh_failed_ = true;
}

Result<size_t> RedisClient::Route(uint16_t slot) {
  if (!options_.address.cluster) return size_t{0};
  MaybeRefresh();
  MutexLock lock(&mu_);
  if (slots_.empty()) {
    return IoError("redis cluster: no slot map yet (no node answered CLUSTER SLOTS)");
  }
  if (slots_[slot] < 0) return IoError(fmt::format("redis cluster: no node serves slot {}", slot));
  return static_cast<size_t>(slots_[slot]);
}

Status RedisClient::RunOn(size_t node, bool asking, std::vector<Pending>& todo,
                          const MakeCommand& make, const OnReply& on_reply) {
  HYPIC_ASSIGN_OR_RETURN(Context c, Acquire(node));
  const bool cluster = options_.address.cluster;
  const size_t n = todo.size();
  std::vector<Pending> next;
  size_t sent = 0, got = 0;
  auto fail = [&](const Status& why) {  // the unanswered stay to do; the connection is dropped
    next.insert(next.end(), todo.begin() + static_cast<ptrdiff_t>(got), todo.end());
    todo = std::move(next);
    return FailNode(node, why);
  };
  for (; got < n; ++got) {
    while (sent < n && sent < got + kPipelineWindow) {
      if (asking && redisAppendCommand(c.get(), "ASKING") != REDIS_OK) {
        return fail(ConnectionError(c.get(), "pipeline"));
      }
      RedisArgs a = make(todo[sent].index);
      if (redisAppendCommandArgv(c.get(), static_cast<int>(a.argv.size()), a.argv.data(),
                                 a.lens.data()) != REDIS_OK) {
        return fail(ConnectionError(c.get(), "pipeline"));
      }
      ++sent;
    }
    // ASKING's own reply: an error there leaves the command to answer for itself (with MOVED).
    if (asking) {
      if (Result<Reply> ack = NextReply(c.get(), "reply"); !ack.ok()) return fail(ack.status());
    }
    Result<Reply> reply = NextReply(c.get(), "reply");
    if (!reply.ok()) return fail(reply.status());
    const Reply r = std::move(reply).value();
    if (r->type == REDIS_REPLY_ERROR) {
      const std::string_view text = ReplyText(*r);
      if (NodeUnavailable(text)) {
        return fail(IoError(fmt::format("redis {}: {}", NodeName(node), text)));
      }
      if (cluster) {
        if (std::optional<RedisRedirect> redirect = ParseRedisRedirect(text)) {
          next.push_back({todo[got].index, std::move(redirect)});
          continue;
        }
      }
    }
    on_reply(todo[got].index, *r);
  }
  Release(node, std::move(c));
  todo = std::move(next);
  return Status::Ok();
}

Status RedisClient::Run(std::string_view routing_key, size_t n, const MakeCommand& make,
                        const OnReply& on_reply) {
  const auto deadline = std::chrono::steady_clock::now() + options_.command_timeout;
  const bool cluster = options_.address.cluster;
  const uint16_t slot = cluster ? RedisKeySlot(routing_key) : 0;
  HYPIC_ASSIGN_OR_RETURN(size_t node, Route(slot));
  std::vector<Pending> todo(n);
  for (size_t i = 0; i < n; ++i) todo[i].index = i;
  bool asking = false;
  for (int hop = 0;; ++hop) {
    const Status st = RunOn(node, asking, todo, make, on_reply);
    if (st.ok() && todo.empty()) return st;
    const bool retry =
        cluster && hop < kMaxRedisHops && std::chrono::steady_clock::now() < deadline;
    if (!st.ok()) {  // the node failed: once more on the slot's owner, if the new map names another
      if (!retry) return st;
      Result<size_t> owner = Route(slot);
      if (!owner.ok() || *owner == node) return st;
      node = *owner;
      asking = false;
      for (Pending& p : todo) p.redirect.reset();
      continue;
    }
    if (!retry) {
      return IoError(
          fmt::format("redis cluster: slot {} still redirected after {} hops", slot, hop + 1));
    }
    ++redirects_;
    // One slot, so one place; a command that the target sends on again comes back next hop.
    const RedisRedirect r = *todo.front().redirect;
    {
      MutexLock lock(&mu_);
      RedisEndpoint target = r.target;
      if (target.host.empty()) target.host = nodes_[node]->endpoint.host;
      HYPIC_ASSIGN_OR_RETURN(node, NodeAt(target));
      if (r.kind == RedisRedirect::Kind::kMoved) {
        if (!slots_.empty()) slots_[r.slot] = static_cast<int32_t>(node);
        nodes_[node]->serves = true;
        refresh_wanted_ = true;  // a moved slot is rarely alone: read the whole map next time
      }
    }
    asking = r.kind == RedisRedirect::Kind::kAsk;
  }
}

RedisClientCounters RedisClient::Counters() const {
  RedisClientCounters c;
  c.io_errors = io_errors_.load();
  c.redirects = redirects_.load();
  MutexLock lock(&mu_);
  for (const auto& n : nodes_) {
    if (!n->serves) continue;
    ++c.nodes;
    if (n->degraded) ++c.nodes_degraded;
  }
  c.degraded =
      c.nodes_degraded > 0 || (options_.address.cluster && slots_.empty() && refresh_failed_);
  return c;
}

std::vector<RemoteNodeCounters> RedisClient::NodeCounters() const {
  MutexLock lock(&mu_);
  std::vector<uint64_t> slots(nodes_.size(), 0);
  for (int32_t owner : slots_) {
    if (owner >= 0) ++slots[static_cast<size_t>(owner)];
  }
  std::vector<RemoteNodeCounters> out;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = *nodes_[i];
    if (!n.serves && n.errors == 0) continue;
    out.push_back({n.endpoint.ToString(), slots[i], n.degraded, n.errors});
  }
  return out;
}

}  // namespace hypic::storage
