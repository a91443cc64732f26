# Two nodes of one cluster on one LUN: sourced by e2e_test.sh --inside when run with --two-nodes.
#
# The test's namespaces hold the control plane and the iSCSI target (tgtd on $API_IP); each node
# runs in mount, network and UTS namespaces of its own nested in them (cluster.sh, node_main):
# its own /run with its systemd --user, containerd and kubelet, its own /var/lib/kubelet and
# /var/lib/stagehand (so its own initiator name), its own cgroups, and an uplink (a veth pair)
# to the control plane's namespace, which routes between them. Cutting a node off is taking
# its uplink down: it loses the API server and the target at once, as a partitioned node does.
#
# Checks, with the DaemonSet on both nodes and one ReadWriteOnce filesystem PV (takeoverAfter
# 10 s):
#   1. the orderly move: while a pod on node A writes, a pod for the same claim on node B does
#      not start: its stage is refused ("in use on another node" in the pod's events, as a
#      Multi-Attach error shows), for longer than takeoverAfter, and A's writes go on; the pod on
#      A deleted, B's starts, finds every record A wrote, and A holds nothing of the volume any
#      more;
#   2. a dead holder: a pod on A writes fsync'd records; A is cut off and its kubelet stopped;
#      the pod is force-deleted and started on B, which is refused until A's registration has
#      stood still for takeoverAfter (not sooner), then takes over: every record A synced before the cut
#      reads back on B; A, reconnected, is fenced (its writer's fsync fails, its agent reports
#      Fenced) and, its kubelet running again, unpublishes and unstages; nothing A tried to
#      write after the takeover is on the LUN, and e2fsck finds the filesystem clean;
#   3. the same from B to A through Kubernetes' non-graceful node shutdown: B cut off and
#      NotReady, the out-of-service taint on it, the pod GC deletes its pod, A takes over.

NODE_A=sh-e2e-a
NODE_B=sh-e2e-b
declare -A NODE_IPS=([$NODE_A]=10.251.1.2 [$NODE_B]=10.251.2.2)
declare -A UPLINKS=([$NODE_A]=sh-e2e-up1 [$NODE_B]=sh-e2e-up2)
TGT_PORTAL=$API_IP:3260

# node_up NAME INDEX: starts node NAME (address 10.251.INDEX.2) in namespaces of its own.
node_up() {
  local name=$1 i=$2
  local work=$E2E_WORK/node-$name
  mkdir -p "$work/logs"
  NODE_NAME=$name NODE_IP=${NODE_IPS[$name]} POD_CIDR=10.$((88 + i)).0.0/16 NODE_WORK=$work \
    unshare --mount --uts --net --propagation private "$here/e2e_test.sh" --node \
    >>"$work/logs/node.log" 2>&1 &
  local pid=$!
  echo "$pid" >"$E2E_WORK/pids/node-$name"
  # Until unshare(2) ran, the new process is in this network namespace.
  own_net() { [[ $(readlink "/proc/$1/ns/net") != "$(readlink /proc/self/ns/net)" ]]; }
  wait_for 30 "node $name's network namespace" own_net "$pid"
  ip link add "${UPLINKS[$name]}" type veth peer name uplink netns "$pid"
  ip addr add "10.251.$i.1/24" dev "${UPLINKS[$name]}"
  ip link set "${UPLINKS[$name]}" up
}

# in_node NAME COMMAND...: COMMAND in node NAME's namespaces.
in_node() {
  local pid
  pid=$(cat "$E2E_WORK/pids/node-$1")
  shift
  nsenter --target "$pid" --mount --net --uts -- "$@"
}

node_pid_of() { cat "$E2E_WORK/node-$1/pids/$2"; }

# node_clean NAME: no CSI mount and no session unit left on node NAME (a node that cannot be
# asked is not clean).
node_clean() {
  in_node "$1" awk '$5 ~ /^\/var\/lib\/kubelet\/(pods|plugins)\/.*kubernetes.io[~\/]csi/ { f = 1 }
    END { exit f }' /proc/self/mountinfo || return 1
  local units
  units=$(in_node "$1" env XDG_RUNTIME_DIR="$SYSTEMD_RUNTIME" \
    DBUS_SESSION_BUS_ADDRESS="unix:path=$SYSTEMD_RUNTIME/bus" \
    systemctl --user --no-pager list-units --all --no-legend 'stagehand-session-*') || return 1
  [[ -z $units ]]
}

