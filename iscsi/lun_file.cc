#define FUSE_USE_VERSION 34

#include "iscsi/lun_file.h"

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <linux/falloc.h>
#include <sys/stat.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <absl/strings/str_cat.h>

#include "iscsi/lun_io.h"

namespace stagehand::iscsi {
namespace {

constexpr fuse_ino_t kRootIno = FUSE_ROOT_ID;
constexpr fuse_ino_t kLunIno = 2;

}  // namespace

// The FUSE operations. `fuse_req_userdata(req)` is the LunFile.
struct LunFile::Ops {
  static LunFile& Self(fuse_req_t req) { return *static_cast<LunFile*>(fuse_req_userdata(req)); }

  static struct stat LunStat(const LunFile& self) {
    struct stat st {};

    st.st_ino = kLunIno;
    st.st_mode = S_IFREG | 0600;
    st.st_nlink = 1;
    st.st_size = static_cast<off_t>(self.capacity_.Bytes());
    st.st_blksize = static_cast<blksize_t>(self.capacity_.block_size);
    st.st_blocks = static_cast<blkcnt_t>(self.capacity_.Bytes() / 512);
    return st;
  }

  static void Init(void* /*userdata*/, fuse_conn_info* conn) {
    conn->max_write = kMaxRequestBytes;
    conn->max_read = kMaxRequestBytes;  // Must match the max_read mount option.
    conn->max_background = 64;
    conn->congestion_threshold = 48;
    conn->want &= ~(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
  }

  static void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
    LunFile& self = Self(req);
    if (parent != kRootIno || self.file_name_ != name) {
      fuse_reply_err(req, ENOENT);
      return;
    }
    fuse_entry_param e{};
    e.ino = kLunIno;
    e.attr = LunStat(self);
    e.attr_timeout = 1.0;
    e.entry_timeout = 1.0;
    fuse_reply_entry(req, &e);
  }

  static void Getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* /*fi*/) {
    if (ino == kRootIno) {
      struct stat st {};

      st.st_ino = kRootIno;
      st.st_mode = S_IFDIR | 0700;
      st.st_nlink = 2;
      fuse_reply_attr(req, &st, 1.0);
    } else if (ino == kLunIno) {
      struct stat st = LunStat(Self(req));
      fuse_reply_attr(req, &st, 1.0);
    } else {
      fuse_reply_err(req, ENOENT);
    }
  }

  static void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
    if (ino != kLunIno) {
      fuse_reply_err(req, EISDIR);
      return;
    }
    fi->direct_io = 1;  // No page cache in between: the loop device above caches already.
    fi->keep_cache = 0;
    fuse_reply_open(req, fi);
  }

  static std::unique_ptr<IoRequest> NewRequest(fuse_req_t req, const MappedIo& io) {
    auto r = std::make_unique<IoRequest>();
    r->req = req;
    r->lba = io.lba;
    r->blocks = io.blocks;
    r->slice_offset = io.slice_offset;
    r->slice_length = io.slice_length;
    return r;
  }

  static void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* /*fi*/) {
    LunFile& self = Self(req);
    const MappedIo io = ino == kLunIno
                            ? MapRead(off, size, self.capacity_.Bytes(), self.capacity_.block_size)
                            : MappedIo{.error = EINVAL};
    if (io.error != 0) {
      fuse_reply_err(req, io.error);
      return;
    }
    if (io.blocks == 0) {
      fuse_reply_buf(req, nullptr, 0);
      return;
    }
    auto r = NewRequest(req, io);
    r->AllocateBuffer(self.pool_, io.blocks * self.capacity_.block_size);
    self.queue_.Submit(std::move(r));
  }

  static void Write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off,
                    fuse_file_info* /*fi*/) {
    LunFile& self = Self(req);
    const MappedIo io = ino == kLunIno
                            ? MapWrite(off, size, self.capacity_.Bytes(), self.capacity_.block_size)
                            : MappedIo{.error = EINVAL};
    if (io.error != 0) {
      fuse_reply_err(req, io.error);
      return;
    }
    if (io.blocks == 0) {
      fuse_reply_write(req, 0);
      return;
    }
    auto r = NewRequest(req, io);
    r->write = true;
    r->AllocateBuffer(self.pool_, io.slice_length);
    std::memcpy(r->buffer.get(), buf, io.slice_length);
    self.queue_.Submit(std::move(r));
  }

  static void Fsync(fuse_req_t req, fuse_ino_t /*ino*/, int /*datasync*/, fuse_file_info* /*fi*/) {
    auto r = std::make_unique<IoRequest>();
    r->req = req;
    r->flush = true;
    Self(req).queue_.Submit(std::move(r));
  }

  static void Flush(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* /*fi*/) {
    fuse_reply_err(req, 0);
  }

  static void Release(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* /*fi*/) {
    fuse_reply_err(req, 0);
  }

  static void Readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                      fuse_file_info* /*fi*/) {
    const LunFile& self = Self(req);
    if (ino != kRootIno) {
      fuse_reply_err(req, ENOTDIR);
      return;
    }
    std::vector<char> buf(size);
    size_t used = 0;

    struct Entry {
      const char* name;
      fuse_ino_t ino;
      mode_t mode;
    };

    const std::array<Entry, 3> entries = {{{".", kRootIno, S_IFDIR},
                                           {"..", kRootIno, S_IFDIR},
                                           {self.file_name_.c_str(), kLunIno, S_IFREG}}};
    for (off_t i = off; i < static_cast<off_t>(entries.size()); ++i) {
      struct stat st {};

      const Entry& entry = entries[static_cast<size_t>(i)];
      st.st_ino = entry.ino;
      st.st_mode = entry.mode;
      const size_t need =
          fuse_add_direntry(req, buf.data() + used, size - used, entry.name, &st, i + 1);
      if (need > size - used) {
        break;
      }
      used += need;
    }
    fuse_reply_buf(req, buf.data(), used);
  }

  // Allocation requests are no-ops (every block of a LUN exists). Zeroing and punching holes
  // are refused, so the kernel writes zeros itself: tgtd drops the connection on some WRITE SAME
  // commands (seen after a reconnect), so we do not offload them. See the closing note of
  // issue 2.
  static void Fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                        fuse_file_info* /*fi*/) {
    const LunFile& self = Self(req);
    if (ino != kLunIno || offset < 0 || length <= 0) {
      fuse_reply_err(req, EINVAL);
      return;
    }
    if ((mode & ~FALLOC_FL_KEEP_SIZE) != 0) {
      fuse_reply_err(req, EOPNOTSUPP);
      return;
    }
    const bool fits =
        static_cast<uint64_t>(offset) + static_cast<uint64_t>(length) <= self.capacity_.Bytes();
    fuse_reply_err(req, fits ? 0 : EFBIG);
  }

  static fuse_lowlevel_ops Table() {
    fuse_lowlevel_ops ops{};
    ops.init = &Init;
    ops.lookup = &Lookup;
    ops.getattr = &Getattr;
    ops.open = &Open;
    ops.read = &Read;
    ops.write = &Write;
    ops.flush = &Flush;
    ops.release = &Release;
    ops.fsync = &Fsync;
    ops.readdir = &Readdir;
    ops.fallocate = &Fallocate;
    return ops;
  }
};

