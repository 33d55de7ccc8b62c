#include "service/daemon.h"

#include <cmath>
#include <exception>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "prometheus/exposer.h"
#include "service/auth.h"
#include "service/batch_log.h"
#include "service/recovery.h"
#include "service/data_dir.h"
#include "service/ingestor.h"
#include "service/metrics.h"
#include "service/refresh.h"
#include "service/registry.h"
#include "service/services.h"
#include "service/snapshot.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"

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
      : duration(prometheus::BuildHistogram()
                     .Name("cmestream_snapshot_duration_seconds")
                     .Help("Wall time of one snapshot of every model (serialize, write, fsync, rename)")
                     .Register(registry)
                     .Add({}, prometheus::Histogram::BucketBoundaries{0.001, 0.005, 0.02, 0.1, 0.5, 2, 10, 60})),
        bytes(prometheus::BuildGauge()
                  .Name("cmestream_snapshot_bytes")
                  .Help("Size of the last snapshot file written")
                  .Register(registry)
                  .Add({})),
        last_success(prometheus::BuildGauge()
                         .Name("cmestream_snapshot_last_success_timestamp_seconds")
                         .Help("Unix time of the last successful snapshot (0: none since start)")
                         .Register(registry)
                         .Add({})),
        failures(prometheus::BuildCounter()
                     .Name("cmestream_snapshot_failures_total")
                     .Help("Snapshots that could not be written")
                     .Register(registry)
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

}  // namespace

absl::Status DaemonOptions::Validate() const {
  std::string host;
  int port;
  if (absl::Status s = SplitHostPort("listen", listen, &host, &port); !s.ok()) return s;
  if (absl::Status s = SplitHostPort("metrics-listen", metrics_listen, &host, &port); !s.ok()) return s;
  if (data_dir.empty()) return absl::InvalidArgumentError("flag --data-dir is empty, expected a directory path");
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
    return absl::InvalidArgumentError(absl::StrCat("flag --snapshot-interval is ", snapshot_interval_seconds,
                                                   ", expected seconds in [0, 1e7] (0 = only at shutdown and on request)"));
  }
  if (!std::isfinite(wal_sync_interval_ms) || wal_sync_interval_ms <= 0 || wal_sync_interval_ms > 60000) {
    return absl::InvalidArgumentError(
        absl::StrCat("flag --wal-sync-interval-ms is ", wal_sync_interval_ms, ", expected milliseconds in (0, 60000]"));
  }
  if (absl::Status s = limits.Validate(); !s.ok()) return s;
  if (absl::Status s = security.Validate(); !s.ok()) return s;
  return absl::OkStatus();
}

