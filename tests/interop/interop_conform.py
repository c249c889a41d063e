"""The conform group (`interop.py conform`): `urxe conform` (tools/conform.h) on urxe0 (uxv0, netns uxnet)
against kernel rxe in the guest, whose tools run through peer-exec.sh. One conform run covers both roles:
the catalogue's runs say which side serves (peer_is_server false: the guest's client connects to urxe's
server through the bridge).

What rxe must get comes from the catalogue (`urxe conform --list --json`), not from a list here: a scenario
with an empty rxe_note passes, one with a note (kernel rxe's known deviation) fails with evidence frames,
none is inconclusive. Results in RESULTS/conform: report.txt and report.json, each run's pcapng slice and
both tools' logs, the SVG of each run with a failing scenario; the raw per-process captures (pcap/) only
when the check failed."""
import json
import os
import re
import shlex
import shutil
import time

from interop_common import PEER, PEER_IP, PEER_TOOLS, RESULTS, STATE_FILE, URXE_IP, log, peer_exec, sh, skip
from interop_peer import load_state, set_mtu
from interop_urxe import UrxeProc, stop_urxe_cm, urxe_available, urxe_side_bin


def catalogue(urxe):
    r = sh([urxe, "conform", "--list", "--json"], timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"urxe conform --list --json: exit {r.returncode}: {r.stdout[-300:]}")
    return json.loads(r.stdout)["scenarios"]


def missing_guest_tools(scenarios):
    """The programs the runs' peer commands start that the guest lacks (and timeout(1), which bounds each)."""
    tools = sorted({s["peer_cmd"].split()[0] for s in scenarios if s.get("peer_cmd")} | {"timeout"})
    r = peer_exec("for t in " + " ".join(shlex.quote(t) for t in tools) +
                  "; do command -v $t >/dev/null || echo missing $t; done", timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"guest tool check: {r.stdout[-300:]}")
    return re.findall(r"^missing (\S+)$", r.stdout, re.M)


def check_report(d, scenarios, rc, problems):
    """Each scenario's verdict against the one its rxe_note implies; the lines of the summary table."""
    try:
        report = json.load(open(os.path.join(d, "report.json")))
    except (OSError, ValueError) as e:
        problems.append(f"no report.json: {e}")
        return []
    got = {s["id"]: s for s in report["scenarios"]}
    runs = {r["id"]: r for r in report.get("runs", [])}
    rows = []
    for s in scenarios:
        want = "fail" if s["rxe_note"] else "pass"
        r = got.get(s["id"], {})
        v = r.get("verdict", "missing")
        run = runs.get(s["run"], {})
        rows.append(f"{s['id']:<18} {v:<12} expected {want:<4}  run {s['run']} "
                    f"({'peer serves' if s.get('peer_is_server', True) else 'peer connects'}, "
                    f"{run.get('ms', 0) / 1000:.1f} s)")
        if v != want:
            problems.append(f"{s['id']}: {v}, expected {want}" +
                            (f" (known rxe deviation: {s['rxe_note']})" if s["rxe_note"] else "") +
                            f"; observed: {r.get('observed', '-')}")
        elif want == "fail":
            # the deviation is shown: frames in the run's slice (and its plot, for a run with a data QP)
            if not r.get("frames"):
                problems.append(f"{s['id']}: failed without evidence frames")
            for k in ("pcapng", "plot"):
                if k in r and not os.path.exists(r[k]):
                    problems.append(f"{s['id']}: its {k} {r[k]} is missing")
    want_rc = 1 if any(s["rxe_note"] for s in scenarios) else 0
    if rc != want_rc and not problems:
        problems.append(f"urxe conform exit {rc}, expected {want_rc}")
    return rows


def cmd_conform():
    st = load_state()
    reason = urxe_available()
    if reason:
        skip(reason)
    if st.get("mtu") != 1500:
        set_mtu(1500)
        st["mtu"] = 1500
        json.dump(st, open(STATE_FILE, "w"), indent=1)
    urxe = urxe_side_bin()
    scenarios = catalogue(urxe)
    d = os.path.join(RESULTS, "conform")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    problems, rows = [], []
    t0 = time.monotonic()
    missing = missing_guest_tools(scenarios)
    if missing:
        problems.append(f"the guest lacks {missing}, which the catalogue's peer commands run: add their Debian "
                        "packages to GUEST_PKGS in tools/rxe-peer/build-guest.sh")
    else:
        # bounded by the runs' own timeouts, plus each run's setup (tool start in the guest, capture flush),
        # within ctest's TIMEOUT (600 s) so that a hang still leaves its report here
        timeouts = {s["run"]: s["timeout_ms"] for s in scenarios}
        bound = min(sum(ms / 1000 + 5 for ms in timeouts.values()) + 60, 540)
        cmd = [urxe, "conform", "--dev", "urxe0", "--gid", "@GID@", "--local-ip", URXE_IP, "--peer", PEER_IP,
               "--peer-dev", "rxe0", "--peer-gid", str(st["peer_gid_index"]["v4"]),
               "--peer-exec", f"{os.path.join(PEER_TOOLS, 'peer-exec.sh')} {PEER}", "--out", d]
        log(f"urxe conform: {len(scenarios)} scenarios in {len(timeouts)} runs, bounded by {bound:.0f} s")
        p = UrxeProc(cmd, f"::ffff:{URXE_IP}", os.path.join(d, "conform.log"), d, direct=True)
        try:
            rc = p.wait(bound)
        finally:
            p.kill()
            stop_urxe_cm(p)  # started by a run's librdmacm tool on urxe's side
        if rc not in (0, 1):
            tail = " | ".join(open(os.path.join(d, "conform.log"), errors="replace").read().strip()
                              .splitlines()[-3:])
            problems.append(f"urxe conform exit {rc}" + (f" (killed after {bound:.0f} s)" if rc == 124 else "") +
                            f": {tail}")
        else:
            rows = check_report(d, scenarios, rc, problems)
    secs = round(time.monotonic() - t0, 1)
    if not problems:
        shutil.rmtree(os.path.join(d, "pcap"), ignore_errors=True)  # each run's frames are in its slice
    res = {"name": "conform", "ok": not problems, "seconds": secs, "problems": problems, "table": rows}
    json.dump(res, open(os.path.join(d, "result.json"), "w"), indent=1)
    with open(os.path.join(RESULTS, "summary.tsv"), "a") as f:
        f.write(f"conform\t{'ok' if not problems else 'FAILED'}\t{secs}\t-\n")
    log("\n".join(["conform: verdicts against kernel rxe"] + [f"  {r}" for r in rows]))
    log(f"conform: {'ok' if not problems else 'FAILED'} in {secs} s; report {os.path.join(d, 'report.txt')}" +
        "".join(f"\n    - {p}" for p in problems))
    if problems:
        dst = os.path.join(RESULTS, "failed", f"conform-{time.strftime('%Y%m%d-%H%M%S')}")
        shutil.copytree(d, dst, dirs_exist_ok=True)
        log(f"    (results kept in {dst})")
    return 1 if problems else 0
