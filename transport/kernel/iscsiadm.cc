#include "transport/kernel/iscsiadm.h"

#include <dirent.h>
#include <sys/stat.h>

#include <map>

#include <absl/strings/ascii.h>
#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>

namespace stagehand::transport::kernel {
namespace {

// iscsiadm's last error line ("iscsiadm: initiator reported error (24 - ...)"), else its last
// non-empty line. (Its stdout is flushed at exit, after the error lines on stderr.)
std::string LastLine(std::string_view output) {
  std::string last;
  std::string last_error;
  for (absl::string_view line : absl::StrSplit(ToAbsl(output), '\n', absl::SkipWhitespace())) {
    last = std::string(absl::StripAsciiWhitespace(line));
    if (absl::StartsWith(last, "iscsiadm:")) {
      last_error = last;
    }
  }
  return last_error.empty() ? last : last_error;
}

bool IsDirectory(const std::string& path) {
  struct stat st {};

  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

absl::Status IscsiadmStatus(const ProcessResult& result, std::string_view what) {
  if (result.exit_code == 0) {
    return absl::OkStatus();
  }
  const std::string detail = LastLine(result.output);
  const std::string said =
      detail.empty() ? absl::StrCat("iscsiadm exit status ", result.exit_code)
                     : absl::StrCat("iscsiadm exit status ", result.exit_code, ": ", detail);
  switch (result.exit_code) {
    case kIscsiErrLoginAuthFailed:
      return absl::UnauthenticatedError(absl::StrCat(
          "cannot ", ToAbsl(what), ": the target rejected the CHAP credentials (", said,
          "); check node.session.auth.username/password (and *_in for mutual CHAP)"));
    case kIscsiErrTransport:
    case kIscsiErrTransportTimeout:
    case kIscsiErrLogin:
      return absl::UnavailableError(absl::StrCat(
          "cannot ", ToAbsl(what), ": the portal did not answer or the login timed out (", said,
          "); check the address, port and firewall"));
    case kIscsiErrIscsidNotConnected:
      return absl::UnavailableError(absl::StrCat("cannot ", ToAbsl(what),
                                                 ": iscsid is not running (", said,
                                                 "); start iscsid (open-iscsi)"));
    case kIscsiErrFatalLogin:
      return absl::NotFoundError(
          absl::StrCat("cannot ", ToAbsl(what), ": the target refused the login (", said,
                       "); check the iqn, and that the target allows this initiator name"));
    case kIscsiErrSessionNotFound:
    case kIscsiErrNoObjectsFound:
      return absl::NotFoundError(absl::StrCat("cannot ", ToAbsl(what), ": ", said));
    default:
      return absl::InternalError(absl::StrCat("cannot ", ToAbsl(what), ": ", said));
  }
}

std::string RewriteNodeRecord(std::string_view text, const NodeRecordSettings& settings) {
  std::vector<std::pair<std::string, std::string>> set = {
      {"node.startup", "manual"},
      {"node.conn[0].startup", "manual"},
      {"node.session.scan", "manual"},
      {"node.session.initial_login_retry_max", "2"},
  };
  if (!settings.initiator_name.empty()) {
    set.emplace_back("iface.initiatorname", settings.initiator_name);
  }
  if (settings.replacement_timeout_seconds > 0) {
    set.emplace_back("node.session.timeo.replacement_timeout",
                     absl::StrCat(settings.replacement_timeout_seconds));
  }
  if (settings.chap) {
    const iscsi::ChapCredentials& c = *settings.chap;
    set.emplace_back("node.session.auth.authmethod", "CHAP");
    set.emplace_back("node.session.auth.username", c.user);
    set.emplace_back("node.session.auth.password", c.secret);
    if (!c.user_in.empty()) {
      set.emplace_back("node.session.auth.username_in", c.user_in);
      set.emplace_back("node.session.auth.password_in", c.secret_in);
    }
  } else {
    set.emplace_back("node.session.auth.authmethod", "None");
  }
  auto ours = [&set](absl::string_view name) {
    if (absl::StartsWith(name, "node.session.auth.")) {
      return true;  // Every CHAP line is ours: stale mutual settings must not survive.
    }
    for (const auto& [key, value] : set) {
      if (name == key) {
        return true;
      }
    }
    return false;
  };
  std::string out;
  for (absl::string_view line : absl::StrSplit(ToAbsl(text), '\n', absl::SkipEmpty())) {
    const absl::string_view name =
        absl::StripAsciiWhitespace(line.substr(0, std::min(line.find('='), line.size())));
    if (!absl::StartsWith(absl::StripLeadingAsciiWhitespace(line), "#") && ours(name)) {
      continue;
    }
    absl::StrAppend(&out, line, "\n");
  }
  for (const auto& [key, value] : set) {
    absl::StrAppend(&out, key, " = ", value, "\n");
  }
  return out;
}

std::optional<iscsi::ChapCredentials> NodeRecordChap(std::string_view text) {
  std::map<std::string, std::string, std::less<>> auth;
  for (absl::string_view line : absl::StrSplit(ToAbsl(text), '\n', absl::SkipEmpty())) {
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos ||
        absl::StartsWith(absl::StripLeadingAsciiWhitespace(line), "#")) {
      continue;
    }
    const absl::string_view name = absl::StripAsciiWhitespace(line.substr(0, eq));
    if (absl::StartsWith(name, "node.session.auth.")) {
      auth[std::string(name)] = std::string(absl::StripAsciiWhitespace(line.substr(eq + 1)));
    }
  }
  if (auth["node.session.auth.authmethod"] != "CHAP") {
    return std::nullopt;
  }
  return iscsi::ChapCredentials{
      auth["node.session.auth.username"], auth["node.session.auth.password"],
      auth["node.session.auth.username_in"], auth["node.session.auth.password_in"]};
}

absl::StatusOr<std::string> FindNodeRecordFile(const std::string& nodes_dir, const std::string& iqn,
                                               const iscsi::Portal& portal) {
  const std::string target_dir = absl::StrCat(nodes_dir, "/", iqn);
  // "<address>,<port>" when the target portal group tag is unknown (a record made with -o new),
  // "<address>,<port>,<tpgt>" when it came from discovery.
  const std::string exact = absl::StrCat(portal.host, ",", portal.port);
  const std::string prefix = exact + ",";
  DIR* dir = ::opendir(target_dir.c_str());
  if (dir == nullptr) {
    return absl::NotFoundError(absl::StrCat("no node records for ", iqn, " in ", nodes_dir));
  }
  std::string found;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name == exact || absl::StartsWith(e->d_name, prefix)) {
      found = absl::StrCat(target_dir, "/", e->d_name);
      break;
    }
  }
  ::closedir(dir);
  if (found.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no node record for ", iqn, " at ", portal.ToString(), " in ", nodes_dir));
  }
  return IsDirectory(found) ? found + "/default" : found;
}

}  // namespace stagehand::transport::kernel
