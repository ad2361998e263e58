#!/usr/bin/python3
"""interop: xroce against the Linux kernel's Soft-RoCE, rxe in a VM.

One VM boots (rxe0 on its eth0, netdev MTU 9000 so that path MTU 4096 is possible); an xroce
device (`xroce link add`, AF_XDP port) runs in a host namespace whose eth0 is on the VM's
bridge. Phases, each with both sides once as server and once as client unless said otherwise:

  matrix   ibv_rc_pingpong -c at 1 B, 4 KiB, 64 KiB, 1 MiB with path MTU 1024 and 4096,
           ibv_ud_pingpong -c, ibv_srq_pingpong -c, ib_write_bw, ib_read_bw, ib_send_bw,
           ib_atomic_bw, ib_send_lat; the tap is captured meanwhile and every RoCEv2 frame
           must decode with `xroce wire decode` with its ICRC ok.
  errors   xri_verbs (this folder) provokes an rkey violation and RNR (retries exhausted, and
           recovery when receives arrive late) from each side against the other.
  gbn      through xroce-switch (a second xroce device behind it): one dropped WRITE or READ
           response packet in each direction; the data arrives intact and counters show the
           retransmission. Then xroce WRITEs 1 MiB to rxe and READs it back through random
           loss both ways, eight seeds: the READ's losses are repaired by sub-range READs
           that rxe answers (selective READ repair), and the data arrives intact.
  cnp      through xroce-switch marking rxe's ECT(0) WRITEs CE: no CNP from xroce by default;
           with np_enable=1 CNPs go to rxe, which ignores them (transfer completes, rxe works).
  windows  ibv_uc_pingpong -c (one packet and multi-packet messages); xri_verbs through a type 2
           memory window the server binds (WRITE + READ back), through one it invalidated and
           one it never bound (IBV_WC_REM_ACCESS_ERR, both QPs in ERR), a bind beyond its
           region (IBV_WC_MW_BIND_ERR, local); ATOMIC WRITE where both sides' devices offer it
           (the guest's kernel 6.1 rxe does not: logged and skipped); captured, ICRC ok.

Usage: test_xroce_rxe.py XROCE XRI_VERBS XROCE_SWITCH [--only PHASE ...] [--port afxdp|udp]
                         [--ipv6]
--ipv6 uses the IPv6 GIDs in the matrix and errors phases (gbn and cnp stay on IPv4); the UDP
port needs it against rxe (README: differences, 2).
"""

import argparse
import json
import re
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from check_capture import check_capture
from peers import RxeGuest, SwitchedPort, XroceHost, counters_or_why
from vm import Lab, log, main_wrapper

NETDEV_MTU = 9000  # rxe's active MTU is 4096 on a 9000-byte netdev, 1024 on 1500
FIRST_TCP_PORT = 18700
VM_XRI_VERBS = "/tmp/xri_verbs"
GBN_DROP_NTH = 5  # the 5th matching frame of a 256-packet transfer
# CE marking needs a queue: rate-limit the switch to about what rxe sends under emulation
# (~150-250 Mbit/s) so that its bursts queue, and mark every frame that finds more than 2 bytes
# queued. The default 1 MiB buffer holds rxe's whole window (128 PSNs), so nothing is dropped.
CNP_SWITCH_FLAGS = ("--rate-mbit", 100, "--ecn", "1,2,1.0")
CNP_WRITES = 200
# READ repair against rxe: loss of every RoCE frame both ways, and the switch's seeds.
READ_LOSS = "0.03"
READ_LOSS_SEEDS = tuple(range(1, 9))

# ibv_rc_pingpong -c: (message size, path MTU, iterations). Small -n: the VM is emulated.
RC_PINGPONG = [(1, 1024, 50), (4096, 1024, 50), (65536, 1024, 10), (1 << 20, 1024, 2),
               (1, 4096, 50), (4096, 4096, 50), (65536, 4096, 10), (1 << 20, 4096, 3)]
OTHER_PINGPONG = [("ibv_ud_pingpong", 1024, 50, ""), ("ibv_srq_pingpong", 4096, 20, "-q 4")]
# perftest: (program, size, iterations, extra flags)
PERFTEST = [("ib_write_bw", 65536, 100, ""), ("ib_read_bw", 65536, 50, ""),
            ("ib_send_bw", 65536, 50, ""), ("ib_atomic_bw", 8, 100, "-A FETCH_AND_ADD"),
            ("ib_atomic_bw", 8, 100, "-A CMP_AND_SWAP"), ("ib_send_lat", 64, 100, "")]
