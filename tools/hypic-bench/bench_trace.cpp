// `hypic-bench trace`: a RAG-like request stream (trace_workload.h) driven side by side through
// every mode, same trace and seed, in one run (issue 8):
//   full    COMPOSE mode full on hypicd (no cache: every token is prefilled)
//   prefix  the prefix-cache baseline (gpu/model/prefix_cache.h), run IN THIS PROCESS on the
//           same model: hypicd does not serve it (it is a baseline, not a product mode); its
//           concurrency is capped at the daemon's compute workers so it gets no more compute
//   naive   COMPOSE mode naive on hypicd (PIC, states added without T)
//   hypic   COMPOSE mode hypic on hypicd
// Per mode: with --prewarm every initial document is first cached on its own (what an operator's
// corpus warm-up gives each kind of cache); the first --warmup requests run one by one,
// untimed, so each cache learns from the same traffic; then the measured requests run open loop
// (trace_driver.h) at --qps with TTFT timed from each request's scheduled start. --slo-ms then
// searches the highest offered QPS whose p99 TTFT meets the SLO; each probe serves a fresh window
// of as many requests as the measured run, from the same trace, since replaying the measured
// requests would hand the prefix cache exact repeats (caches stay warm between probes, as in
// steady state). Each daemon mode uses its own namespace, so no mode reuses another's entries.
//
// Output: a table (stdout), --json, and with --out DIR: report.json, CSV files and gnuplot PNGs.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "client/client.h"
#include "core/thread_annotations.h"
#include "gpu/model/model.h"
#include "gpu/model/prefix_cache.h"
#include "protocol/messages.h"
#include "tools/common/subcommand.h"
#include "tools/hypic-bench/trace_driver.h"
#include "tools/hypic-bench/trace_report.h"
#include "tools/hypic-bench/trace_stats.h"
#include "tools/hypic-bench/trace_workload.h"
#include "tools/hypicctl/connection_options.h"
#include "tools/hypicctl/daemon.h"

namespace hypic::tools {
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
  std::string model = "builtin:small";
  std::string model_cache_dir = "/tmp/hypic-models";
  uint64_t prefix_capacity = uint64_t{8} << 30;
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
};

// One way of serving a request: hypicd in a given mode, or the in-process prefix cache.
class Target {
 public:
  virtual ~Target() = default;
  // Serves `req` from `worker` (0 <= worker < workers) and blocks until its logits are in.
  virtual Status Serve(size_t worker, const TraceRequest& req, Outcome* out) = 0;
  // Caches every document of the initial corpus on its own, as an operator's corpus warm-up
  // (hypicctl warm) would: segment entries for the PIC modes, a one-document prefix
  // checkpoint for the prefix cache.
  virtual Status Prewarm(const Trace& trace) = 0;
};

class DaemonTarget : public Target {
 public:
  static Result<std::unique_ptr<DaemonTarget>> Open(const Options& opts, protocol::ComposeMode mode,
                                                    const Trace& trace, std::string name_space) {
    auto t = std::unique_ptr<DaemonTarget>(new DaemonTarget(mode, trace, std::move(name_space)));
    for (size_t w = 0; w < opts.workers; ++w) {
      HYPIC_ASSIGN_OR_RETURN(auto c, ConnectDaemon(opts.conn, "hypic-bench-trace", false));
      t->clients_.push_back(std::move(c));
    }
    return t;
  }

