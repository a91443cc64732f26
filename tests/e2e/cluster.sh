# A Kubernetes for tests/e2e, sourced by e2e_test.sh inside its private namespaces: one node that
# is also the control plane (cluster_up), or a control plane with nodes of their own (two_nodes.sh:
# the control plane in the test's namespaces, each node_up in namespaces nested in those).
#
# Where it runs: on this host, in mount, network, PID and UTS namespaces of the test's own
# (unshare), so nothing it mounts, no interface, route or process it makes outlives the test
# (the nested nodes' cgroup directories excepted: e2e_test.sh removes them once it ended).
# Each workaround, and why:
#   - hybrid cgroup v1, systemd not PID 1: kubelet and containerd use the cgroupfs driver, and
#     the kubelet is told failCgroupV1: false (1.35 refuses cgroup v1 otherwise).
#   - a private `/`: the namespace's `/` is made rshared, so Bidirectional propagation works.
#   - no host systemd: `systemd --user` (as root) answers on /run/dbus/system_bus_socket (in a
#     tmpfs /run of the namespace); it has the system manager's D-Bus API (StartTransientUnit),
#     so the DaemonSet's session units run there, outside the pod's cgroup, as they would under
#     the host's systemd.
#   - no registry: every image (stagehand, pause, busybox) is built here and imported with ctr.
#   - no cluster network: a veth pair carries the node's address; pods get addresses
#     from the bridge CNI plugin (Debian's containernetworking-plugins) with host-local IPAM.
#
# Needs: KUBE_BIN (kubelet, kube-*, kubectl, etcd, containerd, ctr; tests/e2e/build-cluster),
# E2E_WORK (a scratch directory on disk), and the image archives under $E2E_WORK/images.
# KUBE_FEATURE_GATES (optional, "Gate=true,..."): feature gates of kube-apiserver and kubelet.

NODE_NAME=${NODE_NAME:-sh-e2e}
NODE_IP=${NODE_IP:-10.251.0.1}
# The API server's address (the single node's own, or the control plane's beside its nodes).
API_IP=10.251.0.1
SERVICE_CIDR=10.96.0.0/24
POD_CIDR=${POD_CIDR:-10.88.0.0/16}
# What belongs to one node: its root directories, configuration, logs and PIDs (a node of
# two_nodes.sh has one of its own under $E2E_WORK).
NODE_WORK=${NODE_WORK:-$E2E_WORK}

log() { echo "e2e: $*" >&2; }
die() {
  log "FAILED: $*"
  exit 1
}

# wait_for SECONDS DESCRIPTION COMMAND...: runs COMMAND until it succeeds, at most SECONDS.
wait_for() {
  local limit=$1 what=$2
  shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "timed out after ${limit}s waiting for: $what"
    sleep 0.5
  done
}

kc() { "$KUBE_BIN/kubectl" --kubeconfig "$E2E_WORK/pki/admin.kubeconfig" "$@"; }

# --- the namespace's file system and network ------------------------------------------------

# setup_host: the single node's namespace is also the control plane's.
setup_host() {
  setup_cluster_host
  setup_node_host
  ip route add default dev sh-e2e0
}

# own_run: a namespace's shared mounts, a fresh /run (our bus, our systemd, containerd's and
# tgtd's sockets; nothing of the host's or of another node's) and loopback.
own_run() {
  mount --make-rshared /
  mount -t tmpfs -o mode=0755 tmpfs /run
  ip link set lo up
}

# The control plane's namespace: its /run, the API server's address on one end of a veth pair
# (this kernel has no dummy links), forwarding to the nodes.
setup_cluster_host() {
  own_run
  ip link add sh-e2e0 type veth peer name sh-e2e1
  ip addr add "$API_IP/24" dev sh-e2e0
  ip link set sh-e2e1 up
  ip link set sh-e2e0 up
  echo 1 >/proc/sys/net/ipv4/ip_forward
}

# A node's own directories (on disk under $NODE_WORK/root) and name.
setup_node_host() {
  mkdir -p /run/systemd/system /run/dbus /run/udev /run/user/0 /run/lock
  chmod 0700 /run/user/0
  local d
  for d in /var/lib/kubelet /var/lib/stagehand /var/lib/containerd /var/lib/cni /var/log/pods \
    /var/log/containers /etc/iscsi /etc/multipath; do
    mkdir -p "$d" "$NODE_WORK/root$d"
    mount --bind "$NODE_WORK/root$d" "$d"
  done
  mount --make-rshared /var/lib/kubelet
  hostname "$NODE_NAME"
}

