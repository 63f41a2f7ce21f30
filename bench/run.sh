#!/usr/bin/env bash
# softib loopback benchmark (issue 4's goals), in one run:
#   1. RC RDMA WRITE bandwidth, 64 KiB messages, 1 QP    vs iperf3 TCP        goal >= 1.0x
#   2. RC SEND latency, 64-byte messages (half round trip) vs sockperf UDP
#      ping-pong --nonblocked (half round trip), median and average          goal <= 1.5x
#      Both sides of both tests spin: softib's send-lat polls its CQ, and sockperf's
#      --nonblocked server and client spin on non-blocking receives. (sockperf's default
#      blocks in recvfrom and pays a wake-up per message, 26 us here: not a fair reference
#      for a busy-polling transport.) Both run the same number of round trips.
#   3. FETCH_AND_ADD operations/s with 16 outstanding                          goal >= 1 M/s
#      and a table at 1, 4, 16 and 64 outstanding (at most 16 in flight: max_rd_atomic),
#      with the same run's RDMA WRITE 8 B message rate for reference
# Everything runs on loopback (softib devices on 127.0.0.1 and 127.0.0.2, or
# BENCH_SERVER_ADDR / BENCH_CLIENT_ADDR when other softib devices hold those). iperf3 and
# sockperf are installed with apt-get when missing. Usage: bench/run.sh [SECONDS]
set -euo pipefail

# BENCH_NICE=N runs every measured process (softib, iperf3, sockperf alike) at nice N.
# Beware of negative values: busy-polling processes above the kernel's ksoftirqd threads
# starve them, and loopback delivery deferred to ksoftirqd then stalls for hundreds of ms.
# BENCH_SERVER_CPU / BENCH_CLIENT_CPU pin every server / client (softib, iperf3, sockperf
# alike) to that CPU with taskset, so on a shared machine the two sides do not queue behind
# each other on one core.
secs=${1:-5}
run() { if [ -n "${BENCH_NICE:-}" ]; then nice -n "$BENCH_NICE" "$@"; else "$@"; fi; }
srv() { if [ -n "${BENCH_SERVER_CPU:-}" ]; then run taskset -c "$BENCH_SERVER_CPU" "$@"; else run "$@"; fi; }
cli() { if [ -n "${BENCH_CLIENT_CPU:-}" ]; then run taskset -c "$BENCH_CLIENT_CPU" "$@"; else run "$@"; fi; }
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mktemp -d /tmp/softib-bench.XXXXXX)
pids=()
cleanup() {
    # A background `run ...` is a subshell whose child is the server: stop the child (by
    # parent PID, never by name) and then the subshell.
    for p in "${pids[@]:-}"; do
        [ -n "$p" ] || continue
        pkill -P "$p" 2>/dev/null || true
        kill "$p" 2>/dev/null || true
    done
}
trap cleanup EXIT

need() {
    command -v "$1" >/dev/null 2>&1 && return
    echo "installing $1 ..." >&2
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null
    else
        sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null
    fi
}
need iperf3
need sockperf
need python3

load_before=$(cut -d' ' -f1 /proc/loadavg)
echo "building softib (release) ..." >&2
(cd "$root" && cargo build --release -q -p softib-cli)
softib="${CARGO_TARGET_DIR:-$root/target}/release/softib"

# Runs a softib tool as server (127.0.0.2) and client (127.0.0.1); prints the client's
# output file.
server_addr=${BENCH_SERVER_ADDR:-127.0.0.2}
client_addr=${BENCH_CLIENT_ADDR:-127.0.0.1}
pair() {
    local name=$1 port=$2 tag=$3
    shift 3
    srv "$softib" "$name" --bind "$server_addr" -p "$port" "$@" >"$out/$name$tag-server.txt" 2>&1 &
    local spid=$!
    pids+=("$spid")
    for _ in $(seq 100); do
        grep -q "Waiting for client" "$out/$name$tag-server.txt" 2>/dev/null && break
        sleep 0.05
    done
    cli "$softib" "$name" "$server_addr" --bind "$client_addr" -p "$port" "$@" >"$out/$name$tag-client.txt" 2>&1 || true
    wait "$spid" || true
    echo "$out/$name$tag-client.txt"
}

# The first row of a perftest table in FILE: field N (1-based).
field() {
    python3 - "$1" "$2" <<'PY'
import sys
rows, table = [], False
for line in open(sys.argv[1]):
    if "#bytes" in line:
        table = True
        continue
    f = line.split()
    if table and f and f[0].isdigit():
        rows.append(f)
if rows:
    print(rows[0][int(sys.argv[2]) - 1])
else:
    # The tool failed: say why and let the summary show it.
    err = [l.strip() for l in open(sys.argv[1]) if "error" in l]
    print("nan")
    print(f"{sys.argv[1]}: no result ({err[-1] if err else 'no table'})", file=sys.stderr)
PY
}

echo "== 1. bandwidth: iperf3 TCP vs softib write-bw (RC, 64 KiB, 1 QP), ${secs}s each" >&2
srv iperf3 -s -1 -B 127.0.0.1 -p 25201 >"$out/iperf3-server.txt" 2>&1 &
pids+=("$!")
sleep 0.5
cli iperf3 -c 127.0.0.1 -p 25201 -t "$secs" -J >"$out/iperf3.json"
tcp_gbps=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['end']['sum_received']['bits_per_second']/1e9)" "$out/iperf3.json")
f=$(pair write-bw 25202 "" -s 65536 -q 1 -D "$secs" --report_gbits)
rdma_gbps=$(field "$f" 4)

