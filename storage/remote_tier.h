// RemoteTier: a store shared by several daemons, below the local tiers (today Redis,
// storage/redis_tier.h). It is not one of TierManager's indexed tiers: its contents belong to
// the whole fleet, so the manager asks it on a local miss (Get) and offers it the entries this
// daemon stores (Write), and keeps no index of it.
//
// Contract: Get returns verified bytes or a miss, never a wrong entry; Write never blocks the
// caller on the network. A remote that cannot be reached reports itself degraded in Counters()
// and answers misses at once until it recovers. Implementations are thread-safe; nothing throws.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/host_buffer.h"
#include "core/segment_key.h"
#include "core/status.h"
#include "storage/tier.h"

namespace hypic::storage {

// One node of the remote store, as the tier sees it.
struct RemoteNodeCounters {
  std::string name;        // "host:port"
  uint64_t slots = 0;      // cluster hash slots it serves in the current map (0 for one server)
  bool degraded = false;   // its circuit breaker is open
  uint64_t io_errors = 0;  // connection failures, timeouts and refusals to serve, on this node
};

class RemoteTier {
 public:
  virtual ~RemoteTier() = default;

  // The entry of `key`, checked (every chunk's checksum, Verify, the key in its header).
  // kNotFound on a miss, including an entry that is half-written, evicted or corrupt (the last
  // counted in checksum_failures); kIoError when the store cannot be reached or the tier is
  // degraded (counted in io_errors).
  virtual Result<std::shared_ptr<const HostBuffer>> Get(const SegmentKey& key) = 0;

  // Queues an asynchronous write of `entry` (verified host bytes) and returns at once. The write
  // is dropped when the queue is full or the tier is degraded: the remote is a cache.
  virtual void Write(EntryHandle entry) = 0;

  // Blocks until every queued write has been written or dropped.
  virtual void WaitForWrites() = 0;

  // hits, misses, inserts (entries written), bytes_read, bytes_written, evictions (entries whose
  // chunks were gone), checksum_failures, io_errors, degraded, nodes, nodes_degraded, redirects.
  // entries, bytes and capacity stay 0: what the store holds is the fleet's, not this daemon's.
  virtual TierCounters Counters() const = 0;

  // The nodes serving the store now (one for a single server), and any that failed.
  virtual std::vector<RemoteNodeCounters> Nodes() const = 0;
};

}  // namespace hypic::storage
