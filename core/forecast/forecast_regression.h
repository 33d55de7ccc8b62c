// Streaming one-step forecast regression (docs/algorithms.md §11).
//
// WHAT THIS OBJECT REPRESENTS
//   The sufficient statistics of a ridge regression of the next state y on the features
//       z(x) = [1, x, phi(x)]            (phi: N random Fourier features of the model's bandwidth)
//   over a stream of pairs (x, y), and the forecast model fitted from them. The linear terms x
//   sit beside the kernel features because a Gaussian kernel alone cannot extrapolate past
//   amplitudes it has seen (its features vanish away from the data), while a linear
//   autoregression on the same state can; which of the two (or both) a state component uses is
//   chosen by a held-out score, not assumed.
//   The sums are split into K folds by contiguous blocks of `block_length` pairs (block b goes
//   to fold b mod K: shuffled pairs would leak on a time series):
//       n_f, s_f = sum u, S_f = sum u u^T, R_f = sum u v^T, t_f = sum v, Q_f = sum v*v (diagonal)
//   with u = z'(x) - z'(x_0), v = y - x_0 (z' = z without the constant; x_0 the first pair's x):
//   the shift keeps the sums of large offsets (a 235 V channel) free of cancellation.
//
// THE FIT (FitForecast, O(G q^3) for G grid points, q = d + N)
//   Per output component j, a centered ridge regression of t_j = y_j - kappa x_j on [x, phi]:
//   kappa = 0 shrinks toward the mean (a level model), kappa = 1 toward persistence
//   (an increment model: "tomorrow = today" is the limit of infinite ridge). The ridge is
//   relative to each feature's variance, lambda_linear on the x block and lambda_kernel on the
//   phi block (or no phi block at all). Candidates are scored by the blocked K-fold held-out
//   squared error (train on all folds but f, score on f, for every fold f with pairs) plus a
//   forward one (train on the pairs up to the second-to-last refit, score on the pairs since),
//   each in closed form from the sums: interleaved blocks always have training data on both
//   sides in time, so only the forward part sees a candidate fail to extrapolate. Stage 1 picks (kappa, lambda_linear)
//   per component among linear-only models; stage 2 adds the kernel block at each lambda_kernel (lambda_linear fixed to
//   the one best over the scored components); each component keeps its best candidate, which is then refitted on both
//   folds.
//
// LIVE SKILL (prequential)
//   The accumulator refits itself at deterministic pair counts (64, 128, ..., 4096, then every
//   4096 pairs), and scores each pair with the current fit BEFORE learning it: the sums of the
//   squared one-step errors of the model and of persistence (y = x) over the scored components
//   (the last `scored_dims` of the state: the newest observation of a delay vector). Refits
//   depend on the pair count only, so the state is a function of the pairs alone.
//   Each refit also keeps the least-squares AR on the same state (the linear block alone at the
//   smallest ridge, 1e-9 relative, refitted on all pairs: "the linear part"), and three candidates are scored per
//   horizon h = 1..H (H = skill_horizon): the regression, the linear part and persistence, each iterated h steps from
//   the same origin (every pair for h = 1, every `SkillStride()` pairs for h > 1, while the pairs form one trajectory:
//   x of a pair equals y of the one before, bit for bit). The owner serves at each horizon the candidate with the
//   smallest live squared error (ForecastView::MethodAt, core/stream/learner_view.h).
//
// COST
//   Observe: N cosines (O(N d)), the prequential prediction (O(q d)), a copy into a B-row buffer;
//   every B pairs (or at a block end) one symmetric rank-B update and one GEMM: ~q^2/2 + q d
//   multiply-adds per pair amortized. The candidates' skill: the linear part's one-step forecast
//   (d^2) and, every S = ceil(H / 4) pairs, H-step rollouts of the regression and the linear part
//   (H (N d + q d + d^2) / S <= 4 (N d + q d + d^2) per pair amortized). No heap allocation per pair (scratch sized at
//   construction); a refit allocates (rare, O(G q^3)).
//   Memory: (K + 2) (q^2 + q d) doubles of sums plus the fit's q d coefficients and the buffer.
//
// INITIAL VALUE
//   No pairs, no fit (has_fit() false), skill pairs 0.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/common/types.h"
#include "core/embedding/feature_map.h"
#include "core/io/fwd.h"

