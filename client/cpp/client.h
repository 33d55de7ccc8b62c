// cmestream C++ client: a typed wrapper over the cmestream.v1 gRPC stubs.
//
// Client represents one channel to one cmestreamd. Every call has a deadline
// (ClientOptions.timeout_seconds; Refresh with wait adds the wait timeout) and returns an
// absl::Status / absl::StatusOr carrying the server's status code and message unchanged
// (absl::StatusCode and grpc::StatusCode share their numbering).
//
// IngestStream represents one open Ingest RPC. It batches pairs (or trajectory states) into
// IngestBatch messages of ClientOptions/IngestStream::Options.batch_pairs pairs, tracks the
// producer offset of each batch (the index of its first pair in the producer's stream), and
// collects the daemon's per-batch acks on a reader thread. Trajectory segments that span
// several batches overlap by one state (the last state of batch k is the first of batch k+1),
// so no pair is lost at a batch boundary and none crosses an episode boundary.
//
// Discrete models (ModelConfig.num_states > 0) take state ids instead of vectors: a stream
// opened with Client::OpenDiscreteIngest carries AddIdPairs (x_ids/y_ids) or AddStateIds
// (state_ids, a trajectory; batches overlap by one id exactly as vector trajectories do).
//
// Thread safety: Client is thread-safe (gRPC stubs are); an IngestStream is used by one
// thread at a time (Progress() may be called from any thread).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cmestream/v1/cmestream.grpc.pb.h"

namespace cmestream::client {

namespace v1 = ::cmestream::v1;

// Converts a gRPC status to an absl::Status with the same code and message.
absl::Status FromGrpcStatus(const grpc::Status& status);
// Same, and a `cmestream-owner` trailer of `context` (a sharded daemon naming the pod that owns
// the model, service/rpc/ownership.h) becomes the status payload kOwnerPayload ("ID=HOST:PORT").
absl::Status FromGrpcStatus(const grpc::Status& status, const grpc::ClientContext& context);

inline constexpr char kOwnerPayload[] = "cmestream-owner";

// The pod a FAILED_PRECONDITION names as the model's owner (from the trailer), if any.
struct OwnerRedirect {
  std::string id;
  std::string target;
};
std::optional<OwnerRedirect> OwnerFromStatus(const absl::Status& status);

// The daemon's default gRPC port: a target without a port goes there (gRPC itself would pick
// 443, the HTTPS port, which cmestreamd never listens on by default).
inline constexpr int kDefaultPort = 50051;

// Appends ":50051" to a target without a port: "host" -> "host:50051", "[::1]" ->
// "[::1]:50051", "::1" -> "[::1]:50051", "dns:///host" -> "dns:///host:50051". Targets with a
// port, and other schemes (unix:, ipv4:, ...), are returned unchanged.
std::string WithDefaultPort(const std::string& target, int port = kDefaultPort);

struct ClientOptions {
  std::string target = "127.0.0.1:50051";  // HOST[:PORT] of cmestreamd (default port 50051)
  double timeout_seconds = 30;             // deadline of unary calls, > 0
  // Largest message the client accepts or sends. Koopman replies grow with the number of
  // query points (16 bytes per eigenpair per point); gRPC's default 4 MB is too small for a
  // fine grid. Range [4 MiB, 2 GiB).
  int max_message_bytes = 256 << 20;
  // Transport security (all PEM files; empty = off). tls_ca_file turns TLS on and is the CA
  // the daemon's certificate must chain to; tls_cert_file + tls_key_file add a client
  // certificate (for a daemon started with --tls-client-ca). Read by Client::Connect.
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  // Bearer token sent as `authorization: Bearer TOKEN` on every call (empty: none).
  std::string token;
  // Follow a sharded daemon's redirect: a call answered FAILED_PRECONDITION with a
  // `cmestream-owner` trailer is sent once more, to that owner (a second refusal is returned as
  // is). Off: the refusal is returned (OwnerFromStatus reads the owner). ShardedClient sets it.
  bool follow_owner = false;
  // Sends `cmestream-placement: ignore`: sharded daemons then serve GetModel, ExportModel,
  // ImportModel and DeleteModel for models they do not own (for moving models between pods;
  // ingestion and queries are always checked). Used by rebalancing tools only.
  bool ignore_placement = false;
  absl::Status Validate() const;
};

class IngestStream {
 public:
  struct Options {
    std::string producer_id;    // empty: the daemon applies every pair without deduplication
    uint64_t start_offset = 0;  // offset of the first pair sent (in pairs), with producer_id
    int batch_pairs = 1000;     // pairs per IngestBatch message, in [1, 1000000]
    std::string episode_id;     // episode of trajectory segments (informational for the daemon)
    absl::Status Validate() const;
  };

