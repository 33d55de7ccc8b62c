// Helpers for the daemon integration tests: a plain-socket HTTP GET (for /metrics) and packing
// of point sets into proto fields.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "core/common/types.h"
#include "google/protobuf/repeated_field.h"

namespace cmestream::testing {

// GET `path` from 127.0.0.1:port with HTTP/1.0; returns the body ("" on failure).
inline std::string HttpGet(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buf[8192];
      ssize_t n;
      while ((n = ::read(fd, buf, sizeof(buf))) > 0) response.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  const size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

// Appends the rows of `m` (row-major) to a packed double field.
inline void AppendRows(const RowMatrixXd& m, google::protobuf::RepeatedField<double>* out) {
  out->Add(m.data(), m.data() + m.size());
}

}  // namespace cmestream::testing
