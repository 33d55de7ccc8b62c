// `cmestream simulate`: CSV data of the test systems (and their ground truth) on stdout.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli/commands.h"
#include "client/cli/context.h"
#include "client/cli/csv.h"
#include "client/cli/json.h"
#include "client/cli/output.h"
#include "client/cpp/client.h"
#include "core/systems/duffing.h"
#include "core/systems/four_well.h"
#include "core/systems/hmm.h"
#include "core/systems/soft_aggregation_chain.h"

namespace cmestream::cli {
namespace {

// Writes the text of `out` to stdout and clears it.
void FlushRows(std::string& out) {
  std::fwrite(out.data(), 1, out.size(), stdout);
  out.clear();
}

// Ends the row being written to `out`; past 1 MiB of text, flushes it (FlushRows).
void EndRow(std::string& out) {
  out += '\n';
  if (out.size() > (1 << 20)) FlushRows(out);
}

void WriteRows(const char* header, const RowMatrixXd& a, const RowMatrixXd* b) {
  std::string out = header;
  out += '\n';
  char buf[40];
  for (Eigen::Index i = 0; i < a.rows(); ++i) {
    for (Eigen::Index j = 0; j < a.cols(); ++j) {
      out += j ? "," : "";
      std::snprintf(buf, sizeof buf, "%.17g", a(i, j));
      out += buf;
    }
    if (b) {
      for (Eigen::Index j = 0; j < b->cols(); ++j) {
        std::snprintf(buf, sizeof buf, ",%.17g", (*b)(i, j));
        out += buf;
      }
    }
    EndRow(out);
  }
  FlushRows(out);
}

// A simulation's n pairs (x_t, y_t), one pair a line.
void WritePairs(const char* header, const systems::Transitions& t) { WriteRows(header, t.x, &t.y); }

// A trajectory simulated as consecutive pairs (y_t = x_{t+1}), as its n + 1 states, one a line.
void WriteStates(const char* header, const systems::Transitions& t) {
  RowMatrixXd states(t.x.rows() + 1, t.x.cols());
  states.topRows(t.x.rows()) = t.x;
  states.row(t.x.rows()) = t.y.row(t.y.rows() - 1);
  WriteRows(header, states, nullptr);
}

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  if (!out) return absl::NotFoundError(absl::StrCat(path, ": cannot open for writing"));
  out << text << "\n";
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

std::string VectorJson(const VectorXd& v) {
  std::string s = "[";
  for (Eigen::Index i = 0; i < v.size(); ++i) absl::StrAppend(&s, i ? "," : "", absl::StrFormat("%.17g", v[i]));
  return s + "]";
}

// Writes integer ids, one row of `cols` per line.
void WriteIdRows(const char* header, const std::vector<int>& a, const std::vector<int>* b) {
  std::string out = header;
  out += '\n';
  for (size_t i = 0; i < a.size(); ++i) {
    absl::StrAppend(&out, a[i]);
    if (b) absl::StrAppend(&out, ",", (*b)[i]);
    EndRow(out);
  }
  FlushRows(out);
}

// Simulators of docs/algorithms.md §3-6 (four-well, multi-well-2d, soft-aggregation,
// hmm-mixture, hmm-binary, kalman). Returns -1 for a system it does not know.
int SimulateViewSystems(const std::string& system, const Args& args, uint64_t n, uint64_t seed) {
  const std::string cmd = "simulate";
  const bool trajectory = args.Has("trajectory");
  const std::optional<std::string> truth = args.Value("truth");
  auto write_truth = [&](const std::string& json) -> int {
    if (!truth) return 0;
    if (auto s = WriteTextFile(*truth, json); !s.ok()) return FailUsage(cmd, s.message());
    return 0;
  };
  auto positive = [&](const char* flag, double* out) -> absl::Status {
    if (auto v = args.Value(flag)) {
      auto p = ParseDouble(flag, *v);
      if (!p.ok() || *p <= 0) {
        return absl::InvalidArgumentError(absl::StrCat("--", flag, ": expected a number > 0, got '", *v, "'"));
      }
      *out = *p;
    }
    return absl::OkStatus();
  };
  auto uint_in = [&](const char* flag, uint64_t lo, uint64_t hi, int* out) -> absl::Status {
    if (auto v = args.Value(flag)) {
      auto p = ParseUint(flag, *v);
      if (!p.ok() || *p < lo || *p > hi) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", flag, ": expected an integer in [", lo, ", ", hi, "], got '", *v, "'"));
      }
      *out = static_cast<int>(*p);
    }
    return absl::OkStatus();
  };
  const int64_t count = static_cast<int64_t>(n);
  // The two diffusions, four-well and multi-well-2d, differ only in their options, simulator,
  // headers and ground truth: --tau is the lag of either; the trajectory is written as its states
  // (--trajectory) or as its pairs; the truth starts with the system and tau, then `more(o)`.
  auto diffusion = [&](auto o, auto simulate, const char* states_header, const char* pairs_header, auto more) -> int {
    if (auto s = positive("tau", &o.tau); !s.ok()) return FailUsage(cmd, s.message());
    const systems::Transitions t = simulate(count, seed, o);
    if (trajectory) {
      WriteStates(states_header, t);
    } else {
      WritePairs(pairs_header, t);
    }
    return write_truth(
        absl::StrCat("{\"system\":\"", system, "\",\"tau\":", absl::StrFormat("%.17g", o.tau), more(o), "}"));
  };
  if (system == "four-well") {
    return diffusion(systems::FourWellOptions{}, systems::SimulateFourWell,
                     "# x  (four-well diffusion, one state per line, lag tau)",
                     "# x,y  (four-well diffusion V = 4 cos^2(pi x) + 5 (x/2)^8, beta 1; y = state after tau)",
                     [](const systems::FourWellOptions& o) {
                       return absl::StrCat(",\"barriers\":", VectorJson(systems::FourWellBarriers(o)),
                                           ",\"eigenvalues\":", VectorJson(systems::FourWellEigenvalues(5, o)));
                     });
  }
  if (system == "multi-well-2d") {
    return diffusion(systems::MultiWell2dOptions{}, systems::SimulateMultiWell2d,
                     "# x1,x2  (2-D multi-well diffusion, one state per line, lag tau)",
                     "# x1,x2,y1,y2  (2-D multi-well diffusion, wells near (+-0.5, +-0.5))",
                     [](const systems::MultiWell2dOptions& o) {
                       return absl::StrCat(",\"eigenvalues\":", VectorJson(systems::MultiWell2dEigenvalues(5, o)));
                     });
  }
  if (system == "soft-aggregation") {
    systems::SoftAggregationChainOptions o;
    o.seed = seed;
    if (!args.Value("states") || !args.Value("meta")) {
      return FailUsage(cmd, "soft-aggregation: --states P and --meta R are required");
    }
    for (auto s : {uint_in("states", 2, 1000000, &o.states), uint_in("meta", 1, 1000000, &o.meta_states),
                   uint_in("anchors-per-meta", 1, 1000000, &o.anchors_per_meta)}) {
      if (!s.ok()) return FailUsage(cmd, s.message());
    }
    o.hard = args.Has("hard");
    auto chain = systems::MakeSoftAggregationChain(o);
    if (!chain.ok()) return FailUsage(cmd, chain.status().message());
    // The trajectory's generator is seeded apart from the chain's (same user seed).
    const auto t = systems::SimulateSoftAggregationChain(*chain, count, seed ^ 0x9E3779B97F4A7C15ull);
    if (trajectory) {
      std::vector<int> states = t.from;
      if (!t.to.empty()) states.push_back(t.to.back());
      WriteIdRows("# state id, one per line (chain P = U V^T)", states, nullptr);
    } else {
      WriteIdRows("# i,j  (transitions of the chain P = U V^T)", t.from, &t.to);
    }
    return write_truth(chain->GroundTruthJson());
  }
  if (system == "hmm-mixture") {
    const auto hmm = systems::HmmMixture::Default();
    const VectorXd obs = hmm.Simulate(count, seed);
    RowMatrixXd rows = obs;
    WriteRows("# x  (3-state HMM, Gaussian and shifted-Gamma emissions; one observation per line)", rows, nullptr);
    return write_truth(hmm.GroundTruthJson(VectorXd::LinSpaced(221, -7.0, 15.0)));
  }
  if (system == "hmm-binary") {
    double learn = 0.05, forget = 0.03, guess = 0.25, slip = 0.15;
    for (auto [flag, v] : {std::pair{"learn", &learn}, std::pair{"forget", &forget}, std::pair{"guess", &guess},
                           std::pair{"slip", &slip}}) {
      if (auto s = positive(flag, v); !s.ok()) return FailUsage(cmd, s.message());
      if (*v >= 1) return FailUsage(cmd, absl::StrCat("--", flag, ": expected a probability < 1"));
    }
    const auto hmm = systems::DiscreteHmm::BinaryLearningChain(learn, forget, guess, slip);
    const VectorXd obs = hmm.Simulate(count, seed);
    std::vector<int> ids(obs.size());
    for (Eigen::Index i = 0; i < obs.size(); ++i) ids[i] = static_cast<int>(obs[i]);
    WriteIdRows("# observation id (0 wrong, 1 correct; 2-state learning/forgetting HMM)", ids, nullptr);
    return write_truth(hmm.GroundTruthJson());
  }
  if (system == "kalman") {
    const auto ssm = systems::LinearGaussianSsm::Default();
    const RowMatrixXd obs = ssm.Simulate(count, seed);
    WriteRows("# o  (linear-Gaussian state-space model; one observation per line)", obs, nullptr);
    return write_truth(ssm.GroundTruthJson());
  }
  return -1;
}

}  // namespace

