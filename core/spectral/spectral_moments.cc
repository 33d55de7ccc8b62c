// Streaming spectral moments (see spectral_moments.h; docs/algorithms.md §7).
#include "core/spectral/spectral_moments.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/common/options_check.h"

namespace cmestream {
namespace {

constexpr double kRescaleAt = 1e100;

// Eigen's GEMM packs its operands into buffers taken from the stack below
// EIGEN_STACK_ALLOCATION_LIMIT (128 KB) and from the heap above it. A panel holds up to
// (inner dimension) x (tile) doubles, so tiles of kPanelDoubles / inner columns keep every
// product on the stack: a flush never allocates (tests/core/spectral/test_spectral_allocations.cc).
constexpr int kPanelDoubles = 12288;  // 96 KB

int TileFor(int inner) { return std::max(16, kPanelDoubles / std::max(1, inner)); }

// c += a * b over tiles of c; lower_only: only tiles that meet the lower triangle (the upper
// part of a diagonal tile is written too and ignored by the readers).
template <typename A, typename B>
void AddProductTiled(MatrixXd& c, const A& a, const B& b, bool lower_only) {
  const int p = static_cast<int>(c.rows()), q = static_cast<int>(c.cols());
  const int tile = TileFor(static_cast<int>(a.cols()));
  for (int i0 = 0; i0 < p; i0 += tile) {
    const int rows = std::min(tile, p - i0);
    const int jend = lower_only ? std::min(q, i0 + rows) : q;
    for (int j0 = 0; j0 < jend; j0 += tile) {
      const int cols = std::min(tile, q - j0);
      c.block(i0, j0, rows, cols).noalias() += a.middleRows(i0, rows) * b.middleCols(j0, cols);
    }
  }
}

// Squared norms of the first `rows` rows by a plain loop: Eigen's vectorized rowwise reduction
// takes a different path (and may round differently, with FMA) depending on the address
// alignment of the data, which differs between an accumulator and its restored copy; a restored
// accumulator must compute the same bits (tests/core/io/test_serialization.cc).
void RowSquaredNorms(const RowMatrixXd& m, int rows, double* out) {
  for (int i = 0; i < rows; ++i) {
    double s = 0;
    for (Eigen::Index j = 0; j < m.cols(); ++j) s += m(i, j) * m(i, j);
    out[i] = s;
  }
}

absl::Status Violated(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("Violated constraint: ", what));
}

}  // namespace

absl::Status SpectralMoments::Options::Validate() const {
  if (dim < 1) return Violated(absl::StrCat("dim >= 1 (got ", dim, ")"));
  if (!(sigma > 0) || !std::isfinite(sigma)) return Violated(absl::StrCat("sigma > 0 (got ", sigma, ")"));
  if (max_basis < 1) return Violated(absl::StrCat("max_basis >= 1 (got ", max_basis, ")"));
  if (batch_size < 1) return Violated(absl::StrCat("batch_size >= 1 (got ", batch_size, ")"));
  if (block_length < 1) return Violated(absl::StrCat("block_length >= 1 (got ", block_length, ")"));
  if (!(forgetting > 0 && forgetting <= 1)) {
    return Violated(absl::StrCat("0 < forgetting <= 1 (got ", forgetting, ")"));
  }
  // One flush multiplies the scale by gamma^-B; keep that far from overflow.
  if (batch_size * std::log(1.0 / forgetting) > 200.0) {
    return Violated(
        absl::StrCat("batch_size * log(1/forgetting) <= 200 (got ", batch_size, " * log(1/", forgetting, "))"));
  }
  if (!(new_atom_fraction > 0 && new_atom_fraction < 1)) {
    return Violated(absl::StrCat("0 < new_atom_fraction < 1 (got ", new_atom_fraction, ")"));
  }
  if (min_epoch_samples < 1) return Violated(absl::StrCat("min_epoch_samples >= 1 (got ", min_epoch_samples, ")"));
  if (!(rebase_growth >= 1) || !std::isfinite(rebase_growth)) {
    return Violated(absl::StrCat("rebase_growth >= 1 (got ", rebase_growth, ")"));
  }
  if (min_block_length < 1) return Violated(absl::StrCat("min_block_length >= 1 (got ", min_block_length, ")"));
  return absl::OkStatus();
}

