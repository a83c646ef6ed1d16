// hypicd's configuration: one flat set of keys, read from up to three sources in increasing
// order of precedence:
//   1. a TOML file (--config PATH or HYPIC_CONFIG), flat `key = value` pairs;
//   2. environment variables HYPIC_<KEY> (upper case), e.g. HYPIC_MAX_CONNECTIONS;
//   3. command-line flags --<key-with-dashes>, e.g. --max-connections.
// A later source overrides an earlier one key by key. Every key is documented in
// docs/operations-server.md and in `hypicd --help`; ConfigKeys() is the single table that all
// three sources, the help text and the CONFIG operation read, so they cannot drift apart.
//
// Tenants are TOML-only: `[[tenant]]` tables (TenantConfig); the flat `token` key is the
// shorthand for one default tenant (EffectiveTenants).
//
// A bad value, an unknown key in the file, or an unsafe combination (a non-loopback listen
// address with a tenant that has no token, a non-loopback metrics address without
// metrics_token or metrics_public) stops startup with a kBadRequest Status whose message names
// the key and the source. Tier capacities left at "auto" are sized from the machine by
// ResolveMachineDefaults. Value types; thread-compatible.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/segment_key.h"
#include "core/status.h"

namespace hypic::server {

// A TCP endpoint "host:port" ("[v6]:port" for IPv6). Port 0 asks the kernel for a free port.
struct Endpoint {
  std::string host;
  uint16_t port = 0;

  std::string ToString() const;
  bool IsLoopback() const;
  static Result<Endpoint> Parse(std::string_view text);
};

// The daemon's default entry precision, "bf16,t=f32": the transition stays f32 (its rounding
// would compound along the chain of segments), the rest is bf16 (f32's range, 0.6x the bytes).
// Chosen from the measurements in docs/entry-precision.md.
inline EntryDTypes DefaultEntryDTypes() {
  return {
      .transition = DType::kF32, .state = DType::kBF16, .conv = DType::kBF16, .kv = DType::kBF16};
}

// One `[[tenant]]` table: who a token is, which namespace its connections are bound to, and what
// they may do (protocol::kPerm* bits). docs/operations-server.md, "Tenants".
struct TenantConfig {
  std::string name;
  std::string token;       // empty: the tenant of connections without a token (loopback only)
  std::string token_file;  // where `token` was read from, when it was
  // The namespace every key of its connections lives in. "" is unbound: requests name their
  // namespace and reach every one (the single-tenant default).
  std::string name_space;
  uint8_t permissions = 0;
  std::optional<uint64_t> max_bytes;             // bytes of its namespace in the store
  std::optional<uint32_t> max_compute_inflight;  // its PREFILL/COMPOSE queued or running
};

// One peer daemon the misses may be scattered to (server/peer.h; docs/operations-server.md,
// "Peers"): `peers` items.
struct PeerConfig {
  Endpoint address;
  std::string token;  // empty: peer_token
  double weight = 1.0;
  uint32_t concurrency = 1;

  // "host:port[;weight=W][;concurrency=N][;token=T]" (token printed as <set>).
  std::string ToString() const;
  static Result<PeerConfig> Parse(std::string_view text);
  friend bool operator==(const PeerConfig&, const PeerConfig&) = default;
};
// Endpoint has no operator== of its own.
inline bool operator==(const Endpoint& a, const Endpoint& b) {
  return a.host == b.host && a.port == b.port;
}

struct ServerConfig {
  // Where the file came from ("" when none); informational.
  std::string config_file;
  // --check-config: validate, print the effective config, exit (a mode, not a key).
  bool check_only = false;

  // Network and auth.
  Endpoint listen{"127.0.0.1", 7411};
  std::string unix_socket;  // "" = <data_dir>/hypicd.sock after resolution; "off" disables
  std::string token;        // data-plane token; required for a non-loopback listen address
  std::string admin_token;  // admin-operation token; must differ from `token`
  std::vector<TenantConfig> tenants;  // [[tenant]] tables; empty: EffectiveTenants' default
  std::optional<Endpoint> metrics = Endpoint{"127.0.0.1", 9411};  // nullopt: "off"
  std::string metrics_token;    // bearer token /metrics requires; needed off loopback
  bool metrics_public = false;  // serve /metrics off loopback without a token, knowingly
  std::string ready_file;       // written once serving: bound addresses, one per line

