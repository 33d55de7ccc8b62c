#include "core/validation/lag_estimate.h"

#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>

#include "Eigen/Eigenvalues"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cmestream {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Features with data (C00_ii > 0).
std::vector<int> Active(const LagSums& s) {
  std::vector<int> a;
  for (int i = 0; i < s.c00.rows(); ++i)
    if (s.c00(i, i) > 0) a.push_back(i);
  return a;
}

MatrixXd Restrict(const MatrixXd& m, const std::vector<int>& rows, const std::vector<int>& cols) {
  MatrixXd out(rows.size(), cols.size());
  for (size_t i = 0; i < rows.size(); ++i)
    for (size_t j = 0; j < cols.size(); ++j) out(i, j) = m(rows[i], cols[j]);
  return out;
}

// K(tau) on the active features; empty when the lag has no pairs.
MatrixXd Transfer(const LagSums& s, const std::vector<int>& active, const LagEstimateOptions& o) {
  if (s.n <= 0 || active.empty()) return MatrixXd();
  MatrixXd a = Restrict(s.c00, active, active) / s.n;
  for (size_t i = 0; i < active.size(); ++i)
    if (active[i] != o.constant_index) a(i, i) += o.ridge;
  const MatrixXd b = Restrict(s.c0t, active, active) / s.n;
  return a.partialPivLu().solve(b);
}

// Slowest `top` timescales of K (stationary mode left out).
std::vector<double> Timescales(const MatrixXd& k, int lag, const LagEstimateOptions& o) {
  std::vector<double> out(o.top, kNaN);
  if (k.size() == 0) return out;
  Eigen::EigenSolver<MatrixXd> es(k, false);
  if (es.info() != Eigen::Success) return out;
  std::vector<std::complex<double>> ev(es.eigenvalues().data(), es.eigenvalues().data() + k.rows());
  // The stationary mode: the eigenvalue nearest to 1.
  size_t stat = 0;
  for (size_t i = 1; i < ev.size(); ++i)
    if (std::abs(ev[i] - 1.0) < std::abs(ev[stat] - 1.0)) stat = i;
  ev.erase(ev.begin() + static_cast<std::ptrdiff_t>(stat));
  std::stable_sort(ev.begin(), ev.end(), [](auto a, auto b) { return std::abs(a) > std::abs(b); });
  for (int i = 0; i < o.top && i < static_cast<int>(ev.size()); ++i) {
    const double r = std::abs(ev[i]);
    out[i] = r >= 1 ? std::numeric_limits<double>::infinity() : (r > 0 ? -lag * o.dt / std::log(r) : kNaN);
  }
  return out;
}

std::vector<double> BlockSizes(const LaggedMomentsSnapshot& s) {
  return std::vector<double>(s.block_samples.begin(), s.block_samples.end());
}

LagSums LeaveOut(const LagSums& total, const LagSums& block) {
  LagSums s = total;
  s.Subtract(block);
  return s;
}

absl::Status CheckSnapshot(const LaggedMomentsSnapshot& s, const LagEstimateOptions& o) {
  if (absl::Status st = o.Validate(); !st.ok()) return st;
  if (s.total.size() != s.lags.size()) return absl::InvalidArgumentError("snapshot: one total per lag expected");
  if (o.constant_index >= s.dim) return absl::InvalidArgumentError("constant_index is not a feature index");
  return absl::OkStatus();
}

}  // namespace

absl::Status LagEstimateOptions::Validate() const {
  if (top < 1) return absl::InvalidArgumentError("Violated constraint: top >= 1");
  if (!(dt > 0) || !std::isfinite(dt)) return absl::InvalidArgumentError("Violated constraint: dt > 0");
  if (!(ridge >= 0) || !std::isfinite(ridge)) return absl::InvalidArgumentError("Violated constraint: ridge >= 0");
  if (constant_index < -1) return absl::InvalidArgumentError("Violated constraint: constant_index >= -1");
  return absl::OkStatus();
}

double JackknifeT95(int blocks) {
  // t(0.975, dof) for dof = 1..30.
  static constexpr double kT[30] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                    2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                                    2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
  if (blocks < 2) return kNaN;
  return blocks - 1 <= 30 ? kT[blocks - 2] : 1.96;
}

