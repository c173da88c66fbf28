#!/usr/bin/env bash
# Builds a clean Debian 12 (bookworm) minbase root, the system the packages
# test (tests/integration/install/packages_test.sh) installs HarmonAIze's .deb
# packages into. The root is never changed after it is built: the test works
# in a throw-away overlay of it.
#
# Usage: vm-images/build-bookworm-root.sh [DIR]
#   DIR defaults to $HZ_VM_DIR, then build/vm. The root lands in DIR/bookworm-root.
# Idempotent: a stamp file makes a re-run instant; a half-built root from an
# interrupted run is removed and rebuilt. Concurrent callers wait for each other.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"

hz_require_root
dir=$(hz_vm_dir "${1:-}")
root=$dir/bookworm-root
stamp=$dir/bookworm-root.stamp
mirror=$(hz_debian_mirror)
# Bumped when the recipe below changes, so cached roots are rebuilt.
recipe=1
want="v$recipe bookworm minbase $mirror"

exec 9>"$dir/bookworm-root.lock"
flock 9

if [ -f "$stamp" ] && [ "$(head -n1 "$stamp")" = "$want" ] && [ -x "$root/usr/bin/apt-get" ]; then
	hz_log "bookworm root up to date: $(sed -n 2p "$stamp")"
	exit 0
fi

start=$SECONDS
hz_log "building the Debian 12 root in $root from $mirror"
# Refuse rather than delete through a mount a killed user of the root left.
for d in "$root" "$root.tmp"; do
	if grep -q " $d/" /proc/mounts; then
		hz_die "$d has mounts below it; unmount them first"
	fi
done
rm -rf "$root" "$root.tmp" "$stamp"

debootstrap --variant=minbase bookworm "$root.tmp" "$mirror" >"$dir/bookworm-debootstrap.log" 2>&1 || {
	tail -n 30 "$dir/bookworm-debootstrap.log" >&2
	hz_die "debootstrap failed (log: $dir/bookworm-debootstrap.log)"
}
echo "deb $mirror bookworm main" >"$root.tmp/etc/apt/sources.list"
# No daemon starts inside the root during package installation.
printf '#!/bin/sh\nexit 101\n' >"$root.tmp/usr/sbin/policy-rc.d"
chmod 755 "$root.tmp/usr/sbin/policy-rc.d"
echo 'Acquire::Languages "none";' >"$root.tmp/etc/apt/apt.conf.d/01-hz-nolang"
# The users of the root run apt-get update themselves, against the mirror as it is then.
rm -rf "$root.tmp"/var/lib/apt/lists/* "$root.tmp"/var/cache/apt/archives/*.deb
mv "$root.tmp" "$root"
printf '%s\n%s, built in %d s\n' "$want" "$(cat "$root/etc/debian_version")" "$((SECONDS - start))" >"$stamp"
hz_log "bookworm root ready: $(sed -n 2p "$stamp")"
