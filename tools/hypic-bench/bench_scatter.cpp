// `hypic-bench cold` and `hypic-bench scatter-sim`: the segment-parallel cold path
// (docs/benchmarks.md, "Segment-parallel cold prefill (issue 7)").
//
//   cold         measured cold TTFT of one request (default 32 segments x 1024 tokens plus a
//                suffix) through the real MissScheduler + ColdCompose with 1 and 2 CPU workers
//                (one worker = one core: the process is pinned to as many cores as workers,
//                compute threads run one per worker, and the combine shares
//                those cores), for each fold policy of the combine (eager, idle, end),
//                speedup and efficiency; and the simulator's prediction of the same runs from
//                a separate calibration, with its error.
//   scatter-sim  the simulator at scale: TTFT for 1, 2, 4, 8 workers on the uniform request
//                with the one-shot and the streamed combine, and LPT against contiguous
//                sharding and round-robin on a skewed length set, driven by per-segment prefill
//                costs and fold-step costs measured here plus a transfer model (the host copy
//                measured here, or a link bandwidth given on the command line).
#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "gpu/cpu/compute_threads.h"
#include "gpu/model/model.h"
#include "gpu/runtime/fold.h"
#include "gpu/runtime/model_jobs.h"
#include "gpu/runtime/scatter_sim.h"
#include "gpu/runtime/transport.h"
#include "tools/common/subcommand.h"

// A namespace of its own: hypic-* tools compile as unity batches (cmake/HypicTargets.cmake).
namespace hypic::tools::bench_scatter {
namespace {

using runtime::Clock;

struct Options {
  std::string model = "builtin:small";
  std::string cache_dir = ".cache/hypic-models";
  int segments = 32;
  uint32_t segment_len = 1024;
  uint32_t suffix = 32;
  uint32_t seam = 8;
  int reps = 1;
  std::vector<int> workers = {1, 2, 4, 8};
  std::vector<uint32_t> calibration = {256, 512, 1024, 2048};
  double link_gbps = 0.0;  // 0: the measured host copy, on the worker
  uint64_t seed = 1;
  double skew_sigma = 1.0;
  int skew_draws = 50;
  bool wide = true;  // cold: also time one worker with 2 compute threads
  std::vector<std::string> folds = {"eager", "idle", "end"};  // cold: fold policies measured
  bool combine_core = false;  // scatter-sim: the combine has a core of its own
  // scatter-sim, peer daemons: instance counts (a router with one local worker plus peers),
  // the network between them, and a measured TTFT of 2 instances to check the model against.
  std::vector<int> instances = {1, 2, 8, 32};
  double network_gbps = 10.0;  // gigabits per second
  double network_latency_ms = 0.1;
  double measured_two_s = 0.0;  // 0: none
};

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Restricts this thread (and the threads it starts from now on) to the first `n` CPUs it may
// use, so that P workers get exactly P cores. Returns false where that is not possible.
bool PinToCpus(int n) {
  // The CPUs the process was started with, captured before the first pin narrows them.
  static const std::optional<cpu_set_t> initial = []() -> std::optional<cpu_set_t> {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) != 0) return std::nullopt;
    return set;
  }();
  if (!initial) return false;
  const cpu_set_t& allowed = *initial;
  cpu_set_t want;
  CPU_ZERO(&want);
  int taken = 0;
  for (int c = 0; c < CPU_SETSIZE && taken < n; ++c) {
    if (CPU_ISSET(c, &allowed)) {
      CPU_SET(c, &want);
      ++taken;
    }
  }
  return taken == n && sched_setaffinity(0, sizeof(want), &want) == 0;
}

std::vector<uint32_t> RandomTokens(std::mt19937_64& gen, uint32_t n, int64_t vocab) {
  std::uniform_int_distribution<uint32_t> d(0, static_cast<uint32_t>(vocab - 1));
  std::vector<uint32_t> t(n);
  for (auto& x : t) x = d(gen);
  return t;
}

// Process CPU seconds (all threads). Beside the wall time it shows how many cores the run
// really had on a shared machine (CPU / wall).
double CpuSeconds() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

