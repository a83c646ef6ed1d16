// The evaluation of `hypic-bench quality` (docs/quality.md): every prompt of a data set under
// every run (mode and seam width), scored against its expected answer, then one row per run.
//
// Per prompt and run: compose (a PromptComposer), then check the greedy continuation against
// the answer in one teacher-forced pass: greedy decoding yields the answer exactly when, at
// every step, the argmax after the answer's previous tokens is the answer's next token, so one
// Model::Extend over answer[0 .. n-2] with every row's logits gives the exact match, the
// first-token match and the probability of the answer together. KL(full || run) and the argmax
// agreement are of the first answer token's distribution (the last prompt token's logits).
//
// Prompts run in parallel on `workers` threads, each with its own composer and an equal share of
// the compute threads; the scores are kept per prompt, so the rows never depend on the
// scheduling. Thread-safety: EvaluateQuality is a free function; the progress callback is
// called under a lock, from the worker threads.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "gpu/model/model.h"
#include "tools/hypic-bench/quality_composer.h"
#include "tools/hypic-bench/quality_data.h"
#include "tools/hypic-bench/quality_metrics.h"

namespace hypic::tools {

// Accuracy over the prompts whose evidence lies inside (or outside) the first w tokens of its
// segment, w being the run's seam.
struct EvidenceSplit {
  size_t n = 0;
  size_t correct = 0;
  double Accuracy() const { return n == 0 ? 0.0 : static_cast<double>(correct) / n; }
};

struct QualityRow {
  QualityRun run;
  size_t n = 0;
  size_t correct = 0;               // exact matches of the whole answer
  double accuracy = 0;              // correct / n
  Interval ci95;                    // Wilson, of accuracy
  double first_token_accuracy = 0;  // the first answer token matched
  double delta_vs_full_points = 0;  // 100 * (accuracy - full's accuracy)
  double kl_mean = 0;               // mean KL(full || run), nats, first answer token
  double argmax_agree = 0;          // fraction whose first argmax is full's
  double answer_prob_mean = 0;      // mean probability of the whole answer under this run
  double seconds_per_prompt = 0;    // mean wall time of compose + scoring
  EvidenceSplit evidence_in_seam;   // prompts with evidence fields only
  EvidenceSplit evidence_outside;
};

struct QualityResult {
  size_t n = 0;               // prompts
  bool has_evidence = false;  // some prompt names its evidence
  int workers = 1;
  double wall_s = 0;             // the whole evaluation
  std::vector<QualityRow> rows;  // in the order of the runs
};

// The runs for `modes` and `seams`: full first (the reference, always run), then each mode in the
// given order, full and oracle once at w = 0, naive and hypic once per seam. kBadRequest for an
// unknown mode, or no seams while naive or hypic are asked for.
[[nodiscard]] Result<std::vector<QualityRun>> QualityRuns(const std::vector<std::string>& modes,
                                                          const std::vector<uint32_t>& seams);

struct EvaluateOptions {
  std::vector<QualityRun> runs;      // REQUIRES: runs[0] is full at seam 0 (QualityRuns)
  model::ComputeDevice device = {};  // where the scoring pass runs
  std::function<void(size_t prompts_done)> on_progress;
};

// REQUIRES: composers non-empty (one per worker), prompts valid for `model` (ReadQualityData
// with its vocabulary). The first failure stops the evaluation and is returned with the
// prompt's line and the run.
[[nodiscard]] Result<QualityResult> EvaluateQuality(
    const model::Model& model, std::span<const QualityPrompt> prompts,
    std::vector<std::unique_ptr<PromptComposer>> composers, const EvaluateOptions& options);

}  // namespace hypic::tools