  // What the stream sent and what the daemon acknowledged. Fields start at 0.
  struct Summary {
    uint64_t batches_sent = 0;
    uint64_t pairs_sent = 0;
    uint64_t batches_acked = 0;
    uint64_t pairs_acked = 0;      // sum of IngestAck.pairs_received
    uint64_t pairs_applied = 0;    // sum of IngestAck.pairs_applied
    uint64_t producer_offset = 0;  // from the last ack
    uint64_t model_samples = 0;    // from the last ack
    uint64_t next_offset = 0;      // offset the next batch would carry
  };

  ~IngestStream();
  IngestStream(const IngestStream&) = delete;
  IngestStream& operator=(const IngestStream&) = delete;

  // Appends n pairs, x and y packed row-major (n*dim doubles each); sends full batches.
  // requires: x.size() == y.size(), a multiple of dim; no trajectory data added to this stream.
  // ensures: on error (server ended the stream) the stream is finished and the error returned.
  absl::Status AddPairs(absl::Span<const double> x, absl::Span<const double> y);

  // Appends states (k*dim doubles) to the current trajectory episode; consecutive states
  // form pairs, across calls too. requires: no pairs added to this stream.
  absl::Status AddStates(absl::Span<const double> states);

  // Discrete streams: n pairs of state ids (x_ids[i] -> y_ids[i]). requires x_ids.size() ==
  // y_ids.size(); a stream from OpenDiscreteIngest carrying no trajectory ids. The range
  // [0, P) is checked by the daemon (INVALID_ARGUMENT naming the id; the batch is not applied).
  absl::Status AddIdPairs(absl::Span<const int64_t> x_ids, absl::Span<const int64_t> y_ids);

  // Discrete streams: appends state ids to the current trajectory episode.
  absl::Status AddStateIds(absl::Span<const int64_t> ids);

  // Ends the current episode (sends what is buffered): the next AddStates starts a new episode
  // with id `next_episode_id`, and no pair joins the two.
  absl::Status EndEpisode(const std::string& next_episode_id);

  // A gap in the trajectory (a dropped sample): sends what is buffered, and the next state starts
  // a new episode (IngestBatch.gap), so no pair (or delay window) joins the states around it.
  absl::Status Gap();

  // Sends whatever is buffered as one (short) batch.
  absl::Status Flush();

  // Flushes, half-closes, waits for all acks and returns the summary, or the stream's error.
  // ensures: after the call the stream is closed; further Add* calls fail.
  absl::StatusOr<Summary> Finish();

  // Snapshot of the counters so far (safe from any thread).
  Summary Progress() const;

