// Mode amplitudes and cycles (docs/algorithms.md §7.3; the header says what and why).
#include "core/spectral/mode_amplitudes.h"

#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>
#include <numbers>
#include <numeric>
#include <utility>

#include "core/kernels/gaussian.h"

namespace cmestream {

ModeAmplitudes ComputeModeAmplitudes(const KoopmanDecomposition& kd, const Eigen::Ref<const RowMatrixXd>& nodes,
                                     const VectorXd& density, const ModeAmplitudeOptions& options) {
  const Eigen::Index k = kd.eigenvalues.size();
  ModeAmplitudes out;
  out.amplitude = VectorXd::Zero(k);
  out.share = VectorXd::Zero(k);
  const Eigen::Index m = nodes.rows();
  const Eigen::Index d = nodes.cols();
  if (k == 0 || m < 2 || d == 0) return out;
  const Eigen::Index c = options.channels > 0 && options.channels <= d ? options.channels : d;

  // Importance weights: data density over node density (uniform without moments).
  VectorXd w = VectorXd::Ones(m);
  if (density.size() == m) {
    const MatrixXd gram = GaussianGram(nodes, nodes, kd.sigma);
    const VectorXd a = gram.colwise().sum().transpose();
    for (Eigen::Index j = 0; j < m; ++j) w[j] = std::max(density[j], 0.0) / std::max(a[j], 1e-300);
  }
  const double wsum = w.sum();
  if (!(wsum > 0) || !std::isfinite(wsum)) return out;
  w /= wsum;

  // Centered observable (m x c) and its weighted variance.
  MatrixXd f = nodes.rightCols(c);
  const Eigen::RowVectorXd fmean = w.transpose() * f;
  f.rowwise() -= fmean;
  const MatrixXd wf = w.asDiagonal() * f;
  const double variance = (f.cwiseProduct(wf)).sum();
  out.variance = variance;
  if (!(variance > 0)) return out;

  const MatrixXcd g = kd.Evaluate(nodes);  // m x k (columns beyond k: constants only)
  // The centered real span of mode l: [Re g~, Im g~] for an oscillation, [g~] for a real mode.
  auto span = [&](Eigen::Index l) {
    const std::complex<double> mu = kd.eigenvalues[l];
    const bool oscillating = std::abs(mu.imag()) > 1e-12 * std::max(1.0, std::abs(mu));
    MatrixXd b(m, oscillating ? 2 : 1);
    b.col(0) = g.col(l).real();
    if (oscillating) b.col(1) = g.col(l).imag();
    const Eigen::RowVectorXd bmean = w.transpose() * b;
    b.rowwise() -= bmean;
    return b;
  };
  // Weighted least-squares fit of y on the columns of b (rank-revealing: a column that does not
  // vary is dropped); returns the fitted values.
  auto fit = [&](const MatrixXd& b, const MatrixXd& y) -> MatrixXd {
    if (b.cols() == 0) return MatrixXd::Zero(y.rows(), y.cols());
    const MatrixXd wb = w.asDiagonal() * b;
    const MatrixXd normal = b.transpose() * wb;
    const double scale = normal.diagonal().maxCoeff();
    if (!(scale > 0) || !std::isfinite(scale)) return MatrixXd::Zero(y.rows(), y.cols());
    Eigen::CompleteOrthogonalDecomposition<MatrixXd> cod(normal / scale);
    cod.setThreshold(1e-10);
    return b * cod.solve(wb.transpose() * y / scale);
  };
  // The background (BACKGROUND in the header): slow modes the data cannot show as cycles.
  std::vector<Eigen::Index> background;
  if (options.max_period > 0) {
    for (Eigen::Index l = 0; l < k; ++l) {
      if (l == kd.stationary_index) continue;
      const std::complex<double> mu = kd.eigenvalues[l];
      const bool oscillating = std::abs(mu.imag()) > 1e-12 * std::max(1.0, std::abs(mu));
      const double t = l < kd.timescales.size() ? kd.timescales[l] : 0.0;
      const double period = oscillating ? 2 * std::numbers::pi * kd.dt / std::abs(std::arg(mu)) : 0.0;
      if ((oscillating && period > options.max_period) || (!oscillating && !(t <= options.max_period))) {
        background.push_back(l);
      }
    }
  }
  out.background.assign(k, false);
  MatrixXd bg(m, 0);
  for (Eigen::Index l : background) {
    out.background[l] = true;
    const MatrixXd b = span(l);
    bg.conservativeResize(m, bg.cols() + b.cols());
    bg.rightCols(b.cols()) = b;
  }
  const MatrixXd f_rest = f - fit(bg, f);  // the observable with the background partialled out
  for (Eigen::Index l = 0; l < k; ++l) {
    if (l == kd.stationary_index) continue;
    MatrixXd b = span(l);
    MatrixXd target = f;
    if (!out.background[l] && bg.cols() > 0) {
      b -= fit(bg, b);  // the part of the mode the background does not explain
      target = f_rest;
    }
    const MatrixXd fitted = fit(b, target);  // m x c
    const double explained = (fitted.cwiseProduct(w.asDiagonal() * fitted)).sum();
    if (!std::isfinite(explained)) continue;
    out.share[l] = std::clamp(explained / variance, 0.0, 1.0);
    out.amplitude[l] = std::sqrt(std::max(explained, 0.0));
  }
  return out;
}

ModeAmplitudes ModeAmplitudesOfFit(const SpectralFit& fit, const SpectralMomentsSnapshot& snapshot,
                                   const ModeAmplitudeOptions& options) {
  const KoopmanDecomposition& kd = fit.koopman;
  const SpectralEpochMoments& mom = snapshot.moments;
  const Eigen::Index m = kd.x_atoms.rows();
  VectorXd density;
  if (mom.total_weight() > 0 && mom.c00[0].rows() > m && mom.c00[1].rows() > m && m > 0) {
    density = ((mom.c00[0].row(0).segment(1, m) + mom.c00[1].row(0).segment(1, m)) / mom.total_weight()).transpose();
  }
  return ComputeModeAmplitudes(kd, kd.x_atoms, density, options);
}

std::vector<Cycle> RankCycles(const KoopmanDecomposition& kd, const VectorXd& periods, const ModeAmplitudes& a,
                              const ModeAmplitudeOptions& options) {
  std::vector<Cycle> osc;
  const Eigen::Index k = std::min<Eigen::Index>(kd.eigenvalues.size(), periods.size());
  for (Eigen::Index l = 0; l < k && l < a.share.size(); ++l) {
    const double p = periods[l];
    if (!std::isfinite(p) || p <= 0 || kd.eigenvalues[l].imag() <= 0) continue;  // one per pair
    if (options.max_period > 0 && p > options.max_period) continue;
    Cycle cy;
    cy.mode = static_cast<int>(l);
    cy.period = p;
    cy.timescale = kd.timescales[l];
    cy.share = a.share[l];
    cy.amplitude = a.amplitude[l];
    const double t = std::isfinite(cy.timescale) ? cy.timescale : std::numeric_limits<double>::infinity();
    cy.peak = cy.share * (options.span > 0 ? std::min(t, options.span) : t);
    osc.push_back(cy);
  }
  // Highest peak first; ties: the longer period, then the lower index (deterministic).
  std::stable_sort(osc.begin(), osc.end(), [](const Cycle& x, const Cycle& y) {
    if (x.peak != y.peak) return x.peak > y.peak;
    return x.period > y.period;
  });
  // k with |short * k / long - 1| <= tolerance, 2 <= k <= max_harmonic; 0: not a harmonic.
  auto harmonic = [&](double longer, double shorter) {
    if (!(longer > shorter) || shorter <= 0) return 0;
    const double r = longer / shorter;
    const int kk = static_cast<int>(std::lround(r));
    if (kk < 2 || kk > options.max_harmonic) return 0;
    return std::abs(shorter * kk / longer - 1.0) <= options.harmonic_tolerance ? kk : 0;
  };
  std::vector<Cycle> groups;
  for (Cycle& o : osc) {
    bool placed = false;
    std::vector<Cycle> spilled;  // members of a re-rooted group that are not harmonics of the new root
    for (Cycle& g : groups) {
      if (int kk = harmonic(g.period, o.period); kk > 0) {
        o.harmonic = kk;
        g.harmonics.push_back(o);
        placed = true;
        break;
      }
      if (int kk = harmonic(o.period, g.period); kk > 0) {
        // The stronger group's fundamental is a harmonic of o: o becomes the fundamental and the
        // old members are re-indexed against it (dropped from the group when they are not).
        Cycle root = o;
        std::vector<Cycle> members = g.harmonics;
        Cycle old = g;
        old.harmonics.clear();
        members.insert(members.begin(), old);
        for (Cycle& mbr : members) {
          if (int km = harmonic(root.period, mbr.period); km > 0) {
            mbr.harmonic = km;
            root.harmonics.push_back(mbr);
          } else {
            mbr.harmonic = 1;
            spilled.push_back(mbr);
          }
        }
        g = root;
        placed = true;
        break;
      }
    }
    if (!placed) groups.push_back(o);
    for (Cycle& s : spilled) groups.push_back(std::move(s));
  }
  for (Cycle& g : groups) {
    std::stable_sort(g.harmonics.begin(), g.harmonics.end(),
                     [](const Cycle& x, const Cycle& y) { return x.peak > y.peak; });
    g.group_share = g.share;
    g.group_peak = g.peak;
    for (const Cycle& h : g.harmonics) {
      g.group_share += h.share;
      g.group_peak += h.peak;
    }
  }
  std::stable_sort(groups.begin(), groups.end(), [](const Cycle& x, const Cycle& y) {
    if (x.group_peak != y.group_peak) return x.group_peak > y.group_peak;
    return x.period > y.period;
  });
  return groups;
}

}  // namespace cmestream
