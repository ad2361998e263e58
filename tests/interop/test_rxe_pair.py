#!/usr/bin/python3
"""interop (b): two rxe VMs on one bridge run ibv_rc/uc/ud_pingpong (with buffer checks),
ib_write_bw, ib_read_bw and ib_atomic_bw against each other while the host captures VM a's
tap; then every RoCEv2 frame of the capture must decode with `xroce wire decode --json` with
its ICRC ok, and every opcode those programs use must appear.

This proves the project's decoder and ICRC against live kernel rxe traffic (RC, UC and UD
sends, RDMA WRITE and READ, atomics, ACKs, 1024- and 4096-byte MTUs, and whatever
retransmissions the emulated machines provoke).

Usage: test_rxe_pair.py [path/to/xroce]   (default: build/bin/xroce of this checkout)
"""

import re
import sys
import time
from pathlib import Path

from check_capture import check_capture
from vm import HERE, Lab, log, main_wrapper

# ibv_*_pingpong runs: (program, message size, iterations). RC at one single-packet, one
# 4-packet and one 64-packet size at the 1024-byte active MTU of rxe on a 1500-byte netdev;
# UC with a multi-packet message; UD with a single packet (UD messages fit one MTU).
PINGPONG_RUNS = [("ibv_rc_pingpong", 1, 200), ("ibv_rc_pingpong", 4096, 200),
                 ("ibv_rc_pingpong", 65536, 40), ("ibv_uc_pingpong", 4096, 100),
                 ("ibv_ud_pingpong", 512, 200), ("ibv_srq_pingpong", 4096, 100)]
# RC over IPv6: the pingpong with the GID of the guests' global IPv6 addresses.
IPV6_PINGPONG = ("ibv_rc_pingpong", 4096, 100)
# perftest runs: (program, message size, iterations, extra flags).
PERFTEST_RUNS = [("ib_write_bw", 65536, 200, ""), ("ib_read_bw", 65536, 100, ""),
                 ("ib_send_bw", 65536, 100, ""), ("ib_send_lat", 64, 200, ""),
                 ("ib_atomic_bw", 8, 200, "-A FETCH_AND_ADD"),
                 ("ib_atomic_bw", 8, 200, "-A CMP_AND_SWAP")]
# Then the netdevs go to MTU 9000, rxe's active MTU to 4096, and a 1 MiB message crosses the
# link as 256 full 4096-byte packets.
JUMBO_NETDEV_MTU = 9000
JUMBO_PINGPONG = ("ibv_rc_pingpong", 1 << 20, 8)
FIRST_TCP_PORT = 18515

# IBTA opcode values the runs above must put on the wire.
NEEDED_OPCODES = {
    0x00: "SEND_FIRST", 0x01: "SEND_MIDDLE", 0x02: "SEND_LAST", 0x04: "SEND_ONLY",
    0x06: "RDMA_WRITE_FIRST", 0x07: "RDMA_WRITE_MIDDLE", 0x08: "RDMA_WRITE_LAST",
    0x0C: "RDMA_READ_REQUEST", 0x0D: "RDMA_READ_RESPONSE_FIRST",
    0x0E: "RDMA_READ_RESPONSE_MIDDLE", 0x0F: "RDMA_READ_RESPONSE_LAST", 0x11: "ACKNOWLEDGE",
    0x12: "ATOMIC_ACKNOWLEDGE", 0x13: "COMPARE_SWAP", 0x14: "FETCH_ADD",
    0x20: "UC_SEND_FIRST", 0x21: "UC_SEND_MIDDLE", 0x22: "UC_SEND_LAST",
    0x64: "UD_SEND_ONLY",
}


def run_pair(server, client, server_cmd: str, client_cmd: str, port: int, timeout_s: float):
    """Starts the server, waits until it listens, runs the client; returns both outputs."""
    srv = server.start_command(f"{server_cmd} -p {port}")
    server.wait_listening(port)
    cli = client.run(f"{client_cmd} -p {port} {server.ip4}", timeout_s)
    srv_result = srv.wait(timeout_s)
    for side, vm, r in (("server", server, srv_result), ("client", client, cli)):
        if not r.ok:
            raise AssertionError(f"{side} on {vm.name} exited {r.rc}:\n{r.output}")
    return srv_result.output, cli.output


