#!/bin/bash
# Kernel iSCSI smoke test. Runs inside the guest that tests/kernel/guest.sh boots (as /test.sh);
# tests/kernel/run_smoke.sh starts the target and passes the parameters:
#   SH_TGT_IQN, SH_TGT_PORT     target and its portal port on the host (the guest's 10.0.2.2)
#   SH_TGT_SERIAL               LUN 1's unit serial number (VPD page 0x80)
#   SH_TGT_XFS_LUN              optional: a LUN of >= 300 MiB to check xfs on
#   SH_TGT_PORT2                optional: a second portal port of the same target (multipath)
#   SH_MULTIPATH=1              run the two-path dm-multipath check (needs multipathd running)
#   SH_STAGEHAND                optional: a stagehand binary to run with --version
#   SH_TRACE=1                  trace every command with a timestamp
#
# Single path: node record for 10.0.2.2:PORT made by hand (tgtd's SendTargets answer names
# 127.0.0.1, unreachable from here), login without any automatic scan, scan of LUN 1 alone, the
# by-path link from udev, VPD serial/WWID, mkfs.ext4, mount, write, umount, fsck, logout.
# Multipath: two sessions (one per portal), one dm-multipath map with two paths over LUN 1, the
# data written before read through it, a read with one path offline, flush and logout.
set -euo pipefail

iqn=${SH_TGT_IQN:?}
port=${SH_TGT_PORT:?}
host=10.0.2.2
lun=1
check_name=smoke
# shellcheck source=check.sh
source /check.sh
trap 'echo "smoke: FAIL at line $LINENO: $BASH_COMMAND" >&2' ERR

node_new() { # PORT
  local p=$host:$1
  iscsiadm -m node -o new -T "$iqn" -p "$p" >/dev/null
  iscsiadm -m node -T "$iqn" -p "$p" -o update -n node.startup -v manual
  iscsiadm -m node -T "$iqn" -p "$p" -o update -n node.session.scan -v manual
}
login() { iscsiadm -m node -T "$iqn" -p "$host:$1" --login >/dev/null; }
logout() { iscsiadm -m node -T "$iqn" -p "$host:$1" --logout >/dev/null; }

