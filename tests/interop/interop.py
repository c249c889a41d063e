#!/usr/bin/python3
"""Live interop between urxe (host side, network namespace uxnet) and kernel Soft-RoCE (rdma_rxe) in a
QEMU guest booted by tools/rxe-peer/.

  interop.py setup              build the guest (cached), boot peer 1, add the urxe-side veth; state.json
  interop.py teardown           stop what setup started
  interop.py smoke              host-roce-demo.py (Python RC client) against ibv_rc_pingpong in the guest
  interop.py run GROUP...       run the matrix groups (see `list`); exit 0 / 1 / 77 (skipped, reason printed)
  interop.py conform            `urxe conform` against rxe: the verdicts the catalogue's rxe notes imply
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
import sys
import time

from interop_common import (OOB_PORT, PEER_IP, PEER_IP6, PEER_MAC, PEER_TOOLS, RESULTS, STATE_FILE, TOP,
    URXE_IF, URXE_IP, URXE_IP6, URXE_MAC, URXE_NS, log, nsx, peer_exec, sh, skip, urxe_bin)
from interop_peer import cmd_setup, cmd_teardown, load_state, set_mtu
from interop_conform import cmd_conform
from interop_capture import Capture, check_capture, last_send_unacked, tshark_rows
from interop_matrix import GROUPS, cmd_list, fixture_cases, matrix
from interop_urxe import UrxeProc, cmd_urxe_side, stop_urxe_cm, urxe_available, urxe_cm_show, wait_until


# ---------------------------------------------------------------------------------------------------------
# one case


def wait_urxe_listen(proc, port, timeout=30):
    return wait_until(lambda: sh(["ip", "netns", "exec", URXE_NS, "ss", "-ltnH", f"sport = :{port}"],
                                 timeout=10).stdout.strip(), timeout, proc)


def wait_urxe_cm_listen(proc, timeout=30):
    """A librdmacm server has no TCP port to wait for: it is ready once `urxe cm show` (the CM service of
    its run directory and namespace) lists an id in state LISTEN."""
    return wait_until(lambda: re.search(r"state LISTEN", urxe_cm_show(proc).stdout), timeout, proc)


def cm_ids(proc):
    """How many ids the CM service of proc's run directory holds (`urxe cm show`), or None."""
    m = re.search(r"^ids: (\d+)$", urxe_cm_show(proc).stdout, re.M)
    return int(m.group(1)) if m else None


def wait_urxe_cm_only_listening(proc, timeout=10):
    """A persistent server's last connection is over (its DREQ/DREP exchanged) once its CM service holds no
    id but the listener."""
    return wait_until(lambda: (n := cm_ids(proc)) is not None and n <= 1, timeout, step=0.1)


def wait_rxe_cm_only_listening():
    """The same for a persistent server in the guest: every rdma_cm id it shows is in state LISTEN."""
    r = peer_exec("i=0; while [ $i -lt 100 ] && rdma resource show cm_id | grep state | grep -vq 'state LISTEN'; "
                  "do sleep 0.1; i=$((i+1)); done; rdma resource show cm_id", timeout=30)
    return not [ln for ln in r.stdout.splitlines() if " state " in ln and "state LISTEN" not in ln]


def wait_rxe_cm_listen():
    """The guest's rdma_cm ids (iproute2's `rdma resource show cm_id`): a kernel listener shows up in state
    LISTEN (one on rxe0 and, for a wildcard address, one without a device)."""
    r = peer_exec("i=0; while [ $i -lt 150 ] && ! rdma resource show cm_id | grep -q LISTEN; do sleep 0.1; "
                  "i=$((i+1)); done; rdma resource show cm_id", timeout=40)
    return "LISTEN" in r.stdout


def rdmacm_commands(case):
    """The server's and the client's command lines of a librdmacm case (client: {addr} = the server's
    address; either: {self} = its own; with reconnects, a loop of that many runs that stops at the first
    failure)."""
    def cmd(tool, args, dev, addr, own):
        a = args.replace("{addr}", addr).replace("{self}", own)
        if tool.startswith("ib_"):
            a = f"-d {dev} {a}"
        return f"{tool} {a}".strip()
    server, client = case["tool"], case["client_tool"]
    if case["urxe_role"] == "server":
        peer = cmd(client, case["args"], "rxe0", URXE_IP, PEER_IP)
        urxe = cmd(server, case["server_args"], "urxe0", URXE_IP, URXE_IP)
    else:
        peer = cmd(server, case["server_args"], "rxe0", PEER_IP, PEER_IP)
        urxe = cmd(client, case["args"], "urxe0", PEER_IP, URXE_IP)
    n = case.get("reconnects")
    loop = f"i=0; while [ $i -lt {n} ]; do %s || exit 1; i=$((i+1)); done" if n else "%s"
    if case["urxe_role"] == "server":
        return loop % peer, shlex.split(urxe)
    return peer, ["sh", "-c", loop % urxe] if n else shlex.split(urxe)


