#include "server/config.h"

#include <fmt/format.h>
#include <sys/statvfs.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>

#include "gpu/backend.h"
#include "gpu/model/checkpoint.h"
#include "gpu/runtime/device_selection.h"
#include "protocol/session.h"
#include "storage/redis_manifest.h"
#include "storage/redis_tier.h"

namespace hypic::server {

namespace {

std::string Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

Result<uint64_t> ParseUnsigned(std::string_view text) {
  std::string t = Trim(text);
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || ec != std::errc() || ptr != t.data() + t.size()) {
    return BadRequest(fmt::format("'{}' is not a non-negative integer", t));
  }
  return v;
}

std::string FormatBytes(uint64_t v) {
  static constexpr std::pair<uint64_t, const char*> kUnits[] = {
      {1ull << 40, "TiB"}, {1ull << 30, "GiB"}, {1ull << 20, "MiB"}, {1ull << 10, "KiB"}};
  for (const auto& [scale, name] : kUnits) {
    if (v != 0 && v % scale == 0) return fmt::format("{}{}", v / scale, name);
  }
  return std::to_string(v);
}

// Builders for the key table: each returns the setter and getter for one field.
// A key whose text is turned into the field's value by `parse` (which also range-checks it)
// and printed back by `format`.
template <typename T>
ConfigKey ParsedKey(std::string_view name, std::string_view help, T ServerConfig::*field,
                    std::function<Result<T>(std::string_view)> parse,
                    std::function<std::string(const T&)> format,
                    std::string_view default_text = "") {
  return ConfigKey{
      name,
      help,
      default_text,
      false,
      [field, parse = std::move(parse)](ServerConfig& c, std::string_view v) -> Status {
        HYPIC_ASSIGN_OR_RETURN(T value, parse(v));
        c.*field = std::move(value);
        return Status::Ok();
      },
      [field, format = std::move(format)](const ServerConfig& c) { return format(c.*field); }};
}

// A true/false key (ParseBool's spellings), dumped as a TOML boolean.
ConfigKey BoolKey(std::string_view name, std::string_view help, bool ServerConfig::*field) {
  ConfigKey k = ParsedKey<bool>(name, help, field, ParseBool,
                                [](const bool& b) { return b ? "true" : "false"; });
  k.boolean = true;
  return k;
}

ConfigKey StringKey(std::string_view name, std::string_view help, std::string ServerConfig::*field,
                    bool secret = false) {
  ConfigKey k = ParsedKey<std::string>(
      name, help, field, [](std::string_view v) -> Result<std::string> { return std::string(v); },
      [secret](const std::string& v) {
        return secret ? std::string(v.empty() ? "" : "<set>") : v;
      });
  k.secret = secret;
  return k;
}

ConfigKey U32Key(std::string_view name, std::string_view help, uint32_t ServerConfig::*field,
                 uint32_t min_value) {
  return ParsedKey<uint32_t>(
      name, help, field,
      [min_value](std::string_view v) -> Result<uint32_t> {
        HYPIC_ASSIGN_OR_RETURN(uint64_t n, ParseUnsigned(v));
        if (n < min_value || n > std::numeric_limits<uint32_t>::max()) {
          return BadRequest(fmt::format("{} is out of range [{}, {}]", n, min_value,
                                        std::numeric_limits<uint32_t>::max()));
        }
        return static_cast<uint32_t>(n);
      },
      [](const uint32_t& v) { return std::to_string(v); });
}

ConfigKey BytesKey(std::string_view name, std::string_view help, uint64_t ServerConfig::*field,
                   uint64_t min_value) {
  return ParsedKey<uint64_t>(
      name, help, field,
      [min_value](std::string_view v) -> Result<uint64_t> {
        HYPIC_ASSIGN_OR_RETURN(uint64_t n, ParseBytes(v));
        if (n < min_value)
          return BadRequest(fmt::format("{} is below the minimum {}", n, min_value));
        return n;
      },
      FormatBytes);
}

// A byte count or "auto" (nullopt: sized from the machine by ResolveMachineDefaults).
ConfigKey CapacityKey(std::string_view name, std::string_view help,
                      std::optional<uint64_t> ServerConfig::*field) {
  return ParsedKey<std::optional<uint64_t>>(
      name, help, field,
      [](std::string_view v) -> Result<std::optional<uint64_t>> {
        if (Lower(Trim(v)) == "auto") return std::optional<uint64_t>();
        HYPIC_ASSIGN_OR_RETURN(uint64_t n, ParseBytes(v));
        return std::optional<uint64_t>(n);
      },
      [](const std::optional<uint64_t>& v) { return v ? FormatBytes(*v) : "auto"; }, "auto");
}

ConfigKey DurationKey(std::string_view name, std::string_view help, uint32_t ServerConfig::*field) {
  return ParsedKey<uint32_t>(
      name, help, field,
      [](std::string_view v) -> Result<uint32_t> {
        HYPIC_ASSIGN_OR_RETURN(uint32_t ms, ParseDurationMs(v));
        if (ms == 0) return BadRequest("a timeout of 0 is not allowed");
        return ms;
      },
      [](const uint32_t& ms) { return fmt::format("{}ms", ms); });
}

std::vector<ConfigKey> BuildKeys() {
  std::vector<ConfigKey> keys;
  keys.push_back(ParsedKey<Endpoint>(
      "listen", "TCP address host:port ([v6]:port); port 0 picks a free port",
      &ServerConfig::listen, Endpoint::Parse, [](const Endpoint& e) { return e.ToString(); }));
  keys.push_back(StringKey("unix_socket",
                           "unix socket path; empty = <data_dir>/hypicd.sock; 'off' disables",
                           &ServerConfig::unix_socket));
  keys.push_back(StringKey("token", "data-plane auth token sent in HELLO (required off loopback)",
                           &ServerConfig::token, /*secret=*/true));
  keys.push_back(StringKey("admin_token",
                           "token for admin operations (STATS, EVICT, PIN, FLUSH, CONFIG, ...)",
                           &ServerConfig::admin_token, /*secret=*/true));
  keys.push_back(ParsedKey<std::optional<Endpoint>>(
      "metrics", "Prometheus endpoint host:port serving /metrics; 'off' disables",
      &ServerConfig::metrics,
      [](std::string_view v) -> Result<std::optional<Endpoint>> {
        if (Lower(Trim(v)) == "off") return std::optional<Endpoint>();
        HYPIC_ASSIGN_OR_RETURN(Endpoint e, Endpoint::Parse(v));
        return std::optional<Endpoint>(std::move(e));
      },
      [](const std::optional<Endpoint>& e) { return e ? e->ToString() : "off"; }));
  keys.push_back(StringKey("metrics_token",
                           "bearer token that GET /metrics must carry (the probes stay open); "
                           "required off loopback unless metrics_public",
                           &ServerConfig::metrics_token, /*secret=*/true));
  keys.push_back(BoolKey("metrics_public",
                         "serve /metrics on a non-loopback address without a token",
                         &ServerConfig::metrics_public));
  keys.push_back(StringKey("ready_file",
                           "file written once serving, with the bound addresses (for scripts)",
                           &ServerConfig::ready_file));
  keys.push_back(StringKey("data_dir", "directory for the SSD tier, the unix socket and the model",
                           &ServerConfig::data_dir));
  keys.push_back(StringKey(
      "model", "model to serve: builtin:small|tiny|bench, a checkpoint directory, or none",
      &ServerConfig::model));
  keys.push_back(StringKey("weights_dtype",
                           "resident precision of the GEMM weights: auto (a bf16 checkpoint "
                           "stays bf16), bf16 or f32",
                           &ServerConfig::weights_dtype));
  keys.push_back(BoolKey("cuda_tf32",
                         "f32 GEMM weights on CUDA devices use TF32 tensor cores (about 1e-3 "
                         "relative; entries keyed apart from exact fp32 ones); no effect on "
                         "bf16 weights or the CPU",
                         &ServerConfig::cuda_tf32));
  keys.push_back(StringKey("model_cache_dir",
                           "where built-in models are generated; empty = <data_dir>/models",
                           &ServerConfig::model_cache_dir));
  keys.push_back(U32Key("seam_w", "default seam window w (tokens recomputed per segment)",
                        &ServerConfig::seam_w, 0));
  keys.push_back(ParsedKey<EntryDTypes>(
      "entry_dtype",
      "precision the prefilled entries store each tensor kind in (part of their keys): a dtype "
      "for every kind (f32, bf16, f16) and/or kind=dtype items, kinds t (transition), s "
      "(state), conv (conv tail), kv; unnamed kinds are f32, e.g. 'kv=bf16' or 'bf16,t=f32'",
      &ServerConfig::entry_dtype, [](std::string_view v) { return EntryDTypes::Parse(v); },
      [](const EntryDTypes& d) { return d.ToString(); }));
  keys.push_back(StringKey("eviction_policy", "per-tier eviction: lru or cost (cost-aware)",
                           &ServerConfig::eviction_policy));
  keys.push_back(CapacityKey("ram_capacity", "host RAM tier bytes; auto = 25% of physical RAM",
                             &ServerConfig::ram_capacity));
  keys.push_back(CapacityKey("ssd_capacity",
                             "SSD tier bytes; auto = min(50GiB, 50% of the data dir's free space)",
                             &ServerConfig::ssd_capacity));
  keys.push_back(CapacityKey(
      "hbm_capacity", "GPU HBM tier bytes; auto = 80% of free device memory (0 without CUDA)",
      &ServerConfig::hbm_capacity));
  keys.push_back(StringKey("remote_store",
                           "shared entry tier below SSD: redis://[[user]:password@]host[:port] "
                           "or redis-cluster://[[user]:password@]host:port,host:port,...; "
                           "empty = none",
                           &ServerConfig::remote_store, /*secret=*/true));
  keys.push_back(StringKey("remote_prefix",
                           "prefix of every key in the remote store (one per deployment)",
                           &ServerConfig::remote_prefix));
  keys.push_back(U32Key("remote_min_tokens",
                        "entries of at least this many tokens are written to the remote store",
                        &ServerConfig::remote_min_tokens, 0));
  keys.push_back(BytesKey("remote_chunk_bytes",
                          "chunk size of entries in the remote store (4KiB to 64MiB)",
                          &ServerConfig::remote_chunk_bytes, 4 << 10));
  keys.push_back(DurationKey("remote_timeout_ms",
                             "remote store connect and command timeout; past it the tier is "
                             "degraded and retried with backoff",
                             &ServerConfig::remote_timeout_ms));
  keys.push_back(ParsedKey<std::vector<PeerConfig>>(
      "peers",
      "peer hypicd daemons (same model) computing missed segments: comma-separated "
      "host:port[;weight=W][;concurrency=N][;token=T]; in TOML also an array of strings or of "
      "{address, token, weight, concurrency} tables",
      &ServerConfig::peers,
      [](std::string_view v) -> Result<std::vector<PeerConfig>> {
        std::vector<PeerConfig> peers;
        for (std::string_view rest = v; !Trim(rest).empty();) {
          const size_t comma = rest.find(',');
          HYPIC_ASSIGN_OR_RETURN(PeerConfig p, PeerConfig::Parse(rest.substr(0, comma)));
          peers.push_back(std::move(p));
          rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
        }
        return peers;
      },
      [](const std::vector<PeerConfig>& peers) {
        std::string out;
        for (const PeerConfig& p : peers) out += (out.empty() ? "" : ",") + p.ToString();
        return out;
      }));
  keys.push_back(StringKey("peer_token", "HELLO token for the peers that have none of their own",
                           &ServerConfig::peer_token, /*secret=*/true));
  keys.push_back(DurationKey("peer_timeout_ms",
                             "longest connect plus remote PREFILL on a peer; past it the job "
                             "runs elsewhere and the peer backs off",
                             &ServerConfig::peer_timeout_ms));
  keys.push_back(DurationKey("peer_backoff_ms",
                             "first backoff of a failed peer (doubling per failure, up to 30s)",
                             &ServerConfig::peer_backoff_ms));
  keys.push_back(CapacityKey(
      "prefix_cache_capacity",
      "COMPOSE mode prefix checkpoint bytes; auto = min(4GiB, 25% of the RAM tier); 0 disables",
      &ServerConfig::prefix_cache_capacity));
  keys.push_back(CapacityKey(
      "max_pass_bytes",
      "working memory all forward passes may hold at once: a pass over it is refused TOO_LARGE, "
      "one the running passes leave no room for BUSY; auto = 50% of physical RAM; 0 = no limit",
      &ServerConfig::max_pass_bytes));
  keys.push_back(U32Key("io_threads",
                        "network threads, each serving its own connections; 0 = one per core",
                        &ServerConfig::io_threads, 0));
  keys.push_back(U32Key("compute_workers", "threads running PREFILL and COMPOSE",
                        &ServerConfig::compute_workers, 1));
  keys.push_back(ParsedKey<std::string>(
      "devices",
      "where missed segments are prefilled: auto (every visible CUDA device, else the CPU), "
      "cpu, cuda (every visible device, an error without one) or cuda:N[,M...]",
      &ServerConfig::devices,
      [](std::string_view v) -> Result<std::string> {
        HYPIC_ASSIGN_OR_RETURN(runtime::DeviceSelection d, runtime::DeviceSelection::Parse(v));
        return d.ToString();
      },
      [](const std::string& v) { return v; }, "auto"));
  keys.push_back(U32Key("cpu_workers_with_gpu",
                        "CPU prefill workers beside the CUDA workers when devices resolve to "
                        "GPUs (their cost model is calibrated apart); 0 = none",
                        &ServerConfig::cpu_workers_with_gpu, 0));
  keys.push_back(
      U32Key("prefill_workers",
             "CPU workers prefilling missed segments in parallel (LPT); 0 = one per core",
             &ServerConfig::prefill_workers, 0));
  keys.push_back(U32Key("compute_queue",
                        "compute requests waiting beyond the running ones; more get BUSY at once",
                        &ServerConfig::compute_queue, 1));
  keys.push_back(U32Key("max_connections",
                        "open connections; the excess is answered BUSY and closed",
                        &ServerConfig::max_connections, 1));
  keys.push_back(U32Key("max_inflight_requests",
                        "requests in flight per connection before its socket stops being read",
                        &ServerConfig::max_inflight_requests, 1));
  keys.push_back(BytesKey("max_inflight_bytes",
                          "request and reply bytes held per connection before reading stops",
                          &ServerConfig::max_inflight_bytes, 64 << 10));
  keys.push_back(BytesKey("max_body_bytes", "largest frame body accepted (TOO_LARGE above)",
                          &ServerConfig::max_body_bytes, 4 << 10));
  keys.push_back(BytesKey("max_pending_request_bytes",
                          "bytes held by partially received request bodies, all connections "
                          "together; a body that would pass it is answered BUSY",
                          &ServerConfig::max_pending_request_bytes, 4 << 10));
  keys.push_back(U32Key("max_preauth_connections_per_peer",
                        "connections from one TCP address that have not completed HELLO; the "
                        "excess is answered BUSY and closed",
                        &ServerConfig::max_preauth_connections_per_peer, 1));
  keys.push_back(BytesKey("max_message_bytes",
                          "largest whole streamed reply (a COMPOSE state sent in chunks); a "
                          "reply above it is TOO_LARGE",
                          &ServerConfig::max_message_bytes, 4 << 10));
  keys.push_back(StringKey("loopback_tcp_congestion",
                           "TCP congestion control for loopback clients (no pacing on a path "
                           "without congestion); empty = the system default",
                           &ServerConfig::loopback_tcp_congestion));
  keys.push_back(DurationKey("hello_timeout_ms", "accept until HELLO completes",
                             &ServerConfig::hello_timeout_ms));
  keys.push_back(DurationKey("header_timeout_ms", "first byte of a frame until its header is in",
                             &ServerConfig::header_timeout_ms));
  keys.push_back(BytesKey("min_body_rate",
                          "bytes/s a frame body must at least arrive at (slow senders are closed)",
                          &ServerConfig::min_body_rate, 1));
  keys.push_back(DurationKey("idle_timeout_ms", "a connection with nothing in flight is closed",
                             &ServerConfig::idle_timeout_ms));
  keys.push_back(DurationKey("request_timeout_ms",
                             "longest a request may run; a frame's deadline_ms can shorten it",
                             &ServerConfig::request_timeout_ms));
  keys.push_back(DurationKey("drain_timeout_ms",
                             "on SIGTERM, how long in-flight requests may still finish",
                             &ServerConfig::drain_timeout_ms));
  keys.push_back(StringKey("log_level", "trace, debug, info, warn, error, critical or off",
                           &ServerConfig::log_level));
  keys.push_back(BoolKey("log_json", "one JSON object per log line", &ServerConfig::log_json));
  // Defaults are printed from a default-constructed config, so they never go stale.
  static const ServerConfig kDefaults;
  static std::vector<std::string> default_texts;
  default_texts.reserve(keys.size());
  for (auto& k : keys) {
    if (!k.default_text.empty()) continue;
    default_texts.push_back(k.get(kDefaults));
    k.default_text = default_texts.back();
  }
  return keys;
}

std::string EnvName(std::string_view key) {
  std::string out = "HYPIC_";
  for (char c : key) out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string FlagName(std::string_view key) {
  std::string out = "--";
  for (char c : key) out += c == '_' ? '-' : c;
  return out;
}

const ConfigKey* FindKey(std::string_view name) {
  for (const auto& k : ConfigKeys()) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

Status SetKey(ServerConfig& c, const ConfigKey& key, std::string_view value,
              std::string_view source) {
  Status st = key.set(c, value);
  if (!st.ok()) {
    return BadRequest(fmt::format("config key '{}' ({}): {}", key.name, source, st.message()));
  }
  return Status::Ok();
}

// Parses the TOML layer: `text` when given, else the file at `name`. Errors name the file
// and, for syntax errors, the line and column.
Result<toml::table> ParseToml(const std::string& name, std::optional<std::string_view> text) {
  try {
    return text ? toml::parse(*text, name) : toml::parse_file(name);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    return BadRequest(
        fmt::format("config file {}:{}:{}: {}", name, where.line, where.column, e.description()));
  } catch (const std::exception& e) {
    return BadRequest(fmt::format("config file {}: {}", name, e.what()));
  }
}

// One [[tenant]] table (`where` names it in messages). The token file is read here, so a
// missing or empty one stops startup.
Result<TenantConfig> ParseTenant(const toml::table& table, const std::string& where) {
  TenantConfig t;
  auto error = [&](std::string_view key, const std::string& what) {
    return BadRequest(fmt::format("{}: key '{}': {}", where, key, what));
  };
  auto string_of = [&](std::string_view key, const toml::node& node) -> Result<std::string> {
    if (auto v = node.value_exact<std::string>()) return *v;
    return error(key, "expected a string");
  };
  for (const auto& [key_view, node] : table) {
    const std::string_view key = key_view.str();
    if (key == "name") {
      HYPIC_ASSIGN_OR_RETURN(t.name, string_of(key, node));
    } else if (key == "token") {
      HYPIC_ASSIGN_OR_RETURN(t.token, string_of(key, node));
      if (t.token.empty()) return error(key, "empty; leave it out for a tenant without a token");
    } else if (key == "token_file") {
      HYPIC_ASSIGN_OR_RETURN(t.token_file, string_of(key, node));
    } else if (key == "namespace") {
      HYPIC_ASSIGN_OR_RETURN(t.name_space, string_of(key, node));
    } else if (key == "ops") {
      const toml::array* ops = node.as_array();
      if (ops == nullptr) return error(key, "expected an array of strings");
      for (const auto& op : *ops) {
        auto v = op.value_exact<std::string>();
        const uint8_t bit = v ? protocol::PermissionFromName(*v) : 0;
        if (bit == 0) {
          return error(key, fmt::format("{} is not one of read, compute, write, admin",
                                        v ? "'" + *v + "'" : std::string("a non-string")));
        }
        t.permissions |= bit;
      }
    } else if (key == "max_bytes") {
      auto text = node.value_exact<std::string>();
      auto n = node.value_exact<int64_t>();
      if (n && *n < 0) return error(key, "negative value");
      auto bytes = text ? ParseBytes(*text)
                   : n  ? Result<uint64_t>(static_cast<uint64_t>(*n))
                        : Result<uint64_t>(BadRequest("expected a size"));
      if (!bytes.ok()) return error(key, bytes.status().message());
      t.max_bytes = *bytes;
    } else if (key == "max_compute_inflight") {
      auto n = node.value_exact<int64_t>();
      if (!n || *n < 1 || *n > std::numeric_limits<uint32_t>::max()) {
        return error(key, "expected an integer >= 1");
      }
      t.max_compute_inflight = static_cast<uint32_t>(*n);
    } else {
      return error(key,
                   "unknown key (name, token, token_file, namespace, ops, max_bytes, "
                   "max_compute_inflight)");
    }
  }
  if (t.name.empty()) return error("name", "missing or empty");
  if (t.permissions == 0) return error("ops", "missing or empty: give at least one permission");
  if (!t.token.empty() && !t.token_file.empty()) {
    return error("token_file", "set token or token_file, not both");
  }
  if (!t.token_file.empty()) {
    std::ifstream f(t.token_file);
    std::stringstream text;
    text << f.rdbuf();
    if (!f.good()) return error("token_file", fmt::format("cannot read {}", t.token_file));
    t.token = Trim(text.str());  // a trailing newline is not part of the token
    if (t.token.empty()) return error("token_file", fmt::format("{} is empty", t.token_file));
  }
  if (t.token.size() > protocol::kMaxAuthTokenLen) {
    return error("token", fmt::format("longer than {} bytes", protocol::kMaxAuthTokenLen));
  }
  if (t.name_space.size() > protocol::kMaxNameLen) {
    return error("namespace", fmt::format("longer than {} bytes", protocol::kMaxNameLen));
  }
  if (t.name_space.empty() && t.max_bytes) {
    return error("max_bytes", "needs a namespace: namespace \"\" spans the whole store");
  }
  return t;
}

// `peers = [...]`: strings (PeerConfig::Parse) or {address, token, weight, concurrency} tables.
Result<std::vector<PeerConfig>> ParsePeerArray(const toml::array& items,
                                               const std::string& source) {
  std::vector<PeerConfig> peers;
  for (size_t i = 0; i < items.size(); ++i) {
    const toml::node& item = *items.get(i);
    auto error = [&](const std::string& what) {
      return BadRequest(fmt::format("config key 'peers' ({}): item {}: {}", source, i + 1, what));
    };
    if (auto text = item.value_exact<std::string>()) {
      auto p = PeerConfig::Parse(*text);
      if (!p.ok()) return error(p.status().message());
      peers.push_back(std::move(p).value());
      continue;
    }
    const toml::table* table = item.as_table();
    if (table == nullptr) return error("expected a string or a table");
    PeerConfig p;
    bool has_address = false;
    for (const auto& [key_view, node] : *table) {
      const std::string_view key = key_view.str();
      if (key == "address") {
        auto v = node.value_exact<std::string>();
        auto ep = v ? Endpoint::Parse(*v) : Result<Endpoint>(BadRequest("expected a string"));
        if (!ep.ok()) return error("address: " + ep.status().message());
        p.address = std::move(ep).value();
        has_address = true;
      } else if (key == "token") {
        auto v = node.value_exact<std::string>();
        if (!v || v->empty()) return error("token: expected a non-empty string");
        p.token = *v;
      } else if (key == "weight") {
        auto v = node.value<double>();
        if (!v || !std::isfinite(*v) || *v <= 0.0) return error("weight: expected a number > 0");
        p.weight = *v;
      } else if (key == "concurrency") {
        auto v = node.value_exact<int64_t>();
        if (!v || *v < 1 || *v > 64) return error("concurrency: expected an integer 1..64");
        p.concurrency = static_cast<uint32_t>(*v);
      } else {
        return error(fmt::format("unknown key '{}' (address, token, weight, concurrency)", key));
      }
    }
    if (!has_address) return error("address: missing");
    peers.push_back(std::move(p));
  }
  return peers;
}

Status ApplyToml(ServerConfig& c, const std::string& name, std::optional<std::string_view> text) {
  HYPIC_ASSIGN_OR_RETURN(toml::table table, ParseToml(name, text));
  std::string source = fmt::format("file {}", name);
  for (const auto& [key_name_view, node] : table) {
    std::string key_name(key_name_view.str());
    if (key_name == "tenant") {
      const toml::array* tables = node.as_array();
      if (tables == nullptr || !tables->is_array_of_tables()) {
        return BadRequest(
            fmt::format("config key 'tenant' ({}): write tenants as [[tenant]] tables", source));
      }
      for (size_t i = 0; i < tables->size(); ++i) {
        HYPIC_ASSIGN_OR_RETURN(
            TenantConfig t,
            ParseTenant(*tables->get(i)->as_table(),
                        fmt::format("config file {}: [[tenant]] #{}", name, i + 1)));
        c.tenants.push_back(std::move(t));
      }
      continue;
    }
    if (key_name == "peers" && node.is_array()) {
      HYPIC_ASSIGN_OR_RETURN(c.peers, ParsePeerArray(*node.as_array(), source));
      continue;
    }
    const ConfigKey* key = FindKey(key_name);
    if (key == nullptr) {
      return BadRequest(fmt::format("config key '{}' ({}): unknown key", key_name, source));
    }
    std::string value;
    if (auto s = node.value_exact<std::string>()) {
      value = *s;
    } else if (auto i = node.value_exact<int64_t>()) {
      if (*i < 0) {
        return BadRequest(fmt::format("config key '{}' ({}): negative value", key_name, source));
      }
      value = std::to_string(*i);
    } else if (auto b = node.value_exact<bool>()) {
      value = *b ? "true" : "false";
    } else {
      return BadRequest(fmt::format(
          "config key '{}' ({}): expected a string, an integer or a boolean", key_name, source));
    }
    HYPIC_RETURN_IF_ERROR(SetKey(c, *key, value, source));
  }
  c.config_file = name;
  return Status::Ok();
}

// Declares every key as a string flag on `app`; `values` receives them.
void DeclareFlags(CLI::App& app, std::string& config_file, bool& check_only,
                  std::vector<std::string>& values, std::vector<CLI::Option*>& options) {
  app.add_option("--config", config_file, "TOML config file (also HYPIC_CONFIG)");
  app.add_flag("--check-config", check_only,
               std::string("validate the configuration, print it and exit"));
  const auto& keys = ConfigKeys();
  values.resize(keys.size());
  options.clear();
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto& k = keys[i];
    std::string help =
        fmt::format("{} [{}; env {}]", k.help, k.default_text.empty() ? "\"\"" : k.default_text,
                    EnvName(k.name));
    options.push_back(app.add_option(FlagName(k.name), values[i], help));
  }
}

bool IsLoopbackHost(std::string_view host) {
  if (host == "localhost" || host == "::1") return true;
  return host.starts_with("127.");
}

}  // namespace

std::string Endpoint::ToString() const {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

bool Endpoint::IsLoopback() const { return IsLoopbackHost(host); }

Result<Endpoint> Endpoint::Parse(std::string_view text) {
  std::string t = Trim(text);
  Endpoint ep;
  std::string_view port_text;
  if (t.starts_with('[')) {
    size_t close = t.find(']');
    if (close == std::string::npos || close + 1 >= t.size() || t[close + 1] != ':') {
      return BadRequest(fmt::format("'{}' is not [v6-address]:port", t));
    }
    ep.host = t.substr(1, close - 1);
    port_text = std::string_view(t).substr(close + 2);
  } else {
    size_t colon = t.rfind(':');
    if (colon == std::string::npos || t.find(':') != colon) {
      return BadRequest(fmt::format("'{}' is not host:port", t));
    }
    ep.host = t.substr(0, colon);
    port_text = std::string_view(t).substr(colon + 1);
  }
  if (ep.host.empty()) return BadRequest(fmt::format("'{}' has an empty host", t));
  auto port = ParseUnsigned(port_text);
  if (!port.ok() || *port > 65535) {
    return BadRequest(fmt::format("'{}' has a bad port (0-65535)", t));
  }
  ep.port = static_cast<uint16_t>(*port);
  return ep;
}

std::string PeerConfig::ToString() const {
  std::string out = address.ToString();
  if (weight != 1.0) out += fmt::format(";weight={}", weight);
  if (concurrency != 1) out += fmt::format(";concurrency={}", concurrency);
  if (!token.empty()) out += ";token=<set>";
  return out;
}

Result<PeerConfig> PeerConfig::Parse(std::string_view text) {
  PeerConfig p;
  const size_t semi = text.find(';');
  HYPIC_ASSIGN_OR_RETURN(p.address, Endpoint::Parse(text.substr(0, semi)));
  for (std::string_view rest = semi == std::string_view::npos ? "" : text.substr(semi + 1);
       !rest.empty();) {
    const size_t next = rest.find(';');
    const std::string item = Trim(rest.substr(0, next));
    rest = next == std::string_view::npos ? std::string_view() : rest.substr(next + 1);
    const size_t eq = item.find('=');
    const std::string key = Trim(std::string_view(item).substr(0, eq));
    const std::string value =
        eq == std::string::npos ? "" : Trim(std::string_view(item).substr(eq + 1));
    if (key == "weight") {
      double w = 0.0;
      auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), w);
      if (ec != std::errc() || ptr != value.data() + value.size() || !std::isfinite(w) ||
          w <= 0.0) {
        return BadRequest(fmt::format("peer '{}': weight '{}' is not a number > 0", text, value));
      }
      p.weight = w;
    } else if (key == "concurrency") {
      auto n = ParseUnsigned(value);
      if (!n.ok() || *n < 1 || *n > 64) {
        return BadRequest(
            fmt::format("peer '{}': concurrency '{}' is not an integer 1..64", text, value));
      }
      p.concurrency = static_cast<uint32_t>(*n);
    } else if (key == "token" && !value.empty()) {
      p.token = value;
    } else {
      return BadRequest(
          fmt::format("peer '{}': '{}' is not weight=W, concurrency=N or token=T", text, item));
    }
  }
  return p;
}

