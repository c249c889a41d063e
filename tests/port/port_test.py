#!/usr/bin/python3
"""urxe's ports between two network namespaces joined by a veth pair (MTU 4200, so 4096-byte RoCE payloads
fit), created here with unique names and deleted at exit.

Checked, for the DPDK af_packet port and the kernel-socket port, both directions, IPv4 and IPv6, payloads
0..4096 bytes: every RoCEv2 frame built with wire::build_frame arrives exactly once, intact, with a valid
ICRC (port_probe recv); the frames on the wire, captured by dumpcap on the receiving veth, have a valid
ICRC by an independent zlib CRC-32 written from IBTA A17.3.3, IPv4 ID 0 + DF + UDP checksum 0, and tshark
dissects them as RoCE without malformed fields; the receiving kernel sends no ICMP port/destination
unreachable (Icmp OutDestUnreachs, Icmp6OutDestUnreachs, Udp(6) NoPorts unchanged); the socket port works
with CAP_NET_RAW alone (setpriv), chosen automatically with a notice, and DPDK is refused there with a
clear error; GID table, MAC, MTU and neighbour resolution agree with `ip`; frames to the port's own
address reach another process on the same interface and the sending port itself (loopback); runs of
equal-size frames of one flow leave the socket port as UDP GSO datagrams that the receiving socket port
splits into the frames again, IPv4 and IPv6; with the veth's UDP segmentation off the kernel cuts them
into the frames the sender numbered, and when it is turned off under an open port the sender falls back to
single frames by itself.
Exit 77 (skip) when not root or network namespaces are unavailable.
"""
import argparse
import ipaddress
import os
import re
import select
import struct
import subprocess
import sys
import tempfile
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from netns_pair import NetnsPair, run  # noqa: E402

SIZES = [0, 1, 2, 3, 4, 5, 63, 64, 65, 256, 1000, 1024, 2048, 4000, 4095, 4096]
NET_RAW_ONLY = ["setpriv", "--inh-caps=-all,+net_raw", "--ambient-caps=+net_raw", "--bounding-set=-all,+net_raw"]
HEURISTICS_OFF = ["rpcrdma_infiniband", "smb_direct_infiniband", "nvme_rdma", "iser_infiniband",
                  "smcr_infiniband", "lnet_ib", "sdp_infiniband", "fc_infiniband", "drbd_rdma", "mellanox_eoib",
                  "eth_over_ib"]
TSHARK_PREFS = ["udp.ignore_ipv6_zero_checksum:TRUE", "ip.check_checksum:TRUE", "udp.check_checksum:TRUE"]
ICMP_COUNTERS = ["Icmp.OutDestUnreachs", "Icmp6OutDestUnreachs", "Udp.NoPorts", "Udp6NoPorts"]

failures = []


