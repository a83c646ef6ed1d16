#include "gpu/runtime/device_selection.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>

namespace hypic::runtime {

namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())) != 0) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())) != 0) s.remove_suffix(1);
  return s;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The largest ordinal accepted: far above any machine's device count, small enough that a
// typo such as cuda:1000000 reads as "not visible" rather than as a number.
constexpr int kMaxOrdinal = 1023;

}  // namespace

Result<DeviceSelection> DeviceSelection::Parse(std::string_view text) {
  const std::string s = Lower(Trim(text));
  auto bad = [&](std::string_view why) {
    return BadRequest(
        fmt::format("devices '{}': {} (want auto, cpu, cuda or cuda:N[,M...])", text, why));
  };
  DeviceSelection d;
  if (s == "auto") return d;
  if (s == "cpu") {
    d.mode = Mode::kCpu;
    return d;
  }
  if (s == "cuda") {
    d.mode = Mode::kCuda;
    return d;
  }
  constexpr std::string_view kPrefix = "cuda:";
  if (s.compare(0, kPrefix.size(), kPrefix) != 0) return bad("unknown form");
  d.mode = Mode::kCuda;
  std::string_view rest = std::string_view(s).substr(kPrefix.size());
  for (;;) {
    const size_t comma = rest.find(',');
    const std::string_view item = Trim(rest.substr(0, comma));
    int ordinal = -1;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), ordinal);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || ordinal < 0 ||
        ordinal > kMaxOrdinal) {
      return bad(fmt::format("'{}' is not a device ordinal in [0, {}]", item, kMaxOrdinal));
    }
    if (std::find(d.cuda.begin(), d.cuda.end(), ordinal) != d.cuda.end()) {
      return bad(fmt::format("device {} is named twice", ordinal));
    }
    d.cuda.push_back(ordinal);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  std::sort(d.cuda.begin(), d.cuda.end());
  return d;
}

std::string DeviceSelection::ToString() const {
  switch (mode) {
    case Mode::kAuto: return "auto";
    case Mode::kCpu: return "cpu";
    case Mode::kCuda: break;
  }
  if (cuda.empty()) return "cuda";
  return fmt::format("cuda:{}", fmt::join(cuda, ","));
}

Result<std::vector<int>> ResolveCudaDevices(const DeviceSelection& selection, int visible) {
  std::vector<int> all;
  for (int d = 0; d < visible; ++d) all.push_back(d);
  switch (selection.mode) {
    case DeviceSelection::Mode::kCpu: return std::vector<int>{};
    case DeviceSelection::Mode::kAuto: return all;
    case DeviceSelection::Mode::kCuda: break;
  }
  if (visible <= 0) {
    return Unsupported(
        fmt::format("devices '{}': no CUDA device is visible (or this build has no CUDA kernels)",
                    selection.ToString()));
  }
  if (selection.cuda.empty()) return all;
  for (int d : selection.cuda) {
    if (d >= visible) {
      return NotFound(fmt::format("devices '{}': CUDA device {} is not visible ({} visible)",
                                  selection.ToString(), d, visible));
    }
  }
  return selection.cuda;
}

}  // namespace hypic::runtime
