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
# shellcheck source-path=SCRIPTDIR source=tgt.sh
source "$HERE/tgt.sh"

stagehand=$REPO/build/bin/stagehand
multipath=1
xfs=0
guest_args=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --stagehand) stagehand=$2 && shift 2 ;;
    --no-stagehand) stagehand="" && shift ;;
    --no-multipath) multipath=0 && shift ;;
    --xfs) xfs=1 && shift ;;
    --cache | --timeout | --log | --append | --kernel-package) guest_args+=("$1" "$2") && shift 2 ;;
    -h | --help)
      sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
      exit 0
      ;;
    *)
      echo "run_smoke.sh: unknown option '$1'" >&2
      exit 2
      ;;
  esac
done
if [[ -n $stagehand && ! -x $stagehand ]]; then
  echo "run_smoke.sh: $stagehand not found: build first, pass --stagehand PATH or --no-stagehand" >&2
  exit 2
fi

tmp=$(mktemp -d /tmp/shk.XXXXXX)
guest_pid=""
# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
  local rc=$?
  if [[ -n $guest_pid ]]; then
    kill -TERM "$guest_pid" 2>/dev/null || true
    wait "$guest_pid" 2>/dev/null || true
  fi
  tgt_stop
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

iqn=iqn.2024-01.dev.stagehand:kernel-smoke
serial=SHSMOKE$$
truncate -s 256M "$tmp/lun1.img"
tgt_start "$tmp/tgtd.log" || {
  cat "$tmp/tgtd.log" >&2
  exit 1
}
tgt_adm --op new --mode target --tid 1 -T "$iqn"
tgt_add_lun 1 1 "$tmp/lun1.img" "scsi_sn=$serial"
tgt_adm --op bind --mode target --tid 1 -I ALL
append="sh.tgt_iqn=$iqn sh.tgt_port=$TGT_PORT sh.tgt_serial=$serial"
if [[ $xfs == 1 ]]; then
  truncate -s 512M "$tmp/lun2.img" # mkfs.xfs wants at least 300 MiB
  tgt_add_lun 1 2 "$tmp/lun2.img"
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

# In the background so that a signal to this script is handled (and tgtd stopped) at once.
"$HERE/guest.sh" run --test "$HERE/smoke_test.sh" "${includes[@]}" --append "$append" \
  "${guest_args[@]}" &
guest_pid=$!
rc=0
wait "$guest_pid" || rc=$?
guest_pid=""
if [[ $rc != 0 ]]; then
  echo "run_smoke.sh: guest exit status $rc; tgtd log:" >&2
  tail -n 20 "$tmp/tgtd.log" >&2
fi
exit "$rc"
