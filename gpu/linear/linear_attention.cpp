// Variant metadata, validation, the per-token reference recurrence and the (T, S) algebra.
// The chunked forward lives in chunked_forward.cpp.
#include "gpu/linear/linear_attention.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/aligned_vector.h"
#include "gpu/cpu/compute_threads.h"
#include "gpu/cpu/gemm.h"
#include "gpu/linear/linear_internal.h"
#include "gpu/linear/linear_math.h"

namespace hypic::linear {

namespace {

struct NamedVariant {
  std::string_view name;
  Variant variant;
};

// The first entry of each variant is its canonical name; the rest are accepted aliases.
constexpr std::array<NamedVariant, 9> kVariantNames = {{
    {"linear", Variant::kLinear},
    {"retnet", Variant::kRetNet},
    {"mamba2", Variant::kMamba2},
    {"gla", Variant::kGla},
    {"deltanet", Variant::kDeltaNet},
    {"gdn", Variant::kGdn},
    {"kda", Variant::kKda},
    {"simple_gla", Variant::kMamba2},
    {"lightning", Variant::kMamba2},
}};

}  // namespace

std::string_view VariantName(Variant v) {
  for (const auto& nv : kVariantNames) {
    if (nv.variant == v) return nv.name;
  }
  return "unknown";
}

std::optional<Variant> VariantFromName(std::string_view name) {
  for (const auto& nv : kVariantNames) {
    if (nv.name == name) return nv.variant;
  }
  return std::nullopt;
}

TransitionForm TransitionFormOf(Variant v) {
  switch (v) {
    case Variant::kLinear: return TransitionForm::kIdentity;
    case Variant::kRetNet:
    case Variant::kMamba2: return TransitionForm::kScalarLog;
    case Variant::kGla: return TransitionForm::kDiagLog;
    case Variant::kDeltaNet:
    case Variant::kGdn:
    case Variant::kKda: return TransitionForm::kDense;
  }
  return TransitionForm::kDense;
}

bool HasGate(Variant v) { return v != Variant::kLinear && v != Variant::kDeltaNet; }
bool HasDiagGate(Variant v) { return v == Variant::kGla || v == Variant::kKda; }
bool HasBeta(Variant v) {
  return v == Variant::kDeltaNet || v == Variant::kGdn || v == Variant::kKda;
}

DecayKind DecayKindOf(Variant v) {
  if (!HasGate(v)) return DecayKind::kNone;
  return HasDiagGate(v) ? DecayKind::kDiag : DecayKind::kScalar;
}

int64_t TransitionFloats(TransitionForm form, const Shape& shape) {
  switch (form) {
    case TransitionForm::kIdentity: return 0;
    case TransitionForm::kScalarLog: return shape.value_heads;
    case TransitionForm::kDiagLog: return int64_t{shape.value_heads} * shape.dk;
    case TransitionForm::kDense: return int64_t{shape.value_heads} * shape.dk * shape.dk;
  }
  return 0;
}

Status ValidateShape(const Shape& shape) {
  if (shape.tokens < 0)
    return BadRequest("tokens must be >= 0, got " + std::to_string(shape.tokens));
  if (shape.key_heads <= 0 || shape.value_heads <= 0 || shape.dk <= 0 || shape.dv <= 0) {
    return BadRequest("key_heads, value_heads, dk and dv must be positive (got H=" +
                      std::to_string(shape.key_heads) + " HV=" + std::to_string(shape.value_heads) +
                      " dk=" + std::to_string(shape.dk) + " dv=" + std::to_string(shape.dv) + ")");
  }
  if (shape.value_heads % shape.key_heads != 0) {
    return BadRequest("value heads HV=" + std::to_string(shape.value_heads) +
                      " is not a multiple of key heads H=" + std::to_string(shape.key_heads));
  }
  return Status::Ok();
}

Status Validate(Variant variant, const Shape& shape, const Inputs& in) {
  HYPIC_RETURN_IF_ERROR(ValidateShape(shape));
  if (shape.tokens == 0) return Status::Ok();
  const std::string name(VariantName(variant));
  if (in.q == nullptr) return BadRequest(name + ": missing input q [T,H,dk]");
  if (in.k == nullptr) return BadRequest(name + ": missing input k [T,H,dk]");
  if (in.v == nullptr) return BadRequest(name + ": missing input v [T,HV,dv]");
  if (HasGate(variant) && in.g == nullptr) {
    return BadRequest(name + ": missing input g " +
                      (HasDiagGate(variant) ? "[T,HV,dk]" : "[T,HV]"));
  }
  if (HasBeta(variant) && in.beta == nullptr) {
    return BadRequest(name + ": missing input beta [T,HV]");
  }
  return Status::Ok();
}

Status RecurrentForward(Variant variant, const Shape& shape, const Inputs& in,
                        const float* initial_state, const Outputs& out) {
  HYPIC_RETURN_IF_ERROR(Validate(variant, shape, in));
  const int dk = shape.dk, dv = shape.dv, H = shape.key_heads, HV = shape.value_heads;
  const int group = HV / H;
  const DecayKind kind = DecayKindOf(variant);
  const bool delta = HasBeta(variant);
  const TransitionForm form = TransitionFormOf(variant);
  const int64_t state_floats = int64_t{dk} * dv;
  const bool zero_chain = out.zero_state != nullptr && initial_state != nullptr;
  const bool dense_t = out.transition != nullptr && form == TransitionForm::kDense;

  std::vector<float> s(state_floats), z(zero_chain ? state_floats : 0),
      t(dense_t ? int64_t{dk} * dk : 0), decay(dk);
  for (int h = 0; h < HV; ++h) {
    const int kh = h / group;
    if (initial_state != nullptr) {
      std::memcpy(s.data(), initial_state + h * state_floats, state_floats * sizeof(float));
    } else {
      std::fill(s.begin(), s.end(), 0.0f);
    }
    std::fill(z.begin(), z.end(), 0.0f);
    std::fill(t.begin(), t.end(), 0.0f);
    for (int d = 0; d < (dense_t ? dk : 0); ++d) t[int64_t{d} * dk + d] = 1.0f;
    double log_sum = 0.0;
    std::vector<double> log_sum_diag(form == TransitionForm::kDiagLog ? dk : 0, 0.0);

    for (int64_t tok = 0; tok < shape.tokens; ++tok) {
      const float* k = in.k + (tok * H + kh) * dk;
      const float* q = in.q + (tok * H + kh) * dk;
      const float* v = in.v + (tok * HV + h) * dv;
      const float beta = delta ? in.beta[tok * HV + h] : 0.0f;
      float scalar_decay = 1.0f;
      if (kind == DecayKind::kScalar) {
        const float g = in.g[tok * HV + h];
        scalar_decay = std::exp(g);
        log_sum += g;
      } else if (kind == DecayKind::kDiag) {
        const float* g = in.g + (tok * HV + h) * dk;
        for (int d = 0; d < dk; ++d) {
          decay[d] = std::exp(g[d]);
          if (!log_sum_diag.empty()) log_sum_diag[d] += g[d];
        }
      }
      float* o = out.o != nullptr ? out.o + (tok * HV + h) * dv : nullptr;
      for (int j = 0; j < dv; ++j) {
        const float oj = ColumnStep<double>(kind, delta, dk, s.data() + j, dv, k, q, v[j], beta,
                                            decay.data(), scalar_decay);
        if (o != nullptr) o[j] = oj;
        if (zero_chain) {
          ColumnStep<double>(kind, delta, dk, z.data() + j, dv, k, nullptr, v[j], beta,
                             decay.data(), scalar_decay);
        }
      }
      for (int c = 0; c < (dense_t ? dk : 0); ++c) {
        ColumnStep<double>(kind, delta, dk, t.data() + c, dk, k, nullptr, 0.0f, beta, decay.data(),
                           scalar_decay);
      }
    }
    if (out.final_state != nullptr) {
      std::memcpy(out.final_state + h * state_floats, s.data(), state_floats * sizeof(float));
    }
    if (out.zero_state != nullptr) {
      std::memcpy(out.zero_state + h * state_floats, zero_chain ? z.data() : s.data(),
                  state_floats * sizeof(float));
    }
    if (out.transition != nullptr) {
      WriteTransition(form, shape, h, t.data(), log_sum, log_sum_diag.data(), out.transition);
    }
  }
  return Status::Ok();
}

void WriteTransition(TransitionForm form, const Shape& shape, int head, const float* dense,
                     double log_sum, const double* log_sum_diag, float* transition) {
  switch (form) {
    case TransitionForm::kIdentity: return;
    case TransitionForm::kScalarLog: transition[head] = static_cast<float>(log_sum); return;
    case TransitionForm::kDiagLog:
      for (int d = 0; d < shape.dk; ++d) {
        transition[int64_t{head} * shape.dk + d] = static_cast<float>(log_sum_diag[d]);
      }
      return;
    case TransitionForm::kDense: {
      const int64_t n = int64_t{shape.dk} * shape.dk;
      std::memcpy(transition + head * n, dense, n * sizeof(float));
      return;
    }
  }
}

namespace {

// out = T s + z for one head (z may be nullptr); `out` must not alias `s`.
void ApplyHead(TransitionForm form, const Shape& shape, int head, const float* transition,
               const float* s, const float* z, float* out) {
  const int dk = shape.dk, dv = shape.dv;
  const int64_t n = int64_t{dk} * dv;
  if (form != TransitionForm::kDense) {
    for (int r = 0; r < dk; ++r) {
      const float a = LogTransitionFactor(form, transition, head, r, dk);
      for (int c = 0; c < dv; ++c) {
        const int64_t i = int64_t{r} * dv + c;
        out[i] = a * s[i] + (z != nullptr ? z[i] : 0.0f);
      }
    }
    return;
  }
  const float* t = transition + int64_t{head} * dk * dk;
  if (z != nullptr) std::memcpy(out, z, n * sizeof(float));
  cpu::Gemm(cpu::Trans::kNo, cpu::Trans::kNo, dk, dv, dk, 1.0f, t, dk, s, dv,
            z != nullptr ? 1.0f : 0.0f, out, dv);
}

// t_out = t2 t1 for one head.
void ComposeTransitionHead(TransitionForm form, const Shape& shape, int head, const float* t2,
                           const float* t1, float* t_out) {
  const int dk = shape.dk;
  switch (form) {
    case TransitionForm::kIdentity: return;
    case TransitionForm::kScalarLog: t_out[head] = t2[head] + t1[head]; return;
    case TransitionForm::kDiagLog:
      for (int d = 0; d < dk; ++d) {
        const int64_t i = int64_t{head} * dk + d;
        t_out[i] = t2[i] + t1[i];
      }
      return;
    case TransitionForm::kDense: {
      const int64_t off = int64_t{head} * dk * dk;
      cpu::Gemm(cpu::Trans::kNo, cpu::Trans::kNo, dk, dk, dk, 1.0f, t2 + off, dk, t1 + off, dk,
                0.0f, t_out + off, dk);
      return;
    }
  }
}

}  // namespace

void ApplyTransition(TransitionForm form, const Shape& shape, const float* transition,
                     const float* zero_state, float* state) {
  // Heads side by side, each on one thread: a head's product (dk x dk by dk x dv, 64^3 in
  // anchor-small) is too small to split, and one GEMM per head on the whole budget paid a
  // thread-team start per head.
  cpu::ParallelFor(shape.value_heads, 1, [&](int64_t h0, int64_t h1) {
    ApplyTransitionHeads(form, shape, transition, zero_state, state, static_cast<int>(h0),
                         static_cast<int>(h1));
  });
}

void ApplyTransitionHeads(TransitionForm form, const Shape& shape, const float* transition,
                          const float* zero_state, float* state, int h0, int h1) {
  const int64_t n = int64_t{shape.dk} * shape.dv;
  thread_local AlignedVector<float> tmp;  // on cache lines, as the states are
  tmp.resize(static_cast<size_t>(n));
  for (int64_t h = h0; h < h1; ++h) {
    ApplyHead(form, shape, static_cast<int>(h), transition, state + h * n,
              zero_state != nullptr ? zero_state + h * n : nullptr, tmp.data());
    std::memcpy(state + h * n, tmp.data(), n * sizeof(float));
  }
}

void NaiveAdd(const Shape& shape, const float* zero_state, float* state) {
  const int64_t n = int64_t{shape.value_heads} * shape.dk * shape.dv;
  for (int64_t i = 0; i < n; ++i) state[i] += zero_state[i];
}

void Combine(TransitionForm form, const Shape& shape, const float* t2, const float* s2,
             const float* t1, const float* s1, float* t_out, float* s_out) {
  const int64_t n = int64_t{shape.dk} * shape.dv;
  cpu::ParallelFor(shape.value_heads, 1, [&](int64_t h0, int64_t h1) {  // as ApplyTransition
    for (int64_t h = h0; h < h1; ++h) {
      const int head = static_cast<int>(h);
      ApplyHead(form, shape, head, t2, s1 + h * n, s2 + h * n, s_out + h * n);
      ComposeTransitionHead(form, shape, head, t2, t1, t_out);
    }
  });
}

void ApplySegments(TransitionForm form, const Shape& shape, int count,
                   const float* const* transitions, const float* const* zero_states, float* state) {
  for (int i = 0; i < count; ++i) {
    ApplyTransition(form, shape, transitions[i], zero_states[i], state);
  }
}

void CombineTree(TransitionForm form, const Shape& shape, int count,
                 const float* const* transitions, const float* const* zero_states, float* t_out,
                 float* s_out) {
  const int64_t t_floats = TransitionFloats(form, shape);
  const int64_t s_floats = int64_t{shape.value_heads} * shape.dk * shape.dv;
  if (count <= 0) {
    SetIdentityTransition(form, shape, t_out);
    std::fill(s_out, s_out + s_floats, 0.0f);
    return;
  }
  // Level by level: pair (2i, 2i+1) -> i, the later segment on the left of the combine.
  std::vector<std::vector<float>> t_level(count), s_level(count);
  for (int i = 0; i < count; ++i) {
    t_level[i].assign(transitions[i], transitions[i] + t_floats);
    s_level[i].assign(zero_states[i], zero_states[i] + s_floats);
  }
  while (t_level.size() > 1) {
    const size_t next = (t_level.size() + 1) / 2;
    std::vector<std::vector<float>> t_next(next), s_next(next);
    for (size_t i = 0; i < next; ++i) {
      if (2 * i + 1 == t_level.size()) {
        t_next[i] = std::move(t_level[2 * i]);
        s_next[i] = std::move(s_level[2 * i]);
        continue;
      }
      t_next[i].resize(t_floats);
      s_next[i].resize(s_floats);
      Combine(form, shape, t_level[2 * i + 1].data(), s_level[2 * i + 1].data(),
              t_level[2 * i].data(), s_level[2 * i].data(), t_next[i].data(), s_next[i].data());
    }
    t_level = std::move(t_next);
    s_level = std::move(s_next);
  }
  std::copy(t_level[0].begin(), t_level[0].end(), t_out);
  std::copy(s_level[0].begin(), s_level[0].end(), s_out);
}

void SetIdentityTransition(TransitionForm form, const Shape& shape, float* transition) {
  const int64_t n = TransitionFloats(form, shape);
  std::fill(transition, transition + n, 0.0f);
  if (form != TransitionForm::kDense) return;
  for (int h = 0; h < shape.value_heads; ++h) {
    for (int d = 0; d < shape.dk; ++d) {
      transition[(int64_t{h} * shape.dk + d) * shape.dk + d] = 1.0f;
    }
  }
}

void ExpandTransition(TransitionForm form, const Shape& shape, const float* compact, float* dense) {
  const int dk = shape.dk;
  const int64_t per_head = int64_t{dk} * dk;
  if (form == TransitionForm::kDense) {
    std::memcpy(dense, compact, shape.value_heads * per_head * sizeof(float));
    return;
  }
  std::fill(dense, dense + shape.value_heads * per_head, 0.0f);
  for (int h = 0; h < shape.value_heads; ++h) {
    for (int d = 0; d < dk; ++d) {
      float a = 1.0f;
      if (form == TransitionForm::kScalarLog) a = std::exp(compact[h]);
      if (form == TransitionForm::kDiagLog) a = std::exp(compact[int64_t{h} * dk + d]);
      dense[h * per_head + int64_t{d} * dk + d] = a;
    }
  }
}

}  // namespace hypic::linear
