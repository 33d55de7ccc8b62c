#include "core/stream/streaming_learner_options.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cmestream {
namespace learner_options {

// Discrete predictive-state statistics: a bound on num_states^window far above what a caller
// should allow (the daemon bounds the statistics' size itself, service/engine/model_config.h).
constexpr int kMaxHistoryStates = 1 << 23;

CompressedCme::Options Cme(const StreamingLearner::Options& o, double sigma) {
  CompressedCme::Options c = o.cme;
  c.dim = o.estimator_dim();
  c.sigma = sigma;
  return c;
}

TransitionCounts::Options Counts(const StreamingLearner::Options& o) {
  TransitionCounts::Options c;
  c.max_states = o.discrete() ? o.num_states : o.cme.max_dict;
  c.forgetting = o.forgetting;
  return c;
}

EmbeddingMoments::Options Moments(const StreamingLearner::Options& o) {
  EmbeddingMoments::Options m;
  m.forgetting = o.forgetting;
  return m;
}

SpectralMoments::Options Spectral(const StreamingLearner::Options& o, double sigma) {
  SpectralMoments::Options s;
  s.dim = o.estimator_dim();
  s.sigma = sigma;
  s.max_basis = o.cme.max_dict;
  s.forgetting = o.forgetting;
  // Rare re-bases (core/spectral/spectral_moments.h, RE-BASE SCHEDULE): a growing dictionary
  // keeps >= 80 % of the stream in the estimate, ready from 50 pairs.
  s.rebase_growth = 5;
  s.min_block_length = 25;
  s.min_epoch_samples = 50;
  // One flush multiplies the lazy scale by forgetting^-B: keep B log(1/forgetting) <= 200 even
  // at the smallest forgetting accepted.
  while (s.batch_size > 1 && s.batch_size * std::log(1.0 / s.forgetting) > 200.0) s.batch_size /= 2;
  return s;
}

int ForecastSkillHorizon(const StreamingLearner::Options& o) {
  return std::min(kMaxForecastSkillHorizon, std::max(kMinForecastSkillHorizon, o.delays));
}

ForecastRegression::Options Forecast(const StreamingLearner::Options& o) {
  ForecastRegression::Options f;
  f.dim = o.estimator_dim();
  f.scored_dims = o.forecast_scored_dims;
  f.skill_horizon = ForecastSkillHorizon(o);
  return f;
}

AlarmMonitor::Options Alarms(const StreamingLearner::Options& o) {
  AlarmMonitor::Options a;
  if (o.discrete()) {
    a.num_states = o.num_states;
  } else {
    a.dim = o.dim;
    a.channels = o.input_dim();
  }
  a.alarm_rate = o.alarm_rate;
  return a;
}

// kForecastFeatures: the forecast regression's state is (5 + 2) (q^2 + q d) doubles with
// q = d + F, which with F = 256 made a small model's export larger than gRPC's default 4 MB
// message; 128 features keep it near 1 MB at d = 12 (on 14 real series the geometric-mean
// ratio to the least-squares AR went from 1.013 to 1.024, docs/user-guide.md "Real data").
int ForecastFeatureCount(const StreamingLearner::Options& o) {
  const int f = o.forecast_features > 0 ? o.forecast_features : std::min(o.rff_features, kForecastFeatures);
  return std::min(f, ForecastRegression::kMaxFeatures);
}

int DefaultRffFeatures(int estimator_dim) { return estimator_dim == 1 ? 64 : 256; }

int DefaultForecastFeatures(int estimator_dim) {
  return estimator_dim == 1 ? kScalarForecastFeatures : kForecastFeatures;
}

std::shared_ptr<const FeatureMap> ForecastFeatures(const StreamingLearner::Options& o, double sigma) {
  absl::StatusOr<FeatureMap> features = FeatureMap::Rff(o.estimator_dim(), ForecastFeatureCount(o), sigma, o.seed);
  // Options::Validate() checked these arguments; a failure here is a programming error.
  if (!features.ok()) std::abort();
  return std::make_shared<const FeatureMap>(*std::move(features));
}

LagStatistics::Options Lags(const StreamingLearner::Options& o, double sigma) {
  LagStatistics::Options l;
  l.lags = o.lags;
  l.dim = o.discrete() ? 0 : o.estimator_dim();
  l.num_states = o.num_states;
  l.sigma = sigma > 0 ? sigma : 1.0;
  l.max_basis = o.lag_basis_atoms;
  return l;
}

MultiViewAccumulator::Options Latent(const StreamingLearner::Options& o, double sigma) {
  MultiViewAccumulator::Options m;
  if (o.discrete()) {
    m.features.kind = LatentFeatureOptions::Kind::kOneHot;
    m.features.dim = 1;
    m.features.num_symbols = o.num_states;
  } else {
    m.features.kind = LatentFeatureOptions::Kind::kRff;
    m.features.dim = o.estimator_dim();
    m.features.num_features = o.rff_features;
    m.features.sigma = sigma;
  }
  m.features.seed = o.seed;
  m.reservoir_size = o.reservoir;
  m.reservoir_seed = o.seed + 7;
  m.batch = std::max(1, std::min(32, 16384 / m.features.size()));
  return m;
}

PredictiveStateAccumulator::Options Predictive(const StreamingLearner::Options& o) {
  PredictiveStateAccumulator::Options p;
  p.history_length = o.window;
  if (o.discrete()) {
    p.kind = PredictiveStateAccumulator::Kind::kDiscrete;
    p.num_symbols = o.num_states;
    p.max_history_states = kMaxHistoryStates;
  } else {
    p.kind = PredictiveStateAccumulator::Kind::kLinearGaussian;
    p.dim = o.dim;
    p.future_length = o.window;
  }
  return p;
}

}  // namespace learner_options

