// The cold path on the real model (tiny preset): scattering the misses over P workers and
// folding them as they arrive gives bitwise the same logits as one worker, and within float
// rounding those of prefilling the entries in place and composing at once; concurrent
// cold requests sharing segments prefill each segment once, and errors reach the caller; a
// per-layer state callback hears from the last fold step only.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

#include "gpu/cpu/compute_threads.h"
#include "gpu/model/generator.h"
#include "gpu/runtime/model_jobs.h"
#include "tests/support/check_ok.h"
#include "tests/support/seeded_rng.h"

namespace hypic::runtime {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<const model::Model> TinyModel() {
  auto config = model::PresetConfig("tiny");
  REQUIRE_OK(config);
  model::ModelWeights weights = model::GenerateWeights(*config, 7);
  return std::make_shared<const model::Model>(*config, std::move(weights), Hash128{3, 4});
}

model::ComposePart Part(model::ComposePart::Kind kind, std::vector<uint32_t> tokens) {
  model::ComposePart p;
  p.kind = kind;
  p.tokens = std::move(tokens);
  return p;
}

// A prompt: raw prefix, `lengths` segments, raw suffix.
std::vector<model::ComposePart> Prompt(const model::Model& m, std::vector<uint32_t> lengths,
                                       uint64_t seed) {
  testing::SeededRng rng(seed);
  const auto vocab = static_cast<uint32_t>(m.config().vocab_size);
  std::vector<model::ComposePart> parts;
  parts.push_back(Part(model::ComposePart::Kind::kRaw, rng.Tokens(5, vocab)));
  for (uint32_t n : lengths)
    parts.push_back(Part(model::ComposePart::Kind::kSegment, rng.Tokens(n, vocab)));
  parts.push_back(Part(model::ComposePart::Kind::kRaw, rng.Tokens(4, vocab)));
  return parts;
}

struct Rig {
  explicit Rig(int workers, int threads = 2)
      : pool(MakePool(workers, threads)),
        cost(CostCoefficients{1e-4, 0.05, 0.0}),
        scheduler(*pool, transport, cost, [this](const EntryPtr& e) {
          std::lock_guard<std::mutex> lock(mu);
          stored.insert(e->key());
          ++store_calls;
        }) {}
  static std::unique_ptr<WorkerPool> MakePool(int workers, int threads) {
    auto pool = WorkerPool::Create(PoolOptions{
        .kind = gpu::BackendKind::kCpu, .cpu_workers = workers, .cpu_threads = threads});
    REQUIRE_OK(pool);
    return std::move(pool).value();
  }
  int StoreCalls() {
    std::lock_guard<std::mutex> lock(mu);
    return store_calls;
  }
  size_t StoredKeys() {
    std::lock_guard<std::mutex> lock(mu);
    return stored.size();
  }

