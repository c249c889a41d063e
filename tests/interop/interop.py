#!/usr/bin/python3
"""Live interop between urxe (host side, network namespace uxnet) and kernel Soft-RoCE (rdma_rxe) in a
QEMU guest booted by tools/rxe-peer/ (issue 5).

  interop.py setup              build the guest (cached), boot peer 1, add the urxe-side veth; state.json
  interop.py teardown           stop what setup started
  interop.py smoke              host-roce-demo.py (Python RC client) against ibv_rc_pingpong in the guest
  interop.py run GROUP...       run the matrix groups (see `list`); exit 0 / 1 / 77 (skipped, reason printed)
  interop.py list               print the matrix
  interop.py fixtures DIR [CASE...]   copy passed runs' captures (trimmed) + a provenance file to DIR
  interop.py urxe-side ...      (internal) the urxe side of one run, inside a private mount namespace

Topology: in netns urxe-rxenet the bridge rxebr0 (10.77.0.1, fd77::1) joins the guest's tap rxetap1
(guest eth0 = 10.77.0.11, fd77::11, rxe0) and a veth uxv0br <-> uxv0; uxv0 (10.77.0.2, fd77::2) sits in netns
uxnet, urxe's "host", and is the netdev of urxe0: `urxe link add urxe0 netdev uxv0`, then
`urxe run -- ibv_rc_pingpong -d urxe0 -g IDX ...`, in a private mount namespace with a tmpfs on
/dev/infiniband so nothing on the host changes.

Every run is captured with tcpdump on the guest's tap (both implementations' frames); every captured
RoCE frame must pass `urxe pcap decode --strict` (ICRC, well-formed) and dissect in tshark as InfiniBand
with no malformed field and no expert warning. Results go to $URXE_INTEROP_RESULTS (default
./interop-results): one directory per case (commands, both outputs, capture, checks) and summary.tsv
with each case's time.

Environment: URXE_BIN (the urxe command; default: urxe next to this build), URXE_INTEROP_URXE (what runs
`link`/`env`/`run` on the urxe side if not URXE_BIN), URXE_INTEROP_PEER_TOOLS
(tools/rxe-peer), URXE_INTEROP_REQUIRED=1 turns every SKIP into a failure (for machines where the
suite must run), URXE_INTEROP_ONLY=REGEX runs only the matching cases, URXE_RXE_PEER_DIR (guest cache).
"""
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
PEER_TOOLS = os.environ.get("URXE_INTEROP_PEER_TOOLS", os.path.join(TOP, "tools", "rxe-peer"))
RESULTS = os.path.abspath(os.environ.get("URXE_INTEROP_RESULTS", "interop-results"))
STATE_FILE = os.path.join(RESULTS, "state.json")
SKIP_FILE = os.path.join(RESULTS, "skip.txt")
SKIP_RC = 77
# The namespaces and the peer's addresses are global on a machine: one interop run (setup .. teardown) at a
# time. The owner file names the run holding them (its results dir and the PID of its ctest).
OWNER_FILE = "/run/lock/urxe-interop.owner" if os.path.isdir("/run/lock") else "/tmp/urxe-interop.owner"

NETNS, BRIDGE = os.environ.get("NETNS", "urxe-rxenet"), "rxebr0"  # as in tools/rxe-peer/rxe-env.sh
PEER = 1
PEER_IP, PEER_IP6 = "10.77.0.11", "fd77::11"
URXE_NS, URXE_IF, URXE_BR_IF = "uxnet", "uxv0", "uxv0br"
URXE_IP, URXE_IP6 = "10.77.0.2", "fd77::2"
URXE_MAC = "52:54:00:77:02:02"
PEER_MAC = "52:54:00:77:00:01"
OOB_PORT = 18515  # ibv_*_pingpong and perftest out-of-band TCP port

# tshark: as in tests/oracle/tshark_oracle.py (no heuristic payload dissectors, IPv6 zero UDP checksum ok).
TSHARK_HEURISTICS_OFF = ["rpcrdma_infiniband", "smb_direct_infiniband", "nvme_rdma", "iser_infiniband",
                         "smcr_infiniband", "lnet_ib", "sdp_infiniband", "fc_infiniband", "drbd_rdma",
                         "mellanox_eoib", "eth_over_ib"]
TSHARK_PREFS = ["udp.ignore_ipv6_zero_checksum:TRUE", "ip.check_checksum:TRUE", "udp.check_checksum:TRUE"]
PI_WARN = 0x00600000


def log(msg):
    print(f"[interop {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sh(cmd, timeout=60, check=False, **kw):
    """Runs cmd (list), returns CompletedProcess with text stdout+stderr merged."""
    try:
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                              check=check, errors="replace", **kw)
    except subprocess.TimeoutExpired as e:
        out = e.output.decode(errors="replace") if isinstance(e.output, bytes) else (e.output or "")
        return subprocess.CompletedProcess(cmd, 124, out + f"\n(timed out after {timeout}s)\n")


def nsx(cmd, **kw):
    return sh(["ip", "netns", "exec", NETNS] + cmd, **kw)


def peer_exec(cmd, timeout=60):
    return sh([os.path.join(PEER_TOOLS, "peer-exec.sh"), str(PEER), cmd], timeout=timeout)


def skip(reason):
    """SKIP with the exact reason (or FAIL when the suite is required to run here)."""
    if os.environ.get("URXE_INTEROP_REQUIRED") == "1":
        print(f"FAIL (URXE_INTEROP_REQUIRED=1): would skip: {reason}")
        sys.exit(1)
    print(f"SKIP: {reason}")
    sys.exit(SKIP_RC)


def urxe_bin():
    b = os.environ.get("URXE_BIN")
    if b:
        return b
    # the ctest registration passes URXE_BIN; by hand, look for the usual build dirs
    for d in ("build", "build-interop"):
        p = os.path.join(TOP, d, "tools", "urxe")
        if os.access(p, os.X_OK):
            return p
    return os.path.join(TOP, "build", "tools", "urxe")


# ---------------------------------------------------------------------------------------------------------
# setup / teardown


def owner():
    """The other live run holding the peer, as a string, or None."""
    try:
        o = json.load(open(OWNER_FILE))
    except (OSError, ValueError):
        return None
    if o.get("results") == RESULTS or not os.path.exists(f"/proc/{o.get('pid')}"):
        return None
    return f"pid {o.get('pid')}, results {o.get('results')}"


