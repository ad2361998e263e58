"""Conformance: tshark (Wireshark's dissector) reads every frame of the golden capture as RoCE
and agrees with xroce's own decoder on every BTH and extended-header field, the IP/UDP/VLAN
fields and the ICRC bytes; nothing is malformed and the IPv4 checksums verify. The same holds
for a copy of the golden capture with every frame behind an 802.1ad S-tag and an 802.1Q C-tag
(QinQ, as the XDP program steers it). The real rxe captures (tests/data/captures) are checked
the same way (their RoCE frames only).

tshark 4.0 quirks (docs/protocol.md 1.9): the CNP (0x81) is "Unknown (129)" with its 16 reserved
bytes and the ICRC shown as vendor data; pad bytes are part of "Data". It dissects only the BTH
of FLUSH (0x1C), ATOMIC WRITE (0x1D) and the XRC opcodes (0xA0-0xB7), which it predates: for
those frames the BTH and the IP/UDP/VLAN fields are compared, the rest is xroce's alone
(unit_wire checks those headers byte by byte).

Usage: /usr/bin/python3 tshark_golden.py XROCE_BINARY WORK_DIR CAPTURE_DIR
"""

import json
import os
import struct
import subprocess
import sys

failures = []

# Opcodes tshark 4.0 knows only by their BTH (it shows the rest as data it cannot place).
BTH_ONLY_OPCODES = {0x1C, 0x1D} | set(range(0xA0, 0xB8))


def fail(frame, what):
    failures.append((frame, what))
    if len(failures) <= 400:
        print("FAIL frame %s: %s" % (frame, what))


def hexbytes_to_int(s):
    return int(s.replace(":", ""), 16)


