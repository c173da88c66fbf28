#!/usr/bin/env bash
# Fixture of the VM tests: the Debian 13 toolchain root (cached after the
# first run) and the guest image with the driver, tools and guest tests.
# Usage: build_images.sh VM_DIR
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
start=$SECONDS
"$top/vm-images/build-toolchain.sh" "$1"
"$top/vm-images/build-guest.sh" "$1"
echo "build_images: ready in $((SECONDS - start)) s"
