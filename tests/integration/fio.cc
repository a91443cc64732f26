#include "tests/integration/fio.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include <absl/strings/str_split.h>
#include <google/protobuf/util/json_util.h>

#include "base/file_io.h"
#include "base/spawn.h"

namespace stagehand::testing {

bool HaveFio() {
  return access("/usr/bin/fio", X_OK) == 0;
}

Fio::Fio(const std::string& file, const std::string& output) : output_(output) {
  const std::vector<std::string> argv = {
      "/usr/bin/fio",    "--name=succession",    "--filename=" + file, "--size=32M",
      "--bs=4k",         "--rw=randwrite",       "--ioengine=psync",   "--fsync=8",
      "--verify=crc32c", "--verify_backlog=256", "--verify_fatal=1",   "--time_based",
      "--runtime=3600",  "--output-format=json", "--output=" + output, "--verify_state_save=0"};
  std::vector<char*> cargv = SpawnArgv(argv);
  if (posix_spawn(&pid_, cargv[0], nullptr, nullptr, cargv.data(), environ) != 0) {
    pid_ = -1;
  }
}

std::optional<google::protobuf::Struct> Fio::Stop() {
  if (pid_ <= 0) {
    return std::nullopt;
  }
  kill(pid_, SIGINT);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  auto text = ReadFileToString(output_);
  if (!text.ok() || text->find('{') == std::string::npos) {
    return std::nullopt;
  }
  google::protobuf::Struct report;
  if (!google::protobuf::util::JsonStringToMessage(text->substr(text->find('{')), &report).ok()) {
    return std::nullopt;
  }
  return report;
}

const google::protobuf::Struct& FioJob(const google::protobuf::Struct& report) {
  return report.fields().at("jobs").list_value().values(0).struct_value();
}

double FioNumber(const google::protobuf::Struct& job, const std::string& a, const std::string& b) {
  const auto& v = job.fields().at(a);
  return b.empty() ? v.number_value() : v.struct_value().fields().at(b).number_value();
}

std::string MountId(const std::string& path) {
  auto text = ReadFileToString("/proc/self/mountinfo");
  for (absl::string_view line : absl::StrSplit(text.value_or(""), '\n')) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ');
    if (fields.size() > 4 && fields[4] == path) {
      return std::string(fields[0]);
    }
  }
  return "";
}

}  // namespace stagehand::testing
