// The streamed combine's plan: when the combine folds the entries that arrived (FoldPolicy) and
// how a prompt is cut into fold steps (FoldGroups). Shared by ColdCompose (model_jobs.h), the
// scatter simulator and hypic-bench, so all three fold alike. Pure functions; thread-safe.
//
// Fold steps. Counted from the end of the prompt, the groups hold 1, 1, 2, 4, 8, ... cached
// segments: the step left after the last arrival is small (the last segment and the suffix),
// and the steps are few (log2 of the segment count), since each step reads the weights once
// whatever its size. The cuts depend on the prompt alone, never on arrival times or on the
// worker count, so the folded result is the same for any worker count and any timing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace hypic::runtime {

// When the combine folds the entries that have arrived. Measured with CPU workers on all the
// cores (docs/benchmarks.md, issue 7), kWhenIdle is the best: it folds in the slack of the
// worker that finishes first, while kEager's steps slow the workers down by more than the
// steps save; kEager is for a combine with a core (or device) of its own, e.g. GPU workers.
// A folded prompt rounds differently from a one-shot Compose (< 1e-5 relative), which is what
// a request without misses runs, so only kAtEnd gives bitwise the logits of the warm path.
enum class FoldPolicy : uint8_t {
  // Each group as soon as its entries are there, competing with the workers for the cores.
  kEager = 0,
  // Ready groups only while some worker of the scheduler is idle, the rest after the last
  // arrival: the fold never competes with a worker for a core.
  kWhenIdle = 1,
  // One Compose after the last arrival (the serial combine; what a request without misses
  // always does).
  kAtEnd = 2,
};
std::string_view FoldPolicyName(FoldPolicy policy);
// Accepts "eager", "idle" and "end".
std::optional<FoldPolicy> ParseFoldPolicy(std::string_view name);

// The fold groups of a prompt of `cached.size()` parts, where `cached[i]` marks a segment
// composed from its entry: group g is parts [cuts[g], cuts[g + 1]), the last one ends at the
// end. Each group but the last ends with a cached segment. With seam 0 a group of cached
// segments alone has no live token and joins the next group.
std::vector<size_t> FoldGroups(const std::vector<bool>& cached, uint32_t seam_w);

}  // namespace hypic::runtime
