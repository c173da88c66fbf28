#!/usr/bin/env bash
# Installs every build and test dependency of HarmonAIze from Debian's packages.
# Idempotent: packages already present are left alone, and a second run is quick.
# Usage: scripts/install-deps.sh  (as root, or with sudo available)
set -euo pipefail

# Why each group is here:
#  toolchain      - gcc/g++ 12 build the project; clang 14 + libFuzzer + compiler-rt
#                   build the fuzz targets and give LeakSanitizer a runtime; ccache
#                   lets every build reuse objects an earlier build compiled.
#  service libs   - Boost (Asio for all service I/O, Beast for the metrics endpoint),
#                   liburing (checkpoint storage I/O), ISA-L (CRC32C of checkpoint chunks),
#                   spdlog/fmt, nlohmann-json, toml++, CLI11: the established libraries the
#                   code uses instead of hand-written equivalents. libsystemd tells systemd
#                   when harmonaized is ready (sd_notify); systemd's systemd-analyze checks
#                   the shipped unit.
#  metrics        - prometheus-cpp (its core library: metric families and the text
#                   serialiser behind GET /metrics) and prometheus (promtool, which the
#                   metrics tests run over a live scrape).
#  libvirt        - the C API (domain definitions, attach/detach of passthrough devices),
#                   libxml2 (domain XML, the parser libvirt itself uses), the daemon and
#                   virt-xml-validate for validating generated domain XML.
#  tests/bench    - GoogleTest/GoogleMock, Google Benchmark, RapidCheck (property tests),
#                   Open MPI and Gloo (the collective references the benchmarks measure).
#  several hosts  - Redis is the cluster store (membership leases; Gloo's rendezvous),
#                   reached through hiredis; the multi-host tests run redis-server in a
#                   network namespace of their own (ip and tc from iproute2).
#  VM tests       - debootstrap builds the Debian 13 root that carries QEMU >= 10.2 and
#                   the newer guest kernels (vm-images/build-toolchain.sh installs those
#                   from trixie and trixie-backports); busybox-static/cpio build the guest
#                   initramfs (xz-utils unpacks Debian 13's modules); Debian 12's guest
#                   kernel and its headers build and run the guest driver; sparse checks it;
#                   dkms builds it from the installed source tree (tenant_install).
#  PyTorch        - Debian's PyTorch 1.13 (python3-torch for the interpreter, libtorch-dev
#                   for the c10d backend's headers and libraries), pybind11-dev and
#                   python3-dev to build the `harmonaize` Python package, python3-numpy
#                   and python3-pytest for its tests. Debian's python3 (/usr/bin/python3)
#                   is the interpreter these belong to.
#  experiment     - python3-matplotlib (Agg backend) draws the plots of the cooperation
#                   experiment's report (hypervisor/experiment/report/plot.py).
#  CLI docs       - help2man writes the man pages of hzctl and hz from their own --help
#                   and --version at build time; bash-completion loads their completion
#                   scripts (installed to share/bash-completion/completions).
#  packages       - dpkg-dev: dpkg-shlibdeps computes the Depends of the .deb packages
#                   scripts/build-packages.sh builds (dpkg-deb, from dpkg, packs them);
#                   lintian checks them against Debian's policy; the packages test
#                   installs them into a Debian 12 root made by debootstrap.
PACKAGES=(
  build-essential cmake ninja-build pkg-config git ccache
  clang-14 clang llvm-14 libfuzzer-14-dev libclang-rt-14-dev clang-format clang-tidy
  libboost-dev liburing-dev libisal-dev
  libspdlog-dev libfmt-dev nlohmann-json3-dev libtomlplusplus-dev libcli11-dev
  libsystemd-dev systemd prometheus-cpp-dev prometheus
  libvirt-dev libxml2-dev libvirt-clients libvirt-daemon libvirt-daemon-driver-qemu
  libgtest-dev libgmock-dev libbenchmark-dev librapidcheck-dev
  openmpi-bin libopenmpi-dev libgloo-dev
  redis-server libhiredis-dev
  debootstrap busybox-static cpio gzip xz-utils kmod
  linux-image-amd64 linux-headers-amd64 sparse linux-source-6.1 dkms
  python3 procps iproute2 util-linux
  python3-dev python3-torch libtorch-dev pybind11-dev python3-numpy python3-pytest
  python3-matplotlib
  help2man bash-completion
  dpkg-dev lintian
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${#missing[@]} packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# The guest kernel is installed into /boot for the VM images; the host keeps its own.
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