namespace {

absl::Status Bad(absl::string_view what, const absl::Status& s) {
  return absl::InvalidArgumentError(absl::StrCat("StreamingLearner options: ", what, ": ", s.message()));
}

absl::Status Bad(const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("StreamingLearner options: ", message));
}

}  // namespace

int StreamingLearner::Options::run_pairs() const {
  if (discrete()) return 1;
  return std::max(1, std::min(micro_batch, kRunDoubles / std::max(1, estimator_dim())));
}

absl::Status StreamingLearner::Options::ValidateSigma(double sigma) const {
  namespace lo = learner_options;
  if (discrete()) return absl::OkStatus();
  // The CME's range of sigma is the narrowest (CompressedCme::kMinSigma..kMaxSigma): the random
  // features' (> 0, finite) follows from it.
  if (absl::Status s = lo::Cme(*this, sigma).Validate(); !s.ok()) return Bad("cme", s);
  if (absl::Status s = lo::Spectral(*this, sigma).Validate(); !s.ok()) return Bad("spectral moments", s);
  if (latent) {
    if (absl::Status s = lo::Latent(*this, sigma).Validate(); !s.ok()) return Bad("latent accumulator", s);
  }
  if (!lags.empty()) {
    if (absl::Status s = lo::Lags(*this, sigma).Validate(); !s.ok()) return Bad("lag statistics", s);
  }
  return absl::OkStatus();
}

