#include "transport/kernel/kernel_transport.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <netdb.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include <absl/cleanup/cleanup.h>
#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "base/file_io.h"
#include "base/log.h"
#include "base/unique_fd.h"
#include "iscsi/state_conversions.h"
#include "transport/kernel/disk_reservations.h"

namespace stagehand::transport::kernel {
namespace {

constexpr LogComponent kComponent = LogComponent::kSessions;

// Flushes `device` and checks that nobody holds it: an exclusive open fails with EBUSY while it
// is mounted or is a slave of a dm device.
absl::Status ReleaseBlockDevice(const std::string& device) {
  UniqueFd fd(::open(device.c_str(), O_RDONLY | O_EXCL | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT || errno == ENXIO || errno == ENODEV) {
      return absl::OkStatus();  // Already gone.
    }
    if (errno == EBUSY) {
      return absl::FailedPreconditionError(absl::StrCat(
          device, " is still in use (mounted, or held by another device such as a multipath map)"));
    }
    return ErrnoStatus(errno, absl::StrCat("open ", device));
  }
  if (::fsync(fd.Get()) != 0) {
    if (errno != EBADE) {
      return ErrnoStatus(errno, absl::StrCat("flush the buffers of ", device));
    }
    // EBADE is the block layer's RESERVATION CONFLICT: another node holds the LUN (this one is
    // fenced), and what this node did not write never will be; the device goes all the same.
    Log(kComponent)
        .warn(
            "{}: the target refuses this node's writes (another node holds the LUN's "
            "reservation): what was not written yet is dropped",
            device);
  }
  if (::ioctl(fd.Get(), BLKFLSBUF, 0) != 0) {
    return ErrnoStatus(errno, absl::StrCat("flush the buffers of ", device));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<iscsi::Portal> ResolvePortal(const iscsi::Portal& portal) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(portal.host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve portal host '", portal.host, "': ", ::gai_strerror(rc)));
  }
  char text[NI_MAXHOST];
  const int n =
      ::getnameinfo(res->ai_addr, res->ai_addrlen, text, sizeof text, nullptr, 0, NI_NUMERICHOST);
  ::freeaddrinfo(res);
  if (n != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve portal host '", portal.host, "'"));
  }
  return iscsi::Portal{text, portal.port};
}

KernelTransport::KernelTransport(KernelTransportOptions options)
    : options_(std::move(options)), sysfs_(options_.sysfs_root) {
  if (!options_.run) {
    options_.run = [](const std::vector<std::string>& argv, const RunOptions& o) {
      return RunProcess(argv, o);
    };
  }
  if (!options_.watch) {
    options_.watch = [] { return CreateUdevDeviceWatch(); };
  }
  if (!options_.scan) {
    options_.scan = [this](int host, uint32_t lun) { return sysfs_.ScanLun(host, lun); };
  }
  if (!options_.release) {
    options_.release = ReleaseBlockDevice;
  }
  if (!options_.open_reservations) {
    options_.open_reservations =
        [this](
            const std::string& disk) -> absl::StatusOr<std::unique_ptr<iscsi::ReservationChannel>> {
      if (const std::string state = sysfs_.DiskState(disk); state != "running") {
        return absl::UnavailableError(
            absl::StrCat(disk, " is ", state.empty() ? std::string("gone") : state));
      }
      SH_ASSIGN_OR_RETURN(std::unique_ptr<DiskReservations> d,
                          DiskReservations::Open(DevNode(disk)));
      return std::unique_ptr<iscsi::ReservationChannel>(std::move(d));
    };
  }
  renewer_ = std::make_unique<ReservationRenewer>(options_.open_reservations);
}

std::string KernelTransport::DevNode(std::string_view block) const {
  return absl::StrCat(options_.dev_dir, "/", ToAbsl(block));
}

absl::StatusOr<ProcessResult> KernelTransport::Run(const std::vector<std::string>& argv,
                                                   std::chrono::seconds timeout) const {
  RunOptions o;
  o.timeout = timeout;
  Log(kComponent).debug("run {}", ArgvToString(argv));
  auto r = options_.run(argv, o);
  if (r.ok()) {
    Log(kComponent).debug("{}: exit status {}", argv.front(), r->exit_code);
  } else if (absl::IsNotFound(r.status())) {
    return absl::FailedPreconditionError(
        absl::StrCat(argv.front(),
                     " is not installed; the kernel transport needs open-iscsi (and "
                     "multipath-tools for several portals)"));
  }
  return r;
}

namespace {

bool SameChap(const std::optional<iscsi::ChapCredentials>& a,
              const std::optional<iscsi::ChapCredentials>& b) {
  if (!a || !b) {
    return a.has_value() == b.has_value();
  }
  return a->user == b->user && a->secret == b->secret && a->user_in == b->user_in &&
         a->secret_in == b->secret_in;
}

}  // namespace

absl::Status KernelTransport::Login(const AttachRequest& request, const iscsi::TargetSpec& target,
                                    const iscsi::Portal& portal, bool multipath) {
  const std::string& iqn = target.iqn;
  const std::string p = portal.ToString();
  // `-o new` resets an existing record to iscsid.conf's defaults: only when there is none.
  if (!FindNodeRecordFile(options_.nodes_dir, iqn, portal).ok()) {
    SH_ASSIGN_OR_RETURN(
        ProcessResult created,
        Run({"iscsiadm", "-m", "node", "-o", "new", "-T", iqn, "-p", p}, kToolTimeout));
    if (created.exit_code != kIscsiErrSessionExists) {
      SH_RETURN_IF_ERROR(IscsiadmStatus(created, absl::StrCat("create the node record for ", p)));
    }
  }
  SH_ASSIGN_OR_RETURN(std::string file, FindNodeRecordFile(options_.nodes_dir, iqn, portal));
  SH_ASSIGN_OR_RETURN(std::string text, ReadFileToString(file));
  if (sysfs_.FindSession(iqn, portal.host, portal.port)) {
    // Already logged in (another volume on this target): iscsiadm will not log in again, so the
    // target never checks this volume's credentials, and rewriting the record would replace the
    // ones the session was made with. Only the same credentials may share the session.
    if (!SameChap(NodeRecordChap(text), target.session_chap)) {
      return absl::UnauthenticatedError(absl::StrCat(
          "a session to ", iqn, " at ", p,
          " is already logged in with other CHAP credentials (another volume of this target); "
          "the target cannot check this volume's: give every volume of a target the same "
          "node.session.auth secrets"));
    }
    Log(kComponent).debug("already logged in to {} at {} with the same credentials", iqn, p);
    return absl::OkStatus();
  }
  NodeRecordSettings settings;
  settings.chap = target.session_chap;
  settings.initiator_name = request.initiator_name;
  // With several paths a dead one must fail over quickly instead of queueing I/O for minutes.
  settings.replacement_timeout_seconds = multipath ? 5 : 0;
  // The record holds the CHAP secrets: root only, written whole (never seen half-written).
  SH_RETURN_IF_ERROR(WithContext(WriteFileAtomically(file, RewriteNodeRecord(text, settings), 0600),
                                 absl::StrCat("write the node record ", file)));
  SH_ASSIGN_OR_RETURN(
      ProcessResult login,
      Run({"iscsiadm", "-m", "node", "-T", iqn, "-p", p, "--login"}, options_.login_timeout));
  if (login.exit_code == kIscsiErrSessionExists) {
    Log(kComponent).debug("already logged in to {} at {}", iqn, p);
    return absl::OkStatus();
  }
  absl::Status s = IscsiadmStatus(login, absl::StrCat("log in to ", iqn, " at ", p));
  const auto& chap = target.session_chap;
  if (login.exit_code == kIscsiErrFatalLogin && chap && !chap->user_in.empty()) {
    // iscsid reports a target that failed mutual CHAP as a non-retryable login failure (19),
    // the same code as a refused login.
    return absl::UnauthenticatedError(
        absl::StrCat(s.message(),
                     "; with mutual CHAP this also means the target's answer did not match "
                     "node.session.auth.username_in/password_in"));
  }
  return s;
}

absl::StatusOr<std::string> KernelTransport::ScanDisk(DeviceWatch& watch,
                                                      const iscsi::Portal& portal,
                                                      const std::string& iqn, uint32_t lun) {
  auto session = sysfs_.FindSession(iqn, portal.host, portal.port);
  if (!session) {
    return absl::InternalError(absl::StrCat("iscsiadm logged in to ", iqn, " at ",
                                            portal.ToString(), " but sysfs shows no such session"));
  }
  if (session->state != "LOGGED_IN") {
    return absl::UnavailableError(absl::StrCat("the iSCSI session to ", iqn, " at ",
                                               portal.ToString(), " is ", session->state,
                                               " (reconnecting); try again when it is back"));
  }
  if (!sysfs_.SessionDisk(*session, lun)) {
    SH_RETURN_IF_ERROR(options_.scan(session->host, lun));
    if (!sysfs_.SessionDisk(*session, lun)) {
      return absl::NotFoundError(absl::StrCat("target ", iqn, " has no LUN ", lun, " (portal ",
                                              portal.ToString(), "); check 'lun'"));
    }
  }
  return watch.WaitFor(
      [&]() -> std::optional<std::string> {
        auto d = sysfs_.SessionDisk(*session, lun);
        if (d && !d->disk.empty() && watch.Processed(sysfs_.BlockPath(d->disk))) {
          return d->disk;
        }
        return std::nullopt;
      },
      options_.device_timeout,
      absl::StrCat("LUN ", lun, " of ", iqn, " at ", portal.ToString(), " to appear as a disk"));
}

absl::StatusOr<KernelSysfs::DmMap> KernelTransport::AssembleMap(
    DeviceWatch& watch, const std::vector<std::string>& disks) {
  SH_ASSIGN_OR_RETURN(ProcessResult daemon, Run({"multipathd", "show", "daemon"}, kToolTimeout));
  if (daemon.exit_code != 0) {
    return absl::FailedPreconditionError(
        "several portals need dm-multipath, but multipathd does not answer; install "
        "multipath-tools and start multipathd, or give a single portal");
  }
  // find_multipaths may be strict: list the WWID, then hand multipathd every path.
  SH_ASSIGN_OR_RETURN(ProcessResult added,
                      Run({"multipath", "-a", DevNode(disks.front())}, kToolTimeout));
  if (added.exit_code != 0) {
    return absl::InternalError(
        absl::StrCat("multipath -a ", DevNode(disks.front()), " failed: ", added.output));
  }
  for (const std::string& disk : disks) {
    SH_ASSIGN_OR_RETURN(ProcessResult r, Run({"multipathd", "add", "path", disk}, kToolTimeout));
    (void)r;  // "fail" when multipathd already has the path; the map check below decides.
  }
  std::optional<KernelSysfs::DmMap> found;
  auto map = watch.WaitFor(
      [&]() -> std::optional<std::string> {
        // udev makes /dev/mapper/<name> on the change event after the table is loaded, not on
        // the map's first event.
        auto m = sysfs_.FindMapOver(disks);
        if (m && watch.Processed(sysfs_.BlockPath(m->block)) && !m->name.empty() &&
            ::access(absl::StrCat(options_.dev_dir, "/mapper/", m->name).c_str(), F_OK) == 0) {
          found = m;
          return m->block;
        }
        return std::nullopt;
      },
      options_.map_timeout,
      absl::StrCat("a dm-multipath map over exactly ", absl::StrJoin(disks, ", ")));
  if (!map.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        map.status().message(),
        "; check multipathd's configuration (blacklist, find_multipaths) and that no other "
        "paths of this LUN are logged in"));
  }
  return *found;
}

void KernelTransport::Prepare(const AttachRequest& request, state::v1::SessionRecord* record) {
  const auto* target = std::get_if<iscsi::TargetSpec>(&request.target);
  if (target == nullptr) {
    return;  // Attach refuses it.
  }
  state::v1::KernelSessionRecord* session = record->mutable_kernel();
  session->clear_paths();
  for (const iscsi::Portal& portal : target->portals) {
    state::v1::KernelPath* path = session->add_paths();
    iscsi::ToProto(portal, path->mutable_portal());  // Resolved again by Detach.
    path->set_iqn(target->iqn);
    path->set_lun(target->lun);
  }
}

namespace {

// The identity `id` of the first path's disk, vetted by the caller (it may be another volume's
// LUN) and checked against what the volume expects. `so_far` is the record with that path.
absl::Status VetFirstPath(const AttachRequest& request, const iscsi::TargetSpec& target,
                          const state::v1::SessionRecord& so_far, const iscsi::LunIdentity& id) {
  if (request.vet_identity) {
    // What Detach needs should the attach stop here: this path, the portals not logged in yet
    // (as Prepare records them), and the identity.
    state::v1::SessionRecord record = so_far;
    for (size_t i = 1; i < target.portals.size(); ++i) {
      state::v1::KernelPath* next = record.mutable_kernel()->add_paths();
      iscsi::ToProto(target.portals[i], next->mutable_portal());
      next->set_iqn(target.iqn);
      next->set_lun(target.lun);
    }
    SH_RETURN_IF_ERROR(request.vet_identity(id, record));
  }
  return iscsi::CheckExpectedIdentity(id, target.expected_wwn, target.expected_serial);
}

}  // namespace

absl::StatusOr<Attachment> KernelTransport::Attach(const AttachRequest& request) {
  const auto* spec = std::get_if<iscsi::TargetSpec>(&request.target);
  if (spec == nullptr) {
    return absl::InvalidArgumentError("the kernel transport speaks iSCSI only");
  }
  const iscsi::TargetSpec& target = *spec;
  MutexLock lock(mu_);
  SH_ASSIGN_OR_RETURN(std::unique_ptr<DeviceWatch> watch, options_.watch());
  const bool multipath = target.portals.size() > 1;
  Attachment a;
  state::v1::KernelSessionRecord& rec = *a.session.mutable_kernel();
  iscsi::LunIdentity first;  // Of the first path: every other path must lead to it.
  bool attached = false;
  // Paths whose disk was already there before this attach (another volume's, or a half-made
  // attach's): a failed attach must not delete them or log their sessions out.
  std::vector<int> preexisting;
  absl::Cleanup undo = [&] {
    if (!attached) {
      state::v1::KernelSessionRecord ours = rec;
      ours.clear_paths();
      for (int i = 0; i < rec.paths_size(); ++i) {
        if (std::find(preexisting.begin(), preexisting.end(), i) == preexisting.end()) {
          *ours.add_paths() = rec.paths(i);
        }
      }
      Unreserve(rec);  // What this attach claimed: a failed stage keeps no node out.
      if (auto s = DetachLocked(ours, *watch); !s.ok()) {
        Log(kComponent)
            .error("volume '{}': cleanup after a failed kernel attach failed: {}",
                   request.volume_id, s);
      }
    }
  };
  std::vector<std::string> disks;
  for (const iscsi::Portal& given : target.portals) {
    SH_ASSIGN_OR_RETURN(iscsi::Portal portal, ResolvePortal(given));
    for (const state::v1::KernelPath& earlier : rec.paths()) {
      if (iscsi::FromProto(earlier.portal()) == portal) {
        return absl::InvalidArgumentError(
            absl::StrCat("portal '", given.ToString(), "' is the same address as another portal (",
                         portal.ToString(), "); give each portal once"));
      }
    }
    if (auto s = sysfs_.FindSession(target.iqn, portal.host, portal.port);
        s && sysfs_.SessionDisk(*s, target.lun)) {
      preexisting.push_back(rec.paths_size());
    }
    state::v1::KernelPath* path = rec.add_paths();
    iscsi::ToProto(portal, path->mutable_portal());
    path->set_iqn(target.iqn);
    path->set_lun(target.lun);
    SH_RETURN_IF_ERROR(Login(request, target, portal, multipath));
    SH_ASSIGN_OR_RETURN(std::string disk, ScanDisk(*watch, portal, target.iqn, target.lun));
    path->set_disk(disk);
    SH_ASSIGN_OR_RETURN(iscsi::LunIdentity id, sysfs_.DiskIdentity(disk));
    if (disks.empty()) {
      first = id;
      a.identity = id;
      iscsi::ToProto(id,
                     rec.mutable_identity());  // Before any check: cleanup deletes only this LUN.
      SH_RETURN_IF_ERROR(VetFirstPath(request, target, a.session, id));
    } else if (auto same = iscsi::CheckSameLun(first, id); !same.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("portal ", portal.ToString(), " leads to another LUN than ",
                       iscsi::FromProto(rec.paths(0).portal()).ToString(), ": ", same.message()));
    }
    disks.push_back(disk);
    Log(kComponent)
        .info("volume '{}': LUN {} of {} at {} is {} ({})", request.volume_id, target.lun,
              target.iqn, portal.ToString(), DevNode(disk), iscsi::DescribeIdentity(id));
  }
  // Reserved before the LUN is handed over, so before the first write of any kind; before the
  // map too: every path is registered before I/O can take it.
  if (request.reservation_key != 0) {
    SH_RETURN_IF_ERROR(Reserve(request, disks, a));
  }
  std::string top = disks.front();
  rec.set_device(DevNode(top));
  if (multipath) {
    SH_ASSIGN_OR_RETURN(KernelSysfs::DmMap map, AssembleMap(*watch, disks));
    rec.set_multipath_map(map.name);
    top = map.block;
    rec.set_device(absl::StrCat(options_.dev_dir, "/mapper/", map.name));
    Log(kComponent)
        .info("volume '{}': dm-multipath map {} ({}) over {}", request.volume_id, map.name,
              map.block, absl::StrJoin(disks, ", "));
  }
  SH_ASSIGN_OR_RETURN(a.capacity, sysfs_.Capacity(top));
  a.device = rec.device();
  attached = true;
  return a;
}