 private:
  friend class Client;
  // dim == 0: a discrete stream (ids instead of vectors).
  IngestStream(std::unique_ptr<grpc::ClientContext> context, v1::IngestService::Stub* stub, std::string model,
               uint32_t dim, Options options);
  bool discrete() const { return dim_ == 0; }
  absl::Status SendBatch();
  // Adds n pairs, append(i, take) copying pairs [i, i + take) into batch_; sends each full batch.
  template <typename AppendPairs>
  absl::Status AddPairsInBatches(size_t n, AppendPairs append);
  // Counts a state just appended to batch_ (a pair with the state before it, if any); sends a
  // full batch.
  absl::Status StateAdded();
  absl::Status Fail();
  void ReadAcks();

  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::IngestBatch, v1::IngestAck>> stream_;
  std::thread reader_;
  std::string model_;
  uint32_t dim_;
  Options options_;
  enum class Mode { kUnset, kPairs, kTrajectory } mode_ = Mode::kUnset;
  v1::IngestBatch batch_;       // reused buffer of the batch being filled
  int batch_pairs_filled_ = 0;  // pairs in batch_ (trajectory: states - 1, >= 0)
  bool have_last_state_ = false;
  bool gap_next_ = false;  // the next batch sent follows a Gap()
  bool sent_any_ = false;  // a batch was written (Gap() before any state separates nothing)
  bool closed_ = false;
  absl::Status final_status_;
  mutable std::mutex mu_;
  Summary summary_;  // guarded by mu_
};

class Client {
 public:
  // Creates the channel (connection is lazy: errors appear on the first call).
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);

  absl::StatusOr<v1::ModelInfo> CreateModel(const v1::ModelConfig& config);
  // with_memory: also ModelInfo.memory (the model's share of the daemon's memory budget).
  absl::StatusOr<v1::ModelInfo> Describe(const std::string& name, bool with_memory = false);
  absl::StatusOr<std::vector<v1::ModelInfo>> List();
  absl::Status Delete(const std::string& name);
  // Admin scope. Snapshot: the daemon writes a snapshot of every model (path on its host).
  // ExportModel: the model's full state as bytes (a one-model snapshot file). ImportModel:
  // registers such bytes under `new_name` (empty: the exported name); ALREADY_EXISTS,
  // DATA_LOSS (corrupt) or INVALID_ARGUMENT (not an export) otherwise.
  absl::StatusOr<v1::SnapshotResponse> Snapshot();
  // grpc.health.v1.Health/Check of `service` ("" = the whole daemon): true when SERVING. The
  // health service needs no token (container HEALTHCHECKs and probes have none).
  absl::StatusOr<bool> Health(const std::string& service = "");
  absl::StatusOr<std::string> ExportModel(const std::string& name);
  absl::StatusOr<v1::ModelInfo> ImportModel(std::string data, const std::string& new_name);
  absl::StatusOr<v1::ProducerStatus> GetProducer(const std::string& model, const std::string& producer_id);

  // Opens an ingest stream for `model` of state dimension `dim` (from Describe).
  absl::StatusOr<std::unique_ptr<IngestStream>> OpenIngest(const std::string& model, uint32_t dim,
                                                           const IngestStream::Options& options);

  // Opens an ingest stream of state ids for discrete `model` (ModelConfig.num_states > 0).
  absl::StatusOr<std::unique_ptr<IngestStream>> OpenDiscreteIngest(const std::string& model,
                                                                   const IngestStream::Options& options);

  // Requests a refresh; with wait, blocks until a view covering the current samples exists
  // (server-side timeout `wait_timeout_seconds`; the call's deadline adds timeout_seconds).
  absl::StatusOr<v1::ViewInfo> Refresh(const std::string& model, bool wait, double wait_timeout_seconds = 60);

  // Leading `top` eigenpairs (0: server default); eigenfunction values at `points`
  // (n*dim packed, may be empty).
  absl::StatusOr<v1::KoopmanResponse> Koopman(const std::string& model, uint32_t top, absl::Span<const double> points);
  absl::StatusOr<v1::PredictResponse> Predict(const std::string& model, absl::Span<const double> points);
  absl::StatusOr<v1::DictionaryResponse> Dictionary(const std::string& model);

