// `hypic-bench trace`: a RAG-like request stream (trace_workload.h) driven side by side through
// every mode, same trace and seed, in one run, all through hypicd's COMPOSE (issue 8):
//   full    mode full (no cache: every token is prefilled)
//   prefix  mode prefix: the daemon's prefix-cache baseline (gpu/model/prefix_cache.h), which
//           reuses the longest cached prefix of whole parts and checkpoints every part boundary
//   naive   mode naive (PIC, states added without T)
//   hypic   mode hypic
// Per mode: with --prewarm every initial document is first cached on its own (what an operator's
// corpus warm-up gives each kind of cache); the first --warmup requests run one by one,
// untimed, so each cache learns from the same traffic; then the measured requests run open loop
// (trace_driver.h) at --qps with TTFT timed from each request's scheduled start. --slo-ms then
// searches the highest offered QPS whose p99 TTFT meets the SLO. The measured run is its first
// probe; the next starts near the capacity its service times imply. Each probe serves a fresh
// window of requests from the same trace (replaying the measured requests would hand the prefix
// cache exact repeats), at least as many as the measured run and, with --probe-window-s, enough
// to span that long (a backlog needs time to exceed a long SLO); caches stay warm between
// probes, as in steady state. Each mode uses its own namespace, so no mode reuses another's
// entries or checkpoints.
//
// Output: a table (stdout), --json, and with --out DIR: report.json, CSV files and gnuplot PNGs.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <sstream>

#include "client/client.h"
#include "protocol/messages.h"
#include "tools/common/subcommand.h"
#include "tools/hypic-bench/trace_driver.h"
#include "tools/hypic-bench/trace_report.h"
#include "tools/hypic-bench/trace_stats.h"
#include "tools/hypic-bench/trace_workload.h"
#include "tools/hypicctl/connection_options.h"
#include "tools/hypicctl/daemon.h"

// A namespace of its own: hypic-* tools compile as unity batches (cmake/HypicTargets.cmake).
namespace hypic::tools::bench_trace {
namespace {

struct Options {
  ConnectionOptions conn;
  TraceConfig trace;
  std::string modes = "full,prefix,naive,hypic";
  uint32_t warmup = 20;
  bool prewarm = false;
  size_t workers = 4;
  double slo_ms = 0;
  int max_probes = 8;
  double probe_tolerance = 0.15;
  double probe_window_s = 0;
  uint32_t probe_max_requests = 400;
  std::string out_dir;
  bool json = false;
  std::string command;
};

// Per-request accounting, filled by the worker that ran the request.
struct Outcome {
  std::map<std::string, uint64_t> parts;
  uint64_t reused_tokens = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  double service_s = 0;  // the daemon's own time for the request (its reply's total_us)
};

// One mode on hypicd: a connection per worker, a namespace of its own.
class ModeTarget {
 public:
  static Result<std::unique_ptr<ModeTarget>> Open(const Options& opts, protocol::ComposeMode mode,
                                                  const Trace& trace, std::string name_space) {
    auto t = std::unique_ptr<ModeTarget>(new ModeTarget(mode, trace, std::move(name_space)));
    for (size_t w = 0; w < opts.workers; ++w) {
      HYPIC_ASSIGN_OR_RETURN(auto c, ConnectDaemon(opts.conn, "hypic-bench-trace", false));
      t->clients_.push_back(std::move(c));
    }
    return t;
  }

  // Serves `req` from `worker` (0 <= worker < workers) and blocks until its logits are in.
  Status Serve(size_t worker, const TraceRequest& req, Outcome* out) {
    std::vector<std::span<const uint32_t>> docs;
    for (uint32_t d : req.docs) docs.emplace_back(trace_.corpus[d]);
    return Compose(*clients_[worker], docs, req.query, out);
  }

  // Caches every document of the initial corpus on its own, as an operator's corpus warm-up
  // (hypicctl warm) would: segment entries for the PIC modes (PREFILL), a one-document
  // checkpoint for the prefix cache (COMPOSE of the document and one throw-away token: the
  // last part of a prompt is never checkpointed, it yields the logits). Nothing for full.
  Status Prewarm() {
    if (mode_ == protocol::ComposeMode::kFull) return Status::Ok();
    if (mode_ == protocol::ComposeMode::kPrefix) {
      constexpr uint32_t kThrowAway[] = {1};
      for (uint32_t d = 0; d < trace_.initial_docs; ++d) {
        const std::span<const uint32_t> doc = trace_.corpus[d];
        Outcome ignored;
        HYPIC_RETURN_IF_ERROR(Compose(*clients_[0], {&doc, 1}, kThrowAway, &ignored));
      }
      return Status::Ok();
    }
    constexpr size_t kBatch = 8;
    for (uint32_t d = 0; d < trace_.initial_docs; d += kBatch) {
      protocol::PrefillRequest req;
      req.name_space = name_space_;
      for (uint32_t i = d; i < std::min<uint32_t>(trace_.initial_docs, d + kBatch); ++i) {
        req.segments.push_back(trace_.corpus[i]);
      }
      HYPIC_RETURN_IF_ERROR(clients_[0]->Prefill(req).status());
    }
    return Status::Ok();
  }

