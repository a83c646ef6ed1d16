// The CPU building blocks of the forward pass: GEMMs against nn.Linear weights, the two
// RMSNorm variants, RoPE, and CpuForwardKernels, the CPU backend of Model::Pass
// (forward_kernels.h) built from them and from cpu_attention.h's CausalAttention. The
// per-element math (FastExp, SiLU, norms, ...) is forward_math.h's, shared with the CUDA
// kernels.
//
// All buffers are fp32, row-major, caller-owned. Threading: every GEMM (gpu/cpu/gemm.h) and
// every row loop (gpu/cpu/compute_threads.h's ParallelFor) uses the calling thread's compute
// budget, cpu::ComputeThreads(). Functions are thread-compatible; a CpuForwardKernels belongs
// to one pass.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "core/aligned_vector.h"
#include "gpu/model/forward_kernels.h"
#include "gpu/model/forward_math.h"

namespace hypic::model {

// Zero-centred RMSNorm of Qwen3-Next: y = x / rms(x) * (1 + w), per row of `dim` elements.
// x and y may alias. Row strides ldx, ldy.
void RmsNormZeroCentred(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy,
                        int64_t rows, int64_t dim, float eps);

// Rotates the first `rotary_dim` dims of each head (NeoX pairs (i, i + rotary_dim/2)) of rows
// [0, rows): row r is at position pos0 + r; head h of row r starts at x + r*ld + h*head_dim.
void ApplyRope(float* x, int64_t ld, int64_t rows, int64_t heads, int64_t head_dim,
               int64_t rotary_dim, double theta, int64_t pos0);
// The same rotation from src (row stride lds) into dst (row stride ldd), every dim of each head
// copied, in one pass: dst gets the bits ApplyRope would leave in a copy of src. src == dst
// is ApplyRope.
void RopeRows(const float* src, int64_t lds, float* dst, int64_t ldd, int64_t rows, int64_t heads,
              int64_t head_dim, int64_t rotary_dim, double theta, int64_t pos0);
// RopeRows of one head's rows, each rotated row rounded to bf16 (cpu::ConvertRowsToBf16) into
// dst (row stride ldd) with no fp32 copy: the bf16 attention's K. The same bits as RopeRows
// then ConvertRowsToBf16. On the calling thread alone (callers run it inside their own
// parallel loop).
void RopeRowsToBf16(const float* src, int64_t lds, uint16_t* dst, int64_t ldd, int64_t rows,
                    int64_t head_dim, int64_t rotary_dim, double theta, int64_t pos0);

// h[i] = bf16(SwiGlu(gu[i], gu[im + i])) for i < im: forward_math.h's SwiGluRow and the bf16
// rounding of the down product's input in one pass, 16 lanes at a time where the build has
// AVX-512 (the same operations in the same order as the scalar form: the same bits).
void SwiGluRowToBf16(const float* gu, int64_t im, uint16_t* h);

// One routed expert's share of an MoE layer on the CPU: its weights, the rows of x routed to
// it (no duplicates) and their routing weights.
struct ExpertWork {
  DeviceWeight gate_up;  // [2I, hidden]: gate rows then up rows
  DeviceWeight down;     // [hidden, I]
  int64_t intermediate = 0;
  std::span<const int64_t> rows;
  std::span<const float> weights;
};

// ForwardKernels on the host: every pointer is host memory, memory calls return the host data
// itself, steps call the functions above (and linear::ChunkedForward, short_conv.h).
class CpuForwardKernels final : public ForwardKernels {
 public:
  CpuForwardKernels();
  ~CpuForwardKernels() override;
  CpuForwardKernels(const CpuForwardKernels&) = delete;
  CpuForwardKernels& operator=(const CpuForwardKernels&) = delete;

  // The bytes of the scratch the calling thread keeps between passes (a pass takes it and
  // gives it back grown, unless it grew past 2 GiB): after one pass on a fresh thread, what
  // that pass's buffers took (pass_memory.h's bound is checked against it).
  static size_t ThreadScratchBytes();

