// Hidden-state simulators with ground truth (see hmm.h).
#include "core/systems/hmm.h"

#include <cmath>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace cmestream::systems {
namespace {

constexpr double kPi = 3.14159265358979323846;

absl::Status CheckStochastic(const MatrixXd& m, const char* name) {
  if (m.size() == 0) return absl::InvalidArgumentError(absl::StrCat(name, " is empty"));
  for (int i = 0; i < m.rows(); ++i) {
    if ((m.row(i).array() < 0).any() || std::abs(m.row(i).sum() - 1) > 1e-9) {
      return absl::InvalidArgumentError(
          absl::StrCat("Violated constraint: ", name, " row ", i, " must be a probability vector"));
    }
  }
  return absl::OkStatus();
}

VectorXd StationaryOf(const MatrixXd& t) {
  // Power iteration on the left: pi^T <- pi^T T. The chains here are ergodic and aperiodic.
  VectorXd pi = VectorXd::Constant(t.rows(), 1.0 / t.rows());
  for (int it = 0; it < 100000; ++it) {
    VectorXd next = t.transpose() * pi;
    next /= next.sum();
    const double change = (next - pi).lpNorm<1>();
    pi = next;
    if (change < 1e-15) break;
  }
  return pi;
}

int SampleCategorical(const Eigen::Ref<const VectorXd>& p, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  double u = uni(rng), c = 0;
  for (int i = 0; i < p.size(); ++i) {
    c += p[i];
    if (u < c) return i;
  }
  return static_cast<int>(p.size()) - 1;
}

void AppendMatrix(std::ostringstream& os, const MatrixXd& m) {
  os << "[";
  for (int i = 0; i < m.rows(); ++i) {
    os << (i ? "," : "") << "[";
    for (int j = 0; j < m.cols(); ++j) os << (j ? "," : "") << m(i, j);
    os << "]";
  }
  os << "]";
}

void AppendVector(std::ostringstream& os, const VectorXd& v) {
  os << "[";
  for (int i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  os << "]";
}

// A ground-truth object {"type":"<type>","<name>":<value>,...}, its doubles at 17 significant
// digits so that they read back exactly.
class GroundTruthJsonWriter {
 public:
  explicit GroundTruthJsonWriter(const char* type) {
    os_.precision(17);
    os_ << "{\"type\":\"" << type << "\"";
  }
  // The stream after `,"<name>":`, for a value the caller writes itself.
  std::ostringstream& Key(const char* name) {
    os_ << ",\"" << name << "\":";
    return os_;
  }
  void Matrix(const char* name, const MatrixXd& m) { AppendMatrix(Key(name), m); }
  void Vector(const char* name, const VectorXd& v) { AppendVector(Key(name), v); }
  std::string Close() {
    os_ << "}";
    return os_.str();
  }

 private:
  std::ostringstream os_;
};

}  // namespace

double Emission::Density(double x) const {
  if (kind == Kind::kGaussian) {
    const double z = (x - location) / scale;
    return std::exp(-0.5 * z * z) / (scale * std::sqrt(2 * kPi));
  }
  const double u = x - location;
  if (u <= 0) return 0;  // the shape < 1 pole at u = 0 is reported as 0 (measure zero)
  return std::exp((shape - 1) * std::log(u) - u / scale - shape * std::log(scale) - std::lgamma(shape));
}

double Emission::Mean() const { return kind == Kind::kGaussian ? location : location + shape * scale; }

// ---------------------------------------------------------------------------------------------
HmmMixture HmmMixture::Default() {
  HmmMixture h;
  const VectorXd pi = (VectorXd(3) << 1.0 / 6, 2.0 / 6, 3.0 / 6).finished();
  h.transition = 0.7 * MatrixXd::Identity(3, 3) + 0.3 * VectorXd::Ones(3) * pi.transpose();
  h.emissions = {{Emission::Kind::kGaussian, -3.0, 0.8, 1.0},
                 {Emission::Kind::kShiftedGamma, -0.5, 0.8, 1.5},
                 {Emission::Kind::kGaussian, 5.0, 1.0, 1.0}};
  return h;
}

absl::Status HmmMixture::Validate() const {
  const int k = num_states();
  if (k < 1 || transition.rows() != k || transition.cols() != k) {
    return absl::InvalidArgumentError("Violated constraint: transition must be k x k with k = #emissions >= 1");
  }
  if (auto s = CheckStochastic(transition, "transition"); !s.ok()) return s;
  for (const Emission& e : emissions) {
    if (!(e.scale > 0) || !(e.shape > 0) || !std::isfinite(e.location)) {
      return absl::InvalidArgumentError("Violated constraint: emission scale > 0, shape > 0, finite location");
    }
  }
  return absl::OkStatus();
}

VectorXd HmmMixture::StationaryWeights() const { return StationaryOf(transition); }

MatrixXd HmmMixture::EmissionDensities(const Eigen::Ref<const VectorXd>& points) const {
  MatrixXd out(points.size(), num_states());
  for (int i = 0; i < points.size(); ++i)
    for (int h = 0; h < num_states(); ++h) out(i, h) = emissions[h].Density(points[i]);
  return out;
}

VectorXd HmmMixture::Simulate(int64_t n, uint64_t seed, Eigen::VectorXi* states) const {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<std::gamma_distribution<double>> gammas;
  for (const Emission& e : emissions) gammas.emplace_back(e.shape, e.scale);
  VectorXd out(n);
  if (states) states->resize(n);
  int s = SampleCategorical(StationaryWeights(), rng);
  for (int64_t t = 0; t < n; ++t) {
    const Emission& e = emissions[s];
    out[t] = e.kind == Emission::Kind::kGaussian ? e.location + e.scale * normal(rng) : e.location + gammas[s](rng);
    if (states) (*states)[t] = s;
    s = SampleCategorical(transition.row(s).transpose(), rng);
  }
  return out;
}

std::string HmmMixture::GroundTruthJson(const VectorXd& grid) const {
  GroundTruthJsonWriter json("hmm-mixture");
  json.Matrix("transition", transition);
  json.Vector("weights", StationaryWeights());
  std::ostringstream& os = json.Key("emissions");
  os << "[";
  for (size_t h = 0; h < emissions.size(); ++h) {
    const Emission& e = emissions[h];
    os << (h ? "," : "") << "{\"kind\":\"" << (e.kind == Emission::Kind::kGaussian ? "gaussian" : "shifted_gamma")
       << "\",\"location\":" << e.location << ",\"scale\":" << e.scale << ",\"shape\":" << e.shape
       << ",\"mean\":" << e.Mean() << "}";
  }
  os << "]";
  if (grid.size() > 0) {
    json.Vector("grid", grid);
    json.Matrix("densities", EmissionDensities(grid).transpose());
  }
  return json.Close();
}

// ---------------------------------------------------------------------------------------------
DiscreteHmm DiscreteHmm::BinaryLearningChain(double learn, double forget, double guess, double slip) {
  DiscreteHmm h;
  h.transition.resize(2, 2);
  h.transition << 1 - learn, learn, forget, 1 - forget;
  h.emission.resize(2, 2);
  h.emission << 1 - guess, guess, slip, 1 - slip;
  return h;
}

absl::Status DiscreteHmm::Validate() const {
  const int k = num_states();
  if (k < 1 || transition.cols() != k || emission.rows() != k || emission.cols() < 1) {
    return absl::InvalidArgumentError("Violated constraint: transition k x k, emission k x n_obs");
  }
  if (auto s = CheckStochastic(transition, "transition"); !s.ok()) return s;
  if (auto s = CheckStochastic(emission, "emission"); !s.ok()) return s;
  if (initial.size() != 0) {
    if (initial.size() != k) return absl::InvalidArgumentError("Violated constraint: initial has k entries");
    if (auto s = CheckStochastic(initial.transpose(), "initial"); !s.ok()) return s;
  }
  return absl::OkStatus();
}

VectorXd DiscreteHmm::StationaryWeights() const { return StationaryOf(transition); }

VectorXd DiscreteHmm::Simulate(int64_t n, uint64_t seed, Eigen::VectorXi* states) const {
  std::mt19937_64 rng(seed);
  VectorXd out(n);
  if (states) states->resize(n);
  int s = SampleCategorical(initial.size() ? initial : StationaryWeights(), rng);
  for (int64_t t = 0; t < n; ++t) {
    out[t] = SampleCategorical(emission.row(s).transpose(), rng);
    if (states) (*states)[t] = s;
    s = SampleCategorical(transition.row(s).transpose(), rng);
  }
  return out;
}

RowMatrixXd DiscreteHmm::OneStepPredictions(const Eigen::Ref<const VectorXd>& observations) const {
  const int64_t n = observations.size();
  RowMatrixXd out(n, num_symbols());
  VectorXd prior = initial.size() ? initial : StationaryWeights();  // P(s_t | o_<t)
  for (int64_t t = 0; t < n; ++t) {
    out.row(t) = (emission.transpose() * prior).transpose();
    const int a = static_cast<int>(observations[t]);
    VectorXd post = prior.cwiseProduct(emission.col(a));
    post /= post.sum();
    prior = transition.transpose() * post;
  }
  return out;
}

std::string DiscreteHmm::GroundTruthJson() const {
  GroundTruthJsonWriter json("hmm-discrete");
  json.Matrix("transition", transition);
  json.Matrix("emission", emission);
  json.Vector("weights", StationaryWeights());
  return json.Close();
}

// ---------------------------------------------------------------------------------------------
LinearGaussianSsm LinearGaussianSsm::Default() {
  LinearGaussianSsm m;
  const double th = 0.3;
  m.A.resize(2, 2);
  m.A << std::cos(th), -std::sin(th), std::sin(th), std::cos(th);
  m.A *= 0.95;
  m.C.resize(1, 2);
  m.C << 1.0, 0.5;
  m.Q = 0.1 * MatrixXd::Identity(2, 2);
  m.R = 0.1 * MatrixXd::Identity(1, 1);
  return m;
}

absl::Status LinearGaussianSsm::Validate() const {
  const int n = state_dim(), p = obs_dim();
  if (n < 1 || A.cols() != n || C.cols() != n || p < 1 || Q.rows() != n || Q.cols() != n || R.rows() != p ||
      R.cols() != p) {
    return absl::InvalidArgumentError("Violated constraint: A n x n, C p x n, Q n x n, R p x p");
  }
  if (Q.llt().info() != Eigen::Success || R.llt().info() != Eigen::Success) {
    return absl::InvalidArgumentError("Violated constraint: Q and R must be positive definite");
  }
  if (A.eigenvalues().cwiseAbs().maxCoeff() >= 1) {
    return absl::InvalidArgumentError("Violated constraint: A must be stable (spectral radius < 1)");
  }
  return absl::OkStatus();
}

MatrixXd LinearGaussianSsm::StationaryCovariance() const {
  MatrixXd p = Q;
  for (int it = 0; it < 100000; ++it) {
    MatrixXd next = A * p * A.transpose() + Q;
    const double change = (next - p).norm();
    p = next;
    if (change < 1e-14 * p.norm()) break;
  }
  return p;
}

RowMatrixXd LinearGaussianSsm::Simulate(int64_t n, uint64_t seed, RowMatrixXd* states) const {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  const int ns = state_dim(), p = obs_dim();
  const MatrixXd lq = Q.llt().matrixL(), lr = R.llt().matrixL();
  const MatrixXd lp = StationaryCovariance().llt().matrixL();
  auto gauss = [&](int d) {
    VectorXd z(d);
    for (int i = 0; i < d; ++i) z[i] = normal(rng);
    return z;
  };
  RowMatrixXd out(n, p);
  if (states) states->resize(n, ns);
  VectorXd x = lp * gauss(ns);
  for (int64_t t = 0; t < n; ++t) {
    out.row(t) = (C * x + lr * gauss(p)).transpose();
    if (states) states->row(t) = x.transpose();
    x = A * x + lq * gauss(ns);
  }
  return out;
}

RowMatrixXd LinearGaussianSsm::OneStepPredictions(const Eigen::Ref<const RowMatrixXd>& observations) const {
  const int64_t n = observations.rows();
  RowMatrixXd out(n, obs_dim());
  VectorXd m = VectorXd::Zero(state_dim());  // E[x_t | o_<t]
  MatrixXd P = StationaryCovariance();       // Cov[x_t | o_<t]
  for (int64_t t = 0; t < n; ++t) {
    out.row(t) = (C * m).transpose();
    const MatrixXd S = C * P * C.transpose() + R;
    const MatrixXd K = P * C.transpose() * S.inverse();
    m += K * (observations.row(t).transpose() - C * m);
    P = P - K * C * P;
    m = A * m;
    P = A * P * A.transpose() + Q;
  }
  return out;
}

std::string LinearGaussianSsm::GroundTruthJson() const {
  GroundTruthJsonWriter json("kalman");
  json.Matrix("A", A);
  json.Matrix("C", C);
  json.Matrix("Q", Q);
  json.Matrix("R", R);
  return json.Close();
}

}  // namespace cmestream::systems