// What the simulator needs from this machine: the calibrated per-segment cost, the entry size
// per token, the host copy bandwidth and the combine time. Times are CPU seconds of the
// calling thread (one pinned core, a 1-thread compute budget): what a dedicated core pays, however
// loaded the shared machine is.
struct Calibration {
  runtime::CostCoefficients cost;
  double entry_bytes_fixed = 0.0;  // entry bytes = fixed + per_token * n
  double entry_bytes_per_token = 0.0;
  double copy_bytes_per_s = 0.0;
  double compose_s = 0.0;                           // the one-shot combine of the full request
  std::vector<runtime::FoldStep> fold;              // its streamed combine, step by step
  std::vector<std::pair<uint32_t, double>> points;  // (tokens, median seconds)
};

// Calibration = one worker on one core: pins the process to one CPU and one compute thread
// (GEMMs and row loops alike), which the caller's later runs re-set as they need.
Result<Calibration> Calibrate(const std::shared_ptr<const model::Model>& m, const Options& o) {
  PinToCpus(1);
  cpu::SetComputeThreads(1);
  Calibration cal;
  model::SegmentOptions seg;
  seg.seam_w = o.seam;
  seg.name_space = "calibration";
  std::mt19937_64 gen(o.seed + 1000);
  runtime::CostModel cost(
      runtime::CostModel::PriorFromShape(runtime::CostShapeOf(m->config()), 5e10));
  // One warm-up prefill: page faults and allocator growth are not part of a segment's cost.
  HYPIC_RETURN_IF_ERROR(
      m->SegmentPrefill(RandomTokens(gen, 128, m->config().vocab_size), seg).status());
  std::vector<std::pair<uint32_t, size_t>> sizes;
  double copy_bytes = 0.0, copy_s = 0.0;
  for (uint32_t n : o.calibration) {
    std::vector<double> cpu, wall;
    const double process0 = CpuSeconds();
    for (int r = 0; r < std::max(2, o.reps); ++r) {
      auto tokens = RandomTokens(gen, n, m->config().vocab_size);
      const auto t0 = Clock::now();
      const double c0 = runtime::ThreadCpuSeconds();
      HYPIC_ASSIGN_OR_RETURN(auto entry, m->SegmentPrefill(tokens, seg));
      cpu.push_back(runtime::ThreadCpuSeconds() - c0);
      wall.push_back(Seconds(t0, Clock::now()));
      cost.Observe(n, cpu.back());
      const double k0 = runtime::ThreadCpuSeconds();
      HYPIC_ASSIGN_OR_RETURN(auto copy, runtime::CopyEntryToHost(*entry));
      copy_s += runtime::ThreadCpuSeconds() - k0;
      copy_bytes += static_cast<double>(copy->TensorBytes());
      sizes.emplace_back(n, entry->TensorBytes());
    }
    const double process = CpuSeconds() - process0;
    double thread_sum = std::accumulate(cpu.begin(), cpu.end(), 0.0);
    cal.points.emplace_back(n, Median(cpu));
    fmt::print(
        "  calibration: {:5} tokens  CPU {:8.1f} ms ({:.0f} tokens/s), wall {:8.1f} ms, "
        "thread/process CPU {:.2f}, entry {:.2f} MiB\n",
        n, 1e3 * Median(cpu), n / Median(cpu), 1e3 * Median(wall), thread_sum / process,
        sizes.back().second / 1048576.0);
  }
  cal.cost = cost.coefficients();
  // Entry size: a least-squares line through (n, bytes).
  double sn = 0, sb = 0, snn = 0, snb = 0, k = static_cast<double>(sizes.size());
  for (auto& [tokens, bytes] : sizes) {
    const double n = tokens, b = static_cast<double>(bytes);
    sn += n, sb += b, snn += n * n, snb += n * b;
  }
  cal.entry_bytes_per_token = (k * snb - sn * sb) / std::max(1e-9, k * snn - sn * sn);
  cal.entry_bytes_fixed = (sb - cal.entry_bytes_per_token * sn) / k;
  cal.copy_bytes_per_s = copy_bytes / std::max(copy_s, 1e-9);

  // The combine of the request: Compose over `segments` cached parts (one entry reused: the
  // cost depends on the structure, not on the contents) plus the suffix.
  auto tokens = RandomTokens(gen, o.segment_len, m->config().vocab_size);
  HYPIC_ASSIGN_OR_RETURN(auto entry, m->SegmentPrefill(tokens, seg));
  std::vector<model::ComposePart> parts;
  for (int i = 0; i < o.segments; ++i) {
    model::ComposePart p;
    p.kind = model::ComposePart::Kind::kSegment;
    p.tokens = tokens;
    p.entry = entry;
    parts.push_back(std::move(p));
  }
  model::ComposePart suffix;
  suffix.tokens = RandomTokens(gen, o.suffix, m->config().vocab_size);
  parts.push_back(std::move(suffix));
  model::ComposeOptions co;
  co.seam_w = o.seam;
  std::vector<double> compose;
  for (int r = 0; r < std::max(2, o.reps); ++r) {
    const double c0 = runtime::ThreadCpuSeconds();
    HYPIC_RETURN_IF_ERROR(m->Compose(parts, co).status());
    compose.push_back(runtime::ThreadCpuSeconds() - c0);
  }
  cal.compose_s = Median(compose);
  // The streamed combine of the same request: ColdCompose's fold groups, one ComposeAfter each.
  std::vector<bool> cached(parts.size(), true);
  cached.back() = false;
  const std::vector<size_t> cuts = runtime::FoldGroups(cached, o.seam);
  std::vector<std::vector<double>> steps(cuts.size());
  for (int r = 0; r < std::max(2, o.reps); ++r) {
    model::ModelState state = m->EmptyState();
    for (size_t g = 0; g < cuts.size(); ++g) {
      const bool last = g + 1 == cuts.size();
      const size_t end = last ? parts.size() : cuts[g + 1];
      model::ComposeOptions step = co;
      step.want_logits = last;
      const double c0 = runtime::ThreadCpuSeconds();
      HYPIC_RETURN_IF_ERROR(
          m->ComposeAfter(state, std::span(parts).subspan(cuts[g], end - cuts[g]), step).status());
      steps[g].push_back(runtime::ThreadCpuSeconds() - c0);
    }
  }
  std::string shown;
  double fold_sum = 0.0;
  for (size_t g = 0; g < cuts.size(); ++g) {
    const bool last = g + 1 == cuts.size();
    // Segments are parts [0, segments): a step needs every segment before its end.
    const size_t end = last ? parts.size() : cuts[g + 1];
    cal.fold.push_back({std::min(end, static_cast<size_t>(o.segments)), Median(steps[g])});
    fold_sum += cal.fold.back().seconds;
    shown += fmt::format(" {:.0f}", 1e3 * cal.fold.back().seconds);
  }
  fmt::print(
      "  fit (CPU): {:.4f} + {:.4f} u + {:.4f} u^2 s (u = tokens/1024); entry {:.0f} + {:.0f} "
      "B/token; host copy {:.2f} GB/s; combine ({} segments + {} suffix) CPU {:.1f} ms at once, "
      "{:.1f} ms in {} fold steps (ms:{})\n",
      cal.cost.c, cal.cost.a, cal.cost.b, cal.entry_bytes_fixed, cal.entry_bytes_per_token,
      cal.copy_bytes_per_s / 1e9, o.segments, o.suffix, 1e3 * cal.compose_s, 1e3 * fold_sum,
      cal.fold.size(), shown);
  return cal;
}

