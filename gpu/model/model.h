// Model: a loaded Qwen3-Next / Qwen3.5 hybrid decoder and its three CPU passes (MATH.md §3, §5):
//
//   FullPrefill(tokens)          logits (every row or the last) and the full state
//   SegmentPrefill(tokens, w)    a SegmentEntry: per linear layer (T, S(C|0), conv tail) over
//                                [w, n), per attention layer K/V of [w, n)
//   Compose(parts, mode)         the last token's logits of a prompt made of cached segments
//                                and raw parts: live tokens only, operator jumps over the
//                                cached blocks; optionally the composed state, whole or
//                                layer by layer as the pass completes each (on_layer)
//
// Entry conventions (documented for storage/ and the daemon):
//  * Attention K is cached AFTER k_norm and BEFORE RoPE; Compose rotates it to the absolute
//    positions of the prompt. V is position-free. So "segment-relative" K needs no
//    re-rotation bookkeeping and an entry is valid at any offset.
//  * The segment-alone prefill runs the segment [0, n) as an ordinary prompt from position 0,
//    so the hidden states of [w, n) see the seam tokens as context. What is stored for a linear
//    layer is the pair of [w, n) alone (MATH.md §3): S(C|0) from a zero state and T, with the
//    seam tokens only warming the conv; the conv tail is the last K-1 pre-conv inputs. (A
//    variant that also restarted the outputs of [w, n) from zero was measured to get WORSE as
//    w grows, because the cached tokens then lose the seam as context.)
//  * The last part of a Compose prompt always runs live (its last token gives the logits).
//  * A segment with n <= w has no cached part: its entry carries metadata only and Compose runs
//    it live.
//  * With `context`, SegmentPrefill runs the segment in its true context (after the prompt
//    whose state is given): these are the "oracle" entries, for which Compose is exact.
//
// Numerics: the projections, experts and lm_head run on gpu/cpu/gemm.h (oneDNN) over all live
// tokens at once: with bf16 weights (a bf16 checkpoint's default) as bf16 products of the
// activations rounded to bf16, accumulated in fp32; with f32 weights in fp32. Norms, RoPE, the
// conv, the gates and the whole linear-attention state algebra (T chain, S, composition) are
// fp32. Attention accumulates its softmax in fp32; with bf16 weights its products are bf16 too
// (cpu_attention.h). Entry tensors are stored in the precision SegmentOptions::entry_dtypes
// names per tensor kind (f32 by default): the capture computes in fp32 and rounds to nearest even
// as it writes the entry, and Compose widens every entry tensor to fp32 where it is used (a
// narrow S(C|0) and narrow K/V are read as stored by the kernels that widen or pack them), so
// the arithmetic is fp32 on the entry's values (docs/entry-precision.md has the measured error
// of each choice).
//
// Devices: every pass runs on the CPU or on a CUDA device (the options' `device`); inputs and
// results (states, entries, logits) are host values either way, and the CUDA numerics (cuBLAS
// fp32 sgemm) match the CPU's within 1e-4 relative.
//
// Working memory: every pass first reserves its bound (pass_memory.h) from the model's budget
// (ReadOptions::max_pass_bytes): kTooLarge for a pass over the whole budget, kBusy when the
// passes running now leave no room; nothing is allocated then.
//
// Thread-safety: a Model is immutable after Load (apart from its per-device weight copies,
// built once under a mutex, and its lock-free pass budget); passes are const and may run
// concurrently (each allocates its own scratch); CUDA passes on one device run one at a time.
// Results and states are plain values owned by the caller.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/aligned_vector.h"
#include "core/byte_budget.h"
#include "core/segment_entry.h"
#include "core/segment_key.h"
#include "core/status.h"
#include "gpu/model/checkpoint.h"
#include "gpu/model/compute_device.h"
#include "gpu/model/config.h"
#include "gpu/model/pass_memory.h"
#include "gpu/model/weights.h"

