// Small helpers shared by the service handlers.
#pragma once

#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/server_callback.h"
#include "grpcpp/server_context.h"
#include "service/metrics.h"
#include "service/status.h"

namespace cmestream::service {

// Measures one unary call from handler entry to Finish and finishes it with the mapped status.
class UnaryCall {
 public:
  UnaryCall(grpc::CallbackServerContext* ctx, Metrics& metrics, const char* method)
      : reactor_(ctx->DefaultReactor()), metrics_(metrics), method_(method),
        start_(std::chrono::steady_clock::now()) {}

  grpc::ServerUnaryReactor* reactor() const { return reactor_; }

  // Finishes the call (exactly once). Safe to call from any thread.
  grpc::ServerUnaryReactor* Finish(const absl::Status& status) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    metrics_.ObserveRpc(method_, seconds, static_cast<int>(status.code()));
    reactor_->Finish(ToGrpcStatus(status));
    return reactor_;
  }

 private:
  grpc::ServerUnaryReactor* reactor_;
  Metrics& metrics_;
  const char* method_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace cmestream::service
