// InputScaler: the first step of a model's input stage (docs/algorithms.md §1.13): per-channel
// robust centering and scaling, estimated once from the warm-up and then frozen.
//
// WHY. A Gaussian kernel with one bandwidth measures every channel in the same unit: on a
// stream whose channels range from 0.03 to 235, the kernel sees the large channels only and
// the small ones are noise under it. Dividing each channel by a robust spread makes one
// bandwidth meaningful for all of them. The transform is frozen after the warm-up because
// every estimator downstream (the CME's atoms, the spectral basis, the lag basis) is stored
// in the scaled coordinates: a transform that kept moving would make the operator learned
// from early pairs inconsistent with the one learned from late pairs.
//
// ESTIMATE (Estimate). For channel j over the warm-up rows: center c_j = median; spread
// s_j = IQR / 1.349 (the interquartile range of a normal is 1.349 standard deviations, so
// s_j is the standard deviation for Gaussian data and ignores up to 25 % outliers on each
// side). Quantiles interpolate linearly between order statistics (Hyndman-Fan type 7, numpy's
// default). When the IQR is not usable (half or more of the values equal: then the MAD is 0
// as well, so it is no fallback), the standard deviation is taken, and when that is not usable
// either, 1 (a constant channel is centered to 0 and never divides by zero). "Usable" means s_j > kRelativeFloor x
// max(|c_j|, kAbsoluteFloor): a spread that is zero, or lost in the rounding of the channel's
// level, is not one.
//
// APPLY. z_j = (v_j - c_j) / s_j; Invert gives v_j = z_j s_j + c_j (exact up to one rounding
// each way). Replies of the daemon are in the user's units: points are scaled on the way in,
// atoms and predictions inverted on the way out.
//
// The scaler is plain data (two vectors), O(d) per row, allocation-free once built.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "core/common/types.h"
#include "core/io/fwd.h"

namespace cmestream {

class InputScaler {
 public:
  static constexpr double kRelativeFloor = 1e-12;
  static constexpr double kAbsoluteFloor = 1e-300;
  static constexpr double kIqrToSigma = 1.3489795003921634;  // 2 * Phi^{-1}(0.75)

  // Which estimate each channel's spread came from (reported by describe).
  enum class Spread : int { kIqr = 0, kStd = 1, kUnit = 2 };

  InputScaler() = default;
  // requires: rows has >= 1 row and >= 1 column, every value finite.
  static InputScaler Estimate(const Eigen::Ref<const RowMatrixXd>& rows);
  // Two blocks of rows estimated together (the warm-up's x and y halves), without a copy of both.
  static InputScaler Estimate(const Eigen::Ref<const RowMatrixXd>& a, const Eigen::Ref<const RowMatrixXd>& b);

  int dim() const { return static_cast<int>(center_.size()); }
  const std::vector<double>& center() const { return center_; }
  const std::vector<double>& scale() const { return scale_; }
  const std::vector<Spread>& spread() const { return spread_; }

  // out may alias in.
  void Apply(const double* in, double* out) const {
    for (size_t j = 0; j < center_.size(); ++j) out[j] = (in[j] - center_[j]) / scale_[j];
  }
  void Invert(const double* in, double* out) const {
    for (size_t j = 0; j < center_.size(); ++j) out[j] = in[j] * scale_[j] + center_[j];
  }
  // COMMENSURATE CHANNELS (the learner's step after Estimate, docs/algorithms.md §1.13): when
  // the estimated spreads (constant channels' unit spreads aside) are all within a factor
  // `max_ratio` of each other, every one of them becomes their geometric mean, so the kernel
  // keeps the channels' own geometry (positions and velocities, sensors in one unit) instead of
  // a warm-up-dependent anisotropy; channels further apart keep their own spreads. Centers and
  // spread kinds are unchanged. Nothing changes with fewer than two estimated spreads.
  static constexpr double kCommensurateRatio = 2.0;
  void PoolCommensurate(double max_ratio);

  // Row-wise, in place; rows.cols() must equal dim().
  void ApplyRows(Eigen::Ref<RowMatrixXd> rows) const;
  void InvertRows(Eigen::Ref<RowMatrixXd> rows) const;

  // u64 d, then d centers, d scales (doubles), d spread codes (u8). Deserialize checks d
  // against `dim`, every center finite, every scale finite and > 0, every code known:
  // DataLoss naming the part otherwise.
  void Serialize(io::Writer& w) const;
  static absl::StatusOr<InputScaler> Deserialize(io::Reader& r, int dim);

  bool operator==(const InputScaler& o) const {
    return center_ == o.center_ && scale_ == o.scale_ && spread_ == o.spread_;
  }

 private:
  std::vector<double> center_;
  std::vector<double> scale_;
  std::vector<Spread> spread_;
};

const char* SpreadName(InputScaler::Spread s);

}  // namespace cmestream
