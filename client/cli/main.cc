// `cmestream`: command-line client of cmestreamd (and a simulator of test systems).
//
// Scriptable contract: results on stdout (a readable table, or JSON with --json), progress and
// errors on stderr, and the exit status says what happened:
//   0  success
//   1  the server refused or failed the request (message and gRPC code on stderr)
//   2  usage error or bad input file (message names the flag, or file:line and what was expected)
// Run `cmestream --help` or `cmestream COMMAND --help`.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/csv.h"
#include "client/cli/json.h"
#include "client/cpp/client.h"
#include "core/systems/duffing.h"

namespace cmestream::cli {
namespace {

namespace v1 = ::cmestream::v1;
using client::Client;
using client::IngestStream;

constexpr int kExitServer = 1;
constexpr int kExitUsage = 2;

const char kMainUsage[] = R"(usage: cmestream [--server HOST:PORT] [--timeout S] COMMAND [ARGS] [--help]

Client of cmestreamd. --server defaults to $CMESTREAM_SERVER, else 127.0.0.1:50051.
--timeout is the deadline of each request in seconds (default 30).

commands:
  model create NAME --dim D [options]   create a model (see `cmestream model create --help`)
  model describe NAME [--json]          config, samples seen, dictionary size, view, sigma choice
  model list [--json]                   all models
  model delete NAME                     delete a model
  ingest NAME --csv FILE [--producer ID] [--trajectory]
                                        stream transitions from CSV ('-' = standard input)
  refresh NAME [--wait]                 rebuild the model's view (optionally wait for it)
  koopman NAME [--top K] [--points FILE] [--json]
                                        Koopman eigenvalues, timescales, eigenfunction values
  predict NAME --points FILE [--json]   one-step forecast E[Y | X = point] per point
  dictionary NAME [--json]              dictionary atoms
  producer NAME --producer ID [--json]  a producer's applied offset
  simulate duffing|double-well|duffing-grid [--n N] [--seed S]
                                        write simulated data as CSV (no server needed)

exit status: 0 ok, 1 server error, 2 usage or input error
)";

const char kCreateUsage[] = R"(usage: cmestream model create NAME --dim D [options]

  --dim D              state dimension (required, >= 1)
  --sigma S|auto       Gaussian kernel bandwidth; 'auto' (default) picks it on the first
                       --warmup pairs by a held-out VAMP-2 score and records the choice
  --eta E              SGD step (default 0.1)
  --lambda L           HS-norm regularizer (default 1e-3)
  --epsilon EPS        compression budget in HS norm (default 1e-3)
  --max-dict M         dictionary cap per side (default 1000)
  --dt T               sampling interval, for rates and timescales (default 1)
  --seed N             seed of all random choices (default 1)
  --warmup N           pairs buffered for sigma auto (default 1000)
  --refresh-interval S refresh the view every S seconds (default: the daemon's)
  --refresh-every N    refresh the view every N samples (default off)
  --step-decay N       eta_t = eta / (1 + t/N)^p (default 0 = constant step)
  --step-decay-power P p above (default 0.5)
  --averaging          Polyak-Ruppert averaging of the operator
  --json               print the created model as JSON
)";

const char kIngestUsage[] = R"(usage: cmestream ingest NAME --csv FILE [--producer ID] [--trajectory] [options]

Streams transitions into model NAME.
  --csv FILE      one transition per line, x_1,...,x_d,y_1,...,y_d ('-' reads standard input).
                  Blank lines and lines starting with '#' are ignored.
  --trajectory    FILE holds one state x_1,...,x_d per line; consecutive rows are paired.
  --producer ID   exactly-once delivery: offsets count pairs from 0 in this file, and the daemon
                  skips pairs it already applied for ID, so re-running the same file with the
                  same ID applies 0 new pairs. Without it every pair is applied.
  --episode ID    episode id of a trajectory (default: the file name)
  --batch B       pairs per message (default 1000)
  --quiet         no progress on stderr
  --json          print the summary as JSON

A FILE is validated completely before anything is sent: a malformed line stops the command
with file:line and what was expected, and nothing is applied. Standard input is streamed and
validated batch by batch: batches before a malformed line stay applied (the message says how
many pairs were sent).
)";

const char kRefreshUsage[] = R"(usage: cmestream refresh NAME [--wait] [--wait-timeout S] [--json]

Requests a rebuild of the model's view. With --wait, returns once a view covering every sample
applied so far exists (the server gives up after --wait-timeout seconds, default 60).
)";

