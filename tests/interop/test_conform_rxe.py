#!/usr/bin/python3
"""interop: `xroce conform` against the Linux kernel's Soft-RoCE (rxe) in a VM.

One VM boots with rxe0 on its eth0 (netdev MTU 1500: rxe's active MTU is 1024);
xroce-conform-agent (tools/conform/agent, a C program built against Debian 12's libibverbs, as
xri_verbs is) is copied into the guest and serves rxe0; the scripted peer runs in a host
namespace on the lab's bridge (`xroce conform --dev eth0`: an AF_PACKET socket, no xroce
device there), over IPv4 or, with --ipv6, over the guest's global IPv6 address.

The test passes when every case ran, the suite reached rxe (at least 100 cases pass), and the
cases rxe fails are exactly the ones docs/conformance-rxe.md explains (RXE_DIFFERENCES below,
which the document lists case by case): a new difference, or one that went away, fails the
test. The JSON report and the capture of every exchange stay in the log folder
(XROCE_INTEROP_KEEP=1 keeps them after a pass too), or go to --out.

Usage: test_conform_rxe.py XROCE AGENT [--ipv6] [--cases GLOB] [--out FILE.json]
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

from peers import RxeGuest
from vm import Lab, log, main_wrapper

VM_AGENT = "/tmp/xroce-conform-agent"
AGENT_PORT = 18516
MIN_PASSES = 100

# The cases rxe fails, each explained (rule, rxe's behaviour, xroce's, verdict) in
# docs/conformance-rxe.md. The same on IPv4 and IPv6 unless the document says otherwise.
RXE_DIFFERENCES = {
    "rc.resp.inv.length.send_only_over_mtu",
    "rc.resp.inv.length.send_first_short",
    "rc.resp.inv.length.send_over_receive",
    "rc.resp.inv.length.read_over_2gib",
    "rc.req.path_mtu_within_port",
    "rc.req.ghost_ack_ahead",
    "rc.req.read_response_resumed",
    "ud.over_mtu_dropped",
}


def run_suite(lab: Lab, host, xroce: Path, peer: str, cases: str, out: Path) -> dict:
    pcap = out.with_suffix(".pcap")
    argv = ["ip", "netns", "exec", host.ns, str(xroce), "conform", "--dev", host.ifname,
            "--peer", peer, "--json", "--pcap", str(pcap)]
    if cases:
        argv += ["--cases", cases]
    log("running " + " ".join(argv))
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=1800)
    if r.returncode not in (0, 1):
        raise AssertionError(f"xroce conform exited {r.returncode}:\n{r.stderr}\n{r.stdout}")
    report = json.loads(r.stdout)
    out.write_text(json.dumps(report, indent=2) + "\n")
    log(f"report {out}, capture {pcap}")
    return report


def test(xroce: Path, agent: Path, ipv6: bool, cases: str, out: Path) -> None:
    with Lab("xcr6" if ipv6 else "xcr4") as lab:
        vm = lab.add_vm("a")
        host = lab.add_host_port("p")
        lab.boot_all()
        vm.add_rxe()
        rxe = RxeGuest(vm)
        address = rxe.ip6 if ipv6 else rxe.ip4
        log(f"rxe0: GID index {rxe.gid_index(address)} is {address}")
        vm.copy_in(agent, VM_AGENT)
        server = rxe.start_command(f"{VM_AGENT} --port {AGENT_PORT} --dev rxe0 --once")
        rxe.wait_listening(AGENT_PORT)
        report = run_suite(lab, host, xroce, address, cases,
                           out or lab.log_dir / f"conform-rxe-ipv{6 if ipv6 else 4}.json")
        agent_result = server.wait(60)
        if not agent_result.ok:
            raise AssertionError(f"the agent in the guest exited {agent_result.rc}:\n"
                                 f"{agent_result.output}")
        s = report["summary"]
        log(f"rxe over IPv{6 if ipv6 else 4}: {s['pass']} pass, {s['fail']} fail, "
            f"{s['not_applicable']} n/a")
        failed = set()
        for c in report["cases"]:
            if c["result"] == "fail":
                failed.add(c["name"])
                log(f"  fail {c['name']}: expected {c['expected']}; seen {c['seen']}")
            elif c["result"] != "pass":
                log(f"  n/a  {c['name']}: {c['why']}")
        if cases:
            return  # a selection: the report is the result
        if s["pass"] < MIN_PASSES:
            raise AssertionError(f"the suite did not reach rxe: {s['pass']} passes")
        if failed != RXE_DIFFERENCES:
            raise AssertionError(
                f"rxe's differences changed (docs/conformance-rxe.md): new "
                f"{sorted(failed - RXE_DIFFERENCES)}, gone {sorted(RXE_DIFFERENCES - failed)}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("xroce", type=Path)
    p.add_argument("agent", type=Path)
    p.add_argument("--ipv6", action="store_true", help="the peer speaks IPv6 to rxe")
    p.add_argument("--cases", default="", help="only these cases (a glob); no verdict")
    p.add_argument("--out", type=Path, default=None, help="where the JSON report goes")
    args = p.parse_args()
    return main_wrapper(lambda: test(args.xroce, args.agent, args.ipv6, args.cases, args.out))


if __name__ == "__main__":
    sys.exit(main())