SpectralMoments::SpectralMoments(const Options& options) : options_(options) {
  AbortOnInvalidOptions(options_.Validate(), "SpectralMoments");
  inv_gamma_ = 1.0 / options_.forgetting;
  live_block_ = EpochBlockLength(0);
  basis_.resize(0, options_.dim);
  landmarks_.resize(0, options_.dim);
  drift_sum_ = RowMatrixXd::Zero(kDriftBlocks, options_.dim);
  drift_sq_ = RowMatrixXd::Zero(kDriftBlocks, options_.dim);
  xbuf_.resize(options_.batch_size, options_.dim);
  ybuf_.resize(options_.batch_size, options_.dim);
  wbuf_.resize(options_.batch_size);
  sqx_.resize(options_.batch_size);
  sqy_.resize(options_.batch_size);
}

void SpectralMoments::SetLandmarks(const Eigen::Ref<const RowMatrixXd>& landmarks) {
  if (live_.epoch != 0 || landmarks.cols() != options_.dim) std::abort();  // a programming error
  landmarks_ = landmarks.topRows(std::min<Eigen::Index>(landmarks.rows(), options_.max_basis));
}

bool SpectralMoments::ShouldStartEpoch(int source_atoms) const {
  if (source_atoms <= considered_ || m_ >= options_.max_basis) return false;
  if (m_ == 0) return true;
  // The basis the source would give if every new atom were kept (without landmarks: the
  // source's first max_basis atoms, considered_ == m_).
  const int source = static_cast<int>(std::min<int64_t>(int64_t{m_} + source_atoms - considered_, options_.max_basis));
  if (!(static_cast<double>(source - m_) > options_.new_atom_fraction * source)) return false;
  // Rare re-bases: the stream must have grown by rebase_growth since the live epoch began.
  const int64_t before = samples_ - live_.samples;
  return static_cast<double>(samples_) >= options_.rebase_growth * static_cast<double>(before);
}

bool SpectralMoments::NearLandmark(const double* atom) const {
  for (Eigen::Index l = 0; l < landmarks_.rows(); ++l) {
    double s = 0;
    for (int a = 0; a < options_.dim; ++a) {
      const double t = atom[a] - landmarks_(l, a);
      s += t * t;
    }
    if (s < kNearLandmark * options_.sigma * options_.sigma) return true;
  }
  return false;
}

void SpectralMoments::ComputeBasisSquaredNorms() {
  basis_sq_.resize(m_);
  RowSquaredNorms(basis_, m_, basis_sq_.data());
}

int64_t SpectralMoments::EpochBlockLength(int64_t before) const {
  const int64_t lo = std::min(options_.min_block_length, options_.block_length);
  return std::clamp<int64_t>(before / 4, lo, options_.block_length);
}

bool SpectralMoments::Ready(const Epoch& e) const {
  return e.epoch > 0 && e.samples >= options_.min_epoch_samples && e.fold_samples[0] > 0 && e.fold_samples[1] > 0;
}

int SpectralMoments::Fold(const Epoch& e) const { return static_cast<int>((e.samples / live_block_) % 2); }

double SpectralMoments::FrozenDecay() const {
  // Underflows to 0 after ~700/(1 - gamma) samples: the frozen pairs are then forgotten.
  return options_.forgetting == 1.0 ? 1.0 : std::pow(options_.forgetting, static_cast<double>(live_.samples));
}