 private:
  ModeTarget(protocol::ComposeMode mode, const Trace& trace, std::string name_space)
      : mode_(mode), trace_(trace), name_space_(std::move(name_space)) {}

  // One COMPOSE of `docs` (segment parts, in order) and the raw `query`; counts the part
  // outcomes the daemon reports (the prefix mode reports restored parts as host hits).
  Status Compose(client::Client& client, std::span<const std::span<const uint32_t>> docs,
                 std::span<const uint32_t> query, Outcome* out) {
    protocol::ComposeRequest request;
    request.name_space = name_space_;
    request.mode = mode_;
    request.top_k = 1;
    for (std::span<const uint32_t> d : docs) {
      protocol::ComposePart p;
      p.kind = protocol::PartKind::kSegmentTokens;
      p.tokens.assign(d.begin(), d.end());
      request.parts.push_back(std::move(p));
    }
    protocol::ComposePart q;
    q.kind = protocol::PartKind::kRaw;
    q.tokens.assign(query.begin(), query.end());
    request.parts.push_back(std::move(q));
    HYPIC_ASSIGN_OR_RETURN(protocol::ComposeReply reply, client.Compose(request));
    // Wire bytes: the 64-byte header plus the encoded body, each way.
    out->bytes_sent += protocol::kHeaderSize + protocol::Encode(request).size();
    out->bytes_received += protocol::kHeaderSize + protocol::Encode(reply).size();
    out->service_s += static_cast<double>(reply.timings.total_us) * 1e-6;
    for (size_t i = 0; i + 1 < reply.parts.size(); ++i) {
      const protocol::PartResult& p = reply.parts[i];
      switch (p.outcome) {
        case protocol::PartOutcome::kHit:
          ++out->parts[fmt::format("hit:{}", protocol::TierName(p.tier))];
          out->reused_tokens += p.n_tokens;
          break;
        case protocol::PartOutcome::kMiss: ++out->parts["miss"]; break;
        case protocol::PartOutcome::kLive: ++out->parts["live"]; break;
      }
    }
    return Status::Ok();
  }

