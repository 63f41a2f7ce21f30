#!/usr/bin/env bash
# softib's fabric simulator against htsim (Broadcom csg-htsim, its RoCE/PFC driver
# `htsim_roce`, built from commit 841d9e7) on the same three workloads, in one run:
# alternating the two simulators, RUNS times each, and printing medians and ratios.
#
# Usage: bench/htsim.sh PATH-TO-htsim_roce [RUNS]
#   RUNS (default 3) runs of each simulator on each workload, alternating.
#   SOFTIB_PERF   the perf example (default $CARGO_TARGET_DIR/release/examples/perf, built by
#                 `cargo build --release -p softib-sim --example perf`).
#   PERM_US       simulated microseconds of the fat-tree permutation (default 1000).
#   WORKLOADS     which to run (default "one-to-one incast permutation").
#   SOFTIB_BASELINE  a second perf example (e.g. built from an older commit), run in the same
#                 rotation, with its own columns and the speed-up of SOFTIB_PERF over it.
#
# The workloads (100 Gb/s links, 4096-byte MTU, unlimited flows, 1 us per hop):
#   one-to-one   1 s: host 0 -> host 1 through one switch.
#     softib: perf rc-one-to-one (RC write_bw, 64 KiB WRITEs, 16 in flight).
#     htsim:  -tiers 2 -nodes 8 (K=4 leaf-spine: 2 hosts per ToR, so 0 and 1 share ToR 0),
#             connection 0->1.
#   incast       1 s: hosts 0..7 -> host 8 on one switch.
#     softib: perf rc-incast.
#     htsim:  -tiers 2 -nodes 162 (K=18: 9 hosts per ToR, so 0..8 share ToR 0),
#             connections i->8 for i in 0..7.
#   permutation  PERM_US: 3456 hosts, three-level fat tree of 24-port switches, host i ->
#                host (i + 1728) mod 3456.
#     softib: perf rc-permutation (ftree routing, 16 KiB WRITEs).
#     htsim:  -tiers 3 -nodes 3456 (K=24), connections i->(i+1728)%3456.
#   htsim, every workload: -q 1000 -strat ecmp_host -paths 1 -linkspeed 100000 -mtu 4096
#     -hop_latency 1 -end <us> -tm <matrix> -o /dev/null, run in a scratch directory (it
#     writes idmap.txt where it runs); connections "start 0 size 0" (size 0: unlimited);
#     htsim's defaults otherwise (lossless input queues with PFC pausing at 15 packets,
#     switch latency 0). -q 1000 (packets per output queue): with the default 15 its 8 -> 1
#     incast overflows a "lossless" queue, printing a line per packet (600 k lines per
#     200 ms) instead of simulating PFC; `-strat single` aborts on its fat tree, so routing is its FIB
#     switches with one path per flow). htsim models no credits, VLs, IBA congestion control or transport;
#     softib runs its full RC engine on every host.
# Timing is `/usr/bin/time` of each process (wall, CPU = user + system, peak RSS); softib's build
# (topology, routing, QP set-up) and htsim's set-up are inside their wall times alike.
# On a loaded machine wall time is noisy; CPU time is the steadier figure.
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
    sed -n '2,39p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
htsim=$(realpath "$1")
runs=${2:-3}
repo=$(cd "$(dirname "$0")/.." && pwd)
perf=${SOFTIB_PERF:-${CARGO_TARGET_DIR:-$repo/target}/release/examples/perf}
perm_us=${PERM_US:-1000}
workloads=${WORKLOADS:-"one-to-one incast permutation"}
[[ -x $htsim ]] || { echo "htsim_roce not executable: $htsim" >&2; exit 2; }
[[ -x $perf ]] || { echo "perf example not found: $perf (cargo build --release -p softib-sim --example perf)" >&2; exit 2; }
baseline=${SOFTIB_BASELINE:-}
[[ -z $baseline || -x $baseline ]] || { echo "baseline perf example not executable: $baseline" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "/usr/bin/time is needed (Debian package: time)" >&2; exit 2; }

work=$(mktemp -d /tmp/htsim-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

# Connection matrices in htsim's format.
printf 'Nodes 8\nConnections 1\n0->1 start 0 size 0\n' >"$work/one-to-one.cm"
{
    printf 'Nodes 162\nConnections 8\n'
    for i in 0 1 2 3 4 5 6 7; do printf '%d->8 start 0 size 0\n' "$i"; done
} >"$work/incast.cm"
{
    printf 'Nodes 3456\nConnections 3456\n'
    for ((i = 0; i < 3456; i++)); do printf '%d->%d start 0 size 0\n' "$i" $(((i + 1728) % 3456)); done
} >"$work/permutation.cm"

htsim_args() { # WORKLOAD
    local common="-q 1000 -strat ecmp_host -paths 1 -linkspeed 100000 -mtu 4096 -hop_latency 1 -o /dev/null"
    case $1 in
    one-to-one) echo "-tiers 2 -nodes 8 -end 1000000 -tm $work/one-to-one.cm $common" ;;
    incast) echo "-tiers 2 -nodes 162 -end 1000000 -tm $work/incast.cm $common" ;;
    permutation) echo "-tiers 3 -nodes 3456 -end $perm_us -tm $work/permutation.cm $common" ;;
    esac
}

