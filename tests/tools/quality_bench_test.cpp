// `hypic-bench quality` end to end, on builtin:tiny (random weights), with a data set whose
// answers are the model's own greedy continuations after a full prefill (decoded here, one
// Model::Extend per token):
//  * in process: full scores exactly 100% with KL 0; oracle (fp32 weights and entries) equals
//    full; at every seam shorter than the segments hypic's KL to full is below naive's; at a seam
//    covering every segment naive and hypic run everything live and equal full; the evidence
//    split partitions the prompts; the JSON has the documented rows, the plot is written, and
//    the scores do not depend on the number of workers;
//  * a wrong answer costs exactly its prompt (and not its first token);
//  * bad input exits 2 naming the line and the token id; an empty data set exits 2;
//  * through a live hypicd (--daemon): the same accuracy rows as in process, and a daemon that
//    runs another model is refused.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "gpu/model/model.h"
#include "tests/e2e/daemon.h"
#include "tests/support/check_ok.h"

namespace hypic::tools {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr int kPrompts = 12;
constexpr size_t kAnswerLen = 3;
constexpr uint32_t kMinSegment = 20;  // every seam tested below this runs a cached part
constexpr uint32_t kMaxSegment = 40;

struct ToolRun {
  int exit_code = -1;
  std::string out, err;
};

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A scratch directory per test case, removed at the end.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "hypic-quality-XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path); }
};

ToolRun Quality(const TempDir& dir, const std::string& args) {
  const fs::path out = dir.path / "stdout", err = dir.path / "stderr";
  const std::string cmd =
      fmt::format("{} quality --cache-dir {} {} > {} 2> {}", e2e::BinPath("hypic-bench"),
                  e2e::ModelCacheDir(), args, out.string(), err.string());
  const int rc = std::system(cmd.c_str());
  ToolRun r;
  r.exit_code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  r.out = Slurp(out);
  r.err = Slurp(err);
  return r;
}

std::shared_ptr<const model::Model> Tiny(model::WeightsDType weights) {
  auto m = model::LoadModel("builtin:tiny", e2e::ModelCacheDir(), {.weights = weights});
  REQUIRE_OK(m);
  return *m;
}

