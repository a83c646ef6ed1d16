// `hypic-bench linear`: the linear-attention operator figures of docs/benchmarks.md (issue 3)
// on a Qwen3-Next GDN layer shape (HV=32, H=16, dk=dv=128):
//   - chunked forward throughput without and with the construction of T_C and S(C|0)
//     ("T overhead", the operator alone);
//   - composition throughput: S <- T S + S_zero per cached segment, and Combine of two pairs;
//   - bytes per cache entry and layer, fp32 against bf16, with the state error bf16 storage
//     costs.
// Medians of --reps runs; inputs are seeded and realistic (normalised q/k, GDN-like gates).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <memory>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "gpu/cpu/compute_threads.h"
#include "gpu/cpu/gemm.h"
#include "gpu/linear/linear_attention.h"
#include "tools/common/subcommand.h"
#include "tools/hypic-bench/bench_timing.h"

// A namespace of its own: hypic-* tools compile as unity batches (cmake/HypicTargets.cmake).
namespace hypic::tools::bench_linear {
namespace {

using linear::Inputs;
using linear::Outputs;
using linear::Shape;
using linear::TransitionForm;
using linear::Variant;

struct Options {
  std::vector<int64_t> tokens = {1024, 4096};
  int key_heads = 16;
  int value_heads = 32;
  int dk = 128;
  int dv = 128;
  int chunk = linear::ChunkOptions{}.chunk_size;  // the runtime's
  int reps = 3;
  int compose_reps = 50;
  int compute_threads = 1;
};

struct Data {
  std::vector<float> q, k, v, g, beta, init;
};

Data MakeData(const Shape& s, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  Data d;
  auto fill = [&](std::vector<float>& x, int64_t n) {
    x.resize(n);
    for (auto& e : x) e = normal(gen);
  };
  fill(d.q, s.tokens * s.key_heads * s.dk);
  fill(d.k, s.tokens * s.key_heads * s.dk);
  fill(d.v, s.tokens * s.value_heads * s.dv);
  for (auto* x : {&d.q, &d.k}) {
    for (size_t r = 0; r < x->size(); r += s.dk) {
      double n = 0;
      for (int i = 0; i < s.dk; ++i) n += double{(*x)[r + i]} * (*x)[r + i];
      const float inv = static_cast<float>(1.0 / std::sqrt(n + 1e-6));
      for (int i = 0; i < s.dk; ++i) (*x)[r + i] *= inv;
    }
  }
  // GDN gates: g = -exp(A_log) softplus(.) in about [-0.7, 0], beta = sigmoid(.) in (0, 1).
  d.g.resize(s.tokens * s.value_heads);
  for (auto& e : d.g) e = -0.7f * uni(gen);
  d.beta.resize(s.tokens * s.value_heads);
  for (auto& e : d.beta) e = 1.0f / (1.0f + std::exp(-normal(gen)));
  fill(d.init, int64_t{s.value_heads} * s.dk * s.dv);
  return d;
}

// CPU seconds of the whole process: with --threads above 1, ChunkedForward splits the heads
// over that many threads, and all of it is the operator's cost. With the default 1 thread this is
// the calling thread's time; it stays meaningful on a shared, oversubscribed machine where wall
// time does not, and wall time is printed beside it.
template <typename Fn>
Timing Median(int reps, Fn&& fn) {
  return MedianTiming(reps, CpuClock::kProcess, std::forward<Fn>(fn));
}

double RelError(const std::vector<float>& x, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (double{x[i]} - ref[i]) * (double{x[i]} - ref[i]);
    den += double{ref[i]} * ref[i];
  }
  return std::sqrt(num / den);
}

std::vector<float> RoundBf16(const std::vector<float>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = Bf16ToF32(F32ToBf16(x[i]));
  return out;
}

int Run(const Options& opt) {
  cpu::SetComputeThreads(opt.compute_threads);
  fmt::print(
      "hypic-bench linear: gdn, H={} HV={} dk={} dv={}, chunk {}, median of {} (wall ms / "
      "process CPU ms), {} compute thread(s); {}\n",
      opt.key_heads, opt.value_heads, opt.dk, opt.dv, opt.chunk, opt.reps, opt.compute_threads,
      cpu::GemmSummary());
  Shape shape{0, opt.key_heads, opt.value_heads, opt.dk, opt.dv};
  const int64_t state_floats = int64_t{opt.value_heads} * opt.dk * opt.dv;
  const int64_t t_floats = linear::TransitionFloats(TransitionForm::kDense, shape);
  std::vector<float> t_seg, s_seg;  // the last segment's pair, reused for composition
  for (int64_t tokens : opt.tokens) {
    shape.tokens = tokens;
    const Data d = MakeData(shape, 7 + tokens);
    const Inputs in{d.q.data(), d.k.data(), d.v.data(), d.g.data(), d.beta.data()};
    std::vector<float> o(tokens * opt.value_heads * opt.dv), fin(state_floats), zero(state_floats),
        trans(t_floats);
    const linear::ChunkOptions co{opt.chunk};
    Status st;
    auto forward = [&](const float* init, const Outputs& out) {
      return Median(opt.reps, [&] {
        Status s = linear::ChunkedForward(Variant::kGdn, shape, in, init, out, co);
        if (!s.ok()) st = s;
      });
    };
    // The segment-alone prefill (from zero): o and final state only, then also S(C|0) (free
    // from zero) and T_C: the difference is the cost of building the cache entry's T.
    const Timing plain = forward(nullptr, Outputs{o.data(), fin.data(), nullptr, nullptr});
    const Timing with_t =
        forward(nullptr, Outputs{o.data(), fin.data(), zero.data(), trans.data()});
    // A live block in a composed request: from the running state, o and final state.
    const Timing live = forward(d.init.data(), Outputs{o.data(), fin.data(), nullptr, nullptr});
    // A segment prefill's [w, n) block (gpu/model): from the running state after the seam, o
    // and final state plus the entry's T_C and S(C|0).
    const Timing segment =
        forward(d.init.data(), Outputs{o.data(), fin.data(), zero.data(), trans.data()});
    if (!st.ok()) {
      fmt::print(stderr, "{}\n", st.ToString());
      return kExitFailure;
    }
    fmt::print("\n{} tokens:\n", tokens);
    fmt::print("  forward (o, final)            {:8.1f} / {:8.1f} ms   {:7.0f} tok/s (CPU)\n",
               plain.wall * 1e3, plain.cpu * 1e3, tokens / plain.cpu);
    fmt::print("  forward + T_C and S(C|0)      {:8.1f} / {:8.1f} ms   T overhead {:.1f}% (CPU)\n",
               with_t.wall * 1e3, with_t.cpu * 1e3, 100.0 * (with_t.cpu - plain.cpu) / plain.cpu);
    fmt::print("  forward from a running state  {:8.1f} / {:8.1f} ms\n", live.wall * 1e3,
               live.cpu * 1e3);
    fmt::print("  same + T_C and S(C|0)         {:8.1f} / {:8.1f} ms   T overhead {:.1f}% (CPU)\n",
               segment.wall * 1e3, segment.cpu * 1e3, 100.0 * (segment.cpu - live.cpu) / live.cpu);
    t_seg = trans;
    s_seg = zero;
  }

  // Composition: S <- T S + S_zero (all heads) per cached segment, and Combine.
  std::vector<float> state =
      MakeData(Shape{0, opt.key_heads, opt.value_heads, opt.dk, opt.dv}, 1).init;
  const Timing apply = Median(opt.compose_reps, [&] {
    linear::ApplyTransition(TransitionForm::kDense, shape, t_seg.data(), s_seg.data(),
                            state.data());
  });
  std::vector<float> t_out(t_floats), s_out(state_floats);
  const Timing combine = Median(opt.compose_reps, [&] {
    linear::Combine(TransitionForm::kDense, shape, t_seg.data(), s_seg.data(), t_seg.data(),
                    s_seg.data(), t_out.data(), s_out.data());
  });
  const Timing naive =
      Median(opt.compose_reps, [&] { linear::NaiveAdd(shape, s_seg.data(), state.data()); });
  fmt::print("\ncompose, one layer, all {} heads (wall / CPU ms, per CPU second):\n",
             opt.value_heads);
  fmt::print("  apply   S <- T S + S0        {:7.3f} / {:7.3f} ms   {:7.0f} /s\n", apply.wall * 1e3,
             apply.cpu * 1e3, 1.0 / apply.cpu);
  fmt::print("  combine (T2T1, T2S1+S2)      {:7.3f} / {:7.3f} ms   {:7.0f} /s\n",
             combine.wall * 1e3, combine.cpu * 1e3, 1.0 / combine.cpu);
  fmt::print("  naive   S <- S + S0          {:7.3f} / {:7.3f} ms   {:7.0f} /s\n", naive.wall * 1e3,
             naive.cpu * 1e3, 1.0 / naive.cpu);

  // Bytes per entry and layer; the error bf16 storage of T and S0 adds to one composition.
  const int conv_channels = 2 * opt.key_heads * opt.dk + opt.value_heads * opt.dv;
  const int64_t conv_floats = int64_t{3} * conv_channels;  // K-1 = 3 pre-conv rows
  const int64_t floats = t_floats + state_floats + conv_floats;
  std::vector<float> exact = state, rounded = state;
  linear::ApplyTransition(TransitionForm::kDense, shape, t_seg.data(), s_seg.data(), exact.data());
  const std::vector<float> t_bf = RoundBf16(t_seg), s_bf = RoundBf16(s_seg);
  linear::ApplyTransition(TransitionForm::kDense, shape, t_bf.data(), s_bf.data(), rounded.data());
  fmt::print("\nentry per layer (T {}x{}x{}, S0 {}x{}x{}, conv tail 3x{}):\n", opt.value_heads,
             opt.dk, opt.dk, opt.value_heads, opt.dk, opt.dv, conv_channels);
  fmt::print("  fp32 {:8.2f} MiB   bf16 {:8.2f} MiB   state error of one bf16 compose {:.2e}\n",
             floats * 4 / 1048576.0, floats * 2 / 1048576.0, RelError(rounded, exact));
  return kExitOk;
}

const bool kRegistered = RegisterSubcommand(
    "linear", "Linear-attention operators: chunked forward, T overhead, composition, bytes",
    [](CLI::App& sub) -> Action {
      auto opt = std::make_shared<Options>();
      sub.add_option("--tokens", opt->tokens, "Segment lengths")->delimiter(',');
      sub.add_option("--key-heads", opt->key_heads, "H");
      sub.add_option("--value-heads", opt->value_heads, "HV");
      sub.add_option("--dk", opt->dk, "Key head dim");
      sub.add_option("--dv", opt->dv, "Value head dim");
      sub.add_option("--chunk", opt->chunk, "Chunk size (16, 32, 64)");
      sub.add_option("--reps", opt->reps, "Timed runs per figure (median)");
      sub.add_option("--threads", opt->compute_threads,
                     "Compute threads; ChunkedForward splits its heads over them");
      return [opt] { return Run(*opt); };
    });

}  // namespace
}  // namespace hypic::tools::bench_linear
