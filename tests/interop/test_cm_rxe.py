#!/usr/bin/python3
"""interop: xroce's connection manager against the Linux kernel's (ib_cm, rdma_cm) over rxe.

One VM boots with rxe0 and the kernel's rdma_cm (rdma_ucm loaded, /dev/infiniband/rdma_cm);
an xroce device (AF_XDP port) runs in a host namespace on the VM's bridge. Unmodified
rdmacm-utils and perftest on both sides, each side once server and once client:

  rping -V (data checked), ucmatose (4 connections), udaddy (UD: SIDR REQ/REP),
  ib_send_bw -R (perftest connecting through rdma_cm);
  a connect to a port nobody listens on: the listener's CM answers REJ (invalid service ID)
  and the client sees REJECTED;
  a client killed mid-run: its CM sends DREQ, and the server sees DISCONNECTED;
  a lost MAD (the first REQ, then the first REP, dropped on the VM's tap with nftables): the
  side whose MAD was lost retries it after its CM response timeout (~4.8 s) and the connection
  is made;
  MADs lost for good (AF_XDP port only: ~105 s): every REQ xroce sends, and every REP xroce
  answers the kernel's REQ with: both clients give up after their 15 retries with UNREACHABLE,
  and so does xroce's passive side, leaving no connection behind.

The bridge is captured throughout: every RoCEv2 frame must decode with `xroce wire decode`
with its ICRC ok, and the CM MADs (QP1, tshark's decoder) must include REQ, REP, RTU, REJ,
DREQ, DREP, SIDR REQ and SIDR REP sent by each side.

Usage: test_cm_rxe.py XROCE [--port afxdp|udp]
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
from peers import RxeGuest, XroceHost, wait_cm_listener
from vm import GuestTimeout, Lab, log, main_wrapper, sh

FIRST_PORT = 7300
# CM attribute IDs (IBA 16.7.2 table 204 / 16.7.5 for SIDR), as tshark's infiniband dissector
# prints them.
CM_MADS = {0x0010: "REQ", 0x0012: "REJ", 0x0013: "REP", 0x0014: "RTU", 0x0015: "DREQ",
           0x0016: "DREP", 0x0017: "SIDR_REQ", 0x0018: "SIDR_REP"}
# What each side must have sent once the phases ran (REJ only by the listener's side; SIDR REP
# only by the UD server's side, which both sides were).
NEEDED_FROM_EACH = {"REQ", "REP", "RTU", "REJ", "DREQ", "DREP", "SIDR_REQ", "SIDR_REP"}


CM_ATTR = {name: attr for attr, name in CM_MADS.items()}


def rej_invalid_service_id(peer) -> int:
    """REJs with reason "invalid service ID" the peer's CM has received (xroce counts them per
    reason in `xroce stat --json`; the kernel's rdma_cm shows no such count: 0)."""
    if not isinstance(peer, XroceHost):
        return 0
    stat = json.loads(peer.xroce_cli("stat", peer.device, "--json").stdout)
    return stat.get("cm", {}).get("rej_received", {}).get("invalid_service_id", 0)


def stop_command(peer, handle, command: str) -> None:
    """Stops a command started with peer.start_command and waits for it: by its handle on the
    host, by its program's name in the guest, where only the test's commands run, one at a time
    (the guest's busybox has pidof and kill, no pkill)."""
    if isinstance(peer, XroceHost):
        handle.kill()
    else:
        program = command.split()[0]
        peer.run(f"kill $(pidof {program}) 2>/dev/null || true", 30)
    handle.wait(30)


def finished(command: str, r) -> bool:
    """Whether a command ran to its end. rping's cm_thread is never joined: when main destroys
    the event channel at exit while the thread waits in rdma_get_cm_event, the thread prints
    "rdma_get_cm_event: Bad file descriptor" and exit(-1)s the process (rdma-core 44 rping.c),
    after the pings are done (its buffered stdout, with the pings, is flushed after that line).
    That teardown race, and only it, counts as finished; callers still check the pings."""
    if r.ok:
        return True
    return (command.startswith("rping") and r.rc == 255 and
            "rdma_get_cm_event: Bad file descriptor" in r.output and
            "DISCONNECT EVENT" in r.output)


