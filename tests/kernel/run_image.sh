#!/usr/bin/env bash
# The kernel transport from the container image, host side. The QEMU guest plays a Kubernetes
# node: its own iscsid, multipathd and udev are the host's; the image's root filesystem (from
# podman, as scripts/image built it) runs under runc the way deploy/kubernetes/daemonset.yaml
# runs it (privileged, host network and PID namespaces, the DaemonSet's mounts and arguments);
# stagehandctl makes the CSI calls the kubelet makes. This script exports the image's root
# filesystem into an ext4 disk image (attached to the guest as /dev/vda, copy-on-write), starts
# a private tgtd on 127.0.0.1 with a CHAP-protected LUN and two portals, and runs
# tests/kernel/image_test.sh in the guest. Exit status: the guest test's (see guest.sh run).
#
#   tests/kernel/run_image.sh [--image REF] [--stagehandctl PATH] [--cache DIR]
#                             [--timeout SECS] [--log FILE] [--append "k=v ..."]
#                             [--kernel-package PKG]
#
#   --image REF          default: localhost/stagehand:0.1.0 (scripts/image)
#   --stagehandctl PATH  the kubelet's stand-in; default: build/bin/stagehandctl of this checkout
#   --cache, --timeout, --log, --append and --kernel-package go to guest.sh
#
# Needs podman (the image), runc (copied into the guest) and mke2fs besides what guest.sh needs.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=tgt.sh
source "$HERE/tgt.sh"

image=localhost/stagehand:0.1.0
stagehandctl=$REPO/build/bin/stagehandctl
guest_args=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --image) image=$2 && shift 2 ;;
    --stagehandctl) stagehandctl=$2 && shift 2 ;;
    --cache | --timeout | --log | --append | --kernel-package) guest_args+=("$1" "$2") && shift 2 ;;
    -h | --help)
      sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
      exit 0
      ;;
    *)
      echo "run_image.sh: unknown option '$1'" >&2
      exit 2
      ;;
  esac
done
[[ -x $stagehandctl ]] || {
  echo "run_image.sh: $stagehandctl not found: build first or pass --stagehandctl PATH" >&2
  exit 2
}
runc=$(type -P runc) || {
  echo "run_image.sh: runc not found (apt-get install runc)" >&2
  exit 2
}
command -v podman >/dev/null || {
  echo "run_image.sh: podman not found (scripts/install-deps)" >&2
  exit 2
}

tmp=$(mktemp -d /tmp/shk.XXXXXX)
guest_pid=""
container=""
# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
  local rc=$?
  if [[ -n $guest_pid ]]; then
    kill -TERM "$guest_pid" 2>/dev/null || true
    wait "$guest_pid" 2>/dev/null || true
  fi
  [[ -z $container ]] || podman rm -f "$container" >/dev/null 2>&1 || true
  tgt_stop
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The image's root filesystem as the runtime would unpack it, on an ext4 disk image.
t=$SECONDS
container=$(podman create --pull=never "$image" 2>"$tmp/podman.err") || {
  echo "run_image.sh: no image $image (scripts/image builds it): $(cat "$tmp/podman.err")" >&2
  exit 2
}
mkdir "$tmp/rootfs"
podman export "$container" | tar -x -C "$tmp/rootfs"
podman rm "$container" >/dev/null
container=""
size_mib=$(($(du -sm "$tmp/rootfs" | cut -f1) * 3 / 2 + 64))
mke2fs -q -t ext4 -L sh-image -d "$tmp/rootfs" "$tmp/rootfs.img" "${size_mib}M"
rm -rf "$tmp/rootfs"
echo "run_image.sh: root filesystem of $image on a ${size_mib} MiB ext4 image in" \
  "$((SECONDS - t)) s" >&2

iqn=iqn.2024-01.dev.stagehand:kernel-image
serial=SHIM$$
chap_user=sh-guest
# Test-only secret, new for every run; it travels on the guest's kernel command line.
chap_password=sh-$(od -An -N9 -tx1 /dev/urandom | tr -d ' \n')
truncate -s 256M "$tmp/lun1.img"
truncate -s 256M "$tmp/lun2.img"
tgt_start "$tmp/tgtd.log" || {
  cat "$tmp/tgtd.log" >&2
  exit 1
}
tgt_adm --op new --mode target --tid 1 -T "$iqn"
tgt_add_lun 1 1 "$tmp/lun1.img" "scsi_sn=$serial"
tgt_add_lun 1 2 "$tmp/lun2.img" "scsi_sn=${serial}b"
tgt_adm --op bind --mode target --tid 1 -I ALL
tgt_adm --op new --mode account --user "$chap_user" --password "$chap_password"
tgt_adm --op bind --mode account --tid 1 --user "$chap_user"
port2=$(tgt_add_portal)
echo "run_image.sh: tgtd pid $TGT_PID, control port $TGT_CTL, target $iqn at" \
  "127.0.0.1:$TGT_PORT and :$port2, LUN 1 serial $serial, LUN 2 ${serial}b, CHAP user" \
  "$chap_user" >&2

append="sh.tgt_iqn=$iqn sh.tgt_port=$TGT_PORT sh.tgt_port2=$port2 sh.tgt_serial=$serial"
append+=" sh.chap_user=$chap_user sh.chap_password=$chap_password"
append+=" sh.stagehandctl=$stagehandctl sh.runc=$runc"

# In the background so that a signal to this script is handled (and tgtd stopped) at once.
"$HERE/guest.sh" run --test "$HERE/image_test.sh" --multipathd --drive "$tmp/rootfs.img" \
  --include "$stagehandctl" "$runc" --append "$append" --memory 1024 --timeout 300 \
  "${guest_args[@]}" &
guest_pid=$!
rc=0
wait "$guest_pid" || rc=$?
guest_pid=""
if [[ $rc != 0 ]]; then
  echo "run_image.sh: guest exit status $rc; tgtd log:" >&2
  tail -n 20 "$tmp/tgtd.log" >&2
fi
exit "$rc"
