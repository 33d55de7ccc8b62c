// CompressedCme::ObserveBatch: exact micro-batching of the CME recursion (docs/algorithms.md §9).
//
// A run is a stretch of consecutive pairs in which the dictionary (hence the factors R_X, R_Y)
// does not change. The recursion works on W~ (see compressed_cme.h, NUMERICS): with
// s_t = R_X k_x,t and t_t = R_Y k_y,t, a pair compresses as W~ <- (1 - eta_t lambda) W~ - eta_t r_t s_t^T,
// r_t = W~_{t-1} s_t - t_t. Inside a run W~ is kept lazily as W~_t = S_t (W~_0 - sum_{j<=t} v_j s_j^T),
// with S_t = prod_{i<=t} (1 - eta_i lambda) and v_j = eta_j r_j / S_j, so that
//   W~_{t-1} s_t = S_{t-1} (W~_0 s_t - sum_{j<t} v_j (s_j^T s_t)),
// where s_j^T s_t = Q(j,t) for Q = S^T S (matrix products over the run). What is left per pair
// is O(m t) corrections (applied per sub-block as matrix products, per pair only inside a
// sub-block) and O(m) dot products. At the end of the run: W~ <- S (W~_0 - V S^T), one GEMM; the
// Polyak-Ruppert mean gets sum_t W~_t = R_1 W~_0 - V diag(R) S^T with R_j = sum_{t>=j} S_t, one
// more GEMM. Per pair that is 3 m^2 multiply-adds (two triangular products, W~_0 S, the flush).
// A pair that admits ends the run: the run before it is flushed, and the pair is redone by
// Observe() (see the comment there: the factors must see the sequential arithmetic).
// A scheduled drift check also ends a run (runs are cut so that the check falls on a run's last
// pair), as does S falling below kMinScale (keeps v_j = u_j / S_j far from overflow).
// With a side lane (docs/algorithms.md §9.3) the y side and, at m_y >= kSplitMinRows, the top
// rows of W~_0 S and of the flush run on the lane while this thread does the rest.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "core/cme/compressed_cme.h"
#include "core/common/side_lane.h"

namespace cmestream {
namespace {

// Run lengths: start short after an admission (a run that ends early wastes the products of
// its remaining columns), double after each run that completes, up to kMaxRun. A call starts
// at kMaxRun unless the last pair before it admitted: restarting every call at kMinRun made
// the average run of a 256-pair call 43 pairs, and each run re-reads the m x m matrices
// (packing took 24% of the time at m = 1000).
constexpr int kMinRun = 8;
constexpr int kMaxRun = 128;
// Corrections from earlier sub-blocks are applied as one matrix product per sub-block.
constexpr int kSubBlock = 16;
constexpr double kMinScale = 1e-50;

int RoundUp8(int n) { return (n + 7) / 8 * 8; }

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "CompressedCme::ObserveBatch: %s\n", what);
  std::abort();
}

}  // namespace

void CompressedCme::EnsureBatchScratch(int run) {
  const int ld = RoundUp8(cap_);
  if (bkx_.rows() == ld && bkx_.cols() >= run) return;
  const int cols = std::max<int>(run, static_cast<int>(bkx_.rows() == ld ? bkx_.cols() : 0));
  for (MatrixXd* b : {&bkx_, &bky_, &bkyx_, &bs_, &bt_, &bz_, &bv_}) b->setZero(ld, cols);
  bq_.setZero(cols, cols);
  if (options_.averaging) bvr_.setZero(ld, cols);
  bscale_.setZero(cols);
  bsum_.setZero(cols);
}

