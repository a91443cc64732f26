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
# shellcheck source-path=SCRIPTDIR source=host.sh
source "$HERE/host.sh"

image=localhost/stagehand:0.1.0
stagehandctl=$REPO/build/bin/stagehandctl
guest_args=()
host_begin run_image.sh
while [[ $# -gt 0 ]]; do
  case $1 in
    --image) image=$2 && shift 2 ;;
    --stagehandctl) stagehandctl=$2 && shift 2 ;;
    -h | --help) host_usage && exit 0 ;;
    *)
      host_guest_option "$1" || host_bad_option "$1"
      guest_args+=("$1" "$2") && shift 2
      ;;
  esac
done
host_need_exec "$stagehandctl" "build first or pass --stagehandctl PATH"
runc=$(host_need_tool runc "apt-get install runc")
host_need_tool podman "scripts/install-deps" >/dev/null

container=""
host_on_cleanup '[[ -z $container ]] || podman rm -f "$container" >/dev/null 2>&1'

# The image's root filesystem as the runtime would unpack it, on an ext4 disk image.
t=$SECONDS
container=$(podman create --pull=never "$image" 2>"$host_tmp/podman.err") || {
  echo "run_image.sh: no image $image (scripts/image builds it): $(cat "$host_tmp/podman.err")" >&2
  exit 2
}
mkdir "$host_tmp/rootfs"
podman export "$container" | tar -x -C "$host_tmp/rootfs"
podman rm "$container" >/dev/null
container=""
size_mib=$(($(du -sm "$host_tmp/rootfs" | cut -f1) * 3 / 2 + 64))
mke2fs -q -t ext4 -L sh-image -d "$host_tmp/rootfs" "$host_tmp/rootfs.img" "${size_mib}M"
rm -rf "$host_tmp/rootfs"
echo "run_image.sh: root filesystem of $image on a ${size_mib} MiB ext4 image in" \
  "$((SECONDS - t)) s" >&2

iqn=iqn.2024-01.dev.stagehand:kernel-image
serial=SHIM$$
chap_user=sh-guest
chap_password=$(host_secret sh)
truncate -s 256M "$host_tmp/lun1.img"
truncate -s 256M "$host_tmp/lun2.img"
host_start_tgt
tgt_adm --op new --mode target --tid 1 -T "$iqn"
tgt_add_lun 1 1 "$host_tmp/lun1.img" "scsi_sn=$serial"
tgt_add_lun 1 2 "$host_tmp/lun2.img" "scsi_sn=${serial}b"
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

host_run_guest --test "$HERE/image_test.sh" --multipathd --drive "$host_tmp/rootfs.img" \
  --include "$stagehandctl" "$runc" --append "$append" --memory 1024 --timeout 300 \
  "${guest_args[@]}"
