#pragma once

// A host as the kernel transport sees it, for its unit tests: a sysfs tree, open-iscsi's node
// records, and an iscsiadm/multipath(d) that change them the way the real ones do.

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "tests/testing/temp_dir.h"
#include "transport/kernel/kernel_transport.h"

namespace stagehand::transport::kernel::fake_kernel_host {

namespace fs = std::filesystem;

inline constexpr char kIqn[] = "iqn.2024-01.dev.stagehand:t";

inline std::string Page83(uint8_t id) {
  std::string p = {0x00, static_cast<char>(0x83), 0x00, 20};
  std::string naa = {0x01, 0x03, 0x00, 0x10, 0x60};
  naa.append(14, '\0');
  naa.push_back(static_cast<char>(id));
  return p + naa;
}

inline std::string Page80(const std::string& serial) {
  return std::string{0x00, static_cast<char>(0x80), 0x00, static_cast<char>(serial.size())} +
         serial;
}

inline void Write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

inline std::string Read(const fs::path& path) {
  auto s = ReadFileToString(path);
  return s.ok() ? *s : std::string();
}

// A host as the kernel transport sees it: a sysfs tree, open-iscsi's node records, and an
// iscsiadm/multipath(d) that change them the way the real ones do.
class FakeHost {
 public:
  FakeHost() { fs::create_directories(sys_ / "class/block"); }

  // The target's LUNs: number -> serial (its NAA designator ends in the LUN number).
  std::map<uint32_t, std::string> luns = {{1, "SER1"}, {2, "SER2"}};
  std::string chap_password;  // Non-empty: a login must have it in its record.
  // As multipathd does with a new path of a WWID it has a map for: a new disk joins dm-0.
  bool new_disks_join_the_map = false;
  std::vector<std::vector<std::string>> commands;
  int logouts = 0;

  KernelTransportOptions Options() {
    KernelTransportOptions o;
    o.sysfs_root = sys_;
    o.dev_dir = root_ / "dev";
    o.nodes_dir = root_ / "nodes";
    o.run = [this](const std::vector<std::string>& argv, const RunOptions&) { return Run(argv); };
    o.watch = [this]() -> absl::StatusOr<std::unique_ptr<DeviceWatch>> {
      return std::make_unique<Watch>(this);
    };
    o.release = [](const std::string&) { return absl::OkStatus(); };
    o.scan = [this](int host, uint32_t lun) {
      for (auto& [sid, s] : sessions_) {
        if (s.host == host) {
          AddDisk(s, lun);
        }
      }
      return absl::OkStatus();
    };
    return o;
  }

  fs::path NodeRecord(const std::string& portal) const {
    std::string file = portal;
    std::replace(file.begin(), file.end(), ':', ',');  // "127.0.0.1,3260", as -o new makes it
    return root_ / "nodes" / kIqn / file;
  }

  int Sessions() const {
    return fs::exists(sys_ / "class/iscsi_session")
               ? static_cast<int>(
                     std::distance(fs::directory_iterator(sys_ / "class/iscsi_session"),
                                   fs::directory_iterator()))
               : 0;
  }