double CostOf(const Calibration& cal, uint32_t n) {
  double u = n / 1024.0;
  return cal.cost.c + cal.cost.a * u + cal.cost.b * u * u;
}

std::vector<runtime::SimSegment> SimSegments(const Calibration& cal,
                                             const std::vector<uint32_t>& lengths) {
  std::vector<runtime::SimSegment> s;
  for (uint32_t n : lengths) {
    double c = CostOf(cal, n);
    s.push_back(
        {n, c, c, static_cast<size_t>(cal.entry_bytes_fixed + cal.entry_bytes_per_token * n)});
  }
  return s;
}

// `cores`: 0 = the combine on a core of its own; else workers and combine share that many.
runtime::SimOptions SimOpts(const Calibration& cal, const Options& o, int workers,
                            runtime::Policy policy, runtime::FoldPolicy fold, int cores) {
  runtime::SimOptions so;
  so.workers = workers;
  so.policy = policy;
  so.combine_s = cal.compose_s;
  if (fold != runtime::FoldPolicy::kAtEnd) so.fold = cal.fold;
  so.fold_when_idle = fold == runtime::FoldPolicy::kWhenIdle;
  so.cores = cores;
  if (o.link_gbps > 0.0) {
    so.transfer = runtime::TransferModel{10e-6, o.link_gbps * 1e9, false};
  } else {
    so.transfer = runtime::TransferModel{0.0, cal.copy_bytes_per_s, true};
  }
  return so;
}

