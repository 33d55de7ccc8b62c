#include "service/daemon.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "service/engine/batch_log.h"
#include "service/engine/helper_pool.h"
#include "service/engine/ingestor.h"
#include "service/engine/refresh.h"
#include "service/engine/registry.h"
#include "service/observability/metric_families.h"
#include "service/observability/metrics.h"
#include "service/rpc/auth.h"
#include "service/rpc/recovering_service.h"
#include "service/rpc/services.h"
#include "service/storage/data_dir.h"
#include "service/storage/manifest.h"
#include "service/storage/recovery.h"
#include "service/storage/snapshot.h"

namespace cmestream::service {
namespace {

// Splits "HOST:PORT" at the last colon ("[::1]:0" works). InvalidArgument names the flag.
absl::Status SplitHostPort(const std::string& flag, const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  const auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("flag --", flag, " is '", address, "', expected HOST:PORT with PORT in 0..65535"));
  };
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return bad();
  const std::string port_text = address.substr(colon + 1);
  if (port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string::npos) return bad();
  *port = std::stoi(port_text);
  if (*port > 65535) return bad();
  *host = address.substr(0, colon);
  return absl::OkStatus();
}

// Prometheus series of the snapshot manager, fed by its observer (periodic, on-request,
// import and shutdown snapshots alike).
struct SnapshotMetrics {
  explicit SnapshotMetrics(prometheus::Registry& registry)
      : duration(HistogramFamily(registry, "cmestream_snapshot_duration_seconds",
                                 "Wall time of one snapshot of every model (serialize, write, fsync, rename)")
                     .Add({}, prometheus::Histogram::BucketBoundaries{0.001, 0.005, 0.02, 0.1, 0.5, 2, 10, 60})),
        bytes(GaugeFamily(registry, "cmestream_snapshot_bytes", "Size of the last snapshot file written").Add({})),
        last_success(GaugeFamily(registry, "cmestream_snapshot_last_success_timestamp_seconds",
                                 "Unix time of the last successful snapshot (0: none since start)")
                         .Add({})),
        failures(CounterFamily(registry, "cmestream_snapshot_failures_total", "Snapshots that could not be written")
                     .Add({})) {}
  void Observe(const absl::StatusOr<SnapshotResult>& r) {
    if (!r.ok()) {
      failures.Increment();
      return;
    }
    duration.Observe(r->seconds);
    bytes.Set(static_cast<double>(r->bytes));
    last_success.SetToCurrentTime();
  }
  prometheus::Histogram& duration;
  prometheus::Gauge& bytes;
  prometheus::Gauge& last_success;
  prometheus::Counter& failures;
};

// What recovery found, as gauges set once at start (alert: cmestream_recovery_damage > 0).
struct RecoveryMetrics {
  explicit RecoveryMetrics(prometheus::Registry& registry)
      : family(GaugeFamily(registry, "cmestream_recovery_damage",
                           "Damage found by the last start's recovery, by kind: skipped (damaged bytes skipped, "
                           "nothing lost), unusable_snapshots, data_loss (accepted with --accept-data-loss)")),
        skipped(family.Add({{"kind", "skipped"}})),
        unusable(family.Add({{"kind", "unusable_snapshots"}})),
        loss(family.Add({{"kind", "data_loss"}})) {}
  prometheus::Family<prometheus::Gauge>& family;
  prometheus::Gauge& skipped;
  prometheus::Gauge& unusable;
  prometheus::Gauge& loss;
};

uint64_t SegmentNumber(const std::string& path) {
  const std::string base = path.substr(path.rfind('/') + 1);
  return std::strtoull(base.c_str(), nullptr, 10);
}

}  // namespace

