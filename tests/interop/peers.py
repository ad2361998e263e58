"""The two kinds of RoCE peer the issue-8 tests drive with the same calls: rxe in a VM (vm.Vm)
and an xroce device in a host namespace (XroceHost below). A peer has `name`, `ip4`, `device`
(the verbs device name), `run(cmd, timeout_s)` -> GuestResult, `start_command(cmd)` -> an object
with `wait(timeout_s)`, `wait_listening(tcp_port)`, `gid_index(address)` and `counters()`
(hw_counters as a dict). Anything else with those (an SSH-driven rxe host or an RNIC host) can
stand in for either side; see README.md.
"""

import json
import os
import re
import select
import signal
import subprocess
import time
from pathlib import Path

from vm import GuestResult, GuestTimeout, _die_with_parent, _kill_namespace_pids, log, sh


class HostCommand:
    """A command running in a namespace; wait() returns a GuestResult like a guest command."""

    def __init__(self, argv, description: str):
        self.description = description
        self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True,
                                      preexec_fn=_die_with_parent, start_new_session=True)

    def wait(self, timeout_s: float) -> GuestResult:
        try:
            out, _ = self._proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            out, _ = self._proc.communicate()
            raise GuestTimeout(f"host: `{self.description}` still running after {timeout_s} s; "
                               f"output so far:\n{out}")
        return GuestResult(self._proc.returncode, out)

    def kill(self) -> None:
        if self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)  # its own session: our child only
            except ProcessLookupError:
                pass


def _gid_index(devinfo: str, address: str, who: str) -> int:
    wanted = f"::ffff:{address}" if ":" not in address else address
    for m in re.finditer(r"GID\[\s*(\d+)\]:\s+(\S+?),\s+(RoCE v[12])", devinfo):
        if m.group(2) == wanted and m.group(3) == "RoCE v2":
            return int(m.group(1))
    raise RuntimeError(f"{who}: no RoCE v2 GID for {address} in:\n{devinfo}")


