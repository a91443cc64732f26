#!/usr/bin/env bash
# End-to-end test of stagehand's kernel iSCSI transport, host side: starts a private tgtd on
# 127.0.0.1 with target 1 (LUN 1: file-backed 256 MiB with a known unit serial; LUN 2: a small
# LUN that must never be scanned), two portals and a CHAP account bound to the target, boots the
# kernel test guest (multipathd on) with stagehand and stagehandctl and runs
# tests/kernel/transport_test.sh there. Exit status: the guest test's (see guest.sh run).
#
#   tests/kernel/run_transport.sh [--stagehand PATH] [--stagehandctl PATH] [--cache DIR]
#                                 [--timeout SECS] [--log FILE] [--append "k=v ..."]
#                                 [--kernel-package PKG] [--test SCRIPT]
#
#   --stagehand PATH     default: build/bin/stagehand of this checkout
#   --stagehandctl PATH  default: build/bin/stagehandctl of this checkout
#   --test SCRIPT        run another guest script against the same target (debugging)
#   --cache, --timeout, --log, --append and --kernel-package go to guest.sh
#                        (--append "sh.trace=1" traces the test).
#
# Requests from the guest: the guest cannot run tgtadm, so it asks on its console. A line
#   STAGEHAND-HOST-REQUEST drop-portal <port>
# makes this script remove that portal from tgtd (no new logins through it) and close the
# target's established connections on that port (`ss -K`: tgtd's sessions show only the
# initiator's address, never the portal a connection came in on). Only the second portal may be
# dropped. A line
#   STAGEHAND-HOST-REQUEST grow-lun <lun> <MiB>
# plays the controller's part of a volume expansion: the LUN's backing file grows to <MiB> MiB
# and tgtd re-opens it (see grow_lun below: the LUN keeps its identity and stays online for the
# logged-in initiator). Only LUN 1 may grow, and never shrink. Repeats of either request are
# answered again (the guest repeats a request that seems lost). There is no answer channel: the
# guest watches for the effect (its session through the portal fails; READ CAPACITY answers the
# new size). What was done is logged to stderr as "run_transport.sh: host: ...".
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=host.sh
source "$HERE/host.sh"

stagehand=$REPO/build/bin/stagehand
stagehandctl=$REPO/build/bin/stagehandctl
test_script=$HERE/transport_test.sh
guest_args=()
host_begin run_transport.sh
while [[ $# -gt 0 ]]; do
  case $1 in
    --stagehand) stagehand=$2 && shift 2 ;;
    --stagehandctl) stagehandctl=$2 && shift 2 ;;
    --test) test_script=$2 && shift 2 ;;
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
[[ -f $test_script ]] || {
  echo "run_transport.sh: no such test script: $test_script" >&2
  exit 2
}
host_need_tool ss "iproute2: it closes the connections of a dropped portal" >/dev/null

log() { printf 'run_transport.sh: host: %s\n' "$*" >&2; }

watch_pid=""
host_on_cleanup '[[ -z $watch_pid ]] || { kill -TERM "$watch_pid" 2>/dev/null; wait "$watch_pid"; }'

iqn=iqn.2024-01.dev.stagehand:kernel-transport
serial=SHKT$$
chap_user=sh-guest
chap_password=$(host_secret sh)
# Mutual CHAP: the target proves itself with this one when the initiator asks (volume v3).
chap_user_in=sh-target
chap_password_in=$(host_secret st)
truncate -s 256M "$host_tmp/lun1.img"
truncate -s 16M "$host_tmp/lun2.img"
host_start_tgt
tgt_adm --op new --mode target --tid 1 -T "$iqn"
tgt_add_lun 1 1 "$host_tmp/lun1.img" "scsi_sn=$serial"
tgt_add_lun 1 2 "$host_tmp/lun2.img"
tgt_adm --op bind --mode target --tid 1 -I ALL
# An account bound to the target: every login to it needs CHAP with this secret.
tgt_adm --op new --mode account --user "$chap_user" --password "$chap_password"
tgt_adm --op bind --mode account --tid 1 --user "$chap_user"
tgt_adm --op new --mode account --user "$chap_user_in" --password "$chap_password_in"
tgt_adm --op bind --mode account --tid 1 --user "$chap_user_in" --outgoing
port2=$(tgt_add_portal)
port3=$(tgt_add_portal) # Only for a second volume that must be refused.
log "tgtd pid $TGT_PID, control port $TGT_CTL, target $iqn at 127.0.0.1:$TGT_PORT, :$port2, :$port3," \
  "LUN 1 serial $serial, LUN 2 unscanned canary, CHAP user $chap_user"