  // Storage and model.
  std::string data_dir = "./hypic-data";
  std::string model = "builtin:small";  // "none": serve the cache only (no PREFILL/COMPOSE)
  std::string model_cache_dir;          // built-in models; "" = <data_dir>/models
  std::string weights_dtype = "auto";   // GEMM weights: auto | bf16 | f32 (checkpoint.h)
  bool cuda_tf32 = false;               // f32 weights on CUDA: TF32 tensor cores (checkpoint.h)
  uint32_t seam_w = 8;                  // default seam window (a request may choose another)
  // Precision of the entries this daemon prefills, per tensor kind (docs/entry-precision.md);
  // part of their keys. Entries stored in another precision are not found by a lookup.
  EntryDTypes entry_dtype = DefaultEntryDTypes();
  std::string eviction_policy = "lru";   // lru | cost
  std::optional<uint64_t> ram_capacity;  // bytes; nullopt = "auto" until resolved
  std::optional<uint64_t> ssd_capacity;
  std::optional<uint64_t> hbm_capacity;
  // The shared remote tier (storage/redis_tier.h): "redis://[[user]:password@]host[:port]",
  // "redis-cluster://[[user]:password@]host:port,host:port,..." (the seed nodes of a Redis
  // Cluster), or empty for none. Entries of at least remote_min_tokens tokens are written to it.
  std::string remote_store;
  std::string remote_prefix = "hypic";  // the deployment's part of every Redis key
  uint32_t remote_min_tokens = 256;
  uint64_t remote_chunk_bytes = 2ull << 20;
  uint32_t remote_timeout_ms = 1000;  // connect and each command
  // Peer daemons (same model) that compute missed segments as remote scatter workers.
  std::vector<PeerConfig> peers;
  std::string peer_token;            // HELLO token for peers without their own
  uint32_t peer_timeout_ms = 10000;  // connect + one remote PREFILL at most
  uint32_t peer_backoff_ms = 500;    // first backoff of a failed peer (doubling, to 30 s)
  // COMPOSE mode `prefix` checkpoints; nullopt = "auto" until resolved; 0 disables the mode.
  std::optional<uint64_t> prefix_cache_capacity;
  // Working memory all forward passes may hold at once (gpu/model/pass_memory.h): a pass over
  // it alone is refused TOO_LARGE, one the running passes leave no room for BUSY. nullopt =
  // "auto" until resolved (half of physical RAM); 0 = no limit.
  std::optional<uint64_t> max_pass_bytes;

  // Threads and queues.
  uint32_t io_threads = 0;       // 0 = hardware concurrency
  uint32_t compute_workers = 1;  // threads running PREFILL / COMPOSE requests (the combine)
  // Where misses are prefilled: auto|cpu|cuda|cuda:N,M (runtime::DeviceSelection, stored in
  // its canonical text). Each CUDA device is one prefill worker.
  std::string devices = "auto";
  uint32_t prefill_workers = 0;       // CPU workers prefilling misses in parallel; 0 = one per core
  uint32_t cpu_workers_with_gpu = 0;  // CPU prefill workers beside the GPUs (0 = none)
  uint32_t compute_queue = 64;        // queued compute requests beyond which BUSY is answered

