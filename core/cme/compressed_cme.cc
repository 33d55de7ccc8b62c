// Compressed online CME: docs/algorithms.md §1, implemented formula by formula.
#include "core/cme/compressed_cme.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

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
  if (max_dict > 20000)
    return Violated(absl::StrCat("max_dict <= 20000 (memory is up to 7 max_dict^2 doubles), got ", max_dict));
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
  // No buffers yet: capacity grows with the dictionary (EnsureCapacity), so an empty learner
  // costs only this object.
}

namespace {

constexpr int kInitialCapacity = 16;

// W(:my, :mx) <- decay W - t c^T in one sweep over W, column by column. Each entry gets the
// same operations in the same order as the former two sweeps (W *= decay, then Eigen's
// outer-product update W -= t c^T, whose column j is c_j * t): round(round(w decay) -
// round(c_j t_i)), so W is bit-identical; W is read and written once per pair instead of twice
// (the W update took 0.61 s of CPU before and 0.22 s after over 20 000 Duffing pairs in a daemon
// profile, docs/benchmarks.md).
void DecayAndSubtractOuter(MatrixXd& w, int my, int mx, double decay, const VectorXd& t, const VectorXd& c) {
  const auto th = t.head(my);
  for (int j = 0; j < mx; ++j) {
    auto col = w.col(j).head(my);
    col = col * decay - c[j] * th;
  }
}

// Copies the live top-left block of m into a zeroed rows x cols matrix (capacity growth).
template <class M>
void GrowMatrix(M& m, Eigen::Index rows, Eigen::Index cols, Eigen::Index live_rows, Eigen::Index live_cols) {
  M grown = M::Zero(rows, cols);
  if (live_rows > 0 && live_cols > 0) grown.topLeftCorner(live_rows, live_cols) = m.topLeftCorner(live_rows, live_cols);
  m.swap(grown);
}

}  // namespace

void CompressedCme::Reserve(int m) {
  m = std::min(std::max(m, 0), options_.max_dict);
  if (m <= cap_) return;
  // Capacities follow one rule (16 * 2^k, capped at max_dict), so the capacity of a learner is
  // a function of its dictionary size whichever way it got there (growth or Deserialize).
  int cap = kInitialCapacity;
  while (cap < m) cap *= 2;
  cap = std::min(cap, options_.max_dict);
  const int d = options_.dim;
  GrowMatrix(x_atoms_, cap, d, mx_, d);
  GrowMatrix(y_atoms_, cap, d, my_, d);
  GrowMatrix(w_, cap, cap, my_, mx_);
  if (options_.averaging) GrowMatrix(w_avg_, cap, cap, my_, mx_);
  GrowMatrix(gx_, cap, cap, mx_, mx_);
  GrowMatrix(gy_, cap, cap, my_, my_);
  GrowMatrix(gx_inv_, cap, cap, mx_, mx_);
  GrowMatrix(gy_inv_, cap, cap, my_, my_);
  // Scratch vectors are rewritten before every read: no need to keep their contents.
  for (VectorXd* v : {&kx_, &ky_, &a_, &b_, &c_, &kyx_, &tmp_, &amb_}) *v = VectorXd::Zero(cap);
  // ObserveBatch scratch is sized from cap on its next use.
  for (MatrixXd* b : {&bkx_, &bky_, &bkyx_, &bc_, &bb_, &bgb_, &bz_, &bvv_, &bq_, &bvr_}) b->resize(0, 0);
  cap_ = cap;
}

void CompressedCme::EnsureCapacity() {
  // Room for one more atom on either side before a pair is processed.
  const int need = std::max(mx_, my_) + 1;
  if (need > cap_ && cap_ < options_.max_dict) Reserve(need);
}

int64_t CompressedCme::HeapBytes() const {
  int64_t n = 0;
  for (const RowMatrixXd* m : {&x_atoms_, &y_atoms_}) n += m->size();
  for (const MatrixXd* m : {&w_, &w_avg_, &gx_, &gy_, &gx_inv_, &gy_inv_, &bkx_, &bky_, &bkyx_, &bc_, &bb_, &bgb_, &bz_,
                            &bvv_, &bq_, &bvr_})
    n += m->size();
  for (const VectorXd* v : {&kx_, &ky_, &a_, &b_, &c_, &kyx_, &tmp_, &amb_, &bscale_, &bsum_}) n += v->size();
  return n * static_cast<int64_t>(sizeof(double));
}

double CompressedCme::Gamma() const {
  // Relative jitter gamma = jitter * k(x,x); the Gaussian kernel has k(x,x) = 1.
  return options_.jitter;
}

