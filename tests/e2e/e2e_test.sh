#!/usr/bin/env bash
# End-to-end: stagehand's image and deploy/kubernetes (unmodified but for the image's archive)
# under a real kubelet, kube-apiserver, scheduler and controller-manager, containerd and runc,
# with an iSCSI target (tgtd, CHAP) on the node. See cluster.sh for where the cluster runs.
#
#   tests/e2e/e2e_test.sh IMAGE_ARCHIVE            (root; tests/e2e/build-cluster first)
#   tests/e2e/e2e_test.sh IMAGE_ARCHIVE --oldest   the oldest Kubernetes we support
#                                                  (tests/e2e/build-cluster --oldest first)
#   tests/e2e/e2e_test.sh IMAGE_ARCHIVE vX.Y.Z     another release (build-cluster vX.Y.Z first)
#   ... --helm    installs stagehand with its Helm chart (deploy/helm/stagehand; helm from
#                 scripts/install-test-tools) instead of kustomize, and changes the image with
#                 `helm upgrade`
#   ... --two-nodes  two nodes of one cluster on one LUN instead (two_nodes.sh says what it checks)
#
# Checks, in order: the kubelet registers our driver (CSINode, node id); the example
# Secret/PV/PVC/Pod stages, publishes and takes writes; deleting the pod unpublishes and
# unstages (no mount, session or loop device left); a new pod finds the data; a rolling restart
# of the DaemonSet under a writing pod never fails its I/O and leaves the node's mount count
# as it was; a kubelet restart keeps the pod's volume mounted (same mount, no remount); a
# SIGKILL of the volume's session process under the writer fails no write (its unit starts a
# successor that takes over the FUSE connection); a DaemonSet image change with another build
# of stagehand-session replaces the session process in place under the writer; the kubelet's
# kubelet_volume_stats_* for the PVC (only a CSI driver's NodeGetVolumeStats gives them) match
# the file system; on 1.37 (CSIVolumeHealth) a target outage under the writer shows in the
# pod's and the CSINode's status and clears when the target is back, so does a frozen target
# (SIGSTOP) shorter than the replacement timeout, and a failed filesystem shows; a raw block
# PVC takes writes and reads them back.
# The userspace transport only: this host's kernel has no iSCSI initiator (the kernel
# transport has its own QEMU guest test, tests/kernel).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

# A node of --two-nodes, in namespaces of its own nested in the test's (cluster.sh, node_main).
if [[ ${1:-} == --node ]]; then
  # shellcheck source=tests/e2e/cluster.sh
  source "$here/cluster.sh"
  node_main
  exit
fi

