#!/usr/bin/env bash
# Usage: packages_test.sh SOURCE_DIR WORK_DIR PACKAGE_BUILD_DIR VM_DIR
# Builds the Debian packages (scripts/build-packages.sh, in PACKAGE_BUILD_DIR),
# checks them with lintian (any error or warning fails; info and pedantic
# findings are only shown), installs them with apt into a throw-away overlay
# of a clean Debian 12 minbase root (vm-images/build-bookworm-root.sh, cached
# in VM_DIR), apt resolving their Debian dependencies from the mirror, and
# runs a demo inside the root using only the installed files: harmonaized and
# hzctl on the provider's side, hz and a program built with pkg-config on the
# tenant's, and the DKMS source and udev rule in place. The module is not built
# here: the root has no kernel headers (tenant_install builds the installed
# source with DKMS).
# Needs root (debootstrap, chroot, mounts) and the Debian mirror; exits 77
# (skipped) without them. Fails without lintian (scripts/install-deps.sh
# installs it, as it does everything else the test uses).
set -euo pipefail
src=$1
work=$2
pkg_build=$3
vm_dir=$4
fail() { echo "packages: FAIL: $*" >&2; exit 1; }
if [ "$(id -u)" -ne 0 ] || ! command -v debootstrap >/dev/null || ! command -v dpkg-shlibdeps >/dev/null; then
  echo "packages: SKIP: needs root, debootstrap and dpkg-dev"
  exit 77
fi
command -v lintian >/dev/null || fail "lintian is missing (scripts/install-deps.sh installs it)"
rm -rf "$work"
mkdir -p "$work/debs" "$work/upper" "$work/overlay-work" "$work/merged"
# The mounts live in a private mount namespace (below) and vanish with it;
# what is left is files.
trap 'rm -rf "$work"' EXIT

# 1. The packages, built as a user builds them, but with the presets' -Werror:
#    with the same flags, and PACKAGE_BUILD_DIR beside the default preset's
#    tree, ccache finds the objects that tree compiled.
HZ_PACKAGE_CMAKE_ARGS=${HZ_PACKAGE_CMAKE_ARGS:--DHZ_WERROR=ON} "$src/scripts/build-packages.sh" "$work/debs" "$pkg_build" || fail "scripts/build-packages.sh failed"
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$pkg_build/CMakeCache.txt")
for p in harmonaized libharmonaize1 harmonaize-tools libharmonaize-dev harmonaize-nccl harmonaize-dkms; do
  deb=$(echo "$work/debs/${p}_${version}-"*.deb)
  [ -f "$deb" ] || fail "no package $p"
  dpkg-deb --field "$deb" Version | grep -qx "$version-[0-9]*" || fail "$p's version is not $version"
done
dpkg-deb --field "$work/debs/libharmonaize-dev_"*.deb Depends | grep -q "libharmonaize1 (= $version-" ||
  fail "libharmonaize-dev does not depend on its libharmonaize1"
dpkg-deb --ctrl-tarfile "$work/debs/harmonaized_"*.deb | tar -xO ./conffiles | grep -qx /etc/default/harmonaized ||
  fail "harmonaized's /etc/default/harmonaized is not a conffile"
# An upgrade never restarts the service (README.md, "Install").
if dpkg-deb --ctrl-tarfile "$work/debs/harmonaized_"*.deb | tar -xO ./postinst | grep -v '^\s*#' |
  grep -qE 'restart|try-restart'; then
  fail "harmonaized's postinst restarts the service"
fi

