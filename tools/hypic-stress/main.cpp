// hypic-stress: stress and crash-verify the tiered store (docs/operations-storage.md).
//   hypic-stress run --dir D [--threads 4 --ops 2000 | --seconds S] [--ack-log F] ...
//   hypic-stress verify --dir D --ack-log F ...
//   hypic-stress daemon-load --address unix:S --ack-log F --flush-log G [--seconds S] ...
//   hypic-stress daemon-verify --address unix:S --ack-log F --flush-log G ...
// Exit codes (tools/common/subcommand.h): 0 clean, 1 a wrong read, a pinned miss or a capacity
// overrun, 2 bad flags, 3 the store could not be opened.
#include <fmt/format.h>

#include <memory>

#include "core/logging.h"
#include "tools/common/subcommand.h"
#include "tools/hypic-stress/daemon_load.h"
#include "tools/hypic-stress/stress.h"

namespace hypic::stress {
namespace {

struct Flags {
  StoreConfig store;
  RunConfig run;
  std::string wal = "async";
  std::string placement = "host";
  std::string policy = "lru";
  double min_mib = 1, max_mib = 4, hbm_mib = 0, host_mib = 64, ssd_mib = 1024;
  std::string log_level = "warn";
};

void AddStoreFlags(CLI::App& sub, Flags& f) {
  sub.add_option("--dir", f.store.dir, "Store directory (the SSD tier is DIR/db)")->required();
  sub.add_option("--hbm-mib", f.hbm_mib,
                 "Device tier capacity in MiB, on the CPU backend (0: none)");
  sub.add_option("--host-mib", f.host_mib, "Host RAM tier capacity in MiB (0: none)");
  sub.add_option("--ssd-mib", f.ssd_mib, "SSD tier capacity in MiB (0: none, memory only)");
  sub.add_option("--wal", f.wal, "SSD WAL: off, async, sync")
      ->check(CLI::IsMember({"off", "async", "sync"}));
  sub.add_option("--placement", f.placement, "Where puts go: hbm, host, ssd")
      ->check(CLI::IsMember({"hbm", "host", "ssd"}));
  sub.add_option("--policy", f.policy, "Eviction policy: lru, cost")
      ->check(CLI::IsMember({"lru", "cost"}));
  sub.add_option("--keys", f.store.keys, "Key space (seeds 0..keys-1)");
  sub.add_option("--min-mib", f.min_mib, "Smallest entry in MiB");
  sub.add_option("--max-mib", f.max_mib, "Largest entry in MiB");
  sub.add_option("--log-level", f.log_level, "trace, debug, info, warn, error");
  sub.add_option("--remote-store", f.store.remote_store,
                 "Redis URL of a remote tier below the others (redis://host:port; empty: none)");
}

bool Finish(Flags& f) {
  auto mib = [](double v) { return static_cast<uint64_t>(v * 1024 * 1024); };
  f.store.hbm_bytes = mib(f.hbm_mib);
  f.store.host_bytes = mib(f.host_mib);
  f.store.ssd_bytes = mib(f.ssd_mib);
  f.store.min_entry_bytes = mib(f.min_mib);
  f.store.max_entry_bytes = mib(f.max_mib);
  f.store.wal = f.wal == "off"    ? storage::WalMode::kOff
                : f.wal == "sync" ? storage::WalMode::kSync
                                  : storage::WalMode::kAsync;
  f.store.placement = f.placement == "ssd"   ? storage::TierKind::kSsd
                      : f.placement == "hbm" ? storage::TierKind::kHbm
                                             : storage::TierKind::kHost;
  f.store.policy =
      f.policy == "cost" ? storage::EvictionPolicy::kCostAware : storage::EvictionPolicy::kLru;
  Status st = InitLogging(f.log_level);
  if (!st.ok()) fmt::print(stderr, "hypic-stress: {}\n", st.ToString());
  return st.ok();
}

const bool kRun = tools::RegisterSubcommand(
    "run", "Random put/get/probe/evict/pin/flush against a TierManager, checked",
    [](CLI::App& sub) {
      auto f = std::make_shared<Flags>();
      AddStoreFlags(sub, *f);
      sub.add_option("--threads", f->run.threads, "Worker threads");
      sub.add_option("--ops", f->run.ops, "Operations per thread (0: until --seconds)");
      sub.add_option("--seconds", f->run.seconds, "Run time limit (0: until --ops)");
      sub.add_option("--seed", f->run.seed, "Random seed (printed; reruns are reproducible)");
      sub.add_option("--ack-log", f->run.ack_log, "Durable log of acknowledged puts");
      return [f] {
        if (!Finish(*f)) return tools::kExitBadInput;
        fmt::print("hypic-stress run: seed={} threads={} keys={}\n", f->run.seed, f->run.threads,
                   f->store.keys);
        std::fflush(stdout);
        auto r = Run(f->store, f->run);
        if (!r.ok()) {
          fmt::print(stderr, "hypic-stress run: {}\n", r.status().ToString());
          return r.status().code() == StatusCode::kBadRequest ? tools::kExitBadInput
                                                              : tools::kExitUnavailable;
        }
        fmt::print("{}\n", r->ToString());
        bool clean = r->bad == 0 && r->pinned_misses == 0 && r->over_capacity == 0;
        return clean ? tools::kExitOk : tools::kExitFailure;
      };
    });

const bool kVerify = tools::RegisterSubcommand(
    "verify", "Reopen a store and check every stored and acknowledged entry", [](CLI::App& sub) {
      auto f = std::make_shared<Flags>();
      AddStoreFlags(sub, *f);
      sub.add_option("--ack-log", f->run.ack_log, "The run's log of acknowledged puts")->required();
      return [f] {
        if (!Finish(*f)) return tools::kExitBadInput;
        auto r = Verify(f->store, f->run.ack_log);
        if (!r.ok()) {
          fmt::print(stderr, "hypic-stress verify: {}\n", r.status().ToString());
          return tools::kExitUnavailable;
        }
        fmt::print("{}\n", r->ToString());
        return r->bad == 0 && r->unknown == 0 ? tools::kExitOk : tools::kExitFailure;
      };
    });

// The flags of daemon-load and daemon-verify (daemon_load.h).
struct DaemonFlags {
  DaemonLoadConfig config;
  double min_mib = 1, max_mib = 16;
};

void AddDaemonFlags(CLI::App& sub, DaemonFlags& f) {
  sub.add_option("--address", f.config.address, "hypicd's unix socket, unix:/path")->required();
  sub.add_option("--keys", f.config.entries.keys, "PUT key space (seeds 0..keys-1)");
  sub.add_option("--min-mib", f.min_mib, "Smallest PUT entry in MiB");
  sub.add_option("--max-mib", f.max_mib, "Largest PUT entry in MiB");
  sub.add_option("--ack-log", f.config.ack_log, "Log of acknowledged PUTs")->required();
  sub.add_option("--flush-log", f.config.flush_log, "Log of acknowledged FLUSHes")->required();
}

void FinishDaemonFlags(DaemonFlags& f) {
  f.config.entries.min_entry_bytes = static_cast<uint64_t>(f.min_mib * 1024 * 1024);
  f.config.entries.max_entry_bytes = static_cast<uint64_t>(f.max_mib * 1024 * 1024);
}

const bool kDaemonLoad = tools::RegisterSubcommand(
    "daemon-load", "Mixed PUT/GET/PREFILL/COMPOSE/FLUSH against a running hypicd, checked",
    [](CLI::App& sub) {
      auto f = std::make_shared<DaemonFlags>();
      AddDaemonFlags(sub, *f);
      sub.add_option("--threads", f->config.threads, "Worker threads (one connection each)");
      sub.add_option("--seconds", f->config.seconds, "Run time limit");
      sub.add_option("--seed", f->config.seed, "Random seed");
      return [f] {
        FinishDaemonFlags(*f);
        auto r = DaemonLoad(f->config);
        if (!r.ok()) {
          fmt::print(stderr, "hypic-stress daemon-load: {}\n", r.status().ToString());
          return tools::kExitUnavailable;
        }
        fmt::print("{}\n", r->ToString());
        return r->bad == 0 ? tools::kExitOk : tools::kExitFailure;
      };
    });

const bool kDaemonVerify = tools::RegisterSubcommand(
    "daemon-verify", "Check a restarted hypicd against daemon-load's logs", [](CLI::App& sub) {
      auto f = std::make_shared<DaemonFlags>();
      AddDaemonFlags(sub, *f);
      return [f] {
        FinishDaemonFlags(*f);
        auto r = VerifyDaemon(f->config);
        if (!r.ok()) {
          fmt::print(stderr, "hypic-stress daemon-verify: {}\n", r.status().ToString());
          return tools::kExitUnavailable;
        }
        fmt::print("{}\n", r->ToString());
        return r->bad == 0 && r->lost_flushed == 0 ? tools::kExitOk : tools::kExitFailure;
      };
    });

}  // namespace
}  // namespace hypic::stress

int main(int argc, char** argv) {
  return hypic::tools::RunSubcommandMain("hypic-stress",
                                         "hypic tiered-store stress and crash check", argc, argv);
}
