#!/bin/bash
# Runs on the host inside the oracle's network namespace (10.99.0.254), started by the
# oracle's run.sh once the guest is READY: the softib half of every case in CASES (see
# guest-side.sh for the format and the lock-step), in the same order as the guest.
#   guest_role server -> softib is the client of 10.99.0.1, retrying while the guest's
#                        server is not listening yet;
#   guest_role client -> softib is the server, bound to 10.99.0.254.
# Every softib run writes its own capture (--pcap) of what it sent and received.
# With LOSS=N, nftables drops N % of the host's outgoing RoCEv2 datagrams (UDP dport 4791;
# the rules live in the namespace and vanish with it).
# Results: RESULTS/<id>@K.host.out, .rc, .pcap; the rc is also written to SHARE (the
# guest's 9p directory) for the lock-step.
set -u
CASES=${1:?usage: host-side.sh CASES.tsv RESULTS SHARE}
RESULTS=${2:?usage: host-side.sh CASES.tsv RESULTS SHARE}
SHARE=${3:?usage: host-side.sh CASES.tsv RESULTS SHARE}
SOFTIB=${SOFTIB:?SOFTIB must name the softib binary}
GUEST=10.99.0.1 BIND=10.99.0.254
CASE_TIMEOUT=${CASE_TIMEOUT:-120}
ATTEMPTS=${ATTEMPTS:-2}
# perftest -R's cases (NAME-cm) get at least 4 attempts: its client connects the test QP
# before a slow server listens now and then, and then hangs in its retry (perftest
# 4.5-0.17; see interop/differences.md); the other side's script counts the same way.
attempts_of() { if [[ $1 == *-cm && $ATTEMPTS -lt 4 ]]; then echo 4; else echo "$ATTEMPTS"; fi; }

# Output of a tool that has failed but does not exit.
GAVE_UP="Failed to destroy RDMA CM contexts"
# A client failure worth a retry is one before any work (the server not listening yet),
# never one after it (perftest -R's test connection rejected after the exchange
# connection: the server is in the middle of the test, so the attempt has failed).
NO_RETRY="$GAVE_UP|RDMA CM event error"
# run_watched OUT PEER_RC CMD...: runs CMD (within the case timeout) into OUT. Once the
# guest's side of this attempt has failed (PEER_RC holds a non-zero status), the peer this
# tool waits for is gone: the tool is stopped 5 s later instead of at the timeout.
run_watched() {
    local out=$1 peer_rc=$2 pid left=-1
    shift 2
    timeout "$CASE_TIMEOUT" "$@" > "$out" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        if (( left < 0 )) && [[ -s $peer_rc && $(< "$peer_rc") != 0 ]]; then left=25; fi
        # perftest 4.5-0.17's retry after a rejected test connection destroys its event
        # channel twice and never returns (upstream fix 3d9d8d0, 2025): it has failed.
        if grep -q "$GAVE_UP" "$out" 2>/dev/null; then
            kill "$pid" 2>/dev/null
            echo "host-side: stopped, the tool gave up (it does not exit by itself)" >> "$out"
            break
        fi
        if (( left == 0 )); then
            kill "$pid" 2>/dev/null
            echo "host-side: stopped, the guest's side of this attempt failed" >> "$out"
            break
        fi
        (( left > 0 )) && left=$((left - 1))
        sleep 0.2
    done
    wait "$pid"
}

if [[ ${LOSS:-0} != 0 ]]; then
    nft -f - <<NFT || { echo "host-side: cannot install the nftables loss rule" >&2; exit 3; }
table inet softib_interop_loss {
    chain out {
        type filter hook output priority 0; policy accept;
        udp dport 4791 numgen random mod 100 < ${LOSS} counter drop
    }
}
NFT
    echo "=== nftables: ${LOSS}% loss on the host's outgoing UDP dport 4791"
fi
while IFS=$'\t' read -r id name port role gcmd hcmd; do
    [[ -z $id || $id == \#* ]] && continue
    k=1
    while :; do
        tag=$id@$k
        out=$RESULTS/$tag.host.out
        pcap=$RESULTS/$tag.host.pcap
        start=$(date +%s.%N)
        # A template (the rdma_cm cases) names its port, addresses and capture itself; the
        # capture of a stock tool run through `softib run` is the shim's SOFTIB_PCAP.
        if [[ $hcmd == *"{PORT}"* ]]; then
            cmd=${hcmd//\{PORT\}/$port}; cmd=${cmd//\{SELF\}/$BIND}
            cmd=${cmd//\{PEER\}/$GUEST}; cmd=${cmd//\{PCAP\}/$pcap}
            server_cmd=$cmd client_cmd=$cmd
        else
            server_cmd="$hcmd -p $port --bind $BIND --pcap $pcap"
            client_cmd="$hcmd -p $port --pcap $pcap $GUEST"
        fi
        if [[ $role == server ]]; then
            echo "=== [$tag] softib client: softib $client_cmd"
            deadline=$(( $(date +%s) + 60 ))
            while :; do
                rm -f "$pcap"
                SOFTIB_PCAP=$pcap run_watched "$out" "$SHARE/$tag.guest.rc" "$SOFTIB" $client_cmd; rc=$?
                # Connection refused / no route / a CM REJ (no listener: IBA 12.6.7.2,
                # reason 8): the guest's server is not listening yet.
                if [[ $rc != 0 ]] && (( $(date +%s) < deadline )) &&
                   grep -qiE "refused|no route to host|cannot reach|is the server running|REJECTED|Unexpected CM event|failed to connect|unable to connect|rpoll:|async rconnect" "$out" &&
                   ! grep -qE "$NO_RETRY" "$out"; then
                    sleep 0.5; continue
                fi
                break
            done
        else
            echo "=== [$tag] softib server: softib $server_cmd"
            SOFTIB_PCAP=$pcap run_watched "$out" "$SHARE/$tag.guest.rc" "$SOFTIB" $server_cmd; rc=$?
        fi
        echo "$start $(date +%s.%N)" > "$RESULTS/$tag.host.time"
        echo "$rc" > "$RESULTS/$tag.host.rc"
        echo "$rc" > "$SHARE/$tag.host.rc.tmp" && mv "$SHARE/$tag.host.rc.tmp" "$SHARE/$tag.host.rc"
        cat "$out"
        echo "=== [$tag] softib rc=$rc"
        grc=timeout
        for _ in $(seq 1 $(( (CASE_TIMEOUT + 90) * 5 ))); do
            [[ -s $SHARE/$tag.guest.rc ]] && { grc=$(< "$SHARE/$tag.guest.rc"); break; }
            sleep 0.2
        done
        if [[ $rc == 0 && $grc == 0 ]] || (( k >= $(attempts_of "$name") )); then break; fi
        k=$((k + 1))
        echo "=== [$id] attempt $k (guest rc=$grc, softib rc=$rc)"
        if [[ $grc == timeout ]]; then
            echo "host-side: the guest gave no verdict for $tag; stopping" >&2
            # Tell the guest (through the share) that no host side will come for any further
            # attempt or case, so it stops now instead of timing out case after case.
            : > "$SHARE/host-side.stopped"
            exit 4
        fi
    done
done < "$CASES"
if [[ ${LOSS:-0} != 0 ]]; then nft list table inet softib_interop_loss > "$RESULTS/nft-loss.txt"; fi
exit 0
