// Queries of a model's view: `refresh`, `koopman`, `predict`, `dictionary`, `counts`,
// `embedding`, `clusters`, `aggregation`, `latent`, `forecast`.
#include <unistd.h>

#include <algorithm>
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

namespace cmestream::cli {

int Refresh(Context& ctx, const Args& args) {
  if (int rc = NeedName(args, "refresh", kRefreshUsage)) return rc;
  double wait_timeout = 60;
  if (auto t = args.Value("wait-timeout")) {
    auto v = ParseDouble("wait-timeout", *t);
    if (!v.ok() || *v <= 0) return FailUsage("refresh", "--wait-timeout: expected seconds > 0");
    wait_timeout = *v;
  }
  if (int rc = NeedClient(ctx, "refresh")) return rc;
  auto view = ctx.client->Refresh(args.positional[0], args.Has("wait"), wait_timeout);
  if (!view.ok()) return Fail("refresh", view.status());
  if (args.Has("json")) {
    JsonWriter w;
    w.BeginObject();
    WriteViewJson(w, *view);
    w.EndObject();
    PrintJson(w);
  } else if (view->version() == 0) {
    std::cout << "refresh requested; no view yet\n";
  } else {
    std::cout << "view version " << view->version() << ", " << view->samples() << " samples, built in "
              << Num(view->build_seconds()) << " s\n";
  }
  return 0;
}

namespace {

// Reads a points file with the model's dimension (fetched with Describe).
absl::StatusOr<std::vector<double>> ReadPoints(Context& ctx, const std::string& model, const std::string& path,
                                               bool* server_error) {
  auto info = ctx.client->Describe(model);
  if (!info.ok()) {
    *server_error = true;
    return info.status();
  }
  const int d = static_cast<int>(info->config().dim());
  return ReadCsvFile(path, d, absl::StrCat("one point x_1..x_", d));
}

}  // namespace

namespace {
// One cycle of the headline and its harmonics (recursive: a harmonic has none).
void WriteCycleJson(JsonWriter& w, const v1::Cycle& c) {
  w.BeginObject();
  WriteFieldsJson(
      w, c, {"period", "timescale", "share", "amplitude", "harmonic", "group_share", "mode", "peak", "group_peak"});
  w.Key("harmonics").BeginArray();
  for (const auto& h : c.harmonics()) WriteCycleJson(w, h);
  w.EndArray();
  w.EndObject();
}

// The headline's cycles: strongest first, harmonics on the same line.
void PrintCycles(const v1::KoopmanHeadline& h) {
  if (h.cycles_size() == 0) return;
  std::cout << "cycles (by spectral peak: share of the observed variance x decay time):\n";
  for (int i = 0; i < h.cycles_size(); ++i) {
    const auto& c = h.cycles(i);
    const std::string ts = std::isfinite(c.timescale()) ? absl::StrFormat("%.4g", c.timescale()) : "inf";
    std::cout << absl::StrFormat("  %d. period %.6g, decay time %s, share %.3f (with harmonics %.3f), amplitude %.4g",
                                 i + 1, c.period(), ts, c.share(), c.group_share(), c.amplitude());
    if (c.harmonics_size() > 0) {
      std::cout << "; harmonics";
      for (const auto& hm : c.harmonics()) {
        std::cout << absl::StrFormat(" P/%d = %.4g (share %.3f)", hm.harmonic(), hm.period(), hm.share());
      }
    }
    std::cout << "\n";
  }
}
}  // namespace

int Koopman(Context& ctx, const Args& args) {
  const std::string cmd = "koopman";
  if (int rc = NeedName(args, cmd, kKoopmanUsage)) return rc;
  const std::string model = args.positional[0];
  uint32_t top = 0;
  if (auto t = args.Value("top")) {
    auto v = ParseUint("top", *t);
    if (!v.ok() || *v > 100000) return FailUsage(cmd, "--top: expected an integer in [0, 100000]");
    top = static_cast<uint32_t>(*v);
  }
  if (int rc = NeedClient(ctx, cmd)) return rc;
  std::vector<double> points;
  if (auto p = args.Value("points")) {
    bool server_error = false;
    auto pts = ReadPoints(ctx, model, *p, &server_error);
    if (!pts.ok()) return server_error ? Fail(cmd, pts.status()) : FailUsage(cmd, pts.status().message());
    points = std::move(*pts);
  }
  auto r = ctx.client->Koopman(model, top, points);
  if (!r.ok()) return Fail(cmd, r.status());
  const int k = r->eigenvalues_size();
  if (args.Has("json")) {
    JsonWriter w;
    BeginViewReply(w, model, r->view());
    w.Key("dt").Double(r->dt());
    w.Key("eigenvalues").BeginArray();
    for (const auto& c : r->eigenvalues()) w.Complex(c.re(), c.im());
    w.EndArray();
    w.Key("rates").BeginArray();
    for (const auto& c : r->rates()) w.Complex(c.re(), c.im());
    w.EndArray();
    // periods: null where mu is real.
    WriteFieldsJson(w, *r, {"timescales", "stationary", "excess", "periods", "amplitudes", "shares"});
    w.Key("headline").BeginObject();
    WriteFieldsJson(w, r->headline(), {"timescale", "stderr", "view", "nonstationary", "nonstationary_reason", "note"});
    w.Key("cycles").BeginArray();
    for (const auto& c : r->headline().cycles()) WriteCycleJson(w, c);
    w.EndArray();
    w.EndObject();
    w.Key("spectrum");
    WriteSpectrumJson(w, r->spectrum());
    // One list per eigenpair (empty without --points), one value per point.
    w.Key("eigenfunctions").BeginArray();
    for (int l = 0; l < k; ++l) {
      w.BeginArray();
      if (l < r->eigenfunctions_size()) {
        for (const auto& c : r->eigenfunctions(l).values()) w.Complex(c.re(), c.im());
      }
      w.EndArray();
    }
    w.EndArray();
    PrintReply(w);
    return 0;
  }
  std::cout << "model " << model << ": view version " << r->view().version() << ", " << r->view().samples()
            << " samples, dt " << Num(r->dt()) << "\n";
  const auto& h = r->headline();
  if (!h.view().empty()) {
    std::cout << "headline: slowest timescale " << Num(h.timescale());
    if (std::isfinite(h.stderr())) std::cout << " +/- " << Num(h.stderr()) << " (s.e.)";
    std::cout << " [" << h.view() << "]" << (h.note().empty() ? "" : ": ") << h.note() << "\n";
  }
  if (h.nonstationary()) std::cout << "nonstationary: " << h.nonstationary_reason() << "\n";
  PrintCycles(h);
  std::printf("%3s %12s %12s %10s %12s %12s %12s %12s %8s\n", "#", "mu.re", "mu.im", "|mu|", "rate.re", "rate.im",
              "timescale", "period", "share");
  for (int l = 0; l < k; ++l) {
    const auto& mu = r->eigenvalues(l);
    const double re = l < r->rates_size() ? r->rates(l).re() : NAN;
    const double im = l < r->rates_size() ? r->rates(l).im() : NAN;
    const double ts = l < r->timescales_size() ? r->timescales(l) : NAN;
    const bool stationary = l < r->stationary_size() && r->stationary(l);
    const double excess = l < r->excess_size() ? r->excess(l) : 0.0;
    const double period = l < r->periods_size() ? r->periods(l) : NAN;
    // "-" where there is no finite figure (a real mu has no period; |mu| >= 1 no decay time).
    const std::string ts_text = std::isfinite(ts) ? absl::StrFormat("%.6g", ts) : "-";
    const std::string period_text = std::isfinite(period) ? absl::StrFormat("%.6g", period) : "-";
    const std::string share_text = l < r->shares_size() ? absl::StrFormat("%.3f", r->shares(l)) : "-";
    std::printf(
        "%3d %12.6f %12.6f %10.6f %12.6g %12.6g %12s %12s %8s%s\n", l, mu.re(), mu.im(), std::hypot(mu.re(), mu.im()),
        re, im, ts_text.c_str(), period_text.c_str(), share_text.c_str(),
        stationary
            ? "  stationary"
            : (excess > 0 ? (h.nonstationary() ? "  |mu| > 1 (nonstationary)" : "  |mu| > 1 (see warnings)") : ""));
  }
  PrintSpectrum(r->spectrum(), "");
  if (!points.empty()) {
    std::cout << "eigenfunction values at " << (r->eigenfunctions_size() ? r->eigenfunctions(0).values_size() : 0)
              << " points: use --json\n";
  }
  return 0;
}

int Predict(Context& ctx, const Args& args) {
  const std::string cmd = "predict";
  if (int rc = NeedName(args, cmd, kPredictUsage)) return rc;
  const std::string model = args.positional[0];
  auto p = args.Value("points");
  if (!p) return FailUsage(cmd, "--points FILE is required");
  if (int rc = NeedClient(ctx, cmd)) return rc;
  bool server_error = false;
  auto pts = ReadPoints(ctx, model, *p, &server_error);
  if (!pts.ok()) return server_error ? Fail(cmd, pts.status()) : FailUsage(cmd, pts.status().message());
  auto r = ctx.client->Predict(model, *pts);
  if (!r.ok()) return Fail(cmd, r.status());
  const int d = static_cast<int>(r->dim());
  const int n = d > 0 ? r->predictions_size() / d : 0;
  if (args.Has("json")) {
    JsonWriter w;
    BeginViewReply(w, model, r->view());
    w.Key("dim").Uint(r->dim());
    w.Key("predictions").BeginArray();
    for (int i = 0; i < n; ++i) {
      w.BeginArray();
      for (int j = 0; j < d; ++j) w.Double(r->predictions(i * d + j));
      w.EndArray();
    }
    w.EndArray();
    PrintReply(w);
    return 0;
  }
  std::cout << "# E[Y|X=point], view version " << r->view().version() << ", " << r->view().samples() << " samples\n";
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < d; ++j) std::printf(j ? ",%.17g" : "%.17g", r->predictions(i * d + j));
    std::printf("\n");
  }
  return 0;
}

