#include "service/rpc/recovering_service.h"

#include <string>
#include <utility>

namespace cmestream::service {

grpc::ServerGenericBidiReactor* RecoveringService::CreateReactor(grpc::GenericCallbackServerContext* /*ctx*/) {
  // Reads the first message (or the end of the stream), ignores it and finishes: nothing is
  // applied, whatever was sent. Finishing before the request was read would reset the stream
  // under the client, which then sometimes reports CANCELLED instead of this status.
  class Reactor final : public grpc::ServerGenericBidiReactor {
   public:
    explicit Reactor(std::string message) : message_(std::move(message)) { StartRead(&request_); }
    void OnReadDone(bool /*ok*/) override { Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, message_)); }
    void OnDone() override { delete this; }

   private:
    const std::string message_;
    grpc::ByteBuffer request_;
  };
  return new Reactor(progress_.Describe());
}

}  // namespace cmestream::service