def take_ownership():
    import fcntl
    with open(OWNER_FILE + ".lock", "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        other = owner()
        if other:
            return other
        # the ctest (or shell) that runs setup lives until teardown
        json.dump({"pid": os.getppid(), "results": RESULTS}, open(OWNER_FILE, "w"))
    return None


def load_state():
    if os.path.exists(SKIP_FILE):
        skip(open(SKIP_FILE).read().strip())
    other = owner()
    if other:
        skip(f"the rxe peer and namespaces {NETNS}/{URXE_NS} belong to another interop run ({other})")
    if not os.path.exists(STATE_FILE):
        skip(f"no rxe peer: {STATE_FILE} missing (the interop_peer_setup test did not run or failed)")
    st = json.load(open(STATE_FILE))
    r = peer_exec("true", timeout=30)
    if r.returncode != 0:
        print(f"FAIL: the rxe peer booted by setup does not answer: {r.stdout.strip()}")
        sys.exit(1)
    return st


def prerequisites():
    """Reasons this machine cannot run the guest at all (each a SKIP), or None."""
    if os.geteuid() != 0:
        return "needs root (network namespace, tap device, QEMU with a tap NIC)"
    if not os.path.exists("/dev/net/tun"):
        return "/dev/net/tun is missing: no tap devices for the QEMU guest"
    for tool, pkg in (("qemu-system-x86_64", "qemu-system-x86"), ("socat", "socat"), ("tcpdump", "tcpdump"),
                      ("tshark", "tshark"), ("cpio", "cpio"), ("bc", "bc")):
        if sh(["sh", "-c", f"command -v {tool}"]).returncode != 0:
            return f"{tool} not installed (apt-get install {pkg}; tools/test installs tools/apt-packages.txt)"
    return None


def cmd_setup():
    os.makedirs(RESULTS, exist_ok=True)
    for f in (STATE_FILE, SKIP_FILE):
        if os.path.exists(f):
            os.unlink(f)
    reason = prerequisites()
    if not reason:
        other = take_ownership()
        if other:
            reason = f"the rxe peer and namespaces {NETNS}/{URXE_NS} are in use by another interop run ({other})"
    if reason:
        open(SKIP_FILE, "w").write(reason + "\n")
        skip(reason)
    t0 = time.monotonic()
    r = sh([os.path.join(PEER_TOOLS, "build-guest.sh")], timeout=1200)
    build_s = time.monotonic() - t0
    open(os.path.join(RESULTS, "build-guest.log"), "w").write(r.stdout)
    if r.returncode != 0:
        reason = f"the rxe guest could not be built (build-guest.sh exit {r.returncode}): " + \
            " | ".join(r.stdout.strip().splitlines()[-3:])
        open(SKIP_FILE, "w").write(reason + "\n")
        skip(reason)
    log(f"guest ready in {build_s:.1f}s ({r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ''})")

    started = False
    if peer_exec("true", timeout=20).returncode == 0:
        log(f"peer {PEER} already running: reusing it (teardown leaves it running)")
        boot_s = 0.0
    else:
        t0 = time.monotonic()
        r = sh([os.path.join(PEER_TOOLS, "start-peer.sh"), str(PEER)], timeout=600,
               env=dict(os.environ, MTU="1500"))
        boot_s = time.monotonic() - t0
        open(os.path.join(RESULTS, "start-peer.log"), "w").write(r.stdout)
        print(r.stdout, end="")
        if r.returncode != 0:
            reason = f"the rxe guest did not boot (start-peer.sh exit {r.returncode}): " + \
                " | ".join(r.stdout.strip().splitlines()[-4:])
            if os.environ.get("URXE_INTEROP_REQUIRED") == "1":
                print("FAIL: " + reason)
                sys.exit(1)
            open(SKIP_FILE, "w").write(reason + "\n")
            skip(reason)
        started = True
    made_veth = add_urxe_veth()
    set_mtu(1500)
    gids = peer_gids()
    need = {"v4": f"::ffff:{PEER_IP}", "v6": PEER_IP6, "ll": "fe80::5054:ff:fe77:1"}
    idx = {}
    for fam, addr in need.items():
        if addr not in gids:
            print(f"FAIL: the guest's rxe0 has no GID {addr}: {gids}")
            sys.exit(1)
        idx[fam] = gids[addr]
    st = {"peer": PEER, "started_peer": started, "made_veth": made_veth, "peer_gid_index": idx,
          "peer_gids": gids, "guest_build_seconds": round(build_s, 1), "boot_seconds": round(boot_s, 1),
          "mtu": 1500}
    json.dump(st, open(STATE_FILE, "w"), indent=1)
    log(f"peer {PEER} ready (boot {boot_s:.1f}s); guest GID indices {idx}")
    return 0


def add_urxe_veth():
    """The urxe side's netdev: veth uxv0 (in uxnet, addresses, no DAD) with its peer on the bridge."""
    # urxe's host has a namespace of its own, like a separate machine on the link: in urxe-rxenet its
    # netdev would share the subnet with the bridge's address, the route to the guest would leave by the bridge,
    # and the bridge would answer ARP for urxe's address with its own MAC.
    if sh(["ip", "-n", URXE_NS, "link", "show", URXE_IF]).returncode == 0:
        return False
    sh(["ip", "netns", "add", URXE_NS])
    for c in (["ip", "-n", NETNS, "link", "add", URXE_BR_IF, "type", "veth", "peer", "name", URXE_IF, "netns",
               URXE_NS],
              ["ip", "-n", URXE_NS, "link", "set", URXE_IF, "address", URXE_MAC],
              ["ip", "-n", URXE_NS, "link", "set", "lo", "up"],
              ["ip", "netns", "exec", URXE_NS, "sysctl", "-qw", f"net.ipv6.conf.{URXE_IF}.accept_dad=0"],
              ["ip", "-n", NETNS, "link", "set", URXE_BR_IF, "master", BRIDGE, "up"],
              ["ip", "-n", URXE_NS, "addr", "add", f"{URXE_IP}/24", "dev", URXE_IF],
              ["ip", "-n", URXE_NS, "-6", "addr", "add", f"{URXE_IP6}/64", "dev", URXE_IF, "nodad"],
              ["ip", "-n", URXE_NS, "link", "set", URXE_IF, "up"]):
        r = sh(c)
        if r.returncode != 0:
            print(f"FAIL: {' '.join(c)}: {r.stdout}")
            sys.exit(1)
    return True


def set_mtu(mtu):
    """One MTU on every hop: guest eth0 (rxe follows it at once), its tap, the bridge, the urxe veth."""
    for c in (["ip", "-n", NETNS, "link", "set", "rxetap1", "mtu", str(mtu)],
              ["ip", "-n", NETNS, "link", "set", URXE_BR_IF, "mtu", str(mtu)],
              ["ip", "-n", URXE_NS, "link", "set", URXE_IF, "mtu", str(mtu)],
              ["ip", "-n", NETNS, "link", "set", BRIDGE, "mtu", str(mtu)]):
        r = sh(c)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(c)}: {r.stdout}")
    r = peer_exec(f"ip link set eth0 mtu {mtu} && ibv_devinfo -d rxe0 | grep active_mtu", timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"guest MTU {mtu}: {r.stdout}")
    return r.stdout.strip()


