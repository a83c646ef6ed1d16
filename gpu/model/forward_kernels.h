// ForwardKernels: the compute steps of Model::Pass (forward.h) on one backend, so the pass's
// control flow is written once and runs on the CPU (CpuForwardKernels, cpu_kernels.h) or on a
// CUDA device (gpu/cuda/model/, reached through cuda_forward.h). One virtual call per step over
// whole matrices, never per row.
//
// Memory: every float pointer a step takes lives in the backend's memory ("device pointers";
// plain host memory on the CPU). The pass gets them from Scratch (working buffers), Weight (the
// model's weights, resident on the device), Input (host data it only reads, such as entry
// tensors) and Mirror (host data it updates or fills, such as the running state and a captured
// entry: written back by Finish). On the CPU all four return the host memory itself, so the
// CPU pass copies nothing it did not copy before.
//
// Errors are sticky, as in CUDA: a failing step records the first error and every later step
// does nothing; status() and Finish() report it. The pass checks status() once per layer.
//
// Ownership and threads: a ForwardKernels belongs to one pass on one thread. A CUDA one holds its
// device context (stream, cuBLAS handle, uploaded weights, scratch) exclusively for its lifetime,
// so passes on one device run one at a time; CPU passes run concurrently (own scratch each).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_annotations.h"
#include "gpu/linear/linear_attention.h"
#include "gpu/linear/short_conv.h"
#include "gpu/model/compute_device.h"
#include "gpu/model/moe_routing.h"
#include "gpu/model/weights.h"

namespace hypic::model {

// A GEMM weight in the backend's memory: fp32 elements or bf16 bits (weights.h), or on the CPU
// a packed bf16 weight (`packed`; `data` is then its blocks). A plain fp32 pointer converts to
// one.
struct DeviceWeight {
  DType dtype = DType::kF32;
  const void* data = nullptr;
  const cpu::PackedBf16Weight* packed = nullptr;
  DeviceWeight() = default;
  DeviceWeight(const float* f32) : data(f32) {}  // NOLINT: implicit by design
  DeviceWeight(DType t, const void* d, const cpu::PackedBf16Weight* p = nullptr)
      : dtype(t), data(d), packed(p) {}
};

// Causal GQA attention: query head h reads kv head h / (heads / kv_heads).
struct AttentionShape {
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  // QK^T and PV as bf16 x bf16 -> fp32 products where the backend has them (the bf16-weights
  // path); the softmax and the accumulation stay fp32 either way.
  bool bf16_products = false;
};

// Context rows [pos0, pos0 + n) of an attention layer's keys and values, in place where they
// already are (AttentionSpans): K and V [n, kv_heads, head_dim] of `dtype`, in the kernels'
// memory. An entry's bf16 or f16 K/V are read as they are stored, widened (exactly) a block at
// a time as the attention reads them, not a whole-tensor copy per compose. `rope`: K is an
// entry's, before RoPE, and is rotated to its positions as it is read; else it is rotated
// already (a live block's, the state's cache).
struct KvSpan {
  int64_t pos0 = 0;
  int64_t n = 0;
  const void* k = nullptr;
  const void* v = nullptr;
  DType dtype = DType::kF32;
  bool rope = false;
};

// The RoPE of K (Rope's arguments): the first rotary_dim dims of each head, base theta.
struct KvRope {
  int64_t rotary_dim = 0;
  double theta = 0;
};

// One step of a linear-attention layer's recurrence over a pass's blocks (LinearSteps): a
// live block of `tokens` > 0 rows (its inputs; o written, [tokens, HV, dv] at row stride
// HV * dv), or, with `tokens` == 0, the jump over a cached segment (JumpState's transition
// and zero_state). zero_state is fp32, or, where the backend ReadsNarrowZeroStates(), a host
// entry's bf16 or f16 S(C|0) as it is stored (zero_dtype), widened a head at a time as the jump
// reads it instead of in a pass of its own.
struct LinearStep {
  int64_t tokens = 0;
  linear::Inputs in;
  float* o = nullptr;
  const float* transition = nullptr;
  const void* zero_state = nullptr;
  DType zero_dtype = DType::kF32;
};

// GDN's input step over rows [0, rows): the short causal conv with SiLU (linear/short_conv.h)
// of the first C = 2*H*dk + HV*dv columns of the projection, read in place, then from its
// output q and k (L2-normalised per head, q scaled) and v, and from b and a beta and the log
// decay.
struct GdnInputArgs {
  int64_t rows = 0;
  int64_t key_heads = 0, value_heads = 0, dk = 0, dv = 0;
  float q_scale = 1.0f;      // 1/sqrt(dk)
  const float* x = nullptr;  // row r at x + r*ldx: q | k | v before the conv, C columns
  int64_t ldx = 0;
  const float* conv_weight = nullptr;  // [C, K]
  int32_t conv_kernel = 4;
  float* conv_state = nullptr;  // [K-1, C], the last K-1 inputs: read, then advanced
  const float* ba = nullptr;    // row r at ba + r*ld_ba: b (HV) | a (HV)
  int64_t ld_ba = 0;
  const float* a_log = nullptr;    // [HV]
  const float* dt_bias = nullptr;  // [HV]
  float* q = nullptr;              // [rows, H, dk], L2-normalised and scaled
  float* k = nullptr;              // [rows, H, dk], L2-normalised
  float* v = nullptr;              // [rows, HV*dv]
  float* gate = nullptr;           // [rows, HV], log decay
  float* beta = nullptr;           // [rows, HV], sigmoid(b)

