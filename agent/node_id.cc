#include "agent/node_id.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>

namespace stagehand::agent {
namespace {

constexpr size_t kMaxSubdomainLength = 253;

bool IsLowerAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

}  // namespace

absl::Status ValidateNodeId(const std::string& node_id, bool kubernetes) {
  if (node_id.empty()) {
    return absl::InvalidArgumentError("--node-id is empty");
  }
  if (absl::StrContains(node_id, "$(")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--node-id '", node_id,
        "' holds an unexpanded variable reference: define that variable in the container's env "
        "(for example NODE_NAME from fieldRef spec.nodeName)"));
  }
  if (!kubernetes) {
    return absl::OkStatus();
  }
  auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--node-id '", node_id, "' is not a valid Kubernetes node name: ", why));
  };
  if (node_id.size() > kMaxSubdomainLength) {
    return invalid(absl::StrCat("longer than ", kMaxSubdomainLength, " characters"));
  }
  for (absl::string_view label : absl::StrSplit(node_id, '.')) {
    if (label.empty()) {
      return invalid("empty label between dots");
    }
    for (char c : label) {
      if (!IsLowerAlnum(c) && c != '-') {
        return invalid("only lower-case letters, digits, '-' and '.' are allowed");
      }
    }
    if (!IsLowerAlnum(label.front()) || !IsLowerAlnum(label.back())) {
      return invalid("each label must start and end with a letter or digit");
    }
  }
  return absl::OkStatus();
}

}  // namespace stagehand::agent
