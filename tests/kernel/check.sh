# shellcheck shell=bash
# What the guest test scripts share; guest.sh puts this file beside the test script as
# /check.sh. Source it after setting check_name (it prefixes every line):
#
#   ok WHAT...                      a check passed: "NAME: ok WHAT (seconds since the last)"
#   fail WHAT...                    "NAME: FAIL WHAT" on stderr, then exit 1
#   elapsed T                       seconds since T (an $EPOCHREALTIME value), two decimals
#   until_deadline SECS COMMAND...  runs COMMAND every 50 ms until it succeeds; 1 after SECS
#   all_passed                      "NAME: all N checks passed in S s" (since sourcing)
#
# With sh.trace=1 on the guest's command line the test is traced (set -x) from here on.

if [[ ${SH_TRACE:-0} == 1 ]]; then
  PS4='+ ${EPOCHREALTIME} '
  set -x
fi
checks=0
t0=$EPOCHREALTIME
t_step=$t0

elapsed() {
  local us=$((${EPOCHREALTIME/./} - ${1/./}))
  printf '%d.%02d' $((us / 1000000)) $((us % 1000000 / 10000))
}
ok() {
  checks=$((checks + 1))
  echo "${check_name:?}: ok $* ($(elapsed "$t_step")s)"
  t_step=$EPOCHREALTIME
}
fail() {
  echo "${check_name:?}: FAIL $*" >&2
  exit 1
}
until_deadline() {
  local end=$((${EPOCHREALTIME/./} + $1 * 1000000))
  shift
  until "$@"; do
    ((${EPOCHREALTIME/./} < end)) || return 1
    sleep 0.05
  done
}
all_passed() {
  echo "${check_name:?}: all $checks checks passed in $(elapsed "$t0")s"
}
