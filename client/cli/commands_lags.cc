// `cmestream timescales` and `cmestream cktest`: lag scans and Chapman-Kolmogorov tests with
// jackknife error bars (docs/algorithms.md §8, docs/user-guide.md "Lag times and the CK test").
#include <cstdio>
#include <iostream>
#include <limits>
#include <string>

#include "client/cli/commands.h"
#include "client/cli/context.h"
#include "client/cli/json.h"
#include "client/cli/output.h"
#include "client/cli/timescale_text.h"
#include "client/cpp/client.h"

namespace cmestream::cli {

const char kTimescalesUsage[] = R"(usage: cmestream timescales NAME [--json]

Implied timescales in time units, -lag*dt/ln|mu| (the model's dt is the time of one sample
step, so with dt = 0.1 a mode that decays over 20 steps shows 2), slowest first, the stationary
mode left out, at every lag of the model (model create --lags; lags count sample steps), with
delete-one-block jackknife standard errors over contiguous time blocks. "inf": a mode with
|mu| >= 1 (no error bar); "n/a": undefined (e.g. a mode that does not exist). For a Markov
process they do not depend on the lag: choose the smallest lag from which they are flat.
Continuous models: the Koopman estimate (features [1, k_B(x)] on a lag basis of dictionary
atoms) and the count chain on the same atoms.
--json: {"model", "estimator", "lags", "timescales": [[per lag]], "stderr": [[same]],
         "samples": [pairs per lag], "blocks", "dt",
         "count_chain": {"lags", "timescales", "stderr", "samples", "blocks"}}
         (null: undefined or infinite)
)";

const char kCkTestUsage[] = R"(usage: cmestream cktest NAME [--clusters K] [--steps S] [--lag L] [--json]

Chapman-Kolmogorov test on the model's metastable sets (K defaults to the model's --clusters):
the set-to-set probabilities predicted from the lag L (default: the model's first lag),
T(L)^k, against those estimated at the lag k L, for every model lag k L with 2 <= k <= S
(default: all), with jackknife standard errors; for the Koopman model (continuous) and the
count chain. A Markov model at lag L has predicted = estimated within the error bars.
--json: {"model", "estimator", "lag", "clusters", "steps": [k...], "predicted": [[[K] x K] per k],
         "estimated": [same], "stderr": [same, of estimated], "max_deviation",
         "max_deviation_stderr", "count_chain": {same keys}}
)";