class MadLoss:
    """Drops CM MADs crossing the VM's tap, with nftables' netdev family in the lab's namespace:
    "to_vm" on the tap's egress (MADs xroce sends the kernel), "from_vm" on its ingress (MADs the
    kernel sends xroce). A MAD is matched in the RoCEv2 frame itself: UDP 4791, BTH destination
    QP 1 (the GSI QP, IBA 13.5.2) and the MAD header's attribute ID (BTH 12 + DETH 8 + 16 bytes
    into the UDP payload)."""

    TABLE = "xroce_madloss"

    def __init__(self, ns: str, tap: str):
        self.ns = ns
        self._nft("add", "table", "netdev", self.TABLE)
        for chain, hook in (("to_vm", "egress"), ("from_vm", "ingress")):
            self._nft("add", "chain", "netdev", self.TABLE, chain,
                      f"{{ type filter hook {hook} device \"{tap}\" priority 0 ; }}")

    def close(self) -> None:
        self._nft("delete", "table", "netdev", self.TABLE, check=False)

    def _nft(self, *args, check=True) -> str:
        return sh("ip", "netns", "exec", self.ns, "nft", *args, check=check).stdout

    def drop(self, direction: str, mad: str) -> int:
        """Drops every `mad` going `direction` from now on; returns the rule's handle."""
        out = self._nft("--echo", "--handle", "add", "rule", "netdev", self.TABLE, direction,
                        "udp", "dport", "4791", "@th,104,24", "1", "@th,352,16",
                        str(CM_ATTR[mad]), "counter", "drop")
        m = re.search(r"# handle (\d+)", out)
        if not m:
            raise AssertionError(f"nft printed no rule handle:\n{out}")
        return int(m.group(1))

    def dropped(self, direction: str, handle: int) -> int:
        listing = json.loads(self._nft("--json", "--handle", "list", "chain", "netdev",
                                       self.TABLE, direction))
        for item in listing["nftables"]:
            rule = item.get("rule")
            if rule and rule["handle"] == handle:
                return next(e["counter"]["packets"] for e in rule["expr"] if "counter" in e)
        raise AssertionError(f"no nft rule {handle} in {direction}")

    def allow(self, direction: str, handle: int) -> None:
        self._nft("delete", "rule", "netdev", self.TABLE, direction, "handle", str(handle))

    def wait_dropped(self, direction: str, handle: int, timeout_s: float = 30) -> None:
        """Until rule `handle` has dropped a MAD."""
        deadline = time.monotonic() + timeout_s
        while self.dropped(direction, handle) < 1:
            if time.monotonic() > deadline:
                raise AssertionError(f"nft rule {handle} dropped nothing {direction} within "
                                     f"{timeout_s} s")
            time.sleep(0.02)  # polling a condition with a deadline