  protocol::ComposeMode mode_;
  const Trace& trace_;
  std::string name_space_;
  std::vector<std::unique_ptr<client::Client>> clients_;  // one per worker
};

std::vector<std::string> SplitModes(const std::string& text) {
  std::vector<std::string> modes;
  std::stringstream ss(text);
  for (std::string m; std::getline(ss, m, ',');) {
    if (!m.empty()) modes.push_back(m);
  }
  return modes;
}

// Runs requests [first, first + n) of `trace` open loop, their arrivals shifted so the first
// one is due at once, and fills `run` (timings, service times, outcomes).
void RunWindow(ModeTarget& target, const Trace& trace, size_t first, size_t n, size_t workers,
               double abort_after_s, ModeRun* run) {
  std::vector<double> schedule(n);
  const double t0 = trace.requests[first].arrival_s;
  for (size_t i = 0; i < n; ++i) schedule[i] = trace.requests[first + i].arrival_s - t0;
  std::vector<Outcome> outcomes(n);
  const auto timings = RunOpenLoop(
      schedule, {.workers = workers, .abort_after_s = abort_after_s}, [&](size_t worker, size_t i) {
        return target.Serve(worker, trace.requests[first + i], &outcomes[i]);
      });
  run->offered_qps = trace.config.qps;
  run->ttft_s.clear();
  run->service_s.clear();
  double last_done = 0;
  Status first_error;
  for (size_t i = 0; i < n; ++i) {
    run->ttft_s.push_back(timings[i].Latency());
    if (timings[i].completed) {
      last_done = std::max(last_done, timings[i].done_s);
      run->service_s.push_back(outcomes[i].service_s);
    }
    if (!timings[i].status.ok() && first_error.ok()) first_error = timings[i].status;
    const Outcome& o = outcomes[i];
    for (const auto& [k, v] : o.parts) run->parts[k] += v;
    run->reused_tokens += o.reused_tokens;
    run->bytes_sent += o.bytes_sent;
    run->bytes_received += o.bytes_received;
    run->prompt_tokens += trace.requests[first + i].PromptTokens(trace.corpus);
  }
  if (!first_error.ok()) {
    fmt::print(stderr, "hypic-bench trace: {}: a request failed: {}\n", run->mode,
               first_error.ToString());
  }
  run->wall_s = last_done;
  run->Finish();
}

// How the trace's requests are used: warm-up, the measured run, then SLO probe windows of
// [measured, probe_max] requests each.
struct Windows {
  size_t warm = 0;
  size_t measured = 0;
  size_t probe_max = 0;
};

Windows WindowsOf(const Options& opts) {
  Windows w;
  w.warm = std::min<size_t>(opts.warmup, opts.trace.n_requests - 1);
  w.measured = opts.trace.n_requests - w.warm;
  w.probe_max =
      opts.probe_window_s > 0 ? std::max<size_t>(w.measured, opts.probe_max_requests) : w.measured;
  return w;
}

// `compute_slots`: how many compute passes the daemon runs at once, to turn the measured
// service times into a capacity estimate where the SLO search starts.
Result<ModeRun> RunMode(const Options& opts, const std::string& mode, Trace& trace,
                        ModeTarget& target, size_t compute_slots) {
  ModeRun run;
  run.mode = mode;
  const Windows w = WindowsOf(opts);
  if (opts.prewarm) HYPIC_RETURN_IF_ERROR(target.Prewarm().WithContext(mode + " prewarm"));
  if (mode != "full") {
    for (size_t i = 0; i < w.warm; ++i) {
      Outcome ignored;
      HYPIC_RETURN_IF_ERROR(
          target.Serve(0, trace.requests[i], &ignored).WithContext(mode + " warm-up"));
    }
  }
  const double abort_after = opts.slo_ms > 0 ? 10 * opts.slo_ms / 1000.0 : 0.0;
  RunWindow(target, trace, w.warm, w.measured, opts.workers, abort_after, &run);
  const double service_s = run.service.count > 0 ? run.service.mean : 0.0;
  fmt::print(stderr,
             "hypic-bench trace: {:<6} p50 {:.0f} ms, p99 {:.0f} ms at {:.3g} qps (mean service "
             "{:.0f} ms)\n",
             mode, run.ttft.p50 * 1000, run.ttft.p99 * 1000, trace.config.qps, service_s * 1000);

  if (opts.slo_ms > 0) {
    const double slo_s = opts.slo_ms / 1000.0;
    const double base_qps = trace.config.qps;
    // The measured run is the first probe; the search goes on from 80% of the capacity the
    // mean service time implies (the search moves it past what the measured run settled).
    const QpsProbe measured{base_qps, run.ttft.p99, run.ttft.p99 <= slo_s};
    const double start =
        service_s > 0 ? 0.8 * static_cast<double>(compute_slots) / service_s : base_qps;
    size_t next = w.warm + w.measured;
    auto probe = [&](double qps) -> Result<double> {
      const auto span = static_cast<size_t>(std::ceil(qps * opts.probe_window_s));
      const size_t n = std::clamp(span, w.measured, w.probe_max);
      if (next + n > trace.requests.size()) return Internal("trace: out of probe windows");
      RescaleArrivals(trace, qps);
      ModeRun p;
      p.mode = mode;
      RunWindow(target, trace, next, n, opts.workers, 10 * slo_s, &p);
      next += n;
      fmt::print(stderr, "hypic-bench trace: {:<6} probe {:.3g} qps, {} requests: p99 {:.0f} ms\n",
                 mode, qps, n, p.ttft.p99 * 1000);
      return p.ttft.p99;
    };
    auto search = SearchSustainableQps(start, slo_s, opts.max_probes, opts.probe_tolerance, probe,
                                       {&measured, 1});
    RescaleArrivals(trace, base_qps);
    if (!search.ok()) return search.status();
    run.probes = search->probes;
    run.sustainable_qps = search->sustainable_qps;
  }
  return run;
}

// This process's command line as typed (for the report), from /proc.
std::string CommandLine() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), {});
  std::string out;
  for (char c : raw) out += c == '\0' ? ' ' : c;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  const size_t slash = out.find_last_of('/', out.find(' '));
  return slash == std::string::npos ? out : out.substr(slash + 1);
}

