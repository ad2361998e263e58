#!/usr/bin/python3
"""The Debian package on a test host: installed with apt, used by an unmodified verbs program,
removed with nothing left behind.

The test host is this machine's own root filesystem seen through an overlay in a private mount
namespace: the lower layer is / read-only, every write (dpkg's, the daemon's) lands in an upper
layer in a directory of the test's own, and /run, /dev and /tmp are fresh tmpfs. So the package installs exactly as on a
Debian 12 host with the build's dependencies (nothing is downloaded), while nothing outside the
test sees it: on a CI machine shared with other jobs, a provider in the system's libibverbs
directory and a driver file in /etc/libibverbs.d would change what every other verbs program
loads, and a removal that fails half-way would leave the machine changed. The upper layer is
also the record of every file the package's life touched: after `dpkg -r` it may hold only
dpkg's and apt's own bookkeeping.

Steps: `apt-get install ./xroce_*.deb`; the files are where rdma-core, man and systemd look;
`systemd-analyze verify` on the units; in two network namespaces joined by a veth, `xroce up`
(the installed one) prints the variables and an unmodified `ibv_rc_pingpong -c` (buffers
checked) runs with exactly those, the provider found through /etc/libibverbs.d; then
`dpkg -r xroce` with both devices up: afterwards no daemon, no device node, no run directory,
no XDP program, no package file, nothing in the upper layer beyond dpkg's records.

Usage: test_deb.py DEB|DIR   (as root; DIR holds one xroce_*.deb; exits 77 when this machine
cannot run it)
"""

import ctypes
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SKIP = 77
_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1

# What installing and removing a package may leave in the upper layer: dpkg's and apt's records
# and logs, and the caches their triggers (ldconfig, man-db) rebuild.
BOOKKEEPING = ("var/lib/dpkg/", "var/log/", "var/cache/apt/", "var/lib/apt/", "var/cache/man/",
               "var/cache/ldconfig/", "var/cache/debconf/")
EXPECTED_FILES = [
    "/usr/bin/xroce", "/usr/sbin/xroced", "/usr/bin/xroce-switch",
    "/usr/lib/x86_64-linux-gnu/libibverbs/libxroce-rdmav34.so",
    "/etc/libibverbs.d/xroce.driver",
    "/usr/lib/x86_64-linux-gnu/libxroce-preload.so",
    "/usr/share/man/man8/xroce.8.gz", "/usr/share/man/man8/xroced.8.gz",
    "/usr/share/bash-completion/completions/xroce",
    "/lib/systemd/system/xroce@.service", "/lib/systemd/system/xroced.service",
    "/lib/systemd/system/xroce.slice",
]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _die_with_parent() -> None:
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def sh(*cmd, check=True, timeout=120, env=None) -> subprocess.CompletedProcess:
    p = subprocess.run(list(map(str, cmd)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=timeout, env=env)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {p.returncode}:\n{p.stdout}")
    return p


class TestHost:
    """The overlay root in a private mount namespace, held open by a sleeping process."""

    def __init__(self, tag: str):
        self.tag = tag
        self.base = Path(tempfile.mkdtemp(prefix=f"{tag}-"))
        self.root = self.base / "root"
        self.upper = self.base / "upper"
        # Upper and work layers in a directory of the test's own (the test reads the upper layer
        # directly); the overlay mount itself exists only in the private mount namespace.
        for d in (self.upper, self.base / "work", self.root):
            d.mkdir()
        setup = f"""
set -e
mount -t overlay overlay -o lowerdir=/,upperdir={self.upper},workdir={self.base}/work {self.root}
mount -t proc proc {self.root}/proc
for d in run tmp dev; do mount -t tmpfs -o mode=755 xrpkg-$d {self.root}/$d; done
chmod 1777 {self.root}/tmp
cd {self.root}/dev
mknod -m 666 null c 1 3; mknod -m 666 zero c 1 5; mknod -m 666 full c 1 7
mknod -m 666 random c 1 8; mknod -m 666 urandom c 1 9; mknod -m 666 tty c 5 0
mkdir shm pts; mount -t tmpfs -o mode=1777 xrpkg-shm shm
mount -t devpts -o newinstance,ptmxmode=0666 xrpkg-pts pts; ln -s pts/ptmx ptmx
ln -s /proc/self/fd fd; ln -s fd/0 stdin; ln -s fd/1 stdout; ln -s fd/2 stderr
echo ready
exec sleep 100000
"""
        self.holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh",
                                        "-c", setup], stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True,
                                       preexec_fn=_die_with_parent)
        line = self.holder.stdout.readline().strip()
        if line != "ready":
            rest = self.holder.stdout.read() if self.holder.poll() is not None else ""
            self.close()
            raise AssertionError(f"the overlay test host did not come up: {line}\n{rest}")

    def argv(self, command: str, netns: str = None, env=None) -> list:
        """`command` (sh) in the chroot, in network namespace `netns` with a /sys of its own,
        with only PATH, HOME and `env` in its environment."""
        enter = ["nsenter", f"--mount=/proc/{self.holder.pid}/ns/mnt"]
        if netns:
            enter.append(f"--net=/run/netns/{netns}")
        assignments = " ".join(shlex.quote(f"{k}={v}") for k, v in (env or {}).items())
        inner = (f"mount -t sysfs sysfs {self.root}/sys && "
                 f"mount -t bpf bpf {self.root}/sys/fs/bpf && "
                 f"exec chroot {self.root} /usr/bin/env -i "
                 f"PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root {assignments} sh -c \"$0\"")
        return [*enter, "unshare", "--mount", "sh", "-c", inner, command]

    def run(self, command: str, netns: str = None, check=True, timeout=120, env=None):
        return sh(*self.argv(command, netns, env), check=check, timeout=timeout)

    def popen(self, command: str, netns: str = None, env=None) -> subprocess.Popen:
        return subprocess.Popen(self.argv(command, netns, env), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, preexec_fn=_die_with_parent)

    def close(self) -> None:
        if self.holder.poll() is None:
            self.holder.kill()
            self.holder.wait()
        # The overlay and the tmpfs mounts lived in the holder's mount namespace: gone with it.
        shutil.rmtree(self.base, ignore_errors=True)


