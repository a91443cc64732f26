#include "ctl/cli.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <iostream>

#include <google/protobuf/util/json_util.h>

namespace stagehand::ctl {

int Fail(const grpc::Status& s) {
  // gRPC's codes are absl's, one for one.
  std::cerr << "error: " << absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code()))
            << ": " << s.error_message() << "\n";
  return 1;
}

int Fail(const absl::Status& s) {
  std::cerr << "error: " << absl::StatusCodeToString(s.code()) << ": " << s.message() << "\n";
  return 1;
}

int Usage(const std::string& message) {
  std::cerr << "error: " << message << "\n";
  return kUsage;
}

std::string ToJson(const google::protobuf::Message& m) {
  std::string json;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(m, &json, o);
  return json;
}

void Print(const Common& c, const google::protobuf::Message& m, const std::string& text) {
  std::cout << (c.output == "json" ? ToJson(m) : text) << std::flush;
}

size_t OutputWidth(bool wide) {
  if (wide) {
    return 0;
  }
  winsize ws{};
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
    return ws.ws_col;
  }
  return 160;
}

std::unique_ptr<grpc::ClientContext> Context(const Common& c, int extra_ms) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(c.timeout_seconds) +
                    std::chrono::milliseconds(extra_ms));
  return ctx;
}

}  // namespace stagehand::ctl
