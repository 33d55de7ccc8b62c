// Compressed online conditional mean embedding (seed paper 004; docs/algorithms.md §1).
//
// WHAT THIS OBJECT REPRESENTS
//   The CME operator C: H -> H with C phi(x) ~ E[phi(Y) | X = x], learned by constant-step (or
//   decaying-step) SGD on R(C) = E||phi(Y) - C phi(X)||^2 + lambda ||C||_HS^2 from a stream of
//   pairs (x_t, y_t), kept in the compressed form C = Psi W Phi^T over an X-dictionary
//   (m_x atoms) and a Y-dictionary (m_y atoms), W in R^{m_y x m_x}. Each sample either
//   compresses into the current span (error <= epsilon) or admits the cheapest side(s)
//   (one-sided admission). At the cap max_dict a would-be admission is forced into a
//   projection and counted.
//
// INITIAL VALUE
//   Empty dictionaries, samples() == 0, C = 0.
//
// COST
//   Observe / ObserveBatch: O(m^2) per pair. ObserveBatch does the same arithmetic as B calls of
//   Observe, regrouped into matrix-matrix products (docs/algorithms.md §9), several times
//   faster per pair. Refactorize: O(m^3), call off the hot path.
//   Memory follows the dictionary: the m-indexed buffers have a capacity that grows
//   geometrically (16, 32, 64, ... capped at max_dict) when an admission needs room, so an empty
//   learner holds no matrices and a learner with m atoms holds 6-7 cap^2 doubles, cap < 2m
//   (plus ObserveBatch's scratch, about 7 cap x run doubles). Growth is the only allocation on
//   the hot path: O(log max_dict) times over a learner's life; Reserve() removes even that.
//   Measured: docs/benchmarks.md.
//
// NUMERICS
//   The recursion works in whitened bases (docs/algorithms.md §1.3.1): with the Cholesky factors
//   L L^T = G + gamma I of both jittered Grams (gamma = jitter * k(x,x), relative jitter,
//   docs/algorithms.md (1.18)) it keeps R = L^{-1} (lower triangular) per side and
//   W~ = L_Y^T W L_X, so that W = R_Y^T W~ R_X. Per pair that costs s = R_X k_x, t = R_Y k_y,
//   W~ s and the rank-1 update: 3 m^2 multiply-adds instead of 5 with explicit inverses, and an
//   admission appends one row to R and one row or column to W~ (O(m^2)). A side whose delta is
//   below gamma is never admitted (one-sided mode). Drift ||R (G + gamma I) R^T - I||_F is
//   estimated from random probes by EstimateInverseDrift() (O(m^2), allocation-free; the exact
//   O(m^3) MeasureInverseDrift() cost a third of the learner's time at m = 1000);
//   CheckDriftAndRefactorize(), which Observe() runs every max(drift_check_interval, m_x + m_y)
//   samples, recomputes the factors by Cholesky (and re-expresses W~ in the new bases) when the
//   drift exceeds drift_tolerance or when Observe() saw a negative delta (a free drift symptom).
//   The re-factorization itself allocates (rare repair).
//
// STEP SCHEDULE AND AVERAGING
//   step_decay_samples = 0: constant eta (tracks drift, weights recent data more; eigenvalue
//   error floor 0.02-0.07 on the test systems). step_decay_samples = s > 0:
//   eta_t = eta / (1 + t/s)^p (p = step_decay_power in (0,1]); with p = 1 this is the classic
//   Robbins-Monro rate. averaging = true: W() returns the Polyak-Ruppert mean of all iterates
//   (new atoms enter with zero rows/columns), which converges to the batch regularized CME at the
//   O(1/sqrt(n)) rate (test: relative HS distance 0.14 -> 0.0057 from n = 250 to 64000).
//
// EDGE CASES
//   The first sample always admits both sides (an empty span cannot absorb anything). At the
//   cap a would-be admission takes the best feasible partial step (one-sided) or the plain
//   projection, is counted in counters().forced and its residual error summed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/common/types.h"
#include "core/io/fwd.h"