// A skewed request: log-normal lengths in retrieval order, scaled to the uniform request's
// total, each at least the seam plus one and at most 8 times the mean.
std::vector<uint32_t> SkewedLengths(const Options& o, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal;
  std::vector<double> raw(static_cast<size_t>(o.segments));
  for (double& x : raw) x = std::exp(o.skew_sigma * normal(gen));
  const double total = static_cast<double>(o.segments) * o.segment_len;
  const double sum = std::accumulate(raw.begin(), raw.end(), 0.0);
  std::vector<uint32_t> lengths;
  for (double x : raw) {
    double n = std::clamp(x / sum * total, static_cast<double>(o.seam + 1), 8.0 * o.segment_len);
    lengths.push_back(static_cast<uint32_t>(std::lround(n)));
  }
  return lengths;
}

Result<std::shared_ptr<const model::Model>> Load(const Options& o) {
  // Line-buffered even into a file: these runs take minutes and progress should show.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  auto m = model::LoadModel(o.model, o.cache_dir);
  if (!m.ok()) return m.status().WithContext("loading " + o.model);
  fmt::print("model {} ({} layers, hidden {}, {:.1f}M params)\n", o.model,
             (*m)->config().num_layers, (*m)->config().hidden_size,
             (*m)->config().ParameterCount() / 1e6);
  return m;
}

// Peer daemons (issue 18): N instances of one worker each, one of them the router, whose
// local worker shares its core with the combine; the others send their entries back over the
// network (scripts/bench-peers.sh measures N = 2 on this machine).
void PrintPeerProjection(const Calibration& cal, const Options& o,
                         const std::vector<runtime::SimSegment>& segs) {
  fmt::print("\npeer daemons, one worker each, {} Gb/s network, {} ms latency, LPT, eager fold:\n",
             o.network_gbps, o.network_latency_ms);
  fmt::print("  {:>9} {:>10} {:>8} {:>10}\n", "instances", "TTFT ms", "speedup", "efficiency");
  double t1 = 0.0;
  for (int n : o.instances) {
    runtime::SimOptions so =
        SimOpts(cal, o, n, runtime::Policy::kLpt, runtime::FoldPolicy::kEager, /*cores=*/1);
    so.worker_models.assign(static_cast<size_t>(n), runtime::SimWorker{1.0, true});
    so.worker_models[0].remote = false;  // the router's own worker
    so.network =
        runtime::TransferModel{o.network_latency_ms * 1e-3, o.network_gbps * 1e9 / 8.0, false};
    const double ttft = runtime::SimulateCold(segs, so).ttft_s;
    if (n == 1) t1 = ttft;
    const double speedup = t1 > 0 ? t1 / ttft : 0.0;
    fmt::print("  {:>9} {:>10.1f} {:>8.2f} {:>10.3f}", n, 1e3 * ttft, speedup, speedup / n);
    if (n == 2 && o.measured_two_s > 0.0) {
      fmt::print("   measured {:.1f} ms: model error {:+.1f}%", 1e3 * o.measured_two_s,
                 100.0 * (ttft - o.measured_two_s) / o.measured_two_s);
    }
    fmt::print("\n");
  }
}

