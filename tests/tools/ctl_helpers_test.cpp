// hypicctl's pure helpers: table layout, human units, the progress line, and the warm input
// reader's acceptance and error messages.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tests/support/check_ok.h"
#include "tools/hypicctl/progress_bar.h"
#include "tools/hypicctl/table.h"
#include "tools/hypicctl/token_lines.h"

namespace hypic::tools {
namespace {

TEST_CASE("table: columns padded to the widest cell, right alignment, no trailing blanks") {
  Table t({"tier", "entries", "bytes"});
  t.AlignRight(1);
  t.AddRow({"ram", "12", "1.5 GiB"});
  t.AddRow({"ssd", "12345", "3 B"});
  CHECK(t.rows() == 2);
  CHECK(t.Render() ==
        "tier  entries  bytes\n"
        "----  -------  -------\n"
        "ram        12  1.5 GiB\n"
        "ssd     12345  3 B\n");
}

TEST_CASE("human units") {
  CHECK(HumanBytes(0) == "0 B");
  CHECK(HumanBytes(1023) == "1023 B");
  CHECK(HumanBytes(1536) == "1.5 KiB");
  CHECK(HumanBytes(uint64_t{3} << 30) == "3.0 GiB");
  CHECK(HumanBytes(uint64_t{500} << 20) == "500 MiB");
  CHECK(HumanDuration(0.0123) == "12ms");
  CHECK(HumanDuration(59.4) == "59s");
  CHECK(HumanDuration(75) == "1m15s");
  CHECK(HumanDuration(7500) == "2h05m");
  CHECK(HumanDuration(200000) == "2d07h");
  CHECK(HumanDuration(-1) == "-");
  CHECK(HumanPercent(1, 4) == "25.0%");
  CHECK(HumanPercent(1, 0) == "-");
}

TEST_CASE("progress line: fraction, rate and ETA from the elapsed time") {
  ProgressBar bar("verify", "entries", 1000, stderr, /*enabled=*/false);
  bar.Advance(250);
  CHECK(bar.done() == 250);
  // 250 in 5 s = 50/s; 750 left = 15 s.
  CHECK(bar.Line(5.0) ==
        "verify [######                  ]  25.0%  250/1000 entries  50.0/s  ETA 15s");
  bar.Advance(750);
  CHECK(bar.Line(20.0) ==
        "verify [########################] 100.0%  1000/1000 entries  50.0/s  in 20s");
  ProgressBar unknown("warm", "segments", 0, stderr, false);
  unknown.Advance(3);
  CHECK(unknown.Line(1.0) == "warm  3 segments  3.0/s");
}

TEST_CASE("progress bar draws in place only when enabled") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  ProgressBar bar("warm", "segments", 4, f, true);
  bar.Advance(4);
  bar.Finish();
  std::rewind(f);
  char buf[256] = {};
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  const std::string out(buf, n);
  CHECK(out.front() == '\r');
  CHECK(out.back() == '\n');
  CHECK(out.find("4/4 segments") != std::string::npos);

  std::FILE* g = std::tmpfile();
  REQUIRE(g != nullptr);
  ProgressBar quiet("warm", "segments", 4, g, false);
  quiet.Advance(4);
  quiet.Finish();
  CHECK(std::ftell(g) == 0);
  std::fclose(g);
}

TEST_CASE("token lines: arrays of u32, blank lines skipped") {
  auto lines = ParseTokenLines("[1, 2, 3]\n\n  \r\n[4294967295]\r\n[0]");
  REQUIRE_OK(lines);
  REQUIRE(lines->size() == 3);
  CHECK((*lines)[0] == std::vector<uint32_t>{1, 2, 3});
  CHECK((*lines)[1] == std::vector<uint32_t>{4294967295u});
  CHECK((*lines)[2] == std::vector<uint32_t>{0});
  auto none = ParseTokenLines("");
  REQUIRE_OK(none);
  CHECK(none->empty());
}

TEST_CASE("token lines: each malformed line is BAD_REQUEST naming the line") {
  auto expect_bad = [](std::string_view text, std::string_view needle) {
    CAPTURE(text);
    auto r = ParseTokenLines(text);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == StatusCode::kBadRequest);
    CHECK_MESSAGE(r.status().message().find(needle) != std::string::npos, r.status().message());
  };
  expect_bad("[1]\n[1,2", "line 2: not valid JSON");
  expect_bad("{\"tokens\": [1]}", "line 1: expected a JSON array");
  expect_bad("[1]\n\n[-1]", "line 3: element 0");
  expect_bad("[1, 2.5]", "element 1");
  expect_bad("[4294967296]", "element 0");
  expect_bad("[\"a\"]", "element 0");
  expect_bad("[]", "empty segment");
}

TEST_CASE("token lines from a file, and a missing file is IO_ERROR") {
  const auto path = std::filesystem::temp_directory_path() / "hypic_ctl_token_lines_test.jsonl";
  {
    std::ofstream out(path);
    out << "[5,6]\n[7]\n";
  }
  auto lines = ReadTokenLines(path.string());
  std::filesystem::remove(path);
  REQUIRE_OK(lines);
  CHECK(lines->size() == 2);
  auto missing = ReadTokenLines((path.string() + ".missing"));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == StatusCode::kIoError);
}

}  // namespace
}  // namespace hypic::tools
