"""rdma-core's pyverbs suite against one xroce device, as a user runs it.

    pyverbs_suite.py XROCE_BIN WORK_DIR --port afxdp|udp [--test-timeout S] [--only SUBSTR]

Makes a network namespace with a veth pair (198.18.0.0/15 and 2001:2::/48 addresses on one
end), adds an xroce device on it with the given port kind, copies the suite Debian ships
(python3-pyverbs: /usr/share/doc/rdma-core/tests, gzipped) into WORK_DIR and runs every test
of its vendor-neutral modules with `xroce exec -- /usr/bin/python3` against that device.

Each test has a deadline (--test-timeout): a test that outlives it is reported as a hang, the
child is killed and the run goes on with the next test, so no hang stalls the run. Every skip
is printed with its reason and classified:
  device - the device says it lacks the capability (the verb failed with EOPNOTSUPP, or the
           capability is absent from ibv_query_device(_ex)/ibv_query_port): allowed;
  host   - this machine lacks something outside the device (no GPU, no huge pages): allowed,
           listed apart;
  limit  - a known limit of a user-space device: the test reads a kernel-only path (below):
           allowed, listed apart;
  other  - anything else: counted as a failure (a skip must be explained).
Exit status 0 only with no failure, error, hang or unexplained skip; 77 when the machine
cannot run it (not root).
"""

import argparse
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "interop"))
from peers import XroceHost  # noqa: E402  one device in one namespace, ACTIVE-waited
from vm import _die_with_parent, log, sh  # noqa: E402

SKIP_RETURN_CODE = 77
PYTHON = "/usr/bin/python3"  # Debian's, which owns python3-pyverbs
CHILD = HERE / "pyverbs_child.py"
NS_PREFIX = "xv-pyv"

# Skip reasons (the suite's own messages) that mean the device reported the capability absent:
# a verb failed with EOPNOTSUPP, or ibv_query_device(_ex) / ibv_query_port lacks the bit.
DEVICE_SKIPS = [
    r"not supported", r"No ODP caps", r"Operation not supported", r"is unavailable",
]
# Skip reasons about this machine rather than the device.
HOST_SKIPS = [
    r"cuda-python .* must be installed",            # test_cuda_dmabuf: no CUDA
    r"Allocating dmabuf is not supported by /dev/dri",  # test_mr DmaBufMR: no GPU render node
    r"There are no huge pages of size 2M allocated",     # nr_hugepages is 0 on this host
]


# Skip reasons that come from a limit of this project rather than of the device (none today:
# the rdmacm tests, which find the device's netdev under /sys/class/infiniband/DEV/device/net,
# run since libxroce-preload.so serves that path from the daemon's tree).
LIMIT_SKIPS: list = []


def classify_skip(reason: str) -> str:
    if any(re.search(p, reason) for p in HOST_SKIPS):
        return "host"
    if any(re.search(p, reason) for p in LIMIT_SKIPS):
        return "limit"
    if any(re.search(p, reason) for p in DEVICE_SKIPS):
        return "device"
    return "other"


class Namespace:
    """A throwaway namespace with veth pv0/pv1 (both up) and addresses on pv0."""

    def __init__(self, port: str):
        self.name = f"{NS_PREFIX}-{port}-{os.getpid()}"
        self.ifname = "pv0"

    def __enter__(self):
        self._remove_stale()
        sh("ip", "netns", "add", self.name)
        for cmd in (["link", "add", "pv0", "type", "veth", "peer", "name", "pv1"],
                    ["addr", "add", "198.18.40.1/24", "dev", "pv0"],
                    ["addr", "add", "2001:2:0:40::1/64", "dev", "pv0", "nodad"],
                    ["link", "set", "pv0", "up"], ["link", "set", "pv1", "up"],
                    ["link", "set", "lo", "up"]):
            sh("ip", "-n", self.name, *cmd)
        return self

    def __exit__(self, *exc):
        sh("ip", "netns", "del", self.name, check=False)

    @staticmethod
    def _remove_stale():
        """Namespaces of runs killed before they could clean up (their pid is gone)."""
        for line in sh("ip", "netns", "list", check=False).stdout.splitlines():
            m = re.match(rf"({NS_PREFIX}-\w+-(\d+))\b", line)
            if m and not Path(f"/proc/{m.group(2)}").exists():
                sh("ip", "netns", "del", m.group(1), check=False)


class Outcome:
    def __init__(self):
        self.results = {}  # id -> (kind, detail)
        self.order = []

    def record(self, test_id, kind, detail=""):
        if test_id not in self.results:
            self.order.append(test_id)
        self.results[test_id] = (kind, detail)