  Status Serve(size_t worker, const TraceRequest& req, Outcome* out) override {
    protocol::ComposeRequest request;
    request.name_space = name_space_;
    request.mode = mode_;
    request.top_k = 1;
    for (uint32_t d : req.docs) {
      protocol::ComposePart p;
      p.kind = protocol::PartKind::kSegmentTokens;
      p.tokens = trace_.corpus[d];
      request.parts.push_back(std::move(p));
    }
    protocol::ComposePart q;
    q.kind = protocol::PartKind::kRaw;
    q.tokens = req.query;
    request.parts.push_back(std::move(q));
    HYPIC_ASSIGN_OR_RETURN(protocol::ComposeReply reply, clients_[worker]->Compose(request));
    // Wire bytes: the 64-byte header plus the encoded body, each way.
    out->bytes_sent += protocol::kHeaderSize + protocol::Encode(request).size();
    out->bytes_received += protocol::kHeaderSize + protocol::Encode(reply).size();
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

  Status Prewarm(const Trace& trace) override {
    constexpr size_t kBatch = 8;
    for (uint32_t d = 0; d < trace.initial_docs; d += kBatch) {
      protocol::PrefillRequest req;
      req.name_space = name_space_;
      for (uint32_t i = d; i < std::min<uint32_t>(trace.initial_docs, d + kBatch); ++i) {
        req.segments.push_back(trace.corpus[i]);
      }
      HYPIC_RETURN_IF_ERROR(clients_[0]->Prefill(req).status());
    }
    return Status::Ok();
  }

 private:
  DaemonTarget(protocol::ComposeMode mode, const Trace& trace, std::string name_space)
      : mode_(mode), trace_(trace), name_space_(std::move(name_space)) {}

  protocol::ComposeMode mode_;
  const Trace& trace_;
  std::string name_space_;
  std::vector<std::unique_ptr<client::Client>> clients_;  // one per worker
};

// A counting semaphore (C++20's needs a compile-time bound; this one is set at run time).
class Slots {
 public:
  explicit Slots(size_t n) : free_(n) {}
  void Acquire() {
    std::unique_lock<Mutex> lock(mu_);
    cv_.wait(lock, [&]() REQUIRES(mu_) { return free_ > 0; });
    --free_;
  }
  void Release() {
    {
      MutexLock lock(&mu_);
      ++free_;
    }
    cv_.notify_one();
  }

 private:
  Mutex mu_;
  std::condition_variable_any cv_;
  size_t free_ GUARDED_BY(mu_);
};

class PrefixTarget : public Target {
 public:
  PrefixTarget(std::shared_ptr<const model::Model> model, uint64_t capacity, size_t compute_slots,
               const Trace& trace)
      : cache_(std::move(model), {.capacity_bytes = capacity}),
        slots_(compute_slots),
        trace_(trace) {}

  Status Serve(size_t /*worker*/, const TraceRequest& req, Outcome* out) override {
    std::vector<model::ComposePart> parts;
    for (uint32_t d : req.docs) {
      model::ComposePart p;
      p.kind = model::ComposePart::Kind::kSegment;
      p.tokens = trace_.corpus[d];
      parts.push_back(std::move(p));
    }
    model::ComposePart q;
    q.tokens = req.query;
    parts.push_back(std::move(q));
    slots_.Acquire();  // no more concurrent passes than the daemon runs
    auto r = cache_.Run("trace", parts);
    slots_.Release();
    if (!r.ok()) return r.status();
    out->parts["prefix:reused"] += r->reused_parts;
    out->parts["prefix:computed"] += req.docs.size() - std::min(req.docs.size(), r->reused_parts);
    out->parts["live"] += 1;  // the query
    out->reused_tokens += static_cast<uint64_t>(r->reused_tokens);
    return Status::Ok();
  }

  Status Prewarm(const Trace& trace) override {
    // The last part of a Run is never checkpointed (it yields the logits), so each document
    // is followed by one throw-away token.
    std::vector<model::ComposePart> parts(2);
    parts[1].tokens = {1};
    for (uint32_t d = 0; d < trace.initial_docs; ++d) {
      parts[0].kind = model::ComposePart::Kind::kSegment;
      parts[0].tokens = trace.corpus[d];
      HYPIC_RETURN_IF_ERROR(cache_.Run("trace", parts).status());
    }
    return Status::Ok();
  }

