#!/bin/bash
# The kernel transport from the container image, in the guest that tests/kernel/guest.sh boots
# (multipathd on); tests/kernel/run_image.sh attaches the image's root filesystem as /dev/vda and
# passes:
#   SH_TGT_IQN, SH_TGT_PORT, SH_TGT_PORT2   the target and its two portal ports on the host
#   SH_TGT_SERIAL                           LUN 1's unit serial (LUN 2's is it with "b")
#   SH_CHAP_USER, SH_CHAP_PASSWORD          the CHAP account bound to the target (test-only)
#   SH_STAGEHANDCTL, SH_RUNC                the kubelet's stand-in and the runtime
#
# The guest is the node: its iscsid, multipathd and udev are the host's. The image runs under
# runc as deploy/kubernetes/daemonset.yaml runs it: privileged (every capability, every device,
# no seccomp), the host's network and PID namespaces, the DaemonSet's host mounts (the kubelet's
# plugins and pods directories and /run/stagehand with Bidirectional propagation, /dev, /sys,
# /etc/iscsi, /etc/multipath, /run/udev, /lib/modules, /var/lib/stagehand, /run/dbus) and its
# arguments, but --session-launcher=detached (the guest has no systemd; the kernel transport
# starts no session process). stagehandctl makes the CSI calls the kubelet makes, at the
# kubelet's paths:
#  1. one portal with CHAP: stage (iscsiadm in the image against the node's iscsid), publish,
#     write; the mounts propagate to the node;
#  2. the container is killed and started again under the published volume: the mounts and the
#     data stay, I/O goes on, the new container unpublishes and unstages;
#  3. two portals: a dm-multipath map over both (multipath -a in the image, the node's
#     multipathd), publish, write, unpublish, unstage;
#  4. nothing is left on the node: no session, node record, map, WWID, disk or mount; the
#     container stops on SIGTERM.
# Each check prints "image: ok <what> (<seconds>s)"; the last line is a summary.
set -euo pipefail

iqn=${SH_TGT_IQN:?}
port=${SH_TGT_PORT:?}
port2=${SH_TGT_PORT2:?}
serial=${SH_TGT_SERIAL:?}
chap_user=${SH_CHAP_USER:?}
chap_password=${SH_CHAP_PASSWORD:?}
stagehandctl=${SH_STAGEHANDCTL:?}
runc=${SH_RUNC:?}
unset SH_CHAP_PASSWORD
host=10.0.2.2
kubelet=/var/lib/kubelet
endpoint=unix://$kubelet/plugins/iscsi.stagehand.dev/csi.sock
rootfs=/var/lib/sh-image
bundle=/run/sh-bundle
work=/run/sh-test
name=stagehand-node
check_name=image
# shellcheck source=check.sh
source /check.sh
# shellcheck disable=SC2317 # invoked by the EXIT trap
on_exit() {
  local rc=$?
  if [[ $rc != 0 ]]; then
    echo "image: --- container log ---"
    cat "$work"/container*.log 2>/dev/null || true
    echo "image: --- stagehandctl ---"
    cat "$work/ctl.out" 2>/dev/null || true
    echo "image: --- mounts under $kubelet ---"
    grep " $kubelet/" /proc/self/mountinfo || true
    echo "image: --- multipathd show topology ---"
    timeout 10 multipathd show topology || true
    echo "image: --- dmesg ---"
    dmesg | tail -n 30
  fi
  exit "$rc"
}
trap on_exit EXIT

