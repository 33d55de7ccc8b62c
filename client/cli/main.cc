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
#include <iterator>
#include <iostream>
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
#include "client/cli/csv.h"
#include "client/cli/json.h"
#include "client/cpp/client.h"
#include "absl/strings/str_format.h"
#include "core/systems/duffing.h"
#include "core/systems/four_well.h"
#include "core/systems/hmm.h"
#include "core/systems/soft_aggregation_chain.h"

namespace cmestream::cli {
namespace {

namespace v1 = ::cmestream::v1;
using client::Client;
using client::IngestStream;

constexpr int kExitServer = 1;
constexpr int kExitUsage = 2;

const char kMainUsage[] = R"(usage: cmestream [--server HOST:PORT] [--timeout S] [--tls-ca FILE [--tls-cert FILE --tls-key FILE]]
                 [--token-file FILE] COMMAND [ARGS] [--help]

Client of cmestreamd. --server defaults to $CMESTREAM_SERVER, else 127.0.0.1:50051.
--timeout is the deadline of each request in seconds (default 30).
--tls-ca FILE: connect with TLS, trusting this PEM CA; --tls-cert/--tls-key: PEM client certificate
and key (daemons started with --tls-client-ca). --token-file FILE: bearer token (first line);
default $CMESTREAM_TOKEN. These flags go before COMMAND.

commands:
  model create NAME --dim D [options]   create a continuous model (see `cmestream model create --help`)
  model create NAME --states P [options]
                                        create a discrete model over state ids 0..P-1
  model describe NAME [--json]          config, samples seen, dictionary size, view, sigma choice
  model list [--json]                   all models
  model delete NAME                     delete a model
  snapshot [NAME] [--json]              the daemon snapshots every model now (admin); prints the
                                        snapshot file's path on the daemon's host
  export NAME --out FILE                write the model's full state to FILE (admin)
  import FILE [--name NEW]              register an exported model, as NEW or its exported name
                                        (admin); the daemon snapshots right after
  ingest NAME --csv FILE [--producer ID] [--trajectory]
                                        stream transitions from CSV ('-' = standard input)
  refresh NAME [--wait]                 rebuild the model's view (optionally wait for it)
  koopman NAME [--top K] [--points FILE] [--json]
                                        Koopman eigenvalues, timescales, eigenfunction values
  predict NAME --points FILE [--json]   one-step forecast E[Y | X = point] per point
  dictionary NAME [--json]              dictionary atoms
  producer NAME --producer ID [--json]  a producer's applied offset
  counts NAME [--json]                  transition counts, visits, stationary weights
  embedding NAME [--points FILE] [--json]
                                        low-rank state embedding and singular values
  clusters NAME [--points FILE] [--json]
                                        metastable clusters, coarse-grained chain, timescales
  aggregation NAME [--json]             soft state aggregation (U, V, anchors, partition)
  latent NAME [--points FILE] [--json]  latent-state weights, densities, posteriors
  forecast NAME --window FILE [--horizon H] [--json]
                                        predictive-state forecast after a recent window
  simulate SYSTEM [options]             write simulated data as CSV (no server needed):
                                        duffing, double-well, duffing-grid, four-well,
                                        multi-well-2d, soft-aggregation, hmm-mixture,
                                        hmm-binary, kalman (see `cmestream simulate --help`)

exit status: 0 ok, 1 server error, 2 usage or input error
)";

const char kCreateUsage[] = R"(usage: cmestream model create NAME (--dim D | --states P) [options]

  --dim D              state dimension of a continuous model (>= 1)
  --states P           discrete model over state ids 0..P-1: ingest takes ids (CSV 'i,j', or
                       one id per line with --trajectory) and keeps counts directly (no kernel)
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
  --forgetting G       per-sample decay of every streaming statistic, in (0, 1] (default 1 = none)
 state embedding and metastable clusters (ALGORITHMS.md sections 2-3):
  --rff N              random Fourier features (continuous; default 256)
  --rank R             embedding rank r (default 4)
  --clusters K         metastable clusters (default 2)
 soft state aggregation (section 4), off unless --meta is given:
  --meta R             meta-states r
  --anchor-threshold D anchor threshold delta0 (default 0.1)
  --vertex-hunting V   spa (default) or kmeans-spa
 multi-view latent-state model (section 5), off unless --latent is given:
  --latent K           latent states k (needs trajectory ingestion: --trajectory)
  --tensor-restarts L  robust tensor power method restarts (default 20)
  --tensor-iterations N  power iterations per restart (default 30)
  --reservoir S        third-moment reservoir size (default 20000)
 predictive-state model (section 6), off unless --window is given:
  --window L           history/future window length k (needs --trajectory ingestion)
  --ridge1 X           stage-1 ridge lambda1 (default 1e-3)
  --ridge2 Y           stage-2 ridge lambda2 (default 1e-6)
  --json               print the created model as JSON
)";

const char kCountsUsage[] = R"(usage: cmestream counts NAME [--json]

Transition counts N[i,j] over the model's discretization (dictionary atoms of a continuous
model, state ids of a discrete one), visit counts and stationary weights.
JSON: {"counts": [[i, j, count]...], "visits": [...], "stationary": [...], "num_states",
       "states": [[x_1..x_d] per state] (continuous only), "view_version", "samples"}
)";

const char kEmbeddingUsage[] = R"(usage: cmestream embedding NAME [--points FILE] [--json]

