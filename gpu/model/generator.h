// Synthetic models: the presets (tiny, small, bench), a deterministic weight generator and the
// built-in models the daemon can use without a download ("builtin:small").
//
// Weights are random but reproducible from the seed: each canonical tensor draws from its own
// counter-based stream keyed by (seed, tensor name), so a value never depends on generation
// order or on the checkpoint format. Scales keep activations near unit RMS through the stack
// (fan-in scaling, residual branches damped by 1/sqrt(2 layers)), the LM head is scaled up so
// next-token distributions are peaked (so KL comparisons mean something), and A_log / dt_bias
// follow the Mamba-style init (A in [1, 16], dt log-uniform in [1e-3, 1e-1]).
//
// `small` is exactly the shape of ../shared/design/TARGETS.md ("anchor-small", 97.6M params).
// Thread-compatible free functions.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string_view>

#include "core/status.h"
#include "gpu/model/checkpoint.h"
#include "gpu/model/config.h"
#include "gpu/model/weights.h"

namespace hypic::model {

// kBadRequest for an unknown preset name (tiny, small, bench).
Result<ModelConfig> PresetConfig(std::string_view preset,
                                 WeightFormat format = WeightFormat::kQwen3Next,
                                 MlpKind mlp = MlpKind::kMoe);

ModelWeights GenerateWeights(const ModelConfig& config, uint64_t seed);

// The directory of built-in model `name` (a preset, e.g. "small") under `cache_dir`, generated
// (seed 0, qwen3_next, bf16) on first use. Safe against concurrent first use by several
// processes or threads: generation goes to a private temporary directory that is renamed into
// place.
Result<std::filesystem::path> EnsureBuiltinModel(std::string_view name,
                                                 const std::filesystem::path& cache_dir);

}  // namespace hypic::model