const char kKoopmanUsage[] = R"(usage: cmestream koopman NAME [--top K] [--points FILE] [--json]

Leading K (default 6) Koopman eigenpairs of the model's current view: eigenvalues mu (sorted by
|mu| descending), continuous-time rates log(mu)/dt, implied timescales -dt/log|mu|, and the
eigenfunction values at the points of FILE (CSV, one d-dimensional point per line).
JSON: {"eigenvalues":[{"re","im"}...], "rates":[{"re","im"}...], "timescales":[...],
       "eigenfunctions":[[{"re","im"} per point] per eigenpair], "view_version", "samples", "dt"}
Infinite timescales (|mu| >= 1) are null in JSON.
)";

const char kPredictUsage[] = R"(usage: cmestream predict NAME --points FILE [--json]

One-step forecast E[Y | X = point] for each point of FILE (CSV, one d-dimensional point per
line). JSON: {"predictions": [[y_1,...,y_d] per point], "dim", "view_version", "samples"}
)";

const char kSimulateUsage[] = R"(usage: cmestream simulate SYSTEM [options]

Writes simulated data as CSV on standard output (a '#' header line names the columns).
  duffing        transitions x1,x2,y1,y2 of the unforced Duffing oscillator (delta 0.5, beta -1,
                 alpha 1) from uniform starts in [-box,box]^2, y = flow of x over dt
  double-well    transitions x,y of overdamped Langevin dynamics in V(x) = (x^2-1)^2 (beta 3)
  duffing-grid   points x1,x2,basin of a K x K grid over [-box,box]^2 with the true basin label
                 (+1: attracted to (1,0), -1: to (-1,0))
options:
  --n N          pairs (default 10000)
  --seed S       seed (default 1)
  --dt T         sampling interval (default 0.25 for duffing, 0.1 for double-well)
  --box B        half-width of the Duffing box (default 2)
  --n-side K     grid side for duffing-grid (default 50)
)";

// ---------------------------------------------------------------------------------------------
// Argument parsing
// ---------------------------------------------------------------------------------------------

struct CommandSpec {
  std::set<std::string> values;    // flags taking a value
  std::set<std::string> switches;  // boolean flags
};

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> values;
  std::set<std::string> switches;
  bool Has(const std::string& f) const { return switches.count(f) || values.count(f); }
  std::optional<std::string> Value(const std::string& f) const {
    auto it = values.find(f);
    if (it == values.end()) return std::nullopt;
    return it->second;
  }
};

// Parses argv[begin..) against `spec` plus the global flags. "--flag=value" and "--flag value"
// both work; a lone "-" is a positional (standard input).
absl::StatusOr<Args> ParseArgs(const std::vector<std::string>& argv, size_t begin,
                               CommandSpec spec) {
  spec.values.insert({"server", "timeout"});
  spec.switches.insert("help");
  Args args;
  for (size_t i = begin; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "-h") {
      args.switches.insert("help");
      continue;
    }
    if (a.size() < 3 || a.compare(0, 2, "--") != 0) {
      args.positional.push_back(a);
      continue;
    }
    std::string name = a.substr(2);
    std::optional<std::string> value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (spec.switches.count(name)) {
      if (value) return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
      args.switches.insert(name);
    } else if (spec.values.count(name)) {
      if (!value) {
        if (i + 1 >= argv.size()) {
          return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
        }
        value = argv[++i];
      }
      args.values[name] = *value;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown option --", name));
    }
  }
  return args;
}

absl::StatusOr<double> ParseDouble(const std::string& flag, const std::string& text) {
  double v;
  if (!absl::SimpleAtod(text, &v) || !std::isfinite(v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": expected a finite number, got '", text, "'"));
  }
  return v;
}

absl::StatusOr<uint64_t> ParseUint(const std::string& flag, const std::string& text) {
  uint64_t v;
  if (!absl::SimpleAtoi(text, &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": expected a non-negative integer, got '", text, "'"));
  }
  return v;
}

// ---------------------------------------------------------------------------------------------
// Output helpers
// ---------------------------------------------------------------------------------------------

int Fail(const std::string& command, const absl::Status& status) {
  std::cerr << "cmestream: " << command << ": " << status.message() << " ("
            << absl::StatusCodeToString(status.code()) << ")\n";
  return kExitServer;
}