void SpectralMoments::StartEpoch(const Eigen::Ref<const RowMatrixXd>& source_atoms) {
  Flush();
  // The basis is [landmarks; the source atoms not within a hair of a landmark] (landmarks.h):
  // still append-only, as whether an atom is kept depends on that atom and the fixed landmarks.
  RowMatrixXd with_landmarks;
  if (landmarks_.rows() > 0) {
    with_landmarks.resize(landmarks_.rows() + source_atoms.rows(), options_.dim);
    with_landmarks.topRows(landmarks_.rows()) = landmarks_;
    Eigen::Index rows = landmarks_.rows();
    for (Eigen::Index i = 0; i < source_atoms.rows(); ++i) {
      if (!NearLandmark(source_atoms.row(i).data())) with_landmarks.row(rows++) = source_atoms.row(i);
    }
    with_landmarks.conservativeResize(rows, Eigen::NoChange);
  }
  considered_ = static_cast<int>(source_atoms.rows());
  const Eigen::Ref<const RowMatrixXd> atoms =
      landmarks_.rows() > 0 ? Eigen::Ref<const RowMatrixXd>(with_landmarks) : source_atoms;
  const int next_m = static_cast<int>(std::min<Eigen::Index>(atoms.rows(), options_.max_basis));
  // Nested: the new basis extends the current one (the CME's dictionary only appends atoms).
  const bool nested = next_m >= m_ && atoms.topRows(m_) == basis_;
  if (!nested) {
    previous_.reset();
  } else if (live_.epoch > 0) {
    const double decay = FrozenDecay();
    const double frozen_weight =
        previous_ ? decay * (previous_->sums.n[0] + previous_->sums.n[1]) / previous_->sums.scale : 0;
    const double live_weight = (live_.n[0] + live_.n[1]) / live_.scale;
    if (!previous_ || live_weight >= frozen_weight) {
      // The live epoch (the bigger basis) carries at least half of the weight: freeze it.
      previous_ = Frozen{basis_, std::move(live_)};
    } else {
      // The frozen sums carry more: add the live epoch's prefix blocks to them (true sums, so
      // the merged sums have scale 1) and keep the smaller basis with all the pairs.
      Epoch& f = previous_->sums;
      const int q = static_cast<int>(previous_->basis.rows()) + 1;
      const double fs = decay / f.scale, ls = 1.0 / live_.scale;
      for (int k = 0; k < 2; ++k) {
        f.c00[k] = f.c00[k] * fs + live_.c00[k].topLeftCorner(q, q) * ls;
        f.c01[k] = f.c01[k] * fs + live_.c01[k].topLeftCorner(q, q) * ls;
        f.c11[k] = f.c11[k] * fs + live_.c11[k].topLeftCorner(q, q) * ls;
        f.n[k] = f.n[k] * fs + live_.n[k] * ls;
        f.fold_samples[k] += live_.fold_samples[k];
      }
      f.samples += live_.samples;
      f.scale = 1;
    }
  }
  const int64_t next = std::max(live_.epoch, previous_ ? previous_->sums.epoch : 0) + 1;
  m_ = next_m;
  basis_ = atoms.topRows(m_);
  ComputeBasisSquaredNorms();
  live_ = Epoch{};
  live_.epoch = next;
  live_block_ = EpochBlockLength(samples_);
  const int p = m_ + 1;
  for (int f = 0; f < 2; ++f) {
    live_.c00[f] = MatrixXd::Zero(p, p);
    live_.c01[f] = MatrixXd::Zero(p, p);
    live_.c11[f] = MatrixXd::Zero(p, p);
  }
  px_.resize(options_.batch_size, p);
  py_.resize(options_.batch_size, p);
}

void SpectralMoments::Observe(const double* x, const double* y) {
  ++samples_;
  ObserveDrift(x);
  if (live_.epoch == 0) return;  // no basis yet: nothing to accumulate against
  for (int a = 0; a < options_.dim; ++a) {
    xbuf_(buffered_, a) = x[a];
    ybuf_(buffered_, a) = y[a];
  }
  ++buffered_;
  ++live_.samples;
  // Flush when the buffer is full and at every block end, so one flush never mixes folds.
  if (buffered_ == options_.batch_size || live_.samples % live_block_ == 0) Flush();
}

