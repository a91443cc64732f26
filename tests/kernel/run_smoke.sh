#!/usr/bin/env bash
# Kernel iSCSI smoke test, host side: starts a private tgtd on 127.0.0.1 (free portal ports, its
# own control port, a file-backed 256 MiB LUN 1, ACL ALL), boots the kernel test guest with
# tests/kernel/smoke_test.sh, then stops tgtd and removes its files. Exit status: the guest
# test's (see guest.sh run).
#
#   tests/kernel/run_smoke.sh [--cache DIR] [--stagehand PATH | --no-stagehand] [--no-multipath]
#                             [--xfs] [--timeout SECS] [--log FILE] [--append "k=v ..."]
#                             [--kernel-package PKG]
#
#   --stagehand PATH   binary to run with --version in the guest
#                      (default: build/bin/stagehand of this checkout)
#   --no-stagehand     skip that check
#   --no-multipath     single path only (no second portal, no multipathd)
#   --xfs              also check xfs on a sparse 512 MiB LUN 2 (slower: loads xfs.ko)
#   --cache, --timeout, --log, --append and --kernel-package go to guest.sh
#                      (--append "sh.trace=1" traces the test).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=host.sh
source "$HERE/host.sh"

stagehand=$REPO/build/bin/stagehand
multipath=1
xfs=0
guest_args=()
host_begin run_smoke.sh
while [[ $# -gt 0 ]]; do
  case $1 in
    --stagehand) stagehand=$2 && shift 2 ;;
    --no-stagehand) stagehand="" && shift ;;
    --no-multipath) multipath=0 && shift ;;
    --xfs) xfs=1 && shift ;;
    -h | --help) host_usage && exit 0 ;;
    *)
      host_guest_option "$1" || host_bad_option "$1"
      guest_args+=("$1" "$2") && shift 2
      ;;
  esac
done
[[ -z $stagehand ]] ||
  host_need_exec "$stagehand" "build first, pass --stagehand PATH or --no-stagehand"

iqn=iqn.2024-01.dev.stagehand:kernel-smoke
serial=SHSMOKE$$
truncate -s 256M "$host_tmp/lun1.img"
host_start_tgt
tgt_adm --op new --mode target --tid 1 -T "$iqn"
tgt_add_lun 1 1 "$host_tmp/lun1.img" "scsi_sn=$serial"
tgt_adm --op bind --mode target --tid 1 -I ALL
append="sh.tgt_iqn=$iqn sh.tgt_port=$TGT_PORT sh.tgt_serial=$serial"
if [[ $xfs == 1 ]]; then
  truncate -s 512M "$host_tmp/lun2.img" # mkfs.xfs wants at least 300 MiB
  tgt_add_lun 1 2 "$host_tmp/lun2.img"
  append+=" sh.tgt_xfs_lun=2"
fi
if [[ $multipath == 1 ]]; then
  port2=$(tgt_add_portal)
  append+=" sh.tgt_port2=$port2 sh.multipath=1"
  guest_args+=(--multipathd)
fi
includes=()
if [[ -n $stagehand ]]; then
  includes=(--include "$stagehand")
  append+=" sh.stagehand=$stagehand"
fi
echo "run_smoke.sh: tgtd pid $TGT_PID, control port $TGT_CTL, portal 127.0.0.1:$TGT_PORT${port2:+ and :$port2}" >&2

host_run_guest --test "$HERE/smoke_test.sh" "${includes[@]}" --append "$append" \
  "${guest_args[@]}"
