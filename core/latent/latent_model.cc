// Multi-view latent-state model (see latent_model.h; docs/algorithms.md §5).
#include "core/latent/latent_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace cmestream {
namespace {

constexpr double kPi = 3.14159265358979323846;

using FeatureKind = LatentFeatureOptions::Kind;

// Entry T[i,j,l] of a k x k x k tensor stored flat.
inline int Idx(int k, int i, int j, int l) { return (i * k + j) * k + l; }

// T(I, v, v)_i = sum_{j,l} T[i,j,l] v_j v_l.
VectorXd ContractTwo(const VectorXd& t, int k, const VectorXd& v) {
  VectorXd out = VectorXd::Zero(k);
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < k; ++j)
      for (int l = 0; l < k; ++l) out[i] += t[Idx(k, i, j, l)] * v[j] * v[l];
  return out;
}

}  // namespace

absl::Status LatentFeatureOptions::Validate() const {
  if (dim < 1) return absl::InvalidArgumentError("Violated constraint: dim >= 1");
  if (kind == Kind::kOneHot) {
    if (dim != 1) return absl::InvalidArgumentError("Violated constraint: one-hot features need dim == 1");
    if (num_symbols < 2) return absl::InvalidArgumentError("Violated constraint: num_symbols >= 2");
  } else {
    if (num_features < 1) return absl::InvalidArgumentError("Violated constraint: num_features >= 1");
    if (!(sigma > 0) || !std::isfinite(sigma)) return absl::InvalidArgumentError("Violated constraint: sigma > 0");
  }
  return absl::OkStatus();
}

std::shared_ptr<const FeatureMap> MakeLatentFeatureMap(const LatentFeatureOptions& options) {
  if (!options.Validate().ok()) std::abort();
  absl::StatusOr<FeatureMap> map =
      options.kind == FeatureKind::kOneHot
          ? FeatureMap::OneHot(options.num_symbols)
          : FeatureMap::Rff(options.dim, options.num_features, options.sigma, options.seed);
  if (!map.ok()) std::abort();  // Validate() checked every argument
  return std::make_shared<const FeatureMap>(*std::move(map));
}

// ---------------------------------------------------------------------------------------------
absl::Status MultiViewAccumulator::Options::Validate() const {
  if (absl::Status s = features.Validate(); !s.ok()) return s;
  if (reservoir_size < 1) return absl::InvalidArgumentError("Violated constraint: reservoir_size >= 1");
  if (batch < 1 || static_cast<int64_t>(batch) * features.size() > 16384) {
    return absl::InvalidArgumentError("Violated constraint: 1 <= batch and batch * D <= 16384");
  }
  return absl::OkStatus();
}

MultiViewAccumulator::MultiViewAccumulator(const Options& options)
    : MultiViewAccumulator(options, MakeLatentFeatureMap(options.features)) {}

MultiViewAccumulator::MultiViewAccumulator(const Options& options, std::shared_ptr<const FeatureMap> map)
    : options_(options), map_(std::move(map)), rng_(options.reservoir_seed) {
  if (!options_.Validate().ok() || map_ == nullptr || map_->num_features() != options_.features.size() ||
      map_->input_dim() != options_.features.dim) {
    std::abort();
  }
  D_ = map_->num_features();
  d_ = options_.features.dim;
  feat_ = MatrixXd::Zero(D_, 3);
  raw_ = RowMatrixXd::Zero(3, d_);
  pa_ = pb_ = pc_ = MatrixXd::Zero(D_, options_.batch);
  c_ab_ = c_cb_ = c_ca_ = MatrixXd::Zero(D_, D_);
  reservoir_ = RowMatrixXd::Zero(options_.reservoir_size, Eigen::Index{3} * d_);
}

absl::Status MultiViewAccumulator::Observe(const double* x) {
  const Eigen::Map<const RowMatrixXd> point(x, 1, d_);
  if (absl::Status s = map_->ValidatePoints(point); !s.ok()) return s;
  ObserveValidated(x);
  return absl::OkStatus();
}

