#!/bin/bash
# Runs inside the kernel test guest (see bench/transports): the same fio workloads through a
# volume staged with the kernel transport and then with the userspace transport, same LUN, same
# run. Parameters (kernel command line, from bench/transports): SH_TGT_IQN, SH_TGT_PORT,
# SH_SECONDS (per workload), SH_BIN (directory holding stagehand, stagehandctl, stagehand-session).
set -euo pipefail
iqn=${SH_TGT_IQN:?}
port=${SH_TGT_PORT:?}
secs=${SH_SECONDS:-4}
bin=${SH_BIN:?}
csi=unix:///run/shb/csi.sock
trap 'echo "bench: FAILED at line $LINENO: $BASH_COMMAND"; sed "s/^/bench: agent: /" /run/shb/agent.log' ERR
mkdir -p /run/shb /var/lib/shb
modprobe fuse
modprobe loop
"$bin/stagehand" --iscsi-transport=kernel --csi-endpoint "$csi" --state-dir /var/lib/shb/state \
  --runtime-dir /run/shb/rt --no-watch-plugins --session-launcher=detached --node-id bench \
  --metrics-address '' --log-level info 2>/run/shb/agent.log &
agent=$!
ctl() { "$bin/stagehandctl" --endpoint "$csi" --timeout 120 "$@"; }
for _ in $(seq 300); do ctl --timeout 1 identity probe >/dev/null 2>&1 && break; sleep 0.1; done

declare -A result
workloads=("read 1M 1" "read 1M 16" "write 1M 1" "write 1M 16" "randread 4k 1" "randread 4k 16"
  "randwrite 4k 1" "randwrite 4k 16")
for transport in kernel userspace; do
  stage=/var/lib/shb/stage-$transport
  vol=/var/lib/shb/vol-$transport
  ctl node stage --volume-id bench --staging-path "$stage" -c "targetPortal=10.0.2.2:$port" \
    -c "iqn=$iqn" -c lun=1 -c "transport=$transport" >/dev/null
  ctl node publish --volume-id bench --staging-path "$stage" --target-path "$vol" >/dev/null
  echo "bench: $transport transport: $(findmnt -no SOURCE "$stage")"
  fio --name=layout --filename="$vol/fio.dat" --size=128M --rw=write --bs=1M --direct=1 \
    --ioengine=libaio --iodepth=4 >/dev/null
  for w in "${workloads[@]}"; do
    read -r mode bs qd <<<"$w"
    out=$(fio --name=b --filename="$vol/fio.dat" --size=128M --rw="$mode" --bs="$bs" --direct=1 \
      --ioengine=libaio --iodepth="$qd" --runtime="$secs" --time_based --minimal)
    # Terse v3: field 8 = read IOPS, field 49 = write IOPS.
    result[$transport,$w]=$(awk -F';' -v m="$mode" '{print (m ~ /write/) ? $49 : $8}' <<<"$out")
  done
  ctl node unpublish --volume-id bench --target-path "$vol" >/dev/null
  ctl node unstage --volume-id bench --staging-path "$stage" >/dev/null
done
kill -TERM "$agent"
wait "$agent" || true

echo "bench: fio through ext4 on the same LUN, ${secs} s per workload, in a QEMU/TCG guest"
printf 'bench: %-10s %3s %3s %12s %12s %8s\n' workload bs qd kernel userspace user/kern
for w in "${workloads[@]}"; do
  read -r mode bs qd <<<"$w"
  k=${result[kernel,$w]}
  u=${result[userspace,$w]}
  awk -v m="$mode" -v b="$bs" -v q="$qd" -v k="$k" -v u="$u" 'BEGIN {
    printf "bench: %-10s %3s %3s %8.0f IOPS %8.0f IOPS %8.2f\n", m, b, q, k, u, (k > 0 ? u / k : 0) }'
done