# ibv_uc_pingpong -c at path MTU 1024: (message size, iterations); 4 KiB messages take 4 packets.
UC_PINGPONG = [(1024, 20), (4096, 20)]
QPS_RTS, QPS_ERR = 3, 6  # enum ibv_qp_state
# What the windows phase must show on the wire: UC SENDs of one packet and of several; RC WRITE
# and READ through a window (2 KiB: xri_verbs --size 4096 gives the window half the region),
# WRITEs refused with a NAK (an ACKNOWLEDGE), and xroce's ATOMIC WRITE.
UC_OPCODES = {0x20: "UC_SEND_FIRST", 0x21: "UC_SEND_MIDDLE", 0x22: "UC_SEND_LAST",
              0x24: "UC_SEND_ONLY"}
WINDOW_XRI_SIZE = "--size 4096"
WINDOW_OPCODES = {0x06: "RDMA_WRITE_FIRST", 0x08: "RDMA_WRITE_LAST", 0x0A: "RDMA_WRITE_ONLY",
                  0x0C: "RDMA_READ_REQUEST", 0x11: "ACKNOWLEDGE", 0x1D: "ATOMIC_WRITE"}
NEEDED_OPCODES = {
    0x00: "SEND_FIRST", 0x01: "SEND_MIDDLE", 0x02: "SEND_LAST", 0x04: "SEND_ONLY",
    0x06: "RDMA_WRITE_FIRST", 0x07: "RDMA_WRITE_MIDDLE", 0x08: "RDMA_WRITE_LAST",
    0x0C: "RDMA_READ_REQUEST", 0x0D: "RDMA_READ_RESPONSE_FIRST",
    0x0E: "RDMA_READ_RESPONSE_MIDDLE", 0x0F: "RDMA_READ_RESPONSE_LAST", 0x11: "ACKNOWLEDGE",
    0x12: "ATOMIC_ACKNOWLEDGE", 0x13: "COMPARE_SWAP", 0x14: "FETCH_ADD", 0x64: "UD_SEND_ONLY",
}


