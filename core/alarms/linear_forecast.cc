#include "core/alarms/linear_forecast.h"

#include <algorithm>
#include <cmath>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "Eigen/Cholesky"
#include "absl/strings/str_cat.h"
#include "core/io/binary_io.h"
#include "core/io/field_io.h"

namespace cmestream {
namespace {

constexpr io::ObjectFormat kFormat = {io::Fourcc("LINF"), 2, "alarm forecast"};
constexpr int kMaxDim = 1 << 14;
constexpr double kRidge = 1e-3;
constexpr double kFloor = 1e-12;

// col[i] += s[b] * u[i + b * ld] for i in [0, len), the k terms b = 0, 1, ... of each
// element in order, each one fused multiply-add: element for element what k axpy passes over
// col (Eigen's, with FMA) compute, with col loaded and stored once instead of k times and 16
// elements of it kept in registers while the block's pairs meet them (the sums of a 512-channel
// forecast are 6 MB: docs/benchmarks.md "The alarms' forecast in registers").
void AddBlockProducts(double* col, int len, const double* u, int ld, const double* s, int k) {
  int i = 0;
#if defined(__AVX2__) && defined(__FMA__)
  for (; i + 16 <= len; i += 16) {
    __m256d a0 = _mm256_loadu_pd(col + i), a1 = _mm256_loadu_pd(col + i + 4);
    __m256d a2 = _mm256_loadu_pd(col + i + 8), a3 = _mm256_loadu_pd(col + i + 12);
    for (int b = 0; b < k; ++b) {
      const __m256d sb = _mm256_broadcast_sd(s + b);
      const double* ub = u + static_cast<int64_t>(b) * ld + i;
      a0 = _mm256_fmadd_pd(sb, _mm256_loadu_pd(ub), a0);
      a1 = _mm256_fmadd_pd(sb, _mm256_loadu_pd(ub + 4), a1);
      a2 = _mm256_fmadd_pd(sb, _mm256_loadu_pd(ub + 8), a2);
      a3 = _mm256_fmadd_pd(sb, _mm256_loadu_pd(ub + 12), a3);
    }
    _mm256_storeu_pd(col + i, a0);
    _mm256_storeu_pd(col + i + 4, a1);
    _mm256_storeu_pd(col + i + 8, a2);
    _mm256_storeu_pd(col + i + 12, a3);
  }
  for (; i + 4 <= len; i += 4) {
    __m256d a = _mm256_loadu_pd(col + i);
    for (int b = 0; b < k; ++b) {
      a = _mm256_fmadd_pd(_mm256_broadcast_sd(s + b), _mm256_loadu_pd(u + static_cast<int64_t>(b) * ld + i), a);
    }
    _mm256_storeu_pd(col + i, a);
  }
  for (; i < len; ++i) {
    double a = col[i];
    for (int b = 0; b < k; ++b) a = std::fma(s[b], u[static_cast<int64_t>(b) * ld + i], a);
    col[i] = a;
  }
#else
  // Without FMA, Eigen's axpy (a multiply, then an add): the bits of the pair-at-a-time passes.
  for (int b = 0; b < k; ++b) {
    Eigen::Map<VectorXd>(col, len) += s[b] * Eigen::Map<const VectorXd>(u + static_cast<int64_t>(b) * ld, len);
  }
#endif
}

// Rows of the block's scratch columns: a column's length rounded up to whole cache lines plus one
// line, so that the block's columns, read side by side, fall in different sets of the L1 cache
// (at 512 values, a stride of exactly 4 KB put all 16 in one set).
int PaddedRows(int rows) { return (rows + 7) / 8 * 8 + 8; }

}  // namespace

absl::Status LinearForecast::Options::Validate() const {
  if (dim < 1 || dim > kMaxDim)
    return absl::InvalidArgumentError(absl::StrCat("dim is ", dim, ", expected 1..", kMaxDim));
  if (outputs < 1 || outputs > dim) {
    return absl::InvalidArgumentError(absl::StrCat("outputs is ", outputs, ", expected 1..dim (", dim, ")"));
  }
  if (degree != 1 && degree != 3)
    return absl::InvalidArgumentError(absl::StrCat("degree is ", degree, ", expected 1 or 3"));
  if (regressors() > kMaxDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("degree x dim is ", regressors(), ", expected at most ", kMaxDim, " regressors"));
  }
  if (first_fit < 8) return absl::InvalidArgumentError(absl::StrCat("first_fit is ", first_fit, ", expected >= 8"));
  if (fit_every < first_fit) {
    return absl::InvalidArgumentError(
        absl::StrCat("fit_every is ", fit_every, ", expected >= first_fit (", first_fit, ")"));
  }
  return absl::OkStatus();
}

