#include "core/forecast/forecast_regression.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cmestream {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// Ridge grids, relative to each feature's variance. The linear block reaches 1e3 (practically
// the pure mean or pure persistence model); the kernel block is always regularized.
constexpr double kLinearGrid[] = {1e-9, 1e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1, 10, 1e3};
constexpr double kKernelGrid[] = {1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1};
constexpr int kMinFoldPairs = 4;
constexpr int kMinForwardPairs = 16;

// Centered moments of one fold (or of both) over the first k features.
struct Centered {
  double n = 0;
  VectorXd mu;   // q: mean of u
  VectorXd mv;   // d: mean of v
  MatrixXd c;    // q x q covariance of u
  MatrixXd cuv;  // q x d cross-covariance
};

Centered Center(const ForecastFoldSums& f) {
  Centered c;
  c.n = f.n;
  c.mu = f.sz / f.n;
  c.mv = f.sy / f.n;
  c.c = f.szz / f.n - c.mu * c.mu.transpose();
  c.cuv = f.szy / f.n - c.mu * c.mv.transpose();
  return c;
}

ForecastFoldSums Sum(const ForecastFoldSums& a, const ForecastFoldSums& b) {
  ForecastFoldSums s;
  s.n = a.n + b.n;
  s.sz = a.sz + b.sz;
  s.sy = a.sy + b.sy;
  s.syy = a.syy + b.syy;
  s.szz = a.szz + b.szz;
  s.szy = a.szy + b.szy;
  return s;
}

// A ridge fit of t_j = v_j - kappa_j u_j on the first k features of a centered fold:
// returns beta (k x d) and the intercepts b (d) in the shifted coordinates.
struct LinearFit {
  MatrixXd beta;
  VectorXd b;
};

// Penalty diagonal: lambda_lin * var on the x block, lambda_ker * var on the rest. A feature
// with no variance (a constant channel) gets a tiny multiple of its block's mean variance, so
// the system stays definite and its coefficient stays 0.
VectorXd Penalty(const MatrixXd& c, int d, int k, double lambda_lin, double lambda_ker) {
  VectorXd diag = c.diagonal().head(k).cwiseMax(0.0);
  VectorXd p(k);
  const double mean_lin = diag.head(d).mean();
  const double mean_ker = k > d ? diag.tail(k - d).mean() : 0.0;
  for (int i = 0; i < k; ++i) {
    const bool lin = i < d;
    const double floor = 1e-12 * (lin ? mean_lin : mean_ker) + 1e-300;
    p(i) = (lin ? lambda_lin : lambda_ker) * (diag(i) + floor);
  }
  return p;
}

LinearFit Solve(const Centered& c, int d, int k, double lambda_lin, double lambda_ker, const VectorXd& kappa) {
  MatrixXd a = c.c.topLeftCorner(k, k);
  a.diagonal() += Penalty(c.c, d, k, lambda_lin, lambda_ker);
  MatrixXd rhs(k, d);
  for (int j = 0; j < d; ++j) rhs.col(j) = c.cuv.col(j).head(k) - kappa(j) * c.c.col(j).head(k);
  LinearFit f;
  f.beta = a.ldlt().solve(rhs);
  f.b.resize(d);
  for (int j = 0; j < d; ++j) f.b(j) = (c.mv(j) - kappa(j) * c.mu(j)) - c.mu.head(k).dot(f.beta.col(j));
  return f;
}

// Squared error of each component's fit on the raw sums of another fold (closed form).
VectorXd HeldOutSse(const ForecastFoldSums& v, const LinearFit& f, int k, const VectorXd& kappa) {
  const int d = static_cast<int>(f.b.size());
  VectorXd sse(d);
  for (int j = 0; j < d; ++j) {
    const double kp = kappa(j);
    const auto beta = f.beta.col(j);
    const double b = f.b(j);
    const double stt = v.syy(j) - 2 * kp * v.szy(j, j) + kp * kp * v.szz(j, j);
    const double st = v.sy(j) - kp * v.sz(j);
    const VectorXd stu = v.szy.col(j).head(k) - kp * v.szz.col(j).head(k);
    const double pred_sq = v.n * b * b + 2 * b * beta.dot(v.sz.head(k)) + beta.dot(v.szz.topLeftCorner(k, k) * beta);
    sse(j) = std::max(0.0, stt - 2 * b * st - 2 * beta.dot(stu) + pred_sq);
  }
  return sse;
}

