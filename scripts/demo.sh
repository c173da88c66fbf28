#!/usr/bin/env bash
# The end-to-end demo on built-in defaults, from a fresh machine:
#   1. installs dependencies and builds the project (default preset);
#   2. starts harmonaized with no configuration file;
#   3. the operator creates a tenant and binds three VM sockets to it (hzctl);
#   4. three tenant processes, one per socket, each a container-style tenant on
#      the virtio-user transport, join one communicator and all-reduce 16 MiB
#      through the service, zero-copy from their registered memory, then
#      save, restore and verify a checkpoint of their shard;
#   5. the operator's view: connected VMs, communicators, counters and metrics.
# Everything printed comes from the programs that did the work.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

scripts/install-deps.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)" --target harmonaized hzctl hz_demo_tenant

bin=$root/build/default
work=$(mktemp -d /tmp/harmonaize-demo.XXXXXX)
daemon_pid=
cleanup() {
  if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
    kill -TERM "$daemon_pid"
    wait "$daemon_pid" || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
hzctl() { "$bin/hypervisor/hzctl/hzctl" --socket "$work/control.sock" "$@"; }

say "starting harmonaized (built-in defaults, state in $work)"
"$bin/hypervisor/service/harmonaized" --state-dir "$work" --metrics-port 0 \
  --log-level warn >"$work/harmonaized.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do [ -S "$work/control.sock" ] && break; sleep 0.1; done
[ -S "$work/control.sock" ] || { cat "$work/harmonaized.log"; exit 1; }

say "operator: create tenant 'acme' and bind three VM sockets to it"
hzctl tenant create acme --weight 2
for i in 0 1 2; do hzctl vm bind --tenant acme --socket "$work/vm$i.sock"; done
hzctl tenant list

say "tenant: three ranks all-reduce through the device"
pids=()
for i in 0 1 2; do
  HZ_DEVICE="vhost-user:$work/vm$i.sock" \
    "$bin/guest/examples/hz_demo_tenant" "$i" 3 "$work/uid" &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
[ "$status" -eq 0 ] || { echo "a tenant rank failed"; cat "$work/harmonaized.log"; exit 1; }

say "operator: what the service saw"
hzctl vm list
hzctl counters

say "stopping harmonaized (SIGTERM drains in-flight requests)"
kill -TERM "$daemon_pid"
wait "$daemon_pid"
daemon_pid=
echo "harmonaized exited cleanly"
