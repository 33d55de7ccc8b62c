// Compressed online CME: ALGORITHMS.md section 1, implemented formula by formula.
#include "core/cme/compressed_cme.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "core/kernels/gaussian.h"

namespace cmestream {
namespace {

absl::Status Violated(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("Violated constraint: ", what));
}

// Samples whose delta is more negative than this count as evidence of inverse drift.
constexpr double kNegativeDeltaTolerance = 1e-6;

}  // namespace

absl::Status CompressedCme::Options::Validate() const {
  if (dim < 1) return Violated(absl::StrCat("dim >= 1, got ", dim));
  if (dim > kMaxDim) return Violated(absl::StrCat("dim <= ", kMaxDim, ", got ", dim));
  if (!(sigma > 0) || !std::isfinite(sigma)) return Violated(absl::StrCat("sigma > 0 and finite, got ", sigma));
  if (!(eta > 0) || !std::isfinite(eta)) return Violated(absl::StrCat("eta > 0 and finite, got ", eta));
  if (!(lambda >= 0) || !std::isfinite(lambda)) return Violated(absl::StrCat("lambda >= 0, got ", lambda));
  if (!(eta * lambda < 1)) return Violated(absl::StrCat("eta * lambda < 1, got ", eta * lambda));
  if (!(epsilon >= 0) || !std::isfinite(epsilon)) return Violated(absl::StrCat("epsilon >= 0, got ", epsilon));
  if (max_dict < 1) return Violated(absl::StrCat("max_dict >= 1, got ", max_dict));
  if (max_dict > 20000) return Violated(absl::StrCat("max_dict <= 20000 (memory is 6 max_dict^2 doubles), got ", max_dict));
  if (!(jitter >= 0) || !(jitter < 1)) return Violated(absl::StrCat("0 <= jitter < 1, got ", jitter));
  if (!(drift_tolerance > 0)) return Violated(absl::StrCat("drift_tolerance > 0, got ", drift_tolerance));
  if (!(step_decay_samples >= 0) || !std::isfinite(step_decay_samples))
    return Violated(absl::StrCat("step_decay_samples >= 0, got ", step_decay_samples));
  if (!(step_decay_power > 0 && step_decay_power <= 1))
    return Violated(absl::StrCat("0 < step_decay_power <= 1, got ", step_decay_power));
  return absl::OkStatus();
}

CompressedCme::CompressedCme(const Options& options) : options_(options) {
  const absl::Status st = options.Validate();
  if (!st.ok()) {
    std::fprintf(stderr, "CompressedCme: invalid options: %s\n", std::string(st.message()).c_str());
    std::abort();
  }
  const int cap = options.max_dict;
  x_atoms_ = RowMatrixXd::Zero(cap, options.dim);
  y_atoms_ = RowMatrixXd::Zero(cap, options.dim);
  w_ = MatrixXd::Zero(cap, cap);
  if (options.averaging) w_avg_ = MatrixXd::Zero(cap, cap);
  gx_ = MatrixXd::Zero(cap, cap);
  gy_ = MatrixXd::Zero(cap, cap);
  gx_inv_ = MatrixXd::Zero(cap, cap);
  gy_inv_ = MatrixXd::Zero(cap, cap);
  for (VectorXd* v : {&kx_, &ky_, &a_, &b_, &c_, &kyx_, &tmp_, &amb_}) *v = VectorXd::Zero(cap);
}

double CompressedCme::Gamma() const {
  // Relative jitter gamma = jitter * k(x,x); the Gaussian kernel has k(x,x) = 1.
  return options_.jitter;
}

double CompressedCme::StepSize() const {
  if (options_.step_decay_samples <= 0) return options_.eta;
  const double t = static_cast<double>(counters_.samples);
  return options_.eta / std::pow(1.0 + t / options_.step_decay_samples, options_.step_decay_power);
}

void CompressedCme::GrowInverse(MatrixXd& g, MatrixXd& g_inv, int m, const VectorXd& k_new,
                                const VectorXd& c, double delta) {
  // Gram of the enlarged dictionary (unjittered; the jitter is added where it is used).
  g.col(m).head(m) = k_new.head(m);
  g.row(m).head(m) = k_new.head(m).transpose();
  g(m, m) = 1.0;
  // Block (Schur) inverse: [[G^-1 + c c^T/delta, -c/delta], [-c^T/delta, 1/delta]], O(m^2).
  tmp_.head(m) = c.head(m) / delta;
  g_inv.topLeftCorner(m, m).noalias() += tmp_.head(m) * c.head(m).transpose();
  g_inv.col(m).head(m) = -tmp_.head(m);
  g_inv.row(m).head(m) = -tmp_.head(m).transpose();
  g_inv(m, m) = 1.0 / delta;
}

