#!/usr/bin/env python3
"""split.py ALL.pcap OUTDIR

Cuts a bridge capture (classic pcap, Ethernet, as dumpcap -P writes it) into one pcap per
run, between the guest's UDP markers "BEGIN <tag>" and "END <tag> ..." (IPv4, UDP
destination port 9999); the markers themselves are left out. One pass over the file (the
oracle's split-capture.py runs tshark once per run, too slow for a whole matrix).
"""
import os
import struct
import sys


def records(f):
    head = f.read(24)
    if len(head) < 24:
        raise SystemExit("split.py: not a pcap file (too short)")
    magic = head[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        endian = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        endian = ">"
    else:
        raise SystemExit("split.py: not a classic pcap file (pcapng? run dumpcap with -P)")
    yield head
    while True:
        rh = f.read(16)
        if len(rh) < 16:
            return
        incl = struct.unpack(endian + "IIII", rh)[2]
        data = f.read(incl)
        if len(data) < incl:
            return
        yield rh + data


def marker(frame):
    """The marker text of an Ethernet/IPv4/UDP frame to port 9999, else None."""
    if len(frame) < 16 + 14 + 20 + 8:
        return None
    eth = frame[16:]
    if eth[12:14] != b"\x08\x00":
        return None
    ip = eth[14:]
    ihl = (ip[0] & 0x0F) * 4
    if ip[9] != 17 or len(ip) < ihl + 8:
        return None
    udp = ip[ihl:]
    if struct.unpack(">H", udp[2:4])[0] != 9999:
        return None
    return udp[8:].decode(errors="replace").strip()


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    src, outdir = sys.argv[1], sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    open_files = {}
    cut = 0
    with open(src, "rb") as f:
        it = records(f)
        header = next(it)
        for rec in it:
            text = marker(rec)
            if text is not None:
                word = text.split()
                if len(word) >= 2 and word[0] == "BEGIN":
                    out = open(os.path.join(outdir, word[1] + ".pcap"), "wb")
                    out.write(header)
                    open_files[word[1]] = out
                elif len(word) >= 2 and word[0] == "END" and word[1] in open_files:
                    open_files.pop(word[1]).close()
                    cut += 1
                continue
            for out in open_files.values():
                out.write(rec)
    for out in open_files.values():
        out.close()
    print(f"split.py: {cut} runs cut from {src}")
    return 0 if cut else 1


if __name__ == "__main__":
    sys.exit(main())
