#!/bin/bash
# CI entry of the rxe interop suite (called by .ci/run, as root on a fresh machine):
# installs what the oracle needs, builds its guest image with the oracle's own build.sh
# (about 90 s with downloads; a no-op when /var/tmp/rxe-vm is up to date), then runs the
# representative subset (interop/run.sh --subset ci: every tool family in both directions,
# MTU 1024 and 4096, the RC cases with 3 % loss, and rdma_cm both ways: perftest -R, and in
# the shim pass rping, ucmatose, riostream and rping under loss). Any missing piece is an
# error: the suite never passes without having run.
# The full matrix: interop/run.sh --subset full --doc docs/interop.md
# Measured (2-core machine shared with other jobs): CI subset 7.5 min, full matrix ~10 min;
# the rdma_cm cases add about 2 min over both passes (interop/differences.md, "CI").
set -euo pipefail
REPO=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
cd "$REPO"
export DEBIAN_FRONTEND=noninteractive
need=()
for pkg in qemu-system-x86 debootstrap e2fsprogs bc python3 tshark nftables iproute2; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
COMMON=$(cd "$(git rev-parse --git-common-dir)/.." && pwd)
ORACLE=${RXE_ORACLE:-}
for d in "$REPO/../shared/oracle/rxe-vm" "$COMMON/../shared/oracle/rxe-vm"; do
    [[ -z $ORACLE && -x $d/build.sh ]] && ORACLE=$d
done
[[ -n $ORACLE ]] || { echo "interop/ci.sh: the rxe oracle (../shared/oracle/rxe-vm next to the repository) is missing" >&2; exit 1; }
"$ORACLE/build.sh" || { echo "interop/ci.sh: the oracle's build.sh failed (see above)" >&2; exit 1; }
cargo build --release -q -p softib-cli
RXE_ORACLE=$ORACLE exec interop/run.sh --subset ci --softib "${CARGO_TARGET_DIR:-$REPO/target}/release/softib" \
    --out "${CARGO_TARGET_DIR:-$REPO/target}/interop-ci" "$@"
