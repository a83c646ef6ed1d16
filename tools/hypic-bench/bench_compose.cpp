// `hypic-bench compose`: the model-runtime figures of docs/benchmarks.md (issue 4). One process,
// one run, every mode side by side on the same prompt of N segments and a raw suffix:
//   - per mode (full, naive, hypic, oracle): median TTFT of the compose (entries are prefilled
//     first, untimed), speedup against full, KL(full || mode), top-1 agreement and max |dlogit|
//     of the last token;
//   - SegmentPrefill (building T, S(C|0)) and a plain state-only prefill of the same segment,
//     run in turns -> the T overhead in percent (the median of the per-pair ratios);
//   - entry bytes per segment;
//   - full-prefill tokens/s and GFLOP/s against the fp32 and bf16 GEMM peaks measured in the
//     same run (gemm_peak.h);
//   - per --entry-dtype (docs/entry-precision.md): entry bytes, the hypic compose's TTFT,
//     KL(full || hypic), KL against the compose from f32 entries, top-1 agreement, and the
//     relative error of the composed state (S of the first linear layer alone, then S, conv and
//     K/V of every layer) against the compose from f32 entries.
//
//   hypic-bench compose --model DIR|builtin:small [--segments 16] [--segment-len 1024]
//       [--suffix 32] [--seam 8] [--modes full,naive,hypic,oracle] [--reps 3] [--full-reps N]
//       [--pause-ms N] [--json]
//       [--device cpu|cuda[:N]] [--weights-dtype auto|bf16|f32]
//       [--entry-dtype SPEC ...]   (repeatable; the modes use the first; SPEC as in
//                                   EntryDTypes::Parse, e.g. bf16 or t=f32,s=f32,conv=f32,kv=bf16)
// Every pass runs on --device (exit 2 when CUDA is not built or the device is absent); the
// GEMM peaks are always the CPU's. On CUDA the CPU-time columns are the host's share only.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "gpu/cpu/compute_threads.h"
#include "gpu/model/cpu_attention.h"
#include "gpu/model/model.h"
#include "tools/common/subcommand.h"
#include "tools/hypic-bench/bench_timing.h"
#include "tools/hypic-bench/gemm_peak.h"
#include "tools/hypic-bench/quality_metrics.h"

