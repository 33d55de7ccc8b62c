// `cmestream model create|describe|list|delete`, `snapshot`, `export`, `import`.
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
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/cli/commands.h"
#include "client/cli/context.h"
#include "client/cli/csv.h"
#include "client/cli/json.h"
#include "client/cli/output.h"
#include "client/cpp/client.h"

namespace cmestream::cli {
namespace {

// A model's description: its JSON with --json, else `heading` and the readable description.
void PrintModelReply(const Args& args, const v1::ModelInfo& info, const std::string& heading) {
  if (args.Has("json")) {
    JsonWriter w;
    WriteModelJson(w, info);
    PrintJson(w);
  } else {
    std::cout << heading;
    PrintModel(info);
  }
}

}  // namespace

int ModelCreate(Context& ctx, const Args& args) {
  if (int rc = NeedName(args, "model create", kCreateUsage)) return rc;
  v1::ModelConfig config;
  config.set_name(args.positional[0]);
  auto dim = args.Value("dim");
  if (!dim && !args.Value("states")) {
    return FailUsage("model create", "--dim D is required (or --states P for a discrete model)");
  }
  // Every numeric flag is parsed before anything is sent.
  absl::Status bad;
  auto num = [&](const char* flag, auto setter) {
    if (auto v = args.Value(flag); v && bad.ok()) {
      auto d = ParseDouble(flag, *v);
      if (!d.ok()) bad = d.status();
      else setter(*d);
    }
  };
  auto uint = [&](const char* flag, uint64_t max, auto setter) {
    if (auto v = args.Value(flag); v && bad.ok()) {
      auto d = ParseUint(flag, *v);
      if (!d.ok()) bad = d.status();
      else if (*d > max) bad = absl::InvalidArgumentError(absl::StrCat("--", flag, ": expected <= ", max));
      else setter(*d);
    }
  };
  // A flag that takes one of two words; a wrong word is refused at once, before the numbers'
  // verdict.
  auto either = [&](const char* flag, const char* a, const char* b, auto setter) -> absl::Status {
    if (auto s = args.Value(flag)) {
      if (*s != a && *s != b) {
        return absl::InvalidArgumentError(absl::StrCat("--", flag, ": expected ", a, " or ", b, ", got '", *s, "'"));
      }
      setter(*s);
    }
    return absl::OkStatus();
  };
  uint("dim", UINT32_MAX, [&](uint64_t v) { config.set_dim(static_cast<uint32_t>(v)); });
  if (auto s = args.Value("sigma"); s && *s != "auto") {
    num("sigma", [&](double v) { config.set_sigma(v); });
  }
  if (auto s = either("scale", "auto", "none", [&](const std::string& v) { config.set_scale(v); }); !s.ok()) {
    return FailUsage("model create", s.message());
  }
  num("eta", [&](double v) { config.set_eta(v); });
  num("lambda", [&](double v) { config.set_lambda(v); });
  num("epsilon", [&](double v) { config.set_epsilon(v); });
  uint("max-dict", UINT32_MAX, [&](uint64_t v) { config.set_max_dict(static_cast<uint32_t>(v)); });
  num("dt", [&](double v) { config.set_dt(v); });
  uint("seed", UINT64_MAX, [&](uint64_t v) { config.set_seed(v); });
  uint("warmup", UINT32_MAX, [&](uint64_t v) { config.set_auto_sigma_warmup(static_cast<uint32_t>(v)); });
  uint("delays", UINT32_MAX, [&](uint64_t v) { config.set_delays(static_cast<uint32_t>(v)); });
  uint("delay-stride", UINT32_MAX, [&](uint64_t v) { config.set_delay_stride(static_cast<uint32_t>(v)); });
  if (auto s = args.Value("reduce"); s && *s == "off") {
    config.set_reduce(0);
  } else {
    uint("reduce", UINT32_MAX, [&](uint64_t v) { config.set_reduce(static_cast<uint32_t>(v)); });
  }
  if (auto s = either("alarms", "on", "off", [&](const std::string& v) { config.set_alarms(v); }); !s.ok()) {
    return FailUsage("model create", s.message());
  }
  num("alarm-rate", [&](double v) { config.set_alarm_rate(v); });
  if (auto v = args.Value("on-change")) {
    if (*v != "keep" && *v != "reset" && *v != "fork") {
      return FailUsage("model create", absl::StrCat("--on-change: expected keep, reset or fork, got '", *v, "'"));
    }
    config.set_on_change(*v);
  }

  num("refresh-interval", [&](double v) { config.set_refresh_interval_seconds(v); });
  uint("refresh-every", UINT64_MAX, [&](uint64_t v) { config.set_refresh_every_samples(v); });
  num("step-decay", [&](double v) { config.set_step_decay_samples(v); });
  num("step-decay-power", [&](double v) { config.set_step_decay_power(v); });
  if (args.Has("averaging")) config.set_averaging(true);
  uint("states", UINT32_MAX, [&](uint64_t v) { config.set_num_states(static_cast<uint32_t>(v)); });
  num("forgetting", [&](double v) { config.set_forgetting(v); });
  uint("rff", UINT32_MAX, [&](uint64_t v) { config.set_rff_features(static_cast<uint32_t>(v)); });
  uint("forecast-features", UINT32_MAX, [&](uint64_t v) { config.set_forecast_features(static_cast<uint32_t>(v)); });
  uint("rank", UINT32_MAX, [&](uint64_t v) { config.set_rank(static_cast<uint32_t>(v)); });
  uint("clusters", UINT32_MAX, [&](uint64_t v) { config.set_clusters(static_cast<uint32_t>(v)); });
  uint("meta", UINT32_MAX, [&](uint64_t v) { config.set_meta_states(static_cast<uint32_t>(v)); });
  num("anchor-threshold", [&](double v) { config.set_anchor_threshold(v); });
  if (auto v = args.Value("vertex-hunting")) {
    if (*v != "spa" && *v != "kmeans-spa" && bad.ok()) {
      bad = absl::InvalidArgumentError(absl::StrCat("--vertex-hunting: expected spa or kmeans-spa, got '", *v, "'"));
    }
    config.set_vertex_hunting(*v);
  }
  uint("latent", UINT32_MAX, [&](uint64_t v) { config.set_latent_states(static_cast<uint32_t>(v)); });
  uint("tensor-restarts", UINT32_MAX, [&](uint64_t v) { config.set_tensor_restarts(static_cast<uint32_t>(v)); });
  uint("tensor-iterations", UINT32_MAX, [&](uint64_t v) { config.set_tensor_iterations(static_cast<uint32_t>(v)); });
  uint("reservoir", UINT32_MAX, [&](uint64_t v) { config.set_reservoir(static_cast<uint32_t>(v)); });
  uint("window", UINT32_MAX, [&](uint64_t v) { config.set_window(static_cast<uint32_t>(v)); });
  num("ridge1", [&](double v) { config.set_ridge_stage1(v); });
  num("ridge2", [&](double v) { config.set_ridge_stage2(v); });
  if (auto v = args.Value("lags"); v && bad.ok()) {
    // Comma-separated integers; their range and order are checked by the daemon
    // (INVALID_ARGUMENT naming the problem), so the rule lives in one place.
    for (absl::string_view part : absl::StrSplit(*v, ',')) {
      int64_t lag = 0;
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &lag) || lag < INT32_MIN || lag > INT32_MAX) {
        bad = absl::InvalidArgumentError(absl::StrCat("--lags: expected comma-separated integers, got '", *v, "'"));
        break;
      }
      config.add_lags(static_cast<int32_t>(lag));
    }
  }
  if (!bad.ok()) return FailUsage("model create", bad.message());
  if (int rc = NeedClient(ctx, "model create")) return rc;
  auto info = ctx.client->CreateModel(config);
  if (!info.ok()) return Fail("model create", info.status());
  PrintModelReply(args, *info, "created model '" + info->config().name() + "'\n");
  return 0;
}