absl::StatusOr<uint64_t> KernelTransport::RefreshCapacity(const state::v1::SessionRecord& record) {
  const state::v1::KernelSessionRecord& session = record.kernel();
  MutexLock lock(mu_);
  // Every path must be up: multipathd sizes the map from its first path, and a map larger than
  // a dead path's stale size cannot be loaded. Grow when the paths are back.
  std::vector<std::string> disks;
  for (const state::v1::KernelPath& path : session.paths()) {
    const iscsi::Portal portal = iscsi::FromProto(path.portal());
    const std::string where = absl::StrCat(path.iqn(), " at ", portal.ToString());
    auto s = sysfs_.FindSession(path.iqn(), portal.host, portal.port);
    auto d = s ? sysfs_.SessionDisk(*s, path.lun()) : std::nullopt;
    if (!s || s->state != "LOGGED_IN" || !d || d->disk.empty() ||
        sysfs_.DiskState(d->disk) != "running") {
      return absl::UnavailableError(
          absl::StrCat("the path to ", where, " is down; expand again once every path is back"));
    }
    disks.push_back(d->disk);
  }
  if (disks.empty()) {
    return absl::UnavailableError("no path of the volume's LUN is logged in");
  }
  const iscsi::LunIdentity want = iscsi::FromProto(session.identity());
  for (const std::string& disk : disks) {
    SH_RETURN_IF_ERROR(sysfs_.RescanDisk(disk));
    // A rescan re-reads the VPD pages: never grow a filesystem onto another LUN.
    SH_ASSIGN_OR_RETURN(iscsi::LunIdentity now, sysfs_.DiskIdentity(disk));
    if (!want.Empty()) {
      SH_RETURN_IF_ERROR(
          WithContext(iscsi::CheckSameLun(want, now), absl::StrCat("rescan of ", disk)));
    }
  }
  std::string top = disks.front();
  if (!session.multipath_map().empty()) {
    auto map = sysfs_.FindMapNamed(session.multipath_map());
    if (!map) {
      return absl::UnavailableError(
          absl::StrCat("dm-multipath map ", session.multipath_map(), " is gone"));
    }
    SH_ASSIGN_OR_RETURN(
        ProcessResult r,
        Run({"multipathd", "resize", "map", session.multipath_map()}, kToolTimeout));
    if (r.exit_code != 0 || absl::StrContains(r.output, "fail")) {
      return absl::InternalError(
          absl::StrCat("multipathd resize map ", session.multipath_map(), " failed: ", r.output));
    }
    top = map->block;
  }
  SH_ASSIGN_OR_RETURN(iscsi::LunCapacity c, sysfs_.Capacity(top));
  return c.Bytes();
}

