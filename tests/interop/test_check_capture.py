#!/usr/bin/python3
"""check_capture.py itself: it passes the repo's rxe captures (tests/data/captures),
and it fails a copy in which one payload byte of one RoCEv2 frame is flipped (the ICRC no longer
matches) — so a passing interop capture check means something.

Usage: test_check_capture.py path/to/xroce captures-dir
"""

import struct
import sys
import tempfile
from pathlib import Path

from check_capture import ROCE_V2_PORT, CaptureError, check_capture


def first_roce_payload_offset(data: bytes) -> int:
    """File offset of the last byte before the ICRC of the first IPv4 RoCEv2 frame."""
    offset = 24
    while offset + 16 <= len(data):
        incl_len = struct.unpack_from("<I", data, offset + 8)[0]
        frame_at = offset + 16
        frame = data[frame_at:frame_at + incl_len]
        if struct.unpack_from(">H", frame, 12)[0] == 0x0800 and frame[23] == 17:
            l4 = 14 + (frame[14] & 0x0F) * 4
            if struct.unpack_from(">H", frame, l4 + 2)[0] == ROCE_V2_PORT:
                udp_len = struct.unpack_from(">H", frame, l4 + 4)[0]
                return frame_at + l4 + udp_len - 5  # the byte just before the 4-byte ICRC
        offset = frame_at + incl_len
    raise AssertionError("no IPv4 RoCEv2 frame in the capture")


def main() -> int:
    xroce, captures = Path(sys.argv[1]), Path(sys.argv[2])
    pcaps = sorted(captures.glob("rxe_*.pcap"))
    if not pcaps:
        print(f"FAILED: no rxe_*.pcap in {captures} (the repo holds them in tests/data/captures)")
        return 1
    for pcap in pcaps:
        summary = check_capture(xroce, pcap)
        print(f"{pcap.name}: {summary}")
    with tempfile.TemporaryDirectory(prefix="xri-check-") as tmp:
        corrupted = Path(tmp) / "corrupted.pcap"
        data = bytearray(pcaps[0].read_bytes())
        data[first_roce_payload_offset(data)] ^= 0x01
        corrupted.write_bytes(data)
        try:
            check_capture(xroce, corrupted)
        except CaptureError as e:
            print(f"corrupted copy rejected as it must be: {str(e)[:160]}")
        else:
            print("FAILED: a capture with a flipped payload byte passed the check")
            return 1
    print("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
