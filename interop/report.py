#!/usr/bin/env python3
"""report.py OUTDIR [--doc FILE]

Judges every case of an interop/run.sh run and prints the matrix; with --doc, writes it as
markdown (docs/interop.md). A case passes when both sides exited 0, the rdma_cm tools' outputs show their work
(work_check: pings verified, perftest iterations, riostream's verified row, ucmatose's
transfers), and both of its captures
(softib's --pcap tap and the bridge capture cut per case) hold at least one RoCEv2 packet,
every one parsed and with a valid ICRC. Exit status 0 only if every case of every group
passed and no group is missing its results.
"""
import os
import re
import sys

GROUP_TEXT = {
    "base": "IB MTU 1024 (guest NIC MTU 1500), no loss; the -cm, rping, ucmatose and riostream cases connect through rdma_cm",
    "mtu4096": "IB MTU 4096 (guest NIC MTU 4200), no loss",
    "loss": "IB MTU 1024, 3 % of RoCEv2 datagrams dropped each way (netem in the guest, nftables on the host)",
}
SUMMARY = re.compile(r"(\d+) packets, (\d+) with a bad ICRC, (\d+) with a bad VCRC, (\d+) malformed; (\d+) other")


def read(path, default=""):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return default


def decode_verdict(base):
    """(ok, text, decode output) for a capture decoded by run.sh into BASE.decode."""
    out = read(base + ".decode", None)
    if out is None:
        return False, "no capture", ""
    rc = read(base + ".decode.rc").strip()
    m = None
    for m in SUMMARY.finditer(out):
        pass
    if rc != "0" or m is None:
        return False, "decode failed", out
    pkts, bad, _vcrc, mal, _skip = (int(x) for x in m.groups())
    ok = pkts > 0 and bad == 0 and mal == 0
    text = f"{pkts} pkts" + ("" if bad == 0 else f", {bad} bad ICRC") + ("" if mal == 0 else f", {mal} malformed")
    return ok, text, out


def figures(name, text):
    """The headline figure of a tool's output."""
    lines = text.splitlines()
    for i, ln in enumerate(lines):
        if "#bytes" in ln and i + 1 < len(lines):
            cols = ln.split()
            vals = lines[i + 1].split()
            if len(vals) < 4:
                continue
            if "BW" in ln and "average" in ln:
                # #bytes #iterations BW peak BW average MsgRate
                return f"{vals[3]} MB/s avg, {vals[4] if len(vals) > 4 else '?'} Mpps"
            if "t_typical" in ln or "t_min" in ln:
                try:
                    return f"t_typical {vals[4]} us, t_avg {vals[5]} us"
                except IndexError:
                    return ""
    m = re.search(r"= ([\d.]+) Mbit/sec", text)
    u = re.search(r"= ([\d.]+) usec/iter", text)
    if m and u:
        return f"{m.group(1)} Mbit/s, {u.group(1)} us/iter"
    return ""


def opt(cmd, flag):
    """The value after FLAG in a command line, or None."""
    words = cmd.split()
    return words[words.index(flag) + 1] if flag in words[:-1] else None


def perftest_row(text):
    """perftest's result row (the line after "#bytes ...") as numbers, or None."""
    lines = text.splitlines()
    for i, ln in enumerate(lines):
        if ln.strip().startswith("#bytes") and i + 1 < len(lines):
            try:
                return [float(c) for c in lines[i + 1].split()]
            except ValueError:
                return None
    return None


def stream_rows(text):
    """rstream/riostream result rows: name, bytes, xfers, iters, total, time, Gb/sec, usec/xfer."""
    rows = []
    for ln in text.splitlines():
        c = ln.split()
        if len(c) == 8 and c[0] != "name":
            try:
                rows.append((c[0], float(c[6])))
            except ValueError:
                pass
    return rows


