#pragma once

#include <grpcpp/support/status.h>

#include "base/status.h"

namespace stagehand::agent {

// absl and gRPC share the code space (google/rpc/code.proto), so this is a cast.
grpc::Status ToGrpcStatus(const absl::Status& s);

}  // namespace stagehand::agent
