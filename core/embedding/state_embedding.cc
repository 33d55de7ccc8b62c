// State embedding: streaming moments and the refresh (see state_embedding.h;
// docs/algorithms.md §3; paper 000 Algorithms 1-2).
#include "core/embedding/state_embedding.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include <Eigen/Eigenvalues>
#include <Eigen/SVD>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cmestream {
namespace {

// Lazy-forgetting unit bound: renormalize before the stored values can overflow.
constexpr double kRescaleAt = 1e100;

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Eigenpairs of a symmetric PSD matrix kept above rel * largest, in descending order.
void KeepLeadingEigenpairs(const MatrixXd& c, double rel, MatrixXd* q, VectorXd* rho) {
  Eigen::SelfAdjointEigenSolver<MatrixXd> es(c);
  const VectorXd& lam = es.eigenvalues();  // ascending
  const int n = static_cast<int>(lam.size());
  const double top = n > 0 ? lam[n - 1] : 0.0;
  int keep = 0;
  if (top > 0) {
    while (keep < n && lam[n - 1 - keep] >= rel * top) ++keep;
  }
  q->resize(c.rows(), keep);
  rho->resize(keep);
  for (int k = 0; k < keep; ++k) {
    q->col(k) = es.eigenvectors().col(n - 1 - k);
    (*rho)[k] = lam[n - 1 - k];
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// EmbeddingMoments

absl::Status EmbeddingMoments::Options::Validate() const {
  if (batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("Violated constraint: batch_size >= 1 (got ", batch_size, ")"));
  }
  if (!(forgetting > 0 && forgetting <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("Violated constraint: 0 < forgetting <= 1 (got ", forgetting, ")"));
  }
  // One batch multiplies the unit by gamma^-B; keep that far from overflow.
  if (batch_size * std::log(1.0 / forgetting) > 200.0) {
    return absl::InvalidArgumentError(absl::StrCat("Violated constraint: batch_size * log(1/forgetting) <= 200 (got ",
                                                   batch_size, " * log(1/", forgetting, "))"));
  }
  return absl::OkStatus();
}

EmbeddingMoments::EmbeddingMoments(std::shared_ptr<const FeatureMap> features, const Options& options)
    : features_(std::move(features)), options_(options) {
  const absl::Status status =
      features_ == nullptr ? absl::InvalidArgumentError("null feature map") : options_.Validate();
  if (!status.ok()) {
    std::cerr << "EmbeddingMoments: invalid arguments: " << status.message() << "\n";
    std::abort();
  }
  n_features_ = features_->num_features();
  dim_ = features_->input_dim();
  inv_gamma_ = 1.0 / options_.forgetting;
  sx_ = MatrixXd::Zero(n_features_, n_features_);
  sy_ = MatrixXd::Zero(n_features_, n_features_);
  ph_ = MatrixXd::Zero(n_features_, n_features_);
  if (features_->kind() == FeatureMap::Kind::kRff) {
    const int b = options_.batch_size;
    xbuf_.resize(b, dim_);
    ybuf_.resize(b, dim_);
    hx_.resize(b, n_features_);
    hy_.resize(b, n_features_);
    wbuf_.resize(b);
    last_arg_.resize(n_features_);
    last_h_.resize(n_features_);
    last_point_.resize(dim_);
  }
}

void EmbeddingMoments::Observe(const double* x, const double* y) {
  ++samples_;
  if (features_->kind() == FeatureMap::Kind::kOneHot) {
    const int i = static_cast<int>(x[0]);
    const int j = static_cast<int>(y[0]);
    if (inv_gamma_ != 1.0) {
      scale_ *= inv_gamma_;
      if (scale_ > kRescaleAt) Rescale();
    }
    sx_(i, i) += scale_;
    sy_(j, j) += scale_;
    ph_(i, j) += scale_;
    n_stored_ += scale_;
    return;
  }
  for (int a = 0; a < dim_; ++a) {
    xbuf_(buffered_, a) = x[a];
    ybuf_(buffered_, a) = y[a];
  }
  if (++buffered_ == options_.batch_size) Flush();
}

absl::Status EmbeddingMoments::ObserveBatch(const Eigen::Ref<const RowMatrixXd>& x,
                                            const Eigen::Ref<const RowMatrixXd>& y) {
  if (x.rows() != y.rows()) {
    return absl::InvalidArgumentError(absl::StrCat("x has ", x.rows(), " rows but y has ", y.rows()));
  }
  if (absl::Status s = features_->ValidatePoints(x); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("x: ", s.message()));
  }
  if (absl::Status s = features_->ValidatePoints(y); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("y: ", s.message()));
  }
  for (Eigen::Index t = 0; t < x.rows(); ++t) Observe(x.row(t).data(), y.row(t).data());
  return absl::OkStatus();
}