Rank-r state embedding Psi(x) of each query point (FILE: one point x_1..x_d per line, or one
state id per line for discrete models) and the singular values (with their gaps, to choose r).
JSON: {"embedding": [[r numbers] per point], "singular_values", "singular_value_gaps", "rank",
       "view_version", "samples"}
)";

const char kClustersUsage[] = R"(usage: cmestream clusters NAME [--points FILE] [--json]

Metastable clusters: representatives (atoms or states) with weight and label, the label of each
query point (FILE as for embedding), the K x K coarse-grained transition matrix, cluster masses
and the implied timescales of the count-based chain.
JSON: {"representatives": [{"coordinates"|"id", "weight", "label"}...], "point_labels",
       "transition_matrix": [[K] x K], "masses", "timescales", "clusters", "inertia",
       "view_version", "samples"}
)";

const char kAggregationUsage[] = R"(usage: cmestream aggregation NAME [--json]

Soft state aggregation (model created with --meta R): disaggregation V (p x r, columns sum to
1), aggregation U (p x r), anchor rows per meta-state, hard partition and excluded states.
JSON: {"states": [ids] or [[coordinates]...] in row order, "state_ids", "V", "U",
       "anchors": [[row indices] per meta-state], "partition", "excluded",
       "distance_to_empirical", "meta_states", "view_version", "samples"}
)";

const char kLatentUsage[] = R"(usage: cmestream latent NAME [--points FILE] [--json]

Multi-view latent-state model (model created with --latent K): mixing weights, each component's
density at the query points (FILE as for embedding) and the posterior over latent states.
JSON: {"weights": [k], "densities": [[n values] per component], "posteriors": [[k] per point],
       "latent_states", "view_version", "samples"}
)";

const char kForecastUsage[] = R"(usage: cmestream forecast NAME --window FILE [--horizon H] [--json]

Predictive-state forecast (model created with --window L) of the next H (default 1)
observations after the recent observations in FILE (one per line, oldest first; state ids for
discrete models).
JSON, continuous: {"forecast": [[d numbers] per step] (expected values), "dim", "state", ...}
JSON, discrete:   {"forecast": [most likely id per step], "expected": [sum_a a p(a) per step],
                   "distribution": [[P probabilities] per step], "state", ...}
Both carry "horizon", "view_version", "samples".
)";

const char kIngestUsage[] = R"(usage: cmestream ingest NAME --csv FILE [--producer ID] [--trajectory] [options]

Streams transitions into model NAME.
  --csv FILE      one transition per line, x_1,...,x_d,y_1,...,y_d ('-' reads standard input).
                  Blank lines and lines starting with '#' are ignored.
  --trajectory    FILE holds one state x_1,...,x_d per line; consecutive rows are paired.
  --producer ID   exactly-once delivery: offsets count pairs from 0 in this file, and the daemon
                  skips pairs it already applied for ID, so re-running the same file with the
                  same ID applies 0 new pairs. Without it every pair is applied.
  --resume        with --producer: ask the daemon for the producer's applied offset K
                  (GetProducer) and send only the rest of FILE: pairs K.. (with --trajectory,
                  states from index K on, so the first pair sent is (state K, state K+1)).
                  Use it to continue after a crash or restart of either side.
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

Writes simulated data as CSV on standard output (a '#' header line names the columns); with
--truth FILE the systems that have one write their ground truth to FILE as JSON.
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

  four-well      pairs x,y of the 1-D four-well diffusion (paper 000 sec. 5.1) at lag --tau
                 (default 0.1); --trajectory: one state per line; --truth: barriers, eigenvalues
  multi-well-2d  pairs x1,x2,y1,y2 of the 2-D four-well diffusion; --trajectory, --tau, --truth
  soft-aggregation --states P --meta R [--anchors-per-meta A] [--hard]
                 transitions i,j of a chain P = U V^T with A (default 3) anchor states per
                 meta-state; --trajectory: one id per line; --truth: {"U","V","anchors",...}
  hmm-mixture    one observation per line of a 3-state HMM with Gaussian and shifted-Gamma
                 emissions (paper 001 sec. 7); --truth: weights, emissions, densities on a grid
  hmm-binary     one observation id (0/1) per line of the 2-state learning/forgetting chain
                 (paper 002 sec. 5; --learn, --forget, --guess, --slip); --truth: transition,
                 emission
  kalman         one observation per line of a 2-D damped-rotation linear-Gaussian model;
                 --truth: A, C, Q, R
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
  w.Key("num_states").Uint(c.num_states());
  if (c.has_forgetting()) w.Key("forgetting").Double(c.forgetting());
  if (c.has_rff_features()) w.Key("rff_features").Uint(c.rff_features());
  if (c.has_rank()) w.Key("rank").Uint(c.rank());
  if (c.has_clusters()) w.Key("clusters").Uint(c.clusters());
  if (c.has_meta_states()) w.Key("meta_states").Uint(c.meta_states());
  if (c.has_anchor_threshold()) w.Key("anchor_threshold").Double(c.anchor_threshold());
  if (!c.vertex_hunting().empty()) w.Key("vertex_hunting").String(c.vertex_hunting());
  if (c.has_latent_states()) w.Key("latent_states").Uint(c.latent_states());
  if (c.has_tensor_restarts()) w.Key("tensor_restarts").Uint(c.tensor_restarts());
  if (c.has_tensor_iterations()) w.Key("tensor_iterations").Uint(c.tensor_iterations());
  if (c.has_reservoir()) w.Key("reservoir").Uint(c.reservoir());
  if (c.has_window()) w.Key("window").Uint(c.window());
  if (c.has_ridge_stage1()) w.Key("ridge_stage1").Double(c.ridge_stage1());
  if (c.has_ridge_stage2()) w.Key("ridge_stage2").Double(c.ridge_stage2());
  w.EndObject();
}

