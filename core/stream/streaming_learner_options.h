// The options of each estimator a StreamingLearner owns, derived from StreamingLearner::Options
// (and, for the sigma-dependent ones, the bandwidth in use). One place, so that construction,
// validation and deserialization (which checks a restored estimator against what the learner
// would build) cannot disagree. Internal to core/stream.
#pragma once

#include "core/stream/streaming_learner.h"

namespace cmestream::learner_options {

// The CME with bandwidth `sigma` (> 0): options.cme with that sigma.
CompressedCme::Options Cme(const StreamingLearner::Options& o, double sigma);
// Counts over the CME's X atoms (max_states = cme.max_dict) or the discrete ids.
TransitionCounts::Options Counts(const StreamingLearner::Options& o);
EmbeddingMoments::Options Moments(const StreamingLearner::Options& o);
// Basis = any landmarks, then the CME's X atoms (cap max_dict), the learner's forgetting; a
// re-base at 10 % new atoms once the stream has grown 5x, served from 50 samples, held-out
// blocks of 25-1000 samples (docs/algorithms.md §7).
SpectralMoments::Options Spectral(const StreamingLearner::Options& o, double sigma);
// A model whose sigma comes from a warm-up puts up to this many landmarks of the warm-up's
// sources in front of the spectral basis, until every warm-up source is represented to this
// residual variance (core/spectral/landmarks.h). Chosen on real series (docs/algorithms.md
// §7.2): 8-12 landmarks put 12-month cycles within 5 %; 32, or a tolerance of 0.01, let a
// trending series' unstable modes take the slowest place.
inline constexpr int kSpectralLandmarks = 12;
inline constexpr double kSpectralLandmarkTolerance = 0.1;
// ... only when the warm-up held fewer pairs than this (a short stream, or one whose owner ended
// the warm-up early): a longer warm-up leaves the dictionary rich enough, and landmarks there
// cost accuracy (four-well seed 2, 30k pairs: slowest timescale -5.3 % -> -8.5 %).
inline constexpr int64_t kSpectralLandmarksBelowWarmup = 500;
// requires: o.lags non-empty. Discrete models ignore sigma.
LagStatistics::Options Lags(const StreamingLearner::Options& o, double sigma);
// RFF features at `sigma` (continuous) or one-hot ids (discrete).
MultiViewAccumulator::Options Latent(const StreamingLearner::Options& o, double sigma);
// requires: o.window > 0.
PredictiveStateAccumulator::Options Predictive(const StreamingLearner::Options& o);

// The forecast regression (continuous models of dim <= kMaxForecastDim): scored on the last
// forecast_scored_dims components; held-out blocks of 16 pairs in 5 folds (docs/algorithms.md §11).
inline constexpr int kMaxForecastDim = 256;
// The horizons at which the forecast candidates' live skill is kept (docs/algorithms.md §11
// "Served forecast"): 1..max(12, delays), at most 48 (a season of monthly or half-hourly rows).
inline constexpr int kMinForecastSkillHorizon = 12;
inline constexpr int kMaxForecastSkillHorizon = 48;
int ForecastSkillHorizon(const StreamingLearner::Options& o);
ForecastRegression::Options Forecast(const StreamingLearner::Options& o);
// Its features: random Fourier features at `sigma` drawn from the model's seed, ForecastFeatureCount
// of them: o.forecast_features, or min(rff_features, 128) when it is 0 (kForecastFeatures says why
// not 256), at most ForecastRegression::kMaxFeatures.
inline constexpr int kForecastFeatures = 128;
int ForecastFeatureCount(const StreamingLearner::Options& o);
// The daemon's default forecast_features for an estimator input of `estimator_dim` values when
// rff_features is defaulted too (docs/user-guide.md "Model fields"): 32 for one value,
// kForecastFeatures otherwise. The regression costs q^2 / 2 multiply-adds a pair, (K + 2) q^2
// doubles and O(q^3) a refit (q = estimator_dim + F): at F = 128 its refits and sums were half of
// a 1-channel fleet's daemon CPU (21 us a pair; 10 us at F = 32), and on NAB's 58 real series the
// served forecast's live error at F = 32 is within 0.1 % of F = 128's at horizons 1 and 12
// (docs/benchmarks.md "Forecast features sized to the input").
inline constexpr int kScalarForecastFeatures = 32;
int DefaultForecastFeatures(int estimator_dim);
std::shared_ptr<const FeatureMap> ForecastFeatures(const StreamingLearner::Options& o, double sigma);

// The default number of random Fourier features of the embedding moments (rff_features) for an
// estimator input of `estimator_dim` values (docs/user-guide.md "Model fields"): 64 for one value,
// 256 otherwise. The moments cost 3 N^2 doubles and 2 N^2 multiply-adds a pair, 93 % of a default
// 1-channel model's work at N = 256 (docs/benchmarks.md "Fleets"); on a scalar input 64 features
// resolve what 256 do (the four-well's embedding timescale 5.38 against 5.44 at 256, truth 5.80;
// 32 gave 4.06: tests/integration/test_daemon_views.cc ContinuousFourWellClusters).
int DefaultRffFeatures(int estimator_dim);

// The change alarms (options.alarms): on the raw channels (input_dim) of a state of dim values,
// or on the discrete ids.
AlarmMonitor::Options Alarms(const StreamingLearner::Options& o);

}  // namespace cmestream::learner_options
