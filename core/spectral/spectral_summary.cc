// Periods, stationarity and the headline of a Koopman spectrum (see spectral_summary.h).
#include "core/spectral/spectral_summary.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "absl/strings/str_format.h"

namespace cmestream {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

VectorXd KoopmanPeriods(const VectorXcd& eigenvalues, double dt) {
  VectorXd out(eigenvalues.size());
  for (Eigen::Index i = 0; i < eigenvalues.size(); ++i) {
    const std::complex<double> mu = eigenvalues[i];
    const double theta = std::abs(std::arg(mu));
    out[i] = (mu.imag() != 0 && theta > 0) ? 2 * std::numbers::pi * dt / theta : kNaN;
  }
  return out;
}

StationarityCheck CheckStationarity(const std::vector<int64_t>& counts, const RowMatrixXd& means,
                                    const RowMatrixXd& square_means, const VectorXcd& eigenvalues, int stationary_index,
                                    const StationarityOptions& options) {
  StationarityCheck out;
  // 1. Trend: the blocks holding at least half of the longest one (the open block may be short).
  const int g_all = static_cast<int>(counts.size());
  int64_t longest = 0;
  for (int64_t c : counts) longest = std::max(longest, c);
  std::vector<int> use;
  std::vector<double> centre;
  double position = 0;
  for (int b = 0; b < g_all; ++b) {
    const double c = static_cast<double>(counts[b]);
    if (2 * counts[b] >= longest && counts[b] > 1) {
      use.push_back(b);
      centre.push_back(position + 0.5 * c);
    }
    position += c;
  }
  const int g = static_cast<int>(use.size());
  if (g >= std::max(3, options.min_blocks) && means.cols() > 0) {
    double cbar = 0;
    for (double c : centre) cbar += c / g;
    double sxx = 0;
    for (double c : centre) sxx += (c - cbar) * (c - cbar);
    const double span = centre.back() - centre.front();
    for (Eigen::Index a = 0; a < means.cols(); ++a) {
      double mbar = 0, within = 0;
      for (int k = 0; k < g; ++k) {
        const double m = means(use[k], a);
        mbar += m / g;
        within += std::max(0.0, square_means(use[k], a) - m * m) / g;
      }
      double sxy = 0;
      for (int k = 0; k < g; ++k) sxy += (centre[k] - cbar) * (means(use[k], a) - mbar);
      const double slope = sxy / sxx;
      double rss = 0;
      for (int k = 0; k < g; ++k) {
        const double r = means(use[k], a) - mbar - slope * (centre[k] - cbar);
        rss += r * r;
      }
      const double se = std::sqrt(rss / (g - 2) / sxx);
      const double t = se > 0 ? std::abs(slope) / se : (slope != 0 ? std::numeric_limits<double>::infinity() : 0.0);
      const double sd = std::sqrt(within);
      const double change =
          sd > 0 ? std::abs(slope) * span / sd : (slope != 0 ? std::numeric_limits<double>::infinity() : 0.0);
      // Report the coordinate that is most clearly a trend (both criteria: the smaller margin).
      const double margin = std::min(t / options.trend_t, change / options.trend_change);
      const double best = out.trend_coordinate < 0
                              ? -1
                              : std::min(out.trend_t / options.trend_t, out.trend_change / options.trend_change);
      if (margin > best) {
        out.trend_t = t;
        out.trend_change = change;
        out.trend_coordinate = static_cast<int>(a);
      }
    }
    if (out.trend_t > options.trend_t && out.trend_change > options.trend_change) {
      out.nonstationary = true;
      out.reason = absl::StrFormat(
          "trend: the mean of coordinate %d moves by %.3g within-block standard deviations over the stream "
          "(t = %.3g over %d time blocks); a drifting or trending stream has no stationary spectrum, so its "
          "slowest timescales describe the drift",
          out.trend_coordinate, out.trend_change, out.trend_t, g);
    }
  }
  // 2. Transient: |mu| > 1 on a non-stationary mode.
  int worst = -1;
  for (Eigen::Index l = 0; l < eigenvalues.size(); ++l) {
    if (l == stationary_index) continue;
    const double r = std::abs(eigenvalues[l]);
    if (r > out.max_modulus) {
      out.max_modulus = r;
      worst = static_cast<int>(l);
    }
  }
  if (worst >= 0 && out.max_modulus > 1 + options.unit_circle) {
    const std::string transient = absl::StrFormat(
        "transient: eigenvalue %d has |mu| = %.4f > 1, which a stationary process cannot give (typical of "
        "trajectories started away from equilibrium, e.g. in a box, or of a system still settling); "
        "eigenfunctions still separate basins, timescales of such modes are reported as infinite",
        worst, out.max_modulus);
    out.reason = out.nonstationary ? out.reason + "; " + transient : transient;
    out.nonstationary = true;
  }
  return out;
}

double RelativeStderr(double lag_scan, double lag_scan_stderr) {
  if (!(std::isfinite(lag_scan) && lag_scan > 0 && std::isfinite(lag_scan_stderr) && lag_scan_stderr >= 0)) {
    return kNaN;
  }
  return lag_scan_stderr / lag_scan;
}

Headline ChooseHeadline(const HeadlineInputs& in) {
  Headline h;
  h.timescale = kNaN;
  h.stderr_ = kNaN;
  const bool koopman = std::isfinite(in.koopman);
  const double rel = RelativeStderr(in.lag_scan, in.lag_scan_stderr);
  if (koopman && in.consistent) {
    h.timescale = in.koopman;
    h.view = "koopman";
    if (std::isfinite(rel)) {
      h.stderr_ = rel * in.koopman;
      h.note = absl::StrFormat(
          "s.e. from the lag scan's delete-one-block jackknife (relative s.e. %.3g of its slowest timescale "
          "%.6g)",
          rel, in.lag_scan);
    } else {
      h.note = "no error bar: the lag scan has no resolved slowest timescale with a jackknife s.e. yet";
    }
  } else if (std::isfinite(rel)) {
    h.timescale = in.lag_scan;
    h.stderr_ = in.lag_scan_stderr;
    h.view = "lag-scan";
    h.note = koopman ? "the spectral-moments estimate is not ready: the lag scan's timescale and jackknife s.e."
                     : "the Koopman view has no resolved timescale: the lag scan's timescale and jackknife s.e.";
  } else if (koopman) {
    h.timescale = in.koopman;
    h.view = "koopman-fallback";
    h.note =
        "no error bar: the spectral-moments estimate is not ready and the lag scan has no resolved timescale; "
        "this is the fallback estimate";
  } else {
    h.note = "no resolved slowest timescale in any view";
  }
  return h;
}

}  // namespace cmestream
