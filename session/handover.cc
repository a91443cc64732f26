#include "session/handover.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cerrno>

#include <absl/strings/str_cat.h>

#include "base/fd_passing.h"

namespace stagehand::session {
namespace {

constexpr std::string_view kOffer = "offer";
constexpr std::string_view kTake = "take";
constexpr std::string_view kDone = "done";
constexpr std::string_view kStored = "stored";

// Waits up to `timeout` for `fd` to be readable; false on timeout.
bool WaitReadable(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  int n = 0;
  do {
    n = poll(&p, 1, static_cast<int>(timeout.count()));
  } while (n < 0 && errno == EINTR);
  return n > 0;
}

}  // namespace

HandoverServer::HandoverServer(std::string path, UniqueFd listener, Hooks hooks)
    : path_(std::move(path)), listener_(std::move(listener)), hooks_(std::move(hooks)) {}

HandoverServer::~HandoverServer() {
  if (listener_) {
    unlink(path_.c_str());
  }
}

absl::StatusOr<std::unique_ptr<HandoverServer>> HandoverServer::Listen(const std::string& path,
                                                                       Hooks hooks) {
  // Root only; a stale one of a predecessor is replaced.
  BindOptions options;
  options.replace_stale = true;
  options.listen_backlog = 1;
  SH_ASSIGN_OR_RETURN(UniqueFd fd, BindUnixSocket(path, SOCK_SEQPACKET | SOCK_NONBLOCK, options));
  return std::unique_ptr<HandoverServer>(new HandoverServer(path, std::move(fd), std::move(hooks)));
}

std::vector<int> HandoverServer::Fds() const {
  std::vector<int> fds = {listener_.Get()};
  if (peer_) {
    fds.push_back(peer_.Get());
  }
  return fds;
}

void HandoverServer::OnReadable(int fd) {
  if (fd == listener_.Get()) {
    UniqueFd conn(accept4(listener_.Get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (conn && !peer_) {
      peer_ = std::move(conn);  // One successor at a time; others are closed at once.
    }
    return;
  }
  if (peer_ && fd == peer_.Get()) {
    OnMessage();
  }
}

void HandoverServer::Drop() {
  peer_.Reset();
  if (std::exchange(taken_, false) && hooks_.resume) {
    hooks_.resume();
  }
}

void HandoverServer::OnMessage() {
  std::optional<ReceivedMessage> m = ReceiveWithFds(peer_.Get());
  if (!m) {
    return;
  }
  if (m->data.empty()) {
    Drop();  // The successor went away: serve on.
    return;
  }
  if (m->data == kOffer && !taken_) {
    auto fds = hooks_.offer();
    if (!fds.ok()) {
      Drop();
      return;
    }
    const std::array<int, 2> pass{fds->first.Get(), fds->second.Get()};
    if (!SendWithFds(peer_.Get(), kOffer, pass).ok()) {
      Drop();
    }
  } else if (m->data == kTake && !taken_) {
    taken_ = true;
    hooks_.take([this] {
      if (peer_ && taken_) {
        (void)SendWithFds(peer_.Get(), kDone, {});
      }
    });
  } else if (m->data == kStored && taken_) {
    peer_.Reset();
    hooks_.stored();
  } else {
    Drop();  // Out of order: not a successor of this protocol.
  }
}

absl::StatusOr<HandoverClient> HandoverClient::Offer(const std::string& path) {
  HandoverClient client;
  auto conn = ConnectUnixSocket(path, SOCK_SEQPACKET);
  if (!conn.ok()) {
    return absl::UnavailableError(absl::StrCat("no session process offers a handover at '", path,
                                               "': ", conn.status().message()));
  }
  client.conn_ = std::move(*conn);
  SH_RETURN_IF_ERROR(SendWithFds(client.conn_.Get(), kOffer, {}));
  if (!WaitReadable(client.conn_.Get(), std::chrono::seconds(10))) {
    return absl::DeadlineExceededError("the session process did not offer its descriptors");
  }
  std::optional<ReceivedMessage> m = ReceiveWithFds(client.conn_.Get());
  if (!m || m->data != kOffer || m->fds.size() != 2) {
    return absl::UnavailableError("the session process refused the handover");
  }
  client.handover_ = std::move(m->fds[0]);
  client.fuse_ = std::move(m->fds[1]);
  return client;
}

absl::Status HandoverClient::Take(std::chrono::milliseconds timeout) {
  SH_RETURN_IF_ERROR(SendWithFds(conn_.Get(), kTake, {}));
  if (!WaitReadable(conn_.Get(), timeout)) {
    return absl::DeadlineExceededError("the session process did not finish its I/O in time");
  }
  // "done", or the end of the connection (the server died: the kernel resends what it held).
  (void)ReceiveWithFds(conn_.Get());
  return absl::OkStatus();
}

void HandoverClient::Stored() {
  (void)SendWithFds(conn_.Get(), kStored, {});
  conn_.Reset();
}

}  // namespace stagehand::session
