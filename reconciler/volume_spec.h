#pragma once

// What a host should have: one declared volume, as read from a manifest. Plain data; the
// reconciler never sees gRPC or YAML types.

#include <map>
#include <string>
#include <vector>

namespace stagehand::reconciler {

enum class AccessMode {
  kSingleNodeWriter,
  kSingleNodeReaderOnly,
  kSingleNodeSingleWriter,
  kSingleNodeMultiWriter,
  kMultiNodeReaderOnly,
  kMultiNodeSingleWriter,
  kMultiNodeMultiWriter,
};

struct Capability {
  bool block = false;
  std::string fs_type;  // Mount only; empty = the driver's default.
  std::vector<std::string> mount_flags;
  AccessMode access_mode = AccessMode::kSingleNodeWriter;

  bool operator==(const Capability&) const = default;
};

struct PublishTarget {
  std::string target_path;  // Absolute, normalised.
  bool read_only = false;

  bool operator==(const PublishTarget&) const = default;
};

struct VolumeSpec {
  std::string name;  // Unique per host; [a-z0-9][a-z0-9._-]{0,62}.
  std::string driver;
  std::string volume_handle;
  Capability capability;
  std::map<std::string, std::string> volume_context;
  std::map<std::string, std::string> publish_context;
  std::string secrets_file;  // Read when staging; empty = no secrets.
  std::vector<PublishTarget> publish;

  bool operator==(const VolumeSpec&) const = default;
};

}  // namespace stagehand::reconciler
