#include "service/engine/model_config.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/forecast/forecast_regression.h"
#include "core/stream/streaming_learner_options.h"
#include "service/engine/lags.h"
#include "service/engine/wire_limits.h"

namespace cmestream::service {
namespace {

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok =
        (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

absl::Status Bad(const v1::ModelConfig& c, absl::string_view field, double value, absl::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat("model '", c.name(), "': field ", field, " is ", value, ", expected ", expected));
}

// The latent model's default third-moment reservoir (docs/algorithms.md §5.6): 100000 triples,
// at most 3e6 stored doubles (24 MB) at high dimensions. Its sampling error is the weights'
// spread over data: on the paper's HMM (1e5 observations, five seeds) the largest weight error
// is <= 0.0055 with 100000 triples and up to 0.017 with 20000 (the former default), for a fit of
// 0.8 s instead of 0.2 s (D = 200).
constexpr uint64_t kDefaultReservoir = 100000;
constexpr uint64_t kDefaultReservoirValues = 3000000;
uint32_t DefaultReservoir(uint64_t obs_dim) {
  return static_cast<uint32_t>(
      std::max<uint64_t>(1, std::min(kDefaultReservoir, kDefaultReservoirValues / (3 * obs_dim))));
}

// Fields of the streaming statistics and views (docs/algorithms.md §2-6): defaults, ranges
// and the memory bounds documented in model_config.h.
absl::Status NormalizeViewFields(v1::ModelConfig& c) {
  const bool discrete = c.num_states() > 0;
  const uint64_t p = c.num_states();
  if (!c.has_forgetting()) c.set_forgetting(1.0);
  if (!std::isfinite(c.forgetting()) || c.forgetting() < kMinForgetting || c.forgetting() > 1) {
    return Bad(c, "forgetting", c.forgetting(), absl::StrCat("in [", kMinForgetting, ", 1] (1 = no forgetting)"));
  }
  // Sized to the estimator's input (learner_options::DefaultRffFeatures and
  // DefaultForecastFeatures) when the embedding's features are defaulted; min(N, 128) forecast
  // features when N was given (as before the field existed: configs stored without it load as
  // they ran).
  const uint64_t estimator_dim = c.reduce() > 0 ? c.reduce() : StateDim(c);
  const int estimator_dim_capped = static_cast<int>(std::min<uint64_t>(estimator_dim, kMaxDim));
  if (!c.has_forecast_features() && !discrete) {
    c.set_forecast_features(
        c.has_rff_features() ? std::min<uint32_t>(c.rff_features(), learner_options::kForecastFeatures)
                             : static_cast<uint32_t>(learner_options::DefaultForecastFeatures(estimator_dim_capped)));
  }
  if (!c.has_rff_features()) {
    c.set_rff_features(discrete ? kDefaultRffFeatures
                                : static_cast<uint32_t>(learner_options::DefaultRffFeatures(estimator_dim_capped)));
  }
  if (!discrete && (c.rff_features() < 1 || c.rff_features() > kMaxRffFeatures)) {
    return Bad(c, "rff_features", c.rff_features(), absl::StrCat("1..", kMaxRffFeatures));
  }
  if (!discrete && (c.forecast_features() < 1 || c.forecast_features() > ForecastRegression::kMaxFeatures)) {
    return Bad(c, "forecast_features", c.forecast_features(), absl::StrCat("1..", ForecastRegression::kMaxFeatures));
  }
  if (discrete && c.has_forecast_features()) {
    return Bad(c, "forecast_features", c.forecast_features(), "unset for a discrete model (num_states > 0)");
  }
  if (!c.has_rank()) c.set_rank(4);
  if (c.rank() < 1 || c.rank() > kMaxRank) return Bad(c, "rank", c.rank(), absl::StrCat("1..", kMaxRank));
  if (!c.has_clusters()) c.set_clusters(2);
  if (c.clusters() < 1 || c.clusters() > kMaxClusters) {
    return Bad(c, "clusters", c.clusters(), absl::StrCat("1..", kMaxClusters));
  }
  if (!c.has_meta_states()) c.set_meta_states(0);
  if (c.meta_states() > kMaxMetaStates) {
    return Bad(c, "meta_states", c.meta_states(), absl::StrCat("0 (off) .. ", kMaxMetaStates));
  }
  if (discrete && c.meta_states() > p) {
    return Bad(c, "meta_states", c.meta_states(), absl::StrCat("<= num_states ", p));
  }
  if (!c.has_anchor_threshold()) c.set_anchor_threshold(0.1);
  if (!std::isfinite(c.anchor_threshold()) || c.anchor_threshold() < 0 || c.anchor_threshold() >= 1) {
    return Bad(c, "anchor_threshold", c.anchor_threshold(), "in [0, 1)");
  }
  if (c.vertex_hunting().empty()) c.set_vertex_hunting("spa");
  if (c.vertex_hunting() != "spa" && c.vertex_hunting() != "kmeans-spa") {
    return absl::InvalidArgumentError(absl::StrCat("model '", c.name(), "': field vertex_hunting is '",
                                                   c.vertex_hunting().substr(0, 40),
                                                   "', expected \"spa\" or \"kmeans-spa\""));
  }
  if (!c.has_latent_states()) c.set_latent_states(0);
  if (!c.has_tensor_restarts()) c.set_tensor_restarts(20);
  if (!c.has_tensor_iterations()) c.set_tensor_iterations(30);
  const uint64_t obs = StateDim(c);
  if (!c.has_reservoir()) c.set_reservoir(DefaultReservoir(obs));
  if (c.latent_states() > 0) {
    const uint64_t features = discrete ? p : c.rff_features();
    if (discrete && (p < 2 || p > kMaxLatentSymbols)) {
      return Bad(c, "num_states", p,
                 absl::StrCat("2..", kMaxLatentSymbols, " for a latent model (one-hot features, ",
                              "3 num_states^2 moments); or latent_states 0"));
    }
    if (c.latent_states() > features) {
      return Bad(c, "latent_states", c.latent_states(),
                 absl::StrCat("0 (off) .. ", features, discrete ? " (num_states)" : " (rff_features)"));
    }
  }
  if (c.tensor_restarts() < 1 || c.tensor_restarts() > 1000)
    return Bad(c, "tensor_restarts", c.tensor_restarts(), "1..1000");
  if (c.tensor_iterations() < 1 || c.tensor_iterations() > 10000) {
    return Bad(c, "tensor_iterations", c.tensor_iterations(), "1..10000");
  }
  // The reservoir's memory bound depends on dim and binds only a model that runs the latent
  // estimator: a model without it allocates no reservoir, so its (default) size never refuses
  // the model; a value below 1 is refused either way (a typo, not a limit).
  if (c.reservoir() < 1) return Bad(c, "reservoir", c.reservoir(), ">= 1");
  if (c.latent_states() > 0 && static_cast<uint64_t>(c.reservoir()) * 3 * obs > kMaxReservoirValues) {
    return Bad(c, "reservoir", c.reservoir(),
               absl::StrCat("1..", kMaxReservoirValues / (3 * obs), " (3 * reservoir * dim <= ", kMaxReservoirValues,
                            ") for a latent model (latent_states > 0)"));
  }
  if (!c.has_window()) c.set_window(0);
  if (c.window() > kMaxWindow) return Bad(c, "window", c.window(), absl::StrCat("0 (off) .. ", kMaxWindow));
  if (c.window() > 0) {
    if (discrete) {
      // Statistics: S^H (S^2 + S + 1) doubles (PredictiveStateAccumulator).
      if (p < 2) return Bad(c, "num_states", p, ">= 2 for a predictive-state model (window > 0)");
      double histories = 1;
      for (uint32_t k = 0; k < c.window(); ++k) histories *= static_cast<double>(p);
      const double doubles = histories * (static_cast<double>(p) * p + p + 1);
      if (doubles > kMaxPredictiveDoubles) {
        return Bad(c, "window", c.window(),
                   absl::StrCat("smaller: num_states^window * (num_states^2 + num_states + 1) = ", doubles,
                                " doubles of statistics, at most ", kMaxPredictiveDoubles));
      }
    } else {
      const double side = static_cast<double>(StateDim(c)) * (2.0 * c.window() + 1);
      if (side > kMaxPredictiveSide) {
        return Bad(c, "window", c.window(),
                   absl::StrCat("smaller: dim * delays * (2 window + 1) = ", side, ", at most ", kMaxPredictiveSide));
      }
    }
  }
  if (!c.has_ridge_stage1()) c.set_ridge_stage1(1e-3);
  if (!std::isfinite(c.ridge_stage1()) || c.ridge_stage1() < 0) return Bad(c, "ridge_stage1", c.ridge_stage1(), ">= 0");
  if (!c.has_ridge_stage2()) c.set_ridge_stage2(1e-6);
  if (!std::isfinite(c.ridge_stage2()) || c.ridge_stage2() < 0) return Bad(c, "ridge_stage2", c.ridge_stage2(), ">= 0");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::ModelConfig> NormalizeModelConfig(const v1::ModelConfig& in, const ConfigDefaults& defaults) {
  if (!ValidName(in.name())) {
    return absl::InvalidArgumentError(
        absl::StrCat("field name is '", in.name().substr(0, 80), "', expected 1 to 64 characters from [A-Za-z0-9_.-]"));
  }
  v1::ModelConfig c = in;
  const bool discrete = c.num_states() > 0;
  if (c.has_fork_index() && !IsFork(c)) {
    return absl::InvalidArgumentError(absl::StrCat("model '", c.name(), "': field fork_index is set without fork_of"));
  }
  if (IsFork(c) && (!ValidName(c.fork_of()) || !c.has_fork_index())) {
    return absl::InvalidArgumentError(absl::StrCat("model '", c.name(), "': field fork_of is '",
                                                   c.fork_of().substr(0, 80),
                                                   "', expected a model name with fork_index"));
  }
  if (discrete) {
    if (c.num_states() > kMaxNumStates) return Bad(c, "num_states", c.num_states(), absl::StrCat("1..", kMaxNumStates));
    // A state id is one number: dim 1 is accepted for convenience and stored as 0.
    if (c.dim() > 1) return Bad(c, "dim", c.dim(), "0 for a discrete model (num_states > 0)");
    c.set_dim(0);
  } else if (c.dim() < 1 || c.dim() > kMaxDim) {
    return Bad(c, "dim", c.dim(), absl::StrCat("1..", kMaxDim, " (or num_states > 0 for a discrete model)"));
  }

  // Delay embedding: stored unset when off, so configs older than the fields read the same.
  if (c.has_delays() && (c.delays() < 1 || c.delays() > static_cast<uint32_t>(DelayEmbedding::kMaxDelays))) {
    return Bad(c, "delays", c.delays(), absl::StrCat("1..", DelayEmbedding::kMaxDelays, " (1 = none)"));
  }
  if (c.has_delay_stride() &&
      (c.delay_stride() < 1 || c.delay_stride() > static_cast<uint32_t>(DelayEmbedding::kMaxStride))) {
    return Bad(c, "delay_stride", c.delay_stride(), absl::StrCat("1..", DelayEmbedding::kMaxStride));
  }
  if (c.delays() > 1 && discrete) return Bad(c, "delays", c.delays(), "1 for a discrete model (num_states > 0)");
  if (c.delay_stride() > 1 && c.delays() <= 1) {
    return Bad(c, "delay_stride", c.delay_stride(), "1 without delays (set delays > 1 to embed)");
  }
  if (static_cast<uint64_t>(c.dim()) * std::max<uint32_t>(c.delays(), 1) > kMaxDim) {
    return Bad(c, "delays", c.delays(),
               absl::StrCat("at most ", kMaxDim / c.dim(), " (dim x delays <= ", kMaxDim, " values per window)"));
  }
  if (c.delays() == 1) c.clear_delays();
  if (c.delay_stride() == 1) c.clear_delay_stride();

  if (!c.has_sigma() || discrete) c.set_sigma(0);  // auto; discrete models have no kernel (ignored)
  if (!std::isfinite(c.sigma()) || c.sigma() < 0) return Bad(c, "sigma", c.sigma(), "> 0, or 0/unset for auto");
  if (!c.has_eta()) c.set_eta(0.1);
  if (!std::isfinite(c.eta()) || c.eta() <= 0) return Bad(c, "eta", c.eta(), "> 0");
  if (!c.has_lambda()) c.set_lambda(1e-3);
  if (!std::isfinite(c.lambda()) || c.lambda() < 0) return Bad(c, "lambda", c.lambda(), ">= 0");
  if (c.eta() * c.lambda() >= 1) return Bad(c, "eta*lambda", c.eta() * c.lambda(), "< 1");
  if (!c.has_epsilon()) c.set_epsilon(1e-3);
  if (!std::isfinite(c.epsilon()) || c.epsilon() < 0) return Bad(c, "epsilon", c.epsilon(), ">= 0");
  if (!c.has_max_dict()) c.set_max_dict(1000);
  if (c.max_dict() < 1 || c.max_dict() > kMaxDictCap)
    return Bad(c, "max_dict", c.max_dict(), absl::StrCat("1..", kMaxDictCap));
  if (!c.has_dt()) c.set_dt(1.0);
  if (!std::isfinite(c.dt()) || c.dt() <= 0) return Bad(c, "dt", c.dt(), "> 0");
  if (!c.has_seed()) c.set_seed(1);
  // Input reduction (docs/algorithms.md §1.15): by default for a wide stream the daemon may
  // fit it for (sigma auto, no delays); stored unset for off.
  if (!c.has_reduce() && !discrete && c.sigma() == 0 && c.delays() <= 1 && c.dim() > kReduceAboveDim) {
    c.set_reduce(kDefaultReduce);
  }
  if (c.reduce() > 0) {
    if (discrete) return Bad(c, "reduce", c.reduce(), "0 for a discrete model (num_states > 0)");
    if (c.sigma() > 0) {
      return Bad(c, "reduce", c.reduce(),
                 "0 with an explicit sigma (the reduction is fitted on the warm-up of sigma auto)");
    }
    if (c.delays() > 1) return Bad(c, "reduce", c.reduce(), "0 with delays (windows are not reduced)");
    if (c.reduce() >= c.dim())
      return Bad(c, "reduce", c.reduce(), absl::StrCat("0 (off) .. ", c.dim() - 1, " (< dim)"));
  }
  const uint32_t reduce_warmup = InputReduction::kRowsPerDirection * c.reduce();
  if (!c.has_auto_sigma_warmup()) c.set_auto_sigma_warmup(std::max<uint32_t>(1000, reduce_warmup));
  if (c.auto_sigma_warmup() < kMinAutoSigmaWarmup || c.auto_sigma_warmup() > kMaxAutoSigmaWarmup) {
    return Bad(c, "auto_sigma_warmup", c.auto_sigma_warmup(),
               absl::StrCat(kMinAutoSigmaWarmup, "..", kMaxAutoSigmaWarmup));
  }
  if (c.auto_sigma_warmup() < reduce_warmup) {
    return Bad(c, "auto_sigma_warmup", c.auto_sigma_warmup(),
               absl::StrCat(">= ", reduce_warmup, " with reduce ", c.reduce(), " (10 pairs per direction)"));
  }
  if (c.has_reduce() && c.reduce() == 0) c.clear_reduce();
  if (!c.has_refresh_interval_seconds()) c.set_refresh_interval_seconds(defaults.refresh_interval_seconds);
  if (!std::isfinite(c.refresh_interval_seconds()) || c.refresh_interval_seconds() <= 0) {
    return Bad(c, "refresh_interval_seconds", c.refresh_interval_seconds(), "> 0");
  }
  if (!c.has_refresh_every_samples()) c.set_refresh_every_samples(0);
  if (!c.has_step_decay_samples()) c.set_step_decay_samples(0);
  if (!std::isfinite(c.step_decay_samples()) || c.step_decay_samples() < 0) {
    return Bad(c, "step_decay_samples", c.step_decay_samples(), ">= 0 (0 = constant step)");
  }
  if (!c.has_step_decay_power()) c.set_step_decay_power(0.5);
  if (!std::isfinite(c.step_decay_power()) || c.step_decay_power() <= 0 || c.step_decay_power() > 1) {
    return Bad(c, "step_decay_power", c.step_decay_power(), "in (0, 1]");
  }
  if (!c.has_averaging()) c.set_averaging(false);

  // Input conditioning: "auto" by default where sigma is chosen by the daemon (the bandwidth is
  // then chosen on the scaled channels); an explicit sigma is in the user's units.
  if (c.has_scale() && c.scale() != kScaleAuto && c.scale() != kScaleNone) {
    return absl::InvalidArgumentError(absl::StrCat("field scale is '", c.scale().substr(0, 40), "' of model '",
                                                   c.name(), "', expected 'auto' or 'none'"));
  }
  if (c.has_scale() && c.scale() == kScaleAuto && (discrete || c.sigma() > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "field scale is 'auto' for model '", c.name(), "', expected 'none' ",
        discrete ? "for a discrete model (num_states > 0)"
                 : "with an explicit sigma (sigma is in the user's units; omit sigma to let the daemon choose it on "
                   "the scaled channels)"));
  }
  // A reduced model defaults to "none": the principal directions of the covariance keep the
  // channels' own variances, where per-channel scaling would lift quiet, noisy channels to the
  // level of the signal (a 512-channel stream of a hidden four-well: slowest timescale 0.94-1.04 of
  // the truth unscaled, 0.90-0.96 scaled; docs/algorithms.md §1.15). Pass scale "auto" for
  // channels in different units.
  if (!c.has_scale() && !discrete && c.sigma() == 0 && c.reduce() == 0) c.set_scale(kScaleAuto);
  if (c.scale() == kScaleNone) c.clear_scale();  // stored unset: configs older than the field mean "none"

  // Change alarms: "on" by default for a new model; stored unset for "off" (older configs lack it).
  if (c.has_alarms() && c.alarms() != kAlarmsOn && c.alarms() != kAlarmsOff) {
    return absl::InvalidArgumentError(absl::StrCat("field alarms is '", c.alarms().substr(0, 40), "' of model '",
                                                   c.name(), "', expected 'on' or 'off'"));
  }
  if (!c.has_alarms()) c.set_alarms(kAlarmsOn);
  if (c.alarms() == kAlarmsOff) {
    if (c.has_alarm_rate()) {
      return Bad(c, "alarm_rate", c.alarm_rate(), "unset with alarms 'off' (the rate is the alarms' target)");
    }
    c.clear_alarms();
  } else {
    if (!c.has_alarm_rate()) c.set_alarm_rate(1.0);
    if (!std::isfinite(c.alarm_rate()) || c.alarm_rate() <= 0 || c.alarm_rate() > AlarmMonitor::kMaxAlarmRate) {
      return Bad(c, "alarm_rate", c.alarm_rate(), "in (0, 25] false alarms per 10,000 pairs");
    }
  }

  // What an alarm does: "keep" (stored unset), "reset" (a continuous model with alarms) or
  // "fork" (a model with alarms, not itself a fork, whose name leaves room for ".k").
  if (c.has_on_change()) {
    if (c.on_change() != kOnChangeKeep && c.on_change() != kOnChangeReset && c.on_change() != kOnChangeFork) {
      return absl::InvalidArgumentError(absl::StrCat("field on_change is '", c.on_change().substr(0, 40),
                                                     "' of model '", c.name(),
                                                     "', expected 'keep', 'reset' or 'fork'"));
    }
    if (c.on_change() == kOnChangeFork) {
      if (!HasAlarms(c)) {
        return absl::InvalidArgumentError(
            absl::StrCat("field on_change is 'fork' for model '", c.name(),
                         "', expected 'keep' with alarms 'off' (a fork starts at an alarm)"));
      }
      if (c.name().size() > kMaxForkingNameBytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "field on_change is 'fork' for model '", c.name(), "' whose name has ", c.name().size(),
            " characters, expected at most ", kMaxForkingNameBytes, " (its forks are named '<name>.k' in 64)"));
      }
      if (IsFork(c)) {
        return absl::InvalidArgumentError(
            absl::StrCat("field on_change is 'fork' for model '", c.name(), "', a fork itself; expected 'keep'"));
      }
    }
    if (c.on_change() == kOnChangeReset && (!HasAlarms(c) || discrete)) {
      return absl::InvalidArgumentError(
          absl::StrCat("field on_change is 'reset' for model '", c.name(), "', expected 'keep' ",
                       discrete ? "for a discrete model (its alarms score with its counts, which a reset would empty)"
                                : "with alarms 'off' (a reset happens at an alarm)"));
    }
    if (c.on_change() == kOnChangeKeep) c.clear_on_change();
  }

