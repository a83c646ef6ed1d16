// hypic-bench quality's pure parts: the JSONL reader (good lines, and every bad-input case naming
// its line and field), the run list, and the Wilson interval and KL arithmetic.
#include "tools/hypic-bench/quality_data.h"

#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/check_ok.h"
#include "tools/hypic-bench/quality_eval.h"
#include "tools/hypic-bench/quality_metrics.h"

namespace hypic::tools {
namespace {

constexpr uint32_t kVocab = 100;

// The message of the error a single bad line gives (it is line 2, after a good one).
std::string ErrorOf(const std::string& bad_line) {
  const std::string text =
      "{\"segments\": [[1, 2]], \"suffix\": [3], \"answer\": [4]}\n" + bad_line + "\n";
  auto r = ParseQualityData(text, kVocab);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kBadRequest);
  return r.status().message();
}

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST_CASE("quality data: good lines, blank lines skipped, extra fields ignored, --limit") {
  const std::string text =
      "{\"prefix\": [1, 2], \"segments\": [[3, 4, 5], [6, 7]], \"suffix\": [8], "
      "\"answer\": [9, 10], \"id\": \"q1\"}\n"
      "\n"
      "   \r\n"
      "{\"segments\": [[11]], \"suffix\": [12], \"answer\": [99], \"evidence_segment\": 0, "
      "\"evidence_pos\": 0}\n"
      "{\"segments\": [[13]], \"suffix\": [14], \"answer\": [15]}";  // no final newline
  auto r = ParseQualityData(text, kVocab);
  REQUIRE_OK(r);
  REQUIRE(r->size() == 3);
  const QualityPrompt& a = (*r)[0];
  CHECK(a.line == 1);
  CHECK(a.prefix == std::vector<uint32_t>{1, 2});
  CHECK(a.segments == std::vector<std::vector<uint32_t>>{{3, 4, 5}, {6, 7}});
  CHECK(a.suffix == std::vector<uint32_t>{8});
  CHECK(a.answer == std::vector<uint32_t>{9, 10});
  CHECK_FALSE(a.evidence.has_value());
  const QualityPrompt& b = (*r)[1];
  CHECK(b.line == 4);
  CHECK(b.prefix.empty());
  REQUIRE(b.evidence.has_value());
  CHECK(b.evidence->segment == 0);
  CHECK(b.evidence->pos == 0);
  CHECK((*r)[2].line == 5);

  auto limited = ParseQualityData(text + "\nnot json at all", kVocab, 2);
  REQUIRE_OK(limited);  // the lines after the limit are not read
  CHECK(limited->size() == 2);
  CHECK(ParseQualityData("{\"prefix\": [], \"segments\": [[1]], \"suffix\": [2], "
                         "\"answer\": [3]}",
                         kVocab)
            .ok());
}

TEST_CASE("quality data: a bad line names its line number and its field") {
  // Not JSON, not an object.
  CHECK(Has(ErrorOf("{\"segments\": [[1]"), "line 2: not valid JSON"));
  CHECK(Has(ErrorOf("[1, 2, 3]"), "line 2: expected a JSON object"));
  // Required fields.
  CHECK(Has(ErrorOf("{\"suffix\": [3], \"answer\": [4]}"), "line 2: 'segments': missing"));
  CHECK(Has(ErrorOf("{\"segments\": [[1]], \"answer\": [4]}"), "line 2: 'suffix': missing"));
  CHECK(Has(ErrorOf("{\"segments\": [[1]], \"suffix\": [3]}"), "line 2: 'answer': missing"));
  CHECK(Has(ErrorOf("{\"segments\": [[1]], \"suffix\": [], \"answer\": [4]}"),
            "line 2: 'suffix': empty"));
  CHECK(Has(ErrorOf("{\"segments\": [[1]], \"suffix\": [3], \"answer\": []}"),
            "line 2: 'answer': empty"));
  CHECK(Has(ErrorOf("{\"segments\": [], \"suffix\": [3], \"answer\": [4]}"),
            "line 2: 'segments': no segments"));
  CHECK(Has(ErrorOf("{\"segments\": [[1], []], \"suffix\": [3], \"answer\": [4]}"),
            "line 2: 'segments'[1]: empty segment"));
  // Wrong types.
  CHECK(Has(ErrorOf("{\"segments\": [1, 2], \"suffix\": [3], \"answer\": [4]}"),
            "line 2: 'segments'[0]: expected an array"));
  CHECK(Has(ErrorOf("{\"segments\": {\"a\": 1}, \"suffix\": [3], \"answer\": [4]}"),
            "line 2: 'segments': expected an array"));
  CHECK(Has(ErrorOf("{\"prefix\": 7, \"segments\": [[1]], \"suffix\": [3], \"answer\": [4]}"),
            "line 2: 'prefix': expected an array"));
  CHECK(Has(ErrorOf("{\"segments\": [[1, -2]], \"suffix\": [3], \"answer\": [4]}"),
            "line 2: 'segments'[0][1]: not a token id"));
  CHECK(Has(ErrorOf("{\"segments\": [[1]], \"suffix\": [3.5], \"answer\": [4]}"),
            "line 2: 'suffix'[0]: not a token id"));
  CHECK(Has(ErrorOf("{\"segments\": [[1]], \"suffix\": [3], \"answer\": [\"4\"]}"),
            "line 2: 'answer'[0]: not a token id"));
  // Evidence: both or neither, inside its segment.
  const std::string base = "{\"segments\": [[1, 2], [3]], \"suffix\": [3], \"answer\": [4], ";
  CHECK(Has(ErrorOf(base + "\"evidence_pos\": 1}"), "line 2: 'evidence_segment': missing"));
  CHECK(Has(ErrorOf(base + "\"evidence_segment\": 1}"), "line 2: 'evidence_pos': missing"));
  CHECK(Has(ErrorOf(base + "\"evidence_segment\": 2, \"evidence_pos\": 0}"),
            "line 2: 'evidence_segment': 2 is not below the 2 segments"));
  CHECK(Has(ErrorOf(base + "\"evidence_segment\": 1, \"evidence_pos\": 1}"),
            "line 2: 'evidence_pos': 1 is not below segment 1's 1 tokens"));
  CHECK(Has(ErrorOf(base + "\"evidence_segment\": -1, \"evidence_pos\": 0}"),
            "line 2: 'evidence_segment': not a non-negative integer"));
}

TEST_CASE("quality data: a token id >= the vocabulary is refused with the id and the line") {
  const std::string msg =
      ErrorOf("{\"segments\": [[1, 2], [3, 100]], \"suffix\": [3], \"answer\": [4]}");
  CHECK(Has(msg, "line 2"));
  CHECK(Has(msg, "'segments'[1][1]"));
  CHECK(Has(msg, "token id 100 is not below the vocabulary size 100"));
  CHECK(Has(ErrorOf("{\"segments\": [[1]], \"suffix\": [3], \"answer\": [4294967296]}"),
            "token id 4294967296"));
  CHECK(ParseQualityData("{\"segments\": [[99]], \"suffix\": [3], \"answer\": [4]}", kVocab).ok());
}

TEST_CASE("quality data: an empty data set is an error; a missing file is an I/O error") {
  for (const char* text : {"", "\n\n", "  \r\n\t\n"}) {
    auto r = ParseQualityData(text, kVocab);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == StatusCode::kBadRequest);
    CHECK(Has(r.status().message(), "no prompts"));
  }
  const auto dir = std::filesystem::temp_directory_path();
  const auto empty = dir / "hypic_quality_data_test_empty.jsonl";
  std::ofstream(empty).close();
  auto r = ReadQualityData(empty.string(), kVocab);
  REQUIRE_FALSE(r.ok());
  CHECK(Has(r.status().message(), empty.string() + ": no prompts"));
  std::filesystem::remove(empty);
  auto missing = ReadQualityData((dir / "hypic_quality_no_such_file.jsonl").string(), kVocab);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == StatusCode::kIoError);
}