# The packages as Debian's policy checker sees them. Overridden findings are
# answered in packaging/debian/lintian-overrides, each with its reason.
echo "packages: lintian --display-info --pedantic:"
lintian_rc=0
lintian --fail-on error,warning --display-info --pedantic "$work"/debs/*.deb || lintian_rc=$?
[ "$lintian_rc" -eq 0 ] ||
  fail "lintian found errors or warnings (exit $lintian_rc) above; lintian --info explains each tag"
echo "packages: lintian found no error or warning"

# 2. The clean root, and an overlay of it to install into.
"$src/vm-images/build-bookworm-root.sh" "$vm_dir" || fail "the Debian 12 root could not be built"
# Downloaded .debs are kept between runs (apt checks them against the index).
mkdir -p "$vm_dir/bookworm-apt-archives/partial"

# 3. Inside the root, with only the installed files (no PATH into the build).
read -r -d '' demo <<'DEMO' || true
version=$1
fail() { echo "packages (in the root): FAIL: $*" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive LC_ALL=C
apt-get update -qq
# --no-install-recommends: dkms recommends kernel headers, which this test
# does not use. gcc, libc6-dev and pkg-config build the tenant program.
apt-get install -y -qq --no-install-recommends /pkgs/*.deb pkg-config gcc libc6-dev >/tmp/apt.log 2>&1 ||
  { tail -n 40 /tmp/apt.log >&2; fail "apt-get install of the packages"; }
for p in harmonaized libharmonaize1 harmonaize-tools libharmonaize-dev harmonaize-nccl harmonaize-dkms; do
  dpkg-query -W -f='${Status}\n' "$p" | grep -qx 'install ok installed' || fail "$p is not installed"
done
echo "packages: installed $(dpkg-query -W -f='${Package} ' 'harmonaize*' 'libharmonaize*')"

# The provider's side: the files the host package put in place.
for f in /usr/sbin/harmonaized /usr/bin/hzctl /usr/lib/systemd/system/harmonaized.service \
  /usr/share/man/man8/harmonaized.8.gz /usr/share/bash-completion/completions/hzctl \
  /usr/share/doc/harmonaize/examples/harmonaized.toml.example /etc/default/harmonaized \
  /etc/libvirt/hooks/qemu.d/harmonaize; do
  [ -e "$f" ] || fail "no $f"
done
grep -qx 'HZCTL=/usr/bin/hzctl' /etc/libvirt/hooks/qemu.d/harmonaize || fail "the libvirt hook does not run /usr/bin/hzctl"
# The hook leaves a domain without the device alone, without asking harmonaized.
echo "<domain><name>plain</name></domain>" | /etc/libvirt/hooks/qemu.d/harmonaize plain prepare begin - ||
  fail "the libvirt hook refused a domain without the device"
grep -qx 'ExecStart=/usr/sbin/harmonaized --foreground --fd-store \\' /usr/lib/systemd/system/harmonaized.service ||
  fail "the unit does not run /usr/sbin/harmonaized"
[ -L /etc/systemd/system/multi-user.target.wants/harmonaized.service ] || fail "the unit is not enabled"
[ "$(harmonaized --version)" = "harmonaized $version" ] || fail "harmonaized --version: $(harmonaized --version)"

state=/var/lib/harmonaize-test
mkdir -p "$state" /etc/harmonaize
# The system's configuration file is read without --config.
printf '[tenant_defaults]\nmax_regions = 77\n' >/etc/harmonaize/harmonaized.toml
harmonaized --foreground --state-dir "$state" --control-socket "$state/control.sock" --no-metrics \
  --log-level warn >"$state/harmonaized.log" 2>&1 &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null || true; wait $daemon 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -S "$state/control.sock" ] && break; sleep 0.1; done
[ -S "$state/control.sock" ] || { cat "$state/harmonaized.log" >&2; fail "harmonaized did not start"; }
hzctl() { command hzctl --socket "$state/control.sock" "$@"; }
hzctl tenant create acme
hzctl vm bind --tenant acme --socket "$state/vm0.sock"
hzctl tenant list | grep -q acme || fail "hzctl tenant list has no acme"
hzctl --json tenant list | grep -q '"max_regions": 77' ||
  fail "harmonaized did not read /etc/harmonaize/harmonaized.toml"

# The tenant's side: hz from harmonaize-tools on libharmonaize1.
hz() { command hz --device "vhost-user:$state/vm0.sock" "$@"; }
hz status
hz selftest || fail "hz selftest"
head -c 1234567 /dev/urandom >/tmp/state.bin
hz checkpoint save --stream 1 --step 7 /tmp/state.bin
hz checkpoint list --stream 1 | grep -q 7 || fail "hz checkpoint list does not show step 7"
hz checkpoint restore --stream 1 --step 7 /tmp/restored.bin
cmp /tmp/state.bin /tmp/restored.bin || fail "the restored checkpoint differs from the saved one"
echo "packages: checkpoint of $(stat -c %s /tmp/restored.bin) bytes saved and restored, bit-exact"
hz --json events --topics checkpoint --wait-ms 500 >/tmp/events.json
grep -q '"kind"' /tmp/events.json || fail "no checkpoint event: $(cat /tmp/events.json)"
echo "packages: $(wc -l </tmp/events.json) checkpoint event(s)"
hzctl vm list
hzctl checkpoint list --tenant acme | grep -q 7 || fail "hzctl checkpoint list does not show step 7"

# A tenant program built against libharmonaize-dev with pkg-config.
[ "$(pkg-config --modversion harmonaize)" = "$version" ] || fail "pkg-config --modversion harmonaize"
cat >/tmp/consumer.c <<'C'
#include <harmonaize/hz.h>
#include <stdio.h>
#include <stdlib.h>
int main(void) {
  hz_device_t* dev = NULL;
  int rc = hz_open(getenv("HZ_DEVICE"), &dev);
  if (rc != HZ_OK) {
    printf("hz_open: %s\n", hz_strerror(rc));
    return 1;
  }
  printf("opened the device\n");
  hz_close(dev);
  return 0;
}
C
# shellcheck disable=SC2046
gcc -o /tmp/consumer /tmp/consumer.c $(pkg-config --cflags --libs harmonaize) || fail "the pkg-config consumer"
HZ_DEVICE="vhost-user:$state/vm0.sock" /tmp/consumer | grep -qx 'opened the device' ||
  fail "the pkg-config consumer did not open the device"
[ -f /usr/lib/x86_64-linux-gnu/cmake/harmonaize/harmonaizeConfig.cmake ] || fail "no CMake package"
ls /usr/lib/*/harmonaize-nccl/libnccl.so.2 /usr/include/harmonaize-nccl/nccl.h >/dev/null ||
  fail "harmonaize-nccl's files are missing"

