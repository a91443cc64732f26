#pragma once

// A gRPC server on a unix socket that is slow to answer a new connection, as a driver on a
// loaded node or in a slow VM is: connect() returns at once (the connection waits in the
// listen backlog), and the server sees it, and sends its first HTTP/2 frame, only `delay` after
// it was accepted. One connection; the server serves it like any other.

#include <sys/socket.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <grpcpp/server_posix.h>
#include <gtest/gtest.h>

#include "base/unique_fd.h"
#include "base/unix_socket.h"

namespace stagehand::testing {

class SlowServer {
 public:
  SlowServer(const std::string& socket, grpc::Service* service, std::chrono::milliseconds delay) {
    BindOptions bind;
    bind.listen_backlog = 4;
    auto listener = BindUnixSocket(socket, SOCK_STREAM, bind);
    if (!listener.ok()) {
      ADD_FAILURE() << listener.status();
      return;
    }
    listener_ = std::move(*listener);
    grpc::ServerBuilder builder;
    builder.RegisterService(service);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr) {
      ADD_FAILURE() << "the gRPC server did not start";
      return;
    }
    acceptor_ = std::thread([this, delay] {
      const int fd = accept4(listener_.Get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        return;  // Shut down before anyone connected.
      }
      // The slowness under test, not a wait for another thread. (gRPC polls the descriptor: it
      // must not block.)
      std::this_thread::sleep_for(delay);
      grpc::AddInsecureChannelFromFd(server_.get(), fd);
    });
  }

  SlowServer(const SlowServer&) = delete;
  SlowServer& operator=(const SlowServer&) = delete;

  ~SlowServer() {
    if (listener_.Valid()) {
      shutdown(listener_.Get(), SHUT_RDWR);  // Ends an accept nobody answered.
    }
    if (acceptor_.joinable()) {
      acceptor_.join();
    }
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now());
    }
  }

 private:
  UniqueFd listener_;
  std::unique_ptr<grpc::Server> server_;
  std::thread acceptor_;
};

}  // namespace stagehand::testing
