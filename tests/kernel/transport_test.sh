#!/bin/bash
# End-to-end test of stagehand's kernel iSCSI transport. Runs inside the guest that
# tests/kernel/guest.sh boots (as /test.sh, multipathd running); tests/kernel/run_transport.sh
# starts the target and passes the parameters:
#   SH_TGT_IQN, SH_TGT_PORT, SH_TGT_PORT2   target and its two portal ports on the host (10.0.2.2)
#   SH_TGT_SERIAL                           LUN 1's unit serial number
#   SH_TGT_CANARY_LUN                       a LUN of the target that must never be scanned
#   SH_CHAP_USER, SH_CHAP_PASSWORD          the CHAP account bound to the target (test-only)
#   SH_STAGEHAND, SH_STAGEHANDCTL           the binaries (included at their host paths)
#   SH_TRACE=1                              trace every command with a timestamp
#
# stagehand runs with --iscsi-transport=kernel; everything goes through stagehandctl's CSI calls:
#  1. single path with CHAP: stage (mount from /dev/sdX, ext4, one session, node record with
#     node.startup and node.session.scan manual although iscsid.conf's defaults here say
#     automatic/auto, only LUN 1 scanned, the CHAP secret in no command line, log, output or
#     file that others than root can read), publish, write, unpublish, unstage (no mount,
#     session or disk left), stage again (same filesystem, same data), expansion (below),
#     unstage;
#  2. a wrong CHAP secret: stage fails with UNAUTHENTICATED and leaves nothing behind;
#  2b. one writer per LUN (agent started with --takeover-after 3: renewals every second), with
#     stagehandctl through libiscsi as the other node (an initiator of its own): every stage of
#     this single-node volume reserves the LUN for node "guest" (one registration per path: 1,
#     then 2 under dm-multipath) and leaves none after unstage; a stage while node "other" holds
#     it is UNAVAILABLE and leaves nothing; the guest's key moves (renewal); taken over for
#     "other" (--take-over-for), the guest shows Fenced, its writes fail (fsync through ext4,
#     O_DIRECT on the disk), it never registers again, and unpublish + unstage finish and leave
#     the other node's reservation alone;
#  3. two portals: a dm-multipath map over two paths, expansion (below); the host drops the
#     second portal on request (console line "STAGEHAND-HOST-REQUEST drop-portal <port>", see
#     run_transport.sh); once the kernel failed that path, write + fsync + read back through the
#     mount must work over the other; unstage removes the map and logs out of both sessions (one
#     of them failed);
#  4. stagehand stops on SIGTERM; no session, disk, map or mount is left.
# Volume expansion, in 1 (single path; volume_path: the staging path) and 3 (two paths, before
# the portal drop; volume_path: the publish path): the host grows the LUN on request (console
# line "STAGEHAND-HOST-REQUEST grow-lun <lun> <MiB>", see run_transport.sh); NodeExpandVolume
# must pick the new size up (the disk, or the map and both paths), grow ext4 online, keep the
# data and find the LUN's identity unchanged (VPD pages 0x80 and 0x83 byte for byte). Asking for
# more than the LUN has is FAILED_PRECONDITION (the kubelet retries it; OUT_OF_RANGE would mark
# the resize infeasible) and changes nothing.
# Each check prints "transport: ok <what> (<seconds>s)"; the last line is a summary.
set -euo pipefail

iqn=${SH_TGT_IQN:?}
port=${SH_TGT_PORT:?}
port2=${SH_TGT_PORT2:?}
port3=${SH_TGT_PORT3:?}
serial=${SH_TGT_SERIAL:?}
canary_lun=${SH_TGT_CANARY_LUN:-}
chap_user=${SH_CHAP_USER:?}
chap_password=${SH_CHAP_PASSWORD:?}
chap_user_in=${SH_CHAP_USER_IN:?}
chap_password_in=${SH_CHAP_PASSWORD_IN:?}
stagehand=${SH_STAGEHAND:?}
stagehandctl=${SH_STAGEHANDCTL:?}
# Nothing started from here inherits the secret through its environment.
unset SH_CHAP_PASSWORD SH_CHAP_PASSWORD_IN
host=10.0.2.2
lun=1
endpoint=unix:///run/sh/csi.sock
stage_dir=/var/lib/sh-stage
pub_dir=/var/lib/sh-pub
work=/run/sh-test # logs and records of this test; secrets go to /root/secrets
shlog=$work/stagehand.log
ctl_out=$work/stagehandctl.out
argv_log=$work/iscsiadm.argv
wrong_password=$chap_password-wrong
shpid=""
check_name=transport
# shellcheck source=check.sh
source /check.sh

