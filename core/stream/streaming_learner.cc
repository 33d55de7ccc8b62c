#include "core/stream/streaming_learner.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "core/cme/bandwidth.h"
#include "core/common/validate.h"
#include "core/embedding/feature_map.h"
#include "core/spectral/landmarks.h"
#include "core/stream/learner_cost.h"
#include "core/stream/streaming_learner_options.h"

namespace cmestream {
namespace {

// Pairs per alarms job on the side lane: a few jobs per run keep the lane's queue short.
constexpr int64_t kSideAlarmPairs = 128;

}  // namespace

StreamingLearner::StreamingLearner(const Options& options) : options_(options) {
  if (!options_.Validate().ok()) std::abort();  // a programming error: callers validate first
  episode_last_.assign(options_.discrete() ? 1 : options_.dim, 0.0);
  if (options_.delays > 1) {
    delay_ = std::make_unique<DelayEmbedding>(
        DelayEmbedding::Options{options_.input_dim(), options_.delays, options_.delay_stride});
  }
  if (options_.alarms) alarms_ = std::make_unique<AlarmMonitor>(learner_options::Alarms(options_));
  CreateEstimators();
}

void StreamingLearner::CreateEstimators() {
  // Every estimator as the options make it before the first pair (the delay embedding and the
  // alarms are not estimators: they are kept across a reset).
  lanes_.Settle();  // nothing on a lane may still use them
  spare_run_.reset();
  spare_events_ticket_ = 0;
  spare_scorers_ticket_ = 0;
  pending_scorers_ = 0;
  scorer_split_atoms_ = 0;
  held_effects_ = CmeRunEffects{};
  spectral_basis_ = 0;
  cme_.reset();
  moments_.reset();
  latent_.reset();
  spectral_.reset();
  lags_.reset();
  forecast_.reset();
  run_.reset();
  scaler_.reset();
  reduction_.reset();
  prequential_.reset();  // it scored against a view of the old statistics
  sigma_selection_ = SigmaSelection{};
  warmup_n_ = 0;
  episode_open_ = false;
  counts_ = std::make_unique<TransitionCounts>(learner_options::Counts(options_));
  predictive_.reset();
  if (options_.window > 0)
    predictive_ = std::make_unique<PredictiveStateAccumulator>(learner_options::Predictive(options_));
  if (options_.discrete()) {
    if (options_.latent) latent_ = std::make_unique<MultiViewAccumulator>(learner_options::Latent(options_, 0));
    if (!options_.lags.empty()) lags_ = std::make_unique<LagStatistics>(learner_options::Lags(options_, 0));
  } else if (options_.auto_sigma()) {
    warmup_x_.resize(options_.auto_sigma_warmup, options_.dim);
    warmup_y_.resize(options_.auto_sigma_warmup, options_.dim);
    sigma_selection_.automatic = true;
  } else {
    cme_ = std::make_unique<CompressedCme>(learner_options::Cme(options_, options_.cme.sigma));
    AttachCmeLane();
    CreateSigmaDependent(options_.cme.sigma);
    sigma_selection_.chosen = options_.cme.sigma;
  }
}

StreamingLearner::StreamingLearner(StreamingLearner&&) noexcept = default;
StreamingLearner& StreamingLearner::operator=(StreamingLearner&&) noexcept = default;
StreamingLearner::~StreamingLearner() { lanes_.Settle(); }  // before any estimator goes

StreamingLearner::Lanes::Lanes(Lanes&& o) noexcept {
  o.Settle();
  executor = o.executor;
  scorers = std::move(o.scorers);
  events = std::move(o.events);
  cme = std::move(o.cme);
}

StreamingLearner::Lanes& StreamingLearner::Lanes::operator=(Lanes&& o) noexcept {
  if (this == &o) return *this;
  Settle();  // this learner's estimators are about to be replaced
  o.Settle();
  executor = o.executor;
  scorers = std::move(o.scorers);
  events = std::move(o.events);
  cme = std::move(o.cme);
  return *this;
}

void StreamingLearner::Lanes::Settle() const {
  if (scorers) scorers->WaitAll();
  if (events) events->WaitAll();
  if (cme) cme->WaitAll();
}

StreamingLearner::SpectralBases StreamingLearner::SpectralBasesNow() const {
  lanes_.Settle();  // the last run's events may still start an epoch (TWO CORES)
  if (!spectral_) return {};
  const SpectralMoments& s = *spectral_;
  // SpectralMoments::ShouldStartEpoch: samples() >= rebase_growth x the pairs before the live epoch.
  const double before = static_cast<double>(s.samples() - s.epoch_samples());
  const int64_t from = s.basis_size() == 0 ? 0 : static_cast<int64_t>(std::ceil(s.options().rebase_growth * before));
  return {s.basis_size(), s.previous_basis_size(), s.samples(), from};
}

void StreamingLearner::CreateSigmaDependent(double sigma) {
  absl::StatusOr<FeatureMap> features =
      FeatureMap::Rff(options_.estimator_dim(), options_.rff_features, sigma, options_.seed);
  // Options::Validate() checked these arguments; a failure here is a programming error.
  if (!features.ok()) std::abort();
  moments_ = std::make_unique<EmbeddingMoments>(std::make_shared<const FeatureMap>(*std::move(features)),
                                                learner_options::Moments(options_));
  spectral_ = std::make_unique<SpectralMoments>(learner_options::Spectral(options_, sigma));
  if (!options_.lags.empty()) lags_ = std::make_unique<LagStatistics>(learner_options::Lags(options_, sigma));
  if (options_.latent) latent_ = std::make_unique<MultiViewAccumulator>(learner_options::Latent(options_, sigma));
  run_ = std::make_unique<CmeRun>(options_.estimator_dim(), options_.run_pairs());
  if (options_.estimator_dim() <= learner_options::kMaxForecastDim) {
    forecast_ = std::make_unique<ForecastRegression>(learner_options::ForecastFeatures(options_, sigma),
                                                     learner_options::Forecast(options_));
  }
  ChooseScorerLane();
}

void StreamingLearner::SetSideExecutor(SideExecutor* executor) {
  lanes_.Settle();
  // The last run's effects wait where the one-thread learner keeps them.
  if (spare_run_) held_effects_ = spare_run_->applied_effects();
  spare_run_.reset();
  lanes_.executor = executor;
  if (executor == nullptr) {
    lanes_.scorers.reset();
    lanes_.events.reset();
    lanes_.cme.reset();
  } else if (!lanes_.scorers) {
    lanes_.scorers = std::make_shared<SideLane>();
    lanes_.events = std::make_shared<SideLane>();
    lanes_.cme = std::make_shared<SideLane>();
  }
  AttachCmeLane();
  scorer_split_atoms_ = 0;
  if (cme_) ChooseScorerLane();
}

void StreamingLearner::AttachCmeLane() {
  if (!cme_) return;
  cme_->SetSideLane(lanes_.executor ? lanes_.cme.get() : nullptr, lanes_.executor);
  cme_->set_growth_cap(dictionary_cap_);
}

void StreamingLearner::SetDictionaryCap(int cap) {
  dictionary_cap_ = cap;
  if (cme_) cme_->set_growth_cap(cap);
}

void StreamingLearner::ChooseScorerLane() {
  // Between calls and at run boundaries only (no scorer pair is pending, though a pushed job may
  // still run), so a change of lane leaves every scorer's stream of pairs whole.
  if (!lanes_.executor || !cme_) {
    scorers_on_side_ = false;
    return;
  }
  // The split follows the dictionary: chosen again when it moved by 10 % (rare, and never at
  // the cap: PerPairCost allocates its report).
  const int atoms = std::max(1, cme_->dict_x_size());
  if (scorer_split_atoms_ > 0 && 10 * std::abs(atoms - scorer_split_atoms_) < scorer_split_atoms_) return;
  scorer_split_atoms_ = atoms;
  double owner = 0, side = 0, scorers = 0;
  for (const EstimatorCost& c : PerPairCost(options_, atoms, spectral_basis_)) {
    if (c.name == "embedding" || c.name == "forecast") {
      scorers += c.multiply_adds;
    } else if (c.name == "counts" || c.name == "spectral" || c.name == "lags" ||
               (c.name == "alarms" && !options_.reset_on_alarm)) {
      side += c.multiply_adds;
    } else {
      owner += c.multiply_adds;  // input, cme, latent, predictive (and alarms that reset)
    }
  }
  // The scorers join the lighter lane: max(owner + s, side) or max(owner, side + s), whichever is less.
  const bool on_side = side < owner;
  // Back to this thread: the side lane may still be scoring the last run's pairs (a job pushed,
  // not yet done). Let it finish first, or both threads would feed the scorers at once (and
  // out of order).
  if (scorers_on_side_ && !on_side) lanes_.scorers->WaitAll();
  scorers_on_side_ = on_side;
}

int64_t StreamingLearner::samples() const {
  if (options_.discrete()) return counts_->samples();
  return cme_ ? cme_->samples() + run_->pairs() : 0;
}

absl::Status StreamingLearner::Check(const StreamBatch& b) const {
  if (b.n < 0) return absl::InvalidArgumentError(absl::StrCat("batch has n = ", b.n, " pairs, expected n >= 0"));
  if (b.n == 0) return absl::OkStatus();
  if (b.producer.size() > options_.max_producer_bytes || b.episode.size() > options_.max_episode_bytes) {
    const bool producer = b.producer.size() > options_.max_producer_bytes;
    return absl::InvalidArgumentError(
        absl::StrCat("batch episode key: the ", producer ? "producer" : "episode", " id has ",
                     producer ? b.producer.size() : b.episode.size(), " bytes, expected at most ",
                     producer ? options_.max_producer_bytes : options_.max_episode_bytes));
  }
  if (options_.discrete()) {
    if (!b.discrete() || b.y_ids == nullptr || b.x != nullptr || b.y != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch is not a batch of state ids (x_ids and y_ids), expected ids for a discrete model with ",
                       options_.num_states, " states"));
    }
    // The daemon's messages (core/common/validate.h): a trajectory is the wire's state_ids.
    if (b.trajectory) {
      if (b.y_ids != b.x_ids + 1) {
        return absl::InvalidArgumentError("trajectory batch: y_ids is not x_ids + 1, expected the state_ids form");
      }
      return CheckStateIds("state_ids", b.x_ids, b.n + 1, options_.num_states);
    }
    if (absl::Status s = CheckStateIds("x_ids", b.x_ids, b.n, options_.num_states); !s.ok()) return s;
    return CheckStateIds("y_ids", b.y_ids, b.n, options_.num_states);
  }
  if (b.discrete() || b.x == nullptr || b.y == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch has no x/y values, expected ", options_.dim, "-vectors for a continuous model"));
  }
  // A delay model reads raw rows (input_dim values) and checks its windows again (dim values).
  if (b.dim != options_.dim && (!delay_ || b.dim != options_.input_dim())) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch has dim ", b.dim, ", expected the model's dim ", options_.input_dim()));
  }
  if (delay_ && !b.trajectory) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch is a batch of pairs (x and y), expected a trajectory (states): a model with delays ",
                     options_.delays, " learns on windows of consecutive rows, which pairs do not carry"));
  }
  // The daemon's messages (core/common/validate.h): a trajectory is the wire's states.
  if (b.trajectory) {
    if (b.y != b.x + b.dim)
      return absl::InvalidArgumentError("trajectory batch: y is not x + dim, expected the states form");
    return CheckFiniteValues("states", "state", b.x, (b.n + 1) * b.dim, b.dim);
  }
  if (absl::Status s = CheckFiniteValues("x", "pair", b.x, b.n * b.dim, b.dim); !s.ok()) return s;
  return CheckFiniteValues("y", "pair", b.y, b.n * b.dim, b.dim);
}

