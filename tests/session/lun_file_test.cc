// The FUSE side of the session against a fake kernel: a SOCK_SEQPACKET socket keeps message
// bounds as /dev/fuse does, so the test writes requests in the kernel's ABI and reads the
// answers. The command queue has no connection here: I/O requests wait in it (and fail when
// it is told to fail them), which is all the FUSE side needs.

#include "session/lun_file.h"

#include <linux/falloc.h>
#include <linux/fuse.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <array>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/unique_fd.h"

namespace stagehand::session {
namespace {

struct Answer {
  int error = 0;  // Positive errno.
  uint64_t unique = 0;
  std::vector<uint8_t> payload;

  template <typename T>
  T As() const {
    T out{};
    std::memcpy(&out, payload.data(), std::min(sizeof(T), payload.size()));
    return out;
  }
};

// Plays the kernel's end of /dev/fuse.
class FakeKernel {
 public:
  FakeKernel() {
    std::array<int, 2> fds{};
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds.data()), 0);
    kernel_.Reset(fds[0]);
    server_.Reset(fds[1]);
  }

  UniqueFd TakeServerEnd() { return std::move(server_); }

  // Queues a request; returns its unique.
  uint64_t Send(uint32_t opcode, uint64_t nodeid, const std::vector<uint8_t>& arg) {
    fuse_in_header in{};
    in.len = static_cast<uint32_t>(sizeof(in) + arg.size());
    in.opcode = opcode;
    in.unique = next_unique_ += 2;
    in.nodeid = nodeid;
    std::vector<uint8_t> message(sizeof(in));
    std::memcpy(message.data(), &in, sizeof(in));
    message.insert(message.end(), arg.begin(), arg.end());
    EXPECT_EQ(send(kernel_.Get(), message.data(), message.size(), 0),
              static_cast<ssize_t>(message.size()));
    return in.unique;
  }

  template <typename T>
  uint64_t Send(uint32_t opcode, uint64_t nodeid, const T& arg, std::string_view tail = {}) {
    std::vector<uint8_t> bytes(sizeof(T));
    std::memcpy(bytes.data(), &arg, sizeof(T));
    bytes.insert(bytes.end(), tail.begin(), tail.end());
    return Send(opcode, nodeid, bytes);
  }

  // The next answer, if one was written.
  std::optional<Answer> Next() {
    std::vector<uint8_t> buf(1 << 20);
    const ssize_t n = recv(kernel_.Get(), buf.data(), buf.size(), MSG_DONTWAIT);
    if (n < static_cast<ssize_t>(sizeof(fuse_out_header))) {
      return std::nullopt;
    }
    fuse_out_header out{};
    std::memcpy(&out, buf.data(), sizeof(out));
    EXPECT_EQ(out.len, static_cast<uint32_t>(n)) << "the header's length is the message's";
    Answer a;
    a.error = -out.error;
    a.unique = out.unique;
    a.payload.assign(buf.begin() + sizeof(out), buf.begin() + n);
    return a;
  }

 private:
  UniqueFd kernel_;
  UniqueFd server_;
  uint64_t next_unique_ = 0;
};

CommandQueueOptions QueueOptions() {
  CommandQueueOptions options;
  options.block_size = 512;
  return options;
}

std::vector<uint8_t> Name(std::string_view name) {
  std::vector<uint8_t> out(name.begin(), name.end());
  out.push_back(0);
  return out;
}

class LunFileTest : public ::testing::Test {
 protected:
  LunFileTest()
      : queue_(QueueOptions(), iscsi::IscsiContext()),
        file_(FuseConnection::ForTest(kernel_.TakeServerEnd(), "/mnt/x"), "lun",
              iscsi::LunCapacity{.blocks = 2048, .block_size = 512}, queue_, pool_) {}

  // Sends, serves, and returns the one answer (nullopt if there was none).
  template <typename... Args>
  std::optional<Answer> Ask(Args&&... args) {
    const uint64_t unique = kernel_.Send(std::forward<Args>(args)...);
    EXPECT_TRUE(file_.Serve());
    auto answer = kernel_.Next();
    if (answer) {
      EXPECT_EQ(answer->unique, unique);
    }
    return answer;
  }