  // Views of docs/algorithms.md §2-6. Query points are `points` (n*dim packed) for
  // continuous models or `state_ids` for discrete ones; either may be empty. Every call fails
  // with FAILED_PRECONDITION before the model's first refresh and NOT_FOUND for an unknown
  // model; the replies are returned unchanged (see the proto for their layouts).
  absl::StatusOr<v1::CountsResponse> Counts(const std::string& model);
  absl::StatusOr<v1::EmbeddingResponse> Embedding(const std::string& model, absl::Span<const double> points,
                                                  absl::Span<const int64_t> state_ids = {});
  absl::StatusOr<v1::ClustersResponse> Clusters(const std::string& model, absl::Span<const double> points,
                                                absl::Span<const int64_t> state_ids = {});
  absl::StatusOr<v1::AggregationResponse> Aggregation(const std::string& model);
  absl::StatusOr<v1::LatentResponse> Latent(const std::string& model, absl::Span<const double> points,
                                            absl::Span<const int64_t> state_ids = {});
  // Forecast of the next `horizon` (>= 1) observations after the window (oldest first):
  // `window` (k*dim doubles) for continuous models, `window_ids` for discrete ones.
  absl::StatusOr<v1::ForecastResponse> Forecast(const std::string& model, absl::Span<const double> window,
                                                absl::Span<const int64_t> window_ids, uint32_t horizon);
  // Rolling forecasts (continuous models, docs/algorithms.md §11) over `series` (n*dim doubles,
  // oldest first; not learned): rows r = start..n-1 each get the forecasts of rows r+1..r+H.
  absl::StatusOr<v1::ForecastResponse> ForecastSeries(const std::string& model, absl::Span<const double> series,
                                                      uint32_t horizon);
  // Implied timescales at every lag of the model with jackknife standard errors.
  absl::StatusOr<v1::TimescalesResponse> Timescales(const std::string& model);
  // CK test: clusters / steps / lag 0 mean the model's clusters, every step, its first lag.
  absl::StatusOr<v1::CkTestResponse> CkTest(const std::string& model, uint32_t clusters = 0, uint32_t steps = 0,
                                            uint32_t lag = 0);
  // The model's change alarms with index >= since, oldest first.
  absl::StatusOr<v1::ListAlarmsResponse> ListAlarms(const std::string& model, uint64_t since = 0);
  // WatchAlarms: calls `on_alarm` for each alarm with index >= since, then for each new one as it
  // is raised, until `on_alarm` returns false, the stream fails, or `seconds` pass (<= 0: no
  // limit; the end of the time is not an error). No deadline but `seconds`: a watch is long.
  absl::Status WatchAlarms(const std::string& model, uint64_t since, double seconds,
                           const std::function<bool(const v1::Alarm&)>& on_alarm);

  const ClientOptions& options() const { return options_; }

 private:
  Client(const ClientOptions& options, std::shared_ptr<grpc::ChannelCredentials> credentials);
  void Authenticate(grpc::ClientContext* context) const;  // adds the bearer token, if any
  // One unary call `rpc(client, context)` with the deadline (+extra_seconds); with
  // follow_owner, a refusal naming another pod is retried once on that pod's client.
  template <typename Rpc>
  absl::Status Unary(Rpc&& rpc, double extra_seconds = 0) const;
  // The client of the pod `target`, created on first use (same options, no further redirects).
  absl::StatusOr<const Client*> Redirected(const std::string& target) const;
  // With follow_owner: the client of the pod that owns `model` (asks this pod once).
  const Client& OwnerClient(const std::string& model) const;
  void SetDeadline(grpc::ClientContext* context, double extra_seconds = 0) const;
  // One unary call of `method` of the service stub `stub` through Unary (defined in client.cc,
  // used only there); the reply or the error.
  template <typename Response, typename Stub, typename Method, typename Request>
  absl::StatusOr<Response> Call(std::unique_ptr<Stub> Client::*stub, Method method, const Request& request,
                                double extra_seconds = 0) const;
  // One unary QueryService call with the deadline (defined in client.cc, used only there).
  template <typename Response, typename Request, typename Method>
  absl::StatusOr<Response> Query(Method method, const Request& request) const;

  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ModelService::Stub> models_;
  std::unique_ptr<v1::IngestService::Stub> ingest_;
  std::unique_ptr<v1::QueryService::Stub> queries_;
  mutable std::mutex redirects_mu_;
  mutable std::map<std::string, std::unique_ptr<Client>> redirects_;  // target -> client
};

}  // namespace cmestream::client