void StreamingLearner::FeedPair(const double* x, const double* y) {
  // The CME, the counts (its nearest atoms, docs/algorithms.md §2) and the spectral moments (its
  // X atoms, §7) take the pair with the run. Observe applies a full run once the pair's lag
  // state or pair was recorded too; the warm-up's pairs (which have none) apply it here.
  if (run_->full()) ApplyRun();
  // The scorers read no dictionary: now, or from the run's copy of the pair on the side lane.
  if (scorers_on_side_) {
    ++pending_scorers_;
  } else {
    FeedScorers(x, y);
  }
  run_->AddPair(x, y);
}

void StreamingLearner::FeedScorers(const double* x, const double* y) {
  // Test, then train: the installed view's model scores the pair before anything learns it.
  if (prequential_) prequential_->Observe(x, y);
  moments_->Observe(x, y);
  if (forecast_) forecast_->Observe(x, y);  // it scores the pair with its fit first
}

void StreamingLearner::ApplyRun() {
  const CmeRunTargets targets{cme_.get(), counts_.get(), spectral_.get(), lags_.get()};
  if (!lanes_.executor) {
    ReportRunEffects(held_effects_);
    held_effects_ = run_->Apply(targets);
    return;
  }
  // Two cores (docs/algorithms.md §9.3). The run's scorers first, so they run beside its CME.
  const int64_t scorers_ticket = PushScorers();
  // The events' lane may still apply the previous run's events, which read the first X atoms:
  // the CME learns this run meanwhile only if that cannot move the atoms (a capacity growth).
  if (!cme_->HasRoomFor(run_->pairs())) lanes_.events->WaitAll();
  run_->ApplyToCme(*cme_);
  const int64_t events_ticket = lanes_.events->Push(lanes_.executor, &SideEvents, this, run_.get(), 0, 0);
  // The next run fills the spare buffer once both lanes are done with it; the run it held
  // reports its effects now, as the one-thread learner does.
  if (spare_run_) {
    lanes_.events->WaitFor(spare_events_ticket_);
    lanes_.scorers->WaitFor(spare_scorers_ticket_);
    ReportRunEffects(spare_run_->applied_effects());
  } else {
    spare_run_ = std::make_unique<CmeRun>(run_->dim(), run_->run_pairs());
    ReportRunEffects(held_effects_);
    held_effects_ = CmeRunEffects{};
  }
  std::swap(run_, spare_run_);
  spare_events_ticket_ = events_ticket;
  spare_scorers_ticket_ = scorers_ticket;
  ChooseScorerLane();
}

