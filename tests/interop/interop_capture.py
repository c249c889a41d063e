"""Capture of each interop run on the guest's tap and its checks (`urxe pcap decode --strict`, tshark)."""
import os
import re
import subprocess
import time

from interop_common import (NETNS, PEER_MAC, PI_WARN, TSHARK_HEURISTICS_OFF, TSHARK_PREFS, URXE_MAC, sh,
    urxe_bin)


class Capture:
    """tcpdump on the guest's tap, RoCE frames from or to `match` only (by default urxe's MAC: someone else
    using the peer at the same time does not get into the checks)."""

    def __init__(self, path, mtu, iface="rxetap1", match=f"ether host {URXE_MAC}"):
        self.path, self.err_path = path, path + ".tcpdump.txt"
        self.errf = open(self.err_path, "w")
        # --immediate-mode: each frame written as it comes (no wait for a ring block to fill); a large buffer:
        # no drops while the TCG guest keeps the cores busy; the snap length covers a full frame.
        self.proc = subprocess.Popen(["ip", "netns", "exec", NETNS, "tcpdump", "--immediate-mode", "-B", "65536",
                                      "-i", iface, "-s", str(mtu + 64), "-U", "-w", path, f"udp port 4791 and {match}"],
                                     stdout=subprocess.DEVNULL, stderr=self.errf)
        for _ in range(100):
            if "listening on" in open(self.err_path).read():
                break
            if self.proc.poll() is not None:
                raise RuntimeError("tcpdump: " + open(self.err_path).read())
            time.sleep(0.1)

    def stop(self):
        time.sleep(0.3)  # frames still in flight (netem's delay, the bridge): nothing to wait on but time
        if self.proc.poll() is None:
            self.proc.terminate()  # our own tcpdump, by its PID; it flushes on SIGTERM
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.errf.close()
        m = re.search(r"(\d+) packets? dropped by kernel", open(self.err_path).read())
        return int(m.group(1)) if m else -1


def tshark_rows(pcap, fields):
    cmd = ["tshark", "-r", pcap, "-T", "fields", "-E", "separator=\t", "-E", "occurrence=a", "-E", "aggregator=,"]
    for h in TSHARK_HEURISTICS_OFF:
        cmd += ["--disable-heuristic", h]
    for p in TSHARK_PREFS:
        cmd += ["-o", p]
    for f in fields:
        cmd += ["-e", f]
    env = dict(os.environ, HOME="/tmp", XDG_CONFIG_HOME="/tmp/urxe-interop-tshark")
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=180, env=env,
                       errors="replace")
    if r.returncode != 0:
        raise RuntimeError("tshark: " + r.stderr[-500:])
    rows = [dict(zip(fields, line.split("\t"))) for line in r.stdout.splitlines() if line.strip()]
    for row in rows:
        if len(row) != len(fields):
            raise RuntimeError(f"tshark: unexpected line {row}")
    return rows


def drop_resolution_triggers(pcap, problems):
    """urxe's CM service resolves a next hop that is not in the neighbour table by sending an empty UDP
    datagram to port 4791 (hostnet/neighbour.cc: the kernel then does ARP/ND; a RoCE peer drops it as
    truncated). Such a datagram is no RoCE packet, so it would fail the checks: the checks get a copy without
    them (capture.roce.pcap). Returns that copy's path and how many there were; an empty datagram from rxe
    is a problem."""
    rows = tshark_rows(pcap, ["frame.number", "eth.src", "udp.length"])
    empty = [r for r in rows if r["udp.length"] == "8"]
    for r in empty:
        if r["eth.src"] != URXE_MAC:
            problems.append(f"frame {r['frame.number']}: an empty UDP datagram from {r['eth.src']}")
    if not empty:
        return pcap, 0
    out = pcap.removesuffix(".pcap") + ".roce.pcap"
    env = dict(os.environ, HOME="/tmp", XDG_CONFIG_HOME="/tmp/urxe-interop-tshark")
    r = subprocess.run(["tshark", "-r", pcap, "-Y", "udp.length != 8", "-F", "pcap", "-w", out],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180, env=env)
    if r.returncode != 0:
        raise RuntimeError("tshark: " + r.stdout[-500:])
    return out, len(empty)


