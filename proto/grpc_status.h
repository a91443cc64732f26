#pragma once

// Status conversions at the gRPC boundary. absl and gRPC share the code space
// (google/rpc/code.proto), so the codes are cast.

#include <string_view>

#include <grpcpp/support/status.h>

#include "base/status.h"

namespace stagehand {

grpc::Status ToGrpcStatus(const absl::Status& s);

// A failed call as "<what>: <message>" with the call's code; OK stays OK.
absl::Status FromGrpcStatus(const grpc::Status& s, std::string_view what);

}  // namespace stagehand