ForecastFoldSums Minus(const ForecastFoldSums& a, const ForecastFoldSums& b) {
  ForecastFoldSums s;
  s.n = a.n - b.n;
  s.sz = a.sz - b.sz;
  s.sy = a.sy - b.sy;
  s.syy = a.syy - b.syy;
  s.szz = a.szz - b.szz;
  s.szy = a.szy - b.szy;
  return s;
}

// The selection criterion of a candidate, per component: the blocked K-fold held-out MSE (train
// on the complement of each fold that holds pairs, score on that fold) plus the forward MSE
// (train on the pairs up to the previous refit, score on the pairs since): interleaved blocks
// always have training data on both sides in time, so only the forward part sees a candidate
// fail to extrapolate (a kernel block on a trending series). Without a forward segment the
// K-fold MSE counts twice.
struct Criterion {
  const std::vector<ForecastFoldSums>* folds = nullptr;
  std::vector<Centered> rest;  // per fold: the other folds, centered
  double n_scored = 0;
  bool forward = false;
  Centered prefix;
  ForecastFoldSums recent;

  VectorXd Mse(int d, int k, double lambda_lin, double lambda_ker, const VectorXd& kappa) const {
    VectorXd sse = VectorXd::Zero(d);
    for (size_t f = 0; f < folds->size(); ++f) {
      if ((*folds)[f].n < kMinFoldPairs) continue;
      sse += HeldOutSse((*folds)[f], Solve(rest[f], d, k, lambda_lin, lambda_ker, kappa), k, kappa);
    }
    const VectorXd cv = sse / n_scored;
    if (!forward) return 2 * cv;
    return cv + HeldOutSse(recent, Solve(prefix, d, k, lambda_lin, lambda_ker, kappa), k, kappa) / recent.n;
  }
};

}  // namespace

const char* ForecastMethodName(ForecastMethod m) {
  switch (m) {
    case ForecastMethod::kRegression:
      return "regression";
    case ForecastMethod::kLinear:
      return "linear";
    case ForecastMethod::kPersistence:
      return "persistence";
  }
  return "regression";
}

double ForecastHorizonSkill::rmse(ForecastMethod m, int scored_dims) const {
  return pairs > 0 ? std::sqrt(sse[static_cast<int>(m)] / (static_cast<double>(pairs) * scored_dims)) : kNaN;
}

double ForecastSkill::rmse() const {
  return pairs > 0 ? std::sqrt(sse / (static_cast<double>(pairs) * scored_dims)) : kNaN;
}
double ForecastSkill::rmse_persistence() const {
  return pairs > 0 ? std::sqrt(sse_persistence / (static_cast<double>(pairs) * scored_dims)) : kNaN;
}
double ForecastSkill::ratio() const {
  const double p = rmse_persistence();
  return pairs > 0 && p > 0 ? rmse() / p : kNaN;
}

void ForecastModel::Predict(const double* x, double* y, double* phi) const {
  const int d = dim();
  const int n = features_->num_features();
  if (!kernel_) {
    Eigen::Map<VectorXd> out(y, d);
    out = intercept_;
    out.noalias() += coef_.topRows(d).transpose() * Eigen::Map<const VectorXd>(x, d);
    return;
  }
  Eigen::Map<const RowMatrixXd> xr(x, 1, d);
  Eigen::Map<RowMatrixXd> pr(phi, 1, n);
  features_->Project(xr, pr);
  features_->Activate(phi);
  Eigen::Map<VectorXd> out(y, d);
  out = intercept_;
  out.noalias() += coef_.topRows(d).transpose() * Eigen::Map<const VectorXd>(x, d);
  out.noalias() += coef_.bottomRows(n).transpose() * Eigen::Map<const VectorXd>(phi, n);
}

RowMatrixXd ForecastModel::Rollout(const double* x, int horizon) const {
  const int d = dim();
  RowMatrixXd out(horizon, d);
  VectorXd phi(features_->num_features());
  VectorXd state = Eigen::Map<const VectorXd>(x, d);
  for (int h = 0; h < horizon; ++h) {
    Predict(state.data(), out.row(h).data(), phi.data());
    state = out.row(h).transpose();
  }
  return out;
}