double CompressedCme::StepSizeAt(int64_t samples) const {
  if (options_.step_decay_samples <= 0) return options_.eta;
  const double t = static_cast<double>(samples);
  return options_.eta / std::pow(1.0 + t / options_.step_decay_samples, options_.step_decay_power);
}

void CompressedCme::KernelColumn(const RowMatrixXd& atoms, int m, const double* p, double* out) const {
  // out[i] = k(atom_i, p). Squared distances term by term (no ||a||^2 + ||b||^2 - 2ab
  // cancellation: deltas of near-duplicate points matter here), then one vectorized exp. The
  // sequential and the batched paths both use this function on SIMD-aligned columns, so their
  // kernel values are the same.
  const int d = options_.dim;
  const double scale = -1.0 / (2 * options_.sigma * options_.sigma);
  const double* a = atoms.data();
  for (int i = 0; i < m; ++i, a += d) {
    double s = 0;
    for (int k = 0; k < d; ++k) {
      const double t = a[k] - p[k];
      s += t * t;
    }
    out[i] = s * scale;
  }
  Eigen::Map<VectorXd> v(out, m);
  v = v.array().exp().matrix();
}

void CompressedCme::GrowInverse(MatrixXd& g, MatrixXd& g_inv, int m, const VectorXd& k_new, const VectorXd& c,
                                double delta) {
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
  tmp_.head(my) = eta * amb_.head(my);
  DecayAndSubtractOuter(w_, my, mx, decay, tmp_, c_);
}

