#include "manifests/manifest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <initializer_list>
#include <utility>
#include <vector>

#include <absl/strings/ascii.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "base/paths.h"
#include "base/unique_fd.h"

namespace stagehand::manifests {
namespace {

using reconciler::AccessMode;
using reconciler::Capability;
using reconciler::PublishTarget;
using reconciler::VolumeSpec;
using Keys = std::initializer_list<std::string_view>;

constexpr std::array<std::pair<std::string_view, AccessMode>, 7> kAccessModes{{
    {"single-node-writer", AccessMode::kSingleNodeWriter},
    {"single-node-reader-only", AccessMode::kSingleNodeReaderOnly},
    {"single-node-single-writer", AccessMode::kSingleNodeSingleWriter},
    {"single-node-multi-writer", AccessMode::kSingleNodeMultiWriter},
    {"multi-node-reader-only", AccessMode::kMultiNodeReaderOnly},
    {"multi-node-single-writer", AccessMode::kMultiNodeSingleWriter},
    {"multi-node-multi-writer", AccessMode::kMultiNodeMultiWriter},
}};

bool IsReadOnlyMode(AccessMode mode) {
  return mode == AccessMode::kSingleNodeReaderOnly || mode == AccessMode::kMultiNodeReaderOnly;
}

bool IsLowerAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

bool IsAlnum(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c));
}

// [a-z0-9][a-z0-9._-]{0,62}
bool IsValidVolumeName(std::string_view s) {
  if (s.empty() || s.size() > 63 || !IsLowerAlnum(s.front())) {
    return false;
  }
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return IsLowerAlnum(c) || c == '.' || c == '_' || c == '-'; });
}

// The CSI spec's rule for GetPluginInfoResponse.name: at most 63 characters, beginning and ending
// with an alphanumeric, with '-', '.' and alphanumerics between.
bool IsValidDriverName(std::string_view s) {
  if (s.empty() || s.size() > 63 || !IsAlnum(s.front()) || !IsAlnum(s.back())) {
    return false;
  }
  return std::all_of(s.begin(), s.end(), [](char c) { return IsAlnum(c) || c == '.' || c == '-'; });
}

std::string Quoted(Keys keys) {
  std::vector<std::string> out;
  for (std::string_view k : keys) {
    out.push_back(absl::StrCat("'", ToAbsl(k), "'"));
  }
  return absl::StrJoin(out, ", ");
}

struct Entry {
  YAML::Node key;
  YAML::Node value;  // Null when written as `key:` with nothing after it.
};

using Fields = std::map<std::string, Entry>;

// Turns YAML nodes into checked values; every error names the file and the 1-based line.
class Parser {
 public:
  explicit Parser(std::string_view file) : file_(file) {}

  absl::Status Error(const YAML::Node& at, std::string_view what) const {
    const YAML::Mark mark = at.Mark();
    if (mark.is_null()) {
      return absl::InvalidArgumentError(absl::StrCat(ToAbsl(file_), ": ", ToAbsl(what)));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(ToAbsl(file_), ":", mark.line + 1, ": ", ToAbsl(what)));
  }

  // The entries of the map `node` (a null node is an empty map). Keys must be strings, unique and
  // in `allowed` (any key when it is empty). `where` says where the map is, for messages ("in
  // 'capability'").
  absl::StatusOr<Fields> Map(const YAML::Node& node, std::string_view where, Keys allowed) const {
    Fields fields;
    if (node.IsNull()) {
      return fields;
    }
    if (!node.IsMap()) {
      return Error(node, absl::StrCat("expected a map of key: value ", ToAbsl(where)));
    }
    for (const auto& kv : node) {
      const YAML::Node key = kv.first;  // Copies: YAML::Node is a handle.
      if (!key.IsScalar()) {
        return Error(key, absl::StrCat("keys ", ToAbsl(where), " must be strings"));
      }
      const std::string& name = key.Scalar();
      if (allowed.size() > 0 && std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
        return Error(key, absl::StrCat("unknown key '", name, "' ", ToAbsl(where),
                                       "; allowed keys: ", Quoted(allowed)));
      }
      if (auto [_, inserted] = fields.emplace(name, Entry{key, kv.second}); !inserted) {
        return Error(key, absl::StrCat("duplicate key '", name, "' ", ToAbsl(where),
                                       "; remove one of them"));
      }
    }
    return fields;
  }

