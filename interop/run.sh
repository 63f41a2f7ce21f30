#!/bin/bash
# softib <-> Linux Soft-RoCE (rdma_rxe) interoperability suite (issue 8).
#
# For each case, softib runs on the host inside the rxe oracle's network namespace
# (10.99.0.254) and the stock tool (ibv_rc_pingpong, perftest) runs in a qemu guest with
# rdma_rxe (10.99.0.1); every case runs in both directions (the guest as server, then the
# guest as client). Groups of cases share one guest boot:
#   base     IB MTU 1024 (guest NIC MTU 1500): pingpong sizes, every perftest tool, and
#            rdma_cm both ways (rping, ucmatose, riostream, perftest -R)
#   mtu4096  IB MTU 4096 (guest NIC MTU 4200)
#   loss     IB MTU 1024, 3 % of RoCEv2 datagrams dropped in both directions (netem in the
#            guest, nftables on the host; UDP port 4791 only): the RC cases, and rping
#            over rdma_cm (its CM MADs are dropped too)
# Each case passes when both sides exit 0, the tools' outputs show the work done (report.py:
# rping's pings, perftest's iterations, riostream's rows, ucmatose's completions), and both
# its captures (softib's --pcap tap, and
# the guest bridge capture cut per case) decode with `softib decode`: at least one RoCEv2
# packet, every one parsed, every ICRC valid.
#
# Usage: interop/run.sh [--subset ci|full] [--groups base,mtu4096,loss] [--softib PATH]
#                       [--out DIR] [--doc FILE] [--only REGEX] [--attempts N]
#   --subset ci    the representative subset CI runs (see SUBSETS below); full (default) is
#                  the whole matrix.
#   --doc FILE     write the matrix (markdown) to FILE, e.g. docs/interop.md.
#   --attempts N   runs per case before it fails (default 2; see guest-side.sh for why a
#                  second attempt is allowed; the report lists every failed attempt).
# Needs root, the oracle (../shared/oracle/rxe-vm relative to the repository root, or
# RXE_ORACLE=DIR), its built image (RXEVM_DIR, default /var/tmp/rxe-vm: run its build.sh),
# qemu-system-x86_64, tshark, nft, python3. Anything missing is an error, never a skip.
set -uo pipefail

die() { echo "interop: error: $*" >&2; exit 2; }
REPO=$(git -C "$(dirname "$0")" rev-parse --show-toplevel 2>/dev/null) || die "not inside the softib repository"
SUBSET=full GROUPS_ARG="" SOFTIB=${SOFTIB:-} OUT="" DOC="" ONLY="" ATTEMPTS=2
while [[ $# -gt 0 ]]; do
    case $1 in
        --subset) SUBSET=$2; shift ;;
        --groups) GROUPS_ARG=$2; shift ;;
        --softib) SOFTIB=$2; shift ;;
        --out) OUT=$2; shift ;;
        --doc) DOC=$2; shift ;;
        --only) ONLY=$2; shift ;;
        --attempts) ATTEMPTS=$2; shift ;;
        -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
    shift
done
[[ $SUBSET == ci || $SUBSET == full ]] || die "--subset is ci or full"
[[ $ATTEMPTS =~ ^[1-9]$ ]] || die "--attempts is 1..9"

# ------------------------------------------------------------------ prerequisites
[[ $(id -u) == 0 ]] || die "must run as root (network namespaces, taps, qemu)"
# ../shared next to the repository root; from a linked worktree, next to the main one.
COMMON=$(cd "$REPO" && cd "$(git rev-parse --git-common-dir)/.." && pwd)
ORACLE=${RXE_ORACLE:-}
for d in "$REPO/../shared/oracle/rxe-vm" "$COMMON/../shared/oracle/rxe-vm"; do
    [[ -z $ORACLE && -x $d/run.sh ]] && ORACLE=$d
done
ORACLE=${ORACLE:-$REPO/../shared/oracle/rxe-vm}
[[ -x $ORACLE/run.sh && -x $ORACLE/build.sh ]] ||
    die "the rxe oracle is not at $ORACLE (expected run.sh and build.sh; set RXE_ORACLE=DIR)"
ORACLE=$(cd "$ORACLE" && pwd)
RXEVM_DIR=${RXEVM_DIR:-/var/tmp/rxe-vm}
for f in vmlinuz initrd.img rootfs.ext4; do
    [[ -s $RXEVM_DIR/$f ]] || die "the oracle VM image is not built ($RXEVM_DIR/$f missing): run $ORACLE/build.sh"
done
for c in qemu-system-x86_64 tshark nft python3 tc ip; do
    command -v "$c" >/dev/null || die "$c is not installed"
done
if [[ -z $SOFTIB ]]; then
    echo "interop: building softib (release)" >&2
    (cd "$REPO" && cargo build --release -q -p softib-cli) || die "cargo build of softib failed"
    SOFTIB=${CARGO_TARGET_DIR:-$REPO/target}/release/softib
