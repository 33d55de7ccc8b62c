// Simulators against closed forms and invariants.
#include <cmath>

#include <gtest/gtest.h>

#include "core/systems/duffing.h"

namespace cmestream::systems {
namespace {

double Energy(const Eigen::Vector2d& s) { return 0.5 * s[1] * s[1] - 0.5 * s[0] * s[0] + 0.25 * std::pow(s[0], 4); }

TEST(Duffing, UndampedFlowConservesEnergyAndFixedPointsStay) {
  DuffingOptions o;
  o.delta = 0;
  const Eigen::Vector2d s(0.3, 1.1);
  const Eigen::Vector2d f = DuffingFlow(s, 10.0, o);
  EXPECT_NEAR(Energy(f), Energy(s), 1e-7);
  const DuffingOptions d;  // damped: equilibria are fixed points
  EXPECT_NEAR((DuffingFlow({1, 0}, 5.0, d) - Eigen::Vector2d(1, 0)).norm(), 0, 1e-12);
  EXPECT_NEAR((DuffingFlow({0, 0}, 5.0, d)).norm(), 0, 1e-12);
  // Damping dissipates: dE/dt = -delta v^2.
  EXPECT_LT(Energy(DuffingFlow(s, 1.0, d)), Energy(s));
}

TEST(Duffing, LinearizationNearTheFocusMatchesTheClosedForm) {
  // Near (1,0): u'' + delta u' + 2 u = 0 (beta + 3 alpha = 2). Closed form for u(0)=e, u'(0)=0.
  const DuffingOptions o;
  const double e = 1e-5, t = 1.0;
  const double wd = std::sqrt(2.0 - 0.0625);  // sqrt(w0^2 - (delta/2)^2)
  const double u = e * std::exp(-0.25 * t) * (std::cos(wd * t) + 0.25 / wd * std::sin(wd * t));
  EXPECT_NEAR(DuffingFlow({1 + e, 0}, t, o)[0] - 1, u, 1e-9);
}

TEST(Duffing, PairsAreTheFlowOverDtAndDeterministic) {
  const auto a = SimulateDuffing(100, 5), b = SimulateDuffing(100, 5), c = SimulateDuffing(100, 6);
  EXPECT_EQ(a.x, b.x);
  EXPECT_NE(a.x, c.x);
  EXPECT_LE(a.x.cwiseAbs().maxCoeff(), 2.0);
  for (int i = 0; i < 100; ++i) {
    const Eigen::Vector2d f = DuffingFlow(a.x.row(i).transpose(), 0.25);
    EXPECT_NEAR((f - a.y.row(i).transpose()).norm(), 0, 1e-12);
  }
}

TEST(Duffing, BasinsOfKnownPoints) {
  RowMatrixXd p(4, 2);
  p << 1.2, 0.0,   // inside the right well
      -0.7, 0.1,   // inside the left well
      0.1, 1.0,    // pushed right past the saddle: energy 0.5, decays into one well
      -1.9, -1.9;  // far corner
  const Eigen::VectorXi b = DuffingBasin(p);
  EXPECT_EQ(b[0], 1);
  EXPECT_EQ(b[1], -1);
  // The basin is the sign of q once E < 0: check against a direct long integration.
  for (int i = 2; i < 4; ++i) {
    const Eigen::Vector2d end = DuffingFlow(p.row(i).transpose(), 200.0);
    EXPECT_EQ(b[i], end[0] > 0 ? 1 : -1);
    EXPECT_NEAR(std::abs(end[0]), 1.0, 1e-6);
  }
  // Symmetry (q,p) -> (-q,-p) swaps the basins.
  const Eigen::VectorXi bm = DuffingBasin(-p);
  EXPECT_EQ(bm, (-b).eval());
}

TEST(DoubleWell, StationaryStatisticsMatchTheBoltzmannDensity) {
  // pi(x) ∝ exp(-beta (x^2-1)^2); compare E[x^2] by quadrature with a long trajectory.
  DoubleWellOptions o;
  const auto t = SimulateDoubleWell(200000, 3, o);
  double z = 0, m2 = 0;
  for (double x = -3; x <= 3; x += 1e-4) {
    const double w = std::exp(-o.beta * std::pow(x * x - 1, 2));
    z += w;
    m2 += w * x * x;
  }
  const double e_x2 = t.x.array().square().mean();
  EXPECT_NEAR(e_x2, m2 / z, 0.02);
  // Pairs chain: y_i = x_{i+1}; both wells visited.
  EXPECT_EQ(t.y(10, 0), t.x(11, 0));
  EXPECT_GT((t.x.array() > 0.5).count(), 20000);
  EXPECT_GT((t.x.array() < -0.5).count(), 20000);
}

}  // namespace
}  // namespace cmestream::systems
