"""The urxe side of an interop run: the urxe command, its availability, and the process started in netns
uxnet with a private mount namespace (`interop.py urxe-side`)."""
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

from interop_common import HERE, URXE_IF, URXE_NS, sh, urxe_bin
from interop_peer import sysfs_gid_to_addr


RUN_BASE = "/tmp/urxe-interop-run"


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
        return f"{urxe} has no 'link' subcommand (the urxe side needs `urxe link add`, `urxe env`, `urxe run`): " + \
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
    lookup (@GID@ in the command becomes the index of address --gid), then `urxe run -- CMD` (after `--`) or
    CMD itself (after `--exec`: a command that runs its own tools under `urxe run`, as `urxe conform`)."""
    urxe, gid_addr = argv[0], argv[1]
    direct = argv[2] == "--exec"
    cmd = argv[3:]
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
    if direct:
        print(f"+ {' '.join(cmd)}", flush=True)
        os.execvp(cmd[0], cmd)
    print(f"+ urxe run -- {' '.join(cmd)}", flush=True)
    os.execvp(urxe, [urxe, "run", "--"] + cmd)


class UrxeProc:
    """The urxe side of a run, in its own session so the whole process tree can be stopped."""

    def __init__(self, cmd, gid_addr, logpath, case_dir, direct=False):
        self.logf = open(logpath, "w")
        # a fresh device tree for every run. Not under case_dir: the CM service's unix socket lies in it
        # (RUN_DIR/cm/<netns>.sock), and a socket path has at most 107 bytes, which a build tree's results
        # directory and a case name exceed.
        run_dir = self.run_dir = os.path.join(RUN_BASE, os.path.basename(case_dir))
        shutil.rmtree(run_dir, ignore_errors=True)
        env = dict(os.environ, URXE_RUN_DIR=run_dir)
        full = ["ip", "netns", "exec", URXE_NS, "unshare", "--mount", "--propagation", "private",
                sys.executable, os.path.join(HERE, "interop.py"), "urxe-side", urxe_side_bin(), gid_addr,
                "--exec" if direct else "--"] + cmd
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


def wait_until(ready, timeout, proc=None, step=0.2):
    """Polls ready() until it holds (True) or timeout seconds pass, or proc (a UrxeProc) ends (False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc is not None and proc.proc.poll() is not None:
            return False
        if ready():
            return True
        time.sleep(step)
    return False


def urxe_cm_show(proc):
    return sh(["ip", "netns", "exec", URXE_NS, urxe_bin(), "cm", "show"], timeout=10,
              env=dict(os.environ, URXE_RUN_DIR=proc.run_dir))


def stop_urxe_cm(proc):
    """Stops the CM service the urxe side started (it outlives the app by its idle time and would keep
    answering on QP1 of uxv0 for a run directory that the next case no longer uses): by the PID in its pid
    file, after checking that PID is a `urxe cm`. First it may finish what the app left it: a disconnect whose
    DREQ or DREP was lost is retransmitted (after ~4.1 s) by the service, not by the app, which has ended."""
    wait_until(lambda: (r := urxe_cm_show(proc)).returncode != 0 or re.search(r"^ids: 0$", r.stdout, re.M), 15)
    cm_dir = os.path.join(proc.run_dir, "cm")
    for f in os.listdir(cm_dir) if os.path.isdir(cm_dir) else []:
        if not f.endswith(".pid"):
            continue
        try:
            pid = int(open(os.path.join(cm_dir, f)).read().strip())
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except (OSError, ValueError):
            continue
        if b"cm" in cmdline[1:3] and os.path.basename(cmdline[0]) == b"urxe":
            os.kill(pid, signal.SIGTERM)
