// Helpers shared by the gpu/model tests: a scratch directory, a tiny model written through the
// real checkpoint writer and read back through the real loader, and distribution metrics.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gpu/model/checkpoint.h"
#include "gpu/model/generator.h"
#include "gpu/model/model.h"
#include "tests/support/check_ok.h"

namespace hypic::model::testing {

// A directory removed when the object dies.
class ScratchDir {
 public:
  ScratchDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("hypic-model-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

struct TinyOptions {
  WeightFormat format = WeightFormat::kQwen3Next;
  MlpKind mlp = MlpKind::kMoe;
  uint64_t seed = 1;
  DType dtype = DType::kF32;
  int shards = 1;
  // The f32 path by default, whatever the checkpoint's dtype: the accuracy tests hold it to
  // the float64 reference.
  WeightsDType weights = WeightsDType::kF32;
};

// Writes the tiny preset into `dir` and returns its directory.
inline std::filesystem::path WriteTiny(const std::filesystem::path& dir,
                                       const TinyOptions& o = {}) {
  auto config = PresetConfig("tiny", o.format, o.mlp);
  REQUIRE_OK(config);
  REQUIRE_OK(WriteCheckpoint(dir, *config, GenerateWeights(*config, o.seed),
                             {.dtype = o.dtype, .shards = o.shards}));
  return dir;
}

inline std::shared_ptr<const Model> LoadTiny(const std::filesystem::path& dir,
                                             const TinyOptions& o = {}) {
  auto m = LoadModel(WriteTiny(dir, o).string(), {}, {.weights = o.weights});
  REQUIRE_OK(m);
  return *m;
}

inline std::vector<double> Softmax(const std::vector<float>& logits) {
  double mx = logits[0];
  for (float x : logits) mx = std::max(mx, static_cast<double>(x));
  std::vector<double> p(logits.size());
  double s = 0.0;
  for (size_t i = 0; i < p.size(); ++i) s += p[i] = std::exp(logits[i] - mx);
  for (double& x : p) x /= s;
  return p;
}

// KL(p || q) of the softmax distributions of two logit vectors.
inline double Kl(const std::vector<float>& p_logits, const std::vector<float>& q_logits) {
  const auto p = Softmax(p_logits), q = Softmax(q_logits);
  double kl = 0.0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] > 0) kl += p[i] * (std::log(p[i]) - std::log(std::max(q[i], 1e-300)));
  }
  return kl;
}

// max |a - b| / max(max |b|, 1e-6): a relative error over a whole tensor.
inline double RelErr(std::span<const float> a, std::span<const float> b) {
  double diff = 0.0, scale = 1e-6;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return a.size() == b.size() ? diff / scale : INFINITY;
}

}  // namespace hypic::model::testing
