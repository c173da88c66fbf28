#!/usr/bin/env bash
# Builds the VM toolchain: a Debian 13 (trixie) root holding QEMU >= 10.2 from
# trixie-backports (Debian 12's QEMU lacks vhost-user-test-device-pci) and the
# libvirt daemon, client and QEMU driver from trixie.
#
# The root also carries the two newer guest kernels the driver is tested on,
# with their headers and their compiler (gcc 14; Debian 12's gcc 12 and glibc
# cannot run their Kbuild): Debian 13's own (linux-image-amd64 and
# linux-headers-amd64 from trixie) and the newest in trixie-backports. Their
# versions are written to DIR/kernels/trixie and DIR/kernels/trixie-backports;
# when trixie-backports has no kernel at all, DIR/kernels/trixie-backports.unavailable
# says so instead.
#
# Usage: vm-images/build-toolchain.sh [DIR]
#   DIR defaults to $HZ_VM_DIR, then build/vm. The root lands in DIR/root.
# Idempotent: stamp files make a re-run instant; a half-built root from an
# interrupted run is removed and rebuilt. The kernels have their own stamp:
# a root built before they were added only gains them.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"

hz_require_root
dir=$(hz_vm_dir "${1:-}")
root=$dir/root
stamp=$dir/toolchain.stamp
kstamp=$dir/kernels.stamp
mirror=$(hz_debian_mirror)

# What the stamps certify; a change to any of it rebuilds the root (or, for the
# kernels, installs them again).
qemu_pkgs=(qemu-system-x86)
libvirt_pkgs=(libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients)
want="v$HZ_STAMP_VERSION trixie $mirror qemu:${qemu_pkgs[*]} libvirt:${libvirt_pkgs[*]}"
# The driver's build also needs make, and sparse for its C=1 check.
kernel_pkgs=(linux-image-amd64 linux-headers-amd64)
kwant="v$HZ_KERNELS_STAMP_VERSION trixie:${kernel_pkgs[*]} trixie-backports:${kernel_pkgs[*]} build:make sparse"

# Concurrent callers (ctest fixtures from two build trees) wait for each other.
exec 9>"$dir/toolchain.lock"
flock 9

# Runs a bash script inside the root with /proc and /dev mounted, in a private
# mount namespace: the mounts vanish with it even if this script is killed.
in_root() {
	local script=$1
	shift
	# shellcheck disable=SC2016 # expanded by the inner shell
	unshare --mount --propagation private bash -euo pipefail -c '
		root=$1 script=$2; shift 2
		cleanup() { umount -l "$root/dev" 2>/dev/null || true; umount -l "$root/proc" 2>/dev/null || true; }
		trap cleanup EXIT
		mount -t proc proc "$root/proc"
		mount --bind /dev "$root/dev"
		DEBIAN_FRONTEND=noninteractive LC_ALL=C chroot "$root" bash -euo pipefail -c "$script" hz-toolchain "$@"
	' hz-toolchain "$root" "$script" "$@"
}

# Debian 13's kernel and the newest of trixie-backports, both with headers.
# Runs inside the root; prints "HZ-BPO: VERSION" or "HZ-BPO: none".
# The trixie-backports kernel is installed by its versioned package names
# (linux-image-amd64 can only be one version), read from the backports
# metapackage's dependencies. Everything is resolved with trixie-backports
# preferred: QEMU already brought some of its libraries from there (libelf),
# and the kernels' Kbuild needs pahole, whose libdw must match that libelf.
# The guests boot the project's own initramfs, never the distribution's:
# update-initramfs is diverted to a no-op, so installing a kernel does not
# spend a minute building an unused one.
read -r -d '' install_kernels_script <<'SCRIPT' || true
version_in() { # SUITE: linux-image-amd64's version there
	apt-cache madison linux-image-amd64 | awk -F' [|] ' -v s=" $1/" 'index($3, s) { print $2; exit }'
}
versioned() { # METAPACKAGE VERSION: the versioned kernel package it depends on
	apt-cache show "$1=$2" | sed -n 's/^Depends: //p' | head -n1 | tr , '\n' |
		sed -n 's/^ *\(linux-\(image\|headers\)-[0-9][^ ]*\).*/\1/p'
}
if ! dpkg-divert --list /usr/sbin/update-initramfs | grep -q .; then
	dpkg-divert --local --rename --divert /usr/sbin/update-initramfs.distrib --add /usr/sbin/update-initramfs
fi
printf '#!/bin/sh\n# Diverted by vm-images/build-toolchain.sh: the guests boot their own initramfs.\nexit 0\n' \
	>/usr/sbin/update-initramfs
chmod 755 /usr/sbin/update-initramfs
apt-get update -qq
tv=$(version_in trixie)
[ -n "$tv" ] || { echo "trixie has no linux-image-amd64" >&2; exit 1; }
pkgs=()
for p in "$@"; do pkgs+=("$p=$tv"); done
bv=$(version_in trixie-backports)
if [ -n "$bv" ]; then
	for p in "$@"; do
		dep=$(versioned "$p" "$bv")
		[ -n "$dep" ] || { echo "no versioned package behind $p=$bv" >&2; exit 1; }
		pkgs+=("$dep")
	done
fi
apt-get install -y -qq --no-install-recommends -t trixie-backports "${pkgs[@]}" make sparse
apt-get clean
if [ -n "$bv" ]; then echo "HZ-BPO: $(versioned linux-image-amd64 "$bv" | sed 's/^linux-image-//')"; else echo "HZ-BPO: none"; fi
SCRIPT