  std::unique_ptr<WorkerPool> pool;
  HostTransport transport;
  CostModels cost;
  std::mutex mu;
  std::set<SegmentKey> stored;
  int store_calls = 0;
  MissScheduler scheduler;
};

model::ComposeOptions Hypic() {
  model::ComposeOptions o;
  o.mode = model::ComposeMode::kHypic;
  o.seam_w = 4;
  return o;
}
model::SegmentOptions Seg() {
  // Aggregate initialisation: assigning the literal trips GCC 12's false -Wrestrict.
  return model::SegmentOptions{4, 1, "tenant"};
}

// Max |a - b| over max |b|.
double RelDiff(std::span<const float> a, std::span<const float> b) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

TEST_CASE("fold groups hold 1, 1, 2, 4, ... cached segments counted from the end") {
  // A raw prefix, ten cached segments, a raw suffix.
  std::vector<bool> cached(12, true);
  cached[0] = cached[11] = false;
  // Groups: [raw, s1, s2] [s3..s6] [s7, s8] [s9] [s10, suffix].
  CHECK(FoldGroups(cached, 8) == std::vector<size_t>{0, 3, 7, 9, 10});
  CHECK(FoldGroups({false}, 8) == std::vector<size_t>{0});
  CHECK(FoldGroups({true}, 8) == std::vector<size_t>{0});
  CHECK(FoldGroups({true, true, false}, 8) == std::vector<size_t>{0, 1});
  // Seam 0: cached segments run no token, so a group of them alone joins the next one.
  CHECK(FoldGroups({true, true, true, false}, 0) == std::vector<size_t>{0});
  CHECK(FoldGroups({false, true, true, true, false}, 0) == std::vector<size_t>{0, 2});
}

TEST_CASE("a cold compose over P workers gives bitwise the logits of one worker") {
  auto m = TinyModel();
  // Skewed lengths, one shorter than the seam (it runs live and is no miss).
  const std::vector<uint32_t> lengths{70, 12, 33, 3, 48, 20, 9};
  auto prompt = Prompt(*m, lengths, 5);

  // Reference: entries prefilled in place, then composed in one shot.
  auto direct = prompt;
  CHECK_OK(m->PrefillEntries(direct, model::ComposeMode::kHypic, Seg()));
  auto expect = m->Compose(direct, Hypic());
  REQUIRE_OK(expect);

  // (workers, compute threads in all). GEMM sums may depend on the thread count, so runs are
  // bitwise equal at the same per-worker budget (1 thread), and equal to within float
  // rounding otherwise. The streamed folds (eager, idle) cut the prompt into the same groups
  // whatever the worker count and the arrival order, so they agree bitwise with each other;
  // the one-shot combine (end) rounds differently.
  std::vector<float> streamed;
  for (auto [workers, threads] : {std::pair{1, 1}, std::pair{3, 3}, std::pair{1, 2}}) {
    for (FoldPolicy fold : {FoldPolicy::kEager, FoldPolicy::kWhenIdle, FoldPolicy::kAtEnd}) {
      CAPTURE(workers);
      CAPTURE(threads);
      CAPTURE(FoldPolicyName(fold));
      Rig rig(workers, threads);
      ColdComposeReport report;
      auto got =
          ColdCompose(rig.scheduler, m, prompt, Hypic(), Seg(), Clock::now() + 60s, &report, fold);
      REQUIRE_OK(got);
      REQUIRE(got->logits.size() == expect->logits.size());
      CHECK(RelDiff(got->logits, expect->logits) < 1e-5);
      CHECK(got->live_tokens == expect->live_tokens);
      CHECK(got->cached_tokens == expect->cached_tokens);
      if (fold == FoldPolicy::kAtEnd) {
        CHECK(report.fold_steps == 1);
      } else {
        // 6 cached segments: groups of 2 (with the raw prefix), 2, 1, 1 (with the suffix).
        CHECK(report.fold_steps == 4);
        if (streamed.empty()) {
          streamed = got->logits;
        } else if (threads == workers) {
          CHECK(std::memcmp(got->logits.data(), streamed.data(), streamed.size() * sizeof(float)) ==
                0);
        }
      }
      CHECK(report.misses == lengths.size() - 1);
      CHECK(report.miss.started == report.misses);
      CHECK(report.total_s >= report.compose_s);
      CHECK(rig.StoreCalls() == static_cast<int>(report.misses));
    }
  }
}

TEST_CASE("the streamed combine returns the composed state; a warm request composes at once") {
  auto m = TinyModel();
  Rig rig(2);
  // The direct Compose runs at a worker's budget, as the warm path below does (GEMM sums may
  // depend on the thread count).
  cpu::ScopedComputeThreads budget(rig.scheduler.cpu_budget());
  auto prompt = Prompt(*m, {30, 25, 40}, 6);
  int64_t tokens = 0;
  for (const auto& p : prompt) tokens += static_cast<int64_t>(p.tokens.size());
  model::ComposeOptions with_state = Hypic();
  with_state.want_state = true;
  auto direct = prompt;
  CHECK_OK(m->PrefillEntries(direct, model::ComposeMode::kHypic, Seg()));
  auto expect = m->Compose(direct, with_state);
  REQUIRE_OK(expect);
  ColdComposeReport report;
  auto cold = ColdCompose(rig.scheduler, m, prompt, with_state, Seg(), Clock::now() + 60s, &report,
                          FoldPolicy::kWhenIdle);
  REQUIRE_OK(cold);
  CHECK(report.fold_steps == 3);
  CHECK(cold->state.n_positions == tokens);
  REQUIRE(cold->state.layers.size() == expect->state.layers.size());
  for (size_t l = 0; l < cold->state.layers.size(); ++l) {
    const auto& a = cold->state.layers[l];
    const auto& b = expect->state.layers[l];
    CHECK(RelDiff(a.state, b.state) < 1e-5);
    CHECK(RelDiff(a.k, b.k) < 1e-5);
  }
  // Every entry cached now: no misses, one Compose, bitwise the direct one.
  ColdComposeReport warm_report;
  auto warm =
      ColdCompose(rig.scheduler, m, direct, Hypic(), Seg(), Clock::now() + 60s, &warm_report);
  REQUIRE_OK(warm);
  CHECK(warm_report.misses == 0);
  CHECK(warm_report.fold_steps == 1);
  CHECK(std::memcmp(warm->logits.data(), expect->logits.data(),
                    expect->logits.size() * sizeof(float)) == 0);
}

TEST_CASE("a cold compose hands over each layer once, from the last fold step only") {
  auto m = TinyModel();
  Rig rig(2);
  cpu::ScopedComputeThreads budget(rig.scheduler.cpu_budget());
  const auto prompt = Prompt(*m, {30, 25, 40, 18}, 6);
  for (FoldPolicy fold : {FoldPolicy::kEager, FoldPolicy::kWhenIdle, FoldPolicy::kAtEnd}) {
    CAPTURE(FoldPolicyName(fold));
    model::ComposeOptions o = Hypic();
    o.want_state = true;
    std::vector<uint32_t> layers;
    std::vector<std::vector<float>> first;  // each layer's first tensor (S or K)
    o.on_layer = [&](uint32_t layer, std::span<const model::StateTensorView> tensors) {
      layers.push_back(layer);
      const auto* f = static_cast<const float*>(tensors[0].data);
      first.emplace_back(f, f + tensors[0].shape.NumElements());
      return Status::Ok();
    };
    ColdComposeReport report;
    auto cold = ColdCompose(rig.scheduler, m, prompt, o, Seg(), Clock::now() + 60s, &report, fold);
    REQUIRE_OK(cold);
    CHECK(report.misses == 4);  // the prompt's parts carry no entries: every segment misses
    CHECK(report.fold_steps == (fold == FoldPolicy::kAtEnd ? 1u : 3u));
    // An earlier fold emitting would show as more calls, or layers out of order.
    std::vector<uint32_t> want(static_cast<size_t>(m->config().num_layers));
    std::iota(want.begin(), want.end(), 0u);
    CHECK(layers == want);
    REQUIRE(first.size() == want.size());
    for (size_t l = 0; l < first.size(); ++l) {
      CAPTURE(l);
      const model::LayerState& ls = cold->state.layers[l];
      CHECK(std::ranges::equal(
          first[l], m->config().layer_kinds[l] == model::LayerKind::kLinear ? ls.state : ls.k));
    }
  }
}

TEST_CASE("the segment options' entry dtypes reach the jobs: their key, their entries") {
  auto m = TinyModel();
  Rig rig(2);
  cpu::ScopedComputeThreads budget(rig.scheduler.cpu_budget());
  model::SegmentOptions low = Seg();
  low.entry_dtypes = {DType::kF32, DType::kBF16, DType::kF16, DType::kBF16};
  auto prompt = Prompt(*m, {30, 25}, 9);
  const auto& tokens = prompt[1].tokens;
  auto entry = m->SegmentPrefill(tokens, low);
  REQUIRE_OK(entry);
  CHECK(MakeSegmentJob(m, tokens, low).key == (*entry)->key());
  CHECK(MakeSegmentJob(m, tokens, Seg()).key != (*entry)->key());

  // Cold (prefilled by the workers) and in place: the same entries, bitwise the same logits.
  auto direct = prompt;
  CHECK_OK(m->PrefillEntries(direct, model::ComposeMode::kHypic, low));
  auto expect = m->Compose(direct, Hypic());
  REQUIRE_OK(expect);
  auto cold = ColdCompose(rig.scheduler, m, prompt, Hypic(), low, Clock::now() + 60s);
  REQUIRE_OK(cold);
  CHECK(std::memcmp(cold->logits.data(), expect->logits.data(),
                    expect->logits.size() * sizeof(float)) == 0);
  CHECK(rig.StoredKeys() == 2);
}

TEST_CASE("GPU workers: one per CUDA device, prefilling on their device, match the CPU workers") {
  auto cuda = WorkerPool::Create(
      PoolOptions{.kind = gpu::BackendKind::kCuda, .cpu_workers = 0, .cpu_threads = 1});
  if (cuda.status().code() == StatusCode::kUnsupported) {
    MESSAGE("skipped: no CUDA device");
    return;
  }
  REQUIRE_OK(cuda);
  auto m = TinyModel();
  auto prompt = Prompt(*m, {70, 33, 48, 20}, 8);
  Rig cpu(1, 1);
  auto expect = ColdCompose(cpu.scheduler, m, prompt, Hypic(), Seg(), Clock::now() + 60s);
  REQUIRE_OK(expect);
  HostTransport transport;
  CostModels cost(CostCoefficients{1e-4, 0.05, 0.0});
  MissScheduler scheduler(**cuda, transport, cost, nullptr);
  ColdComposeReport report;
  auto got = ColdCompose(scheduler, m, prompt, Hypic(), Seg(), Clock::now() + 60s, &report,
                         FoldPolicy::kEager);
  REQUIRE_OK(got);
  CHECK(report.misses == 4);
  // The CUDA passes match the CPU's within 1e-4 relative (gpu/model's conformance bound).
  CHECK(RelDiff(got->logits, expect->logits) < 1e-4);
}

// A job that holds its worker until the test opens the gate.
class Gate {
 public:
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  PrefillJob Job(uint64_t id) {
    PrefillJob job;
    job.key = SegmentKey(Hash128{id, 0});
    job.cost = 1.0;
    job.compute = [this, key = job.key](const WorkerContext&) -> Result<EntryPtr> {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return open_; });
      EntryMeta meta;
      meta.key = key;
      return EntryPtr(std::make_shared<SegmentEntry>(meta));
    };
    return job;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

TEST_CASE("concurrent cold requests sharing segments prefill each segment once") {
  auto m = TinyModel();
  Rig rig(2);
  // Both workers are held, so every request is submitted while the shared misses are queued.
  Gate gate;
  auto held = rig.scheduler.Submit({gate.Job(1), gate.Job(2)}, Clock::now() + 60s);
  REQUIRE_OK(held);
  auto shared = Prompt(*m, {40, 24, 16}, 9);
  constexpr int kRequests = 4;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  std::vector<std::vector<float>> logits(kRequests);
  for (int r = 0; r < kRequests; ++r) {
    threads.emplace_back([&, r] {
      auto prompt = shared;
      // Each request adds one segment of its own.
      prompt.insert(prompt.end() - 1, Part(model::ComposePart::Kind::kSegment,
                                           std::vector<uint32_t>(10 + r, 7u + r)));
      auto got = ColdCompose(rig.scheduler, m, prompt, Hypic(), Seg(), Clock::now() + 60s);
      if (got.ok()) {
        logits[r] = got->logits;
        ++ok;
      }
    });
  }
  // 3 shared + 4 own segments queued; the other 3 requests joined the 3 shared ones.
  // (The two gate jobs leave the queue once the workers pick them up.)
  auto settled = [&] {
    SchedulerStats st = rig.scheduler.stats();
    return st.jobs_joined == 3 * (kRequests - 1) && st.queued == 3 + kRequests;
  };
  for (int i = 0; i < 10000 && !settled(); ++i) std::this_thread::sleep_for(1ms);
  CHECK(rig.scheduler.stats().queued == 3 + kRequests);
  gate.Open();
  for (auto& t : threads) t.join();
  REQUIRE_OK((*held)->Wait());
  CHECK(ok == kRequests);
  // Each segment computed and stored exactly once (+ the two gate jobs).
  CHECK(rig.StoreCalls() == 2 + 3 + kRequests);
  CHECK(rig.StoredKeys() == 2 + 3 + kRequests);
  CHECK(rig.scheduler.stats().prefills_ok == 2 + 3 + kRequests);
  CHECK(rig.scheduler.stats().jobs_joined == 3 * (kRequests - 1));
}

TEST_CASE("cold compose errors: bad tokens fail as COMPUTE_FAILED, oracle is refused") {
  auto m = TinyModel();
  Rig rig(2);
  auto prompt = Prompt(*m, {20, 20}, 3);
  prompt[1].tokens[7] = static_cast<uint32_t>(m->config().vocab_size) + 5;  // out of vocabulary
  auto bad = ColdCompose(rig.scheduler, m, prompt, Hypic(), Seg(), Clock::now() + 60s);
  CHECK(bad.status().code() == StatusCode::kComputeFailed);
  CHECK(rig.StoredKeys() <= 1);  // only the good segment may have been stored
  model::ComposeOptions oracle = Hypic();
  oracle.mode = model::ComposeMode::kOracle;
  CHECK(ColdCompose(rig.scheduler, m, Prompt(*m, {20}, 4), oracle, Seg(), Clock::now() + 60s)
            .status()
            .code() == StatusCode::kBadRequest);
}

TEST_CASE("the cost shape counts active parameters and attention pairs") {
  auto m = TinyModel();
  CostShape shape = CostShapeOf(m->config());
  CHECK(shape.flops_per_token > 0.0);
  CHECK(shape.flops_per_token < 2.0 * static_cast<double>(m->config().ParameterCount()));
  const auto& c = m->config();
  int64_t attention_layers = c.num_layers - c.num_linear_layers();
  CHECK(shape.flops_per_token_pair ==
        doctest::Approx(4.0 * static_cast<double>(attention_layers * c.num_heads * c.head_dim)));
}

}  // namespace
}  // namespace hypic::runtime
