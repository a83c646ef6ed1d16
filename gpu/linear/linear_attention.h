// The linear-attention state algebra (MATH.md §1-§4): per-variant recurrences, the chunked
// forward that also yields the segment's transition operator T_C and zero-init state S(C|0),
// composition of (T, S) pairs, the naive-add strawman, the short causal conv with its warm-up
// rule, and RoPE re-rotation of cached states.
//
// Conventions (all fp32, row-major, contiguous):
//   q, k  [T, H, dk]      v [T, HV, dv]      HV % H == 0; value head i reads key head i/(HV/H)
//   g     [T, HV]         scalar log-decay (retnet, mamba2); per-row log-decay [T, HV, dk] for
//                         gla and kda; absent (nullptr) for linear and deltanet. For retnet the
//                         caller passes the constant log(gamma_h) per token.
//   beta  [T, HV]         deltanet, gdn, kda; nullptr otherwise
//   state [HV, dk, dv]    K-first; o_t = S_t^T q_t reads the state after token t (inclusive)
//   o     [T, HV, dv]
// Inputs arrive already normalised and scaled: L2 norm, 1/sqrt(dk), gate nonlinearities
// belong to the layer code (gpu/model).
//
// Transitions are stored compactly by TransitionForm: kIdentity (no data), kScalarLog [HV]
// (sum of g), kDiagLog [HV, dk] (per-row sum of g), kDense [HV, dk, dk]. T acts on the state
// from the left: S <- T S + S_zero.
//
// Every function is thread-compatible (no shared state); the math of one (token, head) step
// lives in HYPIC_HD inline functions in linear_math.h so the CUDA kernels run the same code.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/status.h"

namespace hypic::linear {

enum class Variant : uint8_t {
  kLinear = 0,
  kRetNet = 1,
  kMamba2 = 2,  // also simple-gla and lightning attention: scalar per-token decay
  kGla = 3,     // diagonal decay
  kDeltaNet = 4,
  kGdn = 5,  // gated delta rule
  kKda = 6,  // Kimi delta attention: diagonal decay first, then the delta rule
};
std::string_view VariantName(Variant v);
std::optional<Variant> VariantFromName(std::string_view name);  // "gdn", "retnet", ...

enum class TransitionForm : uint8_t { kIdentity = 0, kScalarLog = 1, kDiagLog = 2, kDense = 3 };
TransitionForm TransitionFormOf(Variant v);
bool HasGate(Variant v);      // g is present
bool HasDiagGate(Variant v);  // g is [T, HV, dk]
bool HasBeta(Variant v);

struct Shape {
  int64_t tokens = 0;
  int32_t key_heads = 1;    // H
  int32_t value_heads = 1;  // HV
  int32_t dk = 0;
  int32_t dv = 0;
};

// Number of floats of one transition for all heads (0 for kIdentity).
int64_t TransitionFloats(TransitionForm form, const Shape& shape);

struct Inputs {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* g = nullptr;
  const float* beta = nullptr;
};

// Any output may be nullptr when not wanted. `transition` uses TransitionFormOf(variant).
struct Outputs {
  float* o = nullptr;
  float* final_state = nullptr;  // from initial_state (zero when initial_state is nullptr)
  float* zero_state = nullptr;   // S(C|0)
  float* transition = nullptr;   // T_C, compact form
};

struct ChunkOptions {
  // 16, 32 or 64. 32 by default: against 64 the intra-chunk work (scores, solve, A_qk V_new)
  // halves per token while the state's products stay, and the GDN operator ran 10% faster at
  // dk 64 and 128, the T chain's cost unchanged (Intel AMX, 2026-12-07,
  // docs/benchmarks-history.md). 16 was slower than 32 (products under 16 rows).
  int chunk_size = 32;
};

// Returns kBadRequest for a bad shape (HV % H != 0, non-positive dims) or a missing input the
// variant needs, naming it.
Status Validate(Variant variant, const Shape& shape, const Inputs& in);

// The per-token reference: fp32 storage with double accumulation. `final_state` may alias
// `initial_state`.
Status RecurrentForward(Variant variant, const Shape& shape, const Inputs& in,
                        const float* initial_state, const Outputs& out);

// The chunked (WY/UT) forward, producing every requested output in one pass. `final_state`
// may alias `initial_state` (an in-place update of the running state); no other output may
// alias an input. The dense T_C chain runs in fp32, in WY blocks of dk tokens when dk is below
// the chunk size; S(C|0) is taken as S_out - T_C S_init unless that subtraction would lose
// digits, when the zero-state chain is run instead. Value heads are split over the calling
// thread's compute budget (gpu/cpu/compute_threads.h), each head's products on one thread (see
// chunked_forward.cpp); results do not depend on the thread count.
Status ChunkedForward(Variant variant, const Shape& shape, const Inputs& in,
                      const float* initial_state, const Outputs& out,
                      const ChunkOptions& options = {});

// ChunkedForward for value heads [h0, h1) only, on the calling thread (its products on one
// thread): the same pointers and layouts as the whole call, of which it writes only those
// heads' parts, with the same bits. For a caller that splits heads over its own threads and
// runs several steps per head in one parallel region (CpuForwardKernels::LinearSteps).
Status ChunkedForwardHeads(Variant variant, const Shape& shape, const Inputs& in,
                           const float* initial_state, const Outputs& out, int h0, int h1,
                           const ChunkOptions& options = {});

// S <- T S + S_zero for all heads, in place. `state` and `zero_state` are [HV, dk, dv].
void ApplyTransition(TransitionForm form, const Shape& shape, const float* transition,
                     const float* zero_state, float* state);
// ApplyTransition for value heads [h0, h1) only, on the calling thread; same pointers.
void ApplyTransitionHeads(TransitionForm form, const Shape& shape, const float* transition,
                          const float* zero_state, float* state, int h0, int h1);

// The strawman: S <- S + S_zero (ignores T). Kept for ablations and benchmarks.
void NaiveAdd(const Shape& shape, const float* zero_state, float* state);

// (T2,S2) o (T1,S1) = (T2 T1, T2 S1 + S2): the pair of running segment 1 then segment 2.
// Outputs may alias neither input.
void Combine(TransitionForm form, const Shape& shape, const float* t2, const float* s2,
             const float* t1, const float* s1, float* t_out, float* s_out);

// Batched composition over `count` cached segments, in order: for i = 0..count-1,
// S <- T_i S + S_zero_i (all heads). transitions[i] and zero_states[i] are one segment's
// compact T and [HV, dk, dv] S_zero.
void ApplySegments(TransitionForm form, const Shape& shape, int count,
                   const float* const* transitions, const float* const* zero_states, float* state);

// Reduces the pairs of `count` consecutive segments (first segment first) into the single pair
// of their concatenation by a balanced tree of Combine calls; equal to the left fold by
// associativity. count == 0 yields the identity pair.
void CombineTree(TransitionForm form, const Shape& shape, int count,
                 const float* const* transitions, const float* const* zero_states, float* t_out,
                 float* s_out);

// Writes the identity transition (all heads) in compact form.
void SetIdentityTransition(TransitionForm form, const Shape& shape, float* transition);

// The dense [HV, dk, dk] expansion of a compact transition (exp of the log forms).
void ExpandTransition(TransitionForm form, const Shape& shape, const float* compact, float* dense);

}  // namespace hypic::linear
