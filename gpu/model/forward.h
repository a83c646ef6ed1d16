// Model::Pass: one run of the hybrid decoder over an ordered list of blocks (internal to
// gpu/model). A block is either LIVE (tokens that run through every layer) or CACHED (a
// segment entry's tokens [w, n), which never run: linear layers jump over them with
// S <- T S + S_0 and take the conv tail, attention layers read their K/V). Positions are
// contiguous from the state's n_positions. FullPrefill is one live block, SegmentPrefill one
// live block that captures an entry, Compose a mix (MATH.md §5).
//
// The pass works layer by layer over all live tokens at once, so every projection is one sgemm
// over [live tokens, hidden]; only the recurrences and the attention walk the blocks in order.
// Every compute step goes through ForwardKernels (forward_kernels.h), so this control flow is
// the only one, whatever the device: on CUDA the state and entries the pass touches are
// uploaded as it reaches them and the results written back to the host values at the end.
// Entry tensors stored in bf16 or f16 are widened into pass-owned fp32 buffers before they reach
// the kernels, and a capture in those dtypes is computed into fp32 buffers and rounded into the
// entry after the last kernel, so every kernel sees fp32 only.
// Run can hand each layer's final state to a callback as soon as that layer's attention or GDN
// step is done (ComposeOptions::on_layer: per-layer streaming), copied to the host first on a
// device; the callback runs on the pass's thread, between layers.
// Not thread-safe; one pass per call, over a const Model.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/aligned_vector.h"
#include "core/segment_entry.h"
#include "gpu/model/forward_kernels.h"
#include "gpu/model/model.h"

namespace hypic::model {

class Model::Pass {
 public:
  // Runs after `state` and advances it on `device`. Cached blocks use `mode` (kNaive adds,
  // others apply T). With StateUse::kDropped the attention layers leave their K/V caches in
  // `state` as they were (the caller drops the state) where the backend attends K/V spans in
  // place (ForwardKernels::AttendsKvSpans): no copy of every position's K/V per layer.
  Pass(const Model& model, ModelState& state, ComposeMode mode, const ComputeDevice& device,
       StateUse use = StateUse::kKept);

  // After each layer the pass stops with kDeadlineExceeded once `deadline` has passed.
  void set_deadline(std::chrono::steady_clock::time_point deadline) { deadline_ = deadline; }

  // Appends live tokens; merges with a preceding live block.
  void AddLive(std::span<const uint32_t> tokens);
  // Appends the live tokens of a segment whose entry is built in `capture`: (T, S(C|0)) of
  // tokens [seam, n) per linear layer, the conv tail, and K/V of [seam, n) per attention
  // layer, each tensor kind stored in its dtype of `dtypes`. REQUIRES: seam < tokens.size(); at
  // most one capture per pass; every dtype IsEntryDType.
  Status AddCapture(std::span<const uint32_t> tokens, int64_t seam, const EntryDTypes& dtypes,
                    SegmentEntry* capture);
  // Appends the cached tokens [w, n) of `entry` (already validated by the caller).
  void AddCached(const SegmentEntry* entry, int64_t n_cached);

  int64_t live_tokens() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t cached_tokens() const { return cached_tokens_; }

  // Runs every layer. Logits for every live row (all_logits) or the last live row only; none
  // when `logits` is null. With `on_layer`, hands it each layer's final state as soon as the
  // layer's mixer is done (copied to the host first on a device). Errors: those of
  // CreateForwardKernels for the device, kDeviceError, on_layer's.
  // REQUIRES: at least one live token.
  Status Run(bool all_logits, std::vector<float>* logits,
             const LayerStateCallback& on_layer = nullptr);

 private:
  struct Block {
    bool live = true;
    int64_t pos0 = 0;  // absolute position of the first token
    int64_t n = 0;
    int64_t row0 = 0;  // live: first row in the live matrices
    const SegmentEntry* entry = nullptr;
  };
  struct CaptureTensors {  // fp32 host memory of the entry being built
    float* t = nullptr;    // linear layers
    float* s = nullptr;
    float* conv = nullptr;
    float* k = nullptr;  // attention layers
    float* v = nullptr;
  };
  // A captured tensor whose dtype is not f32: computed into `f32`, rounded into `dst` by Finish.
  struct Rounding {
    UninitializedVector<float> f32;  // every element written by the pass
    TensorView dst;
  };

  // Where the capture of a tensor of `view`'s dtype is computed: the entry's memory for f32,
  // else a new fp32 buffer rounded into it by FinishPass.
  float* CaptureBuffer(const TensorView& view);
  // The kernels' fp32 copy of an entry tensor of n elements (widened first unless f32), or the
  // tensor itself when it is already in this pass's device memory (Model::CheckEntry).
  const float* EntryInput(const EntryTensor& t, int64_t n);
  // Finishes the kernels (every Mirror written back), then rounds the capture into its entry.
  Status FinishPass();