  absl::Status views = NormalizeViewFields(c);
  if (!views.ok()) return views;
  if (absl::Status lags = NormalizeLags(c); !lags.ok()) return lags;
  if (discrete) return c;  // no CME: its fields carry their defaults but are not used

  // Last line of defense: whatever the core learner itself requires.
  const absl::Status core = CmeOptionsFor(c, c.sigma() > 0 ? c.sigma() : 1.0).Validate();
  if (!core.ok()) return absl::InvalidArgumentError(absl::StrCat("model '", c.name(), "': ", core.message()));
  return c;
}

v1::ModelConfig ForkConfig(const v1::ModelConfig& parent, int64_t k, int64_t index) {
  v1::ModelConfig c = parent;
  c.set_name(absl::StrCat(parent.name(), ".", k));
  c.clear_on_change();
  c.set_fork_of(parent.name());
  c.set_fork_index(static_cast<uint64_t>(index));
  return c;
}

uint32_t StateDim(const v1::ModelConfig& c) {
  if (c.num_states() > 0) return 1;
  return c.dim() * std::max<uint32_t>(c.delays(), 1);
}

CompressedCme::Options CmeOptionsFor(const v1::ModelConfig& c, double sigma) {
  CompressedCme::Options o;
  o.dim = static_cast<int>(StateDim(c));
  o.sigma = sigma;
  o.eta = c.eta();
  o.lambda = c.lambda();
  o.epsilon = c.epsilon();
  o.max_dict = static_cast<int>(c.max_dict());
  o.step_decay_samples = c.step_decay_samples();
  o.step_decay_power = c.step_decay_power();
  o.averaging = c.averaging();
  return o;
}

