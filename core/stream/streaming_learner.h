// StreamingLearner: the per-sample learner of one model, the composite of every streaming
// estimator a model keeps, fed by one call per batch.
//
// WHAT IT DOES WITH A BATCH (Observe), pair by pair in stream order:
//   sigma warm-up   continuous models with sigma "auto" (cme.sigma == 0) buffer the first
//                   auto_sigma_warmup pairs (or fewer, >= kMinEarlyWarmup, when the owner calls
//                   EndWarmup), choose the bandwidth from them (SelectBandwidth,
//                   docs/algorithms.md §1.11), build the sigma-dependent estimators and feed them
//                   the buffered pairs; until then nothing else learns (ready() is false).
//   input scaling   with options.scale_inputs, the end of the warm-up first estimates the
//                   per-channel InputScaler from the buffered pairs (core/stream/input_scaler.h,
//                   §1.13) and freezes it; the bandwidth is chosen on the scaled pairs, and every
//                   pair and trajectory state after it reaches the kernel estimators (CME, counts,
//                   moments, spectral, lags, latent) scaled. The predictive-state accumulator (a
//                   linear-Gaussian model, §6) and the episode rule keep the user's units.
//   input reduction with options.reduce = K, the end of the warm-up then fits the InputReduction
//                   (core/stream/input_reduction.h, §1.15) on the scaled buffered pairs and
//                   freezes it: sigma and every kernel estimator work on the K-vectors it
//                   projects to (estimator_dim()), the change alarms on the raw pairs.
//   routing         each pair is scored by the installed prequential scorer (test, then train),
//                   then learned by the CME; the CME's nearest X atoms of x and y give the count
//                   chain's states (§2, (2.1)); the RFF embedding moments (§3.2) and the spectral
//                   moments (§7) take the pair, the spectral basis starting a new epoch when the
//                   X dictionary outgrew it. Discrete models: the ids go to the counts.
//   trajectories    a trajectory batch of n pairs is n + 1 consecutive states; they feed the
//                   latent accumulator (§5.1), the predictive-state accumulator (§6.1) and the lag
//                   statistics (§8.1) state by state, interleaved with the pairs. Unordered
//                   pairs feed the lag statistics at lag 1 only.
//   episode rule    a trajectory batch continues the open episode iff the previous trajectory
//                   batch had the same episode key (producer, episode) and ended with this
//                   batch's first state (the client repeats it); otherwise the sequence
//                   estimators start a new episode with that state.
//   lag basis       continuous lag statistics re-pick their basis from the X atoms whenever the
//                   spectral moments started an epoch, checked before each state or pair they
//                   take.
//   micro-batches   continuous models: the CME learns pairs in runs of run_pairs() (CmeRun,
//                   core/stream/cme_run.h, docs/algorithms.md §9.2) on the grid of the pair count;
//                   the counts, spectral moments and lag statistics, which read the CME's
//                   dictionary, take their pairs and states when the run is applied, each at the
//                   dictionary of its place in the stream. The open run is state (serialized) and
//                   is folded into copies by Snapshot(), so views see every pair.
// Every estimator's state is therefore a function of the pairs alone, not of where batches end
// (a producer that resumes with other batch sizes gets the same state, bit for bit).
//
// TWO CORES (SetSideExecutor, docs/algorithms.md §9.3): given an executor, the learner splits a
// continuous model's work per pair between the calling thread and three side lanes
// (core/common/side_lane.h) that a helper thread runs meanwhile. The calling thread keeps the
// input stage, the CME (ApplyToCme of each run) and the sequence estimators. One lane takes the
// change alarms (unless they reset the model) and, when that balances the two threads better by
// their operation counts (learner_cost.h), the scorer, embedding moments and forecast
// regression; every call returns after it ran dry. The other takes each applied run's events
// (counts, spectral moments, lag statistics) while the CME learns the next run, also across
// calls: the last run's events may still be applied after Observe returned, and whatever reads
// those estimators (Serialize, Snapshot, CopyForSnapshot, destruction, a move) waits for them
// first. The third takes the y side of each CME run (CompressedCme::SetSideLane), waited for
// inside the run. Each estimator sees its pairs in stream order, so the state is the same, bit for bit,
// with or without an executor; so are the summaries (ObserveSummary: a run's epochs and
// re-bases are counted when the next run is applied).
//
// COST: O(n (m^2 + N^2)) per batch of n pairs (m dictionary atoms, N random features), and no
// heap allocation per pair once sigma is known, except a count entry seen for the first time,
// a dictionary growing its capacity (geometrically), a new spectral epoch or lag basis
// (rare: epochs restart at 10 % new atoms) and a forecast refit (at pair counts 64, 128, ...,
// 4096, then every 4096 pairs). Choosing sigma costs O(n p^2 + p^3) once (§1.11).
//
// The estimators keep their own classes; this class owns them and decides what each one sees.
// It is not thread-safe (the daemon serializes batches per model).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/alarms/alarm_monitor.h"
#include "core/cme/compressed_cme.h"
#include "core/common/side_lane.h"
#include "core/common/types.h"
#include "core/counts/transition_counts.h"
#include "core/embedding/state_embedding.h"
#include "core/forecast/forecast_regression.h"
#include "core/io/fwd.h"
#include "core/latent/latent_model.h"
#include "core/predictive/predictive_state.h"
#include "core/spectral/prequential_score.h"
#include "core/spectral/spectral_moments.h"
#include "core/stream/cme_run.h"
#include "core/stream/delay_embedding.h"
#include "core/stream/input_reduction.h"
#include "core/stream/input_scaler.h"
#include "core/validation/lag_statistics.h"