void CompressedCme::AppendRowOfW(int my, int mx, double decay, double eta) {
  // Add y only: W <- [(1 - eta lambda) W - eta a c^T ; eta c^T].
  tmp_.head(my) = eta * a_.head(my);
  DecayAndSubtractOuter(w_, my, mx, decay, tmp_, c_);
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

CompressedCme::PairStats CompressedCme::MakeStats(double pv, double dy_raw, double pu_raw, double eta) const {
  PairStats st;
  const double dx_raw = 1.0 - pv;  // k(x,x) - kx^T c
  st.negative = dx_raw < -kNegativeDeltaTolerance || dy_raw < -kNegativeDeltaTolerance;
  st.pv = pv;
  st.dx = std::max(0.0, dx_raw);
  st.dy = std::max(0.0, dy_raw);
  st.pu = std::max(0.0, pu_raw);
  st.err2 = eta * eta * (st.pu * st.dx + st.dy * st.pv + st.dx * st.dy);
  return st;
}

void CompressedCme::RecordStats(const PairStats& st) {
  if (st.negative) ++negative_delta_events_;
  last_error_ = std::sqrt(st.err2);
}

CompressedCme::Decision CompressedCme::Decide(const PairStats& st, double eta) const {
  Decision dec;
  const int mx = mx_, my = my_;
  const double eta2 = eta * eta;
  const double gamma = Gamma();
  const double eps2 = options_.epsilon * options_.epsilon;
  const int cap = options_.max_dict;
  // An empty dictionary cannot absorb anything (C = 0 stays 0): the first sample always admits.
  const bool must_admit = (mx == 0 || my == 0);
  if (!(st.err2 > eps2 || must_admit)) return dec;
  if (options_.one_sided) {
    // Never add a side whose delta is below the jitter floor (numerically already in span).
    const bool can_y = my < cap && st.dy > gamma;
    const bool can_x = mx < cap && st.dx > gamma;
    const double err_y = eta2 * (st.pu + st.dy) * st.dx;  // after adding phi(y) to Psi only
    const double err_x = eta2 * st.dy * (st.pv + st.dx);  // after adding phi(x) to Phi only
    if (!must_admit && can_y && err_y <= eps2 && (!can_x || err_x > eps2 || err_y <= err_x)) {
      dec.choice = kY;
    } else if (!must_admit && can_x && err_x <= eps2) {
      dec.choice = kX;
    } else if (can_x && can_y) {
      dec.choice = kBoth;
    } else {
      // The budget binds (cap or floor): take the best feasible partial step, project the rest.
      dec.forced = true;
      dec.residual2 = st.err2;
      if (can_y && err_y <= dec.residual2) {
        dec.choice = kY;
        dec.residual2 = err_y;
      }
      if (can_x && err_x < dec.residual2) {
        dec.choice = kX;
        dec.residual2 = err_x;
      }
    }
  } else {
    if (mx < cap && my < cap) {
      dec.choice = kBoth;
    } else {
      dec.forced = true;
      dec.residual2 = st.err2;
    }
  }
  return dec;
}

void CompressedCme::Observe(const double* x, const double* y) {
  EnsureCapacity();
  const int mx = mx_;
  const int my = my_;
  const double eta = StepSizeAt(counters_.samples);
  const double decay = 1.0 - eta * options_.lambda;

  // kx = k_X(x), ky = k_Y(y): m kernel evaluations each.
  KernelColumn(x_atoms_, mx, x, kx_.data());
  KernelColumn(y_atoms_, my, y, ky_.data());
  auto kx = kx_.head(mx);
  auto ky = ky_.head(my);
  auto a = a_.head(my);
  auto b = b_.head(my);
  auto c = c_.head(mx);
  a.noalias() = w_.topLeftCorner(my, mx) * kx;       // C phi(x) = Psi a
  b.noalias() = gy_inv_.topLeftCorner(my, my) * ky;  // P_Y phi(y) = Psi b
  c.noalias() = gx_inv_.topLeftCorner(mx, mx) * kx;  // P_X phi(x) = Phi c
  // pu = (a - b)^T G_Y (a - b) = ||P_Y u||^2 for u = Psi a - phi(y).
  amb_.head(my) = a - b;
  tmp_.head(my).noalias() = gy_.topLeftCorner(my, my) * amb_.head(my);
  const PairStats st = MakeStats(kx.dot(c), 1.0 - ky.dot(b), amb_.head(my).dot(tmp_.head(my)), eta);
  RecordStats(st);
  ApplyStep(Decide(st, eta), st, x, y, eta, decay);
}

void CompressedCme::ApplyStep(const Decision& dec, const PairStats& st, const double* x, const double* y, double eta,
                              double decay) {
  const int d = options_.dim;
  const int mx = mx_;
  const int my = my_;
  const double gamma = Gamma();
  switch (dec.choice) {
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
  const bool add_y = dec.choice == kY || dec.choice == kBoth;
  const bool add_x = dec.choice == kX || dec.choice == kBoth;
  // Dictionary and inverse growth. The Schur complement of the jittered Gram is delta + gamma.
  if (add_y) {
    y_atoms_.row(my) = Eigen::Map<const Eigen::RowVectorXd>(y, d);
    GrowInverse(gy_, gy_inv_, my, ky_, b_, st.dy + gamma);
    if (options_.averaging) w_avg_.row(my).head(mx + (add_x ? 1 : 0)).setZero();
    my_ = my + 1;
    ++counters_.admitted_y;
  }
  if (add_x) {
    x_atoms_.row(mx) = Eigen::Map<const Eigen::RowVectorXd>(x, d);
    GrowInverse(gx_, gx_inv_, mx, kx_, c_, st.dx + gamma);
    if (options_.averaging) w_avg_.col(mx).head(my_).setZero();
    mx_ = mx + 1;
    ++counters_.admitted_x;
  }
  if (dec.choice == kCompress && !dec.forced) ++counters_.compressed;
  if (dec.forced) {
    ++counters_.forced;
    counters_.forced_error_sum += std::sqrt(dec.residual2);
  }
  last_step_ = dec.forced                ? Step::kForced
               : dec.choice == kCompress ? Step::kCompressed
               : dec.choice == kY        ? Step::kAdmittedY
               : dec.choice == kX        ? Step::kAdmittedX
                                         : Step::kAdmittedBoth;
  ++counters_.samples;
  if (options_.averaging) UpdateAverage();

  // Nearest X atom of x (reuses kx) and of y (m_x extra kernel evaluations).
  if (add_x) {
    last_nearest_x_ = mx;  // x itself is the new atom
  } else if (mx > 0) {
    Eigen::Index i;
    kx_.head(mx).maxCoeff(&i);
    last_nearest_x_ = static_cast<int>(i);
  }
  if (mx_ > 0) {
    KernelColumn(x_atoms_, mx_, y, kyx_.data());
    Eigen::Index i;
    kyx_.head(mx_).maxCoeff(&i);
    last_nearest_y_in_x_ = static_cast<int>(i);
  }
  AfterPairDriftSchedule();
}

int64_t CompressedCme::PairsUntilDriftCheck() const {
  if (options_.drift_check_interval <= 0) return std::numeric_limits<int64_t>::max();
  const int64_t period = std::max<int64_t>(options_.drift_check_interval, mx_ + my_);
  return std::max<int64_t>(1, period - samples_since_drift_check_);
}

void CompressedCme::AfterPairDriftSchedule() {
  // Periodic drift check, scheduled by sample count (see Options::drift_check_interval).
  if (options_.drift_check_interval > 0 &&
      ++samples_since_drift_check_ >= std::max<int64_t>(options_.drift_check_interval, mx_ + my_)) {
    samples_since_drift_check_ = 0;
    CheckDriftAndRefactorize();
  }
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
  const MatrixXd beta = kx * s.W.transpose();                    // n x m_y, beta = W k_X(x)
  out.noalias() = beta * s.y_atoms;                              // sum_i beta_i y_i
  return out;
}

}  // namespace cmestream