class Namespaces:
    """Two network namespaces joined by a veth, 198.18.<subnet>.1 and .2."""

    def __init__(self, tag: str):
        self.names = [f"{tag}-a", f"{tag}-b"]
        self.subnet = 20 + os.getpid() % 200
        for n in self.names:
            sh("ip", "netns", "add", n)
        sh("ip", "link", "add", "pk0", "netns", self.names[0], "type", "veth", "peer", "name",
           "pk1", "netns", self.names[1])
        for i, n in enumerate(self.names):
            sh("ip", "-n", n, "addr", "add", f"{self.ip(i)}/24", "dev", f"pk{i}")
            sh("ip", "-n", n, "link", "set", f"pk{i}", "up")
            sh("ip", "-n", n, "link", "set", "lo", "up")

    def ip(self, i: int) -> str:
        return f"198.18.{self.subnet}.{i + 1}"

    def close(self) -> None:
        for n in self.names:
            pids = sh("ip", "netns", "pids", n, check=False).stdout.split()
            for pid in pids:  # only processes in our own namespaces
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            sh("ip", "netns", "del", n, check=False)


def parse_exports(text: str) -> dict:
    return dict(re.findall(r"^export ([A-Z_]+)='([^']*)'$", text, re.MULTILINE))


def daemon_pids(host: TestHost) -> list:
    out = host.run("cat /run/xroce/ns-*/xroced.lock 2>/dev/null || true").stdout
    return [int(p) for p in out.split()]


def upper_leftovers(upper: Path, baseline_cache: bytes) -> list:
    """Files (not directories) in the upper layer outside dpkg's and apt's bookkeeping; a
    whiteout (a character device 0:0) is a host file that was deleted. The library cache must
    be back to its baseline."""
    found = []
    for path in sorted(upper.rglob("*")) if upper.exists() else []:
        rel = path.relative_to(upper).as_posix()
        if path.is_dir() and not path.is_symlink():
            continue
        if rel.startswith(BOOKKEEPING):
            continue
        if rel == "etc/ld.so.cache":
            if path.read_bytes() != baseline_cache:
                found.append(f"{rel} (differs from before the installation)")
            continue
        st = path.lstat()
        whiteout = (st.st_mode & 0o170000) == 0o020000 and st.st_rdev == 0
        found.append(f"{rel} (deleted from the host)" if whiteout else rel)
    return found