namespace cmestream {

// How the kernel bandwidth was chosen (docs/algorithms.md §1.11). For a fixed sigma: automatic
// false and chosen = that sigma. For sigma "auto": automatic true, and once the warm-up ended
// the choice, the median pairwise distance, the candidates and their held-out VAMP-2 scores.
struct SigmaSelection {
  bool automatic = false;
  double chosen = 0;  // 0 while the warm-up buffers (and for discrete models)
  double median_distance = 0;
  std::vector<double> candidates;
  std::vector<double> scores;  // one per candidate, higher is better
  uint32_t warmup_pairs = 0;   // pairs the choice was made from
  // What was degenerate in the warm-up and the value chosen for it (BandwidthSelection::note;
  // empty when nothing was), e.g. "bandwidth from the nonzero distances (71 % ... are 0)".
  std::string note;
};

// One batch as the learner reads it (a view: it aliases the caller's buffers). n pairs;
// continuous: pair i = (x + i*dim, y + i*dim), dim doubles each; discrete: (x_ids[i], y_ids[i]).
// A trajectory batch of n pairs is the n + 1 states x_0..x_{n-1}, y_{n-1} with y_i = x_{i+1},
// in the wire's `states` form: y = x + dim (discrete: y_ids = x_ids + 1), required.
// `producer` and `episode` are the episode key of the episode rule (empty strings are a key
// like any other).
struct StreamBatch {
  int64_t n = 0;
  int dim = 0;  // continuous: the options' dim; discrete: 0
  const double* x = nullptr;
  const double* y = nullptr;
  const int64_t* x_ids = nullptr;
  const int64_t* y_ids = nullptr;
  bool trajectory = false;
  std::string_view producer;
  std::string_view episode;
  // A trajectory batch after a gap (a dropped sample): it starts a new episode whatever its key
  // and first state.
  bool gap = false;
  // Unix seconds the batch arrived (the daemon's log records it): the time of its alarms.
  double time = 0;