  int64_t conv_channels() const { return 2 * key_heads * dk + value_heads * dv; }  // C
};

// One live block of a GDN layer's pass for GdnConvInputsBlocks: its rows' GdnInputArgs, whose
// conv_state is the layer's running one, and the conv state the block starts from where that
// is not where the previous block left it (the tail of the cached entry between them).
struct GdnInputBlock {
  GdnInputArgs args;
  const float* start = nullptr;  // [K-1, C], or nullptr
};

// One routed expert's GEMM weights on the backend.
struct ExpertWeights {
  DeviceWeight gate_up;  // [2I, hidden]: gate rows then up rows
  DeviceWeight down;     // [hidden, I]
};

// The routed experts of one MoE layer, routing included (ForwardKernels::MoeExperts).
struct MoeArgs {
  const float* x = nullptr;       // [rows, hidden], the experts' input
  const uint16_t* x16 = nullptr;  // x's Bf16Rows, or nullptr
  const float* logits = nullptr;  // [rows, experts.size()], the router's
  int64_t rows = 0, hidden = 0;
  int64_t intermediate = 0;  // I, the same for every expert
  int64_t top_k = 0;         // 1 <= top_k <= experts; a device takes up to kMaxTopK
  bool norm_topk_prob = true;
  std::span<const ExpertWeights> experts;
  float* y = nullptr;  // [rows, hidden], overwritten
};

class ForwardKernels {
 public:
  virtual ~ForwardKernels() = default;

  // --- memory ---
  // A working buffer of at least n floats for `slot` (grown, never shrunk; garbage contents).
  virtual float* Scratch(int slot, int64_t n) = 0;
  // The backend's copy of one weight of the model this kernels object was made for: fp32
  // vectors, and the GEMM weights in the precision the backend keeps them in.
  virtual const float* Weight(const std::vector<float>& host) = 0;
  virtual DeviceWeight Weight(const WeightTensor& host) = 0;
  // Host data the pass only reads; valid until Finish.
  virtual const float* Input(const float* host, int64_t n) = 0;
  // n elements of `dtype` (BF16 or F16) the pass only reads, widened to fp32 in the backend's
  // memory; valid until Finish. `data` is in this backend's device memory (an entry tensor the
  // HBM tier holds on the pass's device) or host memory (`memory`); a device backend uploads
  // host data in their narrow dtype, half the bytes of fp32, and widens them with a kernel.
  // The CPU widens host data itself (Model::Pass) and has no device memory (Model::CheckEntry
  // lets no device tensor into a CPU pass): its WidenInput records an error.
  virtual const float* WidenInput(DType dtype, const void* data, MemoryKind memory, int64_t n) = 0;
  // Host data the pass updates (`read`: its current contents are needed) or only writes; the
  // backend's copy is written back to `host` by Finish.
  virtual float* Mirror(float* host, int64_t n, bool read) = 0;
  // Host-visible contents of n floats at `data` (synchronises on a device; may use `staging`).
  virtual const float* ToHost(const float* data, int64_t n, std::vector<float>* staging) = 0;
  // Writes every Mirror back and waits for the device. Returns the sticky status.
  virtual Status Finish() = 0;
  virtual Status status() const = 0;

