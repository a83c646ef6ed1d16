// hypic-mkmodel: writes a deterministic synthetic hybrid model (config.json + safetensors) in
// the exact Hugging Face layout of Qwen3-Next or Qwen3.5, so the real loader is what tests and
// benchmarks exercise.
//
//   hypic-mkmodel --out DIR [--preset tiny|small|bench] [--format qwen3_next|qwen3_5]
//                 [--mlp moe|dense] [--seed N] [--dtype bf16|f16|f32] [--shards N]
#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "core/dtype.h"
#include "gpu/model/checkpoint.h"
#include "gpu/model/generator.h"

int main(int argc, char** argv) {
  using namespace hypic;
  CLI::App app{"Write a synthetic Qwen3-Next / Qwen3.5 hybrid model (HF layout)"};
  std::string out, preset = "small", format = "qwen3_next", mlp = "moe", dtype = "bf16";
  uint64_t seed = 0;
  int shards = 1;
  app.add_option("--out", out, "Output directory")->required();
  app.add_option("--preset", preset, "tiny | small | bench")->capture_default_str();
  app.add_option("--format", format, "qwen3_next | qwen3_5")->capture_default_str();
  app.add_option("--mlp", mlp, "moe | dense")->capture_default_str();
  app.add_option("--seed", seed, "Random seed")->capture_default_str();
  app.add_option("--dtype", dtype, "bf16 | f16 | f32")->capture_default_str();
  app.add_option("--shards", shards,
                 "Split into shards of at most 1/N of the bytes each (about N files + index)")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  auto fail = [](const Status& s) {
    fmt::print(stderr, "hypic-mkmodel: {}\n", s.ToString());
    return 2;
  };
  auto fmt_result = model::WeightFormatFromName(format);
  if (!fmt_result.ok()) return fail(fmt_result.status());
  if (mlp != "moe" && mlp != "dense") return fail(BadRequest("--mlp must be moe or dense"));
  const std::optional<DType> dt = dtype == "bf16"  ? std::optional(DType::kBF16)
                                  : dtype == "f16" ? std::optional(DType::kF16)
                                  : dtype == "f32" ? std::optional(DType::kF32)
                                                   : std::nullopt;
  if (!dt) return fail(BadRequest("--dtype must be bf16, f16 or f32"));
  auto config = model::PresetConfig(preset, *fmt_result,
                                    mlp == "moe" ? model::MlpKind::kMoe : model::MlpKind::kDense);
  if (!config.ok()) return fail(config.status());
  Status st = model::WriteCheckpoint(out, *config, model::GenerateWeights(*config, seed),
                                     {.dtype = *dt, .shards = shards});
  if (!st.ok()) {
    fmt::print(stderr, "hypic-mkmodel: {}\n", st.ToString());
    return 1;
  }
  fmt::print("wrote {} ({} {}, {} params, {}, seed {}) to {}\n", preset, format, mlp,
             config->ParameterCount(), dtype, seed, out);
  return 0;
}