// A namespace of its own: hypic-* tools compile as unity batches (cmake/HypicTargets.cmake).
namespace hypic::tools::bench_compose {
namespace {

using model::ComposeMode;
using model::ComposePart;
using Json = nlohmann::json;

struct Options {
  std::string model = "builtin:small";
  std::string cache_dir = "/tmp/hypic-models";
  int segments = 16;
  int segment_len = 1024;
  int suffix = 32;
  uint32_t seam = 8;
  std::string modes = "full,naive,hypic,oracle";
  int reps = 3;
  int full_reps = 0;   // the reference full prefill's repetitions; 0: reps
  int t_segments = 4;  // segments timed for the T overhead
  int pause_ms = 0;    // idle before each timed prefill and compose
  uint64_t seed = 1;
  int threads = 0;  // 0: the hardware's
  bool json = false;
  std::string device = "cpu";
  std::string weights_dtype = "auto";
  std::vector<std::string> entry_dtypes = {"f32"};
};

// Process CPU seconds (all threads) beside wall time: on a shared, oversubscribed machine the
// CPU figure is the stable one; both are reported. Each run after pause_ms of idle (--pause-ms).
template <typename Fn>
Timing Median(int reps, int pause_ms, Fn&& fn) {
  return MedianTiming(reps, CpuClock::kProcess, std::forward<Fn>(fn),
                      std::chrono::milliseconds(pause_ms));
}

// Matmul FLOPs of a full prefill of T tokens with last-row logits, as the pass computes them:
// every projection, the routed and shared experts and causal attention (QK and PV over the
// causal pairs) for every row of every layer but the last, whose output only the last row
// needs (Pass::OutputRows: there its K/V or GDN input projection covers every row, its
// attention, output projection and MLP the last row), and the lm_head of one row. The
// recurrence, conv and elementwise work are not counted.
double PrefillFlops(const model::ModelConfig& c, double T) {
  const double h = static_cast<double>(c.hidden_size);
  double flops = 2 * h * static_cast<double>(c.vocab_size);
  for (int64_t li = 0; li < c.num_layers; ++li) {
    const double out = li + 1 == c.num_layers ? 1.0 : T;  // rows whose output is computed
    if (c.layer_kinds[static_cast<size_t>(li)] == model::LayerKind::kLinear) {
      const double cin =
          static_cast<double>(c.conv_channels() + c.value_width() + 2 * c.linear_value_heads);
      flops += 2 * h * (cin * T + static_cast<double>(c.value_width()) * out);
    } else {
      const double hd = static_cast<double>(c.head_dim), nh = static_cast<double>(c.num_heads);
      const double kv = static_cast<double>(c.num_kv_heads);
      flops += 2 * h * hd * ((2 * nh + 2 * kv) * T + nh * out);  // in_proj (q, gate, k, v), o
      // Row r attends r + 1 keys: the last `out` rows of T.
      flops += 4.0 * hd * nh * (T * (T + 1) / 2 - (T - out) * (T - out + 1) / 2);
    }
    if (c.mlp_kinds[static_cast<size_t>(li)] == model::MlpKind::kMoe) {
      flops += out * (2 * h * static_cast<double>(c.num_experts) +
                      6 * h *
                          static_cast<double>(c.experts_per_token * c.moe_intermediate_size +
                                              c.shared_expert_intermediate_size));
    } else {
      flops += out * 6 * h * static_cast<double>(c.intermediate_size);
    }
  }
  return flops;
}

struct ModeResult {
  ComposeMode mode = ComposeMode::kFull;
  Timing ttft;
  double kl = 0;
  bool top1 = false;
  double max_dlogit = 0;
  int64_t live = 0, cached = 0;
};

// ||a - b|| / ||b|| (Frobenius) over one field of every layer of two states.
double RelError(const model::ModelState& a, const model::ModelState& b,
                UninitializedVector<float> model::LayerState::*field) {
  double diff = 0, ref = 0;
  for (size_t li = 0; li < a.layers.size() && li < b.layers.size(); ++li) {
    const auto& x = a.layers[li].*field;
    const auto& y = b.layers[li].*field;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      const double d = static_cast<double>(x[i]) - y[i];
      diff += d * d;
      ref += static_cast<double>(y[i]) * y[i];
    }
  }
  return ref > 0 ? std::sqrt(diff / ref) : std::sqrt(diff);
}

struct PrecisionResult {
  EntryDTypes dtypes;
  size_t entry_bytes = 0;  // tensor bytes of the first segment's entry
  Timing ttft;             // hypic compose
  double kl = 0;           // KL(full || hypic)
  double kl_f32 = 0;       // KL(hypic from f32 entries || hypic from these)
  bool top1 = false;
  double state_err = 0, conv_err = 0, kv_err = 0;  // against the compose from f32 entries
  // S of the first linear layer only: its inputs do not depend on the entries, so this is the
  // rounding error of the compose itself (T_i S + S_i), without its propagation through layers.
  double state0_err = 0;
};

int Run(const Options& opt) {
  if (opt.threads > 0) cpu::SetComputeThreads(opt.threads);
  auto device = model::ParseComputeDevice(opt.device);
  Status device_ok = device.ok() ? model::CheckComputeDevice(*device) : device.status();
  if (!device_ok.ok()) {
    fmt::print(stderr, "hypic-bench compose: --device: {}\n", device_ok.ToString());
    return kExitBadInput;
  }
  const model::ComputeDevice dev = *device;
  const auto weights = model::ParseWeightsDType(opt.weights_dtype);
  if (!weights) {
    fmt::print(stderr, "hypic-bench compose: --weights-dtype: '{}' is not auto, bf16 or f32\n",
               opt.weights_dtype);
    return kExitBadInput;
  }
  std::vector<EntryDTypes> entry_dtypes;
  for (const std::string& spec : opt.entry_dtypes) {
    auto d = EntryDTypes::Parse(spec);
    if (!d.ok()) {
      fmt::print(stderr, "hypic-bench compose: --entry-dtype: {}\n", d.status().message());
      return kExitBadInput;
    }
    entry_dtypes.push_back(*d);
  }
  if (entry_dtypes.empty()) entry_dtypes.push_back({});
  auto loaded = model::LoadModel(opt.model, opt.cache_dir, {.weights = *weights});
  if (!loaded.ok()) {
    fmt::print(stderr, "hypic-bench compose: {}\n", loaded.status().ToString());
    return kExitBadInput;
  }
  const model::Model& m = **loaded;
  std::vector<ComposeMode> modes;
  std::stringstream ss(opt.modes);
  for (std::string name; std::getline(ss, name, ',');) {
    auto mode = model::ComposeModeFromName(name);
    if (!mode.ok()) {
      fmt::print(stderr, "hypic-bench compose: --modes: {}\n", mode.status().message());
      return kExitBadInput;
    }
    modes.push_back(*mode);
  }
  if (opt.segments < 1 || opt.segment_len < 1 || opt.suffix < 1 || opt.reps < 1 ||
      opt.full_reps < 0 || opt.pause_ms < 0) {
    fmt::print(stderr,
               "hypic-bench compose: --segments, --segment-len, --suffix, --reps must be >= 1, "
               "--full-reps, --pause-ms >= 0\n");
    return kExitBadInput;
  }
  const int full_reps = opt.full_reps > 0 ? opt.full_reps : opt.reps;

  std::mt19937_64 gen(opt.seed);
  std::uniform_int_distribution<uint32_t> tok(0, static_cast<uint32_t>(m.config().vocab_size - 1));
  auto tokens = [&](int n) {
    std::vector<uint32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = tok(gen);
    return t;
  };
  std::vector<ComposePart> prompt;
  for (int i = 0; i < opt.segments; ++i) {
    prompt.push_back({ComposePart::Kind::kSegment, tokens(opt.segment_len), nullptr});
  }
  prompt.push_back({ComposePart::Kind::kRaw, tokens(opt.suffix), nullptr});
  const int64_t total = int64_t{opt.segments} * opt.segment_len + opt.suffix;
  const model::SegmentOptions seg_opts{
      .seam_w = opt.seam, .device = dev, .entry_dtypes = entry_dtypes.front()};
  auto fail = [](const Status& s) {
    fmt::print(stderr, "hypic-bench compose: {}\n", s.ToString());
    return kExitFailure;
  };

  if (!opt.json) {
    fmt::print(
        "hypic-bench compose: {} ({} params, {} weights: {:.1f} MiB resident, {:.1f} MiB "
        "checkpoint), {} x {} tokens + {} suffix = {} tokens, seam {}, entries {}, {} threads, "
        "device {}, median of {} (full prefill: {}){}\n",
        opt.model, m.config().ParameterCount(), DTypeName(m.weights_dtype()),
        m.resident_weight_bytes() / 1048576.0, m.checkpoint_bytes() / 1048576.0, opt.segments,
        opt.segment_len, opt.suffix, total, opt.seam, entry_dtypes.front().ToString(),
        cpu::ComputeThreads(), model::ComputeDeviceName(dev), opt.reps, full_reps,
        opt.pause_ms > 0 ? fmt::format(", each after {} ms idle", opt.pause_ms) : "");
  }
  const GemmPeaks peaks = MeasureGemmPeaks();
  const char* attention =
      model::AttentionKernelName(m.config().head_dim, m.weights_dtype() == DType::kBF16);
  if (!opt.json) fmt::print("gemm: {}; attention: {}\n", peaks.kernels, attention);

  // The reference: full prefill (always run, every other mode is compared with it).
  std::vector<float> full_logits;
  int full_runs = 0;  // reported as full_reps: the runs made, not the option read back
  const Timing full = Median(full_reps, opt.pause_ms, [&] {
    ++full_runs;
    auto r = m.Compose(prompt, {.mode = ComposeMode::kFull, .seam_w = opt.seam, .device = dev});
    if (r.ok()) full_logits = std::move(r->logits);
  });
  if (full_logits.empty()) return fail(Internal("full prefill failed"));

  // Entries: position-independent (naive, hypic) and in-context (oracle), untimed.
  std::vector<ComposePart> pic = prompt, oracle = prompt;
  size_t entry_bytes = 0;
  for (ComposeMode mode : modes) {
    if (mode == ComposeMode::kOracle && oracle.front().entry == nullptr) {
      Status st = m.PrefillEntries(oracle, ComposeMode::kOracle, seg_opts);
      if (!st.ok()) return fail(st);
    } else if ((mode == ComposeMode::kHypic || mode == ComposeMode::kNaive) &&
               pic.front().entry == nullptr) {
      Status st = m.PrefillEntries(pic, ComposeMode::kHypic, seg_opts);
      if (!st.ok()) return fail(st);
      entry_bytes = pic.front().entry->TensorBytes();
    }
  }

  std::vector<ModeResult> results;
  for (ComposeMode mode : modes) {
    ModeResult r;
    r.mode = mode;
    if (mode == ComposeMode::kFull) {
      r.ttft = full;
      r.top1 = true;
      r.live = total;
      results.push_back(r);
      continue;
    }
    const auto& parts = mode == ComposeMode::kOracle ? oracle : pic;
    std::vector<float> logits;
    Status st;
    r.ttft = Median(opt.reps, opt.pause_ms, [&] {
      auto c = m.Compose(parts, {.mode = mode, .seam_w = opt.seam, .device = dev});
      st = c.status();
      if (c.ok()) {
        logits = std::move(c->logits);
        r.live = c->live_tokens;
        r.cached = c->cached_tokens;
      }
    });
    if (!st.ok()) return fail(st);
    r.kl = KlDivergence(full_logits, logits);
    r.top1 = std::max_element(logits.begin(), logits.end()) - logits.begin() ==
             std::max_element(full_logits.begin(), full_logits.end()) - full_logits.begin();
    for (size_t i = 0; i < logits.size(); ++i) {
      r.max_dlogit =
          std::max(r.max_dlogit, static_cast<double>(std::abs(logits[i] - full_logits[i])));
    }
    results.push_back(r);
  }

  // T overhead: SegmentPrefill (with T and S(C|0)) against a plain prefill of the same tokens,
  // run in turns (RunInTurns, at least 9 pairs per segment) so that both see the same machine:
  // the median of the per-pair ratios. `plain` and `with_t` sum the per-segment medians. The
  // plain prefill makes the state without logits, as the segment prefill makes its entry
  // without them: both skip the last layer's output (Pass::OutputRows), so the difference is
  // the capture's alone.
  const int t_segs = std::min(opt.t_segments, opt.segments);
  Timing plain, with_t;
  std::vector<Timing> plain_runs, with_t_runs;
  for (int i = 0; i < t_segs; ++i) {
    const auto& seg = prompt[static_cast<size_t>(i)].tokens;
    std::vector<Timing> p, t;
    RunInTurns(
        std::max(opt.reps, 9), CpuClock::kProcess,
        [&] {
          (void)m.Compose(std::vector<ComposePart>{{ComposePart::Kind::kRaw, seg, nullptr}},
                          {.mode = ComposeMode::kFull, .want_logits = false, .device = dev});
        },
        [&] { (void)m.SegmentPrefill(seg, seg_opts); }, &p, &t);
    plain += MedianOfRuns(p);
    with_t += MedianOfRuns(t);
    plain_runs.insert(plain_runs.end(), p.begin(), p.end());
    with_t_runs.insert(with_t_runs.end(), t.begin(), t.end());
  }
  // --t-segments 0 skips the measurement (nothing is reported for it).
  const Timing t_overhead = t_segs > 0 ? PairedOverheadPct(plain_runs, with_t_runs) : Timing{};
  const double t_overhead_cpu = t_overhead.cpu;
  const double t_overhead_wall = t_overhead.wall;
  // Entry precision: per --entry-dtype, entries prefilled in that precision and composed
  // (hypic), against full and against the compose from f32 entries.
  std::vector<PrecisionResult> precision;
  model::ModelState f32_state;
  std::vector<float> f32_logits;
  size_t f32_entry_bytes = 0;
  {
    auto compose_state = [&](const std::vector<ComposePart>& parts) {
      return m.Compose(
          parts,
          {.mode = ComposeMode::kHypic, .seam_w = opt.seam, .want_state = true, .device = dev});
    };
    size_t first_linear = 0;
    while (first_linear + 1 < m.config().layer_kinds.size() &&
           m.config().layer_kinds[first_linear] != model::LayerKind::kLinear) {
      ++first_linear;
    }
    std::vector<ComposePart> parts = prompt;
    Status st = m.PrefillEntries(parts, ComposeMode::kHypic, {.seam_w = opt.seam, .device = dev});
    if (!st.ok()) return fail(st);
    auto ref = compose_state(parts);
    if (!ref.ok()) return fail(ref.status());
    f32_state = std::move(ref->state);
    f32_logits = std::move(ref->logits);
    f32_entry_bytes = parts.front().entry->TensorBytes();
    for (const EntryDTypes& d : entry_dtypes) {
      PrecisionResult p;
      p.dtypes = d;
      parts = prompt;
      st = m.PrefillEntries(parts, ComposeMode::kHypic,
                            {.seam_w = opt.seam, .device = dev, .entry_dtypes = d});
      if (!st.ok()) return fail(st);
      p.entry_bytes = parts.front().entry->TensorBytes();
      std::vector<float> logits;
      p.ttft = Median(opt.reps, opt.pause_ms, [&] {
        auto c = m.Compose(parts, {.mode = ComposeMode::kHypic, .seam_w = opt.seam, .device = dev});
        st = c.status();
        if (c.ok()) logits = std::move(c->logits);
      });
      if (!st.ok()) return fail(st);
      p.kl = KlDivergence(full_logits, logits);
      p.kl_f32 = KlDivergence(f32_logits, logits);
      p.top1 = std::max_element(logits.begin(), logits.end()) - logits.begin() ==
               std::max_element(full_logits.begin(), full_logits.end()) - full_logits.begin();
      auto composed = compose_state(parts);
      if (!composed.ok()) return fail(composed.status());
      const model::ModelState& state = composed->state;
      p.state_err = RelError(state, f32_state, &model::LayerState::state);
      p.conv_err = RelError(state, f32_state, &model::LayerState::conv);
      p.kv_err = std::hypot(RelError(state, f32_state, &model::LayerState::k),
                            RelError(state, f32_state, &model::LayerState::v)) /
                 std::sqrt(2.0);
      model::ModelState a, b;
      a.layers = {state.layers[first_linear]};
      b.layers = {f32_state.layers[first_linear]};
      p.state0_err = RelError(a, b, &model::LayerState::state);
      precision.push_back(p);
    }
  }

  const double flops = PrefillFlops(m.config(), static_cast<double>(total));
  const Timing gflops{flops / full.wall / 1e9, flops / full.cpu / 1e9};

  if (opt.json) {
    Json j;
    j["model"] = opt.model;
    j["parameters"] = m.config().ParameterCount();
    j["segments"] = opt.segments;
    j["segment_len"] = opt.segment_len;
    j["suffix"] = opt.suffix;
    j["seam"] = opt.seam;
    j["tokens"] = total;
    j["reps"] = opt.reps;
    j["full_reps"] = full_runs;
    j["pause_ms"] = opt.pause_ms;
    j["threads"] = cpu::ComputeThreads();
    j["gemm"] = peaks.kernels;
    j["attention_kernel"] = attention;
    j["device"] = model::ComputeDeviceName(dev);
    j["weights_dtype"] = DTypeName(m.weights_dtype());
    j["resident_weight_bytes"] = m.resident_weight_bytes();
    j["checkpoint_bytes"] = m.checkpoint_bytes();
    j["entry_dtype"] = entry_dtypes.front().ToString();
    for (const PrecisionResult& p : precision) {
      j["entry_precision"].push_back({{"entry_dtype", p.dtypes.ToString()},
                                      {"entry_bytes_per_segment", p.entry_bytes},
                                      {"bytes_vs_f32", static_cast<double>(p.entry_bytes) /
                                                           static_cast<double>(f32_entry_bytes)},
                                      {"hypic_ttft_ms", p.ttft.wall * 1e3},
                                      {"kl_vs_full", p.kl},
                                      {"kl_vs_f32_entries", p.kl_f32},
                                      {"top1_agrees", p.top1},
                                      {"state_rel_err_vs_f32", p.state_err},
                                      {"first_linear_state_rel_err_vs_f32", p.state0_err},
                                      {"conv_rel_err_vs_f32", p.conv_err},
                                      {"kv_rel_err_vs_f32", p.kv_err}});
    }
    for (const ModeResult& r : results) {
      j["modes"][std::string(model::ComposeModeName(r.mode))] = {
          {"ttft_ms", r.ttft.wall * 1e3},
          {"ttft_cpu_ms", r.ttft.cpu * 1e3},
          {"speedup_vs_full", full.wall / r.ttft.wall},
          {"speedup_vs_full_cpu", full.cpu / r.ttft.cpu},
          {"kl_vs_full", r.kl},
          {"top1_agrees", r.top1},
          {"max_abs_dlogit", r.max_dlogit},
          {"live_tokens", r.live},
          {"cached_tokens", r.cached}};
    }
    if (t_segs > 0) {
      j["segment_prefill_ms"] = {{"plain", plain.wall / t_segs * 1e3},
                                 {"with_t", with_t.wall / t_segs * 1e3},
                                 {"plain_cpu", plain.cpu / t_segs * 1e3},
                                 {"with_t_cpu", with_t.cpu / t_segs * 1e3}};
      j["t_overhead_pct"] = t_overhead_wall;
      j["t_overhead_cpu_pct"] = t_overhead_cpu;
    }
    j["entry_bytes_per_segment"] = entry_bytes;
    j["full_prefill"] = {{"tokens_per_s", static_cast<double>(total) / full.wall},
                         {"tokens_per_cpu_s", static_cast<double>(total) / full.cpu},
                         {"gflops", gflops.wall},
                         {"gflops_per_cpu_s", gflops.cpu},
                         {"f32_gemm_peak_gflops", peaks.f32.wall},
                         {"bf16_gemm_peak_gflops", peaks.bf16.wall},
                         {"f32_gemm_peak_gflops_per_cpu_s", peaks.f32.cpu},
                         {"bf16_gemm_peak_gflops_per_cpu_s", peaks.bf16.cpu},
                         {"fraction_of_f32_peak", gflops.wall / peaks.f32.wall},
                         {"fraction_of_bf16_peak", gflops.wall / peaks.bf16.wall}};
    fmt::print("{}\n", j.dump(2));
    return kExitOk;
  }
  fmt::print("{:<8} {:>10} {:>10} {:>9} {:>9} {:>11} {:>5} {:>11} {:>7} {:>7}\n", "mode", "TTFT ms",
             "CPU ms", "speedup", "(CPU)", "KL vs full", "top1", "max|dlogit|", "live", "cached");
  for (const ModeResult& r : results) {
    fmt::print(
        "{:<8} {:>10.1f} {:>10.1f} {:>8.1f}x {:>8.1f}x {:>11.3e} {:>5} {:>11.3e} {:>7} {:>7}\n",
        model::ComposeModeName(r.mode), r.ttft.wall * 1e3, r.ttft.cpu * 1e3,
        full.wall / r.ttft.wall, full.cpu / r.ttft.cpu, r.kl, r.top1 ? "yes" : "no", r.max_dlogit,
        r.live, r.cached);
  }
  if (t_segs > 0) {
    fmt::print(
        "segment prefill ({} x {} tokens): plain {:.1f} ms ({:.1f} CPU), with T {:.1f} ms "
        "({:.1f} CPU) -> T overhead {:.1f}% wall, {:.1f}% CPU\n",
        t_segs, opt.segment_len, plain.wall / t_segs * 1e3, plain.cpu / t_segs * 1e3,
        with_t.wall / t_segs * 1e3, with_t.cpu / t_segs * 1e3, t_overhead_wall, t_overhead_cpu);
  }
  fmt::print("entry bytes per segment: {} ({:.2f} MiB)\n", entry_bytes, entry_bytes / 1048576.0);
  fmt::print("entry precision (hypic; errors of the composed state against f32 entries):\n");
  fmt::print("{:<32} {:>12} {:>6} {:>9} {:>11} {:>11} {:>5} {:>10} {:>10} {:>10} {:>10}\n",
             "entry dtypes", "bytes/entry", "vs f32", "TTFT ms", "KL vs full", "KL vs f32", "top1",
             "S rel L0", "S rel", "conv rel", "K/V rel");
  for (const PrecisionResult& p : precision) {
    fmt::print(
        "{:<32} {:>12} {:>6.3f} {:>9.1f} {:>11.3e} {:>11.3e} {:>5} {:>10.2e} {:>10.2e} {:>10.2e} "
        "{:>10.2e}\n",
        p.dtypes.ToString(), p.entry_bytes,
        static_cast<double>(p.entry_bytes) / static_cast<double>(f32_entry_bytes),
        p.ttft.wall * 1e3, p.kl, p.kl_f32, p.top1 ? "yes" : "no", p.state0_err, p.state_err,
        p.conv_err, p.kv_err);
  }
  fmt::print(
      "full prefill: {:.0f} tokens/s ({:.0f} per CPU-s), {:.1f} GFLOP/s = {:.0f}% of the f32 "
      "GEMM peak {:.1f} GFLOP/s, {:.0f}% of the bf16 peak {:.1f} (per CPU-s {:.1f}: {:.0f}% / "
      "{:.0f}%)\n",
      static_cast<double>(total) / full.wall, static_cast<double>(total) / full.cpu, gflops.wall,
      100.0 * gflops.wall / peaks.f32.wall, peaks.f32.wall, 100.0 * gflops.wall / peaks.bf16.wall,
      peaks.bf16.wall, gflops.cpu, 100.0 * gflops.cpu / peaks.f32.cpu,
      100.0 * gflops.cpu / peaks.bf16.cpu);
  return kExitOk;
}

const bool kRegistered = RegisterSubcommand(
    "compose", "Full prefill vs PIC compose (naive, hypic, oracle) on one prompt",
    [](CLI::App& sub) -> Action {
      auto opt = std::make_shared<Options>();
      sub.add_option("--model", opt->model, "Model directory or builtin:NAME")
          ->capture_default_str();
      sub.add_option("--cache-dir", opt->cache_dir, "Where builtin models are generated")
          ->capture_default_str();
      sub.add_option("--segments", opt->segments, "Cached segments")->capture_default_str();
      sub.add_option("--segment-len", opt->segment_len, "Tokens per segment")
          ->capture_default_str();
      sub.add_option("--suffix", opt->suffix, "Raw query tokens")->capture_default_str();
      sub.add_option("--seam", opt->seam, "Seam window w")->capture_default_str();
      sub.add_option("--modes", opt->modes, "Comma-separated modes")->capture_default_str();
      sub.add_option("--reps", opt->reps, "Repetitions (median)")->capture_default_str();
      sub.add_option("--full-reps", opt->full_reps,
                     "Repetitions of the reference full prefill; 0: --reps (fewer lets a "
                     "profile of the compose modes see mostly composes)")
          ->capture_default_str();
      sub.add_option("--t-segments", opt->t_segments, "Segments timed for the T overhead")
          ->capture_default_str();
      sub.add_option("--pause-ms", opt->pause_ms,
                     "Idle before each timed full prefill and compose (not timed): the latency "
                     "of requests that reach an idle process; 0: back to back")
          ->capture_default_str();
      sub.add_option("--seed", opt->seed, "Token seed")->capture_default_str();
      sub.add_option("--threads", opt->threads, "Compute threads (GEMMs and kernels); 0: all")
          ->capture_default_str();
      sub.add_flag("--json", opt->json, "Print one JSON object");
      sub.add_option("--device", opt->device, "cpu, cuda or cuda:N")->capture_default_str();
      sub.add_option("--weights-dtype", opt->weights_dtype,
                     "Resident GEMM weights: auto (a bf16 checkpoint stays bf16), bf16 or f32")
          ->capture_default_str();
      sub.add_option("--entry-dtype", opt->entry_dtypes,
                     "Entry dtypes per tensor kind, e.g. bf16 or t=f32,s=f32,conv=f32,kv=bf16; "
                     "repeat to compare several (the modes use the first)")
          ->capture_default_str();
      return [opt] { return Run(*opt); };
    });

}  // namespace
}  // namespace hypic::tools::bench_compose