// kPrompts prompts (a raw prefix, three segments, a raw question) and their greedy answers.
std::string MakeData(const model::Model& m, uint64_t seed) {
  std::mt19937_64 gen(seed);
  auto tokens = [&](uint32_t n) {
    std::uniform_int_distribution<uint32_t> tok(0,
                                                static_cast<uint32_t>(m.config().vocab_size) - 1);
    std::vector<uint32_t> t(n);
    for (auto& x : t) x = tok(gen);
    return t;
  };
  std::uniform_int_distribution<uint32_t> len(kMinSegment, kMaxSegment);
  std::string text;
  for (int i = 0; i < kPrompts; ++i) {
    Json line;
    line["prefix"] = tokens(3);
    std::vector<uint32_t> all = line["prefix"];
    for (int s = 0; s < 3; ++s) {
      auto seg = tokens(len(gen));
      all.insert(all.end(), seg.begin(), seg.end());
      line["segments"].push_back(seg);
    }
    line["suffix"] = tokens(4);
    for (uint32_t t : line["suffix"]) all.push_back(t);
    auto full = m.FullPrefill(all);
    REQUIRE_OK(full);
    std::vector<float> logits = full->logits;
    std::vector<uint32_t> answer;
    while (answer.size() < kAnswerLen) {
      answer.push_back(
          static_cast<uint32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
      auto next = m.Extend(full->state, std::span<const uint32_t>(&answer.back(), 1));
      REQUIRE_OK(next);
      logits = next->logits;
    }
    line["answer"] = answer;
    line["evidence_segment"] = static_cast<int>(gen() % 3);
    line["evidence_pos"] = static_cast<int>(gen() % 12);
    line["id"] = i;  // ignored
    text += line.dump() + "\n";
  }
  return text;
}

fs::path WriteData(const TempDir& dir, const std::string& name, const std::string& text) {
  const fs::path p = dir.path / name;
  std::ofstream(p) << text;
  return p;
}

Json ParseJson(const ToolRun& r) {
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  Json j = Json::parse(r.out, nullptr, false);
  REQUIRE_FALSE(j.is_discarded());
  return j;
}

const Json& Row(const Json& j, const std::string& mode, uint32_t seam) {
  for (const Json& r : j["results"]) {
    if (r["mode"] == mode && r["seam"] == seam) return r;
  }
  FAIL("no row " << mode << " at seam " << seam);
  return j;
}

TEST_CASE("in process: full is 100%, oracle equals full, hypic is closer to full than naive") {
  TempDir dir;
  const auto data = WriteData(dir, "tiny.jsonl", MakeData(*Tiny(model::WeightsDType::kF32), 7));
  const auto png = dir.path / "plot" / "quality.png";
  const Json j = ParseJson(Quality(
      dir, fmt::format("--model builtin:tiny --weights-dtype f32 --entry-dtype f32 --data {} "
                       "--modes full,naive,hypic,oracle --seam 0,4,16,64 --workers 2 --json "
                       "--plot {}",
                       data.string(), png.string())));
  CHECK(j["model"] == "builtin:tiny");
  CHECK(j["data"] == data.string());
  CHECK(j["n"] == kPrompts);
  CHECK(j["source"] == "in process");
  CHECK(j["ci"] == "wilson");
  CHECK_FALSE(j["cpu"].get<std::string>().empty());
  // One row per mode and seam, full and oracle once at seam 0, in the order asked.
  std::vector<std::pair<std::string, uint32_t>> rows;
  for (const Json& r : j["results"]) rows.emplace_back(r["mode"], r["seam"]);
  const std::vector<std::pair<std::string, uint32_t>> want = {
      {"full", 0},  {"naive", 0}, {"naive", 4},  {"naive", 16}, {"naive", 64},
      {"hypic", 0}, {"hypic", 4}, {"hypic", 16}, {"hypic", 64}, {"oracle", 0}};
  CHECK(rows == want);
  for (const Json& r : j["results"]) {
    CAPTURE(r.dump());
    CHECK(r["n"] == kPrompts);
    for (const char* key : {"accuracy", "ci95", "first_token_accuracy", "delta_vs_full", "kl_mean",
                            "argmax_agree", "answer_prob_mean", "ms_per_prompt"}) {
      REQUIRE(r.contains(key));
    }
    const double acc = r["accuracy"];
    CHECK(r["ci95_low"].get<double>() <= acc);
    CHECK(r["ci95_high"].get<double>() >= acc);
    CHECK(r["ci95"].get<double>() > 0);
    CHECK(r["delta_vs_full"].get<double>() == doctest::Approx(100.0 * (acc - 1.0)));
    CHECK(r["first_token_accuracy"].get<double>() >= acc);
    // The evidence split partitions the prompts by evidence_pos < w.
    CHECK(r["evidence_in_seam"]["n"].get<int>() + r["evidence_outside"]["n"].get<int>() ==
          kPrompts);
    if (r["seam"] == 0) CHECK(r["evidence_in_seam"]["n"] == 0);
    if (r["seam"] == 64) CHECK(r["evidence_outside"]["n"] == 0);
  }
  const Json& full = Row(j, "full", 0);
  CHECK(full["accuracy"] == 1.0);
  CHECK(full["first_token_accuracy"] == 1.0);
  CHECK(full["kl_mean"] == 0.0);
  CHECK(full["argmax_agree"] == 1.0);
  CHECK(full["answer_prob_mean"].get<double>() > 0);
  const Json& oracle = Row(j, "oracle", 0);
  CHECK(oracle["accuracy"] == 1.0);
  CHECK(oracle["argmax_agree"] == 1.0);
  CHECK(oracle["kl_mean"].get<double>() < 1e-8);
  for (uint32_t w : {0u, 4u, 16u}) {
    CAPTURE(w);
    CHECK(Row(j, "hypic", w)["kl_mean"].get<double>() <
          Row(j, "naive", w)["kl_mean"].get<double>());
  }
  // A seam longer than every segment leaves nothing cached: both modes are full recompute.
  for (const char* mode : {"naive", "hypic"}) {
    CAPTURE(mode);
    CHECK(Row(j, mode, 64)["accuracy"] == 1.0);
    CHECK(Row(j, mode, 64)["kl_mean"].get<double>() < 1e-8);
  }
  CHECK(fs::exists(png.parent_path() / "quality.dat"));
  CHECK(fs::exists(png.parent_path() / "quality.gp"));
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) CHECK(fs::file_size(png) > 0);

  // One worker instead of two (and the rows computed in another grouping): the same scores.
  const Json one = ParseJson(Quality(
      dir, fmt::format("--model builtin:tiny --weights-dtype f32 --entry-dtype f32 --data {} "
                       "--modes hypic,oracle --seam 16,4 --workers 1 --json",
                       data.string())));
  REQUIRE(one["results"].size() == 4);
  for (const Json& r : one["results"]) {
    CAPTURE(r.dump());
    const Json& two = Row(j, r["mode"], r["seam"]);
    CHECK(r["correct"] == two["correct"]);
    CHECK(r["argmax_agree"] == two["argmax_agree"]);
    CHECK(r["kl_mean"].get<double>() ==
          doctest::Approx(two["kl_mean"].get<double>()).epsilon(1e-4).scale(1e-9));
  }

  // The human table: the CPU model, one line per row, the interval named.
  const ToolRun text =
      Quality(dir, fmt::format("--model builtin:tiny --data {} --limit 2 --seam 8", data.string()));
  INFO(text.err);
  REQUIRE(text.exit_code == 0);
  CHECK(text.out.find("cpu: ") != std::string::npos);
  CHECK(text.out.find("2 prompts") != std::string::npos);
  CHECK(text.out.find("Wilson") != std::string::npos);
  CHECK(text.out.find("evidence in seam") != std::string::npos);
}