void CompressedCme::ObserveBatch(const Eigen::Ref<const RowMatrixXd>& x, const Eigen::Ref<const RowMatrixXd>& y,
                                 absl::Span<int> nearest_x, absl::Span<int> nearest_y, absl::Span<int> dict_x) {
  const int64_t n = x.rows();
  if (y.rows() != n || x.cols() != options_.dim || y.cols() != options_.dim) Die("x and y must both be n x dim");
  if ((!nearest_x.empty() && static_cast<int64_t>(nearest_x.size()) != n) ||
      (!nearest_y.empty() && static_cast<int64_t>(nearest_y.size()) != n) ||
      (!dict_x.empty() && static_cast<int64_t>(dict_x.size()) != n)) {
    Die("nearest_x / nearest_y / dict_x must be empty or have one entry per pair");
  }
  // The first run of a call is long unless the learner's last pair admitted (last_step() is
  // state, so the run lengths stay a function of the stream and the call boundaries).
  const bool after_admission = last_step_ == Step::kAdmittedX || last_step_ == Step::kAdmittedY ||
                               last_step_ == Step::kAdmittedBoth || last_step_ == Step::kNone;
  int run = after_admission ? kMinRun : kMaxRun;
  int64_t t = 0;
  while (t < n) {
    EnsureCapacity();
    if (mx_ == 0 || my_ == 0) {
      // Empty dictionary: the pair admits; nothing to batch.
      Observe(x.row(t).data(), y.row(t).data());
      if (!nearest_x.empty()) nearest_x[t] = last_nearest_x_;
      if (!nearest_y.empty()) nearest_y[t] = last_nearest_y_in_x_;
      if (!dict_x.empty()) dict_x[t] = mx_;
      ++t;
      continue;
    }
    const int len = static_cast<int>(std::min<int64_t>({run, n - t, PairsUntilDriftCheck()}));
    // Scratch for the longest run this batch can have, so runs growing inside a batch do not
    // reallocate (allocation happens on the first batch and after a capacity growth only).
    EnsureBatchScratch(static_cast<int>(std::min<int64_t>(kMaxRun, n)));
    bool ended_early = false;
    t += ObserveRun(x, y, t, len, nearest_x, nearest_y, dict_x, &ended_early);
    run = ended_early ? kMinRun : std::min(2 * run, kMaxRun);
  }
}

