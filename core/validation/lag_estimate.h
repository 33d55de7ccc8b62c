// Implied timescales against lag time and the Chapman–Kolmogorov test, with delete-one-block
// jackknife standard errors, from LaggedMoments (docs/algorithms.md §8).
//
// TRANSFER MATRIX at lag tau (one LagSums s):
//   K(tau) = (C00/n + r R)^{-1} C0t/n, R = identity except 0 at the constant feature (never
//   regularized), restricted to the features with C00_ii > 0. For one-hot features C00 is the
//   diagonal of visit counts and r = 0, so K is the row-normalized count matrix (the count
//   chain); for Koopman features [1, k_B] it is the Galerkin approximation of the Koopman
//   operator (docs/algorithms.md §7), and K e0 = e0 exactly.
// TIMESCALES: eigenvalues of K sorted by |mu| descending; the one nearest to 1 is the
//   stationary mode and is left out (never a finite number); t_i = -tau dt / ln|mu_i|
//   (+inf when |mu_i| >= 1, NaN when mu_i = 0 or the lag has no pairs).
// CK: memberships chi_j(x) = psi(x)^T M_j (M: D x K; one-hot: the 0/1 assignment of each
//   state), pi = M^T s0 / n. Predicted P(k tau) = diag(pi)^{-1} M^T (C00/n) K(tau)^k M,
//   estimated P^(k tau) = diag(pi_k)^{-1} M^T (C0t_k/n_k) M from the lag k tau itself
//   (the model's lags that are multiples of the base lag). For one-hot memberships this is
//   deeptime's lumped T(tau)^k vs T(k tau).
// ERROR BARS: delete-one-block jackknife (weighted for unequal block sizes, Busing, Meijer &
//   van der Leeden 1999): every statistic is recomputed from total - block_b for each block b;
//   var = (1/g) sum_b (pt_b - theta_J)^2 / (h_b - 1), h_b = n / n_b, pseudo-values
//   pt_b = h_b theta - (h_b - 1) theta_{-b}. The point estimate is the full-data one.
// COST: (g + 1) eigen-decompositions of D x D per lag (g <= max_blocks), and for the CK
//   (g + 1) K^k products; ~10 ms at D = 65, g = 16, L = 4. Never per sample.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/common/types.h"
#include "core/validation/lagged_moments.h"

namespace cmestream {

struct LagEstimateOptions {
  int top = 3;              // timescales per lag (slowest first), >= 1
  double dt = 1.0;          // sampling interval (timescale unit), > 0
  double ridge = 0;         // r, >= 0 (dense Koopman features: e.g. 1e-8; one-hot: 0)
  int constant_index = -1;  // feature identically 1 (never regularized), -1: none
  absl::Status Validate() const;
};

struct LagTimescales {
  std::vector<int> lags;
  std::vector<std::vector<double>> timescales;  // [lag][i], slowest first, stationary left out
  std::vector<std::vector<double>> stderrs;     // same shape (NaN with fewer than 2 blocks)
  std::vector<double> pairs;                    // pairs at each lag
  int blocks = 0;                               // jackknife blocks used
};

// InvalidArgument for bad options or a snapshot/options mismatch.
absl::StatusOr<LagTimescales> EstimateImpliedTimescales(const LaggedMomentsSnapshot& snapshot,
                                                        const LagEstimateOptions& options);

struct CkStep {
  int steps = 0;                                                  // k
  int lag = 0;                                                    // k * base lag
  MatrixXd predicted, estimated;                                  // K x K set-to-set probabilities
  MatrixXd predicted_stderr, estimated_stderr, deviation_stderr;  // jackknife s.e.
  double max_deviation = 0;                                       // max |predicted - estimated|
  double max_deviation_stderr = 0;                                // s.e. of (predicted - estimated) at that entry
};

struct CkTest {
  int lag = 0;                // base lag tau
  std::vector<CkStep> steps;  // increasing k
  double max_deviation = 0;   // over all steps
  double max_deviation_stderr = 0;
  int blocks = 0;
};

// memberships: D x K (see above). Steps: every model lag k * base_lag with 2 <= k <= max_steps.
// InvalidArgument: base_lag not one of the lags, memberships of the wrong shape, max_steps < 2,
// bad options. FailedPrecondition: no lag of the model is such a multiple (message lists the
// lags), or a set has no mass.
absl::StatusOr<CkTest> ChapmanKolmogorovTest(const LaggedMomentsSnapshot& snapshot, const MatrixXd& memberships,
                                             int base_lag, int max_steps, const LagEstimateOptions& options);

// Least-squares memberships in feature coordinates for hard labels of representative points:
// argmin_M sum_j w_j ||psi_j^T M - e_{label_j}^T||^2 + eps ||M||^2 (eps = 1e-10 tr / D keeps it
// well posed). features: m x D (rows psi(a_j)), weights: m (>= 0), labels in [0, K).
MatrixXd MembershipCoefficients(const MatrixXd& features, const VectorXd& weights, const Eigen::VectorXi& labels,
                                int num_sets);

// Half-width factor of a two-sided 95 % interval from a jackknife over `blocks` blocks: the
// Student-t quantile t(0.975, blocks - 1) (2.13 at 16 blocks, 2.31 at 9), 1.96 beyond 31 blocks,
// NaN below 2. With so few blocks z = 1.96 under-covers.
double JackknifeT95(int blocks);

// Weighted delete-a-group jackknife standard error (see above). loo[g]: the estimate with
// block g left out; sizes: block sizes (> 0).
double JackknifeStderr(double full, const std::vector<double>& loo, const std::vector<double>& sizes);

}  // namespace cmestream