  // --- steps (all buffers fp32 row-major but GEMM weights; ld* are row strides in elements) ---
  // x[r] = table[tokens[r]] widened to fp32, rows of `dim`.
  virtual void Embed(DeviceWeight table, std::span<const uint32_t> tokens, int64_t dim,
                     float* x) = 0;
  // y[m, n] = x[m, k] * w[n, k]^T (+ y when accumulate). With bf16 weights x is rounded to
  // bf16 and the products accumulate in fp32; `x16`, when not null, is that rounding already
  // made (Bf16Rows of x, row stride k), which the product then reads instead.
  virtual void Gemm(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, DeviceWeight w,
                    int64_t ldw, float* y, int64_t ldy, bool accumulate = false,
                    const uint16_t* x16 = nullptr) = 0;
  // x [rows, cols] (row stride ldx) rounded to bf16 as a bf16 GEMM rounds its input, into a
  // buffer of rows x cols valid until the next Bf16Rows call: for activations that several
  // bf16 products read (an MoE layer's router, experts and shared expert), rounded once.
  // nullptr where each product rounds as cheaply itself (the default, and a CPU whose bf16
  // products widen to fp32 as they pack); Gemm and MoeExperts then take x alone.
  virtual const uint16_t* Bf16Rows(const float* x, int64_t ldx, int64_t rows, int64_t cols);
  // Zero-centred RMSNorm per row; x and y may alias.
  virtual void RmsNorm(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy,
                       int64_t rows, int64_t dim, float eps) = 0;
  // The residual step and the next norm: x += y, then xn = RmsNorm(x), rows of `dim`
  // contiguous. The default runs Add and RmsNorm; the CPU does both in one pass over the rows.
  virtual void AddRmsNorm(float* x, const float* y, const float* w, float* xn, int64_t rows,
                          int64_t dim, float eps);
  // AddRmsNorm, then xn's Bf16Rows (the same buffer and lifetime), for the bf16 products that
  // read xn next; nullptr where Bf16Rows gives none. The default makes them one after the
  // other; the CPU rounds each row of xn as it is normalised, while the row is in L1.
  virtual const uint16_t* AddRmsNormBf16(float* x, const float* y, const float* w, float* xn,
                                         int64_t rows, int64_t dim, float eps);
  // GDN's output norm in place: o [rows, heads*dim], z row r at z + r*ldz.
  virtual void GatedRmsNorm(float* o, const float* z, int64_t ldz, const float* w, int64_t rows,
                            int64_t heads, int64_t dim, float eps) = 0;
  // x += y over n floats.
  virtual void Add(float* x, const float* y, int64_t n) = 0;
  virtual void Fill(float* x, int64_t n, float value) = 0;
  // rows x cols floats from src (row stride lds) to dst (row stride ldd); no overlap.
  virtual void Copy2D(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows,
                      int64_t cols) = 0;
  // NeoX RoPE on the first `rotary_dim` dims of each head; row r is at position pos0 + r.
  virtual void Rope(float* x, int64_t ld, int64_t rows, int64_t heads, int64_t head_dim,
                    int64_t rotary_dim, double theta, int64_t pos0) = 0;
  // GdnInputArgs's step: the conv and the recurrence's inputs in one pass over the rows (on the
  // CPU the conv's output never leaves the cache).
  virtual void GdnConvInputs(const GdnInputArgs& args) = 0;
  // GdnConvInputs over a pass's live blocks in order, all sharing one conv_state (each block
  // starting from its `start` where set): conv_state ends past the last block. The default
  // runs them one by one; the CPU runs every block's rows in one parallel region (a compose's
  // GDN layer has a seam of a few rows after every cached segment: 17 blocks at 16 segments).
  virtual void GdnConvInputsBlocks(std::span<const GdnInputBlock> blocks);
  // linear::ChunkedForward's contract (final_state may alias initial_state).
  virtual void LinearForward(linear::Variant variant, const linear::Shape& shape,
                             const linear::Inputs& in, const float* initial,
                             const linear::Outputs& out) = 0;
  // The operator jump over a cached segment: state <- T state + S0, or state + S0 when
  // `transition` is null (the naive strawman). Dense T, [HV, dk, dk].
  virtual void JumpState(const linear::Shape& shape, const float* transition,
                         const float* zero_state, float* state) = 0;
  // `steps` in order on the running state `state` (shape.tokens is ignored): each live step as
  // LinearForward with final_state = state, each jump as JumpState. The default runs them one
  // by one; the CPU runs every head's steps in one parallel region (a compose alternates a
  // seam's few live rows with a jump, 2 x 16 short steps per layer at 16 segments).
  virtual void LinearSteps(linear::Variant variant, const linear::Shape& shape,
                           std::span<const LinearStep> steps, float* state);
  // Whether LinearSteps takes a jump's zero_state in a host entry's bf16 or f16 (LinearStep).
  virtual bool ReadsNarrowZeroStates() const { return false; }
  // Causal softmax attention of one query row per entry of `positions` (non-decreasing): row r
  // attends the keys/values at positions [0, positions[r]]. q/out [rows, heads, hd]; k/v
  // [positions, kv_heads, hd]. A pass's live rows go in one call, whatever cached blocks lie
  // between them, so every key is read once per row tile rather than once per live block.
  virtual void Attention(const AttentionShape& shape, const float* q, const float* k,
                         const float* v, float* out, std::span<const int64_t> positions) = 0;
  // Attention with the keys and values of positions [0, positions.back()] given as spans that
  // cover them in order, read where they are instead of copied into one cache first: a pass
  // whose state nobody keeps (a compose returning logits only) skips the caches' copies.
  // Same bits as Attention over caches holding the same rows (rotated as Rope rotates).
  // Only called where AttendsKvSpans(); the default aborts.
  virtual bool AttendsKvSpans() const { return false; }
  virtual void AttentionSpans(const AttentionShape& shape, const KvRope& rope, const float* q,
                              std::span<const KvSpan> kv, float* out,
                              std::span<const int64_t> positions);
  // out[r, i] *= sigmoid(gate[r*ldg + i]) for i < cols; out rows contiguous.
  virtual void SigmoidGate(float* out, const float* gate, int64_t ldg, int64_t rows,
                           int64_t cols) = 0;
  // Each row of gu [rows, 2*im]: the gate half becomes silu(gate) * up.
  virtual void SwiGlu(float* gu, int64_t rows, int64_t im) = 0;
  // out [rows, hidden] = down(silu(gate(x)) * up(x)): one SwiGLU MLP, gate_up [2 im, hidden]
  // (gate rows, then up rows), down [hidden, im]; x16 as Gemm's. `gu` is scratch of
  // rows * 2 * im floats. The default runs Gemm, SwiGlu and Gemm over all rows in gu; the CPU
  // runs tiles of rows through all three (CpuForwardKernels::MlpRows).
  virtual void SwiGluMlp(DeviceWeight gate_up, DeviceWeight down, int64_t im, const float* x,
                         const uint16_t* x16, int64_t rows, int64_t hidden, float* gu, float* out);
  // An MoE layer's routed experts: each row is routed by moe_routing.h's RouteRow over its
  // logits, then y[r] = sum over its experts e, in ascending expert order, of
  // w_e * down_e(silu(gate_e(x[r])) * up_e(x[r])). With bf16 weights each GEMM's input is
  // rounded to bf16, as in Gemm. The CPU routes on the host (the logits are host memory there)
  // and runs the experts as a grouped step (CpuForwardKernels::RoutedExperts); CUDA routes on
  // the device, with no host synchronisation.
  virtual void MoeExperts(const MoeArgs& args) = 0;
  // An MoE layer's shared expert added to the routed experts' sum: y[r] += sigmoid(x[r] .
  // gate_w) * SwiGluMlp's row r (gate_up, down, im, x16 as there; the gate's dot product in
  // double, forward_math.h's SharedExpertGate). `gu` (rows * 2 * im floats) and `out` (rows *
  // hidden) are scratch: CUDA runs SwiGluMlp into `out` and adds it; the CPU adds each row
  // tile's output into y from cache and uses neither.
  virtual void SharedExpert(DeviceWeight gate_up, DeviceWeight down, int64_t im,
                            const float* gate_w, const float* x, const uint16_t* x16, int64_t rows,
                            int64_t hidden, float* gu, float* out, float* y) = 0;
};

// What a backend keeps per model and device between passes (for CUDA: the uploaded weights,
// stream, cuBLAS handle and scratch).
class DeviceContext {
 public:
  virtual ~DeviceContext() = default;
};

// The per-model cache of device contexts, created on first use, and the model's device
// settings. Thread-safe.
class DeviceContextCache {
 public:
  // cuda_tf32: f32 GEMM weights may use TF32 on CUDA devices (ReadOptions::cuda_tf32).
  explicit DeviceContextCache(bool cuda_tf32 = false) : cuda_tf32_(cuda_tf32) {}
  bool cuda_tf32() const { return cuda_tf32_; }

  // The context of `device` for `weights` (which must be the owning model's, alive as long as
  // the cache), built on first use by `make`.
  template <typename Make>
  Result<std::shared_ptr<DeviceContext>> Get(int device, const Make& make) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    auto it = contexts_.find(device);
    if (it != contexts_.end()) return it->second;
    Result<std::shared_ptr<DeviceContext>> made = make();
    if (made.ok()) contexts_.emplace(device, *made);
    return made;
  }

 private:
  const bool cuda_tf32_;
  Mutex mu_;
  std::map<int, std::shared_ptr<DeviceContext>> contexts_ GUARDED_BY(mu_);
};

// The kernels for one pass of the model with `weights` on `device`: CPU always; CUDA when this
// build has the kernels (kUnsupported otherwise) and the device exists (kNotFound otherwise).
Result<std::unique_ptr<ForwardKernels>> CreateForwardKernels(const ComputeDevice& device,
                                                             const ModelWeights& weights,
                                                             DeviceContextCache& cache);

}  // namespace hypic::model