class CmSuite:
    def __init__(self, rxe: RxeGuest, xr: XroceHost):
        self.rxe = rxe
        self.xr = xr
        self.port = FIRST_PORT
        self.directions = [(rxe, xr), (xr, rxe)]  # (server, client)

    def next_port(self) -> int:
        self.port += 1
        return self.port

    def pair(self, server, client, server_cmd: str, client_cmd: str, port: int,
             timeout_s: float = 120, refusals=None):
        """Runs server and client to their ends; returns both outputs. With `refusals` (a count
        of the client's connects refused for want of a listener): a client that failed while
        that count rose stops the server, and None is returned, for the caller to try again."""
        before = refusals() if refusals else 0
        srv = server.start_command(server_cmd)
        wait_cm_listener(server, port)
        cli = client.run(client_cmd, timeout_s)
        if refusals and cli.rc != 0 and refusals() > before:
            stop_command(server, srv, server_cmd)
            return None
        s = srv.wait(timeout_s)
        for side, peer, r, cmd in (("server", server, s, server_cmd),
                                   ("client", client, cli, client_cmd)):
            if not finished(cmd, r):
                raise AssertionError(f"{side} on {peer.name} exited {r.rc} (`{server_cmd}` / "
                                     f"`{client_cmd}`):\n{r.output}")
        return s.output, cli.output

    def rping(self, server, client) -> None:
        port = self.next_port()
        _, out = self.pair(server, client, f"rping -s -V -C 50 -a {server.ip4} -p {port}",
                           f"rping -c -V -v -C 50 -a {server.ip4} -p {port}", port)
        if "rdma-ping-49: " not in out:
            raise AssertionError(f"rping: the 50th ping did not come back:\n{out}")
        log(f"rping -V -C 50: server {server.name}, client {client.name}: ok")

    def ucmatose(self, server, client) -> None:
        port = self.next_port()
        _, out = self.pair(server, client, f"ucmatose -p {port} -c 4 -C 10",
                           f"ucmatose -s {server.ip4} -p {port} -c 4 -C 10", port)
        if "test complete" not in out:
            raise AssertionError(f"ucmatose: no 'test complete':\n{out}")
        log(f"ucmatose -c 4 -C 10: server {server.name}, client {client.name}: ok")

    def udaddy(self, server, client) -> None:
        port = 7174  # udaddy's own; its -p names a port space
        _, out = self.pair(server, client, "udaddy -c 2 -C 10",
                           f"udaddy -s {server.ip4} -c 2 -C 10", port)
        if "test complete" not in out:
            raise AssertionError(f"udaddy: no 'test complete':\n{out}")
        log(f"udaddy -c 2 -C 10: server {server.name}, client {client.name}: ok")

    def send_bw(self, server, client) -> None:
        """perftest -R connects twice: its own exchange, then the test's QP; its server listens
        for the second only after setting up the first, and a client quicker than that (the rxe
        guest runs under TCG emulation) is refused with REJ "invalid service ID", which perftest
        does not retry: its server then waits for ever. Such an attempt (seen as a REJ of that
        reason the xroce client's CM counted) is stopped and made again on a fresh port, up to
        three times; any other failure fails at once."""
        for attempt in range(1, 4):
            port = self.next_port()
            flags = f"-R -n 50 -s 65536 -p {port}"
            got = self.pair(server, client, f"ib_send_bw -d {server.device} {flags}",
                            f"ib_send_bw -d {client.device} {flags} {server.ip4}", port,
                            refusals=(lambda: rej_invalid_service_id(client)) if attempt < 3
                            else None)
            if got is None:
                log(f"ib_send_bw -R attempt {attempt}: the client's connect was refused with "
                    f"REJ invalid service ID (the server was not listening again yet); again")
                continue
            out = got[1]
            if not re.search(r"^\s*65536\s+50\s+[\d.]+\s+[\d.]+", out, re.MULTILINE):
                raise AssertionError(f"ib_send_bw -R: no result line:\n{out}")
            log(f"ib_send_bw -R: server {server.name}, client {client.name}: ok")
            return

    def reject(self, server, client) -> None:
        """A connect to a port nobody listens on: REJ from the server's CM, REJECTED seen."""
        port = self.next_port()
        r = client.run(f"rping -c -C 1 -a {server.ip4} -p {port}", 60)
        if r.ok or "REJECTED" not in r.output:
            raise AssertionError(f"connect to an unused port from {client.name}: rc {r.rc}, "
                                 f"expected REJECTED:\n{r.output}")
        log(f"connect to an unused port of {server.name}: REJECTED as expected")

    def killed_client(self, server, client) -> None:
        """The client dies with its connection up: its CM sends DREQ, the server disconnects."""
        port = self.next_port()
        command = f"rping -s -v -C 0 -a {server.ip4} -p {port}"
        srv = server.start_command(command)
        wait_cm_listener(server, port)
        if client is self.xr:
            cli = client.start_command(f"rping -c -C 0 -a {server.ip4} -p {port}")
            self.wait_established_xroce()
            cli.kill()
        else:
            client.vm.check(f"rping -c -C 0 -a {server.ip4} -p {port} >/dev/null 2>&1 & "
                            f"echo $! > /tmp/rping.pid")
            self.wait_established_xroce()
            client.vm.check("kill -9 $(cat /tmp/rping.pid)")
        # rping's server returns after the disconnect, as a rule; rxe's once printed its
        # DISCONNECT EVENT and "wait for RDMA_READ_ADV state 10" (its test loop ending) and then
        # did not exit within 60 s, somewhere in its own cleanup. What is tested is that the
        # server saw the client go: a server that said so and stays is stopped (a host command's
        # wait has already killed it; in the guest, only the test's commands run).
        try:
            output = srv.wait(60).output
        except GuestTimeout as e:
            if "DISCONNECT" not in str(e):
                raise
            if not isinstance(server, XroceHost):
                server.run("kill $(pidof rping) 2>/dev/null || true", 30)
            output = str(e)
            log(f"rping's server on {server.name} saw the disconnect and did not exit: stopped")
        if "DISCONNECT" not in output and "cq completion failed" not in output:
            raise AssertionError(f"server {server.name} did not see the client go:\n{output}")
        log(f"client {client.name} killed: server {server.name} saw it go")

    def cm_stat(self) -> dict:
        return json.loads(self.xr.xroce_cli("stat", self.xr.device, "--json").stdout)["cm"]

    def lost_mad_is_retried(self, loss: MadLoss, server, client, mad: str) -> None:
        """The first `mad` of a connect is lost; its sender retries it and the connect succeeds."""
        port = self.next_port()
        # REQ goes client -> server, REP server -> client; "to_vm" is what xroce sends.
        sender = client if mad == "REQ" else server
        direction = "to_vm" if sender is self.xr else "from_vm"
        retried_before = self.cm_stat()["mads_retried"]
        srv = server.start_command(f"rping -s -V -C 1 -a {server.ip4} -p {port}")
        wait_cm_listener(server, port)
        started = time.monotonic()
        # Only the first is lost: the rule goes once it dropped one (the retry comes a CM
        # response timeout later, seconds away).
        handle = loss.drop(direction, mad)
        try:
            cli = client.start_command(f"rping -c -V -v -C 1 -a {server.ip4} -p {port}")
            loss.wait_dropped(direction, handle)
        finally:
            loss.allow(direction, handle)
        c, s = cli.wait(60), srv.wait(60)
        took = time.monotonic() - started
        for side, r in (("client", c), ("server", s)):
            if not finished("rping", r):
                raise AssertionError(f"{mad} lost once ({sender.name} sent it): the {side} "
                                     f"exited {r.rc}:\n{r.output}")
        if "rdma-ping-0: " not in c.output:
            raise AssertionError(f"rping after a lost {mad}: the ping did not come back:\n"
                                 f"{c.output}")
        retried = self.cm_stat()["mads_retried"] - retried_before
        if sender is self.xr and retried < 1:
            raise AssertionError(f"xroce's {mad} was lost but xroce retried no MAD")
        log(f"{mad} from {sender.name} lost once: retried, connected in {took:.1f} s "
            f"(xroce mads_retried +{retried})")

    def xroce_connections(self, local_port: int = 0) -> list:
        ids = json.loads(self.xr.xroce_cli("cm", "show", self.xr.device, "--json").stdout)["ids"]
        return [i for i in ids if i["role"] == "connection"
                and (local_port == 0 or i["local"].endswith(f":{local_port}"))]

    def lost_for_good_is_unreachable(self, loss: MadLoss) -> None:
        """MADs lost for good, both ways at once. xroce connects to the kernel and every REQ is
        lost: xroce's CM gives up after its 15 retries (16 x 4.8 s) with UNREACHABLE. The kernel
        connects to xroce, the first REQ arrives and xroce's every REP is lost, and so are the
        kernel's REQ retries (were one to arrive after xroce gave up, the listener would be gone
        and the answer a REJ, as between two kernels): xroce's passive side gives up its REP with
        UNREACHABLE, leaving no connection behind, and the kernel's CM gives up its REQ after its
        own retries (16 x ~6.4 s)."""
        to_kernel, to_xroce = self.next_port(), self.next_port()
        timeouts_before = self.cm_stat()["timeouts"]
        handles = [("to_vm", loss.drop("to_vm", "REQ")), ("to_vm", loss.drop("to_vm", "REP"))]
        try:
            srv_k = self.rxe.start_command(f"rping -s -C 1 -a {self.rxe.ip4} -p {to_kernel}")
            wait_cm_listener(self.rxe, to_kernel)
            srv_x = self.xr.start_command(f"rping -s -v -C 1 -a {self.xr.ip4} -p {to_xroce}")
            wait_cm_listener(self.xr, to_xroce)
            started = time.monotonic()
            cli_x = self.xr.start_command(f"rping -c -C 1 -a {self.rxe.ip4} -p {to_kernel}")
            cli_k = self.rxe.start_command(f"rping -c -C 1 -a {self.xr.ip4} -p {to_xroce}")
            deadline = time.monotonic() + 30
            while not self.xroce_connections(to_xroce):
                if time.monotonic() > deadline:
                    raise AssertionError("the kernel's first REQ made no connection on xroce")
                time.sleep(0.02)  # polling a condition with a deadline
            handles.append(("from_vm", loss.drop("from_vm", "REQ")))
            results = {"xroce client": cli_x.wait(180), "xroce server": srv_x.wait(180),
                       "kernel client": cli_k.wait(180)}
            took = time.monotonic() - started
        finally:
            for direction, h in handles:
                loss.allow(direction, h)
        for who, r in results.items():
            if r.ok or "UNREACHABLE" not in r.output:
                raise AssertionError(f"{who}: rc {r.rc}, expected UNREACHABLE:\n{r.output}")
        left = self.xroce_connections()
        if left:
            raise AssertionError(f"connections left behind on xroce: {left}")
        timeouts = self.cm_stat()["timeouts"] - timeouts_before
        if timeouts < 2:
            raise AssertionError(f"xroce counted {timeouts} CM timeouts, expected its REQ's and "
                                 f"its REP's")
        self.rxe.vm.run("kill $(pidof rping) 2>/dev/null", 10)  # the listener nobody reached
        srv_k.wait(30)
        log(f"MADs lost for good: xroce's client and server and the kernel's client UNREACHABLE "
            f"within {took:.1f} s; xroce counted {timeouts} CM timeouts, no connection left")

    def wait_established_xroce(self, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while "established" not in self.xr.xroce_cli("cm", "show", self.xr.device).stdout:
            if time.monotonic() > deadline:
                raise AssertionError("no established connection on the xroce side")
            time.sleep(0.02)  # polling a condition with a deadline


def cm_mads_by_sender(pcap: Path) -> dict:
    """{sender IPv4: {MAD name}} of the QP1 MADs in the capture, decoded by tshark."""
    out = subprocess.run(["tshark", "-r", str(pcap), "-d", "udp.port==4791,infiniband",
                          "-Y", "infiniband.bth.destqp == 1", "-T", "fields", "-e", "ip.src",
                          "-e", "infiniband.mad.attributeid"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         check=True).stdout
    seen = {}
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 2 and parts[1]:
            name = CM_MADS.get(int(parts[1], 16), parts[1])
            seen.setdefault(parts[0], set()).add(name)
    return seen


def test(xroce: Path, port_kind: str) -> None:
    if not xroce.is_file():
        raise AssertionError(f"{xroce} does not exist: build xroce")
    started = time.monotonic()
    with Lab("xc", mtu=1500) as lab, ExitStack() as devices:
        vm = lab.add_vm("a")
        hp = lab.add_host_port("x")
        lab.boot_all()
        vm.add_rxe()
        vm.check("test -c /dev/infiniband/rdma_cm")  # the kernel's rdma_cm is there
        rxe = RxeGuest(vm)
        xr = devices.enter_context(
            XroceHost(xroce, hp.ns, hp.ifname, hp.ip4, "xrc0", port_kind, hp.ip6))
        suite = CmSuite(rxe, xr)
        cap = lab.capture(vm.tap, "cm")
        try:
            for server, client in suite.directions:
                suite.rping(server, client)
                suite.ucmatose(server, client)
                suite.udaddy(server, client)
                suite.send_bw(server, client)
                suite.reject(server, client)
                suite.killed_client(server, client)
            loss = MadLoss(lab.ns, vm.tap)
            try:
                for server, client in suite.directions:
                    for mad in ("REQ", "REP"):
                        suite.lost_mad_is_retried(loss, server, client, mad)
                if port_kind == "afxdp":  # the CM sits above the port: once is enough
                    suite.lost_for_good_is_unreachable(loss)
            finally:
                loss.close()
        except Exception:
            log(f"xroce cm counters: {xr.xroce_cli('stat', xr.device).stdout}")
            raise
        log(f"tcpdump: {' / '.join(cap.stop().splitlines()[-3:])}")
        summary = check_capture(xroce, cap.path, {0x64: "UD_SEND_ONLY"})
        log(f"capture: {summary['roce']} RoCEv2 frames, all decoded with ICRC ok; "
            f"{summary['opcodes']}")
        mads = cm_mads_by_sender(cap.path)
        log(f"CM MADs by sender: { {k: sorted(v) for k, v in mads.items()} }")
        for peer in (rxe, xr):
            missing = NEEDED_FROM_EACH - mads.get(peer.ip4, set())
            if missing:
                raise AssertionError(f"{peer.name} sent no {sorted(missing)} in the capture")
        vm.check("ibv_devinfo -d rxe0 | grep -q PORT_ACTIVE")
        dmesg = vm.check("dmesg")
        bad = [line for line in dmesg.splitlines() if re.search(r"BUG:|Oops|WARNING:", line)]
        if bad:
            raise AssertionError(f"the guest kernel complained: {bad}")
    log(f"cm-rxe test took {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("xroce", type=Path)
    parser.add_argument("--port", default="afxdp", choices=("afxdp", "udp"))
    args = parser.parse_args()
    sys.exit(main_wrapper(lambda: test(args.xroce, args.port)))
