// Change detection on simulated switching systems with labelled change points (docs/benchmarks.md
// "Change detection", docs/algorithms.md §12). Not a Google Benchmark: it prints one table row per
// system with the detection delay, missed changes, false alarms per 10,000 pairs, the kinds given
// and the NAB standard-profile score, then the false-alarm rate of each system's residuals over
// 10^6 pairs without a change and the detector's cost per pair.
//
// SCORING. Window of a change point c: [c, c + W), W = 60, cut at the next change point. The
// first alarm in a window detects it (delay = alarm index - c; later alarms there count
// nothing); an alarm in no window is a false alarm ("of which late": missed changes whose first
// alarm came after the window, before the next change point: those alarms are false alarms
// too). NAB standard profile, sigma(y) = 2 / (1 + e^{5y}) - 1: a detection at a in [s, e)
// scores sigma((a - e) / (e - s)) / sigma(-1); a false alarm scores -0.11 before the first
// window, else 0.11 sigma((a - e') / (w' - 1)) after the last window [s', e') before it (width
// w'); a window without alarm scores -1; reported as 100 (S - S0) / (S1 - S0), S0 = -windows
// (no alarm at all), S1 = +windows (every change found at its first pair, no false alarm).
//
//   ./build/tests/bench/change_benchmark [--seeds N] [--rate R] [--stationary PAIRS] [--monitor]
//                                        [--misses] [--oracle] [--series FILE ...]
//
// --monitor replaces the frozen stand-in forecast below by what the daemon runs (AlarmMonitor,
// DetectWithMonitor): its own forecast on the model's state (cubic regressors for states of at
// most two values), refitted on schedule, and its tests (the residuals' size, docs/algorithms.md §12.8;
// for a state of one or two values the forecast's coefficients, the state's steps and single
// steps too, §12.9-12.14).
// --misses prints one line per change not detected within 500 pairs: its segment, direction,
// the pairs since the last alarm before it and the first alarm after it.
//
// --series FILE (repeatable) runs the monitor with the defaults (R = 1, or --rate)
// on a recorded scalar series instead, one number per line, as a model of it would see it: the
// value alone (d = 1) and a delay pair (d = 2, one channel); it prints the alarms raised, for the
// false alarms of real series without labels (docs/algorithms.md §12.12).
//
// --oracle (double well and oscillator only) asks whether a change is detectable at all within
// 500 pairs at the stated false-alarm rate, and prints that instead of the table
// (docs/algorithms.md §12.11 "Detectable?"): (1) a CUSUM of the log-likelihood ratio of the two
// regimes' transition laws from the change on, the laws known (oscillator: linear Gaussian,
// least squares per regime; double well: Gaussian, local-linear in 100 bins of x, both fitted on
// 2 10^6 pairs of each regime, mirrored), its threshold set for R false alarms per 10^4 on 2 10^6
// pairs of the old regime; (2) without the laws: the 500 pairs after the change against the 500
// before, |log| of the ratio of the residual mean square of a least-squares fit on the 500 before
// (the system's features) and of the step's (y - x) mean square, each calibrated at alpha/2 on
// 2,000 such window pairs of the old regime, alpha = 0.05 and 0.001. Then, of the changes the
// monitor (what --monitor runs) did not find within 500 pairs, how many each oracle finds.
//
// THE FORECAST. The detector sees residuals of a model's one-step forecast; here the stand-in
// for the model is a least-squares regression of y on fixed features of x (listed per system),
// fitted on the first segment of each stream (the regime it was trained on, 3000 pairs) and
// then frozen: a change of dynamics shows as a misfit that stays until the regime comes back,
// a change of noise as residuals of another size. (A model that keeps learning would absorb a
// change over its forgetting horizon; the frozen fit isolates the detector.)
//
// THE STREAMS. Per seed: a first segment of 3000 pairs in regime A, then 8 segments of
// 600..1500 pairs (uniform) alternating B, A, B, ...; each segment start is a labelled change
// point. Systems:
//   double_well   dx = -4 D x (x^2 - 1) dt + 0.7 dW, sampled every 0.1 (20 Euler steps),
//                 well depth D = 1 <-> 4; features 1, x, x^2, x^3.
//   oscillator    dq = p dt, dp = (-q - gamma p) dt + 0.5 dW, state (q, p) observed, sampled
//                 every 0.5 (50 semi-implicit Euler steps), damping gamma = 1 <-> 0.05 (the
//                 forecast is fitted on the damped regime; in the other one the amplitude
//                 grows over ~1 / gamma = 20 time units); features 1, q, p.
//   ou            exact OU with unit stationary variance, x' = a x + sqrt(1 - a^2) N(0, 1),
//                 a = exp(-theta 0.1), rate theta = 1 <-> 4; features 1, x.
//   markov        4-state chain, one-hot residual (4 channels), A = sticky (0.9 on the diagonal),
//                 B = a cycle 0 -> 1 -> 2 -> 3 -> 0 with probability 0.6, staying 0.3;
//                 features = one-hot of x (the fit is the empirical transition matrix).
//   sensor_noise  latent OU (theta 0.5, unit variance, step 0.1) seen through white noise of
//                 standard deviation 0.3 <-> 0.6 (the noise doubles; the dynamics never
//                 change); features 1 and the last 4 observations (an AR(4) forecast). Every
//                 alarm here should be labelled "noise".
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/alarms/alarm_monitor.h"
#include "core/alarms/change_detector.h"
#include "core/common/types.h"
#include "core/counts/transition_counts.h"

