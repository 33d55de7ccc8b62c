// The self-starting standardization that the change detector's score (docs/algorithms.md (12.3))
// and the drift detector's components share: the reference of the previous n values is a plain
// mean up to baseline_pairs values, then an EWMA of weight 1 / baseline_pairs, and a new value
// is standardized by the spread that makes it a recursive residual (close to N(0, 1) for i.i.d.
// Gaussian values, whatever n).
#pragma once

#include <cmath>
#include <cstdint>

namespace cmestream {

// `var`: the reference's population variance over n >= 2 values (its EWMA once n > baseline_pairs).
// The unbiased variance while the reference is a plain mean, inflated by the reference mean's own
// error: 1 + 1 / n, or 1 + 1 / (2 baseline_pairs - 1) for the EWMA.
inline double RecursiveResidualSd(double var, int64_t n, int baseline_pairs) {
  const bool forgetting = n > baseline_pairs;
  const double unbiased = forgetting ? var : var * static_cast<double>(n) / static_cast<double>(n - 1);
  const double inflate = forgetting ? 1 + 1.0 / (2.0 * baseline_pairs - 1) : 1 + 1.0 / static_cast<double>(n);
  return std::sqrt(unbiased * inflate);
}

}  // namespace cmestream
