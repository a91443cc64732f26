#!/usr/bin/env bash
# Runs a test script inside a QEMU guest booted from Debian's own kernel package, with the kernel
# iSCSI initiator (iscsi_tcp + open-iscsi), systemd-udevd, multipath-tools, e2fsprogs, xfsprogs and
# util-linux copied in from this host. The host kernel has no iSCSI initiator (and cannot load
# modules), so kernel-transport tests run in this guest. See tests/kernel/README.md.
#
#   guest.sh run   --test SCRIPT [options]   boot the guest, run SCRIPT as /test.sh, exit with its status
#   guest.sh build [options]                 only fetch the kernel and build the initramfs (warm the cache)
#
# Options:
#   --cache DIR            cache for the kernel .deb, its unpacked tree and the initramfs layers
#                          (default $STAGEHAND_GUEST_CACHE or ~/.cache/stagehand-kernel-guest)
#   --include PATH...      host files or directories copied into the guest at the same absolute
#                          path, ELF files with their shared libraries (repeatable)
#   --test SCRIPT          the script to run in the guest (it becomes /test.sh; any interpreter
#                          in the guest works: bash, busybox sh); check.sh of this directory
#                          comes along as /check.sh (the helpers the bash test scripts share)
#   --append "k=v ..."     extra kernel parameters; sh.NAME=VALUE reaches the test as SH_NAME=VALUE
#   --multipathd           start multipathd in the guest before the test
#   --drive FILE           attach FILE (a raw disk image) as a virtio disk, /dev/vda, /dev/vdb, ...
#                          in order (repeatable; copy-on-write: the guest's writes are discarded;
#                          loads virtio_blk)
#   --module NAME          load an extra kernel module at boot (with its dependencies; repeatable)
#   --no-strip             copy ELF includes as they are (default: without debug info)
#   --timeout SECS         outer timeout for QEMU (default 180)
#   --memory MIB           guest memory (default 768)
#   --log FILE             keep the console log there (it is always streamed to stdout)
#   --kernel-package PKG   kernel metapackage (default linux-image-cloud-amd64)
#
# Exit status of `run`: the test script's, 124 on timeout, 125 when the guest never reported one.
# Harness messages and phase timings go to stderr, prefixed with "guest.sh:".
set -euo pipefail
shopt -s lastpipe
export LC_ALL=C
export PATH="/usr/sbin:/usr/bin:/sbin:/bin:${PATH}"

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly HERE
readonly FORMAT_VERSION=1

# Modules. Required and eager ones are loaded by /init (modprobe pulls in dependencies and soft
# dependencies); a required one missing from the kernel is an error, eager ones are skipped when the
# kernel builds them in or lacks them (the cloud kernel builds in ext4 and crc32c; the generic one
# needs crc32c_generic and crct10dif loaded explicitly). On-demand ones are in the initramfs for the
# kernel's request_module() (mount -t xfs, multipath path selectors) or a test's modprobe: loading
# a module costs time under TCG.
readonly REQUIRED_MODULES=(virtio_pci virtio_net iscsi_tcp sd_mod dm_multipath)
readonly EAGER_MODULES=(crc32c_generic crc32c_intel crct10dif_generic crct10dif_pclmul crc_t10dif)
readonly ON_DEMAND_MODULES=(ext4 libcrc32c xfs sg dm_round_robin dm_service_time dm_queue_length
  scsi_dh_alua scsi_dh_emc scsi_dh_rdac fuse loop)

# Host programs copied into the guest (looked up in PATH), then optional ones.
readonly REQUIRED_TOOLS=(busybox bash kmod modprobe insmod rmmod lsmod modinfo
  iscsid iscsiadm mke2fs mkfs.ext4 e2fsck fsck.ext4 resize2fs tune2fs dumpe2fs
  mkfs.xfs xfs_growfs xfs_repair xfs_db xfs_io blkid mount umount lsblk findmnt blockdev wipefs
  partx udevadm multipathd multipath kpartx dmsetup)
readonly OPTIONAL_TOOLS=(xfs_info xfs_spaceman xfs_admin mpathpersist losetup sfdisk fstrim
  sg_inq sg_vpd sg_readcap sg_turs lsscsi)
