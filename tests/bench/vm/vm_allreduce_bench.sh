#!/usr/bin/env bash
# The device's data path against the network inside VMs: two guests under
# QEMU/TCG, ranks 0 and 1 of one tenant on one harmonaized, time the same fp32
# SUM all-reduce (same sizes, same iteration counts, in the same run)
#   - through the HarmonAIze device: libharmonaize over /dev/harmonaize0,
#     buffers from hz_mem_alloc (registered guest memory the service reduces
#     in place);
#   - with Gloo (ring all-reduce, tcp transport) over the guests' virtio-net,
#     the two QEMUs joined by a QEMU "stream" netdev over host TCP (no root
#     networking, no tap).
# TCG slows both sides; the ratio shows what the device's data path saves.
# Each guest times its own loops; a size's time is the slower rank's.
#
# Usage: vm_allreduce_bench.sh HARMONAIZED HZCTL VM_DIR [--smoke | --full]
#          [--sizes B,B,..] [--iters N] [--warmup W]
#   default  64 KiB, 1 MiB, 8 MiB; 5 timed iterations after 1 warm-up
#   --smoke  4 KiB and 64 KiB, 2 iterations (the ctest vm_bench_allreduce_smoke)
#   --full   20 iterations
# VM_DIR is the toolchain and image directory of the VM tests (ctest's
# fixture vm_images_build prepares it). Output, on stdout, one JSON object
# per size:
#   {"bench":"vm_allreduce","size":B,"iters":N,"device_us":..,"gloo_us":..,
#    "ratio_gloo_over_device":..,"check":"ok",...}
# Progress goes to stderr. Exits non-zero if a guest failed or a result was
# wrong on either side.
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,26p' "$0" >&2; exit 2; }
harmonaized=$1 hzctl=$2
export HZ_TEST=vm_allreduce_bench
HZ_VM_DIR=$3
shift 3
sizes=65536,1048576,8388608 iters=5 warmup=1
while [ $# -gt 0 ]; do
	case $1 in
	--smoke) sizes=4096,65536 iters=2 warmup=1; shift ;;
	--full) iters=20; shift ;;
	--sizes) sizes=$2; shift 2 ;;
	--iters) iters=$2; shift 2 ;;
	--warmup) warmup=$2; shift 2 ;;
	*) echo "unknown argument: $1" >&2; exit 2 ;;
	esac