namespace cmestream {

class SideExecutor;
class SideLane;

class CompressedCme {
 public:
  // Largest state dimension accepted (the daemon's --max-dim default is lower).
  static constexpr int kMaxDim = 65536;
  // The bandwidths whose 1 / (2 sigma^2) is a finite, nonzero double: outside them the kernel
  // would read 0/0 or inf/inf (docs/algorithms.md §1.11.1). Data-derived bandwidths are clamped
  // into this range (SelectBandwidth); a user's is refused outside it.
  static constexpr double kMinSigma = 1e-150;
  static constexpr double kMaxSigma = 1e150;

  struct Options {
    int dim = 0;            // state dimension d, 1 <= d <= kMaxDim
    double sigma = 0.4;     // Gaussian kernel bandwidth, in [kMinSigma, kMaxSigma]
    double eta = 0.1;       // SGD step, 0 < eta, eta*lambda < 1
    double lambda = 1e-3;   // HS regularizer, >= 0
    double epsilon = 1e-3;  // compression budget on ||C~ - Pi C~||_HS, >= 0
    int max_dict = 1000;    // cap on m_x and on m_y, >= 1
    bool one_sided = true;  // admit only the cheapest side (docs/algorithms.md §1.5)
    // Relative jitter gamma = jitter * k(x,x) added to both Gram diagonals.
    double jitter = 1e-6;
    // Re-factorize the Gram inverses (Cholesky) when ||G G^-1 - I||_F exceeds this.
    double drift_tolerance = 1e-3;
    // Observe() checks the drift (and re-factorizes if needed) every
    // max(drift_check_interval, m_x + m_y) samples: O(m^3) per check, so O(m^2) amortized.
    // The check is part of the sample stream, not of the wall clock, so the learner's state
    // depends only on the pairs it saw (bit-exact WAL replay and snapshots). 0 = never.
    int64_t drift_check_interval = 1000;
    // Step schedule eta_t = eta / (1 + t/step_decay_samples)^step_decay_power (0 = constant).
    double step_decay_samples = 0;
    double step_decay_power = 0.5;
    bool averaging = false;  // Polyak-Ruppert running mean of W, used by the views

    // OK or InvalidArgument("Violated constraint: ...").
    absl::Status Validate() const;
  };

  // Counters describing what the learner did; cumulative since construction.
  struct Counters {
    int64_t samples = 0;
    int64_t compressed = 0;       // absorbed into the current span
    int64_t admitted_x = 0;       // X atoms added
    int64_t admitted_y = 0;       // Y atoms added
    int64_t forced = 0;           // admissions refused by max_dict (forced projections)
    double forced_error_sum = 0;  // sum of sqrt(err^2) of forced projections
    int64_t refactorizations = 0;
  };

  // requires: options.Validate().ok() (checked; aborts otherwise — validate first).
  explicit CompressedCme(const Options& options);

  // Applies one pair. x, y: pointers to d doubles each, finite (the caller validates).
  // O(m^2), no allocation.
  void Observe(const double* x, const double* y);

  // Applies n pairs, rows of x and y (n x d each), with results equal to n calls of Observe()
  // up to floating-point reassociation (exactly the same admissions; W within ~1e-13 relative).
  // Runs of pairs without admission are evaluated as matrix products against a fixed dictionary
  // (docs/algorithms.md §9); an admission ends a run and is applied by Observe()'s formulas.
  // The run lengths depend only on the position inside this call, on last_step() before it and
  // on the stream, so a learner's state is a function of the pairs and of the batch boundaries
  // (replaying the same batches is bit-exact). nearest_x / nearest_y / dict_x: empty, or n entries that receive
  // last_nearest_x() / last_nearest_y_in_x() / dict_x_size() as they were after each pair (the
  // X atoms after pair t are the first dict_x[t] rows of x_atoms(): atoms are only appended).
  // requires: x, y n x dim, finite; spans empty or of size n (checked; aborts otherwise).
  // No allocation once capacity and scratch have been sized (same batch size seen before).
  void ObserveBatch(const Eigen::Ref<const RowMatrixXd>& x, const Eigen::Ref<const RowMatrixXd>& y,
                    absl::Span<int> nearest_x = {}, absl::Span<int> nearest_y = {}, absl::Span<int> dict_x = {});

