// Checkpoints: Hugging Face model directories (config.json plus model.safetensors, or shards
// under model.safetensors.index.json) read into and written from the canonical ModelWeights.
//
// One table (the "layout" built in checkpoint.cpp) lists, for the config's format, every HF
// tensor with its shape and where its rows land in ModelWeights; reading and writing both walk
// that table, so the two directions cannot drift apart. Qwen3-Next's in_proj_qkvz / in_proj_ba
// are interleaved by key head ([q_g | k_g | v_g.. | z_g..] per group g; b before a), its q_proj
// by attention head ([query_h | gate_h]); Qwen3.5 keeps in_proj_qkv/z/b/a separate and packs the
// experts as gate_up_proj [E, 2I, hidden] and down_proj [E, hidden, I] (per-expert tensors are
// accepted as well). Weights may be F32, F16 or BF16. The GEMM weights (weights.h) become fp32
// at load, or stay bf16 (ReadOptions::weights); every other tensor becomes fp32. Tensors the
// runtime does not use (vision tower, MTP head) are ignored but fingerprinted.
//
// Thread-compatible free functions.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "core/segment_key.h"
#include "core/status.h"
#include "gpu/model/config.h"
#include "gpu/model/weights.h"

namespace hypic::model {

// The resident precision of the GEMM weights: kAuto keeps bf16 when every tensor they come
// from is stored as BF16 (a bf16 checkpoint), else fp32; kBf16 rounds F32/F16 tensors to bf16.
enum class WeightsDType : uint8_t { kAuto = 0, kF32 = 1, kBf16 = 2 };
std::string_view WeightsDTypeName(WeightsDType dtype);  // "auto", "f32", "bf16"
std::optional<WeightsDType> ParseWeightsDType(std::string_view name);

struct ReadOptions {
  WeightsDType weights = WeightsDType::kAuto;
  // f32 GEMM weights on a CUDA device may use TF32 tensor cores (about 1e-3 relative against
  // exact fp32; cuda_forward.h's CudaContextOptions). LoadModel folds it into the model's
  // fingerprint when it changes the arithmetic (an f32 checkpoint), so such entries are keyed
  // apart from exact ones. No effect on the CPU or on bf16 weights.
  bool cuda_tf32 = false;
  // Not a reading option but the loaded Model's: the working memory all its passes may hold
  // at once (pass_memory.h; 0: no limit). A pass over it alone is refused kTooLarge, one that
  // the passes running beside it leave no room for kBusy.
  uint64_t max_pass_bytes = 0;
  // Told every change of the bytes the running passes hold, as a signed delta (e.g. for a
  // gauge); called from the pass's thread, without locks.
  std::function<void(int64_t)> on_pass_bytes = {};
};

struct LoadedCheckpoint {
  ModelConfig config;
  ModelWeights weights;
  // Bytes of the checkpoint tensors the weights were read from, as stored.
  size_t checkpoint_bytes = 0;
  // xxh3-128 over config.Canonical() and, for every tensor of the checkpoint in name order,
  // its name, dtype, shape and bytes as stored.
  ModelFingerprint fingerprint;
};

// Reads `dir`/config.json and the safetensors checkpoint beside it. Errors:
//   kBadRequest / kUnsupported  config.json problems (naming the key)
//   kNotFound                   no config.json, no checkpoint, or a missing tensor (named)
//   kBadRequest                 a tensor with the wrong shape ("tensor NAME: expected shape
//                               [..], found [..]") or a non-float dtype
//   kCorruption                 a truncated or malformed safetensors file (from core)
Result<LoadedCheckpoint> ReadCheckpoint(const std::filesystem::path& dir,
                                        const ReadOptions& options = {});

struct WriteOptions {
  DType dtype = DType::kBF16;  // kF32, kF16 or kBF16
  int shards = 1;  // > 1: shards of at most 1/shards of the data each (a tensor is never
                   // split, so greedy packing may need a file more) + index.json
};

// Writes config.json and the weights in config.format's layout into `dir` (created if
// missing). Files are written atomically, config.json last, so a directory that has a
// config.json is complete. kBadRequest for a bad dtype or shard count, kIoError on I/O.
Status WriteCheckpoint(const std::filesystem::path& dir, const ModelConfig& config,
                       const ModelWeights& weights, const WriteOptions& options = {});

// Sizes every tensor of `weights` for `config` (zero-filled), the GEMM weights in `matrices`
// (kF32 or kBF16). The generator and the reader start from this.
ModelWeights AllocateWeights(const ModelConfig& config, DType matrices = DType::kF32);

}  // namespace hypic::model
