// Human output of hypicctl: aligned text tables and the compact byte/duration forms used in
// them ("1.5 GiB", "3h12m"). Scripts use --json instead, so nothing here is a stable format.
// Value types; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hypic::tools {

class Table {
 public:
  enum class Align { kLeft, kRight };

  explicit Table(std::vector<std::string> headers);

  // Numbers read best right-aligned; every column starts left-aligned.
  void AlignRight(size_t column);
  // REQUIRES: cells.size() == number of headers.
  void AddRow(std::vector<std::string> cells);
  size_t rows() const { return rows_.size(); }

  // Header, a dashed rule, then the rows; columns separated by two spaces, no trailing blanks.
  std::string Render() const;

 private:
  std::vector<std::string> headers_;
  std::vector<Align> align_;
  std::vector<std::vector<std::string>> rows_;
};

// 1023 -> "1023 B", 1536 -> "1.5 KiB", ... (binary units, one decimal below 100).
std::string HumanBytes(uint64_t bytes);

// 0.0123 -> "12ms", 75 -> "1m15s", 7500 -> "2h05m", 200000 -> "2d07h". Negative -> "-".
std::string HumanDuration(double seconds);

// A ratio as a percentage with one decimal, or "-" when the denominator is zero.
std::string HumanPercent(double numerator, double denominator);

}  // namespace hypic::tools