  // Lends ObserveBatch a second thread (docs/algorithms.md §9.3): each run's y side (the
  // kernel columns k_Y(y_t) and T = R_Y K_y, an eighth to a quarter of the run's work at the
  // cap) is pushed to `lane` while the calling thread does the x side, and waited for before
  // the run's pairs are decided; with m_y >= kSplitMinRows the top rows of the run's two
  // m_y x m_x products (W~_0 S and the flush) go to the lane too (SplitRow). The same
  // arithmetic on the same data: bit-identical to no lane.
  // null: no split. The lane belongs to the object's owner, not to its state: copies and
  // assignments neither take nor replace it (a snapshot's copy runs on another thread).
  void SetSideLane(SideLane* lane, SideExecutor* executor);

  // Grows the capacity to hold m atoms per side now (m <= max_dict), so that no later
  // admission up to m allocates. Optional: capacity also grows on demand.
  void Reserve(int m);
  // Current capacity (atoms per side that fit without growing) and heap bytes held by the
  // learner's buffers (matrices, atoms, scratch).
  int capacity() const { return cap_; }
  int64_t HeapBytes() const;
  // True when `pairs` more pairs cannot reallocate the atoms (the capacity holds that many more
  // admissions per side, or it is max_dict already): then first_x_atoms stays valid meanwhile.
  bool HasRoomFor(int pairs) const { return cap_ >= DictionaryCap() || std::max(mx_, my_) + pairs <= cap_; }
  // A cap on the dictionary below max_dict, set by the owner for the pairs that follow (the
  // daemon's memory budget: service/engine/memory_budget.h): admissions beyond it are forced
  // projections, as at max_dict, and the capacity never grows past it. 0 or >= max_dict: none.
  // Not part of the state (neither serialized nor digested): the owner sets it before each
  // batch, and a replay sets the same value from its record. A cap below the current size
  // only stops growth (atoms are never removed).
  void set_growth_cap(int cap) { growth_cap_ = cap; }
  int growth_cap() const { return growth_cap_; }
  // The cap in force: min(max_dict, growth_cap) (max_dict without a growth cap).
  int DictionaryCap() const {
    return growth_cap_ > 0 && growth_cap_ < options_.max_dict ? growth_cap_ : options_.max_dict;
  }
  // The first `rows` X atoms (rows <= dict_x_size()). Unlike x_atoms() it reads no dictionary
  // size, so another thread may read the atoms a run recorded while this CME learns the next
  // run, as long as HasRoomFor(that run) held (atoms are only appended; core/stream/cme_run.h).
  Eigen::Ref<const RowMatrixXd> first_x_atoms(int rows) const { return x_atoms_.topRows(rows); }

  // Max over both sides of ||R (G + gamma I) R^T - I||_F, exactly (O(m^3)); cached in
  // last_drift(). For tests and diagnostics.
  double MeasureInverseDrift();
  // The same quantity estimated from kDriftProbes random +-1 probes z (E ||E z||^2 = ||E||_F^2,
  // relative spread about 1/2 at 8 probes), O(m^2); the probes are seeded by samples(), so the
  // estimate is a function of the state. Cached in last_drift(). What the periodic check uses.
  double EstimateInverseDrift();
  static constexpr int kDriftProbes = 8;