fi
[[ -x $SOFTIB ]] || die "softib binary $SOFTIB not found"
SOFTIB=$(readlink -f "$SOFTIB")
OUT=${OUT:-/var/tmp/softib-interop/$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$OUT" || die "cannot create $OUT"
OUT=$(readlink -f "$OUT")

# ------------------------------------------------------------------ cases
# case_ GROUP NAME "GUEST TOOL ARGS" "SOFTIB SUBCOMMAND ARGS": both directions; each side
# adds "-p PORT" (and the client the server's address, the softib server --bind).
# cm_case GROUP NAME "GUEST SERVER" "SOFTIB CLIENT" "GUEST CLIENT" "SOFTIB SERVER": the
# rdma_cm cases, whose tools spell server and client differently. Their commands are
# templates (guest-side.sh and host-side.sh fill in {PORT}, {SELF}, {PEER} and {PCAP}, and
# add nothing). A softib command that begins with "run " runs a stock tool through
# `softib run` (the verbs shim with its librdmacm); such a case runs only in the shim pass
# (--softib interop/shim-as-softib.sh), as it would be the same in both passes.
PP="ibv_rc_pingpong -d rxe0 -g 1"
PT="-d rxe0 -x 1"
declare -A GROUP_CASES
case_() {
    local g=$1 name=$2 gcmd=$3 hcmd=$4
    GROUP_CASES[$g]+="$name"$'\t'"$gcmd"$'\t'"$hcmd"$'\t'"$gcmd"$'\t'"$hcmd"$'\n'
}
cm_case() {
    local g=$1 name=$2 gserver=$3 hclient=$4 gclient=$5 hserver=$6
    GROUP_CASES[$g]+="$name"$'\t'"$gserver"$'\t'"$hclient"$'\t'"$gclient"$'\t'"$hserver"$'\n'
}
# The stock rdma_cm tools, the same on both sides (the softib side through softib run).
# cm_tool GROUP NAME "SERVER ARGS" "CLIENT ARGS" (templates as above; TOOL is NAME's first
# word before "-").
cm_tool() {
    local g=$1 name=$2 sargs=$3 cargs=$4 tool=${2%%-*}
    cm_case "$g" "$name" "$tool $sargs" "run --addr {SELF} -- $tool $cargs" \
        "$tool $cargs" "run --addr {SELF} -- $tool $sargs"
}
# perftest -R: the exchange and the test QPs both connect through rdma_cm.
# cm_perftest GROUP NAME TOOL "ARGS"
cm_perftest() {
    local g=$1 name=$2 tool=$3 a=$4 sub=${3#ib_}
    cm_case "$g" "$name" "$tool -R -d rxe0 $a -p {PORT}" "${sub//_/-} -R $a -p {PORT} --bind {SELF} --pcap {PCAP} {PEER}" \
        "$tool -R -d rxe0 $a -p {PORT} {PEER}" "${sub//_/-} -R $a -p {PORT} --bind {SELF} --pcap {PCAP}"
}
# base: IB MTU 1024
for s in 1 4096 65536; do
    case_ base "pingpong-s$s" "$PP -s $s -n 200" "pingpong -g 1 -s $s -n 200"
done
case_ base write_bw-rc   "ib_write_bw $PT -s 65536 -n 300"            "write-bw -x 1 -s 65536 -n 300"
case_ base write_bw-uc   "ib_write_bw $PT -c UC -s 65536 -n 300"      "write-bw -x 1 -c UC -s 65536 -n 300"
case_ base read_bw-rc    "ib_read_bw $PT -s 65536 -n 300"             "read-bw -x 1 -s 65536 -n 300"
case_ base send_bw-rc    "ib_send_bw $PT -c RC -s 65536 -n 300"       "send-bw -x 1 -c RC -s 65536 -n 300"
case_ base send_bw-uc    "ib_send_bw $PT -c UC -s 4096 -n 300"        "send-bw -x 1 -c UC -s 4096 -n 300"
case_ base send_bw-ud    "ib_send_bw $PT -c UD -s 1024 -n 300"        "send-bw -x 1 -c UD -s 1024 -n 300"
case_ base atomic_bw-fadd "ib_atomic_bw $PT -A FETCH_AND_ADD -n 500"  "atomic-bw -x 1 -A FETCH_AND_ADD -n 500"
case_ base atomic_bw-cas "ib_atomic_bw $PT -A CMP_AND_SWAP -n 500"    "atomic-bw -x 1 -A CMP_AND_SWAP -n 500"
case_ base write_lat-rc  "ib_write_lat $PT -s 64 -n 500"              "write-lat -x 1 -s 64 -n 500"
case_ base send_lat-rc   "ib_send_lat $PT -s 64 -n 500"               "send-lat -x 1 -s 64 -n 500"
case_ base read_lat-rc   "ib_read_lat $PT -s 64 -n 500"               "read-lat -x 1 -s 64 -n 500"
case_ base atomic_lat-rc "ib_atomic_lat $PT -n 500"                   "atomic-lat -x 1 -n 500"
# mtu4096: IB MTU 4096
for s in 4096 65536; do
    case_ mtu4096 "pingpong-m4096-s$s" "$PP -m 4096 -s $s -n 200" "pingpong -g 1 -m 4096 -s $s -n 200"
done
case_ mtu4096 write_bw-rc "ib_write_bw $PT -s 65536 -n 300"          "write-bw -x 1 -s 65536 -n 300"
case_ mtu4096 read_bw-rc  "ib_read_bw $PT -s 65536 -n 300"           "read-bw -x 1 -s 65536 -n 300"
case_ mtu4096 send_bw-rc  "ib_send_bw $PT -c RC -s 65536 -n 300"     "send-bw -x 1 -c RC -s 65536 -n 300"
case_ mtu4096 send_bw-ud  "ib_send_bw $PT -c UD -s 4096 -n 300"      "send-bw -x 1 -c UD -s 4096 -n 300"
# loss: the RC cases through 3 % loss each way
case_ loss pingpong-s4096 "$PP -s 4096 -n 200"                        "pingpong -g 1 -s 4096 -n 200"
case_ loss write_bw-rc    "ib_write_bw $PT -s 65536 -n 200"           "write-bw -x 1 -s 65536 -n 200"
case_ loss read_bw-rc     "ib_read_bw $PT -s 65536 -n 200"            "read-bw -x 1 -s 65536 -n 200"
case_ loss send_bw-rc     "ib_send_bw $PT -c RC -s 65536 -n 200"      "send-bw -x 1 -c RC -s 65536 -n 200"
case_ loss atomic_bw-fadd "ib_atomic_bw $PT -A FETCH_AND_ADD -n 300"  "atomic-bw -x 1 -A FETCH_AND_ADD -n 300"
case_ loss atomic_bw-cas  "ib_atomic_bw $PT -A CMP_AND_SWAP -n 300"   "atomic-bw -x 1 -A CMP_AND_SWAP -n 300"
case_ loss write_lat-rc   "ib_write_lat $PT -s 64 -n 300"             "write-lat -x 1 -s 64 -n 300"
case_ loss send_lat-rc    "ib_send_lat $PT -s 64 -n 300"              "send-lat -x 1 -s 64 -n 300"

# rdma_cm: the stock rdma_cm programs and perftest -R, in base (no guest boot of their own:
# CI time). Each checks its data:
# rping -V compares every ping read back, riostream -T v every byte, ucmatose counts its
# messages; report.py also counts rping's pings and perftest's iterations.
cm_tool base rping "-s -a {SELF} -p {PORT} -C 100 -v -V" "-c -a {PEER} -p {PORT} -C 100 -v -V"
cm_perftest base write_bw-cm ib_write_bw "-s 65536 -n 100"
cm_perftest base read_bw-cm ib_read_bw "-s 65536 -n 100"
cm_perftest base send_bw-cm ib_send_bw "-s 65536 -n 100"
cm_perftest base send_lat-cm ib_send_lat "-s 64 -n 300"
cm_tool base ucmatose "-b {SELF} -p {PORT} -c 2 -C 20" "-s {PEER} -p {PORT} -c 2 -C 20"
cm_tool base riostream "-b {SELF} -p {PORT} -S 65536 -C 50 -T v" "-s {PEER} -p {PORT} -S 65536 -C 50 -T v"
# with loss: CM MADs are lost too (REQ/REP/RTU/DREQ retried on their timers)
# (20 pings: a lost packet costs rdma_cm's local ACK timeout, 2.1 s)
cm_tool loss rping-cm "-s -a {SELF} -p {PORT} -C 20 -v -V" "-c -a {PEER} -p {PORT} -C 20 -v -V"

# The CI subset: one case of each tool family, both directions, at each MTU and with loss;
# loss:read_bw-rc and base:send_bw-uc are left out while they fail now and then
# (docs/interop.md, "Known failures").
declare -A SUBSETS
SUBSETS[ci]='^(base:(pingpong-s4096|write_bw-(rc|uc)|read_bw-rc|send_bw-(rc|ud)|atomic_bw-(fadd|cas)|write_lat-rc|send_lat-rc|rping|(write|read|send)_bw-cm|ucmatose|riostream)|mtu4096:(pingpong-m4096-s65536|write_bw-rc)|loss:(pingpong-s4096|write_bw-rc|send_bw-rc|atomic_bw-fadd|rping-cm))$'
SUBSETS[full]='.'

declare -A GROUP_MTU=([base]="" [mtu4096]=4200 [loss]="")
declare -A GROUP_LOSS=([base]=0 [mtu4096]=0 [loss]=3)
GROUPS_LIST=${GROUPS_ARG:-base,mtu4096,loss}
# The shim pass (shim-as-softib.sh says so in its --version) runs the "run " cases too.
HOST_KIND=softib
"$SOFTIB" --version 2>/dev/null | grep -q '^softib-verbs-shim' && HOST_KIND=shim

# ------------------------------------------------------------------ run
T0=$(date +%s)
{
    echo "started $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "subset $SUBSET groups $GROUPS_LIST only ${ONLY:-.} attempts $ATTEMPTS"
    echo "softib $("$SOFTIB" --version 2>&1) ($SOFTIB)"
    echo "softib-commit $(git -C "$REPO" describe --always --dirty 2>/dev/null)"
    echo "host-kernel $(uname -r)"
    echo "qemu $(qemu-system-x86_64 --version | head -1)"
} > "$OUT/suite.info"
overall=0
IFS=, read -ra GLIST <<< "$GROUPS_LIST"
for g in "${GLIST[@]}"; do
    [[ -n ${GROUP_CASES[$g]:-} ]] || die "unknown group $g (base, mtu4096, loss)"
    gdir=$OUT/$g
    rm -rf "$gdir"; mkdir -p "$gdir/rundir/vm1"
    port=18515 n=0
    : > "$gdir/cases.tsv"
    while IFS=$'\t' read -r name gserver hclient gclient hserver; do
        [[ -z $name ]] && continue
        [[ "$g:$name" =~ ${SUBSETS[$SUBSET]} ]] || continue
        [[ -z $ONLY || "$g:$name" =~ $ONLY ]] || continue
        [[ $hclient == "run "* && $HOST_KIND != shim ]] && continue
        for role in server client; do
            n=$((n + 1))
            dir=$([[ $role == server ]] && echo rxe-server || echo softib-server)
            if [[ $role == server ]]; then gcmd=$gserver hcmd=$hclient; else gcmd=$gclient hcmd=$hserver; fi
            printf '%02d-%s.%s\t%s\t%d\t%s\t%s\t%s\n' "$n" "$name" "$dir" "$name" "$port" "$role" "$gcmd" "$hcmd" >> "$gdir/cases.tsv"
            port=$((port + 1))
        done
    done <<< "${GROUP_CASES[$g]}"
    [[ -s $gdir/cases.tsv ]] || { echo "interop: group $g: no case selected" >&2; continue; }
    cp "$REPO/interop/guest-side.sh" "$gdir/cases.tsv" "$gdir/rundir/vm1/"
    echo "interop: group $g: $(wc -l < "$gdir/cases.tsv") runs (MTU ${GROUP_MTU[$g]:-1500} NIC, loss ${GROUP_LOSS[$g]} %)" >&2
    gstart=$(date +%s)
    timeout_s=$(( $(wc -l < "$gdir/cases.tsv") * 150 + 120 ))
    "$ORACLE/run.sh" --rundir "$gdir/rundir" --capture "softib-interop-$g" --timeout "$timeout_s" \
        ${GROUP_MTU[$g]:+--mtu ${GROUP_MTU[$g]}} \
        -c "ATTEMPTS=$ATTEMPTS LOSS=${GROUP_LOSS[$g]} bash \$RXE_SHARE/guest-side.sh \$RXE_SHARE/cases.tsv" \
        --host-cmd "ATTEMPTS=$ATTEMPTS LOSS=${GROUP_LOSS[$g]} SOFTIB=$SOFTIB bash $REPO/interop/host-side.sh $gdir/cases.tsv $gdir $gdir/rundir/vm1" \
        > "$gdir/oracle.log" 2>&1
    orc=$?
    echo "$orc $(( $(date +%s) - gstart ))" > "$gdir/oracle.rc"
    pcap=$RXEVM_DIR/captures/softib-interop-$g.pcap
    if [[ -s $pcap ]]; then
        mv "$pcap" "$gdir/bridge.pcap"
        python3 "$REPO/interop/split.py" "$gdir/bridge.pcap" "$gdir/bridge" > "$gdir/split.log" 2>&1
    fi
    for f in "$gdir"/*.host.pcap "$gdir"/bridge/*.pcap; do
        [[ -e $f ]] || continue
        "$SOFTIB" decode "$f" > "${f%.pcap}.decode" 2>&1
        echo $? > "${f%.pcap}.decode.rc"
    done
    echo "interop: group $g done in $(( $(date +%s) - gstart )) s (oracle rc $orc)" >&2
done
echo "elapsed $(( $(date +%s) - T0 ))" >> "$OUT/suite.info"
python3 "$REPO/interop/report.py" "$OUT" ${DOC:+--doc "$DOC"}
exit $?