ctl() { # stagehandctl on the driver's socket, as the kubelet would call it
  local out rc=0
  out=$("$stagehandctl" --endpoint "$endpoint" --timeout 60 "$@" 2>&1) || rc=$?
  printf '%s\n' "$out" >>"$work/ctl.out"
  [[ -z $out ]] || printf '%s\n' "$out"
  return "$rc"
}
mount_id() { awk -v m="$1" '$5 == m {print $1}' /proc/self/mountinfo; }
sd_disks() { ls /sys/block | grep '^sd' || true; }
# What a clean node does not have; empty when clean.
leftovers() {
  local n
  n=$(ls /sys/class/iscsi_session 2>/dev/null | wc -l)
  ((n == 0)) || echo "$n iSCSI session(s)"
  [[ -z $(ls /etc/iscsi/nodes 2>/dev/null) ]] || echo "node records: $(ls /etc/iscsi/nodes)"
  [[ -z $(sd_disks) ]] || echo "disks: $(sd_disks | tr '\n' ' ')"
  [[ -z $(ls /sys/block | grep '^dm-') ]] || echo "dm devices: $(ls /sys/block | grep '^dm-' | tr '\n' ' ')"
  ! grep -q '^/' /etc/multipath/wwids 2>/dev/null || echo "WWIDs: $(grep '^/' /etc/multipath/wwids | tr '\n' ' ')"
  ! grep -qE " $kubelet/(plugins|pods)/" /proc/self/mountinfo ||
    echo "mounts: $(grep -E " $kubelet/(plugins|pods)/" /proc/self/mountinfo | awk '{print $5}' | tr '\n' ' ')"
  return 0
}

# --- the node: kubelet directories (shared, as a kubelet's root is), the image, the runtime -----
mkdir -p "$work" "$kubelet" /run/stagehand /var/lib/stagehand /run/dbus /etc/multipath "$rootfs"
mount -t tmpfs -o mode=0755 kubelet "$kubelet"
mount --make-shared "$kubelet"
mkdir -p "$kubelet/plugins" "$kubelet/pods" "$kubelet/plugins_registry"
mount -t tmpfs -o mode=0755 stagehand-run /run/stagehand
mount --make-shared /run/stagehand
mount /dev/vda "$rootfs"
[[ -x $rootfs/usr/bin/stagehand ]] || fail "/dev/vda holds no image root filesystem"
grep -q ' /sys/fs/cgroup ' /proc/self/mountinfo || mount -t cgroup2 cgroup2 /sys/fs/cgroup
[[ -z $(leftovers) ]] || fail "the node is not clean before the test: $(leftovers)"

caps='"CAP_CHOWN","CAP_DAC_OVERRIDE","CAP_DAC_READ_SEARCH","CAP_FOWNER","CAP_FSETID","CAP_KILL",
"CAP_SETGID","CAP_SETUID","CAP_SETPCAP","CAP_LINUX_IMMUTABLE","CAP_NET_BIND_SERVICE",
"CAP_NET_BROADCAST","CAP_NET_ADMIN","CAP_NET_RAW","CAP_IPC_LOCK","CAP_IPC_OWNER","CAP_SYS_MODULE",
"CAP_SYS_RAWIO","CAP_SYS_CHROOT","CAP_SYS_PTRACE","CAP_SYS_PACCT","CAP_SYS_ADMIN","CAP_SYS_BOOT",
"CAP_SYS_NICE","CAP_SYS_RESOURCE","CAP_SYS_TIME","CAP_SYS_TTY_CONFIG","CAP_MKNOD","CAP_LEASE",
"CAP_AUDIT_WRITE","CAP_AUDIT_CONTROL","CAP_SETFCAP","CAP_MAC_OVERRIDE","CAP_MAC_ADMIN",
"CAP_SYSLOG","CAP_WAKE_ALARM","CAP_BLOCK_SUSPEND","CAP_AUDIT_READ","CAP_PERFMON","CAP_BPF",
"CAP_CHECKPOINT_RESTORE"'
bind() { # DESTINATION OPTIONS...: the DaemonSet's hostPath volume at the same path
  local d=$1 o
  shift
  o=$(printf '"%s",' rbind "$@")
  printf '{"destination": "%s", "type": "bind", "source": "%s", "options": [%s]},\n' "$d" "$d" "${o%,}"
}
mkdir -p "$bundle"
cat >"$bundle/config.json" <<EOF
{
  "ociVersion": "1.0.2",
  "process": {
    "user": {"uid": 0, "gid": 0},
    "args": ["/usr/bin/stagehand", "--mode=kubernetes", "--node-id=guest",
             "--kubelet-dir=$kubelet", "--metrics-address=0.0.0.0:29780",
             "--state-dir=/var/lib/stagehand", "--session-launcher=detached"],
    "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "NODE_NAME=guest"],
    "cwd": "/",
    "capabilities": {"bounding": [$caps], "effective": [$caps], "permitted": [$caps]},
    "noNewPrivileges": false
  },
  "root": {"path": "$rootfs", "readonly": false},
  "hostname": "guest",
  "mounts": [
    {"destination": "/proc", "type": "proc", "source": "proc"},
    $(bind "$kubelet/plugins" rshared)
    $(bind "$kubelet/pods" rshared)
    $(bind "$kubelet/plugins_registry" rprivate)
    $(bind /dev rprivate)
    $(bind /run/stagehand rshared)
    $(bind /var/lib/stagehand rprivate)
    $(bind /run/dbus rprivate)
    $(bind /sys rprivate)
    $(bind /etc/iscsi rprivate)
    $(bind /etc/multipath rprivate)
    $(bind /run/udev rprivate ro)
    $(bind /lib/modules rprivate ro)
    {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "nodev", "mode=1777"]}
  ],
  "linux": {
    "namespaces": [{"type": "mount"}, {"type": "ipc"}, {"type": "uts"}],
    "rootfsPropagation": "rshared",
    "resources": {"devices": [{"allow": true, "access": "rwm"}]},
    "cgroupsPath": "/stagehand-node"
  }
}
EOF