absl::Status DaemonOptions::Validate() const {
  std::string host;
  int port;
  if (absl::Status s = SplitHostPort("listen", listen, &host, &port); !s.ok()) return s;
  if (absl::Status s = SplitHostPort("metrics-listen", metrics_listen, &host, &port); !s.ok()) return s;
  if (data_dir.empty()) return absl::InvalidArgumentError("flag --data-dir is empty, expected a directory path");
  if (ingest_threads < 0 || ingest_threads > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("flag --ingest-threads is ", ingest_threads, ", expected 0..1024"));
  }
  if (helper_threads < -1 || helper_threads > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("flag --helper-threads is ", helper_threads,
                                                   ", expected 0..1024 (0 = off) or -1 (the cores - 1)"));
  }
  if (ingest_nice < 0 || ingest_nice > 19) {
    return absl::InvalidArgumentError(absl::StrCat("flag --ingest-nice is ", ingest_nice, ", expected 0..19"));
  }
  if (!std::isfinite(refresh_interval_seconds) || refresh_interval_seconds <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("flag --refresh-interval is ", refresh_interval_seconds, ", expected seconds > 0"));
  }
  if (max_message_mb < 1 || max_message_mb > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("flag --max-message-mb is ", max_message_mb, ", expected 1..1024"));
  }
  if (!std::isfinite(shutdown_grace_seconds) || shutdown_grace_seconds < 0) {
    return absl::InvalidArgumentError("shutdown_grace_seconds must be >= 0");
  }
  if (!std::isfinite(scheduler_tick_seconds) || scheduler_tick_seconds <= 0) {
    return absl::InvalidArgumentError("scheduler_tick_seconds must be > 0");
  }
  if (!std::isfinite(snapshot_interval_seconds) || snapshot_interval_seconds < 0 || snapshot_interval_seconds > 1e7) {
    return absl::InvalidArgumentError(
        absl::StrCat("flag --snapshot-interval is ", snapshot_interval_seconds,
                     ", expected seconds in [0, 1e7] (0 = only at shutdown and on request)"));
  }
  if (!std::isfinite(refresh_budget) || refresh_budget <= 0 || refresh_budget > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("flag --refresh-budget is ", refresh_budget,
                                                   ", expected a share of one core in (0, 1024], e.g. 0.25"));
  }
  if (!std::isfinite(evict_idle_seconds) || evict_idle_seconds < 0 || evict_idle_seconds > 1e7) {
    return absl::InvalidArgumentError(absl::StrCat("flag --evict-idle-seconds is ", evict_idle_seconds,
                                                   ", expected seconds in [0, 1e7] (0 = never evict)"));
  }
  if (!std::isfinite(wal_sync_interval_ms) || wal_sync_interval_ms <= 0 || wal_sync_interval_ms > 60000) {
    return absl::InvalidArgumentError(
        absl::StrCat("flag --wal-sync-interval-ms is ", wal_sync_interval_ms, ", expected milliseconds in (0, 60000]"));
  }
  if (absl::Status s = limits.Validate(); !s.ok()) return s;
  if (absl::Status s = security.Validate(); !s.ok()) return s;
  if (absl::Status s = shard.Validate(); !s.ok()) return s;
  return absl::OkStatus();
}

// Members in construction order; destruction runs in reverse, so everything that refers to
// the metrics or the registry goes first.
struct Daemon::Impl {
  DaemonOptions options;
  std::unique_ptr<DataDir> data_dir;
  std::unique_ptr<TokenAuthenticator> auth;  // null: no --auth-tokens
  Metrics metrics;
  RecoveryProgress progress;               // what the port answers while Recover runs
  std::unique_ptr<Wal> wal;                // installed into batch_log after recovery
  DeferredBatchLog batch_log;              // what the registry and models log to
  std::unique_ptr<HelperPool> helpers;     // null: --helper-threads 0; outlives the models' calls
  std::unique_ptr<EvictionStore> evicted;  // DATA_DIR/evicted; outlives the models
  std::unique_ptr<ModelRegistry> registry;
  std::unique_ptr<Manifest> manifest;
  std::unique_ptr<RecoveryMetrics> recovery_metrics;
  std::unique_ptr<SnapshotMetrics> snapshot_metrics;
  std::unique_ptr<SnapshotManager> snapshots;  // refers to registry, wal, manifest and snapshot_metrics
  std::unique_ptr<RefreshScheduler> scheduler;
  std::unique_ptr<Ingestor> ingestor;
  std::unique_ptr<Ownership> ownership;  // null: not sharded, every model is ours
  std::unique_ptr<ModelServiceImpl> model_service;
  std::unique_ptr<IngestServiceImpl> ingest_service;
  std::unique_ptr<QueryServiceImpl> query_service;
  std::unique_ptr<prometheus::Exposer> exposer;
  std::unique_ptr<grpc::Server> server;
  std::string grpc_host, metrics_host;
  int grpc_port = 0, metrics_port = 0;
  bool shut_down = false;
};