void EmbeddingMoments::Flush() {
  if (buffered_ == 0) return;
  const int b = buffered_;
  if (scale_ > kRescaleAt) Rescale();
  // Sample k of the block (oldest first) is stored with unit scale * gamma^-(k+1), exactly as
  // if the unit had grown one sample at a time. Rows of H carry sqrt(weight) so the products
  // below are weighted sums.
  double unit = scale_;
  double total = 0;
  for (int k = 0; k < b; ++k) {
    unit *= inv_gamma_;
    wbuf_[k] = std::sqrt(unit);
    total += unit;
  }
  scale_ = unit;
  n_stored_ += total;
  auto hx = hx_.topRows(b);
  auto hy = hy_.topRows(b);
  // h = Map(points), computed as Project then Activate per row (the same bits as Map), except
  // that x_k takes the features of the previous y when it is that point (trajectories): same
  // point bits and same projection bits, so the same cosines. last_arg_ holds the projection
  // of the previous y whenever the next x might reuse it.
  features_->Project(xbuf_.topRows(b), hx);
  features_->Project(ybuf_.topRows(b), hy);
  const size_t point_bytes = sizeof(double) * static_cast<size_t>(dim_);
  const size_t row_bytes = sizeof(double) * static_cast<size_t>(n_features_);
  for (int k = 0; k < b; ++k) {
    const double* prev_point = k == 0 ? (has_last_ ? last_point_.data() : nullptr) : ybuf_.row(k - 1).data();
    const double* prev_h = k == 0 ? last_h_.data() : hy.row(k - 1).data();
    double* x = hx.row(k).data();
    if (prev_point != nullptr && std::memcmp(xbuf_.row(k).data(), prev_point, point_bytes) == 0 &&
        std::memcmp(x, last_arg_.data(), row_bytes) == 0) {
      std::memcpy(x, prev_h, row_bytes);
      ++reused_;
    } else {
      features_->Activate(x);
    }
    double* y = hy.row(k).data();
    const bool next_may_reuse =
        k + 1 == b || std::memcmp(xbuf_.row(k + 1).data(), ybuf_.row(k).data(), point_bytes) == 0;
    if (next_may_reuse) std::memcpy(last_arg_.data(), y, row_bytes);
    features_->Activate(y);
  }
  std::memcpy(last_h_.data(), hy.row(b - 1).data(), row_bytes);
  std::memcpy(last_point_.data(), ybuf_.row(b - 1).data(), point_bytes);
  has_last_ = true;
  hx.array().colwise() *= wbuf_.head(b).array();
  hy.array().colwise() *= wbuf_.head(b).array();
  // Symmetric rank-b updates (lower triangle) and one general GEMM: the batched form of
  // S_x += h(x)h(x)^T, S_y += h(y)h(y)^T, P_h += h(x)h(y)^T (docs/algorithms.md (3.2)).
  sx_.selfadjointView<Eigen::Lower>().rankUpdate(hx.transpose());
  sy_.selfadjointView<Eigen::Lower>().rankUpdate(hy.transpose());
  ph_.noalias() += hx.transpose() * hy;
  buffered_ = 0;
}

void EmbeddingMoments::Rescale() {
  const double inv = 1.0 / scale_;
  sx_ *= inv;
  sy_ *= inv;
  ph_ *= inv;
  n_stored_ *= inv;
  scale_ = 1;
}

