#!/bin/bash
# SELinux mounts as the kubelet asks for them (a CSIDriver with seLinuxMount: true), under a
# kernel that has SELinux on. Runs inside the guest that tests/kernel/guest.sh boots with
# `security=selinux enforcing=0`; tests/kernel/run_selinux.sh starts the target and passes:
#   SH_TGT_IQN, SH_TGT_PORT, SH_TGT_SERIAL   the target, its portal on the host, LUN 1's serial
#   SH_CHAP_USER, SH_CHAP_PASSWORD           the CHAP account bound to the target (test-only)
#   SH_STAGEHAND, SH_STAGEHANDCTL            the binaries (included at their host paths)
#   SH_SELINUX_POLICY, SH_GETFATTR           the binary policy (selinux_policy.sh) and getfattr
#
# The guest loads the minimal policy (permissive) and marks SELinux as configured
# (/etc/selinux/config: without it libmount drops context= options), then, through stagehand
# with the kernel transport and stagehandctl's CSI calls:
#  1. stage v1 with the kubelet's flag context="system_u:object_r:container_file_t:s0:c15,c25":
#     the staging mount's superblock has that context, and so has every file on it (its
#     security.selinux attribute);
#  2. publish with the same context: the bind shows the same context on its files;
#  3. publish at another path with another context (s0:c1,c2), or with none (a pod that opted
#     out of mount labelling): FAILED_PRECONDITION, nothing mounted there, the first publish
#     and the staging untouched;
#  4. unpublish and unstage: no session, disk or mount left; stagehand stops on SIGTERM.
# Each check prints "selinux: ok <what>"; the last line is a summary.
set -euo pipefail

iqn=${SH_TGT_IQN:?}
port=${SH_TGT_PORT:?}
serial=${SH_TGT_SERIAL:?}
chap_user=${SH_CHAP_USER:?}
chap_password=${SH_CHAP_PASSWORD:?}
stagehand=${SH_STAGEHAND:?}
stagehandctl=${SH_STAGEHANDCTL:?}
policy=${SH_SELINUX_POLICY:?}
getfattr=${SH_GETFATTR:?}
unset SH_CHAP_PASSWORD
host=10.0.2.2
endpoint=unix:///run/sh/csi.sock
stage=/var/lib/sh-stage/v1
pub=/var/lib/sh-pub/v1
pub2=/var/lib/sh-pub/v1-other
work=/run/sh-test
shlog=$work/stagehand.log
context=system_u:object_r:container_file_t:s0:c15,c25
other=system_u:object_r:container_file_t:s0:c1,c2
shpid=""
check_name=selinux
# shellcheck source=check.sh
source /check.sh
# shellcheck disable=SC2317 # invoked by the EXIT trap
on_exit() {
  local rc=$?
  if [[ $rc != 0 ]]; then
    echo "selinux: --- stagehand log ---"
    cat "$shlog" 2>/dev/null || true
    echo "selinux: --- mounts ---"
    grep -E ' /var/lib/sh-' /proc/self/mountinfo || true
    echo "selinux: --- dmesg (selinux) ---"
    dmesg | grep -i selinux | tail -n 20 || true
  fi
  exit "$rc"
}
trap on_exit EXIT

ctl() { "$stagehandctl" --endpoint "$endpoint" --timeout 60 "$@" 2>&1; }
# The superblock options of the mount at PATH (the fields after " - " in mountinfo).
super_options() { awk -v m="$1" '$5 == m {for (i = 7; $i != "-"; i++) {}; print $(i + 3)}' /proc/self/mountinfo; }
label() { "$getfattr" --only-values -n security.selinux "$1" | tr -d '\0'; }

# --- SELinux on, the policy loaded ----------------------------------------------------------
[[ -d /sys/fs/selinux ]] || fail "no /sys/fs/selinux: boot with security=selinux"
mount -t selinuxfs selinuxfs /sys/fs/selinux
cat "$policy" >/sys/fs/selinux/load
[[ $(</sys/fs/selinux/mls) == 1 && $(</sys/fs/selinux/enforce) == 0 ]] ||
  fail "policy: mls $(</sys/fs/selinux/mls), enforce $(</sys/fs/selinux/enforce)"
# libselinux's is_selinux_enabled() (which libmount asks before it passes a context= option on)
# wants selinuxfs mounted read-write and this file; a host with SELinux has both.
mkdir -p /etc/selinux
: >/etc/selinux/config
ok "SELinux on (kernel $(uname -r)), minimal MLS policy loaded, permissive"

