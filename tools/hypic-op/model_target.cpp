#include "tools/hypic-op/model_target.h"

namespace hypic::tools {

void ModelTarget::AddOptions(CLI::App& sub) {
  sub.add_option("--model", model, "Model directory or builtin:NAME")->required();
  sub.add_option("--cache-dir", cache_dir, "Where builtin models are generated")
      ->capture_default_str();
  sub.add_option("--device", device, "cpu, cuda or cuda:N")->capture_default_str();
}

Result<ModelTarget::Opened> ModelTarget::Open() const {
  Opened out;
  auto parsed = model::ParseComputeDevice(device);
  if (!parsed.ok()) return parsed.status().WithContext("--device");
  if (Status st = model::CheckComputeDevice(*parsed); !st.ok()) return st.WithContext("--device");
  out.device = *parsed;
  HYPIC_ASSIGN_OR_RETURN(out.model, model::LoadModel(model, cache_dir));
  return out;
}

}  // namespace hypic::tools
