// Writing PNG plots with gnuplot, for the hypic-bench subcommands that draw them (trace,
// quality): quoting for gnuplot and the shell, the common script header, writing the data and
// script files, and running gnuplot on scripts in their directory (so `gnuplot NAME.gp` there
// redraws a plot). Header-only free functions; thread-compatible.
#pragma once

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/status.h"

namespace hypic::tools {

// A gnuplot single-quoted string.
inline std::string GnuplotQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "''";
    else
      out += c;
  }
  return out + "'";
}

// A POSIX shell single-quoted word.
inline std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

[[nodiscard]] inline Status WriteTextFile(const std::filesystem::path& path,
                                          const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return IoError(fmt::format("cannot write {}", path.string()));
  return Status::Ok();
}

// The first lines of every plot script: a 960x600 PNG named `png`, a title, a grid.
inline std::string GnuplotHeader(const std::string& png, const std::string& title) {
  return fmt::format(
      "set terminal pngcairo size 960,600 font 'sans,11'\n"
      "set output {}\n"
      "set title {}\n"
      "set grid\n"
      "set key bottom right\n",
      GnuplotQuote(png), GnuplotQuote(title));
}

// Runs `gnuplot SCRIPT` in `dir` for each script. kUnsupported when gnuplot is not installed,
// kIoError when a script fails.
[[nodiscard]] inline Status RunGnuplot(const std::filesystem::path& dir,
                                       const std::vector<std::string>& scripts) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    return Unsupported("gnuplot is not installed: data and scripts written, no PNG");
  }
  for (const auto& script : scripts) {
    const std::string cmd =
        fmt::format("cd {} && gnuplot {}", ShellQuote(dir.string()), ShellQuote(script));
    if (std::system(cmd.c_str()) != 0) return IoError(fmt::format("gnuplot {} failed", script));
  }
  return Status::Ok();
}

}  // namespace hypic::tools