int64_t LinearForecast::FirstFitFor(int regressors) {
  return std::max<int64_t>(64, 2 * (static_cast<int64_t>(regressors) + 1));
}

LinearForecast::LinearForecast(const Options& options) : options_(options) {
  const int d = options.regressors(), c = options.outputs;
  x0_ = VectorXd::Zero(options.dim);
  y0_ = VectorXd::Zero(c);
  suu_ = MatrixXd::Zero(d, d);
  su_ = VectorXd::Zero(d);
  suv_ = MatrixXd::Zero(d, c);
  sv_ = VectorXd::Zero(c);
  intercept_ = VectorXd::Zero(c);
  coef_ = MatrixXd::Zero(d, c);
  u_ = MatrixXd::Zero(PaddedRows(d), kBlock);
  v_ = MatrixXd::Zero(PaddedRows(c), kBlock);
  next_fit_ = options.first_fit;
}

bool LinearForecast::Observe(const double* x, const double* y, double* residual) {
  bool scored = false;
  ObserveBlock(x, y, 1, residual, &scored);
  return scored;
}

int LinearForecast::ObserveBlock(const double* x, const double* y, int64_t n, double* residuals, bool* scored) {
  const int d = options_.dim, c = options_.outputs, p = options_.regressors();
  const int k = static_cast<int>(std::min<int64_t>({n, kBlock, next_fit_ - n_}));
  if (n_ == 0) {
    for (int j = 0; j < d; ++j) x0_[j] = x[j];
    for (int o = 0; o < c; ++o) y0_[o] = y[d - c + o];
  }
  for (int b = 0; b < k; ++b) {
    const double* xb = x + static_cast<int64_t>(b) * d;
    const double* y_new = y + static_cast<int64_t>(b) * d + (d - c);
    double* u = u_.col(b).data();
    for (int j = 0; j < d; ++j) u[j] = xb[j] - x0_[j];
    if (options_.degree == 3) {
      for (int j = 0; j < d; ++j) {
        u[d + j] = u[j] * u[j];
        u[2 * d + j] = u[d + j] * u[j];
      }
    }
    for (int o = 0; o < c; ++o) v_(o, b) = y_new[o] - y0_[o];
  }
  *scored = fitted_;
  if (fitted_) {
    // residual = y_new - (a + B^T u): a coefficient column meets the block's pairs in turn.
    for (int o = 0; o < c; ++o) {
      for (int b = 0; b < k; ++b) {
        const double y_new = y[static_cast<int64_t>(b) * d + (d - c) + o];
        residuals[static_cast<int64_t>(b) * c + o] = y_new - intercept_[o] - coef_.col(o).dot(u_.col(b).head(p));
      }
    }
  }
  // The sums, a column at a time and the pairs in order within it: per element the additions
  // of pair-at-a-time (Eigen's rank-1 update and outer product do the same per column).
  const int ld = static_cast<int>(u_.rows());
  double s[kBlock];
  for (int j = 0; j < p; ++j) {
    for (int b = 0; b < k; ++b) s[b] = u_(j, b);
    AddBlockProducts(suu_.col(j).data() + j, p - j, u_.data() + j, ld, s, k);
  }
  for (int o = 0; o < c; ++o) {
    for (int b = 0; b < k; ++b) s[b] = v_(o, b);
    AddBlockProducts(suv_.col(o).data(), p, u_.data(), ld, s, k);
  }
  for (int b = 0; b < k; ++b) {
    su_ += u_.col(b).head(p);
    sv_ += v_.col(b).head(c);
  }
  n_ += k;
  if (n_ == next_fit_) {
    Refit();
    next_fit_ = n_ < options_.fit_every ? std::min(2 * n_, options_.fit_every) : n_ + options_.fit_every;
  }
  return k;
}

