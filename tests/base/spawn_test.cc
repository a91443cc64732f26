#include "base/spawn.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <string>
#include <vector>

#include <absl/strings/str_split.h>
#include <gtest/gtest.h>

#include "base/unique_fd.h"

namespace stagehand {
namespace {

struct Pipe {
  UniqueFd read;
  UniqueFd write;
};

Pipe MakePipe() {
  std::array<int, 2> fds{};
  EXPECT_EQ(pipe2(fds.data(), O_CLOEXEC), 0);
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

std::string ReadAll(int fd) {
  std::string out;
  std::array<char, 4096> buf{};
  ssize_t n = 0;
  while ((n = read(fd, buf.data(), buf.size())) > 0) {
    out.append(buf.data(), static_cast<size_t>(n));
  }
  return out;
}

TEST(SpawnDetachedTest, RunsTheProgramOnTheGivenPipesInANewSessionAndNotAsOurChild) {
  Pipe in = MakePipe();
  Pipe out = MakePipe();
  ASSERT_TRUE(
      SpawnDetached({"/bin/cat", "/proc/self/stat", "-"}, in.read.Get(), out.write.Get()).ok());
  in.read.Reset();
  out.write.Reset();
  ASSERT_EQ(write(in.write.Get(), "from stdin\n", 11), 11);
  in.write.Reset();
  const std::string output = ReadAll(out.read.Get());  // EOF: cat exited, nothing else has it.

  // /proc/self/stat: "pid (comm) state ppid pgrp session ..."; comm is "cat".
  const std::string stat = output.substr(0, output.find('\n'));
  std::vector<std::string> fields = absl::StrSplit(stat, ' ');
  ASSERT_GE(fields.size(), 6u) << stat;
  EXPECT_EQ(fields[5], fields[0]) << "not a session leader: " << stat;
  EXPECT_NE(fields[3], std::to_string(getpid())) << "still our child: " << stat;
  EXPECT_NE(output.find("from stdin\n"), std::string::npos) << output;
  // The intermediate process was reaped; nothing is left to wait for.
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(SpawnDetachedTest, MissingProgramIsNotFoundAndEmptyArgvInvalid) {
  Pipe p = MakePipe();
  EXPECT_EQ(SpawnDetached({"/nonexistent/stagehand-session"}, p.read.Get(), p.write.Get()).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(SpawnDetached({}, p.read.Get(), p.write.Get()).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stagehand
