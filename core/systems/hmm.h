// Hidden-state systems with known ground truth, for the latent-state (docs/algorithms.md §5)
// and predictive-state (section 6) models, their tests, and `cmestream simulate
// hmm-mixture|hmm-binary|kalman`.
//
// Three systems:
//   - HmmMixture: a k-state Markov chain with continuous 1-D emissions, Gaussian or skewed
//     shifted-Gamma (paper 001, section 7). Ground truth: stationary weights pi_h and the
//     emission density p(x|h) of every state.
//   - DiscreteHmm: a k-state chain with categorical emissions (emission matrix O, k x n_obs);
//     BinaryLearningChain() builds the 2-state learning/forgetting chain of paper 002, section 5.
//     Ground truth: the exact forward-algorithm filter (one-step predictive distributions).
//   - LinearGaussianSsm: x_{t+1} = A x_t + w, o_t = C x_t + v, w ~ N(0,Q), v ~ N(0,R). Ground
//     truth: the exact (time-varying) Kalman filter one-step predictions.
// All simulations are deterministic given the seed (std::mt19937_64). Each system can write
// its parameters (the ground truth) as a JSON object.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/common/types.h"

namespace cmestream::systems {

// One 1-D emission density.
//   kGaussian:     N(location, scale^2).
//   kShiftedGamma: x = location + G, G ~ Gamma(shape, scale) (density
//                  (x-location)^(shape-1) exp(-(x-location)/scale) / (scale^shape Gamma(shape)),
//                  x >= location; shape <= 1 makes it very skewed, paper 001 section 7).
struct Emission {
  enum class Kind { kGaussian, kShiftedGamma };
  Kind kind = Kind::kGaussian;
  double location = 0;  // mean (Gaussian) or shift (Gamma)
  double scale = 1;     // standard deviation (Gaussian) or Gamma scale theta; > 0
  double shape = 1;     // Gamma shape; > 0 (ignored for Gaussian)

  double Density(double x) const;
  double Mean() const;
};

// A k-state HMM with continuous 1-D emissions.
struct HmmMixture {
  MatrixXd transition;              // k x k, row-stochastic, T[i,j] = P(s_{t+1}=j | s_t=i)
  std::vector<Emission> emissions;  // k

  // The default test system: 3 states, emissions N(-3, 0.8^2), shifted Gamma (shift -0.5,
  // shape 1.5, scale 0.8), N(5, 1); T = 0.7 I + 0.3 1 pi^T with pi = (1/6, 2/6, 3/6) (the
  // unbalanced weights 2h/(k(k+1)) of paper 001 section 7), so pi is exactly stationary.
  static HmmMixture Default();

  int num_states() const { return static_cast<int>(emissions.size()); }
  absl::Status Validate() const;
  // Stationary distribution of the chain (left eigenvector of T for eigenvalue 1).
  VectorXd StationaryWeights() const;
  // p(x_j | h) for each point: n x k.
  MatrixXd EmissionDensities(const Eigen::Ref<const VectorXd>& points) const;
  // n consecutive observations of one trajectory started in the stationary distribution;
  // states (optional, may be null) receives the hidden states.
  VectorXd Simulate(int64_t n, uint64_t seed, Eigen::VectorXi* states = nullptr) const;
  // {"type":"hmm-mixture","transition":[[..]],"weights":[..],"emissions":[{..}],
  //  "grid":[..],"densities":[[..] per state]} with densities on `grid`, if given.
  std::string GroundTruthJson(const VectorXd& grid = VectorXd()) const;
};

// A k-state HMM with categorical emissions 0..n_obs-1.
struct DiscreteHmm {
  MatrixXd transition;  // k x k, row-stochastic
  MatrixXd emission;    // k x n_obs, row-stochastic, O[h,a] = P(o=a | s=h)
  VectorXd initial;     // k, initial distribution (empty: stationary)

  // Paper 002 section 5 (Bayesian knowledge tracing): state 0 = not learned, 1 = learned;
  // P(0->1) = learn, P(1->0) = forget; observation 1 = correct answer, P(1|0) = guess,
  // P(0|1) = slip.
  static DiscreteHmm BinaryLearningChain(double learn = 0.05, double forget = 0.03, double guess = 0.25,
                                         double slip = 0.15);

  int num_states() const { return static_cast<int>(transition.rows()); }
  int num_symbols() const { return static_cast<int>(emission.cols()); }
  absl::Status Validate() const;
  VectorXd StationaryWeights() const;
  // One trajectory of n observations (ids as doubles 0..n_obs-1, the wire format of the
  // service for discrete models); states optional.
  VectorXd Simulate(int64_t n, uint64_t seed, Eigen::VectorXi* states = nullptr) const;
  // Exact forward algorithm: row t = P(o_t = a | o_0..o_{t-1}) (n x n_obs); row 0 uses the
  // initial (or stationary) distribution.
  RowMatrixXd OneStepPredictions(const Eigen::Ref<const VectorXd>& observations) const;
  std::string GroundTruthJson() const;
};

// Linear-Gaussian state-space model.
struct LinearGaussianSsm {
  MatrixXd A, C, Q, R;  // n x n, p x n, n x n (SPD), p x p (SPD)

  // 2-D damped rotation A = 0.95 R(0.3), C = [1 0.5], Q = 0.1 I, R = 0.1 (p = 1).
  static LinearGaussianSsm Default();

  int state_dim() const { return static_cast<int>(A.rows()); }
  int obs_dim() const { return static_cast<int>(C.rows()); }
  absl::Status Validate() const;
  // Stationary state covariance (solves P = A P A^T + Q by iteration; requires stable A).
  MatrixXd StationaryCovariance() const;
  // n observations (n x p) of one trajectory started from the stationary distribution.
  RowMatrixXd Simulate(int64_t n, uint64_t seed, RowMatrixXd* states = nullptr) const;
  // Exact Kalman filter from the stationary prior: row t = E[o_t | o_0..o_{t-1}] (n x p).
  RowMatrixXd OneStepPredictions(const Eigen::Ref<const RowMatrixXd>& observations) const;
  std::string GroundTruthJson() const;
};

}  // namespace cmestream::systems
