#include "tests/integration/iscsi_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <vector>

#include <absl/strings/str_cat.h>

namespace stagehand::testing {
namespace {

constexpr size_t kBhsBytes = 48;
constexpr uint8_t kScsiCommandOpcode = 0x01;
constexpr uint8_t kInquiry = 0x12;
constexpr uint8_t kPersistentReserveIn = 0x5e;
constexpr uint8_t kPersistentReserveOut = 0x5f;
constexpr uint8_t kUnknownOpcode = 0xc9;  // Vendor-specific: tgtd supports none of those.

// One proxied connection: bytes from the initiator are parsed into PDUs (to see the SCSI
// commands) and forwarded whole; bytes from the target are forwarded as they come.
struct Link {
  UniqueFd initiator;
  UniqueFd target;
  std::vector<uint8_t> from_initiator;  // Not yet forwarded: an incomplete PDU.
  bool dead = false;
  int number = 0;  // 1 for the first connection accepted.
};

bool SendAll(int fd, const uint8_t* data, size_t n) {
  while (n > 0) {
    const ssize_t w = send(fd, data, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) {
      continue;
    }
    if (w <= 0) {
      return false;
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Size of the PDU at the start of `b` (BHS, AHS, data segment padded to 4; no digests), or 0
// while its header is incomplete.
size_t PduSize(const std::vector<uint8_t>& b) {
  if (b.size() < kBhsBytes) {
    return 0;
  }
  const size_t ahs = static_cast<size_t>(b[4]) * 4;
  const size_t data = (static_cast<size_t>(b[5]) << 16) | (static_cast<size_t>(b[6]) << 8) | b[7];
  return kBhsBytes + ahs + ((data + 3) & ~static_cast<size_t>(3));
}

// The VPD page of a SCSI command PDU that is an INQUIRY with EVPD set, else -1.
int VpdInquiryPage(const uint8_t* pdu) {
  const uint8_t* cdb = pdu + 32;
  if ((pdu[0] & 0x3f) != kScsiCommandOpcode || cdb[0] != kInquiry || (cdb[1] & 0x01) == 0) {
    return -1;
  }
  return cdb[2];
}

// Gives a SCSI command PDU's PERSISTENT RESERVE IN/OUT another opcode.
void HideReservation(uint8_t* pdu) {
  uint8_t& opcode = pdu[32];
  if ((pdu[0] & 0x3f) == kScsiCommandOpcode &&
      (opcode == kPersistentReserveIn || opcode == kPersistentReserveOut)) {
    opcode = kUnknownOpcode;
  }
}

UniqueFd ConnectTo(uint16_t port) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (!fd || connect(fd.Get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    return UniqueFd();
  }
  return fd;
}

}  // namespace

IscsiProxy::~IscsiProxy() {
  stop_ = true;
  if (wake_) {
    const uint64_t one = 1;
    (void)!write(wake_.Get(), &one, sizeof(one));
  }
  if (thread_.joinable()) {
    thread_.join();
  }
}

absl::Status IscsiProxy::Start(uint16_t target_port) {
  target_port_ = target_port;
  listener_ = UniqueFd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  wake_ = UniqueFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (!listener_ || !wake_ ||
      bind(listener_.Get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      listen(listener_.Get(), 16) != 0 ||
      getsockname(listener_.Get(), reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return absl::ErrnoToStatus(errno, "proxy listen");
  }
  port_ = ntohs(a.sin_port);
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

std::string IscsiProxy::portal() const {
  return absl::StrCat("127.0.0.1:", port_);
}

void IscsiProxy::DropAll() {
  drop_all_ = true;
  const uint64_t one = 1;
  (void)!write(wake_.Get(), &one, sizeof(one));
}

void IscsiProxy::DropAtVpdInquiryOfNextConnection(uint8_t page) {
  drop_from_connection_ = connections_.load() + 1;
  drop_vpd_page_ = page;
}

void IscsiProxy::Loop() {
  std::vector<std::unique_ptr<Link>> links;
  std::vector<uint8_t> buffer(1 << 16);
  while (!stop_) {
    std::vector<pollfd> fds = {{listener_.Get(), POLLIN, 0}, {wake_.Get(), POLLIN, 0}};
    for (const auto& l : links) {
      fds.push_back({l->initiator.Get(), POLLIN, 0});
      fds.push_back({l->target.Get(), POLLIN, 0});
    }
    if (poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) {
      return;
    }
    if ((fds[1].revents & POLLIN) != 0) {
      uint64_t n = 0;
      (void)!read(wake_.Get(), &n, sizeof(n));
    }
    if (drop_all_.exchange(false)) {
      links.clear();  // Closing both sockets drops the connection on each side.
      continue;
    }
    for (size_t i = 0; i < links.size(); ++i) {
      Link& l = *links[i];
      if ((fds[2 + 2 * i].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        const ssize_t n = recv(l.initiator.Get(), buffer.data(), buffer.size(), 0);
        if (n <= 0) {
          l.dead = true;
          continue;
        }
        l.from_initiator.insert(l.from_initiator.end(), buffer.begin(), buffer.begin() + n);
        for (size_t size = PduSize(l.from_initiator);
             size != 0 && l.from_initiator.size() >= size && !l.dead;
             size = PduSize(l.from_initiator)) {
          const int page = VpdInquiryPage(l.from_initiator.data());
          if (page >= 0 && page == drop_vpd_page_.load() &&
              l.number >= drop_from_connection_.load()) {
            drop_vpd_page_ = -1;
            l.dead = true;  // The command never reaches the target.
            break;
          }
          if (hide_reservations_.load()) {
            HideReservation(l.from_initiator.data());
          }
          const bool swallow =
              swallow_commands_.load() && (l.from_initiator[0] & 0x3f) == kScsiCommandOpcode;
          l.dead = !swallow && !SendAll(l.target.Get(), l.from_initiator.data(), size);
          l.from_initiator.erase(l.from_initiator.begin(),
                                 l.from_initiator.begin() + static_cast<std::ptrdiff_t>(size));
        }
      }
      if (!l.dead && (fds[3 + 2 * i].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        const ssize_t n = recv(l.target.Get(), buffer.data(), buffer.size(), 0);
        l.dead = n <= 0 || !SendAll(l.initiator.Get(), buffer.data(), static_cast<size_t>(n));
      }
    }
    std::erase_if(links, [](const std::unique_ptr<Link>& l) { return l->dead; });
    if ((fds[0].revents & POLLIN) != 0) {
      UniqueFd initiator(accept4(listener_.Get(), nullptr, nullptr, SOCK_CLOEXEC));
      UniqueFd target = ConnectTo(target_port_);
      if (initiator && target) {
        auto l = std::make_unique<Link>();
        l->number = ++connections_;
        l->initiator = std::move(initiator);
        l->target = std::move(target);
        links.push_back(std::move(l));
      }
    }
  }
}

}  // namespace stagehand::testing
