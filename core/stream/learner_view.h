// The fitted views of one streaming learner: every estimator's "fit into a view" half, behind
// one entry point (CONTRIBUTING.md "Data flow"; each fit's math in the docs/algorithms.md section
// of its estimator). Plain math: no protobuf, no clock beyond the per-view timings, no service
// concerns. The service maps its model config to
// ViewOptions, calls FitViews off the ingest path, converts the result to replies and
// publishes it (service/engine/refresh.cc).
//
// Each sub-view succeeds or fails on its own: a failure keeps its reason (not enough data yet,
// a numerical failure, or the feature is off and how to enable it) and the other views are
// still built. Sub-views are immutable once fitted and shared by pointer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/aggregation/soft_aggregation.h"
#include "core/cluster/metastable.h"
#include "core/cme/compressed_cme.h"
#include "core/counts/transition_counts.h"
#include "core/embedding/state_embedding.h"
#include "core/forecast/forecast_regression.h"
#include "core/koopman/koopman.h"
#include "core/latent/latent_model.h"
#include "core/predictive/predictive_state.h"
#include "core/spectral/mode_amplitudes.h"
#include "core/spectral/prequential_score.h"
#include "core/spectral/spectral_summary.h"
#include "core/stream/input_stage.h"
#include "core/stream/lags_view.h"
#include "core/stream/streaming_learner.h"

namespace cmestream {

// Eigenpairs computed and kept per Koopman view (a reply may ask for at most this many).
inline constexpr int kStoredEigenpairs = 16;
// Discrete models: the embedding and the count-chain timescales need a dense P x P
// eigendecomposition, O(P^3); supported up to this many states.
inline constexpr int kMaxDenseStates = 2048;

// Relative disagreement of the slowest timescales of the Koopman, count-chain and embedding
// views above which the comparison warns (docs/user-guide.md "Which estimate"). The count chain
// and the embedding agree within 2-7 % on the four-well system, and a consistent Koopman
// estimate within 5 % of the truth: 25 % is far outside sampling noise. Which timescale of a
// view is compared (CompareTimescales in learner_view.cc): its slowest *resolved*
// non-stationary one, i.e. skipping the stationary mode, Koopman modes flagged with an excess
// |mu| > 1, and any timescale that is not finite or exceeds the time the data covers
// (samples x dt), which the data cannot tell from a constant (Duffing's embedding singular
// value 1 - 1e-12 reads 1.7e11). A view without such a timescale is left out (NaN);
// disagreement = (max - min) / min over the views left, so it is always finite.
inline constexpr double kTimescaleDisagreementThreshold = 0.25;

// What FitViews reads besides the snapshot: the model's fit-time settings.
struct ViewOptions {
  std::string label = "model";  // names the model in messages that reach a user ("model 'x'")
  double dt = 1;                // time between x_t and x_{t+1}, in the user's units
  int num_states = 0;           // discrete ids in [0, num_states); 0: continuous
  int dim = 0;                  // continuous: state dimension
  int rank = 8;                 // embedding rank r
  int clusters = 4;             // metastable sets K
  uint64_t seed = 1;            // k-means and tensor restarts
  int meta_states = 0;          // soft aggregation: 0 = off
  double anchor_threshold = 0.5;
  bool kmeans_spa = false;  // vertex hunting: k-means then SPA (else SPA)
  int latent_states = 0;    // multi-view latent model: 0 = off
  int tensor_restarts = 10;
  int tensor_iterations = 30;
  int window = 0;  // predictive-state window: 0 = off
  double ridge_stage1 = 1e-3;
  double ridge_stage2 = 1e-3;
  bool lag_statistics = true;  // the learner keeps lag statistics (else: why there are none)
  // Channels of one observation: with delays, the state's last `observed_channels` coordinates
  // are the newest observation (the observable of the Koopman mode amplitudes); 0: all of them.
  int observed_channels = 0;

