// StreamingLearner (core/stream/streaming_learner.h): the sigma warm-up, the routing of every
// pair, the episode rule, discrete models, serialization and bad input.
//
// The reference for the learner's state is the estimators themselves, fed by hand in the order
// the header documents (pairs to the CME, its nearest atoms to the counts, moments, spectral
// epochs; states to the sequence estimators with StartEpisode where the episode rule says, the
// lag basis re-picked at each spectral epoch). Their serialized bytes, framed the way
// StreamingLearner::Serialize frames them, must equal the learner's bytes exactly: every
// double of every estimator bit-identical.
#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/cme/bandwidth.h"
#include "core/embedding/feature_map.h"
#include "core/io/binary_io.h"
#include "core/spectral/landmarks.h"
#include "core/stream/streaming_learner.h"
#include "core/stream/streaming_learner_options.h"
#include "gtest/gtest.h"
#include "tests/core/serialized_bytes.h"

namespace cmestream {
namespace {

constexpr uint64_t kSeed = 3;
constexpr int kDim = 2, kMaxDict = 60, kWarmup = 100, kRff = 32, kWindow = 2, kReservoir = 200;
const std::vector<int> kLags = {1, 3};

// States 0..n of a stable 2-D linear-Gaussian chain x_{t+1} = A x_t + 0.3 noise (A a contracting
// rotation), so consecutive states are the pairs of a trajectory.
RowMatrixXd Chain(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.3);
  RowMatrixXd s(n + 1, kDim);
  s.row(0).setZero();
  for (int64_t t = 0; t < n; ++t) {
    s(t + 1, 0) = 0.8 * s(t, 0) - 0.4 * s(t, 1) + noise(rng);
    s(t + 1, 1) = 0.4 * s(t, 0) + 0.8 * s(t, 1) + noise(rng);
  }
  return s;
}

// micro_batch: pairs per CME run (docs/algorithms.md §9.2). 16 makes the short test streams cross
// many run boundaries; 1 is the sequential recursion the hand-fed references below follow.
StreamingLearner::Options Continuous(double sigma, int micro_batch = 16) {
  StreamingLearner::Options o;
  o.micro_batch = micro_batch;
  o.dim = kDim;
  o.cme.dim = kDim;
  o.cme.sigma = sigma;  // 0: auto
  o.cme.max_dict = kMaxDict;
  o.auto_sigma_warmup = kWarmup;
  o.seed = kSeed;
  o.rff_features = kRff;
  o.latent = true;
  o.reservoir = kReservoir;
  o.window = kWindow;
  o.lags = kLags;
  return o;
}

StreamingLearner::Options Discrete(int states) {
  StreamingLearner::Options o;
  o.num_states = states;
  o.seed = kSeed;
  o.latent = true;
  o.reservoir = kReservoir;
  o.window = kWindow;
  o.lags = kLags;
  return o;
}

// States first..first+n of `s` as a trajectory batch of n pairs.
StreamBatch Trajectory(const RowMatrixXd& s, int64_t first, int64_t n, std::string_view producer = "p",
                       std::string_view episode = "") {
  StreamBatch b;
  b.n = n;
  b.dim = static_cast<int>(s.cols());
  b.x = s.row(first).data();
  b.y = s.row(first + 1).data();  // y_i = x_{i+1}: the wire's `states` form
  b.trajectory = true;
  b.producer = producer;
  b.episode = episode;
  return b;
}

StreamBatch DiscreteTrajectory(const std::vector<int64_t>& ids, int64_t first, int64_t n,
                               std::string_view producer = "p", std::string_view episode = "") {
  StreamBatch b;
  b.n = n;
  b.x_ids = ids.data() + first;
  b.y_ids = ids.data() + first + 1;
  b.trajectory = true;
  b.producer = producer;
  b.episode = episode;
  return b;
}

using test_support::Bytes;

ObserveSummary Feed(StreamingLearner& l, const StreamBatch& b) {
  absl::StatusOr<ObserveSummary> s = l.Observe(b);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : ObserveSummary{};
}

// Trajectory states 0..n fed in batches of `size` pairs; each batch repeats the last state of
// the previous one (as clients do), so the episode continues.
void FeedInBatches(StreamingLearner& l, const RowMatrixXd& s, int64_t size) {
  const int64_t n = s.rows() - 1;
  for (int64_t first = 0; first < n; first += size) Feed(l, Trajectory(s, first, std::min(size, n - first)));
}

// The estimators of a learner, fed by hand.
struct Reference {
  std::optional<CompressedCme> cme;
  std::optional<TransitionCounts> counts;
  std::optional<EmbeddingMoments> moments;
  std::optional<MultiViewAccumulator> latent;
  std::optional<PredictiveStateAccumulator> predictive;
  std::optional<SpectralMoments> spectral;
  std::optional<LagStatistics> lags;
  std::optional<ForecastRegression> forecast;
  bool episode_open = false;
  std::string producer, episode;
  std::vector<double> last;

