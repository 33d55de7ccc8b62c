// Compressed online CME: docs/algorithms.md §1, implemented formula by formula.
#include "core/cme/compressed_cme.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/common/options_check.h"
#include "core/common/splitmix.h"
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
  if (!(sigma >= kMinSigma) || !(sigma <= kMaxSigma)) {
    return Violated(absl::StrCat("sigma in [", kMinSigma, ", ", kMaxSigma, "] (> 0 and finite), got ", sigma));
  }
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
  AbortOnInvalidOptions(options.Validate(), "CompressedCme");
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
  m = std::min(std::max(m, 0), DictionaryCap());
  if (m <= cap_) return;
  // Capacities follow one rule (16 * 2^k, capped at max_dict), so the capacity of a learner is
  // a function of its dictionary size whichever way it got there (growth or Deserialize).
  int cap = kInitialCapacity;
  while (cap < m) cap *= 2;
  cap = std::min(cap, options_.max_dict);
  const int d = options_.dim;
  GrowMatrix(x_atoms_, cap, d, mx_, d);
  GrowMatrix(y_atoms_, cap, d, my_, d);
  GrowMatrix(wf_, cap, cap, my_, mx_);
  if (options_.averaging) GrowMatrix(wf_avg_, cap, cap, my_, mx_);
  GrowMatrix(gx_, cap, cap, mx_, mx_);
  GrowMatrix(gy_, cap, cap, my_, my_);
  GrowMatrix(rx_, cap, cap, mx_, mx_);
  GrowMatrix(ry_, cap, cap, my_, my_);
  // Scratch vectors are rewritten before every read: no need to keep their contents.
  for (VectorXd* v : {&kx_, &ky_, &kyx_, &s_, &t_, &r_, &c_, &tmp_}) *v = VectorXd::Zero(cap);
  kyx_point_.setZero(d);
  kyx_valid_ = false;  // kyx_ was just re-zeroed
  for (MatrixXd* p : {&probe_z_, &probe_u_, &probe_v_}) p->setZero(cap, kDriftProbes);
  // ObserveBatch scratch is sized from cap on its next use.
  for (MatrixXd* b : {&bkx_, &bky_, &bkyx_, &bs_, &bt_, &bz_, &bv_, &bq_, &bvr_}) b->resize(0, 0);
  cap_ = cap;
}

void CompressedCme::EnsureCapacity() {
  // Room for one more atom on either side before a pair is processed.
  const int need = std::max(mx_, my_) + 1;
  if (need > cap_ && cap_ < DictionaryCap()) Reserve(need);
}