append="sh.tgt_iqn=$iqn sh.tgt_port=$TGT_PORT sh.tgt_port2=$port2 sh.tgt_port3=$port3"
append+=" sh.tgt_serial=$serial"
append+=" sh.tgt_canary_lun=2 sh.chap_user=$chap_user sh.chap_password=$chap_password"
append+=" sh.chap_user_in=$chap_user_in sh.chap_password_in=$chap_password_in"
append+=" sh.stagehand=$stagehand sh.stagehandctl=$stagehandctl"

# tgtd's established connections through 127.0.0.1:PORT (its side: local port PORT).
portal_conns() {
  ss -Htn state established src "127.0.0.1:$1"
}

dropped=""
# drop-portal PORT: no new logins through the portal, then close the connections already made
# through it (deleting a portal from tgtd leaves them up). ss -K destroys tgtd's socket (needs
# CONFIG_INET_DIAG_DESTROY and CAP_NET_ADMIN) and sends a reset to the peer, QEMU's user-mode
# network stack, which resets the guest's connection in turn.
drop_portal() {
  local port=$1 before after n
  if [[ $port != "$port2" ]]; then
    log "refusing drop-portal $port: only the second portal ($port2) may be dropped"
    return 0
  fi
  if [[ $dropped != *" $port "* ]]; then
    if tgt_adm --op delete --mode portal --param "portal=127.0.0.1:$port"; then
      dropped+=" $port "
      log "drop-portal $port: portal 127.0.0.1:$port removed from tgtd; portals left:" \
        "$(tgt_adm --op show --mode portal | tr '\n' ' ')"
    else
      log "drop-portal $port: tgtadm --op delete --mode portal failed"
    fi
  else
    log "drop-portal $port: repeated request; portal already removed, closing connections again"
  fi
  before=$(portal_conns "$port")
  n=$(grep -c . <<<"$before") || true
  log "drop-portal $port: $n established connection(s) through it: $(tr -s ' \n' ' ' <<<"$before")"
  if ! ss -K -Htn state established src "127.0.0.1:$port" >/dev/null; then
    log "drop-portal $port: ss -K failed"
  fi
  after=$(portal_conns "$port")
  if [[ -n $after ]]; then
    log "drop-portal $port: ERROR: connections still up after ss -K (kernel without" \
      "CONFIG_INET_DIAG_DESTROY?): $(tr -s ' \n' ' ' <<<"$after")"
  else
    log "drop-portal $port: closed $n connection(s); none left on port $port"
  fi
  log "drop-portal $port: tgtd now has: $(tgt_adm --op show --mode target |
    grep -E 'I_T nexus:|Connection:|IP Address:' | tr -s ' \n' ' ')"
}

# LUNs the guest may grow, with their backing files (not LUN 2: it must never be scanned).
declare -A lun_files=([1]="$host_tmp/lun1.img")
# tgtd's view of LUN $1 of target 1, on one line: SCSI ID and SN, size, online, backing file.
lun_show() {
  tgt_adm --op show --mode target | awk -v lun="$1" '
    $1 == "LUN:" { on = ($2 == lun); next }
    /information:$/ { on = 0 }
    on && /^ *(SCSI ID|SCSI SN|Size|Online|Backing store path):/ {
      sub(/^ */, ""); gsub(/  +/, " "); printf "%s%s", sep, $0; sep = "; " }'
}

