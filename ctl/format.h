#pragma once

// stagehandctl's pure helpers: argument parsing and the tables people read. No I/O.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <google/protobuf/struct.pb.h>

#include "base/status.h"
#include "proto/agent.pb.h"

namespace stagehand::ctl {

// A gRPC target for a unix socket given as "/path", "unix:/path" or "unix:///path". Anything
// else (e.g. "dns:host:port") is returned unchanged.
std::string UnixTarget(std::string_view endpoint);

// Adds each "key=value" of `items` to `out` (later items win). InvalidArgument naming `flag` and
// the item when one has no '=' or an empty key. Values may contain '='.
absl::Status ParseKeyValues(const std::vector<std::string>& items, std::string_view flag,
                            std::map<std::string, std::string>* out);

// `s` on one line (newlines and tabs become spaces), cut to `width` characters with "..." at
// the end when longer. width 0: no limit.
std::string Truncate(std::string_view s, size_t width);

// "1.0 GiB", "512 B".
std::string HumanBytes(uint64_t bytes);

// A plain text table: columns padded to their widest cell and separated by two spaces; the last
// column is not padded and is the one cut to fit.
class Table {
 public:
  explicit Table(std::vector<std::string> headers) : rows_{std::move(headers)} {}

  // REQUIRES: as many cells as headers.
  void AddRow(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }

  // Lines end in '\n'. max_width 0: no limit; otherwise the last column is cut so that lines fit,
  // but never to less than 24 characters.
  std::string Render(size_t max_width) const;

 private:
  std::vector<std::vector<std::string>> rows_;  // rows_[0] holds the headers.
};

// `agent status`: key/value lines, then the problems.
std::string FormatStatus(const agent::v1::AgentStatus& s);

// `agent volumes`: the table, then manifest errors. See Table::Render for max_width.
std::string FormatVolumes(const agent::v1::ListVolumesResponse& r, size_t max_width);

// `agent plugins`: the table, then pending registration sockets with their errors.
std::string FormatPlugins(const agent::v1::ListPluginsResponse& r, size_t max_width);

// Values for `-o json` documents built as google.protobuf.Struct.
google::protobuf::Value StringValue(const std::string& s);
google::protobuf::Value NumberValue(double d);

}  // namespace stagehand::ctl