void CompressedCme::CompressW(int my, int mx, double decay, double eta) {
  // W <- (1 - eta lambda) W - eta (a - b) c^T.
  auto w = w_.topLeftCorner(my, mx);
  w *= decay;
  tmp_.head(my) = eta * amb_.head(my);
  w.noalias() -= tmp_.head(my) * c_.head(mx).transpose();
}

void CompressedCme::AppendRowOfW(int my, int mx, double decay, double eta) {
  // Add y only: W <- [(1 - eta lambda) W - eta a c^T ; eta c^T].
  auto w = w_.topLeftCorner(my, mx);
  w *= decay;
  tmp_.head(my) = eta * a_.head(my);
  w.noalias() -= tmp_.head(my) * c_.head(mx).transpose();
  w_.row(my).head(mx) = eta * c_.head(mx).transpose();
}

void CompressedCme::AppendColumnOfW(int my, int mx, double decay, double eta) {
  // Add x only: W <- [(1 - eta lambda) W , -eta (a - b)].
  w_.topLeftCorner(my, mx) *= decay;
  w_.col(mx).head(my) = -eta * amb_.head(my);
}

void CompressedCme::AppendBothOfW(int my, int mx, double decay, double eta) {
  // Add the pair: W <- [[(1 - eta lambda) W, -eta a], [0, eta]].
  w_.topLeftCorner(my, mx) *= decay;
  w_.col(mx).head(my) = -eta * a_.head(my);
  w_.row(my).head(mx).setZero();
  w_(my, mx) = eta;
}

void CompressedCme::UpdateAverage() {
  // Polyak-Ruppert: running mean over all iterates; atoms added later enter with zeros
  // (the admission code zeroes their row/column of w_avg_ before this update).
  const double t = static_cast<double>(counters_.samples);
  auto avg = w_avg_.topLeftCorner(my_, mx_);
  avg += (w_.topLeftCorner(my_, mx_) - avg) / t;
}

