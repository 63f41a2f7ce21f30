#!/bin/bash
# Regenerates rxe-passes.txt: runs rdma-core's pyverbs suite (tag v44.0, from ../shared, not
# copied) with driver.py on Linux 6.1 rdma_rxe in the oracle VM (../shared/oracle/rxe-vm)
# and lists the tests that pass there. Root; the oracle's image must be built (build.sh).
# usage: rxe-passes.sh [SUITE_DIR] > rxe-passes.txt
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(git -C "$here" rev-parse --show-toplevel)
common=$(cd "$(git -C "$here" rev-parse --git-common-dir)/.." && pwd)
suite=${1:-}
oracle=
for d in "$repo/../shared" "$common/../shared"; do
    [[ -z $suite && -f $d/testdata/pyverbs-tests-v44.0/tests/run_tests.py ]] && suite=$d/testdata/pyverbs-tests-v44.0
    [[ -z $oracle && -x $d/oracle/rxe-vm/run.sh ]] && oracle=$d/oracle/rxe-vm
done
[[ -n $suite && -n $oracle ]] || { echo "rxe-passes.sh: ../shared (the suite and the rxe oracle) not found" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar czf "$work/suite.tgz" -C "$suite" tests
{
    echo 'set -e; mkdir -p /tmp/pv; cd /tmp/pv'
    echo "base64 -d > suite.tgz <<'B64'"; base64 "$work/suite.tgz"; echo 'B64'
    echo "base64 -d > driver.py <<'B64'"; base64 "$here/driver.py"; echo 'B64'
    echo 'tar xzf suite.tgz'
    echo 'python3 driver.py /tmp/pv rxe0 "$RXE_SHARE/pyverbs.json"'
} > "$work/job.sh"
out=$("$oracle/run.sh" --job "$work/job.sh" --timeout 850 2>&1) || { echo "$out" >&2; exit 1; }
rundir=$(sed -n 's/.*rundir \(.*\)$/\1/p' <<<"$out" | tail -1)
echo "# pyverbs tests (rdma-core v44.0) that pass on Linux 6.1 rdma_rxe in the oracle VM,"
echo "# one test id a line; made by tests/pyverbs/rxe-passes.sh on $(date -u +%Y-%m-%d)."
python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["outcome"] == "ok":
        print(r["id"])
' "$rundir/vm1/pyverbs.json" | sort
