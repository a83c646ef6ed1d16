#include "gpu/model/forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "gpu/linear/linear_attention.h"
#include "gpu/linear/short_conv.h"
#include "gpu/model/cpu_kernels.h"

namespace hypic::model {
namespace {

using Vec = std::vector<float>;

Vec Zeros(int64_t n) { return Vec(static_cast<size_t>(n), 0.0f); }

// Copies `cols` columns starting at `col0` of each of `rows` rows (stride ld) into a
// contiguous [rows, cols] buffer.
void CopyColumns(const float* src, int64_t ld, int64_t col0, int64_t rows, int64_t cols,
                 float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(dst + r * cols, src + r * ld + col0, static_cast<size_t>(cols) * sizeof(float));
  }
}

float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

linear::Shape GdnShape(const ModelConfig& c, int64_t tokens) {
  linear::Shape s;
  s.tokens = tokens;
  s.key_heads = static_cast<int32_t>(c.linear_key_heads);
  s.value_heads = static_cast<int32_t>(c.linear_value_heads);
  s.dk = static_cast<int32_t>(c.linear_key_dim);
  s.dv = static_cast<int32_t>(c.linear_value_dim);
  return s;
}

}  // namespace

Model::Pass::Pass(const Model& model, ModelState& state, ComposeMode mode)
    : model_(model), state_(state), mode_(mode), end_pos_(state.n_positions) {}

float* Model::Pass::Scratch(ScratchSlot slot, int64_t n) {
  Vec& v = scratch_[slot];
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  return v.data();
}

void Model::Pass::AddLive(std::span<const uint32_t> tokens) {
  if (tokens.empty()) return;
  const auto n = static_cast<int64_t>(tokens.size());
  const bool merge = !blocks_.empty() && blocks_.back().live &&
                     capture_block_ != static_cast<int64_t>(blocks_.size()) - 1;
  if (merge) {
    blocks_.back().n += n;
  } else {
    blocks_.push_back({true, end_pos_, n, live_tokens(), nullptr});
  }
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  end_pos_ += n;
}

Status Model::Pass::AddCapture(std::span<const uint32_t> tokens, int64_t seam,
                               SegmentEntry* capture) {
  const ModelConfig& c = model_.config_;
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t kept = n - seam;
  capture_.assign(static_cast<size_t>(c.num_layers), {});
  for (int64_t li = 0; li < c.num_layers; ++li) {
    CaptureTensors& ct = capture_[static_cast<size_t>(li)];
    const auto layer = static_cast<uint32_t>(li);
    if (c.layer_kinds[static_cast<size_t>(li)] == LayerKind::kLinear) {
      const int64_t hv = c.linear_value_heads, dk = c.linear_key_dim, dv = c.linear_value_dim;
      HYPIC_ASSIGN_OR_RETURN(TensorView t, capture->AddTensor(layer, TensorKind::kTransition,
                                                              DType::kF32, {hv, dk, dk}));
      HYPIC_ASSIGN_OR_RETURN(
          TensorView s, capture->AddTensor(layer, TensorKind::kState, DType::kF32, {hv, dk, dv}));
      HYPIC_ASSIGN_OR_RETURN(TensorView conv,
                             capture->AddTensor(layer, TensorKind::kConvTail, DType::kF32,
                                                {c.conv_kernel - 1, c.conv_channels()}));
      ct.t = t.data_as<float>();
      ct.s = s.data_as<float>();
      ct.conv = conv.data_as<float>();
    } else {
      const Shape shape{kept, c.num_kv_heads, c.head_dim};
      HYPIC_ASSIGN_OR_RETURN(TensorView k,
                             capture->AddTensor(layer, TensorKind::kKey, DType::kF32, shape));
      HYPIC_ASSIGN_OR_RETURN(TensorView v,
                             capture->AddTensor(layer, TensorKind::kValue, DType::kF32, shape));
      ct.k = k.data_as<float>();
      ct.v = v.data_as<float>();
    }
  }
  blocks_.push_back({true, end_pos_, n, live_tokens(), nullptr});
  capture_block_ = static_cast<int64_t>(blocks_.size()) - 1;
  capture_seam_ = seam;
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  end_pos_ += n;
  return Status::Ok();
}

void Model::Pass::AddCached(const SegmentEntry* entry, int64_t n_cached) {
  blocks_.push_back({false, end_pos_, n_cached, 0, entry});
  end_pos_ += n_cached;
  cached_tokens_ += n_cached;
}