TEST_CASE("a wrong answer costs exactly its prompt, and not its first token") {
  TempDir dir;
  std::string text = MakeData(*Tiny(model::WeightsDType::kAuto), 11);
  // The last answer token of the first prompt, moved to the next id.
  std::istringstream lines(text);
  std::string first, rest;
  std::getline(lines, first);
  rest.assign(std::istreambuf_iterator<char>(lines), {});
  Json line = Json::parse(first);
  line["answer"].back() = (line["answer"].back().get<uint32_t>() + 1) % 512;
  const auto data = WriteData(dir, "wrong.jsonl", line.dump() + "\n" + rest);
  const Json j = ParseJson(Quality(
      dir, fmt::format("--model builtin:tiny --data {} --modes full --json", data.string())));
  REQUIRE(j["results"].size() == 1);
  const Json& full = j["results"][0];
  CHECK(full["correct"] == kPrompts - 1);
  CHECK(full["accuracy"].get<double>() == doctest::Approx(double(kPrompts - 1) / kPrompts));
  CHECK(full["first_token_accuracy"] == 1.0);
}

TEST_CASE("bad input: the line and the token id are named, an empty data set is refused") {
  TempDir dir;
  const auto bad = WriteData(dir, "bad.jsonl",
                             "{\"segments\": [[1, 2]], \"suffix\": [3], \"answer\": [4]}\n"
                             "{\"segments\": [[1, 512]], \"suffix\": [3], \"answer\": [4]}\n");
  ToolRun r = Quality(dir, fmt::format("--model builtin:tiny --data {}", bad.string()));
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("line 2") != std::string::npos);
  CHECK(r.err.find("token id 512") != std::string::npos);
  const auto empty = WriteData(dir, "empty.jsonl", "\n");
  r = Quality(dir, fmt::format("--model builtin:tiny --data {}", empty.string()));
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("no prompts") != std::string::npos);
  r = Quality(dir, fmt::format("--model builtin:tiny --data {} --modes best", bad.string()));
  CHECK(r.exit_code == 2);
  r = Quality(dir, fmt::format("--model builtin:tiny --data {}", (dir.path / "none").string()));
  CHECK(r.exit_code != 0);
}

TEST_CASE("through hypicd: the same accuracy rows as in process") {
  TempDir dir;
  // Entries in f32 on both sides (the daemon's default rounds them to bf16).
  e2e::DaemonOptions options;
  options.metrics = false;
  options.args = {"--entry-dtype", "f32"};
  auto daemon = e2e::Daemon::Start(options);
  REQUIRE_OK(daemon);
  const auto data = WriteData(dir, "tiny.jsonl", MakeData(*Tiny(model::WeightsDType::kAuto), 5));
  const std::string common =
      fmt::format("--model builtin:tiny --data {} --seam 0,4 --json --workers 2", data.string());
  const Json local = ParseJson(Quality(dir, common + " --entry-dtype f32"));
  const Json remote =
      ParseJson(Quality(dir, common + fmt::format(" --daemon 127.0.0.1:{}", (*daemon)->port())));
  CHECK(remote["source"] == fmt::format("daemon 127.0.0.1:{}", (*daemon)->port()));
  REQUIRE(local["results"].size() == 6);
  REQUIRE(remote["results"].size() == local["results"].size());
  for (size_t i = 0; i < local["results"].size(); ++i) {
    const Json &a = local["results"][i], &b = remote["results"][i];
    CAPTURE(a.dump());
    CAPTURE(b.dump());
    for (const char* key :
         {"mode", "seam", "n", "correct", "accuracy", "first_token_accuracy", "argmax_agree"}) {
      CHECK(a[key] == b[key]);
    }
    CHECK(b["kl_mean"].get<double>() ==
          doctest::Approx(a["kl_mean"].get<double>()).epsilon(1e-3).scale(1e-6));
  }
  CHECK(Row(remote, "full", 0)["accuracy"] == 1.0);

  // A daemon with another model (here: other weights precision) is refused before any work.
  const ToolRun other = Quality(
      dir, common + fmt::format(" --weights-dtype f32 --daemon 127.0.0.1:{}", (*daemon)->port()));
  CHECK(other.exit_code == 2);
  CHECK(other.err.find("fingerprint") != std::string::npos);
}

}  // namespace
}  // namespace hypic::tools
