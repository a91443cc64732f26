# shellcheck shell=bash
# The host side every kernel-guest test driver (run_*.sh) shares: a temp dir and a cleanup that
# runs on exit and on SIGINT/SIGTERM (the guest, what the driver registered, tgtd, the temp dir),
# the options passed through to guest.sh, the checks of what a driver needs, test-only secrets,
# tgtd with its log in the temp dir, and the guest run in the background. Sources tgt.sh.
#
#   host_begin NAME           NAME (the driver's file name) prefixes messages; makes $host_tmp
#                             and sets the traps
#   host_guest_option OPT     true when OPT is one of guest.sh's that the drivers pass on (it
#                             takes a value): --cache --timeout --log --append --kernel-package
#   host_usage                prints the driver's header comment (its usage)
#   host_bad_option OPT       says so and exits 2
#   host_need_exec PATH HINT  exits 2 unless PATH is executable ("PATH not found: HINT")
#   host_need_tool NAME HINT  prints NAME's path; exits 2 when it is not installed
#   host_secret PREFIX        a fresh test-only secret (it travels on the guest's command line)
#   host_start_tgt            tgt_start logging to $host_tmp/tgtd.log; exits 1 with the log
#   host_on_cleanup CODE      evaluates CODE at cleanup, before tgtd stops (the last registered
#                             first; its failure is ignored)
#   host_run_guest ARGS...    guest.sh run ARGS in the background, so that a signal to the
#                             driver is handled (and tgtd stopped) at once; its stdout goes to
#                             $host_guest_stdout when set. Returns the guest test's status and
#                             shows the tail of tgtd's log when it failed.

HOST_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=tgt.sh
source "$HOST_HERE/tgt.sh"

host_name=""
host_tmp=""
host_guest_stdout=""
host_guest_pid=""
host_cleanups=()

host_begin() {
  host_name=$1
  host_tmp=$(mktemp -d /tmp/shk.XXXXXX)
  trap host_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# shellcheck disable=SC2317 # invoked by the EXIT trap
host_cleanup() {
  local rc=$? i
  trap '' INT TERM # a second signal must not cut the cleanup short (tgtd would stay)
  if [[ -n $host_guest_pid ]]; then
    kill -TERM "$host_guest_pid" 2>/dev/null || true
    wait "$host_guest_pid" 2>/dev/null || true
  fi
  for ((i = ${#host_cleanups[@]} - 1; i >= 0; i--)); do
    eval "${host_cleanups[i]}" || true
  done
  tgt_stop
  [[ -z $host_tmp ]] || rm -rf "$host_tmp"
  exit "$rc"
}

host_on_cleanup() {
  host_cleanups+=("$1")
}

host_guest_option() {
  case $1 in
    --cache | --timeout | --log | --append | --kernel-package) return 0 ;;
    *) return 1 ;;
  esac
}

host_usage() {
  sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"
}

host_bad_option() {
  echo "$host_name: unknown option '$1'" >&2
  exit 2
}

host_need_exec() {
  [[ -x $1 ]] || {
    echo "$host_name: $1 not found: $2" >&2
    exit 2
  }
}

host_need_tool() {
  type -P "$1" || {
    echo "$host_name: $1 not found ($2)" >&2
    exit 2
  }
}

host_secret() {
  printf '%s-%s\n' "$1" "$(od -An -N9 -tx1 /dev/urandom | tr -d ' \n')"
}

host_start_tgt() {
  tgt_start "$host_tmp/tgtd.log" || {
    cat "$host_tmp/tgtd.log" >&2
    exit 1
  }
}

host_run_guest() {
  local rc=0
  if [[ -n $host_guest_stdout ]]; then
    "$HOST_HERE/guest.sh" run "$@" >"$host_guest_stdout" &
  else
    "$HOST_HERE/guest.sh" run "$@" &
  fi
  host_guest_pid=$!
  wait "$host_guest_pid" || rc=$?
  host_guest_pid=""
  if [[ $rc != 0 ]]; then
    echo "$host_name: guest exit status $rc; tgtd log:" >&2
    tail -n 20 "$host_tmp/tgtd.log" >&2
  fi
  return "$rc"
}
