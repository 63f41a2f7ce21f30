#!/usr/bin/env bash
# Fails if a module of the given packages imports a module that imports it back (directly
# or through others). The graph is cargo-modules' (`cargo install cargo-modules --version
# 0.27.0 --locked` on rustc 1.95): its `use` edges between modules, types and functions
# filtered out. cargo-modules' own --acyclic cannot be used for this: it also counts a type
# and its own methods (`impl T { fn new() -> T }`) as a cycle.
#
# Usage: bench/module-cycles.sh PACKAGE...   e.g. bench/module-cycles.sh softib-fabric softib-sim
set -euo pipefail
[[ $# -ge 1 ]] || { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
command -v cargo-modules >/dev/null || { echo "cargo-modules is not installed" >&2; exit 2; }
status=0
for pkg in "$@"; do
    dot=$(cargo modules dependencies --package "$pkg" --lib --no-externs --no-sysroot \
        --no-fns --no-traits --no-types)
    printf '%s: ' "$pkg"
    python3 -c '
import re, sys
edges = {}
for line in sys.stdin:
    m = re.match(r"\s*\"([^\"]+)\" -> \"([^\"]+)\" \[label=\"uses\"", line)
    if m:
        edges.setdefault(m.group(1), set()).add(m.group(2))
        edges.setdefault(m.group(2), set())
# Tarjan: strongly connected components of two or more modules are cycles.
index, low, stack, on, cycles = {}, {}, [], set(), []
sys.setrecursionlimit(100000)
def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v); on.add(v)
    for w in edges[v]:
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v:
                break
        if len(comp) > 1:
            cycles.append(sorted(comp))
for v in list(edges):
    if v not in index:
        visit(v)
n = sum(len(e) for e in edges.values())
print(f"{n} use edges between {len(edges)} modules, " + (f"{len(cycles)} cycle(s):" if cycles else "no cycles"))
for c in cycles:
    print("   ", " <-> ".join(c))
sys.exit(1 if cycles else 0)
' <<<"$dot" || status=1
done
exit $status
