// config.json parsing and checkpoint loading: both naming schemes, dtypes and shards load to
// the same weights; the presets have their documented shapes; every error path (bad config,
// missing / mis-shaped / mistyped / truncated tensors) fails with a message naming the culprit.
#include "gpu/model/checkpoint.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/safetensors.h"
#include "gpu/model/config.h"
#include "gpu/model/generator.h"
#include "tests/gpu/model/model_test_util.h"

namespace hypic::model {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;
using Json = nlohmann::json;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void WriteFile(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}

void CheckError(const Status& s, StatusCode code, const std::string& needle) {
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == code);
  CHECK_MESSAGE(s.message().find(needle) != std::string::npos, s.ToString());
}

TEST_CASE("the small preset is exactly TARGETS.md's anchor-small") {
  auto c = PresetConfig("small");
  REQUIRE_OK(c);
  CHECK(c->hidden_size == 512);
  CHECK(c->num_layers == 8);
  CHECK(c->vocab_size == 32000);
  CHECK_FALSE(c->tie_word_embeddings);
  for (int64_t i = 0; i < 8; ++i) {
    CHECK((c->layer_kinds[static_cast<size_t>(i)] == LayerKind::kFullAttention) ==
          (i == 3 || i == 7));
  }
  CHECK(c->linear_key_heads == 4);
  CHECK(c->linear_value_heads == 8);
  CHECK(c->linear_key_dim == 64);
  CHECK(c->linear_value_dim == 64);
  CHECK(c->conv_kernel == 4);
  CHECK(c->num_heads == 8);
  CHECK(c->num_kv_heads == 2);
  CHECK(c->head_dim == 64);
  CHECK(c->rotary_dim() == 16);
  CHECK(c->rope_theta == 1e6);
  CHECK(c->num_experts == 8);
  CHECK(c->experts_per_token == 2);
  CHECK(c->moe_intermediate_size == 512);
  CHECK(c->shared_expert_intermediate_size == 512);
  CHECK(c->ParameterCount() == 97637600);  // "97.6M parameters"
  CHECK_FALSE(PresetConfig("huge").ok());
  for (const char* preset : {"tiny", "small", "bench"}) {
    for (MlpKind mlp : {MlpKind::kMoe, MlpKind::kDense}) {
      auto p = PresetConfig(preset, WeightFormat::kQwen35, mlp);
      REQUIRE_OK(p);
      CHECK(p->mlp_kinds[0] == mlp);
      auto back = ParseModelConfig(ModelConfigToJson(*p));  // the written config.json parses
      REQUIRE_OK(back);
      CHECK(back->Canonical() == p->Canonical());
    }
  }
  CHECK(PresetConfig("bench")->ParameterCount() > c->ParameterCount());
}

TEST_CASE("config.json: both layouts parse to the same config, and round-trip") {
  for (WeightFormat f : {WeightFormat::kQwen3Next, WeightFormat::kQwen35}) {
    auto c = PresetConfig("small", f);
    REQUIRE_OK(c);
    const std::string json = ModelConfigToJson(*c);
    auto back = ParseModelConfig(json);
    REQUIRE_OK(back);
    CHECK(back->format == f);
    CHECK(back->Canonical() == c->Canonical());
    CHECK((Json::parse(json).contains("text_config")) == (f == WeightFormat::kQwen35));
  }
  // full_attention_interval stands in for layer_types; mlp_only_layers makes a layer dense.
  auto c = ParseModelConfig(R"({"hidden_size": 64, "num_hidden_layers": 6, "vocab_size": 100,
      "num_attention_heads": 4, "num_key_value_heads": 2, "full_attention_interval": 3,
      "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
      "intermediate_size": 32, "mlp_only_layers": [1]})");
  REQUIRE_OK(c);
  CHECK(c->layer_kinds[2] == LayerKind::kFullAttention);
  CHECK(c->layer_kinds[5] == LayerKind::kFullAttention);
  CHECK(c->layer_kinds[4] == LayerKind::kLinear);
  CHECK(c->mlp_kinds[1] == MlpKind::kDense);
  CHECK(c->mlp_kinds[0] == MlpKind::kMoe);
  CHECK(c->head_dim == 16);  // hidden / heads when absent
}

