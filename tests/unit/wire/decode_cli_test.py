"""`xroce wire decode` on a capture mixing good, corrupted and foreign frames: each is reported
as ok / bad ICRC / error / skipped, in text and in JSON, and a bad file fails cleanly.

Usage: /usr/bin/python3 decode_cli_test.py XROCE_BINARY WORK_DIR
"""

import json
import os
import struct
import subprocess
import sys


def read_pcap(path):
    with open(path, "rb") as f:
        data = f.read()
    off, frames = 24, []
    while off + 16 <= len(data):
        incl = struct.unpack("<I", data[off + 8 : off + 12])[0]
        frames.append(bytearray(data[off + 16 : off + 16 + incl]))
        off += 16 + incl
    return frames


def write_pcap(path, frames):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, fr in enumerate(frames):
            f.write(struct.pack("<IIII", i, 0, len(fr), len(fr)))
            f.write(bytes(fr))


def main():
    xroce, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    golden = os.path.join(work, "golden.pcap")
    subprocess.run([xroce, "wire", "samples", "-w", golden], check=True, stdout=subprocess.PIPE)
    frames = read_pcap(golden)
    # An IPv4 ACK without VLAN: 62 bytes, BTH opcode 0x11 at offset 42.
    ack = next(f for f in frames if len(f) == 62 and f[42] == 0x11)

    bad_icrc = bytearray(ack)
    bad_icrc[-1] ^= 0xFF
    bad_opcode = bytearray(ack)
    bad_opcode[42] = 0x15  # reserved opcode
    tcp = bytearray(ack)
    tcp[23] = 6  # IP protocol TCP (checksum no longer matters: skipped before it is checked)
    other_port = bytearray(ack)
    other_port[36:38] = struct.pack("!H", 53)
    truncated = bytearray(ack[:50])
    mixed = [ack, bad_icrc, bad_opcode, tcp, other_port, truncated]
    path = os.path.join(work, "mixed.pcap")
    write_pcap(path, mixed)

    out = subprocess.run([xroce, "wire", "decode", "--json", path], check=True,
                         stdout=subprocess.PIPE).stdout
    got = [(x["status"], x.get("icrc"), x.get("error"), x.get("header_error"))
           for x in json.loads(out)]
    want = [("ok", "ok", None, None), ("ok", "bad", None, None),
            ("error", None, "bad transport headers", "unknown opcode"),
            ("skipped", None, None, None), ("skipped", None, None, None),
            ("error", None, "truncated frame", None)]
    failures = []
    if got != want:
        failures.append("JSON statuses %r, want %r" % (got, want))
    first = json.loads(out)[0]
    for key in ("eth", "ip", "udp", "bth", "aeth", "payload_length", "icrc_value"):
        if key not in first:
            failures.append("JSON of a good frame lacks %r" % key)

    text = subprocess.run([xroce, "wire", "decode", path], check=True,
                          stdout=subprocess.PIPE).stdout.decode().splitlines()
    expect_text = ["icrc=ok", "icrc=bad", "error: bad transport headers (unknown opcode)",
                   "skipped: not UDP", "skipped: UDP destination port is not 4791",
                   "error: truncated frame"]
    if len(text) != len(expect_text):
        failures.append("text output has %d lines, want %d" % (len(text), len(expect_text)))
    for line, want_part in zip(text, expect_text):
        if want_part not in line:
            failures.append("text line %r lacks %r" % (line, want_part))

    not_pcap = os.path.join(work, "not.pcap")
    with open(not_pcap, "wb") as f:
        f.write(b"\x0a\x0d\x0d\x0a" + b"\x00" * 40)  # a pcapng header
    r = subprocess.run([xroce, "wire", "decode", not_pcap], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    if r.returncode == 0 or b"not a pcap file" not in r.stderr:
        failures.append("pcapng input: rc %d, stderr %r" % (r.returncode, r.stderr))
    r = subprocess.run([xroce, "wire", "decode", os.path.join(work, "missing.pcap")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode == 0:
        failures.append("a missing file did not fail")

    for f in failures:
        print("FAIL:", f)
    print("%d failure(s)" % len(failures) if failures else "xroce wire decode: all cases ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
