#include "gpu/model/model.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/hash.h"
#include "gpu/model/checkpoint.h"
#include "gpu/model/forward.h"
#include "gpu/model/forward_kernels.h"
#include "gpu/model/generator.h"

namespace hypic::model {
namespace {

Status CheckTokens(std::span<const uint32_t> tokens, int64_t vocab, std::string_view what) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocab) {
      return BadRequest(fmt::format("{}: token {} at index {} is not below vocab_size {}", what,
                                    tokens[i], i, vocab));
    }
  }
  return Status::Ok();
}

// The dtype an entry's settings declare for `kind`.
DType DeclaredDType(const EntryDTypes& d, TensorKind kind) {
  switch (kind) {
    case TensorKind::kTransition: return d.transition;
    case TensorKind::kState: return d.state;
    case TensorKind::kConvTail: return d.conv;
    case TensorKind::kKey:
    case TensorKind::kValue: return d.kv;
  }
  return DType::kF32;
}

Status CheckTensor(const SegmentEntry& e, uint32_t layer, TensorKind kind, const Shape& shape,
                   const ComputeDevice& device) {
  const EntryTensor* t = e.Find(layer, kind);
  if (t == nullptr) {
    return BadRequest(fmt::format("entry {}: layer {} has no {} tensor", e.key().ToHex(), layer,
                                  TensorKindName(kind)));
  }
  const DType dtype = t->view.dtype();
  if (!IsEntryDType(dtype)) {
    return BadRequest(
        fmt::format("entry {}: layer {} {}: dtype {} is not an entry dtype (want F32, BF16 or F16)",
                    e.key().ToHex(), layer, TensorKindName(kind), DTypeName(dtype)));
  }
  const DType declared = DeclaredDType(e.meta().settings.entry_dtypes, kind);
  if (dtype != declared) {
    return BadRequest(
        fmt::format("entry {}: layer {} {} is {} but the entry's settings ({}) say {}",
                    e.key().ToHex(), layer, TensorKindName(kind), DTypeName(dtype),
                    e.meta().settings.entry_dtypes.ToString(), DTypeName(declared)));
  }
  if (!(t->view.shape() == shape) || !t->view.IsContiguous()) {
    return BadRequest(fmt::format("entry {}: layer {} {}: expected contiguous {} {}, found {}",
                                  e.key().ToHex(), layer, TensorKindName(kind), DTypeName(dtype),
                                  shape.ToString(), t->view.shape().ToString()));
  }
  if (t->view.memory() == MemoryKind::kDevice) {
    const ComputeDevice where{gpu::BackendKind::kCuda, t->view.device()};
    if (!(where == device)) {
      return BadRequest(fmt::format(
          "entry {}: layer {} {} is {} in the memory of {}; a pass on {} reads host memory or "
          "its own device's",
          e.key().ToHex(), layer, TensorKindName(kind), DTypeName(dtype), ComputeDeviceName(where),
          ComputeDeviceName(device)));
    }
  }
  return Status::Ok();
}

}  // namespace

std::string_view ComposeModeName(ComposeMode m) {
  switch (m) {
    case ComposeMode::kFull: return "full";
    case ComposeMode::kNaive: return "naive";
    case ComposeMode::kHypic: return "hypic";
    case ComposeMode::kOracle: return "oracle";
  }
  return "?";
}

Result<ComposeMode> ComposeModeFromName(std::string_view name) {
  for (ComposeMode m :
       {ComposeMode::kFull, ComposeMode::kNaive, ComposeMode::kHypic, ComposeMode::kOracle}) {
    if (ComposeModeName(m) == name) return m;
  }
  return BadRequest(fmt::format("unknown mode '{}' (want full, naive, hypic or oracle)", name));
}

Model::Model(ModelConfig config, ModelWeights weights, ModelFingerprint fingerprint,
             size_t checkpoint_bytes, bool cuda_tf32, uint64_t max_pass_bytes,
             std::function<void(int64_t)> on_pass_bytes)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      fingerprint_(fingerprint),
      checkpoint_bytes_(checkpoint_bytes),
      device_cache_(std::make_shared<DeviceContextCache>(cuda_tf32)),
      pass_budget_(max_pass_bytes > 0
                       ? std::make_unique<ByteBudget>(max_pass_bytes, std::move(on_pass_bytes))
                       : nullptr) {
  // Packed once here, so no product copies a weight into oneDNN's layout (weights.h).
  weights_.PackForCpuGemm(config_.hidden_size);
}