namespace cmestream {

struct ForecastMomentsSnapshot;

// One fold's sums (see the top of the file); szz holds the full symmetric matrix.
struct ForecastFoldSums {
  double n = 0;
  VectorXd sz;   // q
  VectorXd sy;   // d
  VectorXd syy;  // d: sum of v_j^2
  MatrixXd szz;  // q x q
  MatrixXd szy;  // q x d
};

// The prequential one-step skill: squared errors of the model and of persistence over the
// scored components of the pairs scored so far.
struct ForecastSkill {
  int64_t pairs = 0;
  double sse = 0;
  double sse_persistence = 0;
  int scored_dims = 1;
  double rmse() const;              // NaN without pairs
  double rmse_persistence() const;  // NaN without pairs
  double ratio() const;             // rmse / rmse_persistence; NaN when undefined
};

// The forecasts compared by their live skill, per horizon.
enum class ForecastMethod { kRegression = 0, kLinear = 1, kPersistence = 2 };
inline constexpr int kForecastMethods = 3;
// "regression", "linear", "persistence".
const char* ForecastMethodName(ForecastMethod m);

// The prequential skill of the candidates at one horizon h: squared h-step errors over the
// scored components of the same origins (every candidate scored on each).
struct ForecastHorizonSkill {
  int64_t pairs = 0;
  std::array<double, kForecastMethods> sse = {0, 0, 0};
  // Sum over the origins of D_t^2, D_t = (regression's - linear part's squared error at t): the
  // spread of the paired difference, for the one-standard-error rule (ForecastView::MethodAt).
  double diff_sq = 0;
  double rmse(ForecastMethod m, int scored_dims) const;  // NaN without pairs
};

// What a fit chose for one state component.
struct ForecastChoice {
  bool increment = false;  // shrunk toward persistence (kappa = 1) rather than the mean
  double lambda_linear = 0;
  double lambda_kernel = 0;  // 0: no kernel features
  double heldout_rmse = 0;   // held-out RMSE of the chosen candidate (K-fold and forward MSE averaged)
};

// A fitted one-step map y = intercept + coef^T [x, phi(x)]. Immutable; Predict allocates
// nothing when given scratch.
class ForecastModel {
 public:
  int dim() const { return static_cast<int>(intercept_.size()); }
  int num_features() const { return features_->num_features(); }
  double pairs() const { return pairs_; }
  const std::vector<ForecastChoice>& choices() const { return choices_; }
  const VectorXd& intercept() const { return intercept_; }
  const MatrixXd& coef() const { return coef_; }  // (d + N) x d
  const FeatureMap& features() const { return *features_; }

  // y <- the one-step forecast from x (d doubles each; may not alias). `phi` is N doubles of
  // scratch.
  void Predict(const double* x, double* y, double* phi) const;
  // The forecasts of steps 1..horizon from state x, iterating the one-step map: horizon x d.
  RowMatrixXd Rollout(const double* x, int horizon) const;
  // The least-squares AR on the same state (the linear block alone at the smallest ridge, refitted
  // on the same pairs: no kernel features), or null (a fit read from an older state, until the
  // next refit).
  const ForecastModel* linear() const { return linear_.get(); }
  bool uses_kernel() const { return kernel_; }

 private:
  friend absl::StatusOr<ForecastModel> FitForecast(const ForecastMomentsSnapshot& s);
  friend class ForecastRegression;
  std::shared_ptr<const FeatureMap> features_;
  VectorXd intercept_;  // d
  MatrixXd coef_;       // (d + N) x d
  std::vector<ForecastChoice> choices_;
  double pairs_ = 0;
  bool kernel_ = true;  // false: the kernel rows of coef_ are 0 and Predict skips the features
  std::shared_ptr<const ForecastModel> linear_;
};

// Immutable copy of the statistics (buffered pairs folded in).
struct ForecastMomentsSnapshot {
  int dim = 0;
  int scored_dims = 0;
  std::shared_ptr<const FeatureMap> features;
  VectorXd z0;                          // q: z'(x_0), whose first d entries are x_0
  std::vector<ForecastFoldSums> folds;  // options.folds of them
  // All pairs up to the second-to-last refit (the forward segment's training data); between
  // the first and the second refit, those up to the first; none before the first.
  std::optional<ForecastFoldSums> prefix;
  int64_t samples = 0;
  ForecastSkill skill;
  // The candidates' live skill at horizons 1..skill_horizon (index h - 1).
  std::vector<ForecastHorizonSkill> horizons;
};

// requires: s.features != nullptr. FailedPrecondition while fewer than two folds hold 4 pairs.
absl::StatusOr<ForecastModel> FitForecast(const ForecastMomentsSnapshot& s);

class ForecastRegression {
 public:
  struct Options {
    int dim = 0;               // d >= 1
    int scored_dims = 0;       // the last scored_dims components are scored; 0 = all
    int block_length = 16;     // L >= 1: pairs per held-out block
    int folds = 5;             // K in 2..16: block b belongs to fold b mod K
    int batch_size = 32;       // B >= 1: pairs per rank-B update
    int64_t first_fit = 64;    // pairs at the first refit, >= 8
    int64_t fit_every = 4096;  // refits double up to this many pairs, then come this often, >= first_fit
    int skill_horizon = 1;     // H in 1..kMaxSkillHorizon: the candidates are scored at horizons 1..H
    absl::Status Validate() const;
  };
  static constexpr int kMaxSkillHorizon = 64;
  // The most RFF features a regression accepts: the per-pair cost is quadratic in them. The
  // learner passes fewer (min(N, 128): kForecastFeatures in core/stream/streaming_learner_options.cc),
  // drawn by their own FeatureMap::Rff from the model's seed and sigma, so they equal the
  // embedding moments' features only when N <= 128 (docs/benchmarks.md "Kernel columns per pair").
  static constexpr int kMaxFeatures = 256;

