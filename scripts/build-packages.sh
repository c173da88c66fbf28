#!/usr/bin/env bash
# Builds HarmonAIze's Debian packages from this tree: a release build with
# prefix /usr, each install component (top CMakeLists.txt) staged with DESTDIR,
# and each stage made a .deb by dpkg-deb. No network and no debhelper: the
# maintainer scripts below are the ones debhelper would generate, written out.
#
#   harmonaized        host component: harmonaized, hzctl, the systemd unit, man
#                      pages, completions, the example configuration, docs
#   libharmonaize1     libharmonaize.so.1 alone (Debian policy 8.2: a runtime
#                      library package holds no programs, so that a future
#                      libharmonaize2 installs beside it)
#   harmonaize-tools   hz, its man page and completion (from the tenant component)
#   libharmonaize-dev  tenant-dev: headers, the .so link, harmonaize.pc, the CMake package
#   harmonaize-nccl    the NCCL-compatible libnccl.so.2 and nccl.h, under their own directories
#   harmonaize-dkms    the guest driver's DKMS source and the udev rule
#
# Depends are computed by dpkg-shlibdeps from the ELF files' needs, plus what
# the maintainer scripts use. Debug information is stripped (no -dbgsym packages).
#
# packaging/debian/ holds what a debian/ directory would: the changelog (whose
# latest entry gives the packages' version; its upstream part must be the
# project's version), the machine-readable copyright file every package ships,
# libharmonaize1's symbols file and the lintian overrides every package ships
# (each with the reason lintian's finding does not apply). The packages are
# lintian-clean: the packages test fails on any error or warning.
#
# Usage: scripts/build-packages.sh OUT_DIR [BUILD_DIR]
#   BUILD_DIR defaults to build/packages. Extra configure arguments may be given
#   in HZ_PACKAGE_CMAKE_ARGS (space-separated), the maintainer in HZ_PACKAGE_MAINTAINER.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 OUT_DIR [BUILD_DIR]" >&2
  exit 2
fi
mkdir -p "$1"
out=$(cd "$1" && pwd)
build=${2:-$root/build/packages}
mkdir -p "$build"
build=$(cd "$build" && pwd)
maintainer=${HZ_PACKAGE_MAINTAINER:-HarmonAIze maintainers <maintainers@harmonaize.invalid>}
debian=$root/packaging/debian
log() { echo "[build-packages] $*" >&2; }
die() { echo "[build-packages] error: $*" >&2; exit 1; }
for tool in cmake ninja dpkg-deb dpkg-shlibdeps dpkg-gensymbols dpkg-parsechangelog strip od gzip; do
  command -v "$tool" >/dev/null || die "$tool is missing (scripts/install-deps.sh installs it)"
done

# 1. The release build. No tests, benchmarks or Python package; -Werror only
#    where HZ_PACKAGE_CMAKE_ARGS asks for it (the presets' flags). No CUDA
#    either: the CUDA runtime is no package of Debian's main archive, and
#    libnccl.so.2 must not depend on a toolkit the build machine happens to have.
#    Programs and libraries are linked with -z now (with Debian's default -z
#    relro: the GOT is read-only once loaded), as dpkg-buildflags' hardening does.
# shellcheck disable=SC2206 # word splitting is the point
cmake_args=(${HZ_PACKAGE_CMAKE_ARGS:-})
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_INSTALL_PREFIX=/usr -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_SKIP_INSTALL_RPATH=ON -DHZ_BUILD_TESTS=OFF -DHZ_BUILD_BENCH=OFF -DHZ_VM_TESTS=OFF \
  -DHZ_PYTHON=OFF -DHZ_NCCL_CUDA=OFF -DCMAKE_EXE_LINKER_FLAGS=-Wl,-z,now \
  -DCMAKE_SHARED_LINKER_FLAGS=-Wl,-z,now "${cmake_args[@]}" >"$build/configure.log" 2>&1 ||
  { tail -n 40 "$build/configure.log" >&2; die "configure failed (log: $build/configure.log)"; }
cmake --build "$build" -j "$(nproc)" >"$build/build.log" 2>&1 ||
  { tail -n 40 "$build/build.log" >&2; die "build failed (log: $build/build.log)"; }
upstream=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
[ -n "$upstream" ] || die "no project version in $build/CMakeCache.txt"
version=$(dpkg-parsechangelog -l "$debian/changelog" -S Version) ||
  die "packaging/debian/changelog cannot be parsed"
[ "${version%-*}" = "$upstream" ] ||
  die "packaging/debian/changelog's latest entry is $version, the project's version $upstream: add an entry for $upstream-1"
arch=$(dpkg --print-architecture)
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$build/CMakeCache.txt")
log "version $version ($arch)"

