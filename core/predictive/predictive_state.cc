// Predictive-state model by two-stage regression (see predictive_state.h; docs/algorithms.md §6).
#include "core/predictive/predictive_state.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace cmestream {
namespace {

using Kind = PredictiveStateAccumulator::Kind;

// Smallest total mass of a clipped probability vector we still normalize; below it the state
// carries no usable information and we fall back to the stationary state.
constexpr double kMinMass = 1e-12;

void ClipNormalize(VectorXd& v, const VectorXd& fallback) {
  v = v.cwiseMax(0.0);
  const double s = v.sum();
  if (s > kMinMass) {
    v /= s;
  } else {
    v = fallback;
  }
}

}  // namespace

absl::Status PredictiveStateAccumulator::Options::Validate() const {
  if (history_length < 1) return absl::InvalidArgumentError("Violated constraint: history_length >= 1");
  if (kind == Kind::kDiscrete) {
    if (num_symbols < 2) return absl::InvalidArgumentError("Violated constraint: num_symbols >= 2");
    double states = std::pow(static_cast<double>(num_symbols), history_length);
    if (states > max_history_states) {
      return absl::InvalidArgumentError(absl::StrCat("Violated constraint: num_symbols^history_length = ", states,
                                                     " <= max_history_states = ", max_history_states));
    }
  } else {
    if (dim < 1) return absl::InvalidArgumentError("Violated constraint: dim >= 1");
    if (future_length < 1) return absl::InvalidArgumentError("Violated constraint: future_length >= 1");
    if (dim * (history_length + future_length + 1) > 4096) {
      return absl::InvalidArgumentError("Violated constraint: dim * (history_length + future_length + 1) <= 4096");
    }
  }
  return absl::OkStatus();
}

PredictiveStateAccumulator::PredictiveStateAccumulator(const Options& options) : options_(options) {
  if (!options_.Validate().ok()) std::abort();
  stats_.options = options_;
  if (options_.kind == Kind::kDiscrete) {
    options_.dim = 1;
    stats_.options.dim = 1;
    const int S = options_.num_symbols;
    int dh = 1;
    for (int i = 0; i < options_.history_length; ++i) dh *= S;
    window_len_ = options_.history_length + 2;
    stats_.a_diag = VectorXd::Zero(dh);
    stats_.B_psi = MatrixXd::Zero(dh, S);
    stats_.B_xi = MatrixXd::Zero(dh, Eigen::Index{S} * S);
    stats_.pair_counts = MatrixXd::Zero(S, S);
    stats_.sum_e = VectorXd::Zero(S);
  } else {
    const int p = options_.dim, H = options_.history_length, F = options_.future_length;
    window_len_ = H + F + 1;
    const Eigen::Index ph = Eigen::Index{p} * H, pf = Eigen::Index{p} * (F + 1);  // dim h, dim e
    stats_.A = MatrixXd::Zero(ph, ph);
    stats_.B_e = MatrixXd::Zero(ph, pf);
    stats_.E = MatrixXd::Zero(pf, pf);
    stats_.sum_e = VectorXd::Zero(pf);
    h_ = VectorXd::Zero(ph);
    e_ = VectorXd::Zero(pf);
  }
  ring_ = RowMatrixXd::Zero(window_len_, options_.dim);
}

absl::Status PredictiveStateAccumulator::Observe(const double* o) {
  for (int i = 0; i < options_.dim; ++i) {
    if (!std::isfinite(o[i])) return absl::InvalidArgumentError("observation is not finite");
  }
  if (options_.kind == Kind::kDiscrete) {
    const double v = o[0];
    if (v != std::floor(v) || v < 0 || v >= options_.num_symbols) {
      return absl::InvalidArgumentError(
          absl::StrCat("discrete observation ", v, " is not a symbol id in [0, ", options_.num_symbols, ")"));
    }
  }
  ObserveValidated(o);
  return absl::OkStatus();
}

void PredictiveStateAccumulator::ObserveValidated(const double* o) {
  if (in_episode_ == 0) ring_pos_ = 0;
  for (int i = 0; i < options_.dim; ++i) ring_(ring_pos_, i) = o[i];
  ring_pos_ = (ring_pos_ + 1) % window_len_;
  ++in_episode_;
  ++observations_;
  if (in_episode_ >= window_len_) AddWindow();
}