namespace cmestream {
namespace {

int g_seed = 0;
const char* g_system = "";

constexpr int kWindow = 60;  // NAB window W, in pairs

// One simulated system: a state that steps under regime 0 or 1, features of the current
// observation history, and the next observation (the forecast's target).
class System {
 public:
  virtual ~System() = default;
  virtual const char* name() const = 0;
  virtual int features() const = 0;
  virtual int channels() const = 0;
  virtual void Reset(std::mt19937_64& rng) = 0;
  // Features of the current state (what the forecast sees) into phi.
  virtual void Features(double* phi) const = 0;
  // Steps under `regime`; writes the new observation (the target) into y.
  virtual void Step(int regime, std::mt19937_64& rng, double* y) = 0;
};

class DoubleWell : public System {
 public:
  const char* name() const override { return "double_well"; }
  int features() const override { return 4; }
  int channels() const override { return 1; }
  void Reset(std::mt19937_64& rng) override { x_ = std::uniform_real_distribution<double>(-1.2, 1.2)(rng); }
  void Features(double* phi) const override {
    phi[0] = 1;
    phi[1] = x_;
    phi[2] = x_ * x_;
    phi[3] = x_ * x_ * x_;
  }
  void Step(int regime, std::mt19937_64& rng, double* y) override {
    const double depth = regime == 0 ? 1.0 : 4.0, h = 0.1 / 20, sigma = 0.7;
    for (int i = 0; i < 20; ++i) x_ += -4 * depth * x_ * (x_ * x_ - 1) * h + sigma * std::sqrt(h) * n01_(rng);
    y[0] = x_;
  }

 private:
  double x_ = 0;
  std::normal_distribution<double> n01_;
};

class Oscillator : public System {
 public:
  const char* name() const override { return "oscillator"; }
  int features() const override { return 3; }
  int channels() const override { return 2; }
  void Reset(std::mt19937_64& rng) override {
    q_ = n01_(rng);
    p_ = n01_(rng);
  }
  void Features(double* phi) const override {
    phi[0] = 1;
    phi[1] = q_;
    phi[2] = p_;
  }
  void Step(int regime, std::mt19937_64& rng, double* y) override {
    const double gamma = regime == 0 ? 1.0 : 0.05, h = 0.5 / 50, sigma = 0.5;
    for (int i = 0; i < 50; ++i) {
      p_ += (-q_ - gamma * p_) * h + sigma * std::sqrt(h) * n01_(rng);
      q_ += p_ * h;
    }
    y[0] = q_;
    y[1] = p_;
  }

 private:
  double q_ = 0, p_ = 0;
  std::normal_distribution<double> n01_;
};

class Ou : public System {
 public:
  const char* name() const override { return "ou"; }
  int features() const override { return 2; }
  int channels() const override { return 1; }
  void Reset(std::mt19937_64& rng) override { x_ = n01_(rng); }
  void Features(double* phi) const override {
    phi[0] = 1;
    phi[1] = x_;
  }
  void Step(int regime, std::mt19937_64& rng, double* y) override {
    const double a = std::exp(-(regime == 0 ? 1.0 : 4.0) * 0.1);
    x_ = a * x_ + std::sqrt(1 - a * a) * n01_(rng);
    y[0] = x_;
  }

 private:
  double x_ = 0;
  std::normal_distribution<double> n01_;
};

class Markov : public System {
 public:
  Markov() {
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 4; ++j) {
        a_[i][j] = i == j ? 0.9 : 0.1 / 3;
        b_[i][j] = j == i ? 0.3 : (j == (i + 1) % 4 ? 0.6 : 0.05);
      }
    }
  }
  const char* name() const override { return "markov"; }
  int features() const override { return 4; }
  int channels() const override { return 4; }
  void Reset(std::mt19937_64& rng) override { s_ = static_cast<int>(rng() % 4); }
  void Features(double* phi) const override {
    for (int j = 0; j < 4; ++j) phi[j] = j == s_ ? 1 : 0;
  }
  void Step(int regime, std::mt19937_64& rng, double* y) override {
    const double(*p)[4] = regime == 0 ? a_ : b_;
    const double u = u01_(rng);
    double acc = 0;
    int next = 3;
    for (int j = 0; j < 4; ++j) {
      acc += p[s_][j];
      if (u < acc) {
        next = j;
        break;
      }
    }
    s_ = next;
    for (int j = 0; j < 4; ++j) y[j] = j == s_ ? 1 : 0;
  }

 private:
  double a_[4][4], b_[4][4];
  int s_ = 0;
  std::uniform_real_distribution<double> u01_;
};

