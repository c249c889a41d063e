#!/usr/bin/python3
"""Benchmark (prints figures, asserts nothing): frames per second through urxe's ports between two network
namespaces joined by a veth pair, next to kernel UDP (iperf3) over the same veth in the same run.

  sudo /usr/bin/python3 tests/port/port_bench.py --probe build/tests/port/port_probe [--seconds 4]

Sections (--only rates|rtt|guard). For 66-byte and 4154-byte frames (a 4096-byte RoCE payload over IPv4): the sender (port_probe blast,
CPU 0) pushes frames as fast as the port takes them, the receiver (port_probe sink, CPU 1) counts them
busy-polling; kernel UDP is iperf3 -u with the datagram size that gives the same frame size. Then, at
64 B through the socket port, what the receiving kernel does with the RoCE frames under each way of
keeping it quiet: nothing, the per-process UDP/4791 socket with a drop filter (the ports' default), and
the nftables netdev-ingress drop (kernel_guard.h): ICMP sent and CPU time of the whole machine per frame.
"""
import argparse
import json
import os
import select
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from netns_pair import NetnsPair  # noqa: E402

ETH_IP4_UDP = 14 + 20 + 8
ROCE_OVERHEAD = ETH_IP4_UDP + 12 + 4  # + BTH + ICRC
SMALL_PAYLOAD = 6  # 6 B + 2 B pad: a 66-byte frame, the smallest RoCE frame near 64 B


def cpu_jiffies():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    busy = v[0] + v[1] + v[2] + v[5] + v[6]  # user nice system irq softirq
    return busy, sum(v[:8])


