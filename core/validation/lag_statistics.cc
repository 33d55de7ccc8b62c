#include "core/validation/lag_statistics.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/io/binary_io.h"
#include "core/io/field_io.h"
#include "core/kernels/gaussian.h"

namespace cmestream {
namespace {

constexpr io::ObjectFormat kFormat = {io::Fourcc("LAGS"), 1, "LagStatistics"};

}  // namespace

absl::Status LagStatistics::Options::Validate() const {
  LaggedMoments::Options lo;
  lo.lags = lags;
  lo.max_blocks = max_blocks;
  lo.initial_block_length = initial_block_length;
  if (absl::Status s = lo.Validate(); !s.ok()) return s;
  if (dim < 0) return absl::InvalidArgumentError("Violated constraint: dim >= 0");
  if (dim == 0 && num_states < 1) return absl::InvalidArgumentError("Violated constraint: num_states >= 1 (discrete)");
  if (dim > 0 && (!(sigma > 0) || !std::isfinite(sigma)))
    return absl::InvalidArgumentError("Violated constraint: sigma > 0");
  if (max_basis < 2) return absl::InvalidArgumentError("Violated constraint: max_basis >= 2");
  return absl::OkStatus();
}

LagStatistics::LagStatistics(const Options& options) : options_(options) {
  if (!options_.Validate().ok()) std::abort();
  if (discrete()) {
    LaggedMoments::Options o;
    o.lags = options_.lags;
    o.dim = options_.num_states;
    o.one_hot = true;
    o.max_blocks = options_.max_blocks;
    o.initial_block_length = options_.initial_block_length;
    counts_.emplace(o);
  }
}

void LagStatistics::Rebase(const Eigen::Ref<const RowMatrixXd>& atoms, int64_t source_epoch) {
  epoch_ = source_epoch;
  const int m = static_cast<int>(atoms.rows());
  koopman_.reset();
  counts_.reset();
  basis_atoms_.clear();
  if (m == 0) {
    basis_.resize(0, options_.dim);
    return;
  }
  // Farthest-point sampling from atom 0: each next atom maximizes its distance to the chosen.
  const int k = std::min(m, options_.max_basis);
  VectorXd dist = VectorXd::Constant(m, std::numeric_limits<double>::infinity());
  int next = 0;
  for (int c = 0; c < k; ++c) {
    basis_atoms_.push_back(next);
    for (int i = 0; i < m; ++i) dist[i] = std::min(dist[i], (atoms.row(i) - atoms.row(next)).squaredNorm());
    dist.maxCoeff(&next);
  }
  basis_.resize(k, options_.dim);
  for (int c = 0; c < k; ++c) basis_.row(c) = atoms.row(basis_atoms_[c]);
  // Bandwidth: at least the mean nearest-neighbour distance of the basis, so bumps overlap.
  double nn_sum = 0;
  for (int c = 0; c < k && k > 1; ++c) {
    double best = std::numeric_limits<double>::infinity();
    for (int e = 0; e < k; ++e)
      if (e != c) best = std::min(best, (basis_.row(c) - basis_.row(e)).squaredNorm());
    nn_sum += std::sqrt(best);
  }
  sigma_b_ = std::max(options_.sigma, k > 1 ? nn_sum / k : 0.0);
  LaggedMoments::Options o;
  o.lags = options_.lags;
  o.max_blocks = options_.max_blocks;
  o.initial_block_length = options_.initial_block_length;
  o.dim = k + 1;
  koopman_.emplace(o);
  o.dim = k;
  o.one_hot = true;
  counts_.emplace(o);
  psi_.setZero(k + 1);
  psi2_.setZero(k + 1);
}

void LagStatistics::StartEpisode() {
  if (koopman_) koopman_->StartEpisode();
  if (counts_) counts_->StartEpisode();
}

int LagStatistics::Featurize(const double* x) {
  const int k = static_cast<int>(basis_.rows()), d = options_.dim;
  psi_[0] = 1;
  int best = 0;
  for (int j = 0; j < k; ++j) {
    psi_[j + 1] = GaussianKernel(x, basis_.row(j).data(), d, sigma_b_);
    if (psi_[j + 1] > psi_[best + 1]) best = j;
  }
  return best;
}

void LagStatistics::ObserveState(const double* x) {
  if (!counts_) return;
  if (discrete()) {
    counts_->ObserveState(static_cast<int>(x[0]));
    return;
  }
  const int s = Featurize(x);
  koopman_->Observe(psi_.data());
  counts_->ObserveState(s);
}

void LagStatistics::ObservePair(const double* x, const double* y) {
  if (!counts_) return;
  if (discrete()) {
    counts_->ObservePairState(static_cast<int>(x[0]), static_cast<int>(y[0]));
    return;
  }
  const int sx = Featurize(x);
  psi2_ = psi_;
  const int sy = Featurize(y);
  koopman_->ObservePair(psi2_.data(), psi_.data());
  counts_->ObservePairState(sx, sy);
}

LagStatisticsSnapshot LagStatistics::Snapshot() const {
  LagStatisticsSnapshot s;
  s.discrete = discrete();
  s.epoch = epoch_;
  s.basis = basis_;
  s.basis_atoms = basis_atoms_;
  s.sigma = sigma_b_;
  if (koopman_) s.koopman = koopman_->Snapshot();
  if (counts_) s.counts = counts_->Snapshot();
  return s;
}

MatrixXd LagStatisticsSnapshot::Features(const Eigen::Ref<const RowMatrixXd>& points) const {
  MatrixXd f(points.rows(), basis.rows() + 1);
  f.col(0).setOnes();
  if (basis.rows() > 0) f.rightCols(basis.rows()) = GaussianGram(points, basis, sigma);
  return f;
}

namespace {

// After the lags (a count and the lags).
constexpr auto kLagStatisticsOptionFields = [](auto& f, auto& o) {
  f.Scalars("lag statistics", io::Field("dim", o.dim), io::Field("num_states", o.num_states),
            io::Field("sigma", o.sigma), io::Field("max_basis", o.max_basis), io::Field("max_blocks", o.max_blocks),
            io::Field("initial_block_length", o.initial_block_length));
};

}  // namespace

void LagStatistics::Serialize(io::Writer& w) const {
  io::FieldWriter f(w, kFormat, kFormat.version);
  w.Ints(options_.lags);
  kLagStatisticsOptionFields(f, options_);
  w.I64(epoch_);
  w.Bool(counts_.has_value());
  if (counts_ && !discrete()) {
    w.U64(static_cast<uint64_t>(basis_.rows()));
    w.Matrix(basis_);
    w.Ints(basis_atoms_);
    w.F64(sigma_b_);
    koopman_->Serialize(w);
  }
  if (counts_) counts_->Serialize(w);
}

absl::StatusOr<LagStatistics> LagStatistics::Deserialize(io::Reader& r) {
  uint32_t version = 0;
  if (!r.BeginObject(kFormat.tag, kFormat.version, kFormat.name, &version)) return r.status();
  Options o;
  o.lags = r.Ints("lag statistics lags", "lag statistics lag", 1, LaggedMoments::kMaxLags);
  if (!r.ok()) return r.status();
  io::FieldReader f(r);
  kLagStatisticsOptionFields(f, o);
  if (!r.ok()) return r.status();
  if (absl::Status s = o.Validate(); !s.ok()) return r.Fail(absl::StrCat("LagStatistics options: ", s.message()));
  if (o.max_basis > (1 << 12) || o.dim > (1 << 16)) return r.Fail("LagStatistics options out of range");
  LagStatistics acc(o);
  acc.epoch_ = r.I64("lag statistics epoch");
  const bool has = r.Bool("lag statistics has basis");
  if (!r.ok()) return r.status();
  if (has && !acc.discrete()) {
    const int k = static_cast<int>(r.Count("lag basis rows", 1, o.max_basis));
    if (!r.ok()) return r.status();
    acc.basis_.resize(k, o.dim);
    r.MatrixInto("lag basis", acc.basis_);
    acc.basis_atoms_ = r.Ints("lag basis atoms", "lag basis atom", k, k);
    if (!r.ok()) return r.status();
    acc.sigma_b_ = r.F64("lag basis sigma");
    if (!r.ok()) return r.status();
    if (!(acc.sigma_b_ > 0)) return r.Fail("lag basis sigma is not positive");
    absl::StatusOr<LaggedMoments> kp = LaggedMoments::Deserialize(r);
    if (!kp.ok()) return kp.status();
    if (kp->options().dim != k + 1 || kp->options().one_hot) return r.Fail("lag Koopman sums do not match the basis");
    acc.koopman_.emplace(*std::move(kp));
    acc.psi_.setZero(k + 1);
    acc.psi2_.setZero(k + 1);
  }
  if (has) {
    absl::StatusOr<LaggedMoments> c = LaggedMoments::Deserialize(r);
    if (!c.ok()) return c.status();
    const int want = acc.discrete() ? o.num_states : static_cast<int>(acc.basis_.rows());
    if (c->options().dim != want || !c->options().one_hot || c->options().lags != o.lags) {
      return r.Fail("lag count sums do not match the basis or the lags");
    }
    acc.counts_.emplace(*std::move(c));
  }
  if (!r.EndObject(kFormat.name)) return r.status();
  return acc;
}

}  // namespace cmestream