class SensorNoise : public System {
 public:
  const char* name() const override { return "sensor_noise"; }
  int features() const override { return 5; }
  int channels() const override { return 1; }
  void Reset(std::mt19937_64& rng) override {
    s_ = n01_(rng);
    for (double& v : last_) v = s_ + 0.3 * n01_(rng);
  }
  void Features(double* phi) const override {
    phi[0] = 1;
    for (int i = 0; i < 4; ++i) phi[1 + i] = last_[i];
  }
  void Step(int regime, std::mt19937_64& rng, double* y) override {
    const double a = std::exp(-0.5 * 0.1);
    s_ = a * s_ + std::sqrt(1 - a * a) * n01_(rng);
    const double obs = s_ + (regime == 0 ? 0.3 : 0.6) * n01_(rng);
    for (int i = 3; i > 0; --i) last_[i] = last_[i - 1];
    last_[0] = obs;
    y[0] = obs;
  }

 private:
  double s_ = 0;
  double last_[4] = {};
  std::normal_distribution<double> n01_;
};

// A labelled stream: per pair the features and the target, and the change points.
struct Stream {
  int features = 0, channels = 0;
  std::vector<double> phi, y;
  std::vector<int64_t> changes;
  int64_t pairs() const { return static_cast<int64_t>(y.size()) / channels; }
};

// A first segment of `first` pairs in regime `start`, then `segments` segments of 600..1500 pairs
// alternating regimes (labelled changes), or none of them with `stationary`; after a burn-in of
// `burn_in` steps in regime `start`.
Stream Simulate(System& sys, uint64_t seed, int64_t first, int segments, bool stationary, int start = 0,
                int burn_in = 500) {
  std::mt19937_64 rng(seed);
  Stream s;
  s.features = sys.features();
  s.channels = sys.channels();
  sys.Reset(rng);
  // Burn-in so the first segment starts near the stationary law.
  std::vector<double> phi(static_cast<size_t>(s.features)), y(static_cast<size_t>(s.channels));
  for (int i = 0; i < burn_in; ++i) sys.Step(start, rng, y.data());
  std::uniform_int_distribution<int> len(600, 1500);
  std::vector<int64_t> bounds{first};
  for (int k = 0; k < segments; ++k) bounds.push_back(bounds.back() + len(rng));
  const int64_t total = bounds.back();
  s.phi.reserve(static_cast<size_t>(total * s.features));
  s.y.reserve(static_cast<size_t>(total * s.channels));
  int regime = start;
  size_t next = 0;
  for (int64_t t = 0; t < total; ++t) {
    if (next < bounds.size() && t == bounds[next]) {
      if (!stationary && t < total) {
        regime = 1 - regime;
        s.changes.push_back(t);
      }
      ++next;
    }
    sys.Features(phi.data());
    sys.Step(regime, rng, y.data());
    s.phi.insert(s.phi.end(), phi.begin(), phi.end());
    s.y.insert(s.y.end(), y.begin(), y.end());
  }
  return s;
}

// Least squares of y on phi over pairs [0, n): the frozen forecast. A tiny ridge keeps the
// one-hot features of a state never visited solvable.
MatrixXd Fit(const Stream& s, int64_t n) {
  const int p = s.features, c = s.channels;
  MatrixXd a = MatrixXd::Zero(p, p), b = MatrixXd::Zero(p, c);
  for (int64_t t = 0; t < n; ++t) {
    Eigen::Map<const VectorXd> f(&s.phi[static_cast<size_t>(t * p)], p);
    Eigen::Map<const VectorXd> y(&s.y[static_cast<size_t>(t * c)], c);
    a.noalias() += f * f.transpose();
    b.noalias() += f * y.transpose();
  }
  a.diagonal().array() += 1e-9 * (1 + a.diagonal().array());
  return a.ldlt().solve(b);  // p x c
}

struct Alarm {
  int64_t index, onset;
  ChangeDetector::Kind kind;
  ChangeDetector::Direction direction;
  double autocorr_change, autocorr_bound, lag1_change, lag1_bound;
};

double g_kind_z = 2.0, g_kind_min = 0.1;

std::vector<Alarm> Detect(const Stream& s, const MatrixXd& beta, double rate) {
  ChangeDetector::Options o;
  o.kind_z = g_kind_z;
  o.kind_min = g_kind_min;
  o.channels = s.channels;
  o.alarm_rate = rate;
  ChangeDetector d(o);
  const int p = s.features, c = s.channels;
  VectorXd r(c);
  std::vector<Alarm> out;
  for (int64_t t = 0; t < s.pairs(); ++t) {
    Eigen::Map<const VectorXd> f(&s.phi[static_cast<size_t>(t * p)], p);
    Eigen::Map<const VectorXd> y(&s.y[static_cast<size_t>(t * c)], c);
    r.noalias() = y - beta.transpose() * f;
    if (const ChangeDetector::Alarm* a = d.Observe(r.data()))
      out.push_back({a->index, a->onset, a->kind, a->direction, a->autocorr_change, a->autocorr_bound, a->lag1_change,
                     a->lag1_bound});
  }
  return out;
}

