"""Boots kernel-rxe VMs in a throwaway network namespace and drives commands in them.

    with Lab("boot") as lab:                 # namespace xri-<pid>-boot with bridge br0
        vm = lab.add_vm("a")                  # tap0 on br0, guest eth0 = 198.18.<n>.10
        lab.boot_all()                        # qemu per VM, waits for the guest's ready marker
        vm.add_rxe()                          # rdma link add rxe0 type rxe netdev eth0, ACTIVE
        r = vm.run("ibv_devinfo -v")          # GuestResult(rc, output)

Everything a Lab makes (qemu processes, taps, bridge, capture processes, the namespace) is
released when the `with` block ends, also on exceptions and SIGTERM; qemu and tcpdump also get
SIGKILL from the kernel if this process dies without unwinding (PR_SET_PDEATHSIG). A namespace
left by a killed run (its owner pid gone) is deleted by the next Lab.

Commands reach the guest through a command agent (busybox `nc -ll -e /bin/sh` started by the
image's /init): each command is one TCP connection whose shell reads a short script and exits
at EOF; the script ends with a marker line carrying the exit status.

Needs root, qemu-system-x86_64, /dev/net/tun and iproute2. Run with /usr/bin/python3.
"""

import base64
import ctypes
import ipaddress
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
SKIP_RETURN_CODE = 77
NS_PREFIX = "xri-"

_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1
_CLONE_NEWNET = 0x40000000


class Skip(Exception):
    """This machine cannot run the interop suite; the message says why."""


class GuestTimeout(Exception):
    pass