namespace {

// The model of per-component choices (kappa, lambdas) refitted on `all`: components with the
// same lambdas share one factorization.
struct Coefficients {
  VectorXd intercept;  // d
  MatrixXd coef;       // q x d
};

absl::StatusOr<Coefficients> Build(const Centered& all, const ForecastMomentsSnapshot& s,
                                   const std::vector<ForecastChoice>& choice, const VectorXd& kappa_best, int q) {
  const int d = s.dim;
  Coefficients m;
  m.intercept.resize(d);
  m.coef = MatrixXd::Zero(q, d);
  std::vector<bool> done(d, false);
  for (int j = 0; j < d; ++j) {
    if (done[j]) continue;
    const ForecastChoice& cj = choice[j];
    const int k = cj.lambda_kernel > 0 ? q : d;
    const LinearFit fit = Solve(all, d, k, cj.lambda_linear, cj.lambda_kernel, kappa_best);
    for (int i = j; i < d; ++i) {
      if (done[i] || choice[i].lambda_linear != cj.lambda_linear || choice[i].lambda_kernel != cj.lambda_kernel)
        continue;
      done[i] = true;
      // y_i = b + beta^T (z' - z0) + kappa x_i + (1 - kappa) x0_i in the user's coordinates.
      m.coef.col(i).head(k) = fit.beta.col(i);
      m.coef(i, i) += kappa_best(i);
      m.intercept(i) = fit.b(i) - fit.beta.col(i).dot(s.z0.head(k)) + (1 - kappa_best(i)) * s.z0(i);
    }
  }
  if (!m.coef.allFinite() || !m.intercept.allFinite()) {
    return absl::InternalError("the forecast regression produced non-finite coefficients");
  }
  return m;
}

}  // namespace

absl::StatusOr<ForecastModel> FitForecast(const ForecastMomentsSnapshot& s) {
  const int d = s.dim;
  const int q = d + s.features->num_features();
  // The folds that are scored (>= kMinFoldPairs pairs) and, for each, the centered moments of
  // all the other pairs.
  ForecastFoldSums total = s.folds[0];
  for (size_t f = 1; f < s.folds.size(); ++f) total = Sum(total, s.folds[f]);
  Criterion crit;
  crit.folds = &s.folds;
  crit.rest.resize(s.folds.size());
  int scored_folds = 0;
  for (size_t f = 0; f < s.folds.size(); ++f) {
    if (s.folds[f].n < kMinFoldPairs) continue;
    ++scored_folds;
    crit.n_scored += s.folds[f].n;
    crit.rest[f] = Center(Minus(total, s.folds[f]));
  }
  if (scored_folds < 2) {
    return absl::FailedPreconditionError(absl::StrCat("the forecast regression needs ", kMinFoldPairs,
                                                      " pairs in at least two of its held-out folds (blocks of pairs); "
                                                      "it has ",
                                                      total.n, " pairs"));
  }
  if (s.prefix && s.prefix->n >= kMinForwardPairs && total.n - s.prefix->n >= kMinForwardPairs) {
    crit.forward = true;
    crit.prefix = Center(*s.prefix);
    crit.recent = Minus(total, *s.prefix);
  }
  const int scored = s.scored_dims > 0 ? std::min(s.scored_dims, d) : d;

  // Stage 1: linear-only candidates, per component the best (kappa, lambda_linear).
  std::vector<ForecastChoice> choice(d);
  VectorXd best = VectorXd::Constant(d, std::numeric_limits<double>::infinity());
  VectorXd kappa_best = VectorXd::Zero(d);
  constexpr int kLin = static_cast<int>(std::size(kLinearGrid));
  MatrixXd sse_by_lambda(kLin, d);  // with each component's best kappa, filled below
  std::array<MatrixXd, 2> sse_kappa = {MatrixXd(kLin, d), MatrixXd(kLin, d)};
  for (int kp = 0; kp < 2; ++kp) {
    const VectorXd kappa = VectorXd::Constant(d, kp);
    for (int g = 0; g < kLin; ++g) {
      sse_kappa[kp].row(g) = crit.Mse(d, d, kLinearGrid[g], 0, kappa).transpose();
    }
  }
  for (int j = 0; j < d; ++j) {
    for (int kp = 0; kp < 2; ++kp) {
      for (int g = 0; g < kLin; ++g) {
        if (sse_kappa[kp](g, j) < best(j)) {
          best(j) = sse_kappa[kp](g, j);
          kappa_best(j) = kp;
          choice[j] = ForecastChoice{kp == 1, kLinearGrid[g], 0, 0};
        }
      }
    }
    sse_by_lambda.col(j) = sse_kappa[static_cast<int>(kappa_best(j))].col(j);
  }
  // The linear candidate: the least-squares AR on the same state (the smallest ridge, shrunk
  // toward the mean: at a relative ridge of 1e-9 the two shrinkage targets give the same fit).
  std::vector<ForecastChoice> linear_choice(d);
  for (int j = 0; j < d; ++j)
    linear_choice[j] = ForecastChoice{false, kLinearGrid[0], 0, std::sqrt(sse_kappa[0](0, j) / 2)};
  // Stage 2: the kernel block at each lambda_kernel, lambda_linear the best over the scored
  // components (one factorization per grid point and fold serves every component).
  int g_star = 0;
  {
    double best_sum = std::numeric_limits<double>::infinity();
    for (int g = 0; g < kLin; ++g) {
      const double sum = sse_by_lambda.row(g).tail(scored).sum();
      if (sum < best_sum) {
        best_sum = sum;
        g_star = g;
      }
    }
  }
  if (q > d) {
    for (double lk : kKernelGrid) {
      const VectorXd sse = crit.Mse(d, q, kLinearGrid[g_star], lk, kappa_best);
      for (int j = 0; j < d; ++j) {
        if (sse(j) < best(j)) {
          best(j) = sse(j);
          choice[j].lambda_linear = kLinearGrid[g_star];
          choice[j].lambda_kernel = lk;
        }
      }
    }
  }
  const double n_all = total.n;
  for (int j = 0; j < d; ++j) choice[j].heldout_rmse = std::sqrt(best(j) / 2);

  // Refit every distinct chosen candidate on both folds; each component takes its column. The
  // linear part alone: stage 1's choices, refitted the same way.
  const Centered all = Center(total);
  absl::StatusOr<Coefficients> full = Build(all, s, choice, kappa_best, q);
  if (!full.ok()) return full.status();
  absl::StatusOr<Coefficients> lin = Build(all, s, linear_choice, VectorXd::Zero(d), q);
  if (!lin.ok()) return lin.status();
  ForecastModel m;
  m.features_ = s.features;
  m.choices_ = choice;
  m.pairs_ = n_all;
  m.intercept_ = std::move(full->intercept);
  m.coef_ = std::move(full->coef);
  auto linear = std::make_shared<ForecastModel>();
  linear->features_ = s.features;
  linear->choices_ = std::move(linear_choice);
  linear->pairs_ = n_all;
  linear->intercept_ = std::move(lin->intercept);
  linear->coef_ = std::move(lin->coef);
  linear->kernel_ = false;
  m.linear_ = std::move(linear);
  return m;
}

