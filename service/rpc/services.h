// The gRPC services of cmestreamd, on the callback API: handlers are thin (look up, call the
// model/registry/scheduler, map the status once with ToGrpcStatus, record latency).
//
// Why the callback API: Refresh(wait=true) parks its reactor in the scheduler's waiter list
// instead of holding a thread for up to its timeout, and Ingest is a bidi reactor that
// processes one batch per read and acks it before reading the next (one batch in flight per
// stream: natural back-pressure, acks in order). A batch is learned on the gRPC callback
// thread that read it; that is CPU work, not blocking, and it keeps the ack after the apply.
//
// Every method is registered on Checked<Request> (checked_request.h) in the constructor, so a
// request whose bytes do not parse gets INVALID_ARGUMENT naming its type, not gRPC's
// UNIMPLEMENTED. A new RPC must be added there too (test_malformed_requests.cc sends garbage to
// every method of the proto).
#pragma once

#include "cmestream/v1/cmestream.grpc.pb.h"
#include "service/engine/ingestor.h"
#include "service/engine/refresh.h"
#include "service/engine/registry.h"
#include "service/observability/metrics.h"
#include "service/rpc/auth.h"
#include "service/rpc/checked_request.h"
#include "service/rpc/ownership.h"
#include "service/storage/snapshot.h"

namespace cmestream::service {

class ModelServiceImpl final : public CheckedService<v1::ModelService::CallbackService> {
 public:
  // `auth` null: no authentication (every handler starts with UnaryCall::Authorize).
  // `snapshots` null: Snapshot answers FAILED_PRECONDITION and ImportModel does not snapshot
  // (in-process tests without a data dir). `defaults` re-normalize imported configs.
  ModelServiceImpl(ModelRegistry& registry, Metrics& metrics, const TokenAuthenticator* auth = nullptr,
                   SnapshotManager* snapshots = nullptr, ConfigDefaults defaults = {},
                   const Ownership* ownership = nullptr)
      : CheckedService(v1::ModelService::service_full_name(), metrics, auth),
        registry_(registry),
        snapshots_(snapshots),
        defaults_(defaults),
        ownership_(ownership) {
    CheckUnary("CreateModel", &ModelServiceImpl::CreateModel);
    CheckUnary("GetModel", &ModelServiceImpl::GetModel);
    CheckUnary("ListModels", &ModelServiceImpl::ListModels);
    CheckUnary("DeleteModel", &ModelServiceImpl::DeleteModel);
    CheckUnary("Snapshot", &ModelServiceImpl::Snapshot);
    CheckUnary("ExportModel", &ModelServiceImpl::ExportModel);
    CheckUnary("ImportModel", &ModelServiceImpl::ImportModel);
  }
  grpc::ServerUnaryReactor* CreateModel(grpc::CallbackServerContext* ctx, const v1::CreateModelRequest* req,
                                        v1::ModelInfo* resp) override;
  grpc::ServerUnaryReactor* GetModel(grpc::CallbackServerContext* ctx, const v1::GetModelRequest* req,
                                     v1::ModelInfo* resp) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* ctx, const v1::ListModelsRequest* req,
                                       v1::ListModelsResponse* resp) override;
  grpc::ServerUnaryReactor* DeleteModel(grpc::CallbackServerContext* ctx, const v1::DeleteModelRequest* req,
                                        v1::DeleteModelResponse* resp) override;
  // Admin scope (auth.h fails closed for methods it does not list). Snapshot and ImportModel
  // write a snapshot file on the calling gRPC thread (O(total model size) of disk I/O; rare,
  // operator-initiated calls).
  grpc::ServerUnaryReactor* Snapshot(grpc::CallbackServerContext* ctx, const v1::SnapshotRequest* req,
                                     v1::SnapshotResponse* resp) override;
  grpc::ServerUnaryReactor* ExportModel(grpc::CallbackServerContext* ctx, const v1::ExportModelRequest* req,
                                        v1::ExportModelResponse* resp) override;
  grpc::ServerUnaryReactor* ImportModel(grpc::CallbackServerContext* ctx, const v1::ImportModelRequest* req,
                                        v1::ModelInfo* resp) override;

 private:
  ModelRegistry& registry_;
  SnapshotManager* snapshots_;
  const ConfigDefaults defaults_;
  const Ownership* ownership_;  // null: this daemon owns every model (ownership.h)
};

class IngestServiceImpl final : public CheckedService<v1::IngestService::CallbackService> {
 public:
  IngestServiceImpl(ModelRegistry& registry, Ingestor& ingestor, Metrics& metrics,
                    const TokenAuthenticator* auth = nullptr, const Ownership* ownership = nullptr)
      : CheckedService(v1::IngestService::service_full_name(), metrics, auth),
        registry_(registry),
        ingestor_(ingestor),
        ownership_(ownership) {
    CheckBidi<v1::IngestBatch, v1::IngestAck>("Ingest",
                                              [this](grpc::CallbackServerContext* ctx) { return StartIngest(ctx); });
    CheckUnary("IngestOne", &IngestServiceImpl::IngestOne);
    CheckUnary("GetProducer", &IngestServiceImpl::GetProducer);
  }
  // The Ingest stream (registered by CheckBidi instead of the generated Ingest override, whose
  // reactor type could not tell unparsable bytes from the client's half-close).
  grpc::ServerBidiReactor<Checked<v1::IngestBatch>, v1::IngestAck>* StartIngest(grpc::CallbackServerContext* ctx);
  grpc::ServerUnaryReactor* IngestOne(grpc::CallbackServerContext* ctx, const v1::IngestBatch* req,
                                      v1::IngestAck* resp) override;
  grpc::ServerUnaryReactor* GetProducer(grpc::CallbackServerContext* ctx, const v1::GetProducerRequest* req,
                                        v1::ProducerStatus* resp) override;

