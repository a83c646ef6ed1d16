#include "gpu/model/checkpoint.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>
#include <type_traits>

#include "core/hash.h"
#include "core/host_buffer.h"
#include "core/safetensors.h"

namespace hypic::model {
namespace {

namespace fs = std::filesystem;

// `rows` rows of an HF tensor (viewed as [numel / cols, cols]) starting at `src_row` are rows
// [dst_row, dst_row + rows) of the canonical matrix at `dst` (elements of `dtype`, the same
// `cols`). Byte is std::byte (reading) or const std::byte (writing).
template <typename Byte>
struct RowMove {
  Byte* dst;
  DType dtype;
  bool matrix;  // a WeightTensor (kept in bf16 when the model is)
  int64_t src_row;
  int64_t dst_row;
  int64_t rows;
};

template <typename Byte>
struct HfPiece {
  std::string name;
  Shape shape;
  int64_t cols = 0;
  std::vector<RowMove<Byte>> moves;
};

// A canonical tensor's first byte and element type.
template <typename Byte>
struct Target {
  Byte* base;
  DType dtype;
  bool matrix;
};
inline Target<std::byte> Where(std::vector<float>* v) {
  return {reinterpret_cast<std::byte*>(v->data()), DType::kF32, false};
}
inline Target<const std::byte> Where(const std::vector<float>* v) {
  return {reinterpret_cast<const std::byte*>(v->data()), DType::kF32, false};
}
inline Target<std::byte> Where(WeightTensor* t) {
  return {static_cast<std::byte*>(t->data()), t->dtype(), true};
}
inline Target<const std::byte> Where(const WeightTensor* t) {
  return {static_cast<const std::byte*>(t->data()), t->dtype(), true};
}

std::string Prefix(WeightFormat f) {
  return f == WeightFormat::kQwen3Next ? "model." : "model.language_model.";
}

template <typename Byte>
class LayoutBuilder {
 public:
  explicit LayoutBuilder(std::vector<HfPiece<Byte>>* out) : out_(out) {}

  // A tensor that maps one-to-one onto a canonical tensor (or a row range of it).
  template <typename Dst>
  void Whole(std::string name, Shape shape, Dst* dst, int64_t dst_row = 0) {
    const int64_t cols = shape[shape.rank() - 1];
    const int64_t rows = shape.NumElements() / cols;
    out_->push_back({std::move(name), shape, cols, {Move(dst, 0, dst_row, rows)}});
  }
  void Add(HfPiece<Byte> piece) { out_->push_back(std::move(piece)); }

  template <typename Dst>
  static RowMove<Byte> Move(Dst* dst, int64_t src_row, int64_t dst_row, int64_t rows) {
    const Target<Byte> t = Where(dst);
    return {t.base, t.dtype, t.matrix, src_row, dst_row, rows};
  }

