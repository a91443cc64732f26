#include "session/lun_file.h"

#include <dirent.h>
#include <linux/falloc.h>
#include <linux/fuse.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <vector>

#include <absl/strings/str_cat.h>

#include "session/lun_io.h"

namespace stagehand::session {
namespace {

// The oldest protocol this server speaks: 7.31 (Linux 5.9) has every field used here.
constexpr uint32_t kMinMinor = 31;
// The newest it knows; the kernel and the server settle on the smaller of theirs.
constexpr uint32_t kMaxMinor = 38;

// What the server asks for at INIT, of what the kernel offers: reads in parallel, big writes,
// asynchronous direct I/O (the loop device's requests stay in flight together) and requests
// of up to kMaxRequestBytes (max_pages).
constexpr uint32_t kWantedFlags =
    FUSE_ASYNC_READ | FUSE_BIG_WRITES | FUSE_ASYNC_DIO | FUSE_MAX_PAGES | FUSE_PARALLEL_DIROPS;

constexpr uint32_t kMaxBackground = 64;
constexpr uint32_t kCongestionThreshold = 48;

// The largest request: a write of kMaxRequestBytes after its headers (at least the 8 KiB the
// kernel insists on).
constexpr size_t kReceiveBytes = kMaxRequestBytes + 4096;

// A struct the request carries after its header; nullptr when the request is too short.
template <typename T>
const T* ArgAs(std::span<const uint8_t> arg) {
  return arg.size() >= sizeof(T) ? reinterpret_cast<const T*>(arg.data()) : nullptr;
}

fuse_attr AttrOf(uint64_t ino, const iscsi::LunCapacity& capacity) {
  fuse_attr attr{};
  attr.ino = ino;
  if (ino == kRootInode) {
    attr.mode = S_IFDIR | 0700;
    attr.nlink = 2;
  } else {
    attr.mode = S_IFREG | 0600;
    attr.nlink = 1;
    attr.size = capacity.Bytes();
    attr.blocks = capacity.Bytes() / 512;
    attr.blksize = capacity.block_size;
  }
  return attr;
}

// Appends one directory entry (struct fuse_dirent, its name, padding to 8 bytes) to `out`
// unless that would pass `limit` bytes. False when it did not fit.
bool AddDirent(std::vector<uint8_t>& out, size_t limit, uint64_t ino, uint64_t next_offset,
               uint32_t type, std::string_view name) {
  const size_t entry = FUSE_DIRENT_ALIGN(FUSE_NAME_OFFSET + name.size());
  if (out.size() + entry > limit) {
    return false;
  }
  const size_t at = out.size();
  out.resize(at + entry, 0);
  fuse_dirent d{};
  d.ino = ino;
  d.off = next_offset;
  d.namelen = static_cast<uint32_t>(name.size());
  d.type = type;
  std::memcpy(out.data() + at, &d, FUSE_NAME_OFFSET);
  std::memcpy(out.data() + at + FUSE_NAME_OFFSET, name.data(), name.size());
  return true;
}

}  // namespace

LunFile::LunFile(FuseConnection connection, std::string file_name, iscsi::LunCapacity capacity,
                 CommandQueue& queue, BufferPool& pool)
    : connection_(std::move(connection)),
      file_name_(std::move(file_name)),
      capacity_(capacity),
      queue_(queue),
      pool_(pool),
      receive_(new uint8_t[kReceiveBytes]) {}

absl::StatusOr<std::unique_ptr<LunFile>> LunFile::Mount(const std::string& mountpoint,
                                                        std::string file_name,
                                                        iscsi::LunCapacity capacity,
                                                        CommandQueue& queue, BufferPool& pool) {
  FuseMountOptions options;
  options.mountpoint = mountpoint;
  options.max_read = kMaxRequestBytes;
  SH_ASSIGN_OR_RETURN(FuseConnection connection, FuseConnection::Mount(options));
  return std::make_unique<LunFile>(std::move(connection), std::move(file_name), capacity, queue,
                                   pool);
}

bool LunFile::Serve() {
  while (true) {
    const absl::StatusOr<size_t> n =
        connection_.Receive(std::span<uint8_t>(receive_.get(), kReceiveBytes));
    if (!n.ok()) {
      return false;
    }
    if (*n == 0) {
      return true;
    }
    Dispatch(std::span<const uint8_t>(receive_.get(), *n));
  }
}

void LunFile::Answer(uint64_t unique, int error, std::span<const uint8_t> payload) {
  // A reply the kernel refuses is a bug here, and nothing can be done about it now: the
  // request stays unanswered, which the stall checks report.
  (void)connection_.Reply(unique, error, {payload});
}

void LunFile::Dispatch(std::span<const uint8_t> in) {
  const auto* header = ArgAs<fuse_in_header>(in);
  if (header == nullptr || header->len != in.size()) {
    return;  // Not a request the kernel sends; there is nothing to answer it with.
  }
  const std::span<const uint8_t> arg = in.subspan(sizeof(fuse_in_header));
  const std::span<const uint8_t> data =
      header->opcode == FUSE_WRITE && arg.size() >= sizeof(fuse_write_in)
          ? arg.subspan(sizeof(fuse_write_in))
          : std::span<const uint8_t>();
  Handle(*header, arg, data);
}

absl::Status LunFile::StartRing() {
  FuseRing::Options options;
  options.payload_bytes = kMaxRequestBytes;
  options.held = ring_held_;
  absl::Status started = connection_.StartRing(options);
  if (!started.ok()) {
    ring_refusal_ = std::string(started.message());
  }
  return started;
}

int LunFile::RingFd() const {
  FuseRing* ring = const_cast<FuseConnection&>(connection_).ring();
  return ring != nullptr ? ring->Fd() : -1;
}

std::string LunFile::FuseMode() const {
  return RingFd() >= 0 ? "io_uring" : "classic";
}

bool LunFile::ServeRing() {
  FuseRing* ring = connection_.ring();
  if (ring == nullptr) {
    return true;
  }
  const absl::Status served = ring->Harvest([this](const FuseRingRequest& r) {
    // A lookup's name comes as the payload (its per-opcode header is empty).
    Handle(*r.header, r.header->opcode == FUSE_LOOKUP ? r.payload : r.op_in, r.payload,
           r.reply_buffer);
  });
  return served.ok();
}

void LunFile::Handle(const fuse_in_header& header, std::span<const uint8_t> arg,
                     std::span<const uint8_t> data, std::span<uint8_t> ring_buffer) {
  const uint64_t unique = header.unique;
  const uint64_t ino = header.nodeid;
  switch (header.opcode) {
    case FUSE_INIT:
      Init(unique, arg);
      return;
    case FUSE_LOOKUP:
      Lookup(unique, ino, arg);
      return;
    case FUSE_GETATTR:
      Getattr(unique, ino);
      return;
    case FUSE_OPEN:
      Open(unique, ino);
      return;
    case FUSE_OPENDIR: {
      const fuse_open_out out{};
      Answer(unique, ino == kRootInode ? 0 : ENOTDIR, BytesOf(out));
      return;
    }
    case FUSE_READ:
      Read(unique, ino, arg, ring_buffer);
      return;
    case FUSE_WRITE:
      Write(unique, ino, arg, data, !ring_buffer.empty());
      return;
    case FUSE_FSYNC:
      Fsync(unique);
      return;
    case FUSE_READDIR:
      Readdir(unique, ino, arg);
      return;
    case FUSE_STATFS:
      Statfs(unique);
      return;
    case FUSE_FALLOCATE:
      Fallocate(unique, ino, arg);
      return;
    case FUSE_FLUSH:
    case FUSE_RELEASE:
    case FUSE_RELEASEDIR:
    case FUSE_DESTROY:
      Answer(unique, 0);
      return;
    case FUSE_FORGET:
    case FUSE_BATCH_FORGET:
    case FUSE_INTERRUPT:
      return;  // Never answered. Interrupts are moot: every request here completes or fails.
    default:
      // ENOSYS: the kernel stops sending what it can do without us (access, xattrs, ...).
      Answer(unique, ENOSYS);
      return;
  }
}

void LunFile::Init(uint64_t unique, std::span<const uint8_t> arg) {
  // Protocols before 7.36 send a shorter INIT (no flags2); the first four fields are the same.
  if (arg.size() < offsetof(fuse_init_in, flags2)) {
    Answer(unique, EINVAL);
    return;
  }
  fuse_init_in got{};
  std::memcpy(&got, arg.data(), std::min(arg.size(), sizeof(got)));
  fuse_init_out out{};
  out.major = FUSE_KERNEL_VERSION;
  out.minor = std::min(got.minor, kMaxMinor);
  if (got.major != FUSE_KERNEL_VERSION || got.minor < kMinMinor) {
    // Another major: answer with ours (the kernel then retries or gives up); too old a minor:
    // refuse, rather than mis-speak an older layout.
    Answer(unique, got.major != FUSE_KERNEL_VERSION ? 0 : EPROTO, BytesOf(out));
    return;
  }
  out.max_readahead = got.max_readahead;
  out.flags = got.flags & kWantedFlags;
  out.max_background = kMaxBackground;
  out.congestion_threshold = kCongestionThreshold;
  out.max_write = kMaxRequestBytes;
  out.time_gran = 1;
  out.max_pages = static_cast<uint16_t>(kMaxRequestBytes / static_cast<uint32_t>(getpagesize()));
  const uint64_t offered =
      (got.flags & FUSE_INIT_EXT) != 0 ? (uint64_t{got.flags2} << 32) | got.flags : got.flags;
  const bool ring = want_ring_ && (offered & kFuseOverIoUring) != 0;
  if (ring) {
    out.flags |= FUSE_INIT_EXT;
    out.flags2 = static_cast<uint32_t>(kFuseOverIoUring >> 32);
  } else if (want_ring_) {
    ring_refusal_ =
        "the kernel does not offer FUSE over io_uring (Linux 6.14 and later, with the module "
        "parameter fuse.enable_uring=1)";
  }
  Answer(unique, 0, BytesOf(out));
  if (ring) {
    // The kernel took the INIT answer (and with it the ring's sizes) in that write.
    (void)StartRing();
  }
}

void LunFile::Lookup(uint64_t unique, uint64_t parent, std::span<const uint8_t> arg) {
  // The name, NUL-terminated.
  const auto end = std::find(arg.begin(), arg.end(), uint8_t{0});
  const std::string_view name(reinterpret_cast<const char*>(arg.data()),
                              static_cast<size_t>(end - arg.begin()));
  if (parent != kRootInode || name != file_name_) {
    Answer(unique, ENOENT);
    return;
  }
  fuse_entry_out e{};
  e.nodeid = kLunInode;
  e.generation = 1;
  e.entry_valid = 1;
  e.attr_valid = 1;
  e.attr = AttrOf(kLunInode, capacity_);
  Answer(unique, 0, BytesOf(e));
}

void LunFile::Getattr(uint64_t unique, uint64_t ino) {
  if (ino != kRootInode && ino != kLunInode) {
    Answer(unique, ENOENT);
    return;
  }
  fuse_attr_out out{};
  out.attr_valid = 1;
  out.attr = AttrOf(ino, capacity_);
  Answer(unique, 0, BytesOf(out));
}

void LunFile::Open(uint64_t unique, uint64_t ino) {
  if (ino != kLunInode) {
    Answer(unique, EISDIR);
    return;
  }
  fuse_open_out out{};
  out.open_flags = FOPEN_DIRECT_IO;  // No page cache in between: the loop device caches already.
  Answer(unique, 0, BytesOf(out));
}

void LunFile::Read(uint64_t unique, uint64_t ino, std::span<const uint8_t> arg,
                   std::span<uint8_t> ring_buffer) {
  const auto* in = ArgAs<fuse_read_in>(arg);
  const MappedIo io = ino == kLunInode && in != nullptr
                          ? MapRead(static_cast<int64_t>(in->offset), in->size, capacity_.Bytes(),
                                    capacity_.block_size)
                          : MappedIo{.error = EINVAL};
  if (io.error != 0 || io.blocks == 0) {
    Answer(unique, io.error);
    return;
  }
  auto r = std::make_unique<IoRequest>();
  r->fuse = &connection_;
  r->unique = unique;
  r->lba = io.lba;
  r->blocks = io.blocks;
  r->slice_offset = io.slice_offset;
  r->slice_length = io.slice_length;
  if (io.slice_offset == 0 && io.blocks * capacity_.block_size <= ring_buffer.size()) {
    r->borrowed = ring_buffer.data();  // Read into the ring entry: the reply is in place.
  } else {
    r->AllocateBuffer(pool_, io.blocks * capacity_.block_size);
  }
  queue_.Submit(std::move(r));
}

void LunFile::Write(uint64_t unique, uint64_t ino, std::span<const uint8_t> arg,
                    std::span<const uint8_t> data, bool data_stays) {
  const auto* in = ArgAs<fuse_write_in>(arg);
  const MappedIo io = ino == kLunInode && in != nullptr && data.size() >= in->size
                          ? MapWrite(static_cast<int64_t>(in->offset), in->size, capacity_.Bytes(),
                                     capacity_.block_size)
                          : MappedIo{.error = EINVAL};
  if (io.error != 0 || io.blocks == 0) {
    fuse_write_out out{};  // An empty write past the end: zero bytes written.
    Answer(unique, io.error, BytesOf(out));
    return;
  }
  auto r = std::make_unique<IoRequest>();
  r->fuse = &connection_;
  r->unique = unique;
  r->write = true;
  r->lba = io.lba;
  r->blocks = io.blocks;
  r->slice_length = io.slice_length;
  if (data_stays) {
    // In the ring entry, which holds it until the reply: sent from there.
    r->borrowed = const_cast<uint8_t*>(data.data());
  } else {
    r->AllocateBuffer(pool_, io.slice_length);
    std::memcpy(r->buffer.get(), data.data(), io.slice_length);
  }
  queue_.Submit(std::move(r));
}

void LunFile::Fsync(uint64_t unique) {
  auto r = std::make_unique<IoRequest>();
  r->fuse = &connection_;
  r->unique = unique;
  r->flush = true;
  queue_.Submit(std::move(r));
}

void LunFile::Readdir(uint64_t unique, uint64_t ino, std::span<const uint8_t> arg) {
  const auto* in = ArgAs<fuse_read_in>(arg);
  if (ino != kRootInode || in == nullptr) {
    Answer(unique, ino != kRootInode ? ENOTDIR : EINVAL);
    return;
  }

  struct Entry {
    std::string_view name;
    uint64_t ino;
    uint32_t type;
  };

  const std::array<Entry, 3> entries = {
      {{".", kRootInode, DT_DIR}, {"..", kRootInode, DT_DIR}, {file_name_, kLunInode, DT_REG}}};
  std::vector<uint8_t> out;
  for (uint64_t i = in->offset; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (!AddDirent(out, in->size, e.ino, i + 1, e.type, e.name)) {
      break;
    }
  }
  Answer(unique, 0, out);
}

void LunFile::Statfs(uint64_t unique) {
  fuse_statfs_out out{};
  out.st.bsize = 512;
  out.st.frsize = 512;
  out.st.namelen = 255;
  Answer(unique, 0, BytesOf(out));
}

// Allocation requests are no-ops (every block of a LUN exists). Zeroing and punching holes are
// refused, so the kernel writes zeros itself: tgtd drops the connection on some WRITE SAME
// commands (seen after a reconnect), so we do not offload them.
void LunFile::Fallocate(uint64_t unique, uint64_t ino, std::span<const uint8_t> arg) {
  const auto* in = ArgAs<fuse_fallocate_in>(arg);
  if (ino != kLunInode || in == nullptr || in->length == 0) {
    Answer(unique, EINVAL);
    return;
  }
  if ((in->mode & ~static_cast<uint32_t>(FALLOC_FL_KEEP_SIZE)) != 0) {
    Answer(unique, EOPNOTSUPP);
    return;
  }
  const bool fits = in->offset <= capacity_.Bytes() && in->length <= capacity_.Bytes() - in->offset;
  Answer(unique, fits ? 0 : EFBIG);
}

bool LunFile::GrowTo(const iscsi::LunCapacity& capacity) {
  if (capacity.block_size != capacity_.block_size || capacity.Bytes() <= capacity_.Bytes()) {
    return false;
  }
  capacity_ = capacity;
  (void)connection_.NotifyInvalInode(kLunInode);
  return true;
}

}  // namespace stagehand::session
