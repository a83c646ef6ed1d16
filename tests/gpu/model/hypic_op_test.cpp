// Black-box tests of `hypic-op prefill` and `hypic-op compose` (the fixed interfaces of issues
// 4 and 9) on the tiny model: the binary is run as a user would, and its output files are
// compared with each other and with the library.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/safetensors.h"
#include "tests/gpu/model/model_test_util.h"
#include "tests/support/seeded_rng.h"

namespace hypic::model {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using testing::RelErr;
using testing::ScratchDir;

struct Exec {
  int code = -1;
  std::string err;
};

Exec HypicOp(const fs::path& scratch, const std::string& args) {
  const char* bin = std::getenv("HYPIC_BIN_DIR");
  REQUIRE_MESSAGE(bin != nullptr, "HYPIC_BIN_DIR is not set (run through ctest)");
  const fs::path err = scratch / "stderr.txt";
  const std::string cmd = fmt::format("{}/hypic-op {} 2> {}", bin, args, err.string());
  const int status = std::system(cmd.c_str());
  std::ifstream in(err);
  std::stringstream ss;
  ss << in.rdbuf();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ss.str()};
}

std::vector<float> ReadTensor(const fs::path& file, const std::string& name,
                              Shape* shape = nullptr) {
  auto f = SafetensorsFile::Open(file);
  REQUIRE_OK(f);
  auto info = (*f)->Info(name);
  REQUIRE_OK(info);
  if (shape != nullptr) *shape = (*info)->shape;
  auto bytes = (*f)->ReadCopy(name);
  REQUIRE_OK(bytes);
  const auto* p = bytes->as<float>();
  return {p, p + (*info)->shape.NumElements()};
}

class Fixture {
 public:
  Fixture() : model_(testing::LoadTiny(model_dir_.path())) {}

  fs::path Compose(const std::string& mode, uint32_t seam,
                   const std::vector<std::vector<uint32_t>>& segments,
                   const std::vector<uint32_t>& query, const std::string& tag) {
    Json req{{"seam", seam}, {"mode", mode}, {"parts", Json::array()}};
    for (const auto& s : segments) req["parts"].push_back({{"kind", "segment"}, {"tokens", s}});
    if (!query.empty()) req["parts"].push_back({{"kind", "raw"}, {"tokens", query}});
    const fs::path in = scratch_.path() / (tag + ".json"),
                   out = scratch_.path() / (tag + ".safetensors");
    std::ofstream(in) << req.dump();
    const Exec e = Run(fmt::format("compose --model {} --input {} --output {}",
                                   model_dir_.path().string(), in.string(), out.string()));
    REQUIRE_MESSAGE(e.code == 0, e.err);
    return out;
  }

  Exec Run(const std::string& args) { return HypicOp(scratch_.path(), args); }
  const fs::path& scratch() const { return scratch_.path(); }
  const fs::path& model_dir() const { return model_dir_.path(); }
  const Model& model() const { return *model_; }

 private:
  ScratchDir model_dir_, scratch_;
  std::shared_ptr<const Model> model_;
};

std::string Join(const std::vector<uint32_t>& t) {
  std::string s;
  for (size_t i = 0; i < t.size(); ++i) s += (i ? "," : "") + std::to_string(t[i]);
  return s;
}

TEST_CASE("hypic-op prefill and compose agree with each other and with the library") {
  Fixture fx;
  hypic::testing::SeededRng rng(21);
  const std::vector<std::vector<uint32_t>> segs{rng.Tokens(30, 512), rng.Tokens(3, 512),
                                                rng.Tokens(45, 512)};
  const auto query = rng.Tokens(6, 512);
  std::vector<uint32_t> all;
  for (const auto& s : segs) all.insert(all.end(), s.begin(), s.end());
  all.insert(all.end(), query.begin(), query.end());

  const fs::path pre = fx.scratch() / "prefill.safetensors";
  const Exec e = fx.Run(fmt::format("prefill --model {} --tokens {} --output {}",
                                    fx.model_dir().string(), Join(all), pre.string()));
  REQUIRE_MESSAGE(e.code == 0, e.err);
  Shape shape;
  const auto logits = ReadTensor(pre, "logits", &shape);
  CHECK(shape == Shape{static_cast<int64_t>(all.size()), 512});
  auto lib = fx.model().FullPrefill(all, {.all_logits = true, .want_state = false});
  REQUIRE_OK(lib);
  CHECK(logits == lib->logits);
  const std::vector<float> last(logits.end() - 512, logits.end());

  const fs::path full = fx.Compose("full", 8, segs, query, "full");
  CHECK(ReadTensor(full, "logits") == last);  // full == prefill's last row

  const fs::path oracle = fx.Compose("oracle", 8, segs, query, "oracle");
  CHECK(RelErr(ReadTensor(oracle, "logits"), last) < 1e-4);
  for (const char* name :
       {"layer.0.state", "layer.2.state", "layer.1.k", "layer.1.v", "layer.3.k"}) {
    CAPTURE(name);
    CHECK(RelErr(ReadTensor(oracle, name), ReadTensor(full, name)) < 1e-4);
  }
  ReadTensor(full, "layer.3.v", &shape);
  CHECK(shape == Shape{static_cast<int64_t>(all.size()), 2, 16});

  const fs::path wide = fx.Compose("hypic", 45, segs, query, "wide");  // seam >= every segment
  CHECK(ReadTensor(wide, "logits") == last);

  const fs::path hypic = fx.Compose("hypic", 8, segs, query, "hypic");
  const fs::path naive = fx.Compose("naive", 8, segs, query, "naive");
  CHECK(testing::Kl(last, ReadTensor(hypic, "logits")) <
        testing::Kl(last, ReadTensor(naive, "logits")));

  // One segment and a query: the segment's entry is computed in its true (empty) context.
  const fs::path one = fx.Compose("hypic", 8, {segs[2]}, query, "one");
  const fs::path one_full = fx.Compose("full", 8, {segs[2]}, query, "one_full");
  CHECK(RelErr(ReadTensor(one, "logits"), ReadTensor(one_full, "logits")) < 1e-4);
}