void StreamingLearner::ReportRunEffects(const CmeRunEffects& e) {
  batch_.spectral_epochs += e.spectral_epochs;
  batch_.lag_rebases += e.lag_rebases;
  if (e.spectral_basis >= 0) spectral_basis_ = e.spectral_basis;
}

int64_t StreamingLearner::PushScorers() {
  // The ticket of the job (0: none was needed). Jobs of the open run pushed by earlier calls
  // have run: every call ends with the scorers' lane dry.
  if (pending_scorers_ == 0) return 0;
  const int end = run_->pairs();
  const int64_t ticket =
      lanes_.scorers->Push(lanes_.executor, &SideScorers, this, run_.get(), end - pending_scorers_, end);
  pending_scorers_ = 0;
  return ticket;
}

void StreamingLearner::SideAlarms(void* learner, void* batch, int64_t begin, int64_t end) {
  auto* self = static_cast<StreamingLearner*>(learner);
  const auto* b = static_cast<const StreamBatch*>(batch);
  self->alarms_->ObservePairs(b->x_at(begin), b->y_at(begin), end - begin, b->time);
}

void StreamingLearner::SideScorers(void* learner, void* run, int64_t begin, int64_t end) {
  auto* self = static_cast<StreamingLearner*>(learner);
  const auto* r = static_cast<const CmeRun*>(run);
  for (int64_t i = begin; i < end; ++i) self->FeedScorers(r->x_row(static_cast<int>(i)), r->y_row(static_cast<int>(i)));
}