std::string ServerConfig::UnixSocketPath() const {
  if (unix_socket == "off") return "";
  if (unix_socket.empty()) return (std::filesystem::path(data_dir) / "hypicd.sock").string();
  return unix_socket;
}

std::string ServerConfig::ModelCacheDir() const {
  if (model_cache_dir.empty()) return (std::filesystem::path(data_dir) / "models").string();
  return model_cache_dir;
}

const std::vector<ConfigKey>& ConfigKeys() {
  static const std::vector<ConfigKey> keys = BuildKeys();
  return keys;
}

EnvLookup ProcessEnv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

Result<uint64_t> ParseBytes(std::string_view text) {
  std::string t = Trim(text);
  size_t split = 0;
  while (split < t.size() &&
         (std::isdigit(static_cast<unsigned char>(t[split])) || t[split] == '.'))
    ++split;
  std::string number = t.substr(0, split);
  std::string unit = Lower(Trim(std::string_view(t).substr(split)));
  static const std::map<std::string, uint64_t> kUnits = {{"", 1},
                                                         {"b", 1},
                                                         {"k", 1ull << 10},
                                                         {"kb", 1000},
                                                         {"kib", 1ull << 10},
                                                         {"m", 1ull << 20},
                                                         {"mb", 1000000},
                                                         {"mib", 1ull << 20},
                                                         {"g", 1ull << 30},
                                                         {"gb", 1000000000},
                                                         {"gib", 1ull << 30},
                                                         {"t", 1ull << 40},
                                                         {"tb", 1000000000000ull},
                                                         {"tib", 1ull << 40}};
  auto it = kUnits.find(unit);
  if (number.empty() || it == kUnits.end()) {
    return BadRequest(fmt::format("'{}' is not a size (e.g. 512, 64KiB, 1.5GiB)", t));
  }
  if (number.find('.') == std::string::npos) {
    HYPIC_ASSIGN_OR_RETURN(uint64_t n, ParseUnsigned(number));
    if (n > std::numeric_limits<uint64_t>::max() / it->second) {
      return BadRequest(fmt::format("'{}' overflows 64 bits", t));
    }
    return n * it->second;
  }
  double d = 0;
  auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), d);
  double bytes = d * static_cast<double>(it->second);
  if (ec != std::errc() || ptr != number.data() + number.size() || !std::isfinite(bytes) ||
      bytes >= 1.8e19) {
    return BadRequest(fmt::format("'{}' is not a size (e.g. 512, 64KiB, 1.5GiB)", t));
  }
  return static_cast<uint64_t>(std::llround(bytes));
}