def check_cm_mads(decode_path, case, problems, notes):
    """The CM MADs of the capture (`urxe pcap decode --json`: a "cm" object with "type"): each one the case
    expects, from the side that must send it; no REJ; with reconnects, that many REQs with distinct comm IDs
    and QPNs. Notes the time from the first REQ (or SIDR_REQ) to its RTU (SIDR_REP). Returns True when the
    only REJs are "invalid service ID" (8) after a connection was made: perftest's race (see cmd_run)."""
    client = "urxe" if case["urxe_role"] == "client" else "rxe"
    server = "rxe" if client == "urxe" else "urxe"
    sent = {"urxe": {}, "rxe": {}}
    reqs, rejs, t_req, t_done = [], [], None, None
    for line in open(decode_path):
        try:
            f = json.loads(line)
        except ValueError:
            continue
        cm = f.get("cm")
        if not cm:
            continue
        side = "urxe" if f["eth"]["src"] == URXE_MAC else "rxe"
        t = cm["type"]
        sent[side][t] = sent[side].get(t, 0) + 1
        if t in ("REQ", "SIDR_REQ") and t_req is None:
            t_req = float(f["time"])
        if t in ("RTU", "SIDR_REP") and t_done is None:
            t_done = float(f["time"])
        if t == "REQ":
            reqs.append((cm.get("local_comm_id"), cm.get("local_qpn")))
        if t == "REJ":
            rejs.append(cm.get("reason"))
    notes.append(f"CM MADs sent: urxe {sent['urxe']}, rxe {sent['rxe']}")
    if t_req is not None and t_done is not None:
        notes.append(f"CM setup on the wire ({'REQ to RTU' if 'REQ' in case['cm'] else 'SIDR_REQ to SIDR_REP'}) "
                     f"{(t_done - t_req) * 1000:.1f} ms")
    want = {"REQ": (client,), "RTU": (client,), "SIDR_REQ": (client,), "REP": (server,), "SIDR_REP": (server,)}
    for t in case["cm"]:
        if t in want:
            if not all(sent[s].get(t) for s in want[t]):
                problems.append(f"no {t} from {want[t][0]} in the capture")
        elif t == "DREQ" and not (sent["urxe"].get("DREQ") or sent["rxe"].get("DREQ")):
            problems.append("no DREQ in the capture")
        elif t == "DREP" and not any(sent[a].get("DREP") and sent[b].get("DREQ")
                                     for a, b in (("urxe", "rxe"), ("rxe", "urxe"))):
            problems.append("no DREP answering the other side's DREQ in the capture")
    for side in ("urxe", "rxe"):
        if sent[side].get("REJ"):
            problems.append(f"{side} sent {sent[side]['REJ']} REJ (reasons {rejs})")
    n = case.get("reconnects")
    if n:
        # a retransmitted REQ repeats its comm ID and QPN: count distinct ones. Comm IDs must all differ. A
        # QPN may come back in a later process (urxe starts each process at a random QPN of its 4096-QPN
        # block): the kernel only rejects (REJ 10) a QPN whose connection it still holds, and each of these
        # connections ended (DREQ/DREP) before the next began, so a repeat is noted, and a REJ would fail.
        ids = {c for c, _ in reqs}
        qpns = {q for _, q in reqs}
        if len(ids) < n:
            problems.append(f"{n} connections with {len(ids)} distinct comm IDs")
        if len(qpns) < len(ids):
            notes.append(f"{len(ids)} connections from {len(qpns)} distinct QPNs")
        dreps = sent["urxe"].get("DREP", 0) + sent["rxe"].get("DREP", 0)
        if dreps < n:
            problems.append(f"{dreps} DREPs for {n} connections")
    return bool(rejs) and set(rejs) == {8} and sent["urxe"].get("RTU", 0) + sent["rxe"].get("RTU", 0) > 0