void SpectralMoments::ObserveDrift(const double* x) {
  int b = drift_blocks_ - 1;
  if (drift_count_[b] == drift_block_length_) {
    if (drift_blocks_ == kDriftBlocks) {
      // All blocks full: merge neighbours (half as many blocks of twice the length).
      for (int i = 0; i < kDriftBlocks / 2; ++i) {
        drift_sum_.row(i) = drift_sum_.row(2 * i) + drift_sum_.row(2 * i + 1);
        drift_sq_.row(i) = drift_sq_.row(2 * i) + drift_sq_.row(2 * i + 1);
        drift_count_[i] = drift_count_[2 * i] + drift_count_[2 * i + 1];
      }
      drift_sum_.bottomRows(kDriftBlocks / 2).setZero();
      drift_sq_.bottomRows(kDriftBlocks / 2).setZero();
      for (int i = kDriftBlocks / 2; i < kDriftBlocks; ++i) drift_count_[i] = 0;
      drift_blocks_ = kDriftBlocks / 2;
      drift_block_length_ *= 2;
    }
    b = drift_blocks_++;
  }
  for (int a = 0; a < options_.dim; ++a) {
    drift_sum_(b, a) += x[a];
    drift_sq_(b, a) += x[a] * x[a];
  }
  ++drift_count_[b];
}

absl::Status SpectralMoments::ObserveBatch(const Eigen::Ref<const RowMatrixXd>& x,
                                           const Eigen::Ref<const RowMatrixXd>& y) {
  if (x.rows() != y.rows())
    return absl::InvalidArgumentError(absl::StrCat("x has ", x.rows(), " rows but y has ", y.rows()));
  if (x.cols() != options_.dim || y.cols() != options_.dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("points have ", x.cols(), " and ", y.cols(), " components, expected dim ", options_.dim));
  }
  if (!x.allFinite() || !y.allFinite()) return absl::InvalidArgumentError("points must be finite");
  for (Eigen::Index t = 0; t < x.rows(); ++t) Observe(x.row(t).data(), y.row(t).data());
  return absl::OkStatus();
}

void SpectralMoments::Rescale(Epoch& e) const {
  const double inv = 1.0 / e.scale;
  for (int f = 0; f < 2; ++f) {
    e.c00[f] *= inv;
    e.c01[f] *= inv;
    e.c11[f] *= inv;
    e.n[f] *= inv;
  }
  e.scale = 1;
}

void SpectralMoments::Flush() {
  if (buffered_ == 0) return;
  FlushInto(live_, px_, py_, wbuf_, sqx_, sqy_);
  buffered_ = 0;
}

void SpectralMoments::FlushInto(Epoch& e, RowMatrixXd& px_buf, RowMatrixXd& py_buf, VectorXd& wbuf, VectorXd& sqx,
                                VectorXd& sqy) const {
  const int b = buffered_;
  // The buffered samples are the last b of the epoch and lie in one block (see Observe).
  const int fold = static_cast<int>(((e.samples - 1) / live_block_) % 2);
  if (e.scale > kRescaleAt) Rescale(e);
  // Sample k of the block (oldest first) gets weight u * gamma^-(k+1), exactly as if the unit
  // had grown one sample at a time; rows carry sqrt(weight) so the products are weighted sums.
  double unit = e.scale;
  double total = 0;
  for (int k = 0; k < b; ++k) {
    unit *= inv_gamma_;
    wbuf[k] = std::sqrt(unit);
    total += unit;
  }
  e.scale = unit;
  e.n[fold] += total;
  e.fold_samples[fold] += b;
  auto px = px_buf.topRows(b);
  auto py = py_buf.topRows(b);
  // Kernel block: ||x - z||^2 = ||x||^2 + ||z||^2 - 2 x.z, the cross term one GEMM per side.
  const auto xb = xbuf_.topRows(b);
  const auto yb = ybuf_.topRows(b);
  RowSquaredNorms(xbuf_, b, sqx.data());
  RowSquaredNorms(ybuf_, b, sqy.data());
  const int tile = TileFor(options_.dim);
  for (int j0 = 0; j0 < m_; j0 += tile) {
    const int cols = std::min(tile, m_ - j0);
    px.middleCols(1 + j0, cols).noalias() = xb * basis_.middleRows(j0, cols).transpose();
    py.middleCols(1 + j0, cols).noalias() = yb * basis_.middleRows(j0, cols).transpose();
  }
  const double scale = -1.0 / (2 * options_.sigma * options_.sigma);
  for (int k = 0; k < b; ++k) {
    const double w = wbuf[k];
    px(k, 0) = w;
    py(k, 0) = w;
    // Rows are contiguous (row-major): distances in place, then one vectorized exp per row.
    // Cancellation can make tiny distances slightly negative: clamp at 0 so k <= 1.
    auto rx = px.row(k).segment(1, m_).array();
    auto ry = py.row(k).segment(1, m_).array();
    const auto sq = basis_sq_.head(m_).transpose().array();
    rx = (sqx[k] + sq - 2 * rx).max(0.0);
    ry = (sqy[k] + sq - 2 * ry).max(0.0);
    rx = w * (rx * scale).exp();
    ry = w * (ry * scale).exp();
  }
  // C00 += Px^T Px, C11 += Py^T Py (lower triangles), C01 += Px^T Py: GEMM over tiles.
  AddProductTiled(e.c00[fold], px.transpose(), px, /*lower_only=*/true);
  AddProductTiled(e.c11[fold], py.transpose(), py, /*lower_only=*/true);
  AddProductTiled(e.c01[fold], px.transpose(), py, /*lower_only=*/false);
}

