#include "tools/hypicctl/progress_bar.h"

#include <fmt/format.h>

#include <algorithm>

#include "tools/hypicctl/table.h"

namespace hypic::tools {

namespace {
constexpr int kBarWidth = 24;
constexpr auto kRedrawInterval = std::chrono::milliseconds(100);
}  // namespace

ProgressBar::ProgressBar(std::string label, std::string unit, uint64_t total, std::FILE* out,
                         bool enabled)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(total),
      out_(out),
      enabled_(enabled),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_ - kRedrawInterval) {}

double ProgressBar::ElapsedSeconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string ProgressBar::Line(double elapsed_s) const {
  const double rate = elapsed_s > 0 ? static_cast<double>(done_) / elapsed_s : 0.0;
  std::string line = label_;
  if (total_ > 0) {
    const double frac = std::min(1.0, static_cast<double>(done_) / static_cast<double>(total_));
    const int filled = static_cast<int>(frac * kBarWidth);
    line += fmt::format(" [{}{}] {:5.1f}%  {}/{} {}", std::string(filled, '#'),
                        std::string(kBarWidth - filled, ' '), frac * 100.0, done_, total_, unit_);
  } else {
    line += fmt::format("  {} {}", done_, unit_);
  }
  line += fmt::format("  {:.1f}/s", rate);
  if (total_ > 0 && done_ < total_) {
    line += rate > 0 ? "  ETA " + HumanDuration(static_cast<double>(total_ - done_) / rate)
                     : std::string("  ETA -");
  } else if (total_ > 0) {
    line += "  in " + HumanDuration(elapsed_s);
  }
  return line;
}

void ProgressBar::Advance(uint64_t n) {
  done_ += n;
  Draw(false);
}

void ProgressBar::Finish() {
  Draw(true);
  if (enabled_) {
    std::fputc('\n', out_);
    std::fflush(out_);
  }
}

void ProgressBar::Draw(bool force) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!force && now - last_draw_ < kRedrawInterval) return;
  last_draw_ = now;
  std::string line = Line(std::chrono::duration<double>(now - start_).count());
  // Blank out what is left of a longer previous line.
  const size_t width = line.size();
  if (width < last_width_) line.append(last_width_ - width, ' ');
  last_width_ = width;
  fmt::print(out_, "\r{}", line);
  std::fflush(out_);
}

}  // namespace hypic::tools