int ModelDescribe(Context& ctx, const Args& args) {
  if (int rc = NeedName(args, "model describe", kDescribeUsage)) return rc;
  if (int rc = NeedClient(ctx, "model describe")) return rc;
  auto info = ctx.client->Describe(args.positional[0], /*with_memory=*/true);
  if (!info.ok()) return Fail("model describe", info.status());
  PrintModelReply(args, *info, "");
  return 0;
}

int ModelList(Context& ctx, const Args& args) {
  if (!args.positional.empty()) return FailUsage("model list", "takes no arguments");
  // One daemon, or every daemon of a --server list.
  if (int rc = NeedClient(ctx, "model list")) return rc;
  absl::StatusOr<std::vector<v1::ModelInfo>> models = ctx.cluster->List();
  if (!models.ok()) return Fail("model list", models.status());
  if (args.Has("json")) {
    JsonWriter w;
    w.BeginObject().Key("models").BeginArray();
    for (const auto& m : *models) WriteModelJson(w, m);
    w.EndArray().EndObject();
    PrintJson(w);
  } else {
    std::printf("%-24s %5s %10s %10s %8s  %s\n", "NAME", "DIM", "SAMPLES", "DICT", "VIEW", "STATE");
    for (const auto& m : *models) {
      // A failed model says so on its line: it refuses data and queries until deleted.
      std::printf("%-24s %5u %10llu %10u %8llu  %s\n", m.config().name().c_str(), m.config().dim(),
                  static_cast<unsigned long long>(m.samples()), m.dictionary_size(),
                  static_cast<unsigned long long>(m.view().version()),
                  m.has_failure() ? absl::StrCat("FAILED: ", m.failure().reason()).c_str()
                  : m.evicted()   ? "evicted"
                                  : "ok");
    }
  }
  return 0;
}

