// ForecastRegression::Serialize / Deserialize: object "FCRG" (layout below, version 1).
//   i32 dim, i32 scored_dims, i32 block_length, i32 folds K, i32 batch_size, i64 first_fit, i64 fit_every,
//   i32 N (features, checked against the map the owner passes), i64 samples, i64 next_fit,
//   doubles z0 (q, or 0 before the first pair), per fold (K) sums: f64 n, sz, sy, syy, szz
//   (lower triangle as stored), szy; bool + sums at the second-to-last refit, bool + sums at
//   the last refit; i32 buffered, i32 buffer fold, buffered x q and x d rows;
//   skill: i64 pairs, f64 sse, f64 sse_persistence; bool fit, then (fit) intercept (d),
//   coef ((d + N) x d), per component: bool increment, f64 lambda_linear, f64 lambda_kernel,
//   f64 heldout_rmse; f64 pairs.
#include "absl/strings/str_cat.h"
#include "core/forecast/forecast_regression.h"
#include "core/io/binary_io.h"
#include "core/io/field_io.h"

namespace cmestream {
namespace {

constexpr io::ObjectFormat kFormat = {io::Fourcc("FCRG"), 1, "ForecastRegression"};

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

constexpr auto kChoiceFields = [](auto& f, auto& c) {
  f.Scalars("forecast choice", io::Field("increment", c.increment), io::Field("lambda_linear", c.lambda_linear),
            io::Field("lambda_kernel", c.lambda_kernel), io::Field("held-out rmse", c.heldout_rmse));
};

}  // namespace

void ForecastRegression::Serialize(io::Writer& w) const {
  io::FieldWriter fields(w, kFormat, kFormat.version);
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
}

absl::StatusOr<ForecastRegression> ForecastRegression::Deserialize(io::Reader& r,
                                                                   std::shared_ptr<const FeatureMap> features) {
  const auto [version, o] = io::ReadObjectStart<Options>(r, kFormat, kOptionFields);
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
  if (!r.EndObject(kFormat.name)) return r.status();
  return f;
}

}  // namespace cmestream
