#!/usr/bin/python3
"""xroce inside a VM, on a real driver: the Debian package goes into the interop
image (build-image --with-deb), a guest booted without the kernel's RDMA modules runs the
package's xroced on its virtio-net NIC, with the XDP program attached in the driver's native
mode (not generic/SKB mode, and not veth), and verbs programs run against

  - rxe in a second VM on the same bridge, and
  - xroce on the host (a namespace whose veth is on the bridge),

each side once server and once client: ibv_rc_pingpong -c (buffers checked), xri_verbs
write + read-back with checksums compared (the data check perftest lacks), ib_write_bw,
ib_read_bw, ib_send_bw, ib_atomic_bw and ib_send_lat; the xroce VM's link is captured during
the rxe runs and every RoCEv2 frame must decode with its ICRC ok. Last, `xroce validate` from
the xroce VM against the rxe VM (which runs `xroce validate --serve` from the same package)
must pass.

Usage: test_xroce_vm.py DEB_DIR XROCE XRI_VERBS
"""

import json
import re
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from check_capture import check_capture
from peers import RxeGuest, XroceGuest, XroceHost
from test_xroce_rxe import Suite
from vm import Lab, log, main_wrapper

XROCE_VM_MIB = 384  # the initramfs with xroce's libraries, plus xroced's UMEM
RC_PINGPONG = [(4096, 20), (65536, 5)]  # (size, iterations) at path MTU 1024
PERFTEST = [("ib_write_bw", 65536, 50, ""), ("ib_read_bw", 65536, 20, ""),
            ("ib_send_bw", 65536, 20, ""), ("ib_atomic_bw", 8, 50, "-A FETCH_AND_ADD"),
            ("ib_send_lat", 64, 50, "")]
DATA_BYTES = 1 << 18
VALIDATE_PORT = 18610
VALIDATE_QP_TIMEOUT = 18  # 4.096 us << 18 = 1.07 s


def data_check(suite: Suite, server, client) -> None:
    """xri_verbs: the client RDMA WRITEs a pattern and READs it back; both checksums match."""
    s, c = suite.xri_pair(server, client, f"--size {DATA_BYTES}",
                          f"--test write --size {DATA_BYTES}")
    wcs = suite.completions(c, "client")
    sums = (re.search(r"^client_sum (\w+)", c, re.M), re.search(r"^server_sum (\w+)", s, re.M))
    if wcs != {1: "success", 2: "success"} or "read_back equal" not in c:
        raise AssertionError(f"write + read-back {client.name} -> {server.name}: {wcs}\n"
                             f"client:\n{c}\nserver:\n{s}")
    if not all(sums) or sums[0].group(1) != sums[1].group(1):
        raise AssertionError(f"{server.name}'s buffer differs from what {client.name} wrote\n"
                             f"client:\n{c}\nserver:\n{s}")
    log(f"xri_verbs write+read {DATA_BYTES} B: {client.name} -> {server.name}: data equal "
        f"(sum {sums[0].group(1)})")


def matrix(suite: Suite) -> None:
    for server, client in suite.directions:
        for size, iters in RC_PINGPONG:
            suite.pingpong(server, client, "ibv_rc_pingpong", size, iters, "-m 1024")
        data_check(suite, server, client)
        for program, size, iters, extra in PERFTEST:
            suite.perftest(server, client, program, size, iters, extra)


def check_native_xdp(xg: XroceGuest, link: dict) -> None:
    """The XDP program is in the virtio-net driver (native mode), and AF_XDP runs on it."""
    shown = xg.vm.check("ip -d link show dev eth0")
    if "xdpgeneric" in shown or not re.search(r"\bxdp(drv)?\b", shown):
        raise AssertionError(f"eth0's XDP program is not in native (driver) mode:\n{shown}")
    if link.get("datapath") not in ("afxdp-copy", "afxdp-zerocopy"):
        raise AssertionError(f"the device's data path is {link.get('datapath')}, not AF_XDP "
                             f"on a native XDP program: {link}")
    driver = xg.vm.check("cat /sys/class/net/eth0/device/driver/module/drivers/*/uevent "
                         "2>/dev/null; readlink /sys/class/net/eth0/device/driver").strip()
    if "virtio_net" not in driver:
        raise AssertionError(f"eth0 is not a virtio-net NIC: {driver}")
    attached = " ".join(re.findall(r"prog/xdp id \d+|xdp\S*", shown))
    log(f"{xg.name}: {xg.device} on virtio-net eth0, data path {link['datapath']}, XDP in the "
        f"driver: {attached}")


