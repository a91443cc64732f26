#include "proto/grpc_status.h"

#include <absl/strings/str_cat.h>

namespace stagehand {

grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) {
    return grpc::Status::OK;
  }
  return {static_cast<grpc::StatusCode>(s.code()), std::string(s.message())};
}

absl::Status FromGrpcStatus(const grpc::Status& s, std::string_view what) {
  if (s.ok()) {
    return absl::OkStatus();
  }
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(ToAbsl(what), ": ", s.error_message()));
}

}  // namespace stagehand