ViewOptions ViewOptionsFor(const v1::ModelConfig& c) {
  ViewOptions o;
  o.label = absl::StrCat("model '", c.name(), "'");
  o.dt = c.dt();
  o.num_states = static_cast<int>(c.num_states());
  o.dim = static_cast<int>(StateDim(c));
  o.rank = static_cast<int>(c.rank());
  o.clusters = static_cast<int>(c.clusters());
  o.seed = c.seed();
  o.meta_states = static_cast<int>(c.meta_states());
  o.anchor_threshold = c.anchor_threshold();
  o.kmeans_spa = c.vertex_hunting() == "kmeans-spa";
  o.latent_states = static_cast<int>(c.latent_states());
  o.tensor_restarts = static_cast<int>(c.tensor_restarts());
  o.tensor_iterations = static_cast<int>(c.tensor_iterations());
  o.window = static_cast<int>(c.window());
  o.ridge_stage1 = c.ridge_stage1();
  o.ridge_stage2 = c.ridge_stage2();
  o.lag_statistics = HasLagStatistics(c);
  // The newest observation: the last `dim` coordinates of a delay window; without delays the
  // whole state (with input reduction: its principal coordinates).
  o.observed_channels = c.delays() > 1 ? static_cast<int>(c.dim()) : 0;
  return o;
}

