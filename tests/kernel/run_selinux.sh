#!/usr/bin/env bash
# SELinux mounts under a kernel that enforces labels, host side: compiles the minimal policy
# (selinux_policy.sh), starts a private tgtd on 127.0.0.1 with one CHAP-protected LUN, boots the
# kernel test guest with SELinux on (`security=selinux enforcing=0`) and runs
# tests/kernel/selinux_test.sh there with stagehand, stagehandctl, the policy and getfattr.
# Exit status: the guest test's (see guest.sh run).
#
#   tests/kernel/run_selinux.sh [--stagehand PATH] [--stagehandctl PATH] [--cache DIR]
#                               [--timeout SECS] [--log FILE] [--append "k=v ..."]
#                               [--kernel-package PKG]
#
#   --stagehand PATH     default: build/bin/stagehand of this checkout
#   --stagehandctl PATH  default: build/bin/stagehandctl of this checkout
#   --cache, --timeout, --log, --append and --kernel-package go to guest.sh
#
# Needs secilc (the policy) and attr (getfattr) besides what guest.sh needs.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=tgt.sh
source "$HERE/tgt.sh"

stagehand=$REPO/build/bin/stagehand
stagehandctl=$REPO/build/bin/stagehandctl
guest_args=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --stagehand) stagehand=$2 && shift 2 ;;
    --stagehandctl) stagehandctl=$2 && shift 2 ;;
    --cache | --timeout | --log | --append | --kernel-package) guest_args+=("$1" "$2") && shift 2 ;;
    -h | --help)
      sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
      exit 0
      ;;
    *)
      echo "run_selinux.sh: unknown option '$1'" >&2
      exit 2
      ;;
  esac
done
for b in "$stagehand" "$stagehandctl"; do
  [[ -x $b ]] || {
    echo "run_selinux.sh: $b not found: build first or pass --stagehand/--stagehandctl PATH" >&2
    exit 2
  }
done
getfattr=$(type -P getfattr) || {
  echo "run_selinux.sh: getfattr not found (apt-get install attr)" >&2
  exit 2
}

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

"$HERE/selinux_policy.sh" "$tmp/policy.33"

iqn=iqn.2024-01.dev.stagehand:kernel-selinux
serial=SHSE$$
chap_user=sh-guest
# Test-only secret, new for every run; it travels on the guest's kernel command line.
chap_password=sh-$(od -An -N9 -tx1 /dev/urandom | tr -d ' \n')
truncate -s 256M "$tmp/lun1.img"
tgt_start "$tmp/tgtd.log" || {
  cat "$tmp/tgtd.log" >&2
  exit 1
}
tgt_adm --op new --mode target --tid 1 -T "$iqn"
tgt_add_lun 1 1 "$tmp/lun1.img" "scsi_sn=$serial"
tgt_adm --op bind --mode target --tid 1 -I ALL
tgt_adm --op new --mode account --user "$chap_user" --password "$chap_password"
tgt_adm --op bind --mode account --tid 1 --user "$chap_user"
echo "run_selinux.sh: tgtd pid $TGT_PID, control port $TGT_CTL, target $iqn at" \
  "127.0.0.1:$TGT_PORT, LUN 1 serial $serial, CHAP user $chap_user" >&2

append="security=selinux enforcing=0"
append+=" sh.tgt_iqn=$iqn sh.tgt_port=$TGT_PORT sh.tgt_serial=$serial"
append+=" sh.chap_user=$chap_user sh.chap_password=$chap_password"
append+=" sh.stagehand=$stagehand sh.stagehandctl=$stagehandctl"
append+=" sh.selinux_policy=$tmp/policy.33 sh.getfattr=$getfattr"

# In the background so that a signal to this script is handled (and tgtd stopped) at once.
"$HERE/guest.sh" run --test "$HERE/selinux_test.sh" \
  --include "$stagehand" "$stagehandctl" "$tmp/policy.33" "$getfattr" \
  --append "$append" "${guest_args[@]}" &
guest_pid=$!
rc=0
wait "$guest_pid" || rc=$?
guest_pid=""
if [[ $rc != 0 ]]; then
  echo "run_selinux.sh: guest exit status $rc; tgtd log:" >&2
  tail -n 20 "$tmp/tgtd.log" >&2
fi
exit "$rc"