// --monitor: what the daemon runs (AlarmMonitor, docs/algorithms.md §12.8-12.14): its own forecast
// refitted on schedule and its tests, on the state a model would learn:
// the observation (double well: x; oscillator: (q, p); OU: x), a delay window of the last four
// observations, oldest first (sensor noise: --dim 1 --delays 4), or the ids (Markov chain: a
// discrete model, scored by the transition's p-value under its counts).
std::vector<Alarm> DetectWithMonitor(const Stream& s, const System& sys, double rate) {
  const std::string name = sys.name();
  const int p = s.features, c = s.channels;
  AlarmMonitor::Options o;
  o.alarm_rate = rate;
  const bool discrete = name == "markov";
  const bool window = name == "sensor_noise";
  const int dim = window ? 4 : c;
  if (discrete) {
    o.num_states = 4;
  } else {
    o.dim = dim;
    o.channels = window ? 1 : c;
  }
  AlarmMonitor m(o);
  TransitionCounts::Options co;
  co.max_states = 4;
  TransitionCounts counts(co);
  std::vector<double> x(static_cast<size_t>(dim)), y(static_cast<size_t>(dim));
  for (int64_t t = 0; t < s.pairs(); ++t) {
    const double* f = &s.phi[static_cast<size_t>(t * p)];
    const double* target = &s.y[static_cast<size_t>(t * c)];
    if (discrete) {
      int64_t from = 0, to = 0;
      for (int j = 0; j < 4; ++j) {
        if (f[j] > 0.5) from = j;
        if (target[j] > 0.5) to = j;
      }
      m.ObserveIds(from, to, counts, 0);
      (void)counts.AddBatch(&from, &to, 1);
      continue;
    }
    if (window) {
      for (int i = 0; i < 4; ++i) x[static_cast<size_t>(i)] = f[4 - i];  // features: newest first
      for (int i = 0; i < 3; ++i) y[static_cast<size_t>(i)] = x[static_cast<size_t>(i) + 1];
      y[3] = target[0];
    } else {
      for (int j = 0; j < c; ++j) {
        x[static_cast<size_t>(j)] = f[1 + j];
        y[static_cast<size_t>(j)] = target[j];
      }
    }
    m.ObservePair(x.data(), y.data(), 0);
  }
  // The monitor keeps its last kMaxRecords alarms: the older ones (only on the 10^6-pair
  // stationary streams) are counted with index -1, which no window contains.
  std::vector<Alarm> out(static_cast<size_t>(m.dropped()),
                         Alarm{-1, -1, ChangeDetector::Kind::kNoise, ChangeDetector::Direction::kUp, 0, 0, 0, 0});
  for (const AlarmRecord& a : m.records()) out.push_back({a.index, a.onset, a.kind, a.direction, 0, 0, 0, 0});
  return out;
}

// --oracle (see the header): a known transition law per regime, as a Gaussian log density of y
// given the pair's features.
class TransitionLaw {
 public:
  // Double well: per bin of x, y = a + b x + N(0, v) by least squares over the bin (pooled with
  // its neighbours up to 200 pairs); the pairs enter mirrored too (the potential is symmetric,
  // and a deep well's stream stays on one side). Oscillator: y = B^T phi + N(0, Q).
  TransitionLaw(const Stream& s, bool double_well) : double_well_(double_well) {
    if (double_well) {
      std::vector<double> n(kBins), sx(kBins), sxx(kBins), sy(kBins), sxy(kBins), syy(kBins);
      for (int64_t t = 0; t < s.pairs(); ++t) {
        for (const double sign : {1.0, -1.0}) {
          const double x = sign * s.phi[static_cast<size_t>(t * 4 + 1)], y = sign * s.y[static_cast<size_t>(t)];
          const size_t i = static_cast<size_t>(Bin(x));
          n[i] += 1;
          sx[i] += x;
          sxx[i] += x * x;
          sy[i] += y;
          sxy[i] += x * y;
          syy[i] += y * y;
        }
      }
      for (int i = 0; i < kBins; ++i) {
        double N = 0, X = 0, XX = 0, Y = 0, XY = 0, YY = 0;
        auto add = [&](int j) {
          if (j < 0 || j >= kBins) return;
          const size_t k = static_cast<size_t>(j);
          N += n[k];
          X += sx[k];
          XX += sxx[k];
          Y += sy[k];
          XY += sxy[k];
          YY += syy[k];
        };
        add(i);
        for (int r = 1; r < kBins && N < 200; ++r) {
          add(i - r);
          add(i + r);
        }
        const double mx = X / N, my = Y / N, cxx = XX / N - mx * mx, cxy = XY / N - mx * my, cyy = YY / N - my * my;
        const double b = cxx > 1e-12 ? cxy / cxx : 0;
        a_[i] = my - b * mx;
        b_[i] = b;
        v_[i] = std::max(cyy - b * cxy, 1e-8);
      }
      return;
    }
    beta_ = Fit(s, s.pairs());
    MatrixXd q = MatrixXd::Zero(s.channels, s.channels);
    for (int64_t t = 0; t < s.pairs(); ++t) {
      const VectorXd e = Residual(s, t);
      q.noalias() += e * e.transpose();
    }
    q /= static_cast<double>(s.pairs());
    q_inv_ = q.inverse();
    log_det_ = std::log(q.determinant());
  }
  double LogDensity(const Stream& s, int64_t t) const {
    if (double_well_) {
      const double x = s.phi[static_cast<size_t>(t * 4 + 1)], y = s.y[static_cast<size_t>(t)];
      const int i = Bin(x);
      const double e = y - a_[i] - b_[i] * x;
      return -0.5 * e * e / v_[i] - 0.5 * std::log(v_[i]);
    }
    const VectorXd e = Residual(s, t);
    return -0.5 * e.dot(q_inv_ * e) - 0.5 * log_det_;
  }