SessionHealth KernelTransport::Health(const state::v1::SessionRecord& record) {
  const state::v1::KernelSessionRecord& session = record.kernel();
  SessionHealth h;
  const iscsi::LunIdentity want = iscsi::FromProto(session.identity());
  std::vector<std::string> problems;
  bool identity_changed = false;
  int working = 0;
  bool reconnecting = false;
  bool timed_out = false;
  for (const state::v1::KernelPath& path : session.paths()) {
    const iscsi::Portal portal = iscsi::FromProto(path.portal());
    const std::string where = absl::StrCat(path.iqn(), " at ", portal.ToString());
    auto s = sysfs_.FindSession(path.iqn(), portal.host, portal.port);
    if (!s) {
      problems.push_back(absl::StrCat("no iSCSI session to ", where));
      continue;
    }
    if (s->state != "LOGGED_IN") {
      // FAILED: the kernel is logging in again and I/O waits; FREE (after FAILED): the
      // replacement timeout ran out and I/O fails meanwhile.
      reconnecting = reconnecting || s->state == "FAILED";
      timed_out = timed_out || s->state == "FREE";
      problems.push_back(absl::StrCat("iSCSI session to ", where, " is ", s->state));
      continue;
    }
    auto d = sysfs_.SessionDisk(*s, path.lun());
    if (!d || d->disk.empty()) {
      problems.push_back(absl::StrCat("LUN ", path.lun(), " of ", where, " has no disk"));
      continue;
    }
    if (!path.disk().empty() && d->disk != path.disk()) {
      // The LUN came back under another name (a re-login): the recorded device may now be
      // another LUN's.
      problems.push_back(absl::StrCat("LUN ", path.lun(), " of ", where, " is now ", d->disk,
                                      ", not the staged ", path.disk(), "; stage it again"));
      identity_changed = true;
      continue;
    }
    if (auto id = sysfs_.DiskIdentity(d->disk); id.ok() && !want.Empty()) {
      if (auto same = iscsi::CheckSameLun(want, *id); !same.ok()) {
        identity_changed = true;
        problems.push_back(std::string(same.message()));
        continue;
      }
    }
    if (const std::string state = sysfs_.DiskState(d->disk); state != "running") {
      problems.push_back(absl::StrCat(d->disk, " (", where, ") is ", state));
      continue;
    }
    ++working;
  }
  if (!session.multipath_map().empty() && !sysfs_.FindMapNamed(session.multipath_map())) {
    problems.push_back(absl::StrCat("dm-multipath map ", session.multipath_map(), " is gone"));
    working = 0;
  }
  h.message = absl::StrJoin(problems, "; ");
  std::optional<ReservationRenewer::State> reservation;
  if (!session.reservation_file().empty()) {
    reservation = renewer_->Get(session.reservation_file());
  }
  if (reservation && reservation->fenced) {
    h.reason = health::Reason::kFenced;
    h.message = reservation->message;
  } else if (identity_changed) {
    h.reason = health::Reason::kLunIdentityChanged;
  } else if (working == 0) {
    // The same reasons as the userspace transport's: reconnecting heals by itself.
    h.reason = reconnecting ? health::Reason::kSessionReconnecting
               : timed_out  ? health::Reason::kReplacementTimeoutPassed
                            : health::Reason::kSessionDown;
  } else if (!problems.empty()) {
    h.reason = health::Reason::kMultipathDegraded;
    h.message = absl::StrCat(working, " of ", session.paths_size(), " paths working: ", h.message);
  } else if (session.unreserved()) {
    h.reason = health::Reason::kUnreserved;
    h.message =
        "the target has no SCSI-3 persistent reservations: this single-node volume is staged "
        "without one (takeoverAfter off), and nothing keeps another node from writing to it";
  }
  return h;
}