def check_capture(pcap, case, problems):
    """Every RoCE frame: urxe pcap decode --strict (ICRC, well-formed) and tshark (InfiniBand, no malformed
    field, no expert warning). Returns per-direction opcode statistics."""
    urxe = urxe_bin()
    decode_path = pcap + ".decode.jsonl"
    pcap, triggers = drop_resolution_triggers(pcap, problems)
    r = sh([urxe, "pcap", "decode", "--strict", "--json", pcap], timeout=120)
    open(decode_path, "w").write(r.stdout)
    if r.returncode != 0:
        bad = [l for l in r.stdout.splitlines() if '"icrc_ok":false' in l.replace(" ", "") or '"error"' in l]
        problems.append(f"urxe pcap decode --strict exit {r.returncode}: {bad[:3]}")
    rows = tshark_rows(pcap, ["frame.number", "eth.src", "frame.protocols", "_ws.malformed",
                              "_ws.expert.severity", "_ws.expert.message", "infiniband.bth.opcode",
                              "infiniband.aeth.syndrome", "infiniband.bth.psn", "infiniband.bth.destqp",
                              "ip.dsfield.ecn"])
    stats = {"urxe": {}, "rxe": {}, "frames": len(rows), "naks": {"urxe": 0, "rxe": 0},
             "retransmits": {"urxe": 0, "rxe": 0}, "ce": {"urxe": 0, "rxe": 0}, "resolution_triggers": triggers}
    seen = {"urxe": set(), "rxe": set()}
    for row in rows:
        f = row["frame.number"]
        if "infiniband" not in row["frame.protocols"]:
            problems.append(f"frame {f}: not dissected as InfiniBand ({row['frame.protocols']})")
        if row["_ws.malformed"]:
            problems.append(f"frame {f}: tshark malformed")
        sev = [int(s, 0) for s in row["_ws.expert.severity"].split(",") if s]
        msgs = row["_ws.expert.message"].split(",")
        warn = [m for s, m in zip(sev, msgs) if s >= PI_WARN]
        if warn:
            problems.append(f"frame {f}: tshark expert: {warn}")
        side = "urxe" if row["eth.src"] == URXE_MAC else "rxe" if row["eth.src"] == PEER_MAC else None
        if side is None:
            problems.append(f"frame {f}: from an unexpected MAC {row['eth.src']}")
            continue
        op = row["infiniband.bth.opcode"]
        stats[side][op] = stats[side].get(op, 0) + 1
        if row["ip.dsfield.ecn"] == "3":  # CE
            stats["ce"][side] += 1
        syn = row["infiniband.aeth.syndrome"].split(",")[0]
        if syn and (int(syn, 0) >> 5) in (1, 3):  # RNR NAK or NAK
            stats["naks"][side] += 1
        key = (row["infiniband.bth.destqp"], row["infiniband.bth.psn"], op)
        # a request seen twice = retransmitted (ACKs repeat PSNs legitimately, every CNP carries PSN 0)
        if op not in ("17", "18", "129") and key in seen[side]:
            stats["retransmits"][side] += 1
        seen[side].add(key)
    need = case.get("frames_from", ("urxe", "rxe"))
    for side in need:
        if not stats[side]:
            problems.append(f"no RoCE frame from {side} in the capture")
    return stats


def last_send_unacked(decode_path, victim):
    """ibv_*_pingpong ends without a closing handshake: a side exits as soon as its own last SEND is acknowledged
    and its last receive arrived. If the ACK of the *other* side's last SEND is then lost (netem), nobody is left
    to answer its retransmissions: a urxe sender reports RETRY_EXC_ERR after retry_cnt retries (IBTA), an rxe
    sender retransmits forever (rxe takes retry_cnt 7 as "infinite", like rnr_retry 7). Returns a sentence of
    evidence from the capture when that is what happened to `victim` ("urxe" or "rxe"), else None: the PSN of
    the victim's last request packet (LAST or ONLY of its final message, retransmitted at the end) and the ACK
    of it, sent by the other side (urxe's frames are captured before the guest's netem, so a urxe ACK in the
    capture was sent and then lost) or absent (rxe's frames are captured after netem: lost or never sent)."""
    import json
    mac = URXE_MAC if victim == "urxe" else PEER_MAC
    try:
        rows = [json.loads(l) for l in open(decode_path)]
    except (OSError, ValueError):
        return None
    sends = [(i, r.get("psn")) for i, r in enumerate(rows)  # RC SEND LAST/LAST_IMM/ONLY/ONLY_IMM
             if r.get("eth", {}).get("src") == mac and r.get("opcode") in (2, 3, 4, 5)]
    if not sends:
        return None
    last_psn = sends[-1][1]
    acks = [i for i, r in enumerate(rows) if r.get("eth", {}).get("src") != mac and r.get("opcode") == 17
            and r.get("aeth", {}).get("type") == "ACK" and r.get("psn") == last_psn]
    resent = [i for i, p in sends if p == last_psn]
    if victim == "rxe" and acks and resent[-1] > acks[0]:
        return (f"urxe sent the ACK of rxe's last SEND (PSN {last_psn}), and rxe still retransmitted it "
                f"{sum(1 for i in resent if i > acks[0])} times")
    if victim == "urxe" and not acks and len(resent) > 1:
        return f"no ACK of urxe's last SEND (PSN {last_psn}) reached the host; urxe sent it {len(resent)} times"
    return None