starts=0
start_container() {
  starts=$((starts + 1))
  # --no-pivot: the guest's root is its initramfs, which pivot_root(2) cannot leave (a node
  # booted from a disk has no such limit; runc then moves the root and chroots, same result).
  "$runc" run -d --no-pivot --bundle "$bundle" "$name" </dev/null >>"$work/container$starts.log" 2>&1 ||
    fail "runc run: $(cat "$work/container$starts.log")"
  probe() { "$stagehandctl" --endpoint "$endpoint" identity probe >/dev/null 2>&1; }
  until_deadline 60 probe || fail "the container's driver did not answer on $endpoint within 60 s"
}
stop_container() { # SIGNAL
  "$runc" kill "$name" "$1" || true
  local stopped
  stopped() { [[ $("$runc" state "$name" 2>/dev/null | grep -o '"status": *"[a-z]*"') == *stopped* ]]; }
  until_deadline 30 stopped || fail "the container did not stop on SIG$1"
  "$runc" delete "$name"
}

start_container
status=$("$runc" exec "$name" stagehandctl agent status 2>&1) || fail "agent status: $status"
grep -qE '^transport: +kernel$' <<<"$status" ||
  fail "the image's stagehand did not pick the kernel transport: $status"
ok "the image runs under runc as the DaemonSet runs it; kernel transport (auto): the node's iscsid answers the image's iscsiadm"

mkdir -m 0700 /root/secrets
printf 'node.session.auth.username: %s\nnode.session.auth.password: %s\n' "$chap_user" \
  "$chap_password" >/root/secrets/chap.yaml
# The kubelet's paths: the global staging mount of a volume, and a pod's mount of it.
staging() { echo "$kubelet/plugins/kubernetes.io/csi/iscsi.stagehand.dev/$(printf %s "$1" | sha256sum | cut -c1-64)/globalmount"; }
target() { echo "$kubelet/pods/$2/volumes/kubernetes.io~csi/$1/mount"; }
stage() { # VOLUME LUN [CONTEXT...]
  local v=$1 lun=$2
  shift 2
  mkdir -p "$(dirname "$(staging "$v")")"
  ctl node stage --volume-id "$v" --staging-path "$(staging "$v")" -c "targetPortal=$host:$port" \
    -c "iqn=$iqn" -c "lun=$lun" --secrets-file /root/secrets/chap.yaml "$@" >/dev/null
}
publish() { # VOLUME POD
  mkdir -p "$(dirname "$(target "$1" "$2")")"
  ctl node publish --volume-id "$1" --staging-path "$(staging "$1")" --target-path "$(target "$1" "$2")" >/dev/null
}
unpublish() { ctl node unpublish --volume-id "$1" --target-path "$(target "$1" "$2")" >/dev/null; }
unstage() { ctl node unstage --volume-id "$1" --staging-path "$(staging "$1")" >/dev/null; }