std::array<StateTensorView, 2> LayerStateTensors(const ModelConfig& c, uint32_t layer,
                                                 int64_t n_positions, const float* first,
                                                 const float* second) {
  if (c.layer_kinds[layer] == LayerKind::kLinear) {
    return {
        StateTensorView{layer, TensorKind::kState, DType::kF32,
                        Shape({c.linear_value_heads, c.linear_key_dim, c.linear_value_dim}), first},
        StateTensorView{layer, TensorKind::kConvTail, DType::kF32,
                        Shape({c.conv_kernel - 1, c.conv_channels()}), second}};
  }
  const Shape kv({n_positions, c.num_kv_heads, c.head_dim});
  return {StateTensorView{layer, TensorKind::kKey, DType::kF32, kv, first},
          StateTensorView{layer, TensorKind::kValue, DType::kF32, kv, second}};
}

std::vector<StateTensorView> StateTensors(const ModelConfig& c, const ModelState& state) {
  std::vector<StateTensorView> out;
  for (size_t l = 0; l < state.layers.size(); ++l) {
    const LayerState& ls = state.layers[l];
    const bool linear = c.layer_kinds[l] == LayerKind::kLinear;
    for (const StateTensorView& t : LayerStateTensors(
             c, static_cast<uint32_t>(l), state.n_positions, linear ? ls.state.data() : ls.k.data(),
             linear ? ls.conv.data() : ls.v.data())) {
      out.push_back(t);
    }
  }
  return out;
}

ModelState Model::EmptyState() const {
  ModelState s;
  s.layers.resize(static_cast<size_t>(config_.num_layers));
  for (int64_t li = 0; li < config_.num_layers; ++li) {
    if (config_.layer_kinds[static_cast<size_t>(li)] != LayerKind::kLinear) continue;
    LayerState& ls = s.layers[static_cast<size_t>(li)];
    ls.state.assign(static_cast<size_t>(config_.linear_value_heads * config_.linear_key_dim *
                                        config_.linear_value_dim),
                    0.0f);
    ls.conv.assign(static_cast<size_t>((config_.conv_kernel - 1) * config_.conv_channels()), 0.0f);
  }
  return s;
}

Result<ModelState> Model::StateFromTensors(int64_t n_positions,
                                           std::span<const StateTensorView> tensors) const {
  const ModelConfig& c = config_;
  if (n_positions < 0) return BadRequest("state: negative number of positions");
  ModelState s;
  s.n_positions = n_positions;
  s.layers.resize(static_cast<size_t>(c.num_layers));
  // Which (layer, kind) pairs were seen: every layer needs exactly its two tensors.
  std::vector<uint8_t> seen(static_cast<size_t>(c.num_layers), 0);
  for (const StateTensorView& t : tensors) {
    const std::string name =
        fmt::format("state tensor layer {} {}", t.layer, TensorKindName(t.kind));
    if (t.layer >= static_cast<uint64_t>(c.num_layers)) {
      return BadRequest(fmt::format("{}: the model has {} layers", name, c.num_layers));
    }
    const bool linear = c.layer_kinds[t.layer] == LayerKind::kLinear;
    LayerState& ls = s.layers[t.layer];
    UninitializedVector<float>* dst = nullptr;
    Shape want;
    uint8_t bit = 0;
    if (linear && t.kind == TensorKind::kState) {
      dst = &ls.state, bit = 1;
      want = Shape({c.linear_value_heads, c.linear_key_dim, c.linear_value_dim});
    } else if (linear && t.kind == TensorKind::kConvTail) {
      dst = &ls.conv, bit = 2;
      want = Shape({c.conv_kernel - 1, c.conv_channels()});
    } else if (!linear && t.kind == TensorKind::kKey) {
      dst = &ls.k, bit = 1;
      want = Shape({n_positions, c.num_kv_heads, c.head_dim});
    } else if (!linear && t.kind == TensorKind::kValue) {
      dst = &ls.v, bit = 2;
      want = Shape({n_positions, c.num_kv_heads, c.head_dim});
    } else {
      return BadRequest(fmt::format("{}: not a tensor of a {} layer", name,
                                    linear ? "linear-attention" : "full-attention"));
    }
    if ((seen[t.layer] & bit) != 0) return BadRequest(name + ": given twice");
    seen[t.layer] |= bit;
    if (!(t.shape == want)) {
      return BadRequest(fmt::format("{}: shape {}, the contract says {}", name, t.shape.ToString(),
                                    want.ToString()));
    }
    if (t.dtype != DType::kF32 && t.dtype != DType::kBF16 && t.dtype != DType::kF16) {
      return BadRequest(
          fmt::format("{}: dtype {} (want F32, BF16 or F16)", name, DTypeName(t.dtype)));
    }
    auto n = static_cast<size_t>(want.NumElements());
    dst->resize(n);
    if (n > 0) ConvertElements(t.dtype, t.data, DType::kF32, dst->data(), n);
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (seen[static_cast<size_t>(l)] != 3) {
      return BadRequest(fmt::format("state: layer {} lacks a tensor", l));
    }
  }
  return s;
}