def run_with_cpu(cmd, timeout):
    """Runs cmd (ip netns exec and taskset exec the program, so the child is the program itself); returns its
    stdout and the CPU seconds (user + system, including softirq work the kernel charged to it) it used."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.time() + timeout
    out = ""
    while time.time() < deadline:
        r, _, _ = select.select([p.stdout], [], [], 1)
        if r:
            chunk = p.stdout.read()
            out += chunk
            if not chunk:
                break
    _, _, ru = os.wait4(p.pid, 0)
    p.returncode = 0
    return out, ru.ru_utime + ru.ru_stime


def port_run(pair, probe, port, payload, seconds, extra_rx=()):
    sink = subprocess.Popen(pair.prefix("b") + ["taskset", "-c", "1", probe, "--port", port, "--if",
                                                pair.ifname["b"], *extra_rx, "sink", "--seconds", str(seconds)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    r, _, _ = select.select([sink.stdout], [], [], 30)
    if not r or sink.stdout.readline().strip() != "ready":
        sink.kill()
        return None
    b0, t0 = cpu_jiffies()
    blast, tx_cpu = run_with_cpu(pair.prefix("a") + ["taskset", "-c", "0", probe, "--port", port, "--if",
                                                     pair.ifname["a"], "blast", "--dst-ip", pair.ip4["b"], "--size",
                                                     str(payload), "--seconds", str(seconds)], seconds + 60)
    b1, t1 = cpu_jiffies()
    try:
        out, err = sink.communicate(timeout=seconds + 30)
    except subprocess.TimeoutExpired:
        sink.kill()
        out, err = sink.communicate()
    kv = dict(x.split("=") for x in out.split() if "=" in x)
    tx = dict(x.split("=") for x in blast.split() if "=" in x)
    return {"rx_pps": float(kv.get("pps", 0)), "tx_pps": float(tx.get("pps", 0)), "frames": int(kv.get("frames", 0)),
            "cpu_busy": (b1 - b0) / max(1, t1 - t0), "tx_per_cpu_s": int(tx.get("sent", 0)) / max(tx_cpu, 1e-6)}


def best(run, repeat, key="rx_pps"):
    results = [r for r in (run() for _ in range(max(1, repeat))) if r is not None and "error" not in r]
    return max(results, key=lambda r: r[key]) if results else None


def rtt_run(pair, probe, port, sleep, count):
    flag = ["--sleep"] if sleep else []
    pong = subprocess.Popen(pair.prefix("b") + ["taskset", "-c", "1", probe, "--port", port, "--if",
                                                pair.ifname["b"], "pong", "--dst-ip", pair.ip4["a"], "--seconds",
                                                "30", *flag], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    r, _, _ = select.select([pong.stdout], [], [], 30)
    try:
        if not r or pong.stdout.readline().strip() != "ready":
            return {}
        out = pair.exec("a", ["taskset", "-c", "0", probe, "--port", port, "--if", pair.ifname["a"], "ping",
                              "--dst-ip", pair.ip4["b"], "--count", str(count), "--size", "64", *flag],
                        check=False, timeout=60).stdout
        return dict(x.split("=") for x in out.split() if "=" in x)
    finally:
        pong.kill()
        pong.wait()


def iperf_run(pair, udp_len, seconds):
    srv = subprocess.Popen(pair.prefix("b") + ["taskset", "-c", "1", "iperf3", "-s", "-1", "-B", pair.ip4["b"]],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    try:
        out, cpu = run_with_cpu(pair.prefix("a") + ["taskset", "-c", "0", "iperf3", "-c", pair.ip4["b"], "-u", "-b",
                                                    "0", "-l", str(udp_len), "-t", str(seconds), "-J"], seconds + 30)
        s = json.loads(out)["end"]["sum"]
        return {"rx_pps": (s["packets"] - s["lost_packets"]) / s["seconds"], "tx_pps": s["packets"] / s["seconds"],
                "tx_per_cpu_s": s["packets"] / max(cpu, 1e-6)}
    except (ValueError, KeyError):
        return None
    finally:
        srv.kill()
        srv.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--probe", required=True)
    ap.add_argument("--seconds", type=float, default=4)
    ap.add_argument("--repeat", type=int, default=1, help="best of N runs per figure (the machine is shared)")
    ap.add_argument("--only", choices=["rates", "rtt", "guard"], help="run one section")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("SKIP: needs root")
        return 77
    pair = NetnsPair(mtu=4200).open()
    pair.exec("a", ["ping", "-c", "1", "-W", "2", pair.ip4["b"]], check=False)
    print(f"# {os.cpu_count()} CPUs, loadavg {open('/proc/loadavg').read().split()[:3]}, {args.seconds:g} s runs,"
          f" sender CPU0, receiver CPU1, veth MTU {pair.mtu}")
    print("# tx M/CPU-s: frames sent per CPU-second the sender used (its syscalls and the veth/receiving-kernel")
    print("# softirq work charged to it): a figure less disturbed by other load on the machine than wall-clock pps")
    if args.only in (None, "rates"):
        rates(pair, args)
    if args.only in (None, "rtt"):
        rtts(pair, args)
    if args.only in (None, "guard"):
        guards(pair, args)
    pair.close()
    return 0


def rates(pair, args):
    print(f"{'path':34} {'frame B':>8} {'rx Mpps':>8} {'tx Mpps':>8} {'rx Gbit/s':>9} {'tx M/CPU-s':>10}")
    for payload in (SMALL_PAYLOAD, 4096):
        frame = payload + (-payload % 4) + ROCE_OVERHEAD  # the BTH pad makes the payload a multiple of 4
        for port in ("socket", "dpdk"):
            r = best(lambda: port_run(pair, args.probe, port, payload, args.seconds), args.repeat)
            if r is None:
                print(f"{port + ' port':34} {frame:8} failed to start")
                continue
            print(f"{'urxe ' + port + ' port':34} {frame:8} {r['rx_pps'] / 1e6:8.3f} {r['tx_pps'] / 1e6:8.3f}"
                  f" {r['rx_pps'] * frame * 8 / 1e9:9.2f} {r['tx_per_cpu_s'] / 1e6:10.3f}")
        k = best(lambda: iperf_run(pair, frame - ETH_IP4_UDP, args.seconds), args.repeat)
        if k is None:
            print(f"{'kernel UDP (iperf3 -u)':34} {frame:8} failed")
        else:
            print(f"{'kernel UDP (iperf3 -u)':34} {frame:8} {k['rx_pps'] / 1e6:8.3f} {k['tx_pps'] / 1e6:8.3f}"
                  f" {k['rx_pps'] * frame * 8 / 1e9:9.2f} {k['tx_per_cpu_s'] / 1e6:10.3f}")


def rtts(pair, args):
    print("\n# round trips, 64 B RoCE payload, one frame in flight (port_probe ping/pong); sleep = both sides"
          " wait on rx_wait_fd between frames")
    print(f"{'path':34} {'p50 us':>8} {'p99 us':>8}")
    for port in ("socket", "dpdk"):
        for sleep in (False, True):
            r = rtt_run(pair, args.probe, port, sleep, 3000)
            name = f"urxe {port} port, {'sleep' if sleep else 'busy poll'}"
            print(f"{name:34} {r.get('p50_us', 'n/a'):>8} {r.get('p99_us', 'n/a'):>8}")


def guards(pair, args):
    print("\n# the receiving kernel and RoCE frames to its own IP (socket port, 66 B frames)")
    print("# (with veth the receiving kernel's work runs on the sender's CPU, so it shows in tx Mpps)")
    print(f"{'guard':34} {'rx Mpps':>8} {'tx Mpps':>8} {'tx M/CPU-s':>10} {'ICMP sent':>10} {'Udp InErrors':>13}")
    payload = SMALL_PAYLOAD
    for name, extra, nft in (("none", ["--no-guard"], False), ("UDP 4791 socket + drop filter", [], False),
                             ("nft netdev ingress drop", ["--no-guard"], True)):
        if nft and pair.exec("b", [args.probe, "--if", pair.ifname["b"], "guard-install"], check=False).returncode:
            print(f"{name:34} (nft unavailable)")
            continue
        s0 = pair.snmp("b")
        r = best(lambda: port_run(pair, args.probe, "socket", payload, args.seconds, extra_rx=extra), args.repeat,
                 key="tx_per_cpu_s")
        s1 = pair.snmp("b")
        if nft:
            pair.exec("b", [args.probe, "--if", pair.ifname["b"], "guard-remove"], check=False)
        if r is None:
            print(f"{name:34} failed")
            continue
        icmp = s1["Icmp.OutDestUnreachs"] - s0["Icmp.OutDestUnreachs"]
        inerr = s1["Udp.InErrors"] - s0["Udp.InErrors"]
        print(f"{name:34} {r['rx_pps'] / 1e6:8.3f} {r['tx_pps'] / 1e6:8.3f} {r['tx_per_cpu_s'] / 1e6:10.3f} {icmp:10}"
              f" {inerr:13}")


if __name__ == "__main__":
    sys.exit(main())
