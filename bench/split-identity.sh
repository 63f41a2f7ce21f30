#!/usr/bin/env bash
# Before/after check of a refactor that must change nothing observable (written for the
# softib-fabric / softib-sim split): runs every bundled scenario (scenarios/*.toml) and the
# field-case library (`softib cases --out`) with two `softib` binaries and diffs what they
# wrote. summary.json's "generator" field (the crate name and version) is the one
# difference allowed; `softib cases` prints its "ran FILE" lines (stderr) in the order its
# parallel runs finish, so those are compared sorted.
#
# Usage: bench/split-identity.sh OLD_SOFTIB NEW_SOFTIB [WORKDIR]
#   e.g. cp target/release/softib /tmp/softib-before   # on the old commit
#        cargo build --release -p softib-cli && bench/split-identity.sh /tmp/softib-before target/release/softib
# Exit status 0 = identical; 1 = a difference (listed); 2 = usage or a run failed.
set -euo pipefail

if [[ $# -lt 2 || $# -gt 3 ]]; then
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
old=$(realpath "$1")
new=$(realpath "$2")
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${3:-$(mktemp -d /tmp/split-identity.XXXXXX)}
mkdir -p "$work"

run_all() { # BINARY SIDE
    local bin=$1 side=$2 out=$work/$2
    rm -rf "$out"
    mkdir -p "$out/sim"
    for toml in "$repo"/scenarios/*.toml; do
        local name
        name=$(basename "$toml" .toml)
        if ! "$bin" sim "$toml" --out "$out/sim/$name" >"$out/sim/$name.stdout" 2>"$out/sim/$name.stderr"; then
            echo "$side: softib sim $name failed:" >&2
            cat "$out/sim/$name.stderr" >&2
            exit 2
        fi
        # The scenario path is the same on both sides; the output directory is not.
        sed -i "s#$out#OUT#g" "$out/sim/$name.stdout"
    done
    if ! "$bin" cases --out "$out/cases" >"$out/cases.stdout" 2>"$out/cases.stderr.raw"; then
        echo "$side: softib cases failed:" >&2
        cat "$out/cases.stderr.raw" >&2
        exit 2
    fi
    sort "$out/cases.stderr.raw" >"$out/cases.stderr"
    rm "$out/cases.stderr.raw"
    # The one field allowed to differ.
    find "$out" -name summary.json -exec sed -i '/"generator":/d' {} +
}

echo "old: $old"
echo "new: $new"
echo "work: $work"
start=$(date +%s)
run_all "$old" old
echo "old binary done in $(($(date +%s) - start)) s"
start=$(date +%s)
run_all "$new" new
echo "new binary done in $(($(date +%s) - start)) s"

files=$(find "$work/old" -type f | wc -l)
if diff -r "$work/old" "$work/new" >"$work/diff.txt"; then
    echo "identical: $files files (scenarios: $(ls "$repo"/scenarios/*.toml | wc -l), plus softib cases)"
    exit 0
fi
echo "DIFFERENT ($files files on the old side); first lines of $work/diff.txt:"
head -40 "$work/diff.txt"
exit 1