readonly REQUIRED_FILES=(/lib/systemd/systemd-udevd /lib/udev/scsi_id)
readonly OPTIONAL_FILES=(/lib/udev/kpartx_id /etc/mke2fs.conf)
# udev rules enough for /dev/disk/by-{path,id,uuid}, device-mapper and multipath.
readonly UDEV_RULES=(50-udev-default 55-dm 56-dm-mpath 56-dm-parts 60-block 60-persistent-storage
  60-persistent-storage-dm 60-multipath 60-kpartx 68-del-part-nodes 80-drivers 95-dm-notify)
readonly SG3_UDEV_RULES=(55-scsi-sg3_id 58-scsi-sg3_symlink)

cache=${STAGEHAND_GUEST_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/stagehand-kernel-guest}
kernel_pkg=linux-image-cloud-amd64
includes=()
extra_modules=()
drives=()
test_script=""
append=""
timeout_s=180
memory=768
multipathd=0
log_file=""
strip=1

log() { printf 'guest.sh: %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 125
}
usage() {
  sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
  exit "${1:-0}"
}

# --- timing ----------------------------------------------------------------------------------
now_us() { printf '%s' "${EPOCHREALTIME/./}"; }
fmt_us() { printf '%d.%02d' $(($1 / 1000000)) $((($1 % 1000000) / 10000)); }
start_us=$(now_us)
phase_us=$start_us
# phase NAME [END_US]: the phase that started at the previous phase's end ends now (or at END_US).
phase() {
  local end=${2:-$(now_us)} line
  line=$(printf 'phase %-16s %6ss' "$1" "$(fmt_us $((end - phase_us)))")
  log "$line"
  phase_us=$end
}

# --- work dir and cleanup ----------------------------------------------------------------------
work=""
qemu_pid=""
lock_fd=""
# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
  local rc=$?
  if [[ -n $qemu_pid ]] && kill -0 "$qemu_pid" 2>/dev/null; then
    kill -TERM "$qemu_pid" 2>/dev/null || true
    wait "$qemu_pid" 2>/dev/null || true
  fi
  [[ -z $work ]] || rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- arguments --------------------------------------------------------------------------------
[[ $# -gt 0 ]] || usage 2
cmd=$1
shift
case $cmd in
  run | build) ;;
  -h | --help | help) usage 0 ;;
  *)
    log "unknown subcommand '$cmd'"
    usage 2
    ;;
