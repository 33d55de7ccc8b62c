// Consistent Koopman spectrum from exact streaming moments (docs/algorithms.md §7).
//
// WHAT IT COMPUTES
//   From a SpectralMomentsSnapshot (features psi = [1, k_B], moments C00, C01, C11 split into two
//   folds of contiguous blocks) and a ridge r:
//       K = (C00/n + r R)^{-1} C01/n,   R = diag(0, 1, ..., 1)
//   (never regularize the constant). Because psi_0 = 1, C01 e0 = C00 e0, so K e0 = e0: the
//   constant function is an exact eigenfunction with eigenvalue 1 (the stationary mode), and
//   K = [[1, a^T], [0, K']] in block form. The other eigenpairs are those of K' (m x m, dense
//   QR eigensolver, info() checked), lifted to K by the constant coefficient
//   c = a^T v' / (mu - 1). Eigenfunction g(x) = psi(x)^T v.
//   Reversible option (detailed balance): C00 -> (C00 + C11)/2, C01 -> (C01 + C01^T)/2, which
//   keeps K e0 = e0 and gives real eigenvalues.
//   Refinement: the ridge shrinks slow eigenvalues (by ~ r |v|^2 / v^T C00 v). The eigenvalues
//   served are Rayleigh-Ritz values of the unregularized moments on the span of the constant and
//   the leading refine_modes eigenvectors of the ridged K: a small, well-conditioned Galerkin
//   problem that keeps K e0 = e0 (the constant is in the span) and drops the shrinkage.
//
// CANDIDATE BASES (nested epochs, spectral_moments.h)
//   "live": the full basis over the live epoch's pairs; "prefix": the frozen prefix basis over
//   the frozen pairs and the live epoch's (frozen sums + the live sums' top-left blocks). Both
//   ready: each gets its ridge from the live epoch's two folds (the prefix one trains on every
//   frozen pair plus the other live fold), so both are scored on the same held-out pairs; the
//   prefix candidate wins only if its score beats the live one's by more than score_tolerance.
//   One ready (or none: the one with more pairs, flagged not ready): its own two folds.
//   A candidate with less than min_share of the stream's pairs competes only when no other
//   ready one holds that much (so >= 80 % of the stream is inside the estimate).
//
// CHOICE OF r (held-out, contiguous blocks)
//   For each r of a small grid: fit on fold A, score on fold B and vice versa; the score is the
//   VAMP-E score (Wu & Noe 2020) of the rank-k truncated VAMP model
//       score_E = tr(2 S U'^T C01t V' - S U'^T C00t U' S V'^T C11t V')
//   (U', V', S: whitened singular vectors and values fitted on the training fold with ridge r;
//   C..t: test-fold moments / n). It estimates sum_i s_i^2 of the true operator minus the HS
//   error of the model (the constant contributes 1), so it is comparable across bandwidths and
//   penalizes both bias (large r) and over-fitted singular values (small r). The largest r
//   whose mean score is within score_tolerance (relative, 1e-3) of the best wins: the score is
//   flat over r on deterministic maps, where small r gives noisy eigenvectors. The final fit
//   uses both folds.
//
// COST
//   O(|grid| * 2 * (m+1)^3) per candidate (at most two) for the selection (two
//   eigen-decompositions and one SVD per fit) plus one O(m^3) eigen-decomposition; ~0.1 s per
//   candidate at m = 200. Runs at refresh, never per sample.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/koopman/koopman.h"
#include "core/spectral/spectral_moments.h"

