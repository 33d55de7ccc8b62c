// Requests whose bytes do not parse are answered INVALID_ARGUMENT naming the message type.
//
// Why this exists: on the callback API, gRPC C++ (1.51) answers a unary request whose bytes do
// not parse as its protobuf type with UNIMPLEMENTED and an empty message (the handler is never
// called: CallbackUnaryHandler::RunHandler), and a read of such bytes on a bidi stream looks to
// the reactor exactly like the client's half-close (OnReadDone(false)), so an Ingest stream of
// garbage would end OK with no acks. Clients and load balancers read UNIMPLEMENTED as "this
// server lacks the method" and the OK as "everything was applied": both wrong.
//
// How: the services register their handlers on Checked<Request> instead of Request (the
// generated handler is replaced in the service's constructor, CheckedService below). Its
// SerializationTraits always succeed and record whether the bytes parsed; the handler then
// answers an unparsable request itself, after the token check (auth.h), so an unauthenticated
// caller still learns nothing but UNAUTHENTICATED.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/impl/codegen/server_callback_handlers.h"
#include "grpcpp/impl/serialization_traits.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "service/observability/metrics.h"
#include "service/rpc/auth.h"
#include "service/rpc/rpc_util.h"

namespace cmestream::service {

// A request as received: the parsed message, or why its bytes are not one.
template <class M>
struct Checked {
  M message;
  bool parsed = false;
  size_t bytes = 0;    // size of the received message
  std::string reason;  // when !parsed: what gRPC's deserializer said (often empty for protobuf)
};

// INVALID_ARGUMENT: "the request to METHOD is not a valid TYPE: its N bytes do not parse as that
// protobuf message (...)". `what` names the request ("the request to GetModel", "batch 3 of this
// Ingest stream").
absl::Status UnparsableRequest(absl::string_view what, const google::protobuf::Descriptor& type, size_t bytes,
                               absl::string_view reason);

// Index of `method` in `service` (full name, "cmestream.v1.ModelService") as the generated
// service numbers its methods (declaration order in the .proto). Aborts when the method does
// not exist: a programming error found at the first start.
int MethodIndex(absl::string_view service, absl::string_view method);

// Mixin over a generated callback service (v1::ModelService::CallbackService): CheckUnary and
// CheckBidi replace the generated handler of one method by one on Checked<Request>.
template <class Generated>
class CheckedService : public Generated {
 protected:
  CheckedService(const char* service_full_name, Metrics& metrics, const TokenAuthenticator* auth)
      : metrics_(metrics), auth_(auth), service_(service_full_name) {}

  // `handler` is the service's typed handler (e.g. &ModelServiceImpl::CreateModel); it sees
  // only requests that parsed.
  template <class Impl, class Req, class Resp>
  void CheckUnary(const char* method,
                  grpc::ServerUnaryReactor* (Impl::*handler)(grpc::CallbackServerContext*, const Req*, Resp*)) {
    Impl* impl = static_cast<Impl*>(this);
    Metrics* metrics = &metrics_;
    const TokenAuthenticator* auth = auth_;
    this->MarkMethodCallback(
        MethodIndex(service_, method),
        new grpc::internal::CallbackUnaryHandler<Checked<Req>, Resp>(
            [impl, handler, method, metrics, auth](grpc::CallbackServerContext* ctx, const Checked<Req>* req,
                                                   Resp* resp) -> grpc::ServerUnaryReactor* {
              if (req->parsed) return (impl->*handler)(ctx, &req->message, resp);
              UnaryCall call(ctx, *metrics, method);
              if (absl::Status s = call.Authorize(auth); !s.ok()) return call.Finish(s);
              return call.Finish(UnparsableRequest(std::string("the request to ") + method, *Req::descriptor(),
                                                   req->bytes, req->reason));
            }));
  }

  // A server-streaming method: `start` gets the request (parsed or not; it answers an
  // unparsable one itself).
  template <class Req, class Resp>
  void CheckServerStream(
      const char* method,
      std::function<grpc::ServerWriteReactor<Resp>*(grpc::CallbackServerContext*, const Checked<Req>*)> start) {
    this->MarkMethodCallback(MethodIndex(service_, method),
                             new grpc::internal::CallbackServerStreamingHandler<Checked<Req>, Resp>(std::move(start)));
  }

  // A bidi streaming method whose reactor reads Checked<Req> (and answers an unparsable
  // message itself).
  template <class Req, class Resp>
  void CheckBidi(const char* method,
                 std::function<grpc::ServerBidiReactor<Checked<Req>, Resp>*(grpc::CallbackServerContext*)> start) {
    this->MarkMethodCallback(MethodIndex(service_, method),
                             new grpc::internal::CallbackBidiHandler<Checked<Req>, Resp>(std::move(start)));
  }

  // The daemon's metrics and the token check (null: none), for the service's own handlers as
  // for the answers to unparsable requests above: one copy, held here.
  Metrics& metrics_;
  const TokenAuthenticator* const auth_;

 private:
  const char* service_;
};

}  // namespace cmestream::service

namespace grpc {

// Deserialization of a Checked<M> never fails: it records whether the bytes parsed as M.
template <class M>
class SerializationTraits<cmestream::service::Checked<M>, void> {
 public:
  static Status Serialize(const cmestream::service::Checked<M>& msg, ByteBuffer* bb, bool* own_buffer) {
    return SerializationTraits<M>::Serialize(msg.message, bb, own_buffer);
  }
  static Status Deserialize(ByteBuffer* buffer, cmestream::service::Checked<M>* msg) {
    msg->bytes = buffer == nullptr ? 0 : buffer->Length();
    const Status parsed = SerializationTraits<M>::Deserialize(buffer, &msg->message);
    msg->parsed = parsed.ok();
    msg->reason = parsed.error_message();
    return Status::OK;
  }
};

}  // namespace grpc