LunFile::LunFile(std::string file_name, LunCapacity capacity, CommandQueue& queue, BufferPool& pool)
    : file_name_(std::move(file_name)),
      capacity_(capacity),
      queue_(queue),
      pool_(pool),
      buf_(std::make_unique<fuse_buf>()) {}

LunFile::~LunFile() {
  if (session_ != nullptr) {
    if (mounted_) {
      fuse_session_unmount(session_);
    }
    fuse_session_destroy(session_);
  }
  free(buf_->mem);  // libfuse allocates it with malloc.
}

absl::StatusOr<std::unique_ptr<LunFile>> LunFile::Mount(const std::string& mountpoint,
                                                        std::string file_name, LunCapacity capacity,
                                                        CommandQueue& queue, BufferPool& pool) {
  std::unique_ptr<LunFile> file(new LunFile(std::move(file_name), capacity, queue, pool));
  const std::string fsname =
      absl::StrCat("-ofsname=stagehand,subtype=iscsi,max_read=", kMaxRequestBytes);
  std::vector<char*> argv = {const_cast<char*>("stagehand-session"),
                             const_cast<char*>(fsname.c_str())};
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  const fuse_lowlevel_ops ops = Ops::Table();
  file->session_ = fuse_session_new(&args, &ops, sizeof(ops), file.get());
  fuse_opt_free_args(&args);
  if (file->session_ == nullptr) {
    return absl::InternalError("cannot create FUSE session");
  }
  if (fuse_session_mount(file->session_, mountpoint.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot mount FUSE at '", mountpoint, "'"));
  }
  file->mounted_ = true;
  const int fd = fuse_session_fd(file->session_);
  if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
    return ErrnoStatus(errno, "set /dev/fuse non-blocking");
  }
  return file;
}

int LunFile::Fd() const {
  return fuse_session_fd(session_);
}

bool LunFile::Serve() {
  while (true) {
    const int res = fuse_session_receive_buf(session_, buf_.get());
    if (res == -EAGAIN || res == -EINTR) {
      return true;
    }
    if (res <= 0 || fuse_session_exited(session_) != 0) {
      return false;
    }
    fuse_session_process_buf(session_, buf_.get());
  }
}

bool LunFile::GrowTo(const LunCapacity& capacity) {
  if (capacity.block_size != capacity_.block_size || capacity.Bytes() <= capacity_.Bytes()) {
    return false;
  }
  capacity_ = capacity;
  (void)fuse_lowlevel_notify_inval_inode(session_, kLunIno, 0, 0);
  return true;
}

}  // namespace stagehand::iscsi