class XroceHost:
    """An xroce device on `ifname` of namespace `ns` (its own xroced), driven like a Vm."""

    def __init__(self, xroce: Path, ns: str, ifname: str, ip4: str, device: str = "xri0",
                 port: str = "afxdp", ip6: str = ""):
        self.xroce = xroce
        self.ns = ns
        self.ifname = ifname
        self.ip4 = ip4
        self.ip6 = ip6
        self.device = device
        self.port = port
        self.name = f"xroce:{device}"
        self.added = False

    def __enter__(self) -> "XroceHost":
        self.add()
        return self

    def __exit__(self, *exc) -> None:
        self.delete()

    def add(self) -> None:
        started = time.monotonic()
        # Returns once the port is ACTIVE (or fails within --wait-s, saying why).
        sh("ip", "netns", "exec", self.ns, self.xroce, "link", "add", self.device, "netdev",
           self.ifname, "port", self.port, "queues", "1", "--wait-s", "20")
        self.added = True
        show = self.xroce_cli("link", "show", self.device).stdout
        log(f"{self.name}: `xroce link add {self.device} netdev {self.ifname} port {self.port}` "
            f"ACTIVE in {time.monotonic() - started:.1f} s: {show.strip()}")

    def delete(self) -> None:
        if self.added:
            self.xroce_cli("link", "del", self.device)
            self.added = False

    def xroce_cli(self, *args) -> subprocess.CompletedProcess:
        return sh("ip", "netns", "exec", self.ns, self.xroce, *args, check=False, timeout=30)

    def _argv(self, command: str):
        return ["ip", "netns", "exec", self.ns, str(self.xroce), "exec", "--", "sh", "-c",
                command]

    def start_command(self, command: str) -> HostCommand:
        return HostCommand(self._argv(command), command)

    def run(self, command: str, timeout_s: float = 60) -> GuestResult:
        return self.start_command(command).wait(timeout_s)

    def check(self, command: str, timeout_s: float = 60) -> str:
        r = self.run(command, timeout_s)
        if not r.ok:
            raise RuntimeError(f"{self.name}: `{command}` exited {r.rc}:\n{r.output}")
        return r.output

    def wait_listening(self, tcp_port: int, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while f":{tcp_port} " not in sh("ip", "netns", "exec", self.ns, "ss", "-ltnH", "sport",
                                         f"= :{tcp_port}", check=False).stdout + " ":
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: nothing listens on TCP {tcp_port}")
            time.sleep(0.02)  # polling a condition with a deadline

    def gid_index(self, address: str) -> int:
        return _gid_index(self.check(f"ibv_devinfo -v -d {self.device}"), address, self.name)

    def counters(self) -> dict:
        p = self.xroce_cli("stat", self.device, "--json")
        if p.returncode != 0:
            raise RuntimeError(f"xroce stat {self.device}: {p.stdout}")
        return json.loads(p.stdout)["counters"]

    def qps(self) -> list:
        p = self.xroce_cli("qp", "show", self.device, "--json")
        return json.loads(p.stdout) if p.returncode == 0 else []


class XroceGuest:
    """An xroce device inside a VM booted from an image with the xroce package (build-image
    --with-deb) and without the kernel's RDMA modules (xroce.rxe=0): the guest's own xroced on
    its virtio-net eth0, brought up with `xroce up`. Commands run under `xroce exec`, with the
    image's profile (iproute2 over busybox's applets)."""

    def __init__(self, vm, device: str = "xv0"):
        self.vm = vm
        self.name = f"xroce@{vm.name}"
        self.ip4 = vm.ip4
        self.ip6 = vm.ip6
        self.device = device

    def up(self, port: str = "afxdp") -> dict:
        """`xroce up eth0` in the guest; returns the device's `xroce link show --json` entry."""
        self.vm.check(f"xroce up eth0 --name {self.device} --port {port} --timeout 60", 90)
        return json.loads(self.vm.check(f"xroce link show {self.device} --json"))[0]

    def _wrapped(self, command: str) -> str:
        quoted = command.replace("'", "'\\''")
        return f"xroce exec -- sh -c '. /etc/xroce/profile; {quoted}'"

    def start_command(self, command: str):
        return self.vm.start_command(self._wrapped(command))

    def run(self, command: str, timeout_s: float = 60) -> GuestResult:
        return self.vm.run(self._wrapped(command), timeout_s)

    def check(self, command: str, timeout_s: float = 60) -> str:
        return self.vm.check(self._wrapped(command), timeout_s)

    def wait_listening(self, tcp_port: int, timeout_s: float = 30) -> None:
        self.vm.wait_listening(tcp_port, timeout_s)

    def gid_index(self, address: str) -> int:
        return _gid_index(self.check(f"ibv_devinfo -v -d {self.device}"), address, self.name)

    def counters(self) -> dict:
        return json.loads(self.vm.check(f"xroce stat {self.device} --json"))["counters"]


class RxeGuest:
    """Adds the verbs-peer calls (device, gid_index from sysfs/ibv_devinfo, counters) to a Vm."""

    def __init__(self, vm):
        self.vm = vm
        self.name = f"rxe@{vm.name}"
        self.ip4 = vm.ip4
        self.ip6 = vm.ip6
        self.device = "rxe0"

    def start_command(self, command: str):
        return self.vm.start_command(command)

    def run(self, command: str, timeout_s: float = 60) -> GuestResult:
        return self.vm.run(command, timeout_s)

    def check(self, command: str, timeout_s: float = 60) -> str:
        return self.vm.check(command, timeout_s)

    def wait_listening(self, tcp_port: int, timeout_s: float = 30) -> None:
        self.vm.wait_listening(tcp_port, timeout_s)

    def gid_index(self, address: str) -> int:
        return _gid_index(self.check("ibv_devinfo -v -d rxe0"), address, self.name)

    def counters(self) -> dict:
        out = self.check("cd /sys/class/infiniband/rxe0/ports/1/hw_counters && "
                         "for f in *; do echo \"$f $(cat $f)\"; done")
        return {k: int(v) for k, v in (line.split() for line in out.splitlines() if line.strip())}


def counters_or_why(peer):
    """peer.counters(), or why they could not be read: for the log of a failure, so never
    raises (a guest that stopped answering must not hide the failure being reported)."""
    try:
        return peer.counters()
    except Exception as e:
        return f"unavailable ({type(e).__name__}: {e})"


def wait_cm_listener(peer, port: int, timeout_s: float = 30) -> None:
    """Until an rdma_cm id of `peer` (an XroceHost or an RxeGuest) listens on `port`: asked of
    the CM (`xroce cm show`, the kernel's `rdma resource show cm_id`), not of TCP."""
    if isinstance(peer, XroceHost):
        deadline = time.monotonic() + timeout_s
        while not re.search(rf"listener\b.*:{port}\b",
                            peer.xroce_cli("cm", "show", peer.device).stdout):
            if time.monotonic() > deadline:
                raise AssertionError(f"{peer.name}: no rdma_cm listener on port {port}")
            time.sleep(0.02)  # polling a condition with a deadline
    else:
        peer.vm.wait_in_guest(f"rdma resource show cm_id | grep -q 'state LISTEN.*:{port} '"
                              f" || rdma resource show cm_id | grep -q 'src-port {port} '",
                              timeout_s, f"an rdma_cm listener on port {port}")


class SwitchedPort:
    """A host namespace behind xroce-switch: lab bridge <-> veth <-> middle namespace (the
    switch between `swup` and `swdown`) <-> veth <-> namespace `<lab ns>-<name>` with eth0 (ip4).
    The switch runs only while a case needs it (start()/stop()), each time with that case's
    impairment; without it the namespace is cut off."""

    def __init__(self, lab, switch_bin: Path, name: str, host_index: int):
        self.lab = lab
        self.switch_bin = switch_bin
        self.ns = f"{lab.ns}-{name}"
        self.sw_ns = f"{lab.ns}-{name}sw"
        self.ifname = "eth0"
        self.ip4 = str(lab.net4.network_address + 2 + host_index)
        self.bridge_end = f"v{name}"
        self._proc = None
        self.stats_path = lab.log_dir / f"switch-{name}.json"
        stack = lab._stack
        for ns in (self.sw_ns, self.ns):
            sh("ip", "netns", "add", ns)
            stack.callback(sh, "ip", "netns", "del", ns, check=False)
            stack.callback(_kill_namespace_pids, ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        stack.callback(self.stop)
        mtu = str(lab.mtu)
        sh("ip", "-n", lab.ns, "link", "add", self.bridge_end, "mtu", mtu, "type", "veth", "peer",
           "name", "swup", "netns", self.sw_ns)
        sh("ip", "-n", lab.ns, "link", "set", self.bridge_end, "master", "br0", "up")
        sh("ip", "-n", self.sw_ns, "link", "add", "swdown", "mtu", mtu, "type", "veth", "peer",
           "name", self.ifname, "netns", self.ns)
        for dev in ("swup", "swdown"):  # a veth peer does not inherit `mtu` from `ip link add`
            sh("ip", "-n", self.sw_ns, "link", "set", dev, "mtu", mtu, "up")
        sh("ip", "-n", self.ns, "addr", "add", f"{self.ip4}/{lab.net4.prefixlen}", "dev",
           self.ifname)
        sh("ip", "-n", self.ns, "link", "set", self.ifname, "mtu", mtu, "up")

    def start(self, *impairment: str) -> None:
        """Starts the switch with the given extra flags; returns once it prints `ready`."""
        self.stop()
        self.stats_path.unlink(missing_ok=True)
        argv = ["ip", "netns", "exec", self.sw_ns, str(self.switch_bin), "--port", "swup",
                "--port", "swdown", "--stats-json", str(self.stats_path), *map(str, impairment)]
        self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True,
                                      preexec_fn=_die_with_parent)
        ready, _, _ = select.select([self._proc.stdout], [], [], 20)
        line = self._proc.stdout.readline() if ready else ""
        if line.strip() != "ready":
            self.stop()
            raise RuntimeError(f"xroce-switch {' '.join(impairment)} did not start: {line}")
        self.flags = " ".join(map(str, impairment))

    def stop(self) -> dict:
        """Stops the switch (it writes its statistics at exit); returns them by port name."""
        if self._proc is None:
            return {}
        proc, self._proc = self._proc, None
        if proc.poll() is None:
            proc.terminate()
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        if proc.returncode not in (0, -signal.SIGTERM):
            raise RuntimeError(f"xroce-switch exited {proc.returncode}: {out}")
        stats = json.loads(self.stats_path.read_text())
        return {p.get("name", str(i)): p for i, p in enumerate(stats["ports"])}
