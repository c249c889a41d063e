"""Two network namespaces joined by one veth pair, removed at exit (also on signals): netns_pair of
tests/lib/netns.sh for the Python drivers port_test.py and port_bench.py, with its names and cleanup
(namespaces <tag>A / <tag>B named after the process, the veth va in A <-> vb in B, created in the namespaces
so the interface names need not be unique; at exit the namespaces' processes are killed, then both are
deleted). It stays Python because the drivers use the pair as an object (exec, mac, addrs, snmp) for the
whole run, which a sourced shell helper cannot hand them."""
import atexit
import json
import os
import signal
import subprocess
import sys


def run(cmd, check=True, **kw):
    return subprocess.run(cmd, check=check, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=kw.pop("timeout", 60), **kw)


class NetnsPair:
    """Namespaces urxpA<pid> / urxpB<pid>, interfaces va / vb, 10.77.0.1|2/24 and fd77::1|2/64."""

    def __init__(self, mtu=4200):
        pid = os.getpid()
        self.ns = {"a": f"urxpA{pid}", "b": f"urxpB{pid}"}
        self.ifname = {"a": "va", "b": "vb"}
        self.ip4 = {"a": "10.77.0.1", "b": "10.77.0.2"}
        self.ip6 = {"a": "fd77::1", "b": "fd77::2"}
        self.mtu = mtu
        self._up = False
        atexit.register(self.close)
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, self._on_signal)

    def _on_signal(self, signum, _frame):
        self.close()
        sys.exit(128 + signum)

    def open(self):
        for side in "ab":
            run(["ip", "netns", "add", self.ns[side]])
            self._up = True
            # No duplicate address detection: addresses (and the link-local GID) are usable at once.
            self.exec(side, ["sysctl", "-q", "-w", "net.ipv6.conf.default.accept_dad=0",
                             "net.ipv6.conf.all.accept_dad=0"])
            self.exec(side, ["ip", "link", "set", "lo", "up"])
        run(["ip", "link", "add", self.ifname["a"], "netns", self.ns["a"], "mtu", str(self.mtu), "type", "veth",
             "peer", "name", self.ifname["b"], "netns", self.ns["b"], "mtu", str(self.mtu)])
        for side in "ab":
            self.exec(side, ["ip", "addr", "add", self.ip4[side] + "/24", "dev", self.ifname[side]])
            self.exec(side, ["ip", "addr", "add", self.ip6[side] + "/64", "dev", self.ifname[side], "nodad"])
            self.exec(side, ["ip", "link", "set", self.ifname[side], "up"])
        return self

    def close(self):
        if not self._up:
            return
        self._up = False
        for side in "ab":
            pids = subprocess.run(["ip", "netns", "pids", self.ns[side]], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, timeout=30).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", self.ns[side]], stderr=subprocess.DEVNULL, timeout=30)

    def prefix(self, side):
        return ["ip", "netns", "exec", self.ns[side]]

    def exec(self, side, cmd, check=True, **kw):
        return run(self.prefix(side) + cmd, check=check, **kw)

    def mac(self, side):
        j = json.loads(self.exec(side, ["ip", "-j", "link", "show", self.ifname[side]]).stdout)
        return j[0]["address"]

    def addrs(self, side):
        j = json.loads(self.exec(side, ["ip", "-j", "addr", "show", self.ifname[side]]).stdout)
        return [(a["family"], a["local"], a.get("scope")) for a in j[0]["addr_info"]]

    def snmp(self, side):
        """Counters of /proc/net/snmp and /proc/net/snmp6 inside the namespace, as {"Icmp.OutDestUnreachs": n}."""
        out = {}
        lines = self.exec(side, ["cat", "/proc/net/snmp"]).stdout.splitlines()
        for names, values in zip(lines[0::2], lines[1::2]):
            proto = names.split(":")[0]
            for k, v in zip(names.split()[1:], values.split()[1:]):
                out[f"{proto}.{k}"] = int(v)
        for line in self.exec(side, ["cat", "/proc/net/snmp6"]).stdout.splitlines():
            k, v = line.split()
            out[k] = int(v)
        return out
