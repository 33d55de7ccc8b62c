// Usage texts, argument parsing, connection setup and error exits of the `cmestream` tool.
#include "client/cli/context.h"

#include <cmath>
#include <iostream>

#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace cmestream::cli {

const char kMainUsage[] =
    R"(usage: cmestream [--server HOST[:PORT]] [--timeout S] [--tls-ca FILE [--tls-cert FILE --tls-key FILE]]
                 [--token-file FILE] COMMAND [ARGS] [--help]

Client of cmestreamd. --server defaults to $CMESTREAM_SERVER, else 127.0.0.1:50051; a server
without a port means port 50051. Several daemons: --server ID=HOST:PORT,ID=HOST:PORT,... (or
HOST:PORT,HOST:PORT,...): each model's calls go to its owner by rendezvous hashing of the name
over the IDs (as cmestream.ShardedClient in Python); `model list` lists every daemon's models. A
sharded daemon's redirect to a model's owner is followed once. `cmestream --version` prints the
version and build commit.
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
  health [SERVICE]                      gRPC health check: SERVING (exit 0) or not (exit 1)
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
  timescales NAME [--json]              implied timescales at every lag, with standard errors
  cktest NAME [--clusters K] [--steps S] [--lag L] [--json]
                                        Chapman-Kolmogorov test on the metastable sets
  forecast NAME (--window FILE | --series FILE) [--horizon H] [--json]
                                        forecasts after a recent window, or rolling ones
  alarms NAME [--since I] [--json]      change alarms the model raised (index, onset, kind)
  watch NAME [--since I] [--seconds T]  the alarms live, one JSON line each (resumable)
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
                       --warmup pairs by a held-out VAMP-2 score and records the choice.
                       An explicit S is in your units and implies --scale none
  --scale auto|none    per-channel input scaling (default auto with sigma auto, none with
                       --reduce): each channel is centered by its median and divided by
                       IQR/1.349 (spreads all within a factor 2 share one scale), estimated
                       on the warm-up and then frozen; replies stay in your units
  --delays D           learn on windows of the last D raw rows (--dim values each, oldest
                       first): ingest raw rows with --trajectory (an empty CSV line marks a
                       gap); query files hold raw rows, replies one entry per complete window
  --delay-stride S     rows between the entries of a window (default 1; needs --delays)
  --reduce K|off       learn on the K leading principal directions of the (scaled) input,
                       fitted on the warm-up (>= 10 K pairs) and then frozen; queries and
                       replies stay in your rows (default 32 above 64 dimensions with sigma
                       auto and no delays, else off)
  --alarms on|off      change alarms (default on): each pair is scored by a one-step linear
                       forecast before it is learned and a CUSUM raises an alarm when the
                       dynamics or the noise change ('cmestream alarms', 'cmestream watch')
  --alarm-rate R       target false alarms per 10,000 stationary pairs (default 1)
  --on-change keep|reset|fork  what an alarm does: keep (default) only reports it; reset
                       restarts every statistic at the alarming pair (continuous models);
                       fork learns on and starts a model NAME.k at alarm k, fed from that
                       pair until alarm k+1 (docs/user-guide.md "After a change")
  --eta E              SGD step (default 0.1)
  --lambda L           HS-norm regularizer (default 1e-3)
  --epsilon EPS        compression budget in HS norm (default 1e-3)
  --max-dict M         dictionary cap per side (default 1000)
  --dt T               sampling interval, for rates and timescales (default 1)
  --seed N             seed of all random choices (default 1)
  --warmup N           pairs buffered for sigma auto and the scaler (default 1000); an
                       explicit 'refresh' ends the warm-up early once 50 pairs are buffered
  --refresh-interval S refresh the view every S seconds (default: the daemon's)
  --refresh-every N    refresh the view every N samples (default off)
  --step-decay N       eta_t = eta / (1 + t/N)^p (default 0 = constant step)
  --step-decay-power P p above (default 0.5)
  --averaging          Polyak-Ruppert averaging of the operator
  --forgetting G       per-sample decay of every streaming statistic, in (0, 1] (default 1 = none)
 state embedding and metastable clusters (docs/algorithms.md sections 2-3):
  --rff N              random Fourier features (continuous; default 64 for one input value, else 256)
  --forecast-features F  random features of the forecast regression (default min(N, 128); if N
                       is defaulted, 32 for one input value, else 128)
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
  --reservoir S        third-moment reservoir size (default min(100000, 1e6/dim))
 predictive-state model (section 6), off unless --window is given:
  --window L           history/future window length k (needs --trajectory ingestion)
  --ridge1 X           stage-1 ridge lambda1 (default 1e-3)
  --ridge2 Y           stage-2 ridge lambda2 (default 1e-6)
 lag times, CK tests and error bars (docs/algorithms.md section 8):
  --lags L1,L2,...     lags in samples, strictly increasing, each 1..1000, at most 16
                       (default 1); trajectory ingestion feeds every lag, pairs only lag 1
  --json               print the created model as JSON
)";