# What a failed run needs to be understood; the secret is test-only, so the logs are shown whole.
diagnostics() {
  echo "transport: --- diagnostics ---"
  echo "transport: iSCSI sessions:"
  local s sid
  for s in /sys/class/iscsi_session/session*; do
    [[ -e $s ]] || continue
    sid=${s##*/session}
    echo "  session$sid $(<"$s/state") $(<"$s/targetname")" \
      "port $(cat "/sys/class/iscsi_connection/connection$sid:0/persistent_port" 2>/dev/null)" \
      "recovery_tmo $(<"$s/recovery_tmo")"
  done
  echo "transport: block devices: $(ls /sys/block)"
  echo "transport: mounts under the test directories:"
  findmnt -rn -o TARGET,SOURCE,FSTYPE | grep -E "^($stage_dir|$pub_dir)/" || true
  echo "transport: multipathd show topology:"
  timeout 10 multipathd show topology || true
  echo "transport: iscsiadm calls (argv):"
  cat "$argv_log" 2>/dev/null || true
  echo "transport: stagehandctl output:"
  cat "$ctl_out" 2>/dev/null || true
  echo "transport: stagehand log ($shlog):"
  cat "$shlog" 2>/dev/null || true
  echo "transport: dmesg (last 40 lines):"
  dmesg | tail -n 40
}
# shellcheck disable=SC2317 # invoked by the EXIT trap
on_exit() {
  local rc=$?
  # A filesystem left frozen (a failed expansion step) would block what comes after.
  [[ -z ${frozen:-} ]] || xfs_io -F -r -x -c thaw "$frozen" || true
  [[ $rc == 0 ]] || diagnostics
  exit "$rc"
}
trap on_exit EXIT
trap 'echo "transport: FAIL at line $LINENO: $BASH_COMMAND" >&2' ERR

# until_deadline SECONDS COMMAND...: polls COMMAND (every 50 ms) until it succeeds; 1 on timeout.

ctl() { # stagehandctl on the test's endpoint, stderr merged; its output is kept in $ctl_out
  local out rc=0
  out=$("$stagehandctl" --endpoint "$endpoint" --timeout 60 "$@" 2>&1) || rc=$?
  printf '%s\n' "$out" >>"$ctl_out"
  [[ -z $out ]] || printf '%s\n' "$out"
  return "$rc"
}

stagehand_alive() { kill -0 "$shpid" 2>/dev/null; }

# --- iSCSI and block-device views -----------------------------------------------------------
# The session directories for the target (any state), one per line.
sessions() {
  local s
  for s in /sys/class/iscsi_session/session*; do
    [[ -e $s && $(<"$s/targetname") == "$iqn" ]] && echo "$s"
  done
  return 0
}
count_sessions() { # every session, whatever its target
  local n=0 s
  for s in /sys/class/iscsi_session/session*; do [[ ! -e $s ]] || n=$((n + 1)); done
  echo "$n"
}
session_for_port() { # prints the session directory for PORT
  local s sid
  for s in $(sessions); do
    sid=${s##*/session}
    if [[ $(<"/sys/class/iscsi_connection/connection$sid:0/persistent_port") == "$1" ]]; then
      echo "$s"
      return 0
    fi
  done
  return 1
}
lun_disk() { # SESSION_DIR LUN: prints the sd name of that LUN on the session
  local b
  for b in "$1"/device/target*/*:"$2"/block/*; do
    [[ -e $b ]] || continue
    echo "${b##*/}"
    return 0
  done
  return 1
}
sd_disks() {
  local d
  for d in /sys/block/sd*; do [[ ! -e $d ]] || echo "${d##*/}"; done
}
dm_devices() {
  local d
  for d in /sys/block/dm-*; do [[ ! -e $d ]] || echo "${d##*/}"; done
}
mounts_under_test_dirs() {
  findmnt -rn -o TARGET | grep -E "^($stage_dir|$pub_dir)(/|$)" || true
}
# The block device (sysfs name) mounted at PATH, from its device number.
mounted_block() {
  local majmin
  majmin=$(findmnt -n -o MAJ:MIN --mountpoint "$1") || return 1
  majmin=${majmin// /}
  basename "$(readlink -f "/sys/dev/block/$majmin")"
}
# dm-multipath's own view of the path MAJ:MIN in map NAME: "A" active, "F" failed.
dm_path_state() {
  local -a f
  local i
  read -r -a f <<<"$(dmsetup status "$2")"
  for ((i = 0; i < ${#f[@]} - 1; i++)); do
    if [[ ${f[i]} == "$1" ]]; then
      echo "${f[i + 1]}"
      return 0
    fi
  done
  return 1
}
# The LUN's SCSI-3 persistent reservation, as another node sees it: stagehandctl through
# libiscsi, an initiator of its own (another I_T nexus).
other_iqn=iqn.2026-12.dev.stagehand:other-node
reservation() { # [ARGS...]: the LUN's reservation as the other initiator sees it (text)
  "$stagehandctl" iscsi reservation --portal "$host:$port" --iqn "$iqn" --lun "$lun" \
    --initiator-name "$other_iqn" --secrets-file /root/secrets/good.yaml \
    --node-id guest --node-id other "$@" 2>&1
}
holder_is() { reservation | grep -qE "^reservation: +0x[0-9a-f]{16} \(node $1\)"; }
holder_key() { reservation | sed -nE 's/^reservation: +(0x[0-9a-f]{16}) .*/\1/p'; }
guest_keys() { reservation | grep -cE '^  0x[0-9a-f]{16} \(node guest\)' || true; }

# --- volume expansion --------------------------------------------------------------------------
MiB=1048576
disk_bytes() { echo $(($(<"/sys/block/$1/size") * 512)); } # the kernel's size of block device $1
have_sg_readcap=0
if type -P sg_readcap >/dev/null; then have_sg_readcap=1; fi
# What the target reports as the size of SCSI disk $1 now. With sg_readcap: READ CAPACITY
# through SG_IO, which leaves the kernel's size as it was (picking the new size up is stagehand's
# job). Without it (no sg3-utils on the host): the disk is rescanned here, so that stagehand's
# own rescan finds nothing left to do; the check is weaker then and says so.
target_bytes() {
  local blocks bs
  if ((have_sg_readcap)); then
    read -r blocks bs < <(sg_readcap -b -R "/dev/$1" 2>/dev/null) || return 1
    [[ $blocks == 0x* && $bs == 0x* ]] || return 1
    echo $((blocks * bs))
  else
    echo 1 >"/sys/block/$1/device/rescan" && disk_bytes "$1"
  fi
}
target_has() { # BYTES DISK...: the target reports BYTES for every DISK
  local want=$1 d
  shift
  for d in "$@"; do [[ $(target_bytes "$d") == "$want" ]] || return 1; done
}
frozen="" # the mount point of a frozen filesystem; thawed on exit, too
# grow_lun MIB MOUNT DISK...: the controller's part of an expansion. Asks the host to grow LUN
# $lun to MIB MiB (console request, see run_transport.sh) and waits until the target reports that
# size for every DISK; the request is repeated every 10 s, four times at most. The filesystem at
# MOUNT is frozen (synced, writers held) meanwhile: the host re-opens the LUN's backing file in
# tgtd, which would fail a read or write in flight at that moment (ext4's lazy inode table
# initialisation writes in the background). Sets grow_requests.
grow_lun() {
  local mib=$1 mount=$2 rc=1
  shift 2
  xfs_io -F -r -x -c freeze "$mount" || fail "cannot freeze the filesystem at $mount"
  frozen=$mount
  for grow_requests in 1 2 3 4; do
    echo "STAGEHAND-HOST-REQUEST grow-lun $lun $mib"
    if until_deadline 10 target_has $((mib * MiB)) "$@"; then
      rc=0
      break
    fi
  done
  xfs_io -F -r -x -c thaw "$mount" || fail "cannot thaw the filesystem at $mount"
  frozen=""
  return "$rc"
}
save_vpd() { # DISK: keeps its VPD pages 0x80 (unit serial) and 0x83 (device identification)
  cp "/sys/block/$1/device/vpd_pg80" "$work/$1.vpd_pg80"
  cp "/sys/block/$1/device/vpd_pg83" "$work/$1.vpd_pg83"
}
same_vpd() { # DISK: its VPD pages are byte for byte what save_vpd kept
  cmp -s "/sys/block/$1/device/vpd_pg80" "$work/$1.vpd_pg80" &&
    cmp -s "/sys/block/$1/device/vpd_pg83" "$work/$1.vpd_pg83"
}
fs_kib() { df -Pk "$1" | awk 'NR == 2 { print $2 }'; } # total KiB of the filesystem at $1
fs_bytes() {                                             # ext4's size on device $1 (superblock)
  dumpe2fs -h "/dev/$1" 2>/dev/null |
    awk -F: '$1 == "Block count" { c = $2 } $1 == "Block size" { b = $2 } END { print c * b }'
}
# check_grown MOUNT DEV OLD_BYTES BYTES KIB_BEFORE DISK...: after NodeExpandVolume from OLD_BYTES
# to BYTES, the block device DEV (the disk, or the map) and every path DISK have BYTES, the LUN
# kept its identity on every DISK, ext4 at MOUNT fills DEV and df shows the growth (from
# KIB_BEFORE), and DEV reads at its new end. Sets grown_note.
check_grown() {
  local mount=$1 dev=$2 old=$3 want=$4 kib_before=$5 d kib fs
  shift 5
  for d in "$dev" "$@"; do
    [[ $(disk_bytes "$d") == "$want" ]] ||
      fail "/sys/block/$d/size: $(disk_bytes "$d") bytes after the expansion, not $want"
  done
  for d in "$@"; do
    same_vpd "$d" || fail "/dev/$d: VPD page 0x80 or 0x83 changed with the expansion; 0x83" \
      "before: $(od -An -tx1 "$work/$d.vpd_pg83" | tr -s ' \n' ' '), now: $(od -An -tx1 \
      "/sys/block/$d/device/vpd_pg83" | tr -s ' \n' ' ')"
  done
  fs=$(fs_bytes "$dev")
  [[ $fs == "$want" ]] || fail "ext4 on /dev/$dev is $fs bytes, not the LUN's $want"
  kib=$(fs_kib "$mount")
  # df's total leaves the new block groups' inode tables and bitmaps out: 80 % at least.
  ((kib - kib_before >= (want - old) * 8 / 10240)) ||
    fail "df $mount: $kib_before KiB before, $kib KiB after growing the LUN to $want bytes"
  timeout 60 dd if="/dev/$dev" of=/dev/null bs=64k skip=$((want / 65536 - 16)) count=16 \
    status=none || fail "cannot read the last MiB of /dev/$dev"
  grown_note="df $kib_before -> $kib KiB"
}

leftovers() { # prints what a clean node should not have; empty when clean
  local n
  n=$(count_sessions)
  [[ $n == 0 ]] || echo "$n iSCSI session(s): $(sessions | tr '\n' ' ')"
  [[ -z $(sd_disks) ]] || echo "disks: $(sd_disks | tr '\n' ' ')"
  [[ -z $(dm_devices) ]] || echo "dm devices: $(dm_devices | tr '\n' ' ')"
  [[ -z $(mounts_under_test_dirs) ]] || echo "mounts: $(mounts_under_test_dirs | tr '\n' ' ')"
  return 0
}

# The CHAP secret must appear in no command line, log or output, and only in files nobody but
# root can read (open-iscsi keeps it in the node record: mode 0600). The guest's grep is
# busybox's, whose -F misses matches in files with NUL bytes: the secrets are plain regexps
# ([A-Za-z0-9-]) and the set-up checks that a match in such a file is found.
has_secret() { grep -q -- "$1" "$2" 2>/dev/null; } # SECRET FILE
check_secret_hidden() { # SECRET WHAT
  local pw=$1 f mode
  # iscsiadm's command lines, command lines sampled (ps), stagehand's log, stagehandctl's output
  for f in "$argv_log" "$work/ps.samples" "$shlog" "$ctl_out"; do
    if has_secret "$pw" "$f"; then fail "$2: the CHAP secret is in $f"; fi
  done
  while IFS= read -r f; do
    mode=$(stat -c %a "$f")
    ((8#$mode & 8#077)) && fail "$2: the CHAP secret is in $f, mode $mode (readable by others)"
  done < <(grep -rl -- "$pw" /etc/iscsi /var/lib/stagehand /run/stagehand 2>/dev/null || true)
  return 0
}

echo "transport: kernel $(uname -r), target $iqn at $host:$port and $host:$port2"

# --- set-up ------------------------------------------------------------------------------------
mkdir -p "$work" /run/sh "$stage_dir" "$pub_dir"
[[ $chap_password =~ ^[A-Za-z0-9-]{12,}$ ]] || fail "the CHAP secret must be [A-Za-z0-9-]{12,}"
printf 'x\0%s\0y' "$wrong_password" >"$work/selftest"
has_secret "$wrong_password" "$work/selftest" || fail "grep misses a secret in a file with NULs"
: >"$ctl_out"
mkdir -m 0700 /root/secrets
printf 'node.session.auth.username: %s\nnode.session.auth.password: %s\n' "$chap_user" \
  "$chap_password" >/root/secrets/good.yaml
printf 'node.session.auth.username: %s\nnode.session.auth.password: %s\n' "$chap_user" \
  "$wrong_password" >/root/secrets/wrong.yaml
{
  cat /root/secrets/good.yaml
  printf 'node.session.auth.username_in: %s\nnode.session.auth.password_in: %s\n' "$chap_user_in" \
    "$chap_password_in"
} >/root/secrets/mutual.yaml
{
  cat /root/secrets/good.yaml
  printf 'node.session.auth.username_in: %s\nnode.session.auth.password_in: %s-wrong\n' \
    "$chap_user_in" "$chap_password_in"
} >/root/secrets/mutual-wrong.yaml
chmod 0600 /root/secrets/*.yaml
# iscsid.conf defaults that stagehand must override in its node records: with these, a record it
# leaves alone would log in at boot and scan every LUN.
sed -i -e 's/^node\.startup = manual$/node.startup = automatic/' \
  -e 's/^node\.session\.scan = manual$/node.session.scan = auto/' /etc/iscsi/iscsid.conf
grep -qx 'node.startup = automatic' /etc/iscsi/iscsid.conf || fail "could not change iscsid.conf"
# Every iscsiadm run leaves its argv in $argv_log: a CHAP secret must never be on a command line.
iscsiadm_bin=$(type -P iscsiadm)
mv "$iscsiadm_bin" "$iscsiadm_bin.real"
cat >"$iscsiadm_bin" <<EOF
#!/bin/sh
# argv recorder of transport_test.sh
printf '%s\n' "\$*" >>$argv_log
exec $iscsiadm_bin.real "\$@"
EOF
chmod 0755 "$iscsiadm_bin"
: >"$argv_log"

# --- stagehand ---------------------------------------------------------------------------------
probe() {
  stagehand_alive && "$stagehandctl" --endpoint "$endpoint" identity probe >/dev/null 2>&1
}
start_stagehand() { # TRANSPORT (--iscsi-transport)
  env -i PATH="$PATH" HOME=/root "$stagehand" --iscsi-transport="$1" --csi-endpoint "$endpoint" \
    --state-dir /var/lib/stagehand --runtime-dir /run/stagehand --no-watch-plugins --node-id guest \
    --takeover-after 3 --log-level debug </dev/null >>"$shlog" 2>&1 &
  shpid=$!
  if ! until_deadline 30 probe; then
    stagehand_alive || fail "stagehand exited at start (unknown flag? see its log below)"
    fail "stagehand did not answer identity probe within 30 s"
  fi
}
# auto: the guest's kernel has iscsi_tcp and iscsid answers, so the kernel transport is the default.
start_stagehand auto
status=$("$stagehandctl" --agent-socket /run/stagehand/agent.sock agent status 2>&1) ||
  fail "stagehandctl agent status: $status"
grep -qE '^transport: +kernel$' <<<"$status" ||
  fail "--iscsi-transport=auto did not pick the kernel transport: $status"
ok "--iscsi-transport=auto picked the kernel transport (agent status)"
ok "stagehand $("$stagehand" --version) serving $endpoint (pid $shpid)"
plugin=$(ctl identity info)
[[ $plugin == iscsi.stagehand.dev* ]] || fail "GetPluginInfo: '$plugin'"
info=$(ctl node info)
grep -qx 'node_id: guest' <<<"$info" || fail "NodeGetInfo: '$info'"
ok "GetPluginInfo: $plugin; NodeGetInfo: node_id guest"

# --- single path, CHAP -------------------------------------------------------------------------
ctx=(-c "targetPortal=$host:$port" -c "iqn=$iqn" -c "lun=$lun" -c "expectedSerial=$serial")
stage_v1() {
  ctl node stage --volume-id v1 --staging-path "$stage_dir/v1" "${ctx[@]}" \
    --secrets-file /root/secrets/good.yaml
}
# ps, sampled while stage runs (the argv recorder above sees every iscsiadm run for sure).
(while :; do
  cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' ' ' || true
  echo
  sleep 0.05
done) >"$work/ps.samples" &
sampler=$!
stage_v1 || fail "stage v1 (single path, CHAP)"
kill "$sampler"
wait "$sampler" 2>/dev/null || true
ok "stage v1: one portal, CHAP"

sd=$(mounted_block "$stage_dir/v1") || fail "$stage_dir/v1 is not mounted"
[[ $sd == sd* ]] || fail "$stage_dir/v1 is mounted from /dev/$sd, not from an sd disk"
[[ $(blkid -p -o value -s TYPE "/dev/$sd") == ext4 ]] || fail "/dev/$sd is not ext4"
uuid=$(blkid -p -o value -s UUID "/dev/$sd")
mapfile -t ss < <(sessions)
[[ ${#ss[@]} == 1 ]] || fail "expected one session to $iqn, found ${#ss[@]}"
s1=$(session_for_port "$port") || fail "no session through $host:$port"
[[ $(<"$s1/state") == LOGGED_IN ]] || fail "session ${s1##*/} is $(<"$s1/state")"
[[ $(lun_disk "$s1" "$lun") == "$sd" ]] || fail "/dev/$sd is not LUN $lun of ${s1##*/}"
grep -q -- "$serial" "/sys/block/$sd/device/vpd_pg80" || fail "/dev/$sd: serial is not $serial"
[[ $(sd_disks) == "$sd" ]] || fail "disks besides LUN $lun were scanned: $(sd_disks | tr '\n' ' ')"
[[ -z $canary_lun ]] || ! lun_disk "$s1" "$canary_lun" >/dev/null ||
  fail "LUN $canary_lun was scanned although only LUN $lun was staged"
holder_is guest || fail "v1 is not reserved for node guest: $(reservation)"
[[ $(guest_keys) == 1 ]] || fail "not one registration of the guest for v1: $(reservation)"
ok "staged: $stage_dir/v1: ext4 on /dev/$sd, LUN $lun (serial $serial) of ${s1##*/}" \
  "(LOGGED_IN), no other disk"

rec=$(iscsiadm -m node -T "$iqn" -p "$host:$port") || fail "no node record for $host:$port"
grep -qx 'node.startup = manual' <<<"$rec" || fail "node record: $(grep '^node.startup' <<<"$rec")"
grep -qx 'node.session.scan = manual' <<<"$rec" ||
  fail "node record: $(grep '^node.session.scan' <<<"$rec")"
grep -qx 'node.session.auth.authmethod = CHAP' <<<"$rec" || fail "node record: no CHAP"
grep -qx "node.session.auth.username = $chap_user" <<<"$rec" || fail "node record: CHAP user"
[[ -s $argv_log ]] || fail "no iscsiadm run was recorded: does stagehand run another iscsiadm?"
check_secret_hidden "$chap_password" "stage v1"
ok "node record: node.startup and node.session.scan manual (iscsid.conf: automatic, auto)," \
  "CHAP; the secret in no argv ($(wc -l <"$argv_log") iscsiadm runs," \
  "$(grep -c . "$work/ps.samples") ps samples), log or readable file"

ctl node publish --volume-id v1 --staging-path "$stage_dir/v1" --target-path "$pub_dir/v1" ||
  fail "publish v1"
[[ $(mounted_block "$pub_dir/v1") == "$sd" ]] || fail "$pub_dir/v1 is not a mount of /dev/$sd"
dd if=/dev/urandom of="$pub_dir/v1/data" bs=64k count=16 conv=fsync status=none
sync
sum=$(sha256sum <"$pub_dir/v1/data")
ok "publish v1 at $pub_dir/v1, 1 MiB written and synced"

ctl node unpublish --volume-id v1 --target-path "$pub_dir/v1" || fail "unpublish v1"
ctl node unstage --volume-id v1 --staging-path "$stage_dir/v1" || fail "unstage v1"
[[ -z $(mounts_under_test_dirs) ]] || fail "mounts left: $(mounts_under_test_dirs)"
[[ $(count_sessions) == 0 ]] || fail "sessions left after unstage: $(sessions | tr '\n' ' ')"
udevadm wait --removed --timeout=10 "/dev/$sd" || fail "/dev/$sd still there after unstage"
[[ -z $(leftovers) ]] || fail "left after unstage: $(leftovers)"
ok "unpublish + unstage v1: no mount, logged out, /dev/$sd gone"

stage_v1 || fail "stage v1 again"
sd=$(mounted_block "$stage_dir/v1") || fail "$stage_dir/v1 is not mounted after the second stage"
[[ $(blkid -p -o value -s UUID "/dev/$sd") == "$uuid" ]] || fail "the filesystem was made anew"
ctl node publish --volume-id v1 --staging-path "$stage_dir/v1" --target-path "$pub_dir/v1" ||
  fail "publish v1 again"
[[ $(sha256sum <"$pub_dir/v1/data") == "$sum" ]] || fail "data differs after stage again"
ok "stage + publish v1 again: same filesystem (UUID $uuid), same data, on /dev/$sd"

# --- expansion, single path --------------------------------------------------------------------
old_bytes=$(disk_bytes "$sd")
want=$((320 * MiB))
kib_before=$(fs_kib "$stage_dir/v1")
save_vpd "$sd"
rc=0
err=$(ctl node expand --volume-id v1 --path "$stage_dir/v1" --capacity-bytes "$want" 2>&1) ||
  rc=$?
[[ $rc != 0 ]] || fail "expand v1 to $want bytes succeeded before the target grew the LUN: $err"
grep -q FAILED_PRECONDITION <<<"$err" ||
  fail "expand v1 beyond the LUN: not FAILED_PRECONDITION (retried by the kubelet): $err"
[[ $(disk_bytes "$sd") == "$old_bytes" && $(fs_kib "$stage_dir/v1") == "$kib_before" ]] ||
  fail "the failed expand changed the disk or the filesystem"
ok "expand v1 to 320 MiB before the target grew the LUN: FAILED_PRECONDITION, nothing changed"

grow_lun 320 "$stage_dir/v1" "$sd" ||
  fail "the target does not report 320 MiB for /dev/$sd 40 s after asking the host to grow it"
if ((have_sg_readcap)); then
  [[ $(disk_bytes "$sd") == "$old_bytes" ]] || fail "/dev/$sd changed size before any rescan"
  seen="READ CAPACITY of /dev/$sd answers $want bytes, the kernel still has $old_bytes"
else
  seen="no sg_readcap: the test rescanned /dev/$sd itself, stagehand's rescan is not tested"
fi
ok "host grew LUN $lun to 320 MiB (request sent $grow_requests time(s)): $seen"

out=$(ctl node expand --volume-id v1 --path "$stage_dir/v1" --capacity-bytes "$want") ||
  fail "expand v1 to $want bytes (the LUN has grown): $out"
[[ $out == "expanded v1: $want bytes"* ]] || fail "expand v1 answered '$out', not $want bytes"
check_grown "$stage_dir/v1" "$sd" "$old_bytes" "$want" "$kib_before" "$sd"
sync
echo 3 >/proc/sys/vm/drop_caches
[[ $(sha256sum <"$pub_dir/v1/data") == "$sum" ]] || fail "data differs after the expansion"
dd if=/dev/urandom of="$pub_dir/v1/grown" bs=64k count=16 conv=fsync status=none ||
  fail "write + fsync after the expansion failed"
sum_grown=$(sha256sum <"$pub_dir/v1/grown")
echo 3 >/proc/sys/vm/drop_caches
[[ $(sha256sum <"$pub_dir/v1/grown") == "$sum_grown" ]] ||
  fail "data written after the expansion reads back differently"
ok "expand v1 (staging path): $out; /dev/$sd has $want bytes, same VPD 0x80/0x83, ext4" \
  "fills it ($grown_note), old data intact, write + fsync + read back"
ctl node unpublish --volume-id v1 --target-path "$pub_dir/v1" || fail "unpublish v1 again"
ctl node unstage --volume-id v1 --staging-path "$stage_dir/v1" || fail "unstage v1 again"
udevadm wait --removed --timeout=10 "/dev/$sd" || fail "/dev/$sd still there after unstage"
[[ -z $(leftovers) ]] || fail "left after the second unstage: $(leftovers)"
check_secret_hidden "$chap_password" "stage v1 again"
reservation | grep -qx 'registrations: none' || fail "left registered after unstage: $(reservation)"
ok "unpublish + unstage v1 again: nothing left, no registration"

# --- wrong CHAP secret -------------------------------------------------------------------------
rc=0
err=$(ctl node stage --volume-id v-wrong --staging-path "$stage_dir/wrong" "${ctx[@]}" \
  --secrets-file /root/secrets/wrong.yaml 2>&1) || rc=$?
[[ $rc != 0 ]] || fail "stage with a wrong CHAP secret succeeded"
grep -qi unauthenticated <<<"$err" || fail "stage with a wrong CHAP secret: not UNAUTHENTICATED"
[[ -z $(leftovers) ]] || fail "left after the failed stage: $(leftovers)"
check_secret_hidden "$wrong_password" "wrong CHAP secret"
check_secret_hidden "$chap_password" "wrong CHAP secret"
ok "stage with a wrong CHAP secret: exit status $rc, UNAUTHENTICATED, nothing left"

# Mutual CHAP with a wrong target secret: the initiator must refuse the target.
rc=0
err=$(ctl node stage --volume-id v-wrong --staging-path "$stage_dir/wrong" "${ctx[@]}" \
  --secrets-file /root/secrets/mutual-wrong.yaml 2>&1) || rc=$?
[[ $rc != 0 ]] || fail "stage with a wrong mutual CHAP (target) secret succeeded"
grep -qi unauthenticated <<<"$err" ||
  fail "stage with a wrong mutual CHAP secret: not UNAUTHENTICATED: $err"
[[ -z $(leftovers) ]] || fail "left after the failed mutual stage: $(leftovers)"
ok "stage with a wrong mutual CHAP (target) secret: UNAUTHENTICATED, nothing left"

# --- one writer per LUN: the reservation -------------------------------------------------------
r=$(reservation --take-over-for other --holder-is-dead) || fail "reserve for other: $r"
holder_is other || fail "the LUN is not reserved for node other: $(reservation)"
rc=0
err=$(ctl node stage --volume-id v-r --staging-path "$stage_dir/v-r" "${ctx[@]}" \
  --secrets-file /root/secrets/good.yaml 2>&1) || rc=$?
[[ $rc != 0 ]] || fail "stage of a LUN another node holds succeeded"
grep -q UNAVAILABLE <<<"$err" && grep -q "in use on another node" <<<"$err" ||
  fail "stage of a LUN another node holds: not UNAVAILABLE 'in use on another node': $err"
[[ -z $(leftovers) && $(count_sessions) == 0 ]] ||
  fail "left after the refused stage: $(leftovers) $(sessions | tr '\n' ' ')"
[[ $(guest_keys) == 0 ]] || fail "the refused stage left a registration: $(reservation)"
ok "stage while node other holds the LUN: UNAVAILABLE (in use on another node), no session," \
  "disk or registration left"

r=$(reservation --release-node other --node-is-dead) || fail "release node other: $r"
ctl node stage --volume-id v-r --staging-path "$stage_dir/v-r" "${ctx[@]}" \
  --secrets-file /root/secrets/good.yaml || fail "stage v-r once the LUN is free"
holder_is guest || fail "the LUN is not reserved for the guest after its stage: $(reservation)"
[[ $(guest_keys) == 1 ]] || fail "not one registration of the guest: $(reservation)"
first_key=$(holder_key)
key_moved() { [[ $(holder_key) != "$first_key" ]] && holder_is guest; }
until_deadline 15 key_moved || fail "the guest's key did not move (renewal): $(reservation)"
ctl node publish --volume-id v-r --staging-path "$stage_dir/v-r" --target-path "$pub_dir/v-r" ||
  fail "publish v-r"
dd if=/dev/urandom of="$pub_dir/v-r/before" bs=64k count=4 conv=fsync status=none ||
  fail "write to the reserved volume"
ok "stage + publish v-r: reserved for node guest on its one path, key renewed" \
  "($first_key -> $(holder_key)), write + fsync"

r=$(reservation --take-over-for other --holder-is-dead) || fail "take over for other: $r"
holder_is other || fail "the takeover did not reserve the LUN for node other: $(reservation)"
fenced() { ctl node health --volume-id v-r 2>&1 | grep -q Fenced; }
until_deadline 15 fenced || fail "v-r does not show Fenced: $(ctl node health --volume-id v-r 2>&1)"
if dd if=/dev/zero of="$pub_dir/v-r/after" bs=64k count=4 conv=fsync status=none 2>/dev/null; then
  fail "a write + fsync of the fenced node succeeded"
fi
sd=$(mounted_block "$stage_dir/v-r") || fail "$stage_dir/v-r is not mounted"
if dd if=/dev/zero of="/dev/$sd" bs=4k count=1 seek=100 oflag=direct status=none 2>/dev/null; then
  fail "a direct write of the fenced node to /dev/$sd succeeded"
fi
[[ $(guest_keys) == 0 ]] || fail "the fenced node registered again: $(reservation)"
ok "taken over by node other: v-r Fenced, the guest's writes fail (fsync, O_DIRECT), it never" \
  "registers again"
ctl node unpublish --volume-id v-r --target-path "$pub_dir/v-r" || fail "unpublish fenced v-r"
ctl node unstage --volume-id v-r --staging-path "$stage_dir/v-r" || fail "unstage fenced v-r"
[[ -z $(leftovers) && $(count_sessions) == 0 ]] ||
  fail "left after unstage of the fenced volume: $(leftovers) $(sessions | tr '\n' ' ')"
holder_is other || fail "the fenced node's unstage touched node other's reservation: $(reservation)"
r=$(reservation --release-node other --node-is-dead) || fail "release node other: $r"
ok "unpublish + unstage of the fenced v-r: nothing left, node other's reservation untouched"

# --- a multi-node single-writer volume: its writer is chosen at publish ------------------------
mnsw=(--block --access-mode MULTI_NODE_SINGLE_WRITER)
ctl node stage --volume-id v-w --staging-path "$stage_dir/v-w" "${ctx[@]}" "${mnsw[@]}" \
  --secrets-file /root/secrets/good.yaml || fail "stage v-w (multi-node single writer)"
ctl node publish --volume-id v-w --staging-path "$stage_dir/v-w" --target-path "$pub_dir/v-w-ro" \
  "${mnsw[@]}" --readonly || fail "publish v-w read-only"
[[ $(guest_keys) == 0 ]] || fail "a reader of v-w registered: $(reservation)"
r=$(reservation --take-over-for other --holder-is-dead) || fail "reserve for other: $r"
rc=0
err=$(ctl node publish --volume-id v-w --staging-path "$stage_dir/v-w" \
  --target-path "$pub_dir/v-w" "${mnsw[@]}" 2>&1) || rc=$?
[[ $rc != 0 ]] && grep -q UNAVAILABLE <<<"$err" && grep -q "written on another node" <<<"$err" ||
  fail "read-write publish of v-w while node other holds the LUN: $err"
[[ $(guest_keys) == 0 ]] || fail "the refused publish left a registration: $(reservation)"
r=$(reservation --release-node other --node-is-dead) || fail "release node other: $r"
ctl node publish --volume-id v-w --staging-path "$stage_dir/v-w" --target-path "$pub_dir/v-w" \
  "${mnsw[@]}" || fail "read-write publish of v-w once the LUN is free"
holder_is guest || fail "v-w's writer did not reserve the LUN: $(reservation)"
[[ $(guest_keys) == 1 ]] || fail "not one registration of v-w's writer: $(reservation)"
# The bytes that are there (the LUN carries a filesystem later checks use), written back.
dd if="$pub_dir/v-w" of=/tmp/v-w.blk bs=4k count=1 skip=64 iflag=direct status=none ||
  fail "read from v-w"
dd if=/tmp/v-w.blk of="$pub_dir/v-w" bs=4k count=1 seek=64 oflag=direct conv=notrunc \
  status=none || fail "write of v-w's writer"
ctl node unpublish --volume-id v-w --target-path "$pub_dir/v-w" || fail "unpublish v-w"
reservation | grep -qx 'registrations: none' ||
  fail "the last read-write unpublish of v-w left a registration: $(reservation)"
ctl node unpublish --volume-id v-w --target-path "$pub_dir/v-w-ro" || fail "unpublish v-w-ro"
ctl node unstage --volume-id v-w --staging-path "$stage_dir/v-w" || fail "unstage v-w"
[[ -z $(leftovers) && $(count_sessions) == 0 ]] ||
  fail "left after v-w: $(leftovers) $(sessions | tr '\n' ' ')"
ok "multi-node single writer v-w: staged and published read-only unregistered, read-write" \
  "publish refused while node other held the LUN, then reserved for the guest, given up at" \
  "its unpublish"

# --- two portals: dm-multipath, losing one path ------------------------------------------------
multipathd show daemon >/dev/null || fail "multipathd is not running (guest.sh --multipathd)"
# (with the volume_context key that picks the transport per volume, too)
ctl node stage --volume-id v3 --staging-path "$stage_dir/v3" "${ctx[@]}" \
  -c "portals=$host:$port2" -c transport=kernel --secrets-file /root/secrets/mutual.yaml ||
  fail "stage v3 (two portals, mutual CHAP)"
for p in "$port" "$port2"; do
  rec=$(iscsiadm -m node -T "$iqn" -p "$host:$p") || fail "no node record for $host:$p"
  grep -qx "node.session.auth.username_in = $chap_user_in" <<<"$rec" ||
    fail "node record for $host:$p: no mutual CHAP user"
done
dm=$(mounted_block "$stage_dir/v3") || fail "$stage_dir/v3 is not mounted"
[[ $dm == dm-* ]] || fail "$stage_dir/v3 is mounted from /dev/$dm, not from a dm device"
dm_uuid=$(<"/sys/block/$dm/dm/uuid")
[[ $dm_uuid == mpath-* ]] || fail "/dev/$dm is not a multipath map (dm uuid '$dm_uuid')"
map=$(<"/sys/block/$dm/dm/name")
s1=$(session_for_port "$port") || fail "no session through $host:$port"
s2=$(session_for_port "$port2") || fail "no session through $host:$port2"
sd1=$(lun_disk "$s1" "$lun") || fail "no LUN $lun disk on ${s1##*/}"
sd2=$(lun_disk "$s2" "$lun") || fail "no LUN $lun disk on ${s2##*/}"
slaves() {
  local d
  for d in "/sys/block/$dm/slaves"/*; do [[ ! -e $d ]] || echo "${d##*/}"; done | sort | tr '\n' ' '
}
[[ $(slaves) == "$(printf '%s\n' "$sd1" "$sd2" | sort | tr '\n' ' ')" ]] ||
  fail "map $map has slaves $(slaves), not $sd1 $sd2"
two_active() {
  [[ $(multipathd show topology | grep -cE " ($sd1|$sd2) .*active ready") == 2 ]]
}
until_deadline 10 two_active ||
  fail "multipathd does not show $sd1 and $sd2 active: $(multipathd show topology)"
multipathd show topology
holder_is guest || fail "v3 is not reserved for node guest: $(reservation)"
[[ $(guest_keys) == 2 ]] || fail "not one registration of the guest per path of v3: $(reservation)"
[[ $(blkid -p -o value -s TYPE "/dev/$dm") == ext4 ]] || fail "/dev/$dm is not ext4"
ok "stage v3: two portals, mutual CHAP, $stage_dir/v3: ext4 on /dev/$dm (map $map) over $sd1 (port $port)" \
  "and $sd2 (port $port2), both active"

ctl node publish --volume-id v3 --staging-path "$stage_dir/v3" --target-path "$pub_dir/v3" ||
  fail "publish v3"
dd if=/dev/urandom of="$pub_dir/v3/before" bs=64k count=16 conv=fsync status=none
sum_before=$(sha256sum <"$pub_dir/v3/before")
ok "publish v3, 1 MiB written through the map"

# --- one LUN never backs two volumes -----------------------------------------------------------
# Named as v3 names it (refused before any login); through a host name of the portal address:
# that attach finds v3's session and disk, and is refused once the disk's identity is read (the
# session and the disk stay v3's); through a third portal of the target: a session and disk of
# its own, which multipathd may add to v3's map as a new path, refused by the identity too (the
# disk leaves the map, which keeps v3's two paths).
grep -q " sh-tgt-alias$" /etc/hosts 2>/dev/null || echo "$host sh-tgt-alias" >>/etc/hosts
for portal in "$host:$port" "sh-tgt-alias:$port" "$host:$port3"; do
  rc=0
  err=$(ctl node stage --volume-id v4 --staging-path "$stage_dir/v4" -c "targetPortal=$portal" \
    -c "iqn=$iqn" -c "lun=$lun" -c transport=kernel --secrets-file /root/secrets/mutual.yaml \
    2>&1) || rc=$?
  [[ $rc != 0 ]] || fail "a second volume on v3's LUN (portal $portal) was staged"
  grep -q "already used by volume 'v3'" <<<"$err" ||
    fail "a second volume on v3's LUN (portal $portal): not refused as v3's: $err"
  [[ $portal == "$host:$port" ]] || grep -q "unique identities (WWN, serial)" <<<"$err" ||
    fail "a second volume on v3's LUN (portal $portal): not refused by its identity: $err"
  ! mountpoint -q "$stage_dir/v4" 2>/dev/null || fail "v4 is mounted (portal $portal)"
  [[ $(slaves) == "$(printf '%s\n' "$sd1" "$sd2" | sort | tr '\n' ' ')" ]] ||
    fail "after v4 (portal $portal), map $map has slaves $(slaves), not $sd1 $sd2"
  [[ $(count_sessions) == 2 ]] || fail "after v4 (portal $portal): $(sessions | tr '\n' ' ')"
  [[ $(sd_disks | sort | tr '\n' ' ') == "$(printf '%s\n' "$sd1" "$sd2" | sort | tr '\n' ' ')" ]] ||
    fail "after v4 (portal $portal), disks $(sd_disks | tr '\n' ' '), not $sd1 $sd2"
done
[[ $(sha256sum <"$pub_dir/v3/before") == "$sum_before" ]] ||
  fail "v3's data reads back differently after the refused stages"
joined=no
! grep -q "out of dm-multipath map $map" "$shlog" || joined=yes
ok "a second volume on v3's LUN, by the portal's address, a name of it and a third portal:" \
  "refused, v3's map, sessions and data untouched, no other disk left (the third portal's disk" \
  "had joined the map and was taken out of it: $joined)"

# --- expansion, two paths ----------------------------------------------------------------------
# (volume_path: the publish path, with the staging path, as the kubelet sends them)
old_bytes=$(disk_bytes "$dm")
want=$((384 * MiB))
kib_before=$(fs_kib "$stage_dir/v3")
save_vpd "$sd1"
save_vpd "$sd2"
grow_lun 384 "$stage_dir/v3" "$sd1" "$sd2" ||
  fail "the target does not report 384 MiB for /dev/$sd1 and /dev/$sd2 40 s after asking the host"
if ((have_sg_readcap)); then
  [[ $(disk_bytes "$sd1") == "$old_bytes" && $(disk_bytes "$sd2") == "$old_bytes" ]] ||
    fail "/dev/$sd1 or /dev/$sd2 changed size before any rescan"
  seen="READ CAPACITY of $sd1 and $sd2 answers $want bytes, the kernel still has $old_bytes"
else
  seen="no sg_readcap: the test rescanned $sd1 and $sd2 itself, stagehand's rescan is not tested"
fi
ok "host grew LUN $lun to 384 MiB (request sent $grow_requests time(s)): $seen"

out=$(ctl node expand --volume-id v3 --path "$pub_dir/v3" --staging-path "$stage_dir/v3" \
  --capacity-bytes "$want") || fail "expand v3 to $want bytes (the LUN has grown): $out"
[[ $out == "expanded v3: $want bytes"* ]] || fail "expand v3 answered '$out', not $want bytes"
table=$(dmsetup table "$map")
[[ ${table%% multipath *} == "0 $((want / 512))" ]] ||
  fail "map $map: table '$table' is not $((want / 512)) sectors"
check_grown "$stage_dir/v3" "$dm" "$old_bytes" "$want" "$kib_before" "$sd1" "$sd2"
until_deadline 10 two_active ||
  fail "after the expansion, multipathd does not show $sd1 and $sd2 active:" \
    "$(multipathd show topology)"
sync
echo 3 >/proc/sys/vm/drop_caches
[[ $(sha256sum <"$pub_dir/v3/before") == "$sum_before" ]] ||
  fail "data written before the expansion reads back differently"
dd if=/dev/urandom of="$pub_dir/v3/grown" bs=64k count=16 conv=fsync status=none ||
  fail "write + fsync through the map after the expansion failed"
sum_grown=$(sha256sum <"$pub_dir/v3/grown")
echo 3 >/proc/sys/vm/drop_caches
[[ $(sha256sum <"$pub_dir/v3/grown") == "$sum_grown" ]] ||
  fail "data written after the expansion reads back differently"
ok "expand v3 (publish path): $out; map $map (table too), $sd1 and $sd2 have $want bytes," \
  "both active, same VPD 0x80/0x83, ext4 fills it ($grown_note), old data intact, write +" \
  "fsync + read back"

out=$(ctl node health --volume-id v3) || fail "node health v3: $out"
[[ $out == "v3: healthy" ]] || fail "node health v3 with both paths up answered '$out'"
out=$(ctl node storage-health) || fail "node storage-health: $out"
[[ $out == "storage: healthy" ]] || fail "node storage-health with both paths up answered '$out'"

# Ask the host to drop the second portal (it also closes the connections through it); repeat
# the request every 10 s until the kernel reports the session failed.
session_failed() { [[ $(<"$s2/state") != LOGGED_IN ]]; }
for attempt in 1 2 3 4; do
  echo "STAGEHAND-HOST-REQUEST drop-portal $port2"
  ! until_deadline 10 session_failed || break
done
session_failed ||
  fail "${s2##*/} (port $port2) still LOGGED_IN 40 s after asking the host to drop its portal"
ok "host dropped portal $port2: ${s2##*/} is $(<"$s2/state") (request sent $attempt time(s))"
# The kernel fails the path once the session's recovery timeout (recovery_tmo) runs out: its
# disk goes transport-offline and dm-multipath marks the path failed.
mm2=$(<"/sys/block/$sd2/dev")
path_failed() {
  local st
  st=$(<"/sys/block/$sd2/device/state")
  [[ $st == transport-offline || $st == offline || $(dm_path_state "$mm2" "$map") == F ]]
}
until_deadline 60 path_failed ||
  fail "$sd2 not failed 60 s after its session failed (state" \
    "$(<"/sys/block/$sd2/device/state"), recovery_tmo $(<"$s2/recovery_tmo"))"
ok "path $sd2 failed: disk $(<"/sys/block/$sd2/device/state"), dm path" \
  "$(dm_path_state "$mm2" "$map"), session recovery_tmo $(<"$s2/recovery_tmo") s"

timeout 60 dd if=/dev/urandom of="$pub_dir/v3/after" bs=64k count=16 conv=fsync status=none ||
  fail "write + fsync through the map with one path lost failed"
sum_after=$(sha256sum <"$pub_dir/v3/after")
sync
echo 3 >/proc/sys/vm/drop_caches
[[ $(timeout 60 sha256sum <"$pub_dir/v3/before") == "$sum_before" ]] ||
  fail "data written before the path loss reads back differently"
[[ $(timeout 60 sha256sum <"$pub_dir/v3/after") == "$sum_after" ]] ||
  fail "data written after the path loss reads back differently"
ok "write + fsync + read back (page cache dropped) through the map with one path lost"

mm1=$(<"/sys/block/$sd1/dev")
one_active() {
  [[ $(dm_path_state "$mm1" "$map") == A &&
    $(dm_path_state "$mm2" "$map") == F ]] &&
    multipathd show paths raw format '%d %t' | grep -qx "$sd1 active" &&
    multipathd show paths raw format '%d %t' | grep -qx "$sd2 failed"
}
until_deadline 30 one_active ||
  fail "map $map: expected $sd1 active and $sd2 failed: $(dmsetup status "$map");" \
    "$(multipathd show paths format '%d %t %T %o')"
multipathd show topology
ok "map $map: $sd1 active, $sd2 failed (dm-multipath and multipathd agree)"

# The health RPCs see the lost path from sysfs (the session FAILED), without I/O to the LUN.
health=$(ctl node health --volume-id v3) || fail "node health v3: $health"
[[ $health == "DEGRADED MultipathDegraded: 1 of 2 paths working: iSCSI session to "*" is "[A-Z]* ]] ||
  fail "node health v3 with one path lost answered '$health'"
storage=$(ctl node storage-health) || fail "node storage-health: $storage"
[[ $storage == "STORAGE_DEGRADED PathsDegraded: "* ]] ||
  fail "node storage-health with one path lost answered '$storage'"
stats=$(ctl node stats --volume-id v3 --path "$pub_dir/v3") || fail "node stats v3: $stats"
[[ $stats == *"condition: normal"* ]] ||
  fail "node stats v3 with one path lost (it still works) answered '$stats'"
ok "health with one path lost: '$health'; storage: '$storage'; stats condition normal"

# The agent dies (SIGKILL: no chance to clean up); the kernel's sessions and the map do not care.
kill -KILL "$shpid"
wait "$shpid" 2>/dev/null || true
dd if=/dev/urandom of="$pub_dir/v3/after-kill" bs=64k count=16 status=none conv=fsync ||
  fail "write + fsync through the map with stagehand killed failed"
start_stagehand kernel
ok "stagehand killed (SIGKILL) with v3 published: I/O went on; restarted (pid $shpid)"

ctl node unpublish --volume-id v3 --target-path "$pub_dir/v3" || fail "unpublish v3"
ctl node unstage --volume-id v3 --staging-path "$stage_dir/v3" ||
  fail "unstage v3 (one of its sessions is failed)"
[[ ! -e /dev/mapper/$map ]] || fail "map $map still there after unstage"
[[ $(count_sessions) == 0 ]] || fail "sessions left after unstage v3: $(sessions | tr '\n' ' ')"
udevadm wait --removed --timeout=10 "/dev/$sd1" "/dev/$sd2" "/dev/$dm" ||
  fail "devices left after unstage v3: $(leftovers)"
[[ -z $(leftovers) ]] || fail "left after unstage v3: $(leftovers)"
reservation | grep -qx 'registrations: none' || fail "left registered after unstage v3: $(reservation)"
check_secret_hidden "$chap_password" "multipath"
check_secret_hidden "$chap_password_in" "multipath (mutual CHAP)"
ok "unpublish + unstage v3 by the restarted agent, from its records: map removed, both" \
  "sessions (one failed) logged out"

# --- stop --------------------------------------------------------------------------------------
kill -TERM "$shpid"
stopped() { ! stagehand_alive; }
until_deadline 20 stopped || fail "stagehand still running 20 s after SIGTERM"
rc=0
wait "$shpid" || rc=$?
[[ $rc == 0 ]] || fail "stagehand exited with status $rc after SIGTERM"
[[ -z $(leftovers) ]] || fail "left at the end: $(leftovers)"
# (multipathd answers "ok" when it has no map)
maps=$(multipathd show maps raw format '%n' | grep -vx ok) || true
[[ -z $maps ]] || fail "multipathd still has maps: $maps"
check_secret_hidden "$chap_password" "end"
ok "stagehand stopped on SIGTERM (status 0); no session, disk, map or mount left"

all_passed
