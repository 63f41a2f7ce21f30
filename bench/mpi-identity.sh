#!/usr/bin/env bash
# Checks that a partitioned run gives the serial run's figures, on threads and over MPI:
# runs the perf harness's CASE (default rc-permutation-8: a 128-host fat tree, RC WRITEs
# on the real engine, 30 us) serially, with --threads 2 and 3, and under
# `mpirun -np 2` and `-np 3`, and compares packet-hops, events, packets delivered, errors and
# the digest of every port's counters. Needs the perf example built with MPI:
#   cargo build --release -p softib-sim --features mpi --example perf
# (Debian: libopenmpi-dev openmpi-bin libclang-dev).
#
# Usage: bench/mpi-identity.sh [PERF_BINARY] [CASE]
# Exit status 0 = identical everywhere; 1 = a difference; 2 = a run failed or a tool is missing.
set -euo pipefail

perf=${1:-${CARGO_TARGET_DIR:-target}/release/examples/perf}
case=${2:-rc-permutation-8}
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
exit $status
