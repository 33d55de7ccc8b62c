// CompressedCme::ObserveBatch: exact micro-batching of the CME recursion (docs/algorithms.md §9).
//
// A run is a stretch of consecutive pairs in which the dictionary (hence G_X^-1, G_Y^-1, G_Y) does
// not change. Inside a run W is kept lazily as W_t = S_t (W~_0 - sum_{j<=t} v_j c_j^T), with
// S_t = prod_{i<=t} (1 - eta_i lambda) and v_j = eta_j (a_j - b_j) / S_j, so that
//   a_t = W_{t-1} k_x,t = S_{t-1} (W~_0 k_x,t - sum_{j<t} v_j (c_j^T k_x,t)),
// where c_j^T k_x,t = Q(j,t) for Q = C^T K_x and C = G_X^-1 K_x (matrix products over the run).
// G_Y (a_t - b_t), needed for pu, follows the same way from G_Y W~_0 K_x and G_Y v_j (which is
// eta_j G_Y (a_j - b_j) / S_j, already computed for pair j). What is left per pair is O(m t)
// corrections (applied per sub-block as matrix products, per pair only inside a sub-block) and
// O(m) dot products. At the end of the run: W <- S (W~_0 - V C^T), one GEMM; the Polyak-Ruppert
// mean gets sum_t W_t = R_1 W~_0 - V diag(R) C^T with R_j = sum_{t>=j} S_t, one more GEMM.
// A pair that admits ends the run: the run before it is flushed, and the pair is redone by
// Observe() (see the comment there: the Gram inverses must see the sequential arithmetic).
// A scheduled drift check also ends a run (runs are cut so that the check falls on a run's last
// pair), as does S falling below kMinScale (keeps v_j = u_j / S_j far from overflow).
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "core/cme/compressed_cme.h"

namespace cmestream {
namespace {

// Run lengths: start short after an admission (a run that ends early wastes the products of
// its remaining columns), double after each run that completes, up to kMaxRun.
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
  for (MatrixXd* b : {&bkx_, &bky_, &bkyx_, &bc_, &bb_, &bgb_}) b->setZero(ld, cols);
  bz_.setZero(Eigen::Index{2} * ld, cols);
  bvv_.setZero(Eigen::Index{2} * ld, cols);
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
  int run = kMinRun;
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
  for (int t = 0; t < len; ++t) {
    KernelColumn(x_atoms_, mx, x.row(t0 + t).data(), &bkx_(0, t));
    KernelColumn(y_atoms_, my, y.row(t0 + t).data(), &bky_(0, t));
    KernelColumn(x_atoms_, mx, y.row(t0 + t).data(), &bkyx_(0, t));
  }
  const auto kx = bkx_.topLeftCorner(mx, len);
  const auto ky = bky_.topLeftCorner(my, len);
  auto c = bc_.topLeftCorner(mx, len);
  auto b = bb_.topLeftCorner(my, len);
  auto gb = bgb_.topLeftCorner(my, len);
  auto z = bz_.topLeftCorner(2 * my, len);
  auto vv = bvv_.topLeftCorner(2 * my, len);
  auto q = bq_.topLeftCorner(len, len);
  const auto gy = gy_.topLeftCorner(my, my);
  c.noalias() = gx_inv_.topLeftCorner(mx, mx) * kx;               // c_t = G_X^-1 k_x,t
  b.noalias() = gy_inv_.topLeftCorner(my, my) * ky;               // b_t = G_Y^-1 k_y,t
  gb.noalias() = gy * b;                                          // G_Y b_t
  z.topRows(my).noalias() = w_.topLeftCorner(my, mx) * kx;        // W~_0 k_x,t
  z.bottomRows(my).noalias() = gy * z.topRows(my);                // G_Y W~_0 k_x,t
  q.triangularView<Eigen::StrictlyUpper>() = c.transpose() * kx;  // Q(j,t) = c_j^T k_x,t, j < t

  const int64_t n0 = counters_.samples;
  double scale = 1.0;  // S_{t-1}: W_{t-1} = scale (W~_0 - sum_{j<t} v_j c_j^T)
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
    a_.head(my) = scale * z.col(t).head(my);  // a_t = W_{t-1} k_x,t
    amb_.head(my) = a_.head(my) - b.col(t);
    tmp_.head(my) = scale * z.col(t).tail(my) - gb.col(t);  // G_Y (a_t - b_t)
    const PairStats st =
        MakeStats(kx.col(t).dot(c.col(t)), 1.0 - ky.col(t).dot(b.col(t)), amb_.head(my).dot(tmp_.head(my)), eta);
    const Decision dec = Decide(st, eta);
    const double* xt = x.row(t0 + t).data();
    const double* yt = y.row(t0 + t).data();
    if (dec.choice != kCompress) {
      // Admission: materialize W_{t-1}, then redo this pair with Observe(). The Gram inverses
      // are grown from c and delta with 1/delta amplification (delta can be ~1e-6), so feeding
      // them the run's reassociated c would let rounding differences grow to ~1e-6 in a few
      // admissions; Observe() computes them exactly as the sequential recursion does, which keeps
      // the inverses identical and W equal to reassociation error. O(m^2) per admission, the
      // sequential price.
      FlushRun(t, scale, n0);
      Observe(xt, yt);
      if (!nearest_x.empty()) nearest_x[t0 + t] = last_nearest_x_;
      if (!nearest_y.empty()) nearest_y[t0 + t] = last_nearest_y_in_x_;
      if (!dict_x.empty()) dict_x[t0 + t] = mx_;
      *ended_early = true;
      return t + 1;
    }
    // Compression (possibly forced at the cap): defer W <- decay W - eta (a - b) c^T.
    RecordStats(st);
    scale *= decay;
    const double f = eta / scale;
    vv.col(t).head(my) = f * amb_.head(my);
    vv.col(t).tail(my) = f * tmp_.head(my);
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

void CompressedCme::FlushRun(int r, double scale, int64_t n0) {
  // Applies the r deferred compressions of the current run: W = S_r (W~_0 - V C^T).
  if (r == 0) return;
  const int mx = mx_, my = my_;
  auto w = w_.topLeftCorner(my, mx);
  const auto v = bvv_.topLeftCorner(my, r);
  const auto c = bc_.topLeftCorner(mx, r);
  if (options_.averaging) {
    // mean_{n0 + r} = (n0 mean_{n0} + sum_{t=1..r} W_t) / (n0 + r), with
    // sum_t W_t = R_1 W~_0 - sum_j R_j v_j c_j^T, R_j = sum_{t >= j} S_t.
    double suffix = 0;
    for (int j = r - 1; j >= 0; --j) bsum_[j] = (suffix += bscale_[j]);
    const double nr = static_cast<double>(n0 + r);
    auto avg = w_avg_.topLeftCorner(my, mx);
    avg = (static_cast<double>(n0) / nr) * avg + (bsum_[0] / nr) * w;
    auto vr = bvr_.topLeftCorner(my, r);
    vr = v * (bsum_.head(r) / nr).asDiagonal();
    avg.noalias() -= vr * c.transpose();
  }
  w.noalias() -= v * c.transpose();
  w *= scale;
}

}  // namespace cmestream