Result<ByteReservation> Model::ReservePass(const PassSize& size) const {
  if (!pass_budget_) return ByteReservation{};
  const uint64_t bytes = PassBytes(config_, size);
  const auto mib = [](uint64_t b) { return static_cast<double>(b) / (1 << 20); };
  if (bytes > pass_budget_->limit()) {
    return TooLarge(fmt::format(
        "a pass of {} live tokens over {} positions needs about {:.0f} MiB of working memory, "
        "over max_pass_bytes ({:.0f} MiB): split the prompt into cached segments, or raise "
        "max_pass_bytes",
        size.live_rows, size.positions, mib(bytes), mib(pass_budget_->limit())));
  }
  if (!pass_budget_->TryReserve(bytes)) {
    return Busy(fmt::format(
        "a pass of {} live tokens needs about {:.0f} MiB of working memory and the passes "
        "running now hold {:.0f} of max_pass_bytes' {:.0f} MiB: retry later",
        size.live_rows, mib(bytes), mib(pass_budget_->bytes()), mib(pass_budget_->limit())));
  }
  return ByteReservation(pass_budget_.get(), bytes);
}

Result<PrefillResult> Model::FullPrefill(std::span<const uint32_t> tokens,
                                         const PrefillOptions& options) const {
  ModelState state = EmptyState();
  HYPIC_ASSIGN_OR_RETURN(PrefillResult r,
                         ExtendState(state, tokens, options,
                                     options.want_state ? StateUse::kKept : StateUse::kDropped));
  if (options.want_state) r.state = std::move(state);
  return r;
}

Result<PrefillResult> Model::Extend(ModelState& state, std::span<const uint32_t> tokens,
                                    const PrefillOptions& options) const {
  return ExtendState(state, tokens, options, StateUse::kKept);
}

Result<PrefillResult> Model::ExtendState(ModelState& state, std::span<const uint32_t> tokens,
                                         const PrefillOptions& options, StateUse use) const {
  if (tokens.empty()) return BadRequest("prefill: no tokens");
  HYPIC_RETURN_IF_ERROR(CheckTokens(tokens, config_.vocab_size, "prefill"));
  Pass pass(*this, state, ComposeMode::kFull, options.device, use);
  pass.set_deadline(options.deadline);
  pass.AddLive(tokens);
  PrefillResult r;
  HYPIC_RETURN_IF_ERROR(pass.Run(options.all_logits, &r.logits));
  r.rows = options.all_logits ? static_cast<int64_t>(tokens.size()) : 1;
  return r;
}

Result<std::shared_ptr<SegmentEntry>> Model::SegmentPrefill(std::span<const uint32_t> tokens,
                                                            const SegmentOptions& options,
                                                            ModelState* context) const {
  if (tokens.empty()) return BadRequest("segment prefill: no tokens");
  HYPIC_RETURN_IF_ERROR(CheckTokens(tokens, config_.vocab_size, "segment prefill"));
  const EntryDTypes& d = options.entry_dtypes;
  for (DType t : {d.transition, d.state, d.conv, d.kv}) {
    if (!IsEntryDType(t)) {
      return BadRequest(
          fmt::format("segment prefill: entry dtype {} is not F32, BF16 or F16", DTypeName(t)));
    }
  }
  EntryMeta meta;
  meta.model = fingerprint_;
  meta.name_space = options.name_space;
  meta.settings = options.Settings();
  meta.conv_k = static_cast<uint32_t>(config_.conv_kernel);
  meta.num_layers = static_cast<uint32_t>(config_.num_layers);
  meta.tokens.assign(tokens.begin(), tokens.end());
  meta.key = SegmentKey::Compute(meta.name_space, meta.model, meta.settings, meta.tokens);
  auto entry = std::make_shared<SegmentEntry>(std::move(meta));

  const bool has_cached_part = tokens.size() > options.seam_w;
  if (!has_cached_part && context == nullptr) return entry;  // runs live on reuse
  ModelState alone;
  if (context == nullptr) alone = EmptyState();
  Pass pass(*this, context != nullptr ? *context : alone, ComposeMode::kFull, options.device,
            context != nullptr ? StateUse::kKept : StateUse::kDropped);
  if (has_cached_part) {
    HYPIC_RETURN_IF_ERROR(
        pass.AddCapture(tokens, options.seam_w, options.entry_dtypes, entry.get()));
  } else {
    pass.AddLive(tokens);
  }
  // No logits: the entry (and the context's state) is all the pass makes, so its last layer
  // advances the state without computing an output (Pass::OutputRows).
  HYPIC_RETURN_IF_ERROR(pass.Run(/*all_logits=*/false, /*logits=*/nullptr));
  return entry;
}