  bool discrete() const { return x_ids != nullptr; }
  const double* x_at(int64_t i) const { return x + i * dim; }
  const double* y_at(int64_t i) const { return y + i * dim; }
};

// What one Observe did.
struct ObserveSummary {
  int64_t pairs = 0;             // pairs taken (learned, or buffered for the warm-up)
  int64_t pending_warmup = 0;    // pairs buffered for the sigma warm-up after the batch
  bool warmup_finished = false;  // this batch completed the warm-up: sigma is chosen
  // CME (continuous, once sigma is known): atoms admitted and forced projections in this batch,
  // and the change of the sum of the forced projections' errors (§1.6).
  int64_t admitted_x = 0;
  int64_t admitted_y = 0;
  int64_t forced = 0;
  double forced_error = 0;
  // Spectral epochs started (§7) and lag bases re-picked (§8.1) by the CME runs whose successor
  // was applied in this batch (a run's are counted when the next run is applied, so that they do
  // not depend on whether a helper thread applies its events after the batch returned).
  int64_t spectral_epochs = 0;
  int64_t lag_rebases = 0;
  int64_t forecast_refits = 0;  // forecast regression refits (§11; they allocate)
  int64_t resets = 0;           // estimator restarts at an alarm (options.reset_on_alarm)
  // Trajectory batches: whether the batch started a new episode (false: it continued the open
  // one, or the model keeps no sequence estimator) and the states the sequence estimators took.
  bool episode_started = false;
  int64_t states = 0;
};

// Copies of what the views are built from (docs/algorithms.md, one section per estimator).
// Taking it changes nothing in the learner.
struct StreamingLearnerSnapshot {
  int64_t samples = 0;             // pairs learned (the warm-up's included once it ended)
  double inverse_drift = 0;        // the CME's last Gram-inverse drift check (§1.7)
  std::optional<CmeSnapshot> cme;  // continuous
  CountsSnapshot counts;
  std::optional<EmbeddingMomentsSnapshot> moments;                   // continuous
  std::optional<MultiViewAccumulator::Statistics> latent;            // options.latent
  std::optional<PredictiveStateAccumulator::Statistics> predictive;  // options.window > 0
  std::optional<SpectralMomentsSnapshot> spectral;                   // continuous
  // Prequential score window: the view it scores and its VAMP-E over the pairs learned since
  // the scorer was installed; empty before the first one.
  struct Prequential {
    uint64_t view_version = 0;
    int64_t pairs = 0;
    double score = 0;
  };
  std::optional<Prequential> prequential;
  std::optional<LagStatisticsSnapshot> lags;  // unless options.lags is empty
  // options.scale_inputs, once the warm-up ended: the frozen scaler; every coordinate above
  // (atoms, lag basis, RFF moments) is in its scaled units.
  std::optional<InputScaler> scaler;
  // options.reduce > 0, once the warm-up ended: the frozen reduction after the scaler; every
  // coordinate above is then a K-vector of its projection.
  std::optional<InputReduction> reduction;
  std::optional<ForecastMomentsSnapshot> forecast;  // continuous
};

class StreamingLearner {
 public:
  struct Options {
    // Exactly one of: dim >= 1 (continuous states in R^dim) or num_states >= 1 (discrete ids
    // in [0, num_states)).
    int dim = 0;
    int num_states = 0;
    // The CME (continuous only). cme.dim must equal dim; cme.sigma > 0 is a fixed bandwidth,
    // 0 means "auto": chosen from the first auto_sigma_warmup pairs. The same sigma is the
    // bandwidth of the RFF features, the spectral basis and the lag basis.
    CompressedCme::Options cme;
    int auto_sigma_warmup = 1000;  // >= 20 (SelectBandwidth's minimum)
    // Per-channel robust scaling (InputScaler), estimated with sigma at the end of the
    // warm-up; requires sigma "auto" (an explicit sigma is in the user's units).
    bool scale_inputs = false;
    // Input reduction (InputReduction, docs/algorithms.md §1.15): 0 = off, else the K < dim
    // leading principal directions of the (scaled) warm-up, frozen with sigma; requires sigma
    // "auto", no delays and auto_sigma_warmup >= InputReduction::kRowsPerDirection * K.
    int reduce = 0;
    // Every random choice derives from it: bandwidth selection, RFF features (seed), latent
    // features (seed) and reservoir (seed + 7).
    uint64_t seed = 1;
    // Per-sample decay of the counts, embedding moments and spectral moments, in [1e-6, 1];
    // 1 = none.
    double forgetting = 1.0;
    int rff_features = 256;  // N, random Fourier features of the embedding moments
    // F, random Fourier features of the forecast regression (§11); 0: min(rff_features, 128)
    // (learner_options::ForecastFeatureCount; the daemon sets it from ModelConfig.forecast_features).
    int forecast_features = 0;
    // The latent multi-view accumulator (§5): RFF features (continuous, N = rff_features) or
    // one-hot ids (discrete), and a third-moment reservoir of `reservoir` triples.
    bool latent = false;
    int reservoir = 20000;
    // The predictive-state accumulator (§6) with history (and, continuous, future) length
    // `window`; 0 = none.
    int window = 0;
    // Lag statistics (§8) at these lags (strictly increasing, in 1..LaggedMoments::kMaxLag);
    // empty = none. Continuous models take their lag basis (at most lag_basis_atoms >= 2 of
    // the X atoms) once sigma is known.
    std::vector<int> lags = {1};
    int lag_basis_atoms = 32;
    // The forecast regression (continuous, docs/algorithms.md §11) scores its live one-step skill
    // on the last forecast_scored_dims components of a state (the newest observation of a delay
    // vector); 0 = all of them.
    int forecast_scored_dims = 0;
    // Delay embedding (docs/algorithms.md §1.14, core/stream/delay_embedding.h): with delays
    // D > 1 the model reads trajectories of raw rows of dim / D channels and learns on windows
    // of D of them, delay_stride rows apart (dim values, oldest row first); pairs are refused.
    // Continuous only; dim must be a multiple of D.
    int delays = 1;
    int delay_stride = 1;
    // Change alarms (core/alarms/alarm_monitor.h, docs/algorithms.md §12.8): every pair is scored
    // before anything learns it (the warm-up's pairs as they arrive); alarm_rate is the target
    // false alarms per 10,000 stationary pairs.
    bool alarms = false;
    double alarm_rate = 1;
    // With alarms: every estimator restarts at the pair that raised an alarm (the daemon's
    // on_change "reset"), as if the model were created there; the alarms and the delay window
    // continue. Not state: a function of the pairs, like everything else.
    bool reset_on_alarm = false;
    // Pairs per CME micro-batch (docs/algorithms.md §9.2), in [1, kMaxMicroBatch]; 1 = the
    // sequential recursion, pair by pair. The run actually used is run_pairs().
    int micro_batch = 256;
    static constexpr int kMaxMicroBatch = 4096;
    // A run holds at most kRunDoubles / dim pairs (its buffers stay under ~8 MB at any dim).
    static constexpr int kRunDoubles = 1 << 18;
    // Longest producer and episode id of an episode key, in bytes (Observe refuses a longer
    // one, Deserialize a longer stored one).
    size_t max_producer_bytes = 256;
    size_t max_episode_bytes = 256;