void CompressedCme::Observe(const double* x, const double* y) {
  const int d = options_.dim;
  const int mx = mx_;
  const int my = my_;
  const double sigma = options_.sigma;
  const double eta = StepSize();
  const double decay = 1.0 - eta * options_.lambda;
  const double gamma = Gamma();

  // kx = k_X(x), ky = k_Y(y): m kernel evaluations each.
  for (int i = 0; i < mx; ++i) kx_[i] = GaussianKernel(x_atoms_.row(i).data(), x, d, sigma);
  for (int j = 0; j < my; ++j) ky_[j] = GaussianKernel(y_atoms_.row(j).data(), y, d, sigma);
  auto kx = kx_.head(mx);
  auto ky = ky_.head(my);
  auto a = a_.head(my);
  auto b = b_.head(my);
  auto c = c_.head(mx);
  a.noalias() = w_.topLeftCorner(my, mx) * kx;           // C phi(x) = Psi a
  b.noalias() = gy_inv_.topLeftCorner(my, my) * ky;      // P_Y phi(y) = Psi b
  c.noalias() = gx_inv_.topLeftCorner(mx, mx) * kx;      // P_X phi(x) = Phi c
  const double pv = kx.dot(c);                           // ||P_X phi(x)||^2
  const double dx_raw = 1.0 - pv;                        // k(x,x) - kx^T c
  const double dy_raw = 1.0 - ky.dot(b);
  if (dx_raw < -kNegativeDeltaTolerance || dy_raw < -kNegativeDeltaTolerance) ++negative_delta_events_;
  const double dx = std::max(0.0, dx_raw);
  const double dy = std::max(0.0, dy_raw);
  // pu = (a - b)^T G_Y (a - b) = ||P_Y u||^2 for u = Psi a - phi(y).
  amb_.head(my) = a - b;
  tmp_.head(my).noalias() = gy_.topLeftCorner(my, my) * amb_.head(my);
  const double pu = std::max(0.0, amb_.head(my).dot(tmp_.head(my)));
  const double eta2 = eta * eta;
  const double err2 = eta2 * (pu * dx + dy * pv + dx * dy);
  last_error_ = std::sqrt(err2);

  enum Choice { kCompress, kY, kX, kBoth } choice = kCompress;
  bool forced = false;
  double residual2 = 0;  // error left by the chosen update
  const double eps2 = options_.epsilon * options_.epsilon;
  const int cap = options_.max_dict;
  // An empty dictionary cannot absorb anything (C = 0 stays 0): the first sample always admits.
  const bool must_admit = (mx == 0 || my == 0);
  if (err2 > eps2 || must_admit) {
    if (options_.one_sided) {
      // Never add a side whose delta is below the jitter floor (numerically already in span).
      const bool can_y = my < cap && dy > gamma;
      const bool can_x = mx < cap && dx > gamma;
      const double err_y = eta2 * (pu + dy) * dx;  // after adding phi(y) to Psi only
      const double err_x = eta2 * dy * (pv + dx);  // after adding phi(x) to Phi only
      if (!must_admit && can_y && err_y <= eps2 && (!can_x || err_x > eps2 || err_y <= err_x)) {
        choice = kY;
      } else if (!must_admit && can_x && err_x <= eps2) {
        choice = kX;
      } else if (can_x && can_y) {
        choice = kBoth;
      } else {
        // The budget binds (cap or floor): take the best feasible partial step, project the rest.
        forced = true;
        residual2 = err2;
        if (can_y && err_y <= residual2) { choice = kY; residual2 = err_y; }
        if (can_x && err_x < residual2) { choice = kX; residual2 = err_x; }
      }
    } else {
      if (mx < cap && my < cap) {
        choice = kBoth;
      } else {
        forced = true;
        residual2 = err2;
      }
    }
  }

  switch (choice) {
    case kCompress:
      CompressW(my, mx, decay, eta);
      break;
    case kY:
      AppendRowOfW(my, mx, decay, eta);
      break;
    case kX:
      AppendColumnOfW(my, mx, decay, eta);
      break;
    case kBoth:
      AppendBothOfW(my, mx, decay, eta);
      break;
  }
  const bool add_y = choice == kY || choice == kBoth;
  const bool add_x = choice == kX || choice == kBoth;
  // Dictionary and inverse growth. The Schur complement of the jittered Gram is delta + gamma.
  if (add_y) {
    y_atoms_.row(my) = Eigen::Map<const Eigen::RowVectorXd>(y, d);
    GrowInverse(gy_, gy_inv_, my, ky_, b_, dy + gamma);
    if (options_.averaging) w_avg_.row(my).head(mx + (add_x ? 1 : 0)).setZero();
    my_ = my + 1;
    ++counters_.admitted_y;
  }
  if (add_x) {
    x_atoms_.row(mx) = Eigen::Map<const Eigen::RowVectorXd>(x, d);
    GrowInverse(gx_, gx_inv_, mx, kx_, c_, dx + gamma);
    if (options_.averaging) w_avg_.col(mx).head(my_).setZero();
    mx_ = mx + 1;
    ++counters_.admitted_x;
  }
  if (choice == kCompress && !forced) ++counters_.compressed;
  if (forced) {
    ++counters_.forced;
    counters_.forced_error_sum += std::sqrt(residual2);
  }
  last_step_ = forced ? Step::kForced
               : choice == kCompress ? Step::kCompressed
               : choice == kY        ? Step::kAdmittedY
               : choice == kX        ? Step::kAdmittedX
                                     : Step::kAdmittedBoth;
  ++counters_.samples;
  if (options_.averaging) UpdateAverage();

  // Nearest X atom of x (reuses kx) and of y (m_x extra kernel evaluations).
  if (add_x) {
    last_nearest_x_ = mx;  // x itself is the new atom
  } else if (mx > 0) {
    Eigen::Index i;
    kx.maxCoeff(&i);
    last_nearest_x_ = static_cast<int>(i);
  }
  if (mx_ > 0) {
    for (int i = 0; i < mx_; ++i) kyx_[i] = GaussianKernel(x_atoms_.row(i).data(), y, d, sigma);
    Eigen::Index i;
    kyx_.head(mx_).maxCoeff(&i);
    last_nearest_y_in_x_ = static_cast<int>(i);
  }

  // Periodic drift check, scheduled by sample count (see Options::drift_check_interval).
  if (options_.drift_check_interval > 0 &&
      ++samples_since_drift_check_ >= std::max<int64_t>(options_.drift_check_interval, mx_ + my_)) {
    samples_since_drift_check_ = 0;
    CheckDriftAndRefactorize();
  }
}