Result<uint32_t> ParseDurationMs(std::string_view text) {
  std::string t = Trim(text);
  size_t split = 0;
  while (split < t.size() && std::isdigit(static_cast<unsigned char>(t[split]))) ++split;
  std::string unit = Lower(std::string_view(t).substr(split));
  uint64_t scale = 0;
  if (unit.empty() || unit == "ms") scale = 1;
  if (unit == "s") scale = 1000;
  if (unit == "m" || unit == "min") scale = 60000;
  auto n = ParseUnsigned(std::string_view(t).substr(0, split));
  if (!n.ok() || scale == 0) {
    return BadRequest(fmt::format("'{}' is not a duration (e.g. 250ms, 5s, 2m)", t));
  }
  if (*n > std::numeric_limits<uint32_t>::max() / scale) {
    return BadRequest(fmt::format("'{}' is too long (max ~49 days)", t));
  }
  return static_cast<uint32_t>(*n * scale);
}

Result<bool> ParseBool(std::string_view text) {
  std::string t = Lower(Trim(text));
  if (t == "true" || t == "1" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "0" || t == "no" || t == "off") return false;
  return BadRequest(fmt::format("'{}' is not a boolean (true/false)", t));
}

namespace {

// The tenants' rules, with the tokens of the flat keys: names and tokens unique, tokens within
// HELLO's limit, at most one tenant without a token and none off loopback.
Status CheckTenants(const ServerConfig& c) {
  for (const auto& [key, token] :
       {std::pair<std::string_view, const std::string&>{"token", c.token},
        {"admin_token", c.admin_token},
        {"metrics_token", c.metrics_token}}) {
    if (token.size() > protocol::kMaxAuthTokenLen) {
      return BadRequest(
          fmt::format("config key '{}': longer than {} bytes", key, protocol::kMaxAuthTokenLen));
    }
  }
  if (!c.tenants.empty() && !c.token.empty()) {
    return BadRequest(
        "config key 'token': it is the shorthand for a single default tenant; with [[tenant]] "
        "tables, declare that tenant as one more [[tenant]]");
  }
  const std::vector<TenantConfig> tenants = EffectiveTenants(c);
  const TenantConfig* tokenless = nullptr;
  for (size_t i = 0; i < tenants.size(); ++i) {
    const TenantConfig& t = tenants[i];
    if (t.token.empty()) {
      if (tokenless != nullptr) {
        return BadRequest(fmt::format(
            "tenants '{}' and '{}' both have no token: at most one tenant may be the one of "
            "connections without a token",
            tokenless->name, t.name));
      }
      tokenless = &t;
    }
    if (!c.admin_token.empty() && t.token == c.admin_token) {
      return BadRequest(
          fmt::format("config key 'admin_token': must differ from the token of "
                      "tenant '{}'",
                      t.name));
    }
    for (size_t j = 0; j < i; ++j) {
      if (tenants[j].name == t.name) {
        return BadRequest(fmt::format("tenant '{}' is declared twice", t.name));
      }
      if (!t.token.empty() && tenants[j].token == t.token) {
        return BadRequest(
            fmt::format("tenants '{}' and '{}' have the same token", tenants[j].name, t.name));
      }
    }
  }
  if (tokenless != nullptr && !c.listen.IsLoopback()) {
    if (c.tenants.empty()) {
      return BadRequest(fmt::format(
          "config key 'listen': {} is not a loopback address and no 'token' is set; set token "
          "(HYPIC_TOKEN / --token) or listen on 127.0.0.1",
          c.listen.ToString()));
    }
    return BadRequest(fmt::format(
        "config key 'listen': {} is not a loopback address, but tenant '{}' has no token; give "
        "it a token or token_file, or listen on 127.0.0.1",
        c.listen.ToString(), tokenless->name));
  }
  return Status::Ok();
}

// LoadConfig with the TOML layer's text given (`toml`), or read from the --config /
// HYPIC_CONFIG file (`toml` unset).
Result<ServerConfig> Load(const std::vector<std::string>& args, const EnvLookup& env,
                          std::optional<std::pair<std::string_view, std::string>> toml) {
  // Flags are parsed first (into strings) only to learn --config; they are applied last.
  CLI::App app("hypicd");
  std::string config_file;
  std::vector<std::string> values;
  std::vector<CLI::Option*> options;
  bool check_only = false;
  DeclareFlags(app, config_file, check_only, values, options);
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 pops from the back
    app.parse(reversed);
  } catch (const std::exception& e) {  // CLI::ParseError, or anything else CLI11 throws
    return BadRequest(fmt::format("command line: {}", e.what()));
  }

