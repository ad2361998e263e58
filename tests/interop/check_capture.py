#!/usr/bin/python3
"""Checks a RoCEv2 capture with the project's decoder: every frame to UDP 4791 must decode with
`xroce wire decode --json` and carry a good ICRC, and the decoder must find exactly as many
RoCEv2 frames as an independent count of the pcap (so none is silently skipped).

Used by test_rxe_pair.py, and on its own for captures taken elsewhere (your own rxe hosts, an
RNIC's port mirror; see README.md):

    check_capture.py [--xroce build/bin/xroce] [--need OPCODE ...] [--min-payload N] FILE.pcap...

Classic pcap with Ethernet framing only (tcpdump -w does that; tshark/dumpcap need -F pcap).
Exits 0 when every file passes, 1 otherwise, 77 when given no readable capture (a skip).
"""

import argparse
import collections
import json
import struct
import subprocess
import sys
from pathlib import Path

ROCE_V2_PORT = 4791
ACKNOWLEDGE = 0x11
HERE = Path(__file__).resolve().parent


class CaptureError(AssertionError):
    pass


def count_roce_frames(pcap: Path) -> int:
    """UDP frames to port 4791 in a classic pcap, counted without the project's code."""
    data = pcap.read_bytes()
    magic = struct.unpack_from("<I", data, 0)[0] if len(data) >= 24 else 0
    endian = {0xA1B2C3D4: "<", 0xA1B23C4D: "<", 0xD4C3B2A1: ">", 0x4D3CB2A1: ">"}.get(magic)
    if endian is None:
        raise CaptureError(f"{pcap}: not a classic pcap file (pcapng? write it with -F pcap)")
    offset, count = 24, 0
    while offset + 16 <= len(data):
        incl_len = struct.unpack_from(f"{endian}I", data, offset + 8)[0]
        frame = data[offset + 16:offset + 16 + incl_len]
        offset += 16 + incl_len
        ethertype, l3 = struct.unpack_from(">H", frame, 12)[0], 14
        while ethertype in (0x8100, 0x88A8):
            ethertype, l3 = struct.unpack_from(">H", frame, l3 + 2)[0], l3 + 4
        if ethertype == 0x0800 and frame[l3 + 9] == 17:
            l4 = l3 + (frame[l3] & 0x0F) * 4
        elif ethertype == 0x86DD and frame[l3 + 6] == 17:
            l4 = l3 + 40
        else:
            continue
        if struct.unpack_from(">H", frame, l4 + 2)[0] == ROCE_V2_PORT:
            count += 1
    return count


def check_capture(xroce: Path, pcap: Path, needed_opcodes=None, min_payload: int = 0,
                  ip_versions=()) -> dict:
    """Raises CaptureError unless every RoCEv2 frame decodes with a good ICRC; returns a summary.

    needed_opcodes: {IBTA opcode value: name} that must each appear at least once;
    ip_versions: IP versions (4, 6) that must each carry at least one RoCEv2 frame."""
    expected = count_roce_frames(pcap)
    p = subprocess.run([str(xroce), "wire", "decode", "--json", str(pcap)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise CaptureError(f"xroce wire decode exited {p.returncode}: {p.stderr}")
    frames = json.loads(p.stdout)
    roce = [f for f in frames if f["status"] != "skipped"]
    bad = [f for f in roce if f["status"] != "ok" or f.get("icrc") != "ok"]
    if bad:
        raise CaptureError(f"{pcap}: {len(bad)} of {len(roce)} RoCEv2 frames failed to decode or "
                           f"had a bad ICRC; first: {json.dumps(bad[0])}")
    if len(roce) != expected:
        raise CaptureError(f"{pcap}: xroce decoded {len(roce)} RoCEv2 frames, the pcap holds "
                           f"{expected}")
    opcodes = collections.Counter(f["bth"]["opcode_name"] for f in roce)
    # A request seen twice (same sender, QP, PSN, opcode) is a retransmission.
    first_seen, resent = set(), 0
    for f in roce:
        key = (f["ip"]["src"], f["bth"]["dest_qp"], f["bth"]["psn"], f["bth"]["opcode"])
        resent += key in first_seen and f["bth"]["opcode"] != ACKNOWLEDGE
        first_seen.add(key)
    seen = {f["bth"]["opcode"] for f in roce}
    missing = [name for value, name in (needed_opcodes or {}).items() if value not in seen]
    if missing:
        raise CaptureError(f"{pcap}: the capture lacks {missing}: {dict(opcodes)}")
    versions = collections.Counter(f["ip"]["version"] for f in roce)
    if set(ip_versions) - set(versions):
        raise CaptureError(f"{pcap}: no RoCEv2 frames over IPv{set(ip_versions) - set(versions)}")
    largest = max((f["payload_length"] for f in roce), default=0)
    if largest < min_payload:
        raise CaptureError(f"{pcap}: largest RoCEv2 payload is {largest} B, expected {min_payload}")
    return {"frames": len(frames), "roce": len(roce), "retransmitted": resent,
            "largest_payload": largest, "ip_versions": dict(versions), "opcodes": dict(opcodes)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--xroce", type=Path, default=HERE.parent.parent / "build/bin/xroce")
    parser.add_argument("--need", action="append", default=[], metavar="OPCODE",
                        help="an opcode value (e.g. 0x11) that must appear; repeatable")
    parser.add_argument("--min-payload", type=int, default=0)
    parser.add_argument("pcaps", nargs="+", type=Path)
    args = parser.parse_args()
    pcaps = [p for p in args.pcaps if p.is_file()]
    if not pcaps:
        print(f"SKIP: no capture found among {', '.join(map(str, args.pcaps))}")
        return 77
    needed = {int(v, 0): v for v in args.need}
    failed = 0
    for pcap in pcaps:
        try:
            summary = check_capture(args.xroce, pcap, needed, args.min_payload)
            print(f"{pcap}: ok: {json.dumps(summary)}")
        except CaptureError as e:
            print(f"FAILED: {e}")
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