namespace {

void WriteScan(JsonWriter& w, const v1::LagScan& s) {
  w.Key("lags").BeginArray();
  for (uint32_t l : s.lags()) w.Uint(l);
  w.EndArray();
  w.Key("timescales").BeginArray();
  for (const auto& row : s.per_lag()) WriteListJson(w, row.timescales());
  w.EndArray();
  w.Key("stderr").BeginArray();
  for (const auto& row : s.per_lag()) WriteListJson(w, row.stderr());
  w.EndArray();
  w.Key("samples").BeginArray();
  for (const auto& row : s.per_lag()) w.Double(row.samples());
  w.EndArray();
  w.Key("blocks").Uint(s.blocks());
}

void PrintScan(const char* title, const v1::LagScan& s) {
  std::printf("# %s (jackknife over %u blocks): timescale +- stderr, slowest first\n", title, s.blocks());
  std::printf("%6s %12s", "lag", "pairs");
  std::printf("\n");
  for (int k = 0; k < s.per_lag_size(); ++k) {
    const auto& row = s.per_lag(k);
    std::printf("%6u %12.0f", s.lags(k), row.samples());
    for (int i = 0; i < row.timescales_size(); ++i) {
      const double se = i < row.stderr_size() ? row.stderr(i) : std::numeric_limits<double>::quiet_NaN();
      std::printf("  %s", TimescaleCell(row.timescales(i), se).c_str());
    }
    std::printf("\n");
  }
}

void WriteCk(JsonWriter& w, const v1::CkResult& c) {
  const int k = static_cast<int>(c.clusters());
  w.Key("lag").Uint(c.lag());
  w.Key("clusters").Uint(c.clusters());
  w.Key("steps").BeginArray();
  for (const auto& st : c.steps()) w.Uint(st.steps());
  w.EndArray();
  w.Key("predicted").BeginArray();
  for (const auto& st : c.steps()) WriteRowsJson(w, st.predicted(), k);
  w.EndArray();
  w.Key("estimated").BeginArray();
  for (const auto& st : c.steps()) WriteRowsJson(w, st.estimated(), k);
  w.EndArray();
  w.Key("stderr").BeginArray();
  for (const auto& st : c.steps()) WriteRowsJson(w, st.stderr(), k);
  w.EndArray();
  w.Key("max_deviation").Double(c.max_deviation());
  w.Key("max_deviation_stderr").Double(c.max_deviation_stderr());
  w.Key("blocks").Uint(c.blocks());
}

void PrintCk(const char* title, const v1::CkResult& c) {
  const int k = static_cast<int>(c.clusters());
  std::printf("# %s: lag %u, %u sets, max deviation %.4g +- %.3g (jackknife, %u blocks)\n", title, c.lag(),
              c.clusters(), c.max_deviation(), c.max_deviation_stderr(), c.blocks());
  for (const auto& st : c.steps()) {
    std::printf("  k = %u (lag %u): max deviation %.4g +- %.3g\n", st.steps(), st.lag(), st.max_deviation(),
                st.max_deviation_stderr());
    std::printf("    %-8s %-24s %-24s\n", "from->to", "predicted", "estimated +- stderr");
    for (int i = 0; i < k; ++i) {
      for (int j = 0; j < k; ++j) {
        const int e = i * k + j;
        if (e >= st.predicted_size() || e >= st.estimated_size()) continue;
        std::printf("    %3d->%-3d %-24.4f %.4f +- %.4f\n", i, j, st.predicted(e), st.estimated(e),
                    e < st.stderr_size() ? st.stderr(e) : 0.0);
      }
    }
  }
}

// Prints the JSON reply of a lag query: {"model", the view keys, "estimator", the primary result
// (the Koopman estimate's for a continuous model, else the count chain's), and for a continuous
// model "count_chain": {the count chain's result}}. write(w, result, primary) writes one result.
template <typename Reply, typename WriteResult>
void PrintLagReply(const std::string& model, const Reply& r, WriteResult write) {
  const bool koopman = r.estimator() == "koopman";
  JsonWriter w;
  BeginViewReply(w, model, r.view());
  w.Key("estimator").String(r.estimator());
  write(w, koopman ? r.koopman() : r.counts(), /*primary=*/true);
  if (koopman) {
    w.Key("count_chain").BeginObject();
    write(w, r.counts(), /*primary=*/false);
    w.EndObject();
  }
  PrintReply(w);
}

}  // namespace

int Timescales(Context& ctx, const Args& args) {
  const std::string cmd = "timescales";
  if (int rc = NeedName(args, cmd, kTimescalesUsage)) return rc;
  const std::string model = args.positional[0];
  if (int rc = NeedClient(ctx, cmd)) return rc;
  auto r = ctx.client->Timescales(model);
  if (!r.ok()) return Fail(cmd, r.status());
  if (args.Has("json")) {
    // "dt" follows the primary scan.
    PrintLagReply(model, *r, [&](JsonWriter& w, const v1::LagScan& scan, bool primary) {
      WriteScan(w, scan);
      if (primary) w.Key("dt").Double(r->dt());
    });
    return 0;
  }
  std::printf("# model '%s': implied timescales in time units (dt = %g per sample step) against the lag in steps\n",
              model.c_str(), r->dt());
  if (r->estimator() == "koopman") PrintScan("koopman", r->koopman());
  PrintScan("count chain", r->counts());
  return 0;
}

int CkTest(Context& ctx, const Args& args) {
  const std::string cmd = "cktest";
  if (int rc = NeedName(args, cmd, kCkTestUsage)) return rc;
  const std::string model = args.positional[0];
  uint32_t values[3] = {0, 0, 0};
  const char* flags[3] = {"clusters", "steps", "lag"};
  for (int f = 0; f < 3; ++f) {
    if (auto t = args.Value(flags[f])) {
      auto v = ParseUint(flags[f], *t);
      if (!v.ok() || *v < 1 || *v > 1000000) {
        return FailUsage(cmd, std::string("--") + flags[f] + ": expected an integer in [1, 1000000]");
      }
      values[f] = static_cast<uint32_t>(*v);
    }
  }
  if (int rc = NeedClient(ctx, cmd)) return rc;
  auto r = ctx.client->CkTest(model, values[0], values[1], values[2]);
  if (!r.ok()) return Fail(cmd, r.status());
  if (args.Has("json")) {
    PrintLagReply(model, *r, [](JsonWriter& w, const v1::CkResult& c, bool /*primary*/) { WriteCk(w, c); });
    return 0;
  }
  std::printf("# model '%s': Chapman-Kolmogorov test\n", model.c_str());
  if (r->estimator() == "koopman") PrintCk("koopman", r->koopman());
  PrintCk("count chain", r->counts());
  return 0;
}

}  // namespace cmestream::cli
