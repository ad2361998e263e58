"""Runs a libFuzzer target for a bounded time, seeded from the golden capture.

Writes `xroce wire samples` to WORK/golden.pcap, splits its frames into WORK/seeds (one file
per frame), and runs FUZZER on WORK/corpus + WORK/seeds for SECONDS. With XROCE "none" there
are no seeds (targets whose input is not a frame). Exits with the fuzzer's status: non-zero on
any crash, sanitizer report or property violation.

Usage: /usr/bin/python3 run_fuzz.py XROCE|none FUZZER WORK SECONDS
"""

import os
import shutil
import struct
import subprocess
import sys


def pcap_frames(path):
    with open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack("<I", data[:4])[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    off = 24
    while off + 16 <= len(data):
        incl = struct.unpack(endian + "I", data[off + 8 : off + 12])[0]
        yield data[off + 16 : off + 16 + incl]
        off += 16 + incl


def main():
    xroce, fuzzer, work, seconds = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    seeds = os.path.join(work, "seeds")
    corpus = os.path.join(work, "corpus")
    shutil.rmtree(seeds, ignore_errors=True)
    os.makedirs(seeds)
    os.makedirs(corpus, exist_ok=True)
    if xroce == "none":
        print("run_fuzz: no seeds, fuzzing for %s s" % seconds, flush=True)
        return run(fuzzer, work, seconds, [corpus])
    golden = os.path.join(work, "golden.pcap")
    subprocess.run([xroce, "wire", "samples", "-w", golden], check=True)
    count = 0
    for i, frame in enumerate(pcap_frames(golden)):
        with open(os.path.join(seeds, "golden-%03d" % i), "wb") as f:
            f.write(frame)
        count += 1
    if count < 100:
        print("run_fuzz: only %d seed frames in %s" % (count, golden))
        return 1
    print("run_fuzz: %d seeds, fuzzing for %s s" % (count, seconds), flush=True)
    return run(fuzzer, work, seconds, [corpus, seeds])


def run(fuzzer, work, seconds, corpora):
    cmd = [fuzzer, "-max_total_time=" + seconds, "-timeout=10", "-rss_limit_mb=2048",
           "-print_final_stats=1", "-artifact_prefix=" + work + "/"] + corpora
    return subprocess.run(cmd).returncode


if __name__ == "__main__":
    sys.exit(main())