def pingpong(a, b, program: str, size: int, iters: int, port: int, path_mtu: int = 1024,
             gid_index: int = 1):
    cmd = f"{program} -d rxe0 -g {gid_index} -c -s {size} -n {iters}"
    if program != "ibv_ud_pingpong":  # UD has no path MTU
        cmd += f" -m {path_mtu}"
    started = time.monotonic()
    outputs = run_pair(a, b, cmd, cmd, port, timeout_s=120)
    # The pingpong programs count both directions: size * iters * 2 bytes (srq_pingpong
    # prints it once per run like the others).
    for out in outputs:
        if f"{size * iters * 2} bytes in" not in out or f"{iters} iters in" not in out:
            raise AssertionError(f"`{cmd}` did not report {iters} iters:\n{out}")
    log(f"{cmd}: ok in {time.monotonic() - started:.1f} s")


def perftest(a, b, program: str, size: int, iters: int, extra: str, port: int) -> None:
    units = "" if program.endswith("_lat") else "--report_gbits"
    cmd = f"{program} -d rxe0 -x 1 -s {size} -n {iters} -F {units} {extra}".strip()
    started = time.monotonic()
    _, out = run_pair(a, b, cmd, cmd, port, timeout_s=180)
    m = re.search(rf"^\s*{size}\s+{iters}\s+([\d.]+)\s+([\d.]+)", out, re.MULTILINE)
    if not m:
        raise AssertionError(f"`{cmd}` printed no result line for {size} B x {iters}:\n{out}")
    # Emulated machines: the figures are the emulator's, not a performance baseline.
    log(f"{cmd}: ok in {time.monotonic() - started:.1f} s; result line: {' '.join(m.group(0).split())}")


def test(xroce: Path) -> None:
    if not xroce.is_file():
        raise AssertionError(f"{xroce} does not exist: build the xroce target first")
    started = time.monotonic()
    with Lab("pair") as lab:
        a, b = lab.add_vm("a"), lab.add_vm("b")
        lab.boot_all()
        for vm in (a, b):
            vm.add_rxe()
        cap = lab.capture(a.tap, "pair")
        port = FIRST_TCP_PORT
        for program, size, iters in PINGPONG_RUNS:
            pingpong(a, b, program, size, iters, port)
            port += 1
        gid6 = a.gid_index(a.ip6)
        if b.gid_index(b.ip6) != gid6:
            raise AssertionError("the VMs list their IPv6 GIDs at different indexes")
        pingpong(a, b, *IPV6_PINGPONG, port, gid_index=gid6)
        port += 1
        for program, size, iters, extra in PERFTEST_RUNS:
            perftest(a, b, program, size, iters, extra, port)
            port += 1

        lab.set_mtu(JUMBO_NETDEV_MTU)
        for vm in (a, b):
            vm.wait_in_guest("ibv_devinfo -d rxe0 | grep -q 'active_mtu:.*4096'", 30,
                             "rxe0 active_mtu 4096 after the netdev MTU change")
        pingpong(a, b, *JUMBO_PINGPONG, port, path_mtu=4096)
        log(f"tcpdump: {' / '.join(cap.stop().splitlines()[-3:])}")
        if cap.dropped_by_kernel():
            raise AssertionError(f"tcpdump dropped frames, the capture is incomplete: {cap.summary}")
        summary = check_capture(xroce, cap.path, NEEDED_OPCODES, min_payload=4096,
                                ip_versions={4, 6})
        log(f"capture: {summary['frames']} frames, {summary['roce']} RoCEv2, all decoded with "
            f"ICRC ok; {summary['retransmitted']} retransmitted requests; IP versions "
            f"{summary['ip_versions']}; {summary['opcodes']}")
    log(f"pair test took {time.monotonic() - started:.1f} s")


def default_xroce() -> Path:
    return HERE.parent.parent / "build" / "bin" / "xroce"


if __name__ == "__main__":
    xroce_path = Path(sys.argv[1]) if len(sys.argv) > 1 else default_xroce()
    sys.exit(main_wrapper(lambda: test(xroce_path)))