    bool discrete() const { return num_states > 0; }
    int input_dim() const { return delays > 1 ? dim / delays : dim; }  // values per raw row
    // The dimension the kernel estimators work in: reduce when reducing, else dim.
    int estimator_dim() const { return reduce > 0 ? reduce : dim; }
    bool auto_sigma() const { return !discrete() && cme.sigma == 0; }
    // Pairs per CME run: micro_batch, capped by kRunDoubles / dim (at least 1).
    int run_pairs() const;
    // OK, or InvalidArgument naming the field (or the estimator whose own options would be
    // invalid) and what was expected. Each estimator's options are derived from these and
    // checked by that estimator's Validate().
    absl::Status Validate() const;
    // The checks of Validate() that depend on the bandwidth, with `sigma` itself: for a
    // bandwidth derived from data (sigma auto), which goes through the same checks as a user's.
    absl::Status ValidateSigma(double sigma) const;
  };

  // requires: options.Validate().ok() (checked; aborts otherwise, like the estimators).
  // Allocates what the options imply: the warm-up buffer (sigma auto), or the CME and the
  // sigma-dependent estimators (fixed sigma), the counts, the predictive accumulator.
  explicit StreamingLearner(const Options& options);
  StreamingLearner(StreamingLearner&&) noexcept;
  StreamingLearner& operator=(StreamingLearner&&) noexcept;
  ~StreamingLearner();

