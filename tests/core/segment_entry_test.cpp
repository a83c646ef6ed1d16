#include "core/segment_entry.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "tests/support/check_ok.h"

namespace hypic {
namespace {

EntryMeta SampleMeta() {
  EntryMeta m;
  m.name_space = "tenant";
  m.model = ModelFingerprint{1, 2};
  m.tokens = {5, 6, 7, 8};
  m.key = SegmentKey::Compute(m.name_space, m.model, m.settings, m.tokens);
  m.conv_k = 4;
  m.num_layers = 2;
  return m;
}

TEST_CASE("tensor kinds keep their numbers and names") {
  CHECK(static_cast<int>(TensorKind::kTransition) == 0);
  CHECK(static_cast<int>(TensorKind::kState) == 1);
  CHECK(static_cast<int>(TensorKind::kConvTail) == 2);
  CHECK(static_cast<int>(TensorKind::kKey) == 3);
  CHECK(static_cast<int>(TensorKind::kValue) == 4);
  CHECK(kMaxTensorKind == 4);
  CHECK(TensorKindName(TensorKind::kTransition) == "T");
  CHECK(TensorKindName(TensorKind::kState) == "S");
  CHECK(TensorKindName(TensorKind::kConvTail) == "conv_tail");
  CHECK(TensorKindName(TensorKind::kKey) == "K");
  CHECK(TensorKindName(TensorKind::kValue) == "V");
}

TEST_CASE("AddTensor allocates zeroed, owned, aligned memory") {
  SegmentEntry e(SampleMeta());
  CHECK(e.n_tokens() == 4);
  CHECK(e.key() == e.meta().key);
  Result<TensorView> s = e.AddTensor(0, TensorKind::kState, DType::kF32, Shape{2, 4, 4});
  REQUIRE_OK(s);
  CHECK(s->NumBytes() == 128);
  CHECK(reinterpret_cast<uintptr_t>(s->data()) % 64 == 0);
  const float* f = s->data_as<float>();
  bool zero = true;
  for (int i = 0; i < 32; ++i) zero = zero && f[i] == 0.0f;
  CHECK(zero);
  s->data_as<float>()[3] = 2.5f;  // the producer fills the view

  Result<TensorView> k = e.AddTensor(1, TensorKind::kKey, DType::kBF16, Shape{4, 8});
  REQUIRE_OK(k);
  CHECK(e.tensors().size() == 2);
  CHECK(e.TensorBytes() == 128 + 64);

  const EntryTensor* found = e.Find(0, TensorKind::kState);
  REQUIRE(found != nullptr);
  CHECK(found->view.data_as<float>()[3] == 2.5f);
  CHECK(found->layer == 0);
  CHECK(e.Find(1, TensorKind::kKey)->view.dtype() == DType::kBF16);
  CHECK(e.Find(1, TensorKind::kState) == nullptr);
  CHECK(e.Find(0, TensorKind::kKey) == nullptr);
}

TEST_CASE("duplicates and bad shapes are refused") {
  SegmentEntry e(SampleMeta());
  REQUIRE_OK(e.AddTensor(0, TensorKind::kState, DType::kF32, Shape{2}));
  Result<TensorView> dup = e.AddTensor(0, TensorKind::kState, DType::kF32, Shape{2});
  CHECK(dup.status().code() == StatusCode::kBadRequest);
  CHECK(dup.status().message().find("twice") != std::string::npos);
  Result<TensorView> neg = e.AddTensor(0, TensorKind::kValue, DType::kF32, Shape{-3});
  CHECK(neg.status().code() == StatusCode::kBadRequest);
  CHECK(neg.status().message().find("[-3]") != std::string::npos);
  float x = 0.0f;
  CHECK(e.AddView(0, TensorKind::kState, TensorView(&x, DType::kF32, Shape{1}), nullptr).code() ==
        StatusCode::kBadRequest);
  CHECK(e.tensors().size() == 1);
}

TEST_CASE("AddView keeps the owner alive as long as the entry") {
  auto backing = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5, 6});
  std::weak_ptr<std::vector<float>> watch = backing;
  {
    SegmentEntry e(SampleMeta());
    TensorView v(backing->data(), DType::kF32, Shape{2, 3});
    REQUIRE_OK(e.AddView(2, TensorKind::kConvTail, v, backing));
    backing.reset();
    CHECK_FALSE(watch.expired());  // the entry holds it
    CHECK(e.Find(2, TensorKind::kConvTail)->view.data_as<float>()[5] == 6.0f);
    CHECK(e.TensorBytes() == 24);
  }
  CHECK(watch.expired());  // released with the entry
}

TEST_CASE("an empty tensor is allowed and costs nothing") {
  SegmentEntry e(SampleMeta());
  Result<TensorView> v = e.AddTensor(0, TensorKind::kKey, DType::kF16, Shape{0, 8});
  REQUIRE_OK(v);
  CHECK(v->NumBytes() == 0);
  CHECK(e.TensorBytes() == 0);
  CHECK(e.Find(0, TensorKind::kKey) != nullptr);
}

}  // namespace
}  // namespace hypic
