// Metastable diffusions and finite chains with known ground truth (see four_well.h).
#include "core/systems/four_well.h"

#include <algorithm>
#include <cmath>
#include <random>

#include <Eigen/Eigenvalues>

#include "core/common/random.h"

namespace cmestream::systems {
namespace {

constexpr double kPi = 3.14159265358979323846;

using internal::Uniform01;
using Normal = internal::BoxMullerNormal;

// Leading eigenvalues exp(tau mu_k) of the generator L f = -V' f' + beta^-1 f'' discretized as
// a birth–death chain on a uniform grid with rates (D/h^2) exp(-beta (V_{i±1} - V_i)/2),
// D = 1/beta. The chain is reversible w.r.t. exp(-beta V_i), so D^1/2 L D^-1/2 is a symmetric
// tridiagonal matrix with off-diagonal D/h^2 (the product of the two rates).
template <typename Potential>
VectorXd GeneratorEigenvalues(const Potential& v, double beta, double tau, int count, int grid, double half_width) {
  const int m = std::max(grid, 3);
  const double h = 2 * half_width / (m - 1);
  VectorXd pot(m);
  for (int i = 0; i < m; ++i) pot[i] = v(-half_width + i * h);
  const double d = 1.0 / beta;
  VectorXd diag = VectorXd::Zero(m);
  VectorXd off(m - 1);
  for (int i = 0; i + 1 < m; ++i) {
    const double up = d / (h * h) * std::exp(-beta * (pot[i + 1] - pot[i]) / 2);
    const double down = d / (h * h) * std::exp(-beta * (pot[i] - pot[i + 1]) / 2);
    diag[i] -= up;
    diag[i + 1] -= down;
    off[i] = std::sqrt(up * down);
  }
  Eigen::SelfAdjointEigenSolver<MatrixXd> es;
  es.computeFromTridiagonal(diag, off, Eigen::EigenvaluesOnly);
  const VectorXd& mu = es.eigenvalues();  // ascending
  const int k = std::min(count, m);
  VectorXd out(k);
  for (int l = 0; l < k; ++l) out[l] = std::exp(tau * std::min(0.0, mu[m - 1 - l]));
  return out;
}

int StepsPerLag(double tau, double dt) { return std::max(1, static_cast<int>(std::lround(tau / dt))); }

// Euler–Maruyama for dX = -grad V(X) dt + sqrt(2/beta) dW over one lag tau: `steps` steps of
// h = tau/steps (tau/dt rounded to a whole number of steps), each adding noise * N(0, 1) per
// coordinate. Shared by the 1-D and the 2-D diffusion so both discretize alike.
struct EulerMaruyamaLag {
  EulerMaruyamaLag(double tau, double dt, double beta)
      : steps(StepsPerLag(tau, dt)), h(tau / steps), noise(std::sqrt(2.0 * h / beta)) {}

