#!/usr/bin/env bash
# Prints the version of the guest kernel (Debian's linux-image-amd64), whose
# headers build the guest driver. The host may run a different kernel.
set -euo pipefail
dep=$(dpkg-query -W -f='${Depends}' linux-image-amd64 2>/dev/null) || {
  echo "guest-kernel-version: linux-image-amd64 is not installed (run scripts/install-deps.sh)" >&2
  exit 1
}
ver=$(echo "$dep" | sed -n 's/.*linux-image-\([^ ,]*\).*/\1/p' | head -n1)
if [ -z "$ver" ] || [ ! -d "/lib/modules/$ver/build" ]; then
  echo "guest-kernel-version: headers for '$ver' missing in /lib/modules (install linux-headers-amd64)" >&2
  exit 1
fi
echo "$ver"