std::string UtcNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string Machine() {
  const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  const double mem = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
                     static_cast<double>(::sysconf(_SC_PAGE_SIZE)) / (1ull << 30);
  return fmt::format("{} cores, {:.0f} GiB RAM, CPU only", cores, mem);
}

// The daemon's prefix-cache counters (STATS), read on a connection of their own (a long run
// outlasts the daemon's idle timeout); nullopt without admin rights.
std::optional<nlohmann::json> PrefixCacheStats(const ConnectionOptions& conn) {
  auto admin = ConnectDaemon(conn, "hypic-bench-trace", false);
  if (!admin.ok() || !(*admin)->hello_reply() || !(*admin)->hello_reply()->admin) {
    return std::nullopt;
  }
  auto stats = (*admin)->Stats();
  if (!stats.ok()) return std::nullopt;
  auto j = nlohmann::json::parse(*stats, nullptr, false);
  if (j.is_discarded() || !j.contains("prefix_cache")) return std::nullopt;
  return j["prefix_cache"];
}

// How the prefix mode's cache fared: what it holds after the run, against its capacity, and
// how many checkpoints it evicted meanwhile (a starved baseline would show evictions).
std::string PrefixNote(const nlohmann::json& before, const nlohmann::json& after) {
  auto u = [](const nlohmann::json& j, const char* k) { return j.value(k, uint64_t{0}); };
  return fmt::format(
      "daemon prefix cache: {} checkpoints, {:.0f} of {:.0f} MiB, {} evicted during the run",
      u(after, "nodes"), static_cast<double>(u(after, "bytes")) / (1 << 20),
      static_cast<double>(u(after, "capacity")) / (1 << 20),
      u(after, "evictions") - u(before, "evictions"));
}

int Run(const Options& opts) {
  const Windows windows = WindowsOf(opts);
  TraceConfig trace_config = opts.trace;
  if (opts.slo_ms > 0) {
    trace_config.n_requests +=
        static_cast<uint32_t>(windows.probe_max) * static_cast<uint32_t>(opts.max_probes);
  }
  auto trace = GenerateTrace(trace_config);
  if (!trace.ok()) {
    fmt::print(stderr, "hypic-bench trace: {}\n", trace.status().ToString());
    return kExitBadInput;
  }
  const auto modes = SplitModes(opts.modes);
  for (const auto& m : modes) {
    if (m != "full" && m != "prefix" && m != "naive" && m != "hypic") {
      fmt::print(stderr, "hypic-bench trace: unknown mode '{}' (full, prefix, naive, hypic)\n", m);
      return kExitBadInput;
    }
  }
  // How many compute passes the daemon runs at once (CONFIG, with admin rights; else 1).
  size_t compute_slots = 1;
  {
    auto admin = ConnectDaemon(opts.conn, "hypic-bench-trace", false);
    if (!admin.ok()) {
      return ReportFailure("hypic-bench trace", opts.conn, "connect", admin.status(),
                           FailurePhase::kConnect);
    }
    if ((*admin)->hello_reply() && (*admin)->hello_reply()->admin) {
      auto config = (*admin)->Config();
      if (config.ok()) {
        auto j = nlohmann::json::parse(*config, nullptr, false);
        if (!j.is_discarded() && j.contains("compute_workers")) {
          compute_slots = std::stoul(j["compute_workers"].get<std::string>());
        }
      }
    }
  }

  TraceReport report;
  report.command = opts.command;
  report.date = UtcNow();
  report.machine = Machine();
  report.trace = opts.trace;
  report.warmup_requests = static_cast<uint32_t>(windows.warm);
  report.slo_s = opts.slo_ms / 1000.0;
  report.prewarm = opts.prewarm;
  const std::string nonce =
      fmt::format("{:x}", std::chrono::system_clock::now().time_since_epoch().count());
  for (const auto& mode : modes) {
    const auto cm = mode == "full"     ? protocol::ComposeMode::kFull
                    : mode == "prefix" ? protocol::ComposeMode::kPrefix
                    : mode == "naive"  ? protocol::ComposeMode::kNaive
                                       : protocol::ComposeMode::kHypic;
    auto target = ModeTarget::Open(opts, cm, *trace, fmt::format("trace-{}-{}", mode, nonce));
    if (!target.ok()) {
      return ReportFailure("hypic-bench trace", opts.conn, "connect", target.status(),
                           FailurePhase::kConnect);
    }
    const auto before = mode == "prefix" ? PrefixCacheStats(opts.conn) : std::nullopt;
    auto run = RunMode(opts, mode, *trace, **target, compute_slots);
    if (!run.ok()) {
      fmt::print(stderr, "hypic-bench trace: {}: {}\n", mode, run.status().ToString());
      return kExitFailure;
    }
    if (const auto after = before ? PrefixCacheStats(opts.conn) : std::nullopt; after) {
      run->note = PrefixNote(*before, *after);
    }
    report.modes.push_back(std::move(run).value());
  }

  if (opts.json) {
    fmt::print("{}\n", ToJson(report).dump(2));
  } else {
    fmt::print("{}", RenderTable(report));
  }
  if (!opts.out_dir.empty()) {
    Status st = WriteCsv(report, opts.out_dir);
    if (st.ok()) {
      std::ofstream(std::filesystem::path(opts.out_dir) / "report.json")
          << ToJson(report).dump(2) << "\n";
      st = WritePlots(report, opts.out_dir);
      if (st.code() == StatusCode::kUnsupported) {  // no gnuplot: the data is still useful
        fmt::print(stderr, "hypic-bench trace: plots skipped: {}\n", st.message());
        st = Status::Ok();
      }
    }
    if (!st.ok()) {
      fmt::print(stderr, "hypic-bench trace: {}: {}\n", opts.out_dir, st.ToString());
      return kExitFailure;
    }
  }
  return kExitOk;
}

