// The input both learner benchmarks feed (bench_learner.cc, learner_state_digest.cc).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/common/types.h"

namespace cmestream::bench {

// States 0..n of a d-dimensional delay vector of a noisy two-tone signal: consecutive states
// share d - 1 coordinates, as a real delay embedding does.
inline RowMatrixXd DelayStates(int64_t n, int d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.05);
  std::vector<double> s(static_cast<size_t>(n + d));
  for (size_t t = 0; t < s.size(); ++t) {
    const double u = static_cast<double>(t);
    s[t] = std::sin(0.21 * u) + 0.5 * std::cos(0.047 * u) + noise(rng);
  }
  RowMatrixXd x(n + 1, d);
  for (int64_t t = 0; t <= n; ++t) {
    for (int j = 0; j < d; ++j) x(t, j) = s[static_cast<size_t>(t + j)];
  }
  return x;
}

}  // namespace cmestream::bench
