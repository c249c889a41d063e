"""Constants and helpers shared by the interop suite (interop.py): topology, paths, running commands
here, in the bridge namespace and in the guest, SKIP."""
import os
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
