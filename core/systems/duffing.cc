// Simulators with known ground truth (see duffing.h).
#include "core/systems/duffing.h"

#include <cmath>
#include <random>

namespace cmestream::systems {
namespace {

// Right-hand side of the first-order Duffing system (position q, velocity p).
inline Eigen::Vector2d DuffingRhs(const Eigen::Vector2d& s, const DuffingOptions& o) {
  return {s[1], -o.delta * s[1] - s[0] * (o.beta + o.alpha * s[0] * s[0])};
}

inline Eigen::Vector2d Rk4Step(const Eigen::Vector2d& s, double h, const DuffingOptions& o) {
  const Eigen::Vector2d k1 = DuffingRhs(s, o);
  const Eigen::Vector2d k2 = DuffingRhs(s + 0.5 * h * k1, o);
  const Eigen::Vector2d k3 = DuffingRhs(s + 0.5 * h * k2, o);
  const Eigen::Vector2d k4 = DuffingRhs(s + h * k3, o);
  return s + (h / 6.0) * (k1 + 2 * k2 + 2 * k3 + k4);
}

// Mechanical energy; non-increasing along the damped flow (delta >= 0).
inline double DuffingEnergy(const Eigen::Vector2d& s, const DuffingOptions& o) {
  const double q2 = s[0] * s[0];
  return 0.5 * s[1] * s[1] + 0.5 * o.beta * q2 + 0.25 * o.alpha * q2 * q2;
}

}  // namespace

Eigen::Vector2d DuffingFlow(const Eigen::Vector2d& state, double t, const DuffingOptions& options) {
  // Step size dt/substeps, as in SimulateDuffing, so Flow(x, dt) reproduces the sampled pairs.
  const double h_nominal = options.dt / std::max(1, options.substeps);
  const int steps = std::max(1, static_cast<int>(std::ceil(std::abs(t) / h_nominal - 1e-9)));
  const double h = t / steps;
  Eigen::Vector2d s = state;
  for (int i = 0; i < steps; ++i) s = Rk4Step(s, h, options);
  return s;
}

Transitions SimulateDuffing(int64_t n, uint64_t seed, const DuffingOptions& options) {
  Transitions out = Transitions::Sized(n, 2);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uni(-options.box, options.box);
  for (int64_t i = 0; i < n; ++i) {
    const double q = uni(rng);
    const double p = uni(rng);
    const Eigen::Vector2d s(q, p);
    const Eigen::Vector2d f = DuffingFlow(s, options.dt, options);
    out.x(i, 0) = q;
    out.x(i, 1) = p;
    out.y(i, 0) = f[0];
    out.y(i, 1) = f[1];
  }
  return out;
}

Eigen::VectorXi DuffingBasin(const Eigen::Ref<const RowMatrixXd>& points, const DuffingOptions& options) {
  // With beta < 0 < alpha the saddle at the origin has energy 0 and the energy decays along
  // trajectories, so once E < 0 the state is trapped in the well on the side of sign(q): that
  // is the basin label. Points on the stable manifold of the saddle never get there; after
  // t_max they are labeled by sign(q) (a measure-zero set).
  const double h = 0.02;
  const double t_max = 400.0;
  const double e_saddle = 0.0;
  Eigen::VectorXi labels(points.rows());
  for (Eigen::Index i = 0; i < points.rows(); ++i) {
    Eigen::Vector2d s(points(i, 0), points(i, 1));
    double t = 0;
    while (t < t_max && DuffingEnergy(s, options) >= e_saddle - 1e-9) {
      s = Rk4Step(s, h, options);
      t += h;
    }
    labels[i] = s[0] >= 0 ? 1 : -1;
  }
  return labels;
}

Transitions SimulateDoubleWell(int64_t n, uint64_t seed, const DoubleWellOptions& options) {
  Transitions out = Transitions::Sized(n, 1);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  const int sub = std::max(1, options.substeps);
  const double h = options.dt / sub;
  const double noise = std::sqrt(2.0 * h / options.beta);
  double x = (rng() & 1) ? 1.0 : -1.0;  // start in a well
  auto advance = [&](double v) {
    for (int s = 0; s < sub; ++s) v += -4.0 * v * (v * v - 1.0) * h + noise * normal(rng);
    return v;
  };
  for (int i = 0; i < 100; ++i) x = advance(x);  // short burn-in
  for (int64_t i = 0; i < n; ++i) {
    const double next = advance(x);
    out.x(i, 0) = x;
    out.y(i, 0) = next;
    x = next;
  }
  return out;
}

}  // namespace cmestream::systems
