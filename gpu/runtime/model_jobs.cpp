#include "gpu/runtime/model_jobs.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "gpu/cpu/compute_threads.h"

namespace hypic::runtime {

namespace {
double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
}  // namespace

CostShape CostShapeOf(const model::ModelConfig& c) {
  const double h = static_cast<double>(c.hidden_size);
  double macs = 0.0;
  double pair_macs = 0.0;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (c.layer_kinds[static_cast<size_t>(i)] == model::LayerKind::kLinear) {
      const double hv = static_cast<double>(c.linear_value_heads);
      const double dk = static_cast<double>(c.linear_key_dim);
      const double dv = static_cast<double>(c.linear_value_dim);
      macs += (static_cast<double>(c.conv_channels()) + hv * dv + 2 * hv) * h;  // in_proj
      macs += static_cast<double>(c.conv_channels() * c.conv_kernel);           // conv
      macs += hv * dv * h;                                                      // out_proj
      // The delta rule per token (state update and readout), plus T's running product.
      macs += hv * (3 * dk * dv + dk * dk);
    } else {
      const double hd = static_cast<double>(c.head_dim);
      macs += (2.0 * static_cast<double>(c.num_heads) + 2.0 * static_cast<double>(c.num_kv_heads)) *
              hd * h;                                            // q|gate, k, v
      macs += static_cast<double>(c.num_heads) * hd * h;         // o_proj
      pair_macs += 2.0 * static_cast<double>(c.num_heads) * hd;  // QK^T and AV
    }
    if (c.mlp_kinds[static_cast<size_t>(i)] == model::MlpKind::kMoe) {
      macs += static_cast<double>(c.num_experts) * h;  // router
      macs += 3.0 * static_cast<double>(c.experts_per_token * c.moe_intermediate_size) * h;
      macs += 3.0 * static_cast<double>(c.shared_expert_intermediate_size) * h;
    } else {
      macs += 3.0 * static_cast<double>(c.intermediate_size) * h;
    }
  }
  return CostShape{2.0 * macs, 2.0 * pair_macs};
}

PrefillJob MakeSegmentJob(std::shared_ptr<const model::Model> model, std::vector<uint32_t> tokens,
                          const model::SegmentOptions& options) {
  PrefillJob job;
  job.key =
      SegmentKey::Compute(options.name_space, model->fingerprint(), options.Settings(), tokens);
  job.n_tokens = static_cast<uint32_t>(tokens.size());
  auto segment = std::make_shared<SegmentSpec>(
      SegmentSpec{options.name_space, options.seam_w, std::move(tokens)});
  job.segment = segment;
  job.compute = [model = std::move(model), segment = std::move(segment),
                 options](const WorkerContext& ctx) -> Result<EntryPtr> {
    // The worker's share of the cores: its passes' own helper threads stay within it.
    cpu::ScopedComputeThreads threads(ctx.compute_threads);
    // On the worker's device (the key does not depend on it: entries are host values).
    model::SegmentOptions on_worker = options;
    on_worker.device = model::ComputeDevice{ctx.kind, ctx.device};
    HYPIC_ASSIGN_OR_RETURN(std::shared_ptr<SegmentEntry> entry,
                           model->SegmentPrefill(segment->tokens, on_worker));
    return EntryPtr(std::move(entry));
  };
  return job;
}