def work_check(name, role, gcmd, hcmd, gout, hout):
    """For the rdma_cm cases: (ok, text) from what the tools say they did, beyond their exit
    status; (True, "") for the other cases. ROLE is the guest's."""
    tool = name.split("-")[0]
    if role == "server":
        server, client, ccmd = gout, hout, hcmd
    else:
        server, client, ccmd = hout, gout, gcmd
    if tool == "rping":
        want = int(opt(ccmd, "-C") or 0)
        pings = len(re.findall(r"^ping data: rdma-ping-", client, re.M))
        served = len(re.findall(r"^server ping data: rdma-ping-", server, re.M))
        ok = want > 0 and pings == want and served == want and "data mismatch" not in client
        return ok, f"{pings}/{want} pings verified, {served} served"
    if name.endswith("-cm"):
        size, iters = float(opt(ccmd, "-s")), float(opt(ccmd, "-n"))
        row = perftest_row(client)
        ok = bool(row) and len(row) >= 5 and row[0] == size and row[1] == iters and row[3] > 0
        if not row:
            return False, "no result row"
        if "_lat" in name:
            # #bytes #iterations t_min t_max t_typical ...
            return ok, f"{int(row[1])}x{int(row[0])} B, t_typical {row[4]} us"
        return ok, f"{int(row[1])}x{int(row[0])} B, {row[3]} MB/s"
    if tool == "ucmatose":
        ok = all("data transfers complete" in t and "return status 0" in t for t in (server, client))
        return ok, "transfers complete both sides" if ok else "transfers incomplete"
    if tool == "riostream":
        rows = [stream_rows(t) for t in (server, client)]
        bad = any("verification failed" in t for t in (server, client))
        ok = all(len(r) == 1 and r[0][1] > 0 for r in rows) and not bad
        return ok, (f"verified, {rows[1][0][1]} Gb/s" if ok else "no verified result row")
    return True, ""


def counter_deltas(vm, tag):
    """rxe's port counters that changed during one attempt, as "name +delta" text."""
    def load(suffix):
        vals = {}
        for ln in read(os.path.join(vm, f"{tag}.rxe-counters.{suffix}")).splitlines():
            name, _, v = ln.partition(" ")
            if v.strip().isdigit():
                vals[name] = int(v)
        return vals
    before, after = load("before"), load("after")
    moved = [f"{k} +{after[k] - before.get(k, 0)}" for k in sorted(after)
             if after[k] != before.get(k, 0)]
    return ", ".join(moved)


def naks(decode_out):
    n = sum(1 for ln in decode_out.splitlines() if "NAK" in ln and "aeth" in ln)
    return n