# u32 on the guest's ingress: UDP to 4791 whose BTH (at IP + 28: an IPv4 header without options) has
# destination QP 1, i.e. every CM MAD from urxe
CM_BLOCK_FILTER = ("protocol ip prio 1 u32 match ip protocol 17 0xff match ip dport 4791 0xffff "
                   "match u32 0x00000001 0x00ffffff at 32 action drop")


def cm_block(secs):
    """Drops the CM MADs from urxe for the first secs seconds (the REQ of a urxe client, the REP of a urxe
    server), so the connection is made by a retransmission; the filter's statistics go to /tmp/cmblock.log."""
    # /sbin/tc by its path: a detached busybox sh runs its own applet "tc" first, which has no filters
    r = peer_exec(f"tc qdisc del dev eth0 ingress 2>/dev/null; rm -f /tmp/cmblock.log; "
                  "tc qdisc add dev eth0 handle ffff: ingress && "
                  f"tc filter add dev eth0 parent ffff: {CM_BLOCK_FILTER} && "
                  f"echo 'sleep {secs}; /sbin/tc -s filter show dev eth0 parent ffff:; "
                  "/sbin/tc qdisc del dev eth0 ingress' > /tmp/cmblock.sh && "
                  "bgrun /tmp/cmblock.log sh /tmp/cmblock.sh",
                  timeout=30)
    if r.returncode != 0:
        raise RuntimeError("cm_block: " + r.stdout)


def cm_block_dropped():
    r = peer_exec("i=0; while [ $i -lt 100 ] && ! grep -q pkt /tmp/cmblock.log 2>/dev/null; do sleep 0.1; "
                  "i=$((i+1)); done; cat /tmp/cmblock.log", timeout=30)
    m = re.search(r"gact action drop.*?Sent \d+ bytes (\d+) pkt", r.stdout, re.S)
    return int(m.group(1)) if m else -1


# A urxe client's CM REQ (QP1, CM class 0x07, attribute ID 0x0010) coming into the guest; the host kernel has
# no netem, so the guest delays it: redirected from eth0's ingress to ifb0, whose netem holds it.
REQ_DELAY_FILTER = ("protocol ip prio 1 u32 match ip protocol 17 0xff match ip dport 4791 0xffff "
                    "match u32 0x00000001 0x00ffffff at 32 match u8 0x07 0xff at 49 "
                    "match u16 0x0010 0xffff at 64 action mirred egress redirect dev ifb0")


def req_delay_on(ms):
    """perftest -R (4.5-0.17) connects twice, and its server only listens for the second connection after
    the first has carried its parameter exchange; a client that sends its REQ sooner than the server gets to
    rdma_listen is rejected (REJ 8, invalid service ID), and perftest's own retry then uses the cm_ids it
    has just destroyed (the client dies of SIGSEGV). The rxe server in the TCG guest needs a few ms for that
    listen; a urxe client sends its REQ 1 ms after the last handshake message. Delaying each REQ from urxe
    by ms gives the server that time, as a farther client would."""
    r = peer_exec("ip link add ifb0 type ifb 2>/dev/null; ip link set ifb0 up && "
                  f"tc qdisc replace dev ifb0 root netem delay {ms}ms && "
                  "tc qdisc replace dev eth0 handle ffff: ingress && "
                  f"tc filter replace dev eth0 parent ffff: {REQ_DELAY_FILTER}", timeout=30)
    if r.returncode != 0:
        raise RuntimeError("req_delay: " + r.stdout)


def req_delay_off():
    """Removes the delay; returns how many REQs it delayed (the netem qdisc's packet count)."""
    r = peer_exec("tc -s qdisc show dev ifb0; tc qdisc del dev eth0 ingress; tc qdisc del dev ifb0 root; true",
                  timeout=30)
    m = re.search(r"qdisc netem .*?Sent \d+ bytes (\d+) pkt", r.stdout, re.S)
    return int(m.group(1)) if m else -1


