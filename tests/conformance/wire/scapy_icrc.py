"""Conformance: scapy's RoCE layer (scapy.contrib.roce) recomputes the ICRC of every IPv4 frame
of the golden capture and agrees with xroce; it also reproduces the public vectors V1-V3 of
docs/protocol.md section 1.7. scapy 2.5 (Debian 12) computes the ICRC for IPv4 only, so IPv6 frames
and V3 are checked with scapy-built headers masked per the IBA rule and zlib's CRC-32.

Usage: /usr/bin/python3 scapy_icrc.py XROCE_BINARY WORK_DIR
"""

import logging
import os
import struct
import subprocess
import sys
import zlib

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)

from scapy.all import Ether, IP, IPv6, UDP, Raw, rdpcap, raw  # noqa: E402
from scapy.contrib.roce import BTH  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def wire_icrc(frame_bytes):
    """The ICRC as scapy and Wireshark display it: the last 4 bytes read big-endian."""
    return struct.unpack("!I", frame_bytes[-4:])[0]


def scapy_icrc(frame_bytes):
    """Lets scapy recompute the ICRC: delete the field and rebuild, as scapy's own tests do."""
    pkt = Ether(frame_bytes)
    del pkt[BTH].icrc
    return Ether(raw(pkt))[BTH].icrc


def ipv6_icrc(frame_bytes):
    """ICRC of an IPv6 RoCEv2 frame from scapy-dissected headers, masked per docs/protocol.md 1.7."""
    pkt = Ether(frame_bytes)
    ip = pkt[IPv6]
    udp_len = ip[UDP].len
    datagram = raw(ip)[: 40 + udp_len - 4]
    masked = bytearray(datagram)
    masked[0:4] = struct.pack("!I", 0x6FFFFFFF)  # version 6, TC and flow label all ones
    masked[7] = 0xFF  # hop limit
    masked[40 + 6 : 40 + 8] = b"\xff\xff"  # UDP checksum
    masked[48 + 4] = 0xFF  # BTH FECN/BECN/resv6a
    crc = zlib.crc32(b"\xff" * 8 + bytes(masked)) & 0xFFFFFFFF
    return struct.unpack("!I", struct.pack("<I", crc))[0]


def check_vectors():
    v1 = bytes.fromhex(
        "e41d2dab2bc27cfe90643b32080045c2003c718c400040119161"
        "0a0011010a001201000012b700280000" "8100ffff40000118" "00000000"
        "00000000000000000000000000000000" "82fd002a"
    )
    check(scapy_icrc(v1) == 0x82FD002A, "V1 ConnectX CNP: scapy ICRC %#x" % scapy_icrc(v1))

    payload = b"F0\x81\x8b\xe2\x895\xd9\x0e\x9a\x95PT\x01\xbe\x88^P\x00\x00"
    v2 = (
        Ether(dst="24:8a:07:a8:fa:22", src="24:8a:07:a8:fa:22")
        / IP(version=4, ihl=5, tos=0x1, id=1144, flags="DF", frag=0, ttl=64,
             src="192.168.0.7", dst="192.168.0.7", len=64)
        / UDP(sport=49152, dport=4791, len=44)
        / BTH(opcode="UC_SEND_ONLY", migreq=1, padcount=2, pkey=0xFFFF, dqpn=211, psn=13571856)
        / Raw(payload)
    )
    got = Ether(raw(v2))[BTH].icrc
    check(got == 0x78F353F3, "V2 UC SEND_ONLY over IPv4: scapy ICRC %#x" % got)

    v3 = (
        Ether()
        / IPv6(src="2022::1023", dst="2023::1024", tc=226, fl=0x1FACE, hlim=255, plen=44)
        / UDP(sport=49152, dport=4791, len=44, chksum=0)
        / BTH(opcode="UC_SEND_ONLY", migreq=1, padcount=2, pkey=0xFFFF, dqpn=211, psn=13571856,
              icrc=0)
        / Raw(payload)
    )
    got = ipv6_icrc(raw(v3))
    check(got == 0x3E5B743B, "V3 UC SEND_ONLY over IPv6: ICRC %#x" % got)


def check_golden(xroce, work):
    path = os.path.join(work, "golden.pcap")
    subprocess.run([xroce, "wire", "samples", "-w", path], check=True, stdout=subprocess.DEVNULL)
    frames = rdpcap(path)
    v4 = v6 = 0
    for i, pkt in enumerate(frames, start=1):
        b = raw(pkt)
        check(BTH in Ether(b), "frame %d: scapy does not see a BTH" % i)
        if IP in pkt:
            v4 += 1
            got = scapy_icrc(b)
            check(got == wire_icrc(b),
                  "frame %d: scapy ICRC %#010x, xroce wrote %#010x" % (i, got, wire_icrc(b)))
        elif IPv6 in pkt:
            v6 += 1
            got = ipv6_icrc(b)
            check(got == wire_icrc(b),
                  "frame %d (IPv6): ICRC %#010x, xroce wrote %#010x" % (i, got, wire_icrc(b)))
    check(v4 > 100 and v6 > 50, "golden capture has %d IPv4 and %d IPv6 frames" % (v4, v6))
    print("checked %d IPv4 frames with scapy.contrib.roce and %d IPv6 frames" % (v4, v6))


def main():
    xroce, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    check_vectors()
    check_golden(xroce, work)
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    print("scapy agrees with every ICRC")
    return 0


if __name__ == "__main__":
    sys.exit(main())