int Simulate(const Args& args) {
  const std::string cmd = "simulate";
  if (args.positional.size() != 1) {
    std::cerr << "cmestream: simulate: expected one SYSTEM\n" << kSimulateUsage;
    return kExitUsage;
  }
  const std::string system = args.positional[0];
  uint64_t n = 10000, seed = 1, side = 50;
  if (auto v = args.Value("n")) {
    auto p = ParseUint("n", *v);
    if (!p.ok() || *p < 1 || *p > 100000000) return FailUsage(cmd, "--n: expected an integer in [1, 1e8]");
    n = *p;
  }
  if (auto v = args.Value("seed")) {
    auto p = ParseUint("seed", *v);
    if (!p.ok()) return FailUsage(cmd, p.status().message());
    seed = *p;
  }
  if (auto v = args.Value("n-side")) {
    auto p = ParseUint("n-side", *v);
    if (!p.ok() || *p < 2 || *p > 2000) return FailUsage(cmd, "--n-side: expected an integer in [2, 2000]");
    side = *p;
  }
  std::optional<double> dt, box;
  if (auto v = args.Value("dt")) {
    auto p = ParseDouble("dt", *v);
    if (!p.ok() || *p <= 0) return FailUsage(cmd, "--dt: expected a number > 0");
    dt = *p;
  }
  if (auto v = args.Value("box")) {
    auto p = ParseDouble("box", *v);
    if (!p.ok() || *p <= 0) return FailUsage(cmd, "--box: expected a number > 0");
    box = *p;
  }
  if (int rc = SimulateViewSystems(system, args, n, seed); rc >= 0) return rc;
  if (system == "double-well") {
    systems::DoubleWellOptions o;
    if (dt) o.dt = *dt;
    WritePairs("# x,y  (overdamped Langevin in V(x)=(x^2-1)^2, beta=3)",
               systems::SimulateDoubleWell(static_cast<int64_t>(n), seed, o));
    return 0;
  }
  // Both Duffing systems take --box (the square of starting points); --dt is the flow time of
  // "duffing" only, the basins of "duffing-grid" do not depend on it.
  systems::DuffingOptions o;
  if (box) o.box = *box;
  if (system == "duffing") {
    if (dt) o.dt = *dt;
    WritePairs("# x1,x2,y1,y2  (Duffing delta=0.5 beta=-1 alpha=1; y = flow of x over dt)",
               systems::SimulateDuffing(static_cast<int64_t>(n), seed, o));
    return 0;
  }
  if (system == "duffing-grid") {
    const Eigen::Index k = static_cast<Eigen::Index>(side);
    RowMatrixXd points(k * k, 2);
    for (Eigen::Index i = 0; i < k; ++i) {
      for (Eigen::Index j = 0; j < k; ++j) {
        points(i * k + j, 0) = -o.box + 2 * o.box * j / (k - 1);
        points(i * k + j, 1) = -o.box + 2 * o.box * i / (k - 1);
      }
    }
    const Eigen::VectorXi basin = systems::DuffingBasin(points, o);
    RowMatrixXd label = basin.cast<double>();
    WriteRows("# x1,x2,basin  (+1: attracted to (1,0), -1: to (-1,0))", points, &label);
    return 0;
  }
  return FailUsage(cmd, absl::StrCat("unknown system '", system,
                                     "' (expected duffing, double-well, duffing-grid, four-well, multi-well-2d, "
                                     "soft-aggregation, hmm-mixture, hmm-binary or kalman)"));
}

}  // namespace cmestream::cli
