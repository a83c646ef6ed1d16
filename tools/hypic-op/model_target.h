// ModelTarget: the flags that name the model and the device of hypic-op's model passes (prefill,
// compose): --model, --cache-dir, --device, --weights-dtype. Open() checks the device and the
// dtype (errors name the flag) and loads the model (errors are the loader's). A value type, filled
// by CLI11.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "core/status.h"
#include "gpu/model/compute_device.h"
#include "gpu/model/model.h"

namespace hypic::tools {

struct ModelTarget {
  std::string model;
  std::string cache_dir = "/tmp/hypic-models";
  std::string device = "cpu";
  std::string weights_dtype = "auto";

  struct Opened {
    std::shared_ptr<const model::Model> model;
    model::ComputeDevice device;
  };

  void AddOptions(CLI::App& sub);
  Result<Opened> Open() const;
};

}  // namespace hypic::tools
