// `hypic-bench compose --json` end to end on builtin:tiny: every mode asked for reports its row,
// the full prefill and the GEMM peaks are positive, the T overhead is reported (finite) when
// segments are measured for it, --t-segments 0 skips it instead of failing, --full-reps sets
// the reference prefill's repetitions apart from the modes', and --pause-ms idles before each
// timed run.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace hypic::tools {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

Json RunCompose(int t_segments, const std::string& extra = "") {
  const char* bin = std::getenv("HYPIC_BIN_DIR");
  REQUIRE_MESSAGE(bin != nullptr, "HYPIC_BIN_DIR is not set (run through ctest)");
  const fs::path dir =
      fs::temp_directory_path() / fmt::format("bench-compose-{}", static_cast<long>(::getpid()));
  fs::create_directories(dir);
  const fs::path out = dir / "out.json";
  const std::string cmd = fmt::format(
      "OMP_WAIT_POLICY=PASSIVE {}/hypic-bench compose --model builtin:tiny --cache-dir {} "
      "--segments 3 --segment-len 40 --suffix 8 --seam 8 --modes full,naive,hypic --reps 1 "
      "--t-segments {} --threads 1 --json {} > {}",
      bin, dir.string(), t_segments, extra, out.string());
  const int rc = std::system(cmd.c_str());
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  fs::remove_all(dir);
  REQUIRE(WIFEXITED(rc));
  REQUIRE_MESSAGE(WEXITSTATUS(rc) == 0, text.str());
  return Json::parse(text.str());
}

TEST_CASE("hypic-bench compose reports every mode, the prefill rate and the T overhead") {
  const Json j = RunCompose(2);
  const Json& full = j["full_prefill"];
  CHECK(full["tokens_per_s"].get<double>() > 0.0);
  CHECK(full["f32_gemm_peak_gflops"].get<double>() > 0.0);
  CHECK(full["bf16_gemm_peak_gflops"].get<double>() > 0.0);
  REQUIRE(j.contains("t_overhead_pct"));
  CHECK(std::isfinite(j["t_overhead_pct"].get<double>()));
  CHECK(j["segment_prefill_ms"]["with_t"].get<double>() > 0.0);
  const std::string dump = j.dump();
  for (const char* mode : {"\"full\"", "\"naive\"", "\"hypic\""}) {
    CHECK_MESSAGE(dump.find(mode) != std::string::npos, mode);
  }
}

TEST_CASE("hypic-bench compose --t-segments 0 skips the T overhead") {
  const Json j = RunCompose(0);
  CHECK_FALSE(j.contains("t_overhead_pct"));
  CHECK_FALSE(j.contains("segment_prefill_ms"));
  CHECK(j["full_prefill"]["tokens_per_s"].get<double>() > 0.0);
  CHECK(j["full_reps"].get<int>() == j["reps"].get<int>());
}

TEST_CASE("hypic-bench compose --full-reps repeats the reference prefill apart from the modes") {
  const Json j = RunCompose(0, "--full-reps 2");
  CHECK(j["reps"].get<int>() == 1);
  CHECK(j["full_reps"].get<int>() == 2);  // the reference prefills the bench ran
  CHECK(j["full_prefill"]["tokens_per_s"].get<double>() > 0.0);
}

TEST_CASE("hypic-bench compose --pause-ms idles before each timed prefill and compose") {
  const auto seconds_of = [](const std::string& extra) {
    const auto start = std::chrono::steady_clock::now();
    const Json j = RunCompose(0, extra);
    return std::pair{
        j, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
  };
  const auto [plain, plain_s] = seconds_of("");
  const auto [paused, paused_s] = seconds_of("--pause-ms 1000");
  CHECK(plain["pause_ms"].get<int>() == 0);
  CHECK(paused["pause_ms"].get<int>() == 1000);
  // Four timed runs at --reps 1: the full prefill, naive, hypic and the entry-precision
  // compose, so 4 s of idle; the untimed work around them is the same in both invocations.
  CHECK(paused_s - plain_s > 3.0);
  CHECK(paused["full_prefill"]["tokens_per_s"].get<double>() > 0.0);
}

}  // namespace
}  // namespace hypic::tools
