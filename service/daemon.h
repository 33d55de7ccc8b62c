// cmestreamd assembled: data dir, metrics exposer, model registry, refresh scheduler and the
// gRPC server (health checking and reflection enabled). main() parses flags and waits for a
// signal; tests start a Daemon in-process on port 0.
#pragma once

#include <limits>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "service/engine/limits.h"
#include "service/observability/per_model_series.h"
#include "service/rpc/ownership.h"
#include "service/rpc/tls.h"
#include "service/storage/wal_options.h"

namespace cmestream::service {

struct ConfigDefaults;  // model_config.h

// What recovery may do when the data dir is damaged (service/README.md "Fault table").
struct RecoveryOptions {
  bool accept_data_loss = false;  // --accept-data-loss: start with what is usable, print what is lost
  std::string recover_from;       // --recover-from FILE: base snapshot instead of the manifest's
};

struct DaemonOptions {
  std::string listen = "127.0.0.1:50051";         // gRPC HOST:PORT; port 0 picks a free port
  std::string metrics_listen = "127.0.0.1:9464";  // Prometheus HOST:PORT; port 0 picks one
  std::string data_dir = "./cmestream-data";      // created if missing; locked while running
  double refresh_interval_seconds = 2.0;          // default refresh period of new models, > 0
  double refresh_budget = 0.25;                   // --refresh-budget, (0, 1024]: share of one core the
                                                  // background refreshes may use (refresh.h;
                                                  // RefreshScheduler::kDefaultRefreshBudget)
  int max_message_mb = 64;                        // max gRPC receive message (MiB), 1..1024;
                                                  // bounds one IngestBatch (64 MiB = 8M doubles)
  double shutdown_grace_seconds = 5.0;            // in-flight RPCs get this long, then cancelled
  double scheduler_tick_seconds = 0.05;           // refresh scheduler polling period, > 0
  LimitOptions limits;                            // --max-batch-pairs, --max-models, ... (limits.h)
  SecurityOptions security;                       // --tls-*, --auth-tokens (tls.h, auth.h)
  WalSync wal_sync = WalSync::kAlways;            // --wal-sync always|interval|never (wal.h)
  double wal_sync_interval_ms = 100;              // --wal-sync-interval-ms, kInterval only
  double snapshot_interval_seconds = 60;          // --snapshot-interval, [0, 1e7]; 0 = only at
                                                  // clean shutdown and on request (snapshot.h)
  PerModelSeries metrics_per_model;               // --metrics-per-model all|none|top-N: the {model} series
  double evict_idle_seconds = 600;                // --evict-idle-seconds, [0, 1e7]; 0 = never: a model
                                                  // idle this long is evicted (model.h EVICTION)
  RecoveryOptions recovery;                       // --accept-data-loss, --recover-from
  int ingest_threads = 0;                         // --ingest-threads, 0..1024; 0 = the cores
                                                  // (x4 with --wal-sync always): IngestPool
  int helper_threads = -1;                        // --helper-threads, 0..1024; -1 = the cores - 1
                                                  // (at least 1), 0 = off: HelperPool
  int ingest_nice = 0;                            // --ingest-nice, 0..19: ingest workers' nice
                                                  // offset below the RPC threads (IngestPool)
  ShardOptions shard;                             // --shard-self, --shard-peers (ownership.h);
                                                  // off: this daemon owns every model
  // --testing-fail-on-value V (tests only): a batch holding exactly V fails its model as an
  // estimator failure would (Model::SetFailOnValueForTesting). NaN: off.
  double testing_fail_on_value = std::numeric_limits<double>::quiet_NaN();

  // OK or InvalidArgument naming the flag and the expected value.
  absl::Status Validate() const;
};

class Daemon {
 public:
  // Opens the data dir, binds both ports and starts serving. Errors name what failed.
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(const DaemonOptions& options);
  ~Daemon();

  int grpc_port() const;
  int metrics_port() const;
  std::string grpc_address() const;  // HOST:PORT with the selected port
  std::string metrics_address() const;
  // "cmestreamd listening grpc=HOST:PORT metrics=HOST:PORT" (parsed by scripts and tests).
  std::string ListeningLine() const;

  // Stops the scheduler (pending Refresh waits get UNAVAILABLE), then the gRPC server (grace
  // period, then cancellation), then the exposer. Idempotent.
  void Shutdown();

 private:
  struct Impl;
  explicit Daemon(std::unique_ptr<Impl> impl);
  static absl::Status Recover(Impl& impl, const ConfigDefaults& defaults);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cmestream::service