TEST_CASE("quality runs: full first, full and oracle once at w = 0, the others per seam") {
  using model::ComposeMode;
  auto runs = QualityRuns({"hypic", "oracle", "naive", "full", "hypic"}, {0, 8});
  REQUIRE_OK(runs);
  const std::vector<QualityRun> want = {{ComposeMode::kFull, 0},  {ComposeMode::kHypic, 0},
                                        {ComposeMode::kHypic, 8}, {ComposeMode::kOracle, 0},
                                        {ComposeMode::kNaive, 0}, {ComposeMode::kNaive, 8}};
  CHECK(*runs == want);
  CHECK_FALSE(QualityRuns({"hypic", "best"}, {8}).ok());
  CHECK_FALSE(QualityRuns({"naive"}, {}).ok());
  CHECK(QualityRuns({"full", "oracle"}, {}).ok());
}

TEST_CASE("Wilson interval and KL") {
  // 45 of 50: the textbook Wilson interval [0.786, 0.957].
  const Interval i = WilsonInterval(45, 50);
  CHECK(i.low == doctest::Approx(0.7864).epsilon(1e-3));
  CHECK(i.high == doctest::Approx(0.9565).epsilon(1e-3));
  // At 100% it still has width (the normal approximation's would be 0).
  const Interval all = WilsonInterval(20, 20);
  CHECK(all.high == 1.0);
  CHECK(all.low < 0.9);
  CHECK(all.low > 0.8);
  CHECK(WilsonInterval(0, 0).HalfWidth() == 0.5);

  const std::vector<float> p = {1.0f, 2.0f, 3.0f}, q = {3.0f, 2.0f, 1.0f};
  CHECK(KlDivergence(p, p) == 0.0);
  CHECK(KlDivergence(p, q) > 0.0);
  CHECK(Argmax(p) == 2);
  double total = 0;
  for (double l : LogSoftmax(p)) total += std::exp(l);
  CHECK(total == doctest::Approx(1.0));
}

}  // namespace
}  // namespace hypic::tools
