#include "tools/hypicctl/table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace hypic::tools {

Table::Table(std::vector<std::string> headers)
    : headers_(std::move(headers)), align_(headers_.size(), Align::kLeft) {}

void Table::AlignRight(size_t column) { align_.at(column) = Align::kRight; }

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::Render() const {
  std::vector<size_t> width(headers_.size());
  for (size_t c = 0; c < headers_.size(); ++c) width[c] = headers_[c].size();
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string text;
    for (size_t c = 0; c < cells.size(); ++c) {
      if (c > 0) text += "  ";
      const size_t pad = width[c] - cells[c].size();
      if (align_[c] == Align::kRight) text.append(pad, ' ');
      text += cells[c];
      if (align_[c] == Align::kLeft) text.append(pad, ' ');
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out += text;
    out += '\n';
  };
  line(headers_);
  std::vector<std::string> rule;
  for (size_t w : width) rule.emplace_back(w, '-');
  line(rule);
  for (const auto& row : rows_) line(row);
  return out;
}

std::string HumanBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes) / 1024.0;
  size_t u = 0;
  while (v >= 1024.0 && u + 1 < std::size(kUnits)) {
    v /= 1024.0;
    ++u;
  }
  return v < 100.0 ? fmt::format("{:.1f} {}", v, kUnits[u])
                   : fmt::format("{:.0f} {}", v, kUnits[u]);
}

std::string HumanDuration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "-";
  if (seconds < 1.0) return fmt::format("{}ms", std::llround(seconds * 1000.0));
  const auto s = static_cast<uint64_t>(std::llround(seconds));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  return fmt::format("{}d{:02}h", s / 86400, (s % 86400) / 3600);
}

std::string HumanPercent(double numerator, double denominator) {
  if (denominator <= 0) return "-";
  return fmt::format("{:.1f}%", 100.0 * numerator / denominator);
}

}  // namespace hypic::tools
