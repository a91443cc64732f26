#include "proto/json_file.h"

#include <google/protobuf/util/json_util.h>

namespace stagehand::proto {

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message,
                                   const JsonFileOptions& options) {
  std::string json;
  google::protobuf::util::JsonPrintOptions print;
  print.add_whitespace = true;
  print.preserve_proto_field_names = options.proto_field_names;
  print.always_print_primitive_fields = options.print_defaults;
  auto printed = google::protobuf::util::MessageToJsonString(message, &json, print);
  if (!printed.ok()) {
    return absl::InternalError(std::string(printed.message()));
  }
  return json;
}

absl::Status WriteJsonFile(const std::string& path, const google::protobuf::Message& message,
                           const JsonFileOptions& options) {
  SH_ASSIGN_OR_RETURN(std::string json, ToJson(message, options));
  return WriteFileAtomically(path, json, options.mode, options.durability);
}

}  // namespace stagehand::proto