 private:
  model::PrefixCache cache_;
  Slots slots_;
  const Trace& trace_;
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
// measured one is due at once, and fills `run` (timings, outcomes).
void RunMeasured(Target& target, const Trace& trace, size_t first, size_t n, size_t workers,
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
  double last_done = 0;
  Status first_error;
  for (size_t i = 0; i < n; ++i) {
    run->ttft_s.push_back(timings[i].Latency());
    if (timings[i].completed) last_done = std::max(last_done, timings[i].done_s);
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

Result<ModeRun> RunMode(const Options& opts, const std::string& mode, Trace& trace,
                        Target& target) {
  ModeRun run;
  run.mode = mode;
  if (mode == "prefix") run.note = "in-process prefix cache, same model and compute slots";
  // The trace holds the warm-up, the measured window, then one fresh window per SLO probe:
  // replaying the measured requests would hand the prefix cache exact repeats.
  const size_t warm = std::min<size_t>(opts.warmup, opts.trace.n_requests - 1);
  const size_t measured = opts.trace.n_requests - warm;
  if (mode != "full" && opts.prewarm) HYPIC_RETURN_IF_ERROR(target.Prewarm(trace));
  if (mode != "full") {
    for (size_t i = 0; i < warm; ++i) {
      Outcome ignored;
      HYPIC_RETURN_IF_ERROR(
          target.Serve(0, trace.requests[i], &ignored).WithContext(mode + " warm-up"));
    }
  }
  const double abort_after = opts.slo_ms > 0 ? 10 * opts.slo_ms / 1000.0 : 0.0;
  RunMeasured(target, trace, warm, measured, opts.workers, abort_after, &run);
  fmt::print(stderr, "hypic-bench trace: {:<6} p50 {:.0f} ms, p99 {:.0f} ms at {:.3g} qps\n", mode,
             run.ttft.p50 * 1000, run.ttft.p99 * 1000, trace.config.qps);

  if (opts.slo_ms > 0) {
    const double slo_s = opts.slo_ms / 1000.0;
    // Start near the rate one worker sustains at the measured median.
    const double start = std::isfinite(run.ttft.p50) && run.ttft.p50 > 0
                             ? std::max(0.01, 0.5 / run.ttft.p50)
                             : trace.config.qps;
    const double base_qps = trace.config.qps;
    size_t window = 0;
    auto probe = [&](double qps) -> Result<double> {
      RescaleArrivals(trace, qps);
      ModeRun p;
      p.mode = mode;
      ++window;
      RunMeasured(target, trace, warm + window * measured, measured, opts.workers, 10 * slo_s, &p);
      fmt::print(stderr, "hypic-bench trace: {:<6} probe {:.3g} qps: p99 {:.0f} ms\n", mode, qps,
                 p.ttft.p99 * 1000);
      return p.ttft.p99;
    };
    auto search = SearchSustainableQps(start, slo_s, opts.max_probes, opts.probe_tolerance, probe);
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

int Run(const Options& opts) {
  TraceConfig trace_config = opts.trace;
  if (opts.slo_ms > 0) {
    const uint32_t warm = std::min<uint32_t>(opts.warmup, trace_config.n_requests - 1);
    trace_config.n_requests +=
        (trace_config.n_requests - warm) * static_cast<uint32_t>(opts.max_probes);
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
  // How many compute passes the daemon runs at once (its CONFIG, when we may read it).
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
  report.warmup_requests = std::min<uint32_t>(opts.warmup, opts.trace.n_requests - 1);
  report.slo_s = opts.slo_ms / 1000.0;
  report.prewarm = opts.prewarm;
  const std::string nonce =
      fmt::format("{:x}", std::chrono::system_clock::now().time_since_epoch().count());
  for (const auto& mode : modes) {
    std::unique_ptr<Target> target;
    if (mode == "prefix") {
      auto model = model::LoadModel(opts.model, opts.model_cache_dir);
      if (!model.ok()) {
        fmt::print(stderr, "hypic-bench trace: prefix: {}\n", model.status().ToString());
        return kExitFailure;
      }
      if ((*model)->config().vocab_size < static_cast<int64_t>(opts.trace.vocab)) {
        fmt::print(stderr, "hypic-bench trace: --vocab {} exceeds the model's {}\n",
                   opts.trace.vocab, (*model)->config().vocab_size);
        return kExitBadInput;
      }
      target = std::make_unique<PrefixTarget>(*model, opts.prefix_capacity, compute_slots, *trace);
    } else {
      const auto cm = mode == "full"    ? protocol::ComposeMode::kFull
                      : mode == "naive" ? protocol::ComposeMode::kNaive
                                        : protocol::ComposeMode::kHypic;
      auto t = DaemonTarget::Open(opts, cm, *trace, fmt::format("trace-{}-{}", mode, nonce));
      if (!t.ok()) {
        return ReportFailure("hypic-bench trace", opts.conn, "connect", t.status(),
                             FailurePhase::kConnect);
      }
      target = std::move(t).value();
    }
    auto run = RunMode(opts, mode, *trace, *target);
    if (!run.ok()) {
      fmt::print(stderr, "hypic-bench trace: {}: {}\n", mode, run.status().ToString());
      return kExitFailure;
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
      sub.add_option("--model", o->model, "the daemon's model, for the in-process prefix cache")
          ->capture_default_str();
      sub.add_option("--model-cache-dir", o->model_cache_dir)->capture_default_str();
      sub.add_option("--prefix-capacity", o->prefix_capacity, "prefix-cache bytes")
          ->transform(CLI::AsSizeValue(false));
      sub.add_option("--out", o->out_dir, "write report.json, CSV and PNG plots here");
      sub.add_flag("--json", o->json, "JSON on stdout instead of the table");
      return [o] {
        o->command = CommandLine();
        return Run(*o);
      };
    });

}  // namespace
}  // namespace hypic::tools