class Suite:
    def __init__(self, lab: Lab, rxe: RxeGuest, xr: XroceHost, xri_verbs: Path, ip_version: int):
        self.lab = lab
        self.rxe = rxe
        self.xr = xr
        self.xri_verbs = xri_verbs
        self.port = FIRST_TCP_PORT
        self.guests_with_xri = set()  # the guests xri_verbs was copied into
        # The RoCE v2 GID of each side's IPv4 (or, with --ipv6, global IPv6) address; the TCP
        # side channel of the programs always uses IPv4.
        self.ip_version = ip_version
        address = (lambda peer: peer.ip6) if ip_version == 6 else (lambda peer: peer.ip4)
        self.gid = {rxe.name: rxe.gid_index(address(rxe)), xr.name: xr.gid_index(address(xr))}
        log(f"GID index of the IPv{ip_version} RoCE v2 GID: {self.gid}")
        self.directions = [(rxe, xr), (xr, rxe)]  # (server, client)

    def next_port(self) -> int:
        self.port += 1
        return self.port

    def pair(self, server, client, server_cmd: str, client_cmd: str, timeout_s: float = 180):
        port = self.next_port()
        srv = server.start_command(f"{server_cmd} -p {port}")
        server.wait_listening(port)
        cli = client.run(f"{client_cmd} -p {port} {server.ip4}", timeout_s)
        srv_result = srv.wait(timeout_s)
        for side, peer, r in (("server", server, srv_result), ("client", client, cli)):
            if not r.ok:
                raise AssertionError(f"{side} on {peer.name} exited {r.rc} "
                                     f"(`{server_cmd}` / `{client_cmd}`):\n{r.output}")
        return srv_result.output, cli.output

    def cmd(self, peer, program: str, flags: str) -> str:
        gid_flag = "-g" if program.startswith("ibv_") else "-x"
        return f"{program} -d {peer.device} {gid_flag} {self.gid[peer.name]} {flags}"

    def pingpong(self, server, client, program: str, size: int, iters: int, flags: str) -> None:
        started = time.monotonic()
        common = f"-c -s {size} -n {iters} {flags}".strip()
        outs = self.pair(server, client, self.cmd(server, program, common),
                         self.cmd(client, program, common))
        for out in outs:
            if f"{size * iters * 2} bytes in" not in out or f"{iters} iters in" not in out:
                raise AssertionError(f"{program} {common}: no report of {iters} iters:\n{out}")
        log(f"{program} {common}: server {server.name}, client {client.name}: ok in "
            f"{time.monotonic() - started:.1f} s")

    def perftest(self, server, client, program: str, size: int, iters: int, extra: str) -> None:
        started = time.monotonic()
        units = "" if program.endswith("_lat") else "--report_gbits"
        # -u 18: a 1.07 s Local ACK Timeout instead of perftest's 67 ms (14), which is shorter
        # than a loaded 2-vCPU host may leave the acknowledging side unscheduled. A spurious
        # timeout is not harmless against rxe 6.1: its req_retry, racing ACKs that already
        # covered the oldest SEND, replays that SEND with nothing left to send
        # (retry_first_write_send advances past its end) as a zero-length SEND_ONLY, so every
        # later packet's PSN shifts by one and the responder (rxe's own check_op_seq as well as
        # xroce's) must NAK a SEND_FIRST arriving mid-message as an invalid request.
        flags = f"-s {size} -n {iters} -F -u 18 {units} {extra}".strip()
        _, out = self.pair(server, client, self.cmd(server, program, flags),
                           self.cmd(client, program, flags))
        number = r"[\d.]+"
        # A latency program on a loaded host may fail to calibrate the CPU clock ("Correlation
        # coefficient r^2 ... < 0.9") and print inf: the iterations ran (both exited 0), only
        # perftest's timing is lost. Accept that, and only that, as a result line.
        if program.endswith("_lat") and "Correlation coefficient" in out:
            number = r"(?:[\d.]+|inf)"
        m = re.search(rf"^\s*{size}\s+{iters}\s+({number})\s+({number})", out, re.MULTILINE)
        if not m:
            raise AssertionError(f"{program} {flags}: no result line for {size} B x {iters}:\n"
                                 f"{out}")
        log(f"{program} {flags}: server {server.name}, client {client.name}: ok in "
            f"{time.monotonic() - started:.1f} s; {' '.join(m.group(0).split())}")

    # --- phases ---------------------------------------------------------------------------

    def matrix(self, xroce: Path) -> None:
        cap = self.lab.capture(self.lab.vms[0].tap, "matrix")
        for server, client in self.directions:
            for size, mtu, iters in RC_PINGPONG:
                self.pingpong(server, client, "ibv_rc_pingpong", size, iters, f"-m {mtu}")
            for program, size, iters, flags in OTHER_PINGPONG:
                self.pingpong(server, client, program, size, iters, flags)
            for program, size, iters, extra in PERFTEST:
                self.perftest(server, client, program, size, iters, extra)
        log(f"tcpdump: {' / '.join(cap.stop().splitlines()[-3:])}")
        if cap.dropped_by_kernel():
            raise AssertionError(f"tcpdump dropped frames: {cap.summary}")
        summary = check_capture(xroce, cap.path, NEEDED_OPCODES, min_payload=4096,
                                ip_versions={self.ip_version})
        log(f"matrix capture: {summary['roce']} RoCEv2 frames of {summary['frames']}, all "
            f"decoded with ICRC ok; {summary['retransmitted']} retransmitted requests; "
            f"{summary['opcodes']}")

    def install_xri_verbs(self, guest) -> None:
        guest.vm.copy_in(self.xri_verbs, VM_XRI_VERBS)
        self.guests_with_xri.add(guest.name)

    def xri(self, peer, args: str) -> str:
        in_guest = hasattr(peer, "vm")  # a peer inside a VM (rxe, or xroce in the guest)
        if in_guest and peer.name not in self.guests_with_xri:
            self.install_xri_verbs(peer)
        program = VM_XRI_VERBS if in_guest else str(self.xri_verbs)
        return f"{program} --gid-index {self.gid[peer.name]} {args}"

    def xri_pair(self, server, client, server_args: str, client_args: str, between=None):
        """xri_verbs server and client; `between(server_cmd)` runs while both are running."""
        port = self.next_port()
        srv = server.start_command(self.xri(server, f"--server --port {port} {server_args}"))
        server.wait_listening(port)
        cli = client.start_command(self.xri(client, f"--client {server.ip4} --port {port} "
                                                    f"{client_args}"))
        if between:
            between()
        c = cli.wait(120)
        s = srv.wait(60)
        for side, peer, r in (("server", server, s), ("client", client, c)):
            if not r.ok:
                raise AssertionError(f"xri_verbs {side} on {peer.name} exited {r.rc}:\n"
                                     f"{r.output}")
        return s.output, c.output

    @staticmethod
    def completions(out: str, side: str) -> dict:
        return {int(m.group(1)): m.group(2) for m in
                re.finditer(rf"^wc {side} (\d+) (.+?) (-?\d+) (\d+)$", out, re.MULTILINE)}

    def rkey_violation(self, server, client) -> None:
        before = server.counters()
        s, c = self.xri_pair(server, client, "--recvs 1", "--test rkey")
        wcs = self.completions(c, "client")
        expected = {1: "remote access error", 2: "Work Request Flushed Error"}
        if wcs != expected:
            raise AssertionError(f"rkey violation, requester {client.name}: completions {wcs}, "
                                 f"expected {expected}\nclient:\n{c}\nserver:\n{s}")
        srv_wcs = self.completions(s, "server")
        state = re.search(r"^qp_state server (\d+)", s, re.MULTILINE)
        log(f"rkey violation: requester {client.name} {wcs}; responder {server.name} "
            f"completions {srv_wcs}, QP state {state.group(1) if state else '?'}, "
            f"async {re.findall(r'^async server (.+)$', s, re.MULTILINE)}; counters "
            f"{diff(before, server.counters())}")

    def rnr(self, server, client, recover: bool) -> None:
        before_srv, before_cli = server.counters(), client.counters()
        wait_file = f"/tmp/xri-rnr-go-{self.port}"
        if recover:
            def post_late():
                counter = "send_rnr_err"
                deadline = time.monotonic() + 60
                while server.counters().get(counter, 0) <= before_srv.get(counter, 0):
                    if time.monotonic() > deadline:
                        raise AssertionError(f"{server.name} sent no RNR NAK within 60 s")
                    time.sleep(0.1)  # polling a counter with a deadline
                server.check(f"touch {wait_file}")
            s, c = self.xri_pair(server, client,
                                 f"--recvs 1 --wait-file {wait_file} --late-recvs 2",
                                 "--test rnr --sends 3 --rnr-retry 7", between=post_late)
            server.run(f"rm -f {wait_file}")
            expected = {1: "success", 2: "success", 3: "success"}
        else:
            s, c = self.xri_pair(server, client, "--recvs 1",
                                 "--test rnr --sends 3 --rnr-retry 1")
            expected = {1: "success", 2: "RNR retry counter exceeded",
                        3: "Work Request Flushed Error"}
        wcs = self.completions(c, "client")
        if wcs != expected:
            raise AssertionError(f"RNR ({'recover' if recover else 'exceed'}), requester "
                                 f"{client.name}: completions {wcs}, expected {expected}\n"
                                 f"client:\n{c}\nserver:\n{s}")
        srv_wcs = self.completions(s, "server")
        want_recvs = 3 if recover else 1
        got = sum(1 for status in srv_wcs.values() if status == "success")
        if got != want_recvs:
            raise AssertionError(f"RNR: responder {server.name} received {got} messages, "
                                 f"expected {want_recvs}: {srv_wcs}")
        log(f"RNR {'recovery' if recover else 'retries exhausted'}: requester {client.name} "
            f"{wcs}; responder {server.name} {srv_wcs}; responder counters "
            f"{diff(before_srv, server.counters())}, requester counters "
            f"{diff(before_cli, client.counters())}")

    def errors(self, xroce: Path) -> None:
        cap = self.lab.capture(self.lab.vms[0].tap, "errors")
        for server, client in ((self.rxe, self.xr), (self.xr, self.rxe)):
            self.rkey_violation(server, client)
            self.rnr(server, client, recover=False)
            self.rnr(server, client, recover=True)
        cap.stop()
        # The NAKs (remote access error, RNR) decode with a good ICRC too.
        summary = check_capture(xroce, cap.path, {0x11: "ACKNOWLEDGE", 0x04: "SEND_ONLY"})
        log(f"errors capture: {summary['roce']} RoCEv2 frames, all decoded with ICRC ok; "
            f"{summary['opcodes']}")


    # --- UC, memory windows, ATOMIC WRITE -------------------------------------------------

    def window_write(self, server, client) -> None:
        """The server binds a type 2 window over half its region; the client WRITEs through it
        and READs back: the window holds what was written."""
        s, c = self.xri_pair(server, client, f"--test mw {WINDOW_XRI_SIZE}",
                             f"--test mw {WINDOW_XRI_SIZE}")
        wcs = self.completions(c, "client")
        sums = (re.search(r"^client_sum (\w+)", c, re.M), re.search(r"^server_sum (\w+)", s, re.M))
        if wcs != {1: "success", 2: "success"} or "read_back equal" not in c:
            raise AssertionError(f"window WRITE, requester {client.name}: completions {wcs}\n"
                                 f"client:\n{c}\nserver:\n{s}")
        if not all(sums) or sums[0].group(1) != sums[1].group(1):
            raise AssertionError(f"window WRITE: {server.name}'s window differs from what "
                                 f"{client.name} wrote\nclient:\n{c}\nserver:\n{s}")
        binds = self.completions(s, "server")
        log(f"window bound by {server.name} ({binds.get(1)}), written and read by {client.name}: "
            f"data equal")

    def window_refused(self, server, client, test: str) -> None:
        """A WRITE through an invalidated or never bound window: a remote access error NAK,
        both QPs in ERR (rxe_resp.c check_rkey / rxe_lookup_mw; C10-72, o10-37.2.26)."""
        before = server.counters()
        s, c = self.xri_pair(server, client, f"--test {test} {WINDOW_XRI_SIZE}",
                             f"--test {test} {WINDOW_XRI_SIZE}")
        wcs = self.completions(c, "client")
        expected = {1: "remote access error", 2: "Work Request Flushed Error"}
        states = {side: re.search(rf"^qp_state {side} (\d+)", out, re.M)
                  for side, out in (("client", c), ("server", s))}
        got_states = {k: int(m.group(1)) if m else None for k, m in states.items()}
        if wcs != expected or got_states != {"client": QPS_ERR, "server": QPS_ERR}:
            raise AssertionError(f"{test}, requester {client.name}: completions {wcs} (expected "
                                 f"{expected}), QP states {got_states}\nclient:\n{c}\n"
                                 f"server:\n{s}")
        log(f"{test}: requester {client.name} {wcs}; both QPs in ERR; responder {server.name} "
            f"counters {diff(before, server.counters())}")

    def bind_beyond(self, server, client) -> None:
        """A bind reaching past its region fails locally (C10-75; rxe_mw.c rxe_check_bind_mw):
        IBV_WC_MW_BIND_ERR, the requester in ERR, the peer untouched."""
        s, c = self.xri_pair(server, client, f"--test bind_beyond {WINDOW_XRI_SIZE}",
                             f"--test bind_beyond {WINDOW_XRI_SIZE}")
        wcs = self.completions(c, "client")
        expected = {1: "memory management operation error", 2: "Work Request Flushed Error"}
        peer_state = re.search(r"^qp_state server (\d+)", s, re.M)
        if wcs != expected or not peer_state or int(peer_state.group(1)) != QPS_RTS:
            raise AssertionError(f"bind beyond, {client.name}: completions {wcs} (expected "
                                 f"{expected})\nclient:\n{c}\nserver:\n{s}")
        log(f"bind beyond the region on {client.name}: {wcs}; {server.name}'s QP still RTS")

    def atomic_write(self, server, client) -> None:
        """ATOMIC WRITE where both devices offer it (IB_UVERBS_DEVICE_ATOMIC_WRITE). Where only
        the requester does, it sends one anyway: a responder without the opcode must not
        complete it (rxe before Linux 6.2 drops it unanswered: README, differences)."""
        s, c = self.xri_pair(server, client, f"--test atomic_write {WINDOW_XRI_SIZE}",
                             f"--test atomic_write {WINDOW_XRI_SIZE}")
        caps = {peer.name: re.search(r"^caps atomic_write (\d)", out, re.M)
                for peer, out in ((server, s), (client, c))}
        offered = {name: bool(m and m.group(1) == "1") for name, m in caps.items()}
        wcs = self.completions(c, "client")
        if not offered[client.name]:
            log(f"ATOMIC WRITE {client.name} -> {server.name}: not sent, offered {offered}")
            return
        if not offered[server.name]:
            if wcs.get(1) in (None, "success"):
                raise AssertionError(f"ATOMIC WRITE to {server.name}, which lacks it: {wcs}\n{c}")
            log(f"ATOMIC WRITE {client.name} -> {server.name} (offered {offered}): {wcs}")
            return
        if wcs != {1: "success", 2: "success"} or "read_back equal" not in c:
            raise AssertionError(f"ATOMIC WRITE {client.name} -> {server.name}: {wcs}\n{c}\n{s}")
        log(f"ATOMIC WRITE {client.name} -> {server.name}: read back equal")

    def windows(self, xroce: Path) -> None:
        cap = self.lab.capture(self.lab.vms[0].tap, "windows-uc")
        for server, client in self.directions:
            for size, iters in UC_PINGPONG:
                self.pingpong(server, client, "ibv_uc_pingpong", size, iters, "-m 1024")
        cap.stop()
        summary = check_capture(xroce, cap.path, UC_OPCODES)
        log(f"UC capture: {summary['roce']} RoCEv2 frames, all decoded with ICRC ok; "
            f"{summary['opcodes']}")
        # A capture small enough to keep (tests/data/captures/rxe_xroce_windows.pcap).
        cap = self.lab.capture(self.lab.vms[0].tap, "windows-mw")
        for server, client in self.directions:
            self.window_write(server, client)
            self.window_refused(server, client, "mw_invalidated")
            self.window_refused(server, client, "mw_unbound")
            self.bind_beyond(server, client)
            self.atomic_write(server, client)
        cap.stop()
        summary = check_capture(xroce, cap.path, WINDOW_OPCODES)
        # Each refused window WRITE was answered with a remote access error NAK, both ways.
        naks = remote_access_naks(xroce, cap.path)
        senders = {self.rxe.ip4, self.xr.ip4, self.rxe.ip6, self.xr.ip6}
        if len(naks) < 4 or len(set(naks) & senders) < 2:
            raise AssertionError(f"windows capture: remote access error NAKs (AETH 0x62) from "
                                 f"{naks}; expected 2 from each side")
        log(f"windows capture {cap.path}: {summary['roce']} RoCEv2 frames, all decoded with "
            f"ICRC ok; {summary['opcodes']}; remote access error NAKs from {naks}")

    # --- go-back-N through xroce-switch ------------------------------------------------

    def go_back_n(self, sw, xr2) -> None:
        """One RoCE frame dropped by xroce-switch (--drop-nth, once) in a 256 KiB RDMA WRITE or
        in the READ that reads it back: the transfer completes with the right data and the
        requester's counters show the retransmission."""
        self.gid[xr2.name] = xr2.gid_index(xr2.ip4)
        rxe = self.rxe
        cases = [  # (requester, responder, opcode dropped, switch port it arrives on)
            (xr2, rxe, 0x07, "swdown", "RDMA_WRITE_MIDDLE from xroce: rxe NAKs, xroce goes back"),
            (xr2, rxe, 0x0E, "swup", "RDMA_READ_RESPONSE_MIDDLE from rxe: xroce re-reads"),
            (rxe, xr2, 0x07, "swup", "RDMA_WRITE_MIDDLE from rxe: xroce NAKs, rxe goes back"),
            (rxe, xr2, 0x0E, "swdown", "RDMA_READ_RESPONSE_MIDDLE from xroce: rxe re-reads"),
        ]
        for requester, responder, opcode, port, what in cases:
            sw.start("--drop-nth", GBN_DROP_NTH, "--match-opcode", hex(opcode), "--from", port)
            before_req, before_resp = requester.counters(), responder.counters()
            size = 1 << 18
            s, c = self.xri_pair(responder, requester, f"--size {size}",
                                 f"--test write --size {size}")
            stats = sw.stop()
            dropped = stats[port]["dropped_impair"]
            req_diff = diff(before_req, requester.counters())
            resp_diff = diff(before_resp, responder.counters())
            wcs = self.completions(c, "client")
            sums = (re.search(r"^client_sum (\w+)", c, re.M), re.search(r"^server_sum (\w+)", s, re.M))
            if dropped != 1:
                raise AssertionError(f"{what}: the switch dropped {dropped} frames, not 1: {stats}")
            if wcs != {1: "success", 2: "success"} or "read_back equal" not in c:
                raise AssertionError(f"{what}: completions {wcs}\nclient:\n{c}\nserver:\n{s}")
            if not all(sums) or sums[0].group(1) != sums[1].group(1):
                raise AssertionError(f"{what}: the responder's buffer differs from what was "
                                     f"written\nclient:\n{c}\nserver:\n{s}")
            # rxe counts every retry it starts in completer_retry_err and NAKs it receives in
            # rcvd_seq_err; xroce counts only timeouts in completer_retry_err (README).
            evidence = (req_diff.get("completer_retry_err", 0) + req_diff.get("rcvd_seq_err", 0)
                        + resp_diff.get("duplicate_request", 0)
                        + resp_diff.get("out_of_seq_request", 0))
            if evidence < 1:
                raise AssertionError(f"{what}: no counter shows the retransmission: requester "
                                     f"{requester.name} {req_diff}, responder {responder.name} "
                                     f"{resp_diff}")
            # xroce sends the first packet of a NAK's go-back-N twice (engine/transport
            # requester.h, Requester::retry); rxe must take the copy as a duplicate (re-ACKed,
            # rxe_resp.c duplicate_request), and the data above stayed equal.
            if requester is xr2 and opcode == 0x07 and (
                    req_diff.get("resend_repeats", 0) < 1
                    or resp_diff.get("duplicate_request", 0) < 1):
                raise AssertionError(f"{what}: the first resent WRITE packet was not sent twice "
                                     f"or rxe saw no duplicate: requester {req_diff}, "
                                     f"responder {resp_diff}")
            log(f"go-back-N, {what}: data equal; requester {requester.name} {req_diff}; "
                f"responder {responder.name} {resp_diff}")
        self.read_repair_under_loss(sw, xr2)

    def read_repair_under_loss(self, sw, xr2) -> None:
        """xroce READs 1 MiB (256 PSNs at 4096 bytes) from rxe through random loss of every RoCE
        frame both ways: responses, replays and the duplicate READs that ask for them. rxe moves a
        READ's resource to the start of each duplicate it answers and drops a later one that
        starts before it (rxe_resp.c duplicate_request), so xroce must ask for one READ's lost
        ranges from its first missing PSN on (engine/transport/completer.cc queue_read_asks), or
        a range lost twice is never answered and the READ ends in retry-exceeded."""
        size = 1 << 20
        asked = 0
        for seed in READ_LOSS_SEEDS:
            sw.start("--loss", READ_LOSS, "--seed", seed)
            before = xr2.counters()
            s, c = self.xri_pair(self.rxe, xr2, f"--size {size} --mtu 4096",
                                 f"--test write --size {size} --mtu 4096")
            stats = sw.stop()
            got = diff(before, xr2.counters())
            dropped = sum(p.get("dropped_impair", 0) for p in stats.values())
            wcs = self.completions(c, "client")
            if wcs != {1: "success", 2: "success"} or "read_back equal" not in c:
                raise AssertionError(f"READ under {READ_LOSS} loss, seed {seed}: completions "
                                     f"{wcs}; xroce {got}; switch {stats}\nclient:\n{c}\n"
                                     f"server:\n{s}")
            asked += got.get("read_ranges_asked", 0)
            log(f"READ from rxe under {READ_LOSS} loss, seed {seed}: data equal; the switch "
                f"dropped {dropped}; xroce read_responses_ahead "
                f"{got.get('read_responses_ahead', 0)}, read_ranges_asked "
                f"{got.get('read_ranges_asked', 0)}, adaptive_retransmits "
                f"{got.get('adaptive_retransmits', 0)}")
        if asked < 1:
            raise AssertionError("READ under loss: xroce asked rxe for no range in any seed")


    # --- CNPs toward rxe --------------------------------------------------------------------

    def cnp(self, sw, xr2, xroce: Path) -> None:
        """rxe sends ECT(0) RDMA WRITEs (perftest --tclass 2) through xroce-switch, which marks
        them CE behind a rate limit; xroce is the notification point. With the default
        np_enable = 0 xroce sends no CNP; with np_enable = 1 it sends CNPs that rxe, which has
        no CNP support (docs/protocol.md section 6), must drop harmlessly: the transfer completes and
        rxe keeps working."""
        self.gid.setdefault(xr2.name, xr2.gid_index(xr2.ip4))
        rxe = self.rxe
        shown = xr2.xroce_cli("cc", "show", xr2.device, "--json")
        np_enable = json.loads(shown.stdout)["np_enable"] if shown.returncode == 0 else None
        if not np_enable or any(np_enable):
            raise AssertionError(f"np_enable is not 0 on every priority by default: {shown.stdout}")
        dmesg_before = rxe.check("dmesg").splitlines()
        for enabled in (False, True):
            if enabled:
                xr2.xroce_cli("cc", "set", xr2.device, "np_enable=1").check_returncode()
            sw.start(*CNP_SWITCH_FLAGS)
            cap = self.lab.capture(sw.bridge_end, f"cnp-{int(enabled)}")
            before_x, before_r = xr2.counters(), rxe.counters()
            self.perftest(xr2, rxe, "ib_write_bw", 65536, CNP_WRITES, "--tclass 2")
            self.pingpong(xr2, rxe, "ibv_rc_pingpong", 4096, 20, "-m 1024")  # rxe still works
            cap.stop()
            stats = sw.stop()
            dx, dr = diff(before_x, xr2.counters()), diff(before_r, rxe.counters())
            summary = check_capture(xroce, cap.path, {0x81: "CNP"} if enabled else {})
            cnps = summary["opcodes"].get("CNP", 0) + summary["opcodes"].get("Unknown(129)", 0)
            marked = sum(p.get("marked", 0) for p in stats.values())
            log(f"np_enable={int(enabled)}: switch marked {marked} frames CE; xroce {dx}; "
                f"rxe {dr}; capture {summary['opcodes']}")
            if marked == 0 or dx.get("np_ecn_marked_roce_packets", 0) == 0:
                raise AssertionError(f"no CE-marked frames reached xroce (switch {stats}, xroce "
                                     f"{dx}): the test proves nothing")
            sent = dx.get("np_cnp_sent", 0)
            if not enabled and (sent or cnps):
                raise AssertionError(f"np_enable=0 but xroce sent CNPs: counter {sent}, capture "
                                     f"{summary['opcodes']}")
            if enabled and (sent == 0 or cnps == 0):
                raise AssertionError(f"np_enable=1 and CE-marked traffic but no CNP: counter "
                                     f"{sent}, capture {summary['opcodes']}")
            if dr.get("retry_exceeded_err", 0) or dr.get("send_err", 0):
                raise AssertionError(f"rxe counted errors: {dr}")
        xr2.xroce_cli("cc", "set", xr2.device, "np_enable=0").check_returncode()
        new_lines = rxe.check("dmesg").splitlines()[len(dmesg_before):]
        bad = [line for line in new_lines
               if re.search(r"BUG:|Oops|WARNING:|Call Trace|rxe|ib_uverbs", line)]
        if bad:
            raise AssertionError(f"the guest kernel complained after our CNPs: {bad}")


