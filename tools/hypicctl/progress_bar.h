// A one-line progress bar for long admin operations (verify, warm): done/total, percentage,
// rate and ETA, redrawn in place with '\r' at most every 100 ms. It draws only when enabled
// (hypicctl enables it when stderr is a terminal and --json is off), so scripts and logs never
// see the control characters; Line() is the pure formatter, usable anywhere.
// Not thread-safe: one thread advances it.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace hypic::tools {

class ProgressBar {
 public:
  // `unit` names what is counted ("entries", "segments"); total 0 means unknown.
  ProgressBar(std::string label, std::string unit, uint64_t total, std::FILE* out, bool enabled);

  void Advance(uint64_t n = 1);
  // Draws the final state and ends the line.
  void Finish();

  uint64_t done() const { return done_; }
  double ElapsedSeconds() const;

  // "label [#########           ]  45.0%  450/1000 entries  120.3/s  ETA 4s"
  std::string Line(double elapsed_s) const;

 private:
  void Draw(bool force);

  std::string label_;
  std::string unit_;
  uint64_t total_;
  uint64_t done_ = 0;
  std::FILE* out_;
  bool enabled_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  size_t last_width_ = 0;
};

}  // namespace hypic::tools