  void ContinuousPair(const double* x, const double* y) {
    cme->Observe(x, y);
    if (cme->last_nearest_x() >= 0 && cme->last_nearest_y_in_x() >= 0) {
      counts->Add(cme->last_nearest_x(), cme->last_nearest_y_in_x());
    }
    moments->Observe(x, y);
    forecast->Observe(x, y);
    if (spectral->ShouldStartEpoch(cme->dict_x_size())) spectral->StartEpoch(cme->x_atoms());
    spectral->Observe(x, y);
  }
  void State(const double* x) {
    if (latent) {
      ASSERT_TRUE(latent->Observe(x).ok());
    }
    if (predictive) {
      ASSERT_TRUE(predictive->Observe(x).ok());
    }
    if (cme && lags->NeedsRebase(spectral->epoch())) lags->Rebase(cme->x_atoms(), spectral->epoch());
    lags->ObserveState(x);
  }
  void StartEpisode() {
    if (latent) latent->StartEpisode();
    if (predictive) predictive->StartEpisode();
    lags->StartEpisode();
  }
  // Framed as StreamingLearner::Serialize documents it (no warm-up pairs pending).
  std::string Bytes() const {
    io::Writer w;
    w.I64(0);
    w.Bool(episode_open);
    w.String(producer);
    w.String(episode);
    w.Doubles(last.data(), static_cast<int64_t>(last.size()));
    w.Bool(cme.has_value());
    if (cme) cme->Serialize(w);
    counts->Serialize(w);
    w.Bool(moments.has_value());
    if (moments) moments->Serialize(w);
    w.Bool(latent.has_value());
    if (latent) latent->Serialize(w);
    w.Bool(predictive.has_value());
    if (predictive) predictive->Serialize(w);
    w.Bool(spectral.has_value());
    if (spectral) spectral->Serialize(w);
    w.Bool(lags.has_value());
    if (lags) lags->Serialize(w);
    if (cme) {
      // The open CME run of a pair-by-pair learner: empty after every batch (0 pairs, 0 lag
      // states, 0 events).
      w.I64(0);
      w.I64(0);
      w.I64(0);
    }
    w.Bool(forecast.has_value());
    if (forecast) forecast->Serialize(w);
    return w.Release();
  }
};

// The continuous estimators at bandwidth `sigma`, with the options the header documents.
Reference ContinuousReference(double sigma) {
  Reference r;
  CompressedCme::Options c;
  c.dim = kDim;
  c.sigma = sigma;
  c.max_dict = kMaxDict;
  r.cme.emplace(c);
  TransitionCounts::Options t;
  t.max_states = kMaxDict;
  r.counts.emplace(t);
  r.moments.emplace(std::make_shared<const FeatureMap>(*FeatureMap::Rff(kDim, kRff, sigma, kSeed)),
                    EmbeddingMoments::Options{});
  MultiViewAccumulator::Options m;
  m.features.dim = kDim;
  m.features.num_features = kRff;
  m.features.sigma = sigma;
  m.features.seed = kSeed;
  m.reservoir_size = kReservoir;
  m.reservoir_seed = kSeed + 7;
  m.batch = 32;
  r.latent.emplace(m);
  PredictiveStateAccumulator::Options p;
  p.kind = PredictiveStateAccumulator::Kind::kLinearGaussian;
  p.dim = kDim;
  p.history_length = kWindow;
  p.future_length = kWindow;
  r.predictive.emplace(p);
  SpectralMoments::Options s;
  s.dim = kDim;
  s.sigma = sigma;
  s.max_basis = kMaxDict;
  // The learner's re-base schedule (core/stream/streaming_learner_options.cc).
  s.rebase_growth = 5;
  s.min_block_length = 25;
  s.min_epoch_samples = 50;
  r.spectral.emplace(s);
  LagStatistics::Options l;
  l.lags = kLags;
  l.dim = kDim;
  l.sigma = sigma;
  r.lags.emplace(l);
  ForecastRegression::Options f;
  f.dim = kDim;
  f.skill_horizon = learner_options::kMinForecastSkillHorizon;  // no delays: 12
  r.forecast.emplace(std::make_shared<const FeatureMap>(*FeatureMap::Rff(kDim, kRff, sigma, kSeed)), f);
  return r;
}

// ---------------------------------------------------------------------------------------------

TEST(StreamingLearner, WarmupBuffersThenChoosesSigmaAndRoutesEveryPair) {
  const int64_t n = 400, batch = 37;  // the warm-up (100 pairs) ends inside the third batch
  const RowMatrixXd s = Chain(n, 11);
  // Pair by pair, so that the CME is the reference's Observe bit for bit (the micro-batched
  // learner is compared with this one in MicroBatchesEqualTheSequentialLearner).
  StreamingLearner l(Continuous(0, 1));
  EXPECT_FALSE(l.ready());
  EXPECT_TRUE(l.sigma_selection().automatic);

  ObserveSummary first = Feed(l, Trajectory(s, 0, batch));
  EXPECT_EQ(first.pairs, batch);
  EXPECT_EQ(first.pending_warmup, batch);
  EXPECT_FALSE(first.warmup_finished);
  EXPECT_TRUE(first.episode_started);
  EXPECT_EQ(first.states, batch + 1);  // the predictive accumulator takes states from the start
  EXPECT_FALSE(l.ready());
  EXPECT_EQ(l.samples(), 0);
  EXPECT_EQ(l.pending_warmup(), batch);
  EXPECT_FALSE(l.Snapshot().has_value());
  EXPECT_EQ(l.cme(), nullptr);

  Feed(l, Trajectory(s, batch, batch));
  const ObserveSummary third = Feed(l, Trajectory(s, 2 * batch, batch));
  EXPECT_TRUE(third.warmup_finished);
  EXPECT_FALSE(third.episode_started);
  EXPECT_EQ(third.pending_warmup, 0);
  EXPECT_GE(third.spectral_epochs, 1);
  EXPECT_GE(third.lag_rebases, 1);
  EXPECT_GT(third.admitted_x, 0);
  for (int64_t f = 3 * batch; f < n; f += batch) Feed(l, Trajectory(s, f, std::min(batch, n - f)));

  // The bandwidth is SelectBandwidth's choice on the first 100 pairs.
  BandwidthSelectionOptions bo;
  bo.seed = kSeed;
  const BandwidthSelection sel = SelectBandwidth(s.topRows(kWarmup), s.middleRows(1, kWarmup), bo);
  const SigmaSelection& got = l.sigma_selection();
  EXPECT_EQ(got.chosen, sel.chosen);
  EXPECT_GT(got.chosen, 0);
  EXPECT_EQ(got.median_distance, sel.median_distance);
  EXPECT_EQ(got.candidates, sel.candidates);
  EXPECT_EQ(got.scores, sel.scores);
  EXPECT_EQ(got.warmup_pairs, static_cast<uint32_t>(kWarmup));

  // Every estimator equals its reference fed by hand: all 400 pairs to the CME (the buffered
  // ones first, at the end of the warm-up), its nearest atoms to the counts, the moments, the
  // spectral epochs; the states after the warm-up (100..400) to the latent model and the lag
  // statistics, all states (0..400) to the predictive accumulator, which exists from the start.
  Reference ref = ContinuousReference(sel.chosen);
  // The warm-up's landmarks lead the spectral basis (docs/algorithms.md §7.2).
  const RowMatrixXd landmarks = ChooseLandmarks(s.topRows(kWarmup), sel.chosen, learner_options::kSpectralLandmarks,
                                                learner_options::kSpectralLandmarkTolerance);
  EXPECT_GE(landmarks.rows(), 2);
  ref.spectral->SetLandmarks(landmarks);
  ref.predictive->StartEpisode();
  ASSERT_TRUE(ref.predictive->Observe(s.row(0).data()).ok());
  for (int64_t t = 0; t < kWarmup - 1; ++t) ASSERT_TRUE(ref.predictive->Observe(s.row(t + 1).data()).ok());
  for (int64_t t = 0; t < n; ++t) {
    ref.ContinuousPair(s.row(t).data(), s.row(t + 1).data());
    if (t >= kWarmup - 1) ref.State(s.row(t + 1).data());
  }
  ref.episode_open = true;
  ref.producer = "p";
  ref.last = {s(n, 0), s(n, 1)};
  EXPECT_EQ(Bytes(l), ref.Bytes());

  ASSERT_TRUE(l.ready());
  EXPECT_EQ(l.samples(), n);
  const std::optional<StreamingLearnerSnapshot> snap = l.Snapshot();
  ASSERT_TRUE(snap.has_value());
  EXPECT_EQ(snap->samples, n);
  EXPECT_EQ(snap->counts.samples(), n);
  EXPECT_EQ(snap->moments->samples, n);
  EXPECT_EQ(snap->spectral->samples, n);
  EXPECT_EQ(snap->cme->x_atoms, CmeSnapshot::From(*ref.cme).x_atoms);
  EXPECT_EQ(snap->latent->triples, n - kWarmup - 1);  // states 100..400: 301 states, 299 triples
  EXPECT_FALSE(snap->prequential.has_value());
}

// Degenerate streams (docs/algorithms.md §1.11.1): a flat line, a two-level square wave and a
// channel that is constant over the warm-up and moves later end the warm-up with a finite sigma
// and a note, keep learning, and give a view snapshot (every estimator on, scaled inputs).
TEST(StreamingLearner, DegenerateStreamsEndTheWarmupAndKeepLearning) {
  const int64_t n = 600;
  RowMatrixXd flat = RowMatrixXd::Constant(n + 1, kDim, 4.0);
  RowMatrixXd square(n + 1, kDim), later(n + 1, kDim);
  const RowMatrixXd moving = Chain(n, 5);
  for (int64_t t = 0; t <= n; ++t) {
    square(t, 0) = (t / 25) % 2 ? 20.0 : 80.0;
    square(t, 1) = (t / 40) % 2 ? 0.0 : 1.0;
    later(t, 0) = t < 2 * kWarmup ? 0.0 : 1e3 * moving(t, 0);  // constant over the warm-up
    later(t, 1) = moving(t, 1);
  }
  for (const auto& [name, s] : {std::pair<const char*, const RowMatrixXd*>{"flat", &flat},
                                {"square", &square},
                                {"constant in the warm-up", &later}}) {
    StreamingLearner::Options o = Continuous(0);
    o.scale_inputs = true;
    StreamingLearner l(o);
    for (int64_t f = 0; f < n; f += 50) {
      const absl::StatusOr<ObserveSummary> r = l.Observe(Trajectory(*s, f, 50));
      ASSERT_TRUE(r.ok()) << name << ": " << r.status();
    }
    ASSERT_TRUE(l.ready()) << name;
    const double sigma = l.sigma_selection().chosen;
    EXPECT_TRUE(std::isfinite(sigma) && sigma > 0) << name << ": sigma " << sigma;
    EXPECT_EQ(l.samples(), n) << name;
    EXPECT_TRUE(l.Snapshot().has_value()) << name;
    if (s == &flat) {
      EXPECT_EQ(sigma, 1.0);
      EXPECT_NE(l.sigma_selection().note.find("constant"), std::string::npos) << l.sigma_selection().note;
      EXPECT_EQ(l.cme()->dict_x_size(), 1);  // one distinct state: one atom
    }
    if (s == &square) {
      EXPECT_NE(l.sigma_selection().note.find("nonzero distances"), std::string::npos) << l.sigma_selection().note;
    }
    if (s == &later) {
      EXPECT_EQ(l.scaler()->spread()[0], InputScaler::Spread::kUnit);
    }
  }
}

TEST(StreamingLearner, StateDoesNotDependOnBatchBoundaries) {
  const RowMatrixXd s = Chain(500, 12);
  std::string reference;
  for (int64_t size : {500, 1, 7, 99, 100, 101, 250}) {  // the warm-up ends mid-batch, at a boundary, ...
    StreamingLearner l(Continuous(0));
    FeedInBatches(l, s, size);
    const std::string bytes = Bytes(l);
    if (reference.empty()) reference = bytes;
    EXPECT_EQ(bytes, reference) << "batches of " << size;
  }
  // Unordered pairs (lag 1 only) as well.
  RowMatrixXd x = s.topRows(500), y = s.bottomRows(500);
  std::string pairs_reference;
  for (int64_t size : {500, 13, 100}) {
    StreamingLearner l(Continuous(0.7));
    for (int64_t f = 0; f < 500; f += size) {
      StreamBatch b;
      b.n = std::min<int64_t>(size, 500 - f);
      b.dim = kDim;
      b.x = x.row(f).data();
      b.y = y.row(f).data();
      Feed(l, b);
    }
    if (pairs_reference.empty()) pairs_reference = Bytes(l);
    EXPECT_EQ(Bytes(l), pairs_reference) << "pairs in batches of " << size;
    // Lag 1 only, counted since the last basis (the sums restart with it): the same for every
    // batching.
    const LagStatisticsSnapshot lags = *l.Snapshot()->lags;
    EXPECT_EQ(lags.counts->trajectory_states, 0);
    EXPECT_GT(lags.counts->unordered_pairs, 0);
    EXPECT_EQ(lags.counts->samples, lags.counts->unordered_pairs);
  }
}

// The micro-batched learner (CME runs through ObserveBatch, docs/algorithms.md §9.2) against the
// pair-by-pair one on the same stream: the same admissions (bit-identical atoms), hence the same
// nearest atoms, counts, spectral epochs and lag bases; the moments that read only atoms and
// pairs bit-identical; W equal up to reassociation. Snapshot() folds the open run in, so a view
// sees every pair, and taking it changes nothing.
TEST(StreamingLearner, MicroBatchesEqualTheSequentialLearner) {
  const RowMatrixXd s = Chain(1500, 14);
  StreamingLearner sequential(Continuous(0, 1));
  FeedInBatches(sequential, s, 37);
  const std::optional<StreamingLearnerSnapshot> want = sequential.Snapshot();
  ASSERT_TRUE(want.has_value());
  ASSERT_GT(want->cme->x_atoms.rows(), 20);
  for (int micro_batch : {16, 256}) {
    SCOPED_TRACE(micro_batch);
    StreamingLearner l(Continuous(0, micro_batch));
    FeedInBatches(l, s, 37);  // 1500 = 5 runs of 256 + 220 open: the snapshot folds them in
    EXPECT_EQ(l.samples(), 1500);
    const std::string before = Bytes(l);
    const std::optional<StreamingLearnerSnapshot> got = l.Snapshot();
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(Bytes(l), before);  // the fold worked on copies
    EXPECT_EQ(got->samples, want->samples);
    EXPECT_EQ(got->cme->samples, want->cme->samples);
    EXPECT_EQ(got->cme->x_atoms, want->cme->x_atoms);
    EXPECT_EQ(got->cme->y_atoms, want->cme->y_atoms);
    const double w_error = (got->cme->W - want->cme->W).norm() / want->cme->W.norm();
    EXPECT_LT(w_error, 1e-10);
    EXPECT_EQ(got->counts.samples(), want->counts.samples());
    for (int i = 0; i < kMaxDict; ++i) {
      for (int j = 0; j < kMaxDict; ++j) ASSERT_EQ(got->counts.Count(i, j), want->counts.Count(i, j)) << i << "," << j;
    }
    EXPECT_EQ(got->spectral->samples, want->spectral->samples);
    EXPECT_EQ(got->spectral->live_epoch, want->spectral->live_epoch);
    EXPECT_EQ(got->spectral->basis, want->spectral->basis);
    for (int f = 0; f < 2; ++f) {
      EXPECT_EQ(got->spectral->moments.c00[f], want->spectral->moments.c00[f]);
      EXPECT_EQ(got->spectral->moments.c01[f], want->spectral->moments.c01[f]);
    }
    ASSERT_TRUE(got->lags.has_value() && got->lags->koopman.has_value());
    EXPECT_EQ(got->lags->epoch, want->lags->epoch);
    EXPECT_EQ(got->lags->basis_atoms, want->lags->basis_atoms);
    EXPECT_EQ(got->lags->koopman->samples, want->lags->koopman->samples);
    for (size_t k = 0; k < kLags.size(); ++k) {
      EXPECT_EQ(got->lags->koopman->total[k].c0t, want->lags->koopman->total[k].c0t);
      EXPECT_EQ(got->lags->counts->total[k].c0t, want->lags->counts->total[k].c0t);
    }
    EXPECT_EQ(got->moments->samples, want->moments->samples);

    // The open run is state: it round-trips, and a corrupt one is refused with the part named.
    const std::string bytes = Bytes(l);
    io::Reader r(bytes, "test");
    absl::StatusOr<StreamingLearner> back =
        StreamingLearner::Deserialize(r, Continuous(0, micro_batch), StreamingLearner::kStateVersion, {});
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(Bytes(*back), bytes);
    // The forecast regression follows the run (a bool and its object).
    io::Writer forecast;
    l.forecast()->Serialize(forecast);
    std::string corrupt = bytes;
    // The last event's index (u8 kind, i32 index at the end of the run).
    corrupt[corrupt.size() - 1 - forecast.size() - 4] ^= 0x40;
    io::Reader bad(corrupt, "test");
    absl::StatusOr<StreamingLearner> refused =
        StreamingLearner::Deserialize(bad, Continuous(0, micro_batch), StreamingLearner::kStateVersion, {});
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(refused.status().message().find("model CME run event"), std::string::npos) << refused.status();
  }
}

// A state of version 4 (before the forecast regression: the same bytes without the trailing
// bool and object) loads with an empty regression, which learns from the next pair on.
TEST(StreamingLearner, Version4StateLoadsWithAnEmptyForecastRegression) {
  const RowMatrixXd s = Chain(700, 21);
  StreamingLearner l(Continuous(0));
  FeedInBatches(l, s.topRows(401), 50);
  ASSERT_NE(l.forecast(), nullptr);
  EXPECT_EQ(l.forecast()->samples(), 400);
  EXPECT_TRUE(l.forecast()->has_fit());
  io::Writer forecast;
  l.forecast()->Serialize(forecast);
  const std::string bytes = Bytes(l);
  const std::string v4 = bytes.substr(0, bytes.size() - 1 - forecast.size());
  io::Reader r(v4, "v4");
  absl::StatusOr<StreamingLearner> old = StreamingLearner::Deserialize(r, Continuous(0), 4, l.sigma_selection());
  ASSERT_TRUE(old.ok()) << old.status();
  ASSERT_NE(old->forecast(), nullptr);
  EXPECT_EQ(old->forecast()->samples(), 0);
  EXPECT_FALSE(old->forecast()->has_fit());
  // Everything else is the same state.
  io::Writer rest;
  old->Serialize(rest);
  EXPECT_EQ(rest.data().substr(0, v4.size()), v4);
  // It learns from there: 299 more pairs, fits at 64 and 128 and 256 of its own pairs.
  Feed(*old, Trajectory(s, 400, 299));
  EXPECT_EQ(old->forecast()->samples(), 299);
  EXPECT_TRUE(old->forecast()->has_fit());
  EXPECT_GT(old->forecast()->skill().pairs, 0);
  // A truncated version-5 state is refused, naming the part.
  io::Reader cut(std::string_view(bytes).substr(0, bytes.size() - 10), "v5");
  absl::StatusOr<StreamingLearner> bad =
      StreamingLearner::Deserialize(cut, Continuous(0), StreamingLearner::kStateVersion, l.sigma_selection());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
}

TEST(StreamingLearner, EpisodeRuleAcrossBatches) {
  // A discrete 4-state trajectory of 51 ids, cut into five batches.
  std::mt19937_64 rng(5);
  std::vector<int64_t> ids(51);
  for (auto& v : ids) v = static_cast<int64_t>(rng() % 4);
  ids[31] = (ids[30] + 1) % 4;  // batch D starts with a state other than C's last one
  StreamingLearner l(Discrete(4));
  // A: states 0..10 (p, e1); B: 10..20, same key, repeats A's last state: continues.
  const ObserveSummary a = Feed(l, DiscreteTrajectory(ids, 0, 10, "p", "e1"));
  const ObserveSummary b = Feed(l, DiscreteTrajectory(ids, 10, 10, "p", "e1"));
  // C: 20..30 with another episode id; D: 31..40, same key as C but not starting with C's
  // last state; E: 40..50, D's key but another producer. Each starts a new episode.
  const ObserveSummary c = Feed(l, DiscreteTrajectory(ids, 20, 10, "p", "e2"));
  const ObserveSummary d = Feed(l, DiscreteTrajectory(ids, 31, 9, "p", "e2"));
  const ObserveSummary e = Feed(l, DiscreteTrajectory(ids, 40, 10, "q", "e2"));
  EXPECT_TRUE(a.episode_started);
  EXPECT_FALSE(b.episode_started);
  EXPECT_TRUE(c.episode_started);
  EXPECT_TRUE(d.episode_started);
  EXPECT_TRUE(e.episode_started);
  EXPECT_EQ(a.states, 11);
  EXPECT_EQ(b.states, 10);  // the repeated state is not observed twice
  EXPECT_EQ(c.states, 11);

  // Reference: the sequence estimators fed the states with StartEpisode at A, C, D and E.
  Reference ref;
  TransitionCounts::Options t;
  t.max_states = 4;
  ref.counts.emplace(t);
  MultiViewAccumulator::Options m;
  m.features.kind = LatentFeatureOptions::Kind::kOneHot;
  m.features.num_symbols = 4;
  m.features.seed = kSeed;
  m.reservoir_size = kReservoir;
  m.reservoir_seed = kSeed + 7;
  m.batch = 32;
  ref.latent.emplace(m);
  PredictiveStateAccumulator::Options p;
  p.num_symbols = 4;
  p.history_length = kWindow;
  p.max_history_states = 1 << 23;
  ref.predictive.emplace(p);
  LagStatistics::Options lo;
  lo.lags = kLags;
  lo.num_states = 4;
  ref.lags.emplace(lo);
  struct Span {
    int64_t first, n;
    bool new_episode;
  };
  for (const Span& sp :
       {Span{0, 10, true}, Span{10, 10, false}, Span{20, 10, true}, Span{31, 9, true}, Span{40, 10, true}}) {
    for (int64_t i = sp.first; i < sp.first + sp.n; ++i)
      ref.counts->Add(static_cast<int>(ids[i]), static_cast<int>(ids[i + 1]));
    for (int64_t k = sp.new_episode ? 0 : 1; k <= sp.n; ++k) {
      if (k == 0) ref.StartEpisode();
      const double id = static_cast<double>(ids[sp.first + k]);
      ref.State(&id);
    }
  }
  ref.episode_open = true;
  ref.producer = "q";
  ref.episode = "e2";
  ref.last = {static_cast<double>(ids[50])};
  EXPECT_EQ(Bytes(l), ref.Bytes());

  // Discrete models learn from the first pair: counts are the ids' transition counts.
  ASSERT_TRUE(l.ready());
  EXPECT_EQ(l.cme(), nullptr);
  const std::optional<StreamingLearnerSnapshot> snap = l.Snapshot();
  ASSERT_TRUE(snap.has_value());
  EXPECT_FALSE(snap->cme.has_value());
  EXPECT_FALSE(snap->moments.has_value());
  EXPECT_EQ(snap->samples, 49);  // 10 + 10 + 10 + 9 + 10 pairs
  double brute[4][4] = {};
  for (const Span& sp : {Span{0, 20, false}, Span{20, 10, false}, Span{31, 19, false}}) {
    for (int64_t i = sp.first; i < sp.first + sp.n; ++i) brute[ids[i]][ids[i + 1]] += 1;
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(snap->counts.Count(i, j), brute[i][j]) << i << "," << j;
  EXPECT_EQ(snap->lags->counts->trajectory_states, 11 + 10 + 11 + 10 + 11);
}

TEST(StreamingLearner, SerializationContinuesBitForBit) {
  const RowMatrixXd s = Chain(600, 13);
  StreamingLearner uninterrupted(Continuous(0));
  FeedInBatches(uninterrupted, s, 50);
  const std::string want = Bytes(uninterrupted);
  // Stop during the warm-up (60 pairs buffered), right after it, and later.
  for (int64_t stop : {60, 100, 350}) {
    StreamingLearner a(Continuous(0));
    for (int64_t f = 0; f < stop; f += 20) Feed(a, Trajectory(s, f, std::min<int64_t>(20, stop - f)));
    const std::string bytes = Bytes(a);
    io::Reader r(bytes, "test");
    absl::StatusOr<StreamingLearner> b =
        StreamingLearner::Deserialize(r, Continuous(0), StreamingLearner::kStateVersion, a.sigma_selection());
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(r.remaining(), 0u);
    EXPECT_EQ(Bytes(*b), bytes) << "stop " << stop;
    EXPECT_EQ(b->pending_warmup(), stop < kWarmup ? stop : 0);
    for (int64_t f = stop; f < 600; f += 50) Feed(*b, Trajectory(s, f, std::min<int64_t>(50, 600 - f)));
    EXPECT_EQ(Bytes(*b), want) << "stop " << stop;
    EXPECT_EQ(b->sigma_selection().chosen, uninterrupted.sigma_selection().chosen);
  }

  // Bytes of another model's learner are refused with the part named, nothing half-restored.
  StreamingLearner::Options other = Continuous(0);
  other.cme.max_dict = 30;
  io::Reader r(want, "test");
  absl::StatusOr<StreamingLearner> bad = StreamingLearner::Deserialize(r, other, 3, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("model CME dimensions differ from its config"), std::string::npos)
      << bad.status();
  io::Reader truncated(std::string_view(want).substr(0, want.size() / 2), "test");
  bad = StreamingLearner::Deserialize(truncated, Continuous(0), 3, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
}

TEST(StreamingLearner, BadInputIsRefusedAndChangesNothing) {
  const RowMatrixXd s = Chain(300, 14);
  StreamingLearner l(Continuous(0));
  FeedInBatches(l, s, 120);
  const std::string before = Bytes(l);
  auto refused = [&](const StreamBatch& b, const std::string& says) {
    absl::StatusOr<ObserveSummary> r = l.Observe(b);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status();
    EXPECT_EQ(Bytes(l), before) << says;
  };
  RowMatrixXd bad = s;
  bad(4, 1) = std::nan("");  // pair 3's y[1] (and pair 4's x[1]) of a batch from state 0
  // The daemon's message (core/common/validate.h): a trajectory is the wire's `states` field.
  refused(Trajectory(bad, 0, 10), "field states value 9 (state 4, component 1) is nan, expected a finite number");
  StreamBatch pairs = Trajectory(bad, 0, 10);
  pairs.trajectory = false;
  refused(pairs, "field x value 9 (pair 4, component 1) is nan, expected a finite number");
  StreamBatch split = Trajectory(s, 0, 10);
  split.y = s.row(2).data();
  refused(split, "trajectory batch: y is not x + dim, expected the states form");
  StreamBatch wrong_dim = Trajectory(s, 0, 10);
  wrong_dim.dim = 3;
  refused(wrong_dim, "batch has dim 3, expected the model's dim 2");
  const std::vector<int64_t> ids = {0, 1, 2};
  refused(DiscreteTrajectory(ids, 0, 2), "expected 2-vectors for a continuous model");
  const std::string long_id(257, 'p');
  refused(Trajectory(s, 0, 10, long_id), "the producer id has 257 bytes, expected at most 256");
  StreamBatch negative = Trajectory(s, 0, 10);
  negative.n = -1;
  refused(negative, "batch has n = -1 pairs");
  // An empty batch is no error and learns nothing.
  ASSERT_TRUE(l.Observe(Trajectory(s, 0, 0)).ok());
  EXPECT_EQ(Bytes(l), before);

  StreamingLearner d(Discrete(4));
  const std::vector<int64_t> out_of_range = {0, 1, 2, 4, 1};
  absl::StatusOr<ObserveSummary> r = d.Observe(DiscreteTrajectory(out_of_range, 0, 4));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("field state_ids value 3 is 4, expected a state id in [0, 4)"), std::string::npos)
      << r.status();
  StreamBatch id_pairs = DiscreteTrajectory(out_of_range, 0, 4);
  id_pairs.trajectory = false;
  r = d.Observe(id_pairs);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "field x_ids value 3 is 4, expected a state id in [0, 4)");
  EXPECT_EQ(d.samples(), 0);
  EXPECT_EQ(Bytes(d), Bytes(StreamingLearner(Discrete(4))));
}

// An estimator a model does not enable keeps nothing: after a trajectory, the snapshot carries
// the latent, predictive and lag statistics exactly when the options enable them, and the
// options of a disabled latent model (its reservoir size) leave the learner's bytes unchanged:
// nothing allocated, nothing updated.
TEST(StreamingLearner, DisabledEstimatorsKeepNoStatistics) {
  const RowMatrixXd s = Chain(400, 21);
  std::vector<int64_t> ids(401);
  for (int64_t t = 0; t <= 400; ++t) ids[t] = (t * 7 + t / 5) % 4;
  for (const bool discrete : {false, true}) {
    for (int mask = 0; mask < 8; ++mask) {
      StreamingLearner::Options o = discrete ? Discrete(4) : Continuous(0.5);
      o.latent = (mask & 1) != 0;
      o.window = (mask & 2) != 0 ? kWindow : 0;
      if ((mask & 4) == 0) o.lags.clear();
      SCOPED_TRACE(::testing::Message() << (discrete ? "discrete" : "continuous") << " mask " << mask);
      auto feed = [&](StreamingLearner& l) {
        if (discrete) {
          Feed(l, DiscreteTrajectory(ids, 0, 400));
        } else {
          Feed(l, Trajectory(s, 0, 400));
        }
      };
      StreamingLearner l(o);
      feed(l);
      const std::optional<StreamingLearnerSnapshot> snap = l.Snapshot();
      ASSERT_TRUE(snap.has_value());
      EXPECT_EQ(snap->latent.has_value(), o.latent);
      EXPECT_EQ(snap->predictive.has_value(), o.window > 0);
      EXPECT_EQ(snap->lags.has_value(), !o.lags.empty());
      EXPECT_EQ(snap->cme.has_value(), !discrete);
      if (snap->latent) {
        EXPECT_EQ(snap->latent->triples, 399);
      }
      if (!o.latent) {
        // The latent model is off: a reservoir of a million triples changes nothing.
        StreamingLearner::Options big = o;
        big.reservoir = 1000000;
        StreamingLearner lb(big);
        feed(lb);
        EXPECT_EQ(Bytes(lb), Bytes(l));
      }
    }
  }
}

TEST(StreamingLearner, OptionsValidateNamesTheProblem) {
  auto says = [](const StreamingLearner::Options& o, const std::string& what) {
    const absl::Status s = o.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.message().find(what), std::string::npos) << s;
  };
  EXPECT_TRUE(Continuous(0).Validate().ok());
  EXPECT_TRUE(Continuous(0.5).Validate().ok());
  EXPECT_TRUE(Discrete(4).Validate().ok());
  StreamingLearner::Options o = Continuous(0);
  o.num_states = 4;
  says(o, "dim is 2 and num_states is 4, expected exactly one of them >= 1");
  o = Continuous(0);
  o.cme.dim = 3;
  says(o, "cme.dim is 3, expected dim 2");
  o = Continuous(0);
  o.auto_sigma_warmup = 10;
  says(o, "auto_sigma_warmup is 10, expected >= 20 with sigma auto");
  o = Continuous(0);
  o.lags = {3, 1};
  says(o, "lag statistics:");
  o = Continuous(0);
  o.forgetting = 0;
  says(o, "transition counts:");
  o = Discrete(4);
  o.window = -1;
  says(o, "window is -1");
}

}  // namespace
}  // namespace cmestream
