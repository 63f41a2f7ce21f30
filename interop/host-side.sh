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
        if [[ $role == server ]]; then
            echo "=== [$tag] softib client: softib $hcmd -p $port $GUEST"
            deadline=$(( $(date +%s) + 60 ))
            while :; do
                rm -f "$pcap"
                timeout "$CASE_TIMEOUT" "$SOFTIB" $hcmd -p "$port" --pcap "$pcap" $GUEST > "$out" 2>&1; rc=$?
                # Connection refused / no route: the guest's server is not listening yet.
                if [[ $rc != 0 ]] && (( $(date +%s) < deadline )) &&
                   grep -qiE "refused|no route to host|cannot reach|is the server running" "$out"; then
                    sleep 0.5; continue
                fi
                break
            done
        else
            echo "=== [$tag] softib server: softib $hcmd -p $port --bind $BIND"
            timeout "$CASE_TIMEOUT" "$SOFTIB" $hcmd -p "$port" --bind $BIND --pcap "$pcap" > "$out" 2>&1; rc=$?
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
        if [[ $rc == 0 && $grc == 0 ]] || (( k >= ATTEMPTS )); then break; fi
        k=$((k + 1))
        echo "=== [$id] attempt $k (guest rc=$grc, softib rc=$rc)"
        [[ $grc == timeout ]] && { echo "host-side: the guest gave no verdict for $tag; stopping" >&2; exit 4; }
    done
done < "$CASES"
if [[ ${LOSS:-0} != 0 ]]; then nft list table inet softib_interop_loss > "$RESULTS/nft-loss.txt"; fi
exit 0
