#!/usr/bin/python3
"""Connection setup through rdma_cm, xroce beside the kernel's rxe: `cmtime -c N` per step.

Four pairs on one bridge, each timed with rdmacm-utils' cmtime (its client's "us / conn"
column, per step: create id, resolve addr, resolve route, create qp, connect, disconnect,
destroy):

  xroce-xroce  two xroce devices, each in its own host namespace (xroce's CM at both ends)
  rxe-rxe      client and server inside the interop VM on rxe0 (the kernel's CM at both ends)
  xroce->rxe   xroce's client against the kernel's server
  rxe->xroce   the kernel's client against xroce's server

The VM is emulated (qemu without KVM), so its absolute times mean little: the figure to read is
the ratio of each pair's time to rxe-rxe's, per step, printed last (and in --json's output).
Needs root and the interop image (tests/interop/build-image, as ci/test builds it).

Usage: bench-cmtime.py XROCE [--connections N] [--port afxdp|udp] [--json FILE]
"""

import argparse
import json
import re
import sys
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "interop"))
from peers import RxeGuest, XroceHost, wait_cm_listener  # noqa: E402
from vm import Lab, log, main_wrapper  # noqa: E402

STEPS = ("create id", "resolve addr", "resolve route", "create qp", "connect", "disconnect",
         "destroy")
FIRST_PORT = 7480


def parse_cmtime(output: str) -> dict:
    """{step: us per connection} from cmtime's table (rdma-core 44: 'step : total ms  max ms
    min us  us / conn')."""
    per_conn = {}
    for step in STEPS:
        m = re.search(rf"^{step}\s*:\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s*$", output,
                      re.MULTILINE)
        if not m:
            raise AssertionError(f"cmtime printed no '{step}' row:\n{output}")
        per_conn[step] = float(m.group(1))
    return per_conn


def cmtime(server, client, server_ip: str, port: int, connections: int) -> dict:
    srv = server.start_command(f"cmtime -b {server_ip} -p {port} -c {connections}")
    wait_cm_listener(server, port)  # cmtime's client takes a REJ for a port not yet bound
    cli = client.run(f"cmtime -s {server_ip} -p {port} -c {connections}", 1800)
    # cmtime's server serves until it is stopped.
    if isinstance(server, XroceHost):
        srv.kill()
    else:
        server.vm.run("kill $(pidof cmtime)", 30)
    srv.wait(60)
    if not cli.ok:
        raise AssertionError(f"cmtime {client.name} -> {server.name}: client rc {cli.rc}:\n"
                             f"{cli.output}")
    return parse_cmtime(cli.output)


def bench(xroce: Path, connections: int, port_kind: str, json_path) -> None:
    results = {}
    with Lab("xcmt", memory_mib=512) as lab, ExitStack() as devices:
        vm = lab.add_vm("a")
        hx, hy = lab.add_host_port("x"), lab.add_host_port("y")
        lab.boot_all()
        vm.add_rxe()
        rxe = RxeGuest(vm)
        xa = devices.enter_context(XroceHost(xroce, hx.ns, hx.ifname, hx.ip4, "xcm0", port_kind))
        xb = devices.enter_context(XroceHost(xroce, hy.ns, hy.ifname, hy.ip4, "xcm1", port_kind))
        pairs = (("xroce-xroce", xa, xb, xa.ip4), ("rxe-rxe", rxe, rxe, rxe.ip4),
                 ("xroce->rxe", rxe, xa, rxe.ip4), ("rxe->xroce", xa, rxe, xa.ip4))
        for i, (name, server, client, ip) in enumerate(pairs):
            started = time.monotonic()
            results[name] = cmtime(server, client, ip, FIRST_PORT + i, connections)
            log(f"{name}: cmtime -c {connections} in {time.monotonic() - started:.1f} s: "
                f"{results[name]}")
    base = results["rxe-rxe"]
    ratios = {name: {s: (r[s] / base[s] if base[s] else None) for s in STEPS}
              for name, r in results.items()}
    print(f"\ncmtime -c {connections}, us per connection ({port_kind} port; the VM is emulated):")
    print(f"{'step':<14}" + "".join(f"{n:>14}" for n in results))
    for s in STEPS:
        print(f"{s:<14}" + "".join(f"{results[n][s]:>14.1f}" for n in results))
    print("\nratio to rxe-rxe (below 1: faster than the kernel's CM on rxe in the VM):")
    for s in STEPS:
        print(f"{s:<14}" + "".join(
            f"{ratios[n][s]:>14.2f}" if ratios[n][s] is not None else f"{'-':>14}"
            for n in results))
    if json_path:
        Path(json_path).write_text(json.dumps({"connections": connections, "port": port_kind,
                                               "us_per_conn": results, "ratio_to_rxe": ratios},
                                              indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("xroce", type=Path)
    parser.add_argument("--connections", "-c", type=int, default=1000)
    parser.add_argument("--port", default="afxdp", choices=("afxdp", "udp"))
    parser.add_argument("--json")
    args = parser.parse_args()
    sys.exit(main_wrapper(lambda: bench(args.xroce, args.connections, args.port, args.json)))