void CompressedCme::ObserveBatch(const Eigen::Ref<const RowMatrixXd>& x, const Eigen::Ref<const RowMatrixXd>& y) {
  for (Eigen::Index i = 0; i < x.rows(); ++i) Observe(x.row(i).data(), y.row(i).data());
}

double CompressedCme::MeasureInverseDrift() {
  // ||(G + gamma I) G^-1 - I||_F one column at a time into the capacity-sized scratch tmp_, so
  // that the periodic check inside Observe() does not allocate.
  const double gamma = Gamma();
  auto drift = [this, gamma](const MatrixXd& g, const MatrixXd& g_inv, int m) {
    double sum = 0;
    for (int j = 0; j < m; ++j) {
      auto r = tmp_.head(m);
      r.noalias() = g.topLeftCorner(m, m) * g_inv.col(j).head(m);
      r += gamma * g_inv.col(j).head(m);
      r[j] -= 1.0;
      sum += r.squaredNorm();
    }
    return std::sqrt(sum);
  };
  last_drift_ = std::max(drift(gx_, gx_inv_, mx_), drift(gy_, gy_inv_, my_));
  return last_drift_;
}

void CompressedCme::Refactorize() {
  // Cholesky of the jittered Gram (SPD by construction: Gaussian Gram + gamma I, gamma > 0), so
  // no pivoting or SVD fallback is needed; the inverse is then exact to O(cond * eps_machine).
  const double gamma = Gamma();
  auto refactor = [gamma](const MatrixXd& g, MatrixXd& g_inv, int m) {
    if (m == 0) return;
    MatrixXd gj = g.topLeftCorner(m, m);
    gj.diagonal().array() += gamma;
    Eigen::LLT<MatrixXd> llt(gj);
    if (llt.info() == Eigen::Success) {
      g_inv.topLeftCorner(m, m) = llt.solve(MatrixXd::Identity(m, m));
    } else {
      // Only possible with jitter = 0 and duplicate atoms: fall back to a pivoted LU.
      g_inv.topLeftCorner(m, m) = gj.fullPivLu().inverse();
    }
  };
  refactor(gx_, gx_inv_, mx_);
  refactor(gy_, gy_inv_, my_);
  ++counters_.refactorizations;
}

double CompressedCme::CheckDriftAndRefactorize() {
  const double drift = MeasureInverseDrift();
  if (drift > options_.drift_tolerance || negative_delta_events_ > 0) {
    Refactorize();
    negative_delta_events_ = 0;
  }
  return drift;
}

Eigen::Ref<const RowMatrixXd> CompressedCme::x_atoms() const { return x_atoms_.topRows(mx_); }
Eigen::Ref<const RowMatrixXd> CompressedCme::y_atoms() const { return y_atoms_.topRows(my_); }
Eigen::Ref<const MatrixXd> CompressedCme::W() const {
  return options_.averaging ? w_avg_.topLeftCorner(my_, mx_) : w_.topLeftCorner(my_, mx_);
}
Eigen::Ref<const MatrixXd> CompressedCme::W_iterate() const { return w_.topLeftCorner(my_, mx_); }
Eigen::Ref<const MatrixXd> CompressedCme::gram_x_inverse() const { return gx_inv_.topLeftCorner(mx_, mx_); }
Eigen::Ref<const MatrixXd> CompressedCme::gram_y_inverse() const { return gy_inv_.topLeftCorner(my_, my_); }

CmeSnapshot CmeSnapshot::From(const CompressedCme& cme) {
  CmeSnapshot s;
  s.dim = cme.options().dim;
  s.sigma = cme.options().sigma;
  s.samples = cme.samples();
  s.x_atoms = cme.x_atoms();
  s.y_atoms = cme.y_atoms();
  s.W = cme.W();
  return s;
}

RowMatrixXd PredictConditionalMean(const CmeSnapshot& s, const Eigen::Ref<const RowMatrixXd>& points) {
  RowMatrixXd out = RowMatrixXd::Zero(points.rows(), s.dim);
  if (points.rows() == 0 || s.x_atoms.rows() == 0 || s.y_atoms.rows() == 0) return out;
  const MatrixXd kx = GaussianGram(points, s.x_atoms, s.sigma);  // n x m_x
  const MatrixXd beta = kx * s.W.transpose();                       // n x m_y, beta = W k_X(x)
  out.noalias() = beta * s.y_atoms;                                 // sum_i beta_i y_i
  return out;
}

}  // namespace cmestream