// Members in construction order; destruction runs in reverse, so everything that refers to
// the metrics or the registry goes first.
struct Daemon::Impl {
  DaemonOptions options;
  std::unique_ptr<DataDir> data_dir;
  std::unique_ptr<TokenAuthenticator> auth;  // null: no --auth-tokens
  Metrics metrics;
  std::unique_ptr<Wal> wal;      // installed into batch_log after recovery
  DeferredBatchLog batch_log;    // what the registry and models log to
  std::unique_ptr<ModelRegistry> registry;
  std::unique_ptr<SnapshotMetrics> snapshot_metrics;
  std::unique_ptr<SnapshotManager> snapshots;  // refers to registry, wal and snapshot_metrics
  std::unique_ptr<RefreshScheduler> scheduler;
  std::unique_ptr<Ingestor> ingestor;
  std::unique_ptr<ModelServiceImpl> model_service;
  std::unique_ptr<IngestServiceImpl> ingest_service;
  std::unique_ptr<QueryServiceImpl> query_service;
  std::unique_ptr<prometheus::Exposer> exposer;
  std::unique_ptr<grpc::Server> server;
  std::string grpc_host, metrics_host;
  int grpc_port = 0, metrics_port = 0;
  bool shut_down = false;
};

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
  impl->registry = std::make_unique<ModelRegistry>(defaults, impl->metrics, impl->batch_log);
  // Recovery (service/README.md "Snapshots"): the newest valid snapshot restores the models it
  // holds, then the write-ahead log is replayed after its covered sequence (per model, records
  // the model's snapshot already covers are skipped), all before anything is served or
  // refreshed; then every new record is logged. A corrupt snapshot is reported with its path
  // and the previous one is used; with none usable the whole log is replayed.
  SnapshotOptions snapshot_options;
  snapshot_options.dir = impl->data_dir->path() + "/snapshots";
  snapshot_options.interval_seconds = options.snapshot_interval_seconds;
  if (absl::Status s = snapshot_options.Validate(); !s.ok()) return s;
  impl->snapshots = std::make_unique<SnapshotManager>(snapshot_options, *impl->registry, defaults, &impl->batch_log);
  absl::StatusOr<LoadReport> loaded = impl->snapshots->LoadNewest();
  if (!loaded.ok()) return loaded.status();
  if (loaded->path.empty()) {
    std::cerr << "cmestreamd: no usable snapshot in " << snapshot_options.dir
              << "; replaying the write-ahead log from its start\n";
  } else {
    std::cerr << "cmestreamd: loaded snapshot " << loaded->path << " (" << loaded->models
              << " models, covered sequence " << loaded->covered_sequence << ")\n";
  }
  WalOptions wal_options;
  wal_options.dir = impl->data_dir->path() + "/wal";
  wal_options.sync = options.wal_sync;
  wal_options.sync_interval_ms = options.wal_sync_interval_ms;
  WalRecoveryReport wal_report;
  absl::StatusOr<std::unique_ptr<Wal>> wal = OpenAndReplayWal(wal_options, /*after_sequence=*/loaded->covered_sequence,
                                                              *impl->registry, impl->metrics.registry(), &wal_report,
                                                              nullptr);
  if (!wal.ok() && !loaded->skipped.empty()) {
    // Typically "batch of unknown model": the records creating it were covered by a snapshot
    // that is unusable now and have been deleted.
    return absl::Status(wal.status().code(),
                        absl::StrCat(wal.status().message(), "; ", loaded->skipped.size(),
                                     " snapshot(s) were unusable and the WAL records they covered may have been "
                                     "deleted: refusing to start with a partial state (restore a valid snapshot "
                                     "file into ", snapshot_options.dir, ")"));
  }
  if (!wal.ok()) return wal.status();
  // Sequences are consecutive, so the first record on disk is last - records + 1. If it is
  // above covered + 1, the records in between were deleted because a snapshot covered them and
  // that snapshot is not usable now: the state would silently miss them, so refuse to start.
  if (wal_report.records > 0) {
    const uint64_t first = wal_report.last_sequence - wal_report.records + 1;
    if (first > loaded->covered_sequence + 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the write-ahead log in ", wal_options.dir, " starts at sequence ", first, " but ",
          loaded->path.empty() ? std::string("no usable snapshot was found")
                               : absl::StrCat("snapshot ", loaded->path, " covers only through ",
                                              loaded->covered_sequence),
          ": records ", loaded->covered_sequence + 1, "..", first - 1,
          " were deleted after a snapshot that is now unusable; refusing to start with a partial state "
          "(restore a valid snapshot file into ", snapshot_options.dir, ")"));
    }
  }
  impl->wal = *std::move(wal);
  impl->batch_log.Install(impl->wal.get());
  impl->snapshot_metrics = std::make_unique<SnapshotMetrics>(*impl->metrics.registry());
  impl->snapshots->SetObserver([m = impl->snapshot_metrics.get()](const absl::StatusOr<SnapshotResult>& r) {
    m->Observe(r);
  });
  // S is the covered sequence of the OLDEST kept snapshot: the fallback snapshot must still be
  // replayable forward, so only segments it covers go.
  impl->snapshots->SetCoveredCallback([w = impl->wal.get()](uint64_t covered) {
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
  RefreshScheduler::Options scheduler_options;
  scheduler_options.tick_seconds = options.scheduler_tick_seconds;
  impl->registry->SetLimits(options.limits);
  impl->scheduler = std::make_unique<RefreshScheduler>(*impl->registry, scheduler_options);
  impl->ingestor = std::make_unique<Ingestor>(*impl->registry, impl->metrics, options.limits);
  const TokenAuthenticator* auth = impl->auth.get();
  impl->model_service =
      std::make_unique<ModelServiceImpl>(*impl->registry, impl->metrics, auth, impl->snapshots.get(), defaults);
  impl->ingest_service = std::make_unique<IngestServiceImpl>(*impl->registry, *impl->ingestor, impl->metrics, auth);
  impl->query_service = std::make_unique<QueryServiceImpl>(*impl->registry, *impl->scheduler, impl->metrics, auth);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, *credentials, &impl->grpc_port);
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
    return absl::UnavailableError(absl::StrCat("cannot serve gRPC on --listen ", options.listen,
                                               " (address in use or not local?)"));
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
    std::cerr << "cmestreamd: shutdown snapshot " << last->path << " (" << last->models << " models, "
              << last->bytes << " bytes, covered sequence " << last->covered_sequence << ")\n";
  } else {
    std::cerr << "cmestreamd: warning: shutdown snapshot failed (the WAL still holds everything): "
              << last.status().message() << "\n";
  }
  impl_->exposer.reset();
  if (impl_->wal) (void)impl_->wal->Sync();  // clean exit: nothing left in the page cache only
}

}  // namespace cmestream::service