const char kModelUsage[] = R"(usage: cmestream model (create|describe|list|delete) ... [--help]

  model create NAME (--dim D | --states P) [options]   create a model (`model create --help`)
  model describe NAME [--json]                        one model (`model describe --help`)
  model list [--json]                                 every model of the daemon
  model delete NAME                                   delete a model and its data
)";

const char kDescribeUsage[] = R"(usage: cmestream model describe NAME [--json]

The model's configuration, samples seen, dictionary size, current view (version, samples it
covers, age) and the bandwidth choice (sigma auto: candidates and scores).
JSON: {"name", "dim", "num_states", "samples", "dictionary_size", "forced_compressions",
       "view_version", "view_samples", "view_age_seconds", "view_lag_pairs", "sigma", "sigma_selection", ...}
)";

const char kListUsage[] = R"(usage: cmestream model list [--json]

Every model of the daemon: name, dim, samples, dictionary size, view version.
JSON: {"models": [one object per model, as `model describe --json` prints it...]}
)";

const char kDeleteUsage[] = R"(usage: cmestream model delete NAME

Deletes model NAME and its durable state (WAL records, snapshot entry). Not reversible: use
`cmestream export NAME --out FILE` first to keep a copy.
)";

const char kDictionaryUsage[] = R"(usage: cmestream dictionary NAME [--json]

The dictionary atoms of a continuous model's current view: the input-side atoms x_i and the
output-side atoms y_j (d coordinates each), and the kernel bandwidth.
JSON: {"model", "dim", "sigma", "x_atoms": [[x_1..x_d]...], "y_atoms": [[y_1..y_d]...],
       "view_version", "samples", ...}
)";

const char kProducerUsage[] = R"(usage: cmestream producer NAME --producer ID [--json]

The applied offset of producer ID on model NAME: the number of pairs of that producer the
daemon has applied (durably). `cmestream ingest --producer ID --resume` starts from it.
JSON: {"model", "producer", "applied_offset"}
)";

const char kSnapshotUsage[] = R"(usage: cmestream snapshot [NAME] [--json]

Asks the daemon to snapshot every model now (admin scope). A snapshot always holds every model;
NAME only checks that the model exists. Prints the snapshot file's path on the daemon's host.
JSON: {"path", "bytes", "covered_sequence", "models"}
)";

const char kExportUsage[] = R"(usage: cmestream export NAME --out FILE

Writes the full state of model NAME (configuration, operator, producers' offsets) to FILE
(admin scope). FILE is written under a temporary name and renamed: never a partial export.
`cmestream import FILE` registers it again, on this daemon or another.
)";

const char kImportUsage[] = R"(usage: cmestream import FILE [--name NEW] [--json]

Registers the model exported in FILE (admin scope), under NEW or its exported name; the
daemon snapshots right after, so the import is durable when the command returns.
)";

const char kHealthUsage[] = R"(usage: cmestream health [SERVICE]

gRPC health check (grpc.health.v1) of the daemon, or of SERVICE (e.g. cmestream.v1.QueryService).
Prints SERVING (exit 0) or NOT_SERVING (exit 1). Needs no token: for container health checks.
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
       "summary": {"termination", "message", "brief_report", "figures": {name: number}},
       "view_version", "samples"}
)";

const char kClustersUsage[] = R"(usage: cmestream clusters NAME [--points FILE] [--json]

Metastable clusters: representatives (atoms or states) with weight and label, the label of each
query point (FILE as for embedding), the K x K coarse-grained transition matrix, cluster masses
and the K - 1 implied timescales of that matrix (-dt / ln|lambda|, the stationary mode left
out). A hard partition underestimates timescales (lower bounds): see `koopman` for estimates.
JSON: {"representatives": [{"coordinates"|"id", "weight", "label"}...], "point_labels",
       "transition_matrix": [[K] x K], "masses", "timescales", "clusters", "inertia",
       "summary" (as for embedding), "view_version", "samples"}
)";

const char kAggregationUsage[] = R"(usage: cmestream aggregation NAME [--json]

Soft state aggregation (model created with --meta R): disaggregation V (p x r, columns sum to
1), aggregation U (p x r), anchor rows per meta-state, hard partition and excluded states.
JSON: {"states": [ids] or [[coordinates]...] in row order, "state_ids", "V", "U",
       "anchors": [[row indices] per meta-state], "partition", "excluded",
       "distance_to_empirical", "meta_states", "summary" (as for embedding), "view_version",
       "samples"}
)";

const char kLatentUsage[] = R"(usage: cmestream latent NAME [--points FILE] [--json]

Multi-view latent-state model (model created with --latent K): mixing weights, each component's
density at the query points (FILE as for embedding) and the posterior over latent states.
JSON: {"weights": [k], "densities": [[n values] per component], "posteriors": [[k] per point],
       "latent_states", "summary" (as for embedding), "view_version", "samples"}
)";

const char kForecastUsage[] = R"(usage: cmestream forecast NAME (--window FILE | --series FILE) [--horizon H] [--json]

