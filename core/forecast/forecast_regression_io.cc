// ForecastRegression::Serialize / Deserialize: object "FCRG" (layout below, version 2).
//   i32 dim, i32 scored_dims, i32 block_length, i32 folds K, i32 batch_size, i64 first_fit, i64 fit_every,
//   i32 N (features, checked against the map the owner passes), i64 samples, i64 next_fit,
//   doubles z0 (q, or 0 before the first pair), per fold (K) sums: f64 n, sz, sy, syy, szz
//   (lower triangle as stored), szy; bool + sums at the second-to-last refit, bool + sums at
//   the last refit; i32 buffered, i32 buffer fold, buffered x q and x d rows;
//   skill: i64 pairs, f64 sse, f64 sse_persistence; bool fit, then (fit) intercept (d),
//   coef ((d + N) x d), per component: bool increment, f64 lambda_linear, f64 lambda_kernel,
//   f64 heldout_rmse; f64 pairs.
// Version 2 appends: i32 skill_horizon H; (fit) bool linear part, then (linear) intercept (d),
//   x-block coefficients (d x d), per component the choice as above, f64 pairs; per horizon
//   1..H: i64 pairs, f64 sse of the regression, the linear part, persistence, f64 sum of squared
//   paired differences (regression - linear part); bool has previous
//   pair, then (has) its y (d); per slot (H / S + 2): i64 origin (-1: none), then (origin >= 0)
//   (2 H + 1) x scored_dims predictions.
#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "core/forecast/forecast_regression.h"
#include "core/io/binary_io.h"
#include "core/io/field_io.h"