def peer_gids():
    """The guest rxe0's GID table: {address: index} (RoCE v2 entries)."""
    r = peer_exec("cd /sys/class/infiniband/rxe0/ports/1/gids && "
                  "for n in $(grep -L '^0000:0000:0000:0000:0000:0000:0000:0000$' * | sort -n); do "
                  "echo $n $(cat $n) $(cat ../gid_attrs/types/$n); done", timeout=30)
    gids = {}
    for line in r.stdout.splitlines():
        p = line.split()
        if len(p) >= 2 and "v2" in line:
            gids[sysfs_gid_to_addr(p[1])] = int(p[0])
    return gids


def sysfs_gid_to_addr(g):
    import ipaddress
    a = ipaddress.IPv6Address(bytes.fromhex(g.replace(":", "")))
    return f"::ffff:{a.ipv4_mapped}" if a.ipv4_mapped else str(a)


def kill_leftovers():
    """Processes a killed run may leave behind (ctest's timeout kills the driver, not its children): every
    process inside uxnet (urxe's namespace, made by setup: only our urxe side runs there) and our tcpdump
    in urxe-rxenet. Found by namespace, each signalled by PID."""
    def ns_pids(ns):
        r = sh(["ip", "netns", "pids", ns])
        return r.stdout.split() if r.returncode == 0 else []
    pids = ns_pids(URXE_NS)
    for pid in ns_pids(NETNS):
        try:
            if open(f"/proc/{pid}/comm").read().strip() == "tcpdump":
                pids.append(pid)
        except OSError:
            pass
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
            log(f"killed leftover process {pid}")
        except (ProcessLookupError, ValueError):
            pass


def release_ownership():
    try:
        if json.load(open(OWNER_FILE)).get("results") == RESULTS:
            os.unlink(OWNER_FILE)
    except (OSError, ValueError):
        pass


def cmd_teardown():
    if not os.path.exists(STATE_FILE):
        log("nothing to tear down (no state.json)")
        release_ownership()
        return 0
    st = json.load(open(STATE_FILE))
    if owner():
        log(f"not tearing down: the peer belongs to another run ({owner()})")
        os.unlink(STATE_FILE)
        return 0
    kill_leftovers()
    if st.get("started_peer"):
        r = sh([os.path.join(PEER_TOOLS, "stop-peer.sh"), str(PEER), "--teardown"], timeout=120)
        print(r.stdout, end="")
    if st.get("made_veth"):
        sh(["ip", "-n", NETNS, "link", "del", URXE_BR_IF])
        sh(["ip", "netns", "del", URXE_NS])
    os.unlink(STATE_FILE)
    release_ownership()
    return 0


# ---------------------------------------------------------------------------------------------------------
# capture and its checks


class Capture:
    """tcpdump on the guest's tap, RoCE frames from or to `match` only (by default urxe's MAC: someone else
    using the peer at the same time does not get into the checks)."""

    def __init__(self, path, mtu, iface="rxetap1", match=f"ether host {URXE_MAC}"):
        self.path, self.err_path = path, path + ".tcpdump.txt"
        self.errf = open(self.err_path, "w")
        # --immediate-mode and a large buffer: see tools/rxe-peer/capture.sh (no ring-block latency, no
        # drops while the TCG guest keeps the cores busy); the snap length covers a full frame.
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
        time.sleep(0.3)
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


def check_capture(pcap, case, problems):
    """Every RoCE frame: urxe pcap decode --strict (ICRC, well-formed) and tshark (InfiniBand, no malformed
    field, no expert warning). Returns per-direction opcode statistics."""
    urxe = urxe_bin()
    r = sh([urxe, "pcap", "decode", "--strict", "--json", pcap], timeout=120)
    open(pcap + ".decode.jsonl", "w").write(r.stdout)
    if r.returncode != 0:
        bad = [l for l in r.stdout.splitlines() if '"icrc_ok":false' in l.replace(" ", "") or '"error"' in l]
        problems.append(f"urxe pcap decode --strict exit {r.returncode}: {bad[:3]}")
    rows = tshark_rows(pcap, ["frame.number", "eth.src", "frame.protocols", "_ws.malformed",
                              "_ws.expert.severity", "_ws.expert.message", "infiniband.bth.opcode",
                              "infiniband.aeth.syndrome", "infiniband.bth.psn", "infiniband.bth.destqp"])
    stats = {"urxe": {}, "rxe": {}, "frames": len(rows), "naks": {"urxe": 0, "rxe": 0},
             "retransmits": {"urxe": 0, "rxe": 0}}
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
        syn = row["infiniband.aeth.syndrome"].split(",")[0]
        if syn and (int(syn, 0) >> 5) in (1, 3):  # RNR NAK or NAK
            stats["naks"][side] += 1
        key = (row["infiniband.bth.destqp"], row["infiniband.bth.psn"], op)
        if op not in ("17", "18") and key in seen[side]:  # a request seen twice = retransmitted
            stats["retransmits"][side] += 1
        seen[side].add(key)
    need = case.get("frames_from", ("urxe", "rxe"))
    for side in need:
        if not stats[side]:
            problems.append(f"no RoCE frame from {side} in the capture")
    return stats


# ---------------------------------------------------------------------------------------------------------
# the matrix

PINGPONG = {"rc": "ibv_rc_pingpong", "uc": "ibv_uc_pingpong", "ud": "ibv_ud_pingpong", "srq": "ibv_srq_pingpong"}


def pingpong(group, kind, size, iters, mtu=1500, fam="v4", path_mtu=None, netem=None, extra=""):
    args = f"-s {size} -n {iters} -c {extra}".strip()
    if path_mtu and kind != "ud":
        args += f" -m {path_mtu}"
    if kind == "srq":
        args += " -q 4"
    out = []
    for role in ("server", "client"):
        name = f"{kind}_pingpong_s{size}" + (f"_m{path_mtu}" if path_mtu else "") + \
            ("" if fam == "v4" else f"_{fam}") + ("_lossy" if netem else "") + f"_urxe_{role}"
        out.append({"name": name, "group": group, "tool": PINGPONG[kind], "kind": "pingpong", "args": args,
                    "urxe_role": role, "mtu": mtu, "fam": fam, "netem": netem, "timeout": 120 if netem else 60,
                    # ibv_*_pingpong prints "<n> iters in <t> seconds" on success, on both sides
                    "ok_pattern": rf"{iters} iters in"})
    return out