echo "== 2. latency: sockperf UDP ping-pong --nonblocked vs softib send-lat (RC, 64 B), both sides spinning, ${secs}s of sockperf and as many softib round trips" >&2
srv sockperf server --nonblocked -i 127.0.0.1 -p 25203 >"$out/sockperf-server.txt" 2>&1 &
pids+=("$!")
sleep 0.5
cli sockperf ping-pong --nonblocked -i 127.0.0.1 -p 25203 -m 64 -t "$secs" >"$out/sockperf.txt" 2>&1
# The --nonblocked server spins until killed: stop it now, or it holds a core through every
# softib test after it (softib's send-lat median read 61-65 us instead of 8-11 on this
# 2-core machine, and the atomics lost half their rate).
pkill -P "${pids[-1]}" 2>/dev/null || true
kill "${pids[-1]}" 2>/dev/null || true
# sockperf (Debian's 3.10) runs for a time, not a count: softib then runs as many round trips.
# Its "[Valid Duration]" line counts the measured round trips (the "[Total Run]" line adds
# the warm-up).
round_trips=$(sed -n 's/.*Valid Duration.*ReceivedMessages=\([0-9]*\).*/\1/p' "$out/sockperf.txt" | tail -1)
round_trips=${round_trips:-$((secs * 20000))}
udp_avg=$(sed -n 's/.*Summary: Latency is \([0-9.]*\) usec.*/\1/p' "$out/sockperf.txt")
udp_med=$(sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' "$out/sockperf.txt")
f=$(pair send-lat 25204 "" -s 64 -n "$round_trips")
lat_med=$(field "$f" 5)
lat_avg=$(field "$f" 6)

echo "== 3. FETCH_AND_ADD rate, 16 outstanding" >&2
# 16 outstanding, a completion every 8 so the client refills while the other 8 fly.
f=$(pair atomic-bw 25205 "" -A FETCH_AND_ADD -t 16 -o 16 -Q 8 -D "$secs")
fadd_mpps=$(field "$f" 5)

echo "== 3b. FETCH_AND_ADD at 1, 4, 16 and 64 outstanding, RDMA WRITE 8 B for reference" >&2
# A completion every 8 (every one below 8): the client refills while the rest fly. The
# responder takes at most max_rd_atomic = 16 at once (the engine's max_qp_rd_atom, as
# ConnectX reports it), so 64 posted means 16 in flight and 48 queued at the requester.
depth_rates=()
port=25210
for t in 1 4 16 64; do
    q=$((t < 8 ? t : 8))
    f=$(pair atomic-bw $port "-t$t" -A FETCH_AND_ADD -t "$t" -o 16 -Q "$q" -D "$secs")
    depth_rates+=("$(field "$f" 5)")
    port=$((port + 1))
done
f=$(pair write-bw $port "-8" -s 8 -t 64 -Q 8 -q 1 -D "$secs")
write8_mpps=$(field "$f" 5)

load_after=$(cut -d' ' -f1 /proc/loadavg)
python3 - "$tcp_gbps" "$rdma_gbps" "$udp_avg" "$udp_med" "$lat_avg" "$lat_med" "$fadd_mpps" "$load_before" "$load_after" "$(nproc)" "$round_trips" "${depth_rates[@]}" "$write8_mpps" <<'PY'
import sys
tcp, rdma, udp_avg, udp_med, lat_avg, lat_med, fadd, l0, l1, cpus, trips = map(float, sys.argv[1:12])
depths = [float(x) for x in sys.argv[12:16]]
write8 = float(sys.argv[16])
def verdict(ok):
    return "met" if ok else "MISSED (or the run failed: nan)"
print()
print("softib loopback benchmark")
print(f"  RDMA WRITE 64 KiB, 1 QP   {rdma:8.2f} Gb/s   iperf3 TCP {tcp:8.2f} Gb/s   ratio {rdma/tcp:5.2f}x  (goal >= 1.0x: {verdict(rdma >= tcp)})")
print(f"  RC SEND 64 B latency      {lat_med:8.2f} us median sockperf UDP {udp_med:6.2f} us median ratio {lat_med/udp_med:5.2f}x  (goal <= 1.5x: {verdict(lat_med <= 1.5*udp_med)})")
print(f"                            {lat_avg:8.2f} us avg    sockperf UDP {udp_avg:6.2f} us avg    ratio {lat_avg/udp_avg:5.2f}x")
print(f"                            (both sides of each spin; {trips:.0f} round trips each)")
print(f"  FETCH_AND_ADD, 16 outst.  {fadd:8.3f} M ops/s                               (goal >= 1 M/s: {verdict(fadd >= 1.0)})")
print("  FETCH_AND_ADD by outstanding: " + ", ".join(f"{t}: {r:.3f}" for t, r in zip((1, 4, 16, 64), depths))
      + f" M ops/s (64 posted = 16 in flight); RDMA WRITE 8 B, 64 outstanding: {write8:.3f} M msg/s")
import os
nice = os.environ.get("BENCH_NICE")
pin = [os.environ.get(k) for k in ("BENCH_SERVER_CPU", "BENCH_CLIENT_CPU")]
print(f"  load average {l0:.2f} before, {l1:.2f} after, {cpus:.0f} CPUs" + (f", measured at nice {nice}" if nice else "")
      + (f", servers on CPU {pin[0]}, clients on CPU {pin[1]}" if any(pin) else ""))
if max(l0, l1) > cpus / 2:
    print("  WARNING: the machine was busy; both sides busy-poll, so these figures understate softib")
PY
echo "raw outputs: $out" >&2