def test(deb: Path) -> None:
    tag = f"xrpkg-{os.getpid()}"
    host = TestHost(tag)
    nets = None
    try:
        # The baseline for "nothing left": the library cache as ldconfig writes it for this
        # host's libraries (the host's own copy may be older than its libraries).
        host.run("ldconfig")
        baseline_cache = (host.upper / "etc/ld.so.cache").read_bytes()
        host_deb = f"/tmp/{deb.name}"
        sh("nsenter", f"--mount=/proc/{host.holder.pid}/ns/mnt", "cp", deb,
           f"{host.root}{host_deb}")
        started = time.monotonic()
        r = host.run(f"DEBIAN_FRONTEND=noninteractive apt-get install -y {host_deb}",
                     timeout=300)
        log(f"apt-get install {deb.name}: {time.monotonic() - started:.1f} s; "
            f"{r.stdout.strip().splitlines()[-1]}")
        status = host.run("dpkg-query -W -f='${Status} ${Version}' xroce").stdout
        assert status.startswith("install ok installed"), status
        listed = host.run("dpkg -L xroce").stdout.split()
        for f in EXPECTED_FILES:
            assert f in listed, f"{f} is not in the package:\n{' '.join(listed)}"
        host.run(" && ".join(f"test -e {f}" for f in EXPECTED_FILES))
        assert "xroce.driver" in host.run("ls /etc/libibverbs.d").stdout
        host.run("dpkg-query -W -f='${Conffiles}' xroce | grep -q . && exit 1 || exit 0")
        man = host.run("man -w xroce xroced").stdout.split()
        assert man == ["/usr/share/man/man8/xroce.8.gz", "/usr/share/man/man8/xroced.8.gz"], man
        verify = host.run("systemd-analyze verify /lib/systemd/system/xroced.service "
                          "/lib/systemd/system/xroce@.service /lib/systemd/system/xroce.slice "
                          "2>&1", check=False)
        assert verify.returncode == 0, f"systemd-analyze verify:\n{verify.stdout}"
        log(f"installed: {status}; {len(listed)} paths; man pages and units check out")

        nets = Namespaces(tag)
        envs = []
        for i, ns in enumerate(nets.names):
            up = host.run(f"xroce up pk{i}", netns=ns, timeout=60)
            env = parse_exports(up.stdout)
            assert env.get("XROCE_DEVICE") == f"xroce_pk{i}", up.stdout
            # Installed: the provider comes from /etc/libibverbs.d, not RDMAV_DRIVERS.
            assert "RDMAV_DRIVERS" not in env, env
            assert env.get("LD_PRELOAD") == "/usr/lib/x86_64-linux-gnu/libxroce-preload.so", env
            envs.append(env)
        devices = host.run("ibv_devices", netns=nets.names[0], env=envs[0]).stdout
        assert "xroce_pk0" in devices, devices

        pingpong = "ibv_rc_pingpong -d {dev} -g 0 -c -n 100 -s 65536"
        server = host.popen(pingpong.format(dev="xroce_pk0"), netns=nets.names[0], env=envs[0])
        deadline = time.monotonic() + 20
        while ":18515" not in sh("ip", "netns", "exec", nets.names[0], "ss", "-ltnH").stdout:
            assert time.monotonic() < deadline and server.poll() is None, \
                f"ibv_rc_pingpong server did not listen: {server.stdout.read()}"
            time.sleep(0.02)  # polling a condition with a deadline
        client = host.run(pingpong.format(dev="xroce_pk1") + f" {nets.ip(0)}",
                          netns=nets.names[1], env=envs[1], timeout=120, check=False)
        server_out, _ = server.communicate(timeout=60)
        assert client.returncode == 0 and server.returncode == 0, \
            f"ibv_rc_pingpong: client {client.returncode}:\n{client.stdout}\n" \
            f"server {server.returncode}:\n{server_out}"
        assert "100 iters in" in client.stdout, client.stdout
        log(f"unmodified ibv_rc_pingpong -c over the installed package: "
            f"{client.stdout.strip().splitlines()[-1]}")

        pids = daemon_pids(host)
        assert len(pids) == 2, f"two daemons expected, lock files say {pids}"
        nodes = host.run("ls /dev/infiniband").stdout.split()
        assert len(nodes) == 2, nodes
        r = host.run("dpkg -r xroce", timeout=120)
        log(f"dpkg -r xroce with both devices up: {r.stdout.strip().splitlines()[-1]}")

        # Nothing left.
        gone_deadline = time.monotonic() + 10
        alive = pids
        while alive and time.monotonic() < gone_deadline:
            alive = [p for p in pids if Path(f"/proc/{p}").exists()]
            time.sleep(0.05)  # polling a condition with a deadline
        assert not alive, f"xroced {alive} outlived dpkg -r"
        # dpkg keeps a removed package that has a postrm as "config-files" (its postrm waits for
        # a purge) even with no conffiles: its records, nothing on the host's filesystem.
        state = host.run("dpkg-query -W -f='${Status}' xroce 2>&1 || true").stdout
        assert state in ("deinstall ok config-files", "unknown ok not-installed") or \
            "no packages found" in state, state
        left = host.run("ls -A /run; ls -A /dev/infiniband 2>/dev/null || true").stdout.split()
        assert "xroce" not in left and not any(x.startswith("uverbs") for x in left), left
        for i, ns in enumerate(nets.names):
            link = sh("ip", "-n", ns, "-d", "link", "show", f"pk{i}").stdout
            assert "xdp" not in link, f"an XDP program is still on pk{i}:\n{link}"
        host.run(" && ".join(f"test ! -e {f}" for f in EXPECTED_FILES))
        leftovers = upper_leftovers(host.upper, baseline_cache)
        assert not leftovers, f"files left on the test host after dpkg -r: {leftovers}"
        records = sum(1 for f in host.upper.rglob("*") if not f.is_dir())
        log(f"removed: no daemon, device node, run directory, XDP program or package file left; "
            f"the upper layer holds {records} files, all dpkg's, apt's and their triggers' "
            f"records")
    finally:
        if nets:
            nets.close()
        host.close()


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    if os.geteuid() != 0:
        print("SKIP: needs root (mount namespace, overlay, network namespaces)")
        return SKIP
    deb = Path(sys.argv[1]).resolve()
    if deb.is_dir():
        found = sorted(deb.glob("xroce_*.deb"))
        deb = found[-1] if len(found) == 1 else deb / "xroce_*.deb (exactly one)"
    if not deb.is_file():
        print(f"FAILED: {deb} does not exist (packaging/build-deb makes it)")
        return 1
    try:
        test(deb)
    except AssertionError as e:
        print(f"FAILED: {e}", flush=True)
        return 1
    print("PASSED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
