#include "agent/grpc_status.h"

namespace stagehand::agent {

grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) {
    return grpc::Status::OK;
  }
  return {static_cast<grpc::StatusCode>(s.code()), std::string(s.message())};
}

}  // namespace stagehand::agent
