#!/bin/bash
# Runs inside the rxe oracle guest (vm1, 10.99.0.1): the stock-tool half of every case in
# CASES (a tab-separated file made by interop/run.sh, next to this script on the 9p share).
# Each line: id  name  port  guest_role  guest_cmd  host_cmd
#   guest_role server: run guest_cmd with "-p port" and wait for softib's client;
#   guest_role client: run guest_cmd with "-p port 10.99.0.254", retrying while softib's
#                      server is not listening yet.
# A guest_cmd with "{PORT}" in it is a template, run as it is once {PORT}, {SELF}
# (10.99.0.1) and {PEER} (10.99.0.254) are filled in.
# Lock-step with host-side.sh through the share: after attempt K of a case each side
# writes its exit status (<id>@K.guest.rc here, <id>@K.host.rc by the host) and waits for
# the other's; if either failed and K < ATTEMPTS, both run the case again. (The emulated
# guest stalls now and then for longer than a QP's retry budget, and perftest's CPU clock
# calibration fails under TCG now and then; a second attempt tells those from a protocol
# failure, and the report shows every attempt.)
# With LOSS=N, the guest drops N % of its outgoing RoCEv2 datagrams (netem, UDP dport 4791
# only, so the TCP exchange is spared). UDP markers "BEGIN <id>@K" / "END <id>@K rc=N" to
# the host let interop/split.py cut the bridge capture per attempt. rxe's port counters are
# saved before and after each attempt (<id>@K.rxe-counters.before/.after).
set -u
CASES=${1:?usage: guest-side.sh CASES.tsv}
HOST=10.99.0.254 SELF=10.99.0.1
SHARE=${RXE_SHARE:-/mnt/host}
CASE_TIMEOUT=${CASE_TIMEOUT:-120}
ATTEMPTS=${ATTEMPTS:-2}
# perftest -R's cases (NAME-cm) get at least 4 attempts: its client connects the test QP
# before a slow server listens now and then, and then hangs in its retry (perftest
# 4.5-0.17; see interop/differences.md); the other side's script counts the same way.
attempts_of() { if [[ $1 == *-cm && $ATTEMPTS -lt 4 ]]; then echo 4; else echo "$ATTEMPTS"; fi; }
marker() { echo "$1" > /dev/udp/$HOST/9999; }
# rxe's port counters (builtins only: a fork costs ~30 ms under TCG), one "name value" a line
counters() {
    local f
    for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do
        printf '%s %s\n' "${f##*/}" "$(< "$f")"
    done > "$1"
}
# A sleep without a fork: a read with a timeout on a FIFO nobody writes.
mkfifo /tmp/guest-side.nap && exec 7<>/tmp/guest-side.nap
nap() { read -r -t "$1" -u 7 _; }
# run_watched OUT PEER_RC CMD...: runs CMD (within the case timeout) into OUT. Once the
# host's side of this attempt has failed (PEER_RC holds a non-zero status), the peer this
# tool waits for is gone: the tool is stopped 5 s later instead of at the timeout.
run_watched() {
    local out=$1 peer_rc=$2 pid left=-1
    shift 2
    timeout "$CASE_TIMEOUT" "$@" > "$out" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        if (( left < 0 )) && { [[ -s $peer_rc && $(< "$peer_rc") != 0 ]] || [[ -e $SHARE/host-side.stopped ]]; }; then left=10; fi
        if (( left == 0 )); then
            kill "$pid" 2>/dev/null
            echo "guest-side: stopped, the host's side of this attempt failed" >> "$out"
            break
        fi
        (( left > 0 )) && left=$((left - 1))
        nap 0.5
    done
    wait "$pid"
}

if [[ ${LOSS:-0} != 0 ]]; then
    # prio's band 3 gets a netem child; a u32 filter sends only UDP to 4791 there.
    tc qdisc add dev eth0 root handle 1: prio || exit 3
    tc qdisc add dev eth0 parent 1:3 handle 30: netem loss "${LOSS}%" || exit 3
    tc filter add dev eth0 protocol ip parent 1:0 prio 1 u32 \
        match ip protocol 17 0xff match ip dport 4791 0xffff flowid 1:3 || exit 3
    echo "=== netem: ${LOSS}% loss on eth0 egress for UDP dport 4791"
fi
{ uname -r; dpkg-query -W rdma-core ibverbs-utils perftest iproute2; } > "$SHARE/versions.txt" 2>&1
FAIL=0
while IFS=$'\t' read -r id name port role gcmd hcmd; do
    [[ -z $id || $id == \#* ]] && continue
    # The host's side gave up (host-side.sh): nothing more can pass.
    if [[ -e $SHARE/host-side.stopped ]]; then
        echo "guest-side: the host's side stopped; $id and the cases after it are not run"
        FAIL=1
        break
    fi
    k=1
    while :; do
        tag=$id@$k
        out=$SHARE/$tag.guest.out
        counters "$SHARE/$tag.rxe-counters.before"
        marker "BEGIN $tag"
        start=$(date +%s.%N)
        # A template (the rdma_cm cases) names its port and addresses itself.
        if [[ $gcmd == *"{PORT}"* ]]; then
            cmd=${gcmd//\{PORT\}/$port}; cmd=${cmd//\{SELF\}/$SELF}; cmd=${cmd//\{PEER\}/$HOST}
            server_cmd=$cmd client_cmd=$cmd
        else
            server_cmd="$gcmd -p $port" client_cmd="$gcmd -p $port $HOST"
        fi
        if [[ $role == server ]]; then
            echo "=== [$tag] guest server: $server_cmd"
            run_watched "$out" "$SHARE/$tag.host.rc" $server_cmd; rc=$?
        else
            echo "=== [$tag] guest client: $client_cmd"
            deadline=$(( $(date +%s) + 60 ))
            while :; do
                run_watched "$out" "$SHARE/$tag.host.rc" $client_cmd; rc=$?
                if [[ $rc != 0 ]] && (( $(date +%s) < deadline )) &&
                   grep -qiE "couldn't connect|unable to (connect|open)|failed to connect|rejected|unreachable|refused|Unexpected CM event|rpoll:|async rconnect" "$out" &&
                   ! grep -qE "Failed to destroy RDMA CM contexts|RDMA CM event error" "$out"; then
                    sleep 0.5; continue
                fi
                break
            done
        fi
        echo "$start $(date +%s.%N)" > "$SHARE/$tag.guest.time"
        counters "$SHARE/$tag.rxe-counters.after"
        echo "$rc" > "$SHARE/$tag.guest.rc"
        cat "$out"
        echo "=== [$tag] guest rc=$rc"
        marker "END $tag rc=$rc"
        # wait for the host's verdict on this attempt
        hrc=timeout
        for _ in $(seq 1 $(( (CASE_TIMEOUT + 90) * 5 ))); do
            [[ -s $SHARE/$tag.host.rc ]] && { hrc=$(< "$SHARE/$tag.host.rc"); break; }
            [[ -e $SHARE/host-side.stopped ]] && { hrc=stopped; break; }
            sleep 0.2
        done
        if [[ $rc == 0 && $hrc == 0 ]] || (( k >= $(attempts_of "$name") )); then break; fi
        k=$((k + 1))
        echo "=== [$id] attempt $k (guest rc=$rc, host rc=$hrc)"
    done
    [[ $rc == 0 && $hrc == 0 ]] || FAIL=1
    sleep 0.3
done < "$CASES"
if [[ ${LOSS:-0} != 0 ]]; then tc -s qdisc show dev eth0 > "$SHARE/netem-stats.txt"; fi
counters "$SHARE/rxe-counters.txt"
exit $FAIL