  // The value of `key` in `fields`; nullptr when absent or null.
  static const Entry* Find(const Fields& fields, const std::string& key) {
    auto it = fields.find(key);
    if (it == fields.end() || it->second.value.IsNull()) {
      return nullptr;
    }
    return &it->second;
  }

  absl::StatusOr<std::string> String(const Entry& e, std::string_view what) const {
    if (!e.value.IsScalar()) {
      return Error(e.key, absl::StrCat(ToAbsl(what), " must be a string"));
    }
    return e.value.Scalar();
  }

  // A required string field; `map_node` locates the message when the key is missing.
  absl::StatusOr<std::string> Required(const Fields& fields, const YAML::Node& map_node,
                                       const std::string& key, std::string_view where) const {
    const Entry* e = Find(fields, key);
    if (e == nullptr) {
      return Error(map_node, absl::StrCat("missing required key '", key, "' ", ToAbsl(where)));
    }
    SH_ASSIGN_OR_RETURN(std::string value, String(*e, absl::StrCat("'", key, "'")));
    if (value.empty()) {
      return Error(e->key, absl::StrCat("'", key, "' must not be empty"));
    }
    return value;
  }

  // A map of string to string; scalar values are taken as their text (`lun: 1` is "1").
  // Messages name keys, never values (secrets files use this too).
  absl::StatusOr<std::map<std::string, std::string>> StringMap(const YAML::Node& node,
                                                               std::string_view where) const {
    SH_ASSIGN_OR_RETURN(Fields fields, Map(node, where, {}));
    std::map<std::string, std::string> out;
    for (const auto& [key, e] : fields) {
      if (!e.value.IsScalar()) {
        return Error(e.key, absl::StrCat("the value of '", key, "' ", ToAbsl(where),
                                         " must be a string (quote it)"));
      }
      out.emplace(key, e.value.Scalar());
    }
    return out;
  }

  absl::StatusOr<std::vector<std::string>> StringList(const Entry& e, std::string_view what) const {
    if (!e.value.IsSequence()) {
      return Error(e.key, absl::StrCat(ToAbsl(what), " must be a list of strings, e.g. [noatime]"));
    }
    std::vector<std::string> out;
    for (const YAML::Node& item : e.value) {
      if (!item.IsScalar() || item.Scalar().empty()) {
        return Error(item, absl::StrCat(ToAbsl(what), " must hold non-empty strings only"));
      }
      out.push_back(item.Scalar());
    }
    return out;
  }

  absl::StatusOr<bool> Bool(const Entry& e, std::string_view what) const {
    bool value = false;
    if (!e.value.IsScalar() || !YAML::convert<bool>::decode(e.value, value)) {
      return Error(e.key, absl::StrCat(ToAbsl(what), " must be true or false"));
    }
    return value;
  }

  absl::StatusOr<VolumeSpec> Volume(const YAML::Node& root) const;

 private:
  absl::StatusOr<Capability> ParseCapability(const Entry& e) const;
  absl::StatusOr<std::vector<PublishTarget>> ParsePublish(const Entry& e, AccessMode mode) const;

  std::string_view file_;
};

