#!/usr/bin/python3
"""Live interop between urxe (host side, network namespace uxnet) and kernel Soft-RoCE (rdma_rxe) in a
QEMU guest booted by tools/rxe-peer/.

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
import sys
import time

from interop_common import (OOB_PORT, PEER_IP, PEER_IP6, PEER_MAC, PEER_TOOLS, RESULTS, STATE_FILE, TOP,
    URXE_IF, URXE_IP, URXE_IP6, URXE_MAC, URXE_NS, log, nsx, peer_exec, sh, skip, urxe_bin)
from interop_peer import cmd_setup, cmd_teardown, load_state, set_mtu
from interop_capture import Capture, check_capture, tshark_rows
from interop_matrix import GROUPS, cmd_list, fixture_cases, matrix
from interop_urxe import UrxeProc, cmd_urxe_side, urxe_available


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