  FakeKernel kernel_;
  BufferPool pool_;
  CommandQueue queue_;
  LunFile file_;
};

TEST_F(LunFileTest, InitTakesWhatTheDataPathNeedsOfWhatTheKernelOffers) {
  fuse_init_in in{};
  in.major = 7;
  in.minor = 41;
  in.max_readahead = 131072;
  in.flags = FUSE_ASYNC_READ | FUSE_BIG_WRITES | FUSE_ASYNC_DIO | FUSE_MAX_PAGES |
             FUSE_WRITEBACK_CACHE | FUSE_SPLICE_READ | FUSE_INIT_EXT;

  auto a = Ask(FUSE_INIT, 0, in);

  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->error, 0);
  const auto out = a->As<fuse_init_out>();
  EXPECT_EQ(out.major, 7u);
  EXPECT_EQ(out.minor, 38u) << "the smaller of the two minors";
  EXPECT_EQ(out.flags, static_cast<uint32_t>(FUSE_ASYNC_READ | FUSE_BIG_WRITES | FUSE_ASYNC_DIO |
                                             FUSE_MAX_PAGES))
      << "never the page cache (writeback) nor splicing";
  EXPECT_EQ(out.max_write, kMaxRequestBytes);
  EXPECT_EQ(out.max_pages * 4096u, kMaxRequestBytes);
  EXPECT_EQ(out.max_readahead, 131072u);
  EXPECT_EQ(out.max_background, 64);
}

TEST_F(LunFileTest, InitAsksForTheRingWhenWantedAndOffered) {
  file_.WantRing(true);
  fuse_init_in in{};
  in.major = 7;
  in.minor = 42;
  in.flags = FUSE_ASYNC_READ | FUSE_INIT_EXT;
  in.flags2 = static_cast<uint32_t>(kFuseOverIoUring >> 32);

  auto a = Ask(FUSE_INIT, 0, in);

  ASSERT_TRUE(a.has_value());
  const auto out = a->As<fuse_init_out>();
  EXPECT_NE(out.flags & FUSE_INIT_EXT, 0u) << "flags2 counts";
  EXPECT_EQ(out.flags2, static_cast<uint32_t>(kFuseOverIoUring >> 32));
  // The ring itself needs /dev/fuse: over the fake kernel the classic loop goes on.
  EXPECT_EQ(file_.FuseMode(), "classic");
  EXPECT_NE(file_.RingRefusal().find("/dev/fuse"), std::string::npos) << file_.RingRefusal();
}

TEST_F(LunFileTest, InitWithoutTheRingOnOfferSaysWhy) {
  file_.WantRing(true);
  fuse_init_in in{};
  in.major = 7;
  in.minor = 42;
  in.flags = FUSE_ASYNC_READ | FUSE_INIT_EXT;  // The module parameter is off: no ring offered.

  auto a = Ask(FUSE_INIT, 0, in);

  ASSERT_TRUE(a.has_value());
  const auto out = a->As<fuse_init_out>();
  EXPECT_EQ(out.flags & FUSE_INIT_EXT, 0u);
  EXPECT_EQ(out.flags2, 0u);
  EXPECT_NE(file_.RingRefusal().find("fuse.enable_uring"), std::string::npos);
}

TEST_F(LunFileTest, AnInitOfTooOldAProtocolIsRefused) {
  fuse_init_in in{};
  in.major = 7;
  in.minor = 26;

  auto a = Ask(FUSE_INIT, 0, in);

  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->error, EPROTO);
}

TEST_F(LunFileTest, TheRootHoldsTheLunFileAndNothingElse) {
  auto found = Ask(FUSE_LOOKUP, kRootInode, Name("lun"));
  auto missing = Ask(FUSE_LOOKUP, kRootInode, Name("other"));
  auto nested = Ask(FUSE_LOOKUP, kLunInode, Name("lun"));

  ASSERT_TRUE(found && missing && nested);
  EXPECT_EQ(found->error, 0);
  const auto entry = found->As<fuse_entry_out>();
  EXPECT_EQ(entry.nodeid, kLunInode);
  EXPECT_EQ(entry.attr.size, 2048u * 512);
  EXPECT_EQ(entry.attr.mode, static_cast<uint32_t>(S_IFREG | 0600));
  EXPECT_EQ(missing->error, ENOENT);
  EXPECT_EQ(nested->error, ENOENT);
}