int CompressedCme::ObserveRun(const Eigen::Ref<const RowMatrixXd>& x, const Eigen::Ref<const RowMatrixXd>& y,
                              int64_t t0, int len, absl::Span<int> nearest_x, absl::Span<int> nearest_y,
                              absl::Span<int> dict_x, bool* ended_early) {
  const int mx = mx_, my = my_;
  // The dictionary is fixed for the run, so on a trajectory k_X(x_t) is the column k_X(y_{t-1})
  // computed for the pair before (all columns are ld-aligned: the same bits as recomputing).
  // The y side (bky_, bt_) on the lane when there is one, then the top rows of Z (rows of
  // bz_ from rows of wf_ and bs_, once bs_ is written); the x side (bkx_, bkyx_, bs_, bq_, the
  // other rows of bz_) here. Neither writes what the other reads.
  const int64_t y_side = side_.lane != nullptr
                             ? side_.lane->Push(side_.executor, &RunYSideJob, this,
                                                const_cast<Eigen::Ref<const RowMatrixXd>*>(&y), t0, len)
                             : 0;
  if (side_.lane == nullptr) RunYSide(y, t0, len);
  for (int t = 0; t < len; ++t) {
    const double* xt = x.row(t0 + t).data();
    if (t == 0) {
      KernelColumnX(mx, xt, kyx_valid_ ? kyx_point_.data() : nullptr, kyx_.data(), &bkx_(0, t));
    } else {
      KernelColumnX(mx, xt, y.row(t0 + t - 1).data(), &bkyx_(0, t - 1), &bkx_(0, t));
    }
    KernelColumn(x_atoms_, mx, y.row(t0 + t).data(), &bkyx_(0, t));
  }
  const auto kx = bkx_.topLeftCorner(mx, len);
  auto sx = bs_.topLeftCorner(mx, len);
  auto ty = bt_.topLeftCorner(my, len);
  auto z = bz_.topLeftCorner(my, len);
  auto vv = bv_.topLeftCorner(my, len);
  auto q = bq_.topLeftCorner(len, len);
  sx.noalias() = rx_.topLeftCorner(mx, mx).triangularView<Eigen::Lower>() * kx;  // s_t = R_X k_x,t
  // Z = W~_0 S (z_t = W~_0 s_t): the top rows on the lane when it has a split.
  const int split = side_.lane != nullptr ? SplitRow(my) : 0;
  int64_t lane_done = y_side;
  if (split > 0) lane_done = side_.lane->Push(side_.executor, &ZRowsJob, this, &len, 0, split);
  ZRows(split, my, len);
  q.triangularView<Eigen::StrictlyUpper>() = sx.transpose() * sx;  // Q(j,t) = s_j^T s_t, j < t
  if (side_.lane != nullptr) side_.lane->WaitFor(lane_done);

  const int64_t n0 = counters_.samples;
  double scale = 1.0;  // S_{t-1}: W~_{t-1} = scale (W~_0 - sum_{j<t} v_j s_j^T)
  for (int t = 0; t < len; ++t) {
    // Corrections of the earlier pairs of this run: whole sub-blocks at once, then the pairs
    // before t inside t's sub-block.
    const int j0 = t - t % kSubBlock;
    if (t == j0 && t > 0) {
      const int w = std::min(kSubBlock, len - t);
      z.middleCols(t, w).noalias() -= vv.leftCols(t) * q.block(0, t, t, w);
    }
    if (t > j0) z.col(t).noalias() -= vv.middleCols(j0, t - j0) * q.col(t).segment(j0, t - j0);

    const double eta = StepSizeAt(n0 + t);
    const double decay = 1.0 - eta * options_.lambda;
    r_.head(my) = scale * z.col(t) - ty.col(t);  // r_t = W~_{t-1} s_t - t_t
    const PairStats st =
        MakeStats(sx.col(t).squaredNorm(), 1.0 - ty.col(t).squaredNorm(), r_.head(my).squaredNorm(), eta);
    const Decision dec = Decide(st, eta);
    const double* xt = x.row(t0 + t).data();
    const double* yt = y.row(t0 + t).data();
    if (dec.choice != kCompress) {
      // Admission: materialize W~_{t-1}, then redo this pair with Observe(). The factors grow
      // from s and delta with 1/sqrt(delta) amplification (delta can be ~1e-6), so feeding them
      // the run's reassociated s would let rounding differences grow in a few admissions;
      // Observe() computes them exactly as the sequential recursion does, which keeps the
      // factors identical and W~ equal to reassociation error. O(m^2) per admission, the
      // sequential price.
      FlushRun(t, scale, n0);
      Observe(xt, yt);
      if (!nearest_x.empty()) nearest_x[t0 + t] = last_nearest_x_;
      if (!nearest_y.empty()) nearest_y[t0 + t] = last_nearest_y_in_x_;
      if (!dict_x.empty()) dict_x[t0 + t] = mx_;
      *ended_early = true;
      return t + 1;
    }
    // Compression (possibly forced at the cap): defer W~ <- decay W~ - eta r s^T.
    RecordStats(st);
    scale *= decay;
    vv.col(t) = (eta / scale) * r_.head(my);
    bscale_[t] = scale;
    if (dec.forced) {
      ++counters_.forced;
      counters_.forced_error_sum += std::sqrt(dec.residual2);
      last_step_ = Step::kForced;
    } else {
      ++counters_.compressed;
      last_step_ = Step::kCompressed;
    }
    ++counters_.samples;
    Eigen::Index i;
    kx.col(t).maxCoeff(&i);
    last_nearest_x_ = static_cast<int>(i);
    bkyx_.col(t).head(mx).maxCoeff(&i);
    last_nearest_y_in_x_ = static_cast<int>(i);
    if (!nearest_x.empty()) nearest_x[t0 + t] = last_nearest_x_;
    if (!nearest_y.empty()) nearest_y[t0 + t] = last_nearest_y_in_x_;
    if (!dict_x.empty()) dict_x[t0 + t] = mx;
    const bool check_due = PairsUntilDriftCheck() == 1;
    if (check_due || scale < kMinScale) {
      FlushRun(t + 1, scale, n0);
      AfterPairDriftSchedule();
      *ended_early = false;  // not an admission: the next run may stay long
      return t + 1;
    }
    if (options_.drift_check_interval > 0) ++samples_since_drift_check_;
  }
  FlushRun(len, scale, n0);
  return len;
}