# Runs a command under /usr/bin/time in the scratch directory; appends "wall cpu rss_kib"
# to FILE.
timed() { # FILE CMD...
    local out=$1
    shift
    if ! (cd "$work" && /usr/bin/time -f '%e %U %S %M' -o "$work/time" "$@" >"$work/stdout" 2>"$work/stderr"); then
        echo "failed: $*" >&2
        tail -5 "$work/stderr" >&2
        exit 2
    fi
    tail -1 "$work/time" | awk '{printf "%.2f %.2f %d\n", $1, $2 + $3, $4}' >>"$out"
}

median() { # FILE COLUMN
    awk -v c="$2" '{print $c}' "$1" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'
}

echo "htsim:  $htsim"
echo "softib: $perf ($(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?'))"
[[ -n $baseline ]] && echo "baseline: $baseline"
echo "runs:   $runs each, alternating; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for w in $workloads; do
    : >"$work/$w.htsim"
    : >"$work/$w.softib"
    : >"$work/$w.baseline"
done
for ((r = 1; r <= runs; r++)); do
    for w in $workloads; do
        # shellcheck disable=SC2046
        timed "$work/$w.htsim" "$htsim" $(htsim_args "$w")
        for side in softib baseline; do
            bin=$perf
            if [[ $side == baseline ]]; then
                [[ -n $baseline ]] || continue
                bin=$baseline
            fi
            if [[ $w == permutation ]]; then
                SOFTIB_PERF_US=$perm_us timed "$work/$w.$side" "$bin" "rc-$w"
            else
                timed "$work/$w.$side" "$bin" "rc-$w"
            fi
        done
        line="run $r $w: htsim $(tail -1 "$work/$w.htsim"), softib $(tail -1 "$work/$w.softib")"
        [[ -n $baseline ]] && line="$line, baseline $(tail -1 "$work/$w.baseline")"
        echo "$line (wall s, CPU s, RSS KiB)"
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| workload | htsim wall | htsim CPU | htsim RSS | softib wall | softib CPU | softib RSS | speed vs htsim (wall) | (CPU) |"
echo "|---|---|---|---|---|---|---|---|---|"
for w in $workloads; do
    hw=$(median "$work/$w.htsim" 1) hu=$(median "$work/$w.htsim" 2) hm=$(median "$work/$w.htsim" 3)
    sw=$(median "$work/$w.softib" 1) su=$(median "$work/$w.softib" 2) sm=$(median "$work/$w.softib" 3)
    awk -v w="$w" -v hw="$hw" -v hu="$hu" -v hm="$hm" -v sw="$sw" -v su="$su" -v sm="$sm" 'BEGIN {
        printf "| %s | %.2f s | %.2f s | %.0f MiB | %.2f s | %.2f s | %.0f MiB | %.2fx | %.2fx |\n",
            w, hw, hu, hm / 1024, sw, su, sm / 1024, hw / sw, (su > 0 ? hu / su : 0)
    }'
done
if [[ -n $baseline ]]; then
    echo
    echo "| workload | baseline wall | baseline CPU | baseline RSS | softib wall | softib CPU | speed-up (wall) | (CPU) | baseline vs htsim (CPU) |"
    echo "|---|---|---|---|---|---|---|---|---|"
    for w in $workloads; do
        bw=$(median "$work/$w.baseline" 1) bu=$(median "$work/$w.baseline" 2) bm=$(median "$work/$w.baseline" 3)
        sw=$(median "$work/$w.softib" 1) su=$(median "$work/$w.softib" 2) hu=$(median "$work/$w.htsim" 2)
        awk -v w="$w" -v bw="$bw" -v bu="$bu" -v bm="$bm" -v sw="$sw" -v su="$su" -v hu="$hu" 'BEGIN {
            printf "| %s | %.2f s | %.2f s | %.0f MiB | %.2f s | %.2f s | %.2fx | %.2fx | %.2fx |\n",
                w, bw, bu, bm / 1024, sw, su, bw / sw, (su > 0 ? bu / su : 0), (bu > 0 ? hu / bu : 0)
        }'
    done
fi