int RunSim(const Options& o) {
  auto m = Load(o);
  if (!m.ok()) {
    fmt::print(stderr, "error: {}\n", m.status().ToString());
    return kExitUnavailable;
  }
  auto cal = Calibrate(*m, o);
  if (!cal.ok()) {
    fmt::print(stderr, "error: {}\n", cal.status().ToString());
    return kExitFailure;
  }
  const std::vector<uint32_t> uniform(static_cast<size_t>(o.segments), o.segment_len);
  auto segs = SimSegments(*cal, uniform);
  // One core per worker; the combine shares them unless it has a core of its own.
  auto cores = [&](int w) { return o.combine_core ? 0 : w; };
  fmt::print("\nsimulated cold TTFT, {} x {} tokens, LPT, {}, combine {}:\n", o.segments,
             o.segment_len,
             o.link_gbps > 0 ? fmt::format("{} GB/s shared link", o.link_gbps)
                             : std::string("host copy on the worker"),
             o.combine_core ? "on a core of its own" : "sharing the workers' cores");
  fmt::print("  {:>7} {:>10} {:>10} {:>10} {:>8} {:>10}\n", "workers", "end ms", "eager ms",
             "idle ms", "speedup", "efficiency");
  double t1 = 0.0;
  bool ok = true;
  using runtime::FoldPolicy;
  for (int w : o.workers) {
    const auto at_end = runtime::SimulateCold(
        segs, SimOpts(*cal, o, w, runtime::Policy::kLpt, FoldPolicy::kAtEnd, cores(w)));
    const auto eager = runtime::SimulateCold(
        segs, SimOpts(*cal, o, w, runtime::Policy::kLpt, FoldPolicy::kEager, cores(w)));
    const auto idle = runtime::SimulateCold(
        segs, SimOpts(*cal, o, w, runtime::Policy::kLpt, FoldPolicy::kWhenIdle, cores(w)));
    // The best policy against the best 1-worker run.
    const double best = std::min({at_end.ttft_s, eager.ttft_s, idle.ttft_s});
    if (w == 1) t1 = best;
    double speedup = t1 > 0 ? t1 / best : 0.0;
    fmt::print("  {:>7} {:>10.1f} {:>10.1f} {:>10.1f} {:>8.2f} {:>10.2f}\n", w, 1e3 * at_end.ttft_s,
               1e3 * eager.ttft_s, 1e3 * idle.ttft_s, speedup, speedup / w);
    if (w == 8) ok = ok && speedup / w >= 0.75;
  }

  fmt::print("\nskewed request (log-normal sigma {}, {} segments, {} tokens in all):\n",
             o.skew_sigma, o.segments, o.segments * o.segment_len);
  auto skew = SkewedLengths(o, o.seed);
  std::string shown;
  for (uint32_t n : skew) shown += fmt::format("{} ", n);
  fmt::print("  lengths (seed {}): {}\n", o.seed, shown);
  fmt::print("  {:>7} {:>10} {:>14} {:>14} {:>12} {:>18}\n", "workers", "LPT ms", "contiguous ms",
             "round-robin ms", "contig/LPT", "mean contig/LPT");
  for (int w : o.workers) {
    if (w == 1) continue;
    // The streamed combine with the uniform request's fold-step costs (same segment count,
    // so the same groups; the steps' attention work moves with the lengths, which is ignored).
    auto ttft = [&](const std::vector<runtime::SimSegment>& sk, runtime::Policy policy) {
      return runtime::SimulateCold(sk, SimOpts(*cal, o, w, policy, FoldPolicy::kEager, cores(w)))
          .ttft_s;
    };
    auto sk = SimSegments(*cal, skew);
    double lpt = ttft(sk, runtime::Policy::kLpt);
    double cont = ttft(sk, runtime::Policy::kContiguous);
    double rr = ttft(sk, runtime::Policy::kRoundRobin);
    double ratio_sum = 0.0;
    for (int d = 0; d < o.skew_draws; ++d) {
      auto draw = SimSegments(*cal, SkewedLengths(o, o.seed + 1 + static_cast<uint64_t>(d)));
      ratio_sum += ttft(draw, runtime::Policy::kContiguous) / ttft(draw, runtime::Policy::kLpt);
    }
    fmt::print("  {:>7} {:>10.1f} {:>14.1f} {:>14.1f} {:>12.2f} {:>18.2f}\n", w, 1e3 * lpt,
               1e3 * cont, 1e3 * rr, cont / lpt, ratio_sum / o.skew_draws);
    if (w == 8) ok = ok && cont / lpt >= 1.3;
  }
  PrintPeerProjection(*cal, o, segs);
  fmt::print("\ntargets (8 workers): efficiency >= 0.75, contiguous/LPT >= 1.3: {}\n",
             ok ? "met" : "MISSED");
  return ok ? kExitOk : kExitFailure;
}