class GuestUnresponsive(Exception):
    """A test failed and a guest then did not answer its command agent at all: the VM stopped
    (qemu's software emulation on a loaded host has frozen a guest mid-test, console silent,
    not even answering ARP). The original failure is its __cause__."""


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _die_with_parent() -> None:
    """preexec_fn: the child gets SIGKILL when the process that started it dies."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def sh(*cmd, check=True, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run(list(map(str, cmd)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, **kw)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({p.returncode}): {p.stdout.strip()}")
    return p


def check_host() -> None:
    """Raises Skip when this machine cannot boot the VMs."""
    if os.geteuid() != 0:
        raise Skip("needs root (network namespaces, taps, qemu on a tap)")
    for tool in ("qemu-system-x86_64", "ip"):
        if shutil.which(tool) is None:
            raise Skip(f"{tool} is not installed (ci/install-deps installs it)")
    if not os.path.exists("/dev/net/tun"):
        raise Skip("/dev/net/tun is missing: cannot make a tap for the VM")


def accelerator() -> str:
    """KVM only when /dev/kvm is a real VT-x/SVM hypervisor; otherwise qemu's TCG.

    XROCE_INTEROP_ACCEL=kvm|tcg overrides. A nested page-table hypervisor (kvm_pvm) exposes
    /dev/kvm but cannot run a stock Debian kernel (-cpu host aborts on MSR 0x10a; with it masked
    the guest dies on cmpxchg16b/xrstor emulation failures)."""
    forced = os.environ.get("XROCE_INTEROP_ACCEL")
    if forced:
        return forced
    real_kvm = any(Path("/sys/module", m).exists() for m in ("kvm_intel", "kvm_amd"))
    if real_kvm and os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "kvm"
    return "tcg"


def build_image(deb=None) -> dict:
    """Runs build-image (cached), returns the image's manifest with its directory as 'dir'.
    With `deb` (an xroce package) the image carries xroce too (build-image --with-deb)."""
    started = time.monotonic()
    extra = ["--with-deb", str(deb)] if deb is not None else []
    p = subprocess.run([sys.executable, str(HERE / "build-image"), *extra],
                       stdout=subprocess.PIPE, text=True)
    if p.returncode == SKIP_RETURN_CODE:
        raise Skip("build-image cannot run on this machine (see its message above)")
    if p.returncode != 0:
        raise RuntimeError("build-image failed (see its message above)")
    image = Path(p.stdout.strip().splitlines()[-1])
    manifest = json.loads((image / "manifest.json").read_text())
    manifest["dir"] = image
    log(f"image {image.name} ready in {time.monotonic() - started:.2f} s "
        f"(kernel {manifest['kernel_release']}, initrd {manifest['initrd_bytes'] >> 20} MiB)")
    return manifest


# --- network namespaces -------------------------------------------------------------------


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_namespaces() -> None:
    """Deletes namespaces named xri-<pid>-* whose creating process no longer exists."""
    out = sh("ip", "netns", "list", check=False).stdout
    for line in out.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.fullmatch(rf"{NS_PREFIX}(\d+)-[\w-]+", name)
        if m and not _pid_alive(int(m.group(1))):
            log(f"removing stale namespace {name}")
            _kill_namespace_pids(name)
            sh("ip", "netns", "del", name, check=False)


def _kill_namespace_pids(name: str) -> None:
    out = sh("ip", "netns", "pids", name, check=False).stdout
    for pid in out.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def socket_in_netns(ns: str, family=socket.AF_INET) -> socket.socket:
    """A TCP socket created inside namespace `ns` (the calling thread returns to its own)."""
    with open("/proc/thread-self/ns/net") as own, open(f"/run/netns/{ns}") as target:
        if _libc.setns(target.fileno(), _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {ns}")
        try:
            return socket.socket(family, socket.SOCK_STREAM)
        finally:
            if _libc.setns(own.fileno(), _CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back")


# --- guest commands -----------------------------------------------------------------------

_RC_MARK = "__XROCE_AGENT_RC__"


@dataclass
class GuestResult:
    rc: int
    output: str

    @property
    def ok(self) -> bool:
        return self.rc == 0


class GuestCommand:
    """One command running in the guest; wait() returns its exit status and output."""

    def __init__(self, vm: "Vm", command: str, connect_timeout_s: float = 10):
        self.vm = vm
        self.command = command
        self.chunks = []
        self.sock = socket_in_netns(vm.lab.ns)
        # The subshell keeps the command off the script's stdin; the marker carries $?.
        script = (f". /etc/xroce/profile\n( {command}\n) </dev/null 2>&1\n"
                  f"printf '\\n{_RC_MARK}%d\\n' $?\n")
        try:
            self.sock.settimeout(connect_timeout_s)
            self.sock.connect((vm.ip4, vm.agent_port))
            self.sock.sendall(script.encode())
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self.sock.close()
            raise

    def wait(self, timeout_s: float) -> GuestResult:
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise GuestTimeout(
                        f"{self.vm.name}: `{self.command}` still running after {timeout_s} s; "
                        f"output so far:\n{self._text()}")
                self.sock.settimeout(left)
                try:
                    data = self.sock.recv(65536)
                except socket.timeout:
                    continue
                if not data:
                    break
                self.chunks.append(data)
        finally:
            self.sock.close()
        text = self._text()
        head, sep, tail = text.rpartition(f"\n{_RC_MARK}")
        if not sep:
            raise RuntimeError(f"{self.vm.name}: agent closed without an exit status for "
                               f"`{self.command}`; output:\n{text}")
        return GuestResult(int(tail.strip()), head)

    def _text(self) -> str:
        return b"".join(self.chunks).decode(errors="replace")


# --- VMs ----------------------------------------------------------------------------------


class Vm:
    """One qemu guest on tap<index> of the lab's bridge."""

    def __init__(self, lab: "Lab", name: str, index: int, kernel_args: str = ""):
        self.lab = lab
        self.name = name
        self.index = index
        self.kernel_args = kernel_args
        self.tap = f"tap{index}"
        self.ip4 = str(lab.net4.network_address + 10 + index)
        self.ip6 = str(lab.net6.network_address + 0x10 + index)
        self.mac = f"52:54:00:18:{lab.subnet:02x}:{index + 0x10:02x}"
        self.agent_port = lab.image["agent_port"]
        self.console_path = lab.log_dir / f"console-{name}.log"
        self.console_lines = []
        self.boot_seconds = None
        self._proc = None
        self._ready = threading.Condition()
        self._marker_seen = False
        self._eof = False

    def start(self) -> None:
        image = self.lab.image["dir"]
        accel = self.lab.accel
        # no_timer_check: under software emulation on a loaded host the kernel's check that the
        # 8254 timer reaches the IO-APIC can miss its window and panic the boot ("IO-APIC +
        # timer doesn't work!"); qemu's timer is known to work.
        append = (f"console=ttyS0 quiet panic=-1 no_timer_check "
                  f"xroce.ip4={self.ip4}/{self.lab.net4.prefixlen} "
                  f"xroce.ip6={self.ip6}/{self.lab.net6.prefixlen} xroce.mtu={self.lab.mtu} "
                  f"{self.kernel_args}").strip()
        cmd = ["ip", "netns", "exec", self.lab.ns, "qemu-system-x86_64",
               "-name", f"xroce-interop-{self.name}", "-accel", accel,
               "-cpu", "host" if accel == "kvm" else "qemu64",
               "-m", str(self.lab.memory_mib), "-smp", "1", "-nodefaults", "-no-reboot",
               "-display", "none", "-monitor", "none", "-serial", "stdio",
               "-kernel", str(image / "kernel"), "-initrd", str(image / "initrd.cpio"),
               "-append", append,
               "-netdev", f"tap,id=n0,ifname={self.tap},script=no,downscript=no",
               # romfile= : no iPXE option ROM needed (and ipxe-qemu need not be installed).
               "-device", f"virtio-net-pci,netdev=n0,mac={self.mac},romfile="]
        self._started = time.monotonic()
        self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        threading.Thread(target=self._read_console, daemon=True).start()

    def _read_console(self) -> None:
        marker = self.lab.image["ready_marker"]
        with open(self.console_path, "w") as log_file:
            for raw in self._proc.stdout:
                line = raw.decode(errors="replace").rstrip("\r\n")
                log_file.write(line + "\n")
                log_file.flush()
                with self._ready:
                    self.console_lines.append(line)
                    if marker in line and not self._marker_seen:
                        self._marker_seen = True
                        self.boot_seconds = time.monotonic() - self._started
                    self._ready.notify_all()
        with self._ready:
            self._eof = True
            self._ready.notify_all()

    def wait_ready(self, timeout_s: float) -> None:
        with self._ready:
            self._ready.wait_for(lambda: self._marker_seen or self._eof, timeout=timeout_s)
            if self._marker_seen:
                log(f"{self.name}: ready after {self.boot_seconds:.1f} s ({self.lab.accel})")
                return
            why = "qemu exited" if self._eof else f"no ready marker within {timeout_s} s"
            tail = "\n".join(self.console_lines[-30:])
        raise RuntimeError(f"{self.name}: {why}; console ({self.console_path}) ends with:\n{tail}")

    def start_command(self, command: str) -> GuestCommand:
        return GuestCommand(self, command)

    def answers(self, timeout_s: float = 20) -> bool:
        """Whether the guest still runs a command through its agent within `timeout_s`."""
        if self._proc is None or self._proc.poll() is not None:
            return False
        try:
            return self.run("true", timeout_s).ok
        except Exception:  # connection refused or timed out, agent gone: all mean no
            return False

    def run(self, command: str, timeout_s: float = 60) -> GuestResult:
        return self.start_command(command).wait(timeout_s)

    def check(self, command: str, timeout_s: float = 60) -> str:
        """Runs a command that must succeed; returns its output."""
        r = self.run(command, timeout_s)
        if not r.ok:
            raise RuntimeError(f"{self.name}: `{command}` exited {r.rc}:\n{r.output}")
        return r.output

    def copy_in(self, local: Path, guest_path: str) -> None:
        """Copies a host file (a program built here) into the guest, executable, through the
        command agent: base64 in a here-document."""
        data = base64.b64encode(local.read_bytes()).decode()
        lines = "\n".join(data[i:i + 76] for i in range(0, len(data), 76))
        self.check(f"base64 -d > {guest_path} <<'EOF'\n{lines}\nEOF\nchmod +x {guest_path}")

    def wait_in_guest(self, condition: str, timeout_s: float, what: str) -> None:
        """Polls a shell condition inside the guest (one agent round trip) until it holds."""
        polls = max(1, int(timeout_s / 0.05))
        script = (f"i=0; until {condition}; do i=$((i+1)); "
                  f"[ $i -ge {polls} ] && exit 1; usleep 50000; done")
        if not self.run(script, timeout_s + 30).ok:
            raise RuntimeError(f"{self.name}: {what} not reached within {timeout_s} s")

    def wait_listening(self, tcp_port: int, timeout_s: float = 30) -> None:
        self.wait_in_guest(f"netstat -ltn | grep -q ':{tcp_port} '", timeout_s,
                           f"a listener on TCP {tcp_port}")

    def wait_ipv6_ready(self, peer_ip6: str, timeout_s: float = 30) -> None:
        """Waits until IPv6 toward `peer_ip6` works from the guest: no address of eth0 still
        tentative (duplicate address detection done, link-local included) and the peer answers
        a ping, so its neighbour entry is resolved. rxe resolves the peer's MAC when a QP goes
        to RTR and fails the modify if that does not complete at once."""
        self.wait_in_guest(f"! ip -6 addr show dev eth0 | grep -q tentative && "
                           f"ping -6 -c 1 -W 1 {peer_ip6} >/dev/null 2>&1", timeout_s,
                           f"IPv6 to {peer_ip6} (DAD done, neighbour resolved)")

    def add_rxe(self, timeout_s: float = 30) -> None:
        """rdma link add rxe0 type rxe netdev eth0, then waits for port 1 to be ACTIVE."""
        self.check("rdma link add rxe0 type rxe netdev eth0")
        self.wait_in_guest("rdma link show rxe0/1 | grep -q 'state ACTIVE'", timeout_s,
                           "rxe0/1 ACTIVE")

    def gid_table(self) -> dict:
        """rxe0's GIDs from `ibv_devinfo -v`: {index: (gid, "RoCE v2" or "RoCE v1")}."""
        devinfo = self.check("ibv_devinfo -v -d rxe0")
        return {int(m.group(1)): (m.group(2), m.group(3)) for m in
                re.finditer(r"GID\[\s*(\d+)\]:\s+(\S+?),\s+(RoCE v[12])", devinfo)}

    def gid_index(self, address: str) -> int:
        """The index of the RoCE v2 GID of an IPv4 (as ::ffff:a.b.c.d) or IPv6 address."""
        wanted = f"::ffff:{address}" if ipaddress.ip_address(address).version == 4 else address
        table = self.gid_table()
        for index, gid in table.items():
            if gid == (wanted, "RoCE v2"):
                return index
        raise RuntimeError(f"{self.name}: no RoCE v2 GID for {address} in {table}")

    def stop(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        self._proc.terminate()  # qemu exits on SIGTERM
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


# --- captures -----------------------------------------------------------------------------


class Capture:
    """tcpdump on one interface of the lab's namespace, into a pcap (Ethernet link type)."""

    def __init__(self, lab: "Lab", interface: str, path: Path):
        self.path = path
        self.summary = ""
        # A 128 MiB kernel buffer and no per-packet flush (-U): with other builds loading the
        # machine a 16 MiB buffer with -U lost a few frames of a 28 000-frame matrix run. The file
        # is complete once stop() has made tcpdump exit.
        cmd = ["ip", "netns", "exec", lab.ns, "tcpdump", "-i", interface, "-w", str(path),
               "-n", "-s", "0", "-B", "131072", "--immediate-mode"]
        self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, preexec_fn=_die_with_parent)
        self._wait_listening(timeout_s=15)

    def _wait_listening(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        seen = b""
        while b"listening on" not in seen:
            left = deadline - time.monotonic()
            if left <= 0 or self._proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"tcpdump did not start: {seen.decode(errors='replace')}")
            ready, _, _ = select.select([self._proc.stderr], [], [], left)
            if ready:
                seen += os.read(self._proc.stderr.fileno(), 4096)

    def stop(self) -> str:
        """Stops tcpdump (it flushes the file) and returns its packet-count summary."""
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)
        try:
            _, err = self._proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            _, err = self._proc.communicate()
        self.summary = err.decode(errors="replace").strip()
        return self.summary

    def dropped_by_kernel(self) -> int:
        m = re.search(r"(\d+) packets? dropped by kernel", self.summary)
        return int(m.group(1)) if m else 0