absl::Status PredictiveStateAccumulator::ObserveBatch(const Eigen::Ref<const RowMatrixXd>& observations) {
  if (observations.cols() != options_.dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("observations have ", observations.cols(), " columns, expected ", options_.dim));
  }
  for (Eigen::Index r = 0; r < observations.rows(); ++r) {
    absl::Status s = Observe(observations.row(r).data());
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("row ", r, ": ", s.message()));
  }
  return absl::OkStatus();
}

void PredictiveStateAccumulator::AddWindow() {
  // After the write, the oldest observation of the window sits at ring_pos_.
  auto at = [&](int i) { return ring_.row((ring_pos_ + i) % window_len_); };
  ++windows_;
  if (options_.kind == Kind::kDiscrete) {
    const int S = options_.num_symbols, H = options_.history_length;
    int idx = 0;
    for (int i = 0; i < H; ++i) idx = idx * S + static_cast<int>(at(i)(0));
    const int a = static_cast<int>(at(H)(0)), b = static_cast<int>(at(H + 1)(0));
    stats_.a_diag[idx] += 1;
    stats_.B_psi(idx, a) += 1;
    stats_.B_xi(idx, a * S + b) += 1;
    stats_.pair_counts(a, b) += 1;
    stats_.sum_e[a] += 1;
    return;
  }
  const int p = options_.dim, H = options_.history_length, F = options_.future_length;
  for (int i = 0; i < H; ++i) h_.segment(Eigen::Index{i} * p, p) = at(i).transpose();
  for (int i = 0; i <= F; ++i) e_.segment(Eigen::Index{i} * p, p) = at(H + i).transpose();
  // Rank-1 updates; noalias outer products do not allocate.
  stats_.A.noalias() += h_ * h_.transpose();
  stats_.B_e.noalias() += h_ * e_.transpose();
  stats_.E.noalias() += e_ * e_.transpose();
  stats_.sum_e += e_;
}

PredictiveStateAccumulator::Statistics PredictiveStateAccumulator::Snapshot() const {
  Statistics s = stats_;
  s.windows = windows_;
  return s;
}

// ---------------------------------------------------------------------------------------------
absl::Status PredictiveStateModel::FitOptions::Validate() const {
  if (!(lambda1 >= 0) || !(lambda2 >= 0)) {
    return absl::InvalidArgumentError("Violated constraint: lambda1 >= 0 and lambda2 >= 0");
  }
  if (rank < 1) return absl::InvalidArgumentError("Violated constraint: rank >= 1");
  if (min_windows < 1) return absl::InvalidArgumentError("Violated constraint: min_windows >= 1");
  return absl::OkStatus();
}