struct ColdRun {
  double wall_s = 0.0;      // measured TTFT
  double cpu_ttft_s = 0.0;  // the busiest worker's CPU time + the combine thread's CPU time
  double process_cpu_s = 0.0;
  double tail_s = 0.0;  // the combine left after the last arrival
};

// One cold request through the real scheduler with `workers` CPU workers (one core each).
Result<ColdRun> MeasureCold(const std::shared_ptr<const model::Model>& m, const Options& o,
                            int workers, int compute_threads, runtime::FoldPolicy fold, int rep) {
  HYPIC_ASSIGN_OR_RETURN(
      auto pool,
      runtime::WorkerPool::Create(runtime::PoolOptions{
          .kind = gpu::BackendKind::kCpu, .cpu_workers = workers, .cpu_threads = compute_threads}));
  runtime::HostTransport transport;
  runtime::CostModels cost(
      runtime::CostModel::PriorFromShape(runtime::CostShapeOf(m->config()), 5e10));
  runtime::MissScheduler scheduler(*pool, transport, cost, nullptr);
  std::mt19937_64 gen(o.seed + 77);  // the same prompt every run
  std::vector<model::ComposePart> parts;
  for (int i = 0; i < o.segments; ++i) {
    model::ComposePart p;
    p.kind = model::ComposePart::Kind::kSegment;
    p.tokens = RandomTokens(gen, o.segment_len, m->config().vocab_size);
    parts.push_back(std::move(p));
  }
  model::ComposePart suffix;
  suffix.tokens = RandomTokens(gen, o.suffix, m->config().vocab_size);
  parts.push_back(std::move(suffix));
  model::ComposeOptions co;
  co.seam_w = o.seam;
  model::SegmentOptions so;
  so.seam_w = o.seam;
  so.name_space = fmt::format("cold-{}-{}-{}", workers, runtime::FoldPolicyName(fold), rep);
  runtime::ColdComposeReport report;
  const double process0 = CpuSeconds();
  const double main0 = runtime::ThreadCpuSeconds();
  HYPIC_RETURN_IF_ERROR(runtime::ColdCompose(scheduler, m, std::move(parts), co, so,
                                             Clock::now() + std::chrono::hours(1), &report, fold)
                            .status());
  ColdRun run;
  run.wall_s = report.total_s;
  run.tail_s = report.compose_s;
  run.process_cpu_s = CpuSeconds() - process0;
  const auto& per_worker = report.miss.worker_cpu_s;
  run.cpu_ttft_s = *std::max_element(per_worker.begin(), per_worker.end()) +
                   (runtime::ThreadCpuSeconds() - main0);
  std::string workers_cpu;
  for (double c : per_worker) workers_cpu += fmt::format(" {:.1f}", c);
  fmt::print(
      "  {} worker(s), {} compute thread(s) in all, fold {}, rep {}: TTFT {:.1f} ms (last entry at "
      "{:.1f} ms, transfers {:.1f} ms summed, {} fold steps {:.1f} ms, combine after the last "
      "entry {:.1f} ms); worker CPU s:{}; CPU TTFT {:.1f} ms; process CPU {:.1f} s = {:.2f} "
      "cores busy\n",
      workers, compute_threads, runtime::FoldPolicyName(fold), rep, 1e3 * report.total_s,
      1e3 * report.miss.last_arrival_s, 1e3 * report.miss.transfer_s, report.fold_steps,
      1e3 * report.fold_s, 1e3 * report.compose_s, workers_cpu, 1e3 * run.cpu_ttft_s,
      run.process_cpu_s, run.process_cpu_s / report.total_s);
  return run;
}