  ServerConfig c;
  c.check_only = check_only;
  if (toml) {
    HYPIC_RETURN_IF_ERROR(ApplyToml(c, toml->second, toml->first));
  } else {
    if (config_file.empty()) config_file = env("HYPIC_CONFIG").value_or("");
    if (!config_file.empty()) HYPIC_RETURN_IF_ERROR(ApplyToml(c, config_file, std::nullopt));
  }

  const auto& keys = ConfigKeys();
  for (const auto& k : keys) {
    std::string name = EnvName(k.name);
    if (auto v = env(name)) HYPIC_RETURN_IF_ERROR(SetKey(c, k, *v, "env " + name));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (options[i]->count() > 0) {
      HYPIC_RETURN_IF_ERROR(SetKey(c, keys[i], values[i], "flag " + FlagName(keys[i].name)));
    }
  }

  // Cross-key rules.
  HYPIC_RETURN_IF_ERROR(CheckTenants(c));
  if (c.metrics && !c.metrics->IsLoopback() && c.metrics_token.empty() && !c.metrics_public) {
    return BadRequest(fmt::format(
        "config key 'metrics': {} is not a loopback address and no 'metrics_token' is set; set "
        "metrics_token (scrapers send it as a bearer token), or metrics_public = true to serve "
        "the metrics to anyone who can reach the port",
        c.metrics->ToString()));
  }
  if (c.max_pending_request_bytes < c.max_body_bytes) {
    return BadRequest(fmt::format(
        "config key 'max_pending_request_bytes': {} is below max_body_bytes ({}), so a body of "
        "that size could never be received",
        c.max_pending_request_bytes, c.max_body_bytes));
  }
  if (c.data_dir.empty()) return BadRequest("config key 'data_dir': must not be empty");
  if (c.model.empty()) return BadRequest("config key 'model': must not be empty");
  if (c.seam_w > 4096) {
    return BadRequest(fmt::format("config key 'seam_w': {} is above 4096", c.seam_w));
  }
  if (!model::ParseWeightsDType(c.weights_dtype)) {
    return BadRequest(
        fmt::format("config key 'weights_dtype': '{}' is not auto, bf16 or f32", c.weights_dtype));
  }
  if (c.eviction_policy != "lru" && c.eviction_policy != "cost") {
    return BadRequest(
        fmt::format("config key 'eviction_policy': '{}' is not lru or cost", c.eviction_policy));
  }
  if (!c.remote_store.empty()) {
    if (Status st = storage::ParseRedisUrl(c.remote_store).status(); !st.ok()) {
      return st.WithContext("config key 'remote_store'");
    }
    if (c.remote_chunk_bytes > storage::kMaxRedisChunkBytes) {
      return BadRequest(fmt::format("config key 'remote_chunk_bytes': {} is above {}",
                                    c.remote_chunk_bytes, storage::kMaxRedisChunkBytes));
    }
    if (c.remote_prefix.empty()) {
      return BadRequest("config key 'remote_prefix': must not be empty with a remote_store");
    }
  }
  if (c.loopback_tcp_congestion.size() > 15 ||
      !std::all_of(c.loopback_tcp_congestion.begin(), c.loopback_tcp_congestion.end(), [](char ch) {
        return std::islower(static_cast<unsigned char>(ch)) ||
               std::isdigit(static_cast<unsigned char>(ch)) || ch == '_';
      })) {
    return BadRequest(fmt::format(
        "config key 'loopback_tcp_congestion': '{}' is not a congestion control name (at most 15 "
        "of a-z, 0-9, _)",
        c.loopback_tcp_congestion));
  }
  static constexpr std::string_view kLevels[] = {"trace", "debug",    "info", "warn",
                                                 "error", "critical", "off"};
  if (std::find(std::begin(kLevels), std::end(kLevels), c.log_level) == std::end(kLevels)) {
    return BadRequest(fmt::format(
        "config key 'log_level': '{}' is not one of trace, debug, info, warn, error, critical, off",
        c.log_level));
  }
  return c;
}

}  // namespace

