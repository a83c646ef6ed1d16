// Fuzzes ParseModelConfig (gpu/model/config.h) with arbitrary bytes. Whatever parses must
// validate, report sizes without overflow, and survive a JSON round trip unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "gpu/model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hypic::model;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = ParseModelConfig(text);
  if (!config.ok()) return 0;
  if (!config->Validate().ok()) std::abort();
  if (config->ParameterCount() <= 0) std::abort();
  auto again = ParseModelConfig(ModelConfigToJson(*config));
  if (!again.ok() || again->Canonical() != config->Canonical()) std::abort();
  return 0;
}