# no_new_loops WHEN: no loop device attached since the test began (loop devices are not
# namespaced: both nodes must have unstaged).
no_new_loops() {
  local new
  new=$(comm -13 "$E2E_WORK/loops.before" <(losetup --list --noheadings --output NAME | sort))
  [[ -z $new ]] || die "loop devices left attached $1: $new"
}

# holds_for SECONDS DESCRIPTION COMMAND...: COMMAND keeps succeeding for SECONDS (what must not
# change while something else would have had the time to change it).
holds_for() {
  local limit=$1 what=$2
  shift 2
  local deadline=$((SECONDS + limit))
  while ((SECONDS < deadline)); do
    "$@" >/dev/null 2>&1 || die "no longer true: $what"
    sleep 1
  done
}

cluster_down() {
  local name c
  for name in "$NODE_A" "$NODE_B"; do
    # A stopped kubelet must run again to be stopped for good.
    [[ ! -f $E2E_WORK/node-$name/pids/kubelet ]] ||
      kill -CONT "$(node_pid_of "$name" kubelet)" 2>/dev/null || true
    for c in kubelet containerd systemd; do NODE_WORK=$E2E_WORK/node-$name stop "$c"; done
    stop "node-$name"
  done
  for c in kube-scheduler kube-controller-manager kube-apiserver etcd; do stop "$c"; done
}

t0=$SECONDS
setup_cluster_host
make_pki "$NODE_A=${NODE_IPS[$NODE_A]}" "$NODE_B=${NODE_IPS[$NODE_B]}"
start_control_plane
start_tgtd
node_up "$NODE_A" 1
node_up "$NODE_B" 2
wait_for 180 "node $NODE_A Ready" node_ready "$NODE_A"
wait_for 180 "node $NODE_B Ready" node_ready "$NODE_B"
log "two nodes up in $((SECONDS - t0)) s"

kc apply -k "$repo/deploy/kubernetes" >/dev/null
kc -n stagehand-system rollout status ds/stagehand-node --timeout=180s >/dev/null ||
  die "the DaemonSet did not become ready on both nodes"
for name in "$NODE_A" "$NODE_B"; do
  wait_for 60 "CSINode $name lists iscsi.stagehand.dev" csinode_driver "$name"
done
iqn_a=$(in_node "$NODE_A" cat /var/lib/stagehand/initiatorname)
iqn_b=$(in_node "$NODE_B" cat /var/lib/stagehand/initiatorname)
[[ $iqn_a == InitiatorName=iqn.* && $iqn_b == InitiatorName=iqn.* && $iqn_a != "$iqn_b" ]] ||
  die "the nodes need initiator names of their own: '$iqn_a', '$iqn_b'"
log "ok: the DaemonSet runs on both nodes, each with its own initiator name"

kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Secret
metadata: {name: iscsi-chap, namespace: default}
type: Opaque
stringData:
  node.session.auth.username: $CHAP_USER
  node.session.auth.password: $CHAP_PASSWORD
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: shared}
spec:
  capacity: {storage: 256Mi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  volumeMode: Filesystem
  mountOptions: [errors=remount-ro]
  csi:
    driver: iscsi.stagehand.dev
    volumeHandle: shared
    fsType: ext4
    volumeAttributes:
      targetPortal: "$TGT_PORTAL"
      iqn: "$IQN"
      lun: "1"
      takeoverAfter: "10"
    nodeStageSecretRef: {name: iscsi-chap, namespace: default}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: shared, namespace: default}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  volumeName: shared
  resources: {requests: {storage: 256Mi}}
EOF