install_kernels() {
	local start=$SECONDS bpo
	rm -f "$kstamp"
	rm -rf "$dir/kernels"
	mkdir -p "$dir/kernels"
	in_root "$install_kernels_script" "${kernel_pkgs[@]}" >"$dir/kernels.log" 2>&1 || {
		tail -n 30 "$dir/kernels.log" >&2
		hz_die "kernel installation failed (log: $dir/kernels.log)"
	}
	dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${Depends}' linux-image-amd64 |
		sed -n 's/.*linux-image-\([0-9][^ ,]*\).*/\1/p' >"$dir/kernels/trixie"
	bpo=$(sed -n 's/^HZ-BPO: //p' "$dir/kernels.log")
	if [ "$bpo" = none ]; then
		echo "trixie-backports on $mirror has no linux-image-amd64" >"$dir/kernels/trixie-backports.unavailable"
	else
		echo "$bpo" >"$dir/kernels/trixie-backports"
	fi
	local k v
	for k in trixie trixie-backports; do
		[ -f "$dir/kernels/$k" ] || continue
		v=$(cat "$dir/kernels/$k")
		if [ -z "$v" ] || [ ! -f "$root/boot/vmlinuz-$v" ] || [ ! -f "$root/lib/modules/$v/modules.dep" ] ||
			[ ! -f "$root/usr/src/linux-headers-$v/Makefile" ]; then
			hz_die "$k kernel '$v' incomplete in $root"
		fi
	done
	printf '%s\n%s, installed in %d s\n' "$kwant" \
		"$(cd "$dir/kernels" && for k in *; do echo "$k: $(cat "$k")"; done | paste -sd ';' | sed 's/;/; /g')" \
		"$((SECONDS - start))" >"$kstamp"
	hz_log "kernels ready: $(sed -n 2p "$kstamp")"
}

if [ -f "$stamp" ] && [ "$(head -n1 "$stamp")" = "$want" ] && [ -x "$root/usr/bin/qemu-system-x86_64" ]; then
	hz_log "toolchain up to date: $(sed -n 2p "$stamp")"
	if [ -f "$kstamp" ] && [ "$(head -n1 "$kstamp")" = "$kwant" ]; then
		hz_log "kernels up to date: $(sed -n 2p "$kstamp")"
	else
		install_kernels
	fi
	exit 0
fi

start=$SECONDS
hz_log "building the Debian 13 root in $root from $mirror"
# A root from an interrupted run may hold stale mounts only if a previous
# version of this script leaked them; refuse rather than delete through them.
if [ -d "$root" ]; then
	if grep -q " $root/" /proc/mounts; then
		hz_die "$root has mounts below it; unmount them first"
	fi
	rm -rf "$root"
fi
rm -f "$stamp" "$kstamp"
rm -rf "$root.tmp"

debootstrap --variant=minbase trixie "$root.tmp" "$mirror" >"$dir/debootstrap.log" 2>&1 || {
	tail -n 30 "$dir/debootstrap.log" >&2
	hz_die "debootstrap failed (log: $dir/debootstrap.log)"
}
mv "$root.tmp" "$root"
hz_log "debootstrap done after $((SECONDS - start)) s"

cat >"$root/etc/apt/sources.list" <<SOURCES
deb $mirror trixie main
deb $mirror trixie-backports main
SOURCES
# No daemon starts inside the chroot during package installation.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"
# Documentation and translations are never used here; skipping them saves time.
cat >"$root/etc/dpkg/dpkg.cfg.d/01-hz-nodoc" <<'NODOC'
path-exclude=/usr/share/doc/*
path-exclude=/usr/share/man/*
path-exclude=/usr/share/locale/*
path-exclude=/usr/share/info/*
NODOC
echo 'Acquire::Languages "none";' >"$root/etc/apt/apt.conf.d/01-hz-nolang"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true

# Mounts live in a private mount namespace, so they vanish with it even if this
# script is killed; the trap unmounts them explicitly on ordinary failures.
unshare --mount --propagation private bash -euo pipefail -c '
	root=$1 nqemu=$2; shift 2
	qemu_pkgs=("${@:1:$nqemu}") libvirt_pkgs=("${@:$((nqemu + 1))}")
	cleanup() { umount -l "$root/dev" 2>/dev/null || true; umount -l "$root/proc" 2>/dev/null || true; }
	trap cleanup EXIT
	mount -t proc proc "$root/proc"
	mount --bind /dev "$root/dev"
	export DEBIAN_FRONTEND=noninteractive LC_ALL=C
	chroot "$root" apt-get update -qq
	chroot "$root" apt-get install -y -qq --no-install-recommends -t trixie-backports "${qemu_pkgs[@]}"
	chroot "$root" apt-get install -y -qq --no-install-recommends "${libvirt_pkgs[@]}"
	chroot "$root" apt-get clean
' hz-toolchain "$root" "${#qemu_pkgs[@]}" "${qemu_pkgs[@]}" "${libvirt_pkgs[@]}" >"$dir/apt.log" 2>&1 || {
	tail -n 30 "$dir/apt.log" >&2
	hz_die "package installation failed (log: $dir/apt.log)"
}

qemu_version=$(chroot "$root" qemu-system-x86_64 --version | head -n1)
chroot "$root" qemu-system-x86_64 -device help 2>/dev/null | grep -q vhost-user-test-device-pci ||
	hz_die "$qemu_version has no vhost-user-test-device-pci"
mkdir -p "$root/run/hz" "$root/hz-boot"
printf '%s\n%s, built in %d s\n' "$want" "$qemu_version" "$((SECONDS - start))" >"$stamp"
hz_log "toolchain ready: $(sed -n 2p "$stamp")"
install_kernels
