#include "iscsi/initiator_name.h"

#include <unistd.h>

#include <array>
#include <random>

#include <absl/strings/ascii.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>
#include <absl/strings/strip.h>

#include "base/file_io.h"
#include "base/paths.h"
#include "iscsi/target_spec.h"

namespace stagehand::iscsi {

std::string InitiatorNameFromConf(std::string_view text) {
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (absl::ConsumePrefix(&line, "InitiatorName=")) {
      return std::string(absl::StripAsciiWhitespace(line));
    }
  }
  return "";
}

absl::StatusOr<std::string> ResolveInitiatorName(const std::string& flag,
                                                 const std::string& iscsi_conf,
                                                 const std::string& state_dir) {
  if (!flag.empty()) {
    if (!iscsi::IsValidTargetName(flag)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--initiator-name '", flag, "' is not an iSCSI name (iqn.YYYY-MM.domain[:id])"));
    }
    return flag;
  }
  if (auto conf = ReadFileToString(iscsi_conf); conf.ok()) {
    if (std::string name = InitiatorNameFromConf(*conf); !name.empty()) {
      return name;
    }
  }
  const std::string stored = JoinPath(state_dir, "initiatorname");
  if (auto text = ReadFileToString(stored); text.ok()) {
    if (std::string name = InitiatorNameFromConf(*text); !name.empty()) {
      return name;
    }
  }
  std::array<char, 256> host{};
  gethostname(host.data(), host.size() - 1);
  std::string h = absl::AsciiStrToLower(host.data());
  for (char& c : h) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') {
      c = '-';
    }
  }
  std::random_device rd;
  const std::string name = absl::StrCat("iqn.2026-11.dev.stagehand:", h.empty() ? "node" : h, ".",
                                        absl::Hex(static_cast<uint32_t>(rd()), absl::kZeroPad8));
  SH_RETURN_IF_ERROR(MakeDirs(state_dir, 0700));
  SH_RETURN_IF_ERROR(WriteFileAtomically(stored, absl::StrCat("InitiatorName=", name, "\n"), 0644));
  return name;
}

}  // namespace stagehand::iscsi