Forecast of the next H (default 1) observations. Continuous models use the forecast regression
(linear and kernel terms, ridge chosen by held-out score; docs/algorithms.md section 11), except
predictive-state models (created with --window L) given --window, which use their filter.
--window FILE  recent observations (one per line, oldest first; state ids for discrete models);
               a regression forecasts from the last one.
--series FILE  continuous models: rolling forecasts over the rows of FILE (not learned): for
               each row r = start..N-1, the forecasts of rows r+1..r+H.
JSON, --window continuous: {"forecast": [[d numbers] per step], "dim", "state", ...}
JSON, --window discrete:   {"forecast": [most likely id per step], "expected": [sum_a a p(a) per
                           step], "distribution": [[P probabilities] per step], "state", ...}
JSON, --series: {"model", "horizon", "dim", "start", "forecasts": [per row: H lists of d
                numbers], "skill", ...}
All carry "horizon", "method" ("regression", "persistence" or "predictive_state"), "view_version",
"samples" and, for continuous models, "skill": {"rmse", "rmse_persistence", "ratio", "pairs"}, the
model's live one-step skill (each pair scored before it was learned; null before the first).
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

Leading K (default 6) Koopman eigenpairs of the model's current view: eigenvalues mu (the
stationary mode first, eigenvalue exactly 1; then by |mu| descending), continuous-time rates
log(mu)/dt, implied timescales -dt/log|mu|, and the eigenfunction values at the points of FILE
(CSV, one d-dimensional point per line). Below the table: which estimate the spectrum comes from,
the epoch and samples it rests on, its held-out score, the slowest timescales of the koopman,
count-chain and embedding views side by side, and warnings (modes with |mu| > 1, disagreement).
JSON: {"eigenvalues":[{"re","im"}...], "rates":[{"re","im"}...], "timescales":[...],
       "stationary":[bool...], "excess":[...], "spectrum":{...},
       "eigenfunctions":[[{"re","im"} per point] per eigenpair], "view_version", "samples", "dt"}
Infinite timescales (the stationary mode, |mu| >= 1) are null in JSON.
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

// Parses argv[begin..) against `spec` plus the global flags. "--flag=value" and "--flag value"
// both work; a lone "-" is a positional (standard input).
absl::StatusOr<Args> ParseArgs(const std::vector<std::string>& argv, size_t begin, CommandSpec spec) {
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
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": expected a finite number, got '", text, "'"));
  }
  return v;
}

absl::StatusOr<uint64_t> ParseUint(const std::string& flag, const std::string& text) {
  uint64_t v;
  if (!absl::SimpleAtoi(text, &v)) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": expected a non-negative integer, got '", text, "'"));
  }
  return v;
}

// ---------------------------------------------------------------------------------------------
// Error exits
// ---------------------------------------------------------------------------------------------

int Fail(const std::string& command, const absl::Status& status) {
  std::cerr << "cmestream: " << command << ": " << status.message() << " (" << absl::StatusCodeToString(status.code())
            << ")\n";
  return kExitServer;
}

int FailUsage(const std::string& command, absl::string_view message) {
  std::cerr << "cmestream: " << command << ": " << message << "\n";
  return kExitUsage;
}

absl::Status ConnectClient(Context& ctx) {
  if (!ctx.cluster) {
    if (ctx.pods.empty()) {
      if (absl::Status s = ParseServerList(ctx); !s.ok()) return s;
    }
    client::ClientOptions options;
    options.timeout_seconds = ctx.timeout;
    options.tls_ca_file = ctx.tls_ca;
    options.tls_cert_file = ctx.tls_cert;
    options.tls_key_file = ctx.tls_key;
    options.token = ctx.token;
    options.target = ctx.pods.front().target;
    if (absl::Status s = options.Validate(); !s.ok()) return s;
    auto c = client::ShardedClient::Connect(options, ctx.pods);
    if (!c.ok()) return c.status();
    ctx.cluster = std::move(*c);
  }
  ctx.client = ctx.model.empty() ? &ctx.cluster->pod_client(0) : &ctx.cluster->For(ctx.model);
  return absl::OkStatus();
}

int NeedClient(Context& ctx, const std::string& command) {
  if (absl::Status s = ConnectClient(ctx); !s.ok()) return FailUsage(command, s.message());
  return 0;
}

absl::Status ParseServerList(Context& ctx) {
  absl::StatusOr<std::vector<client::Pod>> pods = client::ParsePods(ctx.server);
  if (!pods.ok()) return absl::InvalidArgumentError(absl::StrCat("--server: ", pods.status().message()));
  ctx.pods = *std::move(pods);
  return absl::OkStatus();
}

void RouteToOwner(Context& ctx, const std::string& model) { ctx.model = model; }

int NeedName(const Args& args, const std::string& command, const char* usage) {
  if (args.positional.size() != 1) {
    std::cerr << "cmestream: " << command << ": expected exactly one model NAME, got " << args.positional.size()
              << " arguments\n"
              << usage;
    return kExitUsage;
  }
  return 0;
}

}  // namespace cmestream::cli