void MultiViewAccumulator::ObserveValidated(const double* x) {
  // One point as a 1 x d row, its features into a 1 x D row aliasing column slot_ of feat_:
  // Map's one-row product is a GEMV on the stack, no heap allocation.
  const Eigen::Map<const RowMatrixXd> point(x, 1, d_);
  slot_ = (slot_ + 1) % 3;
  map_->Map(point, Eigen::Map<RowMatrixXd>(feat_.col(slot_).data(), 1, D_));
  for (int i = 0; i < d_; ++i) raw_(slot_, i) = x[i];
  if (++in_episode_ < 3) return;
  // Views: a = x_{t-1} (two back), c = x_t (one back), b = x_{t+1} (this observation).
  const int sb = slot_, sc = (slot_ + 2) % 3, sa = (slot_ + 1) % 3;
  pa_.col(pending_) = feat_.col(sa);
  pc_.col(pending_) = feat_.col(sc);
  pb_.col(pending_) = feat_.col(sb);
  if (++pending_ == options_.batch) Flush();
  ++triples_;
  // Reservoir sampling (Algorithm R): every triple seen so far is kept with equal probability.
  int64_t dest = -1;
  if (reservoir_fill_ < options_.reservoir_size) {
    dest = reservoir_fill_++;
  } else {
    std::uniform_int_distribution<int64_t> pick(0, triples_ - 1);
    const int64_t j = pick(rng_);
    if (j < options_.reservoir_size) dest = j;
  }
  if (dest >= 0) {
    reservoir_.row(dest).segment(0, d_) = raw_.row(sa);
    reservoir_.row(dest).segment(d_, d_) = raw_.row(sc);
    reservoir_.row(dest).segment(Eigen::Index{2} * d_, d_) = raw_.row(sb);
  }
}

absl::Status MultiViewAccumulator::ObserveBatch(const Eigen::Ref<const RowMatrixXd>& x) {
  if (x.cols() != d_) {
    return absl::InvalidArgumentError(absl::StrCat("observations have ", x.cols(), " columns, expected ", d_));
  }
  if (absl::Status s = map_->ValidatePoints(x); !s.ok()) return s;
  for (Eigen::Index r = 0; r < x.rows(); ++r) ObserveValidated(x.row(r).data());
  return absl::OkStatus();
}

void MultiViewAccumulator::Flush() {
  if (pending_ == 0) return;
  const auto a = pa_.leftCols(pending_), b = pb_.leftCols(pending_), c = pc_.leftCols(pending_);
  c_ab_.noalias() += a * b.transpose();
  c_cb_.noalias() += c * b.transpose();
  c_ca_.noalias() += c * a.transpose();
  pending_ = 0;
}

MultiViewAccumulator::Statistics MultiViewAccumulator::Snapshot() const {
  Statistics s;
  s.features = map_;
  s.triples = triples_;
  s.C_ab = c_ab_;
  s.C_cb = c_cb_;
  s.C_ca = c_ca_;
  if (pending_ > 0) {
    const auto a = pa_.leftCols(pending_), b = pb_.leftCols(pending_), c = pc_.leftCols(pending_);
    s.C_ab.noalias() += a * b.transpose();
    s.C_cb.noalias() += c * b.transpose();
    s.C_ca.noalias() += c * a.transpose();
  }
  s.reservoir = reservoir_.topRows(reservoir_fill_);
  return s;
}

// ---------------------------------------------------------------------------------------------
absl::Status LatentModel::FitOptions::Validate() const {
  if (k < 1) return absl::InvalidArgumentError("Violated constraint: k >= 1");
  if (restarts < 1 || iterations < 1) {
    return absl::InvalidArgumentError("Violated constraint: restarts >= 1 and iterations >= 1");
  }
  if (!(min_relative_eigenvalue > 0))
    return absl::InvalidArgumentError("Violated constraint: min_relative_eigenvalue > 0");
  return absl::OkStatus();
}

std::string LatentModel::Summary::BriefReport() const {
  std::string s = absl::StrCat("latent model: ", triples, " triples, reservoir ", reservoir, "; M2 eigenvalues");
  for (int i = 0; i < m2_eigenvalues.size(); ++i) absl::StrAppend(&s, " ", m2_eigenvalues[i]);
  absl::StrAppend(&s, "; tensor eigenvalues");
  for (int i = 0; i < tensor_eigenvalues.size(); ++i) absl::StrAppend(&s, " ", tensor_eigenvalues[i]);
  return s;
}