 private:
  ModelRegistry& registry_;
  Ingestor& ingestor_;
  const Ownership* ownership_;
};

class QueryServiceImpl final : public CheckedService<v1::QueryService::CallbackService> {
 public:
  QueryServiceImpl(ModelRegistry& registry, RefreshScheduler& scheduler, Metrics& metrics,
                   const TokenAuthenticator* auth = nullptr, const Ownership* ownership = nullptr)
      : CheckedService(v1::QueryService::service_full_name(), metrics, auth),
        registry_(registry),
        scheduler_(scheduler),
        ownership_(ownership) {
    CheckUnary("Refresh", &QueryServiceImpl::Refresh);
    CheckUnary("GetKoopman", &QueryServiceImpl::GetKoopman);
    CheckUnary("Predict", &QueryServiceImpl::Predict);
    CheckUnary("GetDictionary", &QueryServiceImpl::GetDictionary);
    CheckUnary("GetCounts", &QueryServiceImpl::GetCounts);
    CheckUnary("GetEmbedding", &QueryServiceImpl::GetEmbedding);
    CheckUnary("GetClusters", &QueryServiceImpl::GetClusters);
    CheckUnary("GetAggregation", &QueryServiceImpl::GetAggregation);
    CheckUnary("GetLatent", &QueryServiceImpl::GetLatent);
    CheckUnary("Forecast", &QueryServiceImpl::Forecast);
    CheckUnary("GetTimescales", &QueryServiceImpl::GetTimescales);
    CheckUnary("CkTest", &QueryServiceImpl::CkTest);
    CheckUnary("ListAlarms", &QueryServiceImpl::ListAlarms);
    CheckServerStream<v1::WatchAlarmsRequest, v1::Alarm>(
        "WatchAlarms", [this](grpc::CallbackServerContext* ctx, const Checked<v1::WatchAlarmsRequest>* req) {
          return StartWatchAlarms(ctx, req);
        });
  }
  grpc::ServerUnaryReactor* Refresh(grpc::CallbackServerContext* ctx, const v1::RefreshRequest* req,
                                    v1::RefreshResponse* resp) override;
  grpc::ServerUnaryReactor* GetKoopman(grpc::CallbackServerContext* ctx, const v1::KoopmanRequest* req,
                                       v1::KoopmanResponse* resp) override;
  grpc::ServerUnaryReactor* Predict(grpc::CallbackServerContext* ctx, const v1::PredictRequest* req,
                                    v1::PredictResponse* resp) override;
  grpc::ServerUnaryReactor* GetDictionary(grpc::CallbackServerContext* ctx, const v1::DictionaryRequest* req,
                                          v1::DictionaryResponse* resp) override;
  grpc::ServerUnaryReactor* GetCounts(grpc::CallbackServerContext* ctx, const v1::CountsRequest* req,
                                      v1::CountsResponse* resp) override;
  grpc::ServerUnaryReactor* GetEmbedding(grpc::CallbackServerContext* ctx, const v1::EmbeddingRequest* req,
                                         v1::EmbeddingResponse* resp) override;
  grpc::ServerUnaryReactor* GetClusters(grpc::CallbackServerContext* ctx, const v1::ClustersRequest* req,
                                        v1::ClustersResponse* resp) override;
  grpc::ServerUnaryReactor* GetAggregation(grpc::CallbackServerContext* ctx, const v1::AggregationRequest* req,
                                           v1::AggregationResponse* resp) override;
  grpc::ServerUnaryReactor* GetLatent(grpc::CallbackServerContext* ctx, const v1::LatentRequest* req,
                                      v1::LatentResponse* resp) override;
  grpc::ServerUnaryReactor* Forecast(grpc::CallbackServerContext* ctx, const v1::ForecastRequest* req,
                                     v1::ForecastResponse* resp) override;
  // Lag scans and CK tests (service/engine/lags.h); computed from the latest view.
  grpc::ServerUnaryReactor* GetTimescales(grpc::CallbackServerContext* ctx, const v1::TimescalesRequest* req,
                                          v1::TimescalesResponse* resp) override;
  grpc::ServerUnaryReactor* CkTest(grpc::CallbackServerContext* ctx, const v1::CkTestRequest* req,
                                   v1::CkTestResponse* resp) override;
  // service/rpc/alarms_rpc.cc
  grpc::ServerUnaryReactor* ListAlarms(grpc::CallbackServerContext* ctx, const v1::ListAlarmsRequest* req,
                                       v1::ListAlarmsResponse* resp) override;
  // WatchAlarms (registered by CheckServerStream): the alarms since req.since, then each new one
  // (the model is polled every 200 ms; nothing is held between polls but the model's pointer).
  grpc::ServerWriteReactor<v1::Alarm>* StartWatchAlarms(grpc::CallbackServerContext* ctx,
                                                        const Checked<v1::WatchAlarmsRequest>* req);

 private:
  ModelRegistry& registry_;
  RefreshScheduler& scheduler_;
  const Ownership* ownership_;
};

}  // namespace cmestream::service
