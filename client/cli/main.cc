// `cmestream`: command-line client of cmestreamd (and a simulator of test systems).
//
// Scriptable contract: results on stdout (a readable table, or JSON with --json), progress and
// errors on stderr, and the exit status says what happened:
//   0  success
//   1  the server refused or failed the request (message and gRPC code on stderr)
//   2  usage error or bad input file (message names the flag, or file:line and what was expected)
// Run `cmestream --help` or `cmestream COMMAND --help`.
//
// This file parses the global flags and dispatches to the commands (commands.h); the commands
// live in commands_*.cc, the shared parsing/context code in context.cc, printing in output.cc.
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
#include "client/cli/commands.h"
#include "client/cli/context.h"
#include "client/cli/csv.h"
#include "client/cli/json.h"
#include "client/cli/output.h"
#include "client/cpp/client.h"
#include "cmestream_version.h"

namespace cmestream::cli {
namespace {

// A command of the tool: its name ("model NAME" for the model subcommands), usage text, flags
// and entry point.
struct Command {
  const char* name;
  const char* usage;
  CommandSpec spec;
  int (*run)(Context& ctx, const Args& args);
};

// The command called `name`; nullptr for none.
const Command* FindCommand(const std::string& name) {
  static const std::vector<Command>* const commands = new std::vector<Command>{
      {"model create",
       kCreateUsage,
       {{"dim",
         "sigma",
         "scale",
         "eta",
         "lambda",
         "epsilon",
         "max-dict",
         "dt",
         "seed",
         "warmup",
         "delays",
         "delay-stride",
         "reduce",
         "alarms",
         "alarm-rate",
         "on-change",
         "refresh-interval",
         "refresh-every",
         "step-decay",
         "step-decay-power",
         "states",
         "forgetting",
         "rff",
         "forecast-features",
         "rank",
         "clusters",
         "meta",
         "anchor-threshold",
         "vertex-hunting",
         "latent",
         "tensor-restarts",
         "tensor-iterations",
         "reservoir",
         "window",
         "ridge1",
         "ridge2",
         "lags"},
        {"averaging", "json"}},
       ModelCreate},
      {"model describe", kDescribeUsage, {{}, {"json"}}, ModelDescribe},
      {"model list", kListUsage, {{}, {"json"}}, ModelList},
      {"model delete", kDeleteUsage, {}, ModelDelete},
      {"ingest",
       kIngestUsage,
       {{"csv", "producer", "episode", "batch"}, {"trajectory", "quiet", "json", "resume"}},
       Ingest},
      {"refresh", kRefreshUsage, {{"wait-timeout"}, {"wait", "json"}}, Refresh},
      {"koopman", kKoopmanUsage, {{"top", "points"}, {"json"}}, Koopman},
      {"predict", kPredictUsage, {{"points"}, {"json"}}, Predict},
      {"dictionary", kDictionaryUsage, {{}, {"json"}}, Dictionary},
      {"producer", kProducerUsage, {{"producer"}, {"json"}}, Producer},
      {"counts", kCountsUsage, {{}, {"json"}}, Counts},
      {"aggregation", kAggregationUsage, {{}, {"json"}}, Aggregation},
      {"embedding", kEmbeddingUsage, {{"points"}, {"json"}}, Embedding},
      {"clusters", kClustersUsage, {{"points"}, {"json"}}, Clusters},
      {"latent", kLatentUsage, {{"points"}, {"json"}}, Latent},
      {"timescales", kTimescalesUsage, {{}, {"json"}}, Timescales},
      {"cktest", kCkTestUsage, {{"clusters", "steps", "lag"}, {"json"}}, CkTest},
      {"forecast", kForecastUsage, {{"window", "series", "horizon"}, {"json"}}, Forecast},
      {"alarms", kAlarmsUsage, {{"since"}, {"json"}}, Alarms},
      {"watch", kWatchUsage, {{"since", "seconds"}, {}}, Watch},
      {"simulate",
       kSimulateUsage,
       {{"n", "seed", "dt", "box", "n-side", "tau", "truth", "states", "meta", "anchors-per-meta", "learn", "forget",
         "guess", "slip"},
        {"trajectory", "hard"}},
       [](Context&, const Args& args) { return Simulate(args); }},
      {"snapshot", kSnapshotUsage, {{}, {"json"}}, Snapshot},
      {"export", kExportUsage, {{"out"}, {}}, Export},
      {"health", kHealthUsage, {}, Health},
      {"import", kImportUsage, {{"name"}, {"json"}}, Import},
  };
  for (const Command& c : *commands) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

int Run(int argc, char** argv) {
  std::vector<std::string> argv_s(argv + 1, argv + argc);
  Context ctx;
  const char* env = std::getenv("CMESTREAM_SERVER");
  ctx.server = env && *env ? env : "127.0.0.1:50051";
  if (const char* token = std::getenv("CMESTREAM_TOKEN"); token != nullptr) ctx.token = token;
  std::string token_file;

  // Global flags before the command word.
  size_t i = 0;
  bool help = false;
  for (; i < argv_s.size(); ++i) {
    const std::string& a = argv_s[i];
    if (a == "--help" || a == "-h") {
      help = true;
    } else if (a == "--version") {
      std::cout << "cmestream " << CMESTREAM_VERSION_STRING << "\n";
      return 0;
    } else if (a == "--server" || a == "--timeout") {
      if (i + 1 >= argv_s.size()) return FailUsage("", a + " needs a value");
      if (a == "--server") {
        ctx.server = argv_s[i + 1];
      } else {
        auto v = ParseDouble("timeout", argv_s[i + 1]);
        if (!v.ok() || *v <= 0) return FailUsage("", "--timeout: expected seconds > 0");
        ctx.timeout = *v;
      }
      ++i;
    } else if (a == "--tls-ca" || a == "--tls-cert" || a == "--tls-key" || a == "--token-file" ||
               a.rfind("--tls-ca=", 0) == 0 || a.rfind("--tls-cert=", 0) == 0 || a.rfind("--tls-key=", 0) == 0 ||
               a.rfind("--token-file=", 0) == 0) {
      const size_t eq = a.find('=');
      const std::string flag = a.substr(0, eq);
      std::string value;
      if (eq != std::string::npos) {
        value = a.substr(eq + 1);
      } else {
        if (i + 1 >= argv_s.size()) return FailUsage("", flag + " needs a value");
        value = argv_s[++i];
      }
      if (value.empty()) return FailUsage("", flag + ": expected a file name");
      (flag == "--tls-ca"     ? ctx.tls_ca
       : flag == "--tls-cert" ? ctx.tls_cert
       : flag == "--tls-key"  ? ctx.tls_key
                              : token_file) = value;
    } else if (a.rfind("--server=", 0) == 0) {
      ctx.server = a.substr(9);
    } else if (a.rfind("--timeout=", 0) == 0) {
      auto v = ParseDouble("timeout", a.substr(10));
      if (!v.ok() || *v <= 0) return FailUsage("", "--timeout: expected seconds > 0");
      ctx.timeout = *v;
    } else {
      break;
    }
  }
  if (i >= argv_s.size()) {
    std::cout << kMainUsage;
    return help ? 0 : kExitUsage;
  }
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    std::string line;
    if (!in || !std::getline(in, line))
      return FailUsage("", "--token-file: cannot read a token from '" + token_file + "'");
    ctx.token = std::string(absl::StripAsciiWhitespace(line));
    if (ctx.token.empty()) return FailUsage("", "--token-file: '" + token_file + "' starts with an empty line");
  }
  if (ctx.tls_cert.empty() != ctx.tls_key.empty()) return FailUsage("", "--tls-cert and --tls-key go together");
  if (!ctx.tls_cert.empty() && ctx.tls_ca.empty()) return FailUsage("", "--tls-cert needs --tls-ca (TLS)");
  std::string command = argv_s[i++];
  const Command* found = nullptr;
  if (command == "model") {
    if (i >= argv_s.size() || argv_s[i] == "--help" || argv_s[i] == "-h") {
      if (i >= argv_s.size()) {
        std::cerr << "cmestream: model: expected a subcommand\n" << kModelUsage;
        return kExitUsage;
      }
      std::cout << kModelUsage;
      return 0;
    }
    command += " " + argv_s[i++];
    found = FindCommand(command);
    if (found == nullptr) {
      std::cerr << "cmestream: " << command << ": unknown subcommand (expected create, describe, list, delete)\n"
                << kModelUsage;
      return kExitUsage;
    }
  } else if (command == "help") {
    std::cout << kMainUsage;
    return 0;
  } else {
    // "model NAME" is two words: one word with a space names no command.
    if (command.find(' ') == std::string::npos) found = FindCommand(command);
    if (found == nullptr) {
      std::cerr << "cmestream: unknown command '" << command << "'\n" << kMainUsage;
      return kExitUsage;
    }
  }
  const char* usage = found->usage;
  auto args = ParseArgs(argv_s, i, found->spec);
  if (!args.ok()) {
    std::cerr << "cmestream: " << command << ": " << args.status().message() << "\n" << usage;
    return kExitUsage;
  }
  if (help || args->Has("help")) {
    std::cout << usage;
    return 0;
  }
  if (auto s = args->Value("server")) ctx.server = *s;
  if (auto t = args->Value("timeout")) {
    auto v = ParseDouble("timeout", *t);
    if (!v.ok() || *v <= 0) return FailUsage(command, "--timeout: expected seconds > 0");
    ctx.timeout = *v;
  }
  if (auto s = ParseServerList(ctx); !s.ok()) return FailUsage(command, s.message());
  // Every command goes through a ShardedClient (context.h): a model's calls go to its owner
  // among the --server list, and any daemon's redirect to another owner is followed once.
  if (ctx.pods.size() > 1) {
    if (command == "snapshot" || command == "health") {
      return FailUsage(command, "takes one --server (a daemon), not a list");
    }
    if (command == "import" && !args->Value("name")) {
      return FailUsage(command, "with a --server list, give --name NEW (it picks the daemon)");
    }
  }
  if (command == "import") {
    if (auto name = args->Value("name")) RouteToOwner(ctx, *name);
  } else if (command != "model list" && command != "simulate" && command != "snapshot" && command != "health") {
    if (!args->positional.empty()) RouteToOwner(ctx, args->positional[0]);
  }
  return found->run(ctx, *args);
}

}  // namespace
}  // namespace cmestream::cli

int main(int argc, char** argv) { return cmestream::cli::Run(argc, argv); }
