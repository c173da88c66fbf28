#!/usr/bin/env bash
# Usage: tenant_install_test.sh SOURCE_DIR VERSION WORK_DIR
# Builds the tenant's side alone (HZ_BUILD_HOST=OFF) with every provider
# dependency out of reach, installs the tenant, tenant-dev, nccl and dkms
# components into a temporary prefix, and uses what was installed.
set -euo pipefail
src=$1
version=$2
# WORK_DIR is emptied first and removed at the end. It lies at a fixed place
# in the build tree, so that ccache (with CCACHE_BASEDIR) finds the objects
# of an earlier run, also one of another clone.
work=$3
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
fail() { echo "tenant_install: FAIL: $*" >&2; exit 1; }

# 1. A tenant-only build: pkg-config finds nothing (every provider library but
#    Boost, spdlog and Gloo is found through it), and those three are disabled.
if ! PKG_CONFIG_LIBDIR=/nonexistent cmake -S "$src" -B "$work/build" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHZ_BUILD_HOST=OFF -DHZ_PYTHON=OFF \
    -DCMAKE_DISABLE_FIND_PACKAGE_Boost=ON -DCMAKE_DISABLE_FIND_PACKAGE_spdlog=ON \
    -DCMAKE_DISABLE_FIND_PACKAGE_Gloo=ON -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON \
    -DCMAKE_INSTALL_PREFIX="$prefix" >"$work/configure.log" 2>&1; then
  cat "$work/configure.log" >&2
  fail "the tenant-only configure needed something of the provider's"
fi
cmake --build "$work/build" -j "$(nproc)" >"$work/build.log" 2>&1 ||
  { tail -50 "$work/build.log" >&2; fail "the tenant-only build failed"; }
[ ! -e "$work/build/hypervisor" ] || fail "the provider's side was configured"
for c in tenant tenant-dev nccl dkms; do
  cmake --install "$work/build" --component "$c" >/dev/null
done

# 2. libharmonaize: its soname, and nothing exported but the C API.
lib=$prefix/lib/libharmonaize.so.1
[ -f "$lib" ] || fail "no $lib"
soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = libharmonaize.so.1 ] || fail "soname is '$soname'"
others=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v -e '^hz_' -e '^HARMONAIZE_1$' || true)
[ -z "$others" ] || fail "exported beyond hz_*: $(echo "$others" | head -5 | tr '\n' ' ')"
[ "$(nm -D --defined-only "$lib" | grep -c ' hz_')" -ge 40 ] || fail "the C API is not exported"
"$prefix/bin/hz" --help >/dev/null || fail "the installed hz does not run"

# 3. A tenant program built against the installed files, both ways. It opens
#    a device that does not exist: the library answers with its error.
mkdir -p "$work/consumer"
cat >"$work/consumer/main.c" <<'C'
#include <harmonaize/hz.h>
#include <stdio.h>
int main(void) {
  hz_device_t* dev = NULL;
  int rc = hz_open("vhost-user:/nonexistent/harmonaize.sock", &dev);
  printf("%s\n", hz_strerror(rc));
  return rc == HZ_OK;
}
C
cat >"$work/consumer/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.25)
project(consumer C)
find_package(harmonaize ${version} REQUIRED CONFIG)
add_executable(consumer main.c)
target_link_libraries(consumer PRIVATE harmonaize::harmonaize)
CM
cmake -S "$work/consumer" -B "$work/consumer/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null ||
  fail "find_package(harmonaize) failed"
cmake --build "$work/consumer/build" >/dev/null || fail "the find_package consumer does not build"
"$work/consumer/build/consumer" | grep -q . || fail "the find_package consumer did not run"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
[ "$(pkg-config --modversion harmonaize)" = "$version" ] || fail "pkg-config version"
# shellcheck disable=SC2046
cc -o "$work/pc_consumer" "$work/consumer/main.c" $(pkg-config --cflags --libs harmonaize) ||
  fail "the pkg-config consumer does not build"
LD_LIBRARY_PATH=$prefix/lib "$work/pc_consumer" | grep -q . || fail "the pkg-config consumer did not run"

# 4. NCCL's API under its own prefix: found there, and it finds libharmonaize.
cat >"$work/nccl_main.c" <<'C'
#include <nccl.h>
#include <stdio.h>
int main(void) {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return 1;
  printf("%d\n", v);
  return 0;
}
C
cc -o "$work/nccl_consumer" "$work/nccl_main.c" -I"$prefix/include/harmonaize-nccl" \
  -L"$prefix/lib/harmonaize-nccl" -lnccl || fail "the NCCL consumer does not build"
v=$(LD_LIBRARY_PATH=$prefix/lib/harmonaize-nccl "$work/nccl_consumer") || fail "the NCCL consumer did not run"
[ "$v" -ge 22800 ] || fail "ncclGetVersion gave $v"

# 5. The guest driver, built by DKMS from the installed source tree for the
#    guest kernel, and its udev rule.
[ -f "$prefix/lib/udev/rules.d/70-harmonaize.rules" ] || fail "no udev rule"
kver=$("$src/scripts/guest-kernel-version.sh")
dkms_tree=$work/dkms
mkdir -p "$dkms_tree"
dkms add -m harmonaize -v "$version" --sourcetree "$prefix/src" --dkmstree "$dkms_tree" >/dev/null ||
  fail "dkms add"
dkms build -m harmonaize -v "$version" -k "$kver" --sourcetree "$prefix/src" \
  --dkmstree "$dkms_tree" >"$work/dkms.log" 2>&1 ||
  { cat "$work/dkms.log" >&2; cat "$dkms_tree"/harmonaize/"$version"/build/make.log >&2 || true; fail "dkms build"; }
ko=$(find "$dkms_tree/harmonaize/$version/$kver" -name 'harmonaize.ko*' | head -1)
[ -n "$ko" ] || fail "dkms built no harmonaize.ko"
modinfo "$ko" | grep -q '^alias: *virtio:' || fail "the module has no virtio alias"
echo "tenant_install: tenant-only build, install, find_package, pkg-config, NCCL and DKMS ok"