  // The rows of W~ whose run products go to the side lane: none (0) below kSplitMinRows rows,
  // else about half, rounded down to a multiple of 24. A function of m_y alone, and a multiple
  // of every register block of Eigen's matrix-product kernel (12 rows of doubles with AVX2, 6
  // with SSE, 24 with AVX-512), so each row of a part meets the same kernel, the same
  // products in the same order, as in the whole product: the split changes no bit (test
  // CmeOnTwoThreads.*, and any number of helpers gives the same state).
  // Below 256 rows the two hand-offs cost about what the split saves (a 2-dim Duffing stream at
  // m = 192 ingested no faster with it: docs/benchmarks.md "Rows of the CME's run products").
  static constexpr int kSplitMinRows = 256;
  static int SplitRow(int rows) { return rows < kSplitMinRows ? 0 : rows / 2 / 24 * 24; }
  // Recomputes both factors from a Cholesky factorization of the jittered Gram (and W~ in the
  // new bases). False if a side's Cholesky failed (jitter = 0 and duplicate atoms only): that
  // side keeps its incrementally grown factor.
  bool Refactorize();
  // Estimates drift and refactorizes if above drift_tolerance. Returns the drift estimated.
  double CheckDriftAndRefactorize();

  const Options& options() const { return options_; }
  const Counters& counters() const { return counters_; }
  int64_t samples() const { return counters_.samples; }
  int dict_x_size() const { return mx_; }
  int dict_y_size() const { return my_; }
  double last_drift() const { return last_drift_; }

  // Views of the live state (first m rows/cols of the capacity-sized buffers).
  Eigen::Ref<const RowMatrixXd> x_atoms() const;  // m_x x d
  Eigen::Ref<const RowMatrixXd> y_atoms() const;  // m_y x d
  // W = R_Y^T W~ R_X, m_y x m_x (averaged W if averaging); formed on each call, O(m^3): read
  // it off the hot path (views use CmeSnapshot, which forms it off the learner's lock).
  MatrixXd W() const;
  // The factored state itself (see NUMERICS): W~ (averaged if averaging), R_X, R_Y.
  Eigen::Ref<const MatrixXd> W_whitened() const;
  Eigen::Ref<const MatrixXd> inverse_factor_x() const;  // R_X, m_x x m_x, lower triangular
  Eigen::Ref<const MatrixXd> inverse_factor_y() const;  // R_Y, m_y x m_y, lower triangular
  // Index of the X atom with the largest kernel value for the most recent Observe()'d x
  // and its successor y (-1 before any atom exists). Lets counts reuse kernel values.
  // Cost: k_X(y) is m_x extra kernel evaluations per sample (O(m d), small next to O(m^2)).
  int last_nearest_x() const { return last_nearest_x_; }
  int last_nearest_y_in_x() const { return last_nearest_y_in_x_; }

  // What the most recent Observe() did, for tests and diagnostics.
  enum class Step { kNone, kCompressed, kAdmittedX, kAdmittedY, kAdmittedBoth, kForced };
  Step last_step() const { return last_step_; }
  // sqrt(err^2) of the most recent sample: the HS distance between the uncompressed SGD
  // iterate and its projection onto span{psi_i (x) phi_j} (before any admission).
  double last_error() const { return last_error_; }
  // The non-averaged SGD iterate (equals W() when averaging is off); formed like W().
  MatrixXd W_iterate() const;
  // Inverses of the jittered Grams (G + gamma I)^{-1} = R^T R, m x m, formed on each call; for
  // tests and diagnostics.
  MatrixXd gram_x_inverse() const;
  MatrixXd gram_y_inverse() const;
  // Number of samples whose computed delta came out below -1e-6 (a symptom of inverse drift,
  // detected for free on the hot path; the next CheckDriftAndRefactorize() repairs it).
  int64_t negative_delta_events() const { return negative_delta_events_; }
  // Kernel columns k_X(x) copied from the previous pair's k_X(y) instead of recomputed (x was
  // bitwise that y: trajectories). Diagnostics and tests; not serialized.
  int64_t reused_kernel_columns() const { return reused_columns_; }

  // Snapshot support (core/cme/compressed_cme_io.cc; object tag "CCME", version 2; version 1,
  // which stored W and the Gram inverses, loads by re-factorizing). Writes
  // the full per-sample state (no flush, no re-factorization), so that Deserialize() followed
  // by the same calls gives results bit-identical to never having stopped. Deserialize bounds
  // every dimension by the stored options before allocating; errors are DataLoss naming the
  // source and offset (a bad tag or an unknown version are named as such).
  void Serialize(io::Writer& w) const;
  static absl::StatusOr<CompressedCme> Deserialize(io::Reader& r);