  // Learns a batch (see the top of this file). The batch is checked first: its form must match
  // the model (dim, or ids for a discrete model; a trajectory in the states form), every value
  // finite, every id in [0, num_states), the episode key within its bounds; otherwise
  // InvalidArgument and nothing changes. Values and ids are checked by CheckFiniteValues and
  // CheckStateIds (core/common/validate.h) on the wire's fields (x and y, or states; x_ids and
  // y_ids, or state_ids), so the messages are the daemon's, e.g. "field states value 9 (state 4,
  // component 1) is nan, expected a finite number". An empty batch (n == 0) changes nothing.
  absl::StatusOr<ObserveSummary> Observe(const StreamBatch& batch);

  // The copies the views need, or nullopt while the sigma warm-up buffers. O(model size);
  // changes nothing (buffered pairs are folded into copies).
  std::optional<StreamingLearnerSnapshot> Snapshot() const;

  // Snapshot() in two steps, so that an owner can hold its lock only for the copy:
  // CopyForSnapshot() takes the copies (O(model size), the cost of Snapshot() without an open
  // run), Finish() folds the open CME run into them (up to run_pairs() pairs of learning on
  // the copies), forms the CME's W from its factors (O(m^3)) and needs no access to the learner.
  class SnapshotCopy {
   public:
    StreamingLearnerSnapshot Finish() &&;

   private:
    friend class StreamingLearner;
    StreamingLearnerSnapshot snap_;  // the parts that need no fold, already taken
    // With an open run: copies of what reads the CME's dictionary, and of the run.
    std::optional<CompressedCme> cme_;
    std::optional<TransitionCounts> counts_;
    std::optional<SpectralMoments> spectral_;
    std::optional<LagStatistics> lags_;
    std::optional<CmeRun> run_;
  };
  std::optional<SnapshotCopy> CopyForSnapshot() const;

  // Test-then-train score: from now on every pair the CME learns is first scored by `score`
  // (a view's VAMP model); returns the scorer it replaces (free it outside any lock). The
  // window is not learner state: neither serialized nor restored.
  std::unique_ptr<PrequentialVampE> InstallPrequential(std::unique_ptr<PrequentialVampE> score, uint64_t view_version);

  // Lends the learner a helper thread for part of each batch's work (see TWO CORES above); null
  // (the default) keeps everything on the calling thread. Not state; not owned: the executor
  // outlives the learner's calls.
  void SetSideExecutor(SideExecutor* executor);

  // Caps the CME's dictionary below options.cme.max_dict for the pairs that follow
  // (CompressedCme::set_growth_cap: forced projections instead of admissions beyond it; 0:
  // none). The daemon's memory budget sets it before each batch and logs it with the batch, so
  // a replay applies the same cap. Not state; kept across the CME's creation at the warm-up's end.
  void SetDictionaryCap(int cap);
  int dictionary_cap() const { return dictionary_cap_; }

