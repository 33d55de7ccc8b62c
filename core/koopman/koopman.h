// Koopman eigen-decomposition of a compressed CME (docs/algorithms.md §1.9).
//
// With C = Psi W Phi^T, the Koopman operator restricted to H acts on g = Phi v as
// C* Phi v = Phi (W^T K_YX) v, K_YX[i,j] = k(y_i, x_j). M = W^T K_YX is m_x x m_x.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/cme/compressed_cme.h"

namespace cmestream {

struct KoopmanOptions {
  int top = 6;      // eigenpairs kept (leading by |mu|), >= 1
  double dt = 1.0;  // sampling interval, > 0
  // InvalidArgument naming the field: top >= 1, dt finite and > 0.
  absl::Status Validate() const;
};

// Immutable result; Evaluate() needs only this object.
struct KoopmanDecomposition {
  VectorXcd eigenvalues;   // k, sorted by |mu| descending (ties: larger real part first)
  VectorXcd rates;         // log(mu)/dt
  VectorXd timescales;     // -dt/log|mu|, +inf when |mu| >= 1
  MatrixXcd eigenvectors;  // m_x x k; unit norm over the dictionary, first significant entry
                           // real positive (stable across refreshes)
  RowMatrixXd x_atoms;     // m_x x d
  double sigma = 1;
  double dt = 1;
  // Coefficient of the constant feature per eigenpair (k), when the basis includes the constant
  // function (core/spectral: psi = [1, k_B]); empty for the CME's pure-kernel basis.
  VectorXcd constants;
  // Index of the stationary mode (the constant function, eigenvalue exactly 1), or -1 when the
  // estimator does not identify it (the CME's W^T K_YX: the constant is not in the RKHS).
  int stationary_index = -1;

  // The CME's own decomposition: eigenpairs of M = W^T K_YX (docs/algorithms.md (1.21)).
  // InvalidArgument for invalid options (options.Validate()), FailedPrecondition when the
  // eigensolver does not converge: a view reports the message as a warning, never a partial
  // spectrum. An empty dictionary gives an empty decomposition.
  static absl::StatusOr<KoopmanDecomposition> Fit(const CmeSnapshot& snapshot, const KoopmanOptions& options);

  // g_l(x) = c_l + sum_j v_l[j] k(x_j, x) (c_l = constants[l], 0 if empty). points: n x d.
  // Returns n x k.
  MatrixXcd Evaluate(const Eigen::Ref<const RowMatrixXd>& points) const;
};

}  // namespace cmestream