void StreamingLearner::SideEvents(void* learner, void* run, int64_t, int64_t) {
  // The effects stay in the run (applied_effects) until ApplyRun reports them.
  auto* self = static_cast<StreamingLearner*>(learner);
  static_cast<CmeRun*>(run)->ApplyEvents(
      CmeRunTargets{self->cme_.get(), self->counts_.get(), self->spectral_.get(), self->lags_.get()});
}

void StreamingLearner::PushSideAlarms(const StreamBatch& batch, int64_t end) {
  if (!side_alarms_ || end <= alarms_next_) return;
  // The lane reads the batch's pairs until FlushSide, before the call returns.
  lanes_.scorers->Push(lanes_.executor, &SideAlarms, this, const_cast<StreamBatch*>(&batch), alarms_next_, end);
  alarms_next_ = end;
}

void StreamingLearner::FlushSide() {
  if (!lanes_.executor) return;
  PushScorers();
  lanes_.scorers->WaitAll();
  spare_scorers_ticket_ = 0;  // it ran
}

const double* StreamingLearner::Scaled(const double* v, std::vector<double>& scratch) {
  if (reduction_) {
    // Scale into the dim-wide scratch first, then project into the caller's K-wide one.
    const double* in = v;
    if (scaler_) {
      scaler_->Apply(v, reduce_scratch_.data());
      in = reduce_scratch_.data();
    }
    reduction_->Apply(in, scratch.data());
    return scratch.data();
  }
  if (!scaler_) return v;
  scaler_->Apply(v, scratch.data());
  return scratch.data();
}