TEST_CASE("hypic-op errors exit 2 and name the field") {
  Fixture fx;
  const std::string model = fx.model_dir().string();
  const fs::path req = fx.scratch() / "req.json", out = fx.scratch() / "out.safetensors";
  auto compose = [&](const std::string& body, const std::string& needle) {
    std::ofstream(req, std::ios::trunc) << body;
    const Exec e = fx.Run(fmt::format("compose --model {} --input {} --output {}", model,
                                      req.string(), out.string()));
    CHECK(e.code == 2);
    CHECK_MESSAGE(e.err.find(needle) != std::string::npos, e.err);
  };
  compose("{not json", "not a JSON object");
  compose(R"({"mode": "fast", "parts": [{"kind": "raw", "tokens": [1]}]})", "'mode'");
  compose(R"({"mode": "hypic"})", "'parts'");
  compose(R"({"mode": "hypic", "parts": [{"kind": "doc", "tokens": [1]}]})", "'parts[0].kind'");
  compose(
      R"({"mode": "hypic", "parts": [{"kind": "raw", "tokens": [1]}, {"kind": "raw", "tokens": [3, 512]}]})",
      "'parts[1].tokens[1]'");
  compose(R"({"seam": -1, "mode": "hypic", "parts": [{"kind": "raw", "tokens": [1]}]})", "'seam'");

  Exec e = fx.Run(fmt::format("compose --model {}/nowhere --input {} --output {}", model,
                              req.string(), out.string()));
  CHECK(e.code == 2);
  CHECK(e.err.find("config.json") != std::string::npos);
  e = fx.Run(fmt::format("prefill --model {} --tokens 1,x,3 --output {}", model, out.string()));
  CHECK(e.code == 2);
  CHECK(e.err.find("--tokens") != std::string::npos);
  e = fx.Run(fmt::format("prefill --model {} --tokens 1,600 --output {}", model, out.string()));
  CHECK(e.code == 2);
  CHECK(e.err.find("vocab_size") != std::string::npos);
  e = fx.Run(fmt::format("prefill --model {} --tokens 1,2 --output {} --weights-dtype f8", model,
                         out.string()));
  CHECK(e.code == 2);
  CHECK(e.err.find("--weights-dtype") != std::string::npos);

  // --device: a bad name, or a CUDA device this build or machine does not have, exits 2.
  std::ofstream(req, std::ios::trunc)
      << R"({"mode": "hypic", "parts": [{"kind": "raw", "tokens": [1]}]})";
  for (const std::string device : {"gpu", "cuda:4096"}) {
    e = fx.Run(fmt::format("prefill --model {} --tokens 1,2 --output {} --device {}", model,
                           out.string(), device));
    CHECK(e.code == 2);
    CHECK_MESSAGE(e.err.find("--device") != std::string::npos, e.err);
    e = fx.Run(fmt::format("compose --model {} --input {} --output {} --device {}", model,
                           req.string(), out.string(), device));
    CHECK(e.code == 2);
    CHECK_MESSAGE(e.err.find("--device") != std::string::npos, e.err);
  }
  e = fx.Run(
      fmt::format("prefill --model {} --tokens 1,2 --output {} --device cpu", model, out.string()));
  CHECK_MESSAGE(e.code == 0, e.err);
}

}  // namespace
}  // namespace hypic::model