namespace cmestream {

struct SpectralFitOptions {
  int top = 6;      // eigenpairs kept (stationary first, then by |mu| desc.), >= 1
  double dt = 1.0;  // sampling interval, > 0 (timescale units)
  std::vector<double> ridge_grid = {1e-3, 1e-4, 1e-5, 1e-6, 1e-7};  // candidates for r, each > 0
  int score_rank = 6;  // singular functions in the VAMP-E score (constant included), >= 1
  // The ridge is the largest r whose held-out score is within score_tolerance * max(1, |best|)
  // of the best (see the .cc: near-ties go to the smoother fit). >= 0.
  double score_tolerance = 1e-3;
  bool reversible = false;  // symmetrized estimator (only when detailed balance holds)
  // Rayleigh-Ritz refinement: the eigenvalues are re-estimated without the ridge on the span of
  // the refine_modes leading eigenvectors of the ridged K (0 or >= m: off). See the .cc.
  int refine_modes = 16;
  // A candidate basis holding less than min_share of the stream's pairs competes only when no
  // other ready candidate holds that much (spectral_moments.h, RE-BASE SCHEDULE). [0, 1].
  // 0: off (every ready candidate competes); the daemon uses 0.8 (service/engine/refresh.cc).
  double min_share = 0;
  // A non-stationary eigenvalue with |mu| > 1 + unit_circle_tolerance is reported as a warning.
  double unit_circle_tolerance = 1e-9;
  absl::Status Validate() const;
};

// A rank-k VAMP model over the features psi = [1, k_B]: singular functions f(x) = psi(x)^T su
// (weighted by their singular values) and g(y) = psi(y)^T v, each (m+1) x k.
struct VampFactors {
  MatrixXd su, v;
};

struct SpectralFit {
  enum class Termination { kOk, kNotReady, kNumericalFailure };
  Termination termination = Termination::kNotReady;
  std::string message = "not fitted";

  // Eigenpairs over the basis: koopman.x_atoms = basis, koopman.constants = coefficient of the
  // constant feature, koopman.stationary_index = 0 (eigenvalue exactly 1, timescale +inf).
  KoopmanDecomposition koopman;
  VectorXd excess;  // per eigenpair: max(0, |mu| - 1) for non-stationary modes
  std::vector<std::string> warnings;

  // The basis candidate the spectrum rests on (spectral_moments.h, EPOCHS): "live" (the full
  // basis over the live epoch) or "prefix" (the frozen prefix basis over the frozen and the
  // live pairs); the candidates scored and their held-out scores (at their chosen ridges).
  std::string basis_candidate;
  std::vector<std::string> candidates;
  std::vector<double> candidate_scores;
  double ridge = 0;                              // chosen r
  std::vector<double> ridge_grid, ridge_scores;  // mean held-out VAMP-E per candidate
  double score = 0;                              // held-out VAMP-E of the chosen r (mean over the two folds)
  VampFactors vamp;                              // rank-score_rank VAMP model with the chosen r on both folds
  int score_rank = 0;                            // rank used in the score (constant included)
  int64_t epoch = 0;                             // the epoch the spectrum rests on
  int64_t samples = 0;                           // its pairs
  double weight = 0;                             // its total (forgotten) weight n_w
  bool ready = false;                            // the epoch had enough samples (see SpectralMoments)
  int64_t epochs = 0;                            // epochs begun so far (the live epoch's number)
  double share = 0;                              // samples / all pairs the moments observed

  // Slowest non-stationary timescale (+inf if any mode is on/over the unit circle; NaN if none).
  double SlowestTimescale() const;
  std::string BriefReport() const;
};

// requires: options.Validate().ok(). A snapshot without an epoch, or with an empty fold, gives
// termination kNotReady and a message (not an error); a failed factorization or eigensolver
// gives kNumericalFailure. InvalidArgument only for bad options.
absl::StatusOr<SpectralFit> FitSpectrum(const SpectralMomentsSnapshot& snapshot, const SpectralFitOptions& options);

// The rank-k VAMP model of normalized moments (C/n) with ridge r on the non-constant features.
VampFactors FitVampFactors(const MatrixXd& c00, const MatrixXd& c01, const MatrixXd& c11, double ridge, int rank);
// VAMP-E of the fitted `f` on normalized test moments: 2 tr(A) - tr(B C) (see the header comment).
double VampEScore(const VampFactors& f, const MatrixXd& t00, const MatrixXd& t01, const MatrixXd& t11);

// Held-out VAMP-E score of the rank-k model fitted on `train` with ridge r, on `test` (both
// normalized moments: C/n). Exposed for tests and the bandwidth selection.
double HeldOutVampE(const MatrixXd& c00, const MatrixXd& c01, const MatrixXd& c11, const MatrixXd& t00,
                    const MatrixXd& t01, const MatrixXd& t11, double ridge, int rank);

}  // namespace cmestream
