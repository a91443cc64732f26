#pragma once

// What every stagehandctl command shares: the global flags, error and output conventions.

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include <absl/status/status.h>
#include <google/protobuf/message.h>
#include <grpcpp/client_context.h>
#include <grpcpp/support/status.h>

namespace stagehand::ctl {

// Exit status of a usage error (1: the call failed).
constexpr int kUsage = 2;

struct Common {
  std::string endpoint;
  std::string agent_socket = "/run/stagehand/agent.sock";
  std::string output = "text";
  int timeout_seconds = 120;
};

// Print "error: CODE: message" on stderr; return 1.
int Fail(const grpc::Status& s);
int Fail(const absl::Status& s);
// Print "error: message" on stderr; return kUsage.
int Usage(const std::string& message);

// `m` as indented JSON with every field.
std::string ToJson(const google::protobuf::Message& m);
// `text`, or `m` as JSON with -o json.
void Print(const Common& c, const google::protobuf::Message& m, const std::string& text);

// Where tables may cut their last column: the terminal's width, or 160 when not a terminal.
// --wide: no limit.
size_t OutputWidth(bool wide);

// The --timeout of a call.
inline std::chrono::milliseconds Timeout(const Common& c) {
  return std::chrono::seconds(c.timeout_seconds);
}

// A call context with the --timeout deadline, plus `extra_ms`.
std::unique_ptr<grpc::ClientContext> Context(const Common& c, int extra_ms = 0);

}  // namespace stagehand::ctl