 private:
  // (implementation-defined members)
  // What a pair's statistics call for (docs/algorithms.md §1, one-sided admission).
  enum Choice { kCompress, kY, kX, kBoth };
  struct Decision {
    Choice choice = kCompress;
    bool forced = false;
    double residual2 = 0;  // error left by the chosen update (forced steps)
  };
  // Clamped deltas, pu, pv and err^2 of one pair; negative: a delta below -1e-6 (drift symptom).
  struct PairStats {
    double pv = 0, dx = 0, dy = 0, pu = 0, err2 = 0;
    bool negative = false;
  };
  PairStats MakeStats(double pv, double dy_raw, double pu_raw, double eta) const;
  void RecordStats(const PairStats& st);  // last_error_, negative_delta_events_
  Decision Decide(const PairStats& st, double eta) const;
  // Applies a decided step with the pair's vectors in the scratch s_, t_, r_, kx_, ky_
  // (W~ update, dictionary growth, counters, averaging, nearest atoms, drift schedule).
  void ApplyStep(const Decision& dec, const PairStats& st, const double* x, const double* y, double eta, double decay);
  // Grows capacity when an admission would not fit (no-op at max_dict).
  void EnsureCapacity();
  // ObserveBatch helpers (compressed_cme_batch.cc).
  void EnsureBatchScratch(int run);
  int ObserveRun(const Eigen::Ref<const RowMatrixXd>& x, const Eigen::Ref<const RowMatrixXd>& y, int64_t t0, int len,
                 absl::Span<int> nearest_x, absl::Span<int> nearest_y, absl::Span<int> dict_x, bool* ended_early);
  void FlushRun(int r, double scale, int64_t n0);
  // Rows [i0, i1) of the flush (W~ and its mean) and of Z = W~_0 S; flush_ holds the run's
  // figures for FlushRows. The lane's jobs take rows [0, SplitRow(m_y)).
  void FlushRows(int i0, int i1);
  void ZRows(int i0, int i1, int len);
  static void FlushRowsJob(void* cme, void*, int64_t i0, int64_t i1);
  static void ZRowsJob(void* cme, void* len, int64_t i0, int64_t i1);
  // The y side of a run: columns 0..len-1 of bky_ and bt_ for the pairs t0.. of y.
  void RunYSide(const Eigen::Ref<const RowMatrixXd>& y, int64_t t0, int len);
  static void RunYSideJob(void* cme, void* y, int64_t t0, int64_t len);
  // Samples left before the scheduled drift check (>= 1), or a large number when disabled.
  int64_t PairsUntilDriftCheck() const;
  void AfterPairDriftSchedule();

