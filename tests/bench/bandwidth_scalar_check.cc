// Not a benchmark: what the scalar bandwidth rule (docs/algorithms.md §1.11.2) picks against the
// general one, on 1-D warm-ups of 1,000 pairs scaled as the learner scales them (§1.13): the
// first three 1,000-pair windows of each series file given (CSV with a header, the value in the
// last column, e.g. NAB's data/*/*.csv) and 8 seeds of 11 simulated families. Each rule scores
// the same candidates (median fractions) with HeldOutVamp2 on the same split; rows differ only
// in the landmarks (the reference: 200 strided training points, the general rule). Prints the
// cases where a rule's pick differs from the reference's, and per rule: how many differ, the
// time per warm-up, the reference's own score lost by the rule's pick (regret), and a judge
// independent of the selection's split (the same score with the halves swapped: fit on the test
// blocks, scored on the training blocks) for the rule's pick against the reference's.
//
//   ./build/tests/bench/bandwidth_scalar_check PATH/TO/NAB/data/*/*.csv
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/cme/bandwidth.h"
#include "core/stream/input_scaler.h"
#include "core/systems/duffing.h"
#include "core/systems/four_well.h"

namespace cmestream {
namespace {

struct Case {
  std::string name;
  VectorXd s;
};

std::vector<double> ReadValues(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::vector<double> v;
  std::getline(in, line);
  while (std::getline(in, line)) {
    auto c = line.rfind(',');
    v.push_back(std::stod(line.substr(c + 1)));
  }
  return v;
}

RowMatrixXd Rows(const Eigen::Ref<const RowMatrixXd>& a, const std::vector<Eigen::Index>& idx) {
  RowMatrixXd out(idx.size(), a.cols());
  for (size_t i = 0; i < idx.size(); ++i) out.row(i) = a.row(idx[i]);
  return out;
}

// rule: 0 strided p; 1 quantile p; 2 quantile sized by range/sigma * p (p = factor), cap 200
struct Rule {
  const char* name;
  int kind;
  double p;
};

struct Result {
  int idx = -1;
  std::vector<double> scores;
  double seconds = 0;
};

// Held-out score with the halves swapped (fit on the selection's test blocks, scored on its
// training blocks), 200 strided landmarks: a judge independent of the selection's own split.
std::vector<double> Judge(const RowMatrixXd& x, const RowMatrixXd& y, double med) {
  BandwidthSelectionOptions options;
  const HeldOutSplit split = BlockSplit(x.rows(), 10);
  const RowMatrixXd xa = Rows(x, split.test), ya = Rows(y, split.test);
  const RowMatrixXd xb = Rows(x, split.train), yb = Rows(y, split.train);
  const RowMatrixXd lm = StridedLandmarks(xa, 200);
  std::vector<double> out;
  for (double f : options.median_fractions) out.push_back(HeldOutVamp2(xa, ya, xb, yb, lm, f * med, 4, 1e-3));
  return out;
}

Result Select(const RowMatrixXd& x, const RowMatrixXd& y, const Rule& rule, double* med_out) {
  auto t0 = std::chrono::steady_clock::now();
  BandwidthSelectionOptions options;
  const HeldOutSplit split = BlockSplit(x.rows(), options.blocks);
  const std::vector<Eigen::Index>&train = split.train, &test = split.test;
  const MedianDistance median = WarmupMedian(x, options);
  *med_out = median.median;
  Result r;
  if (!(median.median > 0) || !std::isfinite(median.median)) return r;
  const RowMatrixXd x_train = Rows(x, train), y_train = Rows(y, train);
  const RowMatrixXd x_test = Rows(x, test), y_test = Rows(y, test);
  const Eigen::Index nt = static_cast<Eigen::Index>(train.size());
  const double range = x_train.maxCoeff() - x_train.minCoeff();
  double best = -1;
  int k = 0;
  for (double f : options.median_fractions) {
    const double sigma = f * median.median;
    RowMatrixXd landmarks;
    if (rule.kind == 0) {
      landmarks = StridedLandmarks(x_train, std::min<Eigen::Index>(static_cast<Eigen::Index>(rule.p), nt));
    } else {
      Eigen::Index p = static_cast<Eigen::Index>(rule.p);
      if (rule.kind == 2)
        p = std::clamp<Eigen::Index>(static_cast<Eigen::Index>(std::ceil(rule.p * range / sigma)) + 1, 8, 200);
      landmarks = ScalarLandmarks(x_train, static_cast<int>(p));
    }
    const double score = HeldOutVamp2(x_train, y_train, x_test, y_test, landmarks, sigma, options.rank, options.ridge);
    r.scores.push_back(score);
    if (std::isfinite(score) && score > best) {
      best = score;
      r.idx = k;
    }
    ++k;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace
}  // namespace cmestream

int main(int argc, char** argv) {
  using namespace cmestream;
  std::vector<Case> cases;
  const int windows = 3;
  for (int a = 1; a < argc; ++a) {
    std::vector<double> v = ReadValues(argv[a]);
    std::string name = argv[a];
    name = name.substr(name.rfind('/') + 1);
    for (int w = 0; w < windows; ++w) {
      const size_t start = static_cast<size_t>(w) * 1000;
      if (start + 1001 > v.size()) break;
      cases.push_back({name + "@" + std::to_string(start), Eigen::Map<VectorXd>(v.data() + start, 1001)});
    }
  }
  constexpr double kTwoPi = 6.283185307179586;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> g;
    std::uniform_real_distribution<double> u(0, 1);
    VectorXd s(1001);
    auto add = [&](const std::string& n) { cases.push_back({n + "#" + std::to_string(seed), s}); };
    {
      auto w = systems::SimulateDoubleWell(1000, seed);
      s.head(1000) = w.x.col(0);
      s(1000) = w.y(999, 0);
      add("doublewell");
    }
    {
      auto w = systems::SimulateFourWell(1000, seed);
      s.head(1000) = w.x.col(0);
      s(1000) = w.y(999, 0);
      add("fourwell");
    }
    for (double period : {12.0, 40.0, 150.0}) {
      const double noise = 0.05 * static_cast<double>(seed);
      for (int t = 0; t <= 1000; ++t) s(t) = std::sin(kTwoPi * t / period) + noise * g(rng);
      add("sine" + std::to_string(static_cast<int>(period)));
    }
    {
      double level = 10;
      for (int t = 0; t <= 1000; ++t) {
        if (u(rng) < 1.0 / 200) level = 10 + 3 * g(rng);
        s(t) = level + 0.3 * g(rng) + (u(rng) < 0.005 ? 5.0 : 0.0);
      }
      add("levels");
    }
    for (int t = 0; t <= 1000; ++t) s(t) = std::round((1 + 0.5 * seed) * std::sin(kTwoPi * t / 60.0) + 0.5 * g(rng));
    add("quantized");
    {
      double v = 0;
      for (int t = 0; t <= 1000; ++t) s(t) = v += g(rng);
      add("randomwalk");
    }
    {
      double v = 0;
      for (int t = 0; t <= 1000; ++t) s(t) = v = 0.9 * v + g(rng);
      add("ar1");
    }
    {
      std::poisson_distribution<int> p(0.3 * seed);
      for (int t = 0; t <= 1000; ++t) s(t) = p(rng);
      add("poisson");
    }
    {
      std::exponential_distribution<double> e(1.0);
      for (int t = 0; t <= 1000; ++t) s(t) = std::sin(kTwoPi * t / 100.0) + (u(rng) < 0.02 ? 10 * e(rng) : 0.0);
      add("spiky");
    }
  }
  // Row 0 is the general rule (SelectBandwidth with scalar_landmarks = 0), row 1 the scalar rule
  // (SelectBandwidth's default for one column): both checked against the library below. The
  // others: what the pick does when only the landmarks change.
  const std::vector<Rule> rules = {{"ref strided200", 0, 200}, {"quant64 (scalar)", 1, 64}, {"strided64", 0, 64},
                                   {"strided100", 0, 100},     {"quant32", 1, 32},          {"quant48", 1, 48},
                                   {"quant96", 1, 96},         {"quant128", 1, 128}};
  std::vector<int> diffs(rules.size(), 0);
  std::vector<double> secs(rules.size(), 0), regret(rules.size(), 0), maxregret(rules.size(), 0);
  std::vector<int> big(rules.size(), 0), jbetter(rules.size(), 0), jworse(rules.size(), 0);
  std::vector<double> jsum(rules.size(), 0);
  int checked = 0;
  for (const Case& c : cases) {
    RowMatrixXd x = c.s.head(1000), y = c.s.tail(1000);
    InputScaler sc = InputScaler::Estimate(x, y);
    sc.PoolCommensurate(InputScaler::kCommensurateRatio);
    sc.ApplyRows(x);
    sc.ApplyRows(y);
    double med = 0;
    std::vector<Result> res;
    for (const Rule& r : rules) res.push_back(Select(x, y, r, &med));
    if (res[0].idx < 0) continue;
    ++checked;
    BandwidthSelectionOptions general;
    general.scalar_landmarks = 0;
    const BandwidthSelection lib_general = SelectBandwidth(x, y, general);
    const BandwidthSelection lib_scalar = SelectBandwidth(x, y, BandwidthSelectionOptions{});
    if (lib_general.scores != res[0].scores || lib_scalar.scores != res[1].scores) {
      std::printf("NOT THE LIBRARY'S SCORES: %s\n", c.name.c_str());
      return 1;
    }
    const std::vector<double> judge = Judge(x, y, med);
    for (size_t r = 0; r < rules.size(); ++r) {
      const double dj = (judge[res[r].idx] - judge[res[0].idx]) / (judge[res[0].idx] - 1);
      jsum[r] += judge[res[r].idx];
      jbetter[r] += dj > 0.01;
      jworse[r] += dj < -0.01;
    }
    std::string line;
    bool any = false;
    for (size_t r = 0; r < rules.size(); ++r) {
      secs[r] += res[r].seconds;
      if (res[r].idx != res[0].idx) {
        const double g = (res[0].scores[res[0].idx] - res[0].scores[res[r].idx]) / (res[0].scores[res[0].idx] - 1);
        regret[r] += g;
        maxregret[r] = std::max(maxregret[r], g);
        big[r] += g > 0.02;
        ++diffs[r];
        any = true;
        line += std::string(" ") + rules[r].name + "=" + std::to_string(res[r].idx);
      }
    }
    if (any || getenv("ALL")) {
      std::printf("%-40s ref=%d%s\n   ref:", c.name.c_str(), res[0].idx, line.c_str());
      for (double s : res[0].scores) std::printf(" %.5f", s);
      for (size_t r = 1; r < rules.size(); ++r) {
        if (res[r].idx == res[0].idx) continue;
        std::printf("\n   %s:", rules[r].name);
        for (double s : res[r].scores) std::printf(" %.5f", s);
      }
      std::printf("\n");
    }
  }
  std::printf("%d cases\n", checked);
  for (size_t r = 0; r < rules.size(); ++r)
    std::printf("%-16s differs %3d  time %.1f ms/case  regret mean %.4f max %.4f  >2%%: %d\n", rules[r].name, diffs[r],
                1e3 * secs[r] / checked, regret[r] / checked, maxregret[r], big[r]);
  for (size_t r = 0; r < rules.size(); ++r)
    std::printf("%-16s judge (swapped halves): mean score %.4f, better by >1%% %d, worse by >1%% %d\n", rules[r].name,
                jsum[r] / checked, jbetter[r], jworse[r]);
}