Status Model::Pass::Run(bool all_logits, std::vector<float>* logits) {
  const ModelConfig& c = model_.config_;
  const ModelWeights& w = model_.weights_;
  const int64_t rows = live_tokens(), h = c.hidden_size;
  if (rows == 0) return Internal("a pass needs at least one live token");
  const auto eps = static_cast<float>(c.rms_norm_eps);

  Vec x = Zeros(rows * h), xn = Zeros(rows * h), y = Zeros(rows * h);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(x.data() + r * h,
                w.embed.data() + static_cast<int64_t>(tokens_[static_cast<size_t>(r)]) * h,
                static_cast<size_t>(h) * sizeof(float));
  }
  for (int64_t li = 0; li < c.num_layers; ++li) {
    const LayerWeights& lw = w.layers[static_cast<size_t>(li)];
    RmsNormZeroCentred(x.data(), h, lw.input_norm.data(), xn.data(), h, rows, h, eps);
    if (c.layer_kinds[static_cast<size_t>(li)] == LayerKind::kLinear) {
      HYPIC_RETURN_IF_ERROR(GdnLayer(li, xn.data(), y.data()));
    } else {
      AttentionLayer(li, xn.data(), y.data());
    }
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
    RmsNormZeroCentred(x.data(), h, lw.post_norm.data(), xn.data(), h, rows, h, eps);
    MlpLayer(li, xn.data(), y.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
  }
  state_.n_positions = end_pos_;
  if (logits == nullptr) return Status::Ok();

  const int64_t first = all_logits ? 0 : rows - 1, n_out = rows - first;
  RmsNormZeroCentred(x.data() + first * h, h, w.final_norm.data(), xn.data(), h, n_out, h, eps);
  const Vec& head = c.tie_word_embeddings ? w.embed : w.lm_head;
  logits->assign(static_cast<size_t>(n_out * c.vocab_size), 0.0f);
  Gemm(n_out, c.vocab_size, h, xn.data(), h, head.data(), h, logits->data(), c.vocab_size);
  return Status::Ok();
}