# The guest's CM DREQ (GSI QP1, CM class 0x07, attribute ID 0x0015), IPv4 and IPv6. The kernel sends it once
# when the app destroys its id right after rdma_disconnect, as rping does (cm_destroy_id cancels the MAD in
# DREQ_SENT): lost, it leaves the other side's server, rxe's own as well, waiting forever for a DISCONNECTED.
GUEST_DREQ_FILTERS = (
    "protocol ip prio 1 u32 match ip protocol 17 0xff match ip dport 4791 0xffff "
    "match u32 0x00000001 0x00ffffff at 32 match u8 0x07 0xff at 49 match u16 0x0015 0xffff at 64 flowid 1:1",
    "protocol ipv6 prio 2 u32 match ip6 protocol 17 0xff match ip6 dport 4791 0xffff "
    "match u32 0x00000001 0x00ffffff at 52 match u8 0x07 0xff at 69 match u16 0x0015 0xffff at 84 flowid 1:1")


def netem_on(spec, spare_dreq=False, determ_drop=0):
    """netem both ways in the guest: egress on eth0, ingress through ifb0. spare_dreq: the guest's DREQ leaves
    by a prio band without netem (everything else goes through it). determ_drop: also drop every n-th frame
    coming in (gact's deterministic mode), so that a short run loses some for certain."""
    drop = f"gact pipe random determ drop {determ_drop} action " if determ_drop else ""
    if spare_dreq:
        egress = ("tc qdisc replace dev eth0 root handle 1: prio bands 2 priomap 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 && "
                  f"tc qdisc replace dev eth0 parent 1:2 handle 20: netem {spec} && " +
                  " && ".join(f"tc filter add dev eth0 parent 1: {f}" for f in GUEST_DREQ_FILTERS) + " && ")
    else:
        egress = f"tc qdisc replace dev eth0 root netem {spec} && "
    cmds = (egress +
            "ip link add ifb0 type ifb 2>/dev/null; ip link set ifb0 up && "
            "tc qdisc replace dev eth0 handle ffff: ingress && "
            f"tc filter replace dev eth0 parent ffff: matchall action {drop}mirred egress redirect dev ifb0 && "
            f"tc qdisc replace dev ifb0 root netem {spec}")
    r = peer_exec(cmds, timeout=30)
    if r.returncode != 0:
        raise RuntimeError("netem: " + r.stdout)


