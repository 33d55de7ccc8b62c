// The batch value checks (core/common/validate.h): the exact messages the daemon returns
// (tests/integration/test_daemon_views.cc asserts them through the service).
#include "core/common/validate.h"

#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

namespace cmestream {
namespace {

TEST(Validate, FiniteValuesNameTheFieldTheValueAndThePoint) {
  std::vector<double> v = {0.5, -1.0, 2.0, 3.0, 4.0, 5.0};
  EXPECT_TRUE(CheckFiniteValues("x", "pair", v.data(), 6, 2).ok());
  EXPECT_TRUE(CheckFiniteValues("x", "pair", nullptr, 0, 2).ok());
  v[5] = std::nan("");
  const absl::Status s = CheckFiniteValues("x", "pair", v.data(), 6, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "field x value 5 (pair 2, component 1) is nan, expected a finite number");
  v[3] = -std::numeric_limits<double>::infinity();  // the first bad value is reported
  EXPECT_EQ(CheckFiniteValues("states", "state", v.data(), 6, 3).message(),
            "field states value 3 (state 1, component 0) is -inf, expected a finite number");
  // Only `count` values are read.
  EXPECT_TRUE(CheckFiniteValues("y", "pair", v.data(), 3, 1).ok());
}

TEST(Validate, StateIdsNameTheFieldTheIndexAndTheRange) {
  const std::vector<int64_t> ids = {0, 4, 11, 12, -1};
  EXPECT_TRUE(CheckStateIds("x_ids", ids.data(), 3, 12).ok());
  EXPECT_TRUE(CheckStateIds("x_ids", nullptr, 0, 12).ok());
  absl::Status s = CheckStateIds("y_ids", ids.data(), 5, 12);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "field y_ids value 3 is 12, expected a state id in [0, 12)");
  s = CheckStateIds("state_ids", ids.data() + 2, 3, 12);
  EXPECT_EQ(s.message(), "field state_ids value 1 is 12, expected a state id in [0, 12)");
  EXPECT_EQ(CheckStateIds("state_ids", ids.data() + 4, 1, 12).message(),
            "field state_ids value 0 is -1, expected a state id in [0, 12)");
}

}  // namespace
}  // namespace cmestream