def perftest(group, tool, args, mtu=1500, fam="v4", netem=None, frames_from=("urxe", "rxe")):
    out = []
    for role in ("server", "client"):
        tag = re.sub(r"[^A-Za-z0-9]+", "_", args).strip("_").lower()
        name = f"{tool}_{tag}" + ("" if fam == "v4" else f"_{fam}") + ("_lossy" if netem else "") + \
            f"_urxe_{role}"
        out.append({"name": name, "group": group, "tool": tool, "kind": "perftest", "args": f"-F {args}",
                    "urxe_role": role, "mtu": mtu, "fam": fam, "netem": netem, "timeout": 150 if netem else 90,
                    "frames_from": frames_from,
                    # perftest prints its result table ("#bytes ...") once the test ran; in the READ and
                    # atomic latency tests only the client does (the server's CPU takes no part)
                    "ok_pattern": r"#bytes",
                    "server_pattern": r"remote address" if tool in ("ib_read_lat", "ib_atomic_lat") else None})
    return out


def rdma_check(group, size, chunk, mtu=1500, path_mtu=1024, fam="v4", netem=None):
    """Our data check (rdma_check.c): READ pattern A, WRITE pattern B, READ it back, 16 FETCH_AND_ADD + 2
    CMP_AND_SWAP with every original value checked, then the server checks its own memory."""
    out = []
    for role in ("server", "client"):
        name = f"rdma_check_s{size}_c{chunk}_m{path_mtu}" + ("" if fam == "v4" else f"_{fam}") + \
            ("_lossy" if netem else "") + f"_urxe_{role}"
        out.append({"name": name, "group": group, "tool": "rdma_check", "kind": "rdma_check",
                    "args": f"-s {size} -c {chunk} -n 16 -m {path_mtu} -p {OOB_PORT}", "urxe_role": role,
                    "mtu": mtu, "fam": fam, "netem": netem, "timeout": 150 if netem else 90,
                    "ok_pattern": r"all checks passed"})
    return out


# netem for the lossy runs: applied in the guest on egress (rxe -> urxe) and, through ifb0, on ingress
# (urxe -> rxe). reorder needs a delay to reorder against; the queue limit is raised from netem's 1000 so
# that its drops are the random 2%, not tail drops of a queue that fills while the TCG guest is slow.
LOSSY = "limit 20000 delay 1ms reorder 10% 50% duplicate 1% loss 2%"


def matrix():
    m = []
    # ibv_*_pingpong with data checks (-c), several sizes vs. the 1024-byte path MTU (1500-byte link):
    # 1 byte, exactly one MTU, 4097 (5 packets, pad 3), 256 KiB (256 packets: more than rxe's 64-packet
    # AckReq window, so coalesced ACKs).
    for s, n in ((1, 10), (1024, 10), (4097, 5), (262144, 3)):
        m += pingpong("pingpong", "rc", s, n)
    for s, n in ((1, 10), (4097, 5)):
        m += pingpong("pingpong", "uc", s, n)
    for s, n in ((1, 10), (1024, 10)):
        m += pingpong("pingpong", "ud", s, n)
    for s, n in ((64, 5), (4097, 3)):
        m += pingpong("pingpong", "srq", s, n)
    # perftest, RC unless noted: 64 KiB messages for bandwidth (READ responses of 64 packets)
    for tool, a in (("ib_send_bw", "-n 50 -s 65536"), ("ib_send_lat", "-n 50 -s 64"),
                    ("ib_write_bw", "-n 50 -s 65536"), ("ib_write_lat", "-n 50 -s 64"),
                    ("ib_read_bw", "-n 50 -s 65536"), ("ib_read_lat", "-n 50 -s 64"),
                    ("ib_atomic_bw", "-n 50 -A FETCH_AND_ADD"), ("ib_atomic_bw", "-n 50 -A CMP_AND_SWAP"),
                    ("ib_atomic_lat", "-n 50 -A FETCH_AND_ADD"), ("ib_atomic_lat", "-n 50 -A CMP_AND_SWAP")):
        m += perftest("perftest", tool, a)
    for tool, a in (("ib_send_bw", "-c UD -n 50 -s 1024"), ("ib_write_bw", "-c UC -n 50 -s 4096")):
        for role_case in perftest("perftest", tool, a):
            # UD SEND and UC WRITE: data flows client -> server only, nothing comes back
            role_case["frames_from"] = ("urxe",) if role_case["urxe_role"] == "client" else ("rxe",)
            m.append(role_case)
    # our data check of WRITE/READ/atomics: 1 MiB in 64 KiB READs/WRITEs (64 packets each, READ responses
    # spanning 64 packets), and in 2 KiB pieces
    m += rdma_check("datacheck", 1 << 20, 65536)
    m += rdma_check("datacheck", 65536, 2048)
    # path MTU 4096 (4200-byte link)
    m += pingpong("mtu4096", "rc", 65536, 5, mtu=4200, path_mtu=4096)
    m += pingpong("mtu4096", "ud", 4096, 5, mtu=4200)
    m += perftest("mtu4096", "ib_write_bw", "-n 50 -s 65536 -m 4096", mtu=4200)
    m += perftest("mtu4096", "ib_read_bw", "-n 50 -s 65536 -m 4096", mtu=4200)
    m += rdma_check("mtu4096", 1 << 20, 65536, mtu=4200, path_mtu=4096)
    # IPv6 GIDs: a global (ULA) address, and the link-local default GID
    m += pingpong("ipv6", "rc", 4097, 5, fam="v6")
    m += pingpong("ipv6", "ud", 1024, 5, fam="v6")
    m += perftest("ipv6", "ib_write_bw", "-n 50 -s 65536", fam="v6")
    m += perftest("ipv6", "ib_read_lat", "-n 50 -s 64", fam="v6")
    m += perftest("ipv6", "ib_atomic_lat", "-n 50 -A CMP_AND_SWAP", fam="v6")
    m += pingpong("ipv6", "rc", 4097, 5, fam="ll")
    m += rdma_check("ipv6", 1 << 20, 65536, fam="v6")
    # lossy link: RC SEND (with data check), WRITE, READ under loss, reordering and duplication
    m += pingpong("lossy", "rc", 65536, 10, netem=LOSSY)
    m += perftest("lossy", "ib_write_bw", "-n 100 -s 65536", netem=LOSSY)
    m += perftest("lossy", "ib_read_bw", "-n 100 -s 65536", netem=LOSSY)
    m += perftest("lossy", "ib_send_bw", "-n 100 -s 65536", netem=LOSSY)
    m += rdma_check("lossy", 1 << 20, 65536, netem=LOSSY)
    return m + fixture_cases()


GROUPS = ("pingpong", "perftest", "datacheck", "mtu4096", "ipv6", "lossy", "fixtures")