Status Model::PrefillEntries(std::span<ComposePart> parts, ComposeMode mode,
                             const SegmentOptions& options) const {
  if (mode == ComposeMode::kFull) return Status::Ok();
  ModelState context = EmptyState();
  for (ComposePart& part : parts) {
    if (mode == ComposeMode::kOracle) {
      if (part.kind == ComposePart::Kind::kSegment) {
        HYPIC_ASSIGN_OR_RETURN(part.entry, SegmentPrefill(part.tokens, options, &context));
      } else {
        HYPIC_RETURN_IF_ERROR(
            Extend(context, part.tokens, {.want_state = false, .device = options.device}).status());
      }
    } else if (part.kind == ComposePart::Kind::kSegment) {
      HYPIC_ASSIGN_OR_RETURN(part.entry, SegmentPrefill(part.tokens, options));
    }
  }
  return Status::Ok();
}

Result<ComposeResult> Model::Compose(std::span<const ComposePart> parts,
                                     const ComposeOptions& options) const {
  ModelState state = EmptyState();
  const bool kept = options.want_state || options.on_layer;
  HYPIC_ASSIGN_OR_RETURN(
      ComposeResult r,
      ComposeState(state, parts, options, kept ? StateUse::kKept : StateUse::kDropped));
  if (options.want_state) r.state = std::move(state);
  return r;
}

Status Model::CheckEntry(const SegmentEntry& e, std::span<const uint32_t> tokens, uint32_t seam_w,
                         const ComputeDevice& device) const {
  const ModelConfig& c = config_;
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t w = seam_w;
  const EntryMeta& m = e.meta();
  if (m.model != fingerprint_) {
    return BadRequest(fmt::format("entry {} belongs to model {}, not {}", e.key().ToHex(),
                                  m.model.ToHex(), fingerprint_.ToHex()));
  }
  if (m.settings.seam_w != seam_w || m.conv_k != c.conv_kernel || m.num_layers != c.num_layers) {
    return BadRequest(fmt::format(
        "entry {} has seam {}, conv_k {}, {} layers; want seam {}, conv_k {}, {} layers",
        e.key().ToHex(), m.settings.seam_w, m.conv_k, m.num_layers, seam_w, c.conv_kernel,
        c.num_layers));
  }
  if (!std::equal(m.tokens.begin(), m.tokens.end(), tokens.begin(), tokens.end())) {
    return BadRequest(fmt::format("entry {} holds different tokens", e.key().ToHex()));
  }
  if (n <= w) {
    // No cached part: metadata only (Compose runs such a segment live).
    if (e.tensors().empty()) return Status::Ok();
    return BadRequest(fmt::format("entry {}: {} tokens within seam {} but {} tensors",
                                  e.key().ToHex(), n, w, e.tensors().size()));
  }
  for (int64_t li = 0; li < c.num_layers; ++li) {
    const auto layer = static_cast<uint32_t>(li);
    if (c.layer_kinds[static_cast<size_t>(li)] == LayerKind::kLinear) {
      const int64_t hv = c.linear_value_heads, dk = c.linear_key_dim;
      HYPIC_RETURN_IF_ERROR(CheckTensor(e, layer, TensorKind::kTransition, {hv, dk, dk}, device));
      HYPIC_RETURN_IF_ERROR(
          CheckTensor(e, layer, TensorKind::kState, {hv, dk, c.linear_value_dim}, device));
      HYPIC_RETURN_IF_ERROR(CheckTensor(e, layer, TensorKind::kConvTail,
                                        {c.conv_kernel - 1, c.conv_channels()}, device));
    } else {
      const Shape kv{n - w, c.num_kv_heads, c.head_dim};
      HYPIC_RETURN_IF_ERROR(CheckTensor(e, layer, TensorKind::kKey, kv, device));
      HYPIC_RETURN_IF_ERROR(CheckTensor(e, layer, TensorKind::kValue, kv, device));
    }
  }
  return Status::Ok();
}

