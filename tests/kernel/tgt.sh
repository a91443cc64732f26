# shellcheck shell=bash
# Helpers for host-side kernel-guest tests: a private tgtd listening on 127.0.0.1 (the guest
# reaches it as 10.0.2.2). Source this file; every function returns non-zero on failure.
#
#   tgt_start LOGFILE      start tgtd on a free portal port with its own control port; sets
#                          TGT_PID, TGT_PORT and TGT_CTL
#   tgt_adm ARGS...        tgtadm against this tgtd (--lld iscsi)
#   tgt_add_portal         listen on one more free port too; prints it
#   tgt_add_lun TID LUN FILE [PARAMS]   add a LUN backed by FILE, optionally with tgtadm --params
#   tgt_stop               stop it (tgtd ignores SIGTERM: delete the system, then SIGKILL)

TGT_PID=""
TGT_PORT=""
TGT_CTL=""
readonly TGT_RUN_DIR=/var/run/tgtd

# A TCP port on 127.0.0.1 that nothing listens on (tgtd failing to bind is retried by the caller).
tgt_free_port() {
  local p
  for _ in $(seq 100); do
    p=$((20000 + RANDOM % 40000))
    if [[ -z $(ss -Htan "sport = :$p") ]]; then
      printf '%s\n' "$p"
      return 0
    fi
  done
  return 1
}

tgt_adm() {
  tgtadm -C "$TGT_CTL" --lld iscsi "$@"
}

tgt_start() {
  local log=$1 attempt i
  for attempt in 1 2 3 4 5; do
    # tgtd's control socket is $TGT_RUN_DIR/socket.<n> and it caps <n>: pick an unused one.
    TGT_CTL=$((2000 + RANDOM % 20000))
    [[ ! -e $TGT_RUN_DIR/socket.$TGT_CTL ]] || continue
    TGT_PORT=$(tgt_free_port) || return 1
    tgtd -f -C "$TGT_CTL" --iscsi "portal=127.0.0.1:$TGT_PORT" >>"$log" 2>&1 &
    TGT_PID=$!
    # No readiness signal: poll (bounded) until tgtadm gets an answer or tgtd has died.
    for ((i = 0; i < 200; i++)); do
      if ! kill -0 "$TGT_PID" 2>/dev/null; then
        wait "$TGT_PID" 2>/dev/null || true
        TGT_PID=""
        break
      fi
      if tgtadm -C "$TGT_CTL" --op show --mode system >/dev/null 2>&1; then
        return 0
      fi
      sleep 0.05
    done
    if [[ -n $TGT_PID ]]; then
      tgt_stop
      echo "tgt.sh: tgtd did not answer within 10 s (attempt $attempt)" >&2
    else
      echo "tgt.sh: tgtd exited at start (attempt $attempt; port $TGT_PORT in use?)" >&2
    fi
  done
  return 1
}

tgt_add_portal() {
  local p
  p=$(tgt_free_port) || return 1
  tgt_adm --op new --mode portal --param "portal=127.0.0.1:$p" >&2 || return 1
  printf '%s\n' "$p"
}

tgt_add_lun() {
  local tid=$1 lun=$2 file=$3 params=${4:-}
  tgt_adm --op new --mode logicalunit --tid "$tid" --lun "$lun" -b "$file" || return 1
  if [[ -n $params ]]; then
    tgt_adm --op update --mode logicalunit --tid "$tid" --lun "$lun" --params "$params" || return 1
  fi
}

tgt_stop() {
  local i
  [[ -n $TGT_PID ]] || return 0
  tgtadm -C "$TGT_CTL" --op delete --mode system >/dev/null 2>&1 || true
  for ((i = 0; i < 20; i++)); do
    kill -0 "$TGT_PID" 2>/dev/null || break
    sleep 0.05
  done
  kill -KILL "$TGT_PID" 2>/dev/null || true
  wait "$TGT_PID" 2>/dev/null || true
  rm -f "$TGT_RUN_DIR/socket.$TGT_CTL" "$TGT_RUN_DIR/socket.$TGT_CTL.lock"
  TGT_PID=""
}
