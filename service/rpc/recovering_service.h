// What the gRPC port answers while the daemon recovers at start (service/README.md "Recovery"):
// every method except health checking and reflection gets UNAVAILABLE with the progress
// ("recovering: 1200 of 3000 records replayed; retry shortly"), and the health service says
// NOT_SERVING. Why a generic service rather than the real services behind a flag: the real
// services need the registry, ingestor and scheduler that recovery is still building; a
// generic service catches every method, including ones a newer client knows and this build
// does not, and answers with a status that clients and load balancers retry (UNIMPLEMENTED,
// what an empty server answers, is not retried).
#pragma once

#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/support/server_callback.h"
#include "service/storage/recovery_progress.h"

namespace cmestream::service {

class RecoveringService final : public grpc::CallbackGenericService {
 public:
  explicit RecoveringService(const RecoveryProgress& progress) : progress_(progress) {}
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override;

 private:
  const RecoveryProgress& progress_;
};

}  // namespace cmestream::service
