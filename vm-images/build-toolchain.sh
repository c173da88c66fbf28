#!/usr/bin/env bash
# Builds the VM toolchain: a Debian 13 (trixie) root holding QEMU >= 10.2 from
# trixie-backports (Debian 12's QEMU lacks vhost-user-test-device-pci) and the
# libvirt daemon, client and QEMU driver from trixie.
#
# Usage: vm-images/build-toolchain.sh [DIR]
#   DIR defaults to $HZ_VM_DIR, then build/vm. The root lands in DIR/root.
# Idempotent: a stamp file makes a re-run instant; a half-built root from an
# interrupted run is removed and rebuilt.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"

hz_require_root
dir=$(hz_vm_dir "${1:-}")
root=$dir/root
stamp=$dir/toolchain.stamp
mirror=$(hz_debian_mirror)

# What the stamp certifies; a change to any of it rebuilds the root.
qemu_pkgs=(qemu-system-x86)
libvirt_pkgs=(libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients)
want="v$HZ_STAMP_VERSION trixie $mirror qemu:${qemu_pkgs[*]} libvirt:${libvirt_pkgs[*]}"

# Concurrent callers (ctest fixtures from two build trees) wait for each other.
exec 9>"$dir/toolchain.lock"
flock 9

if [ -f "$stamp" ] && [ "$(head -n1 "$stamp")" = "$want" ] && [ -x "$root/usr/bin/qemu-system-x86_64" ]; then
	hz_log "toolchain up to date: $(sed -n 2p "$stamp")"
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
rm -f "$stamp"
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
