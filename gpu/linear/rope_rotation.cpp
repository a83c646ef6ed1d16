#include "gpu/linear/rope_rotation.h"

#include <cmath>
#include <vector>

#include "gpu/linear/linear_math.h"

namespace hypic::linear {

namespace {

struct Angles {
  std::vector<float> cos_v, sin_v;
};

// cos/sin of delta * theta^(-2i/rot) for i < rot/2, computed in double so large offsets keep
// their precision.
Angles MakeAngles(const RopeParams& rope, int64_t delta) {
  const int half = rope.rotary_dim / 2;
  Angles a;
  a.cos_v.resize(half);
  a.sin_v.resize(half);
  for (int i = 0; i < half; ++i) {
    const double inv_freq = std::pow(rope.theta, -2.0 * i / rope.rotary_dim);
    const double angle = static_cast<double>(delta) * inv_freq;
    a.cos_v[i] = static_cast<float>(std::cos(angle));
    a.sin_v[i] = static_cast<float>(std::sin(angle));
  }
  return a;
}

// Rotates the rows of an [rows, cols] matrix (rows = dk): x <- R x.
void RotateRows(const Angles& a, int cols, float* x) {
  const int half = static_cast<int>(a.cos_v.size());
  for (int i = 0; i < half; ++i) {
    float* r0 = x + int64_t{i} * cols;
    float* r1 = x + int64_t{i + half} * cols;
    for (int c = 0; c < cols; ++c) RotatePair(r0[c], r1[c], a.cos_v[i], a.sin_v[i]);
  }
}

// x <- x R^T for a [rows, dk] matrix: every row is a vector rotated like a key.
void RotateCols(const Angles& a, int rows, int dk, float* x) {
  const int half = static_cast<int>(a.cos_v.size());
  for (int r = 0; r < rows; ++r) {
    float* row = x + int64_t{r} * dk;
    for (int i = 0; i < half; ++i) RotatePair(row[i], row[i + half], a.cos_v[i], a.sin_v[i]);
  }
}

}  // namespace

void RerotateState(const Shape& shape, const RopeParams& rope, int64_t delta, float* state) {
  const Angles a = MakeAngles(rope, delta);
  const int64_t n = int64_t{shape.dk} * shape.dv;
  for (int h = 0; h < shape.value_heads; ++h) RotateRows(a, shape.dv, state + h * n);
}

void RerotateTransition(TransitionForm form, const Shape& shape, const RopeParams& rope,
                        int64_t delta, float* transition) {
  if (form != TransitionForm::kDense) return;
  const Angles a = MakeAngles(rope, delta);
  const int64_t n = int64_t{shape.dk} * shape.dk;
  for (int h = 0; h < shape.value_heads; ++h) {
    RotateRows(a, shape.dk, transition + h * n);
    RotateCols(a, shape.dk, shape.dk, transition + h * n);
  }
}

}  // namespace hypic::linear
