#include "service/rpc_util.h"
#include "service/services.h"

namespace cmestream::service {

grpc::ServerUnaryReactor* ModelServiceImpl::CreateModel(grpc::CallbackServerContext* ctx,
                                                        const v1::CreateModelRequest* req, v1::ModelInfo* resp) {
  UnaryCall call(ctx, metrics_, "CreateModel");
  if (absl::Status s = call.Authorize(auth_); !s.ok()) return call.Finish(s);
  absl::StatusOr<std::shared_ptr<Model>> model = registry_.Create(req->config());
  if (model.ok()) *resp = (*model)->Describe();
  return call.Finish(model.status());
}

grpc::ServerUnaryReactor* ModelServiceImpl::GetModel(grpc::CallbackServerContext* ctx, const v1::GetModelRequest* req,
                                                     v1::ModelInfo* resp) {
  UnaryCall call(ctx, metrics_, "GetModel");
  if (absl::Status s = call.Authorize(auth_); !s.ok()) return call.Finish(s);
  absl::StatusOr<std::shared_ptr<Model>> model = registry_.Get(req->name());
  if (model.ok()) *resp = (*model)->Describe();
  if (model.ok() && req->with_state_digest()) resp->set_state_digest((*model)->StateDigest());
  return call.Finish(model.status());
}

grpc::ServerUnaryReactor* ModelServiceImpl::ListModels(grpc::CallbackServerContext* ctx,
                                                       const v1::ListModelsRequest*, v1::ListModelsResponse* resp) {
  UnaryCall call(ctx, metrics_, "ListModels");
  if (absl::Status s = call.Authorize(auth_); !s.ok()) return call.Finish(s);
  for (const std::shared_ptr<Model>& model : registry_.List()) *resp->add_models() = model->Describe();
  return call.Finish(absl::OkStatus());
}

grpc::ServerUnaryReactor* ModelServiceImpl::DeleteModel(grpc::CallbackServerContext* ctx,
                                                        const v1::DeleteModelRequest* req, v1::DeleteModelResponse*) {
  UnaryCall call(ctx, metrics_, "DeleteModel");
  if (absl::Status s = call.Authorize(auth_); !s.ok()) return call.Finish(s);
  return call.Finish(registry_.Delete(req->name()));
}

}  // namespace cmestream::service