absl::StatusOr<PredictiveStateModel> PredictiveStateModel::Fit(const PredictiveStateAccumulator::Statistics& s,
                                                               const FitOptions& options) {
  if (absl::Status st = options.Validate(); !st.ok()) return st;
  if (absl::Status st = s.options.Validate(); !st.ok()) return st;
  if (s.windows < options.min_windows) {
    return absl::FailedPreconditionError(
        absl::StrCat("predictive-state model has ", s.windows, " windows, needs ", options.min_windows));
  }
  const double n = static_cast<double>(s.windows);
  PredictiveStateModel m;
  m.kind_ = s.options.kind;
  m.p_ = s.options.kind == Kind::kDiscrete ? 1 : s.options.dim;

  if (s.options.kind == Kind::kDiscrete) {
    const int S = s.options.num_symbols;
    m.s_ = S;
    const VectorXd& a = s.a_diag;
    MatrixXd G, X;  // Psi^T Psi (S x S) and Xi^T Psi (S^2 x S) of the S2 regression inputs
    if (options.stage == Stage::kTwoStage) {
      // S1A / S1B ridge with diagonal A: Theta = diag(1/(a + lam1)) B  (§6).
      const double lam1 = options.lambda1 * n / a.size();  // relative to trace(A)/dim(h)
      const VectorXd inv = (a.array() + lam1).inverse().matrix();
      const MatrixXd theta_psi = inv.asDiagonal() * s.B_psi;
      const MatrixXd theta_xi = inv.asDiagonal() * s.B_xi;
      G = theta_psi.transpose() * a.asDiagonal() * theta_psi;
      X = theta_xi.transpose() * a.asDiagonal() * theta_psi;
    } else {
      // Naive one-stage: regress xi on psi directly (no instruments).
      G = s.pair_counts.rowwise().sum().asDiagonal();
      X = MatrixXd::Zero(Eigen::Index{S} * S, S);
      for (int i = 0; i < S; ++i)
        for (int j = 0; j < S; ++j) X(i * S + j, i) = s.pair_counts(i, j);
    }
    const double lam2 = options.lambda2 * G.trace() / S;
    m.w_ = (G + lam2 * MatrixXd::Identity(S, S)).ldlt().solve(X.transpose()).transpose();
    m.q0_ = s.sum_e / n;
    return m;
  }

  const int p = s.options.dim, H = s.options.history_length, F = s.options.future_length;
  const int dh = p * H, dpsi = p * F, de = p * (F + 1);
  const int r = options.rank;
  if (r > dpsi) {
    return absl::InvalidArgumentError(
        absl::StrCat("Violated constraint: rank = ", r, " <= dim * future_length = ", dpsi));
  }
  const double lam1 = options.lambda1 * s.A.trace() / dh;
  const Eigen::LDLT<MatrixXd> a_reg(s.A + lam1 * MatrixXd::Identity(dh, dh));
  if (a_reg.info() != Eigen::Success) return absl::FailedPreconditionError("S1 normal matrix is not factorizable");
  // S1A: psi ~ h. psi_t is the first pF entries of the extended window e_t.
  const MatrixXd b_psi = s.B_e.leftCols(dpsi);
  const MatrixXd theta_psi = a_reg.solve(b_psi);                   // dh x pF
  const MatrixXd g_psi = theta_psi.transpose() * s.A * theta_psi;  // Psibar^T Psibar
  // Reduced-rank basis U: top-r eigenvectors of Psibar^T Psibar.
  Eigen::SelfAdjointEigenSolver<MatrixXd> eig(g_psi);
  MatrixXd U(dpsi, r);
  for (int j = 0; j < r; ++j) U.col(j) = eig.eigenvectors().col(dpsi - 1 - j);
  // xi_t = L e_t, L = blockdiag(I_p, U^T) (maps e = o_{t..t+F} to [o_t; U^T o_{t+1..t+F}]).
  MatrixXd L = MatrixXd::Zero(p + r, de);
  L.topLeftCorner(p, p).setIdentity();
  L.bottomRightCorner(r, dpsi) = U.transpose();
  const MatrixXd b_xi = s.B_e * L.transpose();   // dh x (p+r)
  const MatrixXd exx = L * s.E * L.transpose();  // sum xi xi^T
  MatrixXd W, resid;
  if (options.stage == Stage::kTwoStage) {
    const MatrixXd theta_xi = a_reg.solve(b_xi);               // S1B
    const MatrixXd theta_q = theta_psi * U;                    // S1A in the q basis
    const MatrixXd qq = theta_q.transpose() * s.A * theta_q;   // Qbar^T Qbar
    const MatrixXd xq = theta_xi.transpose() * s.A * theta_q;  // Xibar^T Qbar
    const double lam2 = options.lambda2 * qq.trace() / r;
    W = (qq + lam2 * MatrixXd::Identity(r, r)).ldlt().solve(xq.transpose()).transpose();
    // Sigma_xi: sum (xi - W qbar)(xi - W qbar)^T with qbar = Theta_q^T h (the S1A estimate of
    // the state from the history window), from the streamed moments only.
    const MatrixXd wq_xi = W * theta_q.transpose() * b_xi;  // sum W qbar xi^T
    resid = exx - wq_xi - wq_xi.transpose() + W * qq * W.transpose();
  } else {
    const MatrixXd qq = U.transpose() * s.E.topLeftCorner(dpsi, dpsi) * U;  // sum q q^T, q = U^T psi
    const MatrixXd xq = L * s.E.leftCols(dpsi) * U;                         // sum xi q^T
    const double lam2 = options.lambda2 * qq.trace() / r;
    W = (qq + lam2 * MatrixXd::Identity(r, r)).ldlt().solve(xq.transpose()).transpose();
    resid = exx - W * xq.transpose() - xq * W.transpose() + W * qq * W.transpose();
  }
  resid /= n;
  const MatrixXd s_oo = resid.topLeftCorner(p, p);
  const MatrixXd s_qo = resid.bottomLeftCorner(r, p);
  const Eigen::LDLT<MatrixXd> oo(s_oo);
  if (oo.info() != Eigen::Success || !(s_oo.trace() > 0)) {
    return absl::FailedPreconditionError("observation residual covariance is singular (noise-free data?)");
  }
  m.gain_ = oo.solve(s_qo.transpose()).transpose();  // Sigma_qo Sigma_oo^-1
  m.w_ = W;
  m.u_ = U;
  m.q0_ = U.transpose() * (s.sum_e.head(dpsi) / n);
  return m;
}