# grow-lun LUN MIB: the controller's part of a volume expansion. tgtd has no resize: it learns
# a backing file's size when it opens the file. Deleting and re-adding the LUN would give the
# same VPD pages (tgtd derives the SCSI ID and both NAA designators from the target and LUN
# numbers; the serial is a parameter), but for a moment the LUN would not exist, commands from the
# logged-in initiator would fail with LOGICAL UNIT NOT SUPPORTED, and tgtd would queue unit
# attentions for every nexus. Restarting tgtd would drop every session, and the whole target,
# account and portal set-up would have to be made again. Instead the LUN is taken offline and
# its path set to the same file in one tgtadm request ("online=0,path=FILE": lu_config closes
# and re-opens the backing file and brings the LUN back online). tgtd handles a request within
# one turn of its event loop, so no command from the initiator sees the LUN offline, and the LUN
# object (identity, reservations, its I_T nexus state) stays as it was; no unit attention is
# queued. What tgtd does not guard against is a read or write its worker threads are running
# on the old descriptor at that moment: the guest freezes the filesystem while it asks.
grow_lun() {
  local lun=$1 mib=$2 file have
  file=${lun_files[$lun]:-}
  if [[ -z $file ]]; then
    log "refusing grow-lun $lun: only LUN(s) ${!lun_files[*]} may grow"
    return 0
  fi
  have=$(stat -c %s "$file")
  if ((mib > 4096 || mib * 1048576 < have)); then
    log "refusing grow-lun $lun $mib: the backing file has $have bytes; it may grow (to 4 GiB" \
      "at most) but never shrink"
    return 0
  fi
  log "grow-lun $lun $mib: before: $(lun_show "$lun")"
  truncate -s "${mib}M" "$file"
  if tgt_adm --op update --mode logicalunit --tid 1 --lun "$lun" --params "online=0,path=$file"
  then
    log "grow-lun $lun $mib: backing file $have -> $(stat -c %s "$file") bytes, re-opened by" \
      "tgtd; after: $(lun_show "$lun")"
  else
    log "grow-lun $lun $mib: tgtadm --op update --params online=0,path=$file failed; now:" \
      "$(lun_show "$lun")"
  fi
}

# Streams the guest's console to stdout and answers requests on it.
watch_console() {
  local line
  local -a arg
  while IFS= read -r line || [[ -n $line ]]; do
    printf '%s\n' "$line"
    # Anchored at the end: a traced test's "echo 'STAGEHAND-HOST-REQUEST ...'" does not count.
    if [[ $line =~ STAGEHAND-HOST-REQUEST\ ([a-z-]+)((\ [0-9]+)+)[[:space:]]*$ ]]; then
      read -r -a arg <<<"${BASH_REMATCH[2]}"
      case ${BASH_REMATCH[1]}:${#arg[@]} in
        drop-portal:1) drop_portal "${arg[0]}" ;;
        grow-lun:2) grow_lun "${arg[0]}" "${arg[1]}" ;;
        *) log "ignoring request '${BASH_REMATCH[1]}' with ${#arg[@]} argument(s): unknown" \
          "request or wrong number of arguments" ;;
      esac
    fi
  done
}

mkfifo "$host_tmp/console"
# The console goes through the watcher, which answers the guest's requests.
watch_console <"$host_tmp/console" &
watch_pid=$!
rc=0
host_guest_stdout=$host_tmp/console
host_run_guest --test "$test_script" --multipathd --include "$stagehand" "$stagehandctl" \
  --append "$append" "${guest_args[@]}" || rc=$?
wait "$watch_pid" || true
watch_pid=""
exit "$rc"
