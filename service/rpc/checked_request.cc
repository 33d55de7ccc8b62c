#include "service/rpc/checked_request.h"

#include <cstdlib>
#include <iostream>

#include "absl/strings/str_cat.h"

namespace cmestream::service {

absl::Status UnparsableRequest(absl::string_view what, const google::protobuf::Descriptor& type, size_t bytes,
                               absl::string_view reason) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, " is not a valid ", type.full_name(), ": its ", bytes,
                   " bytes do not parse as that protobuf message (corrupt bytes, another message type, or a "
                   "string field that is not UTF-8)",
                   reason.empty() ? "" : absl::StrCat(": ", reason)));
}

int MethodIndex(absl::string_view service, absl::string_view method) {
  const google::protobuf::ServiceDescriptor* s =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(std::string(service));
  const google::protobuf::MethodDescriptor* m = s == nullptr ? nullptr : s->FindMethodByName(std::string(method));
  if (m == nullptr) {
    std::cerr << "cmestreamd: internal error: no method " << service << "." << method << " in the proto\n";
    std::abort();
  }
  return m->index();
}

}  // namespace cmestream::service
