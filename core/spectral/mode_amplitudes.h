// Mode amplitudes: how much of the observed signal each Koopman mode carries, and the cycles
// ranked by it (docs/algorithms.md §7.3).
//
// WHY
//   |mu| says how long a mode lives, not how much of the signal it carries: on a monthly series
//   with 12 delays the least damped oscillations are harmonics of the annual cycle, on a short
//   quarterly series a slow 'cycle' longer than the data. The cycle to quote is the one that
//   carries the variance of the observed channels.
//
// WHAT IS COMPUTED
//   The observable is f(x) = the newest `channels` coordinates of the state (the last ones of a
//   delay vector, oldest first; all of them without delays), in the model's scaled units. The
//   expectations over the data the view was fitted on are approximated by a weighted sum over
//   nodes z_j (the view's basis atoms, which are data points) with importance weights
//       w_j  proportional to  dbar_j / a_j,   dbar_j = mean over the data of k(x, z_j),
//                                             a_j = sum_i k(z_i, z_j)
//   (data density over node density, both kernel estimates; dbar_j = C00[0, j+1] / n_w of the
//   spectral moments; uniform weights when no moments are given). With centered values
//   f~ = f - E_w f and g~ = g - E_w g, each oscillation (a conjugate pair, one oscillation: the
//   real span {Re g, Im g}) or real mode is fitted alone by weighted least squares,
//       f~ ~ G_l beta,  G_l = [Re g~_l, Im g~_l] (or [g~_l]),
//   and reports
//       share_l     = sum_c E_w[(G_l beta_c)^2] / sum_c E_w[f~_c^2]   (in [0, 1]),
//       amplitude_l = sqrt(sum_c E_w[(G_l beta_c)^2])                 (RMS, scaled units).
//   Orthogonal modes (distinct frequencies on a long record) give shares that add up to the
//   variance they explain; non-orthogonal ones may add up to more than 1: a share is what the
//   mode explains on its own. A sinusoid A sin(omega t) has RMS A / sqrt(2).
//   The stationary mode (constant function) and modes whose values do not vary over the nodes
//   get share 0.
//
// BACKGROUND (with max_period > 0)
//   A trend or a drift the data cannot show as a cycle (an oscillation longer than max_period,
//   a real mode whose decay time exceeds it or is infinite: co2's rise, 96 % of its variance)
//   correlates with every smooth function of the state, so fitted alone any mode would get a
//   share of it. Those modes are the background: each is fitted alone as above; every other
//   mode is fitted to the observable with the background partialled out (both f~ and G_l
//   residualized on the background's span by weighted least squares), so its share is what it
//   adds to the background (of the total variance).
//
// CYCLES
//   Oscillations (Im mu != 0) whose period is at most max_period (the daemon: half the time the
//   data covers: two cycles seen), one per conjugate pair, ranked by their spectral peak
//       peak = share x min(timescale, span):
//   a damped oscillation's component has the autocovariance share V e^{-|s|/tau} cos(theta s),
//   whose power spectrum is a peak at its frequency of area ~ share and height ~ share x tau; a
//   record of length `span` resolves no narrower peak, so tau is capped there. A mode that dies
//   within a fraction of its period (lynx: a 12.3-year "cycle" with a 2.2-year decay time
//   explains 73 % of the variance alone) is a smooth function of the state, not a cycle. Each
//   joins the group of an earlier (stronger) one when it is a harmonic of the group's fundamental
//   (|p k / P - 1| <= harmonic_tolerance for k = round(P / p) in 2..max_harmonic) or becomes the
//   group's new fundamental when that one is its harmonic; otherwise it starts a group. Groups
//   are ranked by their total peak (group_peak: fundamental + harmonics), ties by the longer
//   period; group_share is their total share.
//
// COST
//   Evaluating the k stored eigenfunctions at the m nodes, O(m^2 d + m^2 k) (one m x m Gram),
//   plus O(m k c) for the fits (and O(m k b^2) with b background columns): 0.25 ms measured at
//   m = 120, d = 12, k = 16 (tests/core/spectral/test_mode_amplitudes.cc), O(m^2): ~3 ms at
//   m = 400. Runs at refresh, never per sample.
#pragma once

#include <vector>

#include "core/common/types.h"
#include "core/koopman/koopman.h"
#include "core/spectral/spectral_estimate.h"
#include "core/spectral/spectral_moments.h"

namespace cmestream {

struct ModeAmplitudeOptions {
  int channels = 0;                  // observed channels: the last `channels` coordinates; 0 = all
  double harmonic_tolerance = 0.02;  // relative tolerance of p = P / k
  int max_harmonic = 25;             // k at most (1 / (2 tolerance): harmonics stay unambiguous)
  // Periods above this are left out of the cycles and, with real modes whose decay time exceeds
  // it, form the background (BACKGROUND above); <= 0: none (no background).
  double max_period = 0;
  double span = 0;  // the time the data cover: caps the decay time in a cycle's peak; <= 0: no cap
};

struct ModeAmplitudes {
  VectorXd amplitude;  // per eigenpair of the decomposition (a pair: both entries the same)
  VectorXd share;
  std::vector<bool> background;  // per eigenpair: in the background (share fitted alone)
  double variance = 0;           // sum_c E_w[f~_c^2] (scaled units)
};

// One oscillation, and (for a group's fundamental) its harmonics.
struct Cycle {
  int mode = -1;  // eigenpair index in the decomposition (the member with Im mu > 0)
  double period = 0, timescale = 0, share = 0, amplitude = 0;
  int harmonic = 1;  // k: period ~ fundamental / k (1: the fundamental)
  // share x min(timescale, span): the height of its spectral peak (what ranks the cycles)
  double peak = 0;
  double group_share = 0;        // fundamental: share + its harmonics' shares
  double group_peak = 0;         // fundamental: peak + its harmonics' peaks (what ranks the groups)
  std::vector<Cycle> harmonics;  // fundamental only, descending share
};

// kd: eigenpairs with their eigenfunctions (kd.Evaluate); nodes: the points to average over
// (m x d, rows of the data's region: the view's basis atoms); density: dbar_j per node (m), or
// empty for uniform weights. Returns zeros for an empty decomposition or fewer than 2 nodes.
ModeAmplitudes ComputeModeAmplitudes(const KoopmanDecomposition& kd, const Eigen::Ref<const RowMatrixXd>& nodes,
                                     const VectorXd& density, const ModeAmplitudeOptions& options);

// The amplitudes of a spectral-moments fit: nodes = its basis atoms, density = the live epoch's
// mean features C00[0, j+1] / n_w (the fit's basis is the live basis or a prefix of it);
// uniform weights when the moments do not cover the basis.
ModeAmplitudes ModeAmplitudesOfFit(const SpectralFit& fit, const SpectralMomentsSnapshot& snapshot,
                                   const ModeAmplitudeOptions& options);

// The cycles ranked by share with harmonics grouped (see CYCLES). periods: per eigenpair
// (KoopmanPeriods; NaN where real).
std::vector<Cycle> RankCycles(const KoopmanDecomposition& kd, const VectorXd& periods, const ModeAmplitudes& a,
                              const ModeAmplitudeOptions& options);

}  // namespace cmestream