int Dictionary(Context& ctx, const Args& args) {
  const std::string cmd = "dictionary";
  if (int rc = NeedName(args, cmd, kDictionaryUsage)) return rc;
  if (int rc = NeedClient(ctx, cmd)) return rc;
  auto r = ctx.client->Dictionary(args.positional[0]);
  if (!r.ok()) return Fail(cmd, r.status());
  const int d = static_cast<int>(r->dim());
  auto rows = [&](JsonWriter& w, const google::protobuf::RepeatedField<double>& a) {
    w.BeginArray();
    for (int i = 0; d > 0 && i < a.size() / d; ++i) {
      w.BeginArray();
      for (int j = 0; j < d; ++j) w.Double(a.Get(i * d + j));
      w.EndArray();
    }
    w.EndArray();
  };
  if (args.Has("json")) {
    JsonWriter w;
    BeginViewReply(w, args.positional[0], r->view());
    w.Key("dim").Uint(r->dim());
    w.Key("sigma").Double(r->sigma());
    w.Key("x_atoms");
    rows(w, r->x_atoms());
    w.Key("y_atoms");
    rows(w, r->y_atoms());
    PrintReply(w);
    return 0;
  }
  std::cout << "# x-atoms of '" << args.positional[0] << "' (" << (d ? r->x_atoms_size() / d : 0) << "), sigma "
            << Num(r->sigma()) << ", view version " << r->view().version() << "\n";
  for (int i = 0; d > 0 && i < r->x_atoms_size() / d; ++i) {
    for (int j = 0; j < d; ++j) std::printf(j ? ",%.17g" : "%.17g", r->x_atoms(i * d + j));
    std::printf("\n");
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Views of docs/algorithms.md §2-6 (counts, embedding, clusters, aggregation, latent,
// forecast). Every JSON reply carries view_version and samples (WriteViewJson).
// ---------------------------------------------------------------------------------------------

namespace {

// Query points of a model: vectors of its dimension (continuous) or state ids (discrete).
struct QueryPoints {
  bool discrete = false;
  int dim = 0;                 // continuous models
  int64_t num_states = 0;      // discrete models
  std::vector<double> points;  // n*dim
  std::vector<int64_t> ids;    // n
  size_t count() const { return discrete ? ids.size() : (dim > 0 ? points.size() / dim : 0); }
};

// Describes `model` (a server error sets *server_error) and reads FILE if `path` is set:
// one point x_1..x_d per line, or one state id per line for discrete models.
absl::StatusOr<QueryPoints> LoadQueryPoints(Context& ctx, const std::string& model,
                                            const std::optional<std::string>& path, bool* server_error) {
  auto info = ctx.client->Describe(model);
  if (!info.ok()) {
    *server_error = true;
    return info.status();
  }
  QueryPoints q;
  q.discrete = info->config().num_states() > 0;
  q.dim = static_cast<int>(info->config().dim());
  q.num_states = info->config().num_states();
  if (!path) return q;
  if (q.discrete) {
    auto ids = ReadIdCsvFile(*path, 1, absl::StrCat("one state id in [0, ", q.num_states, ")"));
    if (!ids.ok()) return ids.status();
    q.ids = std::move(*ids);
  } else {
    auto pts = ReadCsvFile(*path, q.dim, absl::StrCat("one point x_1..x_", q.dim));
    if (!pts.ok()) return pts.status();
    q.points = std::move(*pts);
  }
  return q;
}

void PrintViewLine(const std::string& what, const std::string& model, const v1::ViewInfo& v) {
  std::cout << "# " << what << " of '" << model << "', view version " << v.version() << ", " << v.samples()
            << " samples\n";
}

void PrintVector(const char* label, const google::protobuf::RepeatedField<double>& a) {
  std::cout << label;
  for (double v : a) std::cout << " " << Num(v);
  std::cout << "\n";
}

#define CMESTREAM_LOAD_POINTS(q, cmd, model, path)                                                 \
  if (int rc = NeedClient(ctx, cmd)) return rc;                                                    \
  bool server_error_ = false;                                                                      \
  auto q##_or = LoadQueryPoints(ctx, model, path, &server_error_);                                 \
  if (!q##_or.ok()) {                                                                              \
    return server_error_ ? Fail(cmd, q##_or.status()) : FailUsage(cmd, q##_or.status().message()); \
  }                                                                                                \
  QueryPoints& q = *q##_or

// Runs a query of the view of the model named by the command's one positional argument, as
// every view command does: the usage and connection checks; with `with_points`, the query points
// of --points (LoadQueryPoints: the model is described first); `query(model, q)`, whose server
// error is the command's; then the reply as JSON (--json: {"model", the view keys, what
// json(w, reply, q) writes}) or as text (text(model, reply, q)).
template <typename Query, typename Json, typename Text>
int RunViewQuery(Context& ctx, const Args& args, const std::string& cmd, const char* usage, bool with_points,
                 Query query, Json json, Text text) {
  if (int rc = NeedName(args, cmd, usage)) return rc;
  const std::string& model = args.positional[0];
  if (int rc = NeedClient(ctx, cmd)) return rc;
  QueryPoints q;
  if (with_points) {
    bool server_error = false;
    auto q_or = LoadQueryPoints(ctx, model, args.Value("points"), &server_error);
    if (!q_or.ok()) return server_error ? Fail(cmd, q_or.status()) : FailUsage(cmd, q_or.status().message());
    q = std::move(*q_or);
  }
  auto r = query(model, q);
  if (!r.ok()) return Fail(cmd, r.status());
  if (args.Has("json")) {
    JsonWriter w;
    BeginViewReply(w, model, r->view());
    json(w, *r, q);
    PrintReply(w);
  } else {
    text(model, *r, q);
  }
  return 0;
}

}  // namespace

int Counts(Context& ctx, const Args& args) {
  auto json = [](JsonWriter& w, const v1::CountsResponse& r, const QueryPoints&) {
    const int d = static_cast<int>(r.dim());
    w.Key("num_states").Uint(r.num_states());
    w.Key("counts").BeginArray();
    for (const auto& c : r.counts()) {
      w.BeginArray().Uint(c.from()).Uint(c.to()).Double(c.count()).EndArray();
    }
    w.EndArray();
    WriteFieldsJson(w, r, {"visits", "stationary"});
    if (d > 0) {
      w.Key("dim").Uint(r.dim());
      w.Key("states");
      WriteRowsJson(w, r.state_coordinates(), d);
    }
  };
  auto text = [](const std::string& model, const v1::CountsResponse& r, const QueryPoints&) {
    const int d = static_cast<int>(r.dim());
    PrintViewLine("transition counts", model, r.view());
    std::cout << "# " << r.num_states() << " states, " << r.counts_size() << " non-zero counts\n";
    std::printf("%8s %12s %12s%s\n", "state", "visits", "stationary", d > 0 ? "  coordinates" : "");
    for (int i = 0; i < static_cast<int>(r.num_states()); ++i) {
      std::printf("%8d %12.6g %12.6g", i, i < r.visits_size() ? r.visits(i) : 0.0,
                  i < r.stationary_size() ? r.stationary(i) : 0.0);
      for (int j = 0; d > 0 && (i + 1) * d <= r.state_coordinates_size() && j < d; ++j) {
        std::printf(j ? ",%.6g" : "  %.6g", r.state_coordinates(i * d + j));
      }
      std::printf("\n");
    }
    std::printf("%8s %8s %12s\n", "from", "to", "count");
    for (const auto& c : r.counts()) std::printf("%8u %8u %12.6g\n", c.from(), c.to(), c.count());
  };
  return RunViewQuery(
      ctx, args, "counts", kCountsUsage, /*with_points=*/false,
      [&](const std::string& model, const QueryPoints&) { return ctx.client->Counts(model); }, json, text);
}

int Embedding(Context& ctx, const Args& args) {
  auto json = [](JsonWriter& w, const v1::EmbeddingResponse& r, const QueryPoints&) {
    w.Key("rank").Uint(r.rank());
    w.Key("embedding");
    WriteRowsJson(w, r.embedding(), static_cast<int>(r.rank()));
    WriteFieldsJson(w, r, {"singular_values", "singular_value_gaps"});
    WriteFitSummaryJson(w, r.summary());
  };
  auto text = [](const std::string& model, const v1::EmbeddingResponse& r, const QueryPoints&) {
    const int rank = static_cast<int>(r.rank());
    PrintViewLine("state embedding", model, r.view());
    std::cout << "# rank " << rank << "\n";
    PrintVector("# singular values", r.singular_values());
    PrintVector("# gaps           ", r.singular_value_gaps());
    PrintFitSummary(r.summary());
    for (int i = 0; rank > 0 && (i + 1) * rank <= r.embedding_size(); ++i) {
      for (int j = 0; j < rank; ++j) std::printf(j ? ",%.17g" : "%.17g", r.embedding(i * rank + j));
      std::printf("\n");
    }
  };
  return RunViewQuery(
      ctx, args, "embedding", kEmbeddingUsage, /*with_points=*/true,
      [&](const std::string& model, const QueryPoints& q) { return ctx.client->Embedding(model, q.points, q.ids); },
      json, text);
}

int Clusters(Context& ctx, const Args& args) {
  auto json = [](JsonWriter& w, const v1::ClustersResponse& r, const QueryPoints& q) {
    w.Key("clusters").Uint(r.clusters());
    w.Key("representatives").BeginArray();
    for (const auto& rep : r.representatives()) {
      w.BeginObject();
      if (q.discrete) {
        w.Key("id").Int(rep.id());
      } else {
        w.Key("id").Int(rep.id());
        w.Key("coordinates");
        WriteListJson(w, rep.coordinates());
      }
      w.Key("weight").Double(rep.weight());
      w.Key("label").Uint(rep.label());
      w.EndObject();
    }
    w.EndArray();
    w.Key("point_labels").BeginArray();
    for (uint32_t l : r.point_labels()) w.Uint(l);
    w.EndArray();
    w.Key("transition_matrix");
    WriteRowsJson(w, r.transition_matrix(), static_cast<int>(r.clusters()));
    WriteFieldsJson(w, r, {"masses", "timescales", "inertia"});
    WriteFitSummaryJson(w, r.summary());
  };
  auto text = [](const std::string& model, const v1::ClustersResponse& r, const QueryPoints& q) {
    const int k = static_cast<int>(r.clusters());
    PrintViewLine("metastable clusters", model, r.view());
    std::cout << "# " << k << " clusters; coarse-grained transition matrix (row = from):\n";
    std::printf("%8s %10s", "cluster", "mass");
    for (int j = 0; j < k; ++j) std::printf(" %10d", j);
    std::printf("\n");
    for (int i = 0; i < k; ++i) {
      std::printf("%8d %10.4g", i, i < r.masses_size() ? r.masses(i) : 0.0);
      for (int j = 0; j < k && i * k + j < r.transition_matrix_size(); ++j) {
        std::printf(" %10.4g", r.transition_matrix(i * k + j));
      }
      std::printf("\n");
    }
    PrintVector("# implied timescales", r.timescales());
    PrintFitSummary(r.summary());
    std::printf("%8s %8s %12s  %s\n", "rep", "label", "weight", q.discrete ? "" : "coordinates");
    for (const auto& rep : r.representatives()) {
      std::printf("%8lld %8u %12.6g ", static_cast<long long>(rep.id()), rep.label(), rep.weight());
      for (int j = 0; j < rep.coordinates_size(); ++j) {
        std::printf(j ? ",%.6g" : " %.6g", rep.coordinates(j));
      }
      std::printf("\n");
    }
    if (r.point_labels_size() > 0) {
      std::cout << "# labels of the " << r.point_labels_size() << " query points:\n";
      for (uint32_t l : r.point_labels()) std::cout << l << "\n";
    }
  };
  return RunViewQuery(
      ctx, args, "clusters", kClustersUsage, /*with_points=*/true,
      [&](const std::string& model, const QueryPoints& q) { return ctx.client->Clusters(model, q.points, q.ids); },
      json, text);
}

int Aggregation(Context& ctx, const Args& args) {
  auto json = [](JsonWriter& w, const v1::AggregationResponse& r, const QueryPoints&) {
    const int m = static_cast<int>(r.meta_states());
    const int d = static_cast<int>(r.dim());
    w.Key("meta_states").Uint(r.meta_states());
    // states: ids for discrete models, atom coordinates for continuous ones (row order).
    w.Key("states");
    if (d > 0 && r.state_coordinates_size() == r.state_ids_size() * d) {
      WriteRowsJson(w, r.state_coordinates(), d);
    } else {
      w.BeginArray();
      for (int64_t id : r.state_ids()) w.Int(id);
      w.EndArray();
    }
    w.Key("state_ids").BeginArray();
    for (int64_t id : r.state_ids()) w.Int(id);
    w.EndArray();
    w.Key("V");
    WriteRowsJson(w, r.v(), m);
    w.Key("U");
    WriteRowsJson(w, r.u(), m);
    w.Key("anchors").BeginArray();
    for (const auto& a : r.anchors()) {
      w.BeginArray();
      for (uint32_t i : a.indices()) w.Uint(i);
      w.EndArray();
    }
    w.EndArray();
    w.Key("partition").BeginArray();
    for (uint32_t l : r.partition()) w.Uint(l);
    w.EndArray();
    w.Key("excluded").BeginArray();
    for (int64_t id : r.excluded()) w.Int(id);
    w.EndArray();
    w.Key("distance_to_empirical").Double(r.distance_to_empirical());
    WriteFitSummaryJson(w, r.summary());
  };
  auto text = [](const std::string& model, const v1::AggregationResponse& r, const QueryPoints&) {
    const int m = static_cast<int>(r.meta_states());
    const int p = r.state_ids_size();
    PrintViewLine("soft state aggregation", model, r.view());
    std::cout << "# " << p << " states, " << m
              << " meta-states; mean row TV |U V^T - P_hat| = " << Num(r.distance_to_empirical()) << "\n";
    PrintFitSummary(r.summary());
    for (int k = 0; k < r.anchors_size(); ++k) {
      std::cout << "# anchors of meta-state " << k << " (rows):";
      for (uint32_t i : r.anchors(k).indices()) std::cout << " " << i;
      std::cout << "\n";
    }
    if (r.excluded_size() > 0) {
      std::cout << "# excluded (no incoming transitions):";
      for (int64_t id : r.excluded()) std::cout << " " << id;
      std::cout << "\n";
    }
    std::printf("%6s %8s %5s", "row", "state", "meta");
    for (int k = 0; k < m; ++k) std::printf(" %9s", absl::StrCat("V", k).c_str());
    for (int k = 0; k < m; ++k) std::printf(" %9s", absl::StrCat("U", k).c_str());
    std::printf("\n");
    for (int i = 0; i < p; ++i) {
      std::printf("%6d %8lld %5d", i, static_cast<long long>(r.state_ids(i)),
                  i < r.partition_size() ? static_cast<int>(r.partition(i)) : -1);
      // "+ 0.0" prints an exact zero of a clipped entry as 0, not -0.
      for (int k = 0; k < m && (i + 1) * m <= r.v_size(); ++k) std::printf(" %9.4g", r.v(i * m + k) + 0.0);
      for (int k = 0; k < m && (i + 1) * m <= r.u_size(); ++k) std::printf(" %9.4g", r.u(i * m + k) + 0.0);
      std::printf("\n");
    }
  };
  return RunViewQuery(
      ctx, args, "aggregation", kAggregationUsage, /*with_points=*/false,
      [&](const std::string& model, const QueryPoints&) { return ctx.client->Aggregation(model); }, json, text);
}

int Latent(Context& ctx, const Args& args) {
  auto json = [](JsonWriter& w, const v1::LatentResponse& r, const QueryPoints& q) {
    const int n = static_cast<int>(q.count());
    WriteFieldsJson(w, r, {"latent_states", "weights"});
    // densities: k lists of n values (wire layout [h*n + i]).
    w.Key("densities");
    if (n > 0) WriteRowsJson(w, r.densities(), n);
    else w.BeginArray().EndArray();
    w.Key("posteriors");
    WriteRowsJson(w, r.posteriors(), static_cast<int>(r.latent_states()));
    WriteFitSummaryJson(w, r.summary());
  };
  auto text = [](const std::string& model, const v1::LatentResponse& r, const QueryPoints& q) {
    const int k = static_cast<int>(r.latent_states());
    const int n = static_cast<int>(q.count());
    PrintViewLine("latent-state model", model, r.view());
    std::cout << "# " << k << " latent states\n";
    PrintVector("# weights", r.weights());
    PrintFitSummary(r.summary());
    if (n > 0) {
      std::printf("%8s", "point");
      for (int h = 0; h < k; ++h) std::printf(" %12s", absl::StrCat("density", h).c_str());
      for (int h = 0; h < k; ++h) std::printf(" %12s", absl::StrCat("posterior", h).c_str());
      std::printf("\n");
      for (int i = 0; i < n; ++i) {
        std::printf("%8d", i);
        for (int h = 0; h < k; ++h) {
          std::printf(" %12.6g", h * n + i < r.densities_size() ? r.densities(h * n + i) : NAN);
        }
        for (int h = 0; h < k; ++h) {
          std::printf(" %12.6g", i * k + h < r.posteriors_size() ? r.posteriors(i * k + h) : NAN);
        }
        std::printf("\n");
      }
    }
  };
  return RunViewQuery(
      ctx, args, "latent", kLatentUsage, /*with_points=*/true,
      [&](const std::string& model, const QueryPoints& q) { return ctx.client->Latent(model, q.points, q.ids); }, json,
      text);
}

namespace {

void WriteSkillJson(JsonWriter& w, const v1::ForecastSkill& s) {
  w.Key("skill").BeginObject();
  WriteFieldsJson(w, s, {"rmse", "rmse_persistence", "ratio", "pairs"});
  w.EndObject();
}

// The candidates' live skill per horizon, and what served each step: "step_methods" (one per
// step) and "horizon_skill" (one object per horizon kept).
void WriteHorizonsJson(JsonWriter& w, const v1::ForecastResponse& r) {
  w.Key("step_methods").BeginArray();
  for (const std::string& m : r.step_methods()) w.String(m);
  w.EndArray();
  w.Key("horizon_skill").BeginArray();
  for (const v1::ForecastHorizonSkill& h : r.horizon_skill()) {
    w.BeginObject();
    WriteFieldsJson(w, h, {"horizon", "pairs", "rmse_regression", "rmse_linear", "rmse_persistence", "method"});
    w.EndObject();
  }
  w.EndArray();
}

void PrintSkill(const v1::ForecastResponse& r, uint32_t horizon) {
  const v1::ForecastSkill& s = r.skill();
  std::printf("# live one-step skill over %llu pairs: rmse %.6g, persistence %.6g, ratio %.4g\n",
              static_cast<unsigned long long>(s.pairs()), s.rmse(), s.rmse_persistence(), s.ratio());
  // The candidates at the horizons asked for (all kept ones past the first only with --horizon).
  const int shown = std::min<int>(r.horizon_skill_size(), static_cast<int>(horizon));
  if (shown > 0) {
    std::printf("# live skill by horizon (rmse): horizon  pairs  regression  linear  persistence  served\n");
    for (int i = 0; i < shown; ++i) {
      const v1::ForecastHorizonSkill& h = r.horizon_skill(i);
      std::printf("#   %3u  %6llu  %.6g  %.6g  %.6g  %s\n", h.horizon(), static_cast<unsigned long long>(h.pairs()),
                  h.rmse_regression(), h.rmse_linear(), h.rmse_persistence(), h.method().c_str());
    }
  }
  if (r.method() == "persistence") {
    std::printf("# one-step forecasts are persistence (next = last): it beats the other candidates by live skill\n");
  } else if (r.method() == "linear") {
    std::printf(
        "# one-step forecasts are the least-squares AR on the same state: the regression does not beat it by live "
        "skill\n");
  }
}

// forecast --series: rolling forecasts over the rows of a file (continuous models).
int ForecastSeries(Context& ctx, const Args& args, const std::string& model, const std::string& path,
                   uint32_t horizon) {
  const std::string cmd = "forecast";
  CMESTREAM_LOAD_POINTS(q, cmd, model, path);
  if (q.discrete) return FailUsage(cmd, "--series: model '" + model + "' is discrete; use --window FILE of state ids");
  auto r = ctx.client->ForecastSeries(model, q.points, horizon);
  if (!r.ok()) return Fail(cmd, r.status());
  const int d = static_cast<int>(r->dim() > 0 ? r->dim() : q.dim);
  const int H = static_cast<int>(horizon);
  const int64_t per_row = static_cast<int64_t>(H) * d;
  const int64_t rows = per_row > 0 ? r->series_forecast_size() / per_row : 0;
  if (args.Has("json")) {
    JsonWriter w;
    BeginViewReply(w, model, r->view());
    w.Key("method").String(r->method());
    w.Key("horizon").Uint(horizon);
    w.Key("dim").Uint(static_cast<uint32_t>(d));
    w.Key("start").Uint(r->start());
    w.Key("forecasts").BeginArray();
    for (int64_t i = 0; i < rows; ++i) {
      w.BeginArray();
      for (int h = 0; h < H; ++h) {
        w.BeginArray();
        for (int j = 0; j < d; ++j) w.Double(r->series_forecast(static_cast<int>(i * per_row + h * d + j)));
        w.EndArray();
      }
      w.EndArray();
    }
    w.EndArray();
    WriteSkillJson(w, r->skill());
    WriteHorizonsJson(w, *r);
    PrintReply(w);
    return 0;
  }
  PrintViewLine("forecast", model, r->view());
  PrintSkill(*r, horizon);
  std::printf("# row r: forecasts of rows r+1..r+%d (first row %u)\n", H, r->start());
  for (int64_t i = 0; i < rows; ++i) {
    std::printf("%6lld", static_cast<long long>(r->start() + i));
    for (int h = 0; h < H; ++h) {
      for (int j = 0; j < d; ++j) {
        std::printf(j ? ",%.10g" : "  %.10g", r->series_forecast(static_cast<int>(i * per_row + h * d + j)));
      }
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int Forecast(Context& ctx, const Args& args) {
  const std::string cmd = "forecast";
  if (int rc = NeedName(args, cmd, kForecastUsage)) return rc;
  const std::string model = args.positional[0];
  auto window = args.Value("window");
  auto series = args.Value("series");
  if (!window == !series) {
    return FailUsage(cmd, "one of --window FILE (recent observations, oldest first) and --series FILE is required");
  }
  uint32_t horizon = 1;
  if (auto h = args.Value("horizon")) {
    auto v = ParseUint("horizon", *h);
    if (!v.ok() || *v < 1 || *v > 100000) return FailUsage(cmd, "--horizon: expected an integer in [1, 100000]");
    horizon = static_cast<uint32_t>(*v);
  }
  if (series) return ForecastSeries(ctx, args, model, *series, horizon);
  CMESTREAM_LOAD_POINTS(q, cmd, model, window);
  auto r = ctx.client->Forecast(model, q.points, q.ids, horizon);
  if (!r.ok()) return Fail(cmd, r.status());
  const int H = static_cast<int>(horizon);
  // Discrete: P probabilities per step; the forecast is the most likely id, and the expected
  // id sum_a a p(a) is reported too (for binary observations it is P(o = 1)).
  const int P = q.discrete && H > 0 ? r->distribution_size() / H : 0;
  std::vector<int64_t> most_likely;
  std::vector<double> expected;
  if (q.discrete) {
    for (int t = 0; t < H && P > 0; ++t) {
      int best = 0;
      double e = 0;
      for (int a = 0; a < P; ++a) {
        const double pa = r->distribution(t * P + a);
        if (pa > r->distribution(t * P + best)) best = a;
        e += a * pa;
      }
      most_likely.push_back(best);
      expected.push_back(e);
    }
  }
  const int d = q.discrete ? 0 : static_cast<int>(r->dim() > 0 ? r->dim() : q.dim);
  if (args.Has("json")) {
    JsonWriter w;
    BeginViewReply(w, model, r->view());
    w.Key("horizon").Uint(horizon);
    if (!q.discrete) w.Key("dim").Uint(d);
    w.Key("forecast");
    if (q.discrete) {
      w.BeginArray();
      for (int64_t a : most_likely) w.Int(a);
      w.EndArray();
      w.Key("expected");
      WriteListJson(w, expected);
      w.Key("distribution");
      WriteRowsJson(w, r->distribution(), P);
    } else {
      WriteRowsJson(w, r->forecast(), d);
    }
    WriteFieldsJson(w, *r, {"state", "method"});
    if (r->has_skill()) {
      WriteSkillJson(w, r->skill());
      WriteHorizonsJson(w, *r);
    }
    PrintReply(w);
    return 0;
  }
  PrintViewLine("forecast", model, r->view());
  if (r->has_skill()) PrintSkill(*r, horizon);
  for (int t = 0; t < H; ++t) {
    std::printf("%4d", t + 1);
    if (q.discrete) {
      if (t < static_cast<int>(most_likely.size())) {
        std::printf("  most likely %lld  expected %.6g  p:", static_cast<long long>(most_likely[t]), expected[t]);
        for (int a = 0; a < P; ++a) std::printf(" %.6g", r->distribution(t * P + a));
      }
    } else {
      for (int j = 0; j < d && t * d + j < r->forecast_size(); ++j) {
        std::printf(j ? ",%.17g" : "  %.17g", r->forecast(t * d + j));
      }
    }
    std::printf("\n");
  }
  return 0;
}

#undef CMESTREAM_LOAD_POINTS

}  // namespace cmestream::cli