# pod_on NAME NODE COMMAND: a pod of the claim, bound to NODE.
pod_on() { pod_manifest "$1" shared "$3" "$2" | kc apply -f - >/dev/null; }
# refused POD: the kubelet shows the refused stage in the pod's events.
refused() {
  kc get events --field-selector "involvedObject.name=$1" -o jsonpath='{.items[*].message}' |
    grep -q 'in use on another node'
}
# writer FILE: appends "a-N" records to FILE, each fsync'd; a failed write prints FAIL and ends it.
writer() {
  echo "i=0; while true; do echo a-\$i >> $1 && sync $1 || { echo FAIL; exit 1; }; i=\$((i+1)); done"
}
records() { kc exec "$1" -- sh -c "grep -c '^a-' $2 || true"; }
# contiguous POD FILE: FILE holds a-0, a-1, ... in order, then at most a b- line last.
in_order='n_b { bad = 1; exit } /^b-/ { n_b = 1; next } $0 != "a-" NR - 1 { bad = 1; exit }'
contiguous() { kc exec "$1" -- awk "$in_order END { exit bad }" "$2"; }
# still_writing POD: POD's writer never failed a write (no restart, no FAIL in its log).
still_writing() {
  local restarts logs
  restarts=$(kc get pod "$1" -o jsonpath='{.status.containerStatuses[0].restartCount}') &&
    logs=$(kc logs "$1") || return 1
  [[ $restarts == 0 && $logs != *FAIL* ]]
}

# --- 1. the orderly move: B waits for A's unstage.
pod_on first "$NODE_A" "$(writer /data/moved)"
wait_for 180 "pod first Running on $NODE_A" pod_running first
has_records() { (($(records first /data/moved) >= 20)); }
wait_for 60 "records from the pod on $NODE_A" has_records
pod_on second "$NODE_B" 'sleep 3600'
wait_for 120 "the stage on $NODE_B refused while $NODE_A holds the volume" refused second
# Past takeoverAfter (10 s; the kubelet retries at 0.5, 1.5, 3.5, 7.5, 15.5 s): a live holder
# that renews is never taken over.
second_waits() { ! pod_running second && still_writing first; }
holds_for 25 "pod second waits on $NODE_B while the pod on $NODE_A writes" second_waits
log "ok: a pod of the claim on $NODE_B waits while the one on $NODE_A writes (stage refused for 25 s)"
wrote=$(records first /data/moved)
t=$SECONDS
kc delete pod first --wait=true --timeout=120s >/dev/null
wait_for 240 "pod second Running on $NODE_B after $NODE_A's unstage" pod_running second
wait_for 30 "$NODE_A to hold nothing of the volume" node_clean "$NODE_A"
moved=$(records second /data/moved)
((moved >= wrote)) || die "$NODE_B finds $moved records, $NODE_A had written $wrote"
contiguous second /data/moved || die "$NODE_B finds $NODE_A's records out of order or missing"
log "ok: orderly move: $NODE_B staged $((SECONDS - t)) s after the delete, found $moved records"
kc delete pod second --wait=true --timeout=120s >/dev/null
wait_for 120 "$NODE_B unstaged" node_clean "$NODE_B"
no_new_loops "after the orderly move"