def netem_off():
    # the netem qdiscs (egress, then ingress: their "dropped" are the losses), the DREQ filters' hits, then the
    # ingress filter's actions (gact's deterministic drops, if any, as "action order 1: gact")
    r = peer_exec("tc -s qdisc show dev eth0 | grep -A2 '^qdisc netem'; "
                  "tc -s qdisc show dev ifb0 | grep -A2 '^qdisc netem'; "
                  "tc -s filter show dev eth0 parent 1: 2>/dev/null; "
                  "tc -s filter show dev eth0 parent ffff: 2>/dev/null; "
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
    rdmacm = case["kind"] == "rdmacm"
    # a persistent server (rping -P) serves every connection and is stopped once the client is done
    persistent = rdmacm and " -P " in f" {case['server_args']} "
    if rdmacm:
        peer_cmd, urxe_cmd = rdmacm_commands(case)
    # frames to a multicast group carry neither side's MAC as their destination
    match = f"(ether host {URXE_MAC} or ether multicast)" if case.get("mcast_group") else f"ether host {URXE_MAC}"
    cap = Capture(os.path.join(d, "capture.pcap"), case["mtu"], match=match)
    netem_stats = ""
    urxe = None
    peer_out, peer_rc = "", 0
    try:
        if case["netem"]:
            netem_on(case["netem"], spare_dreq=rdmacm, determ_drop=case.get("determ_drop", 0))
        if case["urxe_role"] == "server":
            urxe = UrxeProc(urxe_cmd, urxe_addr, os.path.join(d, "urxe.log"), d)
            group = case.get("mcast_group")  # a multicast receiver: ready once joined, not listening
            if group and not wait_until(lambda: f"mcast {group}" in urxe_cm_show(urxe).stdout, 30, urxe):
                problems.append(f"the urxe receiver's CM service shows no join of {group}")
            elif not group and rdmacm and not wait_urxe_cm_listen(urxe):
                problems.append("the urxe server's CM service shows no LISTEN id")
            elif not rdmacm and not wait_urxe_listen(urxe, OOB_PORT):
                problems.append("the urxe server did not listen on TCP 18515")
            else:
                if case.get("cm_block"):
                    cm_block(case["cm_block"])
                t_client = time.monotonic()
                if rdmacm:  # the guest's shell runs the client (or the loop of clients)
                    peer_cmd = f"timeout -s KILL {case['timeout']} sh -c {shlex.quote(peer_cmd)}"
                else:
                    peer_cmd = f"timeout -s KILL {case['timeout']} {peer_cmd}"
                r = peer_exec(f"echo $$ > /tmp/client.pid; exec {peer_cmd}", timeout=case["timeout"] + 20)
                peer_out, peer_rc = r.stdout, r.returncode
                notes.append(f"client wall time {time.monotonic() - t_client:.2f} s")
                if peer_rc != 0:
                    problems.append(f"rxe client exit {peer_rc}")
            if persistent:  # the last connection's DREQ/DREP before the server goes
                if not wait_urxe_cm_only_listening(urxe):
                    notes.append("the urxe server's CM service still held a connection's id after 10 s")
                if urxe.proc.poll() is not None:
                    problems.append(f"the persistent urxe server ended early (exit {urxe.proc.returncode})")
                urxe.kill()
            else:
                urxe_rc = urxe.wait(30)
                if urxe_rc != 0:
                    problems.append(f"urxe server exit {urxe_rc}")
        else:
            r = peer_exec(f"bgrun /tmp/server.log timeout -s KILL {case['timeout'] + 30} {peer_cmd}", timeout=30)
            spid = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
            if case.get("mcast_group"):
                g = case["mcast_group"]
                r = peer_exec(f"i=0; while [ $i -lt 300 ] && ! ip maddr show | grep -q ' {g}$'; "
                              f"do sleep 0.1; i=$((i+1)); done; ip maddr show | grep ' {g}$'", timeout=60)
                if g not in r.stdout:
                    problems.append(f"the rxe receiver's interface never joined {g} (ip maddr)")
            elif rdmacm:
                if not wait_rxe_cm_listen():
                    problems.append("the rxe server shows no LISTEN cm_id (rdma resource show cm_id)")
            else:
                peer_exec(f"i=0; while [ $i -lt 100 ] && ! netstat -ltn | grep -q ':{OOB_PORT} '; do sleep 0.1; "
                          "i=$((i+1)); done", timeout=30)
            if case.get("cm_block"):
                cm_block(case["cm_block"])
            if case.get("req_delay_ms"):
                req_delay_on(case["req_delay_ms"])
            t_client = time.monotonic()
            urxe = UrxeProc(urxe_cmd, urxe_addr, os.path.join(d, "urxe.log"), d)
            urxe_rc = urxe.wait(case["timeout"])
            notes.append(f"client wall time {time.monotonic() - t_client:.2f} s (with `urxe link add`)")
            if urxe_rc != 0:
                problems.append(f"urxe client exit {urxe_rc}" + (" (timed out)" if urxe_rc == 124 else ""))
            if persistent:
                if not wait_rxe_cm_only_listening():
                    notes.append("the rxe server still held a connection's cm_id after 10 s")
                r = peer_exec(f"if kill -0 {spid} 2>/dev/null; then kill {spid}; else echo '(server gone)'; fi",
                              timeout=30)
                if "(server gone)" in r.stdout:
                    problems.append("the persistent rxe server ended early")
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
        if rdmacm and urxe:
            stop_urxe_cm(urxe)
        if case["netem"]:
            netem_stats = netem_off()
        if case.get("req_delay_ms") and case["urxe_role"] == "client":
            delayed = req_delay_off()
            notes.append(f"REQs from urxe delayed {case['req_delay_ms']} ms: {delayed}")
            if delayed < 2:  # perftest -R connects twice
                problems.append(f"the REQ delay caught {delayed} REQs, not one per connection (2)")
        dropped = cap.stop()
    open(os.path.join(d, "rxe.log"), "w").write(f"$ {peer_cmd}\n{peer_out}")
    if netem_stats:
        open(os.path.join(d, "netem.txt"), "w").write(netem_stats)
    urxe_out = open(os.path.join(d, "urxe.log")).read()
    for side, out in (("rxe", peer_out), ("urxe", urxe_out)):
        server = (side == "urxe") == (case["urxe_role"] == "server")
        pat = case.get("server_pattern") if server and case.get("server_pattern") else case["ok_pattern"]
        n = case.get("ok_count", 1) if pat == case["ok_pattern"] else 1
        if len(re.findall(pat, out)) < n:
            problems.append(f"{side} output lacks /{pat}/" + (f" x {n}" if n > 1 else ""))
    if case["kind"] == "pingpong":
        for side, out in (("rxe", peer_out), ("urxe", urxe_out)):
            m = re.search(r"(?i)(data check failed|Couldn't|Failed status|parse WC failed)", out)
            if m:
                problems.append(f"{side}: {m.group(0)}")
    if dropped != 0:
        notes.append(f"tcpdump dropped {dropped} frames (not checked)")
    # problems no app-level race explains (the frames on the wire, the impairments): a run with any of them is
    # never run again
    n0 = len(problems)
    stats = check_capture(os.path.join(d, "capture.pcap"), case, problems)
    if case["kind"] == "pingpong" and case["netem"] and problems:
        final_ack_race(case, d, problems, notes, peer_out, urxe_out, peer_rc if case["urxe_role"] == "server" else 0)
    if case.get("cm_block"):
        n = cm_block_dropped()
        notes.append(f"CM MADs from urxe dropped in the first {case['cm_block']} s: {n}")
        if n < 1:
            problems.append("no CM MAD from urxe was dropped: no retransmission was needed")
    wire_problems = problems[n0:]
    relisten_race = rping_race = False
    if rdmacm:
        relisten_race = check_cm_mads(os.path.join(d, "capture.pcap.decode.jsonl"), case, problems, notes)
        # Debian 12's rping closes its CM channel while its CM thread may still ask for an event
        # (tests/lib/check.sh, known_app_race): that process then fails after its ping data
        rping_race = any("rdma_get_cm_event: Bad file descriptor" in out for out in (peer_out, urxe_out))
        for side, out in (("rxe", peer_out), ("urxe", urxe_out)):
            m = re.search(r"(?im)^.*(error|fail|mismatch|unable|timed out).*$", out)
            if m:
                problems.append(f"{side}: {m.group(0).strip()[:200]}")
    n1 = len(problems)
    if case["netem"]:
        drops = [int(x) for x in re.findall(r"(?m)^qdisc netem .*\n.*?dropped (\d+)", netem_stats)]
        if case.get("determ_drop"):
            gact = re.search(r"gact action pipe.*?Action statistics:.*?dropped (\d+)", netem_stats, re.S)
            drops.append(int(gact.group(1)) if gact else 0)
            notes.append(f"every {case['determ_drop']}th frame from urxe dropped: {drops[-1]}")
            if not drops[-1]:
                problems.append("the deterministic drop (tc gact) dropped nothing")
        notes.append(f"netem drops {drops}, NAKs {stats['naks']}, retransmitted requests {stats['retransmits']}")
        spared = sum(int(x) for x in re.findall(r"\*flowid 1:1 .*?\(rule hit \d+ success (\d+)\)", netem_stats))
        if spared:
            notes.append(f"rxe's DREQ spared from netem: {spared}")
        if not any(drops) and not case.get("expect_cnp"):
            problems.append("netem dropped nothing: the lossy run did not exercise recovery")
    if case.get("expect_cnp"):  # ECN: CE-marked frames from rxe, answered with CNPs (opcode 0x81) by urxe
        cnps = stats["urxe"].get("129", 0)
        notes.append(f"CE-marked frames from rxe {stats['ce']['rxe']}, CNPs from urxe {cnps}")
        if not stats["ce"]["rxe"]:
            problems.append("no CE-marked frame from rxe: netem ecn marked nothing")
        elif not cnps:
            problems.append("urxe sent no CNP for rxe's CE-marked frames")
    if stats.get("resolution_triggers"):
        notes.append(f"{stats['resolution_triggers']} empty UDP datagram(s) from urxe (neighbour resolution) "
                     "left out of the checks")
    secs = time.monotonic() - t0
    res = {"name": case["name"], "ok": not problems, "seconds": round(secs, 1), "problems": problems,
           "notes": notes, "frames": stats["frames"], "opcodes": {"urxe": stats["urxe"], "rxe": stats["rxe"]},
           "naks": stats["naks"], "retransmits": stats["retransmits"], "tcpdump_dropped": dropped,
           "case": case, "relisten_race": relisten_race, "rping_race": rping_race,
           "wire_problems": wire_problems + problems[n1:] + [p for p in problems if "REQ delay" in p]}
    json.dump(res, open(os.path.join(d, "result.json"), "w"), indent=1)
    return res


def final_ack_race(case, d, problems, notes, peer_out, urxe_out, peer_client_rc):
    """Under loss, ibv_*_pingpong can end with one side's last SEND unacknowledged although every message arrived
    (interop_capture.last_send_unacked says how). When the other side completed all its iterations (with -c:
    every byte checked) and the capture shows exactly that, the failure is the application's, not a transport's:
    it is noted instead of failed."""
    urxe_side = f"urxe {case['urxe_role']}"
    rxe_side = f"rxe {'client' if case['urxe_role'] == 'server' else 'server'}"
    if re.search(case["ok_pattern"], peer_out) and "transport retry counter exceeded (12) for wr_id 2" in urxe_out:
        victim, expected = "urxe", {f"{urxe_side} exit 1", f"urxe output lacks /{case['ok_pattern']}/",
                                    "urxe: Failed status", "urxe: parse WC failed"}
    elif re.search(case["ok_pattern"], urxe_out) and (
            peer_client_rc == 137 or "(server killed)" in peer_out):
        victim, expected = "rxe", {f"{rxe_side} exit 137", f"rxe output lacks /{case['ok_pattern']}/",
                                   "rxe server still running 20 s after the urxe client ended: killed"}
    else:
        return
    if not set(problems) <= expected or re.search(r"(?i)data check failed", peer_out + urxe_out):
        return
    why = last_send_unacked(os.path.join(d, "capture.pcap.decode.jsonl"), victim)
    if why is None:
        return
    notes.append(f"the {victim} side's last SEND went unacknowledged after its peer completed and exited: {why} "
                 f"(ibv_*_pingpong has no closing handshake); not failed: {problems}")
    problems.clear()


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


def keep_failed(c):
    src = os.path.join(RESULTS, c["name"])
    dst = os.path.join(RESULTS, "failed", f"{c['name']}-{time.strftime('%Y%m%d-%H%M%S')}")
    if os.path.isdir(src):
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("urxe-run"), dirs_exist_ok=True)
        log(f"    (results kept in {dst})")


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
    # URXE_INTEROP_REPEAT=N runs each case N times (to catch a rare failure: each failed run is kept)
    cases = [c for c in cases for _ in range(max(1, int(os.environ.get("URXE_INTEROP_REPEAT", "1"))))]
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
            # perftest -R makes two connections, the server listening anew for the second after the first
            # (its parameter exchange); a client faster than that server gets REJ 8 "invalid service ID" and
            # fails, kernel against kernel too. Such a run is kept (failed/) and the case run again, up to
            # three more times: with the other tests running beside it on a loaded host the server's new
            # listen can come late again (two runs in a row met it once, the guest's perftest client then
            # crashing on the error, exit 139).
            # Likewise a run in which rping's CM thread asked for an event after its main thread had closed
            # the channel (tests/lib/check.sh): seen in rping_reconnect20, whose 20 rping processes of the
            # peer each give it a chance.
            # Only a run whose other problems all follow from the race (the app's exit and output, the CM
            # exchange it cut short) is run again: a problem on the wire or with the impairments is not.
            tries = 1
            while not res["ok"] and tries < 4 and not res.get("wire_problems") and (
                    res.get("relisten_race") and c["tool"].startswith("ib_") or res.get("rping_race")):
                keep_failed(c)
                why = ("perftest's second connection found no listener (REJ 8)" if res.get("relisten_race")
                       else "rping's CM thread read its closed channel")
                log(f"  {why}: once more")
                res = run_case(c, st)
                tries += 1
                res["notes"].append(f"run {tries}: those before met {why}")
        except Exception as e:  # an infrastructure error fails this case, the others still run
            res = {"name": c["name"], "ok": False, "seconds": 0, "problems": [f"{type(e).__name__}: {e}"],
                   "notes": [], "frames": 0}
        results.append(res)
        verdict = "ok" if res["ok"] else "FAILED"
        log(f"  {verdict} in {res['seconds']}s, {res['frames']} frames" +
            "".join(f"\n    - {p}" for p in res["problems"]) + "".join(f"\n    . {n}" for n in res["notes"]))
        if not res["ok"]:  # keep the evidence: tools/test reruns a failed test, which reuses the case's directory
            keep_failed(c)
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
    if c == "conform":
        return cmd_conform()
    if c == "run":
        return cmd_run(sys.argv[2:] or list(GROUPS))
    if c == "fixtures" and len(sys.argv) >= 3:
        return cmd_fixtures(sys.argv[2], sys.argv[3:])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