absl::Status StreamingLearner::FeedLearner(const double* x, const double* y) {
  if (cme_) {
    FeedPair(Scaled(x, scaled_x_), Scaled(y, scaled_y_));
    return absl::OkStatus();
  }
  for (int j = 0; j < options_.dim; ++j) {
    warmup_x_(warmup_n_, j) = x[j];
    warmup_y_(warmup_n_, j) = y[j];
  }
  if (++warmup_n_ == warmup_x_.rows()) return FinishWarmup();
  return absl::OkStatus();
}

absl::Status StreamingLearner::EndWarmup() {
  if (ready()) return absl::FailedPreconditionError("the warm-up has ended already (sigma is chosen)");
  const int64_t least =
      std::max<int64_t>(kMinEarlyWarmup, static_cast<int64_t>(InputReduction::kRowsPerDirection) * options_.reduce);
  if (warmup_n_ < least) {
    return absl::FailedPreconditionError(absl::StrCat("the warm-up holds ", warmup_n_, " pairs, expected at least ",
                                                      least, " to end it early",
                                                      options_.reduce > 0 ? " (10 per reduced dimension)" : ""));
  }
  batch_ = ObserveSummary{};
  absl::Status finished = FinishWarmup();
  FlushSide();
  return finished;
}

absl::Status StreamingLearner::FinishWarmup() {
  // The buffer's first warmup_n_ rows: all of it when the warm-up filled, fewer when EndWarmup
  // ended it early.
  auto x = warmup_x_.topRows(warmup_n_);
  auto y = warmup_y_.topRows(warmup_n_);
  if (options_.scale_inputs) {
    // The scaler first, from the raw pairs; then sigma, the estimators and the buffered pairs
    // in its units (docs/algorithms.md §1.13).
    scaler_ = InputScaler::Estimate(x, y);
    scaler_->PoolCommensurate(InputScaler::kCommensurateRatio);
    scaler_->ApplyRows(x);
    scaler_->ApplyRows(y);
  }
  // Then the reduction, fitted on the scaled pairs (docs/algorithms.md §1.15): sigma and the
  // estimators see the K-vectors.
  RowMatrixXd reduced_x, reduced_y;
  if (options_.reduce > 0) {
    reduction_ = InputReduction::Fit(x, y, options_.reduce);
    reduced_x = reduction_->ApplyRows(x);
    reduced_y = reduction_->ApplyRows(y);
    if (scaler_) reduce_scratch_.assign(options_.dim, 0.0);
  }
  if (scaler_ || reduction_) {
    scaled_x_.assign(options_.estimator_dim(), 0.0);
    scaled_y_.assign(options_.estimator_dim(), 0.0);
    scaled_state_.assign(options_.estimator_dim(), 0.0);
  }
  using ConstRows = Eigen::Ref<const RowMatrixXd>;
  const ConstRows ex = reduction_ ? ConstRows(reduced_x) : ConstRows(x);
  const ConstRows ey = reduction_ ? ConstRows(reduced_y) : ConstRows(y);
  BandwidthSelectionOptions options;
  options.seed = options_.seed;
  const BandwidthSelection sel = SelectBandwidth(ex, ey, options);
  sigma_selection_.chosen = sel.chosen;
  sigma_selection_.median_distance = sel.median_distance;
  sigma_selection_.candidates = sel.candidates;
  sigma_selection_.scores = sel.scores;
  sigma_selection_.warmup_pairs = static_cast<uint32_t>(warmup_n_);
  sigma_selection_.note = sel.note;
  // The bandwidth is derived from data: the same checks as a user's (SelectBandwidth keeps it
  // in range, so this is a guard, not a path any stream is known to take).
  if (absl::Status s = options_.ValidateSigma(sel.chosen); !s.ok()) {
    return absl::InternalError(
        absl::StrCat("the bandwidth chosen from the warm-up (", sel.chosen, ") is invalid: ", s.message()));
  }
  cme_ = std::make_unique<CompressedCme>(learner_options::Cme(options_, sel.chosen));
  AttachCmeLane();
  CreateSigmaDependent(sel.chosen);
  // On a short warm-up, landmarks of its sources lead the spectral basis, so that a short
  // stream, whose dictionary stays small, still has a basis rich enough for its cycles
  // (docs/algorithms.md §7.2).
  if (warmup_n_ < learner_options::kSpectralLandmarksBelowWarmup) {
    spectral_->SetLandmarks(ChooseLandmarks(ex, sel.chosen, learner_options::kSpectralLandmarks,
                                            learner_options::kSpectralLandmarkTolerance));
  }
  // The buffered pairs feed the counts and moments too (the latent model, which needs the
  // pairs' order, starts with the next trajectory batch).
  for (int64_t t = 0; t < warmup_n_; ++t) FeedPair(ex.row(t).data(), ey.row(t).data());
  warmup_x_.resize(0, 0);  // the buffer is never needed again
  warmup_y_.resize(0, 0);
  warmup_n_ = 0;
  batch_.warmup_finished = true;
  return absl::OkStatus();
}

