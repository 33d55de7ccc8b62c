// LinearForecast: the one-step forecast the change alarms score pairs with (docs/algorithms.md
// §12.8). A ridge regression of the newest observation of y (the last `outputs` components of
// the state) on [1, x], fitted at fixed pair counts from streaming sums and frozen in between.
//
// WHY ITS OWN FORECAST. The alarms must work from the first few hundred pairs of a stream, before
// the kernel bandwidth is chosen (the sigma warm-up), and their residuals must keep one scale
// between refits: the kernel forecast of §11 exists only after the warm-up and refits at other
// counts. A least-squares regression needs no bandwidth, and with a ridge relative to each
// feature's variance it is invariant to the scale of every channel (so scaling is not needed).
//
// REGRESSORS. u = x - x_0, or with degree 3 the powers (u, u^2, u^3) of each component: p = d or
// 3d of them (below, "u" is that vector).
//
// THE FIT (Refit, at pair counts first_fit, 2 first_fit, ... up to fit_every, then every
// fit_every pairs): with u = x - x_0, v = y_new - y_0 (x_0, y_0 the first pair's: sums of large
// offsets stay free of cancellation), C_uu and C_uv the centered moments of all pairs so far,
//     B = (C_uu + lambda diag(C_uu) + floor I)^{-1} C_uv,   a = y_0 + mean(v) - B^T mean(u),
// and the forecast of y_new is a + B^T (x - x_0). lambda = 1e-3; floor = 1e-12 trace(C_uu) / d.
//
// COST (p regressors). Observe: O(p^2 / 2 + p C) (a rank-1 update of the lower triangle of sum u u^T), no heap
// allocation; a refit O(p^3) (it allocates; rare). Memory O(p^2 + p C).
//
// BLOCKS. ObserveBlock takes up to kBlock pairs in one pass over the d x d and d x C matrices
// (each column is updated by every pair of the block while it sits in L1): with 512 channels
// those matrices are 6 MB, and a pass per pair made the forecast memory-bound (70 % of the
// helper thread's time on a 512-channel stream, docs/benchmarks.md). Each column's elements are
// kept in registers while the block's pairs meet them, and the block's scratch columns are padded
// so that they do not share cache sets. Every sum still gets the same additions, each one fused
// multiply-add, in the same order as pair-at-a-time, so a block of any size gives the same bits.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/common/types.h"
#include "core/io/fwd.h"

namespace cmestream {

class LinearForecast {
 public:
  struct Options {
    int dim = 1;      // d: values of x (and y) per pair
    int outputs = 1;  // C: the last C components of y are forecast, 1..dim
    int64_t first_fit = 64;
    int64_t fit_every = 4096;  // refits double up to this many pairs, then come this often
    // 1: regressors [1, x]; 3: [1, x, x^2, x^3], the powers per component (no cross terms), for
    // dynamics whose one-step map is curved (a double well's drift is cubic).
    int degree = 1;
    absl::Status Validate() const;
    int regressors() const { return degree * dim; }
  };
  // The first fit comes once the regression is determined: max(64, 2 (p + 1)) pairs for p
  // regressors besides the intercept.
  static int64_t FirstFitFor(int regressors);

  // requires: options.Validate().ok().
  explicit LinearForecast(const Options& options);

  // Scores the pair with the current fit, then learns it; refits on schedule. Writes
  // `residual` (outputs values: y_new - forecast) and returns true when a fit existed.
  // x, y: dim finite doubles. No allocation except at a refit.
  bool Observe(const double* x, const double* y, double* residual);

  static constexpr int kBlock = 16;
  // Scores and learns the first k = min(n, kBlock, next_fit() - samples()) of n >= 1 pairs (x
  // and y row-major, dim values a row), then refits if the schedule says so; returns k. Pair i's
  // residual goes to residuals + i * outputs; every pair of the block is scored with the fit
  // from before the call, so *scored = has_fit() before it. Bit-identical to k calls of Observe.
  int ObserveBlock(const double* x, const double* y, int64_t n, double* residuals, bool* scored);

  const Options& options() const { return options_; }
  int64_t samples() const { return n_; }
  bool has_fit() const { return fitted_; }
  // The pair count at which the next refit comes (it changes exactly when Observe refitted).
  int64_t next_fit() const { return next_fit_; }

  // Object "LINF" v2: options (v2: with the degree), sums and fit (bit-exact continuation). A
  // degree-1 forecast is written as v1, byte for byte what the release before wrote.
  void Serialize(io::Writer& w) const;
  static absl::StatusOr<LinearForecast> Deserialize(io::Reader& r);

 private:
  // The state's field list (CONTRIBUTING.md "Binary formats"), beside Serialize.
  template <class Fields, class Self>
  static void StateFields(Fields& f, Self& self);
  void Refit();

  Options options_;
  int64_t n_ = 0;
  int64_t next_fit_ = 0;
  VectorXd x0_, y0_;  // d, C
  MatrixXd suu_;      // d x d, lower triangle
  VectorXd su_;       // d
  MatrixXd suv_;      // d x C
  VectorXd sv_;       // C
  bool fitted_ = false;
  VectorXd intercept_;  // C
  MatrixXd coef_;       // d x C
  MatrixXd u_, v_;      // scratch: one column a pair of the block, d x kBlock and C x kBlock
};

}  // namespace cmestream