  // Limits.
  uint32_t max_connections = 1024;
  uint32_t max_inflight_requests = 64;         // per connection
  uint64_t max_inflight_bytes = 512ull << 20;  // per connection: bodies read + replies queued
  uint64_t max_body_bytes = 256ull << 20;      // one frame's body
  // Daemon-wide: bytes held by partially received bodies; past it a body is answered BUSY.
  uint64_t max_pending_request_bytes = 1ull << 30;
  // Per TCP source address: connections that have not completed HELLO; the excess is refused.
  uint32_t max_preauth_connections_per_peer = 32;
  // A whole streamed (chunked) reply, e.g. a COMPOSE state: 8 GiB holds the f32 state of a
  // 128k-token prompt of a 35B-class hybrid (Qwen3.5-35B-A3B: ~5.1 GiB, docs/state-format.md).
  uint64_t max_message_bytes = 8ull << 30;
  uint32_t hello_timeout_ms = 5000;     // accept -> HELLO complete
  uint32_t header_timeout_ms = 5000;    // first byte of a frame -> header complete
  uint64_t min_body_rate = 1ull << 20;  // bytes/s a body must arrive at, at least
  uint32_t idle_timeout_ms = 300000;    // nothing in flight and nothing read
  uint32_t request_timeout_ms = 30000;  // frame complete -> reply (cap of deadline_ms)
  uint32_t drain_timeout_ms = 10000;    // SIGTERM -> in-flight work gets SHUTTING_DOWN

  // Transport.
  // TCP congestion control of loopback connections; "" = the system default. See
  // docs/operations-server.md: a pacing default (bbr) caps one loopback flow at its pacing rate.
  std::string loopback_tcp_congestion = "reno";

  // Logging.
  std::string log_level = "info";
  bool log_json = false;

  // The bound unix socket path, "" when disabled.
  std::string UnixSocketPath() const;
  std::string ModelCacheDir() const;
};

// One configuration key: its name (snake_case, as in the TOML file), help text, and how to
// set it from text and print it. `secret` keys print as "<set>" / "".
struct ConfigKey {
  std::string_view name;
  std::string_view help;
  std::string_view default_text;
  bool secret = false;
  std::function<Status(ServerConfig&, std::string_view)> set;
  std::function<std::string(const ServerConfig&)> get;
  bool boolean = false;  // a true/false key: a TOML boolean in DumpConfig
};

const std::vector<ConfigKey>& ConfigKeys();

// The tenants the daemon serves: the [[tenant]] tables, or without any, one default tenant
// "default" of namespace "" that may read and compute, selected by `token` (none: by
// connections that present no token).
std::vector<TenantConfig> EffectiveTenants(const ServerConfig& config);

// Looks up an environment variable; returns nullopt when unset. Tests pass a map.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
EnvLookup ProcessEnv();

// Reads file < env < flags. `args` excludes argv[0]. Does not resolve machine defaults, so the
// result is deterministic for tests. Returns kBadRequest naming the key on any bad value.
Result<ServerConfig> LoadConfig(const std::vector<std::string>& args, const EnvLookup& env);
// LoadConfig with the TOML layer given as text (`name` stands for the file in messages and
// config_file) instead of read from --config / HYPIC_CONFIG, which are then ignored. For tests
// and the fuzz target: the same parsing and checks as a real file.
Result<ServerConfig> LoadConfigWithToml(std::string_view toml, std::string name,
                                        const std::vector<std::string>& args, const EnvLookup& env);

// The --help text (every key with its flag, variable and default).
std::string ConfigHelp();

// Sizes "auto" tier capacities from the machine: RAM tier 25% of physical memory, SSD tier
// min(50 GiB, 50% of the data dir's free space), HBM tier 80% of free device memory when a
// CUDA device is present (else 0), prefix cache min(4 GiB, 25% of the RAM tier). Also resolves
// the unix socket path.
Status ResolveMachineDefaults(ServerConfig& config);

// The effective configuration as `key = value` TOML lines, secrets masked (CONFIG, --check-config).
std::string DumpConfig(const ServerConfig& config);

// Value parsers, exposed for tests.
Result<uint64_t> ParseBytes(std::string_view text);       // "512", "4KiB", "1.5GiB", "2G"
Result<uint32_t> ParseDurationMs(std::string_view text);  // "250", "250ms", "5s", "2m"
Result<bool> ParseBool(std::string_view text);            // true/false/1/0/yes/no/on/off

}  // namespace hypic::server