 private:
  static constexpr int kBins = 100;
  static int Bin(double x) { return std::clamp(static_cast<int>(std::floor((x + 2.5) / 5.0 * kBins)), 0, kBins - 1); }
  VectorXd Residual(const Stream& s, int64_t t) const {
    Eigen::Map<const VectorXd> f(&s.phi[static_cast<size_t>(t * s.features)], s.features);
    Eigen::Map<const VectorXd> y(&s.y[static_cast<size_t>(t * s.channels)], s.channels);
    return y - beta_.transpose() * f;
  }
  bool double_well_;
  double a_[kBins] = {}, b_[kBins] = {}, v_[kBins] = {};
  MatrixXd beta_, q_inv_;
  double log_det_ = 0;
};

// A stream of one regime only (after a burn-in of 2,000 pairs), `n` pairs.
Stream SimulateRegime(System& sys, uint64_t seed, int regime, int64_t n) {
  return Simulate(sys, seed, n, 0, /*stationary=*/true, regime, /*burn_in=*/2000);
}

// (2) of --oracle: |log| of the after/before ratios of the residual mean square (a least-squares
// fit on [c - n, c)) and of the step's mean square, over [c, c + n) against [c - n, c).
std::pair<double, double> BeforeAfter(const Stream& s, int64_t c, int64_t n) {
  const int p = s.features, nc = s.channels;
  MatrixXd a = MatrixXd::Zero(p, p), b = MatrixXd::Zero(p, nc);
  for (int64_t t = c - n; t < c; ++t) {
    Eigen::Map<const VectorXd> f(&s.phi[static_cast<size_t>(t * p)], p);
    Eigen::Map<const VectorXd> y(&s.y[static_cast<size_t>(t * nc)], nc);
    a.noalias() += f * f.transpose();
    b.noalias() += f * y.transpose();
  }
  a.diagonal().array() += 1e-9 * (1 + a.diagonal().array());
  const MatrixXd beta = a.ldlt().solve(b);
  double res[2] = {0, 0}, step[2] = {0, 0};
  for (int64_t t = c - n; t < c + n; ++t) {
    Eigen::Map<const VectorXd> f(&s.phi[static_cast<size_t>(t * p)], p);
    Eigen::Map<const VectorXd> y(&s.y[static_cast<size_t>(t * nc)], nc);
    double st = 0;
    for (int j = 0; j < nc; ++j) st += (y[j] - f[1 + j]) * (y[j] - f[1 + j]);
    res[t >= c] += (y - beta.transpose() * f).squaredNorm();
    step[t >= c] += st;
  }
  return {std::abs(std::log(res[1] / res[0])), std::abs(std::log(step[1] / step[0]))};
}