absl::StatusOr<LatentModel> LatentModel::Fit(const MultiViewAccumulator::Statistics& s, const FitOptions& options) {
  if (absl::Status st = options.Validate(); !st.ok()) return st;
  if (s.features == nullptr) return absl::InvalidArgumentError("latent snapshot has no feature map");
  const FeatureMap& map = *s.features;
  const int D = map.num_features(), d = map.input_dim(), k = options.k;
  if (k > D) return absl::InvalidArgumentError(absl::StrCat("Violated constraint: k = ", k, " <= D = ", D));
  if (s.triples < std::max<int64_t>(options.min_triples, 1) || s.reservoir.rows() < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("latent model has ", s.triples, " triples, needs ", options.min_triples));
  }
  const double n = static_cast<double>(s.triples);
  const MatrixXd m_ab = s.C_ab / n, m_cb = s.C_cb / n, m_ca = s.C_ca / n;

  // k-dimensional bases of the views: U_a, U_b from C_ab, U_c from C_cb (§5 recipe).
  Eigen::BDCSVD<MatrixXd> svd_ab(m_ab, Eigen::ComputeThinU | Eigen::ComputeThinV);
  Eigen::BDCSVD<MatrixXd> svd_cb(m_cb, Eigen::ComputeThinU);
  const MatrixXd Ua = svd_ab.matrixU().leftCols(k), Ub = svd_ab.matrixV().leftCols(k);
  const MatrixXd Uc = svd_cb.matrixU().leftCols(k);
  const MatrixXd S_ab = Ua.transpose() * m_ab * Ub;
  const MatrixXd S_cb = Uc.transpose() * m_cb * Ub;
  const MatrixXd S_ca = Uc.transpose() * m_ca * Ua;
  // Symmetrization: x~_a = S_cb S_ab^-1 y_a and x~_b = S_ca S_ba^-1 y_b have conditional mean
  // E[y_c | h] given h, so the three views share the component means m_h.
  const Eigen::FullPivLU<MatrixXd> lu_ab(S_ab);
  const Eigen::FullPivLU<MatrixXd> lu_ba(MatrixXd(S_ab.transpose()));
  if (!lu_ab.isInvertible() || !lu_ba.isInvertible()) {
    return absl::FailedPreconditionError("view cross moment S_ab is singular: k too large for the data");
  }
  const MatrixXd Ta = (lu_ab.solve(MatrixXd::Identity(k, k)).transpose() * S_cb.transpose()).transpose();
  const MatrixXd Tb = (lu_ba.solve(MatrixXd::Identity(k, k)).transpose() * S_ca.transpose()).transpose();
  MatrixXd M2 = Ta * S_ab * Tb.transpose();
  M2 = 0.5 * (M2 + M2.transpose());
  Eigen::SelfAdjointEigenSolver<MatrixXd> eig(M2);
  // Descending order.
  VectorXd ev = eig.eigenvalues().reverse();
  MatrixXd U = eig.eigenvectors().rowwise().reverse();
  LatentModel model;
  model.summary_.m2_eigenvalues = ev;
  model.summary_.triples = s.triples;
  model.summary_.reservoir = s.reservoir.rows();
  if (!(ev[k - 1] > options.min_relative_eigenvalue * ev[0])) {
    return absl::FailedPreconditionError(absl::StrCat("symmetrized pair moment has eigenvalue ", ev[k - 1],
                                                      " <= ", options.min_relative_eigenvalue, " x ", ev[0],
                                                      ": fewer than k = ", k, " identifiable latent states"));
  }
  const MatrixXd Wh = U * ev.cwiseSqrt().cwiseInverse().asDiagonal();  // whitening W = U S^-1/2
  // Projections of raw features to whitened views: z_a = Pa h(x_a), z_b = Pb h(x_b), z_c = Pc h(x_c).
  const MatrixXd Pa = Wh.transpose() * Ta * Ua.transpose();
  const MatrixXd Pb = Wh.transpose() * Tb * Ub.transpose();
  const MatrixXd Pc = Wh.transpose() * Uc.transpose();

  // Whitened third moment from the reservoir, then symmetrized over the 6 permutations.
  const int64_t r = s.reservoir.rows();
  RowMatrixXd h3(3, D);  // features of [x_a, x_c, x_b] of one triple
  VectorXd za(k), zb(k), zc(k);
  MatrixXd zbar(r, k);
  VectorXd T = VectorXd::Zero(Eigen::Index{k} * k * k);
  for (int64_t t = 0; t < r; ++t) {
    map.Map(Eigen::Map<const RowMatrixXd>(s.reservoir.row(t).data(), 3, d), h3);
    za.noalias() = Pa * h3.row(0).transpose();
    zc.noalias() = Pc * h3.row(1).transpose();
    zb.noalias() = Pb * h3.row(2).transpose();
    zbar.row(t) = 0.5 * (za + zb).transpose();
    for (int i = 0; i < k; ++i)
      for (int j = 0; j < k; ++j) {
        const double ij = za[i] * zb[j];
        for (int l = 0; l < k; ++l) T[Idx(k, i, j, l)] += ij * zc[l];
      }
  }
  T /= static_cast<double>(r);
  VectorXd Ts = VectorXd::Zero(Eigen::Index{k} * k * k);
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < k; ++j)
      for (int l = 0; l < k; ++l)
        Ts[Idx(k, i, j, l)] = (T[Idx(k, i, j, l)] + T[Idx(k, i, l, j)] + T[Idx(k, j, i, l)] + T[Idx(k, j, l, i)] +
                               T[Idx(k, l, i, j)] + T[Idx(k, l, j, i)]) /
                              6.0;

  // Robust tensor power method (Anandkumar et al. 2014, Alg. 1) with deflation: for each
  // component, L random unit starts x N iterations, keep the start with the largest T(v,v,v),
  // refine with N more iterations, deflate T <- T - lambda v^{x3}.
  std::mt19937_64 rng(options.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  VectorXd lambdas(k);
  MatrixXd V(k, k);
  auto value = [&](const VectorXd& v) { return v.dot(ContractTwo(Ts, k, v)); };
  auto iterate = [&](VectorXd& v, int iters) {
    for (int it = 0; it < iters; ++it) {
      VectorXd next = ContractTwo(Ts, k, v);
      const double nn = next.norm();
      if (!(nn > 0)) break;  // deflated to ~0: keep v
      v = next / nn;
    }
  };
  for (int h = 0; h < k; ++h) {
    VectorXd best;
    double best_val = -std::numeric_limits<double>::infinity();
    for (int start = 0; start < options.restarts; ++start) {
      VectorXd v(k);
      for (int i = 0; i < k; ++i) v[i] = normal(rng);
      v.normalize();
      iterate(v, options.iterations);
      const double val = value(v);
      if (val > best_val) {
        best_val = val;
        best = v;
      }
    }
    iterate(best, options.iterations);
    const double lambda = value(best);
    lambdas[h] = lambda;
    V.col(h) = best;
    for (int i = 0; i < k; ++i)
      for (int j = 0; j < k; ++j)
        for (int l = 0; l < k; ++l) Ts[Idx(k, i, j, l)] -= lambda * best[i] * best[j] * best[l];
  }
  model.summary_.tensor_eigenvalues = lambdas;
  for (int h = 0; h < k; ++h) {
    if (!(lambdas[h] > 0)) {
      return absl::FailedPreconditionError(
          absl::StrCat("tensor eigenvalue ", h, " is ", lambdas[h], " <= 0: the data do not support k = ", k));
    }
  }

  // Recovery: pi_h = lambda_h^-2, m_h = lambda_h U S^1/2 v_h, mu_h = U_c m_h.
  std::vector<int> order(k);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int x, int y) { return lambdas[x] < lambdas[y]; });  // weight desc
  model.features_ = s.features;
  model.raw_weights_.resize(k);
  model.mu_.resize(D, k);
  model.res_w_.resize(r, k);
  const MatrixXd back = Uc * U * ev.cwiseSqrt().asDiagonal();
  for (int o = 0; o < k; ++o) {
    const int h = order[o];
    model.raw_weights_[o] = 1.0 / (lambdas[h] * lambdas[h]);
    model.mu_.col(o) = lambdas[h] * back * V.col(h);
    // Reservoir read-out weights: E[f(x_c) <zbar, v_g>] = E[f | g] / lambda_g.
    model.res_w_.col(o) = lambdas[h] * zbar * V.col(h);
  }
  model.weights_ = model.raw_weights_ / model.raw_weights_.sum();
  model.res_x_ = s.reservoir.middleCols(d, d);
  return model;
}

