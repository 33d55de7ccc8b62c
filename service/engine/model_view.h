// Immutable, versioned views of a model, built by the refresh scheduler and read by queries
// (CONTRIBUTING.md "Data flow", "Views are immutable").
//
// A ModelView never aliases learner buffers: queries hold a shared_ptr for one call and never
// wait for ingestion. Each estimator contributes an optional sub-view; later issues add
// members next to `cme` (embedding, clusters, aggregation, latent, predictive) without
// touching the ingestion or refresh plumbing.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include <string>
#include <utility>
#include <vector>
#include "cmestream/v1/cmestream.pb.h"

#include "core/aggregation/soft_aggregation.h"
#include "core/cluster/metastable.h"
#include "core/cme/compressed_cme.h"
#include "core/counts/transition_counts.h"
#include "core/embedding/state_embedding.h"
#include "core/forecast/forecast_regression.h"
#include "core/koopman/koopman.h"
#include "core/latent/latent_model.h"
#include "core/predictive/predictive_state.h"
#include "core/spectral/spectral_estimate.h"
#include "core/spectral/spectral_summary.h"
#include "core/stream/input_scaler.h"
#include "service/engine/lags.h"

namespace cmestream::service {

// Eigenpairs computed and kept per view; KoopmanRequest.top may ask for at most this many.
inline constexpr int kStoredEigenpairs = 16;

// Relative disagreement of the slowest timescales of the Koopman, count-chain and embedding
// views above which the reply and the metrics warn (docs/user-guide.md "Which estimate").
// The count chain and the embedding agree within 2-7 % on the four-well system, and a
// consistent Koopman estimate within 5 % of the truth: 25 % is far outside sampling noise.
// Which timescale of a view is compared (service/engine/refresh.cc CompareTimescales): its slowest
// *resolved* non-stationary one, i.e. skipping the stationary mode, Koopman modes flagged
// with an excess |mu| > 1, and any timescale that is not finite or exceeds the time the data
// covers (samples x dt), which the data cannot tell from a constant (Duffing's embedding
// singular value 1 - 1e-12 reads 1.7e11). A view without such a timescale is left out (NaN);
// disagreement = (max - min) / min over the views left, so it is always finite.
inline constexpr double kTimescaleDisagreementThreshold = 0.25;

// What the compressed CME contributes: its snapshot (Predict, GetDictionary) and the Koopman
// decomposition served by GetKoopman: the consistent spectral-moments estimate
// (docs/algorithms.md §7) once its first epoch has data, else W^T K_YX of the CME.
struct CmeView {
  CmeSnapshot snapshot;
  KoopmanDecomposition koopman;
  VectorXd excess;                 // per eigenpair: max(0, |mu| - 1) of non-stationary modes
  v1::SpectrumInfo spectrum;       // estimator, epoch, score, warnings, cross-view comparison
  v1::KoopmanHeadline headline;    // the one timescale to quote (core/spectral/spectral_summary.h)
  StationarityCheck stationarity;  // trend / transient (named in headline.nonstationary)
  double inverse_drift = 0;        // measured just before the snapshot
};

// A sub-view that may be missing: `value` is set on success; otherwise `error` says why (not
// enough data yet, a numerical failure, or the feature is off and how to enable it). Queries
// answer FAILED_PRECONDITION "model 'x': <what> not available: <error>".
template <class T>
struct SubView {
  std::shared_ptr<const T> value;
  std::string error;
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

// The forecast regression fitted at refresh from all pairs so far (docs/algorithms.md §11),
// with the learner's live prequential skill at the same moment.
struct ForecastView {
  ForecastModel model;
  ForecastSkill skill;
  int64_t samples = 0;  // pairs the regression's sums hold
};

struct ModelView {
  uint64_t version = 0;  // 1, 2, ... per model
  uint64_t samples = 0;  // learner samples the view reflects
  std::chrono::steady_clock::time_point built_at;
  double build_seconds = 0;
  // Seconds per sub-view built in this refresh ("koopman", "counts", "embedding", ...), in
  // build order; the same figures as the cmestream_view_build_seconds histogram.
  std::vector<std::pair<std::string, double>> view_seconds;
  std::shared_ptr<const CmeView> cme;  // set once the learner exists (never for discrete models)
  // The model's frozen input scaler (ModelConfig.scale "auto"), else null. Every estimator of
  // this view works in its scaled coordinates: queries scale the points they are sent
  // (ScaleQueryRows) and invert what they report in state space (atoms, predictions); the
  // coordinates of counts, clusters and aggregation are stored inverted already.
  std::shared_ptr<const InputScaler> scaler;
  SubView<CountsView> counts;
  SubView<StateEmbedding> embedding;
  SubView<ClustersView> clusters;
  SubView<AggregationView> aggregation;
  SubView<LatentModel> latent;
  SubView<PredictiveStateModel> predictive;
  SubView<LagsView> lags;          // lag scans and CK tests (service/engine/lags.h)
  SubView<ForecastView> forecast;  // continuous models

  v1::ViewInfo Info() const {
    v1::ViewInfo info;
    info.set_version(version);
    info.set_samples(samples);
    info.set_age_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - built_at).count());
    info.set_build_seconds(build_seconds);
    for (const auto& [name, seconds] : view_seconds) (*info.mutable_build_seconds_by_view())[name] = seconds;
    return info;
  }
};

}  // namespace cmestream::service