int ModelDelete(Context& ctx, const Args& args) {
  if (int rc = NeedName(args, "model delete", kDeleteUsage)) return rc;
  if (int rc = NeedClient(ctx, "model delete")) return rc;
  if (auto s = ctx.client->Delete(args.positional[0]); !s.ok()) return Fail("model delete", s);
  std::cout << "deleted model '" << args.positional[0] << "'\n";
  return 0;
}

// `snapshot [NAME]`: a snapshot always holds every model (one file, one atomic rename; see
// service/storage/snapshot.h), so NAME only checks that the model exists on the daemon.
int Snapshot(Context& ctx, const Args& args) {
  if (args.positional.size() > 1) return FailUsage("snapshot", "takes at most one model name");
  if (int rc = NeedClient(ctx, "snapshot")) return rc;
  if (!args.positional.empty()) {
    if (auto info = ctx.client->Describe(args.positional[0]); !info.ok()) return Fail("snapshot", info.status());
  }
  auto r = ctx.client->Snapshot();
  if (!r.ok()) return Fail("snapshot", r.status());
  if (args.Has("json")) {
    JsonWriter w;
    w.BeginObject()
        .Key("path")
        .String(r->path())
        .Key("bytes")
        .Uint(r->bytes())
        .Key("covered_sequence")
        .Uint(r->covered_sequence())
        .Key("models")
        .Uint(r->models())
        .EndObject();
    PrintJson(w);
  } else {
    std::cout << r->path() << "\n";
    std::cerr << "snapshot of " << r->models() << " models, " << r->bytes() << " bytes, WAL covered through sequence "
              << r->covered_sequence() << "\n";
  }
  return 0;
}

int Export(Context& ctx, const Args& args) {
  if (int rc = NeedName(args, "export", kExportUsage)) return rc;
  const std::optional<std::string> out = args.Value("out");
  if (!out || out->empty()) return FailUsage("export", "--out FILE is required");
  if (int rc = NeedClient(ctx, "export")) return rc;
  auto data = ctx.client->ExportModel(args.positional[0]);
  if (!data.ok()) return Fail("export", data.status());
  // Written to a temporary name and renamed, so FILE is never a partial export.
  const std::string tmp = *out + ".tmp";
  {
    std::ofstream file(tmp, std::ios::binary | std::ios::trunc);
    file.write(data->data(), static_cast<std::streamsize>(data->size()));
    file.close();
    if (!file) {
      std::remove(tmp.c_str());
      return FailUsage("export", "cannot write '" + tmp + "'");
    }
  }
  if (std::rename(tmp.c_str(), out->c_str()) != 0) {
    std::remove(tmp.c_str());
    return FailUsage("export", "cannot rename '" + tmp + "' to '" + *out + "'");
  }
  std::cout << "exported model '" << args.positional[0] << "' to " << *out << " (" << data->size() << " bytes)\n";
  return 0;
}

int Health(Context& ctx, const Args& args) {
  if (args.positional.size() > 1) return FailUsage("health", "takes at most one SERVICE");
  if (int rc = NeedClient(ctx, "health")) return rc;
  auto serving = ctx.client->Health(args.positional.empty() ? "" : args.positional[0]);
  if (!serving.ok()) return Fail("health", serving.status());
  std::cout << (*serving ? "SERVING" : "NOT_SERVING") << "\n";
  return *serving ? 0 : kExitServer;
}

int Import(Context& ctx, const Args& args) {
  if (args.positional.size() != 1) return FailUsage("import", "expected one FILE (an export)");
  const std::string& path = args.positional[0];
  std::ifstream file(path, std::ios::binary);
  if (!file) return FailUsage("import", "cannot open '" + path + "'");
  std::string data((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (file.bad()) return FailUsage("import", "cannot read '" + path + "'");
  if (int rc = NeedClient(ctx, "import")) return rc;
  auto info = ctx.client->ImportModel(std::move(data), args.Value("name").value_or(""));
  if (!info.ok()) return Fail("import " + path, info.status());
  PrintModelReply(args, *info, "imported model '" + info->config().name() + "'\n");
  return 0;
}

}  // namespace cmestream::cli