absl::Status ForecastRegression::Options::Validate() const {
  if (dim < 1) return absl::InvalidArgumentError(absl::StrCat("Violated constraint: dim >= 1 (got ", dim, ")"));
  if (scored_dims < 0 || scored_dims > dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("Violated constraint: 0 <= scored_dims <= dim (got ", scored_dims, ")"));
  }
  if (block_length < 1 || batch_size < 1 || folds < 2 || folds > 16) {
    return absl::InvalidArgumentError("Violated constraint: block_length >= 1, batch_size >= 1, 2 <= folds <= 16");
  }
  if (first_fit < 8 || fit_every < first_fit) {
    return absl::InvalidArgumentError("Violated constraint: first_fit >= 8 and fit_every >= first_fit");
  }
  if (skill_horizon < 1 || skill_horizon > kMaxSkillHorizon) {
    return absl::InvalidArgumentError(
        absl::StrCat("Violated constraint: 1 <= skill_horizon <= ", kMaxSkillHorizon, " (got ", skill_horizon, ")"));
  }
  return absl::OkStatus();
}

ForecastRegression::ForecastRegression(std::shared_ptr<const FeatureMap> features, const Options& options)
    : options_(options), features_(std::move(features)) {
  if (!options_.Validate().ok() || !features_ || features_->kind() != FeatureMap::Kind::kRff ||
      features_->input_dim() != options_.dim) {
    std::abort();  // a programming error: the owner validates
  }
  const int d = options_.dim;
  folds_.resize(options_.folds);
  for (ForecastFoldSums& f : folds_) {
    f.sz = VectorXd::Zero(q());
    f.sy = VectorXd::Zero(d);
    f.syy = VectorXd::Zero(d);
    f.szz = MatrixXd::Zero(q(), q());
    f.szy = MatrixXd::Zero(q(), d);
  }
  ubuf_.resize(options_.batch_size, q());
  vbuf_.resize(options_.batch_size, d);
  next_fit_ = options_.first_fit;
  skill_.scored_dims = options_.scored_dims > 0 ? options_.scored_dims : d;
  xrow_.resize(1, d);
  phirow_.resize(1, features_->num_features());
  pred_.resize(d);
  lin_pred_.resize(d);
  roll_a_.resize(d);
  roll_b_.resize(d);
  roll_phi_.resize(features_->num_features());
  prev_y_ = VectorXd::Zero(d);
  SizeSkillState();
}