  int steps;
  double h;
  double noise;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// 1-D four-well

double FourWellPotential(double x, const FourWellOptions& o) {
  const double c = std::cos(kPi * x);
  const double s = x / 2;
  const double s2 = s * s, s4 = s2 * s2;
  return o.barrier * c * c + o.confinement * s4 * s4;
}

double FourWellGradient(double x, const FourWellOptions& o) {
  // d/dx [b cos^2(pi x)] = -b pi sin(2 pi x); d/dx [c (x/2)^8] = 4 c (x/2)^7.
  const double s = x / 2;
  const double s3 = s * s * s;
  return -o.barrier * kPi * std::sin(2 * kPi * x) + 4 * o.confinement * s3 * s3 * s;
}

Transitions SimulateFourWell(int64_t n, uint64_t seed, const FourWellOptions& o) {
  Transitions out = Transitions::Sized(n, 1);
  std::mt19937_64 rng(seed);
  Normal normal;
  const EulerMaruyamaLag step(o.tau, o.dt, o.beta);
  double x = o.x0;
  auto advance = [&]() {
    for (int s = 0; s < step.steps; ++s) x += -FourWellGradient(x, o) * step.h + step.noise * normal(rng);
  };
  for (int b = 0; b < o.burn_in; ++b) advance();
  for (int64_t t = 0; t < n; ++t) {
    out.x(t, 0) = x;
    advance();
    out.y(t, 0) = x;
  }
  return out;
}

Eigen::Vector3d FourWellBarriers(const FourWellOptions& o) {
  Eigen::Vector3d tops;
  for (int b = 0; b < 3; ++b) {
    // Golden-section search for the maximum of V on [c - 0.4, c + 0.4], c = -1, 0, 1.
    double lo = (b - 1) - 0.4, hi = (b - 1) + 0.4;
    const double g = (std::sqrt(5.0) - 1) / 2;
    for (int it = 0; it < 200; ++it) {
      const double a = hi - g * (hi - lo), c = lo + g * (hi - lo);
      if (FourWellPotential(a, o) > FourWellPotential(c, o)) hi = c;
      else lo = a;
    }
    tops[b] = 0.5 * (lo + hi);
  }
  return tops;
}

Eigen::VectorXi FourWellIndex(const Eigen::Ref<const RowMatrixXd>& points, const FourWellOptions& o) {
  const Eigen::Vector3d tops = FourWellBarriers(o);
  Eigen::VectorXi idx(points.rows());
  for (Eigen::Index t = 0; t < points.rows(); ++t) {
    const double x = points(t, 0);
    idx[t] = (x >= tops[0]) + (x >= tops[1]) + (x >= tops[2]);
  }
  return idx;
}

VectorXd FourWellEigenvalues(int count, const FourWellOptions& o, int grid, double half_width) {
  return GeneratorEigenvalues([&](double x) { return FourWellPotential(x, o); }, o.beta, o.tau, count, grid,
                              half_width);
}

VectorXd FourWellStationaryDensity(const Eigen::Ref<const VectorXd>& x, const FourWellOptions& o) {
  // Normalize by a fine trapezoid integral over [-3, 3] (the density is negligible outside).
  const int m = 6001;
  double z = 0;
  for (int i = 0; i < m; ++i) {
    const double xi = -3.0 + 6.0 * i / (m - 1);
    z += (i == 0 || i == m - 1 ? 0.5 : 1.0) * std::exp(-o.beta * FourWellPotential(xi, o));
  }
  z *= 6.0 / (m - 1);
  VectorXd out(x.size());
  for (Eigen::Index i = 0; i < x.size(); ++i) out[i] = std::exp(-o.beta * FourWellPotential(x[i], o)) / z;
  return out;
}

// ---------------------------------------------------------------------------------------------
// 2-D multi-well

namespace {
inline double V1(double s, const MultiWell2dOptions& o) {
  const double c = std::cos(kPi * s);
  const double s2 = s * s, s4 = s2 * s2;
  return o.barrier * c * c + o.confinement * s4 * s4;
}
inline double DV1(double s, const MultiWell2dOptions& o) {
  const double s3 = s * s * s;
  return -o.barrier * kPi * std::sin(2 * kPi * s) + 8 * o.confinement * s3 * s3 * s;
}
}  // namespace

double MultiWell2dPotential(double x, double y, const MultiWell2dOptions& o) { return V1(x, o) + V1(y, o); }

Transitions SimulateMultiWell2d(int64_t n, uint64_t seed, const MultiWell2dOptions& o) {
  Transitions out = Transitions::Sized(n, 2);
  std::mt19937_64 rng(seed);
  Normal normal;
  const EulerMaruyamaLag step(o.tau, o.dt, o.beta);
  double x = o.x0, y = o.y0;
  auto advance = [&]() {
    for (int s = 0; s < step.steps; ++s) {
      const double nx = normal(rng), ny = normal(rng);
      x += -DV1(x, o) * step.h + step.noise * nx;
      y += -DV1(y, o) * step.h + step.noise * ny;
    }
  };
  for (int b = 0; b < o.burn_in; ++b) advance();
  for (int64_t t = 0; t < n; ++t) {
    out.x(t, 0) = x;
    out.x(t, 1) = y;
    advance();
    out.y(t, 0) = x;
    out.y(t, 1) = y;
  }
  return out;
}

Eigen::VectorXi MultiWell2dIndex(const Eigen::Ref<const RowMatrixXd>& points) {
  Eigen::VectorXi idx(points.rows());
  for (Eigen::Index t = 0; t < points.rows(); ++t) idx[t] = (points(t, 0) > 0) + 2 * (points(t, 1) > 0);
  return idx;
}

VectorXd MultiWell2dEigenvalues(int count, const MultiWell2dOptions& o, int grid, double half_width) {
  const int k1 = std::max(count, 2);
  const VectorXd e = GeneratorEigenvalues([&](double s) { return V1(s, o); }, o.beta, o.tau, k1, grid, half_width);
  std::vector<double> prod;
  for (int a = 0; a < e.size(); ++a)
    for (int b = 0; b < e.size(); ++b) prod.push_back(e[a] * e[b]);
  std::sort(prod.begin(), prod.end(), std::greater<double>());
  const int k = std::min<int>(count, static_cast<int>(prod.size()));
  return Eigen::Map<VectorXd>(prod.data(), k);
}

// ---------------------------------------------------------------------------------------------
// Finite chains

namespace {
// Dirichlet(alpha, ..., alpha) of size n via Gamma draws; alpha = 1 is uniform on the simplex
// (normalized exponentials), which needs no gamma sampler; other alphas use Marsaglia–Tsang.
VectorXd Dirichlet(int n, double alpha, std::mt19937_64& rng, Normal& normal) {
  VectorXd g(n);
  for (int i = 0; i < n; ++i) {
    if (alpha == 1.0) {
      g[i] = -std::log(1.0 - Uniform01(rng));
    } else {
      const double a = alpha < 1 ? alpha + 1 : alpha;
      const double d = a - 1.0 / 3, c = 1.0 / std::sqrt(9 * d);
      double v = 0;
      while (true) {
        const double z = normal(rng);
        v = 1 + c * z;
        if (v <= 0) continue;
        v = v * v * v;
        const double u = Uniform01(rng);
        if (std::log(u + 1e-300) < 0.5 * z * z + d - d * v + d * std::log(v)) break;
      }
      double x = d * v;
      if (alpha < 1) x *= std::pow(1.0 - Uniform01(rng), 1.0 / alpha);
      g[i] = x;
    }
    g[i] = std::max(g[i], 1e-300);
  }
  return g / g.sum();
}
}  // namespace

VectorXd StationaryDistribution(const MatrixXd& P) {
  const int p = static_cast<int>(P.rows());
  // Solve (P^T - I) pi = 0 with the last equation replaced by sum(pi) = 1.
  MatrixXd a = P.transpose() - MatrixXd::Identity(p, p);
  a.row(p - 1).setOnes();
  VectorXd rhs = VectorXd::Zero(p);
  rhs[p - 1] = 1;
  return a.colPivHouseholderQr().solve(rhs);
}

FiniteChain LowRankChain(int p, int r, uint64_t seed, double concentration) {
  std::mt19937_64 rng(seed);
  Normal normal;
  MatrixXd u(p, r), v(r, p);
  for (int i = 0; i < p; ++i) u.row(i) = Dirichlet(r, 1.0, rng, normal).transpose();
  for (int k = 0; k < r; ++k) v.row(k) = Dirichlet(p, concentration, rng, normal).transpose();
  FiniteChain c;
  c.P = u * v;
  c.pi = StationaryDistribution(c.P);
  return c;
}

FiniteChain LumpableBlockChain(const std::vector<int>& sizes, double stay, uint64_t seed) {
  const int k = static_cast<int>(sizes.size());
  int p = 0;
  for (int s : sizes) p += s;
  std::mt19937_64 rng(seed);
  Normal normal;
  FiniteChain c;
  c.blocks.resize(p);
  VectorXd w(p);
  for (int b = 0, start = 0; b < k; start += sizes[b], ++b) {
    c.blocks.segment(start, sizes[b]).setConstant(b);
    w.segment(start, sizes[b]) = Dirichlet(sizes[b], 1.0, rng, normal);
  }
  MatrixXd q = MatrixXd::Constant(k, k, k > 1 ? (1 - stay) / (k - 1) : 0.0);
  q.diagonal().setConstant(k > 1 ? stay : 1.0);
  c.P.resize(p, p);
  for (int i = 0; i < p; ++i)
    for (int j = 0; j < p; ++j) c.P(i, j) = q(c.blocks[i], c.blocks[j]) * w[j];
  c.pi = StationaryDistribution(c.P);
  return c;
}

std::vector<int> SampleChain(const MatrixXd& P, int64_t n, int start, uint64_t seed) {
  const int p = static_cast<int>(P.rows());
  MatrixXd cum(p, p);
  for (int i = 0; i < p; ++i) {
    double s = 0;
    for (int j = 0; j < p; ++j) cum(i, j) = (s += P(i, j));
  }
  std::mt19937_64 rng(seed);
  std::vector<int> out(n + 1);
  out[0] = start;
  for (int64_t t = 0; t < n; ++t) {
    const int i = out[t];
    const double u = Uniform01(rng) * cum(i, p - 1);
    int lo = 0, hi = p - 1;  // first j with cum(i, j) > u
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (cum(i, mid) > u) hi = mid;
      else lo = mid + 1;
    }
    out[t + 1] = lo;
  }
  return out;
}

}  // namespace cmestream::systems