  // InvalidArgument naming the field.
  absl::Status Validate() const;
};

// A sub-view that may be missing: `value` is set on success; otherwise `error` says why.
template <class T>
struct SubView {
  std::shared_ptr<const T> value;
  std::string error;
};

// The cross-view comparison of slowest timescales (units of time; NaN: the view has none).
struct TimescaleComparison {
  double koopman = 0, count_chain = 0, embedding = 0;
  double relative_disagreement = 0;
  double threshold = 0;
  bool warning = false;                      // the views disagree beyond their error bars on a stationary stream
  double lag_scan = 0, lag_scan_stderr = 0;  // the lag view's figure with its jackknife s.e.
  int lag_scan_lag = 0, lag_scan_blocks = 0;
  double relative_stderr = 0;
  std::string diagnostic;
};

// How the Koopman view was estimated, and what to make of it (the wire's SpectrumInfo).
struct SpectrumReport {
  std::string estimator;  // "spectral-moments" (docs/algorithms.md §7) or "cme" (fallback)
  int64_t epoch = 0, epoch_samples = 0;
  double epoch_weight = 0;
  bool ready = false;
  int64_t epochs = 0;
  double data_share = 0;
  int basis_size = 0;
  double selection_score = 0;
  int score_rank = 0;
  double ridge = 0;
  std::vector<double> ridge_grid, ridge_scores;
  std::vector<std::string> warnings;
  TimescaleComparison comparison;
  // Not here: the held-out (prequential) score, which is the live score of pairs learned after
  // an earlier view, kept by whoever installs the scorers.
};

// The one timescale to quote (spectral_summary.h "HEADLINE"), with the stationarity verdict.
struct KoopmanHeadline {
  double timescale = 0;
  double stderr_ = 0;
  std::string view, note;
  bool nonstationary = false;
  std::string nonstationary_reason;
  // The oscillations ranked by the share of the observed channels' variance they carry, with
  // their harmonics grouped (core/spectral/mode_amplitudes.h CYCLES); periods the data can show
  // (at most half the time it covers).
  std::vector<Cycle> cycles;
};

// What the compressed CME contributes: its snapshot (predictions, the dictionary) and the
// Koopman decomposition: the consistent spectral-moments estimate (docs/algorithms.md §7) once
// its first epoch has data, else W^T K_YX of the CME.
struct CmeView {
  CmeSnapshot snapshot;
  KoopmanDecomposition koopman;
  VectorXd excess;  // per eigenpair: max(0, |mu| - 1) of non-stationary modes
  // Per eigenpair: the share of the observed channels' variance the mode carries and its RMS
  // (core/spectral/mode_amplitudes.h, docs/algorithms.md §7.3).
  ModeAmplitudes amplitudes;
  SpectrumReport spectrum;
  KoopmanHeadline headline;
  StationarityCheck stationarity;  // trend / transient (named in headline.nonstationary)
  double inverse_drift = 0;        // measured just before the snapshot
};

// Transition counts over the discretization; continuous models also carry the coordinates of
// state i (X atom i), num_states x d.
struct CountsView {
  CountsSnapshot counts;
  RowMatrixXd coordinates;
};

// Metastable clusters over the representative states (those with visits > 0).
struct ClustersView {
  MetastableClusters clusters;
  std::vector<int64_t> ids;  // representative i: atom index or state id
  RowMatrixXd coordinates;   // continuous: representative i's atom (rows as ids)
  VectorXd weights;          // stationary weight per representative
  Eigen::VectorXi labels;    // cluster per representative
  CoarseGrainedChain coarse;
  VectorXd timescales;  // of `coarse.transition` at lag dt: K - 1, docs/algorithms.md (3.11')
};

struct AggregationView {
  AggregationResult result;
  RowMatrixXd coordinates;  // continuous: atom of each row (p_kept x d)
};

// The forecast regression fitted from all pairs so far (docs/algorithms.md §11), with the
// learner's live prequential skill at the same moment: the regression's against persistence
// (one step) and the candidates' per horizon (the regression, its linear part, persistence).
struct ForecastView {
  // Scored pairs (at a horizon) from which the live skill decides between the candidates.
  static constexpr int64_t kSkillPairsToDecide = 8;
  // The regression serves over the least-squares AR only when its live mean squared error is
  // lower by more than this many standard errors of the paired difference.
  static constexpr double kLinearMarginStderrs = 1.0;

  ForecastModel model;
  ForecastSkill skill;
  std::vector<ForecastHorizonSkill> horizons;  // horizon h at index h - 1 (empty: none kept)
  int64_t samples = 0;                         // pairs the regression's sums hold

  // The candidate served at step h >= 1 (steps past the longest horizon kept take that one's):
  // the smallest live squared error over at least kSkillPairsToDecide scored forecasts of that
  // horizon (ties to the regression, then the linear part), except that the least-squares AR
  // serves in the regression's place unless the regression beats it by more than
  // kLinearMarginStderrs standard errors (the simpler model within one standard error;
  // docs/algorithms.md §11 "Served forecast", (11.2)). Before that, and for a state without
  // per-horizon skill, the one-step rule of before: persistence while the regression's one-step
  // ratio is above 1 over at least kSkillPairsToDecide pairs, else the regression.
  ForecastMethod MethodAt(int h) const;
  bool ServesPersistence() const { return MethodAt(1) == ForecastMethod::kPersistence; }

  // The forecasts of steps 1..horizon from state x (model.dim() doubles): row h from the
  // candidate MethodAt(h), each candidate iterated from x (persistence repeats x). horizon x dim.
  RowMatrixXd Rollout(const double* x, int horizon) const;
};

struct LearnerView {
  // Seconds per sub-view fitted ("koopman", "counts", "embedding", ...), in fit order; views a
  // model does not enable are not timed.
  std::vector<std::pair<std::string, double>> view_seconds;
  std::shared_ptr<const CmeView> cme;  // continuous models (never for discrete ones)
  // The learner's frozen input stage (scale "auto" and/or reduce K), else null. Every estimator
  // works in its coordinates: the coordinates of counts, clusters and aggregation below are
  // stored in the user's units already; the CME snapshot's atoms are not (callers invert them).
  std::shared_ptr<const InputStage> input;
  SubView<CountsView> counts;
  SubView<StateEmbedding> embedding;
  SubView<ClustersView> clusters;
  SubView<AggregationView> aggregation;
  SubView<LatentModel> latent;
  SubView<PredictiveStateModel> predictive;
  SubView<LagsView> lags;
  SubView<ForecastView> forecast;  // continuous models
  // The Koopman fit's rank-k VAMP model, to score the pairs learned after this view
  // (PrequentialVampE); null for the CME fallback.
  std::shared_ptr<const PrequentialModel> scorer;
};

// The metastable sets of `view` for a CK test (RunCkTests), or why there are none.
CkClusters CkSetsOf(const LearnerView& view);

// Fits every view of `snap`. Fails only on invalid options (InvalidArgument); otherwise each
// sub-view carries its own error.
absl::StatusOr<LearnerView> FitViews(const StreamingLearnerSnapshot& snap, const ViewOptions& options);

}  // namespace cmestream