absl::StatusOr<Capability> Parser::ParseCapability(const Entry& e) const {
  constexpr std::string_view kWhere = "in 'capability'";
  if (!e.value.IsMap()) {
    return Error(e.key, "'capability' must be a map with 'mount' or 'block' and 'accessMode'");
  }
  SH_ASSIGN_OR_RETURN(Fields fields, Map(e.value, kWhere, {"mount", "block", "accessMode"}));
  Capability cap;
  const auto mount = fields.find("mount");
  const auto block = fields.find("block");
  if ((mount == fields.end()) == (block == fields.end())) {
    return Error(e.key,
                 "'capability' needs exactly one of 'mount' (a filesystem) or 'block: {}' "
                 "(a raw block device)");
  }
  if (block != fields.end()) {
    cap.block = true;
    SH_ASSIGN_OR_RETURN(Fields b, Map(block->second.value, "in 'capability.block'", {}));
    if (!b.empty()) {
      return Error(
          b.begin()->second.key,
          absl::StrCat("unknown key '", b.begin()->first,
                       "' in 'capability.block'; 'block' takes no keys (write 'block: {}')"));
    }
  } else {
    SH_ASSIGN_OR_RETURN(
        Fields m, Map(mount->second.value, "in 'capability.mount'", {"fsType", "mountFlags"}));
    if (const Entry* fs = Find(m, "fsType")) {
      SH_ASSIGN_OR_RETURN(cap.fs_type, String(*fs, "'fsType'"));
    }
    if (const Entry* flags = Find(m, "mountFlags")) {
      SH_ASSIGN_OR_RETURN(cap.mount_flags, StringList(*flags, "'mountFlags'"));
    }
  }
  if (const Entry* mode = Find(fields, "accessMode")) {
    SH_ASSIGN_OR_RETURN(std::string text, String(*mode, "'accessMode'"));
    auto it = std::find_if(kAccessModes.begin(), kAccessModes.end(),
                           [&](const auto& m) { return m.first == text; });
    if (it == kAccessModes.end()) {
      std::vector<std::string> names;
      for (const auto& m : kAccessModes) {
        names.emplace_back(m.first);
      }
      return Error(mode->key, absl::StrCat("unknown accessMode '", text,
                                           "'; use one of: ", absl::StrJoin(names, ", ")));
    }
    cap.access_mode = it->second;
  }
  return cap;
}

absl::StatusOr<std::vector<PublishTarget>> Parser::ParsePublish(const Entry& e,
                                                                AccessMode mode) const {
  if (!e.value.IsSequence()) {
    return Error(e.key, "'publish' must be a list of {targetPath, readOnly} entries");
  }
  std::vector<PublishTarget> out;
  std::map<std::string, int> seen;  // Target path -> 1-based line.
  for (const YAML::Node& item : e.value) {
    constexpr std::string_view kWhere = "in a 'publish' entry";
    if (!item.IsMap()) {
      return Error(item, "each 'publish' entry must be a map with 'targetPath' and 'readOnly'");
    }
    SH_ASSIGN_OR_RETURN(Fields fields, Map(item, kWhere, {"targetPath", "readOnly"}));
    PublishTarget target;
    SH_ASSIGN_OR_RETURN(target.target_path, Required(fields, item, "targetPath", kWhere));
    const YAML::Node& path_key = fields.at("targetPath").key;
    if (!IsCleanAbsolutePath(target.target_path)) {
      return Error(path_key, absl::StrCat("targetPath '", target.target_path,
                                          "' must be an absolute, normalised path (no '.', "
                                          "'..', '//' or trailing '/')"));
    }
    const int line = path_key.Mark().line + 1;
    if (auto [it, inserted] = seen.emplace(target.target_path, line); !inserted) {
      return Error(path_key, absl::StrCat("targetPath '", target.target_path,
                                          "' is already published on line ", it->second,
                                          "; each target may appear once"));
    }
    target.read_only = IsReadOnlyMode(mode);
    if (const Entry* ro = Find(fields, "readOnly")) {
      SH_ASSIGN_OR_RETURN(target.read_only, Bool(*ro, "'readOnly'"));
      if (!target.read_only && IsReadOnlyMode(mode)) {
        return Error(ro->key,
                     "readOnly: false contradicts the read-only accessMode; set "
                     "readOnly: true or choose a writer accessMode");
      }
    }
    out.push_back(std::move(target));
  }
  return out;
}

