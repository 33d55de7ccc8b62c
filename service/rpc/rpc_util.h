// Small helpers shared by the service handlers.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_callback.h"
#include "service/engine/limits.h"
#include "service/engine/registry.h"
#include "service/observability/metrics.h"
#include "service/rpc/auth.h"
#include "service/rpc/ownership.h"
#include "service/rpc/status.h"

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

  // What every call about one model begins with: Authorize, Owns, then the model from the
  // registry. A failed step is the status to finish with.
  absl::StatusOr<std::shared_ptr<Model>> FindModel(const TokenAuthenticator* auth, const Ownership* ownership,
                                                   const ModelRegistry& registry, const std::string& name,
                                                   bool allow_override = false) const {
    if (absl::Status s = Authorize(auth); !s.ok()) return s;
    if (absl::Status s = Owns(ownership, name, allow_override); !s.ok()) return s;
    return registry.Get(name);
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