# node_cgroups: a nested node's own cgroup in every hierarchy, this shell moved into it in those
# systemd uses: its `systemd --user` names its units' cgroups after the units (both nodes run a
# session unit of the same name), and its kubelet's cgroupRoot must exist.
node_cgroups() {
  local h
  for h in /sys/fs/cgroup/*/; do
    mkdir -p "$h$NODE_NAME"
    if [[ -f ${h}cpuset.cpus ]]; then
      cat "${h}cpuset.cpus" >"$h$NODE_NAME/cpuset.cpus"
      cat "${h}cpuset.mems" >"$h$NODE_NAME/cpuset.mems"
    fi
  done
  for h in systemd unified; do
    [[ ! -d /sys/fs/cgroup/$h ]] || echo "$BASHPID" >"/sys/fs/cgroup/$h/$NODE_NAME/cgroup.procs"
  done
}

# node_main: a nested node (two_nodes.sh's node_up runs it in its own mount, network and UTS
# namespaces): its directories, its uplink to the control plane's namespace, systemd --user,
# containerd and the kubelet; it lasts as long as they do.
node_main() {
  node_cgroups
  own_run
  setup_node_host
  wait_for 30 "the node's uplink" ip link show uplink
  ip addr add "$NODE_IP/24" dev uplink
  ip link set uplink up
  ip route add default via "${NODE_IP%.*}.1"
  start_systemd
  start_containerd
  start_kubelet
  wait
}

# --- certificates -----------------------------------------------------------------------------

# cert NAME SUBJECT [SAN]: a key and a certificate signed by the test's CA.
cert() {
  local name=$1 subject=$2 san=${3:-}
  local pki=$E2E_WORK/pki
  openssl req -new -newkey rsa:2048 -nodes -keyout "$pki/$name.key" -subj "$subject" \
    -out "$pki/$name.csr" 2>/dev/null
  local ext="$pki/$name.ext"
  echo "basicConstraints=CA:FALSE" >"$ext"
  echo "keyUsage=digitalSignature,keyEncipherment" >>"$ext"
  echo "extendedKeyUsage=serverAuth,clientAuth" >>"$ext"
  [[ -z $san ]] || echo "subjectAltName=$san" >>"$ext"
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -CAcreateserial -days 2 -extfile "$ext" -out "$pki/$name.crt" 2>/dev/null
}

# kubeconfig NAME: $pki/NAME.kubeconfig with NAME's client certificate.
kubeconfig() {
  local pki=$E2E_WORK/pki
  cat >"$pki/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {server: "https://$API_IP:6443", certificate-authority: "$pki/ca.crt"}
users:
- name: $1
  user: {client-certificate: "$pki/$1.crt", client-key: "$pki/$1.key"}
contexts:
- name: e2e
  context: {cluster: e2e, user: $1}
current-context: e2e
EOF
}

# make_pki [NAME=IP ...]: the cluster's certificates, with a kubelet's for each node named
# (the single node when none is).
make_pki() {
  local pki=$E2E_WORK/pki
  mkdir -p "$pki"
  openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$pki/ca.key" -subj "/CN=sh-e2e-ca" \
    -days 2 -out "$pki/ca.crt" 2>/dev/null
  cert apiserver "/CN=kube-apiserver" \
    "IP:$API_IP,IP:127.0.0.1,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
  cert admin "/O=system:masters/CN=admin"
  cert controller-manager "/CN=system:kube-controller-manager"
  cert scheduler "/CN=system:kube-scheduler"
  local node nodes=("$@")
  ((${#nodes[@]} > 0)) || nodes=("$NODE_NAME=$NODE_IP")
  for node in "${nodes[@]}"; do
    cert "kubelet-${node%%=*}" "/O=system:nodes/CN=system:node:${node%%=*}" \
      "IP:${node#*=},DNS:${node%%=*}"
    kubeconfig "kubelet-${node%%=*}"
  done
  cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  local n
  for n in admin controller-manager scheduler; do kubeconfig "$n"; done
}

# --- components ---------------------------------------------------------------------------------

# start NAME COMMAND...: runs COMMAND in the background with its output in $NODE_WORK/logs/NAME.log
# and its PID in $NODE_WORK/pids/NAME.
start() {
  local name=$1
  shift
  mkdir -p "$NODE_WORK/logs" "$NODE_WORK/pids"
  "$@" >>"$NODE_WORK/logs/$name.log" 2>&1 &
  echo $! >"$NODE_WORK/pids/$name"
}

# stop NAME [SIGNAL]: ends what `start NAME` started (SIGTERM unless told; tgtd ignores it).
stop() {
  local pidfile=$NODE_WORK/pids/$1
  [[ -f $pidfile ]] || return 0
  local pid
  pid=$(cat "$pidfile")
  kill "-${2:-TERM}" "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -f "$pidfile"
}

# systemd --user (as root) with its own socket-activated dbus-daemon at $XDG_RUNTIME_DIR/bus, which
# /run/dbus/system_bus_socket then names too (a hard link: the DaemonSet mounts /run/dbus). The
# manager is kept off that "system bus" (it is its own API bus) by DBUS_SYSTEM_BUS_ADDRESS.
SYSTEMD_RUNTIME=/run/e2e-systemd
start_systemd() {
  mkdir -p "$SYSTEMD_RUNTIME"
  start systemd env XDG_RUNTIME_DIR="$SYSTEMD_RUNTIME" \
    DBUS_SESSION_BUS_ADDRESS="unix:path=$SYSTEMD_RUNTIME/bus" \
    DBUS_SYSTEM_BUS_ADDRESS="unix:path=$SYSTEMD_RUNTIME/no-system-bus" \
    /lib/systemd/systemd --user --log-target=console --log-level=info
  wait_for 30 "systemd's bus socket" test -S "$SYSTEMD_RUNTIME/bus"
  ln "$SYSTEMD_RUNTIME/bus" /run/dbus/system_bus_socket
  wait_for 30 "systemd --user on /run/dbus/system_bus_socket" \
    busctl --address=unix:path=/run/dbus/system_bus_socket get-property org.freedesktop.systemd1 \
    /org/freedesktop/systemd1 org.freedesktop.systemd1.Manager Version
}

systemctl_e2e() {
  XDG_RUNTIME_DIR=$SYSTEMD_RUNTIME DBUS_SESSION_BUS_ADDRESS=unix:path=$SYSTEMD_RUNTIME/bus \
    systemctl --user --no-pager "$@"
}

start_control_plane() {
  local pki=$E2E_WORK/pki
  start etcd "$KUBE_BIN/etcd" --data-dir "$E2E_WORK/etcd" --name e2e \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster e2e=http://127.0.0.1:2380 --log-level warn
  start kube-apiserver "$KUBE_BIN/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
    --advertise-address "$API_IP" --bind-address 0.0.0.0 --secure-port 6443 \
    --service-cluster-ip-range "$SERVICE_CIDR" --allow-privileged=true \
    --authorization-mode Node,RBAC --client-ca-file "$pki/ca.crt" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc \
    --kubelet-preferred-address-types InternalIP \
    ${KUBE_FEATURE_GATES:+--feature-gates "$KUBE_FEATURE_GATES"}
  wait_for 120 "kube-apiserver /readyz" kc get --raw /readyz
  start kube-controller-manager "$KUBE_BIN/kube-controller-manager" \
    --kubeconfig "$pki/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$pki/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$pki/controller-manager.kubeconfig" \
    --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
    --use-service-account-credentials=true --leader-elect=false
  start kube-scheduler "$KUBE_BIN/kube-scheduler" --kubeconfig "$pki/scheduler.kubeconfig" \
    --authentication-kubeconfig "$pki/scheduler.kubeconfig" \
    --authorization-kubeconfig "$pki/scheduler.kubeconfig" --leader-elect=false
  wait_for 60 "the default service account" kc -n default get serviceaccount default
}

# runc, or on a host whose root lacks CAP_SYS_RESOURCE (no process may lower its
# oom_score_adj, which the kubelet asks for on every pod sandbox) the runc-oom wrapper.
runc_binary() {
  local bounding
  bounding=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
  if (((0x$bounding >> 24) & 1)); then
    echo /usr/sbin/runc
  else
    echo "$KUBE_BIN/runc-oom"
  fi
}

start_containerd() {
  local conf=$NODE_WORK/containerd.toml
  mkdir -p "$NODE_WORK/cni"
  cat >"$NODE_WORK/cni/10-e2e.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "e2e",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "loopback"}
  ]
}
EOF
  cat >"$conf" <<EOF
version = 3
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "localhost/pause:e2e"
[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = "$NODE_WORK/cni"
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  BinaryName = "$(runc_binary)"
  SystemdCgroup = false
EOF
  PATH=$KUBE_BIN:$PATH start containerd "$KUBE_BIN/containerd" --config "$conf"
  wait_for 30 "containerd" "$KUBE_BIN/ctr" --address /run/containerd/containerd.sock version
  local archive
  for archive in "$E2E_WORK"/images/*.tar; do
    "$KUBE_BIN/ctr" --address /run/containerd/containerd.sock -n k8s.io images import \
      --no-unpack "$archive" >/dev/null 2>>"$NODE_WORK/logs/ctr.log" || die "ctr import $archive"
  done
}

start_kubelet() {
  local pki=$E2E_WORK/pki
  cat >"$NODE_WORK/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$pki/ca.crt"}
authorization: {mode: Webhook}
tlsCertFile: "$pki/kubelet-$NODE_NAME.crt"
tlsPrivateKeyFile: "$pki/kubelet-$NODE_NAME.key"
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
imageServiceEndpoint: unix:///run/containerd/containerd.sock
resolvConf: /etc/resolv.conf
volumeStatsAggPeriod: 5s
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
syncFrequency: 5s
EOF
  # A nested node's pods live under a cgroup of its own: a kubelet removes the pod cgroups it
  # does not know under its root, and kills what runs in them.
  [[ $NODE_WORK == "$E2E_WORK" ]] || echo "cgroupRoot: /$NODE_NAME" >>"$NODE_WORK/kubelet.yaml"
  local gate
  if [[ -n ${KUBE_FEATURE_GATES:-} ]]; then
    echo "featureGates:" >>"$NODE_WORK/kubelet.yaml"
    for gate in ${KUBE_FEATURE_GATES//,/ }; do
      echo "  ${gate%%=*}: ${gate#*=}" >>"$NODE_WORK/kubelet.yaml"
    done
  fi
  start kubelet "$KUBE_BIN/kubelet" --config "$NODE_WORK/kubelet.yaml" \
    --kubeconfig "$pki/kubelet-$NODE_NAME.kubeconfig" --node-ip "$NODE_IP" --hostname-override "$NODE_NAME" \
    --root-dir /var/lib/kubelet --v=2
}

# pod_manifest NAME CLAIM COMMAND [NODE]: a busybox pod that runs COMMAND with CLAIM's volume
# at /data (on NODE when named; the scheduler's choice otherwise).
pod_manifest() {
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default}
spec:
  ${4:+nodeName: $4}
  terminationGracePeriodSeconds: 5
  containers:
    - name: app
      image: busybox:1.36
      command: ["sh", "-c", "$3"]
      volumeMounts: [{name: data, mountPath: /data}]
  volumes:
    - name: data
      persistentVolumeClaim: {claimName: $2}
EOF
}
pod_running() { [[ $(kc get pod "$1" -o jsonpath='{.status.phase}') == Running ]]; }

# csinode_driver [NAME]: node NAME's CSINode lists our driver with NAME as its node id.
csinode_driver() {
  local node=${1:-$NODE_NAME}
  [[ $(kc get csinode "$node" -o jsonpath='{.spec.drivers[?(@.name=="iscsi.stagehand.dev")].nodeID}') == "$node" ]]
}

# node_ready [NAME]
node_ready() {
  [[ $(kc get node "${1:-$NODE_NAME}" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]
}

cluster_up() {
  local t=$SECONDS
  setup_host
  make_pki
  start_systemd
  start_control_plane
  start_containerd
  start_kubelet
  wait_for 120 "node $NODE_NAME Ready" node_ready
  log "cluster up in $((SECONDS - t)) s"
}

cluster_down() {
  local c
  for c in kubelet kube-scheduler kube-controller-manager kube-apiserver etcd; do stop "$c"; done
  # Pod sandboxes and containers: containerd's shims outlive containerd; the PID namespace ends
  # them all when the test's PID 1 exits.
  stop containerd
  stop systemd
}
