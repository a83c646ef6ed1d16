#include "gpu/runtime/fold.h"

#include <algorithm>

namespace hypic::runtime {

std::string_view FoldPolicyName(FoldPolicy policy) {
  switch (policy) {
    case FoldPolicy::kEager: return "eager";
    case FoldPolicy::kWhenIdle: return "idle";
    case FoldPolicy::kAtEnd: return "end";
  }
  return "?";
}

std::optional<FoldPolicy> ParseFoldPolicy(std::string_view name) {
  for (FoldPolicy p : {FoldPolicy::kEager, FoldPolicy::kWhenIdle, FoldPolicy::kAtEnd}) {
    if (FoldPolicyName(p) == name) return p;
  }
  return std::nullopt;
}

std::vector<size_t> FoldGroups(const std::vector<bool>& cached, uint32_t seam_w) {
  std::vector<size_t> segments;  // part indices of the cached segments
  for (size_t i = 0; i < cached.size(); ++i) {
    if (cached[i]) segments.push_back(i);
  }
  // Walking back from the last cached segment: rank r (0 = last) is in group 0 for r = 0, and
  // in group floor(log2 r) + 1 otherwise, so the groups hold 1, 1, 2, 4, ... segments. A group
  // ends with its last cached segment; the next one starts right after it.
  std::vector<size_t> ends;  // exclusive part index where a group (other than the last) ends
  for (size_t r = 1; r < segments.size(); ++r) {
    const size_t i = segments[segments.size() - 1 - r];
    const bool group_end = r == 1 || (r & (r - 1)) == 0;  // r is a power of two
    if (group_end) ends.push_back(i + 1);
  }
  std::reverse(ends.begin(), ends.end());
  std::vector<size_t> cuts{0};
  for (size_t end : ends) {
    // With seam 0 the cached segments of a group run no token; a group needs a live part.
    bool live = seam_w > 0;
    for (size_t i = cuts.back(); i < end && !live; ++i) live = !cached[i];
    if (live) cuts.push_back(end);
  }
  return cuts;
}

}  // namespace hypic::runtime
