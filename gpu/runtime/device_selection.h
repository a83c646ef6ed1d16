// DeviceSelection: which devices hypicd computes on, as its `devices` setting names them, and
// its resolution against the CUDA devices this process sees. A plain value; Parse and
// ResolveCudaDevices are pure functions (the caller counts the devices), so both are tested
// without a GPU.
//
//   auto           every visible CUDA device; the CPU when there is none (the default)
//   cpu            the CPU only, whatever devices are present
//   cuda           every visible CUDA device; an error when there is none
//   cuda:0,2       CUDA devices 0 and 2; an error when one of them is not visible
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace hypic::runtime {

struct DeviceSelection {
  enum class Mode : uint8_t { kAuto, kCpu, kCuda };
  Mode mode = Mode::kAuto;
  std::vector<int> cuda;  // kCuda: the ordinals named, ascending and distinct; empty = all

  // One of the forms above (case-insensitive, spaces around items ignored); kBadRequest with
  // the offending text otherwise.
  static Result<DeviceSelection> Parse(std::string_view text);
  std::string ToString() const;  // the canonical text, which Parse reads back
};

// The CUDA devices to compute on, given `visible` CUDA devices: [] means the CPU path.
// Errors: kUnsupported (cuda or cuda:N with no visible device, e.g. a build without CUDA),
// kNotFound (a named ordinal >= visible).
Result<std::vector<int>> ResolveCudaDevices(const DeviceSelection& selection, int visible);

}  // namespace hypic::runtime