# The guest driver: its DKMS source, registered by the postinst; the udev rule and its group.
[ -f "/usr/src/harmonaize-$version/dkms.conf" ] || fail "no /usr/src/harmonaize-$version/dkms.conf"
grep -qx "PACKAGE_VERSION=\"$version\"" "/usr/src/harmonaize-$version/dkms.conf" || fail "dkms.conf's version"
dkms status -m harmonaize -v "$version" | grep -q "harmonaize/$version" || fail "dkms does not know harmonaize"
grep -q 'GROUP="harmonaize"' /usr/lib/udev/rules.d/70-harmonaize.rules || fail "no udev rule"
getent group harmonaize >/dev/null || fail "no group harmonaize"

kill -TERM "$daemon"
wait "$daemon" || fail "harmonaized did not exit cleanly on SIGTERM"
trap - EXIT

# An upgrade under systemd never stops or restarts harmonaized (that would take
# the device from every running VM); removal stops it. The maintainer scripts
# see a running systemd (/run/systemd/system); deb-systemd-invoke asks
# policy-rc.d, Debian's hook for exactly this, before each action, and this
# one records the question and refuses (101), and systemctl records its calls.
# A reinstall runs the scripts of an upgrade: prerm upgrade, then postinst
# configure with the old version.
mkdir -p /run/systemd/system
printf '#!/bin/sh\necho "policy-rc.d $*" >>/tmp/systemd-calls\nexit 101\n' >/usr/sbin/policy-rc.d
printf '#!/bin/sh\necho "systemctl $*" >>/tmp/systemd-calls\n' >/usr/bin/systemctl
chmod 755 /usr/sbin/policy-rc.d /usr/bin/systemctl
apt-get install -y --reinstall /pkgs/harmonaized_*.deb >/tmp/upgrade.log 2>&1 ||
  { cat /tmp/upgrade.log >&2; fail "apt-get install --reinstall harmonaized"; }
grep -qx 'policy-rc.d harmonaized.service start' /tmp/systemd-calls ||
  { cat /tmp/upgrade.log >&2; fail "the upgrade did not start a stopped harmonaized: $(cat /tmp/systemd-calls 2>&1)"; }
if grep -E 'stop|restart' /tmp/systemd-calls; then fail "the upgrade stopped or restarted harmonaized"; fi
echo "packages: an upgrade asked systemd for: $(tr '\n' ';' </tmp/systemd-calls)"

# Removal: the DKMS tree goes with the package; the group stays (it may own files).
apt-get remove -y -qq harmonaize-dkms harmonaized >/tmp/remove.log 2>&1 ||
  { cat /tmp/remove.log >&2; fail "apt-get remove"; }
[ -z "$(dkms status -m harmonaize -v "$version")" ] || fail "dkms still lists harmonaize after removal"
[ ! -e /usr/sbin/harmonaized ] || fail "harmonaized is still there after removal"
grep -qx 'policy-rc.d harmonaized.service stop' /tmp/systemd-calls ||
  fail "removing harmonaized did not stop it"
echo "packages: demo in the Debian 12 root ok"
DEMO

# The overlay, /proc, /dev and the package directory exist only in this
# private mount namespace, and every process (harmonaized too) in a PID
# namespace of its own: when timeout, which bounds the whole (apt and the
# demo), or anything else kills unshare, its child and with it every process
# and mount is gone.
# shellcheck disable=SC2016 # expanded by the inner shell
timeout --kill-after=10 600 unshare --mount --pid --fork --kill-child --propagation private bash -euo pipefail -c '
  root=$1 work=$2 archives=$3 demo=$4 version=$5
  m=$work/merged
  mount -t overlay overlay -o "lowerdir=$root,upperdir=$work/upper,workdir=$work/overlay-work" "$m"
  mount -t proc proc "$m/proc"
  mount --rbind /dev "$m/dev"
  mount -t sysfs -o ro sysfs "$m/sys"
  mount -t tmpfs tmpfs "$m/tmp"
  mount -t tmpfs tmpfs "$m/run"
  mkdir -p "$m/pkgs"
  mount --bind "$work/debs" "$m/pkgs"
  mount --bind "$archives" "$m/var/cache/apt/archives"
  cp /etc/resolv.conf "$m/etc/resolv.conf" 2>/dev/null || true
  chroot "$m" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    bash -euo pipefail -c "$demo" demo "$version"
' packages "$vm_dir/bookworm-root" "$work" "$vm_dir/bookworm-apt-archives" "$demo" "$version" ||
  fail "the demo in the Debian 12 root failed (exit $?)"
echo "packages: build, install into Debian 12 and demo ok"
