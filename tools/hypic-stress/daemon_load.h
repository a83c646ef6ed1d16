// The daemon-level crash test's load and check (`hypic-stress daemon-load` / `daemon-verify`,
// driven by scripts/crash-test.sh --daemon; docs/operations-server.md, "Crash test").
//
// DaemonLoad drives a running hypicd over its unix socket (the admin ops FLUSH, LIST, VERIFY
// and STATS need the daemon's own uid there) from several threads, one connection each, with a
// random mix of PUT (the synthetic 1-16 MiB entries of SpecOf, whose bytes every reader can
// recompute from the seed), GET (every hit checked against those bytes and its checksums),
// PREFILL and COMPOSE (the daemon's own compute; COMPOSE names prefilled segments by key) and
// FLUSH. It appends every acknowledged PUT's seed to the ack log, and after every acknowledged
// FLUSH the seeds that LIST then shows on the SSD tier to the flush log: those entries were on
// the SSD before the daemon was killed. (Not every PUT acknowledged before a FLUSH: the RAM
// tier may evict an entry before the FLUSH reaches it, as a cache may.) It runs until
// `seconds` pass or the daemon goes away (the crash test kills it).
//
// VerifyDaemon, against the restarted daemon: every acknowledged seed is read back (a hit must
// be exactly its bytes); every seed in the flush log must still be there; every listed entry
// is read and checked against its checksums (PREFILL's entries included); VERIFY checks the
// whole store on the daemon's side. Counts: what survived, what was lost, reads that returned
// wrong bytes or bytes failing their checksum (must be 0), corrupt copies the store caught.
// Not thread-safe: one call at a time.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "tools/hypic-stress/stress.h"

namespace hypic::stress {

struct DaemonLoadConfig {
  std::string address;  // unix:/path of hypicd's socket
  StoreConfig entries;  // keys and entry sizes (SpecOf); its store fields are unused
  uint32_t threads = 3;
  double seconds = 3600;
  uint64_t seed = 1;
  std::string ack_log;    // acknowledged PUTs (AckLog records: the seed)
  std::string flush_log;  // seeds on the SSD tier after an acknowledged FLUSH (AckLog records)
};

struct DaemonLoadReport {
  uint64_t ops = 0, puts = 0, acked = 0, gets = 0, hits = 0, prefills = 0, composes = 0;
  uint64_t flushes = 0;
  uint64_t bad = 0;   // hits with wrong bytes or bytes failing their checksum
  std::string ended;  // why the last worker stopped ("time" or the daemon's error)
  std::string ToString() const;
};

struct DaemonVerifyReport {
  uint64_t acked = 0;              // distinct acknowledged seeds
  uint64_t flushed = 0;            // seeds seen on the SSD tier after an acknowledged FLUSH
  uint64_t surviving = 0;          // acknowledged seeds still readable
  uint64_t lost_flushed = 0;       // flushed seeds that are gone (must be 0)
  uint64_t listed = 0;             // entries LIST returned, each read and checked
  uint64_t bad = 0;                // reads with wrong bytes or bytes failing their checksum
  uint64_t verify_bad = 0;         // entries the daemon's VERIFY found corrupt
  uint64_t checksum_failures = 0;  // corrupt copies the store caught (STATS)
  std::string ToString() const;
};

Result<DaemonLoadReport> DaemonLoad(const DaemonLoadConfig& config);
Result<DaemonVerifyReport> VerifyDaemon(const DaemonLoadConfig& config);

}  // namespace hypic::stress