absl::Status KernelInitiatorAvailable(const std::string& sysfs_root) {
  struct stat st {};

  const bool loaded = ::stat((sysfs_root + "/module/iscsi_tcp").c_str(), &st) == 0;
  if (!loaded) {
    utsname u{};
    ::uname(&u);
    auto deps = ReadFileToString(absl::StrCat("/lib/modules/", u.release, "/modules.dep"));
    if (!deps.ok() || !absl::StrContains(*deps, "/iscsi_tcp.ko")) {
      return absl::FailedPreconditionError(
          absl::StrCat("the kernel (", u.release,
                       ") has no iSCSI initiator: iscsi_tcp is neither loaded nor "
                       "in modules.dep"));
    }
  }
  // iscsiadm talks to iscsid on this abstract unix socket (socket-activated on systemd hosts).
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  constexpr char kIscsidSocket[] = "ISCSIADM_ABSTRACT_NAMESPACE";
  std::memcpy(addr.sun_path + 1, kIscsidSocket, sizeof kIscsidSocket - 1);
  const auto len =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + sizeof kIscsidSocket - 1);
  if (!fd || ::connect(fd.Get(), reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
    return absl::FailedPreconditionError(
        "iscsid does not answer (install open-iscsi and start iscsid, or iscsid.socket)");
  }
  return absl::OkStatus();
}

}  // namespace stagehand::transport::kernel