REMOTE_ACCESS_NAK = 0x62  # AETH syndrome: NAK (0b11 << 5), code 2 (remote access error)


def remote_access_naks(xroce: Path, pcap: Path) -> list:
    """The IP source of every ACKNOWLEDGE whose AETH is a remote access error NAK."""
    out = subprocess.run([str(xroce), "wire", "decode", "--json", str(pcap)], check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    return [f["ip"]["src"] for f in json.loads(out)
            if f["status"] == "ok" and (f.get("aeth") or {}).get("syndrome") == REMOTE_ACCESS_NAK]


def diff(before: dict, after: dict) -> dict:
    return {k: v - before.get(k, 0) for k, v in after.items()
            if isinstance(v, int) and v != before.get(k, 0)}


PHASES = ("matrix", "errors", "gbn", "cnp", "windows")


def test(xroce: Path, xri_verbs: Path, switch: Path, phases, port_kind: str,
         ip_version: int) -> None:
    for path in (xroce, xri_verbs, switch):
        if not path.is_file():
            raise AssertionError(f"{path} does not exist: build xroce, xri_verbs, xroce-switch")
    started = time.monotonic()
    with Lab("xr", mtu=NETDEV_MTU) as lab, ExitStack() as devices:
        vm = lab.add_vm("a")
        hp = lab.add_host_port("x")
        sw = SwitchedPort(lab, switch, "y", host_index=1)
        lab.boot_all()
        vm.add_rxe()
        vm.wait_in_guest("ibv_devinfo -d rxe0 | grep -q 'active_mtu:.*4096'", 30,
                         "rxe0 active_mtu 4096")
        rxe = RxeGuest(vm)
        xr = devices.enter_context(
            XroceHost(xroce, hp.ns, hp.ifname, hp.ip4, "xri0", port_kind, hp.ip6))
        if ip_version == 6:
            vm.wait_ipv6_ready(hp.ip6)
        suite = Suite(lab, rxe, xr, xri_verbs, ip_version)
        xr2 = None
        for phase in phases:
            phase_started = time.monotonic()
            try:
                if phase == "matrix":
                    suite.matrix(xroce)
                elif phase == "errors":
                    suite.errors(xroce)
                elif phase == "windows":
                    suite.windows(xroce)
                elif phase == "gbn":
                    if xr2 is None:
                        xr2 = devices.enter_context(
                            XroceHost(xroce, sw.ns, sw.ifname, sw.ip4, "xri1", port_kind))
                    suite.go_back_n(sw, xr2)
                elif phase == "cnp":
                    if xr2 is None:
                        xr2 = devices.enter_context(
                            XroceHost(xroce, sw.ns, sw.ifname, sw.ip4, "xri1", port_kind))
                    suite.cnp(sw, xr2, xroce)
            except Exception:
                for peer in filter(None, (rxe, xr, xr2)):  # the counters tell why, mostly
                    log(f"phase {phase} failed; {peer.name} counters: {counters_or_why(peer)}")
                raise
            log(f"phase {phase} passed in {time.monotonic() - phase_started:.1f} s")
        vm.check("ibv_devinfo -d rxe0 | grep -q PORT_ACTIVE")  # rxe still fine
    log(f"xroce-rxe test took {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("xroce", type=Path)
    parser.add_argument("xri_verbs", type=Path)
    parser.add_argument("switch", type=Path)
    parser.add_argument("--only", action="append", choices=PHASES)
    parser.add_argument("--port", default="afxdp", choices=("afxdp", "udp"))
    parser.add_argument("--ipv6", action="store_true",
                        help="RoCE over the IPv6 GIDs (matrix and errors phases only)")
    args = parser.parse_args()
    sys.exit(main_wrapper(lambda: test(args.xroce, args.xri_verbs, args.switch,
                                       args.only or PHASES, args.port,
                                       6 if args.ipv6 else 4)))
