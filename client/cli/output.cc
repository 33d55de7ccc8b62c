// Printing helpers shared by the `cmestream` commands.
#include "client/cli/output.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/descriptor.h"

namespace cmestream::cli {

// ---------------------------------------------------------------------------------------------
// Output helpers
// ---------------------------------------------------------------------------------------------

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

namespace {

using google::protobuf::FieldDescriptor;

// Writes value `i` of the repeated field `f` of `m` (i < 0: the singular field `f`) with the
// JsonWriter call of its type: the integer types cmestream.proto uses, doubles, bools, strings.
// Returns false for any other type.
bool WriteScalarJson(JsonWriter& w, const google::protobuf::Message& m, const FieldDescriptor* f, int i) {
  const google::protobuf::Reflection& r = *m.GetReflection();
  const bool one = i < 0;
  const FieldDescriptor::CppType type = f->cpp_type();
  if (type == FieldDescriptor::CPPTYPE_INT64) w.Int(one ? r.GetInt64(m, f) : r.GetRepeatedInt64(m, f, i));
  else if (type == FieldDescriptor::CPPTYPE_UINT32) w.Uint(one ? r.GetUInt32(m, f) : r.GetRepeatedUInt32(m, f, i));
  else if (type == FieldDescriptor::CPPTYPE_UINT64) w.Uint(one ? r.GetUInt64(m, f) : r.GetRepeatedUInt64(m, f, i));
  else if (type == FieldDescriptor::CPPTYPE_DOUBLE) w.Double(one ? r.GetDouble(m, f) : r.GetRepeatedDouble(m, f, i));
  else if (type == FieldDescriptor::CPPTYPE_BOOL) w.Bool(one ? r.GetBool(m, f) : r.GetRepeatedBool(m, f, i));
  else if (type == FieldDescriptor::CPPTYPE_STRING) w.String(one ? r.GetString(m, f) : r.GetRepeatedString(m, f, i));
  else return false;
  return true;
}

// A name that is no field of the message, or a field of a type WriteScalarJson does not write,
// is a bug of this program's lists, not of the reply.
[[noreturn]] void AbortOnField(const google::protobuf::Message& message, const char* name) {
  std::fprintf(stderr, "cmestream: internal error: %s has no field '%s' to write as JSON\n",
               message.GetDescriptor()->full_name().c_str(), name);
  std::abort();
}

}  // namespace

void WriteFieldsJson(JsonWriter& w, const google::protobuf::Message& message,
                     std::initializer_list<const char*> names) {
  const google::protobuf::Reflection& r = *message.GetReflection();
  for (const char* name : names) {
    const FieldDescriptor* f = message.GetDescriptor()->FindFieldByName(name);
    if (f == nullptr) AbortOnField(message, name);
    if (f->has_presence() && !r.HasField(message, f)) continue;
    w.Key(name);
    bool ok = true;
    if (f->is_repeated()) {
      w.BeginArray();
      for (int i = 0; ok && i < r.FieldSize(message, f); ++i) ok = WriteScalarJson(w, message, f, i);
      w.EndArray();
    } else {
      ok = WriteScalarJson(w, message, f, -1);
    }
    if (!ok) AbortOnField(message, name);
  }
}

namespace {

// The refresh's per-sub-view build seconds, slowest first (a proto map has no order).
std::vector<std::pair<std::string, double>> ViewSecondsBySize(const v1::ViewInfo& view) {
  std::vector<std::pair<std::string, double>> out(view.build_seconds_by_view().begin(),
                                                  view.build_seconds_by_view().end());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  return out;
}

void WriteViewSecondsJson(JsonWriter& w, const v1::ViewInfo& view) {
  std::vector<std::pair<std::string, double>> by_name(view.build_seconds_by_view().begin(),
                                                      view.build_seconds_by_view().end());
  std::sort(by_name.begin(), by_name.end());
  w.Key("view_build_seconds_by_view").BeginObject();
  for (const auto& [name, seconds] : by_name) w.Key(name).Double(seconds);
  w.EndObject();
}

}  // namespace

void WriteViewJson(JsonWriter& w, const v1::ViewInfo& view) {
  w.Key("view_version").Uint(view.version());
  w.Key("samples").Uint(view.samples());
  w.Key("view_age_seconds").Double(view.age_seconds());
  w.Key("view_build_seconds").Double(view.build_seconds());
  WriteViewSecondsJson(w, view);
}

void WriteFitSummaryJson(JsonWriter& w, const v1::FitSummary& s) {
  w.Key("summary").BeginObject();
  WriteFieldsJson(w, s, {"termination", "message", "brief_report"});
  w.Key("figures").BeginObject();
  const std::map<std::string, double> sorted(s.figures().begin(), s.figures().end());
  for (const auto& [name, value] : sorted) w.Key(name).Double(value);
  w.EndObject();
  w.EndObject();
}

void PrintFitSummary(const v1::FitSummary& s) {
  if (!s.brief_report().empty()) std::cout << "# fit: " << s.brief_report() << "\n";
  if (!s.termination().empty() && s.termination() != "success") {
    std::cout << "# warning: the fit ended " << s.termination() << (s.message().empty() ? "" : ": ") << s.message()
              << "\n";
  }
}

void WriteConfigJson(JsonWriter& w, const v1::ModelConfig& c) {
  w.BeginObject();
  WriteFieldsJson(w, c, {"name", "dim"});
  if (c.has_sigma()) w.Key("sigma").Double(c.sigma());
  else w.Key("sigma").String("auto");
  w.Key("scale").String(c.has_scale() ? c.scale() : "none");
  // The optional settings appear only when set; num_states (no presence) always.
  WriteFieldsJson(w, c,
                  {"eta",
                   "lambda",
                   "epsilon",
                   "max_dict",
                   "dt",
                   "seed",
                   "auto_sigma_warmup",
                   "refresh_interval_seconds",
                   "refresh_every_samples",
                   "step_decay_samples",
                   "step_decay_power",
                   "averaging",
                   "num_states",
                   "forgetting",
                   "rff_features",
                   "forecast_features",
                   "rank",
                   "clusters",
                   "meta_states",
                   "anchor_threshold"});
  if (!c.vertex_hunting().empty()) w.Key("vertex_hunting").String(c.vertex_hunting());
  WriteFieldsJson(
      w, c,
      {"latent_states", "tensor_restarts", "tensor_iterations", "reservoir", "window", "ridge_stage1", "ridge_stage2"});
  w.Key("delays").Uint(c.has_delays() ? c.delays() : 1);
  if (c.has_reduce()) w.Key("reduce").Uint(c.reduce());
  w.Key("delay_stride").Uint(c.has_delay_stride() ? c.delay_stride() : 1);
  w.Key("alarms").String(c.has_alarms() ? c.alarms() : "off");
  if (c.has_alarm_rate()) w.Key("alarm_rate").Double(c.alarm_rate());
  if (c.has_alarms()) w.Key("on_change").String(c.has_on_change() ? c.on_change() : "keep");
  if (c.has_fork_of()) {
    w.Key("fork_of").String(c.fork_of());
    w.Key("fork_index").Uint(c.fork_index());
  }
  w.EndObject();
}

void WriteModelJson(JsonWriter& w, const v1::ModelInfo& m) {
  w.BeginObject();
  w.Key("name").String(m.config().name());
  w.Key("dim").Uint(m.config().dim());
  w.Key("num_states").Uint(m.config().num_states());
  w.Key("state_dim").Uint(m.state_dim());
  if (m.estimators_size() > 0) {
    w.Key("estimators").BeginArray();
    for (const v1::EstimatorCost& e : m.estimators()) {
      w.BeginObject();
      WriteFieldsJson(w, e, {"name", "multiply_adds", "formula"});
      w.EndObject();
    }
    w.EndArray();
  }
  if (m.alarms().enabled()) {
    const v1::AlarmStatus& a = m.alarms();
    w.Key("alarms").BeginObject();
    WriteFieldsJson(w, a, {"armed_at", "scored", "alarms_total", "score", "threshold", "alarm_rate", "rearmed"});
    w.EndObject();
  }
  WriteFieldsJson(
      w, m,
      {"samples", "pending_warmup", "dictionary_size", "dictionary_size_y", "forced_compressions", "forced_error_sum",
       "inverse_drift", "batches_applied", "created_unix_seconds", "evicted", "idle_seconds", "last_reload_seconds"});
  w.Key("view_version").Uint(m.view().version());
  w.Key("view_samples").Uint(m.view().samples());
  w.Key("view_age_seconds").Double(m.view().age_seconds());
  w.Key("view_lag_pairs").Uint(m.view().lag_pairs());  // learned pairs the view does not reflect yet
  w.Key("view_build_seconds").Double(m.view().build_seconds());
  WriteViewSecondsJson(w, m.view());
  const auto& s = m.sigma_selection();
  // sigma: the bandwidth in use; null while "auto" is still warming up.
  if (s.chosen() > 0) w.Key("sigma").Double(s.chosen());
  else if (m.config().has_sigma() && m.config().sigma() > 0) w.Key("sigma").Double(m.config().sigma());
  else w.Key("sigma").Null();
  w.Key("sigma_selection").BeginObject();
  WriteFieldsJson(w, s, {"automatic", "chosen", "median_distance", "candidates", "scores", "warmup_pairs"});
  if (!s.note().empty()) w.Key("note").String(s.note());  // what was degenerate in the warm-up
  w.EndObject();
  if (m.has_failure()) {
    w.Key("failure").BeginObject();
    WriteFieldsJson(w, m.failure(), {"sequence", "reason"});
    w.EndObject();
  }
  if (m.has_memory()) {
    w.Key("memory").BeginObject();
    WriteFieldsJson(w, m.memory(),
                    {"charged_bytes", "dictionary_cap", "growth_denied", "budget_bytes", "committed_bytes", "models"});
    w.EndObject();
  }
  if (m.has_input_scaling()) {
    const v1::InputScaling& in = m.input_scaling();
    w.Key("input_scaling").BeginObject();
    WriteFieldsJson(w, in, {"mode", "frozen", "center", "scale", "spread"});
    if (in.reduce() > 0) WriteFieldsJson(w, in, {"reduce", "explained_variance", "reduce_variances"});
    w.EndObject();
  }
  w.Key("config");
  WriteConfigJson(w, m.config());
  if (m.has_spectrum()) {
    w.Key("spectrum");
    WriteSpectrumJson(w, m.spectrum());
  }
  w.Key("sub_views").BeginArray();
  for (const v1::SubViewStatus& sv : m.sub_views()) {
    w.BeginObject();
    WriteFieldsJson(w, sv, {"name", "available"});
    if (!sv.available()) w.Key("error").String(sv.error());
    if (sv.has_summary()) WriteFitSummaryJson(w, sv.summary());
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
}

void WriteSpectrumJson(JsonWriter& w, const v1::SpectrumInfo& s) {
  w.BeginObject();
  WriteFieldsJson(w, s,
                  {"estimator", "epoch", "epoch_samples", "epoch_weight", "ready", "basis_size", "epochs", "data_share",
                   "heldout_score", "heldout_pairs", "heldout_view_version", "selection_score", "score_rank", "ridge",
                   "ridge_grid", "ridge_scores"});
  w.Key("slowest_timescales").BeginObject();
  WriteFieldsJson(w, s.comparison(),
                  {"koopman", "count_chain", "embedding", "relative_disagreement", "threshold", "warning", "lag_scan",
                   "lag_scan_stderr", "lag_scan_lag", "lag_scan_blocks", "relative_stderr", "diagnostic"});
  w.EndObject();
  WriteFieldsJson(w, s, {"warnings"});
  w.EndObject();
}

void PrintSpectrum(const v1::SpectrumInfo& s, const std::string& indent) {
  std::cout << indent << "estimator " << s.estimator();
  if (s.estimator() == "spectral-moments") {
    std::cout << ": epoch " << s.epoch() << " of " << s.epochs() << " (" << s.epoch_samples()
              << " samples = " << Num(100 * s.data_share()) << " % of the stream, " << s.basis_size() << " basis atoms"
              << (s.ready() ? "" : ", not ready") << "), ridge " << Num(s.ridge()) << " (selection VAMP-E "
              << Num(s.selection_score()) << "), ";
    if (s.heldout_pairs() > 0 && std::isfinite(s.heldout_score())) {
      std::cout << "prequential VAMP-E " << Num(s.heldout_score()) << " over " << s.heldout_pairs()
                << " pairs after view " << s.heldout_view_version();
    } else {
      // The score rates a published view on the pairs that arrive after it (test, then train).
      std::cout << "prequential VAMP-E pending (it scores a view on the pairs that arrive after it)";
    }
    std::cout << " (rank " << s.score_rank() << ")";
  }
  std::cout << "\n";
  const auto& c = s.comparison();
  // "n/a" for a view without a resolved timescale (NaN in the reply).
  const auto fig = [](double v) { return std::isfinite(v) ? Num(v) : std::string("n/a"); };
  std::cout << indent << "slowest timescale koopman " << fig(c.koopman()) << ", count chain " << fig(c.count_chain())
            << ", embedding " << fig(c.embedding()) << "; spread " << fig(c.relative_disagreement())
            << (c.warning() ? " (WARNING: beyond the error bars)" : "") << "\n";
  if (!c.diagnostic().empty()) std::cout << indent << "cross-view check: " << c.diagnostic() << "\n";
  if (std::isfinite(c.lag_scan())) {
    std::cout << indent << "lag scan (lag " << c.lag_scan_lag() << ") " << Num(c.lag_scan()) << " +/- "
              << Num(c.lag_scan_stderr()) << " (jackknife s.e., " << c.lag_scan_blocks()
              << " blocks: the sampling error of a slowest timescale on this stream)\n";
  }
  for (const auto& text : s.warnings()) std::cout << indent << "warning: " << text << "\n";
}

void PrintModel(const v1::ModelInfo& m) {
  const auto& c = m.config();
  const auto& s = m.sigma_selection();
  if (c.num_states() > 0) {
    std::cout << "model " << c.name() << "  discrete, " << c.num_states() << " states\n";
  } else {
    std::cout << "model " << c.name() << "  dim " << c.dim();
    if (c.delays() > 1) {
      std::cout << ", delays " << c.delays() << " (stride " << std::max<uint32_t>(c.delay_stride(), 1)
                << "): learns on windows of " << m.state_dim() << " values";
    }
    if (c.reduce() > 0) {
      std::cout << ", reduced to " << c.reduce() << " principal directions";
      if (m.input_scaling().reduce() > 0 && m.input_scaling().reduce_variances_size() > 0) {
        std::cout << " (" << Num(100 * m.input_scaling().explained_variance()) << " % of the warm-up's variance)";
      }
    }
    std::cout << "\n";
  }
  if (m.has_failure()) {
    std::cout << "  FAILED            ";
    if (m.failure().sequence() > 0) std::cout << "at WAL record " << m.failure().sequence() << ": ";
    std::cout << m.failure().reason() << " (it refuses data and queries; delete and re-create it)\n";
  }
  if (c.has_fork_of()) {
    std::cout << "  fork of           " << c.fork_of() << ", from its alarm at pair " << c.fork_index()
              << " (fed through it)\n";
  }
  if (m.evicted()) {
    std::cout << "  evicted           idle " << Num(m.idle_seconds())
              << " s: its learner is on disk; its view and alarms answer, its next batch loads it back\n";
  }
  std::cout << "  samples           " << m.samples();
  if (m.pending_warmup() > 0) std::cout << " (+" << m.pending_warmup() << " buffered for sigma auto)";
  std::cout << ", batches " << m.batches_applied() << "\n";
  const bool discrete = c.num_states() > 0;
  if (discrete) {
    // Discrete models have no kernel and no CME: their CME settings are unused defaults.
    std::cout << "  config            dt " << Num(c.dt()) << ", seed " << c.seed() << "\n";
  } else {
    std::cout << "  dictionary        " << m.dictionary_size() << " x-atoms, " << m.dictionary_size_y()
              << " y-atoms; forced compressions " << m.forced_compressions() << "\n";
    std::cout << "  sigma             ";
    if (s.chosen() > 0) {
      std::cout << Num(s.chosen());
      if (s.automatic()) {
        std::cout << " (auto from " << s.warmup_pairs() << " warm-up pairs; median distance "
                  << Num(s.median_distance()) << "; held-out VAMP-2 score per candidate:";
        for (int i = 0; i < s.candidates_size() && i < s.scores_size(); ++i) {
          std::cout << " " << Num(s.candidates(i)) << ":" << Num(s.scores(i));
        }
        std::cout << ")";
      }
    } else if (c.has_sigma() && c.sigma() > 0) {
      std::cout << Num(c.sigma());
    } else {
      std::cout << "auto (not chosen yet)";
    }
    std::cout << "\n";
    if (!s.note().empty()) std::cout << "  sigma note        " << s.note() << "\n";
    if (m.has_input_scaling()) {
      const v1::InputScaling& in = m.input_scaling();
      std::cout << "  scale             " << in.mode();
      if (in.mode() == "auto") {
        if (!in.frozen()) {
          std::cout << " (estimated with sigma at the end of the warm-up)";
        } else {
          std::cout << " (frozen; center/scale per channel:";
          for (int j = 0; j < in.center_size() && j < in.scale_size(); ++j) {
            std::cout << " " << Num(in.center(j)) << "/" << Num(in.scale(j));
          }
          std::cout << ")";
        }
      }
      std::cout << "\n";
    }
    std::cout << "  config            eta " << Num(c.eta()) << ", lambda " << Num(c.lambda()) << ", epsilon "
              << Num(c.epsilon()) << ", max_dict " << c.max_dict() << ", dt " << Num(c.dt()) << ", seed " << c.seed()
              << "\n";
  }
  std::cout << "  views             rank " << c.rank() << ", clusters " << c.clusters();
  if (c.num_states() == 0) std::cout << ", rff " << c.rff_features() << ", forecast features " << c.forecast_features();
  if (c.meta_states() > 0) {
    std::cout << "; aggregation " << c.meta_states() << " meta-states (delta0 " << Num(c.anchor_threshold()) << ", "
              << (c.vertex_hunting().empty() ? "spa" : c.vertex_hunting()) << ")";
  }
  if (c.latent_states() > 0) std::cout << "; latent " << c.latent_states() << " states";
  if (c.window() > 0) std::cout << "; predictive window " << c.window();
  if (c.has_forgetting() && c.forgetting() < 1) std::cout << "; forgetting " << Num(c.forgetting());
  std::cout << "\n";
  if (m.alarms().enabled()) {
    const v1::AlarmStatus& a = m.alarms();
    std::cout << "  alarms            " << a.alarms_total() << " raised, target " << Num(a.alarm_rate())
              << " false per 10,000 pairs; ";
    if (a.armed_at() < 0) {
      std::cout << "not armed yet (" << a.scored() << " pairs scored)";
    } else {
      std::cout << "armed at pair " << a.armed_at() << ", score " << Num(a.score()) << " of 1";
    }
    if (a.has_rearmed()) std::cout << "; " << a.rearmed();
    std::cout << "\n";
  } else {
    std::cout << "  alarms            off\n";
  }
  if (m.estimators_size() > 0) {
    // Per-pair arithmetic at the current sizes (an operation count: docs/benchmarks.md).
    double total = 0;
    for (const v1::EstimatorCost& e : m.estimators()) total += e.multiply_adds();
    std::cout << "  per pair          " << Num(total) << " multiply-adds:";
    for (const v1::EstimatorCost& e : m.estimators()) std::cout << " " << e.name() << " " << Num(e.multiply_adds());
    std::cout << "\n";
  }
  if (m.has_memory()) {
    // The model's share of the daemon's memory budget (service/README.md "Memory").
    const v1::ModelMemory& mem = m.memory();
    std::cout << "  memory            " << Num(mem.charged_bytes() / (1 << 20)) << " MiB charged of the budget's "
              << Num(mem.committed_bytes() / (1 << 20)) << " / " << Num(mem.budget_bytes() / (1 << 20)) << " MiB ("
              << mem.models() << " models)";
    if (mem.dictionary_cap() > 0) std::cout << ", dictionary capped at " << mem.dictionary_cap() << " atoms";
    if (mem.growth_denied() > 0) std::cout << ", growth denied in " << mem.growth_denied() << " batches";
    std::cout << "\n";
  }
  const auto& v = m.view();
  if (v.version() == 0) {
    std::cout << "  view              none yet\n";
  } else {
    std::cout << "  view              version " << v.version() << ", " << v.samples() << " samples, age "
              << Num(v.age_seconds()) << " s, built in " << Num(v.build_seconds()) << " s";
    if (v.lag_pairs() > 0) std::cout << ", " << v.lag_pairs() << " pairs behind";
    std::cout << "\n";
    const auto by_view = ViewSecondsBySize(v);
    if (!by_view.empty()) {
      std::cout << "  view build        ";
      for (size_t i = 0; i < by_view.size(); ++i) {
        std::cout << (i ? ", " : "") << by_view[i].first << " " << Num(by_view[i].second) << " s";
      }
      std::cout << "\n";
    }
  }
  if (m.has_spectrum()) {
    std::cout << "  spectrum\n";
    PrintSpectrum(m.spectrum(), "    ");
  }
  for (const v1::SubViewStatus& sv : m.sub_views()) {
    const std::string& term = sv.summary().termination();
    const std::string status = !sv.available()                     ? "not available: " + sv.error()
                               : term.empty() || term == "success" ? std::string("ok")
                                                                   : "ok, fit ended " + term;
    std::printf("  %-17s %s\n", sv.name().c_str(), status.c_str());
  }
}

void PrintJson(const JsonWriter& w) { std::cout << w.str() << "\n"; }

void BeginViewReply(JsonWriter& w, const std::string& model, const v1::ViewInfo& view) {
  w.BeginObject();
  w.Key("model").String(model);
  WriteViewJson(w, view);
}

void PrintReply(JsonWriter& w) {
  w.EndObject();
  PrintJson(w);
}

}  // namespace cmestream::cli
