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
//   mode alone explains. A sinusoid A sin(omega t) has RMS A / sqrt(2).
//   The stationary mode (constant function) and modes whose values do not vary over the nodes
//   get share 0.
//
// CYCLES
//   Oscillations (Im mu != 0) whose period is at most max_period (the daemon: half the time the
//   data covers: two cycles seen), one per conjugate pair, in descending share. Each joins the
//   group of an earlier (stronger) one when it is a harmonic of the group's fundamental
//   (|p k / P - 1| <= harmonic_tolerance for k = round(P / p) in 2..max_harmonic) or becomes the
//   group's new fundamental when that one is its harmonic; otherwise it starts a group. Groups
//   are ranked by their total share (fundamental + harmonics), ties by the longer period.
//
// COST
//   Evaluating the k stored eigenfunctions at the m nodes, O(m^2 d + m^2 k) (one m x m Gram),
//   plus O(m k c) for the fits: ~1 ms at m = 400, k = 16. Runs at refresh, never per sample.
#pragma once

#include <vector>

#include "core/common/types.h"
#include "core/koopman/koopman.h"
#include "core/spectral/spectral_estimate.h"
#include "core/spectral/spectral_moments.h"

namespace cmestream {

struct ModeAmplitudeOptions {
  int channels = 0;                 // observed channels: the last `channels` coordinates; 0 = all
  double harmonic_tolerance = 0.02;  // relative tolerance of p = P / k
  int max_harmonic = 25;            // k at most (1 / (2 tolerance): harmonics stay unambiguous)
  double max_period = 0;            // cycles: periods above this are left out; <= 0: none
};

struct ModeAmplitudes {
  VectorXd amplitude;  // per eigenpair of the decomposition (a pair: both entries the same)
  VectorXd share;
  double variance = 0;  // sum_c E_w[f~_c^2] (scaled units)
};

// One oscillation, and (for a group's fundamental) its harmonics.
struct Cycle {
  int mode = -1;  // eigenpair index in the decomposition (the member with Im mu > 0)
  double period = 0, timescale = 0, share = 0, amplitude = 0;
  int harmonic = 1;            // k: period ~ fundamental / k (1: the fundamental)
  double group_share = 0;      // fundamental: share + its harmonics' shares
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
