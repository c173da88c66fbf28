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
#      ranks restore the step they saved and end with the same parameters;
#   8. once that harmonaized has stopped (SIGTERM), a host lost after a
#      maintenance: a private redis-server as the cluster store and two more
#      harmonaized, "host-a" and "host-b", on this machine (loopback, each its
#      own state directory and [cluster] configuration); tenant 'acme2' has a
#      VM socket on each. Its rank on host-a sets the peer-host checkpoint
#      tier; the operator schedules a maintenance of host-a; the rank hears
#      the notice, saves a few MiB, waits for DURABLE at tier PEER_HOST (the
#      replica committed on host-b) and approves, and the maintenance starts.
#      host-a is SIGKILLed; once host-b has dropped it, the tenant's VM on
#      host-b restores the state from the replica, bit-exact.
# Everything printed comes from the programs that did the work.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

scripts/install-deps.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)" --target harmonaized hzctl hz_demo_tenant \
  harmonaize_python hz

bin=$root/build/default
work=$(mktemp -d /tmp/harmonaize-demo.XXXXXX)
daemon_pid=
redis_pid='' host_a_pid='' host_b_pid='' # the last part's store and two hosts
cleanup() {
  trap - ERR
  local p
  for p in $daemon_pid $host_a_pid $host_b_pid $redis_pid; do
    if kill -0 "$p" 2>/dev/null; then
      kill -TERM "$p"
      wait "$p" || true
    fi
  done
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

say "two hosts: a private Redis as the cluster store, harmonaized as 'host-a' and 'host-b'"
# Both hosts on this machine, each with its own state directory and
# configuration; the store on a Unix socket, the data network on loopback. A
# short lease, so that a host that dies is dropped within about 1.3 s.
cluster_fail() {
  echo "$*"
  local log
  for log in redis host-a host-b; do
    if [ -e "$work/$log.log" ]; then echo "-- $log.log"; cat "$work/$log.log"; fi
  done
  exit 1
}
# A command of this part that fails (in a function too: -E) stops the demo
# with the logs.
set -E
trap 'cluster_fail "the demo stopped: the command at line $LINENO failed"' ERR
redis-server --port 0 --unixsocket "$work/redis.sock" --unixsocketperm 700 --save '' \
  --appendonly no --dir "$work" --logfile "$work/redis.log" &
redis_pid=$!
for _ in $(seq 100); do [ -S "$work/redis.sock" ] && break; sleep 0.1; done
[ -S "$work/redis.sock" ] || cluster_fail "redis-server did not start"
hzctl_on() { "$bin/hypervisor/hzctl/hzctl" --socket "$work/$1/control.sock" "${@:2}"; }
hz_on() { "$bin/guest/cli/hz" --device "vhost-user:$work/$1/vm.sock" "${@:2}"; }
for h in host-a host-b; do
  mkdir "$work/$h"
  cat >"$work/$h.toml" <<EOF
[scheduler]
enabled = false

[cluster]
store = "unix:$work/redis.sock"
host_name = "$h"
data_address = "127.0.0.1"
lease_ms = 1000
EOF
  "$bin/hypervisor/service/harmonaized" --config "$work/$h.toml" --state-dir "$work/$h" \
    --no-metrics --log-level info >"$work/$h.log" 2>&1 &
  if [ "$h" = host-a ]; then host_a_pid=$!; else host_b_pid=$!; fi
done
hosts_seen() { hzctl_on "$1" --json cluster status 2>/dev/null | grep -c '"self":' || true; }
for h in host-a host-b; do
  for _ in $(seq 100); do [ "$(hosts_seen "$h")" -eq 2 ] && break; sleep 0.1; done
  [ "$(hosts_seen "$h")" -eq 2 ] || cluster_fail "$h does not see both hosts"
done
hzctl_on host-a cluster status

say "operator: tenant 'acme2' on both hosts, one VM socket on each"
for h in host-a host-b; do
  hzctl_on "$h" tenant create acme2 >/dev/null
  hzctl_on "$h" vm bind --tenant acme2 --socket "$work/$h/vm.sock"
done

say "tenant on host-a: checkpoints of stream 1 go to the peer-host tier"
hz_on host-a checkpoint policy --stream 1 --tier peer_host

say "operator: schedule a maintenance of host-a"
hzctl_on host-a maintenance schedule --host host-a --at +600 --duration 120

say "tenant on host-a: the notice arrives; it saves its state, waits for DURABLE at PEER_HOST, approves"
notice=
for _ in $(seq 50); do
  notice=$(hz_on host-a events --topics maintenance --wait-ms 200 || true)
  [ -n "$notice" ] && break
done
[ -n "$notice" ] || cluster_fail "the tenant on host-a heard no maintenance notice"
echo "$notice"
head -c $((6 << 20 | 4321)) /dev/urandom >"$work/acme2-state" # the last chunk partial
hz_on host-a checkpoint save --stream 1 --step 3 "$work/acme2-state"
# CHECKPOINT events (SPEC.md 8.3.6) as JSON, the payload in hex: stream 1,
# tier 2 (PEER_HOST), step 3, each little-endian. Kind 0 is DURABLE, 1 FAILED.
peer_event() {
  hz_on host-a --json events --topics checkpoint --wait-ms 200 |
    grep "\"kind\":$1,\"payload\":\"0100000002000000030000000000000000" || true
}
for _ in $(seq 300); do
  [ -n "$(peer_event 0)" ] && break
  failed=$(peer_event 1)
  [ -z "$failed" ] || cluster_fail "the replica failed: $failed"
done
[ -n "$(peer_event 0)" ] || cluster_fail "no DURABLE at PEER_HOST"
hz_on host-a events --topics checkpoint --wait-ms 200
hz_on host-a checkpoint list --stream 1
echo "-- the operators' view: host-a's checkpoint, and host-b's replica"
hzctl_on host-a checkpoint list --tenant acme2
hzctl_on host-b checkpoint list --tenant acme2
echo "-- the tenant approves the notice; the maintenance starts at once"
hz_on host-a events --topics maintenance --approve --wait-ms 500
started() { hzctl_on host-a --json maintenance status | grep -q '"state": "started"'; }
for _ in $(seq 100); do started && break; sleep 0.1; done
started || cluster_fail "the maintenance of host-a did not start"
hzctl_on host-a maintenance status

say "host-a is lost (SIGKILL); host-b drops it when its lease runs out"
kill -KILL "$host_a_pid"
{ wait "$host_a_pid"; } 2>/dev/null || true # bash's "Killed" notice: expected here
host_a_pid=
for _ in $(seq 100); do [ "$(hosts_seen host-b)" -eq 1 ] && break; sleep 0.1; done
[ "$(hosts_seen host-b)" -eq 1 ] || cluster_fail "host-b still lists host-a"
hzctl_on host-b cluster status

say "tenant on host-b: list stream 1 and restore it from the replica"
hz_on host-b checkpoint list --stream 1
hz_on host-b checkpoint restore --stream 1 --step 3 "$work/acme2-restored"
if cmp "$work/acme2-state" "$work/acme2-restored"; then
  echo "the state restored on host-b is the state saved on host-a, bit-exact" \
    "(cmp, $(stat -c %s "$work/acme2-restored") bytes)"
else
  cluster_fail "the state restored on host-b differs from the state saved on host-a"
fi

say "stopping host-b (SIGTERM)"
kill -TERM "$host_b_pid"
wait "$host_b_pid" || cluster_fail "host-b did not exit cleanly"
host_b_pid=
echo "host-b exited cleanly"