# SCSI host number of the session logged in to PORT.
session_host() {
  local s sid dev
  for s in /sys/class/iscsi_session/session*; do
    sid=${s##*/session}
    [[ $(<"$s/targetname") == "$iqn" ]] || continue
    [[ $(<"/sys/class/iscsi_connection/connection$sid:0/persistent_port") == "$1" ]] || continue
    dev=$(readlink -f "$s/device/..")
    echo "${dev##*/host}"
    return 0
  done
  return 1
}

# Scans one LUN of the session to PORT and prints its block device once udev made its by-path link.
scan_lun() { # PORT LUN
  local h link
  h=$(session_host "$1") || fail "no session for port $1"
  echo "0 0 $2" >"/sys/class/scsi_host/host$h/scan"
  link=/dev/disk/by-path/ip-$host:$1-iscsi-$iqn-lun-$2
  udevadm wait --timeout=30 "$link" || fail "udev made no $link"
  readlink -f "$link"
}

count_sessions() {
  local n=0 s
  for s in /sys/class/iscsi_session/session*; do [[ -e $s ]] && n=$((n + 1)); done
  echo "$n"
}

echo "smoke: kernel $(uname -r), target $iqn at $host:$port"
if [[ -n ${SH_STAGEHAND:-} ]]; then
  v=$("$SH_STAGEHAND" --version)
  [[ -n $v ]] || fail "$SH_STAGEHAND --version printed nothing"
  ok "stagehand --version in the guest: $v"
fi

# --- single path ---------------------------------------------------------------------------
node_new "$port"
login "$port"
[[ $(count_sessions) == 1 ]] || fail "expected 1 session after login"
ok "login to $host:$port (node.startup=manual, node.session.scan=manual)"
! compgen -G "/sys/block/sd*" >/dev/null || fail "a disk appeared before the manual scan"
dev=$(scan_lun "$port" "$lun")
sd=${dev##*/}
ok "LUN $lun scanned: $dev, /dev/disk/by-path/ip-$host:$port-iscsi-$iqn-lun-$lun"
for l in /sys/block/*/device; do
  [[ $l == /sys/block/$sd/device ]] || fail "unexpected disk ${l%/device}: only LUN $lun was to be scanned"
done

wwid=$(<"/sys/block/$sd/device/wwid")
[[ -n $wwid ]] || fail "no wwid for $sd"
[[ -r /sys/block/$sd/device/vpd_pg83 ]] || fail "no VPD page 0x83 for $sd"
if [[ -n ${SH_TGT_SERIAL:-} ]]; then
  grep -aq -- "$SH_TGT_SERIAL" "/sys/block/$sd/device/vpd_pg80" ||
    fail "VPD page 0x80 of $sd does not hold serial $SH_TGT_SERIAL"
fi
id_serial=$(udevadm info --query=property --property=ID_SERIAL --value "$dev")
[[ -n $id_serial ]] || fail "udev has no ID_SERIAL for $dev"
by_id=""
for l in /dev/disk/by-id/*; do
  [[ $(readlink -f "$l") != "$dev" ]] || by_id+="${l##*/} "
done
[[ -n $by_id ]] || fail "no /dev/disk/by-id link for $sd"
ok "identity: wwid=$wwid serial=${SH_TGT_SERIAL:-?} ID_SERIAL=$id_serial by-id: $by_id"

mkfs.ext4 -q -F -E nodiscard,lazy_itable_init=1,lazy_journal_init=1 "$dev"
mkdir -p /mnt/smoke
mount "$dev" /mnt/smoke
dd if=/dev/urandom of=/mnt/smoke/data bs=64k count=16 status=none
sum=$(sha256sum </mnt/smoke/data)
umount /mnt/smoke
e2fsck -fn "$dev" >/dev/null 2>&1 || fail "e2fsck -fn found problems"
mount -o ro "$dev" /mnt/smoke
[[ $(sha256sum </mnt/smoke/data) == "$sum" ]] || fail "data read back differs"
umount /mnt/smoke
ok "ext4: mkfs, mount, write 1 MiB, umount, e2fsck, read back"

if [[ -n ${SH_TGT_XFS_LUN:-} ]]; then
  xdev=$(scan_lun "$port" "$SH_TGT_XFS_LUN")
  mkfs.xfs -q -f -K "$xdev"
  mount "$xdev" /mnt/smoke
  echo xfs >/mnt/smoke/hello
  umount /mnt/smoke
  xfs_repair -n "$xdev" >/dev/null 2>&1 || fail "xfs_repair -n found problems"
  echo 1 >"/sys/block/${xdev##*/}/device/delete"
  udevadm wait --removed --timeout=30 "$xdev" || fail "$xdev still there after delete"
  ok "xfs on LUN $SH_TGT_XFS_LUN: mkfs.xfs, mount, write, umount, xfs_repair -n, delete"
fi

if [[ ${SH_MULTIPATH:-0} != 1 ]]; then
  logout "$port"
  udevadm wait --removed --timeout=30 "$dev" || fail "$dev still there after logout"
  [[ $(count_sessions) == 0 ]] || fail "sessions left after logout"
  ok "logout, $dev removed"
  all_passed
  exit 0
fi

# --- multipath -----------------------------------------------------------------------------
# A second session through the other portal: LUN 1 then has two paths with one WWID. With
# find_multipaths strict, multipath maps only WWIDs listed in /etc/multipath/wwids.
port2=${SH_TGT_PORT2:?SH_MULTIPATH=1 needs SH_TGT_PORT2}
multipathd show daemon >/dev/null || fail "multipathd is not running (guest.sh --multipathd)"
multipath -a "$dev" >/dev/null
mpwwid=$(sed -n 's|^/\(.*\)/$|\1|p' /etc/multipath/wwids | head -n1)
[[ -n $mpwwid ]] || fail "multipath -a recorded no WWID"
node_new "$port2"
login "$port2"
[[ $(count_sessions) == 2 ]] || fail "expected 2 sessions"
dev2=$(scan_lun "$port2" "$lun")
ok "second session, LUN $lun as ${dev2##*/} through port $port2"

mp=/dev/mapper/$mpwwid
udevadm wait --timeout=30 "$mp" || fail "no multipath map $mp"
# The first path was there before its WWID was listed: have multipathd take it too (no-op when
# it already did), then wait (bounded) until the map shows both.
multipathd add path "$sd" >/dev/null || true
for ((i = 0; i < 200; i++)); do
  n=$(multipathd show maps raw format "%n %N" | sed -n "s/^$mpwwid \([0-9]*\)$/\1/p")
  [[ ${n:-0} -lt 2 ]] || break
  sleep 0.05
done
# multipathd's view (the same as multipath -ll, without re-probing every path: slow under TCG).
topology=$(multipathd show topology)
echo "$topology"
active=$(grep -cE '[0-9]+:[0-9]+:[0-9]+:[0-9]+ sd[a-z]+ .*active ready' <<<"$topology") || true
[[ $active == 2 ]] || fail "multipathd shows $active active paths, not 2"
ok "dm-multipath map $mpwwid with 2 active paths"

mount -o ro "$mp" /mnt/smoke
[[ $(sha256sum </mnt/smoke/data) == "$sum" ]] || fail "data read through multipath differs"
umount /mnt/smoke
ok "data written over one path read back through the map"

# Fail one path: I/O must go on over the other.
echo offline >"/sys/block/$sd/device/state"
timeout 60 dd if="$mp" of=/dev/null bs=64k count=64 iflag=direct status=none ||
  fail "read through the map with $sd offline failed"
multipathd show topology | grep -E '[0-9]+:[0-9]+:[0-9]+:[0-9]+ sd' || true
ok "read through the map with $sd offline"
echo running >"/sys/block/$sd/device/state"

multipath -f "$mpwwid" || fail "multipath -f $mpwwid"
udevadm wait --removed --timeout=30 "$mp" || fail "$mp still there after multipath -f"
logout "$port"
logout "$port2"
udevadm wait --removed --timeout=30 "$dev" "$dev2" || fail "disks still there after logout"
[[ $(count_sessions) == 0 ]] || fail "sessions left after logout"
ok "map flushed, both sessions logged out, disks removed"

all_passed
