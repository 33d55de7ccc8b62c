// Predictive-state model by two-stage instrumental regression (seed paper 002; docs/algorithms.md
// §6).
//
// WHAT THIS REPRESENTS
//   PredictiveStateAccumulator: the streaming sufficient statistics of the S1A/S1B/S2 ridge
//   regressions over windows of a trajectory stream. Observations arrive in order within an
//   episode; StartEpisode() begins a new one, so no window crosses an episode boundary. For each
//   time t with a full window it adds
//     history  h_t = f_h(o_{t-H..t-1}),
//     future   psi_t = f_psi(o_{t..t+F-1}),
//     extended future xi_t = f_xi(o_{t..t+F})  (F = 1 for the discrete case),
//   to  A = sum h h^T,  B_psi = sum h psi^T,  B_xi = sum h xi^T  (and what the naive one-stage
//   baseline and the linear-Gaussian noise model need, see below). No data are stored.
//
//   Two feature kinds:
//   - kDiscrete (HMM, section 6 "Discrete"): observations are symbol ids 0..S-1 (as doubles).
//     h_t = indicator of the window o_{t-H..t-1} (S^H entries), psi_t = e_{o_t},
//     xi_t = e_{o_t} (x) e_{o_{t+1}}. A is diagonal (stored as a vector); per observation O(H).
//   - kLinearGaussian (section 6 "Linear-Gaussian"): observations in R^p. h_t = o_{t-H..t-1}
//     stacked (pH), psi_t = o_{t..t+F-1} (pF). The extended future xi_t = [o_t ; U^T o_{t+1..t+F}]
//     depends on the basis U known only at fit time, but it is linear in the extended window
//     e_t = o_{t..t+F} (p(F+1)): xi_t = L e_t with L = blockdiag(I_p, U^T). So we accumulate
//     B_e = sum h e^T and E = sum e e^T, and form B_xi = B_e L^T at fit time.
//     Noise model: the filter needs Sigma_xi = Cov(xi_t - W q_t). We use the statistic E to
//     compute the S1B residual covariance Cov(xi_t - Theta_xi^T h_t) (the covariance of xi given
//     the H-window history, a streaming stand-in for the covariance given the filtered state;
//     it converges to it as H grows). No reservoir.
//   E (or, discrete, the pair counts) also gives the naive one-stage regression xi ~ psi used as
//   a baseline (Stage::kNaiveOneStage).
//
// INITIAL VALUE
//   windows() == 0, all statistics zero, a new episode started.
//
// COST
//   Observe: discrete O(H); linear-Gaussian O((p(H+F+1))^2) rank-1 updates. No allocation
//   (the ring of the last H+F+1 observations and all scratch are sized at construction).
//   Memory: discrete S^H (S + S^2 + 1) doubles; linear-Gaussian O((p(H+F+1))^2).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/common/types.h"
#include "core/io/fwd.h"

namespace cmestream {

class PredictiveStateAccumulator {
 public:
  enum class Kind { kDiscrete, kLinearGaussian };
  struct Options {
    Kind kind = Kind::kDiscrete;
    int num_symbols = 2;               // discrete: S >= 2 symbols 0..S-1
    int dim = 1;                       // linear-Gaussian: observation dimension p >= 1
    int history_length = 3;            // H >= 1 (discrete: S^H <= max_history_states)
    int future_length = 2;             // F >= 1, linear-Gaussian only (discrete uses psi = e_{o_t})
    int max_history_states = 1 << 16;  // discrete bound on S^H (memory guard)

    // OK or InvalidArgument("Violated constraint: ...").
    absl::Status Validate() const;
  };

  // requires: options.Validate().ok() (checked; aborts otherwise).
  explicit PredictiveStateAccumulator(const Options& options);

  // Appends one observation o (p doubles; discrete: one double holding an id in [0,S)) to the
  // current episode. Bad input (non-finite, discrete id not an integer in range) returns
  // InvalidArgument and changes nothing. No allocation.
  absl::Status Observe(const double* o);
  // Observe for an observation already checked (finite; discrete: an id in [0, S)): the
  // composite learner validates a whole batch before applying any of it.
  void ObserveValidated(const double* o);
  // Rows of `observations` in order (n x p); stops at the first bad row (rows before it stay
  // applied) and reports its index.
  absl::Status ObserveBatch(const Eigen::Ref<const RowMatrixXd>& observations);
  // Ends the current episode: the next observation starts a fresh window.
  void StartEpisode() { in_episode_ = 0; }

  const Options& options() const { return options_; }
  int64_t windows() const { return windows_; }  // training windows accumulated
  int64_t observations() const { return observations_; }