# --- 1. one portal, CHAP -------------------------------------------------------------------------
stage pv1 1 -c "expectedSerial=$serial" || fail "stage pv1"
publish pv1 pod-a || fail "publish pv1"
pv1_target=$(target pv1 pod-a)
head -c 1048576 /dev/urandom >"$work/data"
cp "$work/data" "$pv1_target/data"
sync "$pv1_target/data"
disk=$(basename "$(readlink -f "/sys/dev/block/$(findmnt -n -o MAJ:MIN --mountpoint "$(staging pv1)" | tr -d ' ')")")
[[ $disk == sd* ]] || fail "pv1 is staged on /dev/$disk, not a SCSI disk"
grep -q -- "$serial" "/sys/block/$disk/device/vpd_pg80" || fail "/dev/$disk is not LUN 1 (serial $serial)"
ok "one portal, CHAP: staged on /dev/$disk, published; the mounts propagated to the node, 1 MiB written there"

# --- 2. the container restarts under the published volume --------------------------------------
id_stage=$(mount_id "$(staging pv1)")
id_pub=$(mount_id "$pv1_target")
stop_container KILL
cmp -s "$work/data" "$pv1_target/data" || fail "the data differs with the container gone"
echo "while the container was gone" >"$pv1_target/gone" && sync "$pv1_target/gone" ||
  fail "no write with the container gone"
start_container
[[ $(mount_id "$(staging pv1)") == "$id_stage" && $(mount_id "$pv1_target") == "$id_pub" ]] ||
  fail "the mounts changed over the container's restart"
stage pv1 1 -c "expectedSerial=$serial" || fail "repeated stage of pv1 by the new container"
publish pv1 pod-a || fail "repeated publish of pv1 by the new container"
[[ $(mount_id "$(staging pv1)") == "$id_stage" && $(mount_id "$pv1_target") == "$id_pub" ]] ||
  fail "the repeated stage and publish remounted pv1"
unpublish pv1 pod-a || fail "unpublish pv1 by the new container"
unstage pv1 || fail "unstage pv1 by the new container"
[[ -z $(leftovers) ]] || fail "after unstage of pv1: $(leftovers)"
ok "container killed and started again under pv1: same mounts, I/O went on, the new one unpublished and unstaged: nothing left"

# --- 3. two portals: dm-multipath -----------------------------------------------------------------
stage pv2 2 -c "portals=$host:$port2" -c "expectedSerial=${serial}b" || fail "stage pv2 (two portals)"
publish pv2 pod-b || fail "publish pv2"
dm=$(basename "$(readlink -f "/sys/dev/block/$(findmnt -n -o MAJ:MIN --mountpoint "$(staging pv2)" | tr -d ' ')")")
[[ $dm == dm-* ]] || fail "pv2 is staged on /dev/$dm, not on a dm-multipath map"
paths=$(ls "/sys/block/$dm/slaves" | tr '\n' ' ')
[[ $(wc -w <<<"$paths") == 2 ]] || fail "the map $dm has paths '$paths', not two"
cp "$work/data" "$(target pv2 pod-b)/data"
sync "$(target pv2 pod-b)/data"
ok "two portals: staged on $dm ($(cat "/sys/block/$dm/dm/name")) over $paths, published, 1 MiB written"
unpublish pv2 pod-b || fail "unpublish pv2"
unstage pv2 || fail "unstage pv2"
[[ -z $(leftovers) ]] || fail "after unstage of pv2: $(leftovers)"
ok "unpublish + unstage pv2: map, WWID, both sessions and node records gone"

# --- 4. the container stops ----------------------------------------------------------------------
stop_container TERM
[[ -z $(leftovers) ]] || fail "after the container stopped: $(leftovers)"
ok "container stopped on SIGTERM; the node has no session, node record, map, WWID, disk or mount"
all_passed