void PredictiveStateModel::Update(VectorXd& q, const double* o) const {
  if (kind_ == Kind::kDiscrete) {
    const int a = static_cast<int>(o[0]);
    const VectorXd joint = w_ * q;  // row-major S x S table of (o_t, o_{t+1})
    VectorXd next = joint.segment(Eigen::Index{a} * s_, s_);
    ClipNormalize(next, q0_);
    q = next;
    return;
  }
  const VectorXd P = w_ * q;
  const Eigen::Map<const VectorXd> obs(o, p_);
  q = P.tail(q.size()) + gain_ * (obs - P.head(p_));
}

void PredictiveStateModel::Propagate(VectorXd& q) const {
  if (kind_ == Kind::kDiscrete) {
    const VectorXd joint = w_ * q;
    VectorXd next = VectorXd::Zero(s_);
    for (int a = 0; a < s_; ++a) next += joint.segment(Eigen::Index{a} * s_, s_);
    ClipNormalize(next, q0_);
    q = next;
    return;
  }
  const VectorXd P = w_ * q;
  q = P.tail(q.size());
}

VectorXd PredictiveStateModel::PredictDistribution(const VectorXd& q) const {
  VectorXd d = q;
  if (kind_ == Kind::kDiscrete) ClipNormalize(d, q0_);
  return d;
}

VectorXd PredictiveStateModel::PredictMean(const VectorXd& q) const {
  if (kind_ == Kind::kDiscrete) {
    const VectorXd d = PredictDistribution(q);
    VectorXd mean(1);
    mean[0] = d.dot(VectorXd::LinSpaced(s_, 0, s_ - 1));
    return mean;
  }
  return w_.topRows(p_) * q;
}

absl::Status PredictiveStateModel::CheckObservation(const double* o) const {
  for (int i = 0; i < p_; ++i) {
    if (!std::isfinite(o[i])) return absl::InvalidArgumentError("observation is not finite");
  }
  if (kind_ == Kind::kDiscrete && (o[0] != std::floor(o[0]) || o[0] < 0 || o[0] >= s_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("discrete observation ", o[0], " is not a symbol id in [0, ", s_, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<PredictiveStateModel::Forecast> PredictiveStateModel::ForecastFrom(
    const Eigen::Ref<const RowMatrixXd>& window, int horizon) const {
  if (horizon < 1) return absl::InvalidArgumentError("horizon must be >= 1");
  if (window.rows() > 0 && window.cols() != p_) {
    return absl::InvalidArgumentError(absl::StrCat("window rows have ", window.cols(), " values, expected ", p_));
  }
  for (Eigen::Index t = 0; t < window.rows(); ++t) {
    if (absl::Status s = CheckObservation(window.row(t).data()); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("window row ", t, ": ", s.message()));
    }
  }
  Forecast f;
  VectorXd q = q0_;
  for (Eigen::Index t = 0; t < window.rows(); ++t) Update(q, window.row(t).data());
  f.state = q;
  f.mean.resize(horizon, p_);
  if (kind_ == Kind::kDiscrete) f.distribution.resize(horizon, s_);
  for (int h = 0; h < horizon; ++h) {
    f.mean.row(h) = PredictMean(q).transpose();
    if (kind_ == Kind::kDiscrete) f.distribution.row(h) = PredictDistribution(q).transpose();
    Propagate(q);
  }
  return f;
}

}  // namespace cmestream
