#include "core/systems/soft_aggregation_chain.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/splitmix.h"

namespace cmestream::systems {
namespace {

// splitmix64 (portable: the same seed gives the same chain everywhere), plus the gamma and
// integer draws the chain needs.
class Rng : public internal::SplitMix {
 public:
  explicit Rng(uint64_t seed) : SplitMix(seed ^ 0x6a09e667f3bcc909ULL) {}
  // Marsaglia-Tsang gamma(shape, 1); shape < 1 via the boost U^{1/shape}.
  double Gamma(double shape) {
    if (shape < 1) return Gamma(shape + 1) * std::pow(std::max(Uniform(), 1e-300), 1.0 / shape);
    const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
    for (;;) {
      double x, v;
      do {
        x = Normal();
        v = 1.0 + c * x;
      } while (v <= 0);
      v = v * v * v;
      const double u = Uniform();
      if (u < 1 - 0.0331 * x * x * x * x) return d * v;
      if (std::log(std::max(u, 1e-300)) < 0.5 * x * x + d * (1 - v + std::log(v))) return d * v;
    }
  }
  int Below(int n) { return static_cast<int>(Uniform() * n) % n; }
};

void DirichletRows(MatrixXd& m, double alpha, Rng& rng) {
  for (int i = 0; i < m.rows(); ++i) {
    for (int k = 0; k < m.cols(); ++k) m(i, k) = rng.Gamma(alpha);
    const double s = m.row(i).sum();
    if (s > 0) m.row(i) /= s;
    else m.row(i).setConstant(1.0 / m.cols());
  }
}

VectorXd Stationary(const MatrixXd& u, const MatrixXd& v) {
  // Power iteration with the factored step pi <- V (U^T pi), O(p r) per step; P is positive on
  // the non-anchor columns so this contracts quickly. Aperiodicity is not needed for the
  // Cesaro-averaged fixed point, but P has a positive column block, so plain iteration works.
  const int64_t p = u.rows();
  VectorXd pi = VectorXd::Constant(p, 1.0 / p);
  for (int it = 0; it < 100000; ++it) {
    VectorXd next = v * (u.transpose() * pi);
    next /= next.sum();
    const double diff = (next - pi).cwiseAbs().sum();
    pi = next;
    if (diff < 1e-15) break;
  }
  return pi;
}

}  // namespace

absl::Status SoftAggregationChainOptions::Validate() const {
  auto bad = [](const std::string& s) { return absl::InvalidArgumentError("Violated constraint: " + s); };
  if (states < 2) return bad(absl::StrCat("states >= 2; got ", states));
  if (meta_states < 1 || meta_states > states)
    return bad(absl::StrCat("1 <= meta_states <= states; got ", meta_states));
  if (!hard) {
    if (anchors_per_meta < 1) return bad(absl::StrCat("anchors_per_meta >= 1; got ", anchors_per_meta));
    if (int64_t{anchors_per_meta} * meta_states > states) {
      return bad(absl::StrCat("meta_states * anchors_per_meta <= states; got ", meta_states, " * ", anchors_per_meta,
                              " > ", states));
    }
  }
  if (!(non_anchor_floor >= 0 && non_anchor_floor <= 1))
    return bad(absl::StrCat("0 <= non_anchor_floor <= 1; got ", non_anchor_floor));
  if (!(u_concentration > 0 && std::isfinite(u_concentration)))
    return bad(absl::StrCat("u_concentration > 0; got ", u_concentration));
  if (!(anchor_weight > 0 && std::isfinite(anchor_weight)))
    return bad(absl::StrCat("anchor_weight > 0; got ", anchor_weight));
  return absl::OkStatus();
}

absl::StatusOr<SoftAggregationChain> MakeSoftAggregationChain(const SoftAggregationChainOptions& o) {
  if (absl::Status s = o.Validate(); !s.ok()) return s;
  const int p = o.states, r = o.meta_states;
  Rng rng(o.seed);
  SoftAggregationChain c;
  c.anchors.assign(r, {});
  std::vector<int> perm(p);
  std::iota(perm.begin(), perm.end(), 0);
  for (int i = p - 1; i > 0; --i) std::swap(perm[i], perm[rng.Below(i + 1)]);  // Fisher-Yates
  auto entry = [&] { return o.non_anchor_floor + (1 - o.non_anchor_floor) * rng.Uniform(); };
  c.V = MatrixXd::Zero(p, r);
  c.U.resize(p, r);
  if (o.hard) {
    c.block.assign(p, 0);
    for (int t = 0; t < p; ++t) c.block[perm[t]] = static_cast<int>(int64_t{t} * r / p);  // sizes ~ p/r
    MatrixXd a(r, r);
    DirichletRows(a, o.u_concentration, rng);
    for (int i = 0; i < p; ++i) {
      c.V(i, c.block[i]) = entry();
      c.U.row(i) = a.row(c.block[i]);
      c.anchors[c.block[i]].push_back(i);
    }
  } else {
    for (int t = 0; t < p; ++t) {
      const int j = perm[t];
      if (t < r * o.anchors_per_meta) {
        const int k = t % r;
        c.V(j, k) = o.anchor_weight * entry();
        c.anchors[k].push_back(j);
      } else {
        for (int k = 0; k < r; ++k) c.V(j, k) = entry();
      }
    }
    DirichletRows(c.U, o.u_concentration, rng);
  }
  for (auto& a : c.anchors) std::sort(a.begin(), a.end());
  for (int k = 0; k < r; ++k) c.V.col(k) /= c.V.col(k).sum();
  c.P = c.U * c.V.transpose();
  c.stationary = Stationary(c.U, c.V);
  return c;
}

DiscreteTransitions SimulateSoftAggregationChain(const SoftAggregationChain& c, int64_t n, uint64_t seed) {
  const int p = c.states(), r = c.meta_states();
  Rng rng(seed);
  // Cumulative tables: U rows (r entries, linear scan) and V columns (binary search).
  MatrixXd ucum(p, r), vcum(p, r);
  for (int i = 0; i < p; ++i) {
    double s = 0;
    for (int k = 0; k < r; ++k) ucum(i, k) = (s += c.U(i, k));
  }
  for (int k = 0; k < r; ++k) {
    double s = 0;
    for (int j = 0; j < p; ++j) vcum(j, k) = (s += c.V(j, k));
  }
  auto draw_state = [&](int k) {
    const double u = rng.Uniform() * vcum(p - 1, k);
    const double* col = vcum.col(k).data();
    const int j = static_cast<int>(std::upper_bound(col, col + p, u) - col);
    return std::min(j, p - 1);
  };
  // X_0 ~ pi.
  int x = 0;
  {
    const double u = rng.Uniform();
    double s = 0;
    for (x = 0; x < p - 1; ++x)
      if ((s += c.stationary(x)) > u) break;
  }
  DiscreteTransitions t;
  t.from.resize(n);
  t.to.resize(n);
  for (int64_t s = 0; s < n; ++s) {
    const double u = rng.Uniform() * ucum(x, r - 1);
    int z = 0;
    while (z < r - 1 && ucum(x, z) <= u) ++z;
    const int y = draw_state(z);
    t.from[s] = x;
    t.to[s] = y;
    x = y;
  }
  return t;
}

MatrixXd CountTransitions(const DiscreteTransitions& t, int p) {
  MatrixXd n = MatrixXd::Zero(p, p);
  for (size_t s = 0; s < t.from.size(); ++s) n(t.from[s], t.to[s]) += 1;
  return n;
}

MatrixXd ExpectedCounts(const SoftAggregationChain& c, double n) { return n * (c.stationary.asDiagonal() * c.P); }

std::string SoftAggregationChain::GroundTruthJson() const {
  auto matrix = [](const MatrixXd& m) {
    std::string s = "[";
    for (int i = 0; i < m.rows(); ++i) {
      absl::StrAppend(&s, i ? "," : "", "[");
      for (int k = 0; k < m.cols(); ++k) absl::StrAppend(&s, k ? "," : "", absl::StrFormat("%.17g", m(i, k)));
      absl::StrAppend(&s, "]");
    }
    return s + "]";
  };
  std::string s = absl::StrCat("{\"states\":", states(), ",\"meta_states\":", meta_states(), ",\"U\":", matrix(U),
                               ",\"V\":", matrix(V), ",\"anchors\":[");
  for (size_t k = 0; k < anchors.size(); ++k) {
    absl::StrAppend(&s, k ? "," : "", "[");
    for (size_t a = 0; a < anchors[k].size(); ++a) absl::StrAppend(&s, a ? "," : "", anchors[k][a]);
    absl::StrAppend(&s, "]");
  }
  return s + "]}";
}

}  // namespace cmestream::systems