 private:
  std::vector<HfPiece<Byte>>* out_;
};

template <typename Byte, typename Mlp>
void AddMlp(LayoutBuilder<Byte>& b, const std::string& p, int64_t hidden, Mlp* m) {
  const int64_t i = m->intermediate;
  b.Whole(p + "gate_proj.weight", {i, hidden}, &m->gate_up, 0);
  b.Whole(p + "up_proj.weight", {i, hidden}, &m->gate_up, i);
  b.Whole(p + "down_proj.weight", {hidden, i}, &m->down);
}

// Every HF tensor of `c`'s format and where it lives in `w`. `packed_experts` selects
// Qwen3.5's packed expert tensors over per-expert ones.
// W is ModelWeights (reading) or const ModelWeights (writing).
template <typename W>
auto BuildLayout(const ModelConfig& c, W* w, bool packed_experts) {
  using Byte = std::conditional_t<std::is_const_v<W>, const std::byte, std::byte>;
  using Builder = LayoutBuilder<Byte>;
  std::vector<HfPiece<Byte>> pieces;
  Builder b(&pieces);
  const std::string prefix = Prefix(c.format);
  const int64_t h = c.hidden_size;
  b.Whole(prefix + "embed_tokens.weight", {c.vocab_size, h}, &w->embed);
  b.Whole(prefix + "norm.weight", {h}, &w->final_norm);
  if (!c.tie_word_embeddings) b.Whole("lm_head.weight", {c.vocab_size, h}, &w->lm_head);

  const int64_t nk = c.linear_key_heads, nv = c.linear_value_heads;
  const int64_t dk = c.linear_key_dim, dv = c.linear_value_dim;
  const int64_t r = nk > 0 ? nv / nk : 0;
  const int64_t conv_c = c.conv_channels(), vw = c.value_width();
  const int64_t hd = c.head_dim, nh = c.num_heads, nkv = c.num_kv_heads;

  for (int64_t li = 0; li < c.num_layers; ++li) {
    auto& lw = w->layers[static_cast<size_t>(li)];
    const std::string p = fmt::format("{}layers.{}.", prefix, li);
    b.Whole(p + "input_layernorm.weight", {h}, &lw.input_norm);
    b.Whole(p + "post_attention_layernorm.weight", {h}, &lw.post_norm);

    if (c.layer_kinds[static_cast<size_t>(li)] == LayerKind::kLinear) {
      auto& g = lw.gdn;
      const std::string la = p + "linear_attn.";
      if (c.format == WeightFormat::kQwen3Next) {
        // Interleaved by key head: group k is [q_k | k_k | v of its r value heads | z of them].
        HfPiece<Byte> qkvz{la + "in_proj_qkvz.weight", {2 * nk * dk + 2 * vw, h}, h, {}};
        HfPiece<Byte> ba{la + "in_proj_ba.weight", {2 * nv, h}, h, {}};
        const int64_t group = 2 * dk + 2 * r * dv;
        for (int64_t k = 0; k < nk; ++k) {
          const int64_t s = k * group;
          qkvz.moves.push_back(Builder::Move(&g.in_proj, s, k * dk, dk));
          qkvz.moves.push_back(Builder::Move(&g.in_proj, s + dk, nk * dk + k * dk, dk));
          qkvz.moves.push_back(
              Builder::Move(&g.in_proj, s + 2 * dk, 2 * nk * dk + k * r * dv, r * dv));
          qkvz.moves.push_back(
              Builder::Move(&g.in_proj, s + 2 * dk + r * dv, conv_c + k * r * dv, r * dv));
          ba.moves.push_back(Builder::Move(&g.in_proj, k * 2 * r, conv_c + vw + k * r, r));
          ba.moves.push_back(Builder::Move(&g.in_proj, k * 2 * r + r, conv_c + vw + nv + k * r, r));
        }
        b.Add(std::move(qkvz));
        b.Add(std::move(ba));
      } else {
        b.Whole(la + "in_proj_qkv.weight", {conv_c, h}, &g.in_proj, 0);
        b.Whole(la + "in_proj_z.weight", {vw, h}, &g.in_proj, conv_c);
        b.Whole(la + "in_proj_b.weight", {nv, h}, &g.in_proj, conv_c + vw);
        b.Whole(la + "in_proj_a.weight", {nv, h}, &g.in_proj, conv_c + vw + nv);
      }
      b.Whole(la + "conv1d.weight", {conv_c, 1, c.conv_kernel}, &g.conv);
      b.Whole(la + "A_log", {nv}, &g.a_log);
      b.Whole(la + "dt_bias", {nv}, &g.dt_bias);
      b.Whole(la + "norm.weight", {dv}, &g.norm);
      b.Whole(la + "out_proj.weight", {h, vw}, &g.out_proj);
    } else {
      auto& a = lw.attention;
      const std::string sa = p + "self_attn.";
      // q_proj is interleaved per head: [query_h | gate_h].
      HfPiece<Byte> q{sa + "q_proj.weight", {2 * nh * hd, h}, h, {}};
      for (int64_t i = 0; i < nh; ++i) {
        q.moves.push_back(Builder::Move(&a.in_proj, 2 * i * hd, i * hd, hd));
        q.moves.push_back(Builder::Move(&a.in_proj, 2 * i * hd + hd, nh * hd + i * hd, hd));
      }
      b.Add(std::move(q));
      b.Whole(sa + "k_proj.weight", {nkv * hd, h}, &a.in_proj, 2 * nh * hd);
      b.Whole(sa + "v_proj.weight", {nkv * hd, h}, &a.in_proj, 2 * nh * hd + nkv * hd);
      b.Whole(sa + "o_proj.weight", {h, nh * hd}, &a.o_proj);
      b.Whole(sa + "q_norm.weight", {hd}, &a.q_norm);
      b.Whole(sa + "k_norm.weight", {hd}, &a.k_norm);
    }

    const std::string mp = p + "mlp.";
    if (c.mlp_kinds[static_cast<size_t>(li)] == MlpKind::kMoe) {
      auto& m = lw.moe;
      const int64_t e_count = c.num_experts, mi = c.moe_intermediate_size;
      b.Whole(mp + "gate.weight", {e_count, h}, &m.router);
      if (packed_experts) {
        HfPiece<Byte> gu{mp + "experts.gate_up_proj", {e_count, 2 * mi, h}, h, {}};
        HfPiece<Byte> down{mp + "experts.down_proj", {e_count, h, mi}, mi, {}};
        for (int64_t e = 0; e < e_count; ++e) {
          gu.moves.push_back(
              Builder::Move(&m.experts[static_cast<size_t>(e)].gate_up, e * 2 * mi, 0, 2 * mi));
          down.moves.push_back(Builder::Move(&m.experts[static_cast<size_t>(e)].down, e * h, 0, h));
        }
        b.Add(std::move(gu));
        b.Add(std::move(down));
      } else {
        for (int64_t e = 0; e < e_count; ++e) {
          AddMlp(b, fmt::format("{}experts.{}.", mp, e), h, &m.experts[static_cast<size_t>(e)]);
        }
      }
      if (m.shared.intermediate > 0) {
        AddMlp(b, mp + "shared_expert.", h, &m.shared);
        b.Whole(mp + "shared_expert_gate.weight", {1, h}, &m.shared_gate);
      }
    } else {
      AddMlp(b, mp, h, &lw.dense);
    }
  }
  return pieces;
}

MlpWeights AllocateMlp(int64_t hidden, int64_t intermediate, DType matrices, bool allocate) {
  MlpWeights m;
  m.intermediate = intermediate;
  const int64_t n = allocate ? intermediate * hidden : 0;
  m.gate_up = WeightTensor(matrices, static_cast<size_t>(2 * n));
  m.down = WeightTensor(matrices, static_cast<size_t>(n));
  return m;
}

// Every tensor of `c` sized (zero-filled), or, without `allocate`, left empty: the layout of
// such weights names every tensor without holding data.
ModelWeights MakeWeights(const ModelConfig& c, DType matrices, bool allocate) {
  auto zeros = [allocate](int64_t n) {
    return std::vector<float>(allocate ? static_cast<size_t>(n) : 0, 0.0f);
  };
  auto matrix = [matrices, allocate](int64_t n) {
    return WeightTensor(matrices, allocate ? static_cast<size_t>(n) : 0);
  };
  const int64_t h = c.hidden_size;
  ModelWeights w;
  w.embed = matrix(c.vocab_size * h);
  w.final_norm = zeros(h);
  if (!c.tie_word_embeddings) w.lm_head = matrix(c.vocab_size * h);
  w.layers.resize(static_cast<size_t>(c.num_layers));
  for (int64_t li = 0; li < c.num_layers; ++li) {
    LayerWeights& lw = w.layers[static_cast<size_t>(li)];
    lw.input_norm = zeros(h);
    lw.post_norm = zeros(h);
    if (c.layer_kinds[static_cast<size_t>(li)] == LayerKind::kLinear) {
      const int64_t cc = c.conv_channels(), vw = c.value_width(), nv = c.linear_value_heads;
      lw.gdn.in_proj = matrix((cc + vw + 2 * nv) * h);
      lw.gdn.conv = zeros(cc * c.conv_kernel);
      lw.gdn.a_log = zeros(nv);
      lw.gdn.dt_bias = zeros(nv);
      lw.gdn.norm = zeros(c.linear_value_dim);
      lw.gdn.out_proj = matrix(h * vw);
    } else {
      const int64_t hd = c.head_dim;
      lw.attention.in_proj = matrix((2 * c.num_heads + 2 * c.num_kv_heads) * hd * h);
      lw.attention.q_norm = zeros(hd);
      lw.attention.k_norm = zeros(hd);
      lw.attention.o_proj = matrix(h * c.num_heads * hd);
    }
    if (c.mlp_kinds[static_cast<size_t>(li)] == MlpKind::kMoe) {
      lw.moe.router = zeros(c.num_experts * h);
      for (int64_t e = 0; e < c.num_experts; ++e) {
        lw.moe.experts.push_back(AllocateMlp(h, c.moe_intermediate_size, matrices, allocate));
      }
      if (c.shared_expert_intermediate_size > 0) {
        lw.moe.shared = AllocateMlp(h, c.shared_expert_intermediate_size, matrices, allocate);
        lw.moe.shared_gate = zeros(h);
      }
    } else {
      lw.dense = AllocateMlp(h, c.intermediate_size, matrices, allocate);
    }
  }
  return w;
}

Result<std::string> ReadTextFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(fmt::format("cannot open {}", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return IoError(fmt::format("reading {} failed", path.string()));
  return ss.str();
}

Status ReadPiece(const SafetensorsCheckpoint& ckpt, const HfPiece<std::byte>& piece) {
  HYPIC_ASSIGN_OR_RETURN(const SafetensorsTensorInfo* info, ckpt.Info(piece.name));
  if (!(info->shape == piece.shape)) {
    return BadRequest(fmt::format("tensor {}: expected shape {}, found {}", piece.name,
                                  piece.shape.ToString(), info->shape.ToString()));
  }
  if (!IsFloatDType(info->dtype)) {
    return BadRequest(fmt::format("tensor {}: dtype {} (want F32, F16 or BF16)", piece.name,
                                  DTypeName(info->dtype)));
  }
  // A view into the mapping when aligned (every writer we know aligns), else a copy.
  HostBuffer copy;
  const std::byte* src = nullptr;
  auto view = ckpt.Get(piece.name);
  if (view.ok()) {
    src = static_cast<const std::byte*>(view->data());
  } else if (view.status().code() == StatusCode::kUnsupported) {
    HYPIC_ASSIGN_OR_RETURN(copy, ckpt.ReadCopy(piece.name));
    src = copy.data();
  } else {
    return view.status();
  }
  const size_t esize = DTypeSize(info->dtype);
  for (const auto& m : piece.moves) {
    ConvertElements(info->dtype, src + static_cast<size_t>(m.src_row * piece.cols) * esize, m.dtype,
                    m.dst + static_cast<size_t>(m.dst_row * piece.cols) * DTypeSize(m.dtype),
                    static_cast<size_t>(m.rows * piece.cols));
  }
  return Status::Ok();
}

Result<ModelFingerprint> Fingerprint(const ModelConfig& config, const SafetensorsCheckpoint& ckpt) {
  Xxh3_128Stream s;
  s.UpdateString(config.Canonical());
  for (const std::string& name : ckpt.TensorNames()) {
    HYPIC_ASSIGN_OR_RETURN(const SafetensorsFile* shard, ckpt.ShardOf(name));
    HYPIC_ASSIGN_OR_RETURN(const SafetensorsTensorInfo* info, shard->Info(name));
    HYPIC_ASSIGN_OR_RETURN(std::span<const std::byte> bytes, shard->Bytes(name));
    s.UpdateString(name);
    s.UpdateString(DTypeName(info->dtype));
    s.UpdateU32(static_cast<uint32_t>(info->shape.rank()));
    for (int i = 0; i < info->shape.rank(); ++i) s.UpdateU64(static_cast<uint64_t>(info->shape[i]));
    s.UpdateU64(bytes.size());
    s.Update(bytes.data(), bytes.size());
  }
  return s.Digest();
}

}  // namespace

ModelWeights AllocateWeights(const ModelConfig& c, DType matrices) {
  return MakeWeights(c, matrices, /*allocate=*/true);
}

std::string_view WeightsDTypeName(WeightsDType d) {
  switch (d) {
    case WeightsDType::kAuto: return "auto";
    case WeightsDType::kF32: return "f32";
    case WeightsDType::kBf16: return "bf16";
  }
  return "?";
}

std::optional<WeightsDType> ParseWeightsDType(std::string_view name) {
  if (name == "auto") return WeightsDType::kAuto;
  if (name == "f32") return WeightsDType::kF32;
  if (name == "bf16") return WeightsDType::kBf16;
  return std::nullopt;
}

Result<LoadedCheckpoint> ReadCheckpoint(const fs::path& dir, const ReadOptions& options) {
  HYPIC_ASSIGN_OR_RETURN(std::string config_text, ReadTextFile(dir / "config.json"));
  auto config = ParseModelConfig(config_text);
  if (!config.ok()) return config.status().WithContext(dir.string());
  HYPIC_ASSIGN_OR_RETURN(auto ckpt, SafetensorsCheckpoint::Open(dir));

  LoadedCheckpoint out;
  out.config = std::move(config).value();
  bool packed = false;
  for (int64_t li = 0; li < out.config.num_layers; ++li) {
    if (out.config.mlp_kinds[static_cast<size_t>(li)] == MlpKind::kMoe) {
      packed = ckpt->Info(fmt::format("{}layers.{}.mlp.experts.gate_up_proj",
                                      Prefix(out.config.format), li))
                   .ok();
      break;
    }
  }
  // The matrices' precision: auto keeps bf16 when every tensor they come from is stored so
  // (a layout over unallocated weights names the tensors without holding any data).
  DType matrices = options.weights == WeightsDType::kBf16 ? DType::kBF16 : DType::kF32;
  if (options.weights == WeightsDType::kAuto) {
    bool all_bf16 = true;
    ModelWeights names_only = MakeWeights(out.config, DType::kF32, /*allocate=*/false);
    for (const auto& piece : BuildLayout(out.config, &names_only, packed)) {
      HYPIC_ASSIGN_OR_RETURN(const SafetensorsTensorInfo* info, ckpt->Info(piece.name));
      if (piece.moves.front().matrix && info->dtype != DType::kBF16) all_bf16 = false;
    }
    if (all_bf16) matrices = DType::kBF16;
  }
  out.weights = AllocateWeights(out.config, matrices);
  for (const auto& piece : BuildLayout(out.config, &out.weights, packed)) {
    HYPIC_RETURN_IF_ERROR(ReadPiece(*ckpt, piece));
    HYPIC_ASSIGN_OR_RETURN(const SafetensorsTensorInfo* info, ckpt->Info(piece.name));
    out.checkpoint_bytes += static_cast<size_t>(info->shape.NumElements()) * DTypeSize(info->dtype);
  }
  HYPIC_ASSIGN_OR_RETURN(out.fingerprint, Fingerprint(out.config, *ckpt));
  return out;
}

Status WriteCheckpoint(const fs::path& dir, const ModelConfig& config, const ModelWeights& weights,
                       const WriteOptions& options) {
  if (!IsFloatDType(options.dtype)) {
    return BadRequest(
        fmt::format("checkpoint dtype {} is not a float type", DTypeName(options.dtype)));
  }
  if (options.shards < 1 || options.shards > 999) {
    return BadRequest(fmt::format("shard count {} must be in [1, 999]", options.shards));
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IoError(fmt::format("cannot create {}: {}", dir.string(), ec.message()));

  SafetensorsWriter writer;
  writer.SetMetadata("format", "pt");
  const size_t esize = DTypeSize(options.dtype);
  for (const auto& piece :
       BuildLayout(config, &weights, /*packed_experts=*/config.format == WeightFormat::kQwen35)) {
    const auto n = static_cast<size_t>(piece.shape.NumElements());
    HYPIC_ASSIGN_OR_RETURN(HostBuffer buf, HostBuffer::Allocate(n * esize, 64));
    for (const auto& m : piece.moves) {
      ConvertElements(
          m.dtype, m.dst + static_cast<size_t>(m.dst_row * piece.cols) * DTypeSize(m.dtype),
          options.dtype, buf.data() + static_cast<size_t>(m.src_row * piece.cols) * esize,
          static_cast<size_t>(m.rows * piece.cols));
    }
    HYPIC_RETURN_IF_ERROR(writer.Add(piece.name, options.dtype, piece.shape, std::move(buf)));
  }
  if (options.shards == 1) {
    HYPIC_RETURN_IF_ERROR(writer.WriteFile(dir / kSafetensorsFileName));
  } else {
    const uint64_t per_shard = (writer.DataBytes() + static_cast<uint64_t>(options.shards) - 1) /
                               static_cast<uint64_t>(options.shards);
    HYPIC_RETURN_IF_ERROR(writer.WriteSharded(dir, per_shard).status());
  }
  const std::string json = ModelConfigToJson(config);
  const std::span<const std::byte> piece(reinterpret_cast<const std::byte*>(json.data()),
                                         json.size());
  return WriteFileAtomically(dir / "config.json", std::span(&piece, 1));
}

}  // namespace hypic::model