absl::StatusOr<VolumeSpec> Parser::Volume(const YAML::Node& root) const {
  constexpr std::string_view kWhere = "at the top level";
  const Keys top_keys = {"name",          "driver",         "volumeHandle", "capability",
                         "volumeContext", "publishContext", "secretsFile",  "publish"};
  if (!root.IsMap()) {
    return Error(root, absl::StrCat("a manifest must be a map with the keys ", Quoted(top_keys)));
  }
  SH_ASSIGN_OR_RETURN(Fields fields, Map(root, kWhere, top_keys));
  VolumeSpec spec;
  SH_ASSIGN_OR_RETURN(spec.name, Required(fields, root, "name", kWhere));
  if (!IsValidVolumeName(spec.name)) {
    return Error(fields.at("name").key,
                 absl::StrCat("name '", spec.name,
                              "' is not valid: use up to 63 characters of a-z, 0-9, '.', '_' and "
                              "'-', starting with a letter or digit"));
  }
  SH_ASSIGN_OR_RETURN(spec.driver, Required(fields, root, "driver", kWhere));
  if (!IsValidDriverName(spec.driver)) {
    return Error(fields.at("driver").key,
                 absl::StrCat("driver '", spec.driver,
                              "' is not a CSI driver name: use up to 63 characters of letters, "
                              "digits, '-' and '.', beginning and ending with a letter or digit"));
  }
  SH_ASSIGN_OR_RETURN(spec.volume_handle, Required(fields, root, "volumeHandle", kWhere));
  const Entry* cap = Find(fields, "capability");
  if (cap == nullptr) {
    return Error(root,
                 "missing required key 'capability' at the top level (e.g. capability: "
                 "{mount: {fsType: ext4}})");
  }
  SH_ASSIGN_OR_RETURN(spec.capability, ParseCapability(*cap));
  if (const Entry* e = Find(fields, "volumeContext")) {
    SH_ASSIGN_OR_RETURN(spec.volume_context, StringMap(e->value, "in 'volumeContext'"));
  }
  if (const Entry* e = Find(fields, "publishContext")) {
    SH_ASSIGN_OR_RETURN(spec.publish_context, StringMap(e->value, "in 'publishContext'"));
  }
  if (const Entry* e = Find(fields, "secretsFile")) {
    SH_ASSIGN_OR_RETURN(spec.secrets_file, String(*e, "'secretsFile'"));
    if (!IsCleanAbsolutePath(spec.secrets_file)) {
      return Error(e->key, absl::StrCat("secretsFile '", spec.secrets_file,
                                        "' must be an absolute, normalised path"));
    }
  }
  if (const Entry* e = Find(fields, "publish")) {
    SH_ASSIGN_OR_RETURN(spec.publish, ParsePublish(*e, spec.capability.access_mode));
  }
  return spec;
}

// Parses exactly one YAML document; no document, or a null one, is "file is empty".
absl::StatusOr<YAML::Node> LoadOneDocument(std::string_view yaml, std::string_view file,
                                           bool quote_parse_errors) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(std::string(yaml));
  } catch (const YAML::Exception& e) {
    // yaml-cpp's messages can quote a character of the input; secrets files withhold them.
    std::string what = quote_parse_errors
                           ? absl::StrCat("invalid YAML: ", e.msg)
                           : "invalid YAML (details withheld: the file holds secrets)";
    const std::string where = e.mark.is_null() ? std::string(ToAbsl(file))
                                               : absl::StrCat(ToAbsl(file), ":", e.mark.line + 1);
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
  }
  if (docs.empty() || (docs.size() == 1 && docs[0].IsNull())) {
    return absl::InvalidArgumentError(absl::StrCat(ToAbsl(file), ":1: file is empty"));
  }
  if (docs.size() > 1) {
    const YAML::Mark mark = docs[1].Mark();
    return absl::InvalidArgumentError(
        absl::StrCat(ToAbsl(file), ":", mark.is_null() ? 1 : mark.line + 1,
                     ": more than one YAML document ('---'); put each volume in its own file"));
  }
  return docs[0];
}

