#include "tools/hypic-bench/quality_eval.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <numeric>
#include <thread>
#include <tuple>

#include "core/thread_annotations.h"
#include "gpu/cpu/compute_threads.h"
#include "tools/hypic-bench/bench_timing.h"

namespace hypic::tools {
namespace {

using model::ComposeMode;

struct PromptScore {
  bool exact = false;
  bool first = false;
  bool argmax_agree = false;
  double kl = 0;
  double answer_prob = 0;
  double seconds = 0;
};

// What the workers report: the first failure, and the prompts done (for the progress callback).
struct WorkerOutcome {
  Mutex mu;
  Status error GUARDED_BY(mu) = Status::Ok();
  size_t done GUARDED_BY(mu) = 0;
};

// Scores one composed prompt against `answer`; `reference` is full's first-token logits.
Result<PromptScore> Score(const model::Model& m, ComposedPrompt composed,
                          std::span<const uint32_t> answer, std::span<const float> reference,
                          model::ComputeDevice device) {
  const auto vocab = static_cast<size_t>(m.config().vocab_size);
  const std::span<const float> first(composed.logits);
  PromptScore s;
  const uint32_t top = Argmax(first);
  s.first = top == answer[0];
  s.argmax_agree = top == Argmax(reference);
  s.kl = KlDivergence(reference, first);
  double log_p = LogSoftmax(first)[answer[0]];
  s.exact = s.first;
  if (answer.size() > 1) {
    HYPIC_ASSIGN_OR_RETURN(auto next,
                           m.Extend(composed.state, answer.first(answer.size() - 1),
                                    {.all_logits = true, .want_state = false, .device = device}));
    for (size_t i = 0; i + 1 < answer.size(); ++i) {
      const std::span<const float> row(next.logits.data() + i * vocab, vocab);
      s.exact = s.exact && Argmax(row) == answer[i + 1];
      log_p += LogSoftmax(row)[answer[i + 1]];
    }
  }
  s.answer_prob = std::exp(log_p);
  return s;
}

std::string RunName(const QualityRun& run) {
  return fmt::format("{} at seam {}", model::ComposeModeName(run.mode), run.seam);
}

// Every run of one prompt, in `order`; scores[r] receives run r's.
Status EvaluatePrompt(const model::Model& m, const QualityPrompt& prompt,
                      const EvaluateOptions& options, std::span<const size_t> order,
                      PromptComposer& composer, std::span<PromptScore> scores) {
  composer.Start(prompt);
  std::vector<float> reference;
  for (size_t r : order) {
    const QualityRun& run = options.runs[r];
    const auto start = std::chrono::steady_clock::now();
    auto composed = composer.Compose(run);
    if (!composed.ok()) {
      return composed.status().WithContext(fmt::format("line {}: {}", prompt.line, RunName(run)));
    }
    if (r == 0) reference = composed->logits;  // full: order[0] == 0
    auto score = Score(m, std::move(composed).value(), prompt.answer, reference, options.device);
    if (!score.ok()) {
      return score.status().WithContext(
          fmt::format("line {}: {}: decoding the answer", prompt.line, RunName(run)));
    }
    scores[r] = *score;
    scores[r].seconds = SecondsSince(start);
  }
  return Status::Ok();
}

QualityRow Aggregate(const QualityRun& run, std::span<const QualityPrompt> prompts,
                     std::span<const PromptScore> scores, size_t stride, size_t column) {
  QualityRow row;
  row.run = run;
  row.n = prompts.size();
  size_t first = 0, agree = 0;
  double kl = 0, prob = 0, seconds = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const PromptScore& s = scores[i * stride + column];
    row.correct += s.exact ? 1 : 0;
    first += s.first ? 1 : 0;
    agree += s.argmax_agree ? 1 : 0;
    kl += s.kl;
    prob += s.answer_prob;
    seconds += s.seconds;
    if (const auto& ev = prompts[i].evidence) {
      EvidenceSplit& split = ev->pos < run.seam ? row.evidence_in_seam : row.evidence_outside;
      ++split.n;
      split.correct += s.exact ? 1 : 0;
    }
  }
  const auto n = static_cast<double>(row.n);
  row.accuracy = static_cast<double>(row.correct) / n;
  row.ci95 = WilsonInterval(row.correct, row.n);
  row.first_token_accuracy = static_cast<double>(first) / n;
  row.kl_mean = kl / n;
  row.argmax_agree = static_cast<double>(agree) / n;
  row.answer_prob_mean = prob / n;
  row.seconds_per_prompt = seconds / n;
  return row;
}

}  // namespace