std::optional<DelayEmbedding::Options> DelayOptionsFor(const v1::ModelConfig& c) {
  if (c.num_states() > 0 || c.delays() <= 1) return std::nullopt;
  return DelayEmbedding::Options{static_cast<int>(c.dim()), static_cast<int>(c.delays()),
                                 static_cast<int>(std::max<uint32_t>(c.delay_stride(), 1))};
}

StreamingLearner::Options LearnerOptionsFor(const v1::ModelConfig& c) {
  StreamingLearner::Options o;
  const bool discrete = c.num_states() > 0;
  o.dim = discrete ? 0 : static_cast<int>(StateDim(c));
  o.num_states = static_cast<int>(c.num_states());
  o.cme = CmeOptionsFor(c, discrete ? 0 : c.sigma());
  if (const std::optional<DelayEmbedding::Options> delay = DelayOptionsFor(c)) {
    o.delays = delay->delays;
    o.delay_stride = delay->stride;
    o.forecast_scored_dims = static_cast<int>(c.dim());  // the skill of the newest row
  }
  o.auto_sigma_warmup = static_cast<int>(c.auto_sigma_warmup());
  o.scale_inputs = ScalesInputs(c);
  o.reduce = static_cast<int>(c.reduce());
  o.seed = c.seed();
  o.forgetting = c.forgetting();
  o.rff_features = static_cast<int>(c.rff_features());
  o.forecast_features = static_cast<int>(c.forecast_features());
  o.latent = c.latent_states() > 0;
  o.reservoir = static_cast<int>(c.reservoir());
  o.window = static_cast<int>(c.window());
  o.lags.clear();
  if (HasLagStatistics(c)) {
    o.lags.assign(c.lags().begin(), c.lags().end());
    if (o.lags.empty()) o.lags = {1};
  }
  o.lag_basis_atoms = kLagBasisAtoms;
  o.alarms = HasAlarms(c);
  if (o.alarms) o.alarm_rate = c.alarm_rate();
  o.reset_on_alarm = c.on_change() == kOnChangeReset;
  o.max_producer_bytes = kMaxProducerIdBytes;
  o.max_episode_bytes = kMaxEpisodeIdBytes;
  return o;
}

