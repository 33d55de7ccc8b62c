// Random Fourier and one-hot feature maps (see feature_map.h).
#include "core/embedding/feature_map.h"

#include <cmath>
#include <random>

// glibc's vector math (x86-64 Linux); elsewhere the scalar cos.
#if defined(__x86_64__) && defined(__GLIBC__)
#define CMESTREAM_LIBMVEC 1
#include <immintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "core/common/random.h"

#if defined(CMESTREAM_LIBMVEC)
// glibc's vector math library (libmvec, linked by core/CMakeLists.txt): cos of 4 (AVX2 ABI) or
// 2 (SSE2 ABI) doubles per call, < 4 ulp, lane by lane. Resolved at load time to the widest
// implementation the CPU has, like the scalar cos.
extern "C" __m128d _ZGVbN2v_cos(__m128d);
#if defined(__AVX2__)
extern "C" __m256d _ZGVdN4v_cos(__m256d);
#endif
#endif

namespace cmestream {
namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;

using internal::Uniform01;
using Normal = internal::BoxMullerNormal;

}  // namespace

absl::StatusOr<FeatureMap> FeatureMap::Rff(int dim, int num_features, double sigma, uint64_t seed) {
  if (dim < 1) return absl::InvalidArgumentError(absl::StrCat("Violated constraint: dim >= 1 (got ", dim, ")"));
  if (num_features < 1) {
    return absl::InvalidArgumentError(absl::StrCat("Violated constraint: num_features >= 1 (got ", num_features, ")"));
  }
  if (!(sigma > 0) || !std::isfinite(sigma)) {
    return absl::InvalidArgumentError(absl::StrCat("Violated constraint: sigma > 0, finite (got ", sigma, ")"));
  }
  FeatureMap f;
  f.kind_ = Kind::kRff;
  f.dim_ = dim;
  f.n_ = num_features;
  f.sigma_ = sigma;
  f.seed_ = seed;
  f.omega_.resize(dim, num_features);
  f.beta_.resize(num_features);
  std::mt19937_64 rng(seed);
  Normal normal;
  // Column-by-column so that feature k depends only on the seed and k (not on N).
  for (int k = 0; k < num_features; ++k) {
    for (int a = 0; a < dim; ++a) f.omega_(a, k) = normal(rng) / sigma;
  }
  for (int k = 0; k < num_features; ++k) f.beta_[k] = kTwoPi * Uniform01(rng);
  return f;
}

absl::StatusOr<FeatureMap> FeatureMap::RffFrom(MatrixXd omega, VectorXd beta, double sigma, uint64_t seed) {
  if (omega.rows() < 1 || omega.cols() < 1 || beta.size() != omega.cols()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Violated constraint: omega d x N with d, N >= 1 and beta of size N (got ", omega.rows(), " x ",
                     omega.cols(), " and ", beta.size(), ")"));
  }
  if (!omega.allFinite() || !beta.allFinite()) {
    return absl::InvalidArgumentError("Violated constraint: omega and beta finite");
  }
  if (!(sigma > 0) || !std::isfinite(sigma)) {
    return absl::InvalidArgumentError(absl::StrCat("Violated constraint: sigma > 0, finite (got ", sigma, ")"));
  }
  FeatureMap f;
  f.kind_ = Kind::kRff;
  f.dim_ = static_cast<int>(omega.rows());
  f.n_ = static_cast<int>(omega.cols());
  f.sigma_ = sigma;
  f.seed_ = seed;
  f.omega_ = std::move(omega);
  f.beta_ = std::move(beta);
  return f;
}

absl::StatusOr<FeatureMap> FeatureMap::OneHot(int num_states) {
  if (num_states < 1) {
    return absl::InvalidArgumentError(absl::StrCat("Violated constraint: num_states >= 1 (got ", num_states, ")"));
  }
  FeatureMap f;
  f.kind_ = Kind::kOneHot;
  f.dim_ = 1;
  f.n_ = num_states;
  return f;
}

