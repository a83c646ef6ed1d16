// Helpers shared by the CPU and CUDA implementations of gpu/linear; not part of the public
// interface. Stateless and thread-compatible.
#pragma once

#include "core/status.h"
#include "gpu/linear/linear_attention.h"
#include "gpu/linear/linear_math.h"

namespace hypic::linear {

DecayKind DecayKindOf(Variant v);

// kBadRequest unless H, HV, dk, dv are positive, tokens >= 0 and HV % H == 0.
Status ValidateShape(const Shape& shape);

// Writes head `head`'s transition in compact form: `dense` [dk, dk] for kDense, the summed
// log-decay for the log forms.
void WriteTransition(TransitionForm form, const Shape& shape, int head, const float* dense,
                     double log_sum, const double* log_sum_diag, float* transition);

}  // namespace hypic::linear
