// doctest helpers for Status / Result: CHECK_OK(expr) and REQUIRE_OK(expr) print the status
// message on failure instead of a bare "false".
#pragma once

#include <doctest/doctest.h>

#include "core/status.h"

namespace hypic::testing {
inline Status AsStatus(const Status& s) { return s; }
template <typename T>
Status AsStatus(const Result<T>& r) {
  return r.status();
}
}  // namespace hypic::testing

#define CHECK_OK(expr)                                      \
  do {                                                      \
    ::hypic::Status _st = ::hypic::testing::AsStatus(expr); \
    CHECK_MESSAGE(_st.ok(), _st.ToString());                \
  } while (0)
#define REQUIRE_OK(expr)                                    \
  do {                                                      \
    ::hypic::Status _st = ::hypic::testing::AsStatus(expr); \
    REQUIRE_MESSAGE(_st.ok(), _st.ToString());              \
  } while (0)