absl::StatusOr<MatrixXd> LatentModel::Density(const Eigen::Ref<const RowMatrixXd>& points) const {
  if (absl::Status s = features_->ValidatePoints(points); !s.ok()) return s;
  const double sigma = features_->sigma();
  const double norm =
      features_->kind() == FeatureKind::kOneHot ? 1.0 : std::pow(2 * kPi * sigma * sigma, 0.5 * features_->input_dim());
  // Features as a column-major n x D matrix: the product with mu then sums in the order it
  // always did, so a model restored from an old snapshot gives the same bits.
  const MatrixXd feats = features_->Map(points);
  return MatrixXd(feats * mu_ / norm);
}

absl::StatusOr<MatrixXd> LatentModel::DensityNormalizedOnGrid(const Eigen::Ref<const RowMatrixXd>& points,
                                                              double cell_volume) const {
  if (!(cell_volume > 0)) return absl::InvalidArgumentError("cell_volume must be > 0");
  absl::StatusOr<MatrixXd> p = Density(points);
  if (!p.ok()) return p;
  for (int h = 0; h < k(); ++h) {
    const double mass = p->col(h).sum() * cell_volume;
    if (mass > 0) p->col(h) /= mass;
  }
  return p;
}

absl::StatusOr<MatrixXd> LatentModel::ReservoirDensity(const Eigen::Ref<const RowMatrixXd>& points,
                                                       double bandwidth) const {
  if (!(bandwidth > 0)) return absl::InvalidArgumentError("bandwidth must be > 0");
  if (absl::Status s = features_->ValidatePoints(points); !s.ok()) return s;
  const int d = features_->input_dim();
  const double c = 1.0 / std::pow(2 * kPi * bandwidth * bandwidth, 0.5 * d);
  const double inv2s2 = 1.0 / (2 * bandwidth * bandwidth);
  MatrixXd out = MatrixXd::Zero(points.rows(), k());
  const Eigen::Index r = res_x_.rows();
  for (Eigen::Index i = 0; i < points.rows(); ++i) {
    for (Eigen::Index t = 0; t < r; ++t) {
      const double d2 = (res_x_.row(t) - points.row(i)).squaredNorm();
      if (d2 * inv2s2 > 40) continue;  // exp(-40) ~ 4e-18: negligible
      out.row(i) += std::exp(-d2 * inv2s2) * res_w_.row(t);
    }
  }
  return MatrixXd(out * (c / static_cast<double>(r)));
}

