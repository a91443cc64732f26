#include "transport/kernel/kernel_sysfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include <absl/strings/ascii.h>
#include <absl/strings/match.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>

#include "base/file_io.h"
#include "base/unique_fd.h"
#include "iscsi/target_spec.h"

namespace stagehand::transport::kernel {
namespace {

std::vector<std::string> ListDir(const std::string& path) {
  std::vector<std::string> names;
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) {
    return names;
  }
  while (const dirent* e = ::readdir(dir)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      names.emplace_back(e->d_name);
    }
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

std::string ReadTrimmed(const std::string& path) {
  auto text = ReadFileToString(path);
  return text.ok() ? std::string(absl::StripAsciiWhitespace(*text)) : std::string();
}

std::optional<std::vector<uint8_t>> ReadBinary(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) {
    return std::nullopt;
  }
  return std::vector<uint8_t>(text->begin(), text->end());
}

std::string RealPath(const std::string& path) {
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) != nullptr ? std::string(buf) : std::string();
}

std::string Basename(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// One write(2) of the whole value, as sysfs attributes want it.
absl::Status WriteSysfs(const std::string& path, std::string_view value) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) {
    return ErrnoStatus(errno, absl::StrCat("open '", path, "'"));
  }
  if (::write(fd.Get(), value.data(), value.size()) != static_cast<ssize_t>(value.size())) {
    return ErrnoStatus(errno, absl::StrCat("write '", ToAbsl(value), "' to '", path, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<KernelSession> KernelSysfs::Sessions() const {
  std::vector<KernelSession> out;
  const std::string class_dir = root_ + "/class/iscsi_session";
  for (const std::string& name : ListDir(class_dir)) {
    KernelSession s;
    if (!absl::StartsWith(name, "session") || !absl::SimpleAtoi(name.substr(7), &s.sid)) {
      continue;
    }
    const std::string dir = absl::StrCat(class_dir, "/", name);
    s.iqn = ReadTrimmed(dir + "/targetname");
    s.state = ReadTrimmed(dir + "/state");
    const std::string conn = absl::StrCat(root_, "/class/iscsi_connection/connection", s.sid, ":0");
    s.address = ReadTrimmed(conn + "/persistent_address");
    if (s.address.empty()) {
      s.address = ReadTrimmed(conn + "/address");
    }
    std::string port = ReadTrimmed(conn + "/persistent_port");
    if (port.empty()) {
      port = ReadTrimmed(conn + "/port");
    }
    uint32_t p = 0;
    if (absl::SimpleAtoi(port, &p)) {
      s.port = static_cast<uint16_t>(p);
    }
    const std::string host = Basename(RealPath(dir + "/device/.."));
    if (!absl::StartsWith(host, "host") || !absl::SimpleAtoi(host.substr(4), &s.host)) {
      continue;
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::optional<KernelSession> KernelSysfs::FindSession(std::string_view iqn,
                                                      std::string_view address,
                                                      uint16_t port) const {
  for (KernelSession& s : Sessions()) {
    if (s.iqn == iqn && s.port == port && iscsi::SameAddress(s.address, address)) {
      return std::move(s);
    }
  }
  return std::nullopt;
}

std::vector<ScsiDisk> KernelSysfs::SessionDisks(const KernelSession& session) const {
  std::vector<ScsiDisk> out;
  const std::string dir =
      absl::StrCat(root_, "/class/iscsi_session/session", session.sid, "/device");
  for (const std::string& target : ListDir(dir)) {
    if (!absl::StartsWith(target, "target")) {
      continue;
    }
    for (const std::string& hctl : ListDir(absl::StrCat(dir, "/", target))) {
      std::vector<std::string> parts = absl::StrSplit(hctl, ':');
      ScsiDisk d;
      if (parts.size() != 4 || !absl::SimpleAtoi(parts[3], &d.lun)) {
        continue;
      }
      d.hctl = hctl;
      const std::vector<std::string> blocks =
          ListDir(absl::StrCat(dir, "/", target, "/", hctl, "/block"));
      if (!blocks.empty()) {
        d.disk = blocks.front();
      }
      out.push_back(std::move(d));
    }
  }
  return out;
}

std::optional<ScsiDisk> KernelSysfs::SessionDisk(const KernelSession& session, uint32_t lun) const {
  for (ScsiDisk& d : SessionDisks(session)) {
    if (d.lun == lun) {
      return std::move(d);
    }
  }
  return std::nullopt;
}

absl::Status KernelSysfs::ScanLun(int host, uint32_t lun) const {
  const std::string path = absl::StrCat(root_, "/class/scsi_host/host", host, "/scan");
  return WithContext(WriteSysfs(path, absl::StrCat("- - ", lun)),
                     absl::StrCat("scan LUN ", lun, " on SCSI host ", host));
}

std::string KernelSysfs::BlockPath(std::string_view name) const {
  return absl::StrCat(root_, "/class/block/", ToAbsl(name));
}

absl::StatusOr<iscsi::LunIdentity> KernelSysfs::DiskIdentity(std::string_view disk) const {
  const std::string dev = BlockPath(disk) + "/device";
  iscsi::LunIdentity id;
  if (auto page = ReadBinary(dev + "/vpd_pg83")) {
    SH_ASSIGN_OR_RETURN(id.designators, iscsi::ParseDeviceIdentificationPage(*page));
  } else {
    return absl::UnavailableError(absl::StrCat("cannot read ", dev, "/vpd_pg83 (", ToAbsl(disk),
                                               " is gone, or the LUN has no VPD page 0x83)"));
  }
  if (auto page = ReadBinary(dev + "/vpd_pg80")) {
    SH_ASSIGN_OR_RETURN(id.serial, iscsi::ParseUnitSerialPage(*page));
  }
  id.vendor = ReadTrimmed(dev + "/vendor");
  id.product = ReadTrimmed(dev + "/model");
  return id;
}

absl::StatusOr<iscsi::LunCapacity> KernelSysfs::Capacity(std::string_view block) const {
  const std::string dir = BlockPath(block);
  uint64_t sectors = 0;
  uint32_t block_size = 0;
  if (!absl::SimpleAtoi(ReadTrimmed(dir + "/size"), &sectors) ||
      !absl::SimpleAtoi(ReadTrimmed(dir + "/queue/logical_block_size"), &block_size) ||
      block_size == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot read the size of ", ToAbsl(block), " from ", dir));
  }
  iscsi::LunCapacity c;
  c.block_size = block_size;
  c.blocks = sectors * 512 / block_size;
  return c;
}

std::string KernelSysfs::DiskState(std::string_view disk) const {
  return ReadTrimmed(BlockPath(disk) + "/device/state");
}

absl::Status KernelSysfs::DeleteDisk(std::string_view disk) const {
  return WithContext(WriteSysfs(BlockPath(disk) + "/device/delete", "1"),
                     absl::StrCat("delete SCSI disk ", ToAbsl(disk)));
}

absl::Status KernelSysfs::DeleteScsiDevice(std::string_view hctl) const {
  return WithContext(
      WriteSysfs(absl::StrCat(root_, "/class/scsi_device/", ToAbsl(hctl), "/device/delete"), "1"),
      absl::StrCat("delete SCSI device ", ToAbsl(hctl)));
}

absl::Status KernelSysfs::RescanDisk(std::string_view disk) const {
  return WithContext(WriteSysfs(BlockPath(disk) + "/device/rescan", "1"),
                     absl::StrCat("rescan SCSI disk ", ToAbsl(disk)));
}

std::optional<KernelSysfs::DmMap> KernelSysfs::ReadMap(const std::string& block) const {
  const std::string dir = BlockPath(block);
  if (!absl::StartsWith(ReadTrimmed(dir + "/dm/uuid"), "mpath-")) {
    return std::nullopt;
  }
  DmMap m;
  m.block = block;
  m.name = ReadTrimmed(dir + "/dm/name");
  m.slaves = ListDir(dir + "/slaves");
  return m;
}

std::optional<KernelSysfs::DmMap> KernelSysfs::FindMap(
    const std::function<bool(const DmMap&)>& match) const {
  for (const std::string& block : ListDir(root_ + "/class/block")) {
    if (!absl::StartsWith(block, "dm-")) {
      continue;
    }
    if (auto m = ReadMap(block); m && match(*m)) {
      return m;
    }
  }
  return std::nullopt;
}

std::optional<KernelSysfs::DmMap> KernelSysfs::FindMapOver(
    const std::vector<std::string>& disks) const {
  std::vector<std::string> want = disks;
  std::sort(want.begin(), want.end());
  return FindMap([&want](const DmMap& m) { return m.slaves == want; });
}

std::optional<KernelSysfs::DmMap> KernelSysfs::MapHolding(std::string_view disk) const {
  for (const std::string& holder : ListDir(BlockPath(disk) + "/holders")) {
    if (auto m = ReadMap(holder)) {
      return m;
    }
  }
  return std::nullopt;
}

std::optional<KernelSysfs::DmMap> KernelSysfs::FindMapNamed(std::string_view name) const {
  return FindMap([name](const DmMap& m) { return m.name == name; });
}

}  // namespace stagehand::transport::kernel