  const Options& options() const { return options_; }
  bool ready() const { return options_.discrete() || cme_ != nullptr; }  // sigma is known
  // Pairs learned (not counting the warm-up buffer), the open CME run's included.
  int64_t samples() const;
  // samples() plus the pairs learned before each reset at an alarm (options.reset_on_alarm),
  // since construction or Deserialize: never decreases (an owner's "is there new data").
  int64_t learned_total() const { return retired_ + samples(); }
  int64_t pending_warmup() const { return warmup_n_; }
  // Ends the sigma warm-up early on the pairs buffered so far (>= kMinEarlyWarmup of them):
  // the scaler and sigma are chosen from them and the learner built, as when the warm-up fills
  // (bit for bit the learner of a warm-up of that many pairs, except that the lag statistics and
  // the latent accumulator start with the next batch's states, where a warm-up that fills
  // mid-batch hands them the state after its last pair). The daemon calls it for an explicit
  // refresh and logs it first, so replay ends the warm-up at the same pair.
  // FailedPrecondition (nothing changes) when the learner is ready already or too few pairs
  // are buffered.
  static constexpr int64_t kMinEarlyWarmup = 50;
  absl::Status EndWarmup();
  // The frozen scaler (options.scale_inputs, once the warm-up ended), else null.
  const InputScaler* scaler() const { return scaler_ ? &*scaler_ : nullptr; }
  // The frozen reduction (options.reduce > 0, once the warm-up ended), else null.
  const InputReduction* reduction() const { return reduction_ ? &*reduction_ : nullptr; }
  const SigmaSelection& sigma_selection() const { return sigma_selection_; }
  // The CME (null for discrete models and during the warm-up): counters, dictionary sizes,
  // last drift, as of the last applied run (the open run's pairs are not in it yet).
  const CompressedCme* cme() const { return cme_.get(); }
  // The spectral moments' basis (atoms) as of the last reported run (see spectral_basis_); 0: none.
  int spectral_basis() const { return spectral_basis_; }
  // The spectral moments' live basis and the frozen epoch's basis (atoms; 0: none) now, and
  // when the next re-base may come, for the daemon's memory budget: waits for the last run's
  // events first (TWO CORES), as Serialize does. Without spectral moments (sigma "auto" still
  // buffering) all 0.
  struct SpectralBases {
    int live = 0;
    int frozen = 0;
    int64_t samples = 0;      // pairs the spectral moments observed
    int64_t rebase_from = 0;  // no new epoch before they observed this many (RE-BASE SCHEDULE)
  };
  SpectralBases SpectralBasesNow() const;
  // The forecast regression (null for discrete models and during the warm-up).
  const ForecastRegression* forecast() const { return forecast_.get(); }
  // The change alarms (options.alarms), else null.
  const AlarmMonitor* alarms() const { return alarms_.get(); }
  // The per-pair anomaly scores of the pairs the alarms score next go to `sink`, one a pair
  // (AlarmMonitor::set_score_sink; a no-op without alarms). Clear it (nullptr) after Observe.
  void SetAnomalyScoreSink(double* sink) {
    if (alarms_) alarms_->set_score_sink(sink);
  }

  // SERIALIZATION. The per-sample state, everything Observe reads or writes except the sigma
  // selection (a report, which the caller stores in its own form, right before these bytes
  // in the daemon's MODL object, service/storage/snapshot.h), in this order:
  //   i64 warm-up pairs w, then (w > 0) the w x d buffered x and y matrices;
  //   bool episode open, string episode producer, string episode id, doubles last state;
  //   bool + CCME, CNTS, bool + EMOM, bool + MVAC, bool + PSAC, bool + SPMO, bool + LAGS
  //   (each beside its estimator: core/cme/compressed_cme_io.cc and the like, core/validation/lag_statistics.cc);
  //   with a CME, the open CME run (CmeRun::Serialize);
  //   version >= 5, with a CME and options.scale_inputs: the frozen InputScaler (nothing for an
  //   unscaled model);
  //   version >= 6: bool + FCRG (the forecast regression, core/forecast/forecast_regression.h);
  //   version >= 7, with delays > 1: the delay embedding's open episode (DelayEmbedding::
  //   Serialize; nothing for a model without delays, whose bytes are those of version 6);
  //   version >= 8, with options.alarms: the AlarmMonitor (nothing for a model without alarms,
  //   whose bytes are those of version 7);
  //   version >= 9, with a CME and options.reduce > 0: the frozen InputReduction (nothing for a
  //   model without, whose bytes are those of version 8).
  // Version kStateVersion; version 1 has no spectral moments (restored fresh when the CME
  // exists), versions 1 and 2 no lag statistics (restored fresh, empty), versions 1 to 3 no
  // open run (restored empty: the next run starts at the restored pair count); versions 1 to 4
  // cannot hold a scaled model (DataLoss if the options ask for one); versions 1 to 5 have no
  // forecast regression (restored fresh, empty: it learns from the next pair on); versions 1 to
  // 6 cannot hold a model with delays (DataLoss if the options ask for them); versions 1 to 7
  // have no alarms (a model whose options ask for them starts them fresh at the restored pair
  // count: its alarm indexes then count from there); versions 1 to 8 cannot hold a reduced
  // model (DataLoss if the options ask for one).
  // Deserialize checks every part against `options` (the same options the learner had): a
  // mismatch or a corrupt part is DataLoss naming the part and the offset. Serialize followed
  // by Deserialize and the same batches gives the same state, bit for bit, as never stopping.
  static constexpr uint32_t kStateVersion = 9;
  void Serialize(io::Writer& w) const;
  static absl::StatusOr<StreamingLearner> Deserialize(io::Reader& r, const Options& options, uint32_t version,
                                                      SigmaSelection sigma_selection);

