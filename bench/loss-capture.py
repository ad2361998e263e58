#!/usr/bin/python3
"""Where an RC flow's time goes under loss, from a capture of its RoCEv2 frames.

Reads a pcap (tcpdump -w on one side of the path, snap length 128 is enough) through tshark and
prints, for the two endpoints it finds:
  - the share of the capture in which neither side sent anything for a while, by length of the
    silence (the timers' cost: a tail probe, a resend probe, the RTO);
  - how long the requester took to resend after each PSN-sequence NAK (the NAK's timestamp to
    the first request frame carrying the NAK's PSN);
  - the loop of each such loss, where the capture holds the lost request (taken on the
    responder's side of a path whose loss the receiving device makes, `xroce impair`): from the
    frame carrying the packet after the lost one, which shows the gap, to the NAK (the
    responder's part); the packets sent after the lost one before the NAK passed (what the
    go-back-N throws away); and from the lost request to its resend (the whole loop);
  - for READ: how many re-requests (a READ REQUEST at or below a PSN already requested) got no
    response covering their PSN within 300 us.
A segmented send (UDP GSO) shows as one frame carrying its first PSN; its packet count is taken
from its length, so PSN ranges are approximate for frames that mix header sizes. Not a test:
figures for bench/README.md ("Loss without the second timer").
  bench/loss-capture.py FILE.pcap [REQUESTER_IP]
"""
import bisect
import collections
import subprocess
import sys

ACK, NAK_PSN_SEQ = 17, "96"  # RC ACKNOWLEDGE; AETH syndrome 0x60
READ_REQUEST = 12
READ_RESPONSES = {13, 14, 15, 16}
PACKET_BYTES = 4112  # BTH + 4096 payload + ICRC, one segment of a write at a 4096-byte MTU


def frames(path):
    out = subprocess.run(
        ["tshark", "-r", path, "-T", "fields", "-E", "separator=\t",
         "-e", "frame.time_epoch", "-e", "ip.src", "-e", "ipv6.src",
         "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.psn",
         "-e", "infiniband.aeth.syndrome", "-e", "udp.length"],
        check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        f = line.split("\t")
        if len(f) < 7 or not f[3] or not f[4]:
            continue
        rows.append((float(f[0]), f[1] or f[2], int(f[3]), int(f[4]), f[5], int(f[6] or 0)))
    return rows


def packets(udp_length):
    """The packets a frame carries: a segmented send's UDP length spans all of them."""
    return max(1, (udp_length - 8) // PACKET_BYTES)


def quantiles(values, percents=(50, 90)):
    q = sorted(values)
    return {p: q[min(len(q) - 1, int(len(q) * p / 100))] for p in percents}


def loops(rows, requester):
    """Each PSN-sequence NAK's loop, from the request frames around the PSN it names."""
    # Request frames as (time, first PSN, packets): a segmented send is one frame.
    reqs = [(t, psn, packets(length))
            for t, src, op, psn, _, length in rows if src == requester]
    times = [r[0] for r in reqs]
    turn, thrown, whole = [], [], []
    for t, src, op, psn, syndrome, _ in rows:
        if src == requester or op != ACK or syndrome != NAK_PSN_SEQ:
            continue
        # The newest request frame before the NAK that carries the lost PSN, within a window.
        last = bisect.bisect_left(times, t) - 1
        lost = next((j for j in range(last, max(-1, last - 256), -1)
                     if reqs[j][1] <= psn < reqs[j][1] + reqs[j][2]), None)
        if lost is None:
            continue
        after_lost = reqs[lost][1] + reqs[lost][2] - psn - 1  # later packets in the same frame
        shown_at = reqs[lost][0] if after_lost else \
            (reqs[lost + 1][0] if lost + 1 <= last else None)
        if shown_at is None:
            continue
        turn.append((t - shown_at) * 1e6)
        thrown.append(after_lost + sum(r[2] for r in reqs[lost + 1:last + 1]))
        resend = next((r for r in reqs[last + 1:] if r[1] == psn), None)
        if resend is not None:
            whole.append((resend[0] - reqs[lost][0]) * 1e6)
    if not turn:
        return
    a, b = quantiles(turn), quantiles(thrown)
    print(f"NAK loops: {len(turn)}; gap shown -> NAK (us): median {a[50]:.0f}, 90th {a[90]:.0f};"
          f" packets sent after the lost one before the NAK: median {b[50]}, 90th {b[90]}")
    if whole:
        c = quantiles(whole)
        print(f"lost request -> its resend (us): median {c[50]:.0f}, 90th {c[90]:.0f},"
              f" mean {sum(whole) / len(whole):.0f}")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows = frames(sys.argv[1])
    if len(rows) < 2:
        sys.exit("no RoCEv2 frames in " + sys.argv[1])
    senders = collections.Counter(r[1] for r in rows)
    # The requester sends the requests: on WRITE the most frames, on READ the READ requests.
    requester = sys.argv[2] if len(sys.argv) > 2 else None
    if requester is None:
        readers = collections.Counter(r[1] for r in rows if r[2] == READ_REQUEST)
        requester = (readers or senders).most_common(1)[0][0]
    t0, t1 = rows[0][0], rows[-1][0]
    total_us = (t1 - t0) * 1e6
    print(f"{len(rows)} frames over {total_us / 1e3:.0f} ms; requester {requester}")

    gaps = [(b[0] - a[0]) * 1e6 for a, b in zip(rows, rows[1:])]
    for lo, hi in ((100, 400), (400, 800), (800, 5000), (5000, None)):
        g = [x for x in gaps if lo < x and (hi is None or x <= hi)]
        span = f"over {lo} us" if hi is None else f"({lo}, {hi}] us"
        print(f"silent {span}: {len(g)} times, {sum(g) / 1e3:.1f} ms,"
              f" {100 * sum(g) / total_us:.1f} % of the capture")

    # NAK -> the resend of its PSN.
    reactions, pending = [], None
    for t, src, op, psn, syndrome, _ in rows:
        if src != requester and op == ACK and syndrome == NAK_PSN_SEQ:
            pending = (t, psn)
        elif src == requester and pending and psn == pending[1]:
            reactions.append((t - pending[0]) * 1e6)
            pending = None
    if reactions:
        pct = quantiles(reactions, (50, 90, 99))
        print(f"NAKs answered by a resend: {len(reactions)}; resend after the NAK (us): median"
              f" {pct[50]:.0f}, 90th {pct[90]:.0f}, 99th {pct[99]:.0f}")
    loops(rows, requester)

    # READ re-requests left unanswered.
    responses = [(t, psn, packets(length))
                 for t, src, op, psn, _, length in rows
                 if src != requester and op in READ_RESPONSES]
    times = [r[0] for r in responses]
    highest, rerequests, unanswered = -1, 0, 0
    for t, src, op, psn, _, _ in rows:
        if src != requester or op != READ_REQUEST:
            continue
        if psn <= highest:
            rerequests += 1
            i = bisect.bisect_right(times, t)
            answered = False
            while i < len(responses) and responses[i][0] - t <= 300e-6:
                _, first, count = responses[i]
                if first <= psn < first + count:
                    answered = True
                    break
                i += 1
            unanswered += not answered
        highest = max(highest, psn)
    if rerequests:
        print(f"READ re-requests: {rerequests}; unanswered within 300 us: {unanswered}")


if __name__ == "__main__":
    main()