absl::Status StreamingLearner::Options::Validate() const {
  namespace lo = learner_options;
  if ((dim >= 1) == (num_states >= 1) || dim < 0 || num_states < 0) {
    return Bad(absl::StrCat("dim is ", dim, " and num_states is ", num_states,
                            ", expected exactly one of them >= 1 (continuous: dim; discrete: num_states)"));
  }
  if (absl::Status s = lo::Counts(*this).Validate(); !s.ok()) return Bad("transition counts", s);
  if (scale_inputs && !auto_sigma()) {
    return Bad(absl::StrCat("scale_inputs needs sigma auto (a continuous model with cme.sigma 0); cme.sigma is ",
                            cme.sigma, discrete() ? " and the model is discrete" : ""));
  }
  if (!discrete()) {
    if (cme.dim != dim) return Bad(absl::StrCat("cme.dim is ", cme.dim, ", expected dim ", dim));
    if (!(cme.sigma >= 0)) return Bad(absl::StrCat("cme.sigma is ", cme.sigma, ", expected > 0, or 0 for auto"));
    // Any bandwidth SelectBandwidth may choose is > 0; 1 stands for it in the checks below.
    const double sigma = auto_sigma() ? 1.0 : cme.sigma;
    if (auto_sigma() && auto_sigma_warmup < 20) {
      return Bad(absl::StrCat("auto_sigma_warmup is ", auto_sigma_warmup, ", expected >= 20 with sigma auto"));
    }
    if (absl::Status s = lo::Cme(*this, sigma).Validate(); !s.ok()) return Bad("cme", s);
    if (rff_features < 1) return Bad(absl::StrCat("rff_features is ", rff_features, ", expected >= 1"));
    if (forecast_features < 0 || forecast_features > ForecastRegression::kMaxFeatures) {
      return Bad(
          absl::StrCat("forecast_features is ", forecast_features, ", expected 0..", ForecastRegression::kMaxFeatures));
    }
    if (absl::Status s = lo::Moments(*this).Validate(); !s.ok()) return Bad("embedding moments", s);
    if (absl::Status s = lo::Spectral(*this, sigma).Validate(); !s.ok()) return Bad("spectral moments", s);
    if (estimator_dim() <= lo::kMaxForecastDim) {
      if (absl::Status s = lo::Forecast(*this).Validate(); !s.ok()) return Bad("forecast regression", s);
    }
    if (latent) {
      if (absl::Status s = lo::Latent(*this, sigma).Validate(); !s.ok()) return Bad("latent accumulator", s);
    }
    if (micro_batch < 1 || micro_batch > kMaxMicroBatch) {
      return Bad(absl::StrCat("micro_batch is ", micro_batch, ", expected 1..", kMaxMicroBatch,
                              " (1 = the CME pair by pair)"));
    }
  } else if (latent) {
    if (absl::Status s = lo::Latent(*this, 0).Validate(); !s.ok()) return Bad("latent accumulator", s);
  }
  if (window < 0) return Bad(absl::StrCat("window is ", window, ", expected >= 0 (0 = none)"));
  if (window > 0) {
    if (absl::Status s = lo::Predictive(*this).Validate(); !s.ok()) return Bad("predictive accumulator", s);
  }
  if (!lags.empty()) {
    if (absl::Status s = lo::Lags(*this, 1.0).Validate(); !s.ok()) return Bad("lag statistics", s);
  }
  if (alarms) {
    if (absl::Status s = lo::Alarms(*this).Validate(); !s.ok()) return Bad("change alarms", s);
  }
  if (reduce != 0) {
    if (reduce < 0 || discrete() || reduce >= dim) {
      return Bad(absl::StrCat("reduce is ", reduce, ", expected 0 (off) or 1..", dim - 1,
                              " (fewer dimensions than dim, continuous models)"));
    }
    if (!auto_sigma()) return Bad(absl::StrCat("reduce needs sigma auto (the reduction is fitted on the warm-up)"));
    if (delays > 1) return Bad("reduce needs delays 1 (the reduction of windows is not supported)");
    if (static_cast<int64_t>(auto_sigma_warmup) < static_cast<int64_t>(InputReduction::kRowsPerDirection) * reduce) {
      return Bad(absl::StrCat("auto_sigma_warmup is ", auto_sigma_warmup,
                              ", expected >= ", InputReduction::kRowsPerDirection * reduce, " to fit reduce ", reduce));
    }
  }
  if (reset_on_alarm && !alarms) return Bad("reset_on_alarm needs alarms (a reset happens at an alarm)");
  if (delays != 1 || delay_stride != 1) {
    if (discrete()) return Bad(absl::StrCat("delays is ", delays, ", expected 1 for a discrete model"));
    if (delays < 1 || dim % delays != 0) {
      return Bad(
          absl::StrCat("delays is ", delays, ", expected >= 1 and dividing dim ", dim, " (dim = channels x delays)"));
    }
    if (absl::Status s = DelayEmbedding::Options{input_dim(), delays, delay_stride}.Validate(); !s.ok()) {
      return Bad("delay embedding", s);
    }
  }
  return absl::OkStatus();
}

}  // namespace cmestream
