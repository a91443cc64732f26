#pragma once

// A plain HTTP/1.0 GET to 127.0.0.1 for tests of the agent's metrics endpoint (no client
// library: the response is read until the server closes the connection).

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <optional>
#include <string>

#include "base/unique_fd.h"

namespace stagehand::testing {

struct HttpResponse {
  int code = -1;
  std::string body;
};

// GET http://127.0.0.1:<port><path>; nullopt when nothing answered or the answer is not HTTP.
inline std::optional<HttpResponse> HttpGet(int port, const std::string& path) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd.Get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    return std::nullopt;
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (write(fd.Get(), request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    return std::nullopt;
  }
  std::string raw;
  std::array<char, 4096> chunk{};
  ssize_t n = 0;
  while ((n = read(fd.Get(), chunk.data(), chunk.size())) > 0) {
    raw.append(chunk.data(), static_cast<size_t>(n));
  }
  HttpResponse response;
  if (std::sscanf(raw.c_str(), "HTTP/%*s %d", &response.code) != 1) {
    return std::nullopt;
  }
  const size_t body = raw.find("\r\n\r\n");
  response.body = body == std::string::npos ? "" : raw.substr(body + 4);
  return response;
}

}  // namespace stagehand::testing
