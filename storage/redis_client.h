// RedisClient: the remote tier's connections to Redis, one server (redis://) or a Redis Cluster
// (redis-cluster://), over hiredis's synchronous API. hiredis 0.14 has no cluster client and
// Debian packages none, so this is a small one: it reads the slot map with CLUSTER SLOTS from
// any node it knows (the seeds of the URL first), routes a batch of commands to the master of
// their hash slot, and follows the redirections a cluster answers while slots move: MOVED (the
// slot has a new owner: the map is updated and re-read) and ASK (one key is being migrated:
// ASKING, then the command again on the target).
//
// Every node has its own pool of idle connections and its own circuit breaker: a connection
// error, a timeout, or a node that answers CLUSTERDOWN/LOADING/MASTERDOWN opens the node's
// breaker, and for a backoff (doubling from backoff_min to backoff_max) every batch for that
// node fails at once with kIoError, without network time; after it one batch tries the node
// again, and a success closes the breaker. In a cluster, a failed node also has the slot map
// re-read (at most once per backoff_min) and the batch is retried once on the slot's new owner,
// if there is one, while the batch is within its command timeout. Redirections are followed at
// most kMaxRedisHops times per batch, and only within that timeout, so a batch never takes
// longer than a few command timeouts, whatever the cluster does.
//
// Replies are bounded: hiredis 0.14 (Debian's) would allocate room for whatever element count a
// server declares and buffer a bulk string of any declared length as it arrives (hiredis 1.x
// has maxelements/maxbulklen; 0.14 has neither). So every connection's reader counts what the
// reply being read holds, and a reply that declares more than max_reply_elements array elements
// in all, holds more than max_reply_bytes of strings, or leaves more than max_reply_bytes
// unparsed in the reader's buffer is refused before the allocation: an I/O error that fails
// the node (its breaker opens), never a wrong or huge read.
//
// The client moves bytes and never judges them: the tier (storage/redis_tier.h) checks every
// value it reads against its manifest, so a redirection that went wrong is a miss, not a wrong
// read.
//
// Thread-safe: any number of concurrent Runs, each on its own pooled connection; the slot map,
// the node table and the pools are under one mutex that is never held across the network.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/thread_annotations.h"
#include "storage/redis_cluster.h"
#include "storage/remote_tier.h"

struct redisContext;
struct redisReply;

namespace hypic::storage {

// Redirections followed by one batch before it gives up (with kIoError).
inline constexpr int kMaxRedisHops = 5;
// Nodes the client will remember; a redirection to one more is an error.
inline constexpr size_t kMaxRedisNodes = 1024;

struct RedisStoreAddress {
  bool cluster = false;
  std::vector<RedisEndpoint> nodes;  // redis://: the server; redis-cluster://: the seed nodes
  std::string user;                  // empty: AUTH with the password alone
  std::string password;              // empty: no AUTH; the same on every node of a cluster
};

// Parses "redis://[[user]:password@]host[:port]" or
// "redis-cluster://[[user]:password@]host[:port],host[:port],..." (port 6379 by default, an
// IPv6 host in brackets). kBadRequest naming what is wrong otherwise.
Result<RedisStoreAddress> ParseRedisUrl(std::string_view url);

struct RedisClientOptions {
  RedisStoreAddress address;
  std::chrono::milliseconds connect_timeout{250};
  std::chrono::milliseconds command_timeout{1000};  // one reply; also a batch's retry budget
  std::chrono::milliseconds backoff_min{250};
  std::chrono::milliseconds backoff_max{10000};
  size_t max_idle_connections = 4;  // per node
  // Bounds on one reply (see above). The defaults fit the largest chunk and manifest of the
  // remote tier (storage/redis_manifest.h) and the CLUSTER SLOTS reply of 16384 one-slot
  // ranges with two replicas each (~300k elements, ~2.5 MB of strings).
  uint64_t max_reply_bytes = uint64_t{68} << 20;
  uint64_t max_reply_elements = uint64_t{1} << 20;
};

// One command's arguments, binary-safe: views into strings the caller keeps alive.
struct RedisArgs {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  RedisArgs(std::initializer_list<std::string_view> parts) {
    for (std::string_view p : parts) Add(p);
  }
  void Add(std::string_view p) {
    argv.push_back(p.data());
    lens.push_back(p.size());
  }
};

struct RedisClientCounters {
  uint64_t io_errors = 0;       // connection failures, timeouts, nodes that could not serve
  uint64_t redirects = 0;       // MOVED and ASK redirections followed
  uint64_t nodes = 0;           // nodes serving slots (1 for a single server)
  uint64_t nodes_degraded = 0;  // of those, nodes whose breaker is open
  bool degraded = false;        // a node serving slots is degraded, or no slot map could be read
};

class RedisClient {
 public:
  using MakeCommand = std::function<RedisArgs(size_t)>;
  using OnReply = std::function<void(size_t, const redisReply&)>;