double Upper(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

bool g_monitor = false;
bool g_misses = false;  // --misses: one line per change not detected within 500 pairs

std::vector<Alarm> RunDetector(const Stream& s, const System& sys, double rate, int64_t first) {
  if (g_monitor) return DetectWithMonitor(s, sys, rate);
  return Detect(s, Fit(s, first), rate);
}

// NAB's scaled sigmoid: 2 / (1 + e^{5y}) - 1.
double Sigma(double y) { return 2 / (1 + std::exp(5 * y)) - 1; }

struct Tally {
  int64_t pairs = 0, changes = 0, missed = 0, false_alarms = 0, late = 0, within500 = 0;
  int64_t up_dynamics = 0, up = 0, down_dynamics = 0, down = 0;
  std::vector<double> delays, onset_errors;
  double nab = 0, nab_null = 0, nab_perfect = 0;
};

// Scores one stream's alarms against its change points (windows [c, c + W) cut at the next
// change point), NAB standard profile: true positive A_TP = 1, false positive A_FP = 0.11,
// false negative -1.
void Score(const Stream& s, const std::vector<Alarm>& alarms, Tally& tally) {
  struct Window {
    int64_t s, e;
    bool hit = false;
  };
  std::vector<Window> windows;
  for (size_t i = 0; i < s.changes.size(); ++i) {
    const int64_t end = i + 1 < s.changes.size() ? std::min(s.changes[i] + kWindow, s.changes[i + 1])
                                                 : std::min(s.changes[i] + kWindow, s.pairs());
    windows.push_back({s.changes[i], end});
  }
  const double top = Sigma(-1);
  tally.pairs += s.pairs();
  tally.changes += static_cast<int64_t>(windows.size());
  for (const Alarm& a : alarms) {
    Window* in = nullptr;
    const Window* before = nullptr;  // the last window ending at or before a
    for (Window& w : windows) {
      if (a.index >= w.s && a.index < w.e) in = &w;
      if (w.e <= a.index) before = &w;
    }
    if (in != nullptr) {
      if (!in->hit) {
        in->hit = true;
        tally.nab += Sigma(static_cast<double>(a.index - in->e) / static_cast<double>(in->e - in->s)) / top;
        tally.delays.push_back(static_cast<double>(a.index - in->s));
        tally.onset_errors.push_back(static_cast<double>(a.onset - in->s));
        const bool dyn = a.kind == ChangeDetector::Kind::kDynamics;
        if (a.direction == ChangeDetector::Direction::kUp) {
          ++tally.up;
          tally.up_dynamics += dyn;
        } else {
          ++tally.down;
          tally.down_dynamics += dyn;
        }
      }
      continue;
    }
    ++tally.false_alarms;
    if (before == nullptr) {
      tally.nab += -0.11;
    } else {
      const double width = static_cast<double>(before->e - before->s);
      tally.nab += 0.11 * Sigma(static_cast<double>(a.index - before->e) / std::max(width - 1, 1.0));
    }
  }
  // Detected within 500 pairs: the first alarm from the change point on, before the next one.
  for (size_t i = 0; i < windows.size(); ++i) {
    const int64_t next = i + 1 < windows.size() ? windows[i + 1].s : s.pairs();
    const Alarm* first = nullptr;
    for (const Alarm& a : alarms) {
      if (a.index >= windows[i].s && a.index < next) {
        first = &a;
        break;
      }
    }
    if (first != nullptr) tally.within500 += first->index - windows[i].s < 500;
    if (g_misses && (first == nullptr || first->index - windows[i].s >= 500)) {
      // The last alarm before the change point (the forecast's and the detectors' history).
      int64_t last = -1;
      for (const Alarm& a : alarms)
        if (a.index < windows[i].s) last = a.index;
      std::printf(
          "miss %s seed=%d segment=%zu dir=%s change=%lld len=%lld since_alarm=%lld first_alarm_delay=%lld %s %s\n",
          g_system, g_seed, i + 1, i % 2 == 0 ? "A->B" : "B->A", static_cast<long long>(windows[i].s),
          static_cast<long long>(next - windows[i].s), last < 0 ? -1LL : static_cast<long long>(windows[i].s - last),
          first ? static_cast<long long>(first->index - windows[i].s) : -1LL, first ? KindName(first->kind) : "-",
          first ? DirectionName(first->direction) : "-");
    }
  }
  for (size_t i = 0; i < windows.size(); ++i) {
    const Window& w = windows[i];
    if (w.hit) continue;
    ++tally.missed;
    tally.nab += -1;
    // Detected late: an alarm after the window, before the next change point.
    const int64_t next = i + 1 < windows.size() ? windows[i + 1].s : s.pairs();
    for (const Alarm& a : alarms) {
      if (a.index >= w.e && a.index < next) {
        ++tally.late;
        break;
      }
    }
  }
  tally.nab_null += -static_cast<double>(windows.size());
  tally.nab_perfect += static_cast<double>(windows.size());
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const double h = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (h - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

// The scoring on a hand-made case: changes at 100 and 1000 in 2000 pairs.
void CheckScoring() {
  Stream s;
  s.channels = 1;
  s.y.assign(2000, 0.0);
  s.changes = {100, 1000};
  auto nab = [&](const std::vector<int64_t>& at) {
    std::vector<Alarm> alarms;
    for (int64_t a : at)
      alarms.push_back({a, a, ChangeDetector::Kind::kNoise, ChangeDetector::Direction::kUp, 0, 0, 0, 0});
    Tally t;
    Score(s, alarms, t);
    return 100 * (t.nab - t.nab_null) / (t.nab_perfect - t.nab_null);
  };
  auto near = [](double a, double b) { return std::abs(a - b) < 1e-9; };
  const double top = Sigma(-1);
  bool ok = near(nab({}), 0) && near(nab({100, 1000}), 100) && near(nab({100, 101, 1000}), 100) &&
            near(nab({100}), 50) &&
            // Last pair of the window: sigma(-1/60) / sigma(-1) of a true positive.
            near(nab({159, 1000}), 100 * (Sigma(-1.0 / 60) / top + 1 + 2) / 4) &&
            // A false alarm before every window, and one 59 pairs after the first window.
            near(nab({50, 100, 1000}), 100 * (2 - 0.11 + 2) / 4) &&
            near(nab({100, 219, 1000}), 100 * (2 + 0.11 * Sigma(1.0) + 2) / 4);
  if (!ok) {
    std::fprintf(stderr, "change_benchmark: the NAB scoring fails its hand-made case\n");
    std::exit(1);
  }
}

// --oracle: is each change detectable within 500 pairs at R false alarms per 10^4 (header)?
void Oracle(int seeds, double rate) {
  const int64_t kSpan = 500, kFit = 2'000'000;
  DoubleWell dw;
  Oscillator osc;
  System* systems[] = {&dw, &osc};
  std::printf(
      "Detectability within %lld pairs at R = %g, %d seeds x 8 changes (the oracles of the header)\n\n"
      "| system | direction | changes | known laws: CUSUM found | delay median | delay max | before/after, alpha 0.05 "
      "| alpha 0.001 | monitor's misses | of which the CUSUM finds | before/after 0.05 | 0.001 |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|\n",
      static_cast<long long>(kSpan), rate, seeds);
  for (System* sys : systems) {
    const bool double_well = std::string(sys->name()) == "double_well";
    std::vector<TransitionLaw> law;
    for (int r = 0; r < 2; ++r) law.emplace_back(SimulateRegime(*sys, 5000 + r, r, kFit), double_well);
    // Thresholds on each regime's own stationary stream.
    double h[2], before_after[2][2][2];  // [regime][alpha 0.05, 0.001][residual, step]
    for (int r = 0; r < 2; ++r) {
      const Stream s = SimulateRegime(*sys, 7000 + r, r, kFit);
      std::vector<double> llr(static_cast<size_t>(s.pairs()));
      for (int64_t t = 0; t < s.pairs(); ++t)
        llr[static_cast<size_t>(t)] = law[1 - r].LogDensity(s, t) - law[r].LogDensity(s, t);
      auto alarms = [&](double level) {
        double v = 0;
        int64_t n = 0;
        for (double l : llr) {
          v = std::max(0.0, v + l);
          if (v > level) {
            ++n;
            v = 0;
          }
        }
        return n;
      };
      double lo = 0, hi = 1000;
      for (int it = 0; it < 50; ++it) {
        const double mid = 0.5 * (lo + hi);
        (alarms(mid) > static_cast<int64_t>(rate * 1e-4 * static_cast<double>(s.pairs())) ? lo : hi) = mid;
      }
      h[r] = hi;
      std::vector<double> res, step;
      for (int64_t c = kSpan; c + kSpan <= s.pairs(); c += 2 * kSpan) {
        const auto [a, b] = BeforeAfter(s, c, kSpan);
        res.push_back(a);
        step.push_back(b);
      }
      for (int k = 0; k < 2; ++k) {
        const double alpha = k == 0 ? 0.05 : 0.001;
        before_after[r][k][0] = Upper(res, 1 - alpha / 2);
        before_after[r][k][1] = Upper(step, 1 - alpha / 2);
      }
    }
    struct Row {
      int changes = 0, found = 0, ba[2] = {0, 0}, misses = 0, miss_found = 0, miss_ba[2] = {0, 0};
      std::vector<double> delays;
    } rows[2];
    for (int seed = 0; seed < seeds; ++seed) {
      const Stream s = Simulate(*sys, 1000 + static_cast<uint64_t>(seed), 3000, 8, false);
      const std::vector<Alarm> alarms = DetectWithMonitor(s, *sys, rate);
      for (size_t i = 0; i < s.changes.size(); ++i) {
        const int64_t c = s.changes[i];
        const int from = i % 2 == 0 ? 0 : 1;
        Row& row = rows[from];
        ++row.changes;
        double v = 0;
        int64_t delay = -1;
        for (int64_t t = c; t < c + kSpan && delay < 0; ++t) {
          v = std::max(0.0, v + law[1 - from].LogDensity(s, t) - law[from].LogDensity(s, t));
          if (v > h[from]) delay = t - c;
        }
        const auto [res, step] = BeforeAfter(s, c, kSpan);
        bool ba[2];
        for (int k = 0; k < 2; ++k) ba[k] = res > before_after[from][k][0] || step > before_after[from][k][1];
        row.found += delay >= 0;
        if (delay >= 0) row.delays.push_back(static_cast<double>(delay));
        for (int k = 0; k < 2; ++k) row.ba[k] += ba[k];
        // The monitor's first alarm from the change point on, before the next one.
        const int64_t next = i + 1 < s.changes.size() ? s.changes[i + 1] : s.pairs();
        bool hit = false;
        for (const Alarm& a : alarms) {
          if (a.index >= c && a.index < next) {
            hit = a.index - c < kSpan;
            break;
          }
        }
        if (hit) continue;
        ++row.misses;
        row.miss_found += delay >= 0;
        for (int k = 0; k < 2; ++k) row.miss_ba[k] += ba[k];
      }
    }
    for (int from = 0; from < 2; ++from) {
      const Row& r = rows[from];
      std::printf("| %s | %s | %d | %d | %.0f | %.0f | %d | %d | %d | %d | %d | %d |\n", sys->name(),
                  from == 0 ? "A->B" : "B->A", r.changes, r.found, Quantile(r.delays, 0.5), Quantile(r.delays, 1.0),
                  r.ba[0], r.ba[1], r.misses, r.miss_found, r.miss_ba[0], r.miss_ba[1]);
    }
  }
}

// --series: the alarms of the monitor on one recorded scalar series, as a model of `d` values of it.
void AlarmsOnSeries(const char* path, double rate) {
  std::ifstream in(path);
  std::vector<double> x;
  for (double v; in >> v;) x.push_back(v);
  if (x.size() < 3) {
    std::fprintf(stderr, "change_benchmark: %s: expected a scalar series, one number per line\n", path);
    std::exit(2);
  }
  for (int d : {1, 2}) {
    AlarmMonitor::Options o;
    o.dim = d;
    o.channels = 1;
    o.alarm_rate = rate;
    AlarmMonitor m(o);
    // Pair t is the window of rows t..t+d-1 and the window one row on (a delay state's pairs).
    const int64_t pairs = static_cast<int64_t>(x.size()) - d;
    for (int64_t t = 0; t < pairs; ++t) m.ObservePair(&x[static_cast<size_t>(t)], &x[static_cast<size_t>(t + 1)], 0);
    std::printf("%s: %lld pairs, d = %d: %lld alarms (%.1f per 10^4 pairs) at pairs", path,
                static_cast<long long>(pairs), d, static_cast<long long>(m.alarms_total()),
                1e4 * static_cast<double>(m.alarms_total()) / static_cast<double>(pairs));
    for (const AlarmRecord& a : m.records()) std::printf(" %lld", static_cast<long long>(a.index));
    std::printf("\n");
  }
}

int Main(int argc, char** argv) {
  CheckScoring();
  int seeds = 25;
  double rate = 1;
  int64_t stationary = 1'000'000;
  bool oracle = false;
  std::vector<const char*> series;  // --series FILE, repeatable
  // The flags without a value.
  const std::pair<const char*, bool*> switches[] = {
      {"--monitor", &g_monitor},
      {"--misses", &g_misses},
      {"--oracle", &oracle},
  };
  for (int i = 1; i < argc; ++i) {
    bool* on = nullptr;
    for (const auto& [name, flag] : switches) {
      if (!std::strcmp(argv[i], name)) on = flag;
    }
    if (on != nullptr) {
      *on = true;
      continue;
    }
    if (i + 1 >= argc) break;
    if (!std::strcmp(argv[i], "--seeds")) seeds = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--rate")) rate = std::atof(argv[i + 1]);
    if (!std::strcmp(argv[i], "--stationary")) stationary = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--kind-z")) g_kind_z = std::atof(argv[i + 1]);
    if (!std::strcmp(argv[i], "--kind-min")) g_kind_min = std::atof(argv[i + 1]);
    if (!std::strcmp(argv[i], "--series")) series.push_back(argv[i + 1]);
    ++i;  // the flag's value
  }
  if (!series.empty()) {
    for (const char* path : series) AlarmsOnSeries(path, rate);
    return 0;
  }
  if (oracle) {
    Oracle(seeds, rate);
    return 0;
  }
  DoubleWell dw;
  Oscillator osc;
  Ou ou;
  Markov mc;
  SensorNoise sn;
  System* systems[] = {&dw, &osc, &ou, &mc, &sn};
  const int64_t first = 3000;
  const int segments = 8;

  std::printf("Change detection, R = %g false alarms per 10^4 pairs, W = %d, %d seeds x %d changes per system\n\n",
              rate, kWindow, seeds, segments);
  std::printf(
      "| system | C | pairs | changes | detected (in W) | detected within 500 | missed | of which late | delay median "
      "| delay p90 | "
      "onset error median | false alarms / 10^4 | dynamics: up alarms | dynamics: down alarms | NAB |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (System* sys : systems) {
    Tally tally;
    for (int seed = 0; seed < seeds; ++seed) {
      const Stream s = Simulate(*sys, 1000 + static_cast<uint64_t>(seed), first, segments, false);
      g_seed = seed;
      g_system = sys->name();
      Score(s, RunDetector(s, *sys, rate, first), tally);
    }
    std::vector<double> abs_onset;
    for (double e : tally.onset_errors) abs_onset.push_back(std::abs(e));
    const double nab = 100 * (tally.nab - tally.nab_null) / (tally.nab_perfect - tally.nab_null);
    std::printf(
        "| %s | %d | %lld | %lld | %lld | %lld | %lld | %lld | %.0f | %.0f | %.0f | %.2f | %lld / %lld | %lld / %lld | "
        "%.1f "
        "|\n",
        sys->name(), sys->channels(), static_cast<long long>(tally.pairs), static_cast<long long>(tally.changes),
        static_cast<long long>(tally.changes - tally.missed), static_cast<long long>(tally.within500),
        static_cast<long long>(tally.missed), static_cast<long long>(tally.late), Quantile(tally.delays, 0.5),
        Quantile(tally.delays, 0.9), Quantile(abs_onset, 0.5),
        1e4 * static_cast<double>(tally.false_alarms) / static_cast<double>(tally.pairs),
        static_cast<long long>(tally.up_dynamics), static_cast<long long>(tally.up),
        static_cast<long long>(tally.down_dynamics), static_cast<long long>(tally.down), nab);
  }

  std::printf("\nStationary streams (regime A only, %lld pairs each, forecast fitted on the first 3000):\n\n",
              static_cast<long long>(stationary));
  std::printf(
      "| system | alarms | false alarms / 10^4 (target %g) | ns per pair (forecast + detector) |\n|---|---|---|---|\n",
      rate);
  for (System* sys : systems) {
    const Stream s = Simulate(*sys, 77, stationary, 0, true);
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<Alarm> alarms = RunDetector(s, *sys, rate, first);
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
                      static_cast<double>(s.pairs());
    std::printf("| %s | %zu | %.3f | %.0f |\n", sys->name(), alarms.size(),
                1e4 * static_cast<double>(alarms.size()) / static_cast<double>(s.pairs()), ns);
  }
  return 0;
}

}  // namespace
}  // namespace cmestream

int main(int argc, char** argv) { return cmestream::Main(argc, argv); }
