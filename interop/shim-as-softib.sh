#!/bin/bash
# Stands in for the softib binary in interop/run.sh so that the rxe interop suite runs the
# STOCK perftest / ibv_rc_pingpong on the host, preloaded with softib's libibverbs shim
# (crates/softib-verbs-shim), against the stock tools on rdma_rxe in the guest:
#   SOFTIB=... interop/run.sh --softib interop/shim-as-softib.sh --subset ci
# It translates the softib command lines host-side.sh builds:
#   write-bw|read-bw|send-bw|atomic-bw|write-lat|send-lat|read-lat|atomic-lat ARGS
#       -> ib_<tool> -F ARGS (with -x 1 -> -x 0: the shim's RoCEv2 GID is index 0)
#   pingpong ARGS -> ibv_rc_pingpong ARGS (with -g 1 -> -g 0)
#   --bind IP -> SOFTIB_ADDR=IP; --pcap FILE -> SOFTIB_PCAP=FILE; the client's HOST stays.
#   run ARGS -> softib run --shim SHIM_LIB ARGS (stock rdma_cm tools; see run.sh's cm_case)
# A client that cannot reach the guest's server yet says "connection refused", which
# host-side.sh retries. `decode` and `--version` go to the real softib binary
# (REAL_SOFTIB, default: next to the shim library), which also needs to exist.
# Environment: SHIM_LIB (default: $CARGO_TARGET_DIR or <repo>/target, release).
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$REPO/target}/release
SHIM_LIB=${SHIM_LIB:-$TARGET/libsoftib_verbs_shim.so}
REAL_SOFTIB=${REAL_SOFTIB:-$TARGET/softib}
[[ -x $REAL_SOFTIB ]] || { echo "shim-as-softib: $REAL_SOFTIB not built (cargo build --release -p softib-cli)" >&2; exit 2; }
[[ -f $SHIM_LIB ]] || { echo "shim-as-softib: $SHIM_LIB not built (cargo build --release -p softib-verbs-shim)" >&2; exit 2; }
case ${1:-} in
    --version) echo "softib-verbs-shim over $("$REAL_SOFTIB" --version) ($SHIM_LIB)"; exit 0 ;;
    decode) exec "$REAL_SOFTIB" "$@" ;;
    # a stock tool through softib run (the rdma_cm cases); SOFTIB_PCAP comes from host-side.sh
    run) shift; exec "$REAL_SOFTIB" run --shim "$SHIM_LIB" "$@" ;;
    pingpong) tool=ibv_rc_pingpong ;;
    write-bw|read-bw|send-bw|atomic-bw|write-lat|send-lat|read-lat|atomic-lat)
        tool=ib_${1//-/_} ;;
    *) echo "shim-as-softib: unsupported command ${1:-} (see the header)" >&2; exit 2 ;;
esac
shift
args=() addr=10.99.0.254 pcap=""
[[ $tool == ib_* ]] && args+=(-F)
while [[ $# -gt 0 ]]; do
    case $1 in
        --bind) addr=$2; shift ;;
        --pcap) pcap=$2; shift ;;
        -x|-g) args+=("$1" 0); shift ;;
        *) args+=("$1") ;;
    esac
    shift
done
out=$(mktemp)
SOFTIB_ADDR=$addr SOFTIB_PCAP=$pcap LD_PRELOAD=$SHIM_LIB "$tool" "${args[@]}" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
if [[ $rc != 0 ]] && grep -q "Couldn't connect\|Unable to open file descriptor for socket connection" "$out"; then
    echo "shim-as-softib: connection refused (the guest's server is not listening yet)"
fi
rm -f "$out"
exit "$rc"