void LinearForecast::Refit() {
  const double n = static_cast<double>(n_);
  const VectorXd mu = su_ / n;
  const VectorXd mv = sv_ / n;
  MatrixXd cuu = suu_.selfadjointView<Eigen::Lower>();
  cuu /= n;
  cuu.noalias() -= mu * mu.transpose();
  MatrixXd cuv = suv_ / n;
  cuv.noalias() -= mu * mv.transpose();
  const int d = options_.regressors();
  MatrixXd coef;
  if (options_.degree == 1) {
    const double floor = kFloor * std::max(cuu.trace(), 1e-300) / d;
    for (int j = 0; j < d; ++j) cuu(j, j) += kRidge * std::max(cuu(j, j), 0.0) + floor;
    Eigen::LDLT<MatrixXd> ldlt(cuu);
    coef = ldlt.solve(cuv);
    if (ldlt.info() != Eigen::Success) return;  // keep the previous fit
  } else {
    // Powers of a channel in volts and of one in millivolts differ in variance by 10^18 and
    // more: the floor relative to the trace would swamp the small ones. Solved in correlation
    // units instead, where the same ridge is lambda I and the floor 10^-12 I (a regressor
    // without variance gets coefficient 0).
    VectorXd scale(d);
    for (int j = 0; j < d; ++j) scale[j] = cuu(j, j) > 0 ? 1 / std::sqrt(cuu(j, j)) : 0.0;
    MatrixXd corr = scale.asDiagonal() * cuu * scale.asDiagonal();
    corr.diagonal().array() += kRidge + kFloor;
    Eigen::LDLT<MatrixXd> ldlt(corr);
    coef = scale.asDiagonal() * ldlt.solve(scale.asDiagonal() * cuv);
    if (ldlt.info() != Eigen::Success) return;
  }
  if (!coef.allFinite()) return;  // keep the previous fit
  coef_ = std::move(coef);
  intercept_ = y0_ + mv - coef_.transpose() * mu;
  fitted_ = true;
}

template <class Fields, class Self>
void LinearForecast::StateFields(Fields& f, Self& m) {
  f.Scalars("alarm forecast", io::Field("pairs", m.n_), io::Field("next fit", m.next_fit_));
  f.Matrices("alarm forecast", io::Matrix("x0", m.x0_), io::Matrix("y0", m.y0_), io::Matrix("suu", m.suu_),
             io::Matrix("su", m.su_), io::Matrix("suv", m.suv_), io::Matrix("sv", m.sv_));
  f.Bool("alarm forecast fitted", m.fitted_);
  f.Matrices("alarm forecast", io::Matrix("intercept", m.intercept_), io::Matrix("coef", m.coef_));
}

namespace {

// The options, in file order; version 1 (degree 1) ends before the degree.
constexpr auto kOptionFields = [](auto& f, auto& o, uint32_t version) {
  f.Scalars("alarm forecast", io::Field("dim", o.dim), io::Field("outputs", o.outputs),
            io::Field("first_fit", o.first_fit), io::Field("fit_every", o.fit_every));
  if (version >= 2) f.I32("alarm forecast degree", o.degree);
};

}  // namespace

void LinearForecast::Serialize(io::Writer& w) const {
  const uint32_t version = options_.degree == 1 ? 1 : kFormat.version;
  io::FieldWriter f(w, kFormat, version);
  kOptionFields(f, options_, version);
  StateFields(f, *this);
}

absl::StatusOr<LinearForecast> LinearForecast::Deserialize(io::Reader& r) {
  const auto [version, o] = io::ReadObjectStart<Options>(r, kFormat, kOptionFields);
  if (!r.ok()) return r.status();
  if (absl::Status s = o.Validate(); !s.ok()) return r.Fail(absl::StrCat("alarm forecast: ", s.message()));
  const uint64_t d = static_cast<uint64_t>(o.regressors()), c = static_cast<uint64_t>(o.outputs);
  if (!r.Expect(8 * (d * d + 2 * d * c), "alarm forecast sums")) return r.status();
  LinearForecast f(o);
  io::FieldReader fields(r);
  StateFields(fields, f);
  if (!r.EndObject(kFormat.name)) return r.status();
  if (f.n_ < 0 || f.next_fit_ <= f.n_) return r.Fail("alarm forecast: pair counters out of order");
  return f;
}

}  // namespace cmestream