if [[ ${1:-} != --inside ]]; then
  image_archive=${1:?usage: e2e_test.sh IMAGE_ARCHIVE [--oldest | vX.Y.Z] [--helm | --two-nodes]}
  [[ $(id -u) -eq 0 ]] || { echo "e2e: needs root" >&2; exit 1; }
  usage="usage: e2e_test.sh IMAGE_ARCHIVE [--oldest | vX.Y.Z] [--helm | --two-nodes]"
  export E2E_INSTALL=kustomize E2E_TWO_NODES=0
  release=
  for arg in "${@:2}"; do
    case $arg in
      --helm) E2E_INSTALL=helm ;;
      --two-nodes) E2E_TWO_NODES=1 ;;
      --oldest | v1.*) release=$arg ;;
      *) echo "$usage" >&2; exit 2 ;;
    esac
  done
  [[ $E2E_INSTALL != helm || $E2E_TWO_NODES == 0 ]] || { echo "$usage" >&2; exit 2; }
  export HELM_BIN=${STAGEHAND_TEST_TOOLS:-$HOME/.cache/stagehand-tools}/bin/helm
  [[ $E2E_INSTALL != helm || -x $HELM_BIN ]] ||
    { echo "e2e: no $HELM_BIN: run scripts/install-test-tools" >&2; exit 1; }
  case $release in
    '') kube_version=$(sed -n 's/^KUBE_VERSION=//p' "$here/build-cluster") ;;
    --oldest) kube_version=$(sed -n 's/^OLDEST_KUBE_VERSION=//p' "$here/build-cluster") ;;
    *) kube_version=$release ;;
  esac
  export KUBE_BIN=${STAGEHAND_TEST_TOOLS:-$HOME/.cache/stagehand-tools}/kube-$kube_version/bin
  [[ -x $KUBE_BIN/kubelet ]] ||
    { echo "e2e: no $KUBE_BIN/kubelet: run tests/e2e/build-cluster $release" >&2; exit 1; }
  KUBE_MINOR=$(echo "$kube_version" | cut -d. -f2)
  export KUBE_MINOR
  # 1.37 brought the kubelet's calls of NodeGetVolumeHealth and NodeGetStorageHealth (alpha).
  if ((KUBE_MINOR >= 37)); then export KUBE_FEATURE_GATES=CSIVolumeHealth=true; fi
  echo "e2e: Kubernetes $kube_version${KUBE_FEATURE_GATES:+ with $KUBE_FEATURE_GATES}, stagehand through $E2E_INSTALL" >&2
  E2E_WORK=$(mktemp -d /tmp/sh-e2e.XXXXXX)
  export E2E_WORK
  mkdir -p "$E2E_WORK/images" "$E2E_WORK/layers"
  cp "$image_archive" "$E2E_WORK/images/stagehand.tar"
  # No layer of the image holds an initiator name (every node would log in with the same IQN).
  tar -xf "$image_archive" -C "$E2E_WORK/layers"
  while IFS= read -r layer; do
    if tar -tf "$layer" | grep -qx 'etc/iscsi/initiatorname.iscsi'; then
      echo "e2e: FAILED: the image holds /etc/iscsi/initiatorname.iscsi" >&2
      rm -rf "$E2E_WORK"
      exit 1
    fi
  done < <(find "$E2E_WORK/layers" -name '*.tar')
  rm -rf "$E2E_WORK/layers"
  "$here/test-images" "$KUBE_BIN" "$E2E_WORK/images"
  # The same image with another build of stagehand-session, for the upgrade in place.
  if ((E2E_TWO_NODES == 0)); then
    "$here/next-image" "$E2E_WORK/images/stagehand.tar" "$E2E_WORK/images/stagehand-next.tar" \
      >"$E2E_WORK/next-build"
  fi
  # The DaemonSet mounts /lib/modules (DirectoryOrCreate); this host may have none. The test
  # mounts its own /etc/multipath over the host's, which may not exist either.
  made_modules=0
  [[ -e /lib/modules ]] || made_modules=1
  made_multipath=0
  [[ -e /etc/multipath ]] || made_multipath=1
  losetup --list --noheadings --output NAME | sort >"$E2E_WORK/loops.before"
  rc=0
  # PID 1 of the new PID namespace is the test itself: when it exits, the kernel ends every
  # process left in it, and the mount and network namespaces go with the last of them.
  unshare --mount --net --pid --uts --fork --mount-proc --propagation private \
    "$0" --inside || rc=$?
  # Loop devices are not namespaced: one that was not there before is a leftover. (Their backing
  # files cannot be told apart by path: seen from outside the container that attached them, the
  # kernel shows only "/lun".)
  losetup --list --noheadings --output NAME | sort >"$E2E_WORK/loops.after"
  if comm -13 "$E2E_WORK/loops.before" "$E2E_WORK/loops.after" | grep . >&2; then
    echo "e2e: FAILED: loop devices left attached" >&2
    rc=1
  fi
  # A run that failed with a volume staged leaves its loop device behind: the session processes
  # died with the namespaces, the kubelet never unstaged. Detach those this run attached over a
  # session's FUSE file (shown as "/lun"; its server is gone, nothing can use it).
  while IFS= read -r loop; do
    [[ $(cat "/sys/block/${loop#/dev/}/loop/backing_file" 2>/dev/null) == /lun ]] || continue
    losetup -d "$loop" 2>/dev/null && echo "e2e: detached $loop" >&2
  done < <(comm -13 "$E2E_WORK/loops.before" "$E2E_WORK/loops.after")
  if ((rc != 0)); then
    kept=/tmp/sh-e2e-logs/$(basename "$E2E_WORK")
    echo "e2e: logs kept in $kept" >&2
    mkdir -p "$kept" && cp -r "$E2E_WORK/logs" "$kept"
    for node_logs in "$E2E_WORK"/node-*/logs; do
      [[ ! -d $node_logs ]] || cp -r "$node_logs" "$kept/$(basename "$(dirname "$node_logs")")"
    done
    # Every container's log of the two nodes (their agents' included).
    for pod_logs in "$E2E_WORK"/node-*/root/var/log/pods; do
      [[ ! -d $pod_logs ]] || cp -rL "$pod_logs" "$kept/$(basename "${pod_logs%/root/var/log/pods}")/pods" 2>/dev/null || true
    done
  fi
  # The nested nodes' cgroups (cluster.sh, node_cgroups), empty once their processes ended.
  find /sys/fs/cgroup/*/sh-e2e-* -depth -type d -exec rmdir {} + 2>/dev/null || true
  rm -rf "$E2E_WORK"
  ((made_modules == 0)) || rmdir /lib/modules 2>/dev/null || true
  ((made_multipath == 0)) || rmdir /etc/multipath 2>/dev/null || true
  exit "$rc"
fi

# shellcheck source=tests/e2e/cluster.sh
source "$here/cluster.sh"
mkdir -p "$E2E_WORK/logs"

on_exit() {
  local rc=$?
  if ((rc != 0)); then
    kc get pods -A -o wide >"$E2E_WORK/logs/pods.txt" 2>&1 || true
    kc get events -A >"$E2E_WORK/logs/events.txt" 2>&1 || true
    local pod
    for pod in $(kc -n stagehand-system get pods -o name 2>/dev/null); do
      kc -n stagehand-system logs "$pod" --all-containers --request-timeout=10s \
        >"$E2E_WORK/logs/stagehand-${pod#pod/}.log" 2>&1 || true
    done
    systemctl_e2e list-units --all --no-legend >"$E2E_WORK/logs/units.txt" 2>&1 || true
    cat /proc/self/mountinfo >"$E2E_WORK/logs/mountinfo.txt" 2>&1 || true
  fi
  # A target stopped by the freeze step must run again to be stopped for good.
  [[ -f $E2E_WORK/pids/tgtd ]] && kill -CONT "$(cat "$E2E_WORK/pids/tgtd")" 2>/dev/null || true
  # Unmount what the cluster mounted before the namespaces go, so loop devices are released.
  kc delete pod --all --wait=true --timeout=120s >/dev/null 2>&1 || true
  cluster_down
  local m
  for m in $(awk '{print $5}' /proc/self/mountinfo | grep -E '^/(var/lib/kubelet|run/stagehand)/' | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  comm -13 "$E2E_WORK/loops.before" <(losetup --list --noheadings --output NAME | sort) |
    xargs -r -n1 losetup -d 2>/dev/null || true
  exit "$rc"
}
trap on_exit EXIT

mount_count() { wc -l </proc/self/mountinfo; }

# --- tgtd with CHAP: LUN 1 for the filesystem PV, LUN 2 for the raw block PV.
IQN=iqn.2026-12.dev.stagehand:e2e
CHAP_USER=e2e-user
CHAP_PASSWORD=e2e-secret-0123
TGT_PORTAL=127.0.0.1:3260
start_tgtd() {
  start tgtd tgtd -f --iscsi "portal=$TGT_PORTAL"
  wait_for 10 "tgtd" tgtadm --lld iscsi --mode target --op show
  tgtadm --lld iscsi --mode target --op new --tid 1 --targetname "$IQN"
  local lun
  for lun in 1 2; do
    [[ -e $E2E_WORK/lun$lun.img ]] || truncate -s 256M "$E2E_WORK/lun$lun.img"
    tgtadm --lld iscsi --mode logicalunit --op new --tid 1 --lun "$lun" \
      --backing-store "$E2E_WORK/lun$lun.img"
  done
  tgtadm --lld iscsi --mode target --op bind --tid 1 --initiator-address ALL
  tgtadm --lld iscsi --mode account --op new --user "$CHAP_USER" --password "$CHAP_PASSWORD"
  tgtadm --lld iscsi --mode account --op bind --tid 1 --user "$CHAP_USER"
}

if ((E2E_TWO_NODES == 1)); then
  # shellcheck source=tests/e2e/two_nodes.sh
  source "$here/two_nodes.sh"
  exit
fi

t0=$SECONDS
cluster_up
start_tgtd

# --- the DaemonSet, as shipped: the kustomize base, or the Helm chart with its defaults.
helm_e2e() {
  HELM_CACHE_HOME=$E2E_WORK/helm/cache HELM_CONFIG_HOME=$E2E_WORK/helm/config \
    HELM_DATA_HOME=$E2E_WORK/helm/data \
    "$HELM_BIN" --kubeconfig "$E2E_WORK/pki/admin.kubeconfig" "$@"
}
t=$SECONDS
if [[ $E2E_INSTALL == helm ]]; then
  helm_e2e install stagehand "$repo/deploy/helm/stagehand" --namespace stagehand-system \
    --create-namespace >/dev/null || die "helm install"
else
  kc apply -k "$repo/deploy/kubernetes" >/dev/null
fi
kc -n stagehand-system rollout status ds/stagehand-node --timeout=180s >/dev/null ||
  die "the DaemonSet did not become ready"
wait_for 60 "CSINode $NODE_NAME lists iscsi.stagehand.dev with node id $NODE_NAME" csinode_driver
log "ok: DaemonSet ($E2E_INSTALL) ready and registered with the kubelet in $((SECONDS - t)) s"
# NodeGetInfo's max_volumes_per_node: what the node's memory lets it hold (16 MiB a session).
allocatable=$(kc get csinode "$NODE_NAME" -o jsonpath='{.spec.drivers[?(@.name=="iscsi.stagehand.dev")].allocatable.count}') ||
  die "read the CSINode's allocatable count"
mem_kib=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
[[ $allocatable =~ ^[0-9]+$ ]] && ((allocatable >= 1 && allocatable <= mem_kib / 16384)) ||
  die "CSINode allocatable count '$allocatable' is not what this node's memory allows"
log "ok: CSINode allocatable count $allocatable"
# The node has no initiator name of its own and the image none: stagehand made one for this node.
grep -q '^InitiatorName=iqn\.' /var/lib/stagehand/initiatorname || die "no per-node initiator name generated"
log "ok: initiator name generated for this node: $(cut -d= -f2 /var/lib/stagehand/initiatorname)"

# --- the example Secret/PV/PVC/Pod, pointed at our target.
example() {
  sed -e "s#targetPortal: 10.0.0.5:3260#targetPortal: 127.0.0.1:3260#" \
    -e "s#iqn: iqn.2026-11.com.example:storage#iqn: $IQN#" \
    -e "s#node.session.auth.username: initiator-user#node.session.auth.username: $CHAP_USER#" \
    -e "s#node.session.auth.password: change-me-12chars#node.session.auth.password: $CHAP_PASSWORD#" \
    -e "s#storage: 10Gi#storage: 256Mi#" \
    "$repo/deploy/kubernetes/example-pv.yaml"
}
# pod NAME COMMAND: the example's pod under another name and command.
pod() { pod_manifest "$1" pg-data "$2"; }

t=$SECONDS
example | kc apply -f - >/dev/null
wait_for 180 "pod pg-data-demo Running" pod_running pg-data-demo
log "ok: example pod Running with a fresh LUN (stage, format, publish) in $((SECONDS - t)) s"
kc exec pg-data-demo -- sh -c 'echo e2e-data > /data/proof && sync' || die "write to the volume"
[[ $(kc exec pg-data-demo -- cat /data/proof) == e2e-data ]] || die "read back from the volume"
staging=$(awk '$5 ~ /^\/var\/lib\/kubelet\/plugins\/kubernetes.io\/csi\/iscsi.stagehand.dev\/.*\/globalmount$/ {print $5}' /proc/self/mountinfo)
[[ -n $staging ]] || die "no staging mount under the kubelet's plugin directory"
[[ $(systemctl_e2e list-units --no-legend 'stagehand-session-*' | wc -l) -eq 1 ]] ||
  die "expected one session unit"
log "ok: the example pod writes and reads its volume (staged at $staging)"

# --- deleting the pod unpublishes and unstages: nothing of the volume is left on the node.
t=$SECONDS
kc delete pod pg-data-demo --wait=true --timeout=120s >/dev/null
nothing_left() {
  ! awk '{print $5}' /proc/self/mountinfo |
    grep -qE '^/var/lib/kubelet/(pods|plugins)/.*kubernetes.io[~/]csi' &&
    [[ $(systemctl_e2e list-units --all --no-legend 'stagehand-session-*' | wc -l) -eq 0 ]] &&
    [[ -z $(comm -13 "$E2E_WORK/loops.before" <(losetup --list --noheadings --output NAME | sort)) ]]
}
wait_for 120 "unpublish and unstage after the pod's deletion" nothing_left
log "ok: pod deleted: no mount, session unit or loop device left ($((SECONDS - t)) s)"

# --- a new pod finds the data.
pod reader 'cat /data/proof; sleep 3600' | kc apply -f - >/dev/null
wait_for 180 "pod reader Running" pod_running reader
[[ $(kc exec reader -- cat /data/proof) == e2e-data ]] || die "the new pod does not see the data"
kc delete pod reader --wait=true --timeout=120s >/dev/null
wait_for 120 "unstage after the reader pod" nothing_left
log "ok: a new pod found the data"

# --- rolling restart of the DaemonSet under a writing pod.
# The writer appends a counter line and fsyncs each round; any failed write ends the container
# (restartCount > 0) and leaves FAIL in its log.
writer='i=0; while true; do echo $i >> /data/log && sync /data/log || { echo FAIL; exit 1; }; i=$((i+1)); done'
pod writer "$writer" | kc apply -f - >/dev/null
wait_for 180 "pod writer Running" pod_running writer
lines() { kc exec writer -- wc -l /data/log | awk '{print $1}'; }
# writer_went_on WHEN: the writer's log grows again and no write of it failed (its container
# never restarted, no FAIL in its log); WHEN ("during the rollout") ends each message.
writer_went_on() {
  local before
  before=$(lines)
  grown() { (($(lines) > before)); }
  wait_for 30 "the writer's log to grow $1" grown
  [[ $(kc get pod writer -o jsonpath='{.status.containerStatuses[0].restartCount}') == 0 ]] ||
    die "the writer's container restarted: its I/O failed $1"
  ! kc logs writer | grep -q FAIL || die "the writer saw a failed write $1"
}
before_mounts=$(mount_count)
for round in 1 2 3; do
  kc -n stagehand-system rollout restart ds/stagehand-node >/dev/null
  kc -n stagehand-system rollout status ds/stagehand-node --timeout=180s >/dev/null ||
    die "rollout $round did not finish"
done
wait_for 60 "CSINode after the restarts" csinode_driver
writer_went_on "during the rollouts"
after_mounts=$(mount_count)
((after_mounts == before_mounts)) ||
  die "the node's mount count changed over 3 restarts: $before_mounts -> $after_mounts"
log "ok: 3 rolling restarts under a writing pod: no failed write, mounts $before_mounts -> $after_mounts"

# --- a kubelet restart keeps the pod's volume mounted: same mount, not a remount.
target_mount_id() {
  awk '$5 ~ /^\/var\/lib\/kubelet\/pods\/.*\/volumes\/kubernetes.io~csi\/pg-data\/mount$/ {print $1}' /proc/self/mountinfo
}
id_before=$(target_mount_id)
[[ -n $id_before ]] || die "no publish mount for the writer"
stop kubelet
start_kubelet
# The node's Ready condition lags; the kubelet answering through the API server does not.
wait_for 120 "the restarted kubelet" kc get --raw "/api/v1/nodes/$NODE_NAME/proxy/healthz"
wait_for 120 "the restarted kubelet to know the writer again" kc exec writer -- true
writer_went_on "over the kubelet restart"
[[ $(target_mount_id) == "$id_before" ]] || die "the publish mount changed over the kubelet restart"
log "ok: kubelet restart: the writer's volume stayed mounted (mount id $id_before)"

# --- SIGKILL of the volume's session process under the writer: its unit starts a successor
# that takes over the FUSE connection (kept in the unit's file descriptor store); the writer
# only stalls, the mounts stay.
session_unit=$(systemctl_e2e list-units --plain --no-legend 'stagehand-session-*' | awk '{print $1}')
[[ -n $session_unit ]] || die "no session unit for the writer's volume"
session_pid() { systemctl_e2e show -p MainPID --value "$session_unit"; }
pid_before=$(session_pid)
systemctl_e2e kill --signal=KILL "$session_unit"
successor() { local p; p=$(session_pid); [[ $p != 0 && $p != "$pid_before" ]]; }
wait_for 30 "a successor in $session_unit" successor
writer_went_on "after the session's SIGKILL"
[[ $(target_mount_id) == "$id_before" ]] || die "the publish mount changed over the session's SIGKILL"
log "ok: session SIGKILL under the writer: pid $pid_before -> $(session_pid), no failed write, same mount"

# --- a DaemonSet image change (another build of stagehand-session) replaces the writer's
# session process in place: no failed write, the same mounts, the new build serving.
next_build=$(cat "$E2E_WORK/next-build")
mounts_before_upgrade=$(mount_count)
if [[ $E2E_INSTALL == helm ]]; then
  helm_e2e upgrade stagehand "$repo/deploy/helm/stagehand" --namespace stagehand-system \
    --reuse-values --set image.tag=e2e-next >/dev/null || die "helm upgrade"
  [[ $(helm_e2e status stagehand --namespace stagehand-system -o json) == *'"version":2'* ]] ||
    die "helm does not show the upgrade as the release's revision 2"
else
  kc -n stagehand-system set image ds/stagehand-node stagehand=localhost/stagehand:e2e-next >/dev/null
fi
kc -n stagehand-system rollout status ds/stagehand-node --timeout=180s >/dev/null ||
  die "the rollout of the next image did not finish"
upgraded() { grep -qa "$next_build" /run/stagehand/sessions/*/status; }
wait_for 120 "the session upgraded in place to build ${next_build:0:12}" upgraded
writer_went_on "during the upgrade in place"
[[ $(target_mount_id) == "$id_before" ]] || die "the publish mount changed over the upgrade"
(($(mount_count) == mounts_before_upgrade)) ||
  die "the node's mount count changed over the upgrade: $mounts_before_upgrade -> $(mount_count)"
