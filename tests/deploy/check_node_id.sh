#!/usr/bin/env bash
# Usage: check_node_id.sh <built stagehand binary>
# The daemon refuses, before it touches anything, a node id that a runtime left as an unexpanded
# $(VAR) reference and, in Kubernetes mode, one that is not a valid node name: exit code 2 and a
# message that says why.
set -euo pipefail
binary=${1:?stagehand binary}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# An empty config file of our own: not /etc/stagehand/config.yaml of the host.
: >"$dir/config.yaml"

# expect_refused MESSAGE ARGS...
expect_refused() {
  local want=$1 rc=0
  shift
  "$binary" --config "$dir/config.yaml" --state-dir "$dir/state" --runtime-dir "$dir/run" \
    --metrics-address= "$@" >"$dir/out" 2>&1 || rc=$?
  if ((rc != 2)) || ! grep -qF "$want" "$dir/out"; then
    echo "stagehand $*: exit $rc, want 2 and '$want':" >&2
    cat "$dir/out" >&2
    exit 1
  fi
  if [[ -e $dir/state ]]; then
    echo "stagehand $*: created its state dir before refusing the node id" >&2
    exit 1
  fi
}

expect_refused "unexpanded variable reference" --mode=kubernetes '--node-id=$(NODE_NAME)'
expect_refused "unexpanded variable reference" --mode=standalone '--node-id=$(NODE_NAME)'
expect_refused "not a valid Kubernetes node name" --mode=kubernetes --node-id=Node_1
echo "node ids refused as expected"