  std::vector<std::string> MapSlaves() const {
    std::vector<std::string> out;
    if (fs::exists(sys_ / "class/block/dm-0/slaves")) {
      for (const auto& e : fs::directory_iterator(sys_ / "class/block/dm-0/slaves")) {
        out.push_back(e.path().filename());
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  bool DiskExists(const std::string& disk) const { return fs::exists(sys_ / "class/block" / disk); }

  // Sets the kernel's state of the session through `portal` ("127.0.0.1:3261"), as when its
  // connection drops ("FAILED": the kernel and iscsid retry the login).
  void SetSessionState(const std::string& portal, const std::string& state) {
    for (const auto& [sid, s] : sessions_) {
      if (s.portal == portal) {
        Write(sys_ / "class/iscsi_session" / absl::StrCat("session", sid) / "state", state + "\n");
      }
    }
  }

  // Makes the SCSI device of `lun` on the (only) session lose its block device, as when an
  // attach timed out before the disk appeared.
  void DropBlockDevice(uint32_t lun) {
    for (auto& [sid, s] : sessions_) {
      auto it = s.disks.find(lun);
      if (it == s.disks.end()) {
        continue;
      }
      const std::string hctl = absl::StrCat(s.host, ":0:0:", lun);
      fs::remove_all(SessionDevice(sid) / absl::StrCat("target", s.host, ":0:0") / hctl / "block");
      fs::remove_all(sys_ / "class/block" / it->second);
      Write(sys_ / "class/scsi_device" / hctl / "device/delete", "");
    }
  }

  bool AnyArgvContains(const std::string& text) const {
    for (const auto& argv : commands) {
      for (const auto& a : argv) {
        if (a.find(text) != std::string::npos) {
          return true;
        }
      }
    }
    return false;
  }

 private:
  class Watch : public DeviceWatch {
   public:
    explicit Watch(FakeHost* host) : host_(host) {}

    absl::StatusOr<std::string> WaitFor(const std::function<std::optional<std::string>()>& check,
                                        std::chrono::milliseconds, std::string_view what) override {
      for (int i = 0; i < 3; ++i) {
        if (auto v = check()) {
          return *v;
        }
        host_->Settle();
      }
      return absl::DeadlineExceededError(absl::StrCat("waiting for ", ToAbsl(what)));
    }

    bool Processed(const std::string&) override { return true; }

   private:
    FakeHost* host_;
  };

  // The kernel acting on what was written to sysfs: scans and deletes.
  void Settle() {
    for (const auto& e : fs::directory_iterator(sys_ / "class/block")) {
      if (Read(e.path() / "device/delete") == "1") {
        RemoveDisk(e.path().filename());
      }
    }
    if (!fs::exists(sys_ / "class/scsi_device")) {
      return;
    }
    for (const auto& e : fs::directory_iterator(sys_ / "class/scsi_device")) {
      if (Read(e.path() / "device/delete") != "1") {
        continue;
      }
      for (auto& [sid, s] : sessions_) {
        for (auto it = s.disks.begin(); it != s.disks.end(); ++it) {
          if (absl::StrCat(s.host, ":0:0:", it->first) == e.path().filename().string()) {
            fs::remove_all(SessionDevice(sid) / absl::StrCat("target", s.host, ":0:0") /
                           e.path().filename());
            s.disks.erase(it);
            break;
          }
        }
      }
      fs::remove_all(e.path());
      return;  // The iterator is stale now.
    }
  }

  struct Session {
    int host;
    std::string portal;
    std::map<uint32_t, std::string> disks;  // lun -> sdX
  };

  fs::path SessionDevice(int sid) const {
    return sys_ / "devices/platform" / absl::StrCat("host", sessions_.at(sid).host) /
           absl::StrCat("session", sid);
  }

  void AddDisk(Session& s, uint32_t lun) {
    auto it = luns.find(lun);
    if (it == luns.end()) {
      return;  // No such LUN: the scan finds nothing.
    }
    const int sid = SidOf(s);
    const std::string disk =
        absl::StrCat("sd", std::string(1, static_cast<char>('a' + next_disk_++)));
    const std::string hctl = absl::StrCat(s.host, ":0:0:", lun);
    fs::create_directories(SessionDevice(sid) / absl::StrCat("target", s.host, ":0:0") / hctl /
                           "block" / disk);
    const fs::path b = sys_ / "class/block" / disk;
    Write(b / "device/vpd_pg83", Page83(static_cast<uint8_t>(lun)));
    Write(b / "device/vpd_pg80", Page80(it->second));
    Write(b / "device/state", "running\n");
    Write(b / "device/delete", "");
    Write(b / "device/rescan", "");
    Write(b / "size", "2097152\n");
    Write(b / "queue/logical_block_size", "512\n");
    s.disks[lun] = disk;
    if (new_disks_join_the_map && fs::exists(sys_ / "class/block/dm-0")) {
      fs::create_directories(sys_ / "class/block/dm-0/slaves" / disk);
      fs::create_directories(b / "holders/dm-0");
    }
  }

  void RemoveDisk(const std::string& disk) {
    for (auto& [sid, s] : sessions_) {
      for (auto it = s.disks.begin(); it != s.disks.end(); ++it) {
        if (it->second == disk) {
          fs::remove_all(SessionDevice(sid) / absl::StrCat("target", s.host, ":0:0") /
                         absl::StrCat(s.host, ":0:0:", it->first));
          s.disks.erase(it);
          fs::remove_all(sys_ / "class/block" / disk);
          return;
        }
      }
    }
  }

  int SidOf(const Session& s) const {
    for (const auto& [sid, x] : sessions_) {
      if (&x == &s) {
        return sid;
      }
    }
    return -1;
  }

  static std::string Arg(const std::vector<std::string>& argv, const std::string& flag) {
    for (size_t i = 0; i + 1 < argv.size(); ++i) {
      if (argv[i] == flag) {
        return argv[i + 1];
      }
    }
    return "";
  }

  static bool Has(const std::vector<std::string>& argv, const std::string& flag) {
    return std::find(argv.begin(), argv.end(), flag) != argv.end();
  }

  absl::StatusOr<ProcessResult> Run(const std::vector<std::string>& argv) {
    commands.push_back(argv);
    const std::string portal = Arg(argv, "-p");
    if (argv[0] == "iscsiadm" && Arg(argv, "-o") == "new") {
      Write(NodeRecord(portal), absl::StrCat("node.name = ", kIqn, "\nnode.startup = automatic\n"));
      return ProcessResult{0, "New iSCSI node added"};
    }
    if (argv[0] == "iscsiadm" && Arg(argv, "-o") == "delete") {
      if (!fs::exists(NodeRecord(portal))) {
        return ProcessResult{21, "iscsiadm: No records found"};
      }
      fs::remove(NodeRecord(portal));
      return ProcessResult{0, ""};
    }
    if (argv[0] == "iscsiadm" && Has(argv, "--login")) {
      for (const auto& [sid, s] : sessions_) {
        if (s.portal == portal) {
          return ProcessResult{15,
                               "iscsiadm: default: 1 session requested, but 1 already present."};
        }
      }
      const std::string record = Read(NodeRecord(portal));
      if (!chap_password.empty() && record.find("node.session.auth.password = " + chap_password +
                                                "\n") == std::string::npos) {
        return ProcessResult{24,
                             "iscsiadm: initiator reported error (24 - iSCSI login failed due "
                             "to authorization failure)"};
      }
      const int sid = next_sid_++;
      const int host = sid + 1;
      sessions_[sid] = Session{host, portal, {}};
      fs::create_directories(SessionDevice(sid));
      const fs::path cls = sys_ / "class/iscsi_session" / absl::StrCat("session", sid);
      fs::create_directories(cls);
      Write(cls / "targetname", absl::StrCat(kIqn, "\n"));
      Write(cls / "state", "LOGGED_IN\n");
      fs::create_directory_symlink(SessionDevice(sid), cls / "device");
      std::vector<std::string> hp = absl::StrSplit(portal, ':');
      const fs::path conn = sys_ / "class/iscsi_connection" / absl::StrCat("connection", sid, ":0");
      Write(conn / "persistent_address", hp[0] + "\n");
      Write(conn / "persistent_port", hp[1] + "\n");
      Write(sys_ / absl::StrCat("class/scsi_host/host", host, "/scan"), "");
      return ProcessResult{0, "Login successful."};
    }
    if (argv[0] == "iscsiadm" && Has(argv, "--logout")) {
      for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
        if (it->second.portal == portal) {
          fs::remove_all(sys_ / "class/iscsi_session" / absl::StrCat("session", it->first));
          fs::remove_all(sys_ / "class/iscsi_connection" /
                         absl::StrCat("connection", it->first, ":0"));
          sessions_.erase(it);
          ++logouts;
          return ProcessResult{0, "Logout successful."};
        }
      }
      return ProcessResult{21, "iscsiadm: No matching sessions found"};
    }
    if (argv[0] == "multipathd" && argv[1] == "show") {
      return ProcessResult{0, "pid 42 running"};
    }
    if (argv[0] == "multipath" && argv[1] == "-a") {
      return ProcessResult{0, "wwid added"};
    }
    if (argv[0] == "multipathd" && argv[1] == "add") {
      mp_paths_.insert(argv[3]);
      const fs::path dm = sys_ / "class/block/dm-0";
      Write(dm / "dm/uuid", "mpath-36000\n");
      Write(dm / "dm/name", "36000\n");
      Write(dm / "size", "2097152\n");
      Write(dm / "queue/logical_block_size", "512\n");
      fs::create_directories(dm / "slaves" / argv[3]);
      if (mp_paths_.size() == 2) {  // udev's link once the table holds both paths.
        Write(root_ / "dev/mapper/36000", "");
      }
      return ProcessResult{0, "ok"};
    }
    if (argv[0] == "multipathd" && argv[1] == "del" && argv[2] == "path") {
      fs::remove_all(sys_ / "class/block/dm-0/slaves" / argv[3]);
      fs::remove_all(sys_ / "class/block" / argv[3] / "holders/dm-0");
      return ProcessResult{0, "ok"};
    }
    if (argv[0] == "multipath" && argv[1] == "-f") {
      fs::remove_all(sys_ / "class/block/dm-0");
      return ProcessResult{0, ""};
    }
    return absl::InternalError(absl::StrCat("unexpected command: ", absl::StrJoin(argv, " ")));
  }

  stagehand::testing::TempDir temp_;
  const fs::path root_ = temp_.path();
  fs::path sys_ = root_ / "sys";
  std::map<int, Session> sessions_;
  std::set<std::string> mp_paths_;
  int next_sid_ = 1;
  int next_disk_ = 0;
};

// The iSCSI target of a request, and the identity an attach read.
inline iscsi::TargetSpec& Spec(AttachRequest& r) {
  return std::get<iscsi::TargetSpec>(r.target);
}

inline const iscsi::LunIdentity& IdentityOf(const Attachment& a) {
  return std::get<iscsi::LunIdentity>(a.identity);
}

inline AttachRequest Request(uint32_t lun, const std::vector<uint16_t>& ports = {3260}) {
  AttachRequest r;
  iscsi::TargetSpec& target = Spec(r);
  for (uint16_t p : ports) {
    target.portals.push_back(iscsi::Portal{"127.0.0.1", p});
  }
  target.iqn = kIqn;
  target.lun = lun;
  r.volume_id = absl::StrCat("vol", lun);
  return r;
}

}  // namespace stagehand::transport::kernel::fake_kernel_host