TEST_CASE("config.json errors name the key") {
  auto base = Json::parse(ModelConfigToJson(*PresetConfig("tiny")));
  auto expect = [](const Json& j, StatusCode code, const std::string& needle) {
    CheckError(ParseModelConfig(j.dump()).status(), code, needle);
  };
  CheckError(ParseModelConfig("{not json").status(), StatusCode::kBadRequest, "not valid JSON");
  CheckError(ParseModelConfig("[1, 2]").status(), StatusCode::kBadRequest, "object");
  auto j = base;
  j.erase("hidden_size");
  expect(j, StatusCode::kBadRequest, "'hidden_size'");
  j = base;
  j["num_hidden_layers"] = "eight";
  expect(j, StatusCode::kBadRequest, "'num_hidden_layers'");
  j = base;
  j["vocab_size"] = -3;
  expect(j, StatusCode::kBadRequest, "'vocab_size'");
  j = base;
  j["hidden_size"] = 1ll << 40;
  expect(j, StatusCode::kBadRequest, "'hidden_size'");
  j = base;
  j["linear_num_value_heads"] = 3;
  expect(j, StatusCode::kBadRequest, "'linear_num_key_heads'");
  j = base;
  j["layer_types"][1] = "sliding_attention";
  expect(j, StatusCode::kBadRequest, "'layer_types[1]'");
  j = base;
  j["layer_types"].erase(0);
  expect(j, StatusCode::kBadRequest, "'layer_types'");
  j = base;
  j["num_experts_per_tok"] = 9;
  expect(j, StatusCode::kBadRequest, "'num_experts_per_tok'");
  j = base;
  j["hidden_act"] = "gelu";
  expect(j, StatusCode::kUnsupported, "'hidden_act'");
  j = base;
  j["partial_rotary_factor"] = 0.3;  // 16 * 0.3 = 4.8 -> rotary dim 4: fine; 0.1 -> 1: odd
  REQUIRE_OK(ParseModelConfig(j.dump()));
  j["partial_rotary_factor"] = 0.1;
  expect(j, StatusCode::kBadRequest, "'partial_rotary_factor'");
}