double JackknifeStderr(double full, const std::vector<double>& loo, const std::vector<double>& sizes) {
  const size_t g = loo.size();
  if (g < 2 || sizes.size() != g) return kNaN;
  double n = 0;
  for (double m : sizes) n += m;
  double theta_j = g * full;
  for (size_t b = 0; b < g; ++b) theta_j -= (1 - sizes[b] / n) * loo[b];
  double var = 0;
  for (size_t b = 0; b < g; ++b) {
    const double h = n / sizes[b];
    const double pseudo = h * full - (h - 1) * loo[b];
    var += (pseudo - theta_j) * (pseudo - theta_j) / (h - 1);
  }
  return std::sqrt(var / g);
}

absl::StatusOr<LagTimescales> EstimateImpliedTimescales(const LaggedMomentsSnapshot& s, const LagEstimateOptions& o) {
  if (absl::Status st = CheckSnapshot(s, o); !st.ok()) return st;
  LagTimescales r;
  r.lags = s.lags;
  r.blocks = static_cast<int>(s.blocks.size());
  const std::vector<double> sizes = BlockSizes(s);
  for (size_t k = 0; k < s.lags.size(); ++k) {
    const LagSums& total = s.total[k];
    r.pairs.push_back(total.n);
    const std::vector<double> full = Timescales(Transfer(total, Active(total), o), s.lags[k], o);
    std::vector<std::vector<double>> loo(o.top);
    for (size_t b = 0; b < s.blocks.size(); ++b) {
      const LagSums left = LeaveOut(total, s.blocks[b][k]);
      const std::vector<double> t = Timescales(Transfer(left, Active(left), o), s.lags[k], o);
      for (int i = 0; i < o.top; ++i) loo[i].push_back(t[i]);
    }
    std::vector<double> se(o.top);
    for (int i = 0; i < o.top; ++i) se[i] = JackknifeStderr(full[i], loo[i], sizes);
    r.timescales.push_back(full);
    r.stderrs.push_back(se);
  }
  return r;
}

namespace {

struct CkMatrices {
  std::vector<MatrixXd> predicted, estimated;  // per step
  bool ok = true;
};

// Predicted and estimated coarse matrices for one set of sums (full data or leave-one-out).
// sums[k]: per lag; step_lags: indices into lags of k*tau; steps: k.
CkMatrices CkFrom(const std::vector<const LagSums*>& sums, int base, const std::vector<int>& step_index,
                  const std::vector<int>& steps, const MatrixXd& m, const LagEstimateOptions& o) {
  CkMatrices out;
  const LagSums& s = *sums[base];
  const std::vector<int> active = Active(s);
  const MatrixXd k = Transfer(s, active, o);
  if (k.size() == 0) {
    out.ok = false;
    return out;
  }
  std::vector<int> all_sets(m.cols());
  for (int j = 0; j < m.cols(); ++j) all_sets[j] = j;
  const MatrixXd ma = Restrict(m, active, all_sets);
  const VectorXd pi = m.transpose() * s.s0 / s.n;
  if ((pi.array() <= 0).any()) {
    out.ok = false;
    return out;
  }
  const MatrixXd left = pi.cwiseInverse().asDiagonal() * (ma.transpose() * (Restrict(s.c00, active, active) / s.n));
  MatrixXd kp = k;  // K^1
  int power = 1;
  for (size_t q = 0; q < steps.size(); ++q) {
    while (power < steps[q]) {
      kp = kp * k;
      ++power;
    }
    out.predicted.emplace_back(left * kp * ma);
    const LagSums& e = *sums[step_index[q]];
    const VectorXd pik = m.transpose() * e.s0 / e.n;
    if (e.n <= 0 || (pik.array() <= 0).any()) {
      out.ok = false;
      return out;
    }
    out.estimated.emplace_back(pik.cwiseInverse().asDiagonal() * (m.transpose() * (e.c0t / e.n) * m));
  }
  return out;
}

}  // namespace

