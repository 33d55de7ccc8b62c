#include "core/stream/input_scaler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/io/binary_io.h"

namespace cmestream {
namespace {

// Type-7 quantile of sorted values (numpy's default): linear between order statistics.
double Quantile(const std::vector<double>& sorted, double q) {
  const double h = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

bool Usable(double spread, double center) {
  return std::isfinite(spread) &&
         spread > InputScaler::kRelativeFloor * std::max(std::abs(center), InputScaler::kAbsoluteFloor);
}

}  // namespace

const char* SpreadName(InputScaler::Spread s) {
  switch (s) {
    case InputScaler::Spread::kIqr:
      return "iqr";
    case InputScaler::Spread::kStd:
      return "std";
    case InputScaler::Spread::kUnit:
      return "unit";
  }
  return "?";
}

InputScaler InputScaler::Estimate(const Eigen::Ref<const RowMatrixXd>& rows) { return Estimate(rows, rows.topRows(0)); }

InputScaler InputScaler::Estimate(const Eigen::Ref<const RowMatrixXd>& a, const Eigen::Ref<const RowMatrixXd>& b) {
  const int64_t n = a.rows() + b.rows();
  const int64_t d = a.cols();
  InputScaler s;
  s.center_.resize(static_cast<size_t>(d));
  s.scale_.resize(static_cast<size_t>(d));
  s.spread_.resize(static_cast<size_t>(d));
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t j = 0; j < d; ++j) {
    for (int64_t i = 0; i < a.rows(); ++i) v[static_cast<size_t>(i)] = a(i, j);
    for (int64_t i = 0; i < b.rows(); ++i) v[static_cast<size_t>(a.rows() + i)] = b(i, j);
    std::sort(v.begin(), v.end());
    const double median = Quantile(v, 0.5);
    double spread = (Quantile(v, 0.75) - Quantile(v, 0.25)) / kIqrToSigma;
    Spread kind = Spread::kIqr;
    if (!Usable(spread, median)) {
      double mean = 0;
      for (double x : v) mean += x;
      mean /= static_cast<double>(n);
      double ss = 0;
      for (double x : v) ss += (x - mean) * (x - mean);
      spread = std::sqrt(ss / static_cast<double>(n));
      kind = Spread::kStd;
    }
    if (!Usable(spread, median)) {
      spread = 1.0;
      kind = Spread::kUnit;
    }
    s.center_[static_cast<size_t>(j)] = median;
    s.scale_[static_cast<size_t>(j)] = spread;
    s.spread_[static_cast<size_t>(j)] = kind;
  }
  return s;
}

void InputScaler::PoolCommensurate(double max_ratio) {
  double lo = std::numeric_limits<double>::infinity(), hi = 0, log_sum = 0;
  int estimated = 0;
  for (size_t j = 0; j < scale_.size(); ++j) {
    if (spread_[j] == Spread::kUnit) continue;
    lo = std::min(lo, scale_[j]);
    hi = std::max(hi, scale_[j]);
    log_sum += std::log(scale_[j]);
    ++estimated;
  }
  if (estimated < 2 || hi > max_ratio * lo) return;
  const double common = std::exp(log_sum / estimated);
  for (size_t j = 0; j < scale_.size(); ++j) {
    if (spread_[j] != Spread::kUnit) scale_[j] = common;
  }
}

void InputScaler::ApplyRows(Eigen::Ref<RowMatrixXd> rows) const {
  for (int64_t i = 0; i < rows.rows(); ++i) Apply(rows.row(i).data(), rows.row(i).data());
}

void InputScaler::InvertRows(Eigen::Ref<RowMatrixXd> rows) const {
  for (int64_t i = 0; i < rows.rows(); ++i) Invert(rows.row(i).data(), rows.row(i).data());
}

void InputScaler::Serialize(io::Writer& w) const {
  const int64_t d = dim();
  w.U64(static_cast<uint64_t>(d));
  w.Doubles(center_.data(), d);
  w.Doubles(scale_.data(), d);
  for (Spread s : spread_) w.U8(static_cast<uint8_t>(s));
}

absl::StatusOr<InputScaler> InputScaler::Deserialize(io::Reader& r, int dim) {
  const int64_t d = r.Count("model input scaler dim", dim, dim);
  if (!r.ok()) return r.status();
  InputScaler s;
  s.center_.resize(static_cast<size_t>(d));
  s.scale_.resize(static_cast<size_t>(d));
  s.spread_.resize(static_cast<size_t>(d));
  r.Doubles("model input scaler centers", d, s.center_.data());
  r.Doubles("model input scaler scales", d, s.scale_.data());
  for (int64_t j = 0; j < d && r.ok(); ++j) {
    const uint8_t code = r.U8("model input scaler spread code");
    if (r.ok() && code > static_cast<uint8_t>(Spread::kUnit)) {
      return r.Fail(absl::StrCat("model input scaler spread code ", int{code}, " of channel ", j, ", expected 0..2"));
    }
    s.spread_[static_cast<size_t>(j)] = static_cast<Spread>(code);
  }
  if (!r.ok()) return r.status();
  for (int64_t j = 0; j < d; ++j) {
    const double c = s.center_[static_cast<size_t>(j)], sc = s.scale_[static_cast<size_t>(j)];
    if (!std::isfinite(c) || !std::isfinite(sc) || !(sc > 0)) {
      return r.Fail(absl::StrCat("model input scaler channel ", j, " has center ", c, " and scale ", sc,
                                 ", expected a finite center and a finite scale > 0"));
    }
  }
  return s;
}

}  // namespace cmestream