void WriteModelJson(JsonWriter& w, const v1::ModelInfo& m) {
  w.BeginObject();
  w.Key("name").String(m.config().name());
  w.Key("dim").Uint(m.config().dim());
  w.Key("num_states").Uint(m.config().num_states());
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
  if (c.num_states() > 0) {
    std::cout << "model " << c.name() << "  discrete, " << c.num_states() << " states\n";
  } else {
    std::cout << "model " << c.name() << "  dim " << c.dim() << "\n";
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
    std::cout << "  config            eta " << Num(c.eta()) << ", lambda " << Num(c.lambda())
              << ", epsilon " << Num(c.epsilon()) << ", max_dict " << c.max_dict() << ", dt "
              << Num(c.dt()) << ", seed " << c.seed() << "\n";
  }
  std::cout << "  views             rank " << c.rank() << ", clusters " << c.clusters();
  if (c.num_states() == 0) std::cout << ", rff " << c.rff_features();
  if (c.meta_states() > 0) {
    std::cout << "; aggregation " << c.meta_states() << " meta-states (delta0 "
              << Num(c.anchor_threshold()) << ", "
              << (c.vertex_hunting().empty() ? "spa" : c.vertex_hunting()) << ")";
  }
  if (c.latent_states() > 0) std::cout << "; latent " << c.latent_states() << " states";
  if (c.window() > 0) std::cout << "; predictive window " << c.window();
  if (c.has_forgetting() && c.forgetting() < 1) std::cout << "; forgetting " << Num(c.forgetting());
  std::cout << "\n";
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
  std::string tls_ca, tls_cert, tls_key, token;
  std::unique_ptr<Client> client;
};