def walk(obj, prefix=""):
    """Yields (key, value) for every nested key of a tshark JSON layer dict."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield k, v
            yield from walk(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from walk(v)


def allowed_expert(info, layers):
    """RFC 8200 wants a UDP checksum over IPv6; rxe sends 0 there too (docs/protocol.md 1.3), and so
    does xroce. Wireshark flags it; it is the one expert note accepted."""
    return "ipv6" in layers and "udp.checksum.zero" in info


def tshark_frames(path):
    # --no-duplicate-keys: two VLAN layers come as a list instead of one hiding the other.
    out = subprocess.run(
        ["tshark", "-o", "ip.check_checksum:TRUE", "-r", path, "-T", "json",
         "--no-duplicate-keys"],
        check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout
    return [p["_source"]["layers"] for p in json.loads(out)]


def xroce_frames(xroce, path):
    out = subprocess.run([xroce, "wire", "decode", "--json", path], check=True,
                         stdout=subprocess.PIPE).stdout
    return json.loads(out)


def expect(n, what, got, want):
    if got != want:
        fail(n, "%s: tshark %r, xroce %r" % (what, got, want))



def check_bth(n, ib, bth):
    t = ib.get("infiniband.bth_tree", {})
    expect(n, "opcode", int(t.get("infiniband.bth.opcode", -1)), bth["opcode"])
    expect(n, "SE", t.get("infiniband.bth.se") == "1", bth["se"])
    expect(n, "M", t.get("infiniband.bth.m") == "1", bth["m"])
    expect(n, "PadCnt", int(t.get("infiniband.bth.padcnt", -1)), bth["pad_count"])
    expect(n, "TVer", int(t.get("infiniband.bth.tver", -1)), bth["tver"])
    expect(n, "P_Key", int(t.get("infiniband.bth.p_key", -1)), bth["pkey"])
    byte4 = bth["fecn"] << 7 | bth["becn"] << 6 | bth["resv6a"]
    expect(n, "BTH byte 4 (FECN/BECN/resv6a)", int(t.get("infiniband.reserved", "-1"), 16), byte4)
    expect(n, "DestQP", int(t.get("infiniband.bth.destqp", "-1"), 16), bth["dest_qp"])
    expect(n, "AckReq", t.get("infiniband.bth.a") == "1", bth["ack_req"])
    expect(n, "Resv7", int(t.get("infiniband.bth.reserved7", -1)), bth["resv7"])
    expect(n, "PSN", int(t.get("infiniband.bth.psn", -1)), bth["psn"])


def check_ext_headers(n, ib, x):
    headers = {"deth", "reth", "atomic_eth", "aeth", "atomic_ack_eth", "immdt", "ieth"}
    tshark_names = {"deth": "infiniband.deth", "reth": "infiniband.reth",
                    "atomic_eth": "infiniband.atomiceth", "aeth": "infiniband.aeth",
                    "atomic_ack_eth": "infiniband.atomicacketh", "immdt": "infiniband.immdt",
                    "ieth": "infiniband.ieth"}
    for h in headers:
        expect(n, "%s present" % h, tshark_names[h] in ib, h in x)
    if "deth" in x and "infiniband.deth_tree" in ib:
        t = ib["infiniband.deth_tree"]
        expect(n, "DETH Q_Key", int(t["infiniband.deth.q_key"], 16), x["deth"]["qkey"])
        expect(n, "DETH SrcQP", int(t["infiniband.deth.srcqp"], 16), x["deth"]["src_qp"])
    if "reth" in x and "infiniband.reth_tree" in ib:
        t = ib["infiniband.reth_tree"]
        expect(n, "RETH VA", int(t["infiniband.reth.va"], 16), x["reth"]["va"])
        expect(n, "RETH R_Key", int(t["infiniband.reth.r_key"], 16), x["reth"]["rkey"])
        expect(n, "RETH DMA length", int(t["infiniband.reth.dmalen"]), x["reth"]["dma_length"])
    if "atomic_eth" in x and "infiniband.atomiceth_tree" in ib:
        t, a = ib["infiniband.atomiceth_tree"], x["atomic_eth"]
        expect(n, "AtomicETH VA", int(t["infiniband.reth.va"], 16), a["va"])
        expect(n, "AtomicETH R_Key", int(t["infiniband.reth.r_key"], 16), a["rkey"])
        expect(n, "AtomicETH swap/add", int(t["infiniband.atomiceth.swapdt"]), a["swap_add"])
        expect(n, "AtomicETH compare", int(t["infiniband.atomiceth.cmpdt"]), a["compare"])
    if "aeth" in x and "infiniband.aeth_tree" in ib:
        t, a = ib["infiniband.aeth_tree"], x["aeth"]
        expect(n, "AETH syndrome", int(t["infiniband.aeth.syndrome"]), a["syndrome"])
        s = t["infiniband.aeth.syndrome_tree"]
        kind = {"ACK": 0, "RNR_NAK": 1, "reserved": 2, "NAK": 3}[a["type"]]
        expect(n, "AETH type", int(s["infiniband.aeth.syndrome.opcode"]), kind)
        value_field = {"ACK": "credit_count", "RNR_NAK": "timer", "NAK": "error_code",
                       "reserved": "reserved_value"}[a["type"]]
        expect(n, "AETH " + value_field, int(s["infiniband.aeth.syndrome." + value_field]),
               a["value"])
        expect(n, "AETH MSN", int(t["infiniband.aeth.msn"]), a["msn"])
    if "atomic_ack_eth" in x and "infiniband.atomicacketh_tree" in ib:
        t = ib["infiniband.atomicacketh_tree"]
        expect(n, "AtomicAckETH", int(t["infiniband.atomicacketh.origremdt"]),
               x["atomic_ack_eth"]["orig"])
    if "immdt" in x:
        expect(n, "ImmDt", hexbytes_to_int(ib.get("infiniband.immdt", "-1")), x["immdt"])
    if "ieth" in x:
        expect(n, "IETH", hexbytes_to_int(ib.get("infiniband.ieth", "-1")), x["ieth"])


def check_trailer(n, layers, ib, x):
    # Our icrc_value is the little-endian value; tshark reads the same 4 bytes big-endian.
    ours = int(x["icrc_value"], 16)
    as_tshark = struct.unpack(">I", struct.pack("<I", ours))[0]
    data = layers.get("data", {}).get("data.data")
    data_len = len(data.split(":")) if data else 0
    if x["bth"]["opcode"] == 0x81:
        vendor = ib.get("infiniband.vendor_tree", {}).get("infiniband.vendor", "")
        expect(n, "CNP reserved bytes + ICRC", vendor, ":".join(["00"] * 16) + ":" +
               ":".join("%02x" % b for b in struct.pack(">I", as_tshark)))
        return
    expect(n, "Invariant CRC", int(ib.get("infiniband.invariant.crc", "-1"), 16), as_tshark)
    expect(n, "data bytes (payload + pad)", data_len, x["payload_length"] + x["bth"]["pad_count"])


def tshark_tags(layers):
    """(id, priority, etype) of every VLAN tag tshark dissected, outermost first. tshark 4.0 names
    an 802.1ad S-tag's layer ieee8021ad (its EtherType field ieee8021ah.etype) and an 802.1Q tag's
    vlan; two of a kind come as a list (--no-duplicate-keys)."""
    tags = []
    for name, layer in layers.items():
        if name not in ("ieee8021ad", "vlan"):
            continue
        for t in layer if isinstance(layer, list) else [layer]:
            if name == "vlan":
                tags.append((int(t["vlan.id"]), int(t["vlan.priority"]), int(t["vlan.etype"], 16)))
            else:
                etype = t.get("ieee8021ad.etype", t.get("ieee8021ah.etype", "-1"))
                tags.append((int(t["ieee8021ad.id"]), int(t["ieee8021ad.priority"]),
                             int(etype, 16)))
    return tags


def check_vlans(n, layers, x):
    ours = [t for t in (x["eth"].get("outer_vlan"), x["eth"].get("vlan")) if t]
    theirs = tshark_tags(layers)
    expect(n, "VLAN tags", len(theirs), len(ours))
    for i, (t, o) in enumerate(zip(theirs, ours)):
        expect(n, "VLAN %d id" % i, t[0], o["vid"])
        expect(n, "VLAN %d priority" % i, t[1], o["pcp"])
    # Each tag's TPID is the EtherType field before it: Ethernet's, then the outer tag's.
    types = [int(layers["eth"]["eth.type"], 16)] + [t[2] for t in theirs]
    for i, o in enumerate(ours):
        expect(n, "VLAN %d TPID" % i, types[i], o["tpid"])


def qinq_copy(src, dst):
    """Writes src (classic pcap, Ethernet) to dst with every frame behind an 802.1ad S-tag
    (VID 100, PCP 5) and, where it had none, an 802.1Q C-tag (VID 7). The ICRC does not cover
    L2, so every frame stays valid."""
    s_tag = struct.pack(">HH", 0x88A8, 5 << 13 | 100)
    c_tag = struct.pack(">HH", 0x8100, 7)
    with open(src, "rb") as f:
        data = f.read()
    endian = "<" if data[:4] == b"\xd4\xc3\xb2\xa1" else ">"
    out, at = [data[:24]], 24
    while at + 16 <= len(data):
        ts_sec, ts_frac, incl, orig = struct.unpack(endian + "IIII", data[at:at + 16])
        frame = data[at + 16:at + 16 + incl]
        at += 16 + incl
        tagged = struct.unpack(">H", frame[12:14])[0] == 0x8100
        tags = s_tag if tagged else s_tag + c_tag
        frame = frame[:12] + tags + frame[12:]
        out.append(struct.pack(endian + "IIII", ts_sec, ts_frac, len(frame),
                               orig + len(tags)))
        out.append(frame)
    with open(dst, "wb") as f:
        f.write(b"".join(out))


def check_ip(n, layers, x):
    ip = x["ip"]
    if ip["version"] == 4:
        l4 = layers.get("ip", {})
        expect(n, "IPv4 DS field", int(l4.get("ip.dsfield", "-1"), 16), ip["traffic_class"])
        expect(n, "IPv4 TTL", int(l4.get("ip.ttl", -1)), ip["hop_limit"])
        expect(n, "IPv4 ID", int(l4.get("ip.id", "-1"), 16), ip["id"])
        expect(n, "IPv4 DF", l4.get("ip.flags_tree", {}).get("ip.flags.df") == "1", ip["df"])
        expect(n, "IPv4 checksum status (1 = good)", l4.get("ip.checksum.status"), "1")
        expect(n, "IPv4 src", l4.get("ip.src"), ip["src"])
    else:
        l6 = layers.get("ipv6", {})
        expect(n, "IPv6 traffic class", int(l6.get("ipv6.tclass", "-1"), 16), ip["traffic_class"])
        expect(n, "IPv6 flow label", int(l6.get("ipv6.flow", "-1"), 16), ip["flow_label"])
        expect(n, "IPv6 hop limit", int(l6.get("ipv6.hlim", -1)), ip["hop_limit"])
        expect(n, "IPv6 src", l6.get("ipv6.src"), ip["src"])
    check_vlans(n, layers, x)
    udp = layers.get("udp", {})
    expect(n, "UDP source port", int(udp.get("udp.srcport", -1)), x["udp"]["src_port"])
    expect(n, "UDP length", int(udp.get("udp.length", -1)), x["udp"]["length"])


def check_capture(xroce, path, must_be_all_roce):
    ts = tshark_frames(path)
    xs = xroce_frames(xroce, path)
    if len(ts) != len(xs):
        fail("-", "%s: tshark saw %d frames, xroce %d" % (path, len(ts), len(xs)))
        return 0
    checked = 0
    for layers, x in zip(ts, xs):
        n = "%s#%d" % (os.path.basename(path), x["frame"])
        if x["status"] == "skipped" and not must_be_all_roce:
            continue
        for k, v in walk(layers):
            if k.startswith("_ws.malformed"):
                fail(n, "tshark reports a malformed packet: %s" % json.dumps(v)[:200])
            elif k == "_ws.expert" and not allowed_expert(v, layers):
                fail(n, "tshark expert info: %s" % json.dumps(v)[:200])
        if x["status"] != "ok":
            fail(n, "xroce decode status %s (%s)" % (x["status"], x.get("error")))
            continue
        expect(n, "xroce ICRC status", x["icrc"], "ok")
        ib = layers.get("infiniband")
        if ib is None:
            fail(n, "tshark did not dissect it as InfiniBand: %s"
                 % layers["frame"]["frame.protocols"])
            continue
        check_bth(n, ib, x["bth"])
        if x["bth"]["opcode"] not in BTH_ONLY_OPCODES:
            check_ext_headers(n, ib, x)
            check_trailer(n, layers, ib, x)
        check_ip(n, layers, x)
        checked += 1
    print("%s: %d RoCE frames checked against tshark" % (path, checked))
    return checked


def main():
    xroce, work = sys.argv[1], sys.argv[2]
    captures = sys.argv[3]
    os.makedirs(work, exist_ok=True)
    golden = os.path.join(work, "golden.pcap")
    subprocess.run([xroce, "wire", "samples", "-w", golden], check=True,
                   stdout=subprocess.DEVNULL)
    golden_frames = check_capture(xroce, golden, must_be_all_roce=True)
    if golden_frames < 200:
        fail("-", "the golden capture should hold over 200 RoCE frames")
    qinq = os.path.join(work, "golden-qinq.pcap")
    qinq_copy(golden, qinq)
    if check_capture(xroce, qinq, must_be_all_roce=True) != golden_frames:
        fail("-", "every QinQ frame should decode as its untagged original")
    real = sorted(n for n in os.listdir(captures) if n.endswith(".pcap"))
    if not real:
        fail("-", "no rxe capture in %s" % captures)
    for name in real:
        check_capture(xroce, os.path.join(captures, name), must_be_all_roce=False)
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    print("tshark agrees with xroce on every frame")
    return 0


if __name__ == "__main__":
    sys.exit(main())
