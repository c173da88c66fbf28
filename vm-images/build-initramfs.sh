#!/usr/bin/env bash
# Builds the guest initramfs: busybox-static, /init, the virtio transport
# modules of the guest kernel (with their dependencies from modules.dep,
# decompressed; those built into the kernel are left out), extra kernel
# modules (the driver), programs and test scripts.
#
# Usage: vm-images/build-initramfs.sh [--dir DIR] [--out FILE] [--kver VER]
#          [--root ROOT] [--module KO]... [--program FILE]... [--test FILE]...
#          [--kmod NAME]... [--dynamic FILE]...
#   --kver, --root  the guest kernel's version and the root its modules are
#              in (ROOT/lib/modules/VER); by default those of $HZ_GUEST_KERNEL
#              (vm-images/lib/common.sh), bookworm's on the host when unset
#   --module   copied to /lib/modules/ (loaded by the tests, not by /init)
#   --program  copied to /bin/ (must be statically linked)
#   --kmod     a module of the guest kernel by name (e.g. virtio_net), with
#              its dependencies; loaded by /init after the virtio transport
#   --dynamic  a dynamically linked program, copied to /bin/ with the shared
#              libraries ldd finds for it (at the same paths)
#   --test     copied to /tests/; run by hz.test=<file name>
#   --out      default DIR/images/initramfs.gz; DIR as for build-toolchain.sh
# Idempotent: when no input changed the existing image is kept.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"

dir_arg='' out='' kver='' root='' root_set=''
modules=() programs=() tests=() kmods=() dynamic=()
while [ $# -gt 0 ]; do
	case $1 in
	--dir) dir_arg=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--kver) kver=$2; shift 2 ;;
	--root) root=$2; root_set=1; shift 2 ;;
	--module) modules+=("$2"); shift 2 ;;
	--program) programs+=("$2"); shift 2 ;;
	--test) tests+=("$2"); shift 2 ;;
	--kmod) kmods+=("$2"); shift 2 ;;
	--dynamic) dynamic+=("$2"); shift 2 ;;
	-h | --help) sed -n '2,21p' "$0"; exit 0 ;;
	*) hz_die "unknown argument: $1" ;;
	esac
done

dir=$(hz_vm_dir "$dir_arg")
kernel=$(hz_guest_kernel)
out=${out:-$(hz_guest_initramfs "$dir" "$kernel")}
kver=${kver:-$(hz_guest_kernel_version "$kernel" "$dir")}
[ -n "$root_set" ] || root=$(hz_guest_kernel_root "$kernel" "$dir")
moddir=$root/lib/modules/$kver
busybox=$(command -v busybox) || hz_die "busybox not found (install busybox-static)"
file -L "$busybox" 2>/dev/null | grep -q 'statically linked' ||
	ldd "$busybox" 2>&1 | grep -q 'not a dynamic' || hz_die "$busybox is not static (install busybox-static)"
[ -f "$moddir/modules.dep" ] || hz_die "$moddir/modules.dep missing (install linux-image-$kver)"
# Debian 13's kernels have the virtio core and PCI transport built in.
is_builtin() {
	[ -f "$moddir/modules.builtin" ] &&
		awk -v n="$1" '{ f = $1; sub(/.*\//, "", f); sub(/\.ko$/, "", f); if (f == n) found = 1 } END { exit !found }' "$moddir/modules.builtin"
}

# Resolves a module name to its file and the files it depends on, deepest first.
declare -A seen=()
order=()
resolve() {
	local rel=$1 dep
	[ -n "${seen[$rel]:-}" ] && return
	seen[$rel]=1
	for dep in $(awk -v m="$rel:" '$1 == m { for (i = 2; i <= NF; i++) print $i }' "$moddir/modules.dep"); do
		resolve "$dep"
	done
	order+=("$rel")
}
# virtio_pci brings the rest of the transport through modules.dep.
transport=(virtio_pci "${kmods[@]}")
for name in "${transport[@]}"; do
	[[ $name =~ ^[A-Za-z0-9_-]+$ ]] || hz_die "bad module name: $name"
	rel=$(awk -F: -v n="$name" '{ f = $1; sub(/.*\//, "", f); sub(/\.ko(\.[a-z]+)?$/, "", f); if (f == n) { print $1; exit } }' "$moddir/modules.dep")
	if [ -z "$rel" ] && is_builtin "$name"; then
		hz_log "$name is built into $kver"
		continue
	fi
	[ -n "$rel" ] || hz_die "module $name not found in $moddir/modules.dep"
	resolve "$rel"
