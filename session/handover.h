#pragma once

// Handing a live volume from one session process to another (a newer build: the upgrade in
// place; or one of the same build that changes the volume's writer, SessionConfig::
// writer_change), over a unix seqpacket socket in the session's runtime directory (kHandoverSocket
// in session/protocol.h, mode 0600, root only):
//
//   successor: "offer"  -> server: "offer" with its handover memory file and /dev/fuse
//   successor logs in and checks the LUN (the server still serves meanwhile)
//   successor: "take"   -> server stops taking FUSE requests, waits until every request it took
//                          is answered (at most the drain bound), then: "done"
//   successor keeps the descriptors with its own manager
//   successor: "stored" -> server ends, leaving the mount; the successor serves
//
// The server serves on if the successor goes away before "stored" (it takes FUSE requests
// again): a replacement that fails leaves the old process serving. A request the server took
// and could not answer within the bound is resent by the kernel to the successor
// (FUSE_NOTIFY_RESEND), so nothing is lost either way.

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "base/status.h"
#include "base/unique_fd.h"

namespace stagehand::session {

// The server's side, driven from its serving loop (single-threaded).
class HandoverServer {
 public:
  struct Hooks {
    // The descriptors to offer: the handover memory file, then /dev/fuse.
    std::function<absl::StatusOr<std::pair<UniqueFd, UniqueFd>>()> offer;
    // Stop taking FUSE requests and call the argument once every request taken is answered.
    std::function<void(std::function<void()> drained)> take;
    // The successor went away after "take": take FUSE requests again.
    std::function<void()> resume;
    // The successor serves: end, leaving the mount.
    std::function<void()> stored;
  };

  // Listens at `path` (replacing a stale socket file).
  static absl::StatusOr<std::unique_ptr<HandoverServer>> Listen(const std::string& path,
                                                                Hooks hooks);

  HandoverServer(const HandoverServer&) = delete;
  HandoverServer& operator=(const HandoverServer&) = delete;
  ~HandoverServer();

  // The descriptors to poll for POLLIN now (the listener, and the successor's connection while
  // there is one), and what to call when one is readable.
  std::vector<int> Fds() const;
  void OnReadable(int fd);

 private:
  HandoverServer(std::string path, UniqueFd listener, Hooks hooks);
  void OnMessage();
  void Drop();

  const std::string path_;
  UniqueFd listener_;
  UniqueFd peer_;
  Hooks hooks_;
  bool taken_ = false;  // "take" received; FUSE paused.
};

// The successor's side.
class HandoverClient {
 public:
  // Connects to the server at `path` and asks for its descriptors. Unavailable when no server
  // listens (an older build without handover, or none running).
  static absl::StatusOr<HandoverClient> Offer(const std::string& path);

  HandoverClient(HandoverClient&&) noexcept = default;
  HandoverClient& operator=(HandoverClient&&) noexcept = default;
  HandoverClient(const HandoverClient&) = delete;
  HandoverClient& operator=(const HandoverClient&) = delete;
  ~HandoverClient() = default;

  UniqueFd& handover() { return handover_; }

  UniqueFd& fuse() { return fuse_; }

  // Asks the server to stop and waits (at most `timeout`) until it has answered everything it
  // took. OK also when the server went away meanwhile (the kernel resends what it held).
  absl::Status Take(std::chrono::milliseconds timeout);

  // Tells the server that the descriptors are kept elsewhere now: it ends.
  void Stored();

 private:
  HandoverClient() = default;

  UniqueFd conn_;
  UniqueFd handover_;
  UniqueFd fuse_;
};

}  // namespace stagehand::session
