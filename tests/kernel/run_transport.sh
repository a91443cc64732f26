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
#   --stagehand PATH     default: build/agent/stagehand of this checkout
#   --stagehandctl PATH  default: build/agent/stagehandctl of this checkout
#   --test SCRIPT        run another guest script against the same target (debugging)
#   --cache, --timeout, --log, --append and --kernel-package go to guest.sh
#                        (--append "sh.trace=1" traces the test).
#
# Requests from the guest: the guest cannot run tgtadm, so it asks on its console. A line
#   STAGEHAND-HOST-REQUEST drop-portal <port>
# makes this script remove that portal from tgtd (no new logins through it) and close the
# target's established connections on that port (`ss -K`: tgtd's sessions show only the
# initiator's address, never the portal a connection came in on). Only the second portal may be
# dropped; repeats are answered again (the guest repeats a request that seems lost). There is no
# answer channel: the guest watches for the effect (its session through the portal fails).
# What was done is logged to stderr as "run_transport.sh: host: ...".
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=tgt.sh
source "$HERE/tgt.sh"

stagehand=$REPO/build/agent/stagehand
stagehandctl=$REPO/build/agent/stagehandctl
test_script=$HERE/transport_test.sh
guest_args=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --stagehand) stagehand=$2 && shift 2 ;;
    --stagehandctl) stagehandctl=$2 && shift 2 ;;
    --test) test_script=$2 && shift 2 ;;
    --cache | --timeout | --log | --append | --kernel-package) guest_args+=("$1" "$2") && shift 2 ;;
    -h | --help)
      sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
      exit 0
      ;;
    *)
      echo "run_transport.sh: unknown option '$1'" >&2
      exit 2
      ;;
  esac
done
for b in "$stagehand" "$stagehandctl"; do
  if [[ ! -x $b ]]; then
    echo "run_transport.sh: $b not found: build first or pass --stagehand/--stagehandctl PATH" >&2
    exit 2
  fi
done
[[ -f $test_script ]] || {
  echo "run_transport.sh: no such test script: $test_script" >&2
  exit 2
}
command -v ss >/dev/null || {
  echo "run_transport.sh: ss (iproute2) is needed to close connections of a dropped portal" >&2
  exit 2
}

log() { printf 'run_transport.sh: host: %s\n' "$*" >&2; }

tmp=$(mktemp -d /tmp/shk.XXXXXX)
guest_pid=""
watch_pid=""
# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
  local rc=$?
  if [[ -n $guest_pid ]]; then
    kill -TERM "$guest_pid" 2>/dev/null || true
    wait "$guest_pid" 2>/dev/null || true
  fi
  if [[ -n $watch_pid ]]; then
    kill -TERM "$watch_pid" 2>/dev/null || true
    wait "$watch_pid" 2>/dev/null || true
  fi
  tgt_stop
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

iqn=iqn.2024-01.dev.stagehand:kernel-transport
serial=SHKT$$
chap_user=sh-guest
# Test-only secret, new for every run; it travels on the guest's kernel command line.
chap_password=sh-$(od -An -N9 -tx1 /dev/urandom | tr -d ' \n')
truncate -s 256M "$tmp/lun1.img"
truncate -s 16M "$tmp/lun2.img"
tgt_start "$tmp/tgtd.log" || {
  cat "$tmp/tgtd.log" >&2
  exit 1
}
tgt_adm --op new --mode target --tid 1 -T "$iqn"
tgt_add_lun 1 1 "$tmp/lun1.img" "scsi_sn=$serial"
tgt_add_lun 1 2 "$tmp/lun2.img"
tgt_adm --op bind --mode target --tid 1 -I ALL
# An account bound to the target: every login to it needs CHAP with this secret.
tgt_adm --op new --mode account --user "$chap_user" --password "$chap_password"
tgt_adm --op bind --mode account --tid 1 --user "$chap_user"
port2=$(tgt_add_portal)
log "tgtd pid $TGT_PID, control port $TGT_CTL, target $iqn at 127.0.0.1:$TGT_PORT and :$port2," \
  "LUN 1 serial $serial, LUN 2 unscanned canary, CHAP user $chap_user"

append="sh.tgt_iqn=$iqn sh.tgt_port=$TGT_PORT sh.tgt_port2=$port2 sh.tgt_serial=$serial"
append+=" sh.tgt_canary_lun=2 sh.chap_user=$chap_user sh.chap_password=$chap_password"
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

# Streams the guest's console to stdout and answers requests on it.
watch_console() {
  local line
  while IFS= read -r line || [[ -n $line ]]; do
    printf '%s\n' "$line"
    # Anchored at the end: a traced test's "echo 'STAGEHAND-HOST-REQUEST ...'" does not count.
    if [[ $line =~ STAGEHAND-HOST-REQUEST\ ([a-z-]+)\ ([0-9]+)[[:space:]]*$ ]]; then
      case ${BASH_REMATCH[1]} in
        drop-portal) drop_portal "${BASH_REMATCH[2]}" ;;
        *) log "ignoring unknown request '${BASH_REMATCH[1]}'" ;;
      esac
    fi
  done
}

mkfifo "$tmp/console"
# Both in the background so that a signal to this script is handled (and tgtd stopped) at once.
"$HERE/guest.sh" run --test "$test_script" --multipathd --include "$stagehand" "$stagehandctl" \
  --append "$append" "${guest_args[@]}" >"$tmp/console" &
guest_pid=$!
watch_console <"$tmp/console" &
watch_pid=$!
rc=0
wait "$guest_pid" || rc=$?
guest_pid=""
wait "$watch_pid" || true
watch_pid=""
if [[ $rc != 0 ]]; then
  echo "run_transport.sh: guest exit status $rc; tgtd log:" >&2
  tail -n 20 "$tmp/tgtd.log" >&2
fi
exit "$rc"