def check(cond, what):
    print(("PASS " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def skip(reason):
    print(f"SKIP: {reason}", flush=True)
    sys.exit(77)


# ---- independent wire checks -------------------------------------------------------------------------------
def read_pcap(path):
    with open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack("<I", data[:4])[0]
    e = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    if struct.unpack(e + "I", data[20:24])[0] != 1:
        raise ValueError("not an Ethernet pcap")
    off, out = 24, []
    while off + 16 <= len(data):
        incl = struct.unpack(e + "I", data[off + 8:off + 12])[0]
        out.append(data[off + 16:off + 16 + incl])
        off += 16 + incl
    return out


def roce_frame_problems(fr):
    """None if `fr` is not RoCE-carrying UDP/4791 with a payload, else the list of problems found."""
    et = struct.unpack("!H", fr[12:14])[0]
    off = 14
    if et == 0x0800:
        ihl = (fr[off] & 0xF) * 4
        ip = bytearray(fr[off:off + ihl])
        if ip[9] != 17:
            return None
        probs = []
        if struct.unpack("!H", ip[4:6])[0] != 0:
            probs.append("IPv4 ID not 0")
        if struct.unpack("!H", ip[6:8])[0] != 0x4000:
            probs.append("IPv4 flags/frag not DF")
        ip[1] = 0xFF  # TOS
        ip[8] = 0xFF  # TTL
        ip[10:12] = b"\xff\xff"  # header checksum
    elif et == 0x86DD:
        ip = bytearray(fr[off:off + 40])
        if ip[6] != 17:
            return None
        probs = []
        ip[0] |= 0x0F  # traffic class (low nibble of byte 0, high of byte 1) and flow label
        ip[1:4] = b"\xff\xff\xff"
        ip[7] = 0xFF  # hop limit
    else:
        return None
    u = off + len(ip)
    udp = bytearray(fr[u:u + 8])
    dport, ulen, csum = struct.unpack("!HHH", udp[2:8])
    if dport != 4791 or ulen == 8:  # not RoCE, or the empty neighbour-resolution datagram
        return None
    if csum != 0:
        probs.append("UDP checksum not 0")
    udp[6:8] = b"\xff\xff"
    bth = bytearray(fr[u + 8:u + 20])
    bth[4] = 0xFF  # FECN/BECN/resv6
    end = u + ulen
    crc = zlib.crc32(b"\xff" * 8 + bytes(ip) + bytes(udp) + bytes(bth) + fr[u + 20:end - 4])
    if struct.pack("<I", crc) != fr[end - 4:end]:
        probs.append("bad ICRC")
    return probs


def tshark_problems(pcap, tmp):
    env = dict(os.environ, HOME=tmp, XDG_CONFIG_HOME=tmp, XDG_CACHE_HOME=tmp, XDG_DATA_HOME=tmp)
    cmd = ["tshark", "-n", "-r", pcap, "-T", "fields", "-E", "separator=\t", "-e", "infiniband.bth.opcode",
           "-e", "_ws.malformed", "-e", "_ws.expert.severity", "-e", "infiniband.invariant.crc"]
    for h in HEURISTICS_OFF:
        cmd += ["--disable-heuristic", h]
    for p in TSHARK_PREFS:
        cmd += ["-o", p]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    rows = [l.split("\t") for l in r.stdout.splitlines()]
    roce = [x for x in rows if x[0]]
    bad = [x for x in roce if x[1] or (x[2] and int(x[2].split(",")[0]) >= 0x00600000)]
    return len(roce), bad, r.returncode


# ---- probe processes ---------------------------------------------------------------------------------------
class Receiver:
    def __init__(self, pair, side, probe, port, count, sizes, caps=(), timeout_ms=8000, extra=()):
        cmd = pair.prefix(side) + list(caps) + [probe, "--port", port, "--if", pair.ifname[side], "recv",
                                                "--count", str(count), "--sizes", ",".join(map(str, sizes)),
                                                "--timeout-ms", str(timeout_ms)] + list(extra)
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.timeout = timeout_ms / 1000 + 10

    def wait_ready(self, limit=20):
        r, _, _ = select.select([self.p.stdout], [], [], limit)
        return bool(r) and self.p.stdout.readline().strip() == "ready"

    def finish(self):
        try:
            out, err = self.p.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            out, err = self.p.communicate()
        return self.p.returncode, out.strip(), err.strip()


class Capture:
    def __init__(self, pair, side, path):
        self.path = path
        self.p = subprocess.Popen(pair.prefix(side) + ["dumpcap", "-q", "-P", "-i", pair.ifname[side], "-f",
                                                       "udp port 4791", "-w", path],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 10
        while time.time() < deadline and not os.path.exists(path):
            time.sleep(0.05)
        time.sleep(0.3)  # the capture filter is attached once the file exists; give it a moment

    def stop(self):
        time.sleep(0.3)
        self.p.terminate()
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()
        return read_pcap(self.path)


def transfer(pair, probe, tmp, src, dst, ipver, tx_port, rx_port, caps=(), capture=True, label=""):
    dst_ip = pair.ip4[dst] if ipver == 4 else pair.ip6[dst]
    count = 2 * len(SIZES)
    what = f"{label}{tx_port}({src})->{rx_port}({dst}) IPv{ipver}"
    before = pair.snmp(dst)
    cap = Capture(pair, dst, os.path.join(tmp, f"{src}{dst}{ipver}{tx_port}{rx_port}.pcap")) if capture else None
    rx = Receiver(pair, dst, probe, rx_port, count, SIZES, caps)
    if not check(rx.wait_ready(), f"{what}: receiver ready"):
        print(rx.finish())
        if cap:
            cap.stop()  # else dumpcap outlives the test
        return
    tx = pair.exec(src, list(caps) + [probe, "--port", tx_port, "--if", pair.ifname[src], "send", "--dst-ip",
                                      dst_ip, "--count", str(count), "--sizes", ",".join(map(str, SIZES))],
                   check=False, timeout=60)
    rc, out, err = rx.finish()
    check(tx.returncode == 0, f"{what}: sender sent {count} frames ({tx.stdout.strip()} {tx.stderr.strip()})")
    check(rc == 0, f"{what}: all {count} frames arrived once, intact, ICRC valid ({out})")
    if rc != 0:
        print(err)
    if caps:
        check("kernel-socket port" in err, f"{what}: receiver chose the socket port with a notice ({err})")
        check("kernel-socket port" in tx.stderr, f"{what}: sender chose the socket port with a notice")
    if cap:
        frames = cap.stop()
        results = [x for x in (roce_frame_problems(f) for f in frames) if x is not None]
        check(len(results) == count, f"{what}: {len(results)} RoCE frames captured on the wire, want {count}")
        probs = sorted({p for x in results for p in x})
        check(not probs, f"{what}: wire frames have valid ICRC, IPv4 ID 0 + DF, UDP checksum 0 {probs}")
        n, bad, trc = tshark_problems(cap.path, tmp)
        check(trc == 0 and n == count and not bad,
              f"{what}: tshark dissects {n}/{count} frames as RoCE, {len(bad)} malformed/error")
    after = pair.snmp(dst)
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in ICMP_COUNTERS}
    check(all(v == 0 for v in delta.values()), f"{what}: receiving kernel sent no ICMP unreachable {delta}")


def gso_transfer(pair, probe, ipver, segmentation):
    """Runs of equal-size frames of one flow (--flow, 16 a transmit call) go out of the socket port as UDP GSO
    datagrams. segmentation "on" (a veth's default): they cross the veth whole and the receiving socket port
    splits them into the frames, each whole with a valid ICRC. "off" (the veth's UDP segmentation offload off
    before the port opens, as on an interface without it): the kernel cuts them on their way out and the
    receiver gets single frames, each with the IPv4 ID the sender gave it (the ICRC covers it).
    "off-after-open" (turned off under the open port): the kernel refuses the datagrams under qdisc
    bypass, and the port must notice, send each frame on its own, and lose none."""
    dst_ip = pair.ip4["b"] if ipver == 4 else pair.ip6["b"]
    sizes = [1024] * 4 + [256] * 4 + [60] * 4 + [1000]  # (a turn's frames take its first's size)
    count, frames = 16 * 40, 16
    what = f"UDP GSO IPv{ipver}, segmentation offload {segmentation}"
    seg = lambda on: pair.exec("a", ["ethtool", "-K", pair.ifname["a"], "tx-udp-segmentation", on], check=False)
    seg("off" if segmentation == "off" else "on")
    try:
        rx = Receiver(pair, "b", probe, "socket", count, sizes, extra=["--frames", str(frames)])
        if not check(rx.wait_ready(), f"{what}: receiver ready"):
            print(rx.finish())
            return
        cmd = pair.prefix("a") + [probe, "--port", "socket", "--if", pair.ifname["a"], "send", "--dst-ip", dst_ip,
                                  "--count", str(count), "--sizes", ",".join(map(str, sizes)), "--frames",
                                  str(frames), "--flow", "--gap-us", "2000", "--wait-go"]
        tx = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            r, _, _ = select.select([tx.stdout], [], [], 20)
            ready = bool(r) and tx.stdout.readline().strip() == "ready"
            if ready and segmentation == "off-after-open":
                seg("off")
            tx_out, tx_err = tx.communicate("go\n", timeout=60)
        except subprocess.TimeoutExpired:
            tx.kill()
            tx_out, tx_err = tx.communicate()
        rc, out, err = rx.finish()
        check(ready and tx.returncode == 0 and rc == 0,
              f"{what}: all {count} frames arrived once, intact, ICRC valid ({tx_out.strip()} / {out})")
        sent = dict(kv.split("=") for kv in tx_out.split() if "=" in kv)
        got = dict(kv.split("=") for kv in out.split() if "=" in kv)
        if segmentation == "on":
            check(int(sent.get("gso_frames", 0)) == count and int(got.get("gso_frames", 0)) == count,
                  f"{what}: every frame went in a GSO datagram and was split from one ({sent}, {got})")
        elif segmentation == "off":
            check(int(sent.get("gso_frames", 0)) == count and int(got.get("gso_batches", -1)) == 0,
                  f"{what}: every frame went in a GSO datagram, which the kernel cut ({sent}, {got})")
        else:
            check(int(sent.get("gso_batches", -1)) == 0 and int(got.get("gso_batches", -1)) == 0,
                  f"{what}: the port turned GSO off and sent every frame alone ({sent}, {got})")
        if segmentation != "off-after-open":
            cut = "with UDP GSO (cut by the kernel)" in tx_err
            check("with UDP GSO" in tx_err and cut == (segmentation == "off"),
                  f"{what}: the notice says so ({tx_err.strip()})")
    finally:
        seg("on")


def local_transfer(pair, probe, port, ipver):
    """Frames to the port's own address: another process on the same interface, and the same port, get them."""
    own_ip = pair.ip4["a"] if ipver == 4 else pair.ip6["a"]
    count = 2 * len(SIZES)
    what = f"{port} same host IPv{ipver}"
    rx = Receiver(pair, "a", probe, port, count, SIZES)
    if not check(rx.wait_ready(), f"{what}: receiver ready"):
        print(rx.finish())
        return
    tx = pair.exec("a", [probe, "--port", port, "--if", pair.ifname["a"], "send", "--dst-ip", own_ip, "--count",
                         str(count), "--sizes", ",".join(map(str, SIZES))], check=False, timeout=60)
    rc, out, err = rx.finish()
    check(tx.returncode == 0 and rc == 0, f"{what}: another process on the device got all {count} frames ({out})")
    r = pair.exec("a", [probe, "--port", port, "--if", pair.ifname["a"], "recv", "--dst-ip", own_ip, "--count",
                        str(count), "--sizes", ",".join(map(str, SIZES)), "--timeout-ms", "8000"],
                  check=False, timeout=60)
    check(r.returncode == 0, f"{what}: the sending port itself got all {count} frames ({r.stdout.strip()})")


def memif_transfer(pair, probe, tmp):
    """--dpdk passthrough: a net_memif pair between the namespaces instead of af_packet."""
    sock = os.path.join(tmp, "memif.sock")
    args = f"--vdev=net_memif0,socket={sock},socket-abstract=no,bsize=10240,role="
    count = 2 * len(SIZES)
    rx = subprocess.Popen(pair.prefix("b") + [probe, "--port", "dpdk", "--dpdk-args", args + "server", "--if",
                                              pair.ifname["b"], "recv", "--count", str(count), "--sizes",
                                              ",".join(map(str, SIZES)), "--timeout-ms", "10000"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    r, _, _ = select.select([rx.stdout], [], [], 20)
    if not check(bool(r) and rx.stdout.readline().strip() == "ready", "memif: receiver ready"):
        rx.kill()
        return
    tx = pair.exec("a", [probe, "--port", "dpdk", "--dpdk-args", args + "client", "--if", pair.ifname["a"], "send",
                         "--dst-ip", pair.ip4["b"], "--count", str(count), "--sizes", ",".join(map(str, SIZES))],
                   check=False, timeout=60)
    try:
        out, err = rx.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        rx.kill()
        out, err = rx.communicate()
    check("using DPDK net_memif0" in tx.stderr and "using DPDK net_memif0" in err, "memif: --dpdk vdev used")
    check(tx.returncode == 0 and rx.returncode == 0, f"memif: all {count} frames arrived intact ({out.strip()})")


def qpn_filter(pair, probe, port):
    """A port told its QPN block gets the frames for QPNs in it (and wakes for them), and no others."""
    for rng, want in (("0x100:0x200", True), ("0x11:0x111", False), ("0x124:0x1124", False)):
        count = 8
        rx = subprocess.Popen(pair.prefix("b") + [probe, "--port", port, "--qpn-range", rng, "--if",
                                                  pair.ifname["b"], "recv", "--count", str(count), "--sizes", "64",
                                                  "--timeout-ms", "3000"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        r, _, _ = select.select([rx.stdout], [], [], 20)
        if not check(bool(r) and rx.stdout.readline().strip() == "ready", f"{port} qpn {rng}: receiver ready"):
            rx.kill()
            continue
        pair.exec("a", [probe, "--port", "socket", "--if", pair.ifname["a"], "send", "--dst-ip", pair.ip6["b"],
                        "--count", str(count), "--sizes", "64"], check=False, timeout=60)
        out, _ = rx.communicate(timeout=30)
        got = f"ok={count} " in out if want else " ok=0 " in out
        check(got, f"{port} QPN range {rng}: QP 0x123 frames {'delivered' if want else 'dropped'} ({out.strip()})")


def ring_overflow(pair, probe, port):
    """A receiver that does not drain its ring for a while loses frames, and its port counts each one: the
    frames received plus those counted as lost (rx_loss().ring_full) are exactly the frames sent."""
    count = 20000
    rx = subprocess.Popen(pair.prefix("b") + [probe, "--port", port, "--if", pair.ifname["b"], "stall",
                                              "--seconds", "3", "--timeout-ms", "20000"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    r, _, _ = select.select([rx.stdout], [], [], 20)
    if not check(bool(r) and rx.stdout.readline().strip() == "ready", f"{port} stall: receiver ready"):
        rx.kill()
        return
    s = pair.exec("a", [probe, "--port", "socket", "--if", pair.ifname["a"], "send", "--dst-ip", pair.ip4["b"],
                        "--count", str(count), "--sizes", "64", "--gap-us", "20"], check=False, timeout=60)
    out, _ = rx.communicate(timeout=60)
    sent = int(re.search(r"sent=(\d+)", s.stdout).group(1)) if "sent=" in s.stdout else -1
    m = re.search(r"received=(\d+) ring_full=(\d+) no_buffer=(\d+) errors=(\d+)", out)
    if not check(m is not None and sent == count, f"{port} stall: sent {sent}, receiver said {out.strip()!r}"):
        return
    got, lost = int(m.group(1)), int(m.group(2))
    check(lost > 0 and got + lost == sent,
          f"{port} receive ring overflow counted: {got} received + {lost} ring_full = {got + lost} of {sent} sent")


def eui64_gid(mac):
    b = bytes.fromhex(mac.replace(":", ""))
    return str(ipaddress.IPv6Address(b"\xfe\x80" + b"\0" * 6 + bytes([b[0] ^ 2]) + b[1:3] + b"\xff\xfe" + b[3:]))


def check_info(pair, probe):
    # A second address of each family on side a: the kernel orders IPv4 by address list, IPv6 by scope.
    pair.exec("a", ["ip", "addr", "add", "10.78.0.1/24", "dev", pair.ifname["a"]])
    pair.exec("a", ["ip", "addr", "add", "fd78::1/64", "dev", pair.ifname["a"], "nodad"])
    for side in "ab":
        r = pair.exec(side, [probe, "--port", "socket", "--if", pair.ifname[side], "info"], check=False)
        lines = r.stdout.splitlines()
        head = dict(kv.split("=") for kv in lines[0].split()) if lines else {}
        gids = [l.split()[2] for l in lines[1:] if l.startswith("gid ")]
        mac = pair.mac(side)
        check(head.get("mac") == mac and head.get("mtu") == str(pair.mtu), f"info {side}: MAC {mac}, MTU {pair.mtu}")
        addrs = pair.addrs(side)
        want = [eui64_gid(mac)] + ["::ffff:" + a for f, a, _ in addrs if f == "inet"]
        want += [a for f, a, _ in addrs if f == "inet6" and a not in want]
        check(gids == want, f"info {side}: GID table {gids} == {want} (link-local, IPv4-mapped, IPv6)")
        lls = [a for f, a, s in addrs if f == "inet6" and s == "link"]
        check(lls == [eui64_gid(mac)], f"info {side}: kernel link-local {lls} is GID 0")
        check(len(gids) == (5 if side == "a" else 3), f"info {side}: {len(gids)} GIDs")
    pair.exec("a", ["ip", "addr", "del", "10.78.0.1/24", "dev", pair.ifname["a"]])
    pair.exec("a", ["ip", "addr", "del", "fd78::1/64", "dev", pair.ifname["a"]])


def check_neigh(pair, probe):
    for dst_ip in (pair.ip4["b"], pair.ip6["b"]):
        r = pair.exec("a", [probe, "--if", pair.ifname["a"], "--port", "socket", "neigh", "--dst-ip", dst_ip],
                      check=False)
        check(r.returncode == 0 and f"mac={pair.mac('b')}" in r.stdout, f"neighbour {dst_ip} -> {r.stdout.strip()}")
    r = pair.exec("a", [probe, "--if", pair.ifname["a"], "--port", "socket", "neigh", "--dst-ip", pair.ip4["a"]],
                  check=False)
    check(r.returncode == 0 and "local=1" in r.stdout and f"mac={pair.mac('a')}" in r.stdout,
          f"own address resolves to own MAC: {r.stdout.strip()}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--probe", required=True)
    ap.add_argument("--only-gso", action="store_true", help="only the UDP GSO checks (a quicker run by hand)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        skip("needs root (creates network namespaces and a veth pair)")
    probe_ns = f"urxpchk{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", probe_ns], capture_output=True).returncode != 0:
        skip("network namespaces unavailable (ip netns add failed)")
    subprocess.run(["ip", "netns", "del", probe_ns], capture_output=True)

    pair = NetnsPair().open()
    with tempfile.TemporaryDirectory(prefix="urxe-port-") as tmp:
        if args.only_gso:
            for ipver in (4, 6):
                for segmentation in ("on", "off", "off-after-open"):
                    gso_transfer(pair, args.probe, ipver, segmentation)
            return done(pair)
        check_info(pair, args.probe)
        check_neigh(pair, args.probe)
        # Control: with no urxe port on the receiving side the kernel does answer RoCE with ICMP, so the
        # "no ICMP" checks below can fail.
        before = pair.snmp("b")
        pair.exec("a", [args.probe, "--port", "socket", "--if", pair.ifname["a"], "send", "--dst-ip",
                        pair.ip4["b"], "--count", "4", "--sizes", "64"], check=False)
        sent_icmp = pair.snmp("b")["Icmp.OutDestUnreachs"] - before["Icmp.OutDestUnreachs"]
        check(sent_icmp > 0, f"control: without a urxe port the kernel answers RoCE with ICMP ({sent_icmp})")
        for port in ("socket", "dpdk"):
            for src, dst in (("a", "b"), ("b", "a")):
                for ipver in (4, 6):
                    transfer(pair, args.probe, tmp, src, dst, ipver, port, port)
        # IPv6 link-local GIDs (GID 0): the route and neighbour lookups need the interface scope.
        pair.ip6_saved = dict(pair.ip6)
        for side in "ab":
            pair.ip6[side] = eui64_gid(pair.mac(side))
        transfer(pair, args.probe, tmp, "a", "b", 6, "socket", "dpdk", capture=False, label="link-local: ")
        pair.ip6 = pair.ip6_saved
        for port in ("socket", "dpdk"):
            for ipver in (4, 6):
                local_transfer(pair, args.probe, port, ipver)
        memif_transfer(pair, args.probe, tmp)
        for ipver in (4, 6):
            for segmentation in ("on", "off", "off-after-open"):
                gso_transfer(pair, args.probe, ipver, segmentation)
        for port in ("socket", "dpdk"):
            qpn_filter(pair, args.probe, port)
            ring_overflow(pair, args.probe, port)
        # The two ports interoperate (one side DPDK, the other kernel sockets).
        transfer(pair, args.probe, tmp, "a", "b", 4, "dpdk", "socket", capture=False)
        transfer(pair, args.probe, tmp, "b", "a", 6, "socket", "dpdk", capture=False)
        # Docker's default capability set: NET_RAW, no NET_ADMIN. The factory must pick the socket port.
        for src, dst in (("a", "b"), ("b", "a")):
            for ipver in (4, 6):
                transfer(pair, args.probe, tmp, src, dst, ipver, "auto", "auto", caps=NET_RAW_ONLY,
                         label="NET_RAW only: ")
        r = pair.exec("a", [args.probe, "--dpdk-args", "--vdev=net_nosuchpmd0", "--if", pair.ifname["a"], "info"],
                      check=False)
        check(r.returncode == 0 and "kind=socket" in r.stdout and "using the kernel-socket port (DPDK failed:" in r.stderr
              and len(r.stderr.strip().splitlines()) == 1,
              f"DPDK failing to start falls back to the socket port with a one-line notice ({r.stderr.strip()})")
        r = pair.exec("a", NET_RAW_ONLY + [args.probe, "--port", "dpdk", "--if", pair.ifname["a"], "info"],
                      check=False)
        check(r.returncode != 0 and "NET_ADMIN" in r.stderr,
              "NET_RAW only: forcing DPDK fails with an error naming CAP_NET_ADMIN")
    return done(pair)


def done(pair):
    pair.close()
    print(f"{len(failures)} failure(s)" if failures else "all port checks passed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