void StreamingLearner::ObserveSequence(const double* raw) {
  // The kernel estimators take the state scaled, the linear-Gaussian predictive accumulator in
  // the user's units (it is affine-equivariant and its forecasts are replies).
  const double* state = (latent_ || lags_) ? Scaled(raw, scaled_state_) : raw;
  // The batch was checked before any of it was applied (Observe), so nothing is left to fail.
  if (latent_) latent_->ObserveValidated(state);
  if (predictive_) predictive_->ObserveValidated(raw);
  if (lags_) {
    // Continuous: the lag basis follows the spectral epoch as it is after the pairs before this
    // state, so the state goes with the open run (CmeRun re-picks the basis when it applies).
    if (run_) {
      run_->AddLagState(state);
    } else {
      lags_->ObserveState(state);
    }
  }
  ++batch_.states;
}

const double* StreamingLearner::TrajectoryState(const StreamBatch& batch, int64_t k) {
  // State k of a trajectory batch (k = 0..n); a discrete id goes through id_scratch_ (valid
  // until the next call).
  if (batch.discrete()) {
    id_scratch_ = static_cast<double>(k < batch.n ? batch.x_ids[k] : batch.y_ids[batch.n - 1]);
    return &id_scratch_;
  }
  return k < batch.n ? batch.x_at(k) : batch.y_at(batch.n - 1);
}

bool StreamingLearner::BeginEpisodeBatch(const double* start, const StreamBatch& batch) {
  const int w = static_cast<int>(episode_last_.size());
  bool continues = episode_open_ && !batch.gap && batch.producer == episode_producer_ && batch.episode == episode_id_;
  for (int j = 0; continues && j < w; ++j) continues = start[j] == episode_last_[j];
  if (!continues) {
    if (latent_) latent_->StartEpisode();
    if (predictive_) predictive_->StartEpisode();
    if (lags_) {
      if (run_) {
        run_->AddLagEpisode();
      } else {
        lags_->StartEpisode();
      }
    }
    ObserveSequence(start);
  }
  return !continues;
}

void StreamingLearner::EndEpisodeBatch(const double* last, const StreamBatch& batch) {
  const int w = static_cast<int>(episode_last_.size());
  for (int j = 0; j < w; ++j) episode_last_[j] = last[j];
  // Assigned only when different: the key's strings are not reallocated batch after batch.
  if (episode_producer_ != batch.producer) episode_producer_.assign(batch.producer);
  if (episode_id_ != batch.episode) episode_id_.assign(batch.episode);
  episode_open_ = true;
}

absl::StatusOr<ObserveSummary> StreamingLearner::Observe(const StreamBatch& batch) {
  if (!delay_) return ObserveStates(batch);
  // Delay embedding (docs/algorithms.md §1.14): the raw rows become windows first; the windows
  // are a trajectory of the estimators' states, continuing their episode exactly when the rows
  // continue the embedding's.
  if (batch.n > 0 && batch.dim != options_.input_dim()) {
    return absl::InvalidArgumentError(absl::StrCat("batch has dim ", batch.dim, ", expected the model's dim ",
                                                   options_.input_dim(), " (raw rows; the model has delays ",
                                                   options_.delays, ")"));
  }
  if (absl::Status s = Check(batch); !s.ok()) return s;
  if (batch.n == 0) return ObserveSummary{};
  bool started = false;
  const int64_t windows =
      delay_->Append(batch.x, batch.n + 1, batch.producer, batch.episode, batch.gap, delay_windows_, &started);
  StreamBatch w;
  w.n = std::max<int64_t>(0, windows - 1);
  w.dim = options_.dim;
  w.x = delay_windows_.data();
  w.y = w.x + options_.dim;
  w.trajectory = true;
  w.producer = batch.producer;
  w.episode = batch.episode;
  w.gap = started;
  w.time = batch.time;
  absl::StatusOr<ObserveSummary> summary = ObserveStates(w);
  if (summary.ok() && w.n == 0) summary->episode_started = started;  // no pair (yet): windows filling
  return summary;
}

