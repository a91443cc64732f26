#include "testbed/tgtd.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <random>

#include <absl/strings/str_cat.h>

#include "base/subprocess.h"
#include "base/unique_fd.h"

namespace stagehand::testbed {
namespace {

constexpr char kTgtdRunDir[] = "/var/run/tgtd";

}  // namespace

uint16_t FreeTcpPort() {
  UniqueFd s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(s.Get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(s.Get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return 0;
  }
  return ntohs(addr.sin_port);
}

Tgtd::~Tgtd() {
  Kill();
}

std::string Tgtd::portal() const {
  return absl::StrCat("127.0.0.1:", port_);
}

absl::Status Tgtd::Start(uint16_t port) {
  if (port_ == 0) {
    port_ = port != 0 ? port : FreeTcpPort();
  }
  if (control_port_ == 0) {
    std::random_device rd;
    // tgtd's control socket is /var/run/tgtd/socket.<n>; pick one no one uses.
    do {
      control_port_ = 2000 + static_cast<int>(rd() % 20000);  // tgtd caps the value.
    } while (access(absl::StrCat(kTgtdRunDir, "/socket.", control_port_).c_str(), F_OK) == 0);
  }
  mkdir(kTgtdRunDir, 0755);
  const std::string portal_arg = absl::StrCat("portal=127.0.0.1:", port_);
  const std::string ctl = std::to_string(control_port_);
  pid_ = fork();
  if (pid_ < 0) {
    return ErrnoStatus(errno, "fork tgtd");
  }
  if (pid_ == 0) {
    int devnull = open("/dev/null", O_RDWR);
    dup2(devnull, STDIN_FILENO);
    dup2(devnull, STDOUT_FILENO);
    int log = open("/tmp/tgtd-test.log", O_WRONLY | O_CREAT | O_APPEND, 0600);
    dup2(log >= 0 ? log : devnull, STDERR_FILENO);
    execlp("tgtd", "tgtd", "-f", "-C", ctl.c_str(), "--iscsi", portal_arg.c_str(),
           static_cast<char*>(nullptr));
    _exit(127);
  }
  return WaitForControlSocket();
}

absl::Status Tgtd::WaitForControlSocket() {
  // tgtd has no readiness signal. Its control socket appears once it is initialised; wait for
  // the file with inotify, then for `tgtadm` to connect (the listen() right after bind()).
  const std::string name = absl::StrCat("socket.", control_port_);
  UniqueFd in(inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  inotify_add_watch(in.Get(), kTgtdRunDir, IN_CREATE | IN_MOVED_TO);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (access(absl::StrCat(kTgtdRunDir, "/", name).c_str(), F_OK) == 0) {
      auto r = RunProcess({"tgtadm", "-C", std::to_string(control_port_), "--lld", "iscsi", "--op",
                           "show", "--mode", "sys"});
      if (r.ok() && r->exit_code == 0) {
        return absl::OkStatus();
      }
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::InternalError("tgtd exited during startup");
    }
    pollfd pfd{in.Get(), POLLIN, 0};
    poll(&pfd, 1, 100);  // Woken by the socket's creation; the timeout re-checks tgtadm.
    char buf[4096];
    while (read(in.Get(), buf, sizeof(buf)) > 0) {
    }
  }
  return absl::DeadlineExceededError("tgtd did not come up within 20 s");
}

void Tgtd::Kill() {
  if (pid_ <= 0) {
    return;
  }
  kill(pid_, SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  unlink(absl::StrCat(kTgtdRunDir, "/socket.", control_port_).c_str());
  unlink(absl::StrCat(kTgtdRunDir, "/socket.", control_port_, ".lock").c_str());
}

absl::Status Tgtd::Restart() {
  Kill();
  SH_RETURN_IF_ERROR(Start(port_));
  // Like a real target's saved configuration: everything is in place before any initiator is
  // allowed in, so the initiator bindings are replayed last.
  auto is_bind = [](const std::vector<std::string>& args) {
    return args.size() > 3 && args[1] == "bind" && args[3] == "target";
  };
  for (const auto& [tid, args] : applied_) {
    if (!is_bind(args)) {
      SH_RETURN_IF_ERROR(Adm(args));
    }
  }
  for (const auto& [tid, args] : applied_) {
    if (is_bind(args)) {
      SH_RETURN_IF_ERROR(Adm(args));
    }
  }
  return absl::OkStatus();
}

absl::Status Tgtd::RestartEmpty() {
  Kill();
  applied_.clear();
  return Start(port_);
}

absl::Status Tgtd::SetLunSerial(int tid, int lun, const std::string& serial) {
  return Adm({"--op", "update", "--mode", "logicalunit", "--tid", std::to_string(tid), "--lun",
              std::to_string(lun), "--params", "scsi_sn=" + serial},
             tid);
}

absl::Status Tgtd::AddTargetWithSerial(int tid, const std::string& iqn, int lun,
                                       const std::string& backing_file, const std::string& serial) {
  SH_RETURN_IF_ERROR(
      Adm({"--op", "new", "--mode", "target", "--tid", std::to_string(tid), "-T", iqn}, tid));
  SH_RETURN_IF_ERROR(AddLun(tid, lun, backing_file));
  SH_RETURN_IF_ERROR(SetLunSerial(tid, lun, serial));
  return Adm({"--op", "bind", "--mode", "target", "--tid", std::to_string(tid), "-I", "ALL"}, tid);
}

absl::Status Tgtd::Adm(std::vector<std::string> args, int tid) {
  std::vector<std::string> argv = {"tgtadm", "-C", std::to_string(control_port_), "--lld", "iscsi"};
  argv.insert(argv.end(), args.begin(), args.end());
  SH_ASSIGN_OR_RETURN(ProcessResult r, RunProcess(argv));
  if (r.exit_code != 0) {
    return absl::InternalError(absl::StrCat(ArgvToString(argv), ": ", r.output));
  }
  if (tid >= 0) {
    applied_.emplace_back(tid, std::move(args));
  }
  return absl::OkStatus();
}

absl::Status Tgtd::AddTarget(int tid, const std::string& iqn) {
  SH_RETURN_IF_ERROR(
      Adm({"--op", "new", "--mode", "target", "--tid", std::to_string(tid), "-T", iqn}, tid));
  return Adm({"--op", "bind", "--mode", "target", "--tid", std::to_string(tid), "-I", "ALL"}, tid);
}

absl::Status Tgtd::AddLun(int tid, int lun, const std::string& backing_file) {
  return Adm({"--op", "new", "--mode", "logicalunit", "--tid", std::to_string(tid), "--lun",
              std::to_string(lun), "-b", backing_file},
             tid);
}

absl::Status Tgtd::RemoveLun(int tid, int lun) {
  return Adm({"--op", "delete", "--mode", "logicalunit", "--tid", std::to_string(tid), "--lun",
              std::to_string(lun)});
}

absl::Status Tgtd::DeleteTarget(int tid) {
  std::erase_if(applied_, [tid](const auto& entry) { return entry.first == tid; });
  return Adm({"--op", "delete", "--mode", "target", "--tid", std::to_string(tid), "--force"});
}

absl::Status Tgtd::RequireChap(int tid, const std::string& user, const std::string& password) {
  SH_RETURN_IF_ERROR(
      Adm({"--op", "new", "--mode", "account", "--user", user, "--password", password}, tid));
  return Adm({"--op", "bind", "--mode", "account", "--tid", std::to_string(tid), "--user", user},
             tid);
}

absl::Status Tgtd::Tune(int tid) {
  const std::vector<std::pair<std::string, std::string>> params = {
      {"MaxRecvDataSegmentLength", "262144"},
      {"MaxXmitDataSegmentLength", "262144"},
      {"FirstBurstLength", "262144"},
      {"MaxBurstLength", "1048576"},
      {"InitialR2T", "No"},
      {"ImmediateData", "Yes"}};
  for (const auto& [name, value] : params) {
    SH_RETURN_IF_ERROR(Adm({"--op", "update", "--mode", "target", "--tid", std::to_string(tid),
                            "-n", name, "-v", value},
                           tid));
  }
  return absl::OkStatus();
}

}  // namespace stagehand::testbed