absl::StatusOr<CkTest> ChapmanKolmogorovTest(const LaggedMomentsSnapshot& s, const MatrixXd& memberships, int base_lag,
                                             int max_steps, const LagEstimateOptions& o) {
  if (absl::Status st = CheckSnapshot(s, o); !st.ok()) return st;
  if (memberships.rows() != s.dim || memberships.cols() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("memberships must be ", s.dim, " x K (got ", memberships.rows(), " x ", memberships.cols(), ")"));
  }
  if (max_steps < 2) return absl::InvalidArgumentError(absl::StrCat("steps must be >= 2 (got ", max_steps, ")"));
  const auto it = std::find(s.lags.begin(), s.lags.end(), base_lag);
  if (it == s.lags.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("base lag ", base_lag, " is not one of the model's lags [", absl::StrJoin(s.lags, ","), "]"));
  }
  const int base = static_cast<int>(it - s.lags.begin());
  std::vector<int> step_index, steps;
  for (size_t k = 0; k < s.lags.size(); ++k) {
    if (s.lags[k] % base_lag == 0 && s.lags[k] / base_lag >= 2 && s.lags[k] / base_lag <= max_steps) {
      step_index.push_back(static_cast<int>(k));
      steps.push_back(s.lags[k] / base_lag);
    }
  }
  if (steps.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("a CK test at lag ", base_lag, " needs model lags that are multiples k * ", base_lag,
                     " with 2 <= k <= ", max_steps, "; the model's lags are [", absl::StrJoin(s.lags, ","),
                     "] (create the model with e.g. --lags ", base_lag, ",", 2 * base_lag, ",", 5 * base_lag, ")"));
  }
  std::vector<const LagSums*> total;
  for (const LagSums& t : s.total) total.push_back(&t);
  const CkMatrices full = CkFrom(total, base, step_index, steps, memberships, o);
  if (!full.ok) {
    return absl::FailedPreconditionError(
        "the CK test needs pairs at every lag it uses and positive mass in every metastable set");
  }
  // Jackknife replicates.
  std::vector<CkMatrices> loo;
  std::vector<double> sizes;
  for (size_t b = 0; b < s.blocks.size(); ++b) {
    std::vector<LagSums> left(s.lags.size());
    std::vector<const LagSums*> ptr;
    for (size_t k = 0; k < s.lags.size(); ++k) {
      left[k] = LeaveOut(s.total[k], s.blocks[b][k]);
      ptr.push_back(&left[k]);
    }
    CkMatrices c = CkFrom(ptr, base, step_index, steps, memberships, o);
    if (!c.ok) continue;  // a block holding all of a set's mass: no replicate
    loo.push_back(std::move(c));
    sizes.push_back(static_cast<double>(s.block_samples[b]));
  }
  CkTest r;
  r.lag = base_lag;
  r.blocks = static_cast<int>(loo.size());
  const int nk = static_cast<int>(memberships.cols());
  for (size_t q = 0; q < steps.size(); ++q) {
    CkStep st;
    st.steps = steps[q];
    st.lag = s.lags[step_index[q]];
    st.predicted = full.predicted[q];
    st.estimated = full.estimated[q];
    st.predicted_stderr.resize(nk, nk);
    st.estimated_stderr.resize(nk, nk);
    st.deviation_stderr.resize(nk, nk);
    for (int i = 0; i < nk; ++i) {
      for (int j = 0; j < nk; ++j) {
        std::vector<double> p, e, d;
        for (const CkMatrices& c : loo) {
          p.push_back(c.predicted[q](i, j));
          e.push_back(c.estimated[q](i, j));
          d.push_back(c.predicted[q](i, j) - c.estimated[q](i, j));
        }
        st.predicted_stderr(i, j) = JackknifeStderr(st.predicted(i, j), p, sizes);
        st.estimated_stderr(i, j) = JackknifeStderr(st.estimated(i, j), e, sizes);
        st.deviation_stderr(i, j) = JackknifeStderr(st.predicted(i, j) - st.estimated(i, j), d, sizes);
        const double dev = std::abs(st.predicted(i, j) - st.estimated(i, j));
        if (dev >= st.max_deviation) {
          st.max_deviation = dev;
          st.max_deviation_stderr = st.deviation_stderr(i, j);
        }
      }
    }
    if (st.max_deviation >= r.max_deviation) {
      r.max_deviation = st.max_deviation;
      r.max_deviation_stderr = st.max_deviation_stderr;
    }
    r.steps.push_back(std::move(st));
  }
  return r;
}

MatrixXd MembershipCoefficients(const MatrixXd& features, const VectorXd& weights, const Eigen::VectorXi& labels,
                                int num_sets) {
  const Eigen::Index m = features.rows(), d = features.cols();
  MatrixXd chi = MatrixXd::Zero(m, num_sets);
  for (Eigen::Index j = 0; j < m; ++j)
    if (labels[j] >= 0 && labels[j] < num_sets) chi(j, labels[j]) = 1;
  MatrixXd g = features.transpose() * weights.asDiagonal() * features;
  const double eps = 1e-10 * std::max(g.trace(), 1e-300) / static_cast<double>(d);
  g.diagonal().array() += eps;
  return g.ldlt().solve(features.transpose() * weights.asDiagonal() * chi);
}

}  // namespace cmestream
