// StreamingLearner::Serialize / Deserialize: the learner's part of the daemon's MODL object
// (layout in streaming_learner.h; the estimators' own objects in core/io/learner_serialization.cc).
// The read messages name the parts as the daemon's snapshot errors always did ("model ...").
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/io/binary_io.h"
#include "core/stream/streaming_learner.h"
#include "core/stream/streaming_learner_options.h"

namespace cmestream {

void StreamingLearner::Serialize(io::Writer& w) const {
  lanes_.Settle();  // the last run's events (TWO CORES)
  io::WriteFilledRows(w, warmup_n_, warmup_x_, warmup_y_);
  w.Bool(episode_open_);
  w.String(episode_producer_);
  w.String(episode_id_);
  w.Doubles(episode_last_.data(), static_cast<int64_t>(episode_last_.size()));
  w.Bool(cme_ != nullptr);
  if (cme_) cme_->Serialize(w);
  counts_->Serialize(w);
  io::WriteOptional(w, moments_);
  io::WriteOptional(w, latent_);
  io::WriteOptional(w, predictive_);
  io::WriteOptional(w, spectral_);
  io::WriteOptional(w, lags_);
  if (run_) run_->Serialize(w);
  // Version 5: only a scaled model writes its scaler, so an unscaled model's bytes (and state
  // digest) are those of version 4.
  if (scaler_) scaler_->Serialize(w);
  // Version 6: the forecast regression.
  io::WriteOptional(w, forecast_);
  // Version 7: only a model with delays writes its window, so the bytes (and state digest) of a
  // model without are those of version 6.
  if (delay_) delay_->Serialize(w);
  // Version 8: only a model with alarms writes them, so the bytes (and state digest) of a model
  // without are those of version 7.
  if (alarms_) alarms_->Serialize(w);
  // Version 9: only a reduced model writes its reduction (once the warm-up ended), so the bytes
  // (and state digest) of a model without are those of version 8.
  if (reduction_) reduction_->Serialize(w);
}

absl::StatusOr<StreamingLearner> StreamingLearner::Deserialize(io::Reader& r, const Options& options, uint32_t version,
                                                               SigmaSelection sigma_selection) {
  namespace lo = learner_options;
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (version < 1 || version > kStateVersion) {
    return r.Fail(absl::StrCat("learner state version ", version, " is not supported by this build (reads 1..",
                               kStateVersion, ")"));
  }
  const bool discrete = options.discrete();
  const int64_t warmup_cap = options.auto_sigma() ? options.auto_sigma_warmup : 0;
  const int64_t warmup_n = r.Count("model warm-up pairs", 0, std::max<int64_t>(0, warmup_cap - 1));
  if (!r.ok()) return r.status();

  // A fresh learner (allocating per the validated options), whose state is then overwritten.
  StreamingLearner l(options);
  if (warmup_n > 0) {
    r.MatrixInto("model warm-up x", l.warmup_x_.topRows(warmup_n));
    r.MatrixInto("model warm-up y", l.warmup_y_.topRows(warmup_n));
  }
  l.warmup_n_ = warmup_n;
  l.episode_open_ = r.Bool("model episode open");
  l.episode_producer_ = r.String("model episode producer", options.max_producer_bytes);
  l.episode_id_ = r.String("model episode id", options.max_episode_bytes);
  r.Doubles("model episode last state", static_cast<int64_t>(l.episode_last_.size()), l.episode_last_.data());
  const bool has_cme = r.Bool("model has CME");
  // A continuous model has its CME unless sigma is "auto" and the warm-up is still buffering
  // (created, or fewer than auto_sigma_warmup pairs seen): that state is as valid as any.
  if (r.ok() && discrete && has_cme) return r.Fail("a discrete model cannot hold a CME");
  if (r.ok() && !discrete && !has_cme && !options.auto_sigma()) return r.Fail("model with a fixed sigma has no CME");
  if (r.ok() && has_cme && warmup_n > 0) {
    return r.Fail(absl::StrCat("model holds a CME and ", warmup_n, " warm-up pairs (the warm-up ends with the CME)"));
  }
  if (has_cme) {
    absl::StatusOr<CompressedCme> cme = CompressedCme::Deserialize(r);
    if (!cme.ok()) return cme.status();
    if (cme->options().dim != options.estimator_dim() || cme->options().max_dict != options.cme.max_dict) {
      return r.Fail("model CME dimensions differ from its config");
    }
    l.cme_ = std::make_unique<CompressedCme>(*std::move(cme));
    l.warmup_x_.resize(0, 0);
    l.warmup_y_.resize(0, 0);
  }
  absl::StatusOr<TransitionCounts> counts = TransitionCounts::Deserialize(r);
  if (!counts.ok()) return counts.status();
  l.counts_ = std::make_unique<TransitionCounts>(*std::move(counts));
  if (absl::Status s = io::ReadOptional(r, "model has moments", l.moments_); !s.ok()) return s;
  if (absl::Status s = io::ReadOptional(r, "model has latent accumulator", l.latent_); !s.ok()) return s;
  if (absl::Status s = io::ReadOptional(r, "model has predictive accumulator", l.predictive_); !s.ok()) return s;
  // Spectral moments: the fresh learner created them iff sigma was fixed; a restored CME decides.
  l.spectral_.reset();
  if (version >= 2 && r.Bool("model has spectral moments")) {
    absl::StatusOr<SpectralMoments> spectral = SpectralMoments::Deserialize(r);
    if (!spectral.ok()) return spectral.status();
    if (!l.cme_ || spectral->options().dim != l.cme_->options().dim) {
      return r.Fail("model spectral moments do not match its CME (missing CME or different dim)");
    }
    l.spectral_ = std::make_unique<SpectralMoments>(*std::move(spectral));
  } else if (l.cme_) {
    l.spectral_ = std::make_unique<SpectralMoments>(lo::Spectral(options, l.cme_->options().sigma));
  }
  l.spectral_basis_ = l.spectral_ ? l.spectral_->basis_size() : 0;
  // Lag statistics: the fresh learner created them for a discrete model or a fixed sigma.
  l.lags_.reset();
  const double sigma = l.cme_ ? l.cme_->options().sigma : 0;
  if (version >= 3 && r.Bool("model has lag statistics")) {
    absl::StatusOr<LagStatistics> lags = LagStatistics::Deserialize(r);
    if (!lags.ok()) return lags.status();
    if (options.lags.empty()) return r.Fail("model holds lag statistics but its config keeps none");
    const LagStatistics::Options want = lo::Lags(options, sigma);
    if (lags->options().lags != want.lags || lags->options().dim != want.dim ||
        lags->options().num_states != want.num_states) {
      return r.Fail("model lag statistics do not match its config (lags, dim or num_states)");
    }
    l.lags_ = std::make_unique<LagStatistics>(*std::move(lags));
  } else if (version < 3 && !options.lags.empty() && (discrete || l.cme_)) {
    l.lags_ = std::make_unique<LagStatistics>(lo::Lags(options, sigma));
  }
  // The open CME run (version 4): with the CME; older states restore an empty one.
  if (!l.cme_) {
    l.run_.reset();
  } else if (!l.run_) {
    l.run_ = std::make_unique<CmeRun>(options.estimator_dim(), options.run_pairs());
  }
  if (l.run_ && version >= 4 && r.ok() && l.run_->Deserialize(r) && !l.lags_ && l.run_->has_lag_events()) {
    return r.Fail("model CME run holds lag states or pairs but the model keeps no lag statistics");
  }
  // The frozen scaler (version 5): with the CME of a scaled model.
  if (r.ok() && options.scale_inputs && l.cme_) {
    if (version < 5) return r.Fail(absl::StrCat("model state version ", version, " cannot hold an input scaler"));
    absl::StatusOr<InputScaler> scaler = InputScaler::Deserialize(r, options.dim);
    if (!scaler.ok()) return scaler.status();
    l.scaler_ = *std::move(scaler);
  }
  // The forecast regression (version 6): with the CME (dim <= kMaxForecastDim); older states
  // restore an empty one, which learns from the next pair on.
  l.forecast_.reset();
  if (version >= 6 && r.ok() && r.Bool("model has forecast regression")) {
    if (!l.cme_ || options.estimator_dim() > lo::kMaxForecastDim)
      return r.Fail("model holds a forecast regression it cannot have");
    absl::StatusOr<ForecastRegression> f = ForecastRegression::Deserialize(
        r, lo::ForecastFeatures(options, l.cme_->options().sigma), lo::Forecast(options).skill_horizon);
    if (!f.ok()) return f.status();
    if (f->options().scored_dims != lo::Forecast(options).scored_dims) {
      return r.Fail("model forecast regression does not match its config (scored dims)");
    }
    l.forecast_ = std::make_unique<ForecastRegression>(*std::move(f));
  } else if (l.cme_ && options.estimator_dim() <= lo::kMaxForecastDim) {
    l.forecast_ = std::make_unique<ForecastRegression>(lo::ForecastFeatures(options, l.cme_->options().sigma),
                                                       lo::Forecast(options));
  }
  // The delay embedding's open episode (version 7): only a model with delays has one.
  if (r.ok() && l.delay_) {
    if (version < 7) {
      return r.Fail(absl::StrCat("learner state version ", version, " cannot hold a model with delays ", options.delays,
                                 " (written before delays existed)"));
    }
    if (absl::Status s = l.delay_->Deserialize(r); !s.ok()) return s;
  }
  // The change alarms (version 8). An older state has none: they start fresh at the restored
  // pair count (the constructor made them).
  if (r.ok() && l.alarms_ && version >= 8) {
    absl::StatusOr<AlarmMonitor> a = AlarmMonitor::Deserialize(r);
    if (!a.ok()) return a.status();
    const AlarmMonitor::Options want = lo::Alarms(options);
    if (a->options().dim != want.dim || a->options().channels != want.channels ||
        a->options().num_states != want.num_states || a->options().alarm_rate != want.alarm_rate) {
      return r.Fail("model alarms do not match its config (dim, channels, states or alarm_rate)");
    }
    *l.alarms_ = std::move(*a);
  }
  // The frozen reduction (version 9): with the CME of a reduced model.
  if (r.ok() && options.reduce > 0 && l.cme_) {
    if (version < 9) return r.Fail(absl::StrCat("model state version ", version, " cannot hold an input reduction"));
    absl::StatusOr<InputReduction> reduction = InputReduction::Deserialize(r, options.dim, options.reduce);
    if (!reduction.ok()) return reduction.status();
    l.reduction_ = *std::move(reduction);
    if (l.scaler_) l.reduce_scratch_.assign(options.dim, 0.0);
  }
  if (l.scaler_ || l.reduction_) {
    l.scaled_x_.assign(options.estimator_dim(), 0.0);
    l.scaled_y_.assign(options.estimator_dim(), 0.0);
    l.scaled_state_.assign(options.estimator_dim(), 0.0);
  }
  if (!r.ok()) return r.status();
  l.sigma_selection_ = std::move(sigma_selection);
  return l;
}

}  // namespace cmestream
