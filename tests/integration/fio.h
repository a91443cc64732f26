#pragma once

// fio as the tests' verifying writer: random 4 KiB writes with an fsync every 8 and crc32c
// verification of what was written, until stopped; and what its JSON report says.

#include <sys/types.h>

#include <optional>
#include <string>

#include <google/protobuf/struct.pb.h>

namespace stagehand::testing {

// Whether fio is installed (tests that need it skip otherwise).
bool HaveFio();

class Fio {
 public:
  // Starts fio on `file` (32 MiB), its JSON report going to `output`.
  Fio(const std::string& file, const std::string& output);

  ~Fio() { (void)Stop(); }

  Fio(const Fio&) = delete;
  Fio& operator=(const Fio&) = delete;

  bool running() const { return pid_ > 0; }

  // Stops it (SIGINT: it finishes the verification in flight and reports) and returns its
  // report; nullopt when there was none.
  std::optional<google::protobuf::Struct> Stop();

 private:
  std::string output_;
  pid_t pid_ = -1;
};

// The report's (only) job.
const google::protobuf::Struct& FioJob(const google::protobuf::Struct& report);

// A number of a job: job[a] or job[a][b] ("error"; "write", "io_bytes").
double FioNumber(const google::protobuf::Struct& job, const std::string& a,
                 const std::string& b = "");

// The mount id of `path` in /proc/self/mountinfo ("" when not a mount point): the same id after
// a fault means the mount was never replaced.
std::string MountId(const std::string& path);

}  // namespace stagehand::testing
