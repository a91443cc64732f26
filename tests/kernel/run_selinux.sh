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
# shellcheck source-path=SCRIPTDIR source=host.sh
source "$HERE/host.sh"

stagehand=$REPO/build/bin/stagehand
stagehandctl=$REPO/build/bin/stagehandctl
guest_args=()
host_begin run_selinux.sh
while [[ $# -gt 0 ]]; do
  case $1 in
    --stagehand) stagehand=$2 && shift 2 ;;
    --stagehandctl) stagehandctl=$2 && shift 2 ;;
    -h | --help) host_usage && exit 0 ;;
    *)
      host_guest_option "$1" || host_bad_option "$1"
      guest_args+=("$1" "$2") && shift 2
      ;;
  esac
done
for b in "$stagehand" "$stagehandctl"; do
  host_need_exec "$b" "build first or pass --stagehand/--stagehandctl PATH"
done
getfattr=$(host_need_tool getfattr "apt-get install attr")

"$HERE/selinux_policy.sh" "$host_tmp/policy.33"

iqn=iqn.2024-01.dev.stagehand:kernel-selinux
serial=SHSE$$
chap_user=sh-guest
chap_password=$(host_secret sh)
truncate -s 256M "$host_tmp/lun1.img"
host_start_tgt
tgt_adm --op new --mode target --tid 1 -T "$iqn"
tgt_add_lun 1 1 "$host_tmp/lun1.img" "scsi_sn=$serial"
tgt_adm --op bind --mode target --tid 1 -I ALL
tgt_adm --op new --mode account --user "$chap_user" --password "$chap_password"
tgt_adm --op bind --mode account --tid 1 --user "$chap_user"
echo "run_selinux.sh: tgtd pid $TGT_PID, control port $TGT_CTL, target $iqn at" \
  "127.0.0.1:$TGT_PORT, LUN 1 serial $serial, CHAP user $chap_user" >&2

append="security=selinux enforcing=0"
append+=" sh.tgt_iqn=$iqn sh.tgt_port=$TGT_PORT sh.tgt_serial=$serial"
append+=" sh.chap_user=$chap_user sh.chap_password=$chap_password"
append+=" sh.stagehand=$stagehand sh.stagehandctl=$stagehandctl"
append+=" sh.selinux_policy=$host_tmp/policy.33 sh.getfattr=$getfattr"

host_run_guest --test "$HERE/selinux_test.sh" \
  --include "$stagehand" "$stagehandctl" "$host_tmp/policy.33" "$getfattr" \
  --append "$append" "${guest_args[@]}"