// Recovery (service/README.md "Recovery" and "Fault table"), before anything is served or
// refreshed: the manifest says which snapshots and WAL segments must exist; the newest usable
// snapshot restores its models; the WAL is replayed after its covered sequence (per model,
// records the model's snapshot already covers are skipped). Anything that would lose
// acknowledged data refuses the start, naming the file and the ways out, unless
// --accept-data-loss. Then the manifest is rewritten to what exists now, unusable snapshots
// are moved aside (never pruned), and the log is installed.
absl::Status Daemon::Recover(Impl& impl, const ConfigDefaults& defaults) {
  const RecoveryOptions& ro = impl.options.recovery;
  const std::string dir = impl.data_dir->path();
  const auto refuse = [&](const absl::Status& s) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to start: ", s.message(), ". Data dir ", dir,
        ". Ways out: put the missing or damaged file back "
        "(e.g. from a backup); or start from a snapshot file kept elsewhere with --recover-from FILE; or start with "
        "what is usable and lose the rest with --accept-data-loss (what is lost is printed)"));
  };
  std::vector<std::string> loss;
  std::optional<ManifestState> manifest;
  bool log_end_unknown = false;  // no manifest says which segments must exist (accepted loss)
  absl::StatusOr<ManifestState> loaded_manifest = impl.manifest->Load();
  if (loaded_manifest.ok()) {
    manifest = *loaded_manifest;
  } else if (loaded_manifest.status().code() == absl::StatusCode::kFailedPrecondition) {
    return loaded_manifest.status();  // written by a newer version: never guess
  } else if (loaded_manifest.status().code() != absl::StatusCode::kNotFound) {
    if (!ro.accept_data_loss) return refuse(loaded_manifest.status());
    loss.push_back(std::string(loaded_manifest.status().message()));
    log_end_unknown = true;
  } else if (const std::string versioned = FindVersionedSegment(dir + "/wal"); !versioned.empty()) {
    // No manifest, but a segment written by a version that always writes one before its first
    // segment: the manifest was deleted, and with it the list that detects a deleted segment or
    // snapshot. Only a data dir of the first release (no segment header) has none legitimately.
    const std::string what = absl::StrCat(
        impl.manifest->path(), " is missing, but ", versioned,
        " was written by a version that keeps one: which WAL segments and snapshots must exist is unknown, so a "
        "deleted one could not be detected");
    if (!ro.accept_data_loss) return refuse(absl::FailedPreconditionError(what));
    loss.push_back(absl::StrCat(what, "; started from the files present, and the manifest is rebuilt from them"));
    log_end_unknown = true;
  }

  SnapshotOptions snapshot_options;
  snapshot_options.dir = dir + "/snapshots";
  snapshot_options.interval_seconds = impl.options.snapshot_interval_seconds;
  if (absl::Status s = snapshot_options.Validate(); !s.ok()) return s;
  impl.snapshots = std::make_unique<SnapshotManager>(snapshot_options, *impl.registry, defaults, &impl.batch_log,
                                                     impl.manifest.get());
  absl::StatusOr<LoadReport> loaded =
      impl.snapshots->Load(manifest ? manifest->snapshots : std::vector<ManifestState::Snapshot>{}, ro.recover_from);
  if (!loaded.ok()) return loaded.status();
  if (loaded->path.empty()) {
    std::cerr << "cmestreamd: no usable snapshot in " << snapshot_options.dir
              << "; replaying the write-ahead log from its start\n";
  } else {
    std::cerr << "cmestreamd: loaded snapshot " << loaded->path << " (" << loaded->models
              << " models, covered sequence " << loaded->covered_sequence << ")\n";
  }

  WalOptions wal_options;
  wal_options.dir = dir + "/wal";
  wal_options.sync = impl.options.wal_sync;
  wal_options.sync_interval_ms = impl.options.wal_sync_interval_ms;
  wal_options.accept_data_loss = ro.accept_data_loss;
  wal_options.log_end_unknown = log_end_unknown;
  wal_options.progress = &impl.progress;
  // --recover-from replaces the base snapshot, not the log: the segments the manifest lists
  // must still all be there (a missing one refuses by name; accepted, its loss is reported).
  if (manifest) {
    wal_options.expected_first_segment = manifest->wal_first_segment;
    wal_options.expected_last_segment = manifest->wal_last_segment;
  }
  // The state needs every record after the snapshot used; and when that snapshot is older
  // than the newest one listed (a fallback), the log must reach the newest one's cut too,
  // or the fallback would silently drop what the newer snapshot held.
  wal_options.require_from_sequence = loaded->covered_sequence + 1;
  if (loaded->covered_sequence < loaded->newest_listed_covered) {
    wal_options.require_through_sequence = loaded->newest_listed_covered;
  }
  wal_options.on_segments_changed = [m = impl.manifest.get()](uint64_t first, uint64_t last) {
    return m->SetWalSegments(first, last);
  };
  WalRecoveryReport wal_report;
  LossReport dropped;
  absl::StatusOr<std::unique_ptr<Wal>> wal =
      OpenAndReplayWal(wal_options, /*after_sequence=*/loaded->covered_sequence, *impl.registry,
                       impl.metrics.registry(), &wal_report, nullptr, &dropped);
  if (!wal.ok()) {
    if (wal.status().code() == absl::StatusCode::kFailedPrecondition ||
        wal.status().code() == absl::StatusCode::kDataLoss) {
      std::string why(wal.status().message());
      if (!loaded->skipped.empty()) {
        absl::StrAppend(&why, " (", loaded->skipped.size(),
                        " newer snapshot(s) missing or unusable: ", loaded->skipped.front(), ")");
      }
      return refuse(absl::FailedPreconditionError(why));
    }
    return wal.status();
  }
  for (const std::string& l : wal_report.data_loss) loss.push_back(l);
  if (!loaded->skipped.empty() && !wal_report.data_loss.empty()) {
    for (const std::string& sk : loaded->skipped) loss.push_back(absl::StrCat("snapshot ", sk));
  }
  impl.wal = *std::move(wal);
  impl.progress.phase = RecoveryProgress::kSettle;
  // The models whose alarm monitor had an older format (from the snapshot or an imported export
  // replayed from the log): restored with their records, re-armed with this release's method.
  for (const std::shared_ptr<Model>& m : impl.registry->List()) {
    const Model::Stats st = m->stats();
    if (!st.alarm_note.empty()) std::cerr << "cmestreamd: model '" << m->name() << "': " << st.alarm_note << "\n";
  }

  // Settle what exists: unusable snapshots aside, the manifest rewritten to match.
  if (absl::Status s = impl.snapshots->SetAside(loaded->unusable); !s.ok()) return s;
  ManifestState now;
  now.snapshots = impl.snapshots->Kept();
  const std::vector<std::string> segments = impl.wal->SegmentPaths();
  if (!segments.empty()) {
    now.wal_first_segment = SegmentNumber(segments.front());
    now.wal_last_segment = SegmentNumber(segments.back());
  }
  now.wal_first_sequence = now.snapshots.empty() ? 1 : now.snapshots.front().covered + 1;
  if (absl::Status s = impl.manifest->Write(now); !s.ok()) return s;

  impl.recovery_metrics->skipped.Set(static_cast<double>(wal_report.skipped_damage.size()));
  impl.recovery_metrics->unusable.Set(static_cast<double>(loaded->unusable.size()));
  impl.recovery_metrics->loss.Set(static_cast<double>(loss.size()));
  for (const std::string& l : loss) std::cerr << "cmestreamd: DATA LOSS accepted (--accept-data-loss): " << l << "\n";
  // What was dropped, per model, as JSON lines (service/README.md "Recovery"): the same
  // numbers a client sees missing (acknowledged pairs minus the model's samples).
  for (const std::string& line : dropped.JsonLines(*impl.registry)) std::cerr << line << "\n";
  if (!dropped.empty()) {
    for (const std::string& line : dropped.TextLines(*impl.registry))
      std::cerr << "cmestreamd: data loss: " << line << "\n";
  }
  if (dropped.empty() && (!loss.empty() || !ro.recover_from.empty())) {
    std::cerr << "cmestreamd: no WAL record was dropped: every record after the snapshot's covered sequence "
              << loaded->covered_sequence << " that is on disk was replayed\n";
  }

  impl.batch_log.Install(impl.wal.get());
  impl.snapshot_metrics = std::make_unique<SnapshotMetrics>(*impl.metrics.registry());
  impl.snapshots->SetObserver(
      [m = impl.snapshot_metrics.get()](const absl::StatusOr<SnapshotResult>& r) { m->Observe(r); });
  // S is the covered sequence of the OLDEST kept snapshot: the fallback snapshot must still be
  // replayable forward, so only segments it covers go (the manifest first stops needing them).
  impl.snapshots->SetCoveredCallback([w = impl.wal.get(), m = impl.manifest.get()](uint64_t covered) {
    if (absl::Status s = m->SetWalFirstSequence(covered + 1); !s.ok()) {
      std::cerr << "cmestreamd: warning: cannot update the manifest: " << s.message() << "; WAL not pruned\n";
      return;
    }
    if (absl::Status s = w->Rotate(); !s.ok()) {
      std::cerr << "cmestreamd: warning: cannot rotate the write-ahead log after a snapshot: " << s.message() << "\n";
      return;
    }
    absl::StatusOr<int> deleted = w->DeleteSegmentsCoveredBy(covered);
    if (!deleted.ok()) {
      std::cerr << "cmestreamd: warning: cannot delete WAL segments covered by sequence " << covered << ": "
                << deleted.status().message() << "\n";
    }
  });
  // After a fallback, a recovery from another file or accepted loss, make the state that is now
  // served durable as a whole at once, so the next start depends on none of the damage.
  if (!loaded->skipped.empty() || !loss.empty() || !ro.recover_from.empty()) {
    absl::StatusOr<SnapshotResult> r = impl.snapshots->TakeNow();
    if (!r.ok())
      return absl::Status(r.status().code(), absl::StrCat("snapshot after recovery: ", r.status().message()));
    std::cerr << "cmestreamd: snapshot after recovery " << r->path << " (" << r->models << " models)\n";
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(const DaemonOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  int requested_port = 0;
  SplitHostPort("listen", options.listen, &impl->grpc_host, &requested_port).IgnoreError();
  SplitHostPort("metrics-listen", options.metrics_listen, &impl->metrics_host, &requested_port).IgnoreError();

  // Security first: a bad certificate or token file fails the start before anything binds.
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = MakeServerCredentials(options.security);
  if (!credentials.ok()) return credentials.status();
  if (!options.security.auth_tokens.empty()) {
    std::string warning;
    absl::StatusOr<TokenAuthenticator> auth = TokenAuthenticator::Load(options.security.auth_tokens, &warning);
    if (!auth.ok()) return auth.status();
    if (!warning.empty()) std::cerr << "cmestreamd: warning: " << warning << "\n";
    impl->auth = std::make_unique<TokenAuthenticator>(*std::move(auth));
  }

  absl::StatusOr<std::unique_ptr<DataDir>> dir = DataDir::Open(options.data_dir);
  if (!dir.ok()) return dir.status();
  impl->data_dir = *std::move(dir);

  try {
    impl->exposer = std::make_unique<prometheus::Exposer>(options.metrics_listen, /*num_threads=*/2);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on --metrics-listen ", options.metrics_listen, ": ", e.what()));
  }
  impl->exposer->RegisterCollectable(impl->metrics.registry());
  impl->exposer->RegisterCollectable(impl->metrics.process());
  const std::vector<int> metric_ports = impl->exposer->GetListeningPorts();
  if (metric_ports.empty()) return absl::UnavailableError("the metrics exposer reports no listening port");
  impl->metrics_port = metric_ports.front();

  ConfigDefaults defaults;
  defaults.refresh_interval_seconds = options.refresh_interval_seconds;
  if (options.helper_threads != 0) {
    impl->helpers = std::make_unique<HelperPool>(options.helper_threads > 0 ? options.helper_threads
                                                                            : HelperPool::DefaultThreads());
  }
  impl->metrics.SetPerModel(options.metrics_per_model);
  impl->registry = std::make_unique<ModelRegistry>(defaults, impl->metrics, impl->batch_log);
  impl->registry->SetSideExecutor(impl->helpers.get());
  {
    absl::StatusOr<std::unique_ptr<EvictionStore>> evicted =
        EvictionStore::Open(impl->data_dir->path() + "/evicted", defaults);
    if (!evicted.ok()) return evicted.status();
    impl->evicted = *std::move(evicted);
    if (options.evict_idle_seconds > 0) impl->registry->SetSpill(impl->evicted.get());
  }
  impl->manifest = std::make_unique<Manifest>(impl->data_dir->path() + "/MANIFEST");
  impl->recovery_metrics = std::make_unique<RecoveryMetrics>(*impl->metrics.registry());
  // While recovery replays, the port is already ours: health checks answer NOT_SERVING
  // (readiness probes wait; a second daemon on the port fails now, not after a long replay)
  // and every other method UNAVAILABLE with the progress (RecoveringService), which clients
  // retry. The serving server takes the same port right after.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  std::string serve_address = options.listen;
  {
    RecoveringService recovering_service(impl->progress);
    grpc::ServerBuilder recovering_builder;
    int port = 0;
    recovering_builder.AddListeningPort(options.listen, *credentials, &port);
    recovering_builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    recovering_builder.SetMaxReceiveMessageSize(options.max_message_mb * 1024 * 1024);
    recovering_builder.RegisterCallbackGenericService(&recovering_service);
    std::unique_ptr<grpc::Server> recovering = recovering_builder.BuildAndStart();
    if (!recovering || port == 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot serve gRPC on --listen ", options.listen, " (address in use or not local?)"));
    }
    recovering->GetHealthCheckService()->SetServingStatus(false);
    serve_address = absl::StrCat(impl->grpc_host, ":", port);
    // Before recovery: replay fails a model at the same record as the first run did.
    Model::SetFailOnValueForTesting(std::isnan(options.testing_fail_on_value)
                                        ? std::nullopt
                                        : std::optional<double>(options.testing_fail_on_value));
    absl::Status recovered = Recover(*impl, defaults);
    // A short grace: calls in flight get their answer (UNAVAILABLE, or the health status)
    // instead of CANCELLED; none of them does any work.
    recovering->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    recovering->Wait();
    if (!recovered.ok()) return recovered;
  }
  RefreshScheduler::Options scheduler_options;
  scheduler_options.tick_seconds = options.scheduler_tick_seconds;
  scheduler_options.evict_idle_seconds = options.evict_idle_seconds;
  scheduler_options.refresh_budget = options.refresh_budget;
  impl->registry->SetLimits(options.limits);
  impl->scheduler = std::make_unique<RefreshScheduler>(*impl->registry, scheduler_options);
  impl->ingestor = std::make_unique<Ingestor>(*impl->registry, impl->metrics, options.limits,
                                              options.ingest_threads > 0
                                                  ? options.ingest_threads
                                                  : IngestPool::DefaultThreads(options.wal_sync == WalSync::kAlways),
                                              options.ingest_nice);
  const TokenAuthenticator* auth = impl->auth.get();
  if (options.shard.enabled()) {
    impl->ownership = std::make_unique<Ownership>(options.shard);
    std::cerr << "cmestreamd: pod " << options.shard.self << " of " << options.shard.peers.size()
              << " (--shard-peers): calls for models another pod owns get FAILED_PRECONDITION naming it\n";
  }
  const Ownership* ownership = impl->ownership.get();
  impl->model_service = std::make_unique<ModelServiceImpl>(*impl->registry, impl->metrics, auth, impl->snapshots.get(),
                                                           defaults, ownership);
  impl->ingest_service =
      std::make_unique<IngestServiceImpl>(*impl->registry, *impl->ingestor, impl->metrics, auth, ownership);
  impl->query_service =
      std::make_unique<QueryServiceImpl>(*impl->registry, *impl->scheduler, impl->metrics, auth, ownership);

  grpc::ServerBuilder builder;
  builder.AddListeningPort(serve_address, *credentials, &impl->grpc_port);
  // gRPC sets SO_REUSEPORT by default: a second daemon on the same port would then start and
  // split the clients between the two. Exclusive ports make it fail to start instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(options.max_message_mb * 1024 * 1024);
  builder.RegisterService(impl->model_service.get());
  builder.RegisterService(impl->ingest_service.get());
  builder.RegisterService(impl->query_service.get());
  impl->scheduler->Start();
  impl->snapshots->Start();
  impl->server = builder.BuildAndStart();
  if (!impl->server || impl->grpc_port == 0) {
    impl->scheduler->Stop();
    impl->snapshots->Stop();
    return absl::UnavailableError(
        absl::StrCat("cannot serve gRPC on --listen ", options.listen, " (address in use or not local?)"));
  }
  const std::string bound = absl::StrCat(impl->grpc_host, ":", impl->grpc_port);  // the port actually bound
  if (const std::string notice = TransportNotice(options.security, impl->grpc_host, bound); !notice.empty()) {
    std::cerr << "cmestreamd: " << notice << "\n";  // stderr: stdout carries only the listening line
  }
  auto daemon = std::unique_ptr<Daemon>(new Daemon(std::move(impl)));
  if (absl::Status s = daemon->impl_->data_dir->WriteDaemonInfo(daemon->grpc_address(), daemon->metrics_address());
      !s.ok()) {
    return s;
  }
  return daemon;
}

Daemon::Daemon(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Daemon::~Daemon() { Shutdown(); }

int Daemon::grpc_port() const { return impl_->grpc_port; }
int Daemon::metrics_port() const { return impl_->metrics_port; }
std::string Daemon::grpc_address() const { return absl::StrCat(impl_->grpc_host, ":", impl_->grpc_port); }
std::string Daemon::metrics_address() const { return absl::StrCat(impl_->metrics_host, ":", impl_->metrics_port); }
std::string Daemon::ListeningLine() const {
  return absl::StrCat("cmestreamd listening grpc=", grpc_address(), " metrics=", metrics_address());
}

void Daemon::Shutdown() {
  if (impl_->shut_down) return;
  impl_->shut_down = true;
  impl_->scheduler->Stop();
  const auto grace = std::chrono::duration_cast<std::chrono::system_clock::duration>(
      std::chrono::duration<double>(impl_->options.shutdown_grace_seconds));
  impl_->server->Shutdown(std::chrono::system_clock::now() + grace);
  impl_->server->Wait();
  // Clean shutdown: no batch can arrive any more, so this snapshot covers everything and the
  // next start replays (almost) nothing.
  impl_->snapshots->Stop();
  absl::StatusOr<SnapshotResult> last = impl_->snapshots->TakeNow();
  if (last.ok()) {
    std::cerr << "cmestreamd: shutdown snapshot " << last->path << " (" << last->models << " models, " << last->bytes
              << " bytes, covered sequence " << last->covered_sequence << ")\n";
  } else {
    std::cerr << "cmestreamd: warning: shutdown snapshot failed (the WAL still holds everything): "
              << last.status().message() << "\n";
  }
  impl_->exposer.reset();
  impl_->metrics.KeepSeriesAtExit();         // no scrape any more: the models go without a removal each
  if (impl_->wal) (void)impl_->wal->Sync();  // clean exit: nothing left in the page cache only
}

}  // namespace cmestream::service
