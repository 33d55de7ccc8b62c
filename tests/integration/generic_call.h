// Blocking raw-bytes calls through grpc::GenericStub for tests: any method by its path, any
// bytes as the request (well-formed or not), metadata optional. Also the methods of the
// cmestream.v1 services as the proto declares them (the generated descriptor pool), so a test
// can cover every RPC without listing them.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cmestream/v1/cmestream.pb.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"

namespace cmestream::testing_util {

struct RawReply {
  grpc::Status status;
  std::vector<std::string> messages;  // responses, serialized
};

inline std::string MethodPath(const google::protobuf::MethodDescriptor& m) {
  return "/" + m.service()->full_name() + "/" + m.name();
}

// Every method of every service in the file that declares cmestream.v1 (proto order).
inline std::vector<const google::protobuf::MethodDescriptor*> AllMethods() {
  std::vector<const google::protobuf::MethodDescriptor*> out;
  const google::protobuf::FileDescriptor* file = v1::ModelInfo::descriptor()->file();
  for (int s = 0; s < file->service_count(); ++s) {
    for (int m = 0; m < file->service(s)->method_count(); ++m) out.push_back(file->service(s)->method(m));
  }
  return out;
}

inline grpc::ByteBuffer ToBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

inline std::string FromBuffer(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

inline void Prepare(grpc::ClientContext* ctx, const std::string& token) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
}

inline RawReply RawUnary(const std::shared_ptr<grpc::Channel>& channel, const std::string& path,
                         const std::string& request, const std::string& token = "") {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  Prepare(&ctx, token);
  grpc::ByteBuffer req = ToBuffer(request), resp;
  RawReply reply;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  stub.UnaryCall(&ctx, path, grpc::StubOptions(), &req, &resp, [&](grpc::Status status) {
    std::lock_guard<std::mutex> lock(mu);
    reply.status = std::move(status);
    done = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  if (reply.status.ok()) reply.messages.push_back(FromBuffer(resp));
  return reply;
}

// Writes `requests` one after another (each after the previous write completed), half-closes,
// reads every response and returns them with the final status.
inline RawReply RawBidi(const std::shared_ptr<grpc::Channel>& channel, const std::string& path,
                        const std::vector<std::string>& requests, const std::string& token = "") {
  class Reactor : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
   public:
    explicit Reactor(const std::vector<std::string>& requests) : requests_(requests) {}
    void Start() {
      StartRead(&in_);
      NextWrite();
      StartCall();
    }
    void OnWriteDone(bool ok) override {
      if (!ok) return;  // the server ended the call; OnDone follows
      NextWrite();
    }
    void OnReadDone(bool ok) override {
      if (!ok) return;
      reply_.messages.push_back(FromBuffer(in_));
      StartRead(&in_);
    }
    void OnDone(const grpc::Status& s) override {
      std::lock_guard<std::mutex> lock(mu_);
      reply_.status = s;
      done_ = true;
      cv_.notify_all();
    }
    RawReply Wait() {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return done_; });
      return reply_;
    }

   private:
    void NextWrite() {
      if (next_ == requests_.size()) {
        StartWritesDone();
        return;
      }
      out_ = ToBuffer(requests_[next_++]);
      StartWrite(&out_);
    }
    const std::vector<std::string>& requests_;
    size_t next_ = 0;
    grpc::ByteBuffer out_, in_;
    RawReply reply_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool done_ = false;
  };
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  Prepare(&ctx, token);
  Reactor reactor(requests);
  stub.PrepareBidiStreamingCall(&ctx, path, grpc::StubOptions(), &reactor);
  reactor.Start();
  return reactor.Wait();
}

// Calls `method` with `request` (unary: one message; bidi streaming: the one message, then
// half-close).
inline RawReply RawCall(const std::shared_ptr<grpc::Channel>& channel, const google::protobuf::MethodDescriptor& method,
                        const std::string& request, const std::string& token = "") {
  if (method.client_streaming() || method.server_streaming()) {
    return RawBidi(channel, MethodPath(method), {request}, token);
  }
  return RawUnary(channel, MethodPath(method), request, token);
}

}  // namespace cmestream::testing_util
