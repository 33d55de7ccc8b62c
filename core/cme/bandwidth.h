// Automatic Gaussian bandwidth ("sigma auto") by held-out VAMP-2 score (docs/algorithms.md §1.11).
//
// The plain median heuristic is too wide on multi-basin systems (Duffing: 0.76 basin accuracy
// at the median vs 0.98 at sigma = 0.5). SelectBandwidth scores a grid of fractions of the
// median pairwise distance: for each candidate, features from a Nystrom basis on the training
// half, VAMP-2 score of the leading singular functions evaluated on the held-out half
// (Wu & Noe 2020: fit the singular functions on one half, re-whiten and score on the other).
// The halves are contiguous blocks (10 blocks, alternately train and test), not shuffled
// pairs: on a trajectory, shuffled pairs put near-copies of training pairs into the test half.
// The candidate with the highest held-out score wins (ties: the earlier, smaller candidate).
//
// WHAT IT PICKS (2000 warm-up pairs, default options; tests/core/cme/test_bandwidth.cc):
//   Duffing (box [-2,2]^2, dt 0.25): median ~2.03, chooses 0.25 x median ~0.51 for seeds 1..6;
//     basin accuracy 0.979 at n = 20000 (the median itself: 0.76). The map is deterministic,
//     so all true singular values are 1 and the scores saturate near 1 + rank (5.0000 at 0.25x,
//     4.9999 at 0.125x, 4.9993 at 0.5x, 4.968 at 1x): the differences are small but stable.
//   Double well (beta 3, dt 0.1): chooses 0.5 x median (or 1 x when the warm-up trajectory has
//     not crossed the barrier and the median is small), sigma ~0.31-0.47.
// ONE COLUMN (docs/algorithms.md §1.11.2): the median by sort and bisection (bit for bit the
//   general rule's) and at most 64 landmarks at evenly spaced ranks of the training values.
// COST: O(n p^2 + p^3) per candidate with p = landmarks; ~0.35 s for Duffing's n = 2000, 5
//   candidates (p = 200); ~10-11 ms for a 1-D warm-up of n = 1000 (p <= 64; 85-90 ms at 200).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/common/types.h"

namespace cmestream {

struct BandwidthSelectionOptions {
  std::vector<double> median_fractions = {0.0625, 0.125, 0.25, 0.5, 1.0};
  int rank = 4;         // singular functions in the VAMP-2 score
  uint64_t seed = 1;    // unused since the split became deterministic blocks; kept for callers
  int blocks = 10;      // contiguous blocks, alternately train and test (>= 2)
  int landmarks = 200;  // Nystrom landmarks (training x points), bounds the cost O(n p^2 + p^3)
  // An input of one value (x has one column, docs/algorithms.md §1.11.2): at most this many
  // landmarks, the training values at evenly spaced ranks; 0: the general rule (`landmarks`
  // strided training points) for every input.
  int scalar_landmarks = 64;
  double ridge = 1e-3;       // covariance ridge, relative to the mean eigenvalue
  int median_points = 1000;  // points used for the median pairwise distance
};

struct BandwidthSelection {
  double chosen = 0;           // > 0 and finite, whatever the data (docs/algorithms.md §1.11.1)
  double median_distance = 0;  // of the distinct points (0: the warm-up is one point)
  std::vector<double> candidates;
  std::vector<double> scores;  // held-out VAMP-2 per candidate
  // What was degenerate in the warm-up and the value chosen for it (empty when nothing was):
  // e.g. "bandwidth from the nonzero distances (71 % of the pairs are equal)".
  std::string note;
};

// Median of the nonzero pairwise distances among the first max_points rows of x, and the
// fraction of the pairs that are equal (distance 0). Equal rows (a quantized, two-level, stuck
// or mostly-zero signal) carry no length scale: the bandwidth is a scale at which DISTINCT
// states are told apart (docs/algorithms.md §1.11.1). Returns {0, 1} when all rows are equal,
// {1, 0} for fewer than two rows. One column: O(m log m) by sort and bisection, the same value
// bit for bit (§1.11.2); more columns: O(m^2).
struct MedianDistance {
  double median = 0;
  double equal_fraction = 0;
};
MedianDistance MedianNonzeroDistance(const Eigen::Ref<const RowMatrixXd>& x, int max_points);
// The median of MedianNonzeroDistance (kept for its callers and tests).
double MedianPairwiseDistance(const Eigen::Ref<const RowMatrixXd>& x, int max_points);

// 1 + sum of the squared held-out singular values of the rank leading singular functions fitted
// on the training pairs (the VAMP-2 score; 1 is the constant function).
double HeldOutVamp2(const Eigen::Ref<const RowMatrixXd>& x_train, const Eigen::Ref<const RowMatrixXd>& y_train,
                    const Eigen::Ref<const RowMatrixXd>& x_test, const Eigen::Ref<const RowMatrixXd>& y_test,
                    const Eigen::Ref<const RowMatrixXd>& landmarks, double sigma, int rank, double ridge);

// The selection's parts, for tools that score other landmark rules on the same split
// (tests/bench/bandwidth_scalar_check.cc):
// the held-out split of n pairs in stream order (contiguous blocks, alternately train and test;
// blocks is clamped to [2, n / 2]),
struct HeldOutSplit {
  std::vector<Eigen::Index> train, test;
};
HeldOutSplit BlockSplit(Eigen::Index n, int blocks);
// the median of the warm-up's nonzero distances over `options.median_points` evenly strided rows,
MedianDistance WarmupMedian(const Eigen::Ref<const RowMatrixXd>& x, const BandwidthSelectionOptions& options);
// p training rows evenly strided in stream order (the general rule),
RowMatrixXd StridedLandmarks(const Eigen::Ref<const RowMatrixXd>& x_train, Eigen::Index p);
// and, for one value per row, the training values at p evenly spaced ranks, repeated values once
// (docs/algorithms.md §1.11.2).
RowMatrixXd ScalarLandmarks(const Eigen::Ref<const RowMatrixXd>& x_train, int max_landmarks);

// x, y: warm-up pairs (n x d each, n >= 20), in stream order, finite. Deterministic.
// ensures: chosen > 0 and finite. Degenerate warm-ups (docs/algorithms.md §1.11.1): all rows
// equal -> 1 (one unit of the scaled channels; no candidate is scored); a candidate whose score
// is not finite (features constant over a half) is not chosen; no finite score -> the median.
BandwidthSelection SelectBandwidth(const Eigen::Ref<const RowMatrixXd>& x, const Eigen::Ref<const RowMatrixXd>& y,
                                   const BandwidthSelectionOptions& options);

}  // namespace cmestream