mkdir -p "$work" /run/sh /var/lib/sh-stage /var/lib/sh-pub
mkdir -m 0700 /root/secrets
printf 'node.session.auth.username: %s\nnode.session.auth.password: %s\n' "$chap_user" \
  "$chap_password" >/root/secrets/chap.yaml
env -i PATH="$PATH" HOME=/root "$stagehand" --iscsi-transport=kernel --csi-endpoint "$endpoint" \
  --state-dir /var/lib/stagehand --runtime-dir /run/stagehand --no-watch-plugins --node-id guest \
  </dev/null >>"$shlog" 2>&1 &
shpid=$!
probe() { kill -0 "$shpid" 2>/dev/null && "$stagehandctl" --endpoint "$endpoint" identity probe >/dev/null 2>&1; }
until_deadline 30 probe || fail "stagehand did not answer within 30 s"

# --- 1. stage with the kubelet's context ----------------------------------------------------
out=$(ctl node stage --volume-id v1 --staging-path "$stage" -c "targetPortal=$host:$port" \
  -c "iqn=$iqn" -c lun=1 -c "expectedSerial=$serial" --secrets-file /root/secrets/chap.yaml \
  --mount-flag "context=\"$context\"") || fail "stage v1 with context=: $out"
opts=$(super_options "$stage")
[[ $opts == *"context=\"$context\""* ]] || fail "staging mount's options lack the context: '$opts'"
echo data >"$stage/file"
mkdir "$stage/dir"
[[ $(label "$stage/file") == "$context" && $(label "$stage/dir") == "$context" ]] ||
  fail "files on the staging mount are labelled '$(label "$stage/file")', not $context"
ok "stage v1: the staging mount has context=\"$context\" ($opts), and its files that label"

# --- 2. publish with the same context -------------------------------------------------------
out=$(ctl node publish --volume-id v1 --staging-path "$stage" --target-path "$pub" \
  --mount-flag "context=\"$context\"") || fail "publish v1 with its context: $out"
[[ $(<"$pub/file") == data ]] || fail "the publish does not show the staged file"
echo more >"$pub/written-through-publish"
[[ $(label "$pub/file") == "$context" && $(label "$pub/written-through-publish") == "$context" ]] ||
  fail "files through the publish are labelled '$(label "$pub/file")', not $context"
ok "publish v1 with the same context: files through the bind are labelled $context"

# --- 3. another context is refused ----------------------------------------------------------
rc=0
out=$(ctl node publish --volume-id v1 --staging-path "$stage" --target-path "$pub2" \
  --mount-flag "context=\"$other\"") || rc=$?
[[ $rc != 0 ]] || fail "a publish with context $other of a volume staged with $context succeeded"
grep -q FAILED_PRECONDITION <<<"$out" || fail "publish with another context: $out"
grep -q "one context" <<<"$out" || fail "the refusal does not say why: $out"
! grep -qE " $pub2 " /proc/self/mountinfo || fail "something is mounted at $pub2"
[[ $(label "$pub/file") == "$context" && $(<"$pub/file") == data ]] || fail "the first publish changed"
ok "publish with context $other: FAILED_PRECONDITION ('one context'), nothing mounted"
rc=0
out=$(ctl node publish --volume-id v1 --staging-path "$stage" --target-path "$pub2") || rc=$?
[[ $rc != 0 ]] && grep -q FAILED_PRECONDITION <<<"$out" ||
  fail "a publish without a context of a volume staged with one: status $rc: $out"
! grep -qE " $pub2 " /proc/self/mountinfo || fail "something is mounted at $pub2"
ok "publish without a context: FAILED_PRECONDITION, nothing mounted"

# --- 4. unpublish, unstage, nothing left ----------------------------------------------------
ctl node unpublish --volume-id v1 --target-path "$pub" >/dev/null || fail "unpublish v1"
ctl node unpublish --volume-id v1 --target-path "$pub2" >/dev/null || fail "unpublish v1 at $pub2"
ctl node unstage --volume-id v1 --staging-path "$stage" >/dev/null || fail "unstage v1"
! grep -qE ' /var/lib/sh-' /proc/self/mountinfo || fail "mounts left: $(grep ' /var/lib/sh-' /proc/self/mountinfo)"
sessions=$(ls /sys/class/iscsi_session 2>/dev/null | wc -l)
((sessions == 0)) || fail "$sessions iSCSI session(s) left"
! ls /sys/block | grep -q '^sd' || fail "disks left: $(ls /sys/block | grep '^sd')"
kill -TERM "$shpid"
wait "$shpid" || fail "stagehand exited with status $? on SIGTERM"
shpid=""
ok "unpublish + unstage v1: no mount, session or disk left; stagehand stopped"
all_passed