  float* Scratch(int slot, int64_t n) override;
  const float* Weight(const std::vector<float>& host) override { return host.data(); }
  DeviceWeight Weight(const WeightTensor& host) override {
    return {host.dtype(), host.data(), host.packed()};
  }
  const float* Input(const float* host, int64_t) override { return host; }
  const float* WidenInput(DType dtype, const void* data, MemoryKind memory, int64_t n) override;
  float* Mirror(float* host, int64_t, bool) override { return host; }
  const float* ToHost(const float* data, int64_t, std::vector<float>*) override { return data; }
  Status Finish() override { return status_; }
  Status status() const override { return status_; }

  void Embed(DeviceWeight table, std::span<const uint32_t> tokens, int64_t dim, float* x) override;
  void Gemm(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, DeviceWeight w,
            int64_t ldw, float* y, int64_t ldy, bool accumulate, const uint16_t* x16) override;
  const uint16_t* Bf16Rows(const float* x, int64_t ldx, int64_t rows, int64_t cols) override;
  void RmsNorm(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy, int64_t rows,
               int64_t dim, float eps) override;
  void AddRmsNorm(float* x, const float* y, const float* w, float* xn, int64_t rows, int64_t dim,
                  float eps) override;
  const uint16_t* AddRmsNormBf16(float* x, const float* y, const float* w, float* xn, int64_t rows,
                                 int64_t dim, float eps) override;
  void GatedRmsNorm(float* o, const float* z, int64_t ldz, const float* w, int64_t rows,
                    int64_t heads, int64_t dim, float eps) override;
  void Add(float* x, const float* y, int64_t n) override;
  void Fill(float* x, int64_t n, float value) override;
  void Copy2D(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows,
              int64_t cols) override;
  void Rope(float* x, int64_t ld, int64_t rows, int64_t heads, int64_t head_dim, int64_t rotary_dim,
            double theta, int64_t pos0) override;
  void GdnConvInputs(const GdnInputArgs& args) override;
  void GdnConvInputsBlocks(std::span<const GdnInputBlock> blocks) override;
  void LinearForward(linear::Variant variant, const linear::Shape& shape, const linear::Inputs& in,
                     const float* initial, const linear::Outputs& out) override;
  void JumpState(const linear::Shape& shape, const float* transition, const float* zero_state,
                 float* state) override;
  void LinearSteps(linear::Variant variant, const linear::Shape& shape,
                   std::span<const LinearStep> steps, float* state) override;
  bool ReadsNarrowZeroStates() const override { return true; }
  void Attention(const AttentionShape& shape, const float* q, const float* k, const float* v,
                 float* out, std::span<const int64_t> positions) override;
  bool AttendsKvSpans() const override { return true; }
  void AttentionSpans(const AttentionShape& shape, const KvRope& rope, const float* q,
                      std::span<const KvSpan> kv, float* out,
                      std::span<const int64_t> positions) override;
  void SigmoidGate(float* out, const float* gate, int64_t ldg, int64_t rows, int64_t cols) override;
  void SwiGlu(float* gu, int64_t rows, int64_t im) override;
  // Row tiles through all three steps (MlpRows); `gu` is not used.
  void SwiGluMlp(DeviceWeight gate_up, DeviceWeight down, int64_t im, const float* x,
                 const uint16_t* x16, int64_t rows, int64_t hidden, float* gu, float* out) override;
  void MoeExperts(const MoeArgs& args) override;
  // The gates first, then MlpRows with them as its scale: no `gu`, no `out`.
  void SharedExpert(DeviceWeight gate_up, DeviceWeight down, int64_t im, const float* gate_w,
                    const float* x, const uint16_t* x16, int64_t rows, int64_t hidden, float* gu,
                    float* out, float* y) override;