int FailUsage(const std::string& command, absl::string_view message) {
  std::cerr << "cmestream: " << command << ": " << message << "\n";
  return kExitUsage;
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

void WriteViewJson(JsonWriter& w, const v1::ViewInfo& view) {
  w.Key("view_version").Uint(view.version());
  w.Key("samples").Uint(view.samples());
  w.Key("view_age_seconds").Double(view.age_seconds());
  w.Key("view_build_seconds").Double(view.build_seconds());
}

void WriteConfigJson(JsonWriter& w, const v1::ModelConfig& c) {
  w.BeginObject();
  w.Key("name").String(c.name());
  w.Key("dim").Uint(c.dim());
  if (c.has_sigma()) w.Key("sigma").Double(c.sigma()); else w.Key("sigma").String("auto");
  if (c.has_eta()) w.Key("eta").Double(c.eta());
  if (c.has_lambda()) w.Key("lambda").Double(c.lambda());
  if (c.has_epsilon()) w.Key("epsilon").Double(c.epsilon());
  if (c.has_max_dict()) w.Key("max_dict").Uint(c.max_dict());
  if (c.has_dt()) w.Key("dt").Double(c.dt());
  if (c.has_seed()) w.Key("seed").Uint(c.seed());
  if (c.has_auto_sigma_warmup()) w.Key("auto_sigma_warmup").Uint(c.auto_sigma_warmup());
  if (c.has_refresh_interval_seconds()) {
    w.Key("refresh_interval_seconds").Double(c.refresh_interval_seconds());
  }
  if (c.has_refresh_every_samples()) w.Key("refresh_every_samples").Uint(c.refresh_every_samples());
  if (c.has_step_decay_samples()) w.Key("step_decay_samples").Double(c.step_decay_samples());
  if (c.has_step_decay_power()) w.Key("step_decay_power").Double(c.step_decay_power());
  if (c.has_averaging()) w.Key("averaging").Bool(c.averaging());
  w.EndObject();
}

void WriteModelJson(JsonWriter& w, const v1::ModelInfo& m) {
  w.BeginObject();
  w.Key("name").String(m.config().name());
  w.Key("dim").Uint(m.config().dim());
  w.Key("samples").Uint(m.samples());
  w.Key("pending_warmup").Uint(m.pending_warmup());
  w.Key("dictionary_size").Uint(m.dictionary_size());
  w.Key("dictionary_size_y").Uint(m.dictionary_size_y());
  w.Key("forced_compressions").Uint(m.forced_compressions());
  w.Key("forced_error_sum").Double(m.forced_error_sum());
  w.Key("inverse_drift").Double(m.inverse_drift());
  w.Key("batches_applied").Uint(m.batches_applied());
  w.Key("created_unix_seconds").Double(m.created_unix_seconds());
  w.Key("view_version").Uint(m.view().version());
  w.Key("view_samples").Uint(m.view().samples());
  w.Key("view_age_seconds").Double(m.view().age_seconds());
  w.Key("view_build_seconds").Double(m.view().build_seconds());
  const auto& s = m.sigma_selection();
  // sigma: the bandwidth in use; null while "auto" is still warming up.
  if (s.chosen() > 0) w.Key("sigma").Double(s.chosen());
  else if (m.config().has_sigma() && m.config().sigma() > 0) w.Key("sigma").Double(m.config().sigma());
  else w.Key("sigma").Null();
  w.Key("sigma_selection").BeginObject();
  w.Key("automatic").Bool(s.automatic());
  w.Key("chosen").Double(s.chosen());
  w.Key("median_distance").Double(s.median_distance());
  w.Key("candidates").BeginArray();
  for (double c : s.candidates()) w.Double(c);
  w.EndArray();
  w.Key("scores").BeginArray();
  for (double c : s.scores()) w.Double(c);
  w.EndArray();
  w.Key("warmup_pairs").Uint(s.warmup_pairs());
  w.EndObject();
  w.Key("config");
  WriteConfigJson(w, m.config());
  w.EndObject();
}

void PrintModel(const v1::ModelInfo& m) {
  const auto& c = m.config();
  const auto& s = m.sigma_selection();
  std::cout << "model " << c.name() << "  dim " << c.dim() << "\n";
  std::cout << "  samples           " << m.samples();
  if (m.pending_warmup() > 0) std::cout << " (+" << m.pending_warmup() << " buffered for sigma auto)";
  std::cout << ", batches " << m.batches_applied() << "\n";
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
  std::cout << "  config            eta " << Num(c.eta()) << ", lambda " << Num(c.lambda())
            << ", epsilon " << Num(c.epsilon()) << ", max_dict " << c.max_dict() << ", dt "
            << Num(c.dt()) << ", seed " << c.seed() << "\n";
  const auto& v = m.view();
  if (v.version() == 0) {
    std::cout << "  view              none yet\n";
  } else {
    std::cout << "  view              version " << v.version() << ", " << v.samples()
              << " samples, age " << Num(v.age_seconds()) << " s, built in "
              << Num(v.build_seconds()) << " s\n";
  }
}

void PrintJson(const JsonWriter& w) { std::cout << w.str() << "\n"; }

// ---------------------------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------------------------

struct Context {
  std::string server;
  double timeout = 30;
  std::unique_ptr<Client> client;
};

absl::Status ConnectClient(Context& ctx) {
  client::ClientOptions options;
  options.target = ctx.server;
  options.timeout_seconds = ctx.timeout;
  auto c = Client::Connect(options);
  if (!c.ok()) return c.status();
  ctx.client = std::move(*c);
  return absl::OkStatus();
}

int NeedName(const Args& args, const std::string& command, const char* usage) {
  if (args.positional.size() != 1) {
    std::cerr << "cmestream: " << command << ": expected exactly one model NAME, got "
              << args.positional.size() << " arguments\n"
              << usage;
    return kExitUsage;
  }
  return 0;
}

int ModelCreate(Context& ctx, const Args& args) {
  if (int rc = NeedName(args, "model create", kCreateUsage)) return rc;
  v1::ModelConfig config;
  config.set_name(args.positional[0]);
  auto dim = args.Value("dim");
  if (!dim) return FailUsage("model create", "--dim D is required");
  // Every numeric flag is parsed before anything is sent.
  absl::Status bad;
  auto num = [&](const char* flag, auto setter) {
    if (auto v = args.Value(flag); v && bad.ok()) {
      auto d = ParseDouble(flag, *v);
      if (!d.ok()) bad = d.status(); else setter(*d);
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
  uint("dim", UINT32_MAX, [&](uint64_t v) { config.set_dim(static_cast<uint32_t>(v)); });
  if (auto s = args.Value("sigma"); s && *s != "auto") {
    num("sigma", [&](double v) { config.set_sigma(v); });
  }
  num("eta", [&](double v) { config.set_eta(v); });
  num("lambda", [&](double v) { config.set_lambda(v); });
  num("epsilon", [&](double v) { config.set_epsilon(v); });
  uint("max-dict", UINT32_MAX, [&](uint64_t v) { config.set_max_dict(static_cast<uint32_t>(v)); });
  num("dt", [&](double v) { config.set_dt(v); });
  uint("seed", UINT64_MAX, [&](uint64_t v) { config.set_seed(v); });
  uint("warmup", UINT32_MAX,
       [&](uint64_t v) { config.set_auto_sigma_warmup(static_cast<uint32_t>(v)); });
  num("refresh-interval", [&](double v) { config.set_refresh_interval_seconds(v); });
  uint("refresh-every", UINT64_MAX, [&](uint64_t v) { config.set_refresh_every_samples(v); });
  num("step-decay", [&](double v) { config.set_step_decay_samples(v); });
  num("step-decay-power", [&](double v) { config.set_step_decay_power(v); });
  if (args.Has("averaging")) config.set_averaging(true);
  if (!bad.ok()) return FailUsage("model create", bad.message());
  if (auto s = ConnectClient(ctx); !s.ok()) return FailUsage("model create", s.message());
  auto info = ctx.client->CreateModel(config);
  if (!info.ok()) return Fail("model create", info.status());
  if (args.Has("json")) {
    JsonWriter w;
    WriteModelJson(w, *info);
    PrintJson(w);
  } else {
    std::cout << "created model '" << info->config().name() << "'\n";
    PrintModel(*info);
  }
  return 0;
}

int ModelDescribe(Context& ctx, const Args& args) {
  if (int rc = NeedName(args, "model describe", kMainUsage)) return rc;
  if (auto s = ConnectClient(ctx); !s.ok()) return FailUsage("model describe", s.message());
  auto info = ctx.client->Describe(args.positional[0]);
  if (!info.ok()) return Fail("model describe", info.status());
  if (args.Has("json")) {
    JsonWriter w;
    WriteModelJson(w, *info);
    PrintJson(w);
  } else {
    PrintModel(*info);
  }
  return 0;
}

int ModelList(Context& ctx, const Args& args) {
  if (!args.positional.empty()) return FailUsage("model list", "takes no arguments");
  if (auto s = ConnectClient(ctx); !s.ok()) return FailUsage("model list", s.message());
  auto models = ctx.client->List();
  if (!models.ok()) return Fail("model list", models.status());
  if (args.Has("json")) {
    JsonWriter w;
    w.BeginObject().Key("models").BeginArray();
    for (const auto& m : *models) WriteModelJson(w, m);
    w.EndArray().EndObject();
    PrintJson(w);
  } else {
    std::printf("%-24s %5s %10s %10s %8s\n", "NAME", "DIM", "SAMPLES", "DICT", "VIEW");
    for (const auto& m : *models) {
      std::printf("%-24s %5u %10llu %10u %8llu\n", m.config().name().c_str(), m.config().dim(),
                  static_cast<unsigned long long>(m.samples()), m.dictionary_size(),
                  static_cast<unsigned long long>(m.view().version()));
    }
  }
  return 0;
}

int ModelDelete(Context& ctx, const Args& args) {
  if (int rc = NeedName(args, "model delete", kMainUsage)) return rc;
  if (auto s = ConnectClient(ctx); !s.ok()) return FailUsage("model delete", s.message());
  if (auto s = ctx.client->Delete(args.positional[0]); !s.ok()) return Fail("model delete", s);
  std::cout << "deleted model '" << args.positional[0] << "'\n";
  return 0;
}

// Progress line on stderr, at most once a second, only after the first second (short files
// stay silent).
class ProgressReporter {
 public:
  explicit ProgressReporter(bool enabled) : enabled_(enabled), tty_(isatty(STDERR_FILENO)) {}
  void Maybe(const IngestStream::Summary& s) {
    if (!enabled_) return;
    const auto now = Clock::now();
    if (now - last_ < std::chrono::seconds(1)) return;
    last_ = now;
    const double elapsed = Seconds();
    // The rate counts acknowledged pairs: sending can run ahead of the daemon by whatever
    // gRPC flow control buffers.
    std::fprintf(stderr, "%singest: %llu pairs sent, %llu acknowledged (%llu applied), %.0f pairs/s%s",
                 tty_ ? "\r" : "", static_cast<unsigned long long>(s.pairs_sent),
                 static_cast<unsigned long long>(s.pairs_acked),
                 static_cast<unsigned long long>(s.pairs_applied),
                 elapsed > 0 ? s.pairs_acked / elapsed : 0.0, tty_ ? "" : "\n");
    printed_ = true;
  }
  void Done() {
    if (printed_ && tty_) std::fputc('\n', stderr);
  }
  double Seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  using Clock = std::chrono::steady_clock;
  bool enabled_, tty_;
  bool printed_ = false;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_ = Clock::now();
};

int Ingest(Context& ctx, const Args& args) {
  const std::string cmd = "ingest";
  if (int rc = NeedName(args, cmd, kIngestUsage)) return rc;
  const std::string model = args.positional[0];
  auto csv = args.Value("csv");
  if (!csv) return FailUsage(cmd, "--csv FILE is required ('-' for standard input)");
  const bool trajectory = args.Has("trajectory");
  IngestStream::Options options;
  options.producer_id = args.Value("producer").value_or("");
  options.episode_id = args.Value("episode").value_or(*csv == "-" ? "stdin" : *csv);
  if (auto b = args.Value("batch")) {
    auto v = ParseUint("batch", *b);
    if (!v.ok()) return FailUsage(cmd, v.status().message());
    if (*v < 1 || *v > 1000000) return FailUsage(cmd, "--batch: expected in [1, 1000000]");
    options.batch_pairs = static_cast<int>(*v);
  }
  if (auto s = ConnectClient(ctx); !s.ok()) return FailUsage(cmd, s.message());
  // The model's dimension fixes the column count (and an unknown model fails before any
  // input is read).
  auto info = ctx.client->Describe(model);
  if (!info.ok()) return Fail(cmd, info.status());
  const int d = static_cast<int>(info->config().dim());
  const int columns = trajectory ? d : 2 * d;
  const std::string expected =
      trajectory ? absl::StrCat("one state x_1..x_", d)
                 : absl::StrCat("x_1..x_", d, ",y_1..y_", d);

  // A file is read and validated whole before the stream opens: a bad line then sends nothing.
  std::vector<double> all;
  std::ifstream file;
  std::unique_ptr<CsvReader> reader;
  if (*csv != "-") {
    auto rows = ReadCsvFile(*csv, columns, expected);
    if (!rows.ok()) return FailUsage(cmd, rows.status().message());
    all = std::move(*rows);
  } else {
    // std::cin is synchronized with stdio (slow line by line); read the descriptor directly.
    file.open("/dev/stdin");
    if (!file) return FailUsage(cmd, "cannot open standard input");
    reader = std::make_unique<CsvReader>(&file, "-", columns, expected);
  }

  auto stream = ctx.client->OpenIngest(model, static_cast<uint32_t>(d), options);
  if (!stream.ok()) return Fail(cmd, stream.status());
  ProgressReporter progress(!args.Has("quiet"));
  std::vector<double> x, y, chunk;
  const size_t chunk_rows = static_cast<size_t>(options.batch_pairs);
  auto send_rows = [&](const double* rows, size_t n) -> absl::Status {
    if (trajectory) return (*stream)->AddStates(absl::MakeConstSpan(rows, n * d));
    x.resize(n * d);
    y.resize(n * d);
    for (size_t i = 0; i < n; ++i) {
      std::copy(rows + i * columns, rows + i * columns + d, x.begin() + i * d);
      std::copy(rows + i * columns + d, rows + (i + 1) * columns, y.begin() + i * d);
    }
    return (*stream)->AddPairs(x, y);
  };
  if (!reader) {
    const size_t total = all.size() / columns;
    for (size_t i = 0; i < total; i += chunk_rows) {
      const size_t n = std::min(chunk_rows, total - i);
      if (auto s = send_rows(all.data() + i * columns, n); !s.ok()) return Fail(cmd, s);
      progress.Maybe((*stream)->Progress());
    }
  } else {
    while (true) {
      chunk.clear();
      auto n = reader->ReadRows(chunk_rows, &chunk);
      if (!n.ok()) {
        // Send nothing of the bad chunk; what was sent before stays applied.
        const auto sent = (*stream)->Progress().pairs_sent;
        auto done = (*stream)->Finish();
        progress.Done();
        const uint64_t applied = done.ok() ? done->pairs_applied : 0;
        return FailUsage(cmd, absl::StrCat(n.status().message(), " (", sent,
                                           " pairs sent before this line, ", applied,
                                           " applied)"));
      }
      if (*n == 0) break;
      if (auto s = send_rows(chunk.data(), *n); !s.ok()) return Fail(cmd, s);
      progress.Maybe((*stream)->Progress());
    }
  }
  auto summary = (*stream)->Finish();
  progress.Done();
  if (!summary.ok()) return Fail(cmd, summary.status());
  const double seconds = progress.Seconds();
  const double rate = seconds > 0 ? summary->pairs_sent / seconds : 0;
  if (args.Has("json")) {
    JsonWriter w;
    w.BeginObject();
    w.Key("model").String(model);
    w.Key("producer").String(options.producer_id);
    w.Key("batches").Uint(summary->batches_sent);
    w.Key("pairs_sent").Uint(summary->pairs_sent);
    w.Key("pairs_applied").Uint(summary->pairs_applied);
    w.Key("producer_offset").Uint(summary->producer_offset);
    w.Key("model_samples").Uint(summary->model_samples);
    w.Key("seconds").Double(seconds);
    w.Key("pairs_per_second").Double(rate);
    w.EndObject();
    PrintJson(w);
  } else {
    std::cout << "ingested " << summary->pairs_sent << " pairs into '" << model << "' in "
              << summary->batches_sent << " batches: " << summary->pairs_applied << " applied";
    if (summary->pairs_applied < summary->pairs_sent) {
      std::cout << ", " << summary->pairs_sent - summary->pairs_applied
                << " already applied for producer '" << options.producer_id << "'";
    }
    if (!options.producer_id.empty()) {
      std::cout << "; producer offset " << summary->producer_offset;
    }
    std::cout << "; model samples " << summary->model_samples << "; " << Num(seconds) << " s ("
              << Num(rate) << " pairs/s)\n";
  }
  return 0;
}

int Refresh(Context& ctx, const Args& args) {
  if (int rc = NeedName(args, "refresh", kRefreshUsage)) return rc;
  double wait_timeout = 60;
  if (auto t = args.Value("wait-timeout")) {
    auto v = ParseDouble("wait-timeout", *t);
    if (!v.ok() || *v <= 0) return FailUsage("refresh", "--wait-timeout: expected seconds > 0");
    wait_timeout = *v;
  }
  if (auto s = ConnectClient(ctx); !s.ok()) return FailUsage("refresh", s.message());
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

// Reads a points file with the model's dimension (fetched with Describe).
absl::StatusOr<std::vector<double>> ReadPoints(Context& ctx, const std::string& model,
                                               const std::string& path, bool* server_error) {
  auto info = ctx.client->Describe(model);
  if (!info.ok()) {
    *server_error = true;
    return info.status();
  }
  const int d = static_cast<int>(info->config().dim());
  return ReadCsvFile(path, d, absl::StrCat("one point x_1..x_", d));
}

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
  if (auto s = ConnectClient(ctx); !s.ok()) return FailUsage(cmd, s.message());
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
    w.BeginObject();
    w.Key("model").String(model);
    WriteViewJson(w, r->view());
    w.Key("dt").Double(r->dt());
    w.Key("eigenvalues").BeginArray();
    for (const auto& c : r->eigenvalues()) w.Complex(c.re(), c.im());
    w.EndArray();
    w.Key("rates").BeginArray();
    for (const auto& c : r->rates()) w.Complex(c.re(), c.im());
    w.EndArray();
    w.Key("timescales").BeginArray();
    for (double t : r->timescales()) w.Double(t);
    w.EndArray();
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
    w.EndObject();
    PrintJson(w);
    return 0;
  }
  std::cout << "model " << model << ": view version " << r->view().version() << ", "
            << r->view().samples() << " samples, dt " << Num(r->dt()) << "\n";
  std::printf("%3s %12s %12s %10s %12s %12s %12s\n", "#", "mu.re", "mu.im", "|mu|", "rate.re",
              "rate.im", "timescale");
  for (int l = 0; l < k; ++l) {
    const auto& mu = r->eigenvalues(l);
    const double re = l < r->rates_size() ? r->rates(l).re() : NAN;
    const double im = l < r->rates_size() ? r->rates(l).im() : NAN;
    const double ts = l < r->timescales_size() ? r->timescales(l) : NAN;
    std::printf("%3d %12.6f %12.6f %10.6f %12.6g %12.6g %12.6g\n", l, mu.re(), mu.im(),
                std::hypot(mu.re(), mu.im()), re, im, ts);
  }
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
  if (auto s = ConnectClient(ctx); !s.ok()) return FailUsage(cmd, s.message());
  bool server_error = false;
  auto pts = ReadPoints(ctx, model, *p, &server_error);
  if (!pts.ok()) return server_error ? Fail(cmd, pts.status()) : FailUsage(cmd, pts.status().message());
  auto r = ctx.client->Predict(model, *pts);
  if (!r.ok()) return Fail(cmd, r.status());
  const int d = static_cast<int>(r->dim());
  const int n = d > 0 ? r->predictions_size() / d : 0;
  if (args.Has("json")) {
    JsonWriter w;
    w.BeginObject();
    w.Key("model").String(model);
    WriteViewJson(w, r->view());
    w.Key("dim").Uint(r->dim());
    w.Key("predictions").BeginArray();
    for (int i = 0; i < n; ++i) {
      w.BeginArray();
      for (int j = 0; j < d; ++j) w.Double(r->predictions(i * d + j));
      w.EndArray();
    }
    w.EndArray();
    w.EndObject();
    PrintJson(w);
    return 0;
  }
  std::cout << "# E[Y|X=point], view version " << r->view().version() << ", "
            << r->view().samples() << " samples\n";
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < d; ++j) std::printf(j ? ",%.17g" : "%.17g", r->predictions(i * d + j));
    std::printf("\n");
  }
  return 0;
}