def validate_against_rxe(xg: XroceGuest, rxe_vm) -> None:
    serve = rxe_vm.start_command(f"xroce validate --serve --serve-port {VALIDATE_PORT}")
    rxe_vm.wait_listening(VALIDATE_PORT)
    # Both VMs are emulated on a shared host: either can stall longer than perftest's default
    # ACK timeout (67 ms) times its 7 retries, so the perftest runs wait ~1 s per try.
    r = xg.vm.run(f"cd /tmp && xroce validate {rxe_vm.ip4} --serve-port {VALIDATE_PORT} --quick "
                  f"--qp-timeout {VALIDATE_QP_TIMEOUT} --json /tmp/validate.json "
                  f"--svg /tmp/validate.svg", 600)
    report = json.loads(xg.vm.check("cat /tmp/validate.json"))
    rxe_vm.run("kill $(pidof xroce) 2>/dev/null")
    serve.wait(30)
    failed = [c for c in report["checks"] if c["result"] != "pass"]
    if r.rc != 0 or not report["passed"] or failed:
        raise AssertionError(f"xroce validate against rxe exited {r.rc}: {failed}\n{r.output}")
    names = [c["name"] for c in report["checks"]]
    if names != ["peer", "gid", "port", "mtu", "path_mtu", "ecn", "data", "perftest"]:
        raise AssertionError(f"xroce validate ran {names}")
    log(f"xroce validate {rxe_vm.ip4} (rxe) from {xg.name}: passed; "
        f"{len(report['perftest'])} perftest runs")


def test(deb_dir: Path, xroce: Path, xri_verbs: Path) -> None:
    debs = sorted(deb_dir.glob("xroce_*.deb"))
    if len(debs) != 1:
        raise AssertionError(f"want exactly one xroce_*.deb in {deb_dir} (packaging/build-deb), "
                             f"found {debs}")
    started = time.monotonic()
    with Lab("xv", memory_mib=XROCE_VM_MIB, deb=debs[0]) as lab, ExitStack() as devices:
        vx = lab.add_vm("x", "xroce.rxe=0")
        vr = lab.add_vm("r")
        hp = lab.add_host_port("h")
        lab.boot_all()
        vr.add_rxe()
        xg = XroceGuest(vx)
        check_native_xdp(xg, xg.up())
        rxe = RxeGuest(vr)
        xh = devices.enter_context(XroceHost(xroce, hp.ns, hp.ifname, hp.ip4, "xrh0"))

        cap = lab.capture(vx.tap, "xroce-vm")
        matrix(Suite(lab, rxe, xg, xri_verbs, 4))
        cap.stop()
        if cap.dropped_by_kernel():
            raise AssertionError(f"tcpdump dropped frames: {cap.summary}")
        summary = check_capture(xroce, cap.path, {0x11: "ACKNOWLEDGE", 0x0C: "RDMA_READ_REQUEST"})
        log(f"xroce VM <-> rxe VM capture: {summary['roce']} RoCEv2 frames, all decoded with "
            f"ICRC ok; {summary['opcodes']}")
        matrix(Suite(lab, xh, xg, xri_verbs, 4))
        validate_against_rxe(xg, vr)
        errors = {k: v for k, v in xg.counters().items()
                  if k in ("rx_icrc_errors", "rx_malformed", "retry_exceeded_err", "send_err")
                  and v}
        if errors:
            raise AssertionError(f"{xg.name} counted errors: {errors}")
    log(f"xroce VM test took {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print(__doc__)
        sys.exit(2)
    sys.exit(main_wrapper(lambda: test(Path(sys.argv[1]), Path(sys.argv[2]),
                                       Path(sys.argv[3]))))