# dead_holder HOLDER TAKER FILE HOW: a pod on HOLDER writes fsync'd records to FILE; HOLDER is
# cut off with its kubelet stopped, and the pod goes (HOW: "force", force-deleted; "taint", the
# node's out-of-service taint, Kubernetes' non-graceful node shutdown, lets the pod GC delete
# it); a pod on TAKER is refused, then takes over; HOLDER, reconnected, is fenced and, its
# kubelet running again, unstages. Leaves FILE's expected last line in $last_line.
dead_holder() {
  local holder=$1 taker=$2 file=$3 how=$4
  local old=writer-$how new=taker-$how
  pod_on "$old" "$holder" "$(writer "$file")"
  wait_for 180 "pod $old Running on $holder" pod_running "$old"
  has_log() { (($(records "$old" "$file") >= 50)); }
  wait_for 60 "records from the writer on $holder" has_log
  local synced
  synced=$(($(records "$old" "$file") - 1)) # the last one read may still be in its fsync
  ip link set "${UPLINKS[$holder]}" down
  kill -STOP "$(node_pid_of "$holder" kubelet)"
  if [[ $how == force ]]; then
    kc delete pod "$old" --force --grace-period=0 >/dev/null 2>&1
  else
    not_ready() { ! node_ready "$1"; }
    wait_for 180 "node $holder NotReady" not_ready "$holder"
    kc taint node "$holder" node.kubernetes.io/out-of-service=nodeshutdown:NoExecute >/dev/null
    gone() { ! kc get pod "$1" >/dev/null 2>&1; }
    wait_for 180 "the pod GC to delete pod $old of the out-of-service node" gone "$old"
  fi
  log "$holder cut off from the target and the API server, its kubelet stopped, pod $old deleted ($how; $synced records synced)"
  local t=$SECONDS
  pod_on "$new" "$taker" "n=\$(grep -c ^a- $file); echo b-\$n >> $file && sync $file; sleep 3600"
  wait_for 300 "pod $new Running on $taker (takeover)" pod_running "$new"
  local took=$((SECONDS - t))
  refused "$new" || die "$taker took over without being refused first"
  ((took >= 10)) || die "$taker took over $took s after the pod's deletion, before takeoverAfter"
  local got
  got=$(records "$new" "$file")
  ((got >= synced)) || die "$taker reads $got records, $holder had synced $synced"
  contiguous "$new" "$file" || die "$taker finds the records out of order or missing"
  log "ok: $taker took over $took s after the pod's deletion and reads all $got records"

  # The holder reconnected: its session finds itself preempted; the writer's next fsync fails.
  ip link set "${UPLINKS[$holder]}" up
  writer_failed() {
    cat "$E2E_WORK/node-$holder"/root/var/log/pods/default_"$old"_*/app/*.log 2>/dev/null |
      grep FAIL >/dev/null
  }
  wait_for 120 "the writer on $holder to fail its writes" writer_failed
  fenced() {
    curl -sf "http://${NODE_IPS[$holder]}:29780/metrics" |
      grep '^stagehand_volume_health_problem{.*Fenced' >/dev/null
  }
  wait_for 60 "$holder's agent to report the volume Fenced" fenced
  log "ok: $holder reconnected: fenced, its writer's fsync failed"
  [[ $how == force ]] ||
    kc taint node "$holder" node.kubernetes.io/out-of-service=nodeshutdown:NoExecute- >/dev/null
  kill -CONT "$(node_pid_of "$holder" kubelet)"
  wait_for 180 "$holder to unpublish and unstage the fenced volume" node_clean "$holder"
  kc delete pod "$new" --wait=true --timeout=120s >/dev/null
  wait_for 120 "$taker unstaged" node_clean "$taker"
  no_new_loops "after the takeover ($how)"
  log "ok: $holder unstaged the fenced volume, $taker unstaged"
  last_line=b-$got
}

# check_on_lun FILE LAST: on the LUN itself, FILE holds the records the taker read and its own
# line LAST, nothing of the fenced holder's after the takeover.
check_on_lun() {
  debugfs -R "cat /$1" "$E2E_WORK/lun1.img" 2>/dev/null >"$E2E_WORK/on-lun"
  awk "$in_order END { exit bad || !n_b }" "$E2E_WORK/on-lun" ||
    die "/$1 on the LUN is not one node's records then the other's line: $(tail -3 "$E2E_WORK/on-lun")"
  [[ $(tail -1 "$E2E_WORK/on-lun") == "$2" ]] || die "the last line of /$1 on the LUN is not $2"
}

# --- 2. a dead holder: A cut off, its pod force-deleted, B takes over.
dead_holder "$NODE_A" "$NODE_B" /data/log force
last_force=$last_line
# --- 3. the same through the out-of-service taint: B cut off, A takes over.
dead_holder "$NODE_B" "$NODE_A" /data/tainted taint
last_taint=$last_line

# The LUN itself: a clean filesystem, and in each log the records the taker read and its own
# line last.
e2fsck -fn "$E2E_WORK/lun1.img" >"$E2E_WORK/logs/e2fsck.log" 2>&1 ||
  die "e2fsck -fn on the LUN: $(tail -5 "$E2E_WORK/logs/e2fsck.log")"
check_on_lun log "$last_force"
check_on_lun tainted "$last_taint"
log "ok: the LUN: e2fsck clean; each log holds the holder's records, then the taker's line, nothing after"
log "all two-node checks passed in $((SECONDS - t0)) s"
