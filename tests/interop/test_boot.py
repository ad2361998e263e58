#!/usr/bin/python3
"""interop (a): the VM boots, rxe0 becomes ACTIVE, and `ibv_devinfo -v` in the guest lists the
RoCE v2 GID of the guest's IPv4 address (GID 1, ::ffff:a.b.c.d) and of its global IPv6 one; a
host-side port (where xroce will run) reaches the guest over both."""

import sys
import time

from vm import Lab, log, main_wrapper


def test() -> None:
    started = time.monotonic()
    with Lab("boot") as lab:
        vm = lab.add_vm("a")
        lab.boot_all()
        vm.add_rxe()
        link = vm.check("rdma link show rxe0/1")
        log(f"a: {link.strip()}")
        if "netdev eth0" not in link:
            raise AssertionError(f"rxe0 is not bound to eth0: {link}")

        devinfo = vm.check("ibv_devinfo -v -d rxe0")
        for needed in ("transport:\t\t\tInfiniBand", "PORT_ACTIVE", "link_layer:\t\tEthernet"):
            if needed not in devinfo:
                raise AssertionError(f"ibv_devinfo lacks {needed!r}:\n{devinfo}")
        gids = vm.gid_table()
        log(f"a: GID table {gids}")
        mapped_v4 = f"::ffff:{vm.ip4}"
        if gids.get(1) != (mapped_v4, "RoCE v2"):
            raise AssertionError(f"GID 1 is {gids.get(1)}, expected ({mapped_v4}, RoCE v2):\n"
                                 f"{devinfo}")
        if (vm.ip6, "RoCE v2") not in gids.values():
            raise AssertionError(f"no RoCE v2 GID for {vm.ip6}: {gids}")
        # The guest's own view of its address, to rule out a GID copied from the wrong netdev.
        addr = vm.check("ip -4 -o addr show dev eth0")
        if f"inet {vm.ip4}/" not in addr:
            raise AssertionError(f"eth0 does not carry {vm.ip4}: {addr}")

        # The host-side port where xroce will meet rxe reaches the guest over IPv4 and IPv6.
        host = lab.add_host_port()
        for address in (vm.ip4, vm.ip6):
            r = host.run(f"ping -c 1 -W 10 {address}")
            if r.returncode != 0:
                raise AssertionError(f"{host.ns} cannot reach {address}: {r.stdout}")
        vm.check(f"ping -c 1 -W 10 {host.ip4}")
        log(f"host port {host.ns} ({host.ip4}, {host.ip6}) reaches the guest and back")
    log(f"boot test took {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    sys.exit(main_wrapper(test))