esac
abspath() {
  if [[ $1 == /* ]]; then printf '%s' "$1"; else printf '%s/%s' "$PWD" "$1"; fi
}
while [[ $# -gt 0 ]]; do
  case $1 in
    --cache) cache=$2 && shift 2 ;;
    --include)
      shift
      [[ $# -gt 0 && $1 != --* ]] || die "--include needs a path"
      while [[ $# -gt 0 && $1 != --* ]]; do
        includes+=("$(abspath "$1")")
        shift
      done
      ;;
    --test) test_script=$2 && shift 2 ;;
    --append) append="${append:+$append }$2" && shift 2 ;;
    --multipathd) multipathd=1 && shift ;;
    --drive) drives+=("$(abspath "$2")") && extra_modules+=(virtio_blk) && shift 2 ;;
    --module) extra_modules+=("$2") && shift 2 ;;
    --no-strip) strip=0 && shift ;;
    --timeout) timeout_s=$2 && shift 2 ;;
    --memory) memory=$2 && shift 2 ;;
    --log) log_file=$(abspath "$2") && shift 2 ;;
    --kernel-package) kernel_pkg=$2 && shift 2 ;;
    -h | --help) usage 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[[ $timeout_s =~ ^[0-9]+$ ]] || die "--timeout needs whole seconds"
[[ $memory =~ ^[0-9]+$ ]] || die "--memory needs MiB"
if [[ $cmd == run ]]; then
  [[ -n $test_script ]] || die "run needs --test SCRIPT"
  [[ -f $test_script ]] || die "no such test script: $test_script"
  command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 missing (apt-get install qemu-system-x86)"
fi
for p in "${includes[@]}"; do
  [[ -e $p ]] || die "--include: no such file or directory: $p"
done
for p in "${drives[@]}"; do
  [[ -f $p ]] || die "--drive: no such file: $p"
done

mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
work=$(mktemp -d /tmp/shg.XXXXXX)
# One builder at a time per cache; held until the initrd for this run is assembled.
exec {lock_fd}>"$cache/.lock"
flock "$lock_fd"

# --- kernel ------------------------------------------------------------------------------------
# Prints "IMAGE-PACKAGE VERSION" for --kernel-package, remembered per state of apt's package lists:
# apt-cache takes seconds where apt keeps no binary cache (Debian's container images).
resolve_image() {
  local memo=$cache/kernel/resolved-$kernel_pkg stamp s out pkg="" ver=""
  stamp=$(stat -c '%n %s %Y' /var/lib/apt/lists/*_Packages* 2>/dev/null | sha256sum | cut -c1-16)
  if [[ -f $memo ]] && read -r s pkg ver <"$memo" && [[ $s == "$stamp" && -n $ver ]]; then
    printf '%s %s\n' "$pkg" "$ver"
    return 0
  fi
  out=$(apt-cache show --no-all-versions "$kernel_pkg" 2>/dev/null) || return 0
  if [[ $kernel_pkg == linux-image-[0-9]* ]]; then
    pkg=$kernel_pkg
    ver=$(sed -n 's/^Version: //p' <<<"$out" | head -n1)
  else
    # The metapackage pins its image: "Depends: linux-image-6.1.0-57-cloud-amd64 (= 6.1.192-3)".
    read -r pkg ver < <(sed -n 's/^Depends: .*\(linux-image-[0-9][^ ,]*\) (= \([^)]*\)).*/\1 \2/p' \
      <<<"$out" | head -n1) || true
  fi
  [[ -n $pkg && -n $ver ]] || return 0
  printf '%s %s %s\n' "$stamp" "$pkg" "$ver" >"$memo"
  printf '%s %s\n' "$pkg" "$ver"
}

# Sets kroot (unpacked package tree), kver and vmlinuz.
fetch_kernel() {
  local debs=$cache/debs image_pkg="" ver="" deb="" kdir tmp
  mkdir -p "$debs" "$cache/kernel"
  read -r image_pkg ver < <(resolve_image) || true
  if [[ -n $ver ]]; then
    deb=$debs/${image_pkg}_${ver//:/%3a}_amd64.deb
    if [[ ! -f $deb ]]; then
      log "downloading $image_pkg $ver"
      tmp=$(mktemp -d "$debs/.dl.XXXXXX")
      (cd "$tmp" && apt-get -q -o APT::Sandbox::User=root download "$image_pkg=$ver" >&2) ||
        die "apt-get download $image_pkg=$ver failed"
      mv "$tmp"/*.deb "$deb"
      rm -rf "$tmp"
    fi
  else
    # No package lists (apt-get update never ran): fall back to the newest cached kernel.
    deb=$(find "$debs" -maxdepth 1 -name 'linux-image-*.deb' -printf '%T@ %p\n' |
      sort -rn | head -n1 | cut -d' ' -f2-) || true
    [[ -n $deb ]] || die "cannot resolve $kernel_pkg (run apt-get update) and no cached kernel"
    log "apt cannot resolve $kernel_pkg; using cached $(basename "$deb")"
  fi
  kdir=$cache/kernel/$(basename "$deb" .deb)
  if [[ ! -f $kdir/complete ]]; then
    log "unpacking $(basename "$deb")"
    tmp=$(mktemp -d "$cache/kernel/.unpack.XXXXXX")
    chmod 0755 "$tmp"
    dpkg -x "$deb" "$tmp/root"
    kver=$(find "$tmp/root/lib/modules" -mindepth 1 -maxdepth 1 -printf '%f\n' | head -n1)
    [[ -n $kver && -f $tmp/root/boot/vmlinuz-$kver ]] || die "$deb has no kernel image"
    depmod -b "$tmp/root" "$kver"
    printf '%s\n' "$kver" >"$tmp/kver"
    touch "$tmp/complete"
    rm -rf "$kdir"
    mv "$tmp" "$kdir"
    # Keep only this kernel and the previous one.
    find "$cache/kernel" -mindepth 1 -maxdepth 1 -type d ! -name '.*' -printf '%T@ %p\n' |
      sort -rn | tail -n +3 | cut -d' ' -f2- | xargs -r rm -rf
    find "$debs" -maxdepth 1 -name '*.deb' -printf '%T@ %p\n' |
      sort -rn | tail -n +3 | cut -d' ' -f2- | xargs -r rm -f
  fi
  kroot=$kdir/root
  kver=$(<"$kdir/kver")
  vmlinuz=$kroot/boot/vmlinuz-$kver
}


is_elf() {
  local magic=""
  [[ -f $1 ]] || return 1
  read -r -n 4 magic <"$1" 2>/dev/null || true
  [[ $magic == $'\x7fELF' ]]
}

# Prints the absolute paths of the shared libraries (and the dynamic loader) of the given files,
# as ldd reports them. This runs what ldd runs: the dynamic loader's --verify (0: executable,
# 2: shared object, 1: static or not dynamic) and --list, without ldd's shell wrapper, which makes
# it ten times slower. Lines look like "name => /path (addr)", "/path (addr)" for the loader and
# "name (addr)" for the vdso; they are parsed field by field, without awk: mawk has no \s, and an
# awk regexp using it silently drops the loader.
readonly RTLD=/lib64/ld-linux-x86-64.so.2
elf_libs() {
  local f rc out a b c rest
  for f in "$@"; do
    is_elf "$f" || continue
    rc=0
    "$RTLD" --verify "$f" >/dev/null 2>&1 || rc=$?
    [[ $rc == 0 || $rc == 2 ]] || continue
    out=$("$RTLD" --list "$f" 2>&1) || die "ldd $f: $out"
    while read -r a b c rest; do
      if [[ $b == "=>" ]]; then
        [[ $c == /* ]] || die "ldd $f: $a => $c $rest"
        printf '%s\n' "$c"
      elif [[ $a == /* ]]; then
        printf '%s\n' "$a"
      fi
    done <<<"$out"
  done
}

# add_file SET PATH: records PATH in the associative array named SET.
add_file() {
  # shellcheck disable=SC2178 # a nameref to an associative array
  local -n files=$1
  files[$2]=1
}

# add_libs SET: adds the shared libraries of every ELF file in SET (ldd lists them transitively).
add_libs() {
  # shellcheck disable=SC2178 # a nameref to an associative array
  local -n files=$1
  local lib
  ((${#files[@]} > 0)) || return 0
  elf_libs "${!files[@]}" | sort -u | while IFS= read -r lib; do
    files["$lib"]=1
  done
}

# The programs and files of the base layer, without their libraries (cheap: the cache key).
collect_base() {
  local t p r
  for t in "${REQUIRED_TOOLS[@]}"; do
    p=$(type -P "$t") || die "required program '$t' not found (see tests/kernel/README.md for packages)"
    add_file base_files "$p"
  done
  for t in "${OPTIONAL_TOOLS[@]}"; do
    if p=$(type -P "$t"); then add_file base_files "$p"; fi
  done
  for p in "${REQUIRED_FILES[@]}"; do
    [[ -e $p ]] || die "required file $p not found"
    add_file base_files "$p"
  done
  for p in "${OPTIONAL_FILES[@]}"; do
    if [[ -e $p ]]; then add_file base_files "$p"; fi
  done
  # Plugins that multipathd and multipath dlopen(), and libgcc_s that glibc dlopen()s for
  # pthread_cancel (multipathd cancels its threads).
  for p in /lib/multipath/*.so /usr/lib/x86_64-linux-gnu/libgcc_s.so.1; do
    if [[ -e $p ]]; then add_file base_files "$p"; fi
  done
  for r in "${UDEV_RULES[@]}"; do
    p=/lib/udev/rules.d/$r.rules
    if [[ -e $p ]]; then add_file base_files "$p"; fi
  done
  if type -P sg_inq >/dev/null; then
    for r in "${SG3_UDEV_RULES[@]}"; do
      p=/lib/udev/rules.d/$r.rules
      if [[ -e $p ]]; then add_file base_files "$p"; fi
    done
  fi
}

collect_includes() {
  local p f
  for p in "${includes[@]}"; do
    if [[ -d $p && ! -L $p ]]; then
      while IFS= read -r -d '' f; do
        add_file include_files "$f"
      done < <(find "$p" \( -type f -o -type l \) -print0)
    else
      add_file include_files "$p"
    fi
  done
}

# Resolves the module lists against the unpacked kernel: fills module_files (every module file
# the guest gets, relative to lib/modules/KVER), load_modules (what /init must load) and
# load_optional (what it tries to: crc32c_intel needs SSE 4.2, for instance).
resolve_modules() {
  local m out kind path _ class
  local -A seen=()
  module_files=()
  load_modules=()
  load_optional=()
  for m in "${REQUIRED_MODULES[@]}" "${extra_modules[@]}" eager: "${EAGER_MODULES[@]}" \
    on-demand: "${ON_DEMAND_MODULES[@]}"; do
    case $m in
      eager: | on-demand:)
        class=$m
        continue
        ;;
    esac
    if ! out=$(modprobe -d "$kroot" -S "$kver" --show-depends "$m" 2>/dev/null); then
      [[ -n ${class:-} ]] || die "kernel $kver has no module $m"
      continue
    fi
    local loads=0
    while read -r kind path _; do
      [[ $kind == insmod ]] || continue
      loads=1
      path=${path#"$kroot/lib/modules/$kver/"}
      [[ -n ${seen[$path]+x} ]] || module_files+=("$path")
      seen[$path]=1
    done <<<"$out"
    [[ $loads == 1 ]] || continue
    case ${class:-} in
      "") load_modules+=("$m") ;;
      eager:) load_optional+=("$m") ;;
    esac
  done
}

# stat lines (path, size, mtime) of a set of files, sorted: cache key material.
stat_lines() {
  # shellcheck disable=SC2178 # a nameref to an associative array
  local -n files=$1
  ((${#files[@]} == 0)) || printf "%s\0" "${!files[@]}" | sort -z | xargs -0 stat -L -c '%n %s %Y'
}

# stage_files STAGE SET: copies the files in SET to the same paths under STAGE, symlinks as
# symlinks (with what they point to). Copies go to canonical directories (cp --parents cannot copy
# through a symlinked directory such as a merged-/usr /lib); symlinked directories on the way are
# recreated as symlinks. Few processes: forks are what makes staging slow.
stage_files() {
  local stage=$1 p d i t
  # shellcheck disable=SC2178 # a nameref to an associative array
  local -n files=$2
  local -A all=() dirmap=()
  local -a todo=("${!files[@]}") links=() targets=() dirs=() canon=() list=()
  while ((${#todo[@]} > 0)); do
    links=()
    for p in "${todo[@]}"; do
      [[ -z ${all[$p]+x} ]] || continue
      all[$p]=1
      if [[ -L $p ]]; then links+=("$p"); fi
    done
    todo=()
    ((${#links[@]} > 0)) || break
    mapfile -t targets < <(readlink "${links[@]}")
    for i in "${!links[@]}"; do
      t=${targets[i]}
      [[ $t == /* ]] || t=${links[i]%/*}/$t
      todo+=("$t")
    done
  done
  for p in "${!all[@]}"; do
    d=${p%/*}
    dirmap[${d:-/}]=""
  done
  dirs=("${!dirmap[@]}")
  mapfile -t canon < <(realpath -e "${dirs[@]}")
  for i in "${!dirs[@]}"; do
    dirmap[${dirs[i]}]=${canon[i]}
    [[ ${dirs[i]} == "${canon[i]}" ]] || mirror_dir_links "$stage" "${dirs[i]}"
  done
  for p in "${!all[@]}"; do
    d=${p%/*}
    d=${dirmap[${d:-/}]}
    list+=("${d%/}/${p##*/}")
  done
  # From / with relative names: coreutils 9.1's cp --parents --preserve fails on parent
  # directories given as absolute names from another working directory.
  (cd / && printf '%s\0' "${list[@]#/}" | sort -zu |
    xargs -0 cp -P --preserve=mode,timestamps --parents -t "$stage")
}

# mirror_dir_links STAGE DIR: recreates under STAGE the symlinks among DIR's ancestors.
mirror_dir_links() {
  local stage=$1 prefix="" part
  local -a parts
  IFS=/ read -r -a parts <<<"${2#/}"
  for part in "${parts[@]}"; do
    prefix=$prefix/$part
    if [[ -L $prefix && ! -e $stage$prefix && ! -L $stage$prefix ]]; then
      mkdir -p "$stage${prefix%/*}"
      ln -s "$(readlink "$prefix")" "$stage$prefix"
    fi
  done
}

make_skeleton() {
  local stage=$1 d
  mkdir -p "$stage/usr"
  # Mirror the host's merged /usr so that every path ldd reports resolves the same way.
  for d in bin sbin lib lib64; do
    if [[ -L /$d ]]; then
      mkdir -p "$stage/$(readlink -f "/$d")"
      ln -s "$(readlink "/$d")" "$stage/$d"
    else
      mkdir -p "$stage/$d"
    fi
  done
  mkdir -p "$stage"/{dev,proc,sys,run,tmp,mnt,root,etc,var/lib,var/tmp}
}

write_configs() {
  local stage=$1
  mkdir -p "$stage/etc/iscsi/nodes" "$stage/etc/iscsi/send_targets" "$stage/etc/multipath" \
    "$stage/etc/stagehand-guest"
  ln -s ../run "$stage/var/run"
  ln -s ../run/lock "$stage/var/lock"
  ln -s ../proc/self/mounts "$stage/etc/mtab"
  mknod -m 0600 "$stage/dev/console" c 5 1 2>/dev/null || true
  printf '%s\n' "${load_modules[@]}" >"$stage/etc/stagehand-guest/modules"
  printf '%s\n' "${load_optional[@]}" >"$stage/etc/stagehand-guest/modules.optional"
  printf 'root:x:0:0:root:/root:/bin/bash\n' >"$stage/etc/passwd"
  printf '%s\n' root:x:0: tty:x:5: disk:x:6: kmem:x:15: dialout:x:20: cdrom:x:24: tape:x:26: \
    audio:x:29: video:x:44: input:x:101: kvm:x:102: render:x:103: sgx:x:104: >"$stage/etc/group"
  printf '127.0.0.1 localhost\n10.0.2.2 host\n' >"$stage/etc/hosts"
  # iscsid is started by /init, never by iscsiadm; nodes are logged in and scanned by the tests.
  cat >"$stage/etc/iscsi/iscsid.conf" <<'EOF'
iscsid.startup = /bin/true
node.startup = manual
node.session.scan = manual
node.session.timeo.replacement_timeout = 120
node.conn[0].timeo.login_timeout = 15
node.conn[0].timeo.logout_timeout = 15
node.conn[0].timeo.noop_out_interval = 5
node.conn[0].timeo.noop_out_timeout = 5
node.session.initial_login_retry_max = 8
EOF
  # Maps only for WWIDs listed in /etc/multipath/wwids (multipath -a), named by WWID.
  cat >"$stage/etc/multipath.conf" <<'EOF'
defaults {
    user_friendly_names no
    find_multipaths strict
    enable_foreign "^$"
}
blacklist {
    devnode "^(ram|loop|fd|md|dm-|sr|scd|st|vd|zram)[0-9]*"
}
EOF
  install -m 0755 "$HERE/init.sh" "$stage/init"
}

make_cpio() { # STAGE OUT
  (cd "$1" && find . -mindepth 1 -print0 | sort -z | cpio --null -o -H newc -R 0:0 --quiet) >"$2.tmp"
  mv "$2.tmp" "$2"
}

# Keeps the newest N layers matching a glob in the initramfs cache (with their .files lists).
prune() {
  local f
  find "$cache/initramfs" -maxdepth 1 -name "$1" -printf '%T@ %p\n' | sort -rn |
    tail -n "+$(($2 + 1))" | cut -d' ' -f2- | while IFS= read -r f; do
    rm -f "$f" "$f.files"
  done
}

build_initramfs() {
  local key stage p dpkg_stamp
  mkdir -p "$cache/initramfs"
  declare -gA base_files=() include_files=()
  # Libraries are not listed in the keys; package upgrades show in dpkg's status file.
  dpkg_stamp=$(stat -c '%Y' /var/lib/dpkg/status 2>/dev/null || echo none)
  collect_base
  key=$({
    printf 'format %s\nkernel %s %s\ndpkg %s\n' "$FORMAT_VERSION" "$kver" "$kroot" "$dpkg_stamp"
    sha256sum "$HERE/guest.sh" "$HERE/init.sh"
    printf 'module %s\n' "${REQUIRED_MODULES[@]}" "${extra_modules[@]}" eager \
      "${EAGER_MODULES[@]}" on-demand "${ON_DEMAND_MODULES[@]}"
    stat_lines base_files
  } | sha256sum | cut -c1-16)
  base_cpio=$cache/initramfs/base-$kver-$key.cpio
  if [[ -f $base_cpio ]]; then
    log "initramfs base layer cached: $(basename "$base_cpio")"
  else
    [[ $EUID == 0 ]] || die "building the initramfs needs root (chroot, device node); run as root"
    # The host's busybox must be the static one (busybox-static): it is PID 1's shell.
    [[ -z $(elf_libs "$(type -P busybox)") ]] || die "busybox is dynamically linked; install busybox-static"
    add_libs base_files
    resolve_modules
    log "building initramfs base layer (${#base_files[@]} files, ${#module_files[@]} modules)"
    stage=$work/base
    make_skeleton "$stage"
    stage_files "$stage" base_files
    # busybox applets for whatever the copied programs do not provide: `busybox --install -s` in
    # the stage links every applet path that does not exist yet (it never replaces a file, so it
    # cannot link over the busybox binary, which `busybox --list` also names).
    p=$(type -P busybox)
    chroot "$stage" "$p" --install -s
    mkdir -p "$stage/lib/modules/$kver"
    for p in modules.order modules.builtin modules.builtin.modinfo; do
      if [[ -f $kroot/lib/modules/$kver/$p ]]; then module_files+=("$p"); fi
    done
    (cd "$kroot/lib/modules/$kver" && cp --parents -t "$stage/lib/modules/$kver" "${module_files[@]}")
    depmod -b "$stage" "$kver"
    write_configs "$stage"
    make_cpio "$stage" "$base_cpio"
    printf '%s\n' "${!base_files[@]}" | sort >"$base_cpio.files"
    rm -rf "$stage"
    prune 'base-*.cpio' 2
  fi
  inc_cpio=""
  if ((${#includes[@]} > 0)); then
    collect_includes
    key=$({
      printf 'format %s\ndpkg %s\nstrip %s\nbase %s\n' "$FORMAT_VERSION" "$dpkg_stamp" "$strip" \
        "$(basename "$base_cpio")"
      stat_lines include_files
    } | sha256sum | cut -c1-16)
    inc_cpio=$cache/initramfs/include-$key.cpio
    if [[ -f $inc_cpio ]]; then
      log "initramfs include layer cached: $(basename "$inc_cpio")"
    else
      local -a top=("${!include_files[@]}")
      add_libs include_files
      # What the base layer has already (libc, libcrypto, ...) need not come twice.
      if [[ -f $base_cpio.files ]]; then
        while IFS= read -r p; do unset "include_files[$p]"; done <"$base_cpio.files"
        for p in "${top[@]}"; do include_files[$p]=1; done
      fi
      log "building initramfs include layer (${#include_files[@]} files)"
      stage=$work/include
      make_skeleton "$stage"
      stage_files "$stage" include_files
      # Debug info is most of an unstripped build's size and only slows the guest's unpacking.
      if [[ $strip == 1 ]] && command -v strip >/dev/null; then
        mapfile -t top < <(realpath -e "${top[@]}")
        for p in "${top[@]}"; do
          if is_elf "$p"; then strip --strip-debug "$stage$p"; fi
        done
      fi
      make_cpio "$stage" "$inc_cpio"
      rm -rf "$stage"
      prune 'include-*.cpio' 2
    fi
  fi
}

# --- run ----------------------------------------------------------------------------------------
fetch_kernel
phase kernel
build_initramfs
phase initramfs
if [[ $cmd == build ]]; then
  log "kernel:    $vmlinuz"
  log "initramfs: $base_cpio${inc_cpio:+ + $inc_cpio}"
  exit 0
fi

# The test script goes into a small last layer (cpio archives concatenate).
mkdir -p "$work/test"
install -m 0755 "$test_script" "$work/test/test.sh"
install -m 0644 "$HERE/check.sh" "$work/test/check.sh" # what the test scripts share
make_cpio "$work/test" "$work/test.cpio"
cat "$base_cpio" ${inc_cpio:+"$inc_cpio"} "$work/test.cpio" >"$work/initrd"
exec {lock_fd}>&-
phase assemble

[[ -n $log_file ]] || log_file=$work/console.log
: >"$log_file" || die "cannot write the console log $log_file"
mkfifo "$work/console"
cmdline="console=ttyS0 quiet panic=-1 no_timer_check guest.multipathd=$multipathd${append:+ $append}"
log "booting $kver (TCG, 1 vCPU, ${memory} MiB): $cmdline"
qemu_start_us=$(now_us)
drive_args=()
for p in "${drives[@]}"; do
  drive_args+=(-drive "file=$p,format=raw,if=virtio,snapshot=on")
done
# TCG, never KVM: /dev/kvm may exist on CI machines without being able to run a guest.
timeout -k 5 "$timeout_s" qemu-system-x86_64 \
  -accel tcg -cpu max -smp 1 -m "$memory" \
  -nodefaults -no-user-config -display none -monitor none -serial stdio -no-reboot \
  -kernel "$vmlinuz" -initrd "$work/initrd" -append "$cmdline" \
  -netdev user,id=n0 -device virtio-net-pci,netdev=n0,romfile= "${drive_args[@]}" \
  </dev/null >"$work/console" 2>&1 &
qemu_pid=$!

guest_rc=""
guest_error=""
declare -A seen_at=()
# Console: strip CRs and escape sequences, keep a log, stream to stdout, note marker times.
sed -u -e 's/\r//g' -e 's/\x1b\[[0-9;?]*[A-Za-z]//g' -e 's/\x1b[()][0-9A-Za-z]//g' -e 's/\x1bc//g' \
  <"$work/console" | while IFS= read -r line || [[ -n $line ]]; do
  printf '%s\n' "$line" >>"$log_file"
  printf '%s\n' "$line"
  if [[ $line =~ STAGEHAND-GUEST-(INIT|MODULES|UDEV|DAEMONS|TEST-START|TEST-END)\  ]]; then
    seen_at[${BASH_REMATCH[1]}]=$(now_us)
  elif [[ $line =~ STAGEHAND-GUEST-EXIT=([0-9]+) ]]; then
    guest_rc=${BASH_REMATCH[1]}
  elif [[ $line =~ STAGEHAND-GUEST-ERROR:\ (.*) ]]; then
    guest_error=${BASH_REMATCH[1]}
  fi
done
qemu_rc=0
wait "$qemu_pid" || qemu_rc=$?
qemu_pid=""

phase_us=$qemu_start_us
[[ -z ${seen_at[INIT]+x} ]] || phase "boot to /init" "${seen_at[INIT]}"
[[ -z ${seen_at[DAEMONS]+x} ]] || phase "guest setup" "${seen_at[DAEMONS]}"
[[ -z ${seen_at[TEST-END]+x} ]] || phase "test script" "${seen_at[TEST-END]}"
phase "until QEMU exit"
log "$(printf 'phase %-16s %6ss' total "$(fmt_us $(($(now_us) - start_us)))")"
[[ $log_file == "$work"/* ]] || log "console log: $log_file"

if [[ -n $guest_error ]]; then
  log "guest setup failed: $guest_error"
fi
if [[ -z $guest_rc ]] && [[ $qemu_rc == 124 || $qemu_rc == 137 ]]; then
  log "error: guest timed out after ${timeout_s}s without a STAGEHAND-GUEST-EXIT marker"
  exit 124
fi
if [[ -z $guest_rc ]]; then
  log "error: QEMU exited with status $qemu_rc without a STAGEHAND-GUEST-EXIT marker"
  exit 125
fi
[[ $qemu_rc == 0 ]] || log "warning: QEMU exited with status $qemu_rc after the guest reported"
log "guest test exit status: $guest_rc"
exit "$guest_rc"
