#pragma once

// Declarative volume manifests for the standalone agent: one YAML file declares one volume.
// Pure parsing and validation, plus the two file reads that need care (size-capped manifests,
// root-owned secrets files). Nothing here logs; callers do.
//
//   name: pg-data                      # required, [a-z0-9][a-z0-9._-]{0,62}
//   driver: iscsi.stagehand.dev        # required, CSI driver name rule
//   volumeHandle: pg-data              # required, non-empty
//   capability:                        # required
//     mount: {fsType: ext4, mountFlags: [noatime]}   # exactly one of mount / block
//     # block: {}
//     accessMode: single-node-writer   # optional; default single-node-writer
//   volumeContext: {portal: "10.0.0.5:3260", lun: 1}   # optional, string -> string
//   publishContext: {}                 # optional, string -> string
//   secretsFile: /etc/stagehand/secrets/pg.yaml        # optional, absolute
//   publish:                           # optional
//     - targetPath: /srv/pg            # required, absolute and normalised, unique
//       readOnly: false                # optional; default true for reader-only access modes
//
// Keys are camelCase; unknown and duplicate keys are errors. An explicit null (`fsType:`) is the
// same as leaving the key out, except `mount:` / `block:`, whose presence selects the kind.

#include <sys/types.h>

#include <map>
#include <string>
#include <string_view>

#include "base/status.h"
#include "reconciler/volume_spec.h"

namespace stagehand::manifests {

// Manifests and secrets files larger than this are rejected.
inline constexpr size_t kMaxManifestBytes = 1 << 20;

// Parses and validates one manifest. `file_name` only labels messages. Every failure is
// InvalidArgument with a message "<file_name>:<line>: <what is wrong and how to fix it>"
// (1-based line), including YAML syntax errors.
absl::StatusOr<reconciler::VolumeSpec> ParseManifest(std::string_view yaml,
                                                     std::string_view file_name);

// Reads `path` (a regular file, symlinks followed, at most kMaxManifestBytes) and parses it;
// messages are labelled with `path`. NotFound if it does not exist; InvalidArgument for a file
// that is too large, not a regular file, or does not parse; other read errors from errno.
absl::StatusOr<reconciler::VolumeSpec> LoadManifestFile(const std::string& path);

// InvalidArgument unless every publish target lies outside `state_dir` (neither equal to it nor
// below it). REQUIRES: `state_dir` is a clean absolute path.
absl::Status CheckTargetPaths(const reconciler::VolumeSpec& spec, const std::string& state_dir);

// Reads a secrets file: a flat YAML map of string to string. The file must not be a symlink,
// must be a regular file owned by `owner` (root for the one-argument form) and must have no
// group or "other" permission bits (mode & 0077 == 0, e.g. 0600 or 0400). The checked file is the
// read file (fstat on the opened descriptor). NotFound if missing; FailedPrecondition for a
// symlink, wrong type, owner or mode; InvalidArgument for bad content. Messages never contain
// values.
absl::StatusOr<std::map<std::string, std::string>> LoadSecretsFile(const std::string& path);
absl::StatusOr<std::map<std::string, std::string>> LoadSecretsFile(const std::string& path,
                                                                   uid_t owner);

}  // namespace stagehand::manifests