  // requires: options.Validate().ok() and features->input_dim() == options.dim (aborts).
  ForecastRegression(std::shared_ptr<const FeatureMap> features, const Options& options);

  // Scores the pair with the current fit (if any), then learns it; refits on schedule.
  // x, y: dim finite doubles (the caller validates). No allocation except at a refit.
  void Observe(const double* x, const double* y);

  ForecastMomentsSnapshot Snapshot() const;

  const Options& options() const { return options_; }
  int64_t samples() const { return samples_; }
  const ForecastSkill& skill() const { return skill_; }
  bool has_fit() const { return fit_.has_value(); }
  // Refits since construction or Deserialize (a counter for callers, not state).
  int64_t refits() const { return refits_; }
  const FeatureMap& features() const { return *features_; }

  // Object "FCRG" version 2 (core/forecast/forecast_regression_io.cc): the options, the sums,
  // the buffer, the skill and the fit, and (v2) the linear part, the candidates' skill per
  // horizon and the pending rollouts, so Deserialize and the same pairs give the same bits.
  // The feature map is not stored: the owner passes the same map (drawn from the model's seed).
  // A version-1 object loads with skill_horizon = `old_skill_horizon`, no linear part until its
  // next refit and no per-horizon skill yet.
  void Serialize(io::Writer& w) const { SerializeAs(w, 2); }
  // The layout of `version` (1 or 2): version 1 leaves out what version 2 adds (the upgrade
  // tests write older states with it).
  void SerializeAs(io::Writer& w, int version) const;
  static absl::StatusOr<ForecastRegression> Deserialize(io::Reader& r, std::shared_ptr<const FeatureMap> features,
                                                        int old_skill_horizon = 1);
  const std::vector<ForecastHorizonSkill>& horizon_skill() const { return horizons_; }
  // Origins of the h > 1 rollouts: every SkillStride() pairs.
  int SkillStride() const { return (options_.skill_horizon + 3) / 4; }

 private:
  int q() const { return options_.dim + features_->num_features(); }
  int FoldOf(int64_t pair) const { return static_cast<int>((pair / options_.block_length) % options_.folds); }
  void Flush();
  static void FlushInto(ForecastFoldSums& f, const RowMatrixXd& u, const RowMatrixXd& v, int rows);
  void Refit();
  void ScoreCandidates(const double* x, const double* y);
  int Slots() const { return options_.skill_horizon / SkillStride() + 2; }
  // Rows of a slot: the regression's and the linear part's predictions at steps 1..H, then the
  // origin's own scored components (persistence at every step).
  int SlotRows() const { return 2 * options_.skill_horizon + 1; }
  // Slot k's prediction of candidate m (0 regression, 1 linear; 2 persistence with h = 1) at step
  // h (1-based): scored_dims doubles.
  double* SlotPred(int k, int m, int h) {
    return slot_pred_.row(k * SlotRows() + m * options_.skill_horizon + (h - 1)).data();
  }
  void SizeSkillState();

  Options options_;
  std::shared_ptr<const FeatureMap> features_;
  int64_t samples_ = 0;
  VectorXd z0_;  // q (empty before the first pair)
  std::vector<ForecastFoldSums> folds_;
  // Sums of all pairs at the second-to-last and at the last refit (szz lower triangles).
  std::optional<ForecastFoldSums> prefix_, last_;
  RowMatrixXd ubuf_, vbuf_;  // B x q, B x d
  int buffered_ = 0;
  int buffer_fold_ = 0;
  int64_t next_fit_ = 0;
  ForecastSkill skill_;
  std::optional<ForecastModel> fit_;
  int64_t refits_ = 0;  // not state
  // The candidates' skill (see LIVE SKILL): per horizon; y of the previous pair (the trajectory
  // check); per slot the origin pair of a pending rollout (-1: none) and its predictions
  // (Slots() * 2 * H rows of scored_dims: the regression's and the linear part's).
  std::vector<ForecastHorizonSkill> horizons_;
  bool has_prev_ = false;
  VectorXd prev_y_;  // d
  std::vector<int64_t> slot_origin_;
  RowMatrixXd slot_pred_;
  // Scratch (not state).
  RowMatrixXd xrow_, phirow_;                       // 1 x d, 1 x N
  VectorXd pred_;                                   // d
  VectorXd lin_pred_, roll_a_, roll_b_, roll_phi_;  // d, d, d, N
};

}  // namespace cmestream
