// The one place where absl::Status becomes grpc::Status (CONTRIBUTING.md "Error tiers").
#pragma once

#include "absl/status/status.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/status.h"

namespace cmestream::service {

// Longest message sent to a client; longer ones are cut and end with "...".
inline constexpr size_t kMaxStatusMessageBytes = 1024;

// absl and gRPC share code numbering, so the code maps by value; the message is truncated so a
// pathological input (e.g. a huge model name echoed back) cannot produce a huge trailer.
grpc::Status ToGrpcStatus(const absl::Status& status);

// If `status` carries a retry hint (engine/limits.h QueueFullError), adds it as trailing
// metadata "retry-after-ms" to `ctx`. Call before finishing the RPC.
void AddRetryTrailer(const absl::Status& status, grpc::ServerContextBase* ctx);

}  // namespace cmestream::service