Result<ComposeResult> Model::ComposeAfter(ModelState& state, std::span<const ComposePart> parts,
                                          const ComposeOptions& options) const {
  return ComposeState(state, parts, options, StateUse::kKept);
}

Result<ComposeResult> Model::ComposeState(ModelState& state, std::span<const ComposePart> parts,
                                          const ComposeOptions& options, StateUse use) const {
  Pass pass(*this, state, options.mode, options.device, use);
  pass.set_deadline(options.deadline);
  const int64_t w = options.seam_w;
  const ModelConfig& c = config_;
  for (size_t i = 0; i < parts.size(); ++i) {
    const ComposePart& part = parts[i];
    const std::string what = fmt::format("part {}", i);
    if (part.tokens.empty()) return BadRequest(what + ": no tokens");
    HYPIC_RETURN_IF_ERROR(CheckTokens(part.tokens, c.vocab_size, what));
    const auto n = static_cast<int64_t>(part.tokens.size());
    // With logits the last part always runs live: its last token's logits are the answer.
    const bool last_needs_logits = options.want_logits && i + 1 == parts.size();
    const bool live = options.mode == ComposeMode::kFull || part.kind == ComposePart::Kind::kRaw ||
                      last_needs_logits || n <= w;
    if (live) {
      pass.AddLive(part.tokens);
      continue;
    }
    const SegmentEntry* e = part.entry.get();
    if (e == nullptr) return BadRequest(what + ": segment without an entry");
    HYPIC_RETURN_IF_ERROR(
        CheckEntry(*e, part.tokens, options.seam_w, options.device).WithContext(what));
    pass.AddLive(std::span(part.tokens).first(static_cast<size_t>(w)));
    pass.AddCached(e, n - w);
  }
  if (parts.empty()) return BadRequest("compose: no parts");
  if (pass.live_tokens() == 0) return BadRequest("compose: no live tokens to run");
  ComposeResult r;
  HYPIC_RETURN_IF_ERROR(
      pass.Run(/*all_logits=*/false, options.want_logits ? &r.logits : nullptr, options.on_layer));
  r.live_tokens = pass.live_tokens();
  r.cached_tokens = pass.cached_tokens();
  return r;
}

Result<std::shared_ptr<const Model>> LoadModel(std::string_view spec,
                                               const std::filesystem::path& cache_dir,
                                               const ReadOptions& options) {
  std::filesystem::path dir{std::string(spec)};
  constexpr std::string_view kBuiltin = "builtin:";
  if (spec.substr(0, kBuiltin.size()) == kBuiltin) {
    const std::filesystem::path cache =
        cache_dir.empty() ? std::filesystem::temp_directory_path() / "hypic-models" : cache_dir;
    std::error_code ec;
    std::filesystem::create_directories(cache, ec);
    if (ec) return IoError(fmt::format("cannot create {}: {}", cache.string(), ec.message()));
    HYPIC_ASSIGN_OR_RETURN(dir, EnsureBuiltinModel(spec.substr(kBuiltin.size()), cache));
  }
  HYPIC_ASSIGN_OR_RETURN(LoadedCheckpoint ckpt, ReadCheckpoint(dir, options));
  ModelFingerprint fingerprint = ckpt.fingerprint;
  const bool bf16 = ckpt.weights.embed.dtype() == DType::kBF16;
  const bool tf32 = options.cuda_tf32 && !bf16;  // TF32 touches f32 GEMM weights only
  for (const char* setting :
       {bf16 ? "weights_dtype=bf16" : nullptr, tf32 ? "cuda_tf32" : nullptr}) {
    if (setting == nullptr) continue;
    Xxh3_128Stream s;
    s.UpdateU64(fingerprint.lo);
    s.UpdateU64(fingerprint.hi);
    s.UpdateString(setting);
    fingerprint = s.Digest();
  }
  return std::make_shared<const Model>(std::move(ckpt.config), std::move(ckpt.weights), fingerprint,
                                       ckpt.checkpoint_bytes, tf32, options.max_pass_bytes,
                                       options.on_pass_bytes);
}

}  // namespace hypic::model
