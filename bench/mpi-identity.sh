#!/usr/bin/env bash
# Checks that a partitioned run gives the serial run's figures, on threads and over MPI:
# runs the perf harness's CASE (default rc-permutation-8: a 128-host fat tree, RC WRITEs
# on the real engine, 30 us) serially, with --threads 2 and 3, and under
# `mpirun -np 2` and `-np 3`, and compares packet-hops, events, packets delivered, errors and
# the digest of every port's counters. Then the same for `softib sim` on a scenario (default
# the bundled mgmt-fat-tree, 30 us, with port taps on a host link, a cut leaf-spine link and
# a leaf port, and two HCAs' receive captures): serially, with --threads 2 and 3, and under
# `mpirun -np 2` and `-np 3`, every file of the output directory (summary.json, CSVs, SVGs,
# capture.pcap) compared byte for byte. Needs both built with MPI:
#   cargo build --release -p softib-sim --features mpi --example perf
#   cargo build --release -p softib-cli --features mpi
# (Debian: libopenmpi-dev openmpi-bin libclang-dev).
#
# Usage: bench/mpi-identity.sh [PERF_BINARY] [CASE] [SOFTIB_BINARY]
# SOFTIB_SIM_SCENARIO and SOFTIB_SIM_ARGS (one string, split on spaces) change the sim run.
# Exit status 0 = identical everywhere; 1 = a difference; 2 = a run failed or a tool is missing.
set -euo pipefail

perf=${1:-${CARGO_TARGET_DIR:-target}/release/examples/perf}
case=${2:-rc-permutation-8}
softib=${3:-${CARGO_TARGET_DIR:-target}/release/softib}
if [[ ! -x $softib ]]; then
    echo "no softib binary at $softib: cargo build --release -p softib-cli --features mpi" >&2
    exit 2
fi
export SOFTIB_PERF_US=${SOFTIB_PERF_US:-30}
if [[ ! -x $perf ]]; then
    echo "no perf binary at $perf: cargo build --release -p softib-sim --features mpi --example perf" >&2
    exit 2
fi
if ! command -v mpirun >/dev/null; then
    echo "mpirun not found: apt-get install openmpi-bin libopenmpi-dev" >&2
    exit 2
fi
figures() { grep -E '^(packet-hops|events|delivered|errors|counters digest) +[0-9a-f]+$' | sed 's/  */ /g'; }

"$perf" "$case" | figures >/tmp/mpi-identity.serial
if [[ $(wc -l </tmp/mpi-identity.serial) -ne 5 ]]; then
    echo "the serial run printed no figures" >&2
    exit 2
fi
echo "serial: $(tr '\n' ';' </tmp/mpi-identity.serial)"
status=0
check() { # LABEL FILE
    if diff -u /tmp/mpi-identity.serial "$2"; then
        echo "$1: identical"
    else
        echo "$1: DIFFERS from the serial run"
        status=1
    fi
}
for n in 2 3; do
    "$perf" "$case" --threads "$n" | figures >/tmp/mpi-identity.threads
    check "--threads $n" /tmp/mpi-identity.threads
    # --allow-run-as-root: CI runs as root; --oversubscribe: more ranks than cores.
    if ! mpirun --oversubscribe --allow-run-as-root -np "$n" "$perf" "$case" --mpi >/tmp/mpi-identity.mpi.raw 2>&1; then
        cat /tmp/mpi-identity.mpi.raw >&2
        echo "mpirun -np $n failed" >&2
        exit 2
    fi
    figures </tmp/mpi-identity.mpi.raw >/tmp/mpi-identity.mpi
    check "mpirun -np $n" /tmp/mpi-identity.mpi
done

# softib sim: every output file.
scenario=${SOFTIB_SIM_SCENARIO:-mgmt-fat-tree}
read -r -a simargs <<<"${SOFTIB_SIM_ARGS:---set duration_us=30 --pcap-port leaf0:1,spine0:1,leaf2:5 --pcap h0,h5}"
out=$(mktemp -d /tmp/mpi-identity-sim.XXXXXX)
trap 'rm -rf "$out"' EXIT
if ! "$softib" sim "$scenario" "${simargs[@]}" --out "$out/serial" >"$out/serial.log" 2>&1; then
    cat "$out/serial.log" >&2
    echo "softib sim $scenario failed" >&2
    exit 2
fi
files=$(ls "$out/serial" | wc -l)
if [[ $files -lt 4 ]]; then
    echo "the serial softib sim run wrote only $files files" >&2
    exit 2
fi
echo "softib sim $scenario serial: $files files ($(ls "$out/serial" | tr '\n' ' '))"
check_dir() { # LABEL DIR
    if diff -r "$out/serial" "$2" >/dev/null; then
        echo "softib sim $1: every file identical"
    else
        diff -rq "$out/serial" "$2" || true
        echo "softib sim $1: DIFFERS from the serial run"
        status=1
    fi
}
for n in 2 3; do
    if ! "$softib" sim "$scenario" "${simargs[@]}" --threads "$n" --out "$out/threads-$n" >"$out/threads-$n.log" 2>&1; then
        cat "$out/threads-$n.log" >&2
        echo "softib sim --threads $n failed" >&2
        exit 2
    fi
    check_dir "--threads $n" "$out/threads-$n"
    if ! mpirun --oversubscribe --allow-run-as-root -np "$n" "$softib" sim "$scenario" "${simargs[@]}" --out "$out/mpi-$n" >"$out/mpi-$n.log" 2>&1; then
        cat "$out/mpi-$n.log" >&2
        echo "mpirun -np $n softib sim failed" >&2
        exit 2
    fi
    check_dir "mpirun -np $n" "$out/mpi-$n"
done
exit $status
