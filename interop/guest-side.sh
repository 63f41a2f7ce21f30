#!/bin/bash
# Runs inside the rxe oracle guest (vm1, 10.99.0.1): the stock-tool half of every case in
# CASES (a tab-separated file made by interop/run.sh, next to this script on the 9p share).
# Each line: id  name  port  guest_role  guest_cmd  host_cmd
#   guest_role server: run guest_cmd with "-p port" and wait for softib's client;
#   guest_role client: run guest_cmd with "-p port 10.99.0.254", retrying while softib's
#                      server is not listening yet.
# With LOSS=N, the guest drops N % of its outgoing RoCEv2 datagrams (netem, UDP dport 4791
# only, so the TCP exchange is spared). Results: $RXE_SHARE/<id>.guest.out and .rc. UDP
# markers "BEGIN id"/"END id rc=N" to the host let split-capture.py cut the bridge capture.
set -u
CASES=${1:?usage: guest-side.sh CASES.tsv}
HOST=10.99.0.254
SHARE=${RXE_SHARE:-/mnt/host}
CASE_TIMEOUT=${CASE_TIMEOUT:-120}
marker() { echo "$1" > /dev/udp/$HOST/9999; }

if [[ ${LOSS:-0} != 0 ]]; then
    # prio's band 3 gets a netem child; a u32 filter sends only UDP to 4791 there.
    tc qdisc add dev eth0 root handle 1: prio || exit 3
    tc qdisc add dev eth0 parent 1:3 handle 30: netem loss "${LOSS}%" || exit 3
    tc filter add dev eth0 protocol ip parent 1:0 prio 1 u32 \
        match ip protocol 17 0xff match ip dport 4791 0xffff flowid 1:3 || exit 3
    echo "=== netem: ${LOSS}% loss on eth0 egress for UDP dport 4791"
    tc -s qdisc show dev eth0
fi
{ uname -r; dpkg-query -W rdma-core ibverbs-utils perftest iproute2; } > "$SHARE/versions.txt" 2>&1
FAIL=0
while IFS=$'\t' read -r id name port role gcmd hcmd; do
    [[ -z $id || $id == \#* ]] && continue
    out=$SHARE/$id.guest.out
    marker "BEGIN $id"
    start=$(date +%s.%N)
    if [[ $role == server ]]; then
        echo "=== [$id $name] guest server: $gcmd -p $port"
        timeout "$CASE_TIMEOUT" $gcmd -p "$port" > "$out" 2>&1; rc=$?
    else
        echo "=== [$id $name] guest client: $gcmd -p $port $HOST"
        deadline=$(( $(date +%s) + 60 ))
        while :; do
            timeout "$CASE_TIMEOUT" $gcmd -p "$port" $HOST > "$out" 2>&1; rc=$?
            if [[ $rc != 0 ]] && (( $(date +%s) < deadline )) &&
               grep -qiE "couldn't connect|unable to (connect|open)|failed to connect|rejected|Unexpected CM event" "$out"; then
                sleep 0.5; continue
            fi
            break
        done
    fi
    end=$(date +%s.%N)
    echo "$rc" > "$SHARE/$id.guest.rc"
    echo "$start $end" > "$SHARE/$id.guest.time"
    cat "$out"
    echo "=== [$id $name] guest rc=$rc"
    marker "END $id rc=$rc"
    [[ $rc == 0 ]] || FAIL=1
    sleep 0.3
done < "$CASES"
if [[ ${LOSS:-0} != 0 ]]; then tc -s qdisc show dev eth0; fi
cat /sys/class/infiniband/rxe0/ports/1/hw_counters/* > /dev/null 2>&1 &&
    for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do
        printf '%s %s\n' "${f##*/}" "$(< "$f")"
    done > "$SHARE/rxe-counters.txt"
exit $FAIL