  // The accumulated statistics; Snapshot() returns an immutable copy (O(their size)).
  struct Statistics {
    Options options;
    int64_t windows = 0;
    VectorXd a_diag;       // discrete: diag(A) (S^H)
    MatrixXd A;            // linear-Gaussian: pH x pH
    MatrixXd B_psi;        // discrete: S^H x S
    MatrixXd B_xi;         // discrete: S^H x S^2 (column a*S+b for (o_t, o_{t+1}) = (a, b))
    MatrixXd B_e;          // linear-Gaussian: pH x p(F+1)
    MatrixXd E;            // linear-Gaussian: p(F+1) x p(F+1)
    MatrixXd pair_counts;  // discrete: S x S, counts of (o_t, o_{t+1}) over windows
    VectorXd sum_e;        // sum of psi (discrete, S) or of e (linear-Gaussian, p(F+1)): initial state
  };
  Statistics Snapshot() const;

  // Snapshot support (core/predictive/predictive_state_io.cc; object tag "PSAC", version 1). Writes
  // the full per-sample state (ring buffer
  // and episode position included) (no flush), so that Deserialize() followed by the same
  // calls gives results bit-identical to never having stopped. Deserialize bounds every
  // dimension by the stored options before allocating; errors are DataLoss naming the source
  // and offset (a bad tag or an unknown version are named as such).
  void Serialize(io::Writer& w) const;
  static absl::StatusOr<PredictiveStateAccumulator> Deserialize(io::Reader& r);

 private:
  void AddWindow();

  Options options_;
  int window_len_ = 0;  // H + F + 1 (discrete: H + 2)
  int64_t windows_ = 0, observations_ = 0;
  int64_t in_episode_ = 0;  // observations of the current episode seen
  int ring_pos_ = 0;
  RowMatrixXd ring_;  // window_len_ x p, circular
  VectorXd h_, e_;    // scratch
  Statistics stats_;
};

// The fitted model: immutable, cheap to query, shares nothing with the accumulator.
class PredictiveStateModel {
 public:
  enum class Stage { kTwoStage, kNaiveOneStage };
  struct FitOptions {
    double lambda1 = 1e-3;  // S1 ridge, relative to trace(A)/dim(h) (>= 0)
    double lambda2 = 1e-6;  // S2 ridge, relative to trace(Q^T Q)/dim(q) (>= 0)
    int rank = 2;           // linear-Gaussian: predictive state dimension n (1 <= n <= pF)
    Stage stage = Stage::kTwoStage;
    int64_t min_windows = 10;  // fewer windows: FailedPrecondition
    absl::Status Validate() const;
  };

  // Fits S1A, S1B, S2 (docs/algorithms.md §6.2) from the snapshot.
  // Errors: InvalidArgument (bad options), FailedPrecondition (too few windows).
  static absl::StatusOr<PredictiveStateModel> Fit(const PredictiveStateAccumulator::Statistics& s,
                                                  const FitOptions& options);

  PredictiveStateAccumulator::Kind kind() const { return kind_; }
  int obs_dim() const { return p_; }      // p (discrete: 1)
  int num_symbols() const { return s_; }  // discrete S
  int state_dim() const { return static_cast<int>(q0_.size()); }

  // Predictive state q_t = E[psi_t | past] (discrete: S-vector; linear-Gaussian: n-vector).
  const VectorXd& InitialState() const { return q0_; }
  // Conditions the state on the observation o (p doubles) in place: q <- f_filter(W q, o).
  // Discrete: q <- row o of the joint table W q, clipped at 0, normalized.
  // Linear-Gaussian: [m_o; m_q] = W q, q <- m_q + Sigma_qo Sigma_oo^{-1} (o - m_o).
  void Update(VectorXd& q, const double* o) const;
  // Marginalizes the next observation: q <- f_predict(W q).
  void Propagate(VectorXd& q) const;
  // Expected next observation given state q (p).
  VectorXd PredictMean(const VectorXd& q) const;
  // Discrete: predictive distribution of the next symbol (clipped, normalized, S).
  VectorXd PredictDistribution(const VectorXd& q) const;

  struct Forecast {
    VectorXd state;            // filtered predictive state after the window
    RowMatrixXd mean;          // horizon x p, expected observations
    RowMatrixXd distribution;  // discrete: horizon x S; empty otherwise
  };
  // Filters the window (rows oldest first, each p values; discrete: ids) from InitialState()
  // and forecasts the next `horizon` observations. InvalidArgument on bad rows or horizon < 1.
  absl::StatusOr<Forecast> ForecastFrom(const Eigen::Ref<const RowMatrixXd>& window, int horizon) const;

  const MatrixXd& W() const { return w_; }
  const MatrixXd& basis() const { return u_; }  // linear-Gaussian U (pF x n)

 private:
  absl::Status CheckObservation(const double* o) const;

  PredictiveStateAccumulator::Kind kind_ = PredictiveStateAccumulator::Kind::kDiscrete;
  int p_ = 1, s_ = 0;
  MatrixXd w_;  // S2 operator
  VectorXd q0_;
  MatrixXd u_;     // reduced-rank basis
  MatrixXd gain_;  // Sigma_qo Sigma_oo^{-1} (n x p)
};

}  // namespace cmestream