  // MoeExperts once routed, as one grouped step: for each of the `rows` rows r of y (rows of
  // `hidden`, as x's), y[r] = (accumulate ? y[r] : 0) + w * down(silu(gate(x[r])) * up(x[r]))
  // summed over the experts that list r, in expert order. `x16` is x's Bf16Rows or nullptr.
  // The experts run side by side, each on one thread, when they have few rows; the sums into y
  // go row by row in expert order whatever the split, so the bits do not depend on the thread
  // count.
  void RoutedExperts(const float* x, const uint16_t* x16, std::span<const ExpertWork> experts,
                     int64_t hidden, int64_t rows, float* y, bool accumulate);
  // y[j] = down(silu(gate(x_j)) * up(x_j)) for the n rows x_j = x[index[j]] (x[j] when index
  // is empty), rows of `hidden`; `x16` as in RoutedExperts. With `scale` (n weights; an
  // index, if any, of distinct rows) the rows are added instead, y[index[j]] += scale[j] *
  // (...), as RoutedExperts and SharedExpert sum them, from the tile in cache. The rows go in tiles
  // of at most 64 (a few tiles evened out), whole tiles to each compute thread, each tile from its
  // gather to its down product on one thread, so its gate-up products and activations stay in that
  // core's cache instead of a pass over memory per step (a 16k-token prefill's MLPs wrote and read
  // back 134 MB per layer; the GEMMs ran at half their in-cache rate). A row's tile depends only on
  // n, so its bits do not depend on the thread count. Against one whole-rows product a row differs
  // at most by the GEMM's rounding in a call of another row count: none where the GEMM is
  // row-stable, as gemm_test checks on every ISA tier (packed bf16 weights on AMX and on oneDNN's
  // AVX512-BF16 kernels at every probed shape, RowStableGemm elsewhere; a 3,000-token bf16 prefill
  // gives the same logits bit for bit).
  void MlpRows(DeviceWeight gate_up, DeviceWeight down, int64_t im, const float* x,
               const uint16_t* x16, std::span<const int64_t> index, int64_t n, int64_t hidden,
               float* y, std::span<const float> scale = {});

 private:
  // Working buffers, uninitialised, kept by the thread between passes (ScratchSet in the .cpp):
  // a fresh pass would otherwise zero-fill and fault in tens of MiB every time. Large ones are
  // their own mappings in transparent huge pages (see Scratch).
  struct Buffer {
    Buffer() = default;
    Buffer(Buffer&& other) noexcept;
    Buffer& operator=(Buffer&& other) noexcept;
    ~Buffer();
    float* Reserve(int64_t n);  // at least n floats, the old contents lost if it grows
    float* data = nullptr;
    int64_t capacity = 0;
    size_t mapped_bytes = 0;  // > 0: an mmap of that size, else operator new[] on a cache line
  };
  struct ScratchSet {
    std::vector<Buffer> slots;
    AlignedVector<uint16_t> x_bf16;                   // a bf16 GEMM's activations
    AlignedVector<uint16_t> rows_bf16;                // Bf16Rows' copy
    std::vector<int32_t> routed_offsets;              // RoutedExperts: per row, its entries
    std::vector<std::pair<int32_t, int32_t>> routed;  // ... as (expert, index in its rows)
    std::vector<int32_t> chosen;                      // MoeExperts' routing, [rows, top_k]
    std::vector<float> chosen_weights;
    std::vector<float> shared_gates;                // SharedExpert's, per row
    Buffer expert_out;                              // RoutedExperts' outputs, expert by expert
    std::vector<int64_t> expert_out_offsets;        // ... each expert's first element in it
    std::vector<std::vector<int64_t>> expert_rows;  // MoeExperts' routing, per expert
    std::vector<std::vector<float>> expert_weights;
    AlignedVector<uint32_t> kv_pack;  // bf16 attention's packed K and V
    // GdnConvInputsBlocks: the conv state each block starts from, and the blocks' row tiles.
    std::vector<float> conv_starts;
    struct RowTile {
      size_t block = 0;
      int64_t r0 = 0, r1 = 0;
    };
    std::vector<RowTile> row_tiles;
    std::vector<float> kv_gather;  // fp32 attention's K and V gathered from spans
    // The bytes of the buffers that grow with a pass's rows and positions.
    size_t Bytes() const;
  };
  static ScratchSet& ThreadScratch();
  ScratchSet scratch_;
  Status status_;
};

}  // namespace hypic::model