int Dictionary(Context& ctx, const Args& args) {
  const std::string cmd = "dictionary";
  if (int rc = NeedName(args, cmd, kMainUsage)) return rc;
  if (auto s = ConnectClient(ctx); !s.ok()) return FailUsage(cmd, s.message());
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
    w.BeginObject();
    w.Key("model").String(args.positional[0]);
    WriteViewJson(w, r->view());
    w.Key("dim").Uint(r->dim());
    w.Key("sigma").Double(r->sigma());
    w.Key("x_atoms");
    rows(w, r->x_atoms());
    w.Key("y_atoms");
    rows(w, r->y_atoms());
    w.EndObject();
    PrintJson(w);
    return 0;
  }
  std::cout << "# x-atoms of '" << args.positional[0] << "' (" << (d ? r->x_atoms_size() / d : 0)
            << "), sigma " << Num(r->sigma()) << ", view version " << r->view().version() << "\n";
  for (int i = 0; d > 0 && i < r->x_atoms_size() / d; ++i) {
    for (int j = 0; j < d; ++j) std::printf(j ? ",%.17g" : "%.17g", r->x_atoms(i * d + j));
    std::printf("\n");
  }
  return 0;
}

int Producer(Context& ctx, const Args& args) {
  const std::string cmd = "producer";
  if (int rc = NeedName(args, cmd, kMainUsage)) return rc;
  auto id = args.Value("producer");
  if (!id) return FailUsage(cmd, "--producer ID is required");
  if (auto s = ConnectClient(ctx); !s.ok()) return FailUsage(cmd, s.message());
  auto r = ctx.client->GetProducer(args.positional[0], *id);
  if (!r.ok()) return Fail(cmd, r.status());
  if (args.Has("json")) {
    JsonWriter w;
    w.BeginObject().Key("model").String(r->model()).Key("producer").String(r->producer_id());
    w.Key("applied_offset").Uint(r->applied_offset()).EndObject();
    PrintJson(w);
  } else {
    std::cout << "producer '" << r->producer_id() << "' of '" << r->model() << "': applied offset "
              << r->applied_offset() << "\n";
  }
  return 0;
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
    out += '\n';
    if (out.size() > (1 << 20)) {
      std::fwrite(out.data(), 1, out.size(), stdout);
      out.clear();
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
}

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
  if (system == "duffing") {
    systems::DuffingOptions o;
    if (dt) o.dt = *dt;
    if (box) o.box = *box;
    const auto t = systems::SimulateDuffing(static_cast<int64_t>(n), seed, o);
    WriteRows("# x1,x2,y1,y2  (Duffing delta=0.5 beta=-1 alpha=1; y = flow of x over dt)", t.x, &t.y);
    return 0;
  }
  if (system == "double-well") {
    systems::DoubleWellOptions o;
    if (dt) o.dt = *dt;
    const auto t = systems::SimulateDoubleWell(static_cast<int64_t>(n), seed, o);
    WriteRows("# x,y  (overdamped Langevin in V(x)=(x^2-1)^2, beta=3)", t.x, &t.y);
    return 0;
  }
  if (system == "duffing-grid") {
    systems::DuffingOptions o;
    if (box) o.box = *box;
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
                                     "' (expected duffing, double-well or duffing-grid)"));
}