Status Model::Pass::GdnLayer(int64_t li, const float* xn, float* y) {
  const ModelConfig& c = model_.config_;
  const GdnWeights& g = model_.weights_.layers[static_cast<size_t>(li)].gdn;
  LayerState& ls = state_.layers[static_cast<size_t>(li)];
  const int64_t rows = live_tokens(), h = c.hidden_size;
  const int64_t nk = c.linear_key_heads, nv = c.linear_value_heads;
  const int64_t dk = c.linear_key_dim, dv = c.linear_value_dim;
  const int64_t ch = c.conv_channels(), vw = c.value_width(), cin = ch + vw + 2 * nv;

  float* proj = Scratch(kProj, rows * cin);
  Gemm(rows, cin, h, xn, h, g.in_proj.data(), h, proj, cin);
  float* pre = Scratch(kPre, rows * ch);
  float* mixed = Scratch(kMixed, rows * ch);
  CopyColumns(proj, cin, 0, rows, ch, pre);
  float* q = Scratch(kQ, rows * nk * dk);
  float* k = Scratch(kK, rows * nk * dk);
  float* v = Scratch(kV, rows * vw);
  float* gate = Scratch(kGate, rows * nv);
  float* beta = Scratch(kBeta, rows * nv);
  float* o = Scratch(kO, rows * vw);
  Vec& next = next_state_;
  next.resize(static_cast<size_t>(nv * dk * dv));
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));

  for (size_t bi = 0; bi < blocks_.size(); ++bi) {
    const Block& b = blocks_[bi];
    const bool capturing = static_cast<int64_t>(bi) == capture_block_;
    if (!b.live) {
      const linear::Shape shape = GdnShape(c, b.n);
      const auto* t = b.entry->Find(static_cast<uint32_t>(li), TensorKind::kTransition);
      const auto* s = b.entry->Find(static_cast<uint32_t>(li), TensorKind::kState);
      const auto* tail = b.entry->Find(static_cast<uint32_t>(li), TensorKind::kConvTail);
      if (mode_ == ComposeMode::kNaive) {
        linear::NaiveAdd(shape, s->view.data_as<const float>(), ls.state.data());
      } else {
        linear::ApplyTransition(linear::TransitionForm::kDense, shape,
                                t->view.data_as<const float>(), s->view.data_as<const float>(),
                                ls.state.data());
      }
      std::memcpy(ls.conv.data(), tail->view.data(), ls.conv.size() * sizeof(float));
      continue;
    }
    const int64_t r0 = b.row0, n = b.n;
    linear::CausalConv({n, static_cast<int32_t>(ch), static_cast<int32_t>(c.conv_kernel)},
                       pre + r0 * ch, g.conv.data(), nullptr, ls.conv.data(), mixed + r0 * ch,
                       /*apply_silu=*/true);
    if (capturing) {
      std::memcpy(capture_[static_cast<size_t>(li)].conv, ls.conv.data(),
                  ls.conv.size() * sizeof(float));
    }
    // q, k: L2-normalised per head (eps 1e-6 inside the root), q scaled by 1/sqrt(dk).
    ParallelFor(n, 64, [&](int64_t t0, int64_t t1) {
      for (int64_t r = r0 + t0; r < r0 + t1; ++r) {
        const float* m = mixed + r * ch;
        for (int64_t i = 0; i < 2 * nk; ++i) {
          const float* src = m + i * dk;
          double ss = 0.0;
          for (int64_t d = 0; d < dk; ++d) ss += static_cast<double>(src[d]) * src[d];
          const bool is_q = i < nk;
          const float inv =
              static_cast<float>(1.0 / std::sqrt(ss + 1e-6)) * (is_q ? q_scale : 1.0f);
          float* dst = is_q ? q + (r * nk + i) * dk : k + (r * nk + i - nk) * dk;
          for (int64_t d = 0; d < dk; ++d) dst[d] = src[d] * inv;
        }
        std::memcpy(v + r * vw, m + 2 * nk * dk, static_cast<size_t>(vw) * sizeof(float));
        const float* ba = proj + r * cin + ch + vw;
        for (int64_t hh = 0; hh < nv; ++hh) {
          beta[r * nv + hh] = Sigmoid(ba[hh]);
          gate[r * nv + hh] = -std::exp(g.a_log[static_cast<size_t>(hh)]) *
                              Softplus(ba[nv + hh] + g.dt_bias[static_cast<size_t>(hh)]);
        }
      }
    });
    auto inputs = [&](int64_t row) {
      linear::Inputs in;
      in.q = q + row * nk * dk;
      in.k = k + row * nk * dk;
      in.v = v + row * vw;
      in.g = gate + row * nv;
      in.beta = beta + row * nv;
      return in;
    };
    // Advances the running state over rows [row, row + len) (outputs into o).
    auto run = [&](int64_t row, int64_t len, const float* initial, linear::Outputs out) {
      out.o = o + row * vw;
      return linear::ChunkedForward(linear::Variant::kGdn, GdnShape(c, len), inputs(row), initial,
                                    out);
    };
    if (!capturing) {
      HYPIC_RETURN_IF_ERROR(run(r0, n, ls.state.data(), {.final_state = next.data()}));
      ls.state.swap(next);
      continue;
    }
    // The entry's pair covers [w, n) and starts from zero (ChunkedForward runs that chain
    // beside the one from the running state, which gives the outputs).
    const CaptureTensors& ct = capture_[static_cast<size_t>(li)];
    const int64_t seam = capture_seam_;
    if (seam > 0) {
      HYPIC_RETURN_IF_ERROR(run(r0, seam, ls.state.data(), {.final_state = next.data()}));
      ls.state.swap(next);
    }
    HYPIC_RETURN_IF_ERROR(
        run(r0 + seam, n - seam, ls.state.data(),
            {.final_state = next.data(), .zero_state = ct.s, .transition = ct.t}));
    ls.state.swap(next);
  }

  // Plain gated RMSNorm per value head: w * x / rms(x) * silu(z).
  const auto eps = static_cast<float>(c.rms_norm_eps);
  ParallelFor(rows, 64, [&](int64_t t0, int64_t t1) {
    for (int64_t r = t0; r < t1; ++r) {
      for (int64_t hh = 0; hh < nv; ++hh) {
        float* oh = o + r * vw + hh * dv;
        const float* z = proj + r * cin + ch + hh * dv;
        double ss = 0.0;
        for (int64_t d = 0; d < dv; ++d) ss += static_cast<double>(oh[d]) * oh[d];
        const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dv) + eps));
        for (int64_t d = 0; d < dv; ++d)
          oh[d] = g.norm[static_cast<size_t>(d)] * (oh[d] * inv) * Silu(z[d]);
      }
    }
  });
  Gemm(rows, h, vw, o, vw, g.out_proj.data(), vw, y, h);
  return Status::Ok();
}