# 2. Each component staged into its own root.
stages=$build/deb
rm -rf "$stages"
mkdir -p "$stages"
stage_component() { # COMPONENT DIR
  DESTDIR=$2 cmake --install "$build" --component "$1" >/dev/null
  [ -d "$2/usr" ] || die "component $1 installed nothing"
}
for pair in host:harmonaized tenant:libharmonaize1 tenant-dev:libharmonaize-dev nccl:harmonaize-nccl \
  dkms:harmonaize-dkms; do
  stage_component "${pair%%:*}" "$stages/${pair#*:}"
done
# hz moves from the tenant component to harmonaize-tools.
tools=$stages/harmonaize-tools
for f in usr/bin/hz usr/share/man/man1/hz.1 usr/share/bash-completion/completions/hz; do
  [ -e "$stages/libharmonaize1/$f" ] || die "the tenant component has no $f"
  mkdir -p "$tools/$(dirname "$f")"
  mv "$stages/libharmonaize1/$f" "$tools/$f"
done
find "$stages/libharmonaize1" -depth -type d -empty -delete
leftover=$(find "$stages/libharmonaize1" -type f -o -type l | grep -v '/libharmonaize\.so\.' || true)
[ -z "$leftover" ] || die "libharmonaize1 would hold more than the library: $leftover"

is_elf() { [ "$(head -c4 "$1" | od -An -c | tr -d ' ')" = '177ELF' ]; }