  // The backend's copies of a layer's two state tensors (linear: S, conv tail; attention: the K
  // and V caches), final once the layer's mixer returns them.
  struct LayerOut {
    const float* first = nullptr;
    const float* second = nullptr;
  };
  // The live rows [first, first + n) whose output a layer computes. Every layer but the last
  // outputs every row; the last only the rows whose logits are wanted (all, or the last one),
  // or none when the pass makes only state (a segment entry, a state-only compose), as its
  // output feeds nothing else: at 16k tokens that skips half the attention work of a prefill
  // (llama.cpp's graph does the same). Its state (K/V, S, conv) still covers every row. A
  // last-row request computes the last kMinOutputRows rows, so that row's bits are those of
  // the all-rows pass: the CPU's bf16 attention takes fp32 products under 16 query rows
  // (kBf16AttentionMinRows), and a one-row product can sum in another order.
  static constexpr int64_t kMinOutputRows = 16;
  struct OutputRows {
    int64_t first = 0;
    int64_t n = 0;
  };
  // Each mixer step reads xn and xn16, its rounding to bf16 (Bf16Rows) or nullptr, over every
  // live row, advances the layer's state over all of them, and writes its output's `out` rows
  // into the same rows of y.
  LayerOut GdnLayer(int64_t li, const float* xn, const uint16_t* xn16, OutputRows out, float* y);
  LayerOut AttentionLayer(int64_t li, const float* xn, const uint16_t* xn16, OutputRows out,
                          float* y);
  // Hands layer li's state (host-visible copies of `out`) to on_layer.
  Status EmitLayer(int64_t li, const LayerOut& out, const LayerStateCallback& on_layer);
  // The MLP of `rows` rows: xn [rows, hidden] (xn16 its bf16 rounding or nullptr) into y.
  void MlpLayer(int64_t li, const float* xn, const uint16_t* xn16, int64_t rows, float* y);
  // gate_up, SiLU-gated product, down; x16: x's Bf16Rows or nullptr.
  void SwiGlu(const MlpWeights& m, const float* x, const uint16_t* x16, int64_t rows, float* out);

  // Working buffers reused by every layer (ForwardKernels::Scratch: grown, never shrunk), so a
  // pass allocates and page-faults its working set once rather than once per layer. Contents
  // are garbage between uses: every user writes before it reads.
  enum ScratchSlot {
    kX,
    kXn,
    kY,
    kProj,
    kQ,
    kK,
    kV,
    kGate,
    kBeta,
    kO,
    kAttn,
    kRouter,
    kExpertOut,
    kGateUp,
    kNumScratch
  };
  float* Scratch(ScratchSlot slot, int64_t n);

  const float* Weight(const std::vector<float>& w) { return kernels_->Weight(w); }
  DeviceWeight Weight(const WeightTensor& w) { return kernels_->Weight(w); }

  const Model& model_;
  ModelState& state_;
  ComposeMode mode_;
  ComputeDevice device_;
  StateUse state_use_;
  std::unique_ptr<ForwardKernels> kernels_;  // made by Run
  std::vector<Block> blocks_;
  std::vector<uint32_t> tokens_;  // live tokens in row order
  std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();
  int64_t end_pos_ = 0;
  int64_t cached_tokens_ = 0;

  // The capture (SegmentPrefill): block index, seam offset inside it, per-layer tensors.
  int64_t capture_block_ = -1;
  int64_t capture_seam_ = 0;
  std::vector<CaptureTensors> capture_;
  std::vector<Rounding> roundings_;

  // The CPU's fp32 widenings of bf16/f16 entry tensors (a device widens its own: WidenInput).
  // A CPU step is done reading them when it returns, so the buffers are reused from layer to
  // layer (widened_used_ resets) instead of holding a widened copy of every entry.
  std::vector<UninitializedVector<float>> widened_;  // every element written before read
  size_t widened_used_ = 0;

  std::vector<GdnInputBlock> gdn_inputs_;        // a GDN layer's live blocks (GdnLayer)
  std::vector<LinearStep> linear_steps_;         // a GDN layer's steps (GdnLayer)
  std::vector<KvSpan> kv_spans_;                 // an attention layer's K/V in place
  std::vector<ExpertWeights> experts_;           // an MoE layer's expert weights (MlpLayer)
  std::array<std::vector<float>, 2> emit_host_;  // EmitLayer's host staging (devices only)
  std::vector<int64_t> live_positions_;          // the position of every live row, in row order
};

}  // namespace hypic::model
