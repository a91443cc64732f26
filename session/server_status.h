#pragma once

// What a FuseLunServer reports of itself, and the board its parts publish it on.

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

namespace stagehand::session {

// kIdentityMismatch, kCapacityShrunk and kFenced fail closed: every I/O returns EIO from then on.
enum class ServerState { kUp, kReconnecting, kIdentityMismatch, kCapacityShrunk, kFenced };

struct ServerStatus {
  ServerState state = ServerState::kUp;
  std::string message;
  std::string portal;
  uint64_t reconnects = 0;
  uint64_t capacity_bytes = 0;
  uint64_t capacity_refreshes = 0;  // Incremented each time a capacity refresh completes.
  // Reconnecting past the replacement timeout: I/O fails instead of waiting.
  bool io_failing = false;
  // CLOCK_MONOTONIC, in nanoseconds, of when the connection was lost; 0 while connected.
  uint64_t lost_since_ns = 0;
  // CLOCK_MONOTONIC, in nanoseconds, since when the target owes an answer it has not given (a
  // tick or more); 0 while it answers.
  uint64_t silent_since_ns = 0;
  // How FUSE requests come: "classic" (read/write on /dev/fuse) or "io_uring"; with why not,
  // when io_uring was asked for and refused.
  std::string fuse_mode = "classic";
  // With a reservation key: the target's reservation generation at the last claim.
  uint32_t reservation_generation = 0;
  uint64_t reservation_key = 0;  // The registration's key now.
};

// The parts of the server keep `status` current (portal, counters, capacity) and publish a
// state change with Publish. Single-threaded: the server's thread.
struct StatusBoard {
  ServerStatus status;
  std::function<void(const ServerStatus&)> on_status;  // May be empty.

  // Any state but kReconnecting ends io_failing; a reconnect keeps it until it succeeds.
  void Publish(ServerState state, std::string message) {
    status.io_failing = status.io_failing && state == ServerState::kReconnecting;
    status.state = state;
    status.message = std::move(message);
    if (on_status) {
      on_status(status);
    }
  }
};

}  // namespace stagehand::session
