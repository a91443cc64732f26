#!/bin/sh
# PID 1 of the kernel test guest that tests/kernel/guest.sh builds (busybox sh).
#
# Mounts the API file systems, loads the modules listed in /etc/stagehand-guest/modules, brings up
# the virtio network (QEMU user networking: the guest's 10.0.2.2 is the host's 127.0.0.1), starts
# systemd-udevd, iscsid and (with guest.multipathd=1) multipathd, then runs /test.sh with every
# `sh.NAME=VALUE` kernel parameter exported as SH_NAME=VALUE. It prints
# `STAGEHAND-GUEST-EXIT=<status>` and powers off; with panic=-1 and QEMU's -no-reboot any other
# way out (init exiting, a panic) also ends QEMU at once.
#
# Harness parameters on the kernel command line:
#   guest.multipathd=1        start multipathd before the test
#   guest.initiator=IQN       initiator name (default iqn.2024-01.dev.stagehand:kernel-guest)
#   guest.debug=1             trace this script and run udevd with --debug

PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
umask 022

uptime_s() {
  read -r up _ </proc/uptime
  echo "$up"
}

marker() {
  echo "STAGEHAND-GUEST-$1 uptime=$(uptime_s)"
}

say() {
  echo "guest-init: $*"
}

finish() {
  echo "STAGEHAND-GUEST-EXIT=$1"
  sync
  poweroff -f
  echo o >/proc/sysrq-trigger
  exit "$1"
}

fail() {
  echo "STAGEHAND-GUEST-ERROR: $*"
  finish 125
}

# Bounded wait for a readiness condition: wait_for SECONDS DESCRIPTION COMMAND...
wait_for() {
  limit=$(($1 * 20))
  what=$2
  shift 2
  n=0
  until "$@" >/dev/null 2>&1; do
    n=$((n + 1))
    [ "$n" -lt "$limit" ] || fail "timed out waiting for $what"
    sleep 0.05
  done
}

mount -t proc -o nosuid,nodev,noexec proc /proc || fail "mount /proc"
mount -t sysfs -o nosuid,nodev,noexec sysfs /sys || fail "mount /sys"
mount -t devtmpfs -o mode=0755,nosuid devtmpfs /dev || fail "mount /dev"
marker INIT
mkdir -p /dev/pts /dev/shm
mount -t devpts -o gid=5,mode=0620 devpts /dev/pts
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run || fail "mount /run"
# Files included from the host's /tmp (a CI clone there, say) live in the initramfs' own /tmp,
# which is writable already: a tmpfs over it would hide them.
if [ -z "$(ls -A /tmp)" ]; then
  mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp || fail "mount /tmp"
else
  chmod 1777 /tmp
fi
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
mkdir -p /run/lock/iscsi /run/multipath /run/udev
hostname stagehand-guest

multipathd_wanted=0
initiator=iqn.2024-01.dev.stagehand:kernel-guest
udevd_debug=""
set -f
# shellcheck disable=SC2013 # the command line is one line of words by definition
for arg in $(cat /proc/cmdline); do
  case $arg in
    sh.*=*)
      key=${arg%%=*}
      name=SH_$(echo "${key#sh.}" | tr 'a-z.-' 'A-Z__')
      case $name in
        *[!A-Z0-9_]*) say "ignoring parameter $arg" ;;
        *) export "$name=${arg#*=}" ;;
      esac
      ;;
    guest.multipathd=*) multipathd_wanted=${arg#*=} ;;
    guest.initiator=*) initiator=${arg#*=} ;;
    guest.debug=1)
      udevd_debug=--debug
      set -x
      ;;
  esac
done
set +f

# shellcheck disable=SC2046 # one module name per line
modprobe -a $(cat /etc/stagehand-guest/modules) || fail "modprobe failed"
# Optional ones may not suit the (emulated) CPU.
while read -r m; do
  [ -z "$m" ] || modprobe "$m" 2>/dev/null || say "optional module $m not loaded"
done </etc/stagehand-guest/modules.optional
marker MODULES

ip link set lo up
ifc=""
for d in /sys/class/net/*; do
  [ "${d##*/}" = lo ] || {
    ifc=${d##*/}
    break
  }
done
[ -n "$ifc" ] || fail "no network interface"
ip addr add 10.0.2.15/24 dev "$ifc" || fail "ip addr"
ip link set "$ifc" up || fail "ip link up"
ip route add default via 10.0.2.2 || fail "ip route"

/lib/systemd/systemd-udevd --daemon --resolve-names=never $udevd_debug || fail "systemd-udevd"
wait_for 10 "systemd-udevd" udevadm control --ping
# Only block devices need udev's work (by-path/by-id links, dm, multipath); everything else that
# exists at boot is left alone: processing it costs seconds under TCG.
udevadm trigger --type=devices --subsystem-match=block --action=add
udevadm settle --timeout=30 || say "udevadm settle timed out"
marker UDEV

echo "InitiatorName=$initiator" >/etc/iscsi/initiatorname.iscsi
# iscsid signals its whole process group on SIGTERM: give it a session of its own.
setsid iscsid -f </dev/null &
wait_for 10 "iscsid" grep -q ISCSIADM_ABSTRACT_NAMESPACE /proc/net/unix

if [ "$multipathd_wanted" = 1 ]; then
  setsid multipathd -d -s -v1 </dev/null &
  wait_for 10 "multipathd" multipathd show daemon
fi
marker DAEMONS

[ -x /test.sh ] || fail "no /test.sh in the initramfs"
export HOME=/root TERM=dumb SYSTEMD_COLORS=0 STAGEHAND_GUEST=1
cd / || fail "cd /"
marker TEST-START
/test.sh </dev/null
rc=$?
marker TEST-END
finish "$rc"