void CompressedCme::RunYSide(const Eigen::Ref<const RowMatrixXd>& y, int64_t t0, int len) {
  const int my = my_;
  for (int t = 0; t < len; ++t) KernelColumn(y_atoms_, my, y.row(t0 + t).data(), &bky_(0, t));
  bt_.topLeftCorner(my, len).noalias() =
      ry_.topLeftCorner(my, my).triangularView<Eigen::Lower>() * bky_.topLeftCorner(my, len);  // t_t = R_Y k_y,t
}

void CompressedCme::RunYSideJob(void* cme, void* y, int64_t t0, int64_t len) {
  static_cast<CompressedCme*>(cme)->RunYSide(*static_cast<const Eigen::Ref<const RowMatrixXd>*>(y), t0,
                                             static_cast<int>(len));
}

void CompressedCme::FlushRun(int r, double scale, int64_t n0) {
  // Applies the r deferred compressions of the current run: W~ = S_r (W~_0 - V S^T).
  if (r == 0) return;
  flush_ = {r, scale, n0};
  if (options_.averaging) {
    // R_j = sum_{t >= j} S_t, for every row's share of the mean below.
    double suffix = 0;
    for (int j = r - 1; j >= 0; --j) bsum_[j] = (suffix += bscale_[j]);
  }
  const int split = side_.lane != nullptr ? SplitRow(my_) : 0;
  if (split == 0) {
    FlushRows(0, my_);
    return;
  }
  const int64_t top = side_.lane->Push(side_.executor, &FlushRowsJob, this, nullptr, 0, split);
  FlushRows(split, my_);
  side_.lane->WaitFor(top);
}

void CompressedCme::FlushRows(int i0, int i1) {
  // Row by row the flush is independent: rows [i0, i1) of W~ and of its mean need rows
  // [i0, i1) of V and all of S.
  const int r = flush_.r, rows = i1 - i0, mx = mx_;
  auto w = wf_.block(i0, 0, rows, mx);
  const auto v = bv_.block(i0, 0, rows, r);
  const auto sx = bs_.topLeftCorner(mx, r);
  if (options_.averaging) {
    // mean_{n0 + r} = (n0 mean_{n0} + sum_{t=1..r} W~_t) / (n0 + r), with
    // sum_t W~_t = R_1 W~_0 - sum_j R_j v_j s_j^T.
    const double nr = static_cast<double>(flush_.n0 + r);
    auto avg = wf_avg_.block(i0, 0, rows, mx);
    avg = (static_cast<double>(flush_.n0) / nr) * avg + (bsum_[0] / nr) * w;
    auto vr = bvr_.block(i0, 0, rows, r);
    vr = v * (bsum_.head(r) / nr).asDiagonal();
    avg.noalias() -= vr * sx.transpose();
  }
  w.noalias() -= v * sx.transpose();
  w *= flush_.scale;
}

void CompressedCme::FlushRowsJob(void* cme, void*, int64_t i0, int64_t i1) {
  static_cast<CompressedCme*>(cme)->FlushRows(static_cast<int>(i0), static_cast<int>(i1));
}

void CompressedCme::ZRows(int i0, int i1, int len) {
  bz_.block(i0, 0, i1 - i0, len).noalias() = wf_.block(i0, 0, i1 - i0, mx_) * bs_.topLeftCorner(mx_, len);
}

void CompressedCme::ZRowsJob(void* cme, void* len, int64_t i0, int64_t i1) {
  static_cast<CompressedCme*>(cme)->ZRows(static_cast<int>(i0), static_cast<int>(i1), *static_cast<int*>(len));
}

}  // namespace cmestream