TEST_CASE("bf16, f16 and sharded checkpoints load; formats give identical canonical weights") {
  auto config = PresetConfig("tiny");
  REQUIRE_OK(config);
  const ModelWeights weights = GenerateWeights(*config, 5);
  ScratchDir f32_dir, sharded_dir, q35_dir, bf16_dir, f16_dir;
  REQUIRE_OK(WriteCheckpoint(f32_dir.path(), *config, weights, {.dtype = DType::kF32}));
  REQUIRE_OK(
      WriteCheckpoint(sharded_dir.path(), *config, weights, {.dtype = DType::kF32, .shards = 3}));
  auto q35 = *config;
  q35.format = WeightFormat::kQwen35;
  REQUIRE_OK(WriteCheckpoint(q35_dir.path(), q35, weights, {.dtype = DType::kF32}));
  REQUIRE_OK(WriteCheckpoint(bf16_dir.path(), *config, weights, {.dtype = DType::kBF16}));
  REQUIRE_OK(WriteCheckpoint(f16_dir.path(), *config, weights, {.dtype = DType::kF16}));
  CHECK(fs::exists(sharded_dir.path() / "model.safetensors.index.json"));

  auto a = ReadCheckpoint(f32_dir.path());
  auto b = ReadCheckpoint(sharded_dir.path());
  auto c = ReadCheckpoint(q35_dir.path());
  auto d = ReadCheckpoint(bf16_dir.path());
  auto e = ReadCheckpoint(f16_dir.path());
  REQUIRE_OK(a);
  REQUIRE_OK(b);
  REQUIRE_OK(c);
  REQUIRE_OK(d);
  REQUIRE_OK(e);
  auto same = [](const ModelWeights& x, const ModelWeights& y) {
    bool eq = x.embed == y.embed && x.lm_head == y.lm_head && x.final_norm == y.final_norm;
    for (size_t i = 0; i < x.layers.size(); ++i) {
      const LayerWeights &p = x.layers[i], &q = y.layers[i];
      eq = eq && p.gdn.in_proj == q.gdn.in_proj && p.gdn.conv == q.gdn.conv &&
           p.gdn.a_log == q.gdn.a_log && p.attention.in_proj == q.attention.in_proj &&
           p.moe.router == q.moe.router && p.moe.shared.gate_up == q.moe.shared.gate_up &&
           p.moe.experts.back().down == q.moe.experts.back().down;
    }
    return eq;
  };
  CHECK(same(a->weights, weights));
  CHECK(same(b->weights, weights));
  CHECK(same(c->weights, weights));
  CHECK(a->fingerprint == b->fingerprint);  // sharding does not change the tensors
  CHECK(a->fingerprint != c->fingerprint);
  CHECK(a->fingerprint != d->fingerprint);
  // bf16 / f16 round to within their precision.
  double worst_bf16 = 0.0, worst_f16 = 0.0;
  for (size_t i = 0; i < weights.embed.size(); ++i) {
    const double w = weights.embed.At(i);
    worst_bf16 =
        std::max(worst_bf16, std::abs(d->weights.embed.At(i) - w) / std::max(std::abs(w), 1e-3));
    worst_f16 =
        std::max(worst_f16, std::abs(e->weights.embed.At(i) - w) / std::max(std::abs(w), 1e-3));
  }
  CHECK(worst_bf16 < 1.0 / 256);
  CHECK(worst_f16 < 1.0 / 2048);

  // Resident precision: auto keeps a bf16 checkpoint's GEMM weights in bf16 (the rest fp32)
  // and widens every other one; an explicit f32 or bf16 overrides it.
  CHECK(a->weights.embed.dtype() == DType::kF32);
  CHECK(d->weights.embed.dtype() == DType::kBF16);
  CHECK(d->weights.layers[0].gdn.in_proj.dtype() == DType::kBF16);
  CHECK(d->weights.layers[0].moe.experts[0].down.dtype() == DType::kBF16);
  CHECK(e->weights.embed.dtype() == DType::kF32);
  CHECK(d->weights.ResidentBytes() <= d->checkpoint_bytes * 105 / 100);
  CHECK(a->weights.ResidentBytes() == a->checkpoint_bytes);
  auto d_f32 = ReadCheckpoint(bf16_dir.path(), {.weights = WeightsDType::kF32});
  REQUIRE_OK(d_f32);
  CHECK(d_f32->weights.embed.dtype() == DType::kF32);
  CHECK(d_f32->fingerprint == d->fingerprint);  // the files' fingerprint; Model folds dtype
  auto a_bf16 = ReadCheckpoint(f32_dir.path(), {.weights = WeightsDType::kBf16});
  REQUIRE_OK(a_bf16);
  bool widened_exactly = true, rounded_as_stored = true;
  for (size_t i = 0; i < weights.embed.size(); ++i) {
    widened_exactly = widened_exactly && d_f32->weights.embed.f32()[i] == d->weights.embed.At(i);
    rounded_as_stored =
        rounded_as_stored && a_bf16->weights.embed.bf16()[i] == d->weights.embed.bf16()[i];
  }
  CHECK(widened_exactly);
  CHECK(rounded_as_stored);
  // The fingerprint is computed from the files: loading twice gives the same value.
  CHECK(ReadCheckpoint(f32_dir.path())->fingerprint == a->fingerprint);
}

// Rewrites `dir`/model.safetensors through `edit` (a writer holding every tensor but `drop`).
void Rewrite(const fs::path& dir, const std::string& drop,
             const std::function<void(SafetensorsWriter&)>& edit) {
  auto file = SafetensorsFile::Open(dir / "model.safetensors");
  REQUIRE_OK(file);
  SafetensorsWriter w;
  for (const auto& [name, info] : (*file)->tensors()) {
    if (name == drop) continue;
    auto bytes = (*file)->Bytes(name);
    REQUIRE_OK(bytes);
    REQUIRE_OK(w.Add(name, info.dtype, info.shape, *bytes));
  }
  edit(w);
  file->reset();
  REQUIRE_OK(w.WriteFile(dir / "model.safetensors"));
}

