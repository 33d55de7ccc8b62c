// One answer from a Koopman spectrum: periods, a stationarity check and the headline timescale
// with its error bar (docs/algorithms.md §7.1).
//
// PERIODS
//   An eigenvalue mu = |mu| e^{i theta} of the lag-dt operator rotates by theta per step, so the
//   mode oscillates with period 2 pi dt / |theta| (in units of time). A real mu (theta = 0 or
//   pi with no imaginary part) has none: NaN (JSON null). A negative real mu flips sign each
//   step; it is reported as NaN as well (a period-2 alternation is not an oscillation a sampled
//   signal can show).
//
// STATIONARITY
//   The consistent estimate assumes a stationary stream. Two signs that it is not:
//   - a trend or drifting mean: per coordinate, the means of contiguous time blocks
//     (SpectralMomentsSnapshot drift_*) regressed on the blocks' centres; the stream is flagged
//     when the slope's t statistic exceeds trend_t AND the fitted change over the stream exceeds
//     trend_change x the pooled within-block standard deviation (a slope that is both
//     significant and large: slowly mixing stationary streams have autocorrelated block means
//     that can give a large t for a small change). Needs min_blocks blocks.
//   - a transient: a non-stationary eigenvalue with |mu| > 1 + unit_circle. A stationary
//     process's Koopman operator is a contraction; |mu| > 1 comes from data that are not
//     sampled from an invariant distribution (trajectories started in a box, a system settling).
//
// HEADLINE
//   The estimate the reply trusts most, with an error bar:
//   - the Koopman view's slowest resolved timescale when the spectral-moments estimate is
//     consistent and ready ("koopman"); its standard error is the lag scan's delete-one-block
//     jackknife s.e. (docs/algorithms.md §8.3) carried over as a relative error (the sampling
//     error of a slowest timescale is a property of the stream, not of the basis: §7), or NaN
//     with the reason when the model has no lag scan;
//   - otherwise the lag scan's own timescale and s.e. ("lag-scan");
//   - otherwise the fallback estimate with no error bar ("koopman-fallback").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/common/types.h"

namespace cmestream {

// 2 pi dt / |arg mu| per eigenvalue; NaN where mu is real. requires: dt > 0.
VectorXd KoopmanPeriods(const VectorXcd& eigenvalues, double dt);

struct StationarityOptions {
  double trend_t = 6;         // |t| of the block-mean slope above which a trend is significant
  double trend_change = 0.5;  // ... and a fitted change above this many within-block s.d.
  int min_blocks = 6;         // blocks needed for the trend test
  double unit_circle = 1e-3;  // |mu| > 1 + unit_circle on a non-stationary mode: a transient
};

struct StationarityCheck {
  bool nonstationary = false;
  std::string reason;       // empty when none was found
  double trend_t = 0;       // largest |t| over the coordinates (0 without enough blocks)
  double trend_change = 0;  // fitted change of that coordinate over the stream / within-block s.d.
  int trend_coordinate = -1;
  double max_modulus = 0;  // largest |mu| over the non-stationary modes
};

// counts, means, square_means: the block statistics of SpectralMomentsSnapshot (oldest first);
// eigenvalues with the stationary mode at stationary_index (-1: none identified).
StationarityCheck CheckStationarity(const std::vector<int64_t>& counts, const RowMatrixXd& means,
                                    const RowMatrixXd& square_means, const VectorXcd& eigenvalues, int stationary_index,
                                    const StationarityOptions& options = {});

struct HeadlineInputs {
  double koopman = 0;          // the Koopman view's slowest resolved timescale (NaN: none)
  bool consistent = false;     // the spectral-moments estimate, ready (not the CME fallback)
  double lag_scan = 0;         // the lag view's slowest timescale at its first lag (NaN: none)
  double lag_scan_stderr = 0;  // its jackknife s.e. (NaN: none)
};

struct Headline {
  double timescale = 0;
  double stderr_ = 0;  // NaN when there is no error bar (see note)
  std::string view;    // "koopman", "lag-scan" or "koopman-fallback"; empty: no timescale
  std::string note;    // where the error bar comes from, or why there is none
};

Headline ChooseHeadline(const HeadlineInputs& in);

// Relative s.e. of a slowest timescale on this stream (lag scan s.e. / timescale); NaN if none.
double RelativeStderr(double lag_scan, double lag_scan_stderr);

}  // namespace cmestream