done

for f in "${modules[@]}" "${programs[@]}" "${tests[@]}" "${dynamic[@]}"; do
	[ -f "$f" ] || hz_die "no such file: $f"
done
# Shared libraries of the dynamic programs, as ldd resolves them on this host
# (the loader included).
libs=()
if [ "${#dynamic[@]}" -gt 0 ]; then
	mapfile -t libs < <(ldd "${dynamic[@]}" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $1 !~ /:$/ { print $1 }' | LC_ALL=C sort -u)
	[ "${#libs[@]}" -gt 0 ] || hz_die "ldd found no libraries for ${dynamic[*]}"
fi

# Skip the rebuild when nothing that goes into the image changed.
inputs=("$0" "$(dirname "$0")/initramfs/init" "$busybox" "${modules[@]}" "${programs[@]}" "${tests[@]}"
	"${dynamic[@]}" "${libs[@]}")
for rel in "${order[@]}"; do inputs+=("$moddir/$rel"); done
digest=$( (echo "$kver ${modules[*]} ${programs[*]} ${tests[*]} ${kmods[*]} ${dynamic[*]}"; sha256sum "${inputs[@]}") | sha256sum | cut -d' ' -f1)
if [ -f "$out" ] && [ "$(cat "$out.digest" 2>/dev/null)" = "$digest" ]; then
	hz_log "initramfs up to date: $out"
	exit 0
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{bin,sbin,usr/bin,etc,proc,sys,dev,tmp,run,tests,lib/modules}
cp "$busybox" "$stage/bin/busybox"
ln -s busybox "$stage/bin/sh"
install -m 755 "$(dirname "$0")/initramfs/init" "$stage/init"
: >"$stage/etc/hz-modules"
for rel in "${order[@]}"; do
	base=$(basename "$rel")
	case $base in
	*.ko.xz) xz -dc "$moddir/$rel" >"$stage/lib/modules/${base%.xz}" ;;
	*.ko.zst) zstd -qdc "$moddir/$rel" >"$stage/lib/modules/${base%.zst}" ;;
	*.ko.gz) gzip -dc "$moddir/$rel" >"$stage/lib/modules/${base%.gz}" ;;
	*.ko) cp "$moddir/$rel" "$stage/lib/modules/$base" ;;
	*) hz_die "unexpected module file $rel" ;;
	esac
	base=${base%.xz}; base=${base%.zst}; base=${base%.gz}
	echo "$base" >>"$stage/etc/hz-modules"
done
for f in "${modules[@]}"; do cp "$f" "$stage/lib/modules/"; done
for f in "${programs[@]}"; do install -m 755 "$f" "$stage/bin/"; done
for f in "${tests[@]}"; do install -m 755 "$f" "$stage/tests/"; done
for f in "${dynamic[@]}"; do install -m 755 "$f" "$stage/bin/"; done
for f in "${libs[@]}"; do
	mkdir -p "$stage$(dirname "$f")"
	cp -L "$f" "$stage$f"
done

mkdir -p "$(dirname "$out")"
(cd "$stage" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0 | gzip -1) >"$out.tmp"
mv "$out.tmp" "$out"
echo "$digest" >"$out.digest"
transport_mods=$(tr '\n' ' ' <"$stage/etc/hz-modules")
hz_log "initramfs ready: $out ($(du -h "$out" | cut -f1); virtio: ${transport_mods:-built into $kver})"