// Reads at most kMaxManifestBytes from `fd`.
absl::StatusOr<std::string> ReadCapped(int fd, const std::string& path) {
  std::string out;
  std::array<char, 8192> buf{};
  while (true) {
    const ssize_t n = read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return ErrnoStatus(errno, absl::StrCat("read '", path, "'"));
    }
    if (n == 0) {
      return out;
    }
    out.append(buf.data(), static_cast<size_t>(n));
    if (out.size() > kMaxManifestBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": file is larger than 1 MiB; it must hold one volume"));
    }
  }
}

}  // namespace

absl::StatusOr<VolumeSpec> ParseManifest(std::string_view yaml, std::string_view file_name) {
  SH_ASSIGN_OR_RETURN(YAML::Node root, LoadOneDocument(yaml, file_name, true));
  try {
    return Parser(file_name).Volume(root);
  } catch (const YAML::Exception& e) {
    // Not expected once the document parsed; kept at the boundary so nothing escapes.
    return absl::InvalidArgumentError(absl::StrCat(ToAbsl(file_name), ": ", e.what()));
  }
}

absl::StatusOr<VolumeSpec> LoadManifestFile(const std::string& path) {
  // O_NONBLOCK: a FIFO named *.yaml must not block the caller; it is rejected below.
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd) {
    return ErrnoStatus(errno, absl::StrCat("open '", path, "'"));
  }

  struct stat st {};

  if (fstat(fd.Get(), &st) != 0) {
    return ErrnoStatus(errno, absl::StrCat("stat '", path, "'"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file; a manifest must be a regular file"));
  }
  SH_ASSIGN_OR_RETURN(std::string text, ReadCapped(fd.Get(), path));
  return ParseManifest(text, path);
}

absl::Status CheckTargetPaths(const VolumeSpec& spec, const std::string& state_dir) {
  for (const PublishTarget& target : spec.publish) {
    if (IsPathWithin(target.target_path, state_dir)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "volume '", spec.name, "': targetPath '", target.target_path,
          "' is inside stagehand's state directory '", state_dir, "'; publish it elsewhere"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, std::string>> LoadSecretsFile(const std::string& path) {
  return LoadSecretsFile(path, 0);
}

absl::StatusOr<std::map<std::string, std::string>> LoadSecretsFile(const std::string& path,
                                                                   uid_t owner) {
  // O_NOFOLLOW: a symlink would let whoever controls its directory swap the target.
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY));
  if (!fd && errno == ELOOP) {
    return absl::FailedPreconditionError(absl::StrCat(
        "secrets file '", path, "' is a symbolic link; point secretsFile at the file itself"));
  }
  if (!fd) {
    return ErrnoStatus(errno, absl::StrCat("open secrets file '", path, "'"));
  }

  struct stat st {};

  if (fstat(fd.Get(), &st) != 0) {
    return ErrnoStatus(errno, absl::StrCat("stat secrets file '", path, "'"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("secrets file '", path, "' is not a regular file"));
  }
  if (st.st_uid != owner) {
    return absl::FailedPreconditionError(
        absl::StrCat("secrets file '", path, "' is owned by uid ", st.st_uid, "; run: chown ",
                     owner == 0 ? "root" : absl::StrCat(owner), " '", path, "'"));
  }
  if ((st.st_mode & 0077) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "secrets file '", path, "' has mode ", fmt::format("{:04o}", st.st_mode & 07777),
        " (accessible to group or others); run: chmod 0600 '", path, "'"));
  }
  SH_ASSIGN_OR_RETURN(std::string text, ReadCapped(fd.Get(), path));
  SH_ASSIGN_OR_RETURN(YAML::Node root, LoadOneDocument(text, path, false));
  try {
    Parser parser(path);
    if (!root.IsMap()) {
      return parser.Error(root, "a secrets file must be a flat map of key: value");
    }
    return parser.StringMap(root, "in the secrets file");
  } catch (const YAML::Exception&) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot read the secrets map"));
  }
}

}  // namespace stagehand::manifests
