// Landmarks for the spectral basis of a short stream (docs/algorithms.md §7.2).
//
// The spectral moments take their basis from the CME's X dictionary, whose admissions follow the
// operator's error: on a short or smooth stream it holds a handful of atoms (6 on 100 pairs of a
// 12-delay monthly series), too few for a cycle to show in the spectrum. A model whose bandwidth
// is chosen from a warm-up therefore fixes a few landmarks of the warm-up's sources in front of
// the dictionary atoms: the basis is [landmarks; dictionary], still append-only, so epochs stay
// nested.
//
// ChooseLandmarks picks them by greedy pivoted Cholesky of the Gaussian Gram of the rows: each
// step takes the row worst represented by the kernel span of those already taken (largest
// residual variance, earliest row on ties) and stops at max_count rows or when every residual
// is below `tolerance` (k(x, x) = 1). Deterministic; O(n * count * (d + count)) time.
#pragma once

#include "core/common/types.h"

namespace cmestream {

// requires: sigma > 0, max_count >= 0, rows finite. Returns count x d rows of x (count <= n).
RowMatrixXd ChooseLandmarks(const Eigen::Ref<const RowMatrixXd>& x, double sigma, int max_count, double tolerance);

}  // namespace cmestream