Result<std::vector<QualityRun>> QualityRuns(const std::vector<std::string>& modes,
                                            const std::vector<uint32_t>& seams) {
  std::vector<QualityRun> runs = {{ComposeMode::kFull, 0}};
  auto add = [&](QualityRun run) {
    if (std::find(runs.begin(), runs.end(), run) == runs.end()) runs.push_back(run);
  };
  for (const std::string& name : modes) {
    HYPIC_ASSIGN_OR_RETURN(ComposeMode mode, model::ComposeModeFromName(name));
    if (mode == ComposeMode::kFull || mode == ComposeMode::kOracle) {
      add({mode, 0});
      continue;
    }
    if (seams.empty()) {
      return BadRequest(fmt::format("mode {} needs at least one seam width", name));
    }
    for (uint32_t w : seams) add({mode, w});
  }
  return runs;
}

Result<QualityResult> EvaluateQuality(const model::Model& model,
                                      std::span<const QualityPrompt> prompts,
                                      std::vector<std::unique_ptr<PromptComposer>> composers,
                                      const EvaluateOptions& options) {
  if (prompts.empty() || composers.empty() || options.runs.empty() ||
      options.runs.front() != QualityRun{ComposeMode::kFull, 0}) {
    return Internal("EvaluateQuality: needs prompts, a composer, and full at seam 0 first");
  }
  const size_t stride = options.runs.size();
  // The runs grouped by seam, full first, so that the runs sharing entries come one after the
  // other and a composer holds one set of entries at a time; oracle's come last in its group.
  std::vector<size_t> order(stride);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    auto key = [&](size_t r) {
      return std::make_tuple(r != 0, options.runs[r].seam,
                             options.runs[r].mode == ComposeMode::kOracle);
    };
    return key(a) < key(b);
  });
  std::vector<PromptScore> scores(prompts.size() * stride);
  const int workers = static_cast<int>(std::min(composers.size(), prompts.size()));
  const int budget = std::max(1, cpu::ComputeThreads() / workers);
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  WorkerOutcome outcome;
  const auto start = std::chrono::steady_clock::now();
  auto work = [&](PromptComposer& composer) {
    cpu::ScopedComputeThreads scope(budget);
    while (!failed.load()) {
      const size_t i = next.fetch_add(1);
      if (i >= prompts.size()) return;
      Status st = EvaluatePrompt(model, prompts[i], options, order, composer,
                                 std::span<PromptScore>(scores).subspan(i * stride, stride));
      MutexLock lock(&outcome.mu);
      if (!st.ok()) {
        if (!failed.exchange(true)) outcome.error = st;
        return;
      }
      ++outcome.done;
      if (options.on_progress) options.on_progress(outcome.done);
    }
  };
  std::vector<std::thread> threads;
  for (int w = 1; w < workers; ++w) threads.emplace_back(work, std::ref(*composers[w]));
  work(*composers[0]);
  for (auto& t : threads) t.join();
  {
    MutexLock lock(&outcome.mu);
    if (!outcome.error.ok()) return outcome.error;
  }

  QualityResult result;
  result.n = prompts.size();
  result.workers = workers;
  result.wall_s = SecondsSince(start);
  result.has_evidence = std::any_of(prompts.begin(), prompts.end(),
                                    [](const QualityPrompt& p) { return p.evidence.has_value(); });
  for (size_t r = 0; r < stride; ++r) {
    result.rows.push_back(Aggregate(options.runs[r], prompts, scores, stride, r));
    result.rows.back().delta_vs_full_points =
        100.0 * (result.rows.back().accuracy - result.rows.front().accuracy);
  }
  return result;
}

}  // namespace hypic::tools