int RunCold(const Options& o) {
  std::vector<runtime::FoldPolicy> folds;
  for (const std::string& name : o.folds) {
    auto fold = runtime::ParseFoldPolicy(name);
    if (!fold) {
      fmt::print(stderr, "error: unknown fold policy '{}' (want eager, idle or end)\n", name);
      return kExitBadInput;
    }
    folds.push_back(*fold);
  }
  auto m = Load(o);
  if (!m.ok()) {
    fmt::print(stderr, "error: {}\n", m.status().ToString());
    return kExitUnavailable;
  }
  double load[3] = {};
  if (getloadavg(load, 3) == 3)
    fmt::print("load average at start: {:.2f} {:.2f} {:.2f}\n", load[0], load[1], load[2]);
  // The simulator's inputs come from a separate calibration, so its error below is a real
  // prediction error.
  auto cal = Calibrate(*m, o);
  if (!cal.ok()) {
    fmt::print(stderr, "error: {}\n", cal.status().ToString());
    return kExitFailure;
  }
  const std::vector<uint32_t> uniform(static_cast<size_t>(o.segments), o.segment_len);
  auto segs = SimSegments(*cal, uniform);

  fmt::print("\nmeasured cold TTFT, {} x {} tokens + {} suffix, seam {}:\n", o.segments,
             o.segment_len, o.suffix, o.seam);
  auto median_run = [](std::vector<ColdRun> v) {
    std::sort(v.begin(), v.end(), [](auto& x, auto& y) { return x.wall_s < y.wall_s; });
    return v[v.size() / 2];
  };
  // runs[f][w - 1]: fold policy f with w workers. Repetitions interleave the configurations,
  // so a change in the machine's load spreads over all of them.
  std::vector<std::vector<std::vector<ColdRun>>> reps(folds.size(),
                                                      std::vector<std::vector<ColdRun>>(2));
  for (int r = 0; r < o.reps; ++r) {
    for (size_t f = 0; f < folds.size(); ++f) {
      for (int w : {1, 2}) {
        if (!PinToCpus(w)) {
          fmt::print(stderr, "error: cannot pin to {} CPUs\n", w);
          return kExitUnavailable;
        }
        auto run = MeasureCold(*m, o, w, w, folds[f], r);
        if (!run.ok()) {
          fmt::print(stderr, "error: {}\n", run.status().ToString());
          return kExitFailure;
        }
        reps[f][static_cast<size_t>(w - 1)].push_back(*run);
      }
    }
  }
  // For context: a single worker that uses both cores through 2 compute threads.
  std::vector<ColdRun> wide;
  for (int r = 0; r < (o.wide ? o.reps : 0); ++r) {
    auto run = MeasureCold(*m, o, 1, 2, folds.front(), r);
    if (!run.ok()) {
      fmt::print(stderr, "error: {}\n", run.status().ToString());
      return kExitFailure;
    }
    wide.push_back(*run);
  }
  if (getloadavg(load, 3) == 3)
    fmt::print("load average at the end: {:.2f} {:.2f} {:.2f}\n", load[0], load[1], load[2]);

  fmt::print("\n  {:>32} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}\n", "", "wall TTFT",
             "tail", "cores busy", "CPU TTFT", "simulated", "vs wall", "vs CPU");
  double t1 = std::numeric_limits<double>::infinity();
  for (size_t f = 0; f < folds.size(); ++f) t1 = std::min(t1, median_run(reps[f][0]).wall_s);
  bool ok = false;
  for (size_t f = 0; f < folds.size(); ++f) {
    for (int w : {1, 2}) {
      const ColdRun run = median_run(reps[f][static_cast<size_t>(w - 1)]);
      // The workers' cores are the process's cores: the combine shares them.
      const double sim =
          runtime::SimulateCold(segs, SimOpts(*cal, o, w, runtime::Policy::kLpt, folds[f], w))
              .ttft_s;
      fmt::print(
          "  {:>32} {:>9.1f}ms {:>9.1f}ms {:>11.2f} {:>9.1f}ms {:>9.1f}ms {:>+10.1f}% "
          "{:>+10.1f}%\n",
          fmt::format("{} worker(s), fold {}", w, runtime::FoldPolicyName(folds[f])),
          1e3 * run.wall_s, 1e3 * run.tail_s, run.process_cpu_s / run.wall_s, 1e3 * run.cpu_ttft_s,
          1e3 * sim, 100.0 * (sim - run.wall_s) / run.wall_s,
          100.0 * (sim - run.cpu_ttft_s) / run.cpu_ttft_s);
    }
  }
  if (!wide.empty()) {
    const ColdRun w = median_run(wide);
    fmt::print("  {:>32} {:>9.1f}ms {:>9.1f}ms {:>11.2f}\n", "1 worker, 2 compute threads",
               1e3 * w.wall_s, 1e3 * w.tail_s, w.process_cpu_s / w.wall_s);
  }
  fmt::print(
      "\n  2 workers against the best 1-worker run ({:.1f} ms), wall time (valid when both "
      "runs had their cores: see 'cores busy'); target >= 0.85:\n",
      1e3 * t1);
  for (size_t f = 0; f < folds.size(); ++f) {
    const double t2 = median_run(reps[f][1]).wall_s;
    const double eff = t1 / t2 / 2.0;
    ok = ok || eff >= 0.85;
    fmt::print("    fold {:<6} speedup {:.2f}x, efficiency {:.3f}\n",
               runtime::FoldPolicyName(folds[f]), t1 / t2, eff);
  }
  return ok ? kExitOk : kExitFailure;
}