int64_t CompressedCme::HeapBytes() const {
  int64_t n = 0;
  for (const RowMatrixXd* m : {&x_atoms_, &y_atoms_}) n += m->size();
  for (const MatrixXd* m : {&wf_, &wf_avg_, &gx_, &gy_, &rx_, &ry_, &probe_z_, &probe_u_, &probe_v_, &bkx_, &bky_,
                            &bkyx_, &bs_, &bt_, &bz_, &bv_, &bq_, &bvr_})
    n += m->size();
  for (const VectorXd* v : {&kx_, &ky_, &kyx_, &kyx_point_, &s_, &t_, &r_, &c_, &tmp_, &bscale_, &bsum_})
    n += v->size();
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

void CompressedCme::SetSideLane(SideLane* lane, SideExecutor* executor) {
  side_.lane = lane;
  side_.executor = executor;
}

void CompressedCme::KernelColumn(const RowMatrixXd& atoms, int m, const double* p, double* out) const {
  // out[i] = k(atom_i, p). Squared distances term by term (no ||a||^2 + ||b||^2 - 2ab
  // cancellation: deltas of near-duplicate points matter here), then one vectorized exp. The
  // sequential and the batched paths both use this function on SIMD-aligned columns, so their
  // kernel values are the same.
  // Four atoms at a time: each atom's sum is still taken over k in order (the same bits as one
  // at a time), but four independent chains keep the FMA units busy where one chain waited on
  // its own latency (11 % of an ingest worker's time at m = 1000, d = 32 before).
  const int d = options_.dim;
  const double scale = -1.0 / (2 * options_.sigma * options_.sigma);
  const double* a = atoms.data();
  int i = 0;
  for (; i + 4 <= m; i += 4, a += 4 * d) {
    const double *a0 = a, *a1 = a + d, *a2 = a + 2 * d, *a3 = a + 3 * d;
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int k = 0; k < d; ++k) {
      const double t0 = a0[k] - p[k], t1 = a1[k] - p[k], t2 = a2[k] - p[k], t3 = a3[k] - p[k];
      s0 += t0 * t0;
      s1 += t1 * t1;
      s2 += t2 * t2;
      s3 += t3 * t3;
    }
    out[i] = s0 * scale;
    out[i + 1] = s1 * scale;
    out[i + 2] = s2 * scale;
    out[i + 3] = s3 * scale;
  }
  for (; i < m; ++i, a += d) {
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

void CompressedCme::KernelColumnX(int m, const double* p, const double* known_point, const double* known, double* out) {
  // The same point against the same atoms gives the same kernel values: on a trajectory
  // (x_{t+1} = y_t) the column of x_{t+1} was computed as k_X(y_t), for the nearest X atom of
  // y_t (the counts' target state). Copying it saves m d of the 3 m d kernel work per pair.
  // Bitwise comparison: a point equal in value but not in bits (-0.0) is recomputed.
  const size_t bytes = sizeof(double) * static_cast<size_t>(options_.dim);
  if (known_point != nullptr && std::memcmp(p, known_point, bytes) == 0) {
    std::memcpy(out, known, sizeof(double) * static_cast<size_t>(m));
    ++reused_columns_;
  } else {
    KernelColumn(x_atoms_, m, p, out);
  }
}

void CompressedCme::GrowFactor(MatrixXd& g, MatrixXd& r, int m, const VectorXd& k_new, const VectorXd& c, double ell) {
  // Gram of the enlarged dictionary (unjittered; the jitter is added where it is used).
  g.col(m).head(m) = k_new.head(m);
  g.row(m).head(m) = k_new.head(m).transpose();
  g(m, m) = 1.0;
  // L' = [[L, 0], [s^T, ell]] with s = R k_new, so R' = L'^{-1} = [[R, 0], [-s^T R / ell, 1/ell]]
  // and s^T R = (R^T s)^T = c^T (docs/algorithms.md (1.13')). O(m).
  r.row(m).head(m) = (-1.0 / ell) * c.head(m).transpose();
  r(m, m) = 1.0 / ell;
}

void CompressedCme::UpdateAverage() {
  // Polyak-Ruppert: running mean over all iterates, kept in the whitened basis (the map
  // W~ -> W is linear and fixed between re-factorizations, and atoms added later enter with
  // zero rows/columns in both bases: docs/algorithms.md §1.8). The admission code zeroes their
  // row/column of wf_avg_ before this update.
  const double t = static_cast<double>(counters_.samples);
  auto avg = wf_avg_.topLeftCorner(my_, mx_);
  avg += (wf_.topLeftCorner(my_, mx_) - avg) / t;
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
  const int cap = DictionaryCap();
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

  // kx = k_X(x), ky = k_Y(y): m kernel evaluations each (kx copied when x is the last y).
  KernelColumnX(mx, x, kyx_valid_ ? kyx_point_.data() : nullptr, kyx_.data(), kx_.data());
  KernelColumn(y_atoms_, my, y, ky_.data());
  auto s = s_.head(mx);
  auto t = t_.head(my);
  auto r = r_.head(my);
  s.noalias() = rx_.topLeftCorner(mx, mx).triangularView<Eigen::Lower>() * kx_.head(mx);  // ||s||^2 = ||P_X phi(x)||^2
  t.noalias() = ry_.topLeftCorner(my, my).triangularView<Eigen::Lower>() * ky_.head(my);  // ||t||^2 = ||P_Y phi(y)||^2
  r.noalias() = wf_.topLeftCorner(my, mx) * s;                                            // L_Y^T a, a = W kx
  r -= t;                                                                                 // L_Y^T (a - b): ||r||^2 = pu
  const PairStats st = MakeStats(s.squaredNorm(), 1.0 - t.squaredNorm(), r.squaredNorm(), eta);
  RecordStats(st);
  ApplyStep(Decide(st, eta), st, x, y, eta, decay);
}

void CompressedCme::ApplyStep(const Decision& dec, const PairStats& st, const double* x, const double* y, double eta,
                              double decay) {
  const int d = options_.dim;
  const int mx = mx_;
  const int my = my_;
  const double gamma = Gamma();
  // Every step updates the existing block the same way, W~ <- (1 - eta lambda) W~ - eta r s^T
  // (docs/algorithms.md (1.11')); an admission then appends a row (y) and/or a column (x), (1.12').
  tmp_.head(my) = eta * r_.head(my);
  DecayAndSubtractOuter(wf_, my, mx, decay, tmp_, s_);
  const bool add_y = dec.choice == kY || dec.choice == kBoth;
  const bool add_x = dec.choice == kX || dec.choice == kBoth;
  // Dictionary and factor growth. The Schur complement of the jittered Gram is delta + gamma.
  const double ell_x = add_x ? std::sqrt(st.dx + gamma) : 0;
  const double ell_y = add_y ? std::sqrt(st.dy + gamma) : 0;
  if (add_x) {
    wf_.col(mx).head(my) = (-eta * ell_x) * r_.head(my);
    c_.head(mx).noalias() = rx_.topLeftCorner(mx, mx).triangularView<Eigen::Lower>().transpose() * s_.head(mx);
    x_atoms_.row(mx) = Eigen::Map<const Eigen::RowVectorXd>(x, d);
    GrowFactor(gx_, rx_, mx, kx_, c_, ell_x);
    if (options_.averaging) wf_avg_.col(mx).head(my).setZero();
    mx_ = mx + 1;
    ++counters_.admitted_x;
  }
  if (add_y) {
    wf_.row(my).head(mx) = (eta * ell_y) * s_.head(mx).transpose();
    if (add_x) wf_(my, mx) = eta * ell_x * ell_y;
    c_.head(my).noalias() = ry_.topLeftCorner(my, my).triangularView<Eigen::Lower>().transpose() * t_.head(my);
    y_atoms_.row(my) = Eigen::Map<const Eigen::RowVectorXd>(y, d);
    GrowFactor(gy_, ry_, my, ky_, c_, ell_y);
    if (options_.averaging) wf_avg_.row(my).head(mx_).setZero();
    my_ = my + 1;
    ++counters_.admitted_y;
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
    std::copy(y, y + d, kyx_point_.data());  // kyx_ is k_X(y) over the atoms the next pair sees
    kyx_valid_ = true;
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
  // ||R (G + gamma I) R^T - I||_F one column at a time (column j of R^T is row j of R, zero
  // beyond j) into the capacity-sized scratch c_ and tmp_ (no allocation). O(m^3): tests and
  // diagnostics; the periodic check uses EstimateInverseDrift().
  const double gamma = Gamma();
  auto drift = [this, gamma](const MatrixXd& g, const MatrixXd& r, int m) {
    double sum = 0;
    for (int j = 0; j < m; ++j) {
      auto u = c_.head(m);
      auto v = tmp_.head(m);
      u.noalias() = g.topLeftCorner(m, j + 1) * r.row(j).head(j + 1).transpose();
      u.head(j + 1) += gamma * r.row(j).head(j + 1).transpose();
      v.noalias() = r.topLeftCorner(m, m).triangularView<Eigen::Lower>() * u;
      v[j] -= 1.0;
      sum += v.squaredNorm();
    }
    return std::sqrt(sum);
  };
  last_drift_ = std::max(drift(gx_, rx_, mx_), drift(gy_, ry_, my_));
  return last_drift_;
}

double CompressedCme::EstimateInverseDrift() {
  // Hutchinson: for E = R (G + gamma I) R^T - I and z with independent +-1 entries,
  // E ||E z||^2 = ||E||_F^2. kDriftProbes probes at once: U = R^T Z, V = R ((G + gamma I) U) - Z.
  const double gamma = Gamma();
  internal::SplitMix rng(0x6a09e667f3bcc908ULL ^ static_cast<uint64_t>(counters_.samples));
  auto estimate = [&](const MatrixXd& g, const MatrixXd& r, int m) {
    if (m == 0) return 0.0;
    auto z = probe_z_.topRows(m);
    auto u = probe_u_.topRows(m);
    auto v = probe_v_.topRows(m);
    for (int j = 0; j < kDriftProbes; ++j) {
      for (int i = 0; i < m; ++i) z(i, j) = (rng.Next() >> 63) ? 1.0 : -1.0;
    }
    u.noalias() = r.topLeftCorner(m, m).triangularView<Eigen::Lower>().transpose() * z;
    v.noalias() = g.topLeftCorner(m, m) * u;
    v += gamma * u;
    u.noalias() = r.topLeftCorner(m, m).triangularView<Eigen::Lower>() * v;
    u -= z;
    return std::sqrt(u.squaredNorm() / kDriftProbes);
  };
  last_drift_ = std::max(estimate(gx_, rx_, mx_), estimate(gy_, ry_, my_));
  return last_drift_;
}

bool CompressedCme::Refactorize() {
  // Cholesky of the jittered Gram (SPD by construction: Gaussian Gram + gamma I, gamma > 0), so
  // no pivoting is needed; R = L^{-1} is then exact to O(cond * eps_machine). W~ = L_Y^T W L_X
  // changes with the factors: W = R_Y^T W~ R_X is formed with the old ones and re-expressed
  // with the new ones (and likewise the average). With jitter = 0 and duplicate atoms the
  // Cholesky can fail; that side then keeps its incrementally grown factor.
  const double gamma = Gamma();
  const int mx = mx_, my = my_;
  auto factor = [gamma](const MatrixXd& g, int m, MatrixXd* l) {
    MatrixXd gj = g.topLeftCorner(m, m);
    gj.diagonal().array() += gamma;
    Eigen::LLT<MatrixXd> llt(gj);
    if (llt.info() != Eigen::Success) return false;
    *l = llt.matrixL();
    return true;
  };
  MatrixXd lx, ly;
  const bool new_x = mx > 0 && factor(gx_, mx, &lx);
  const bool new_y = my > 0 && factor(gy_, my, &ly);
  auto rebase = [&](MatrixXd& wf) {
    if (mx == 0 || my == 0) return;
    auto block = wf.topLeftCorner(my, mx);
    MatrixXd w = block;
    if (new_y) {
      w = ry_.topLeftCorner(my, my).triangularView<Eigen::Lower>().transpose() * w;  // R_Y^T W~
      w = ly.transpose().triangularView<Eigen::Upper>() * w;                         // L_Y'^T ...
    }
    if (new_x) {
      w = w * rx_.topLeftCorner(mx, mx).triangularView<Eigen::Lower>();  // ... R_X
      w = w * lx.triangularView<Eigen::Lower>();                         // ... L_X'
    }
    block = w;
  };
  rebase(wf_);
  if (options_.averaging) rebase(wf_avg_);
  auto invert = [](const MatrixXd& l, MatrixXd& r, int m) {
    r.topLeftCorner(m, m) = l.triangularView<Eigen::Lower>().solve(MatrixXd::Identity(m, m));
  };
  if (new_x) invert(lx, rx_, mx);
  if (new_y) invert(ly, ry_, my);
  ++counters_.refactorizations;
  return (mx == 0 || new_x) && (my == 0 || new_y);
}

double CompressedCme::CheckDriftAndRefactorize() {
  const double drift = EstimateInverseDrift();
  if (drift > options_.drift_tolerance || negative_delta_events_ > 0) {
    Refactorize();
    negative_delta_events_ = 0;
  }
  return drift;
}

namespace {

// W = R_Y^T W~ R_X (two triangular products, O(m^3)).
MatrixXd Unwhiten(const Eigen::Ref<const MatrixXd>& wf, const Eigen::Ref<const MatrixXd>& rx,
                  const Eigen::Ref<const MatrixXd>& ry) {
  MatrixXd w = ry.triangularView<Eigen::Lower>().transpose() * wf;
  w = w * rx.triangularView<Eigen::Lower>();
  return w;
}

}  // namespace

Eigen::Ref<const RowMatrixXd> CompressedCme::x_atoms() const { return x_atoms_.topRows(mx_); }
Eigen::Ref<const RowMatrixXd> CompressedCme::y_atoms() const { return y_atoms_.topRows(my_); }
Eigen::Ref<const MatrixXd> CompressedCme::W_whitened() const {
  return options_.averaging ? wf_avg_.topLeftCorner(my_, mx_) : wf_.topLeftCorner(my_, mx_);
}
Eigen::Ref<const MatrixXd> CompressedCme::inverse_factor_x() const { return rx_.topLeftCorner(mx_, mx_); }
Eigen::Ref<const MatrixXd> CompressedCme::inverse_factor_y() const { return ry_.topLeftCorner(my_, my_); }
MatrixXd CompressedCme::W() const { return Unwhiten(W_whitened(), inverse_factor_x(), inverse_factor_y()); }
MatrixXd CompressedCme::W_iterate() const {
  return Unwhiten(wf_.topLeftCorner(my_, mx_), inverse_factor_x(), inverse_factor_y());
}
MatrixXd CompressedCme::gram_x_inverse() const {
  const auto r = inverse_factor_x();
  return r.transpose() * r;
}
MatrixXd CompressedCme::gram_y_inverse() const {
  const auto r = inverse_factor_y();
  return r.transpose() * r;
}

CmeSnapshot CmeSnapshot::FromFactors(const CompressedCme& cme) {
  CmeSnapshot s;
  s.dim = cme.options().dim;
  s.sigma = cme.options().sigma;
  s.samples = cme.samples();
  s.x_atoms = cme.x_atoms();
  s.y_atoms = cme.y_atoms();
  s.w_whitened = cme.W_whitened();
  s.r_x = cme.inverse_factor_x();
  s.r_y = cme.inverse_factor_y();
  return s;
}

void CmeSnapshot::Materialize() {
  if (w_whitened.size() == 0 && W.rows() == y_atoms.rows() && W.cols() == x_atoms.rows()) return;
  W = Unwhiten(w_whitened, r_x, r_y);
  w_whitened = MatrixXd();
  r_x = MatrixXd();
  r_y = MatrixXd();
}

CmeSnapshot CmeSnapshot::From(const CompressedCme& cme) {
  CmeSnapshot s = FromFactors(cme);
  s.Materialize();
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