namespace {

// The streamed combine: folds the groups of `parts` in order as their entries arrive.
Result<model::ComposeResult> FoldAsTheyArrive(const model::Model& model,
                                              std::vector<model::ComposePart>& parts,
                                              const std::vector<size_t>& slots,
                                              MissRequest& request,
                                              const model::ComposeOptions& options, FoldPolicy fold,
                                              ColdComposeReport& report) {
  std::vector<bool> cached(parts.size(), false);
  for (size_t i = 0; i < parts.size(); ++i) {
    cached[i] = parts[i].kind == model::ComposePart::Kind::kSegment &&
                parts[i].tokens.size() > options.seam_w;
  }
  const std::vector<size_t> cuts = FoldGroups(cached, options.seam_w);
  model::ModelState state = model.EmptyState();
  model::ComposeResult result;
  size_t have = 0;  // misses whose entry is in `parts`
  for (size_t g = 0; g < cuts.size(); ++g) {
    const bool last = g + 1 == cuts.size();
    const size_t begin = cuts[g], end = last ? parts.size() : cuts[g + 1];
    const size_t need =
        static_cast<size_t>(std::lower_bound(slots.begin(), slots.end(), end) - slots.begin());
    HYPIC_ASSIGN_OR_RETURN(size_t arrived, request.WaitFor(need, fold == FoldPolicy::kWhenIdle));
    for (; have < arrived; ++have) parts[slots[have]].entry = request.entry(have);
    model::ComposeOptions step = options;
    step.want_logits = last && options.want_logits;
    step.want_state = false;
    // Only the last step completes the state: an earlier one's layers are not final yet.
    if (!last) step.on_layer = nullptr;
    const Clock::time_point s0 = Clock::now();
    HYPIC_ASSIGN_OR_RETURN(
        model::ComposeResult r,
        model.ComposeAfter(state, std::span(parts).subspan(begin, end - begin), step));
    report.fold_s += Since(s0);
    ++report.fold_steps;
    result.live_tokens += r.live_tokens;
    result.cached_tokens += r.cached_tokens;
    if (last) result.logits = std::move(r.logits);
  }
  if (options.want_state) result.state = std::move(state);
  return result;
}

}  // namespace

Result<model::ComposeResult> ColdCompose(MissScheduler& scheduler,
                                         const std::shared_ptr<const model::Model>& model,
                                         std::vector<model::ComposePart> parts,
                                         const model::ComposeOptions& options,
                                         const model::SegmentOptions& segment_options,
                                         Clock::time_point deadline, ColdComposeReport* report,
                                         FoldPolicy fold) {
  const Clock::time_point t0 = Clock::now();
  if (options.mode == model::ComposeMode::kOracle) {
    return BadRequest("oracle entries depend on their context and cannot be scattered");
  }
  if (segment_options.seam_w != options.seam_w) {
    return BadRequest("segment and compose seam widths differ");
  }
  std::vector<PrefillJob> jobs;
  std::vector<size_t> slots;
  if (options.mode != model::ComposeMode::kFull) {
    for (size_t i = 0; i < parts.size(); ++i) {
      const model::ComposePart& p = parts[i];
      if (p.kind == model::ComposePart::Kind::kSegment && p.entry == nullptr &&
          p.tokens.size() > options.seam_w) {
        jobs.push_back(MakeSegmentJob(model, p.tokens, segment_options));
        slots.push_back(i);
      }
    }
  }
  ColdComposeReport r;
  r.misses = jobs.size();
  model::ComposeResult result;
  // The combine computes with a CPU worker's budget: more threads than a worker's made Compose
  // 2.2x slower here while the workers ran (two against one), and more threads for the step
  // after the last arrival, when the workers are idle, did not pay either (docs/benchmarks.md,
  // issue 7).
  std::optional<cpu::ScopedComputeThreads> threads;
  if (scheduler.cpu_budget() > 0) threads.emplace(scheduler.cpu_budget());
  if (jobs.empty()) {
    const Clock::time_point t1 = Clock::now();
    HYPIC_ASSIGN_OR_RETURN(result, model->Compose(parts, options));
    r.fold_steps = 1;
    r.fold_s = r.compose_s = Since(t1);
  } else {
    const Clock::time_point submitted = Clock::now();
    HYPIC_ASSIGN_OR_RETURN(std::unique_ptr<MissRequest> request,
                           scheduler.Submit(std::move(jobs), deadline));
    if (fold == FoldPolicy::kAtEnd) {
      HYPIC_ASSIGN_OR_RETURN(std::vector<EntryPtr> entries, request->Wait());
      for (size_t j = 0; j < slots.size(); ++j) parts[slots[j]].entry = std::move(entries[j]);
      const Clock::time_point t1 = Clock::now();
      HYPIC_ASSIGN_OR_RETURN(result, model->Compose(parts, options));
      r.fold_steps = 1;
      r.fold_s = Since(t1);
    } else {
      HYPIC_ASSIGN_OR_RETURN(result,
                             FoldAsTheyArrive(*model, parts, slots, *request, options, fold, r));
    }
    r.miss = request->timings();
    // The combine left after the last entry arrived.
    r.compose_s = Since(submitted) - r.miss.last_arrival_s;
  }
  r.total_s = Since(t0);
  if (report != nullptr) *report = r;
  return result;
}

}  // namespace hypic::runtime