EmbeddingMomentsSnapshot EmbeddingMoments::Snapshot() const {
  if (buffered_ == 0) return SnapshotOfFlushed();
  EmbeddingMoments copy(*this);
  copy.Flush();
  return copy.SnapshotOfFlushed();
}

EmbeddingMomentsSnapshot EmbeddingMoments::SnapshotOfFlushed() const {
  EmbeddingMomentsSnapshot s;
  s.features = features_;
  const double inv = 1.0 / scale_;
  // S_x, S_y hold their lower triangles (one-hot: diagonal); mirror them.
  s.Sx = MatrixXd(sx_.selfadjointView<Eigen::Lower>()) * inv;
  s.Sy = MatrixXd(sy_.selfadjointView<Eigen::Lower>()) * inv;
  s.Ph = ph_ * inv;
  s.n = n_stored_ * inv;
  s.samples = samples_;
  return s;
}

// ---------------------------------------------------------------------------------------------
// StateEmbedding

absl::Status StateEmbedding::Options::Validate() const {
  if (rank < 1) return absl::InvalidArgumentError(absl::StrCat("Violated constraint: rank >= 1 (got ", rank, ")"));
  if (!(relative_threshold > 0 && relative_threshold < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Violated constraint: 0 < relative_threshold < 1 (got ", relative_threshold, ")"));
  }
  return absl::OkStatus();
}

std::string StateEmbedding::Summary::BriefReport() const {
  return absl::StrFormat(
      "StateEmbedding: %s; N=%d J=%d J~=%d rank=%d suggested_rank=%d n=%.6g eigen=%.3fs svd=%.3fs%s%s",
      termination == Termination::kSuccess ? "SUCCESS" : "RANK_CLIPPED", num_features, kept_x, kept_y, rank,
      suggested_rank, samples_weight, seconds_eigen, seconds_svd, message.empty() ? "" : "; ", message);
}

VectorXd StateEmbedding::SingularValueGaps() const {
  const Eigen::Index m = singular_values_.size();
  if (m < 2) return VectorXd();
  return singular_values_.head(m - 1) - singular_values_.tail(m - 1);
}

RowMatrixXd StateEmbedding::Embed(const Eigen::Ref<const RowMatrixXd>& points) const {
  const RowMatrixXd h = features_->Map(points);
  return h * embed_map_;
}

MatrixXd StateEmbedding::TransitionDensity(const Eigen::Ref<const RowMatrixXd>& x,
                                           const Eigen::Ref<const RowMatrixXd>& y) const {
  const RowMatrixXd psi = Embed(x);                         // n_x x r
  const RowMatrixXd chi = features_->Map(y) * target_map_;  // n_y x r
  return psi * chi.transpose();
}

MatrixXd StateEmbedding::ReshapedMoments() const {
  const VectorXd sx = rho_x_.array().sqrt();
  const VectorXd sy = rho_y_.array().sqrt();
  const MatrixXd left = qx_ * sx.asDiagonal() * u_ * singular_values_.head(rank_).asDiagonal();
  const MatrixXd right = qy_ * sy.asDiagonal() * v_;
  return left * right.transpose();
}

absl::StatusOr<StateEmbedding> ComputeStateEmbedding(const EmbeddingMomentsSnapshot& snapshot,
                                                     const StateEmbedding::Options& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (snapshot.features == nullptr) return absl::FailedPreconditionError("snapshot has no feature map");
  if (!(snapshot.n > 0)) return absl::FailedPreconditionError("no samples observed yet (n = 0)");
  const int nf = snapshot.features->num_features();
  if (snapshot.Sx.rows() != nf || snapshot.Sy.rows() != nf || snapshot.Ph.rows() != nf || snapshot.Ph.cols() != nf) {
    return absl::InvalidArgumentError("snapshot moment sizes do not match the feature map");
  }

  StateEmbedding e;
  e.features_ = snapshot.features;
  e.summary_.num_features = nf;
  e.summary_.samples_weight = snapshot.n;

  // Step 1: orthogonalize in L2(π_hat) (x side) and in the empirical y measure.
  auto t0 = std::chrono::steady_clock::now();
  const double inv_n = 1.0 / snapshot.n;
  KeepLeadingEigenpairs(snapshot.Sx * inv_n, options.relative_threshold, &e.qx_, &e.rho_x_);
  KeepLeadingEigenpairs(snapshot.Sy * inv_n, options.relative_threshold, &e.qy_, &e.rho_y_);
  e.summary_.seconds_eigen = SecondsSince(t0);
  e.summary_.kept_x = static_cast<int>(e.rho_x_.size());
  e.summary_.kept_y = static_cast<int>(e.rho_y_.size());
  if (e.rho_x_.size() == 0 || e.rho_y_.size() == 0) {
    return absl::FailedPreconditionError("feature covariance is zero: no usable directions");
  }

  // Step 2: whitened cross moment R = diag(ρ)^-1/2 Q^T (P_h/n) Q~ diag(ρ~)^-1/2 and its SVD.
  t0 = std::chrono::steady_clock::now();
  const VectorXd isx = e.rho_x_.array().rsqrt();
  const VectorXd isy = e.rho_y_.array().rsqrt();
  const MatrixXd r = isx.asDiagonal() * (e.qx_.transpose() * (snapshot.Ph * inv_n) * e.qy_) * isy.asDiagonal();
  Eigen::BDCSVD<MatrixXd> svd(r, Eigen::ComputeThinU | Eigen::ComputeThinV);
  e.summary_.seconds_svd = SecondsSince(t0);
  e.singular_values_ = svd.singularValues();

  // Step 3: keep the top r triplets (Algorithm 1) and build the embedding maps (Algorithm 2).
  const int available = static_cast<int>(e.singular_values_.size());
  e.rank_ = std::min(options.rank, available);
  e.summary_.rank = e.rank_;
  if (e.rank_ < options.rank) {
    e.summary_.termination = StateEmbedding::Termination::kRankClipped;
    e.summary_.message =
        absl::StrCat("rank clipped from ", options.rank, " to ", e.rank_, " (only that many singular values)");
  }
  const VectorXd gaps = e.SingularValueGaps();
  if (gaps.size() > 1) {
    // σ_1 ≈ 1 belongs to the constant function; a rank-1 embedding is constant, so the
    // suggestion looks at the gaps after σ_2, σ_3, ... only.
    Eigen::Index best = 0;
    gaps.tail(gaps.size() - 1).maxCoeff(&best);
    e.summary_.suggested_rank = static_cast<int>(best) + 2;
  } else if (gaps.size() == 1) {
    e.summary_.suggested_rank = 2;
  } else {
    e.summary_.suggested_rank = available;
  }
  e.u_ = svd.matrixU().leftCols(e.rank_);
  e.v_ = svd.matrixV().leftCols(e.rank_);
  // Sign convention: make the largest-magnitude entry of each left vector positive so that
  // successive refreshes give comparable embeddings (singular vectors have a free sign).
  for (int k = 0; k < e.rank_; ++k) {
    Eigen::Index imax = 0;
    e.u_.col(k).cwiseAbs().maxCoeff(&imax);
    if (e.u_(imax, k) < 0) {
      e.u_.col(k) *= -1;
      e.v_.col(k) *= -1;
    }
  }
  e.embed_map_ = e.qx_ * isx.asDiagonal() * e.u_ * e.singular_values_.head(e.rank_).asDiagonal();
  e.target_map_ = e.qy_ * isy.asDiagonal() * e.v_;
  return e;
}

MatrixXd TruncatedSvd(const Eigen::Ref<const MatrixXd>& m, int rank) {
  Eigen::BDCSVD<MatrixXd> svd(m, Eigen::ComputeThinU | Eigen::ComputeThinV);
  const int r = std::min<int>(rank, static_cast<int>(svd.singularValues().size()));
  return svd.matrixU().leftCols(r) * svd.singularValues().head(r).asDiagonal() * svd.matrixV().leftCols(r).transpose();
}

}  // namespace cmestream
