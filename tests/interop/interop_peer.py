"""The interop peer (interop.py setup / teardown): the rxe guest booted by tools/rxe-peer/, the urxe-side
veth, the state file and the owner lock that lets one run hold the namespaces at a time."""
import json
import os
import signal
import sys
import time

from interop_common import (BRIDGE, NETNS, OWNER_FILE, PEER, PEER_IP, PEER_IP6, PEER_TOOLS, RESULTS,
    SKIP_FILE, STATE_FILE, URXE_BR_IF, URXE_IF, URXE_IP, URXE_IP6, URXE_MAC, URXE_NS, log, peer_exec, sh,
    skip)


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
