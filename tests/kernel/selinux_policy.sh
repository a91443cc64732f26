#!/bin/bash
# Compiles the minimal SELinux policy the kernel guest's SELinux test loads (selinux_test.sh):
# just enough for the kernel to accept the kubelet's mount option
#   context="system_u:object_r:container_file_t:s0:c15,c25"
# (MLS: sensitivity s0, categories c0..c1023; users, roles and types for that context and the
# kernel's initial SIDs). Meant for permissive mode (enforcing=0): almost no allow rules, and
# what the policy does not declare is allowed (handleunknown allow).
#
#   tests/kernel/selinux_policy.sh OUT     writes the binary policy (version 33) to OUT
#
# Needs secilc (Debian package secilc). Version 33 is what Debian 12's kernel (6.1) reports as
# its highest and what secilc 3.4 writes at most; newer kernels load it too.
set -euo pipefail
out=${1:?usage: selinux_policy.sh OUT}
command -v secilc >/dev/null || {
  echo "selinux_policy.sh: secilc not found (apt-get install secilc)" >&2
  exit 2
}
cil=$(mktemp /tmp/sh-selinux.XXXXXX.cil)
trap 'rm -f "$cil"' EXIT
cats() { # cats FMT: c0..c1023, 16 per line (CIL has no loops: every category is listed)
  local i j line
  for ((i = 0; i < 1024; i += 16)); do
    line=""
    for ((j = 0; j < 16; j++)); do line+=$(printf "$1" "c$((i + j))"); done
    echo "${line% }"
  done
}
{
cat <<'EOF'
; Minimal MLS SELinux policy (CIL) whose only job is to let the kernel accept
;   context="system_u:object_r:container_file_t:s0:c15,c25"
; as a mount option. Meant for permissive mode (enforcing=0): there are (almost) no allow rules,
; and everything the policy does not declare is allowed (handleunknown allow).

; --- global settings -----------------------------------------------------------------------------
; Classes/permissions the kernel knows but this policy does not declare are allowed.
(handleunknown allow)
; MLS on (secilc -M true says the same): contexts carry a level/range such as s0:c15,c25.
(mls true)

; --- classes ---------------------------------------------------------------------------------------
; The kernel refuses a policy without class "process" having the permissions "transition" and
; "dyntransition" (policydb_read). Every other class is left undeclared (handleunknown allow).
(class process (transition dyntransition))
(classorder (process))

; --- initial SIDs ------------------------------------------------------------------------------------
; The kernel identifies initial SIDs by position (1 = kernel, 2 = security, ...), so sidorder must
; list all 27 names of the kernel's initial_sid_to_string table in order, even those it no longer
; uses. Only SIDs with a sidcontext are written into the policy; the kernel ignores the others.
(sid kernel) (sid security) (sid unlabeled) (sid fs) (sid file) (sid file_labels) (sid init)
(sid any_socket) (sid port) (sid netif) (sid netmsg) (sid node) (sid igmp_packet)
(sid icmp_socket) (sid tcp_socket) (sid sysctl_modprobe) (sid sysctl) (sid sysctl_fs)
(sid sysctl_kernel) (sid sysctl_net) (sid sysctl_net_unix) (sid sysctl_vm) (sid sysctl_dev)
(sid kmod) (sid policy) (sid scmp_packet) (sid devnull)
(sidorder (kernel security unlabeled fs file file_labels init any_socket port netif netmsg node
           igmp_packet icmp_socket tcp_socket sysctl_modprobe sysctl sysctl_fs sysctl_kernel
           sysctl_net sysctl_net_unix sysctl_vm sysctl_dev kmod policy scmp_packet devnull))

; --- MLS: one sensitivity s0, categories c0..c1023 -----------------------------------------------------
(sensitivity s0)
(sensitivityorder (s0))
EOF
cats '(category %s) '
echo '(categoryorder ('
cats '%s '
echo '))'
cat <<'EOF'
; All categories are valid with s0, so s0:c15,c25 (and s0:c0.c1023) are valid levels.
(sensitivitycategory s0 (range c0 c1023))
(level systemlow (s0))
(level systemhigh (s0 (range c0 c1023)))
(levelrange low_high (systemlow systemhigh))

; --- types ---------------------------------------------------------------------------------------------
(type kernel_t)          ; kernel threads and, without transitions, every process (init, the test)
(type security_t)        ; the security server and selinuxfs
(type unlabeled_t)       ; objects whose label is invalid or missing; network initial SIDs
(type file_t)            ; files on an xattr file system that have no security.selinux
(type fs_t)              ; superblocks of xattr file systems (ext4, xfs)
(type proc_t)            ; procfs
(type sysfs_t)           ; sysfs
(type tmpfs_t)           ; tmpfs and devtmpfs
(type container_file_t)  ; the type the context= mount option names

; --- roles ---------------------------------------------------------------------------------------------
; object_r, the role of objects, must be declared in CIL (secilc 3.4); the kernel checks neither
; role/type nor user/role for object_r, but CIL does: object_r gets every object type.
(role object_r)
(role system_r)
(roletype system_r kernel_t)
(typeattribute object_types)
(typeattributeset object_types
    (security_t unlabeled_t file_t fs_t proc_t sysfs_t tmpfs_t container_file_t))
(roletype object_r object_types)

; --- users ---------------------------------------------------------------------------------------------
; system_u may hold s0-s0:c0.c1023. The kernel requires a context's range to lie within its user's
; range, except for object_r contexts (such as the mount's): the kernel SID's s0-s0:c0.c1023 needs it.
(user system_u)
(userrole system_u system_r)
(userrole system_u object_r)
(userlevel system_u systemlow)
(userrange system_u low_high)

; --- contexts -------------------------------------------------------------------------------------------
(context kernel_ctx  (system_u system_r kernel_t low_high))
(context object_ctx  (system_u object_r unlabeled_t (systemlow systemlow)))
; Initial SIDs the kernel uses (6.1: kernel security unlabeled file any_socket port netif netmsg
; node devnull; newer kernels also init). The others keep their position in sidorder only.
(sidcontext kernel     kernel_ctx)
(sidcontext init       kernel_ctx)
(sidcontext security   (system_u object_r security_t (systemlow systemlow)))
(sidcontext unlabeled  object_ctx)
(sidcontext file       (system_u object_r file_t (systemlow systemlow)))
(sidcontext any_socket object_ctx)
(sidcontext port       object_ctx)
(sidcontext netif      object_ctx)
(sidcontext netmsg     object_ctx)
(sidcontext node       object_ctx)
(sidcontext devnull    (system_u object_r tmpfs_t (systemlow systemlow)))

; --- file system labeling ------------------------------------------------------------------------------
; ext4/xfs: labels come from the security.selinux xattr (the superblock gets fs_t). A context=
; mount overrides this: every inode of that superblock gets the mount option's context.
(fsuse xattr ext4 (system_u object_r fs_t (systemlow systemlow)))
(fsuse xattr xfs  (system_u object_r fs_t (systemlow systemlow)))
; tmpfs/devtmpfs: new inodes get the creating process' user and level, object_r and tmpfs_t.
(fsuse trans tmpfs    (system_u object_r tmpfs_t (systemlow systemlow)))
(fsuse trans devtmpfs (system_u object_r tmpfs_t (systemlow systemlow)))
; Pseudo file systems without xattrs: one label for the whole tree.
(genfscon proc      "/" (system_u object_r proc_t (systemlow systemlow)))
(genfscon sysfs     "/" (system_u object_r sysfs_t (systemlow systemlow)))
(genfscon selinuxfs "/" (system_u object_r security_t (systemlow systemlow)))

; --- rules -----------------------------------------------------------------------------------------------
; None are needed in permissive mode, but secilc refuses a policy without any allow rule.
(allow kernel_t self (process (transition dyntransition)))
EOF
} >"$cil"
secilc -M true -c 33 -o "$out" -f /dev/null "$cil"