namespace cmestream {
namespace {

constexpr io::ObjectFormat kFormat = {io::Fourcc("FCRG"), 2, "ForecastRegression"};

constexpr auto kOptionFields = [](auto& f, auto& o) {
  f.I32In("forecast dim", o.dim, 1, 1 << 16);
  f.I32In("forecast scored_dims", o.scored_dims, 0, 1 << 16);
  f.I32In("forecast block_length", o.block_length, 1, 1 << 30);
  f.I32In("forecast folds", o.folds, 2, 16);
  f.I32In("forecast batch_size", o.batch_size, 1, 1 << 16);
  f.Scalars("forecast", io::Field("first_fit", o.first_fit), io::Field("fit_every", o.fit_every));
};

// One fold's sums; when reading, s is sized (q, d) already.
constexpr auto kSumsFields = [](auto& f, auto& s) {
  f.F64("forecast sums pairs", s.n);
  f.Matrix("forecast sums sz", s.sz);
  f.Matrix("forecast sums sy", s.sy);
  f.Matrix("forecast sums syy", s.syy);
  f.Matrix("forecast sums szz", s.szz);
  f.Matrix("forecast sums szy", s.szy);
};

constexpr auto kSkillFields = [](auto& f, auto& s) {
  f.Scalars("forecast skill", io::Field("pairs", s.pairs), io::Field("sse", s.sse),
            io::Field("persistence sse", s.sse_persistence));
};

constexpr auto kHorizonFields = [](auto& f, auto& s) {
  f.Scalars("forecast horizon skill", io::Field("pairs", s.pairs), io::Field("regression sse", s.sse[0]),
            io::Field("linear sse", s.sse[1]), io::Field("persistence sse", s.sse[2]),
            io::Field("paired difference sum of squares", s.diff_sq));
};

constexpr auto kChoiceFields = [](auto& f, auto& c) {
  f.Scalars("forecast choice", io::Field("increment", c.increment), io::Field("lambda_linear", c.lambda_linear),
            io::Field("lambda_kernel", c.lambda_kernel), io::Field("held-out rmse", c.heldout_rmse));
};

}  // namespace

void ForecastRegression::SerializeAs(io::Writer& w, int version) const {
  if (version < 1 || version > static_cast<int>(kFormat.version)) std::abort();  // a programming error
  io::FieldWriter fields(w, kFormat, static_cast<uint32_t>(version));
  kOptionFields(fields, options_);
  w.I32(features_->num_features());
  w.I64(samples_);
  w.I64(next_fit_);
  w.Doubles(z0_.data(), z0_.size());
  for (const ForecastFoldSums& s : folds_) kSumsFields(fields, s);
  for (const std::optional<ForecastFoldSums>* o : {&prefix_, &last_}) {
    w.Bool(o->has_value());
    if (*o) kSumsFields(fields, **o);
  }
  w.I32(buffered_);
  w.I32(buffer_fold_);
  w.Matrix(ubuf_.topRows(buffered_));
  w.Matrix(vbuf_.topRows(buffered_));
  kSkillFields(fields, skill_);
  w.Bool(fit_.has_value());
  if (fit_) {
    w.Matrix(fit_->intercept_);
    w.Matrix(fit_->coef_);
    for (const ForecastChoice& c : fit_->choices_) kChoiceFields(fields, c);
    w.F64(fit_->pairs_);
  }
  if (version < 2) return;
  const int d = options_.dim;
  w.I32(options_.skill_horizon);
  if (fit_) {
    const ForecastModel* lin = fit_->linear();
    w.Bool(lin != nullptr);
    if (lin) {
      w.Matrix(lin->intercept_);
      w.Matrix(lin->coef_.topRows(d));
      for (const ForecastChoice& c : lin->choices_) kChoiceFields(fields, c);
      w.F64(lin->pairs_);
    }
  }
  for (const ForecastHorizonSkill& h : horizons_) kHorizonFields(fields, h);
  w.Bool(has_prev_);
  if (has_prev_) w.Matrix(prev_y_);
  for (int k = 0; k < Slots(); ++k) {
    w.I64(slot_origin_[k]);
    if (slot_origin_[k] >= 0) w.Matrix(slot_pred_.middleRows(static_cast<int64_t>(k) * SlotRows(), SlotRows()));
  }
}

absl::StatusOr<ForecastRegression> ForecastRegression::Deserialize(io::Reader& r,
                                                                   std::shared_ptr<const FeatureMap> features,
                                                                   int old_skill_horizon) {
  auto [version, o] = io::ReadObjectStart<Options>(r, kFormat, kOptionFields);
  o.skill_horizon = std::clamp(old_skill_horizon, 1, kMaxSkillHorizon);
  const int n = r.I32In("forecast features", 1, kMaxFeatures);
  if (!r.ValidOptions(o, kFormat.name)) return r.status();
  if (!features || features->input_dim() != o.dim || features->num_features() != n) {
    return r.Fail(absl::StrCat("forecast regression holds ", n, " features of dim ", o.dim,
                               ", which do not match the model's feature map"));
  }
  const int64_t q = o.dim + n;
  if (!r.Reserve(static_cast<uint64_t>((o.folds + 2) * (q * q + q * o.dim + q + 3 * o.dim) +
                                       o.batch_size * (q + o.dim) + q * o.dim + q + 2 * o.dim) *
                     8,
                 "ForecastRegression buffers")) {
    return r.status();
  }
  ForecastRegression f(std::move(features), o);
  f.samples_ = r.I64("forecast samples");
  f.next_fit_ = r.I64("forecast next refit");
  if (r.ok() && (f.samples_ < 0 || f.next_fit_ <= f.samples_)) return r.Fail("forecast pair counts are inconsistent");
  if (f.samples_ > 0) {
    f.z0_.resize(q);
    r.Doubles("forecast shift", q, f.z0_.data());
  } else {
    r.Doubles("forecast shift", 0, nullptr);
  }
  io::FieldReader fields(r);
  for (ForecastFoldSums& s : f.folds_) kSumsFields(fields, s);
  for (std::optional<ForecastFoldSums>* o : {&f.prefix_, &f.last_}) {
    if (r.Bool("forecast has refit sums") && r.ok()) {
      *o = f.folds_[0];  // shapes
      kSumsFields(fields, **o);
    }
  }
  f.buffered_ = r.I32In("forecast buffered pairs", 0, o.batch_size - 1);
  f.buffer_fold_ = r.I32In("forecast buffer fold", 0, o.folds - 1);
  if (!r.ok()) return r.status();
  r.MatrixInto("forecast buffer u", f.ubuf_.topRows(f.buffered_));
  r.MatrixInto("forecast buffer v", f.vbuf_.topRows(f.buffered_));
  kSkillFields(fields, f.skill_);
  if (r.Bool("forecast has fit") && r.ok()) {
    ForecastModel m;
    m.features_ = f.features_;
    m.intercept_.resize(o.dim);
    m.coef_.resize(q, o.dim);
    r.MatrixInto("forecast intercept", m.intercept_);
    r.MatrixInto("forecast coefficients", m.coef_);
    m.choices_.resize(o.dim);
    for (ForecastChoice& c : m.choices_) kChoiceFields(fields, c);
    m.pairs_ = r.F64("forecast fit pairs");
    f.fit_ = std::move(m);
  }
  if (version >= 2 && r.ok()) {
    const int h = r.I32In("forecast skill horizon", 1, kMaxSkillHorizon);
    if (!r.ok()) return r.status();
    f.options_.skill_horizon = h;
    f.SizeSkillState();
    if (f.fit_ && r.Bool("forecast has linear part") && r.ok()) {
      auto lin = std::make_shared<ForecastModel>();
      lin->features_ = f.features_;
      lin->kernel_ = false;
      lin->intercept_.resize(o.dim);
      lin->coef_ = MatrixXd::Zero(q, o.dim);
      r.MatrixInto("forecast linear intercept", lin->intercept_);
      r.MatrixInto("forecast linear coefficients", lin->coef_.topRows(o.dim));
      lin->choices_.resize(o.dim);
      for (ForecastChoice& c : lin->choices_) kChoiceFields(fields, c);
      lin->pairs_ = r.F64("forecast linear fit pairs");
      f.fit_->linear_ = std::move(lin);
    }
    for (ForecastHorizonSkill& s : f.horizons_) kHorizonFields(fields, s);
    f.has_prev_ = r.Bool("forecast has previous pair");
    if (f.has_prev_ && r.ok()) r.MatrixInto("forecast previous y", f.prev_y_);
    for (int k = 0; k < f.Slots() && r.ok(); ++k) {
      f.slot_origin_[k] = r.I64("forecast rollout origin");
      if (r.ok() && (f.slot_origin_[k] < -1 || f.slot_origin_[k] >= f.samples_)) {
        return r.Fail("forecast rollout origin is inconsistent");
      }
      if (f.slot_origin_[k] >= 0) {
        r.MatrixInto("forecast rollout", f.slot_pred_.middleRows(static_cast<int64_t>(k) * f.SlotRows(), f.SlotRows()));
      }
    }
  }
  if (!r.EndObject(kFormat.name)) return r.status();
  return f;
}

}  // namespace cmestream