def cmd_list():
    for c in matrix():
        print(f"{c['group']:9} {c['name']:55} {c['tool']} {c['args']}  (urxe {c['urxe_role']}, mtu {c['mtu']}, "
              f"{c['fam']}{', netem ' + c['netem'] if c['netem'] else ''})")
    return 0


# ---------------------------------------------------------------------------------------------------------
# the urxe side


def urxe_side_bin():
    """The command that provides `link`, `env` and `run` (urxe; URXE_INTEROP_URXE overrides it, e.g. with
    another build's urxe)."""
    return os.environ.get("URXE_INTEROP_URXE") or urxe_bin()


def urxe_available():
    """None if `urxe link/env/run` and the provider are there; else the exact reason to skip."""
    urxe = urxe_side_bin()
    if not os.access(urxe, os.X_OK):
        return f"{urxe} not built"
    r = sh([urxe, "link", "show"], timeout=30, env=dict(os.environ, URXE_RUN_DIR="/nonexistent-urxe-run"))
    if re.search(r"unknown (sub)?command|usage: urxe (pcap|<)", r.stdout, re.I) or r.returncode == 2 and \
            "link" not in r.stdout:
        return f"{urxe} has no 'link' subcommand yet (issue 4: `urxe link add`, `urxe env`, `urxe run`): " + \
            (r.stdout.strip().splitlines()[0] if r.stdout.strip() else "no output")
    r = sh([urxe, "env"], timeout=30)
    if r.returncode != 0:
        return f"`{urxe} env` failed (exit {r.returncode}): {r.stdout.strip()[:200]}"
    libs = re.findall(r"(/\S*liburxe-rdmav34\.so)", r.stdout)
    if not libs:
        return f"`urxe env` names no liburxe-rdmav34.so (provider not built?): {r.stdout.strip()[:200]}"
    if not all(os.path.exists(p) for p in libs):
        return f"provider library missing: {libs}"
    return None


