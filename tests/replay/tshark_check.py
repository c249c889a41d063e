#!/usr/bin/python3
"""tshark as the judge of what urxe puts on the wire, for the replay test (tests/replay/README.md).

usage: tshark_check.py URXE_BINARY EMITTED_DIR FIXTURE_DIR

- EMITTED_DIR: the pcaps replay_test wrote, one per replayed capture and side (every frame the engine emitted).
- FIXTURE_DIR: pcap-fixtures/interop, the live interop captures; the frames from urxe's MAC are the ones judged.
Each judged frame must dissect as eth/ip(v6)/udp/infiniband with no malformed field and no expert warning or
error (tshark run as in tests/oracle/tshark_oracle.py: no profile, payload heuristics off, IPv6 zero UDP
checksum allowed), and tests/pcap/tshark_compare.py must find urxe's decoder and tshark agreeing on every field
of every frame of those files. Exit 0 when all pass.
"""
import glob
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "tests", "oracle"))
from tshark_oracle import HEURISTICS_OFF, PI_WARN, PREFS, tshark_env  # noqa: E402

URXE_MAC = "52:54:00:77:02:02"  # urxe's side in tests/interop
FIELDS = ["frame.number", "eth.src", "frame.protocols", "_ws.malformed", "_ws.expert.severity",
          "_ws.expert.message", "infiniband.bth.opcode"]


def rows(pcap, tmp):
    cmd = ["tshark", "-n", "-r", pcap, "-Y", "udp.port == 4791", "-T", "fields", "-E", "separator=\t",
           "-E", "occurrence=a", "-E", "aggregator=|", "-E", "quote=n"]
    for h in HEURISTICS_OFF:
        cmd += ["--disable-heuristic", h]
    for p in PREFS:
        cmd += ["-o", p]
    for f in FIELDS:
        cmd += ["-e", f]
    r = subprocess.run(cmd, capture_output=True, text=True, env=tshark_env(tmp), timeout=300)
    if r.returncode != 0:
        raise SystemExit(f"tshark failed on {pcap}: {r.stderr}")
    return [dict(zip(FIELDS, line.split("\t"))) for line in r.stdout.splitlines() if line.strip()]


def judge(pcap, only_mac, tmp, problems):
    n = 0
    for row in rows(pcap, tmp):
        if only_mac and row["eth.src"] != only_mac:
            continue
        n += 1
        where = f"{os.path.basename(pcap)} frame {row['frame.number']}"
        if "infiniband" not in row["frame.protocols"]:
            problems.append(f"{where}: not dissected as InfiniBand ({row['frame.protocols']})")
        if row["_ws.malformed"]:
            problems.append(f"{where}: malformed")
        sev = [int(s, 0) for s in row["_ws.expert.severity"].split("|") if s]
        msgs = row["_ws.expert.message"].split("|")
        warn = [m for s, m in zip(sev, msgs) if s >= PI_WARN]
        if warn:
            problems.append(f"{where}: expert {warn}")
    return n


def main():
    if len(sys.argv) == 5 and sys.argv[4] == "--list":
        sys.argv.pop()
        for p in sorted(glob.glob(os.path.join(sys.argv[2], "*.pcap"))):
            print(p)
        return 0
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    urxe, emitted_dir, fixture_dir = sys.argv[1:]
    emitted = sorted(glob.glob(os.path.join(emitted_dir, "*.pcap")))
    fixtures = sorted(glob.glob(os.path.join(fixture_dir, "*.pcap")))
    if not emitted:
        print(f"FAIL: no pcap in {emitted_dir} (replay_captures writes them)")
        return 1
    if not fixtures:
        print(f"FAIL: no pcap in {fixture_dir}")
        return 1
    problems = []
    with tempfile.TemporaryDirectory(prefix="urxe-replay-tshark-") as tmp:
        # one file per set (tshark starts in ~0.5 s; ~100 files would take minutes); frame numbers below are
        # those of the concatenation, in the sorted file order printed by --list
        merged = []
        for name, files in (("emitted", emitted), ("fixtures", fixtures)):
            out = os.path.join(tmp, name + ".pcap")
            r = subprocess.run(["mergecap", "-a", "-F", "pcap", "-w", out] + files, capture_output=True, text=True)
            if r.returncode != 0:
                raise SystemExit(f"mergecap failed: {r.stderr}")
            merged.append(out)
        n_emit = judge(merged[0], None, tmp, problems)
        n_fix = judge(merged[1], URXE_MAC, tmp, problems)
        # every field of every frame: urxe's decoder against tshark (also checks each ICRC)
        r = subprocess.run(["/usr/bin/python3", os.path.join(TOP, "tests", "pcap", "tshark_compare.py"), urxe] +
                           merged, capture_output=True, text=True, timeout=600)
        print(r.stdout, end="")
        if r.returncode != 0:
            problems.append("tshark_compare.py: " + (r.stdout + r.stderr)[-2000:])
    print(f"{n_emit} frames emitted by the engine in {len(emitted)} replays, {n_fix} frames from urxe in "
          f"{len(fixtures)} interop captures: dissected by tshark")
    for p in problems[:50]:
        print("  " + p)
    if problems:
        print(f"FAIL: {len(problems)} problem(s)")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