  Options options_;
  int cap_ = 0;         // capacity of every m-indexed buffer (see COST)
  int growth_cap_ = 0;  // set_growth_cap (0: none); not state
  Counters counters_;
  int mx_ = 0;
  int my_ = 0;
  double last_drift_ = 0;
  int last_nearest_x_ = -1;
  int last_nearest_y_in_x_ = -1;
  RowMatrixXd x_atoms_, y_atoms_;  // cap x d
  MatrixXd wf_, wf_avg_;           // W~ = L_Y^T W L_X and its Polyak-Ruppert mean, cap x cap
  MatrixXd gx_, gy_;               // Gram matrices (unjittered), capacity-sized
  MatrixXd rx_, ry_;               // R = L^{-1}, L L^T = G + gamma I (lower triangular)
  // Scratch, capacity-sized: kernel columns, s = R_X kx, t = R_Y ky, r = W~ s - t,
  // c = R^T (s or t) for an admission, tmp for the update and the drift check.
  VectorXd kx_, ky_, kyx_, s_, t_, r_, c_, tmp_;
  // kyx_ = k_X(kyx_point_) against the current X atoms whenever kyx_valid_ (set by ApplyStep,
  // cleared when a capacity growth re-zeroes the scratch; atoms only change in ApplyStep, which
  // recomputes kyx_ right after). On a trajectory the next pair's x is that y: Observe copies
  // kyx_ instead of recomputing k_X(x) (KernelColumn is a pure function of the atoms and the
  // point, so the bits are those of a recomputation). Derived: not serialized.
  VectorXd kyx_point_;  // d
  bool kyx_valid_ = false;
  int64_t reused_columns_ = 0;
  MatrixXd probe_z_, probe_u_, probe_v_;  // cap x kDriftProbes, EstimateInverseDrift()
  // ObserveBatch scratch (ld = cap rounded up to 8 rows so columns stay SIMD-aligned) x run.
  MatrixXd bkx_, bky_, bkyx_;  // kernel columns k_X(x_t), k_Y(y_t), k_X(y_t)
  MatrixXd bs_, bt_;           // S = R_X K_x, T = R_Y K_y
  MatrixXd bz_;                // W~_0 S, then corrected in place
  MatrixXd bv_;                // the deferred rank-1 factors v_t
  MatrixXd bq_;                // run x run: Q(j,t) = s_j^T s_t, strictly upper part
  MatrixXd bvr_;               // ld x run: v_t scaled for the Polyak-Ruppert sum
  VectorXd bscale_, bsum_;     // per-pair lazy scale S_t and its suffix sums
  struct FlushArgs {
    int r = 0;         // pairs deferred
    double scale = 1;  // S_r
    int64_t n0 = 0;    // samples before the run (the mean's weight)
  } flush_;
  // SetSideLane's lane: the owner's, so a copy or an assignment leaves it where it was.
  struct SideHook {
    SideLane* lane = nullptr;
    SideExecutor* executor = nullptr;
    SideHook() = default;
    SideHook(const SideHook&) {}
    SideHook& operator=(const SideHook&) { return *this; }
  };
  SideHook side_;
  Step last_step_ = Step::kNone;
  double last_error_ = 0;
  int64_t negative_delta_events_ = 0;
  int64_t samples_since_drift_check_ = 0;

  double Gamma() const;                      // relative jitter gamma = jitter * k(x,x) (k(x,x) = 1)
  double StepSizeAt(int64_t samples) const;  // eta_t of the schedule after `samples` pairs
  // Appends atom m to a side: its Gram row/column k_new, and row m of R from c = R^T (R k_new)
  // and the Schur complement ell^2 = delta + gamma.
  void GrowFactor(MatrixXd& g, MatrixXd& r, int m, const VectorXd& k_new, const VectorXd& c, double ell);
  void UpdateAverage();
  void KernelColumn(const RowMatrixXd& atoms, int m, const double* p, double* out) const;
  // out = k_X(p) over the first m X atoms, copied from `known` (k_X(known_point) over the same
  // atoms) when p is bitwise known_point, else computed. A copy has the bits of KernelColumn.
  void KernelColumnX(int m, const double* p, const double* known_point, const double* known, double* out);
};

// Immutable copy of what the views need; never aliases learner buffers.
struct CmeSnapshot {
  int dim = 0;
  double sigma = 1;
  int64_t samples = 0;
  RowMatrixXd x_atoms;                                // m_x x d
  RowMatrixXd y_atoms;                                // m_y x d
  MatrixXd W;                                         // m_y x m_x
  static CmeSnapshot From(const CompressedCme& cme);  // FromFactors + Materialize

  // In two steps, so that an owner can hold its lock only for the copy: FromFactors copies
  // the atoms and the factored W (O(m^2)); Materialize() forms W = R_Y^T W~ R_X (O(m^3)) and
  // drops the factors. A snapshot is used only after Materialize() (a no-op when done).
  static CmeSnapshot FromFactors(const CompressedCme& cme);
  void Materialize();
  MatrixXd w_whitened, r_x, r_y;  // empty once materialized
};

// E[Y | X = x] ~ sum_i beta_i y_i with beta = W k_X(x) (docs/algorithms.md (1.24)). points: n x d.
RowMatrixXd PredictConditionalMean(const CmeSnapshot& s, const Eigen::Ref<const RowMatrixXd>& points);

}  // namespace cmestream