 private:
  absl::Status Check(const StreamBatch& batch) const;
  // Observe after the delay embedding (the batch's states are the estimators' states).
  absl::StatusOr<ObserveSummary> ObserveStates(const StreamBatch& batch);
  // Warm-up buffer, or FeedPair. Not OK only when the warm-up ends here and FinishWarmup fails.
  absl::Status FeedLearner(const double* x, const double* y);
  void FeedPair(const double* x, const double* y);     // scorers (now or on the lane); the rest via the run
  void FeedScorers(const double* x, const double* y);  // prequential, moments, forecast
  void ApplyRun();                                     // applies (or hands on) and empties the open CME run
  // The side lanes (TWO CORES): jobs, and the owner's end of a call.
  static void SideAlarms(void* learner, void* batch, int64_t begin, int64_t end);
  static void SideScorers(void* learner, void* run, int64_t begin, int64_t end);
  static void SideEvents(void* learner, void* run, int64_t, int64_t);
  int64_t PushScorers();                                       // the open run's pending scorer pairs
  void PushSideAlarms(const StreamBatch& batch, int64_t end);  // pairs alarms_next_ .. end - 1
  void FlushSide();         // the end of a call: hands on what is left, waits for the scorers' lane
  void ChooseScorerLane();  // where the open run's scorers go (by operation counts)
  void ReportRunEffects(const CmeRunEffects& e);  // into batch_
  // Chooses the scaler, reduction and sigma from the warm-up and builds the estimators. Every
  // data-derived option goes through the validation a user's option does (Options::
  // ValidateSigma); Internal, naming it, if one fails (the learner is then unusable: the
  // daemon marks its model failed). Degenerate warm-ups have defined values (§1.11.1, §1.13).
  absl::Status FinishWarmup();
  // The pair or state as the kernel estimators see it: scaled (and reduced) into a scratch
  // buffer of estimator_dim() values with a scaler or a reduction, else `v` itself.
  const double* Scaled(const double* v, std::vector<double>& scratch);
  // Moments, spectral, lags, latent. requires: options_.ValidateSigma(sigma) is OK.
  void CreateSigmaDependent(double sigma);
  // Every estimator fresh, as before the first pair (constructor, reset at an alarm).
  void CreateEstimators();
  // Adds to batch_ what the CME and the regression did since `before` / `refits_before`.
  void CountBatchEffects(const CompressedCme::Counters& before, int64_t refits_before);
  // State k (0..n) of a trajectory batch as doubles (discrete: the id, in id_scratch_).
  const double* TrajectoryState(const StreamBatch& batch, int64_t k);
  bool BeginEpisodeBatch(const double* start, const StreamBatch& batch);  // true: new episode
  void EndEpisodeBatch(const double* last, const StreamBatch& batch);
  void ObserveSequence(const double* state);  // one state to latent + predictive + lags