def main():
    args = sys.argv[1:]
    doc = None
    if "--doc" in args:
        doc = args[args.index("--doc") + 1]
    outdir = args[0]
    info = dict()
    for ln in read(os.path.join(outdir, "suite.info")).splitlines():
        k, _, v = ln.partition(" ")
        info[k] = v
    groups = [g for g in info.get("subset", "").split("groups ")[-1].split(" ")[0].split(",") if g]
    md = []
    allok = True
    total = passed = 0
    versions = ""
    group_times = []
    failures = []
    for g in groups:
        gdir = os.path.join(outdir, g)
        cases_tsv = read(os.path.join(gdir, "cases.tsv"))
        if not cases_tsv:
            print(f"group {g}: no results", file=sys.stderr)
            allok = False
            continue
        orc = read(os.path.join(gdir, "oracle.rc")).split()
        group_times.append((g, orc[1] if len(orc) > 1 else "?"))
        vm = os.path.join(gdir, "rundir", "vm1")
        versions = versions or read(os.path.join(vm, "versions.txt"))
        md.append(f"\n### {g}: {GROUP_TEXT.get(g, g)}\n")
        md.append(f"Guest boot + all runs of the group: {orc[1] if len(orc) > 1 else '?'} s wall.\n")
        md.append("| case | guest (rxe) | softib | result | softib capture | bridge capture | RC NAKs on the bridge | rxe-side figure | softib-side figure |")
        md.append("|---|---|---|---|---|---|---|---|---|")
        for ln in cases_tsv.splitlines():
            cid, name, port, role, gcmd, hcmd = ln.split("\t")
            total += 1
            attempts = []
            k = 1
            while os.path.exists(os.path.join(vm, f"{cid}@{k}.guest.rc")) or os.path.exists(
                    os.path.join(gdir, f"{cid}@{k}.host.rc")):
                tag = f"{cid}@{k}"
                grc = read(os.path.join(vm, tag + ".guest.rc")).strip() or "none"
                hrc = read(os.path.join(gdir, tag + ".host.rc")).strip() or "none"
                hok, htext, _ = decode_verdict(os.path.join(gdir, tag + ".host"))
                bok, btext, bout = decode_verdict(os.path.join(gdir, "bridge", tag))
                gout = read(os.path.join(vm, tag + ".guest.out"))
                hout = read(os.path.join(gdir, tag + ".host.out"))
                wok, wtext = work_check(name, role, gcmd, hcmd, gout, hout)
                ok = grc == "0" and hrc == "0" and hok and bok and wok
                attempts.append(dict(grc=grc, hrc=hrc, htext=htext, btext=btext, ok=ok, bout=bout,
                                     gout=gout, hout=hout, rxe=counter_deltas(vm, tag),
                                     wtext=wtext))
                k += 1
            if not attempts:
                attempts.append(dict(grc="none", hrc="none", htext="no capture", btext="no capture",
                                     ok=False, bout="", gout="", hout="", rxe="", wtext=""))
            last = attempts[-1]
            ok = last["ok"]
            passed += ok
            allok &= ok
            gtool = gcmd.split()[0] + (" (server)" if role == "server" else " (client)")
            hwords = hcmd.split()
            # "run --addr {SELF} -- TOOL ...": a stock tool through softib run
            htool = (hwords[hwords.index("--") + 1] + " via softib run" if hwords[0] == "run" and "--" in hwords
                     else "softib " + hwords[0]) + (" (client)" if role == "server" else " (server)")
            verdict = "PASS" if ok else "**FAIL**"
            if len(attempts) > 1:
                verdict += f" (attempt {len(attempts)})"
            work = f" ({last['wtext']})" if last["wtext"] else ""
            md.append(f"| {cid} | `{gtool}` rc={last['grc']} | `{htool}` rc={last['hrc']} | {verdict}{work} | {last['htext']} | {last['btext']} | {naks(last['bout'])} | {figures(name, last['gout'])} | {figures(name, last['hout'])} |")
            for i, a in enumerate(attempts[:-1] if ok else attempts, 1):
                if a["ok"]:
                    continue
                why = []
                for label, text in (("guest", a["gout"]), ("softib", a["hout"])):
                    errs = [l.strip() for l in text.splitlines()
                            if re.search(r"error|fail|can't|couldn't|exceeded|unable", l, re.I)]
                    if errs:
                        why.append(f"{label}: {errs[-1]}")
                if a["wtext"]:
                    why.append(f"work: {a['wtext']}")
                failures.append(f"- {g}/{cid} attempt {i}: guest rc={a['grc']}, softib rc={a['hrc']}, "
                                f"softib capture [{a['htext']}], bridge [{a['btext']}]"
                                + ("; " + "; ".join(f"`{w}`" for w in why) if why else "")
                                + (f"; rxe counters: {a['rxe']}" if a["rxe"] else ""))
            print(f"{'PASS' if ok else 'FAIL'} {g}/{cid} ({len(attempts)} attempt(s)): guest rc={last['grc']} "
                  f"softib rc={last['hrc']} softib-pcap[{last['htext']}] bridge-pcap[{last['btext']}]"
                  + (f" work[{last['wtext']}]" if last["wtext"] else ""))
            if not ok:
                for label, text in (("guest", last["gout"]), ("softib", last["hout"])):
                    tail = "\n      ".join(text.strip().splitlines()[-6:])
                    print(f"    {label}: {tail}")
        md.append("\nCommands (guest, then softib; the client adds `-p PORT SERVER`, the softib server "
                  "`--bind 10.99.0.254`; a template with `{PORT}` is run as written, with {SELF} the "
                  "side's own address and {PEER} the other's):\n")
        seen = set()
        for ln in cases_tsv.splitlines():
            cid, name, port, role, gcmd, hcmd = ln.split("\t")
            templ = "{PORT}" in gcmd
            key = (name, role) if templ else name
            if key in seen:
                continue
            seen.add(key)
            label = f"{name} ({'rxe' if role == 'server' else 'softib'} server)" if templ else name
            md.append(f"- {label}: `{gcmd}` / `softib {hcmd}`")
    print("\n".join(failures))
    print(f"{passed}/{total} runs passed; elapsed {info.get('elapsed', '?')} s")
    if total == 0:
        print("no case ran", file=sys.stderr)
        allok = False
    if doc:
        head = [
            "# softib and Linux Soft-RoCE (rdma_rxe): interoperability matrix",
            "",
            "Generated by `interop/run.sh` (this file: `interop/run.sh --doc docs/interop.md`);",
            "do not edit the matrix by hand. The known differences at the end are written in",
            "`interop/differences.md` and appended verbatim.",
            "",
            "## Setup",
            "",
            "softib runs on the host inside the rxe oracle's network namespace (10.99.0.254, GID",
            "`::ffff:10.99.0.254`); the stock tools run in a qemu/TCG guest (10.99.0.1) with the",
            "kernel's rdma_rxe on a bridge (`../shared/oracle/rxe-vm`). Every case runs twice: the",
            "guest's tool as the server with softib as the client (`rxe-server`), then softib as the",
            "server with the guest's tool as the client (`softib-server`). The TCP exchange is the",
            "stock tools' own (ibv_rc_pingpong's and perftest's); softib needs no flag to pair.",
            "",
            "A run passes when both tools exit 0 and both captures decode with `softib decode`",
            "(at least one RoCEv2 packet, every packet parsed, every ICRC valid): softib's own",
            "`--pcap` tap, and the bridge capture (dumpcap on the namespace's bridge, real wire",
            "frames with rxe's IPv4 Identification values) cut per run by the guest's UDP markers.",
            "",
            "The guest is emulated (TCG, no KVM, on a loaded 2-core host), so the bandwidth and",
            "latency figures only show that the protocol works under load; they say nothing about",
            "softib's or rxe's speed.",
            "",
            "## Versions",
            "",
            f"- run: {info.get('started', '?')}, subset `{info.get('subset', '?')}`",
            f"- softib: {info.get('softib', '?')}, commit {info.get('softib-commit', '?')}",
            f"- host kernel {info.get('host-kernel', '?')}; {info.get('qemu', '?')}",
            "- guest (Debian 12): kernel " + ", ".join(l.strip().replace("\t", " ") for l in versions.splitlines() if l.strip()),
            "",
            "## Results",
            "",
            f"**{passed} of {total} runs passed** in {info.get('elapsed', '?')} s wall ("
            + ", ".join(f"{g} {t} s" for g, t in group_times) + ").",
        ]
        head += ["", "## Failed attempts", ""]
        head += failures or ["None: every run passed at its first attempt."]
        head += ["", "## Matrix"]
        diffs = read(os.path.join(os.path.dirname(os.path.abspath(__file__)), "differences.md"))
        with open(doc, "w") as f:
            f.write("\n".join(head + md) + "\n\n" + diffs)
        print(f"wrote {doc}")
    return 0 if allok else 1


if __name__ == "__main__":
    sys.exit(main())
