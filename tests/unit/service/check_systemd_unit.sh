#!/usr/bin/env bash
# Usage: check_systemd_unit.sh UNIT_FILE HARMONAIZED_BINARY INSTALLED_BINARY
# UNIT_FILE is the configured unit (the one `cmake --install` installs). It
# must run INSTALLED_BINARY (the install prefix's sbin/harmonaized), wait for
# its readiness notification, keep its sockets in /run/harmonaize and keep
# the hardening below, and systemd must accept it (systemd-analyze verify,
# and an exposure score of at most 4.0 from systemd-analyze security).
# Without systemd-analyze only the directives are checked (the rest is
# skipped with a message).
set -euo pipefail
unit=$1
binary=$2
installed=$3
failures=0

need() {
  local line=$1
  if ! grep -qxF -- "$line" "$unit"; then
    echo "check_systemd_unit: $unit lacks: $line" >&2
    failures=$((failures + 1))
  fi
}
need_match() {
  local what=$1 regex=$2
  if ! grep -qxE -- "$regex" "$unit"; then
    echo "check_systemd_unit: $unit lacks $what (a line matching $regex)" >&2
    failures=$((failures + 1))
  fi
}

need "Type=notify"
need "NotifyAccess=main"
need "RuntimeDirectory=harmonaize"
need "ExecStart=$installed --foreground --fd-store \\"
need_match "a file-descriptor store" 'FileDescriptorStoreMax=[1-9][0-9]*'
need "RuntimeDirectoryPreserve=restart"
need "    --control-socket /run/harmonaize/control.sock --vm-socket-dir /run/harmonaize \\"
if grep -qE '@[A-Z_]+@' "$unit"; then
  echo "check_systemd_unit: $unit has an unconfigured @VARIABLE@" >&2
  failures=$((failures + 1))
fi
need "NoNewPrivileges=yes"
need "ProtectSystem=strict"
need "ProtectHome=yes"
need "PrivateTmp=yes"
need "UMask=0077"
need "SystemCallArchitectures=native"
need "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK"
need_match "a capability bounding set (without CAP_SYS_ADMIN)" \
  'CapabilityBoundingSet=[A-Z_ ]*'
if grep -qE '^CapabilityBoundingSet=.*CAP_SYS_ADMIN' "$unit"; then
  echo "check_systemd_unit: CapabilityBoundingSet keeps CAP_SYS_ADMIN" >&2
  failures=$((failures + 1))
fi
need_match "a finite LimitMEMLOCK" 'LimitMEMLOCK=[0-9]+[KMG]?'
need_match "the state and runtime directories as ReadWritePaths" \
  'ReadWritePaths=.*/var/lib/harmonaize.*/run/harmonaize.*'

if ! command -v systemd-analyze >/dev/null; then
  echo "check_systemd_unit: SKIP systemd-analyze checks: systemd-analyze is not installed"
  [ "$failures" -eq 0 ] || exit 1
  exit 0
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# verify insists that the ExecStart binary exists: point it at the build's.
sed -e "s|^ExecStart=[^ ]*|ExecStart=$binary|" "$unit" >"$dir/harmonaized.service"
if ! out=$(cd "$dir" && systemd-analyze verify ./harmonaized.service 2>&1) || [ -n "$out" ]; then
  echo "check_systemd_unit: systemd-analyze verify:" >&2
  echo "$out" >&2
  failures=$((failures + 1))
fi
if (cd "$dir" && systemd-analyze security --offline=true --threshold=40 ./harmonaized.service \
  >"$dir/security.txt" 2>&1); then
  tail -n 1 "$dir/security.txt"
elif grep -q "unrecognized option\|Unknown option" "$dir/security.txt"; then
  echo "check_systemd_unit: SKIP the exposure score: this systemd-analyze has no --offline"
else
  echo "check_systemd_unit: systemd-analyze security (exposure above 4.0):" >&2
  cat "$dir/security.txt" >&2
  failures=$((failures + 1))
fi
[ "$failures" -eq 0 ] || exit 1
echo "check_systemd_unit: $unit is sandboxed and valid"