absl::Status ConnectClient(Context& ctx) {
  client::ClientOptions options;
  options.target = ctx.server;
  options.timeout_seconds = ctx.timeout;
  options.tls_ca_file = ctx.tls_ca;
  options.tls_cert_file = ctx.tls_cert;
  options.tls_key_file = ctx.tls_key;
  options.token = ctx.token;
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
  if (!dim && !args.Value("states")) {
    return FailUsage("model create", "--dim D is required (or --states P for a discrete model)");
  }
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
  uint("states", UINT32_MAX, [&](uint64_t v) { config.set_num_states(static_cast<uint32_t>(v)); });
  num("forgetting", [&](double v) { config.set_forgetting(v); });
  uint("rff", UINT32_MAX, [&](uint64_t v) { config.set_rff_features(static_cast<uint32_t>(v)); });
  uint("rank", UINT32_MAX, [&](uint64_t v) { config.set_rank(static_cast<uint32_t>(v)); });
  uint("clusters", UINT32_MAX, [&](uint64_t v) { config.set_clusters(static_cast<uint32_t>(v)); });
  uint("meta", UINT32_MAX, [&](uint64_t v) { config.set_meta_states(static_cast<uint32_t>(v)); });
  num("anchor-threshold", [&](double v) { config.set_anchor_threshold(v); });
  if (auto v = args.Value("vertex-hunting")) {
    if (*v != "spa" && *v != "kmeans-spa" && bad.ok()) {
      bad = absl::InvalidArgumentError(
          absl::StrCat("--vertex-hunting: expected spa or kmeans-spa, got '", *v, "'"));
    }
    config.set_vertex_hunting(*v);
  }
  uint("latent", UINT32_MAX, [&](uint64_t v) { config.set_latent_states(static_cast<uint32_t>(v)); });
  uint("tensor-restarts", UINT32_MAX,
       [&](uint64_t v) { config.set_tensor_restarts(static_cast<uint32_t>(v)); });
  uint("tensor-iterations", UINT32_MAX,
       [&](uint64_t v) { config.set_tensor_iterations(static_cast<uint32_t>(v)); });
  uint("reservoir", UINT32_MAX, [&](uint64_t v) { config.set_reservoir(static_cast<uint32_t>(v)); });
  uint("window", UINT32_MAX, [&](uint64_t v) { config.set_window(static_cast<uint32_t>(v)); });
  num("ridge1", [&](double v) { config.set_ridge_stage1(v); });
  num("ridge2", [&](double v) { config.set_ridge_stage2(v); });
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

// `snapshot [NAME]`: a snapshot always holds every model (one file, one atomic rename; see
// service/snapshot.h), so NAME only checks that the model exists on the daemon.
int Snapshot(Context& ctx, const Args& args) {
  if (args.positional.size() > 1) return FailUsage("snapshot", "takes at most one model name");
  if (auto s = ConnectClient(ctx); !s.ok()) return FailUsage("snapshot", s.message());
  if (!args.positional.empty()) {
    if (auto info = ctx.client->Describe(args.positional[0]); !info.ok()) return Fail("snapshot", info.status());
  }
  auto r = ctx.client->Snapshot();
  if (!r.ok()) return Fail("snapshot", r.status());
  if (args.Has("json")) {
    JsonWriter w;
    w.BeginObject()
        .Key("path").String(r->path())
        .Key("bytes").Uint(r->bytes())
        .Key("covered_sequence").Uint(r->covered_sequence())
        .Key("models").Uint(r->models())
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
  if (int rc = NeedName(args, "export", kMainUsage)) return rc;
  const std::optional<std::string> out = args.Value("out");
  if (!out || out->empty()) return FailUsage("export", "--out FILE is required");
  if (auto s = ConnectClient(ctx); !s.ok()) return FailUsage("export", s.message());
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

int Import(Context& ctx, const Args& args) {
  if (args.positional.size() != 1) return FailUsage("import", "expected one FILE (an export)");
  const std::string& path = args.positional[0];
  std::ifstream file(path, std::ios::binary);
  if (!file) return FailUsage("import", "cannot open '" + path + "'");
  std::string data((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (file.bad()) return FailUsage("import", "cannot read '" + path + "'");
  if (auto s = ConnectClient(ctx); !s.ok()) return FailUsage("import", s.message());
  auto info = ctx.client->ImportModel(std::move(data), args.Value("name").value_or(""));
  if (!info.ok()) return Fail("import " + path, info.status());
  if (args.Has("json")) {
    JsonWriter w;
    WriteModelJson(w, *info);
    PrintJson(w);
  } else {
    std::cout << "imported model '" << info->config().name() << "'\n";
    PrintModel(*info);
  }
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

void PrintIngestSummary(const Args& args, const std::string& model, const IngestStream::Options& options,
                        const IngestStream::Summary& summary, double seconds);

// Discrete models: rows of integer state ids, `i,j` pairs or (--trajectory) one id per line.
// The whole input (standard input too) is read and checked for integers before anything is
// sent; the daemon checks the range [0, P) and refuses a batch with an id outside it, naming
// the id, without applying any of that batch.
int IngestIds(Context& ctx, const Args& args, const std::string& model, const std::string& csv,
              bool trajectory, const IngestStream::Options& options, uint32_t num_states) {
  const std::string cmd = "ingest";
  const int columns = trajectory ? 1 : 2;
  const std::string expected =
      trajectory ? absl::StrCat("one state id in [0, ", num_states, ")")
                 : absl::StrCat("i,j with state ids in [0, ", num_states, ")");
  auto rows = ReadIdCsvFile(csv, columns, expected);
  if (!rows.ok()) return FailUsage(cmd, rows.status().message());
  if (options.start_offset > 0) {  // --resume: drop what the daemon already applied
    const size_t skip = std::min<size_t>(options.start_offset, rows->size() / columns);
    rows->erase(rows->begin(), rows->begin() + static_cast<std::ptrdiff_t>(skip * columns));
  }
  auto stream = ctx.client->OpenDiscreteIngest(model, options);
  if (!stream.ok()) return Fail(cmd, stream.status());
  ProgressReporter progress(!args.Has("quiet"));
  const size_t chunk = static_cast<size_t>(options.batch_pairs);
  if (trajectory) {
    for (size_t i = 0; i < rows->size(); i += chunk) {
      const size_t n = std::min(chunk, rows->size() - i);
      if (auto s = (*stream)->AddStateIds(absl::MakeConstSpan(rows->data() + i, n)); !s.ok()) {
        return Fail(cmd, s);
      }
      progress.Maybe((*stream)->Progress());
    }
  } else {
    std::vector<int64_t> x, y;
    const size_t total = rows->size() / 2;
    for (size_t i = 0; i < total; i += chunk) {
      const size_t n = std::min(chunk, total - i);
      x.resize(n);
      y.resize(n);
      for (size_t k = 0; k < n; ++k) {
        x[k] = (*rows)[2 * (i + k)];
        y[k] = (*rows)[2 * (i + k) + 1];
      }
      if (auto s = (*stream)->AddIdPairs(x, y); !s.ok()) return Fail(cmd, s);
      progress.Maybe((*stream)->Progress());
    }
  }
  auto summary = (*stream)->Finish();
  progress.Done();
  if (!summary.ok()) return Fail(cmd, summary.status());
  PrintIngestSummary(args, model, options, *summary, progress.Seconds());
  return 0;
}

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
  if (args.Has("resume")) {
    if (options.producer_id.empty()) return FailUsage(cmd, "--resume needs --producer ID");
    auto producer = ctx.client->GetProducer(model, options.producer_id);
    if (!producer.ok()) return Fail(cmd, producer.status());
    options.start_offset = producer->applied_offset();
    if (!args.Has("quiet") && !args.Has("json")) {
      std::fprintf(stderr, "ingest: resuming producer '%s' at offset %llu\n", options.producer_id.c_str(),
                   static_cast<unsigned long long>(options.start_offset));
    }
  }
  if (info->config().num_states() > 0) {
    return IngestIds(ctx, args, model, *csv, trajectory, options, info->config().num_states());
  }
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
    if (options.start_offset > 0) {  // --resume: pairs (or states) before the offset are applied
      const size_t skip = std::min<size_t>(options.start_offset, all.size() / columns);
      all.erase(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(skip * columns));
    }
  } else {
    // std::cin is synchronized with stdio (slow line by line); read the descriptor directly.
    file.open("/dev/stdin");
    if (!file) return FailUsage(cmd, "cannot open standard input");
    reader = std::make_unique<CsvReader>(&file, "-", columns, expected);
    if (options.start_offset > 0) {  // --resume on standard input: read past the applied rows
      std::vector<double> discard;
      auto n = reader->ReadRows(static_cast<size_t>(options.start_offset), &discard);
      if (!n.ok()) return FailUsage(cmd, n.status().message());
    }
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
  PrintIngestSummary(args, model, options, *summary, progress.Seconds());
  return 0;
}

void PrintIngestSummary(const Args& args, const std::string& model, const IngestStream::Options& options,
                        const IngestStream::Summary& s, double seconds) {
  const IngestStream::Summary* summary = &s;
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

// ---------------------------------------------------------------------------------------------
// Views of ALGORITHMS.md sections 2-6 (counts, embedding, clusters, aggregation, latent,
// forecast). Every JSON reply carries view_version and samples (WriteViewJson).
// ---------------------------------------------------------------------------------------------

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
                                            const std::optional<std::string>& path,
                                            bool* server_error) {
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

// Writes a packed row-major array as a list of `cols`-lists.
template <typename Container>
void WriteRowsJson(JsonWriter& w, const Container& a, int cols) {
  w.BeginArray();
  for (int i = 0; cols > 0 && i + cols <= static_cast<int>(a.size()); i += cols) {
    w.BeginArray();
    for (int j = 0; j < cols; ++j) w.Double(a[i + j]);
    w.EndArray();
  }
  w.EndArray();
}

template <typename Container>
void WriteListJson(JsonWriter& w, const Container& a) {
  w.BeginArray();
  for (double v : a) w.Double(v);
  w.EndArray();
}

void PrintViewLine(const std::string& what, const std::string& model, const v1::ViewInfo& v) {
  std::cout << "# " << what << " of '" << model << "', view version " << v.version() << ", "
            << v.samples() << " samples\n";
}

void PrintVector(const char* label, const google::protobuf::RepeatedField<double>& a) {
  std::cout << label;
  for (double v : a) std::cout << " " << Num(v);
  std::cout << "\n";
}

#define CMESTREAM_LOAD_POINTS(q, cmd, model, path)                                             \
  if (auto s = ConnectClient(ctx); !s.ok()) return FailUsage(cmd, s.message());               \
  bool server_error_ = false;                                                                 \
  auto q##_or = LoadQueryPoints(ctx, model, path, &server_error_);                            \
  if (!q##_or.ok()) {                                                                         \
    return server_error_ ? Fail(cmd, q##_or.status()) : FailUsage(cmd, q##_or.status().message()); \
  }                                                                                           \
  QueryPoints& q = *q##_or

int Counts(Context& ctx, const Args& args) {
  const std::string cmd = "counts";
  if (int rc = NeedName(args, cmd, kCountsUsage)) return rc;
  const std::string model = args.positional[0];
  if (auto s = ConnectClient(ctx); !s.ok()) return FailUsage(cmd, s.message());
  auto r = ctx.client->Counts(model);
  if (!r.ok()) return Fail(cmd, r.status());
  const int d = static_cast<int>(r->dim());
  if (args.Has("json")) {
    JsonWriter w;
    w.BeginObject();
    w.Key("model").String(model);
    WriteViewJson(w, r->view());
    w.Key("num_states").Uint(r->num_states());
    w.Key("counts").BeginArray();
    for (const auto& c : r->counts()) {
      w.BeginArray().Uint(c.from()).Uint(c.to()).Double(c.count()).EndArray();
    }
    w.EndArray();
    w.Key("visits");
    WriteListJson(w, r->visits());
    w.Key("stationary");
    WriteListJson(w, r->stationary());
    if (d > 0) {
      w.Key("dim").Uint(r->dim());
      w.Key("states");
      WriteRowsJson(w, r->state_coordinates(), d);
    }
    w.EndObject();
    PrintJson(w);
    return 0;
  }
  PrintViewLine("transition counts", model, r->view());
  std::cout << "# " << r->num_states() << " states, " << r->counts_size() << " non-zero counts\n";
  std::printf("%8s %12s %12s%s\n", "state", "visits", "stationary", d > 0 ? "  coordinates" : "");
  for (int i = 0; i < static_cast<int>(r->num_states()); ++i) {
    std::printf("%8d %12.6g %12.6g", i, i < r->visits_size() ? r->visits(i) : 0.0,
                i < r->stationary_size() ? r->stationary(i) : 0.0);
    for (int j = 0; d > 0 && (i + 1) * d <= r->state_coordinates_size() && j < d; ++j) {
      std::printf(j ? ",%.6g" : "  %.6g", r->state_coordinates(i * d + j));
    }
    std::printf("\n");
  }
  std::printf("%8s %8s %12s\n", "from", "to", "count");
  for (const auto& c : r->counts()) std::printf("%8u %8u %12.6g\n", c.from(), c.to(), c.count());
  return 0;
}

int Embedding(Context& ctx, const Args& args) {
  const std::string cmd = "embedding";
  if (int rc = NeedName(args, cmd, kEmbeddingUsage)) return rc;
  const std::string model = args.positional[0];
  CMESTREAM_LOAD_POINTS(q, cmd, model, args.Value("points"));
  auto r = ctx.client->Embedding(model, q.points, q.ids);
  if (!r.ok()) return Fail(cmd, r.status());
  const int rank = static_cast<int>(r->rank());
  if (args.Has("json")) {
    JsonWriter w;
    w.BeginObject();
    w.Key("model").String(model);
    WriteViewJson(w, r->view());
    w.Key("rank").Uint(r->rank());
    w.Key("embedding");
    WriteRowsJson(w, r->embedding(), rank);
    w.Key("singular_values");
    WriteListJson(w, r->singular_values());
    w.Key("singular_value_gaps");
    WriteListJson(w, r->singular_value_gaps());
    w.EndObject();
    PrintJson(w);
    return 0;
  }
  PrintViewLine("state embedding", model, r->view());
  std::cout << "# rank " << rank << "\n";
  PrintVector("# singular values", r->singular_values());
  PrintVector("# gaps           ", r->singular_value_gaps());
  for (int i = 0; rank > 0 && (i + 1) * rank <= r->embedding_size(); ++i) {
    for (int j = 0; j < rank; ++j) std::printf(j ? ",%.17g" : "%.17g", r->embedding(i * rank + j));
    std::printf("\n");
  }
  return 0;
}

int Clusters(Context& ctx, const Args& args) {
  const std::string cmd = "clusters";
  if (int rc = NeedName(args, cmd, kClustersUsage)) return rc;
  const std::string model = args.positional[0];
  CMESTREAM_LOAD_POINTS(q, cmd, model, args.Value("points"));
  auto r = ctx.client->Clusters(model, q.points, q.ids);
  if (!r.ok()) return Fail(cmd, r.status());
  const int k = static_cast<int>(r->clusters());
  if (args.Has("json")) {
    JsonWriter w;
    w.BeginObject();
    w.Key("model").String(model);
    WriteViewJson(w, r->view());
    w.Key("clusters").Uint(r->clusters());
    w.Key("representatives").BeginArray();
    for (const auto& rep : r->representatives()) {
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
    for (uint32_t l : r->point_labels()) w.Uint(l);
    w.EndArray();
    w.Key("transition_matrix");
    WriteRowsJson(w, r->transition_matrix(), k);
    w.Key("masses");
    WriteListJson(w, r->masses());
    w.Key("timescales");
    WriteListJson(w, r->timescales());
    w.Key("inertia").Double(r->inertia());
    w.EndObject();
    PrintJson(w);
    return 0;
  }
  PrintViewLine("metastable clusters", model, r->view());
  std::cout << "# " << k << " clusters; coarse-grained transition matrix (row = from):\n";
  std::printf("%8s %10s", "cluster", "mass");
  for (int j = 0; j < k; ++j) std::printf(" %10d", j);
  std::printf("\n");
  for (int i = 0; i < k; ++i) {
    std::printf("%8d %10.4g", i, i < r->masses_size() ? r->masses(i) : 0.0);
    for (int j = 0; j < k && i * k + j < r->transition_matrix_size(); ++j) {
      std::printf(" %10.4g", r->transition_matrix(i * k + j));
    }
    std::printf("\n");
  }
  PrintVector("# implied timescales", r->timescales());
  std::printf("%8s %8s %12s  %s\n", "rep", "label", "weight", q.discrete ? "" : "coordinates");
  for (const auto& rep : r->representatives()) {
    std::printf("%8lld %8u %12.6g ", static_cast<long long>(rep.id()), rep.label(), rep.weight());
    for (int j = 0; j < rep.coordinates_size(); ++j) {
      std::printf(j ? ",%.6g" : " %.6g", rep.coordinates(j));
    }
    std::printf("\n");
  }
  if (r->point_labels_size() > 0) {
    std::cout << "# labels of the " << r->point_labels_size() << " query points:\n";
    for (uint32_t l : r->point_labels()) std::cout << l << "\n";
  }
  return 0;
}

int Aggregation(Context& ctx, const Args& args) {
  const std::string cmd = "aggregation";
  if (int rc = NeedName(args, cmd, kAggregationUsage)) return rc;
  const std::string model = args.positional[0];
  if (auto s = ConnectClient(ctx); !s.ok()) return FailUsage(cmd, s.message());
  auto r = ctx.client->Aggregation(model);
  if (!r.ok()) return Fail(cmd, r.status());
  const int m = static_cast<int>(r->meta_states());
  const int d = static_cast<int>(r->dim());
  const int p = r->state_ids_size();
  if (args.Has("json")) {
    JsonWriter w;
    w.BeginObject();
    w.Key("model").String(model);
    WriteViewJson(w, r->view());
    w.Key("meta_states").Uint(r->meta_states());
    // states: ids for discrete models, atom coordinates for continuous ones (row order).
    w.Key("states");
    if (d > 0 && r->state_coordinates_size() == p * d) {
      WriteRowsJson(w, r->state_coordinates(), d);
    } else {
      w.BeginArray();
      for (int64_t id : r->state_ids()) w.Int(id);
      w.EndArray();
    }
    w.Key("state_ids").BeginArray();
    for (int64_t id : r->state_ids()) w.Int(id);
    w.EndArray();
    w.Key("V");
    WriteRowsJson(w, r->v(), m);
    w.Key("U");
    WriteRowsJson(w, r->u(), m);
    w.Key("anchors").BeginArray();
    for (const auto& a : r->anchors()) {
      w.BeginArray();
      for (uint32_t i : a.indices()) w.Uint(i);
      w.EndArray();
    }
    w.EndArray();
    w.Key("partition").BeginArray();
    for (uint32_t l : r->partition()) w.Uint(l);
    w.EndArray();
    w.Key("excluded").BeginArray();
    for (int64_t id : r->excluded()) w.Int(id);
    w.EndArray();
    w.Key("distance_to_empirical").Double(r->distance_to_empirical());
    w.EndObject();
    PrintJson(w);
    return 0;
  }
  PrintViewLine("soft state aggregation", model, r->view());
  std::cout << "# " << p << " states, " << m << " meta-states; mean row TV |U V^T - P_hat| = "
            << Num(r->distance_to_empirical()) << "\n";
  for (int k = 0; k < r->anchors_size(); ++k) {
    std::cout << "# anchors of meta-state " << k << " (rows):";
    for (uint32_t i : r->anchors(k).indices()) std::cout << " " << i;
    std::cout << "\n";
  }
  if (r->excluded_size() > 0) {
    std::cout << "# excluded (no incoming transitions):";
    for (int64_t id : r->excluded()) std::cout << " " << id;
    std::cout << "\n";
  }
  std::printf("%6s %8s %5s", "row", "state", "meta");
  for (int k = 0; k < m; ++k) std::printf(" %9s", absl::StrCat("V", k).c_str());
  for (int k = 0; k < m; ++k) std::printf(" %9s", absl::StrCat("U", k).c_str());
  std::printf("\n");
  for (int i = 0; i < p; ++i) {
    std::printf("%6d %8lld %5d", i, static_cast<long long>(r->state_ids(i)),
                i < r->partition_size() ? static_cast<int>(r->partition(i)) : -1);
    // "+ 0.0" prints an exact zero of a clipped entry as 0, not -0.
    for (int k = 0; k < m && (i + 1) * m <= r->v_size(); ++k) std::printf(" %9.4g", r->v(i * m + k) + 0.0);
    for (int k = 0; k < m && (i + 1) * m <= r->u_size(); ++k) std::printf(" %9.4g", r->u(i * m + k) + 0.0);
    std::printf("\n");
  }
  return 0;
}

int Latent(Context& ctx, const Args& args) {
  const std::string cmd = "latent";
  if (int rc = NeedName(args, cmd, kLatentUsage)) return rc;
  const std::string model = args.positional[0];
  CMESTREAM_LOAD_POINTS(q, cmd, model, args.Value("points"));
  auto r = ctx.client->Latent(model, q.points, q.ids);
  if (!r.ok()) return Fail(cmd, r.status());
  const int k = static_cast<int>(r->latent_states());
  const int n = static_cast<int>(q.count());
  if (args.Has("json")) {
    JsonWriter w;
    w.BeginObject();
    w.Key("model").String(model);
    WriteViewJson(w, r->view());
    w.Key("latent_states").Uint(r->latent_states());
    w.Key("weights");
    WriteListJson(w, r->weights());
    // densities: k lists of n values (wire layout [h*n + i]).
    w.Key("densities");
    if (n > 0) WriteRowsJson(w, r->densities(), n);
    else w.BeginArray().EndArray();
    w.Key("posteriors");
    WriteRowsJson(w, r->posteriors(), k);
    w.EndObject();
    PrintJson(w);
    return 0;
  }
  PrintViewLine("latent-state model", model, r->view());
  std::cout << "# " << k << " latent states\n";
  PrintVector("# weights", r->weights());
  if (n > 0) {
    std::printf("%8s", "point");
    for (int h = 0; h < k; ++h) std::printf(" %12s", absl::StrCat("density", h).c_str());
    for (int h = 0; h < k; ++h) std::printf(" %12s", absl::StrCat("posterior", h).c_str());
    std::printf("\n");
    for (int i = 0; i < n; ++i) {
      std::printf("%8d", i);
      for (int h = 0; h < k; ++h) {
        std::printf(" %12.6g", h * n + i < r->densities_size() ? r->densities(h * n + i) : NAN);
      }
      for (int h = 0; h < k; ++h) {
        std::printf(" %12.6g", i * k + h < r->posteriors_size() ? r->posteriors(i * k + h) : NAN);
      }
      std::printf("\n");
    }
  }
  return 0;
}

int Forecast(Context& ctx, const Args& args) {
  const std::string cmd = "forecast";
  if (int rc = NeedName(args, cmd, kForecastUsage)) return rc;
  const std::string model = args.positional[0];
  auto window = args.Value("window");
  if (!window) return FailUsage(cmd, "--window FILE is required (recent observations, oldest first)");
  uint32_t horizon = 1;
  if (auto h = args.Value("horizon")) {
    auto v = ParseUint("horizon", *h);
    if (!v.ok() || *v < 1 || *v > 100000) return FailUsage(cmd, "--horizon: expected an integer in [1, 100000]");
    horizon = static_cast<uint32_t>(*v);
  }
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
    w.BeginObject();
    w.Key("model").String(model);
    WriteViewJson(w, r->view());
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
    w.Key("state");
    WriteListJson(w, r->state());
    w.EndObject();
    PrintJson(w);
    return 0;
  }
  PrintViewLine("forecast", model, r->view());
  for (int t = 0; t < H; ++t) {
    std::printf("%4d", t + 1);
    if (q.discrete) {
      if (t < static_cast<int>(most_likely.size())) {
        std::printf("  most likely %lld  expected %.6g  p:", static_cast<long long>(most_likely[t]),
                    expected[t]);
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
    out += '\n';
    if (out.size() > (1 << 20)) {
      std::fwrite(out.data(), 1, out.size(), stdout);
      out.clear();
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
}

// Simulators of ALGORITHMS.md sections 3-6 (four-well, multi-well-2d, soft-aggregation,
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
  if (system == "four-well") {
    systems::FourWellOptions o;
    if (auto s = positive("tau", &o.tau); !s.ok()) return FailUsage(cmd, s.message());
    const auto t = systems::SimulateFourWell(count, seed, o);
    if (trajectory) {
      RowMatrixXd states(t.x.rows() + 1, 1);
      states.topRows(t.x.rows()) = t.x;
      states(t.x.rows(), 0) = t.y(t.y.rows() - 1, 0);
      WriteRows("# x  (four-well diffusion, one state per line, lag tau)", states, nullptr);
    } else {
      WriteRows("# x,y  (four-well diffusion V = 4 cos^2(pi x) + 5 (x/2)^8, beta 1; y = state after tau)",
                t.x, &t.y);
    }
    return write_truth(absl::StrCat("{\"system\":\"four-well\",\"tau\":", absl::StrFormat("%.17g", o.tau),
                                    ",\"barriers\":", VectorJson(systems::FourWellBarriers(o)),
                                    ",\"eigenvalues\":", VectorJson(systems::FourWellEigenvalues(5, o)),
                                    "}"));
  }
  if (system == "multi-well-2d") {
    systems::MultiWell2dOptions o;
    if (auto s = positive("tau", &o.tau); !s.ok()) return FailUsage(cmd, s.message());
    const auto t = systems::SimulateMultiWell2d(count, seed, o);
    if (trajectory) {
      RowMatrixXd states(t.x.rows() + 1, 2);
      states.topRows(t.x.rows()) = t.x;
      states.row(t.x.rows()) = t.y.row(t.y.rows() - 1);
      WriteRows("# x1,x2  (2-D multi-well diffusion, one state per line, lag tau)", states, nullptr);
    } else {
      WriteRows("# x1,x2,y1,y2  (2-D multi-well diffusion, wells near (+-0.5, +-0.5))", t.x, &t.y);
    }
    return write_truth(absl::StrCat("{\"system\":\"multi-well-2d\",\"tau\":", absl::StrFormat("%.17g", o.tau),
                                    ",\"eigenvalues\":", VectorJson(systems::MultiWell2dEigenvalues(5, o)),
                                    "}"));
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
    WriteRows("# x  (3-state HMM, Gaussian and shifted-Gamma emissions; one observation per line)",
              rows, nullptr);
    return write_truth(hmm.GroundTruthJson(VectorXd::LinSpaced(221, -7.0, 15.0)));
  }
  if (system == "hmm-binary") {
    double learn = 0.05, forget = 0.03, guess = 0.25, slip = 0.15;
    for (auto [flag, v] : {std::pair{"learn", &learn}, std::pair{"forget", &forget},
                           std::pair{"guess", &guess}, std::pair{"slip", &slip}}) {
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
                                     "' (expected duffing, double-well, duffing-grid, four-well, multi-well-2d, "
                                     "soft-aggregation, hmm-mixture, hmm-binary or kalman)"));
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
      (flag == "--tls-ca" ? ctx.tls_ca : flag == "--tls-cert" ? ctx.tls_cert : flag == "--tls-key" ? ctx.tls_key
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
    if (!in || !std::getline(in, line)) return FailUsage("", "--token-file: cannot read a token from '" + token_file + "'");
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
      std::cout << kMainUsage;
      return i >= argv_s.size() ? kExitUsage : 0;
    }
    command += " " + argv_s[i++];
    if (command == "model create") {
      usage = kCreateUsage;
      spec.values = {"dim", "sigma", "eta", "lambda", "epsilon", "max-dict", "dt", "seed",
                     "warmup", "refresh-interval", "refresh-every", "step-decay",
                     "step-decay-power", "states", "forgetting", "rff", "rank", "clusters",
                     "meta", "anchor-threshold", "vertex-hunting", "latent", "tensor-restarts",
                     "tensor-iterations", "reservoir", "window", "ridge1", "ridge2"};
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
    spec.switches = {"json"};
  } else if (command == "producer") {
    spec.values = {"producer"};
    spec.switches = {"json"};
  } else if (command == "counts" || command == "aggregation") {
    usage = command == "counts" ? kCountsUsage : kAggregationUsage;
    spec.switches = {"json"};
  } else if (command == "embedding" || command == "clusters" || command == "latent") {
    usage = command == "embedding" ? kEmbeddingUsage
            : command == "clusters" ? kClustersUsage : kLatentUsage;
    spec.values = {"points"};
    spec.switches = {"json"};
  } else if (command == "forecast") {
    usage = kForecastUsage;
    spec.values = {"window", "horizon"};
    spec.switches = {"json"};
  } else if (command == "simulate") {
    usage = kSimulateUsage;
    spec.values = {"n", "seed", "dt", "box", "n-side", "tau", "truth", "states", "meta",
                   "anchors-per-meta", "learn", "forget", "guess", "slip"};
    spec.switches = {"trajectory", "hard"};
  } else if (command == "snapshot") {
    spec.switches = {"json"};
  } else if (command == "export") {
    spec.values = {"out"};
  } else if (command == "import") {
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
  if (command == "snapshot") return Snapshot(ctx, *args);
  if (command == "export") return Export(ctx, *args);
  if (command == "import") return Import(ctx, *args);
  return Simulate(*args);
}

}  // namespace
}  // namespace cmestream::cli

int main(int argc, char** argv) { return cmestream::cli::Run(argc, argv); }