TEST_F(LunFileTest, GetattrAnswersForTheRootAndTheLun) {
  const fuse_getattr_in in{};

  auto root = Ask(FUSE_GETATTR, kRootInode, in);
  auto lun = Ask(FUSE_GETATTR, kLunInode, in);
  auto other = Ask(FUSE_GETATTR, 9, in);

  ASSERT_TRUE(root && lun && other);
  EXPECT_TRUE(S_ISDIR(root->As<fuse_attr_out>().attr.mode));
  EXPECT_EQ(lun->As<fuse_attr_out>().attr.size, 2048u * 512);
  EXPECT_EQ(lun->As<fuse_attr_out>().attr.blksize, 512u);
  EXPECT_EQ(other->error, ENOENT);
}

TEST_F(LunFileTest, TheLunOpensForDirectIoAndTheRootIsADirectory) {
  const fuse_open_in in{};

  auto lun = Ask(FUSE_OPEN, kLunInode, in);
  auto root = Ask(FUSE_OPEN, kRootInode, in);
  auto dir = Ask(FUSE_OPENDIR, kRootInode, in);

  ASSERT_TRUE(lun && root && dir);
  EXPECT_EQ(lun->error, 0);
  EXPECT_EQ(lun->As<fuse_open_out>().open_flags, static_cast<uint32_t>(FOPEN_DIRECT_IO));
  EXPECT_EQ(root->error, EISDIR);
  EXPECT_EQ(dir->error, 0);
}

TEST_F(LunFileTest, ReaddirListsDotDotDotAndTheLunFromTheOffset) {
  fuse_read_in in{};
  in.size = 4096;

  auto all = Ask(FUSE_READDIR, kRootInode, in);
  in.offset = 2;
  auto rest = Ask(FUSE_READDIR, kRootInode, in);
  in.offset = 3;
  auto end = Ask(FUSE_READDIR, kRootInode, in);

  ASSERT_TRUE(all && rest && end);
  // ".", ".." and "lun": 24 bytes of header each, the names padded to 8.
  EXPECT_EQ(all->payload.size(), 3u * 32);
  ASSERT_EQ(rest->payload.size(), 32u);
  fuse_dirent d{};
  std::memcpy(&d, rest->payload.data(), FUSE_NAME_OFFSET);
  EXPECT_EQ(d.ino, kLunInode);
  EXPECT_EQ(d.off, 3u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(rest->payload.data()) + FUSE_NAME_OFFSET,
                        d.namelen),
            "lun");
  EXPECT_TRUE(end->payload.empty());
}

TEST_F(LunFileTest, WhatTheFileSystemCanDoWithoutIsNotImplemented) {
  fuse_getxattr_in xattr{};
  auto getxattr = Ask(FUSE_GETXATTR, kLunInode, xattr, std::string_view("user.x\0", 7));
  fuse_access_in access{};
  auto access_answer = Ask(FUSE_ACCESS, kLunInode, access);
  auto unknown = Ask(4242, kLunInode, std::vector<uint8_t>{});

  ASSERT_TRUE(getxattr && access_answer && unknown);
  EXPECT_EQ(getxattr->error, ENOSYS);
  EXPECT_EQ(access_answer->error, ENOSYS);
  EXPECT_EQ(unknown->error, ENOSYS);
}

TEST_F(LunFileTest, ForgetsAndInterruptsAreNeverAnswered) {
  fuse_forget_in forget{};
  forget.nlookup = 1;
  fuse_interrupt_in interrupt{};

  EXPECT_FALSE(Ask(FUSE_FORGET, kLunInode, forget).has_value());
  EXPECT_FALSE(Ask(FUSE_INTERRUPT, 0, interrupt).has_value());
}

