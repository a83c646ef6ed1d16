#include "gpu/model/forward.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "gpu/cpu/compute_threads.h"
#include "gpu/linear/linear_attention.h"
#include "gpu/linear/short_conv.h"

namespace hypic::model {
namespace {

// ConvertElements split over the compute threads: a compose of bf16 entries widens every
// cached position's K/V (tens of MB), which on one thread cost 8 of a 52 ms compose (16 x 1024
// + 32, builtin:small, 2 threads), and a bf16 entry's capture is rounded the same way.
void ConvertOnComputeThreads(DType from, const void* src, DType to, void* dst, int64_t n) {
  const auto* s = static_cast<const std::byte*>(src);
  auto* d = static_cast<std::byte*>(dst);
  const auto from_size = static_cast<int64_t>(DTypeSize(from));
  const auto to_size = static_cast<int64_t>(DTypeSize(to));
  cpu::ParallelFor(n, int64_t{1} << 14, [&](int64_t i0, int64_t i1) {
    ConvertElements(from, s + i0 * from_size, to, d + i0 * to_size, static_cast<size_t>(i1 - i0));
  });
}

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

Model::Pass::Pass(const Model& model, ModelState& state, ComposeMode mode,
                  const ComputeDevice& device, StateUse use)
    : model_(model),
      state_(state),
      mode_(mode),
      device_(device),
      state_use_(use),
      end_pos_(state.n_positions) {}

float* Model::Pass::Scratch(ScratchSlot slot, int64_t n) { return kernels_->Scratch(slot, n); }

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

float* Model::Pass::CaptureBuffer(const TensorView& view) {
  if (view.dtype() == DType::kF32) return view.data_as<float>();
  roundings_.push_back({UninitializedVector<float>(static_cast<size_t>(view.NumElements())), view});
  return roundings_.back().f32.data();
}

const float* Model::Pass::EntryInput(const EntryTensor& t, int64_t n) {
  // CheckEntry let a device-resident tensor through only on this pass's own device.
  const bool on_device = t.view.memory() == MemoryKind::kDevice;
  if (t.view.dtype() == DType::kF32) {
    const float* f32 = t.view.data_as<const float>();
    return on_device ? f32 : kernels_->Input(f32, n);
  }
  // A device widens bf16/f16 itself (host tensors go up in their narrow dtype); the CPU below.
  if (on_device || device_.kind != gpu::BackendKind::kCpu) {
    return kernels_->WidenInput(t.view.dtype(), t.view.data(), t.view.memory(), n);
  }
  if (widened_used_ == widened_.size()) widened_.emplace_back();
  UninitializedVector<float>& buf = widened_[widened_used_++];
  buf.resize(static_cast<size_t>(n));
  // Entry tensors are validated (IsEntryDType) before a pass sees them.
  ConvertOnComputeThreads(t.view.dtype(), t.view.data(), DType::kF32, buf.data(), n);
  return buf.data();  // host memory is the CPU kernels' own
}

Status Model::Pass::FinishPass() {
  HYPIC_RETURN_IF_ERROR(kernels_->Finish());
  for (Rounding& r : roundings_) {
    ConvertOnComputeThreads(DType::kF32, r.f32.data(), r.dst.dtype(), r.dst.data(),
                            r.dst.NumElements());
  }
  roundings_.clear();
  return Status::Ok();
}

Status Model::Pass::AddCapture(std::span<const uint32_t> tokens, int64_t seam,
                               const EntryDTypes& dtypes, SegmentEntry* capture) {
  const ModelConfig& c = model_.config_;
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t kept = n - seam;
  capture_.assign(static_cast<size_t>(c.num_layers), {});
  // The pass writes every element of every captured tensor (the run fails otherwise, and the
  // entry with it), so the entry's memory is not zeroed first.
  auto add = [&](uint32_t layer, TensorKind kind, DType dtype, const Shape& shape) {
    return capture->AddTensor(layer, kind, dtype, shape, HostBuffer::Init::kUninitialized);
  };
  for (int64_t li = 0; li < c.num_layers; ++li) {
    CaptureTensors& ct = capture_[static_cast<size_t>(li)];
    const auto layer = static_cast<uint32_t>(li);
    if (c.layer_kinds[static_cast<size_t>(li)] == LayerKind::kLinear) {
      const int64_t hv = c.linear_value_heads, dk = c.linear_key_dim, dv = c.linear_value_dim;
      HYPIC_ASSIGN_OR_RETURN(TensorView t,
                             add(layer, TensorKind::kTransition, dtypes.transition, {hv, dk, dk}));
      HYPIC_ASSIGN_OR_RETURN(TensorView s,
                             add(layer, TensorKind::kState, dtypes.state, {hv, dk, dv}));
      HYPIC_ASSIGN_OR_RETURN(TensorView conv, add(layer, TensorKind::kConvTail, dtypes.conv,
                                                  {c.conv_kernel - 1, c.conv_channels()}));
      ct.t = CaptureBuffer(t);
      ct.s = CaptureBuffer(s);
      ct.conv = CaptureBuffer(conv);
    } else {
      const Shape shape{kept, c.num_kv_heads, c.head_dim};
      HYPIC_ASSIGN_OR_RETURN(TensorView k, add(layer, TensorKind::kKey, dtypes.kv, shape));
      HYPIC_ASSIGN_OR_RETURN(TensorView v, add(layer, TensorKind::kValue, dtypes.kv, shape));
      ct.k = CaptureBuffer(k);
      ct.v = CaptureBuffer(v);
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

Status Model::Pass::Run(bool all_logits, std::vector<float>* logits,
                        const LayerStateCallback& on_layer) {
  const ModelConfig& c = model_.config_;
  const ModelWeights& w = model_.weights_;
  const int64_t rows = live_tokens(), h = c.hidden_size;
  if (rows == 0) return Internal("a pass needs at least one live token");
  const int64_t logit_rows = logits == nullptr ? 0 : all_logits ? rows : 1;
  // The pass's working memory is reserved before any of it is allocated (pass_memory.h), and
  // held until the pass ends.
  PassSize size{
      .live_rows = rows,
      .positions = end_pos_,
      .logit_rows = logit_rows,
      .state_kept = state_use_ == StateUse::kKept || device_.kind != gpu::BackendKind::kCpu};
  for (const Block& b : blocks_) size.cached_blocks += b.live ? 0 : 1;
  if (capture_block_ >= 0) size.captured_rows = blocks_[static_cast<size_t>(capture_block_)].n;
  HYPIC_ASSIGN_OR_RETURN(const ByteReservation reservation, model_.ReservePass(size));
  HYPIC_ASSIGN_OR_RETURN(kernels_, CreateForwardKernels(device_, w, *model_.device_cache_));
  ForwardKernels& k = *kernels_;
  const auto eps = static_cast<float>(c.rms_norm_eps);

  float* x = Scratch(kX, rows * h);
  float* xn = Scratch(kXn, rows * h);
  float* y = Scratch(kY, rows * h);
  k.Embed(Weight(w.embed), tokens_, h, x);
  k.RmsNorm(x, h, Weight(w.layers.front().input_norm), xn, h, rows, h, eps);
  // With bf16 weights every norm's output is also rounded to bf16 once, for the products that
  // read it (a layer's in_proj; the router, experts and shared expert).
  const bool bf16_products = model_.weights_dtype() == DType::kBF16;
  const uint16_t* xn16 = bf16_products ? k.Bf16Rows(xn, h, rows, h) : nullptr;
  // Rows [rows - logit_rows, rows) get logits. The last layer computes its output for those
  // rows only, widened to the last kMinOutputRows rows (OutputRows) when it has any.
  const int64_t last_out_rows =
      logit_rows == 0 ? 0 : std::min(rows, std::max(logit_rows, kMinOutputRows));
  // The residual step over `out`'s rows: x += y, xn = norm(x) (and xn16 its bf16 rounding,
  // which then starts at row out.first).
  auto residual_norm = [&](const std::vector<float>& norm, OutputRows out) {
    const int64_t at = out.first * h;
    if (bf16_products) {
      xn16 = k.AddRmsNormBf16(x + at, y + at, Weight(norm), xn + at, out.n, h, eps);
    } else {
      k.AddRmsNorm(x + at, y + at, Weight(norm), xn + at, out.n, h, eps);
    }
  };
  for (int64_t li = 0; li < c.num_layers; ++li) {
    const LayerWeights& lw = w.layers[static_cast<size_t>(li)];
    const bool last = li + 1 == c.num_layers;
    const OutputRows out_rows =
        last ? OutputRows{rows - last_out_rows, last_out_rows} : OutputRows{0, rows};
    // xn holds this layer's input norm of x here (each residual step makes the next norm).
    const LayerOut out = c.layer_kinds[static_cast<size_t>(li)] == LayerKind::kLinear
                             ? GdnLayer(li, xn, xn16, out_rows, y)
                             : AttentionLayer(li, xn, xn16, out_rows, y);
    // The layer's state is final here: it leaves before the MLP and the later layers run.
    if (on_layer) HYPIC_RETURN_IF_ERROR(EmitLayer(li, out, on_layer));
    if (out_rows.n > 0) {
      const int64_t at = out_rows.first * h;
      residual_norm(lw.post_norm, out_rows);
      MlpLayer(li, xn + at, xn16, out_rows.n, y + at);
      if (!last) {
        residual_norm(w.layers[static_cast<size_t>(li) + 1].input_norm, out_rows);
      } else {
        k.Add(x + at, y + at, out_rows.n * h);
      }
    }
    HYPIC_RETURN_IF_ERROR(k.status());
    // A CPU step is done with its inputs when it returns (forward_kernels.h).
    widened_used_ = 0;
    if (!last && std::chrono::steady_clock::now() > deadline_) {
      HYPIC_RETURN_IF_ERROR(kernels_->Finish());
      return DeadlineExceeded(fmt::format(
          "the pass of {} live tokens ran past its deadline after layer {} of {}; the rest was "
          "not computed",
          rows, li + 1, c.num_layers));
    }
  }
  state_.n_positions = end_pos_;
  if (logits == nullptr) return FinishPass();

  const int64_t first = rows - logit_rows, n_out = logit_rows;
  k.RmsNorm(x + first * h, h, Weight(w.final_norm), xn, h, n_out, h, eps);
  const WeightTensor& head = c.tie_word_embeddings ? w.embed : w.lm_head;
  logits->assign(static_cast<size_t>(n_out * c.vocab_size), 0.0f);
  float* out = k.Mirror(logits->data(), n_out * c.vocab_size, /*read=*/false);
  k.Gemm(n_out, c.vocab_size, h, xn, h, Weight(head), h, out, c.vocab_size);
  return FinishPass();
}

Status Model::Pass::EmitLayer(int64_t li, const LayerOut& out, const LayerStateCallback& on_layer) {
  ForwardKernels& k = *kernels_;
  HYPIC_RETURN_IF_ERROR(k.status());  // never hand over the output of a failed step
  const LayerState& ls = state_.layers[static_cast<size_t>(li)];
  const bool linear = model_.config_.layer_kinds[static_cast<size_t>(li)] == LayerKind::kLinear;
  const auto n_first = static_cast<int64_t>(linear ? ls.state.size() : ls.k.size());
  const auto n_second = static_cast<int64_t>(linear ? ls.conv.size() : ls.v.size());
  const float* first = k.ToHost(out.first, n_first, &emit_host_[0]);
  const float* second = k.ToHost(out.second, n_second, &emit_host_[1]);
  HYPIC_RETURN_IF_ERROR(k.status());
  const std::array<StateTensorView, 2> views =
      LayerStateTensors(model_.config_, static_cast<uint32_t>(li), end_pos_, first, second);
  return on_layer(static_cast<uint32_t>(li), views);
}

Model::Pass::LayerOut Model::Pass::GdnLayer(int64_t li, const float* xn, const uint16_t* xn16,
                                            OutputRows out_rows, float* y) {
  ForwardKernels& k = *kernels_;
  const ModelConfig& c = model_.config_;
  const GdnWeights& g = model_.weights_.layers[static_cast<size_t>(li)].gdn;
  LayerState& ls = state_.layers[static_cast<size_t>(li)];
  const int64_t rows = live_tokens(), h = c.hidden_size;
  const int64_t nk = c.linear_key_heads, nv = c.linear_value_heads;
  const int64_t dk = c.linear_key_dim, dv = c.linear_value_dim;
  const int64_t ch = c.conv_channels(), vw = c.value_width(), cin = ch + vw + 2 * nv;
  const auto state_floats = static_cast<int64_t>(ls.state.size());
  const auto conv_floats = static_cast<int64_t>(ls.conv.size());

  float* proj = Scratch(kProj, rows * cin);
  k.Gemm(rows, cin, h, xn, h, Weight(g.in_proj), h, proj, cin, false, xn16);
  float* q = Scratch(kQ, rows * nk * dk);
  float* kk = Scratch(kK, rows * nk * dk);
  float* v = Scratch(kV, rows * vw);
  float* gate = Scratch(kGate, rows * nv);
  float* beta = Scratch(kBeta, rows * nv);
  // The recurrence's outputs, for every row when any row's output is wanted (the chunked form
  // makes them a chunk at a time), else none: the chain then advances the state alone.
  float* o = out_rows.n > 0 ? Scratch(kO, rows * vw) : nullptr;
  float* state = k.Mirror(ls.state.data(), state_floats, /*read=*/true);
  float* conv = k.Mirror(ls.conv.data(), conv_floats, /*read=*/true);
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));

  // The live blocks' inputs gather here and are made in one GdnConvInputsBlocks call, which
  // leaves the conv state past them; the state's steps (live blocks and jumps) gather too and
  // run in one LinearSteps call once their inputs are made. `conv_start`: the conv tail of the
  // last cached block since the last live one.
  gdn_inputs_.clear();
  linear_steps_.clear();
  const float* conv_start = nullptr;
  auto make_inputs = [&] {
    if (gdn_inputs_.empty()) return;
    k.GdnConvInputsBlocks(gdn_inputs_);
    gdn_inputs_.clear();
  };
  auto run_steps = [&] {
    make_inputs();
    if (linear_steps_.empty()) return;
    k.LinearSteps(linear::Variant::kGdn, GdnShape(c, 0), linear_steps_, state);
    linear_steps_.clear();
  };
  for (size_t bi = 0; bi < blocks_.size(); ++bi) {
    const Block& b = blocks_[bi];
    const bool capturing = static_cast<int64_t>(bi) == capture_block_;
    if (!b.live) {
      const auto layer = static_cast<uint32_t>(li);
      const auto* t = b.entry->Find(layer, TensorKind::kTransition);
      const auto* s = b.entry->Find(layer, TensorKind::kState);
      const auto* tail = b.entry->Find(layer, TensorKind::kConvTail);
      const float* transition =
          mode_ == ComposeMode::kNaive ? nullptr : EntryInput(*t, nv * dk * dk);
      // S(C|0) as the entry stores it where the steps widen it themselves (a head at a time,
      // in cache), else widened here.
      const bool narrow = k.ReadsNarrowZeroStates() && s->view.dtype() != DType::kF32 &&
                          s->view.memory() == MemoryKind::kHost;
      linear_steps_.push_back({.tokens = 0,
                               .in = {},
                               .o = nullptr,
                               .transition = transition,
                               .zero_state = narrow ? s->view.data() : EntryInput(*s, state_floats),
                               .zero_dtype = narrow ? s->view.dtype() : DType::kF32});
      conv_start = EntryInput(*tail, conv_floats);
      continue;
    }
    const int64_t r0 = b.row0, n = b.n;
    // The conv reads the projection's q | k | v columns in place; q, k: L2-normalised per head
    // (eps 1e-6 inside the root), q scaled by 1/sqrt(dk).
    gdn_inputs_.push_back({.args = {.rows = n,
                                    .key_heads = nk,
                                    .value_heads = nv,
                                    .dk = dk,
                                    .dv = dv,
                                    .q_scale = q_scale,
                                    .x = proj + r0 * cin,
                                    .ldx = cin,
                                    .conv_weight = Weight(g.conv),
                                    .conv_kernel = static_cast<int32_t>(c.conv_kernel),
                                    .conv_state = conv,
                                    .ba = proj + r0 * cin + ch + vw,
                                    .ld_ba = cin,
                                    .a_log = Weight(g.a_log),
                                    .dt_bias = Weight(g.dt_bias),
                                    .q = q + r0 * nk * dk,
                                    .k = kk + r0 * nk * dk,
                                    .v = v + r0 * vw,
                                    .gate = gate + r0 * nv,
                                    .beta = beta + r0 * nv},
                           .start = conv_start});
    conv_start = nullptr;
    const CaptureTensors* ct = capturing ? &capture_[static_cast<size_t>(li)] : nullptr;
    if (ct != nullptr) {
      make_inputs();  // the conv state past the captured block
      k.Copy2D(k.Mirror(ct->conv, conv_floats, /*read=*/false), conv_floats, conv, conv_floats, 1,
               conv_floats);
    }
    // Advances the running state in place over rows [row, row + len) (outputs into o).
    auto run = [&](int64_t row, int64_t len, linear::Outputs out) {
      linear::Inputs in;
      in.q = q + row * nk * dk;
      in.k = kk + row * nk * dk;
      in.v = v + row * vw;
      in.g = gate + row * nv;
      in.beta = beta + row * nv;
      out.o = o != nullptr ? o + row * vw : nullptr;
      out.final_state = state;
      k.LinearForward(linear::Variant::kGdn, GdnShape(c, len), in, state, out);
    };
    if (ct == nullptr) {
      linear_steps_.push_back({.tokens = n,
                               .in = {.q = q + r0 * nk * dk,
                                      .k = kk + r0 * nk * dk,
                                      .v = v + r0 * vw,
                                      .g = gate + r0 * nv,
                                      .beta = beta + r0 * nv},
                               .o = o != nullptr ? o + r0 * vw : nullptr,
                               .transition = nullptr,
                               .zero_state = nullptr});
      continue;
    }
    run_steps();  // the capture's runs come after every earlier step
    // The entry's pair covers [w, n) and starts from zero (the forward runs that chain beside
    // the one from the running state, which gives the outputs).
    const int64_t seam = capture_seam_;
    if (seam > 0) run(r0, seam, {});
    run(r0 + seam, n - seam,
        {.zero_state = k.Mirror(ct->s, state_floats, /*read=*/false),
         .transition = k.Mirror(ct->t, nv * dk * dk, /*read=*/false)});
  }
  run_steps();
  if (conv_start != nullptr) k.Copy2D(conv, conv_floats, conv_start, conv_floats, 1, conv_floats);
  if (out_rows.n == 0) return {state, conv};

  // Plain gated RMSNorm per value head: w * x / rms(x) * silu(z).
  const int64_t r0 = out_rows.first;
  k.GatedRmsNorm(o + r0 * vw, proj + r0 * cin + ch, cin, Weight(g.norm), out_rows.n, nv, dv,
                 static_cast<float>(c.rms_norm_eps));
  k.Gemm(out_rows.n, h, vw, o + r0 * vw, vw, Weight(g.out_proj), vw, y + r0 * h, h);
  return {state, conv};
}

Model::Pass::LayerOut Model::Pass::AttentionLayer(int64_t li, const float* xn, const uint16_t* xn16,
                                                  OutputRows out_rows, float* y) {
  ForwardKernels& k = *kernels_;
  const ModelConfig& c = model_.config_;
  const AttentionWeights& a = model_.weights_.layers[static_cast<size_t>(li)].attention;
  LayerState& ls = state_.layers[static_cast<size_t>(li)];
  const int64_t rows = live_tokens(), h = c.hidden_size;
  const int64_t nh = c.num_heads, nkv = c.num_kv_heads, hd = c.head_dim, rot = c.rotary_dim();
  const int64_t qw = nh * hd, kw = nkv * hd, cols = 2 * qw + 2 * kw;
  const auto eps = static_cast<float>(c.rms_norm_eps);

  float* proj = Scratch(kProj, rows * cols);
  k.Gemm(rows, cols, h, xn, h, Weight(a.in_proj), h, proj, cols, false, xn16);
  float* q = Scratch(kQ, rows * qw);
  float* kk = Scratch(kK, rows * kw);
  float* v = Scratch(kV, rows * kw);
  k.Copy2D(q, qw, proj, cols, rows, qw);
  k.Copy2D(kk, kw, proj + 2 * qw, cols, rows, kw);
  k.Copy2D(v, kw, proj + 2 * qw + kw, cols, rows, kw);
  k.RmsNorm(q, hd, Weight(a.q_norm), q, hd, rows * nh, hd, eps);
  k.RmsNorm(kk, hd, Weight(a.k_norm), kk, hd, rows * nkv, hd, eps);

  // K/V of every position: the state's, then each block's in order. Where the state is dropped
  // and the backend attends spans, they stay where they are (a live block's rows in kk and v,
  // rotated in place; an entry's, whose K the attention rotates as it reads it); else they are
  // copied into the state's caches.
  const bool in_place = state_use_ == StateUse::kDropped && k.AttendsKvSpans();
  float* kc = nullptr;
  float* vc = nullptr;
  kv_spans_.clear();
  if (in_place) {
    const int64_t start = state_.n_positions;  // the state's own rows, rotated already
    if (start > 0) {
      kv_spans_.push_back({.pos0 = 0, .n = start, .k = ls.k.data(), .v = ls.v.data()});
    }
  } else {
    const auto positions = static_cast<size_t>(end_pos_);
    ls.k.resize(positions * static_cast<size_t>(kw));
    ls.v.resize(positions * static_cast<size_t>(kw));
    kc = k.Mirror(ls.k.data(), static_cast<int64_t>(ls.k.size()), /*read=*/true);
    vc = k.Mirror(ls.v.data(), static_cast<int64_t>(ls.v.size()), /*read=*/true);
  }
  for (size_t bi = 0; bi < blocks_.size(); ++bi) {
    const Block& b = blocks_[bi];
    const int64_t floats = b.n * kw;
    if (b.live) {
      if (static_cast<int64_t>(bi) == capture_block_) {  // K before RoPE, see model.h
        const CaptureTensors& ct = capture_[static_cast<size_t>(li)];
        const int64_t kept = b.n - capture_seam_;  // rows, split over the compute threads
        k.Copy2D(k.Mirror(ct.k, kept * kw, /*read=*/false), kw, kk + (b.row0 + capture_seam_) * kw,
                 kw, kept, kw);
        k.Copy2D(k.Mirror(ct.v, kept * kw, /*read=*/false), kw, v + (b.row0 + capture_seam_) * kw,
                 kw, kept, kw);
      }
      k.Rope(q + b.row0 * qw, qw, b.n, nh, hd, rot, c.rope_theta, b.pos0);
      k.Rope(kk + b.row0 * kw, kw, b.n, nkv, hd, rot, c.rope_theta, b.pos0);
      if (in_place) {
        kv_spans_.push_back(
            {.pos0 = b.pos0, .n = b.n, .k = kk + b.row0 * kw, .v = v + b.row0 * kw});
      } else {  // copied as b.n rows of kw, so the rows split over the compute threads
        k.Copy2D(kc + b.pos0 * kw, kw, kk + b.row0 * kw, kw, b.n, kw);
        k.Copy2D(vc + b.pos0 * kw, kw, v + b.row0 * kw, kw, b.n, kw);
      }
    } else {
      const auto layer = static_cast<uint32_t>(li);
      const EntryTensor& tk = *b.entry->Find(layer, TensorKind::kKey);
      const EntryTensor& tv = *b.entry->Find(layer, TensorKind::kValue);
      // In place, host K/V stay in their dtype (the attention widens a block at a time).
      if (in_place && tk.view.memory() == MemoryKind::kHost &&
          tv.view.memory() == MemoryKind::kHost && tk.view.dtype() == tv.view.dtype()) {
        kv_spans_.push_back({.pos0 = b.pos0,
                             .n = b.n,
                             .k = tk.view.data(),
                             .v = tv.view.data(),
                             .dtype = tk.view.dtype(),
                             .rope = true});
        continue;
      }
      const float* ek = EntryInput(tk, floats);
      const float* ev = EntryInput(tv, floats);
      if (in_place) {
        kv_spans_.push_back({.pos0 = b.pos0, .n = b.n, .k = ek, .v = ev, .rope = true});
      } else {
        k.Copy2D(kc + b.pos0 * kw, kw, ek, kw, b.n, kw);
        k.Copy2D(vc + b.pos0 * kw, kw, ev, kw, b.n, kw);
        k.Rope(kc + b.pos0 * kw, kw, b.n, nkv, hd, rot, c.rope_theta, b.pos0);
      }
    }
  }

  if (out_rows.n == 0) return {kc, vc};

  // Every output row in one call: row r of live block b is at position b.pos0 + (r - b.row0).
  live_positions_.clear();
  for (const Block& b : blocks_) {
    for (int64_t i = 0; b.live && i < b.n; ++i) live_positions_.push_back(b.pos0 + i);
  }
  const int64_t r0 = out_rows.first, n_out = out_rows.n;
  float* attn = Scratch(kAttn, n_out * qw);
  const AttentionShape shape{nh, nkv, hd, model_.weights_dtype() == DType::kBF16};
  const auto out_positions = std::span(live_positions_).subspan(static_cast<size_t>(r0));
  if (in_place) {
    k.AttentionSpans(shape, {.rotary_dim = rot, .theta = c.rope_theta}, q + r0 * qw, kv_spans_,
                     attn, out_positions);
  } else {
    k.Attention(shape, q + r0 * qw, kc, vc, attn, out_positions);
  }
  k.SigmoidGate(attn, proj + r0 * cols + qw, cols, n_out, qw);
  k.Gemm(n_out, h, qw, attn, qw, Weight(a.o_proj), qw, y + r0 * h, h);
  return {kc, vc};
}

void Model::Pass::SwiGlu(const MlpWeights& m, const float* x, const uint16_t* x16, int64_t rows,
                         float* out) {
  ForwardKernels& k = *kernels_;
  const int64_t h = model_.config_.hidden_size, im = m.intermediate;
  k.SwiGluMlp(Weight(m.gate_up), Weight(m.down), im, x, x16, rows, h,
              Scratch(kGateUp, rows * 2 * im), out);
}

void Model::Pass::MlpLayer(int64_t li, const float* xn, const uint16_t* xn16, int64_t rows,
                           float* y) {
  ForwardKernels& k = *kernels_;
  const ModelConfig& c = model_.config_;
  const LayerWeights& lw = model_.weights_.layers[static_cast<size_t>(li)];
  const int64_t h = c.hidden_size;
  if (c.mlp_kinds[static_cast<size_t>(li)] == MlpKind::kDense) {
    SwiGlu(lw.dense, xn, xn16, rows, y);
    return;
  }
  const MoeWeights& m = lw.moe;
  const int64_t ne = c.num_experts, top = c.experts_per_token;
  // The router, the routed experts and the shared expert all read xn16, xn rounded once.
  float* router = Scratch(kRouter, rows * ne);
  k.Gemm(rows, ne, h, xn, h, Weight(m.router), h, router, ne, false, xn16);
  // Routing (fp32 softmax, top-k, renormalised when norm_topk_prob) and the experts in one
  // step, so a device routes without a host round trip.
  experts_.clear();
  for (const MlpWeights& ew : m.experts) experts_.push_back({Weight(ew.gate_up), Weight(ew.down)});
  k.MoeExperts({.x = xn,
                .x16 = xn16,
                .logits = router,
                .rows = rows,
                .hidden = h,
                .intermediate = m.experts.front().intermediate,
                .top_k = top,
                .norm_topk_prob = c.norm_topk_prob,
                .experts = experts_,
                .y = y});
  if (m.shared.intermediate > 0) {
    const int64_t im = m.shared.intermediate;
    k.SharedExpert(Weight(m.shared.gate_up), Weight(m.shared.down), im, Weight(m.shared_gate), xn,
                   xn16, rows, h, Scratch(kGateUp, rows * 2 * im), Scratch(kExpertOut, rows * h),
                   y);
  }
}

}  // namespace hypic::model