Result<ServerConfig> LoadConfig(const std::vector<std::string>& args, const EnvLookup& env) {
  return Load(args, env, std::nullopt);
}

Result<ServerConfig> LoadConfigWithToml(std::string_view toml, std::string name,
                                        const std::vector<std::string>& args,
                                        const EnvLookup& env) {
  return Load(args, env, std::make_pair(toml, std::move(name)));
}

std::string ConfigHelp() {
  CLI::App app(
      "hypicd: the hypic segment-state cache daemon. Every option is also a TOML key in the "
      "--config file (snake_case) and an environment variable; precedence: file < env < flag.");
  std::string config_file;
  std::vector<std::string> values;
  bool check_only = false;
  std::vector<CLI::Option*> options;
  DeclareFlags(app, config_file, check_only, values, options);
  return app.help();
}

Status ResolveMachineDefaults(ServerConfig& c) {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  const uint64_t ram = pages > 0 && page_size > 0
                           ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size)
                           : 0;
  for (auto [name, field, share] :
       {std::tuple{"ram_capacity", &ServerConfig::ram_capacity, 4},
        std::tuple{"max_pass_bytes", &ServerConfig::max_pass_bytes, 2}}) {
    if (c.*field) continue;
    if (ram == 0) {
      return Internal(fmt::format("config key '{}': cannot read physical memory; set it", name));
    }
    c.*field = ram / static_cast<uint64_t>(share);
  }
  if (!c.ssd_capacity) {
    // The data dir may not exist yet: measure the nearest existing ancestor's file system.
    std::filesystem::path p = std::filesystem::absolute(c.data_dir);
    std::error_code ec;
    while (!std::filesystem::exists(p, ec) && p.has_parent_path() && p != p.parent_path()) {
      p = p.parent_path();
    }
    struct statvfs vfs {};
    if (statvfs(p.c_str(), &vfs) != 0) {
      return IoError(fmt::format("config key 'ssd_capacity': cannot stat {}; set it", p.string()));
    }
    uint64_t half_free = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize / 2;
    c.ssd_capacity = std::min<uint64_t>(50ull << 30, half_free);
  }
  if (!c.hbm_capacity) {
    uint64_t hbm = 0;
    if (gpu::Backend* cuda = gpu::FindBackend(gpu::BackendKind::kCuda)) {
      auto info = cuda->QueryDevice(0);
      if (info.ok()) hbm = info->free_memory / 10 * 8;
    }
    c.hbm_capacity = hbm;
  }
  if (!c.prefix_cache_capacity)
    c.prefix_cache_capacity = std::min<uint64_t>(*c.ram_capacity / 4, uint64_t{4} << 30);
  return Status::Ok();
}