const bool kRegistered = RegisterSubcommand(
    "trace", "RAG trace through hypicd: full, prefix, naive, hypic side by side",
    [](CLI::App& sub) -> Action {
      auto o = std::make_shared<Options>();
      AddConnectionOptions(sub, o->conn);
      TraceConfig& t = o->trace;
      sub.add_option("--modes", o->modes, "comma-separated modes")->capture_default_str();
      sub.add_option("--docs", t.n_docs, "corpus size D")->capture_default_str();
      sub.add_option("--doc-len-median", t.doc_len_median, "tokens")->capture_default_str();
      sub.add_option("--doc-len-sigma", t.doc_len_sigma, "log-normal sigma")->capture_default_str();
      sub.add_option("--doc-len-min", t.doc_len_min)->capture_default_str();
      sub.add_option("--doc-len-max", t.doc_len_max)->capture_default_str();
      sub.add_option("--zipf", t.zipf_alpha, "popularity exponent")->capture_default_str();
      sub.add_option("--docs-min", t.docs_min, "documents per request, min")->capture_default_str();
      sub.add_option("--docs-max", t.docs_max, "documents per request, max")->capture_default_str();
      sub.add_option("--query-min", t.query_min)->capture_default_str();
      sub.add_option("--query-max", t.query_max)->capture_default_str();
      sub.add_option("--new-doc-share", t.new_doc_share, "share of drawn documents that are new")
          ->capture_default_str();
      sub.add_option("--requests", t.n_requests, "requests, warm-up included")
          ->capture_default_str();
      sub.add_option("--qps", t.qps, "offered rate of the measured run")->capture_default_str();
      sub.add_option("--vocab", t.vocab, "token ids are drawn below this")->capture_default_str();
      sub.add_option("--seed", t.seed)->capture_default_str();
      sub.add_option("--warmup", o->warmup, "requests served untimed first, per mode")
          ->capture_default_str();
      sub.add_flag("--prewarm", o->prewarm,
                   "cache every initial document on its own first (cache modes)");
      sub.add_option("--workers", o->workers, "connections (requests in flight)")
          ->check(CLI::Range(1, 256))
          ->capture_default_str();
      sub.add_option("--slo-ms", o->slo_ms, "search the QPS whose p99 TTFT meets this SLO");
      sub.add_option("--max-probes", o->max_probes)->capture_default_str();
      sub.add_option("--probe-tolerance", o->probe_tolerance,
                     "stop bisecting when the bracket is this tight (relative)")
          ->capture_default_str();
      sub.add_option("--probe-window-s", o->probe_window_s,
                     "SLO probes offer at least this many seconds of arrivals (0: as many "
                     "requests as the measured run)")
          ->capture_default_str();
      sub.add_option("--probe-max-requests", o->probe_max_requests,
                     "cap on one probe's requests when --probe-window-s sizes it")
          ->capture_default_str();
      sub.add_option("--out", o->out_dir, "write report.json, CSV and PNG plots here");
      sub.add_flag("--json", o->json, "JSON on stdout instead of the table");
      return [o] {
        o->command = CommandLine();
        return Run(*o);
      };
    });

}  // namespace
}  // namespace hypic::tools::bench_trace