absl::StatusOr<ObserveSummary> StreamingLearner::ObserveStates(const StreamBatch& batch) {
  if (absl::Status s = Check(batch); !s.ok()) return s;
  batch_ = ObserveSummary{};
  CompressedCme::Counters before = cme_ ? cme_->counters() : CompressedCme::Counters{};
  int64_t refits_before = forecast_ ? forecast_->refits() : 0;
  // One pass over the pairs, every estimator fed per pair in stream order: the CME, counts and
  // moments (FeedLearner), then the trajectory's next state (latent, predictive, lags) or, for
  // unordered pairs, the lag-1 statistics. Interleaving keeps every estimator's state a function
  // of the pairs alone, not of where batches end: the lag basis follows the spectral epoch as it
  // was at that pair, and states after the sigma warm-up ends mid-batch are observed exactly as
  // when the warm-up ends on a batch boundary.
  const bool states =
      batch.trajectory && batch.n > 0 && (latent_ || predictive_ || lags_ || options_.latent || !options_.lags.empty());
  if (states) batch_.episode_started = BeginEpisodeBatch(TrajectoryState(batch, 0), batch);
  // The alarms score each pair with their own forecast, which reads no estimator: on the side
  // lane, unless an alarm must reset the estimators at its pair.
  side_alarms_ = lanes_.executor && alarms_ && !batch.discrete() && !options_.reset_on_alarm;
  alarms_next_ = 0;
  for (int64_t i = 0; i < batch.n; ++i) {
    // The alarms score the pair before any estimator learns it (test, then train).
    if (side_alarms_) {
      if (i - alarms_next_ == kSideAlarmPairs) PushSideAlarms(batch, i);
    } else if (alarms_ && !batch.discrete() && !options_.reset_on_alarm) {
      // Scored ahead in runs, as on the side lane: the forecast reads no estimator.
      if (i == alarms_next_) {
        alarms_next_ = std::min(batch.n, i + kSideAlarmPairs);
        alarms_->ObservePairs(batch.x_at(i), batch.y_at(i), alarms_next_ - i, batch.time);
      }
    } else if (alarms_) {
      const int64_t raised = alarms_->alarms_total();
      if (batch.discrete()) {
        alarms_->ObserveIds(batch.x_ids[i], batch.y_ids[i], *counts_, batch.time);
      } else {
        alarms_->ObservePair(batch.x_at(i), batch.y_at(i), batch.time);
      }
      if (options_.reset_on_alarm && alarms_->alarms_total() > raised) {
        // on_change "reset": the statistics restart with the alarming pair (docs/algorithms.md
        // §12.8). What the old estimators did in this batch is counted first.
        FlushSide();
        lanes_.Settle();
        ReportRunEffects(held_effects_);
        if (spare_run_) ReportRunEffects(spare_run_->applied_effects());  // not yet reported
        CountBatchEffects(before, refits_before);
        before = CompressedCme::Counters{};
        refits_before = 0;
        retired_ += samples();
        CreateEstimators();
        ++batch_.resets;
        if (states) BeginEpisodeBatch(TrajectoryState(batch, i), batch);
      }
    }
    if (batch.discrete()) {
      counts_->Add(static_cast<int>(batch.x_ids[i]), static_cast<int>(batch.y_ids[i]));
    } else {
      if (absl::Status s = FeedLearner(batch.x_at(i), batch.y_at(i)); !s.ok()) {
        // Internal: the learner is unusable from here (its owner marks the model failed).
        FlushSide();
        side_alarms_ = false;
        return absl::InternalError(absl::StrCat("pair ", i, " of the batch: ", s.message()));
      }
    }
    if (states) {
      ObserveSequence(TrajectoryState(batch, i + 1));
    } else if (!batch.trajectory && lags_) {
      // Unordered pairs have no history: lag 1 only.
      if (batch.discrete()) {
        const double ids[2] = {static_cast<double>(batch.x_ids[i]), static_cast<double>(batch.y_ids[i])};
        lags_->ObservePair(&ids[0], &ids[1]);
      } else {
        run_->AddLagPair();  // the pair FeedLearner just added to the run
      }
    }
    // A run is applied right after its last pair and what goes with that pair, so runs end on
    // the grid of the pair count wherever batches end (docs/algorithms.md §9.2).
    if (run_ && run_->full()) ApplyRun();
  }
  if (states) EndEpisodeBatch(TrajectoryState(batch, batch.n), batch);
  PushSideAlarms(batch, batch.n);
  FlushSide();
  side_alarms_ = false;
  batch_.pairs = batch.n;
  batch_.pending_warmup = warmup_n_;
  CountBatchEffects(before, refits_before);
  return batch_;
}