log "ok: image change under the writer: session upgraded in place to build ${next_build:0:12}, no failed write, same mounts"

# --- the kubelet's volume stats for the PVC come from NodeGetVolumeStats.
metric() {
  kc get --raw "/api/v1/nodes/$NODE_NAME/proxy/metrics" |
    awk -v m="$1" '$1 ~ "^"m"\\{" && $1 ~ /persistentvolumeclaim="pg-data"/ {print $2}'
}
have_stats() { [[ -n $(metric kubelet_volume_stats_capacity_bytes) ]]; }
wait_for 60 "kubelet_volume_stats_capacity_bytes for pg-data" have_stats
read -r blocks bsize files < <(kc exec writer -- stat -f -c '%b %S %c' /data)
capacity=$(metric kubelet_volume_stats_capacity_bytes)
inodes=$(metric kubelet_volume_stats_inodes)
[[ $(printf '%.0f' "$capacity") == $((blocks * bsize)) ]] ||
  die "kubelet capacity $capacity != statfs $((blocks * bsize))"
[[ $(printf '%.0f' "$inodes") == "$files" ]] || die "kubelet inodes $inodes != statfs $files"
log "ok: kubelet_volume_stats for pg-data: capacity $capacity bytes, $inodes inodes"

# --- volume and storage health in the pod's and the CSINode's status: the kubelet (1.37,
# CSIVolumeHealth) calls NodeGetVolumeHealth and NodeGetStorageHealth every
# volumeStatsAggPeriod (5 s here). A target outage under the writer shows and clears; a failed
# filesystem shows.
if ((KUBE_MINOR >= 37)); then
  # "Status/Reason ..." of the writer's volume, and of our driver's storage on the node.
  pod_health() {
    kc get pod writer -o jsonpath='{range .status.volumeHealth[?(@.name=="data")].healthConditions[*]}{.status}/{.reason}{" "}{end}'
  }
  node_health() {
    kc get csinode "$NODE_NAME" -o jsonpath='{range .status.storageHealth[?(@.name=="iscsi.stagehand.dev")].healthConditions[*]}{.status}/{.reason}{" "}{end}'
  }
  # Healthy: both lists empty, and both read (a failed kubectl is not "healthy").
  healthy_now() {
    local p n
    p=$(pod_health) && n=$(node_health) && [[ -z $p && -z $n ]]
  }
  healthy_now || die "health reported before any fault: pod '$(pod_health)', CSINode '$(node_health)'"
  t=$SECONDS
  stop tgtd KILL
  outage_shows() {
    [[ $(pod_health) == *Inaccessible/SessionReconnecting* &&
      $(node_health) == *StorageUnreachable/TargetUnreachable* ]]
  }
  wait_for 60 "the outage in the pod's and the CSINode's status" outage_shows
  log "ok: target down: pod status '$(pod_health)', CSINode status '$(node_health)' ($((SECONDS - t)) s)"
  start_tgtd
  t=$SECONDS
  wait_for 60 "the pod's and the CSINode's health to clear after the target returned" healthy_now
  writer_went_on "during the outage"
  log "ok: target back: health cleared in $((SECONDS - t)) s, the writer went on without a failed write"

  # A frozen target (SIGSTOP: its connections stay open, nothing answers) shorter than the
  # replacement timeout: the session finds it silent within seconds and the condition shows;
  # once it runs again the condition clears and no write failed.
  tgtd_pid=$(cat "$E2E_WORK/pids/tgtd")
  t=$SECONDS
  kill -STOP "$tgtd_pid"
  freeze_shows() { [[ $(pod_health) == *Inaccessible/SessionReconnecting* ]]; }
  wait_for 60 "the frozen target in the pod's status" freeze_shows
  log "ok: target frozen: pod status '$(pod_health)' ($((SECONDS - t)) s)"
  kill -CONT "$tgtd_pid"
  t=$SECONDS
  wait_for 60 "the pod's health to clear after the target thawed" healthy_now
  writer_went_on "during the freeze"
  log "ok: target thawed: health cleared in $((SECONDS - t)) s, the writer went on without a failed write"

  # An ext4 error as I/O errors cause it: with the example PV's errors=remount-ro the kernel
  # aborts the journal (emergency_ro) and the filesystem takes no more writes.
  device=$(awk -v m="$staging" '$5 == m {for (i = 7; $i != "-"; i++) {}; print $(i + 2)}' /proc/self/mountinfo)
  [[ $device == /dev/loop* ]] || die "no loop device under the staging mount $staging: '$device'"
  echo "stagehand e2e" >"/sys/fs/ext4/${device#/dev/}/trigger_fs_error"
  fs_failed_shows() { [[ $(pod_health) == *Inaccessible/FilesystemFailed* ]]; }
  wait_for 60 "the failed filesystem in the pod's status" fs_failed_shows
  log "ok: failed filesystem: pod status '$(pod_health)'"
