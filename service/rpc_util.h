// Small helpers shared by the service handlers.
#pragma once

#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_callback.h"
#include "service/auth.h"
#include "service/limits.h"
#include "service/metrics.h"
#include "service/ownership.h"
#include "service/status.h"

namespace cmestream::service {

// Measures one unary call from handler entry to Finish and finishes it with the mapped status.
class UnaryCall {
 public:
  UnaryCall(grpc::CallbackServerContext* ctx, Metrics& metrics, const char* method)
      : ctx_(ctx),
        reactor_(ctx->DefaultReactor()),
        metrics_(metrics),
        method_(method),
        start_(std::chrono::steady_clock::now()) {}

  grpc::ServerUnaryReactor* reactor() const { return reactor_; }

  // The per-RPC access check (auth.h): OK when `auth` is null or the caller's token has the
  // scope this method requires. Handlers call it first: `if (auto s = call.Authorize(auth_);
  // !s.ok()) return call.Finish(s);`
  absl::Status Authorize(const TokenAuthenticator* auth) const { return service::Authorize(auth, *ctx_, method_); }

  // Whether this daemon serves `model` (ownership.h): OK, or FAILED_PRECONDITION naming the
  // owner with the `cmestream-owner` trailer set. `ownership` null: owns everything.
  // `allow_override`: the rebalancer's `cmestream-placement: ignore` header is honored.
  absl::Status Owns(const Ownership* ownership, const std::string& model, bool allow_override = false) const {
    return ownership == nullptr ? absl::OkStatus() : ownership->Check(model, *ctx_, allow_override);
  }

  // Finishes the call (exactly once). Safe to call from any thread.
  grpc::ServerUnaryReactor* Finish(const absl::Status& status) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    metrics_.ObserveRpc(method_, seconds, static_cast<int>(status.code()));
    AddRetryTrailer(status, ctx_);
    reactor_->Finish(ToGrpcStatus(status));
    return reactor_;
  }

 private:
  grpc::CallbackServerContext* ctx_;
  grpc::ServerUnaryReactor* reactor_;
  Metrics& metrics_;
  const char* method_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace cmestream::service
