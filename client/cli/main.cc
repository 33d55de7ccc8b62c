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
  const char* usage = kMainUsage;
  CommandSpec spec;
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
    if (command == "model create") {
      usage = kCreateUsage;
      spec.values = {"dim",
                     "sigma",
                     "scale",
                     "eta",
                     "lambda",
                     "epsilon",
                     "max-dict",
                     "dt",
                     "seed",
                     "warmup",
                     "refresh-interval",
                     "refresh-every",
                     "step-decay",
                     "step-decay-power",
                     "states",
                     "forgetting",
                     "rff",
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
                     "lags"};
      spec.switches = {"averaging", "json"};
    } else if (command == "model describe" || command == "model list") {
      usage = command == "model describe" ? kDescribeUsage : kListUsage;
      spec.switches = {"json"};
    } else if (command == "model delete") {
      usage = kDeleteUsage;
    } else {
      std::cerr << "cmestream: " << command << ": unknown subcommand (expected create, describe, list, delete)\n"
                << kModelUsage;
      return kExitUsage;
    }
  } else if (command == "ingest") {
    usage = kIngestUsage;
    spec.values = {"csv", "producer", "episode", "batch"};
    spec.switches = {"trajectory", "quiet", "json", "resume"};
  } else if (command == "refresh") {
    usage = kRefreshUsage;
    spec.values = {"wait-timeout"};
    spec.switches = {"wait", "json"};
  } else if (command == "koopman") {
    usage = kKoopmanUsage;
    spec.values = {"top", "points"};
    spec.switches = {"json"};
  } else if (command == "predict") {
    usage = kPredictUsage;
    spec.values = {"points"};
    spec.switches = {"json"};
  } else if (command == "dictionary") {
    usage = kDictionaryUsage;
    spec.switches = {"json"};
  } else if (command == "producer") {
    usage = kProducerUsage;
    spec.values = {"producer"};
    spec.switches = {"json"};
  } else if (command == "counts" || command == "aggregation") {
    usage = command == "counts" ? kCountsUsage : kAggregationUsage;
    spec.switches = {"json"};
  } else if (command == "embedding" || command == "clusters" || command == "latent") {
    usage = command == "embedding" ? kEmbeddingUsage : command == "clusters" ? kClustersUsage : kLatentUsage;
    spec.values = {"points"};
    spec.switches = {"json"};
  } else if (command == "timescales") {
    usage = kTimescalesUsage;
    spec.switches = {"json"};
  } else if (command == "cktest") {
    usage = kCkTestUsage;
    spec.values = {"clusters", "steps", "lag"};
    spec.switches = {"json"};
  } else if (command == "forecast") {
    usage = kForecastUsage;
    spec.values = {"window", "series", "horizon"};
    spec.switches = {"json"};
  } else if (command == "simulate") {
    usage = kSimulateUsage;
    spec.values = {"n",     "seed",   "dt",    "box", "n-side", "tau", "truth", "states", "meta", "anchors-per-meta",
                   "learn", "forget", "guess", "slip"};
    spec.switches = {"trajectory", "hard"};
  } else if (command == "snapshot") {
    usage = kSnapshotUsage;
    spec.switches = {"json"};
  } else if (command == "export") {
    usage = kExportUsage;
    spec.values = {"out"};
  } else if (command == "health") {
    usage = kHealthUsage;
  } else if (command == "import") {
    usage = kImportUsage;
    spec.values = {"name"};
    spec.switches = {"json"};
  } else if (command == "help") {
    std::cout << kMainUsage;
    return 0;
  } else {
    std::cerr << "cmestream: unknown command '" << command << "'\n" << kMainUsage;
    return kExitUsage;
  }
  auto args = ParseArgs(argv_s, i, spec);
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
  if (command == "model create") return ModelCreate(ctx, *args);
  if (command == "model describe") return ModelDescribe(ctx, *args);
  if (command == "model list") return ModelList(ctx, *args);
  if (command == "model delete") return ModelDelete(ctx, *args);
  if (command == "ingest") return Ingest(ctx, *args);
  if (command == "refresh") return Refresh(ctx, *args);
  if (command == "koopman") return Koopman(ctx, *args);
  if (command == "predict") return Predict(ctx, *args);
  if (command == "dictionary") return Dictionary(ctx, *args);
  if (command == "producer") return Producer(ctx, *args);
  if (command == "counts") return Counts(ctx, *args);
  if (command == "embedding") return Embedding(ctx, *args);
  if (command == "clusters") return Clusters(ctx, *args);
  if (command == "aggregation") return Aggregation(ctx, *args);
  if (command == "latent") return Latent(ctx, *args);
  if (command == "forecast") return Forecast(ctx, *args);
  if (command == "timescales") return Timescales(ctx, *args);
  if (command == "cktest") return CkTest(ctx, *args);
  if (command == "snapshot") return Snapshot(ctx, *args);
  if (command == "export") return Export(ctx, *args);
  if (command == "import") return Import(ctx, *args);
  if (command == "health") return Health(ctx, *args);
  return Simulate(*args);
}

}  // namespace
}  // namespace cmestream::cli

int main(int argc, char** argv) { return cmestream::cli::Run(argc, argv); }