done
[[ $sizes =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "--sizes must be a comma-separated list of byte counts" >&2; exit 2; }
if ! [[ $iters =~ ^[0-9]+$ && $warmup =~ ^[0-9]+$ ]]; then
	echo "--iters and --warmup must be numbers" >&2
	exit 2
fi
# JSON results on the original stdout; everything else on stderr.
exec 3>&1 1>&2
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../../vm/lib.sh"

"$here/build-guest.sh" "$HZ_VM_DIR"
initrd=$HZ_VM_DIR/images/initramfs-bench.gz

hz_workdir
ctl=$HZ_WORK/control.sock
mkdir -p "$HZ_WORK/state" "$HZ_WORK/vms"
hz_spawn "$HZ_WORK/bench-harmonaized.log" "$harmonaized" --state-dir "$HZ_WORK/state" \
	--control-socket "$ctl" --vm-socket-dir "$HZ_WORK/vms" --no-metrics --log-level warn
service=$HZ_LAST_PID
hz_wait_socket "$ctl" "$service"
"$hzctl" -s "$ctl" tenant create tenant-a >/dev/null || fail "hzctl tenant create"
for vm in vm0 vm1; do
	"$hzctl" -s "$ctl" vm bind --tenant tenant-a --socket "$vm.sock" >/dev/null || fail "hzctl vm bind $vm"
	hz_wait_socket "$HZ_WORK/vms/$vm.sock" "$service"
done

# The guests' link: rank 0's QEMU listens on a free loopback port, rank 1's
# connects (and retries until rank 0's QEMU is up).
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
net=addr.type=inet,addr.host=127.0.0.1,addr.port=$port
guest() { # RANK NETDEV
	"$HZ_TOP/vm-images/run-guest.sh" --dir "$HZ_VM_DIR" --name "bench-vm$1" --socket "$HZ_WORK/vms/vm$1.sock" \
		--initrd "$initrd" --test vm_allreduce_bench --num-vqs 6 --vq-size 128 --config-size 64 \
		--mem 512M --timeout 400 --log "$HZ_WORK/bench-vm$1-guest.log" \
		--append "hz.rank=$1 hz.sizes=$sizes hz.iters=$iters hz.warmup=$warmup" \
		--qemu-arg -netdev --qemu-arg "$2" \
		--qemu-arg -device --qemu-arg "virtio-net-pci,netdev=n0,mac=52:54:00:48:5a:0$1" >/dev/null 2>&1
}
start=$SECONDS
guest 0 "stream,id=n0,server=on,$net" &
vm0=$!
HZ_PIDS+=("$vm0")
guest 1 "stream,id=n0,server=off,reconnect-ms=200,$net" &
vm1=$!
HZ_PIDS+=("$vm1")
rc0=0 rc1=0
wait "$vm0" || rc0=$?
wait "$vm1" || rc1=$?
say "guests done after $((SECONDS - start)) s"
for r in 0 1; do
	grep -a 'HZ-GUEST\|HZ-NET\|hz_vmbench\|HZ-BENCH\|HZ-RESULT' "$HZ_WORK/bench-vm$r-guest.log" | sed "s/^/[vm$r] /" || true
done
[ "$rc0" -eq 0 ] || fail "rank 0's guest failed (exit $rc0)"
[ "$rc1" -eq 0 ] || fail "rank 1's guest failed (exit $rc1)"

python3 - "$HZ_WORK/bench-vm0-guest.log" "$HZ_WORK/bench-vm1-guest.log" "$sizes" "$iters" "$warmup" >&3 <<'PY' ||
import json, sys
logs, sizes, iters, warmup = sys.argv[1:3], [int(s) for s in sys.argv[3].split(",")], int(sys.argv[4]), int(sys.argv[5])
per_rank = []
rtt = None
for line in open(logs[1], errors="replace"):
    if line.startswith("HZ-NET: rtt_avg_ms "):
        try:
            rtt = float(line.split()[2])
        except ValueError:
            pass
for path in logs:
    rows = {}
    for line in open(path, errors="replace"):
        line = line.strip()
        if line.startswith("HZ-BENCH: "):
            r = json.loads(line[len("HZ-BENCH: "):])
            rows[r["size"]] = r
    per_rank.append(rows)
ok = True
for size in sizes:
    rs = [rows.get(size) for rows in per_rank]
    if any(r is None for r in rs):
        print(f"no result for size {size} from every rank", file=sys.stderr)
        ok = False
        continue
    dev = max(r["device_us"] for r in rs)
    gloo = max(r["gloo_us"] for r in rs)
    check = "ok" if all(r["check"] == "ok" and r["iters"] == iters for r in rs) else "FAILED"
    ok &= check == "ok"
    print(json.dumps({"bench": "vm_allreduce", "op": "allreduce", "dtype": "fp32", "redop": "sum",
                      "ranks": 2, "vms": 2, "accel": "tcg", "size": size, "iters": iters,
                      "warmup": warmup, "device_us": round(dev, 1), "gloo_us": round(gloo, 1),
                      "ratio_gloo_over_device": round(gloo / dev, 2) if dev > 0 else None,
                      "device": "harmonaize (libharmonaize, registered buffers)",
                      "reference": "gloo ring, tcp over virtio-net (QEMU stream netdev)",
                      "net_rtt_ms": rtt,
                      "check": check}), flush=True)
sys.exit(0 if ok else 1)
PY
	fail "missing or wrong results"
say "PASS"
