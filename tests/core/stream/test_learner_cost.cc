// PerPairCost (core/stream/learner_cost.h): which estimators a learner's options run, in the order
// a pair meets them, and their operation counts at the model's sizes.
#include "core/stream/learner_cost.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace cmestream {
namespace {

std::vector<std::string> Names(const std::vector<EstimatorCost>& costs) {
  std::vector<std::string> names;
  for (const EstimatorCost& c : costs) names.push_back(c.name);
  return names;
}

double Total(const std::vector<EstimatorCost>& costs) {
  double t = 0;
  for (const EstimatorCost& c : costs) t += c.multiply_adds;
  return t;
}

const EstimatorCost& Find(const std::vector<EstimatorCost>& costs, const std::string& name) {
  for (const EstimatorCost& c : costs) {
    if (c.name == name) return c;
  }
  static const EstimatorCost none;
  ADD_FAILURE() << "no estimator " << name;
  return none;
}

StreamingLearner::Options Continuous(int dim) {
  StreamingLearner::Options o;
  o.dim = dim;
  o.cme.dim = dim;
  o.cme.sigma = 0.5;
  return o;
}

TEST(PerPairCost, ListsWhatTheOptionsRunInTheOrderAPairMeetsThem) {
  StreamingLearner::Options o = Continuous(2);
  EXPECT_EQ(Names(PerPairCost(o, 100)), (std::vector<std::string>{"cme", "counts", "embedding", "spectral", "lags",
                                                                  "forecast", "forecast_candidates"}));
  o.cme.sigma = 0;
  o.scale_inputs = true;
  o.alarms = true;
  o.latent = true;
  o.window = 2;
  o.lags.clear();
  EXPECT_EQ(Names(PerPairCost(o, 100)),
            (std::vector<std::string>{"input", "alarms", "cme", "counts", "embedding", "spectral", "forecast",
                                      "forecast_candidates", "latent", "predictive"}));
  // A 2-value state: the cubic forecast (P = 6 regressors, 2 channels) and 2 x 2 sign components.
  EXPECT_EQ(Find(PerPairCost(o, 100), "alarms").multiply_adds, 7 * 8 / 2 + 2 * 7 * 2 + 2 * 2);
  StreamingLearner::Options discrete;
  discrete.num_states = 5;
  discrete.alarms = true;
  EXPECT_EQ(Names(PerPairCost(discrete, 0)), (std::vector<std::string>{"alarms", "counts", "lags"}));
  EXPECT_EQ(Find(PerPairCost(discrete, 0), "alarms").multiply_adds, 5);  // the p-value's row walk
}

TEST(PerPairCost, CountsAtTheDictionarySizeOrItsCap) {
  StreamingLearner::Options o = Continuous(2);
  const std::vector<EstimatorCost> c = PerPairCost(o, 100);
  EXPECT_EQ(Find(c, "cme").multiply_adds, 3 * 100 * 100 + 2 * 100 * 2);
  EXPECT_EQ(Find(c, "spectral").multiply_adds, 2 * 100 * 100 + 100 * 2);
  EXPECT_EQ(Find(c, "embedding").multiply_adds, 2 * 256 * 256 + 256 * 2);
  EXPECT_EQ(Find(c, "cme").formula, "3 m^2 + 2 m d (m = 100, d = 2)");
  // In the warm-up (no dictionary yet) the bound is the cap's.
  const std::vector<EstimatorCost> warm = PerPairCost(o, 0);
  EXPECT_EQ(Find(warm, "cme").multiply_adds, 3.0 * 1000 * 1000 + 2.0 * 1000 * 2);
  EXPECT_NE(Find(warm, "cme").formula.find("(cap)"), std::string::npos);
  // The spectral moments at their live basis, which stays below the dictionary between re-bases.
  const std::vector<EstimatorCost> based = PerPairCost(o, 100, 30);
  EXPECT_EQ(Find(based, "spectral").multiply_adds, 2 * 30 * 30 + 30 * 2);
  EXPECT_EQ(Find(based, "spectral").formula, "2 b^2 + b d (b = 30, d = 2)");
  EXPECT_EQ(Find(based, "cme").multiply_adds, Find(c, "cme").multiply_adds);
}

TEST(PerPairCost, AReductionMovesTheKernelCostsToItsDimension) {
  StreamingLearner::Options wide = Continuous(512);
  wide.cme.sigma = 0;
  wide.alarms = true;
  StreamingLearner::Options reduced = wide;
  reduced.reduce = 32;
  const std::vector<EstimatorCost> a = PerPairCost(wide, 1000), b = PerPairCost(reduced, 1000);
  EXPECT_EQ(Find(b, "input").multiply_adds, 3.0 * 512 * 32);
  EXPECT_EQ(Find(b, "cme").multiply_adds, 3e6 + 2.0 * 1000 * 32);
  EXPECT_EQ(Find(a, "cme").multiply_adds, 3e6 + 2.0 * 1000 * 512);
  EXPECT_EQ(Find(a, "alarms").multiply_adds, Find(b, "alarms").multiply_adds);  // raw channels either way
  // The 512-dimensional forecast regression is not run (dim > 256); the reduced one is.
  EXPECT_EQ(Names(a).size() + 3, Names(b).size());  // + input, + forecast, + its candidates
  EXPECT_LT(Total(b), Total(a));
  // At m = 1000 the CME and the spectral moments are most of the reduced model's bound.
  EXPECT_GT((Find(b, "cme").multiply_adds + Find(b, "spectral").multiply_adds) / Total(b), 0.8);
}

}  // namespace
}  // namespace cmestream