fi
kc delete pod writer --wait=true --timeout=120s >/dev/null
wait_for 120 "unstage after the writer pod" nothing_left

# --- a raw block PVC.
kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: PersistentVolume
metadata: {name: raw-block}
spec:
  capacity: {storage: 256Mi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  volumeMode: Block
  csi:
    driver: iscsi.stagehand.dev
    volumeHandle: raw-block
    volumeAttributes: {targetPortal: "127.0.0.1:3260", iqn: "$IQN", lun: "2"}
    nodeStageSecretRef: {name: iscsi-chap, namespace: default}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: raw-block, namespace: default}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  volumeName: raw-block
  volumeMode: Block
  resources: {requests: {storage: 256Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: block, namespace: default}
spec:
  terminationGracePeriodSeconds: 5
  containers:
    - name: app
      image: busybox:1.36
      command: ["sh", "-c", "sleep 3600"]
      volumeDevices: [{name: data, devicePath: /dev/xvda}]
  volumes:
    - name: data
      persistentVolumeClaim: {claimName: raw-block}
EOF
wait_for 180 "pod block Running" pod_running block
kc exec block -- sh -c 'echo raw-block-e2e | dd of=/dev/xvda bs=4096 conv=sync,fsync 2>/dev/null' ||
  die "write to the raw block device"
[[ $(kc exec block -- sh -c 'dd if=/dev/xvda bs=4096 count=1 2>/dev/null | head -c 13') == raw-block-e2e ]] ||
  die "read back from the raw block device"
[[ $(head -c 13 "$E2E_WORK/lun2.img") == raw-block-e2e ]] || die "the data is not on LUN 2"
kc delete pod block --wait=true --timeout=120s >/dev/null
wait_for 120 "unstage after the block pod" nothing_left
log "ok: raw block PVC: written, read back, on the LUN, and unstaged"

log "all checks passed in $((SECONDS - t0)) s"
