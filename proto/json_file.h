#pragma once

// Protobuf messages written as indented JSON files, atomically: our records, the plugin registry
// and the kubelet-style files next to staging paths.

#include <sys/types.h>

#include <string>

#include <google/protobuf/message.h>

#include "base/file_io.h"
#include "base/status.h"

namespace stagehand::proto {

struct JsonFileOptions {
  mode_t mode = 0600;
  Durability durability = Durability::kSynced;
  // snake_case field names as in the .proto (persisted records keep them); else lowerCamelCase.
  bool proto_field_names = false;
  // Every field, defaults too (status files people read); else only fields that are set.
  bool print_defaults = false;
};

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message,
                                   const JsonFileOptions& options = {});

absl::Status WriteJsonFile(const std::string& path, const google::protobuf::Message& message,
                           const JsonFileOptions& options = {});

}  // namespace stagehand::proto