namespace hypic::model {

class DeviceContextCache;  // forward_kernels.h

// The running state of a prompt after its first n_positions tokens.
// A layer's state. Growing a buffer does not zero it (core/aligned_vector.h): whoever
// grows one writes what it adds (a pass every K/V position it appends).
struct LayerState {
  UninitializedVector<float> state;  // linear: [HV, dk, dv]
  UninitializedVector<float> conv;   // linear: [K-1, conv_channels], the last K-1 pre-conv inputs
  UninitializedVector<float> k;      // attention: [n_positions, nkv, hd], post-RoPE, absolute
  UninitializedVector<float> v;      // attention: [n_positions, nkv, hd]
};

struct ModelState {
  int64_t n_positions = 0;
  std::vector<LayerState> layers;  // one per decoder layer
};

// One tensor of a state in the state contract (docs/state-format.md, the tensors COMPOSE
// returns): its layer and kind, and a host view of its row-major data in F32, BF16 or F16.
struct StateTensorView {
  uint32_t layer = 0;
  TensorKind kind = TensorKind::kState;
  DType dtype = DType::kF32;
  Shape shape;
  const void* data = nullptr;
};

// One layer's part of a composed state, handed over by the pass that completes it: the layer's
// two contract tensors (linear: state, conv tail; attention: key, value over every position of
// the prompt), F32, in host memory that is valid only for the duration of the call. An error it
// returns stops the pass and is what the compose returns.
using LayerStateCallback =
    std::function<Status(uint32_t layer, std::span<const StateTensorView> tensors)>;

// The two contract tensors of `layer` (docs/state-format.md §2) of a prompt of n_positions
// tokens, F32, viewing `first` (linear: S; attention: K) and `second` (linear: the conv tail;
// attention: V). REQUIRES: layer < config.num_layers.
std::array<StateTensorView, 2> LayerStateTensors(const ModelConfig& config, uint32_t layer,
                                                 int64_t n_positions, const float* first,
                                                 const float* second);
// Every layer's contract tensors in stream order, viewing `state` (which must outlive them).
std::vector<StateTensorView> StateTensors(const ModelConfig& config, const ModelState& state);

struct PrefillOptions {
  bool all_logits = false;  // logits for every token, else the last token only
  bool want_state = true;
  ComputeDevice device = {};  // where the pass runs; state and results stay host values
  // As ComposeOptions::deadline; a pass stopped by it leaves the state it extends half advanced
  // (some layers past the tokens, the rest not): the caller drops that state.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

struct PrefillResult {
  std::vector<float> logits;  // [rows, vocab]
  int64_t rows = 0;
  ModelState state;  // empty unless want_state
};

struct SegmentOptions {
  uint32_t seam_w = 8;
  uint32_t format_version = 1;
  std::string name_space = {};
  ComputeDevice device = {};
  // The dtype each tensor kind is stored in (T, S, conv tail, K/V): part of the key.
  EntryDTypes entry_dtypes = {};

  // The settings the entry's key is computed over.
  CacheSettings Settings() const { return {seam_w, format_version, entry_dtypes}; }
};

enum class ComposeMode : uint8_t {
  kFull = 0,    // no cache: every token live (the reference)
  kNaive = 1,   // PIC with S <- S + S_i (no transition): the strawman
  kHypic = 2,   // PIC with S <- T_i S + S_i
  kOracle = 3,  // as kHypic, with entries computed in context (exact)
};
std::string_view ComposeModeName(ComposeMode m);
Result<ComposeMode> ComposeModeFromName(std::string_view name);

struct ComposePart {
  enum class Kind : uint8_t { kSegment = 0, kRaw = 1 };
  Kind kind = Kind::kRaw;
  std::vector<uint32_t> tokens;
  // Segment parts in modes other than kFull: the segment's entry. May be null for a segment
  // of at most w tokens (it runs live).
  std::shared_ptr<const SegmentEntry> entry;
};

struct ComposeOptions {
  ComposeMode mode = ComposeMode::kHypic;
  uint32_t seam_w = 8;
  bool want_state = false;
  // Without logits the last part may be a cached segment and no logits are computed: a fold
  // step of a combine that composes entries as they arrive (see ComposeAfter).
  bool want_logits = true;
  ComputeDevice device = {};
  // Per-layer streaming of the state: when set, the pass calls it once per layer, in layer
  // order, as soon as that layer's state is final (right after its attention or GDN step,
  // before the later layers and the logits run), so a caller can send layer i while layer i+1
  // computes. The state handed over is the one after every part of this call: for ComposeAfter
  // set it only on the call that completes the prompt (the last fold step). Independent of
  // want_state; the logits and the state are the same bits with and without it.
  LayerStateCallback on_layer = {};
  // The pass checks it after each layer and, once it has passed, stops with kDeadlineExceeded
  // (the rest of its work not done): a request's deadline bounds a long prompt's combine to
  // one layer past it.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

struct ComposeResult {
  std::vector<float> logits;  // [vocab], the last token; empty without want_logits
  ModelState state;           // when want_state
  int64_t live_tokens = 0;
  int64_t cached_tokens = 0;
};

class Model {
 public:
  // checkpoint_bytes: the bytes of the checkpoint tensors the weights came from (0: none).
  // cuda_tf32: ReadOptions::cuda_tf32 (the caller folds it into `fingerprint`).
  // max_pass_bytes, on_pass_bytes: ReadOptions'.
  Model(ModelConfig config, ModelWeights weights, ModelFingerprint fingerprint,
        size_t checkpoint_bytes = 0, bool cuda_tf32 = false, uint64_t max_pass_bytes = 0,
        std::function<void(int64_t)> on_pass_bytes = {});

  const ModelConfig& config() const { return config_; }
  // The checkpoint's fingerprint, folded with the GEMM weights' precision when that is bf16
  // and with cuda_tf32 on f32 weights: entries computed in another precision never share a key.
  const ModelFingerprint& fingerprint() const { return fingerprint_; }
  // The GEMM weights' resident precision (kF32 or kBF16) and every weight's resident bytes.
  DType weights_dtype() const { return weights_.embed.dtype(); }
  size_t resident_weight_bytes() const { return weights_.ResidentBytes(); }
  size_t checkpoint_bytes() const { return checkpoint_bytes_; }
  // The passes' working-memory budget (pass_memory.h): its limit (0: none) and what the
  // passes running now hold of it.
  uint64_t max_pass_bytes() const { return pass_budget_ ? pass_budget_->limit() : 0; }
  uint64_t pass_bytes_in_use() const { return pass_budget_ ? pass_budget_->bytes() : 0; }

