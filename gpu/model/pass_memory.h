// The working memory of one forward pass (Model::Pass), bounded from above before the pass
// allocates any of it, so that a request too large for the machine is refused with a clear
// error instead of ending the process (std::bad_alloc, or the kernel's OOM killer): a pass's
// scratch grows with its live rows (about 32 KB a row for builtin:small) and nothing else
// bounds them (a COMPOSE may carry 4,096 parts of a million tokens each).
//
// PassBytes counts what Model::Pass and the CPU kernels allocate for a pass of a given size:
// one buffer per scratch slot (rows x the widest use of any layer), the bf16 copies of the
// activations, the routing arrays, the attention's packed K/V and fp32 gather, one layer's
// widened entry tensors, the capture's tensors and their fp32 roundings, the logits, and the
// K/V caches of every position when the state is kept. It is an upper bound on the CPU
// (model_pass_memory_test checks it against the CPU kernels' own count of their buffers, and
// each optional term against what it is for); a CUDA pass allocates the same buffers in
// device memory. Pure functions of the config: thread-safe.
#pragma once

#include <cstdint>

#include "gpu/model/config.h"

namespace hypic::model {

struct PassSize {
  int64_t live_rows = 0;      // rows the pass runs through every layer
  int64_t positions = 0;      // every position attended over: the state's, cached and live
  int64_t cached_blocks = 0;  // entries the pass reads
  int64_t captured_rows = 0;  // rows a segment prefill writes into its entry (0: none)
  int64_t logit_rows = 0;     // rows whose logits the pass returns
  bool state_kept = false;    // every position's K/V copied into the state's caches
};

uint64_t PassBytes(const ModelConfig& config, const PassSize& size);

}  // namespace hypic::model
