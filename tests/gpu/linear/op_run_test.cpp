// Black-box tests of `hypic-op run` (the binary from HYPIC_BIN_DIR): every variant matches the
// test's float64 reference through the files, and bad input exits 2 naming the tensor and the
// expected shape.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "gpu/linear/linear_attention.h"
#include "tests/gpu/linear/linear_reference.h"
#include "tests/support/check_ok.h"

namespace hypic::linear {
namespace {

namespace fs = std::filesystem;
using testing::Problem;

struct Tensor {
  std::vector<int64_t> dims;
  std::vector<float> data;
};
using TensorMap = std::map<std::string, Tensor>;

class OpRunTest {
 public:
  OpRunTest() {
    const char* bin = std::getenv("HYPIC_BIN_DIR");
    REQUIRE_MESSAGE(bin != nullptr, "HYPIC_BIN_DIR is not set (run through ctest)");
    op_ = fs::path(bin) / "hypic-op";
    REQUIRE_MESSAGE(fs::exists(op_), std::string(op_.string() + " is not built"));
    dir_ = fs::temp_directory_path() / ("hypic_op_run_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  ~OpRunTest() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  fs::path Write(const std::string& name, const TensorMap& tensors) {
    SafetensorsWriter w;
    for (const auto& [n, t] : tensors) {
      auto s = hypic::Shape::FromDims(t.dims);
      REQUIRE_OK(s);
      REQUIRE_OK(w.Add(n, DType::kF32, *s,
                       std::as_bytes(std::span<const float>(t.data.data(), t.data.size()))));
    }
    const fs::path p = dir_ / name;
    REQUIRE_OK(w.WriteFile(p));
    return p;
  }

  // Runs hypic-op with `args`; returns the exit code and fills `err` with stderr.
  int Run(const std::string& args, std::string* err) {
    const fs::path err_file = dir_ / "stderr.txt";
    const std::string cmd = op_.string() + " " + args + " 2> " + err_file.string();
    const int rc = std::system(cmd.c_str());
    std::ifstream in(err_file);
    std::stringstream ss;
    ss << in.rdbuf();
    *err = ss.str();
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  }

  std::vector<float> Read(const fs::path& file, const std::string& name,
                          const std::vector<int64_t>& dims) {
    auto f = SafetensorsFile::Open(file);
    REQUIRE_OK(f);
    auto info = (*f)->Info(name);
    REQUIRE_OK(info);
    auto expect = hypic::Shape::FromDims(dims);
    REQUIRE_OK(expect);
    CHECK((*info)->shape == *expect);
    auto bytes = (*f)->Bytes(name);
    REQUIRE_OK(bytes);
    std::vector<float> out(bytes->size() / sizeof(float));
    if (!out.empty()) std::memcpy(out.data(), bytes->data(), bytes->size());
    return out;
  }

  const fs::path& dir() const { return dir_; }

 private:
  fs::path op_, dir_;
};

TensorMap TensorsOf(const Problem& p) {
  const Shape& s = p.shape;
  TensorMap m;
  m["q"] = {{s.tokens, s.key_heads, s.dk}, p.q};
  m["k"] = {{s.tokens, s.key_heads, s.dk}, p.k};
  m["v"] = {{s.tokens, s.value_heads, s.dv}, p.v};
  if (HasGate(p.variant)) {
    m["g"] = {HasDiagGate(p.variant) ? std::vector<int64_t>{s.tokens, s.value_heads, s.dk}
                                     : std::vector<int64_t>{s.tokens, s.value_heads},
              p.g};
  }
  if (HasBeta(p.variant)) m["beta"] = {{s.tokens, s.value_heads}, p.beta};
  if (!p.initial.empty()) m["initial_state"] = {{s.value_heads, s.dk, s.dv}, p.initial};
  return m;
}

TEST_CASE("hypic-op run matches the float64 reference for every variant and method") {
  OpRunTest t;
  uint64_t seed = 500;
  for (Variant variant : {Variant::kLinear, Variant::kRetNet, Variant::kMamba2, Variant::kGla,
                          Variant::kDeltaNet, Variant::kGdn, Variant::kKda}) {
    for (bool with_initial : {true, false}) {
      const Shape shape{70, 1, 2, 8, 6};
      const Problem p = testing::MakeProblem(variant, shape, seed++, 0.1f, with_initial);
      const testing::Reference ref = testing::ReferenceForward(p);
      const fs::path in = t.Write("in.safetensors", TensorsOf(p));
      for (const char* method : {"chunked", "recurrent"}) {
        const fs::path out = t.dir() / "out.safetensors";
        std::string err;
        const std::string name(VariantName(variant));
        INFO(name, " ", method, " initial=", with_initial);
        REQUIRE(t.Run("run --variant " + name + " --input " + in.string() + " --output " +
                          out.string() + " --method " + method + " --chunk-size 32",
                      &err) == 0);
        const auto o = t.Read(out, "o", {shape.tokens, shape.value_heads, shape.dv});
        const auto fin = t.Read(out, "final_state", {shape.value_heads, shape.dk, shape.dv});
        const auto zero = t.Read(out, "zero_state", {shape.value_heads, shape.dk, shape.dv});
        const auto trans = t.Read(out, "transition", {shape.value_heads, shape.dk, shape.dk});
        CHECK(testing::RelError(o, ref.o) <= 1e-5);
        CHECK(testing::RelError(fin, ref.final_state) <= 1e-5);
        CHECK(testing::RelError(zero, ref.zero_state) <= 1e-5);
        CHECK(testing::RelError(trans, ref.transition) <= 1e-5);
      }
    }
  }
}

TEST_CASE("hypic-op run accepts an empty sequence: identity transition, state unchanged") {
  OpRunTest t;
  const Shape shape{0, 1, 2, 8, 6};
  const Problem p = testing::MakeProblem(Variant::kGdn, shape, 77);
  const fs::path in = t.Write("empty.safetensors", TensorsOf(p));
  const fs::path out = t.dir() / "out.safetensors";
  std::string err;
  const int rc =
      t.Run("run --variant gdn --input " + in.string() + " --output " + out.string(), &err);
  INFO(err);
  REQUIRE(rc == 0);
  CHECK(t.Read(out, "o", {0, 2, 6}).empty());
  CHECK(t.Read(out, "final_state", {2, 8, 6}) == p.initial);
  const std::vector<float> zero = t.Read(out, "zero_state", {2, 8, 6});
  CHECK(std::all_of(zero.begin(), zero.end(), [](float x) { return x == 0.0f; }));
  const testing::Reference ref = testing::ReferenceForward(p);  // T = I
  CHECK(testing::RelError(t.Read(out, "transition", {2, 8, 8}), ref.transition) == 0.0);
}

TEST_CASE("hypic-op run rejects bad input with exit code 2, naming the tensor and shape") {
  OpRunTest t;
  const Shape shape{5, 2, 4, 8, 6};
  const Problem p = testing::MakeProblem(Variant::kGdn, shape, 9);
  const std::string out = (t.dir() / "out.safetensors").string();
  struct Case {
    const char* what;
    std::string variant;
    TensorMap tensors;
    std::vector<std::string> expect;  // substrings of stderr
  };
  std::vector<Case> cases;
  {
    TensorMap m = TensorsOf(p);
    m.erase("beta");
    cases.push_back({"missing beta", "gdn", m, {"'beta'", "[T,HV]"}});
  }
  {
    TensorMap m = TensorsOf(p);
    m.erase("g");
    cases.push_back({"missing g", "gdn", m, {"'g'", "[T,HV]"}});
  }
  {
    TensorMap m = TensorsOf(p);
    m["k"].dims = {5, 2, 4};
    m["k"].data.resize(5 * 2 * 4);
    cases.push_back({"wrong k shape", "gdn", m, {"'k'", "[T,H,dk]", "[5, 2, 8]"}});
  }
  {
    TensorMap m = TensorsOf(p);
    m["v"].dims = {5, 3, 6};
    m["v"].data.resize(5 * 3 * 6);
    cases.push_back({"HV not a multiple of H", "gdn", m, {"'v'", "multiple", "H = 2"}});
  }
  {
    TensorMap m = TensorsOf(p);  // a scalar gate given to a diagonal-gate variant
    cases.push_back({"gla with scalar g", "gla", m, {"'g'", "[T,HV,dk]"}});
  }
  {
    TensorMap m = TensorsOf(p);
    m["initial_state"].dims = {4, 6, 8};
    cases.push_back({"transposed initial state", "gdn", m, {"'initial_state'", "[HV,dk,dv]"}});
  }
  {
    TensorMap m = TensorsOf(p);
    m.erase("q");
    cases.push_back({"missing q", "gdn", m, {"'q'", "[T,H,dk]"}});
  }
  cases.push_back({"unknown variant", "mamba9", TensorsOf(p), {"mamba9"}});
  for (const Case& c : cases) {
    INFO(c.what);
    const fs::path in = t.Write("bad.safetensors", c.tensors);
    std::string err;
    CHECK(t.Run("run --variant " + c.variant + " --input " + in.string() + " --output " + out,
                &err) == 2);
    for (const std::string& s : c.expect) {
      CHECK_MESSAGE(err.find(s) != std::string::npos,
                    std::string("stderr: " + err + " lacks: " + s));
    }
  }
  std::string err;
  CHECK(t.Run("run --variant gdn --input " + (t.dir() / "absent.safetensors").string() +
                  " --output " + out,
              &err) == 2);
  CHECK(err.find("absent.safetensors") != std::string::npos);
  const fs::path in = t.Write("good.safetensors", TensorsOf(p));
  CHECK(t.Run("run --variant gdn --input " + in.string() + " --output " + out + " --chunk-size 48",
              &err) == 2);
  CHECK(err.find("chunk_size") != std::string::npos);
}

}  // namespace
}  // namespace hypic::linear