absl::Status FeatureMap::ValidatePoints(const Eigen::Ref<const RowMatrixXd>& points) const {
  if (points.cols() != input_dim()) {
    return absl::InvalidArgumentError(absl::StrCat("points have ", points.cols(), " columns, expected ", input_dim()));
  }
  for (Eigen::Index t = 0; t < points.rows(); ++t) {
    for (Eigen::Index a = 0; a < points.cols(); ++a) {
      const double v = points(t, a);
      if (!std::isfinite(v)) {
        return absl::InvalidArgumentError(absl::StrCat("point ", t, " has a non-finite coordinate"));
      }
      if (kind_ == Kind::kOneHot && (v != std::floor(v) || v < 0 || v >= n_)) {
        return absl::InvalidArgumentError(
            absl::StrCat("point ", t, ": state id ", v, " is not an integer in [0, ", n_, ")"));
      }
    }
  }
  return absl::OkStatus();
}

void FeatureMap::Map(const Eigen::Ref<const RowMatrixXd>& points, Eigen::Ref<RowMatrixXd> h) const {
  if (kind_ == Kind::kOneHot) {
    h.setZero();
    for (Eigen::Index t = 0; t < points.rows(); ++t) h(t, static_cast<Eigen::Index>(points(t, 0))) = 1.0;
    return;
  }
  Project(points, h);
  for (Eigen::Index t = 0; t < h.rows(); ++t) Activate(h.row(t).data());
}

void FeatureMap::Project(const Eigen::Ref<const RowMatrixXd>& points, Eigen::Ref<RowMatrixXd> a) const {
  a.noalias() = points * omega_;
}

void FeatureMap::Activate(double* row) const {
  // sqrt(2/N) cos(a + beta), every entry through the same vector cos, the tail padded into one
  // more vector: an entry's bits do not depend on its position (the trajectory feature reuse of
  // EmbeddingMoments compares recomputed features bit for bit). The cosines were a third of the
  // embedding moments' cost with the scalar cos (docs/benchmarks.md).
  const double scale = std::sqrt(2.0 / n_);
  int k = 0;
#if defined(CMESTREAM_LIBMVEC) && defined(__AVX2__)
  constexpr int kLanes = 4;
  for (; k + kLanes <= n_; k += kLanes) {
    const __m256d a = _mm256_add_pd(_mm256_loadu_pd(row + k), _mm256_loadu_pd(beta_.data() + k));
    _mm256_storeu_pd(row + k, _mm256_mul_pd(_mm256_set1_pd(scale), _ZGVdN4v_cos(a)));
  }
  if (k < n_) {
    alignas(32) double in[kLanes] = {0, 0, 0, 0}, out[kLanes];
    for (int j = k; j < n_; ++j) in[j - k] = row[j] + beta_[j];
    _mm256_store_pd(out, _ZGVdN4v_cos(_mm256_load_pd(in)));
    for (int j = k; j < n_; ++j) row[j] = scale * out[j - k];
  }
#elif defined(CMESTREAM_LIBMVEC)
  constexpr int kLanes = 2;
  for (; k + kLanes <= n_; k += kLanes) {
    const __m128d a = _mm_add_pd(_mm_loadu_pd(row + k), _mm_loadu_pd(beta_.data() + k));
    _mm_storeu_pd(row + k, _mm_mul_pd(_mm_set1_pd(scale), _ZGVbN2v_cos(a)));
  }
  if (k < n_) {
    alignas(16) double in[kLanes] = {row[k] + beta_[k], 0}, out[kLanes];
    _mm_store_pd(out, _ZGVbN2v_cos(_mm_load_pd(in)));
    row[k] = scale * out[0];
  }
#else
  for (; k < n_; ++k) row[k] = scale * std::cos(row[k] + beta_[k]);
#endif
}

RowMatrixXd FeatureMap::Map(const Eigen::Ref<const RowMatrixXd>& points) const {
  RowMatrixXd h(points.rows(), n_);
  Map(points, h);
  return h;
}

}  // namespace cmestream