TEST_CASE("loader errors name the tensor, the expected and the found shape") {
  ScratchDir dir;
  testing::WriteTiny(dir.path());
  const std::string qkvz = "model.layers.0.linear_attn.in_proj_qkvz.weight";

  SUBCASE("missing tensor") {
    Rewrite(dir.path(), qkvz, [](SafetensorsWriter&) {});
    CheckError(ReadCheckpoint(dir.path()).status(), StatusCode::kNotFound, qkvz);
  }
  SUBCASE("mis-shaped tensor") {
    Rewrite(dir.path(), qkvz, [&](SafetensorsWriter& w) {
      std::vector<float> data(64 * 200, 0.0f);
      REQUIRE_OK(
          w.Add(qkvz, DType::kF32, Shape{200, 64}, std::as_bytes(std::span<const float>(data))));
    });
    const Status s = ReadCheckpoint(dir.path()).status();
    CheckError(s, StatusCode::kBadRequest, qkvz);
    CHECK(s.message().find("expected shape [192, 64], found [200, 64]") != std::string::npos);
  }
  SUBCASE("integer dtype") {
    const std::string a_log = "model.layers.0.linear_attn.A_log";
    Rewrite(dir.path(), a_log, [&](SafetensorsWriter& w) {
      std::vector<int32_t> data(4, 1);
      REQUIRE_OK(
          w.Add(a_log, DType::kI32, Shape{4}, std::as_bytes(std::span<const int32_t>(data))));
    });
    CheckError(ReadCheckpoint(dir.path()).status(), StatusCode::kBadRequest, a_log);
  }
  SUBCASE("truncated file") {
    const std::string bytes = ReadFile(dir.path() / "model.safetensors");
    for (size_t keep : {size_t{0}, size_t{5}, size_t{100}, bytes.size() / 2, bytes.size() - 1}) {
      WriteFile(dir.path() / "model.safetensors", bytes.substr(0, keep));
      const Status s = ReadCheckpoint(dir.path()).status();
      CHECK_FALSE(s.ok());
      CHECK(s.code() == StatusCode::kCorruption);
    }
  }
  SUBCASE("bad config") {
    WriteFile(dir.path() / "config.json", R"({"hidden_size": 64})");
    CheckError(ReadCheckpoint(dir.path()).status(), StatusCode::kBadRequest, "num_hidden_layers");
  }
  SUBCASE("config that disagrees with the tensors") {
    auto j = Json::parse(ReadFile(dir.path() / "config.json"));
    j["linear_key_head_dim"] = 8;
    WriteFile(dir.path() / "config.json", j.dump());
    CheckError(ReadCheckpoint(dir.path()).status(), StatusCode::kBadRequest, "expected shape");
  }
  SUBCASE("no config") {
    fs::remove(dir.path() / "config.json");
    CheckError(ReadCheckpoint(dir.path()).status(), StatusCode::kNotFound, "config.json");
  }
}

TEST_CASE("builtin models are generated once into the cache directory and loaded") {
  ScratchDir cache;
  auto a = LoadModel("builtin:tiny", cache.path());
  REQUIRE_OK(a);
  const auto stamp =
      fs::last_write_time(cache.path() / "builtin-tiny-seed0-qwen3_next-bf16" / "config.json");
  auto b = LoadModel("builtin:tiny", cache.path());
  REQUIRE_OK(b);
  CHECK((*a)->fingerprint() == (*b)->fingerprint());
  CHECK(fs::last_write_time(cache.path() / "builtin-tiny-seed0-qwen3_next-bf16" / "config.json") ==
        stamp);
  CHECK_FALSE(LoadModel("builtin:nope", cache.path()).ok());
}

}  // namespace
}  // namespace hypic::model