  // kBadRequest on an empty prompt or a token >= vocab.
  Result<PrefillResult> FullPrefill(std::span<const uint32_t> tokens,
                                    const PrefillOptions& options = {}) const;

  // Runs `tokens` after `state` (advancing it in place). The building block for prefix
  // checkpoints and for oracle entries.
  Result<PrefillResult> Extend(ModelState& state, std::span<const uint32_t> tokens,
                               const PrefillOptions& options = {}) const;

  // Builds the entry of one segment. With `context`, runs in that context and advances it past
  // the segment (oracle entries); else alone from position 0.
  Result<std::shared_ptr<SegmentEntry>> SegmentPrefill(std::span<const uint32_t> tokens,
                                                       const SegmentOptions& options,
                                                       ModelState* context = nullptr) const;

  // Entries for every segment part: alone for kNaive/kHypic, in context for kOracle (raw parts
  // advance the context), none for kFull. Fills parts[i].entry.
  Status PrefillEntries(std::span<ComposePart> parts, ComposeMode mode,
                        const SegmentOptions& options) const;

  // MATH.md §5. kBadRequest for an empty prompt, a bad token, a missing entry or one that does
  // not belong to this model / seam / tokens, or an entry tensor of the wrong shape or of a
  // dtype other than F32, BF16 or F16 or other than the one its settings declare for its kind.
  // Entries of any entry dtypes compose (each tensor is widened to fp32).
  Result<ComposeResult> Compose(std::span<const ComposePart> parts,
                                const ComposeOptions& options) const;

  // Whether `entry` is this model's entry of `tokens` at seam `seam_w`, as Compose will use it:
  // the model fingerprint, seam, conv kernel, layer count and tokens of its metadata, and every
  // tensor's presence, dtype (the one its settings declare), shape and location: host memory,
  // or fp32 in the memory of the CUDA device `device` names (a pass on another device or on
  // the CPU cannot read it). kBadRequest naming what differs. Compose runs it on every cached
  // part on its own device; a daemon runs it on an entry a peer sent.
  Status CheckEntry(const SegmentEntry& entry, std::span<const uint32_t> tokens, uint32_t seam_w,
                    const ComputeDevice& device = {}) const;

  // Compose continued: runs `parts` after `state` (whose positions come first) and advances it
  // in place; the result's state is left empty. Composing a prompt in consecutive runs of parts
  // gives the logits and state of one Compose over all of them (equal up to the rounding of the
  // row blocking). REQUIRES: at least one live token among the parts (with want_logits false
  // and seam w = 0 a run of cached segments has none: fold it into the next run).
  Result<ComposeResult> ComposeAfter(ModelState& state, std::span<const ComposePart> parts,
                                     const ComposeOptions& options) const;

  // An empty state (zero positions) with every layer sized.
  ModelState EmptyState() const;

  // The state of a prompt of `n_positions` tokens rebuilt from the contract's tensors (a state
  // COMPOSE returned), ready to be continued with Extend; bf16/f16 tensors are widened to fp32
  // exactly. kBadRequest naming the tensor when one is missing or repeated, has the wrong shape
  // or a dtype other than F32/BF16/F16, or names a layer or kind this model does not have.
  Result<ModelState> StateFromTensors(int64_t n_positions,
                                      std::span<const StateTensorView> tensors) const;

 private:
  class Pass;
  // Whether the caller keeps a pass's state afterwards (kDropped: FullPrefill without
  // want_state, Compose without state or streaming, a segment prefill alone). A pass whose
  // state is dropped need not fill the attention caches: its attention reads K/V in place.
  enum class StateUse : uint8_t { kKept, kDropped };
  Result<PrefillResult> ExtendState(ModelState& state, std::span<const uint32_t> tokens,
                                    const PrefillOptions& options, StateUse use) const;
  Result<ComposeResult> ComposeState(ModelState& state, std::span<const ComposePart> parts,
                                     const ComposeOptions& options, StateUse use) const;

  // Reserves a pass's working memory from the budget before it allocates (Pass::Run).
  Result<ByteReservation> ReservePass(const PassSize& size) const;

  ModelConfig config_;
  ModelWeights weights_;
  ModelFingerprint fingerprint_;
  size_t checkpoint_bytes_;
  // Per-device contexts (weights uploaded on first use); shared so the type stays opaque here.
  std::shared_ptr<DeviceContextCache> device_cache_;
  std::unique_ptr<ByteBudget> pass_budget_;  // null: no limit
};

// Loads `spec`: a model directory (config.json + safetensors), or "builtin:NAME" for a preset
// generated into `cache_dir` on first use (generator.h; a bf16 checkpoint). Errors from
// ReadCheckpoint.
Result<std::shared_ptr<const Model>> LoadModel(std::string_view spec,
                                               const std::filesystem::path& cache_dir = {},
                                               const ReadOptions& options = {});

}  // namespace hypic::model