def cmd_urxe_side(argv):
    """Inside `ip netns exec uxnet unshare --mount`: a tmpfs on /dev/infiniband, `urxe link add`, GID index
    lookup (@GID@ in the command becomes the index of address --gid), then `urxe run -- CMD`."""
    urxe, gid_addr = argv[0], argv[1]
    cmd = argv[argv.index("--") + 1:]
    run_dir = os.environ["URXE_RUN_DIR"]
    os.makedirs(run_dir, exist_ok=True)
    os.makedirs("/dev/infiniband", exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=755", "urxe-interop", "/dev/infiniband"], check=True)
    r = subprocess.run([urxe, "link", "add", "urxe0", "netdev", URXE_IF] + shlex.split(
        os.environ.get("URXE_LINK_ARGS", "")), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(f"+ urxe link add urxe0 netdev {URXE_IF}: exit {r.returncode} {r.stdout.strip()}", flush=True)
    if r.returncode:
        sys.exit(r.returncode)
    env = subprocess.run([urxe, "env"], stdout=subprocess.PIPE, text=True, check=True).stdout
    sysfs = re.search(r"SYSFS_PATH='?([^'\n]+)", env)
    idx = None
    if sysfs:
        gdir = os.path.join(sysfs.group(1), "class", "infiniband", "urxe0", "ports", "1", "gids")
        for n in sorted(os.listdir(gdir), key=int) if os.path.isdir(gdir) else []:
            g = open(os.path.join(gdir, n)).read().strip()
            if g.strip("0:") and sysfs_gid_to_addr(g) == gid_addr:
                idx = n
                break
    if idx is None:
        print(f"urxe-side: urxe0 has no GID {gid_addr} (SYSFS_PATH {sysfs.group(1) if sysfs else '?'})")
        sys.exit(3)
    cmd = [a.replace("@GID@", idx) for a in cmd]
    print(f"+ urxe run -- {' '.join(cmd)}", flush=True)
    os.execvp(urxe, [urxe, "run", "--"] + cmd)


class UrxeProc:
    """The urxe side of a run, in its own session so the whole process tree can be stopped."""

    def __init__(self, cmd, gid_addr, logpath, case_dir):
        self.logf = open(logpath, "w")
        run_dir = os.path.join(case_dir, "urxe-run")  # a fresh device tree for every run
        shutil.rmtree(run_dir, ignore_errors=True)
        env = dict(os.environ, URXE_RUN_DIR=run_dir)
        full = ["ip", "netns", "exec", URXE_NS, "unshare", "--mount", "--propagation", "private",
                sys.executable, os.path.abspath(__file__), "urxe-side", urxe_side_bin(), gid_addr, "--"] + cmd
        self.logf.write("$ " + " ".join(shlex.quote(a) for a in full) + "\n")
        self.logf.flush()
        self.proc = subprocess.Popen(full, stdout=self.logf, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return 124

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the session we created for it
            except ProcessLookupError:
                pass
            self.proc.wait()


# ---------------------------------------------------------------------------------------------------------
# one case


def wait_urxe_listen(proc, port, timeout=30):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.proc.poll() is not None:
            return False
        r = sh(["ip", "netns", "exec", URXE_NS, "ss", "-ltnH", f"sport = :{port}"], timeout=10)
        if r.stdout.strip():
            return True
        time.sleep(0.2)
    return False


def netem_on(spec):
    cmds = (f"tc qdisc replace dev eth0 root netem {spec} && "
            "ip link add ifb0 type ifb 2>/dev/null; ip link set ifb0 up && "
            "tc qdisc replace dev eth0 handle ffff: ingress && "
            "tc filter replace dev eth0 parent ffff: matchall action mirred egress redirect dev ifb0 && "
            f"tc qdisc replace dev ifb0 root netem {spec}")
    r = peer_exec(cmds, timeout=30)
    if r.returncode != 0:
        raise RuntimeError("netem: " + r.stdout)


def netem_off():
    r = peer_exec("tc -s qdisc show dev eth0 | head -3; tc -s qdisc show dev ifb0 | head -3; "
                  "tc qdisc del dev eth0 root; tc qdisc del dev eth0 ingress; tc qdisc del dev ifb0 root; true",
                  timeout=30)
    return r.stdout


def run_case(case, st):
    d = os.path.join(RESULTS, case["name"])
    os.makedirs(d, exist_ok=True)
    problems, notes = [], []
    t0 = time.monotonic()
    if st.get("mtu") != case["mtu"]:
        notes.append("guest " + set_mtu(case["mtu"]))
        st["mtu"] = case["mtu"]
    fam = case["fam"]
    peer_idx = st["peer_gid_index"][fam]
    urxe_addr = {"v4": f"::ffff:{URXE_IP}", "v6": URXE_IP6, "ll": st["urxe_ll"]}[fam]
    peer_dev = f"-d rxe0 -{'x' if case['kind'] == 'perftest' else 'g'} {peer_idx}"
    urxe_dev = f"-d urxe0 -{'x' if case['kind'] == 'perftest' else 'g'} @GID@"
    tool, args = case["tool"], case["args"]
    urxe_tool = tool
    if case["kind"] == "rdma_check":
        tool, urxe_tool = "/tmp/rdma_check", rdma_check_bin()
    # the client reaches the server's IPv4 address for the out-of-band TCP exchange in every case
    peer_cmd = f"{tool} {peer_dev} {args}"
    urxe_cmd = shlex.split(f"{urxe_tool} {urxe_dev} {args}")
    if case["urxe_role"] == "server":
        peer_cmd += f" {URXE_IP}"
    else:
        urxe_cmd.append(PEER_IP)
    cap = Capture(os.path.join(d, "capture.pcap"), case["mtu"])
    netem_stats = ""
    urxe = None
    peer_out = ""
    try:
        if case["netem"]:
            netem_on(case["netem"])
        if case["urxe_role"] == "server":
            urxe = UrxeProc(urxe_cmd, urxe_addr, os.path.join(d, "urxe.log"), d)
            if not wait_urxe_listen(urxe, OOB_PORT):
                problems.append("the urxe server did not listen on TCP 18515")
            else:
                r = peer_exec(f"echo $$ > /tmp/client.pid; exec timeout -s KILL {case['timeout']} {peer_cmd}",
                              timeout=case["timeout"] + 20)
                peer_out, peer_rc = r.stdout, r.returncode
                if peer_rc != 0:
                    problems.append(f"rxe client exit {peer_rc}")
            urxe_rc = urxe.wait(30)
            if urxe_rc != 0:
                problems.append(f"urxe server exit {urxe_rc}")
        else:
            r = peer_exec(f"bgrun /tmp/server.log timeout -s KILL {case['timeout'] + 30} {peer_cmd}", timeout=30)
            spid = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
            peer_exec(f"i=0; while [ $i -lt 100 ] && ! netstat -ltn | grep -q ':{OOB_PORT} '; do sleep 0.1; "
                      "i=$((i+1)); done", timeout=30)
            urxe = UrxeProc(urxe_cmd, urxe_addr, os.path.join(d, "urxe.log"), d)
            urxe_rc = urxe.wait(case["timeout"])
            if urxe_rc != 0:
                problems.append(f"urxe client exit {urxe_rc}" + (" (timed out)" if urxe_rc == 124 else ""))
            # the server's exit status, then its output; rxe retries forever once its peer QP is gone, so its
            # lifetime is bounded (timeout -s KILL above, and a kill here after 20 s)
            r = peer_exec(f"i=0; while [ $i -lt 200 ] && kill -0 {spid} 2>/dev/null; do sleep 0.1; i=$((i+1)); "
                          f"done; if kill -0 {spid} 2>/dev/null; then kill -9 {spid}; echo '(server killed)'; fi; "
                          "cat /tmp/server.log", timeout=60)
            peer_out = r.stdout
            if "(server killed)" in peer_out:
                problems.append("rxe server still running 20 s after the urxe client ended: killed")
    finally:
        if urxe:
            urxe.kill()
        if case["netem"]:
            netem_stats = netem_off()
        dropped = cap.stop()
    open(os.path.join(d, "rxe.log"), "w").write(f"$ {peer_cmd}\n{peer_out}")
    if netem_stats:
        open(os.path.join(d, "netem.txt"), "w").write(netem_stats)
    urxe_out = open(os.path.join(d, "urxe.log")).read()
    for side, out in (("rxe", peer_out), ("urxe", urxe_out)):
        server = (side == "urxe") == (case["urxe_role"] == "server")
        pat = case.get("server_pattern") if server and case.get("server_pattern") else case["ok_pattern"]
        if not re.search(pat, out):
            problems.append(f"{side} output lacks /{pat}/")
    if case["kind"] == "pingpong":
        for side, out in (("rxe", peer_out), ("urxe", urxe_out)):
            m = re.search(r"(?i)(data check failed|Couldn't|Failed status|parse WC failed)", out)
            if m:
                problems.append(f"{side}: {m.group(0)}")
    if dropped != 0:
        notes.append(f"tcpdump dropped {dropped} frames (not checked)")
    stats = check_capture(os.path.join(d, "capture.pcap"), case, problems)
    if case["netem"]:
        drops = [int(x) for x in re.findall(r"dropped (\d+)", netem_stats)]
        notes.append(f"netem drops {drops}, NAKs {stats['naks']}, retransmitted requests {stats['retransmits']}")
        if not any(drops):
            problems.append("netem dropped nothing: the lossy run did not exercise recovery")
    secs = time.monotonic() - t0
    res = {"name": case["name"], "ok": not problems, "seconds": round(secs, 1), "problems": problems,
           "notes": notes, "frames": stats["frames"], "opcodes": {"urxe": stats["urxe"], "rxe": stats["rxe"]},
           "naks": stats["naks"], "retransmits": stats["retransmits"], "tcpdump_dropped": dropped,
           "case": case}
    json.dump(res, open(os.path.join(d, "result.json"), "w"), indent=1)
    return res


def rdma_check_bin():
    p = os.environ.get("URXE_INTEROP_RDMA_CHECK", "")
    if not os.access(p, os.X_OK):
        raise RuntimeError(f"rdma_check not built (URXE_INTEROP_RDMA_CHECK='{p}')")
    return p


def upload_rdma_check():
    """Copies rdma_check into the guest (/tmp/rdma_check): same Debian 12 libc and libibverbs there."""
    import base64
    import gzip
    import hashlib
    data = open(rdma_check_bin(), "rb").read()
    md5 = hashlib.md5(data).hexdigest()
    if md5 in peer_exec("md5sum /tmp/rdma_check 2>/dev/null", timeout=30).stdout:
        return
    b64 = base64.b64encode(gzip.compress(data, 9)).decode()
    r = peer_exec(f"echo {b64} | base64 -d | gunzip > /tmp/rdma_check && chmod +x /tmp/rdma_check && "
                  "md5sum /tmp/rdma_check", timeout=60)
    if md5 not in r.stdout:
        raise RuntimeError(f"upload of rdma_check to the guest failed: {r.stdout[-300:]}")


def cmd_run(groups):
    st = load_state()
    bad = [g for g in groups if g not in GROUPS]
    if bad:
        print(f"unknown group(s) {bad}; groups: {GROUPS}")
        return 2
    reason = urxe_available()
    if reason:
        skip(reason)
    # the urxe netdev's link-local address (its default GID)
    r = sh(["ip", "-n", URXE_NS, "-6", "-o", "addr", "show", "dev", URXE_IF, "scope", "link"])
    m = re.search(r"inet6 (fe80::[0-9a-f:]+)/", r.stdout)
    st["urxe_ll"] = m.group(1) if m else "fe80::"
    only = os.environ.get("URXE_INTEROP_ONLY")
    cases = [c for c in matrix() if c["group"] in groups and (not only or re.search(only, c["name"]))]
    # smoke check of the urxe side first: the device must be there, active, with the GIDs we use
    d = os.path.join(RESULTS, "urxe_devinfo")
    os.makedirs(d, exist_ok=True)
    p = UrxeProc(["ibv_devinfo", "-v", "-d", "urxe0"], f"::ffff:{URXE_IP}", os.path.join(d, "urxe.log"), d)
    rc = p.wait(60)
    out = open(os.path.join(d, "urxe.log")).read()
    if rc != 0 or "PORT_ACTIVE" not in out:
        print(out)
        print(f"FAIL: urxe0 is not usable on {URXE_IF} (ibv_devinfo exit {rc})")
        return 1
    if any(c["kind"] == "rdma_check" for c in cases):
        upload_rdma_check()
    results = []
    t_all = time.monotonic()
    for c in cases:
        log(f"{c['name']}: {c['tool']} {c['args']} (urxe {c['urxe_role']})")
        try:
            res = run_case(c, st)
        except Exception as e:  # an infrastructure error fails this case, the others still run
            res = {"name": c["name"], "ok": False, "seconds": 0, "problems": [f"{type(e).__name__}: {e}"],
                   "notes": [], "frames": 0}
        results.append(res)
        verdict = "ok" if res["ok"] else "FAILED"
        log(f"  {verdict} in {res['seconds']}s, {res['frames']} frames" +
            "".join(f"\n    - {p}" for p in res["problems"]) + "".join(f"\n    . {n}" for n in res["notes"]))
        if not res["ok"]:  # keep the evidence: tools/test reruns a failed test, which reuses the case's directory
            src = os.path.join(RESULTS, c["name"])
            dst = os.path.join(RESULTS, "failed", f"{c['name']}-{time.strftime('%Y%m%d-%H%M%S')}")
            if os.path.isdir(src):
                shutil.copytree(src, dst, ignore=shutil.ignore_patterns("urxe-run"), dirs_exist_ok=True)
                log(f"    (results kept in {dst})")
    json.dump(st, open(STATE_FILE, "w"), indent=1)
    with open(os.path.join(RESULTS, "summary.tsv"), "a") as f:
        for r in results:
            f.write(f"{r['name']}\t{'ok' if r['ok'] else 'FAILED'}\t{r['seconds']}\t{r['frames']}\n")
    failed = [r["name"] for r in results if not r["ok"]]
    log(f"{len(results) - len(failed)}/{len(results)} cases passed in {time.monotonic() - t_all:.0f}s "
        f"(groups {', '.join(groups)}); results in {RESULTS}")
    if failed:
        print("FAILED: " + " ".join(failed))
    return 1 if failed else 0


def cmd_smoke():
    """host-roce-demo.py (RC SEND + ACK from a plain UDP socket in the host namespace) against
    ibv_rc_pingpong -n 1 -s 64 in the guest: the path host namespace <-> guest works and kernel rxe
    accepts frames built outside it; every frame of the capture decodes with a good ICRC."""
    st = load_state()
    if st.get("mtu") != 1500:
        set_mtu(1500)
        st["mtu"] = 1500
        json.dump(st, open(STATE_FILE, "w"), indent=1)
    d = os.path.join(RESULTS, "peer_smoke")
    os.makedirs(d, exist_ok=True)
    problems = []
    t0 = time.monotonic()
    cap = Capture(os.path.join(d, "capture.pcap"), 1500, match="ether host 52:54:00:77:00:fe")  # the bridge
    try:
        r = peer_exec(f"bgrun /tmp/smoke.log timeout -s KILL 60 ibv_rc_pingpong -d rxe0 "
                      f"-g {st['peer_gid_index']['v4']} -n 1 -s 64", timeout=30)
        spid = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
        peer_exec(f"i=0; while [ $i -lt 100 ] && ! netstat -ltn | grep -q ':{OOB_PORT} '; do sleep 0.1; "
                  "i=$((i+1)); done", timeout=30)
        demo = nsx(["/usr/bin/python3", os.path.join(PEER_TOOLS, "host-roce-demo.py"), PEER_IP, "10.77.0.1"],
                   timeout=60)
        r = peer_exec(f"i=0; while [ $i -lt 100 ] && kill -0 {spid} 2>/dev/null; do sleep 0.1; i=$((i+1)); "
                      f"done; kill -9 {spid} 2>/dev/null && echo '(server killed)'; cat /tmp/smoke.log", timeout=60)
        server = r.stdout
    finally:
        dropped = cap.stop()
    open(os.path.join(d, "host-roce-demo.log"), "w").write(demo.stdout)
    open(os.path.join(d, "rxe.log"), "w").write(server)
    print(demo.stdout, end="")
    print(server, end="")
    if demo.returncode != 0 or "OK: kernel rxe accepted" not in demo.stdout:
        problems.append(f"host-roce-demo.py exit {demo.returncode}")
    if not re.search(r"\b1 iters in", server):
        problems.append("the guest's ibv_rc_pingpong did not complete its iteration")
    if dropped:
        problems.append(f"tcpdump dropped {dropped} frames")
    pcap = os.path.join(d, "capture.pcap")
    # the host side here is the bridge (10.77.0.1), not the urxe veth
    rows = tshark_rows(pcap, ["frame.number", "eth.src", "infiniband.bth.opcode"])
    ops = sorted((r["eth.src"], r["infiniband.bth.opcode"]) for r in rows)
    want = sorted([("52:54:00:77:00:fe", "4"), ("52:54:00:77:00:fe", "17"), (PEER_MAC, "4"), (PEER_MAC, "17")])
    if ops != want:
        problems.append(f"capture: expected one SEND Only + one ACK each way, got {ops}")
    r = sh([urxe_bin(), "pcap", "decode", "--strict", pcap], timeout=60)
    open(pcap + ".decode.txt", "w").write(r.stdout)
    if r.returncode != 0:
        problems.append(f"urxe pcap decode --strict exit {r.returncode}: {r.stdout[-300:]}")
    r = sh(["/usr/bin/python3", os.path.join(PEER_TOOLS, "roce-icrc.py"), pcap], timeout=60)
    if r.returncode != 0 or "bad 0" not in r.stdout:
        problems.append(f"roce-icrc.py: {r.stdout.strip()}")
    log(f"smoke: {'ok' if not problems else 'FAILED'} in {time.monotonic() - t0:.1f}s, {len(rows)} frames")
    for p in problems:
        print("  - " + p)
    return 1 if problems else 0


# A small representative set of runs for pcap-fixtures/interop/ (tests/replay replays them): every transport,
# both roles, multi-packet SENDs/READ responses, a message above rxe's 64-packet AckReq window, WRITE/READ/
# FETCH_AND_ADD/CMP_AND_SWAP with known data, IPv6, MTU 4096, and recovery under loss. Group "fixtures" (not a
# ctest); sizes chosen so the whole set stays well under 1 MB (path MTU 256 where many packets are wanted).
FIXTURE_NETEM = "limit 20000 delay 1ms reorder 10% 50% duplicate 1% loss 5%"


def fixture_cases():
    m = []

    def pick(cases, role):
        for c in cases:
            if c["urxe_role"] == role:
                c["name"] = "fx_" + c["name"]
                c["group"] = "fixtures"
                m.append(c)
    pick(pingpong("fixtures", "rc", 4097, 3), "client")
    pick(pingpong("fixtures", "rc", 32768, 1, path_mtu=256), "server")
    pick(pingpong("fixtures", "uc", 4097, 3), "server")
    pick(pingpong("fixtures", "ud", 1024, 3), "client")
    pick(pingpong("fixtures", "srq", 64, 3), "server")
    pick(rdma_check("fixtures", 8192, 2048), "client")
    pick(rdma_check("fixtures", 8192, 2048), "server")
    pick(pingpong("fixtures", "rc", 8193, 3, mtu=4200, path_mtu=4096), "client")
    pick(pingpong("fixtures", "rc", 4097, 3, fam="v6"), "server")
    pick(pingpong("fixtures", "rc", 2048, 20, path_mtu=256, netem=FIXTURE_NETEM), "client")
    pick(rdma_check("fixtures", 16384, 4096, path_mtu=256, netem=FIXTURE_NETEM), "server")
    return m


FIXTURE_MAX_FRAMES = 800


def cmd_fixtures(outdir, names):
    """Copies the captures of passed runs (first FIXTURE_MAX_FRAMES frames) to OUTDIR as
    interop-<case>.pcap and writes OUTDIR/interop-PROVENANCE.md: what ran, which side is which, and the
    QP parameters both programs printed (QPNs, PSNs, rkeys, VAs, GIDs), the MTU and any netem."""
    os.makedirs(outdir, exist_ok=True)
    commit = sh(["git", "-C", TOP, "describe", "--always", "--dirty"]).stdout.strip()
    manifest = ""
    for guest in (os.environ.get("URXE_RXE_PEER_DIR", ""), os.path.expanduser("~/.cache/urxe/rxe-peer")):
        f = os.path.join(guest, "guest", "manifest.txt")
        if guest and os.path.exists(f):
            manifest = open(f).read()
            break
    vers = ", ".join(l for l in manifest.splitlines() if l.split(" ")[0] in (
        "libibverbs1", "ibverbs-providers", "perftest") or l.startswith("linux-image"))
    lines = ["# interop captures: urxe (host) <-> kernel rxe (QEMU guest)", "",
             "Made by `pcap-fixtures/interop/make-fixtures.sh BUILD_DIR` (`interop.py setup`, `run fixtures`, "
             f"`fixtures DIR`) from urxe {commit}; guest: {vers or 'see tools/rxe-peer'}. Replayed into the engine "
             "by tests/replay (each capture from both sides, except the lossy ones: urxe's side only).",
             f"urxe: MAC {URXE_MAC}, {URXE_IP} / {URXE_IP6} (netdev uxv0). rxe: MAC {PEER_MAC}, {PEER_IP} / "
             f"{PEER_IP6} (rxe0 on eth0). Captured with tcpdump on the guest's tap (rxe's frames after its "
             "egress netem, urxe's before the guest's ingress netem), UDP 4791 to/from urxe's MAC only; "
             f"at most the first {FIXTURE_MAX_FRAMES} frames of a run are kept.", ""]
    for name in names or [c["name"] for c in fixture_cases()]:
        d = os.path.join(RESULTS, name)
        try:
            res = json.load(open(os.path.join(d, "result.json")))
        except OSError:
            print(f"{name}: no result, skipped")
            continue
        if not res["ok"]:
            print(f"{name}: did not pass, skipped")
            continue
        out = os.path.join(outdir, f"interop-{name.removeprefix('fx_')}.pcap")
        r = sh(["editcap", "-F", "pcap", "-r", os.path.join(d, "capture.pcap"), out, f"1-{FIXTURE_MAX_FRAMES}"])
        if r.returncode:
            print(f"{name}: editcap: {r.stdout}")
            continue
        c = res["case"]
        params = []
        for side in ("urxe", "rxe"):
            log_text = open(os.path.join(d, f"{side}.log"), errors="replace").read()
            params += [f"  - {side}: {l.strip()}" for l in log_text.splitlines()
                       if re.search(r"(local|remote) (address|QPN)|^\s*GID:", l)]
        frames = int(sh(["sh", "-c", f"tshark -r {shlex.quote(out)} 2>/dev/null | wc -l"]).stdout.strip() or 0)
        lines += [f"## interop-{name.removeprefix('fx_')}.pcap ({frames} of {res['frames']} frames)",
                  f"- `{c['tool']} {c['args']}` with urxe as {c['urxe_role']}, rxe as "
                  f"{'client' if c['urxe_role'] == 'server' else 'server'}; link MTU {c['mtu']}, GIDs "
                  f"{ {'v4': 'IPv4-mapped', 'v6': 'IPv6 ULA', 'll': 'IPv6 link-local'}[c['fam']] }" +
                  (f"; netem `{c['netem']}` both ways" if c["netem"] else ""),
                  f"- opcodes (BTH opcode: count): urxe {res['opcodes']['urxe']}, rxe {res['opcodes']['rxe']}; "
                  f"NAKs {res.get('naks')}, retransmitted requests {res.get('retransmits')}",
                  "- QP parameters as printed by the programs:"] + params + [""]
        print(f"{name}: {frames} frames -> {out}")
    open(os.path.join(outdir, "interop-PROVENANCE.md"), "w").write("\n".join(lines))
    return 0


def on_sigterm(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")  # so the finally blocks stop our tcpdump and urxe side


def main():
    signal.signal(signal.SIGTERM, on_sigterm)
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    c = sys.argv[1]
    if c == "urxe-side":
        return cmd_urxe_side(sys.argv[2:])
    if c == "list":
        return cmd_list()
    os.makedirs(RESULTS, exist_ok=True)
    if c == "setup":
        return cmd_setup()
    if c == "teardown":
        return cmd_teardown()
    if c == "smoke":
        return cmd_smoke()
    if c == "run":
        return cmd_run(sys.argv[2:] or list(GROUPS))
    if c == "fixtures" and len(sys.argv) >= 3:
        return cmd_fixtures(sys.argv[2], sys.argv[3:])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