# --- the host-side peer -------------------------------------------------------------------


@dataclass
class HostPort:
    """A namespace of its own with eth0 on the lab's bridge: where a host-side RoCE peer (xroce,
    `xroce link add` on eth0) meets the VMs' rxe. Addresses 198.18.N.2+K and 2001:2:0:N::2+K."""

    ns: str
    ip4: str
    ip6: str
    bridge_end: str  # the veth end on br0, in the lab's namespace
    ifname: str = "eth0"

    def run(self, command: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
        return sh("ip", "netns", "exec", self.ns, "sh", "-c", command, check=False,
                  timeout=timeout_s)


# --- the lab ------------------------------------------------------------------------------


class Lab:
    """A namespace with a bridge, the VMs on it, and everything torn down on exit."""

    def __init__(self, tag: str, memory_mib: int = 192, mtu: int = 1500, deb=None):
        check_host()
        self.deb = deb
        self.ns = f"{NS_PREFIX}{os.getpid()}-{tag}"
        self.subnet = 100 + os.getpid() % 150
        self.net4 = ipaddress.ip_network(f"198.18.{self.subnet}.0/24")
        self.net6 = ipaddress.ip_network(f"2001:2:0:{self.subnet:x}::/64")
        self.memory_mib = memory_mib
        self.mtu = mtu
        self.accel = accelerator()
        self.vms = []
        self.host_ports = []
        self.log_dir = Path(os.environ.get("XROCE_INTEROP_LOGS", f"/tmp/{self.ns}"))
        self._stack = ExitStack()

    def __enter__(self) -> "Lab":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        remove_stale_namespaces()
        self.image = build_image(self.deb)
        try:
            self._make_namespace()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # A failure with a guest that no longer answers is said as such (and main_wrapper runs
        # the test once more); asked before the teardown stops the VMs.
        silent = []
        if exc_type is not None and not issubclass(exc_type, (Skip, KeyboardInterrupt)):
            silent = [vm for vm in self.vms if vm._marker_seen and not vm.answers()]
        for vm in silent:
            tail = "\n".join(vm.console_lines[-10:])
            log(f"{vm.name}: the guest does not answer its agent (20 s) after the failure; "
                f"console ({vm.console_path}) ends with:\n{tail}")
        self._stack.close()
        # Console logs and captures stay for a failed run (and when XROCE_INTEROP_KEEP=1).
        if exc_type is None and os.environ.get("XROCE_INTEROP_KEEP") != "1":
            shutil.rmtree(self.log_dir, ignore_errors=True)
        elif exc_type is not None:
            log(f"logs and captures kept in {self.log_dir}")
        if silent:
            names = ", ".join(vm.name for vm in silent)
            raise GuestUnresponsive(f"guest {names} stopped answering; the failure before: "
                                    f"{exc_type.__name__}: {exc}") from exc

    def _make_namespace(self) -> None:
        sh("ip", "netns", "add", self.ns)
        self._stack.callback(self._delete_namespace)
        ipn = ("ip", "-n", self.ns)
        sh(*ipn, "link", "set", "lo", "up")
        sh(*ipn, "link", "add", "br0", "type", "bridge", "stp_state", "0")
        sh(*ipn, "addr", "add", f"{self.net4.network_address + 1}/{self.net4.prefixlen}",
           "dev", "br0")
        sh(*ipn, "-6", "addr", "add", f"{self.net6.network_address + 1}/{self.net6.prefixlen}",
           "dev", "br0", "nodad")
        sh(*ipn, "link", "set", "br0", "mtu", self.mtu, "up")

    def _delete_namespace(self) -> None:
        for vm in self.vms:
            vm.stop()
        _kill_namespace_pids(self.ns)  # nothing we started may outlive the namespace
        sh("ip", "netns", "del", self.ns, check=False)

    def add_vm(self, name: str, kernel_args: str = "") -> Vm:
        """A VM on the bridge; `kernel_args` go to its /init (e.g. xroce.rxe=0)."""
        vm = Vm(self, name, len(self.vms), kernel_args)
        ipn = ("ip", "-n", self.ns)
        sh(*ipn, "tuntap", "add", "dev", vm.tap, "mode", "tap")
        sh(*ipn, "link", "set", vm.tap, "master", "br0", "mtu", self.mtu, "up")
        self.vms.append(vm)
        return vm

    def boot_all(self, timeout_s: float = 120) -> None:
        """Starts every VM not yet started, and waits until all are ready."""
        for vm in self.vms:
            if vm._proc is None:
                vm.start()
                self._stack.callback(vm.stop)
        deadline = time.monotonic() + timeout_s
        for vm in self.vms:
            vm.wait_ready(max(0.0, deadline - time.monotonic()))

    def add_host_port(self, name: str = "h0") -> HostPort:
        """A veth from the bridge into a new namespace <lab ns>-<name>, addressed and up."""
        index = len(self.host_ports)
        port = HostPort(ns=f"{self.ns}-{name}", ip4=str(self.net4.network_address + 2 + index),
                        ip6=str(self.net6.network_address + 2 + index), bridge_end=f"v{name}")
        sh("ip", "netns", "add", port.ns)
        self._stack.callback(sh, "ip", "netns", "del", port.ns, check=False)
        self._stack.callback(_kill_namespace_pids, port.ns)
        sh("ip", "-n", self.ns, "link", "add", port.bridge_end, "mtu", self.mtu, "type", "veth",
           "peer", "name", port.ifname, "netns", port.ns)
        sh("ip", "-n", self.ns, "link", "set", port.bridge_end, "master", "br0", "up")
        ipn = ("ip", "-n", port.ns)
        sh(*ipn, "link", "set", "lo", "up")
        sh(*ipn, "addr", "add", f"{port.ip4}/{self.net4.prefixlen}", "dev", port.ifname)
        sh(*ipn, "-6", "addr", "add", f"{port.ip6}/{self.net6.prefixlen}", "dev", port.ifname,
           "nodad")
        sh(*ipn, "link", "set", port.ifname, "mtu", self.mtu, "up")
        self.host_ports.append(port)
        return port

    def set_mtu(self, mtu: int) -> None:
        """Sets the MTU of the bridge, every tap and every guest's eth0 (rxe follows eth0)."""
        for dev in ["br0"] + [vm.tap for vm in self.vms]:
            sh("ip", "-n", self.ns, "link", "set", "dev", dev, "mtu", mtu)
        for vm in self.vms:
            vm.check(f"ip link set dev eth0 mtu {mtu}")
        for port in self.host_ports:
            sh("ip", "-n", self.ns, "link", "set", "dev", port.bridge_end, "mtu", mtu)
            sh("ip", "-n", port.ns, "link", "set", "dev", port.ifname, "mtu", mtu)
        self.mtu = mtu

    def capture(self, interface: str, name: str) -> Capture:
        cap = Capture(self, interface, self.log_dir / f"{name}.pcap")
        self._stack.callback(cap.stop)
        return cap


def main_wrapper(test) -> int:
    """Runs test(); maps Skip to ctest's skip code and prints failures. A run that failed with
    a guest that stopped answering (GuestUnresponsive) is run once more from the start, and
    the result line says so: a frozen emulated VM says nothing of xroce, a second failure
    does."""
    retried = ""
    for attempt in (1, 2):
        try:
            test()
        except Skip as e:
            print(f"SKIP: {e}", flush=True)
            return SKIP_RETURN_CODE
        except GuestUnresponsive as e:
            if attempt == 1:
                retried = f" (on a second run: the first ended with {e})"
                log(f"RETRY: {e}; running the test once more")
                continue
            print(f"FAILED: {type(e).__name__}: {e}; the first run ended the same way", flush=True)
            return 1
        except Exception as e:  # a failed check: say what and where, then fail the test
            print(f"FAILED: {type(e).__name__}: {e}{retried}", flush=True)
            return 1
        break
    print(f"PASSED{retried}", flush=True)
    return 0
