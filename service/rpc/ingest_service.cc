#include <chrono>

#include "absl/strings/str_cat.h"

#include "service/rpc/rpc_util.h"
#include "service/rpc/services.h"

namespace cmestream::service {
namespace {

// One Ingest stream: read a batch, validate and queue it (Ingestor::Submit, on this gRPC
// thread), and from the pool worker that applied it write its ack; read the next batch when
// the ack is written. One batch of a stream is in flight at a time, so acks are in order. A bad
// batch ends the stream with its status; the batches before it stay applied (as the proto
// documents). The reactor lives until OnDone, which gRPC calls only after Finish, so the
// worker's callback always finds it (and batch_, which the queued batch aliases, unchanged).
// Batches are read as Checked<IngestBatch> (checked_request.h): bytes that do not parse end the
// stream with INVALID_ARGUMENT naming the batch, where a typed read would look like the end of
// the stream and finish OK.
class IngestReactor final : public grpc::ServerBidiReactor<Checked<v1::IngestBatch>, v1::IngestAck> {
 public:
  IngestReactor(grpc::CallbackServerContext* ctx, Ingestor& ingestor, Metrics& metrics, const absl::Status& access,
                const Ownership* ownership)
      : ctx_(ctx), ingestor_(ingestor), metrics_(metrics), ownership_(ownership) {
    if (!access.ok()) {  // refused before reading anything (auth.h)
      metrics_.ObserveRpc("Ingest", 0, static_cast<int>(access.code()));
      Finish(ToGrpcStatus(access));
      return;
    }
    StartRead(&batch_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client closed its side (or the call was cancelled)
      Finish(grpc::Status::OK);
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    if (!batch_.parsed) {
      OnApplied(start, UnparsableRequest(absl::StrCat("batch ", next_index_,
                                                      " of this Ingest stream (the batches before it are applied)"),
                                         *v1::IngestBatch::descriptor(), batch_.bytes, batch_.reason));
      return;
    }
    if (ownership_ != nullptr) {  // a batch for a model another pod owns ends the stream (ownership.h)
      if (absl::Status s = ownership_->Check(batch_.message.model(), *ctx_); !s.ok()) {
        OnApplied(start, s);
        return;
      }
    }
    ingestor_.Submit(batch_.message, next_index_,
                     [this, start](absl::StatusOr<v1::IngestAck> ack) { OnApplied(start, std::move(ack)); });
  }

  // On the pool worker (or inline for a refusal before queueing).
  void OnApplied(std::chrono::steady_clock::time_point start, absl::StatusOr<v1::IngestAck> ack) {
    metrics_.ObserveRpc("Ingest", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                        static_cast<int>(ack.status().code()));
    if (!ack.ok()) {
      AddRetryTrailer(ack.status(), ctx_);
      Finish(ToGrpcStatus(ack.status()));
      return;
    }
    ++next_index_;
    ack_ = *std::move(ack);
    StartWrite(&ack_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the ack could not be written"));
      return;
    }
    StartRead(&batch_);
  }

  void OnDone() override { delete this; }

 private:
  grpc::CallbackServerContext* ctx_;
  Ingestor& ingestor_;
  Metrics& metrics_;
  const Ownership* ownership_;
  Checked<v1::IngestBatch> batch_;
  v1::IngestAck ack_;
  uint64_t next_index_ = 0;
};

}  // namespace

grpc::ServerBidiReactor<Checked<v1::IngestBatch>, v1::IngestAck>* IngestServiceImpl::StartIngest(
    grpc::CallbackServerContext* ctx) {
  return new IngestReactor(ctx, ingestor_, metrics_, Authorize(auth_, *ctx, "Ingest"), ownership_);
}

grpc::ServerUnaryReactor* IngestServiceImpl::IngestOne(grpc::CallbackServerContext* ctx, const v1::IngestBatch* req,
                                                       v1::IngestAck* resp) {
  UnaryCall call(ctx, metrics_, "IngestOne");
  if (absl::Status s = call.Authorize(auth_); !s.ok()) return call.Finish(s);
  if (absl::Status s = call.Owns(ownership_, req->model()); !s.ok()) return call.Finish(s);
  // Finished from the pool worker once the batch is durable and applied (req and resp live
  // until Finish).
  ingestor_.Submit(*req, 0, [call, resp](absl::StatusOr<v1::IngestAck> ack) mutable {
    const absl::Status status = ack.status();
    if (ack.ok()) *resp = *std::move(ack);
    call.Finish(status);
  });
  return call.reactor();
}

grpc::ServerUnaryReactor* IngestServiceImpl::GetProducer(grpc::CallbackServerContext* ctx,
                                                         const v1::GetProducerRequest* req, v1::ProducerStatus* resp) {
  UnaryCall call(ctx, metrics_, "GetProducer");
  absl::StatusOr<std::shared_ptr<Model>> model = call.FindModel(auth_, ownership_, registry_, req->model());
  if (model.ok()) {
    resp->set_model(req->model());
    resp->set_producer_id(req->producer_id());
    resp->set_applied_offset((*model)->ProducerOffset(req->producer_id()));
  }
  return call.Finish(model.status());
}

}  // namespace cmestream::service
