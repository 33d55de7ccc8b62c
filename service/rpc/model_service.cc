#include <algorithm>

#include "absl/strings/str_cat.h"
#include "service/rpc/rpc_util.h"
#include "service/rpc/services.h"

namespace cmestream::service {

grpc::ServerUnaryReactor* ModelServiceImpl::CreateModel(grpc::CallbackServerContext* ctx,
                                                        const v1::CreateModelRequest* req, v1::ModelInfo* resp) {
  UnaryCall call(ctx, metrics_, "CreateModel");
  if (absl::Status s = call.Authorize(auth_); !s.ok()) return call.Finish(s);
  if (absl::Status s = call.Owns(ownership_, req->config().name()); !s.ok()) return call.Finish(s);
  absl::StatusOr<std::shared_ptr<Model>> model = registry_.Create(req->config());
  if (model.ok()) *resp = (*model)->Describe();
  return call.Finish(model.status());
}

grpc::ServerUnaryReactor* ModelServiceImpl::GetModel(grpc::CallbackServerContext* ctx, const v1::GetModelRequest* req,
                                                     v1::ModelInfo* resp) {
  UnaryCall call(ctx, metrics_, "GetModel");
  absl::StatusOr<std::shared_ptr<Model>> model =
      call.FindModel(auth_, ownership_, registry_, req->name(), /*allow_override=*/true);
  if (model.ok()) *resp = (*model)->Describe(req->with_memory());
  if (model.ok() && req->with_state_digest()) resp->set_state_digest((*model)->StateDigest());
  return call.Finish(model.status());
}

grpc::ServerUnaryReactor* ModelServiceImpl::ListModels(grpc::CallbackServerContext* ctx,
                                                       const v1::ListModelsRequest* req, v1::ListModelsResponse* resp) {
  UnaryCall call(ctx, metrics_, "ListModels");
  if (absl::Status s = call.Authorize(auth_); !s.ok()) return call.Finish(s);
  // Sorted by name; a page is the models after the token (the last name of the previous page),
  // so models created or deleted between pages neither repeat nor shift the others.
  const std::vector<std::shared_ptr<Model>> models = registry_.List();
  auto it = req->page_token().empty() ? models.begin()
                                      : std::upper_bound(models.begin(), models.end(), req->page_token(),
                                                         [](const std::string& token, const std::shared_ptr<Model>& m) {
                                                           return token < m->name();
                                                         });
  const size_t limit = req->page_size() > 0 ? req->page_size() : models.size();
  for (size_t n = 0; it != models.end() && n < limit; ++it, ++n) *resp->add_models() = (*it)->Describe();
  if (it != models.end() && resp->models_size() > 0)
    resp->set_next_page_token(resp->models().rbegin()->config().name());
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* ModelServiceImpl::DeleteModel(grpc::CallbackServerContext* ctx,
                                                        const v1::DeleteModelRequest* req, v1::DeleteModelResponse*) {
  UnaryCall call(ctx, metrics_, "DeleteModel");
  if (absl::Status s = call.Authorize(auth_); !s.ok()) return call.Finish(s);
  if (absl::Status s = call.Owns(ownership_, req->name(), /*allow_override=*/true); !s.ok()) return call.Finish(s);
  return call.Finish(registry_.Delete(req->name()));
}

grpc::ServerUnaryReactor* ModelServiceImpl::Snapshot(grpc::CallbackServerContext* ctx, const v1::SnapshotRequest*,
                                                     v1::SnapshotResponse* resp) {
  UnaryCall call(ctx, metrics_, "Snapshot");
  if (absl::Status s = call.Authorize(auth_); !s.ok()) return call.Finish(s);
  if (snapshots_ == nullptr) return call.Finish(absl::FailedPreconditionError("this server keeps no snapshots"));
  absl::StatusOr<SnapshotResult> r = snapshots_->TakeNow();
  if (!r.ok()) return call.Finish(r.status());
  resp->set_path(r->path);
  resp->set_bytes(r->bytes);
  resp->set_covered_sequence(r->covered_sequence);
  resp->set_models(static_cast<uint32_t>(r->models));
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* ModelServiceImpl::ExportModel(grpc::CallbackServerContext* ctx,
                                                        const v1::ExportModelRequest* req,
                                                        v1::ExportModelResponse* resp) {
  UnaryCall call(ctx, metrics_, "ExportModel");
  absl::StatusOr<std::shared_ptr<Model>> model =
      call.FindModel(auth_, ownership_, registry_, req->name(), /*allow_override=*/true);
  if (!model.ok()) return call.Finish(model.status());
  if ((*model)->failed()) return call.Finish((*model)->Failed());    // no learner state to move
  absl::StatusOr<std::string> data = service::ExportModel(**model);  // an evicted model: from its file
  if (!data.ok()) return call.Finish(data.status());
  resp->set_data(*std::move(data));
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* ModelServiceImpl::ImportModel(grpc::CallbackServerContext* ctx,
                                                        const v1::ImportModelRequest* req, v1::ModelInfo* resp) {
  UnaryCall call(ctx, metrics_, "ImportModel");
  if (absl::Status s = call.Authorize(auth_); !s.ok()) return call.Finish(s);
  // Ownership is checked before the bytes are read, so a sharded daemon needs the name here.
  if (ownership_ != nullptr && ownership_->options().enabled() && req->name().empty()) {
    return call.Finish(absl::InvalidArgumentError(
        "ImportModel: this daemon is one of several pods (--shard-self): give the name to import under, so that "
        "its owner can be checked"));
  }
  if (absl::Status s = call.Owns(ownership_, req->name(), /*allow_override=*/true); !s.ok()) return call.Finish(s);
  absl::StatusOr<std::shared_ptr<Model>> model = service::ImportModel(req->data(), req->name(), registry_, defaults_);
  if (!model.ok()) return call.Finish(model.status());
  // The import was logged as a WAL record before the model became visible (ImportModel), so
  // it is as durable as a creation: no snapshot is needed to keep it.
  *resp = (*model)->Describe();
  return call.Finish(absl::OkStatus());
}

}  // namespace cmestream::service
