#include "service/rpc/status.h"

#include <string>

#include "service/engine/limits.h"

namespace cmestream::service {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  std::string message(status.message());
  if (message.size() > kMaxStatusMessageBytes) {
    message.resize(kMaxStatusMessageBytes - 3);
    message += "...";
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), message);
}

void AddRetryTrailer(const absl::Status& status, grpc::ServerContextBase* ctx) {
  if (status.ok() || ctx == nullptr) return;
  if (auto hint = status.GetPayload(kRetryPayloadUrl); hint.has_value()) {
    ctx->AddTrailingMetadata(kRetryAfterMetadataKey, std::string(*hint));
  }
}

}  // namespace cmestream::service