void StreamingLearner::CountBatchEffects(const CompressedCme::Counters& before, int64_t refits_before) {
  // A regression created in this batch (the warm-up ended, or a reset) started from 0 refits:
  // the caller passes 0 for it.
  if (forecast_) batch_.forecast_refits += forecast_->refits() - refits_before;
  if (cme_) {
    const CompressedCme::Counters& c = cme_->counters();
    batch_.admitted_x += c.admitted_x - before.admitted_x;
    batch_.admitted_y += c.admitted_y - before.admitted_y;
    batch_.forced += c.forced - before.forced;
    batch_.forced_error += c.forced_error_sum - before.forced_error_sum;
  }
}

std::optional<StreamingLearnerSnapshot> StreamingLearner::Snapshot() const {
  std::optional<SnapshotCopy> copy = CopyForSnapshot();
  if (!copy) return std::nullopt;
  return std::move(*copy).Finish();
}

std::optional<StreamingLearner::SnapshotCopy> StreamingLearner::CopyForSnapshot() const {
  if (!ready()) return std::nullopt;
  lanes_.Settle();  // the last run's events (TWO CORES)
  SnapshotCopy c;
  StreamingLearnerSnapshot& snap = c.snap_;
  snap.samples = samples();
  snap.scaler = scaler_;
  snap.reduction = reduction_;
  if (moments_) snap.moments = moments_->Snapshot();
  if (latent_) snap.latent = latent_->Snapshot();
  if (predictive_) snap.predictive = predictive_->Snapshot();
  if (forecast_) snap.forecast = forecast_->Snapshot();
  if (prequential_) {
    snap.prequential =
        StreamingLearnerSnapshot::Prequential{prequential_view_, prequential_->pairs(), prequential_->Score()};
  }
  if (run_ && !run_->empty()) {
    // The estimators that read the CME's dictionary, copied whole: Finish() applies the open run
    // to them (docs/algorithms.md §9.2). About the size of their snapshots.
    c.cme_.emplace(*cme_);
    c.counts_.emplace(*counts_);
    c.spectral_.emplace(*spectral_);
    if (lags_) c.lags_.emplace(*lags_);
    c.run_.emplace(*run_);
    return c;
  }
  if (cme_) {
    snap.inverse_drift = cme_->last_drift();     // measured by the CME's periodic check
    snap.cme = CmeSnapshot::FromFactors(*cme_);  // W is formed by Finish(), off the lock
  }
  snap.counts = counts_->Snapshot();
  if (spectral_) snap.spectral = spectral_->Snapshot();
  if (lags_) snap.lags = lags_->Snapshot();
  return c;
}

StreamingLearnerSnapshot StreamingLearner::SnapshotCopy::Finish() && {
  if (run_) {
    run_->Apply(CmeRunTargets{&*cme_, &*counts_, &*spectral_, lags_ ? &*lags_ : nullptr});
    snap_.inverse_drift = cme_->last_drift();
    snap_.cme = CmeSnapshot::FromFactors(*cme_);
    snap_.counts = counts_->Snapshot();
    snap_.spectral = spectral_->Snapshot();
    if (lags_) snap_.lags = lags_->Snapshot();
  }
  if (snap_.cme) snap_.cme->Materialize();  // W = R_Y^T W~ R_X, O(m^3)
  return std::move(snap_);
}

std::unique_ptr<PrequentialVampE> StreamingLearner::InstallPrequential(std::unique_ptr<PrequentialVampE> score,
                                                                       uint64_t view_version) {
  prequential_.swap(score);
  prequential_view_ = view_version;
  return score;
}

}  // namespace cmestream
