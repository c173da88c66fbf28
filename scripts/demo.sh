#!/usr/bin/env bash
# The end-to-end demo on built-in defaults, from a fresh machine:
#   1. installs dependencies and builds the project (default preset);
#   2. starts harmonaized with no configuration file;
#   3. the operator creates a tenant and binds three VM sockets to it (hzctl);
#   4. three tenant processes, one per socket, each a container-style tenant on
#      the virtio-user transport, join one communicator and all-reduce 16 MiB
#      through the service, zero-copy from their registered memory, then
#      subscribe to maintenance notices while they work;
#   5. the operator schedules a maintenance of this host (hzctl maintenance
#      schedule) once every rank has subscribed; each rank saves a checkpoint
#      of its shard in reaction, acknowledges the notice approving an early
#      start, then restores and verifies the checkpoint; with every tenant's
#      approval the maintenance starts at once, and the operator completes it;
#   6. the operator's view: connected VMs, counters, the ranks' checkpoints,
#      the maintenance's status and the tenant's durable event state;
#   7. PyTorch: three DDP ranks of a second tenant, launched with
#      torch.distributed.run on backend "harmonaize", each on its own socket;
#      a maintenance of its three VMs mid-training makes every rank save its
#      state through the provider and approve; started again with --resume, the
#      ranks restore the step they saved and end with the same parameters.
# Everything printed comes from the programs that did the work.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

scripts/install-deps.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)" --target harmonaized hzctl hz_demo_tenant \
  harmonaize_python

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

say "tenant: three ranks subscribe to maintenance notices and all-reduce through the device"
pids=()
for i in 0 1 2; do
  HZ_DEVICE="vhost-user:$work/vm$i.sock" \
    "$bin/guest/examples/hz_demo_tenant" "$i" 3 "$work/uid" \
    --maintenance "$work/ready$i" --notice-timeout-s 60 &
  pids+=($!)
done
# The notice goes out once every rank has subscribed (bounded wait).
for _ in $(seq 600); do
  [ -e "$work/ready0" ] && [ -e "$work/ready1" ] && [ -e "$work/ready2" ] && break
  sleep 0.1
done
for i in 0 1 2; do
  [ -e "$work/ready$i" ] || { echo "rank $i did not subscribe"; cat "$work/harmonaized.log"; exit 1; }
done

host=$(hostname)
say "operator: schedule a maintenance of host '$host' (starts in 10 minutes unless every tenant approves)"
hzctl maintenance schedule --host "$host" --at +600 --duration 300
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
[ "$status" -eq 0 ] || { echo "a tenant rank failed"; cat "$work/harmonaized.log"; exit 1; }

say "operator: what the service saw"
hzctl vm list
hzctl counters

say "operator: the checkpoints the ranks saved"
hzctl checkpoint list --tenant acme

say "operator: 'acme's event log: each VM's cursor, and the notice it approved early"
hzctl event status --tenant acme

say "operator: the maintenance started once 'acme' approved; complete it"
for _ in $(seq 100); do
  hzctl --json maintenance status | grep -q '"state": "started"' && break
  sleep 0.1
done
hzctl maintenance status
hzctl maintenance complete --id 1

say "PyTorch: tenant 'ml' trains with DDP on backend harmonaize (three ranks, torch.distributed.run)"
hzctl tenant create ml
for i in 0 1 2; do hzctl vm bind --tenant ml --socket "$work/ml$i.sock" >/dev/null; done
mkdir -p "$work/ml-ready"
# The interpreter CMake built the package for (the one with Debian's torch,
# not necessarily the first python3 on PATH); the package from the build tree.
py=$(sed -n 's/^HZ_PYTHON_EXECUTABLE:INTERNAL=//p' "$bin/CMakeCache.txt")
# torch 1.13 spells the flag --nproc_per_node, and on Python 3.11 it cannot
# parse torchrun's default --redirects/--tee, so stdout is teed into per-rank logs.
train() {
  PYTHONPATH="$bin/python" OMP_NUM_THREADS=1 timeout 300 "$py" -m torch.distributed.run \
    --standalone --nproc_per_node 3 --redirects 1 --tee 1 --log_dir "$work/torchrun" \
    examples/pytorch/ddp_train.py --socket-dir "$work" --socket-prefix ml --steps 60 "$@"
}
train --ready-dir "$work/ml-ready" --ready-step 20 --expect-notice --result "$work/ml-first" &
train_pid=$!
for _ in $(seq 1200); do
  [ "$(ls "$work/ml-ready" | wc -l)" -ge 3 ] && break
  kill -0 "$train_pid" 2>/dev/null || break
  sleep 0.1
done
[ "$(ls "$work/ml-ready" | wc -l)" -ge 3 ] || { echo "the PyTorch ranks did not start"; exit 1; }

say "operator: schedule a maintenance of 'ml's three VMs while it trains"
hzctl maintenance schedule --host "$host" --at +600 --duration 300 \
  --vm "$work/ml0.sock" --vm "$work/ml1.sock" --vm "$work/ml2.sock"
wait "$train_pid" || { echo "PyTorch training failed"; cat "$work/harmonaized.log"; exit 1; }

say "operator: 'ml's checkpoints (one stream per rank), its approval and the maintenance"
hzctl checkpoint list --tenant ml
hzctl event status --tenant ml
hzctl maintenance status

say "PyTorch: the job started again with --resume restores its checkpoints and trains on"
train --resume --result "$work/ml-resumed" || { echo "the resumed run failed"; exit 1; }
if cmp -s "$work/ml-first" "$work/ml-resumed"; then
  echo "the resumed run ended with the parameters of the run that never stopped" \
    "(sha256 $(cut -c1-16 "$work/ml-first"))"
else
  echo "the resumed run ended with different parameters"; exit 1
fi

say "stopping harmonaized (SIGTERM drains in-flight requests)"
kill -TERM "$daemon_pid"
wait "$daemon_pid"
daemon_pid=
echo "harmonaized exited cleanly"
