#include "tools/hypic-op/model_target.h"

#include <fmt/format.h>

#include <optional>

namespace hypic::tools {

void ModelTarget::AddOptions(CLI::App& sub) {
  sub.add_option("--model", model, "Model directory or builtin:NAME")->required();
  sub.add_option("--cache-dir", cache_dir, "Where builtin models are generated")
      ->capture_default_str();
  sub.add_option("--device", device, "cpu, cuda or cuda:N")->capture_default_str();
  sub.add_option("--weights-dtype", weights_dtype,
                 "GEMM weights: auto (a bf16 checkpoint stays bf16), bf16 or f32")
      ->capture_default_str();
}

Result<ModelTarget::Opened> ModelTarget::Open() const {
  Opened out;
  auto parsed = model::ParseComputeDevice(device);
  if (!parsed.ok()) return parsed.status().WithContext("--device");
  if (Status st = model::CheckComputeDevice(*parsed); !st.ok()) return st.WithContext("--device");
  out.device = *parsed;
  const std::optional<model::WeightsDType> weights = model::ParseWeightsDType(weights_dtype);
  if (!weights) {
    return BadRequest(fmt::format("--weights-dtype: '{}' is not auto, bf16 or f32", weights_dtype));
  }
  HYPIC_ASSIGN_OR_RETURN(out.model, model::LoadModel(model, cache_dir, {.weights = *weights}));
  return out;
}

}  // namespace hypic::tools