void ForecastRegression::SizeSkillState() {
  horizons_.assign(options_.skill_horizon, ForecastHorizonSkill{});
  slot_origin_.assign(Slots(), -1);
  slot_pred_ = RowMatrixXd::Zero(static_cast<int64_t>(Slots()) * SlotRows(), skill_.scored_dims);
}

void ForecastRegression::ScoreCandidates(const double* x, const double* y) {
  const int d = options_.dim;
  const int sd = skill_.scored_dims;
  const int h_max = options_.skill_horizon;
  // One trajectory: x of this pair is y of the previous one; otherwise pending rollouts are void.
  bool contiguous = has_prev_;
  for (int j = 0; j < d && contiguous; ++j) contiguous = x[j] == prev_y_(j);
  if (!contiguous) std::fill(slot_origin_.begin(), slot_origin_.end(), -1);
  // Horizons h > 1: the rollouts started h - 1 pairs ago predict this pair's y at step h.
  for (int k = 0; k < Slots(); ++k) {
    if (slot_origin_[k] < 0) continue;
    const int64_t h = samples_ - slot_origin_[k] + 1;
    if (h < 2 || h > h_max) continue;
    ForecastHorizonSkill& hs = horizons_[h - 1];
    const double* reg = SlotPred(k, 0, static_cast<int>(h));
    const double* lin = SlotPred(k, 1, static_cast<int>(h));
    const double* per = SlotPred(k, 2, 1);
    ++hs.pairs;
    double diff = 0;
    for (int i = 0; i < sd; ++i) {
      const double yi = y[d - sd + i];
      const double er = (yi - reg[i]) * (yi - reg[i]), el = (yi - lin[i]) * (yi - lin[i]);
      hs.sse[0] += er;
      hs.sse[1] += el;
      hs.sse[2] += (yi - per[i]) * (yi - per[i]);
      diff += er - el;
    }
    hs.diff_sq += diff * diff;
  }
  has_prev_ = true;
  for (int j = 0; j < d; ++j) prev_y_(j) = y[j];
  if (!fit_ || !fit_->linear_) return;
  // h = 1 on every pair: pred_ holds the regression's forecast already.
  const ForecastModel& lin = *fit_->linear_;
  lin.Predict(x, lin_pred_.data(), roll_phi_.data());
  ForecastHorizonSkill& h1 = horizons_[0];
  ++h1.pairs;
  double diff = 0;
  for (int j = d - sd; j < d; ++j) {
    const double er = (y[j] - pred_(j)) * (y[j] - pred_(j)), el = (y[j] - lin_pred_(j)) * (y[j] - lin_pred_(j));
    h1.sse[0] += er;
    h1.sse[1] += el;
    h1.sse[2] += (y[j] - x[j]) * (y[j] - x[j]);
    diff += er - el;
  }
  h1.diff_sq += diff * diff;
  if (h_max == 1 || samples_ % SkillStride() != 0) return;
  // A new origin: both models iterated h_max steps from x (step 1 is pred_ / lin_pred_).
  const int k = static_cast<int>((samples_ / SkillStride()) % Slots());
  slot_origin_[k] = samples_;
  const ForecastModel* models[2] = {&*fit_, &lin};
  const VectorXd* first[2] = {&pred_, &lin_pred_};
  for (int m = 0; m < 2; ++m) {
    roll_a_ = *first[m];
    for (int h = 1; h <= h_max; ++h) {
      if (h > 1) {
        models[m]->Predict(roll_a_.data(), roll_b_.data(), roll_phi_.data());
        roll_a_.swap(roll_b_);
      }
      double* out = SlotPred(k, m, h);
      for (int i = 0; i < sd; ++i) out[i] = roll_a_(d - sd + i);
    }
  }
  double* per = SlotPred(k, 2, 1);
  for (int i = 0; i < sd; ++i) per[i] = x[d - sd + i];
}

