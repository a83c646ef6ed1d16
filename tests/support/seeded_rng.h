// Deterministic generators for tests and tools: every random input is reproducible from a
// printed seed. Not thread-safe; give each thread its own SeededRng.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace hypic::testing {

class SeededRng {
 public:
  explicit SeededRng(uint64_t seed) : gen_(seed) {}
  float Uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(gen_); }
  float Normal(float mean = 0.0f, float stddev = 1.0f) {
    return std::normal_distribution<float>(mean, stddev)(gen_);
  }
  uint32_t UniformInt(uint32_t lo, uint32_t hi) {  // inclusive
    return std::uniform_int_distribution<uint32_t>(lo, hi)(gen_);
  }
  std::vector<float> NormalVector(size_t n, float stddev = 1.0f) {
    std::vector<float> v(n);
    for (auto& x : v) x = Normal(0.0f, stddev);
    return v;
  }
  std::vector<uint32_t> Tokens(size_t n, uint32_t vocab) {
    std::vector<uint32_t> v(n);
    for (auto& t : v) t = UniformInt(0, vocab - 1);
    return v;
  }
  std::mt19937_64& engine() { return gen_; }

 private:
  std::mt19937_64 gen_;
};

}  // namespace hypic::testing