# 3. Package files: ELF stripped as dh_strip does, man pages compressed, the
#    copyright file and Debian changelog (gzip -9n, as dh_compress does) and
#    the lintian overrides of each package.
for dir in "$stages"/*; do
  pkg=$(basename "$dir")
  while IFS= read -r -d '' f; do
    is_elf "$f" || continue
    case $f in
    *.so | *.so.*) strip --strip-unneeded --remove-section=.comment --remove-section=.note "$f" ;;
    *) strip --remove-section=.comment --remove-section=.note "$f" ;;
    esac
  done < <(find "$dir" -type f -print0)
  find "$dir/usr/share/man" -type f -name '*.[0-9]' -exec gzip -9n {} + 2>/dev/null || true
  mkdir -p "$dir/usr/share/doc/$pkg"
  cp "$debian/copyright" "$dir/usr/share/doc/$pkg/copyright"
  gzip -9nc "$debian/changelog" >"$dir/usr/share/doc/$pkg/changelog.Debian.gz"
  mkdir -p "$dir/usr/share/lintian/overrides"
  cp "$debian/lintian-overrides" "$dir/usr/share/lintian/overrides/$pkg"
  mkdir -p "$dir/DEBIAN"
done

# The Debian configuration of the host service: a conffile the unit reads
# (EnvironmentFile=-/etc/default/harmonaized), so the operator's edits survive upgrades.
mkdir -p "$stages/harmonaized/etc/default"
cat >"$stages/harmonaized/etc/default/harmonaized" <<'EOF'
# Arguments added to harmonaized's command line by harmonaized.service, e.g.
# HARMONAIZED_ARGS="--log-format json". The configuration file,
# /etc/harmonaize/harmonaized.toml, is read when it exists (every key:
# /usr/share/doc/harmonaize/examples/harmonaized.toml.example).
# The operator restarts the service after a change; upgrades never do (a
# restart takes the device from every running VM).
HARMONAIZED_ARGS=""
EOF
# libvirt's QEMU hook (installed by the host component) is a conffile too.
printf '%s\n' /etc/default/harmonaized /etc/libvirt/hooks/qemu.d/harmonaize \
  >"$stages/harmonaized/DEBIAN/conffiles"
# Other packages link libharmonaize1 through this (dpkg-shlibdeps reads it):
# the C ABI only grows within a soname, so any version from this one on serves.
echo "libharmonaize 1 libharmonaize1 (>= $upstream)" >"$stages/libharmonaize1/DEBIAN/shlibs"
# And the symbols file, from packaging/debian/libharmonaize1.symbols: each
# symbol with the version that brought it, so a program needs no newer
# library than the symbols it uses. A symbol the library no longer exports
# (an ABI break within the soname) fails the build; a new one is listed with
# this version (and belongs in packaging/debian/libharmonaize1.symbols).
gensymbols=$build/gensymbols
rm -rf "$gensymbols"
mkdir -p "$gensymbols/debian"
cp "$debian/changelog" "$gensymbols/debian/changelog"
printf 'Source: harmonaize\n\nPackage: libharmonaize1\nArchitecture: any\n' >"$gensymbols/debian/control"
(cd "$gensymbols" && dpkg-gensymbols -plibharmonaize1 -P"$stages/libharmonaize1" -v"$version" -c1 \
  -I"$debian/libharmonaize1.symbols" -O"$stages/libharmonaize1/DEBIAN/symbols") >"$gensymbols/log" 2>&1 ||
  { cat "$gensymbols/log" >&2; die "libharmonaize1's symbols differ from packaging/debian/libharmonaize1.symbols"; }
if grep -q '^+ ' "$gensymbols/log"; then
  log "new symbols, not yet in packaging/debian/libharmonaize1.symbols:"
  grep '^+ ' "$gensymbols/log" >&2
fi

# 4. Maintainer scripts.
write_script() { # PACKAGE NAME: the script from stdin
  cat >"$stages/$1/DEBIAN/$2"
  chmod 755 "$stages/$1/DEBIAN/$2"
}
write_script libharmonaize1 triggers <<<'activate-noawait ldconfig'
chmod 644 "$stages/libharmonaize1/DEBIAN/triggers"

# harmonaized: the unit is enabled and started on the first installation, as
# dh_installsystemd does, but an upgrade NEVER restarts it (the equivalent of
# dh_installsystemd --no-restart-after-upgrade): restarting harmonaized drops
# every VM's vhost-user connection, taking the device from every running VM.
# The new binary runs from the operator's next restart (after draining, e.g. in
# a maintenance). "start" on a running unit does nothing.
write_script harmonaized postinst <<'EOF'
#!/bin/sh
set -e
if [ "$1" = configure ] || [ "$1" = abort-upgrade ] || [ "$1" = abort-deconfigure ] ||
   [ "$1" = abort-remove ]; then
	deb-systemd-helper unmask harmonaized.service >/dev/null || true
	if deb-systemd-helper --quiet was-enabled harmonaized.service; then
		deb-systemd-helper enable harmonaized.service >/dev/null || true
	else
		deb-systemd-helper update-state harmonaized.service >/dev/null || true
	fi
	if [ -d /run/systemd/system ]; then
		systemctl --system daemon-reload >/dev/null || true
		# Never restart here: see the comment in scripts/build-packages.sh.
		deb-systemd-invoke start harmonaized.service >/dev/null || true
	fi
fi
EOF
# Stopped on removal only, never for an upgrade.
write_script harmonaized prerm <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
	deb-systemd-invoke stop harmonaized.service >/dev/null || true
fi
EOF
write_script harmonaized postrm <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
	systemctl --system daemon-reload >/dev/null || true
fi
if [ "$1" = remove ] && command -v deb-systemd-helper >/dev/null; then
	deb-systemd-helper mask harmonaized.service >/dev/null || true
fi
if [ "$1" = purge ] && command -v deb-systemd-helper >/dev/null; then
	deb-systemd-helper purge harmonaized.service >/dev/null || true
	deb-systemd-helper unmask harmonaized.service >/dev/null || true
fi
EOF

# harmonaize-dkms: as Debian's DKMS packages (dh_dkms) do, DKMS's own
# common.postinst adds the source and builds and installs the module for the
# running and the newest kernel whose headers are installed; prerm removes it.
# The udev rule gives /dev/harmonaizeN to the group harmonaize, created here.
write_script harmonaize-dkms postinst <<EOF
#!/bin/sh
set -e
if [ "\$1" = configure ]; then
	getent group harmonaize >/dev/null || groupadd --system harmonaize
	/usr/lib/dkms/common.postinst harmonaize $upstream "" "" "\$2"
fi
EOF
write_script harmonaize-dkms prerm <<EOF
#!/bin/sh
set -e
case "\$1" in
remove | upgrade | deconfigure)
	if [ -n "\$(dkms status -m harmonaize -v $upstream)" ]; then
		dkms remove -m harmonaize -v $upstream --all
	fi
	;;
esac
EOF

# 5. Control files.
shlib_depends() { # PACKAGE: dpkg-shlibdeps' Depends for its ELF files, or nothing
  local dir=$stages/$1 elves=() f
  while IFS= read -r -d '' f; do
    is_elf "$f" && elves+=("$f")
  done < <(find "$dir/usr" -type f -print0)
  [ "${#elves[@]}" -gt 0 ] || return 0
  # dpkg-shlibdeps wants a debian/control beside it; -S finds libharmonaize1's shlibs.
  local work=$build/shlibdeps/$1
  rm -rf "$work"
  mkdir -p "$work/debian"
  printf 'Source: harmonaize\n\nPackage: %s\nArchitecture: any\n' "$1" >"$work/debian/control"
  (cd "$work" && dpkg-shlibdeps -O -S"$stages/libharmonaize1" "${elves[@]}" 2>"$work/warnings") | sed -n 's/^shlibs:Depends=//p' ||
    { cat "$work/warnings" >&2; die "dpkg-shlibdeps failed for $1"; }
}
join_depends() { # the non-empty arguments, comma-separated
  local out="" d
  for d in "$@"; do
    [ -n "$d" ] && out=${out:+$out, }$d
  done
  echo "$out"
}
control() { # PACKAGE SECTION EXTRA_DEPENDS SUMMARY DESCRIPTION...
  local pkg=$1 section=$2 extra=$3 summary=$4
  shift 4
  local shlibs depends size
  shlibs=$(shlib_depends "$pkg") || exit 1
  depends=$(join_depends "$shlibs" "$extra")
  size=$(du -sk --exclude=DEBIAN "$stages/$pkg" | cut -f1)
  {
    echo "Package: $pkg"
    echo "Source: harmonaize"
    echo "Version: $version"
    echo "Architecture: $arch"
    echo "Maintainer: $maintainer"
    echo "Installed-Size: $size"
    [ -z "$depends" ] || echo "Depends: $depends"
    echo "Section: $section"
    echo "Priority: optional"
    echo "Description: $summary"
    local line
    for line in "$@"; do
      if [ -z "$line" ]; then echo " ."; else echo " $line"; fi
    done
  } >"$stages/$pkg/DEBIAN/control"
}
control harmonaized admin "init-system-helpers (>= 1.54~)" \
  "HarmonAIze host service: paravirtual AI device for tenant VMs" \
  "harmonaized serves a paravirtual virtio device over vhost-user to tenant" \
  "VMs: collectives, checkpoints, events and device negotiation through the" \
  "host. hzctl is the operator's command-line tool. The systemd unit" \
  "harmonaized.service is enabled on installation and never restarted by an" \
  "upgrade (a restart takes the device from every running VM)."
control libharmonaize1 libs "" \
  "HarmonAIze tenant library (runtime)" \
  "libharmonaize lets a tenant's programs use the HarmonAIze device, through" \
  "the guest driver (/dev/harmonaizeN) or vhost-user (HZ_DEVICE)."
control harmonaize-tools utils "" \
  "HarmonAIze tenant command-line tool (hz)" \
  "hz shows and exercises the HarmonAIze device from the tenant's side:" \
  "status, topology, events, checkpoints and a collective self-test."
control libharmonaize-dev libdevel "libharmonaize1 (= $version)" \
  "HarmonAIze tenant library (development files)" \
  "Headers (harmonaize/hz.h, hz.hpp), the pkg-config file harmonaize.pc and" \
  "the CMake package (find_package(harmonaize)) for building against" \
  "libharmonaize."
control harmonaize-nccl libs "" \
  "NCCL-compatible library on the HarmonAIze device" \
  "libnccl.so.2 and nccl.h under directories of their own" \
  "(/usr/$libdir/harmonaize-nccl," \
  "/usr/include/harmonaize-nccl): a program uses them instead of NVIDIA's NCCL" \
  "when its search path names them."
control harmonaize-dkms kernel "dkms, passwd" \
  "HarmonAIze guest driver (DKMS source)" \
  "The Linux driver of the HarmonAIze device inside a tenant's VM, built by" \
  "DKMS for each installed kernel, and the udev rule giving /dev/harmonaizeN" \
  "to the group harmonaize."

# 6. The packages, their files' modes set as dh_fixperms sets them whatever
#    the umask: 755 for directories, programs (ELF but no shared library) and
#    the scripts among the programs, libvirt's hooks and maintainer scripts;
#    644 for the rest.
is_script() { [ "$(head -c2 "$1")" = '#!' ]; }
for dir in "$stages"/*; do
  pkg=$(basename "$dir")
  find "$dir" -type d -exec chmod 755 {} +
  while IFS= read -r -d '' f; do
    mode=644
    case $f in
    *.so | *.so.*) ;;
    "$dir"/usr/bin/* | "$dir"/usr/sbin/* | "$dir"/usr/libexec/* | "$dir"/DEBIAN/* | \
      "$dir"/etc/libvirt/hooks/*)
      if is_elf "$f" || is_script "$f"; then mode=755; fi ;;
    *) if is_elf "$f"; then mode=755; fi ;;
    esac
    chmod "$mode" "$f"
  done < <(find "$dir" -type f -print0)
  (cd "$dir" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z |
    xargs -0 -r md5sum) >"$dir/DEBIAN/md5sums"
  dpkg-deb --root-owner-group -Zxz --build "$dir" "$out/${pkg}_${version}_$arch.deb" >/dev/null
  log "$out/${pkg}_${version}_$arch.deb"
done
