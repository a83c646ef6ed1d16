// RouteRow (moe_routing.h, the routing the CPU and the CUDA kernel run) against the routing
// forward.cpp ran on the host before it moved behind ForwardKernels, kept here verbatim as the
// oracle (std::partial_sort over the fp32 softmax): the same experts in the same order and the
// same weight bits, with and without norm_topk_prob, on random rows and on rows full of ties
// (equal logits, all-equal rows, a tie straddling the k-th place).
#include "gpu/model/moe_routing.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "tests/support/seeded_rng.h"

namespace hypic::model {
namespace {

struct Routed {
  std::vector<int32_t> chosen;
  std::vector<float> weight;
};

Routed Oracle(const float* lr, int64_t ne, int64_t top, bool norm_topk_prob) {
  std::vector<int64_t> order(static_cast<size_t>(ne));
  std::vector<float> prob(static_cast<size_t>(ne));
  const float mx = *std::max_element(lr, lr + ne);
  double sum = 0.0;
  for (int64_t e = 0; e < ne; ++e) sum += prob[static_cast<size_t>(e)] = std::exp(lr[e] - mx);
  for (float& p : prob) p = static_cast<float>(p / sum);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + top, order.end(), [&](int64_t a, int64_t b) {
    const float pa = prob[static_cast<size_t>(a)], pb = prob[static_cast<size_t>(b)];
    return pa > pb || (pa == pb && a < b);
  });
  float norm = 1.0f;
  if (norm_topk_prob) {
    float s = 0.0f;
    for (int64_t j = 0; j < top; ++j) s += prob[static_cast<size_t>(order[static_cast<size_t>(j)])];
    norm = 1.0f / s;
  }
  Routed r;
  for (int64_t j = 0; j < top; ++j) {
    const auto e = static_cast<size_t>(order[static_cast<size_t>(j)]);
    r.chosen.push_back(static_cast<int32_t>(e));
    r.weight.push_back(prob[e] * norm);
  }
  return r;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

void CheckRow(const std::vector<float>& logits, int top, bool norm) {
  const auto ne = static_cast<int64_t>(logits.size());
  const Routed want = Oracle(logits.data(), ne, top, norm);
  std::vector<int32_t> chosen(static_cast<size_t>(top), -1);
  std::vector<float> weight(static_cast<size_t>(top), -1.0f);
  RouteRow(logits.data(), ne, top, norm, chosen.data(), weight.data());
  CHECK(chosen == want.chosen);
  for (int j = 0; j < top; ++j) {
    CHECK(Bits(weight[static_cast<size_t>(j)]) == Bits(want.weight[static_cast<size_t>(j)]));
  }
}

TEST_CASE("RouteRow equals the host routing on random rows and on ties") {
  hypic::testing::SeededRng rng(5);
  int rows = 0;
  for (int64_t ne : {1, 2, 7, 64, 512}) {
    for (int top : {1, 2, 4, 8, 10, 16}) {
      if (top > ne) continue;
      for (bool norm : {false, true}) {
        CAPTURE(ne);
        CAPTURE(top);
        CAPTURE(norm);
        for (int trial = 0; trial < 20; ++trial) {
          std::vector<float> logits = rng.NormalVector(static_cast<size_t>(ne), 2.0f);
          CheckRow(logits, top, norm);
          // Ties: a few logits copied onto others, so equal probabilities compete.
          for (int c = 0; c < 4 && ne > 1; ++c) {
            const uint32_t from = rng.UniformInt(0, static_cast<uint32_t>(ne - 1));
            const uint32_t to = rng.UniformInt(0, static_cast<uint32_t>(ne - 1));
            logits[to] = logits[from];
          }
          CheckRow(logits, top, norm);
          // A tie straddling the k-th place: the top_k-th largest copied onto a later expert
          // and onto an earlier one.
          std::vector<float> sorted = logits;
          std::sort(sorted.begin(), sorted.end(), std::greater<>());
          const float kth = sorted[static_cast<size_t>(top - 1)];
          logits.front() = kth;
          logits.back() = kth;
          CheckRow(logits, top, norm);
          rows += 3;
        }
        CheckRow(std::vector<float>(static_cast<size_t>(ne), 0.5f), top, norm);  // all equal
        // Coarse logits: many exact ties among the probabilities.
        std::vector<float> coarse(static_cast<size_t>(ne));
        for (float& l : coarse) l = static_cast<float>(rng.UniformInt(0, 3));
        CheckRow(coarse, top, norm);
      }
    }
  }
  CHECK(rows > 1000);
}

TEST_CASE("RouteRow: the weights of a row sum to one with norm_topk_prob") {
  hypic::testing::SeededRng rng(6);
  const std::vector<float> logits = rng.NormalVector(64);
  std::vector<int32_t> chosen(8);
  std::vector<float> weight(8);
  RouteRow(logits.data(), 64, 8, true, chosen.data(), weight.data());
  float s = 0.0f;
  for (float w : weight) s += w;
  CHECK(s == doctest::Approx(1.0f).epsilon(1e-6));
  for (size_t j = 1; j < weight.size(); ++j) CHECK(weight[j - 1] >= weight[j]);
}

}  // namespace
}  // namespace hypic::model