void Model::Pass::AttentionLayer(int64_t li, const float* xn, float* y) {
  const ModelConfig& c = model_.config_;
  const AttentionWeights& a = model_.weights_.layers[static_cast<size_t>(li)].attention;
  LayerState& ls = state_.layers[static_cast<size_t>(li)];
  const int64_t rows = live_tokens(), h = c.hidden_size;
  const int64_t nh = c.num_heads, nkv = c.num_kv_heads, hd = c.head_dim, rot = c.rotary_dim();
  const int64_t qw = nh * hd, kw = nkv * hd, cols = 2 * qw + 2 * kw;
  const auto eps = static_cast<float>(c.rms_norm_eps);

  float* proj = Scratch(kProj, rows * cols);
  Gemm(rows, cols, h, xn, h, a.in_proj.data(), h, proj, cols);
  float* q = Scratch(kQ, rows * qw);
  float* k = Scratch(kK, rows * kw);
  float* v = Scratch(kV, rows * kw);
  CopyColumns(proj, cols, 0, rows, qw, q);
  CopyColumns(proj, cols, 2 * qw, rows, kw, k);
  CopyColumns(proj, cols, 2 * qw + kw, rows, kw, v);
  RmsNormZeroCentred(q, hd, a.q_norm.data(), q, hd, rows * nh, hd, eps);
  RmsNormZeroCentred(k, hd, a.k_norm.data(), k, hd, rows * nkv, hd, eps);

  // K/V of every position: the state's, then each block's in order.
  const auto positions = static_cast<size_t>(end_pos_);
  ls.k.resize(positions * static_cast<size_t>(kw));
  ls.v.resize(positions * static_cast<size_t>(kw));
  for (size_t bi = 0; bi < blocks_.size(); ++bi) {
    const Block& b = blocks_[bi];
    float* kdst = ls.k.data() + b.pos0 * kw;
    float* vdst = ls.v.data() + b.pos0 * kw;
    const size_t bytes = static_cast<size_t>(b.n * kw) * sizeof(float);
    if (b.live) {
      if (static_cast<int64_t>(bi) == capture_block_) {  // K before RoPE, see model.h
        const CaptureTensors& ct = capture_[static_cast<size_t>(li)];
        const size_t kept = static_cast<size_t>((b.n - capture_seam_) * kw) * sizeof(float);
        std::memcpy(ct.k, k + (b.row0 + capture_seam_) * kw, kept);
        std::memcpy(ct.v, v + (b.row0 + capture_seam_) * kw, kept);
      }
      ApplyRope(q + b.row0 * qw, qw, b.n, nh, hd, rot, c.rope_theta, b.pos0);
      ApplyRope(k + b.row0 * kw, kw, b.n, nkv, hd, rot, c.rope_theta, b.pos0);
      std::memcpy(kdst, k + b.row0 * kw, bytes);
      std::memcpy(vdst, v + b.row0 * kw, bytes);
    } else {
      const auto layer = static_cast<uint32_t>(li);
      std::memcpy(kdst, b.entry->Find(layer, TensorKind::kKey)->view.data(), bytes);
      std::memcpy(vdst, b.entry->Find(layer, TensorKind::kValue)->view.data(), bytes);
      ApplyRope(kdst, kw, b.n, nkv, hd, rot, c.rope_theta, b.pos0);
    }
  }

  float* attn = Scratch(kAttn, rows * qw);
  for (const Block& b : blocks_) {
    if (!b.live) continue;
    CausalAttention({nh, nkv, hd}, q + b.row0 * qw, ls.k.data(), ls.v.data(), attn + b.row0 * qw,
                    b.n, b.pos0);
  }
  ParallelFor(rows, 64, [&](int64_t t0, int64_t t1) {
    for (int64_t r = t0; r < t1; ++r) {
      const float* gate = proj + r * cols + qw;
      float* out = attn + r * qw;
      for (int64_t i = 0; i < qw; ++i) out[i] *= Sigmoid(gate[i]);
    }
  });
  Gemm(rows, h, qw, attn, qw, a.o_proj.data(), qw, y, h);
}