absl::StatusOr<v1::ModelConfig> NormalizeStoredModelConfig(const v1::ModelConfig& stored,
                                                           const ConfigDefaults& defaults) {
  // A missing `reduce` is off (written before the field existed), never the new model's default:
  // normalizing it as a new config would also check a warm-up it was not created with.
  v1::ModelConfig in = stored;
  if (!in.has_reduce()) in.set_reduce(0);
  absl::StatusOr<v1::ModelConfig> c = NormalizeModelConfig(in, defaults);
  if (c.ok() && !stored.has_scale()) c->clear_scale();
  if (c.ok() && !stored.has_reduce()) c->clear_reduce();
  if (c.ok() && !stored.has_alarms()) {
    c->clear_alarms();
    c->clear_alarm_rate();
  }
  return c;
}

v1::InputScaling InputScalingProto(const v1::ModelConfig& c, const InputScaler* scaler,
                                   const InputReduction* reduction) {
  v1::InputScaling p;
  p.set_reduce(c.reduce());
  if (reduction != nullptr) {
    p.set_explained_variance(reduction->explained());
    for (Eigen::Index j = 0; j < reduction->variances().size(); ++j) p.add_reduce_variances(reduction->variances()(j));
  }
  p.set_mode(ScalesInputs(c) ? kScaleAuto : kScaleNone);
  p.set_frozen(scaler != nullptr || reduction != nullptr);
  if (scaler != nullptr) {
    for (double v : scaler->center()) p.add_center(v);
    for (double v : scaler->scale()) p.add_scale(v);
    for (InputScaler::Spread s : scaler->spread()) p.add_spread(SpreadName(s));
  }
  return p;
}

v1::SigmaSelection SigmaSelectionProto(const SigmaSelection& s) {
  v1::SigmaSelection p;
  p.set_automatic(s.automatic);
  p.set_chosen(s.chosen);
  p.set_median_distance(s.median_distance);
  for (double c : s.candidates) p.add_candidates(c);
  for (double v : s.scores) p.add_scores(v);
  p.set_warmup_pairs(s.warmup_pairs);
  p.set_note(s.note);
  return p;
}

SigmaSelection SigmaSelectionFromProto(const v1::SigmaSelection& p) {
  SigmaSelection s;
  s.automatic = p.automatic();
  s.chosen = p.chosen();
  s.median_distance = p.median_distance();
  s.candidates.assign(p.candidates().begin(), p.candidates().end());
  s.scores.assign(p.scores().begin(), p.scores().end());
  s.warmup_pairs = p.warmup_pairs();
  s.note = p.note();
  return s;
}

}  // namespace cmestream::service