SpectralEpochMoments SpectralMoments::Normalized(const Epoch& e) {
  SpectralEpochMoments s;
  s.epoch = e.epoch;
  s.samples = e.samples;
  const double inv = 1.0 / e.scale;
  for (int f = 0; f < 2; ++f) {
    s.fold_samples[f] = e.fold_samples[f];
    s.n[f] = e.n[f] * inv;
    if (e.c00[f].size() == 0) continue;
    s.c00[f] = MatrixXd(e.c00[f].selfadjointView<Eigen::Lower>()) * inv;
    s.c11[f] = MatrixXd(e.c11[f].selfadjointView<Eigen::Lower>()) * inv;
    s.c01[f] = e.c01[f] * inv;
  }
  return s;
}

SpectralMomentsSnapshot SpectralMoments::Snapshot() const {
  SpectralMomentsSnapshot s;
  s.dim = options_.dim;
  s.sigma = options_.sigma;
  s.samples = samples_;
  int used = 0;
  while (used < drift_blocks_ && drift_count_[used] > 0) ++used;
  s.drift_counts.assign(drift_count_.begin(), drift_count_.begin() + used);
  s.drift_means.resize(used, options_.dim);
  s.drift_square_means.resize(used, options_.dim);
  for (int b = 0; b < used; ++b) {
    const double inv = 1.0 / static_cast<double>(drift_count_[b]);
    s.drift_means.row(b) = drift_sum_.row(b) * inv;
    s.drift_square_means.row(b) = drift_sq_.row(b) * inv;
  }
  s.live_epoch = live_.epoch;
  s.live_epoch_samples = live_.samples;
  // Fold the buffered pairs into a copy of the live epoch (the learner itself is unchanged).
  Epoch live = live_;
  if (buffered_ > 0) {
    RowMatrixXd px = px_, py = py_;
    VectorXd w = wbuf_, sqx = sqx_, sqy = sqy_;
    FlushInto(live, px, py, w, sqx, sqy);
  }
  s.basis = basis_;
  s.moments = Normalized(live);
  s.ready = Ready(live);
  s.min_epoch_samples = options_.min_epoch_samples;
  if (previous_) {
    s.prefix_size = static_cast<int>(previous_->basis.rows());
    s.frozen = Normalized(previous_->sums);
    const double decay = FrozenDecay();
    if (decay != 1.0) {
      for (int f = 0; f < 2; ++f) {
        s.frozen.n[f] *= decay;
        s.frozen.c00[f] *= decay;
        s.frozen.c01[f] *= decay;
        s.frozen.c11[f] *= decay;
      }
    }
  }
  return s;
}

}  // namespace cmestream