TEST_F(LunFileTest, IoPastTheEndOrOfAnotherInodeIsAnsweredAtOnce) {
  fuse_read_in read{};
  read.offset = uint64_t{2048} * 512;
  read.size = 4096;
  auto past_end = Ask(FUSE_READ, kLunInode, read);
  read.offset = 0;
  auto wrong_inode = Ask(FUSE_READ, kRootInode, read);
  fuse_write_in write{};
  write.offset = 100;  // Not on a block boundary.
  write.size = 512;
  auto partial = Ask(FUSE_WRITE, kLunInode, write, std::string(512, 'x'));

  ASSERT_TRUE(past_end && wrong_inode && partial);
  EXPECT_EQ(past_end->error, 0);
  EXPECT_TRUE(past_end->payload.empty()) << "a read past the end reads nothing";
  EXPECT_EQ(wrong_inode->error, EINVAL);
  EXPECT_EQ(partial->error, EINVAL);
}

TEST_F(LunFileTest, ReadsWritesAndFsyncsWaitForTheTargetAndFailWhenTheyMust) {
  fuse_read_in read{};
  read.size = 4096;
  const uint64_t r = kernel_.Send(FUSE_READ, kLunInode, read);
  fuse_write_in write{};
  write.offset = 4096;
  write.size = 1024;
  const uint64_t w = kernel_.Send(FUSE_WRITE, kLunInode, write, std::string(1024, 'x'));
  const fuse_fsync_in fsync{};
  const uint64_t f = kernel_.Send(FUSE_FSYNC, kLunInode, fsync);
  ASSERT_TRUE(file_.Serve());
  EXPECT_FALSE(kernel_.Next().has_value()) << "no connection: everything waits for one";

  queue_.FailWaiting();

  std::vector<uint64_t> failed;
  while (auto a = kernel_.Next()) {
    EXPECT_EQ(a->error, EIO);
    failed.push_back(a->unique);
  }
  EXPECT_THAT(failed, ::testing::UnorderedElementsAre(r, w, f));
}

TEST_F(LunFileTest, FallocateAllocatesNothingAndRefusesToZeroOrPunch) {
  fuse_fallocate_in in{};
  in.length = 4096;
  auto keep_size = Ask(FUSE_FALLOCATE, kLunInode, in);
  in.mode = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
  auto punch = Ask(FUSE_FALLOCATE, kLunInode, in);
  in.mode = 0;
  in.offset = uint64_t{2048} * 512;
  auto past_end = Ask(FUSE_FALLOCATE, kLunInode, in);

  ASSERT_TRUE(keep_size && punch && past_end);
  EXPECT_EQ(keep_size->error, 0);
  EXPECT_EQ(punch->error, EOPNOTSUPP);
  EXPECT_EQ(past_end->error, EFBIG);
}

TEST_F(LunFileTest, AGrownLunIsAnnouncedToTheKernel) {
  EXPECT_FALSE(file_.GrowTo({.blocks = 1024, .block_size = 512})) << "never shrinks";
  EXPECT_FALSE(file_.GrowTo({.blocks = 4096, .block_size = 4096})) << "never another block size";
  EXPECT_FALSE(kernel_.Next().has_value());

  EXPECT_TRUE(file_.GrowTo({.blocks = 4096, .block_size = 512}));

  auto notify = kernel_.Next();
  ASSERT_TRUE(notify.has_value());
  EXPECT_EQ(notify->unique, 0u);
  EXPECT_EQ(-notify->error, FUSE_NOTIFY_INVAL_INODE);
  EXPECT_EQ(notify->As<fuse_notify_inval_inode_out>().ino, kLunInode);
  fuse_getattr_in in{};
  EXPECT_EQ(Ask(FUSE_GETATTR, kLunInode, in)->As<fuse_attr_out>().attr.size, 4096u * 512);
}

TEST_F(LunFileTest, TheConnectionEndsWhenTheKernelSideCloses) {
  FakeKernel kernel;
  CommandQueue queue(QueueOptions(), iscsi::IscsiContext());
  LunFile file(FuseConnection::ForTest(kernel.TakeServerEnd(), "/mnt/y"), "lun",
               iscsi::LunCapacity{.blocks = 8, .block_size = 512}, queue, pool_);
  EXPECT_TRUE(file.Serve());

  kernel = FakeKernel();  // The old kernel end closes.

  EXPECT_FALSE(file.Serve());
}

}  // namespace
}  // namespace stagehand::session