void ForecastRegression::FlushInto(ForecastFoldSums& f, const RowMatrixXd& u, const RowMatrixXd& v, int rows) {
  if (rows == 0) return;
  const auto ub = u.topRows(rows);
  const auto vb = v.topRows(rows);
  f.n += rows;
  f.sz += ub.colwise().sum().transpose();
  f.sy += vb.colwise().sum().transpose();
  f.syy += vb.cwiseProduct(vb).colwise().sum().transpose();
  f.szz.selfadjointView<Eigen::Lower>().rankUpdate(ub.transpose());
  f.szy.noalias() += ub.transpose() * vb;
}

void ForecastRegression::Flush() {
  FlushInto(folds_[buffer_fold_], ubuf_, vbuf_, buffered_);
  buffered_ = 0;
}

void ForecastRegression::Observe(const double* x, const double* y) {
  const int d = options_.dim;
  const int n = features_->num_features();
  for (int j = 0; j < d; ++j) xrow_(0, j) = x[j];
  features_->Project(xrow_, phirow_);
  features_->Activate(phirow_.data());
  // Test, then train.
  if (fit_) {
    pred_ = fit_->intercept_;
    pred_.noalias() += fit_->coef_.topRows(d).transpose() * xrow_.row(0).transpose();
    pred_.noalias() += fit_->coef_.bottomRows(n).transpose() * phirow_.row(0).transpose();
    for (int j = d - skill_.scored_dims; j < d; ++j) {
      skill_.sse += (y[j] - pred_(j)) * (y[j] - pred_(j));
      skill_.sse_persistence += (y[j] - x[j]) * (y[j] - x[j]);
    }
    ++skill_.pairs;
  }
  ScoreCandidates(x, y);
  if (samples_ == 0) {
    z0_.resize(q());
    z0_.head(d) = xrow_.row(0).transpose();
    z0_.tail(n) = phirow_.row(0).transpose();
  }
  const int fold = FoldOf(samples_);
  if (buffered_ > 0 && fold != buffer_fold_) Flush();
  buffer_fold_ = fold;
  for (int j = 0; j < d; ++j) {
    ubuf_(buffered_, j) = x[j] - z0_(j);
    vbuf_(buffered_, j) = y[j] - z0_(j);
  }
  for (int k = 0; k < n; ++k) ubuf_(buffered_, d + k) = phirow_(0, k) - z0_(d + k);
  ++buffered_;
  ++samples_;
  if (buffered_ == options_.batch_size) Flush();
  if (samples_ == next_fit_) {
    next_fit_ =
        samples_ < options_.fit_every ? std::min(2 * samples_, options_.fit_every) : samples_ + options_.fit_every;
    Refit();
  }
}

void ForecastRegression::Refit() {
  ++refits_;
  Flush();
  // The forward segment: the pairs since the previous refit (see Criterion).
  ForecastFoldSums total = folds_[0];
  for (size_t f = 1; f < folds_.size(); ++f) total = Sum(total, folds_[f]);
  prefix_ = std::move(last_);
  last_ = std::move(total);
  absl::StatusOr<ForecastModel> m = FitForecast(Snapshot());
  // Too few pairs in a fold (a block longer than the first refit): keep the previous fit.
  if (m.ok()) fit_ = *std::move(m);
}

ForecastMomentsSnapshot ForecastRegression::Snapshot() const {
  ForecastMomentsSnapshot s;
  s.dim = options_.dim;
  s.scored_dims = options_.scored_dims;
  s.features = features_;
  s.z0 = z0_.size() > 0 ? z0_ : VectorXd::Zero(q());
  s.folds = folds_;
  if (buffered_ > 0) FlushInto(s.folds[buffer_fold_], ubuf_, vbuf_, buffered_);
  // The forward segment's training data: the sums at the second-to-last refit; before a second
  // refit, between refits (a refresh), the first refit's, so that a short stream (64..127 pairs)
  // gets a forward check too. At a refit last_ is the total, which leaves no forward pairs.
  if (prefix_) {
    s.prefix = prefix_;
  } else if (last_) {
    s.prefix = last_;
  }
  for (ForecastFoldSums& f : s.folds) {
    MatrixXd full = f.szz.selfadjointView<Eigen::Lower>();
    f.szz = std::move(full);
  }
  if (s.prefix) {
    MatrixXd full = s.prefix->szz.selfadjointView<Eigen::Lower>();
    s.prefix->szz = std::move(full);
  }
  s.samples = samples_;
  s.skill = skill_;
  s.horizons = horizons_;
  return s;
}

}  // namespace cmestream