  // REQUIRES: at least one node in options.address. Connects lazily.
  explicit RedisClient(const RedisClientOptions& options);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // Runs the commands make(0) .. make(n - 1), pipelined, on the node that serves the hash slot
  // of `routing_key`; every command's keys must be in that slot (the caller's hash tag sees to
  // it). on_reply(i, reply) is called once for each command's final reply, in any order: a
  // redirection is followed, not delivered, but any other error reply is the caller's to judge.
  // kIoError when a node fails, a redirection is not followed within the hops and the timeout,
  // or no node serves the slot; some replies may have been delivered before it.
  Status Run(std::string_view routing_key, size_t n, const MakeCommand& make,
             const OnReply& on_reply) EXCLUDES(mu_);

  RedisClientCounters Counters() const EXCLUDES(mu_);
  // The nodes serving slots (the server, for one server), and any node that has failed.
  std::vector<RemoteNodeCounters> NodeCounters() const EXCLUDES(mu_);

  // A line for the log: "redis at h:p (auth on)" or "redis cluster seeded by h:p,... (auth on)".
  std::string Describe() const;

 private:
  struct ContextDeleter {
    void operator()(redisContext* c) const;  // frees its reply budget too
  };
  using Context = std::unique_ptr<redisContext, ContextDeleter>;
  struct Node;
  struct Pending;

  // A pooled or new, authenticated connection to node i; kIoError while its breaker is open.
  Result<Context> Acquire(size_t node) EXCLUDES(mu_);
  // Returns a healthy connection to node i's pool and closes its breaker.
  void Release(size_t node, Context c) EXCLUDES(mu_);
  // Node i failed: counts it, opens its breaker, empties its pool, wants a new slot map.
  Status FailNode(size_t node, const Status& why) EXCLUDES(mu_);
  // The node that serves `slot` (reading the slot map first when it is wanted).
  Result<size_t> Route(uint16_t slot) EXCLUDES(mu_);
  // Reads the slot map from the first known node that answers; at most once per backoff_min.
  void MaybeRefresh() EXCLUDES(mu_);
  std::string NodeName(size_t node) const EXCLUDES(mu_);
  // The index of the node at `endpoint`, added when new; kIoError when the table is full.
  Result<size_t> NodeAt(const RedisEndpoint& endpoint) REQUIRES(mu_);
  // One pipelined pass over `todo` on one node (with ASKING before each command when `asking`).
  // Leaves in `todo` the commands that were redirected (with `redirect` set) or never answered.
  Status RunOn(size_t node, bool asking, std::vector<Pending>& todo, const MakeCommand& make,
               const OnReply& on_reply) EXCLUDES(mu_);

  const RedisClientOptions options_;

  mutable Mutex mu_;
  std::vector<std::unique_ptr<Node>> nodes_ GUARDED_BY(mu_);  // never shrinks: indices stay
  std::vector<int32_t> slots_ GUARDED_BY(mu_);  // cluster: node per slot, -1 unserved; empty
                                                // until the first map is read
  bool refresh_wanted_ GUARDED_BY(mu_) = true;
  bool refreshing_ GUARDED_BY(mu_) = false;
  bool refresh_failed_ GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point refresh_after_ GUARDED_BY(mu_);

  std::atomic<uint64_t> io_errors_{0}, redirects_{0};
};

}  // namespace hypic::storage