int Run(int argc, char** argv) {
  std::vector<std::string> argv_s(argv + 1, argv + argc);
  Context ctx;
  const char* env = std::getenv("CMESTREAM_SERVER");
  ctx.server = env && *env ? env : "127.0.0.1:50051";

  // Global flags before the command word.
  size_t i = 0;
  bool help = false;
  for (; i < argv_s.size(); ++i) {
    const std::string& a = argv_s[i];
    if (a == "--help" || a == "-h") {
      help = true;
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
  std::string command = argv_s[i++];
  const char* usage = kMainUsage;
  CommandSpec spec;
  if (command == "model") {
    if (i >= argv_s.size() || argv_s[i] == "--help" || argv_s[i] == "-h") {
      std::cout << kMainUsage;
      return i >= argv_s.size() ? kExitUsage : 0;
    }
    command += " " + argv_s[i++];
    if (command == "model create") {
      usage = kCreateUsage;
      spec.values = {"dim", "sigma", "eta", "lambda", "epsilon", "max-dict", "dt", "seed",
                     "warmup", "refresh-interval", "refresh-every", "step-decay",
                     "step-decay-power"};
      spec.switches = {"averaging", "json"};
    } else if (command == "model describe" || command == "model list") {
      spec.switches = {"json"};
    } else if (command == "model delete") {
    } else {
      return FailUsage(command, "unknown subcommand (expected create, describe, list, delete)");
    }
  } else if (command == "ingest") {
    usage = kIngestUsage;
    spec.values = {"csv", "producer", "episode", "batch"};
    spec.switches = {"trajectory", "quiet", "json"};
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
    spec.switches = {"json"};
  } else if (command == "producer") {
    spec.values = {"producer"};
    spec.switches = {"json"};
  } else if (command == "simulate") {
    usage = kSimulateUsage;
    spec.values = {"n", "seed", "dt", "box", "n-side"};
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
  return Simulate(*args);
}

}  // namespace
}  // namespace cmestream::cli

int main(int argc, char** argv) { return cmestream::cli::Run(argc, argv); }