absl::StatusOr<MatrixXd> LatentModel::BinnedDensity(double lo, double hi, int bins) const {
  if (features_->input_dim() != 1) return absl::InvalidArgumentError("binned read-out needs dim == 1");
  if (!(hi > lo) || bins < 1) return absl::InvalidArgumentError("binned read-out needs hi > lo and bins >= 1");
  const double width = (hi - lo) / bins;
  MatrixXd out = MatrixXd::Zero(bins, k());
  for (Eigen::Index t = 0; t < res_x_.rows(); ++t) {
    const double x = res_x_(t, 0);
    if (x < lo || x >= hi) continue;
    const int b = std::min(bins - 1, static_cast<int>((x - lo) / width));
    out.row(b) += res_w_.row(t);
  }
  return MatrixXd(out / (width * static_cast<double>(res_x_.rows())));
}

absl::StatusOr<MatrixXd> LatentModel::Posterior(const Eigen::Ref<const RowMatrixXd>& points,
                                                double readout_bandwidth) const {
  if (readout_bandwidth < 0) return absl::InvalidArgumentError("readout_bandwidth must be >= 0");
  absl::StatusOr<MatrixXd> p = readout_bandwidth > 0 ? ReservoirDensity(points, readout_bandwidth) : Density(points);
  if (!p.ok()) return p;
  for (Eigen::Index i = 0; i < p->rows(); ++i) {
    VectorXd row = p->row(i).transpose().cwiseMax(0.0).cwiseProduct(weights_);
    const double s = row.sum();
    if (s > 0) {
      p->row(i) = (row / s).transpose();
    } else {
      p->row(i).setConstant(1.0 / k());
    }
  }
  return p;
}

}  // namespace cmestream