std::vector<TenantConfig> EffectiveTenants(const ServerConfig& c) {
  if (!c.tenants.empty()) return c.tenants;
  TenantConfig t;
  t.name = "default";
  t.token = c.token;
  t.permissions = protocol::kPermRead | protocol::kPermCompute;
  return {t};
}

std::string DumpConfig(const ServerConfig& c) {
  // A TOML basic string: quotes, backslashes and control characters escaped.
  auto quoted = [](std::string_view v) {
    std::string escaped = "\"";
    for (char ch : v) {
      auto u = static_cast<unsigned char>(ch);
      if (ch == '"' || ch == '\\') {
        escaped += '\\';
        escaped += ch;
      } else if (u < 0x20 || u == 0x7F) {
        escaped += fmt::format("\\u{:04X}", u);
      } else {
        escaped += ch;
      }
    }
    return escaped + "\"";
  };
  std::string out;
  for (const auto& k : ConfigKeys()) {
    std::string v = k.get(c);
    // Bare integers only where TOML reads them back as the same number (i64, and no leading
    // zero, which TOML rejects: a string value such as data_dir = "001" stays quoted).
    bool bare = k.boolean || (!v.empty() && v.size() <= 18 && (v.size() == 1 || v[0] != '0') &&
                              std::all_of(v.begin(), v.end(), [](char ch) {
                                return std::isdigit(static_cast<unsigned char>(ch));
                              }));
    out += fmt::format("{} = {}\n", k.name, bare ? v : quoted(v));
  }
  // The [[tenant]] tables come last: TOML puts every key after a table header into the table.
  for (const TenantConfig& t : c.tenants) {
    out += fmt::format("\n[[tenant]]\nname = {}\n", quoted(t.name));
    if (!t.token_file.empty()) {
      out += fmt::format("token_file = {}\n", quoted(t.token_file));
    } else if (!t.token.empty()) {
      // Masked, and unique per tenant so that the dump loads back (tokens must differ).
      out += fmt::format("token = {}\n", quoted("<set for " + t.name + ">"));
    }
    std::string ops;
    for (std::string_view name : protocol::PermissionNames(t.permissions)) {
      ops += fmt::format("{}\"{}\"", ops.empty() ? "" : ", ", name);
    }
    out += fmt::format("namespace = {}\nops = [{}]\n", quoted(t.name_space), ops);
    if (t.max_bytes) out += fmt::format("max_bytes = {}\n", quoted(FormatBytes(*t.max_bytes)));
    if (t.max_compute_inflight) {
      out += fmt::format("max_compute_inflight = {}\n", *t.max_compute_inflight);
    }
  }
  return out;
}

}  // namespace hypic::server