  // The side lanes (TWO CORES; not state). Declared first: moving a learner waits for its events'
  // lane before any estimator moves (every call leaves the scorers' lane idle).
  struct Lanes {
    SideExecutor* executor = nullptr;   // not owned; null: one thread
    std::shared_ptr<SideLane> scorers;  // alarms and scorers: idle between calls
    std::shared_ptr<SideLane> events;   // run events: the last run's may go on after a call
    std::shared_ptr<SideLane> cme;      // the CME's y side of a run: idle outside ObserveBatch
    Lanes() = default;
    Lanes(Lanes&& o) noexcept;
    Lanes& operator=(Lanes&& o) noexcept;
    void Settle() const;  // returns once every lane ran dry
  };
  Lanes lanes_;
  // Gives cme_ the lane (or none) and the dictionary cap after it is created or the executor changes.
  void AttachCmeLane();
  int dictionary_cap_ = 0;  // SetDictionaryCap; not state
  Options options_;
  std::unique_ptr<CompressedCme> cme_;  // continuous, once sigma is known
  RowMatrixXd warmup_x_, warmup_y_;     // auto_sigma_warmup x dim, only while sigma "auto" buffers
  int64_t warmup_n_ = 0;
  SigmaSelection sigma_selection_;
  std::optional<InputScaler> scaler_;                       // scale_inputs, once the warm-up ended
  std::optional<InputReduction> reduction_;                 // reduce > 0, once the warm-up ended
  std::vector<double> scaled_x_, scaled_y_, scaled_state_;  // estimator_dim() each, with a scaler or reduction
  std::vector<double> reduce_scratch_;                      // dim, with a scaler and a reduction
  std::unique_ptr<TransitionCounts> counts_;
  std::unique_ptr<EmbeddingMoments> moments_;               // continuous, once sigma is known
  std::unique_ptr<MultiViewAccumulator> latent_;            // options.latent (continuous: once sigma is known)
  std::unique_ptr<PredictiveStateAccumulator> predictive_;  // window > 0
  // Exact spectral moments over the CME's X atoms: continuous, once sigma is known; fed with
  // every pair the CME sees, its epoch follows the X dictionary.
  std::unique_ptr<SpectralMoments> spectral_;
  // Lagged moments and counts: discrete models (when lags are configured), continuous ones
  // once sigma is known. Trajectory states feed every lag; unordered pairs feed lag 1.
  std::unique_ptr<LagStatistics> lags_;
  // Continuous, once sigma is known: the one-step forecast regression, fed with every pair.
  std::unique_ptr<ForecastRegression> forecast_;
  // Continuous, once sigma is known: the open CME run.
  std::unique_ptr<CmeRun> run_;
  // Episode rule: key and last state of the last trajectory batch observed.
  bool episode_open_ = false;
  std::string episode_producer_, episode_id_;
  std::vector<double> episode_last_;  // dim values (discrete: the id)
  double id_scratch_ = 0;             // a discrete id as a double (TrajectoryState)
  // Delay embedding (options.delays > 1): the open episode's last rows, and the windows of the
  // batch in progress (scratch, not state).
  std::unique_ptr<DelayEmbedding> delay_;
  std::vector<double> delay_windows_;
  // Change alarms (options.alarms): fed every pair before anything learns it.
  std::unique_ptr<AlarmMonitor> alarms_;
  // Prequential scorer (not state) and the view it scores.
  std::unique_ptr<PrequentialVampE> prequential_;
  uint64_t prequential_view_ = 0;
  // TWO CORES (not state: between calls pending_scorers_ is 0 and spare_run_ holds at most the
  // run whose events the events' lane may still be applying).
  std::unique_ptr<CmeRun> spare_run_;  // the run applied last (its buffer is reused next)
  int64_t spare_events_ticket_ = 0;    // its events' job (events lane)
  int64_t spare_scorers_ticket_ = 0;   // the last job reading its pairs on the scorers' lane
  bool scorers_on_side_ = false;       // the open run's pairs reach the scorers on the lane
  int pending_scorers_ = 0;            // the open run's last pairs not yet handed to them
  int scorer_split_atoms_ = 0;         // the dictionary size scorers_on_side_ was chosen at
  bool side_alarms_ = false;           // this batch's alarms run on the scorers' lane
  int64_t alarms_next_ = 0;            // the batch's first pair not yet handed to them
  // The last applied run's epochs and re-bases, counted when the next run is applied (one
  // thread; with an executor they wait in spare_run_).
  CmeRunEffects held_effects_;
  // The spectral moments' basis as the last reported run left it (ReportRunEffects: one run
  // behind with or without helpers; exact after a restore); 0: none yet. For PerPairCost.
  int spectral_basis_ = 0;
  ObserveSummary batch_;  // the summary of the batch in progress (Observe)
  int64_t retired_ = 0;   // pairs learned before the resets (learned_total; not state)
};

}  // namespace cmestream