void AddCommon(CLI::App& sub, Options& o) {
  sub.add_option("--model", o.model, "model directory or builtin:NAME");
  sub.add_option("--cache-dir", o.cache_dir, "where builtin models are generated");
  sub.add_option("--segments", o.segments, "segments per request")->check(CLI::Range(1, 4096));
  sub.add_option("--segment-len", o.segment_len, "tokens per segment")
      ->check(CLI::Range(16, 65536));
  sub.add_option("--suffix", o.suffix, "raw suffix tokens")->check(CLI::Range(1, 65536));
  sub.add_option("--seam", o.seam, "seam width w");
  sub.add_option("--reps", o.reps, "repetitions (medians)")->check(CLI::Range(1, 100));
  sub.add_option("--calibration", o.calibration, "segment lengths timed for the cost model")
      ->delimiter(',');
  sub.add_option("--link-gbps", o.link_gbps,
                 "simulate a shared link of this bandwidth (GB/s) instead of the host copy");
  sub.add_option("--seed", o.seed, "prompt and skew seed");
}

const bool kColdRegistered = RegisterSubcommand(
    "cold", "Measured cold TTFT with 1 and 2 CPU workers, and the simulator's error",
    [](CLI::App& sub) {
      auto o = std::make_shared<Options>();
      AddCommon(sub, *o);
      sub.add_flag("!--no-wide", o->wide, "skip the 1-worker, 2-compute-thread run");
      sub.add_option("--fold", o->folds, "fold policies of the combine (eager, idle, end)")
          ->delimiter(',');
      return [o] { return RunCold(*o); };
    });

const bool kSimRegistered = RegisterSubcommand(
    "scatter-sim", "Simulated cold TTFT for 1-8 workers and LPT against contiguous sharding",
    [](CLI::App& sub) {
      auto o = std::make_shared<Options>();
      AddCommon(sub, *o);
      sub.add_option("--workers", o->workers, "worker counts to simulate")->delimiter(',');
      sub.add_option("--skew-sigma", o->skew_sigma, "log-normal sigma of the skewed lengths");
      sub.add_option("--skew-draws", o->skew_draws, "skewed draws averaged");
      sub.add_option("--instances", o->instances,
                     "peer-daemon projection: instance counts (router + peers, one worker each)")
          ->delimiter(',');
      sub.add_option("--network-gbps", o->network_gbps,
                     "peer-daemon projection: network bandwidth, Gb/s");
      sub.add_option("--network-latency-ms", o->network_latency_ms,
                     "peer-daemon projection: one transfer's latency, ms");
      sub.add_option(
          "--measured-two-s", o->measured_two_s,
          "peer-daemon projection: measured TTFT of 2 instances (scripts/bench-peers.sh), "
          "for the model's error");
      sub.add_flag("--combine-core", o->combine_core,
                   "the combine has a core of its own (else it shares the workers' cores)");
      return [o] { return RunSim(*o); };
    });

}  // namespace
}  // namespace hypic::tools::bench_scatter