def run_tests(host: XroceHost, suite: Path, ids: list, timeout_s: float, out: Outcome) -> None:
    """Runs ids in one child; on a hang or a crash, restarts it after the offending test."""
    remaining = list(ids)
    while remaining:
        argv = ["ip", "netns", "exec", host.ns, str(host.xroce), "exec", "--", PYTHON,
                str(CHILD), "run", str(suite), host.device, *remaining]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent,
                                start_new_session=True)
        current, culprit, detail = None, None, []
        deadline = time.monotonic() + timeout_s
        buf = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                culprit = current or remaining[0]
                out.record(culprit, "hang", f"still running after {timeout_s:.0f} s; killed")
                break
            ready, _, _ = select.select([proc.stdout], [], [], left)
            if not ready:
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                rc = proc.wait()
                if current is not None or remaining:
                    # Died inside a test, or between tests: blame the test it was in or about
                    # to start, so the run goes on after it rather than loop.
                    culprit = current or remaining[0]
                    out.record(culprit, "error",
                               f"the test process exited with status {rc}\n" + "\n".join(detail))
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                line = raw.decode(errors="replace")
                print(line, flush=True)
                if line.startswith("@@start "):
                    current, detail = line.split(" ", 1)[1], []
                    deadline = time.monotonic() + timeout_s
                elif line.startswith("@@| "):
                    detail.append(line[4:])
                    if current is None and out.order:
                        kind, text = out.results[out.order[-1]]
                        out.results[out.order[-1]] = (kind, text + line[4:] + "\n")
                elif line.startswith("@@"):
                    kind, _, rest = line[2:].partition(" ")
                    test_id, _, reason = rest.partition(" ")
                    out.record(test_id, kind, reason)
                    if test_id in remaining:
                        remaining.remove(test_id)
                    current = None
        proc.stdout.close()
        if culprit is not None and culprit in remaining:
            remaining.remove(culprit)


def summarise(out: Outcome, port: str) -> bool:
    counts = {}
    skips = {"device": [], "host": [], "limit": [], "other": []}
    bad = []
    for test_id in out.order:
        kind, detail = out.results[test_id]
        counts[kind] = counts.get(kind, 0) + 1
        if kind == "skip":
            skips[classify_skip(detail)].append((test_id, detail))
        elif kind != "pass":
            bad.append((test_id, kind, detail))
    print(f"\n=== pyverbs on the {port} port: skips and their reasons")
    for cls in ("device", "host", "limit", "other"):
        for test_id, reason in skips[cls]:
            print(f"skip[{cls}] {test_id}: {reason}")
    for test_id, kind, detail in bad:
        print(f"\n{kind.upper()} {test_id}\n{detail}")
    unexplained = len(skips["other"])
    total = len(out.order)
    print(f"\npyverbs {port}: {total} tests: {counts.get('pass', 0)} passed, "
          f"{counts.get('skip', 0)} skipped ({len(skips['device'])} device lacks the "
          f"capability, {len(skips['host'])} host, {len(skips['limit'])} limit, "
          f"{unexplained} unexplained), "
          f"{counts.get('fail', 0)} failed, {counts.get('error', 0)} errors, "
          f"{counts.get('hang', 0)} hangs")
    return not bad and unexplained == 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("xroce")
    ap.add_argument("work")
    ap.add_argument("--port", choices=["afxdp", "udp"], required=True)
    ap.add_argument("--test-timeout", type=float, default=60)
    ap.add_argument("--only", action="append", default=[],
                    help="run only test ids containing this (repeatable)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("SKIP: needs root (network namespaces, XDP)")
        return SKIP_RETURN_CODE
    work = Path(args.work).resolve()
    suite = work / "tests"
    sh(PYTHON, CHILD, "prepare", suite)
    out = Outcome()
    with Namespace(args.port) as ns:
        with XroceHost(Path(args.xroce), ns.name, ns.ifname, "198.18.40.1", device="xpv0",
                       port=args.port) as host:
            listed = sh("ip", "netns", "exec", ns.name, args.xroce, "exec", "--", PYTHON,
                        CHILD, "list", suite, host.device, timeout=120).stdout.split()
            ids = [i for i in listed if i.startswith("tests.")]
            if args.only:
                ids = [i for i in ids if any(s in i for s in args.only)]
            log(f"{len(ids)} tests of the vendor-neutral modules on {host.device} "
                f"(port {args.port}), {args.test_timeout:.0f} s each at most")
            run_tests(host, suite, ids, args.test_timeout, out)
    return 0 if summarise(out, args.port) else 1


if __name__ == "__main__":
    sys.exit(main())