void Model::Pass::SwiGlu(const MlpWeights& m, const float* x, int64_t rows, float* out) {
  const int64_t h = model_.config_.hidden_size, im = m.intermediate;
  float* gu = Scratch(kGateUp, rows * 2 * im);
  Gemm(rows, 2 * im, h, x, h, m.gate_up.data(), h, gu, 2 * im);
  ParallelFor(rows, 32, [&](int64_t t0, int64_t t1) {
    for (int64_t r = t0; r < t1; ++r) {
      float* row = gu + r * 2 * im;
      // The activation overwrites the gate half in place; down reads it with stride 2*im.
      for (int64_t i = 0; i < im; ++i) row[i] = Silu(row[i]) * row[im + i];
    }
  });
  Gemm(rows, h, im, gu, 2 * im, m.down.data(), im, out, h);
}

void Model::Pass::MlpLayer(int64_t li, const float* xn, float* y) {
  const ModelConfig& c = model_.config_;
  const LayerWeights& lw = model_.weights_.layers[static_cast<size_t>(li)];
  const int64_t rows = live_tokens(), h = c.hidden_size;
  if (c.mlp_kinds[static_cast<size_t>(li)] == MlpKind::kDense) {
    SwiGlu(lw.dense, xn, rows, y);
    return;
  }
  const MoeWeights& m = lw.moe;
  const int64_t ne = c.num_experts, top = c.experts_per_token;
  float* logits = Scratch(kRouter, rows * ne);
  Gemm(rows, ne, h, xn, h, m.router.data(), h, logits, ne);

  // Route: fp32 softmax, top-k, renormalised when norm_topk_prob. Then group rows by expert so
  // each expert runs as one sgemm over its tokens.
  std::vector<std::vector<int64_t>> expert_rows(static_cast<size_t>(ne));
  std::vector<std::vector<float>> expert_weights(static_cast<size_t>(ne));
  std::vector<int64_t> order(static_cast<size_t>(ne));
  Vec prob(static_cast<size_t>(ne));
  for (int64_t r = 0; r < rows; ++r) {
    const float* lr = logits + r * ne;
    const float mx = *std::max_element(lr, lr + ne);
    double sum = 0.0;
    for (int64_t e = 0; e < ne; ++e) sum += prob[static_cast<size_t>(e)] = std::exp(lr[e] - mx);
    for (float& p : prob) p = static_cast<float>(p / sum);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + top, order.end(), [&](int64_t a, int64_t b) {
      const float pa = prob[static_cast<size_t>(a)], pb = prob[static_cast<size_t>(b)];
      return pa > pb || (pa == pb && a < b);
    });
    float norm = 1.0f;
    if (c.norm_topk_prob) {
      float s = 0.0f;
      for (int64_t j = 0; j < top; ++j)
        s += prob[static_cast<size_t>(order[static_cast<size_t>(j)])];
      norm = 1.0f / s;
    }
    for (int64_t j = 0; j < top; ++j) {
      const auto e = static_cast<size_t>(order[static_cast<size_t>(j)]);
      expert_rows[e].push_back(r);
      expert_weights[e].push_back(prob[e] * norm);
    }
  }

  std::fill(y, y + rows * h, 0.0f);
  for (int64_t e = 0; e < ne; ++e) {
    const auto& er = expert_rows[static_cast<size_t>(e)];
    const auto& ew = expert_weights[static_cast<size_t>(e)];
    const auto n = static_cast<int64_t>(er.size());
    if (n == 0) continue;
    float* gathered = Scratch(kGathered, n * h);
    float* out = Scratch(kExpertOut, n * h);
    for (int64_t j = 0; j < n; ++j) {
      std::memcpy(gathered + j * h, xn + er[static_cast<size_t>(j)] * h,
                  static_cast<size_t>(h) * sizeof(float));
    }
    SwiGlu(m.experts[static_cast<size_t>(e)], gathered, n, out);
    for (int64_t j = 0; j < n; ++j) {
      float* yr = y + er[static_cast<size_t>(j)] * h;
      const float wgt = ew[static_cast<size_t>(j)];
      const float* src = out + j * h;
      for (int64_t i = 0; i < h; ++i) yr[i] += wgt * src[i];
    }
  }
  if (m.shared.intermediate > 0) {
    float* out = Scratch(kExpertOut, rows * h);
    SwiGlu(m.shared, xn, rows, out);
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = xn + r * h;
      double dot = 0.0;
      for (int64_t i = 0; i < h; ++i)
        dot += static_cast<double>(xr[i]) * m.shared_gate[static_cast<size_t>(i)];
      const float sg = Sigmoid(static_cast<float>(dot));
      float* yr = y + r * h;
      const float* src = out + r * h;
      for (int64_t i = 0; i < h; ++i) yr[i] += sg * src[i];
    }
  }
}

}  // namespace hypic::model
