#!/usr/bin/python3
"""Compare `urxe pcap decode --json` with tshark's dissection of the same capture.

For every frame tshark sees as UDP to port 4791 (the RoCEv2 port), urxe must report a RoCE frame with a good
ICRC, and every field both decode must agree: Ethernet/VLAN/IP/UDP, the BTH, and each extension header
(DETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH; none for XRC opcodes, after whose BTH tshark 4.0
dissects nothing), plus the payload length where tshark shows the
payload, and for a CM MAD to QP1 its header and key fields (comm IDs, QPN, starting PSN, service ID). Frames
tshark does not count as RoCE must be skipped by urxe. Exit 0 when all agree.

usage: tshark_compare.py URXE_BINARY CAPTURE...
"""
import ipaddress
import json
import os
import subprocess
import sys
import tempfile

TSHARK = "/usr/bin/tshark"

# Extension headers: tshark tree name -> urxe JSON key.
EXT = {
    "infiniband.deth": "deth",
    "infiniband.reth": "reth",
    "infiniband.atomiceth": "atomic_eth",
    "infiniband.aeth": "aeth",
    "infiniband.atomicacketh": "atomic_ack_eth",
    "infiniband.immdt": "immdt",
    "infiniband.ieth": "ieth",
}


def flatten(node, tree, out):
    """tshark's nested JSON -> {(enclosing tree, field): [values...]}; trees are named by their field."""
    for k, v in node.items():
        if k.endswith("_tree") and isinstance(v, dict):
            flatten(v, k[: -len("_tree")], out)
        elif isinstance(v, dict):
            flatten(v, tree, out)
        else:
            out.setdefault((tree, k), []).extend(v if isinstance(v, list) else [v])


def tshark_frames(path):
    env = dict(os.environ)
    # rpcordma: Wireshark 4.0's RPC-over-RDMA heuristic claims small SEND payloads and marks them malformed.
    cmd = [TSHARK, "-r", path, "-n", "-T", "json", "--no-duplicate-keys", "--disable-protocol", "rpcordma",
           "-J", "frame eth vlan ip ipv6 udp infiniband data"]
    with tempfile.TemporaryDirectory(prefix="urxe-tshark-") as home:
        env["HOME"] = home  # no user profile, no recent-files writes
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if res.returncode != 0:
        raise SystemExit(f"tshark failed on {path}: {res.stderr}")
    frames = {}
    for pkt in json.loads(res.stdout):
        flat = {}
        flatten(pkt["_source"]["layers"], "", flat)
        frames[int(first(flat, "frame.number"))] = flat
    return frames


def first(flat, field, tree=None):
    """The first value of `field` (within `tree` if given), or None."""
    for (t, k), vals in flat.items():
        if k == field and (tree is None or t == tree):
            return vals[0]
    return None


def num(s):
    return int(s, 0) if isinstance(s, str) and s.startswith("0x") else int(s)


def nbytes(s):
    """tshark bytes 'aa:bb:cc' -> length."""
    return 0 if not s else len(s.split(":"))


def be_int(s):
    return int(s.replace(":", ""), 16)


class Checker:
    def __init__(self, path):
        self.path = os.path.basename(path)
        self.errors = []
        self.compared = 0

    def eq(self, frame, what, ts, ours):
        self.compared += 1
        if ts != ours:
            self.errors.append(f"{self.path} frame {frame}: {what}: tshark {ts!r}, urxe {ours!r}")

    def check_frame(self, n, t, u):
        eq = lambda what, ts, ours: self.eq(n, what, ts, ours)
        if not u.get("roce"):
            self.errors.append(f"{self.path} frame {n}: tshark says UDP port 4791, urxe skipped it: {u}")
            return
        eq("icrc_ok", True, u["icrc_ok"])
        eq("error", None, u["error"])
        # Link and network layers.
        eq("eth.src", first(t, "eth.src"), u["eth"]["src"])
        eq("eth.dst", first(t, "eth.dst"), u["eth"]["dst"])
        if first(t, "vlan.id") is not None:
            eq("vlan.vid", num(first(t, "vlan.id")), u["vlan"]["vid"])
            eq("vlan.pcp", num(first(t, "vlan.priority")), u["vlan"]["pcp"])
        else:
            eq("vlan", None, u.get("vlan"))
        ip = u["ip"]
        if first(t, "ip.src") is not None:
            eq("ip.version", 4, ip["version"])
            eq("ip.src", first(t, "ip.src"), ip["src"])
            eq("ip.dst", first(t, "ip.dst"), ip["dst"])
            eq("ip.tos", num(first(t, "ip.dsfield")), ip["tos"])
            eq("ip.ttl", num(first(t, "ip.ttl")), ip["ttl"])
            eq("ip.id", num(first(t, "ip.id")), ip["id"])
        else:
            eq("ip.version", 6, ip["version"])
            eq("ipv6.src", ipaddress.ip_address(first(t, "ipv6.src")), ipaddress.ip_address(ip["src"]))
            eq("ipv6.dst", ipaddress.ip_address(first(t, "ipv6.dst")), ipaddress.ip_address(ip["dst"]))
            eq("ipv6.tc", num(first(t, "ipv6.tclass")), ip["tc"])
            eq("ipv6.flow", num(first(t, "ipv6.flow")), ip["flow_label"])
            eq("ipv6.hlim", num(first(t, "ipv6.hlim")), ip["hop_limit"])
        eq("udp.srcport", num(first(t, "udp.srcport")), u["udp"]["sport"])
        eq("udp.dstport", num(first(t, "udp.dstport")), u["udp"]["dport"])
        eq("udp.length", num(first(t, "udp.length")), u["udp"]["length"])
        eq("udp.checksum", num(first(t, "udp.checksum")), u["udp"]["checksum"])
        # BTH.
        bth = "infiniband.bth"
        eq("opcode", num(first(t, "infiniband.bth.opcode")), u["opcode"])
        eq("se", bool(num(first(t, "infiniband.bth.se"))), u["se"])
        eq("migreq", bool(num(first(t, "infiniband.bth.m"))), u["migreq"])
        eq("pad", num(first(t, "infiniband.bth.padcnt")), u["pad"])
        eq("tver", num(first(t, "infiniband.bth.tver")), u["tver"])
        eq("pkey", num(first(t, "infiniband.bth.p_key")), u["pkey"])
        byte4 = int(first(t, "infiniband.reserved", bth), 16)  # Wireshark 4.0 names FECN/BECN's byte "Reserved"
        eq("fecn", bool(byte4 & 0x80), u["fecn"])
        eq("becn", bool(byte4 & 0x40), u["becn"])
        eq("dqpn", num(first(t, "infiniband.bth.destqp")), u["dqpn"])
        eq("ack_req", bool(num(first(t, "infiniband.bth.a"))), u["ack_req"])
        eq("psn", num(first(t, "infiniband.bth.psn")), u["psn"])
        # Extension headers: the same set, and the same values.
        ts_ext = {EXT[k] for (_, k) in t if k in EXT}
        # Wireshark 4.0 shows no headers after the BTH of the CNP (0x81), Annex A19's ATOMIC WRITE (0x1d) and
        # XRC (Annex A14, 0xa0-0xb7: the opcodes are named, but neither the XRCETH nor any later header is
        # dissected): all of it is "vendor" data.
        if u["opcode"] not in (0x81, 0x1D) and u["opcode"] & 0xE0 != 0xA0:
            eq("extension headers", sorted(ts_ext), sorted(k for k in EXT.values() if k in u))
        if "deth" in ts_ext:
            tree = "infiniband.deth"
            eq("deth.qkey", num(first(t, "infiniband.deth.q_key", tree)), u["deth"]["qkey"])
            eq("deth.src_qp", num(first(t, "infiniband.deth.srcqp", tree)), u["deth"]["src_qp"])
        if "reth" in ts_ext:
            tree = "infiniband.reth"
            eq("reth.va", num(first(t, "infiniband.reth.va", tree)), u["reth"]["va"])
            eq("reth.rkey", num(first(t, "infiniband.reth.r_key", tree)), u["reth"]["rkey"])
            eq("reth.dma_len", num(first(t, "infiniband.reth.dmalen", tree)), u["reth"]["dma_len"])
        if "atomic_eth" in ts_ext:
            tree = "infiniband.atomiceth"  # Wireshark reuses RETH's field names for the VA and R_Key
            eq("atomic_eth.va", num(first(t, "infiniband.reth.va", tree)), u["atomic_eth"]["va"])
            eq("atomic_eth.rkey", num(first(t, "infiniband.reth.r_key", tree)), u["atomic_eth"]["rkey"])
            eq("atomic_eth.swap_add", num(first(t, "infiniband.atomiceth.swapdt", tree)), u["atomic_eth"]["swap_add"])
            eq("atomic_eth.compare", num(first(t, "infiniband.atomiceth.cmpdt", tree)), u["atomic_eth"]["compare"])
        if "aeth" in ts_ext:
            a = u["aeth"]
            eq("aeth.syndrome", num(first(t, "infiniband.aeth.syndrome")), a["syndrome"])
            eq("aeth.msn", num(first(t, "infiniband.aeth.msn")), a["msn"])
            kind = num(first(t, "infiniband.aeth.syndrome.opcode"))
            eq("aeth.type", ["ACK", "RNR_NAK", "RESERVED", "NAK"][kind], a["type"])
            value_field = {0: "credit_count", 1: "timer", 2: "reserved_value", 3: "error_code"}[kind]
            eq("aeth.value", num(first(t, "infiniband.aeth.syndrome." + value_field)), a["value"])
        if "atomic_ack_eth" in ts_ext:
            eq("atomic_ack_eth.orig_data", num(first(t, "infiniband.atomicacketh.origremdt")),
               u["atomic_ack_eth"]["orig_data"])
        if "immdt" in ts_ext:
            eq("immdt", be_int(first(t, "infiniband.immdt")), u["immdt"])
        if "ieth" in ts_ext:
            eq("ieth.rkey", be_int(first(t, "infiniband.ieth")), u["ieth"]["rkey"])
        # A CM MAD to QP1: the header and the fields `urxe pcap decode` shows (Wireshark names DREP "drsp" and
        # puts DREQ's remote QPN under "req").
        attr = first(t, "infiniband.mad.attributeid")
        eq("cm present", attr is not None and first(t, "infiniband.mad.mgmtclass") == "0x07", "cm" in u)
        if "cm" in u:
            cm = u["cm"]
            eq("cm.attribute_id", num(attr), cm["attribute_id"])
            eq("cm.tid", num(first(t, "infiniband.mad.transactionid")), cm["tid"])
            eq("cm.method", num(first(t, "infiniband.mad.method")), cm["method"])
            eq("cm.status", num(first(t, "infiniband.mad.status")), cm["status"])
            msg = {0x10: "req", 0x13: "rep", 0x14: "rtu", 0x15: "dreq", 0x16: "drsp", 0x12: "rej"}.get(num(attr))
            if msg in ("req", "rep"):  # Wireshark shows their local comm ID as the message tree's value
                eq("cm.local_comm_id", num(first(t, "infiniband.cm." + msg)), cm["local_comm_id"])
            elif msg:
                eq("cm.local_comm_id", num(first(t, f"infiniband.cm.{msg}.localcommid")), cm["local_comm_id"])
            if msg and msg != "req":
                eq("cm.remote_comm_id", num(first(t, f"infiniband.cm.{msg}.remotecommid")), cm["remote_comm_id"])
            if msg in ("req", "rep"):
                eq("cm.local_qpn", num(first(t, f"infiniband.cm.{msg}.localqpn")), cm["local_qpn"])
                eq("cm.starting_psn", num(first(t, f"infiniband.cm.{msg}.startpsn")), cm["starting_psn"])
                eq("cm.local_ca_guid", num(first(t, f"infiniband.cm.{msg}.localcaguid")), cm["local_ca_guid"])
            if msg == "req":
                eq("cm.service_id", num(first(t, "infiniband.cm.req.serviceid")), cm["service_id"])
                for ts_name, ours in (("responderres", "responder_resources"), ("initdepth", "initiator_depth"),
                                      ("transpsvctype", "transport_service_type"),
                                      ("remoteresptout", "remote_cm_response_timeout"),
                                      ("localresptout", "local_cm_response_timeout"), ("retrcount", "retry_count"),
                                      ("rnrretrcount", "rnr_retry_count"), ("maxcmretr", "max_cm_retries"),
                                      ("pkey", "partition_key"), ("pppmtu", "path_mtu")):
                    eq("cm." + ours, num(first(t, "infiniband.cm.req." + ts_name)), cm[ours])
                eq("cm.srq", bool(num(first(t, "infiniband.cm.req.srq"))), cm["srq"])
                # Primary path; not the flow label and packet rate, which Wireshark 4.0 reads from the wrong bits.
                for ts_name, ours in (("prim_locallid", "local_lid"), ("prim_remotelid", "remote_lid"),
                                      ("prim_tfcclass", "traffic_class"), ("prim_hoplim", "hop_limit"),
                                      ("prim_sl", "sl"), ("prim_localacktout", "local_ack_timeout")):
                    eq("cm.primary." + ours, num(first(t, "infiniband.cm.req." + ts_name)), cm["primary"][ours])
                if first(t, "infiniband.cm.req.ip_cm.ipv") is not None:
                    ipcm = cm["ip_cm"]
                    eq("cm.ip_cm.ip_version", num(first(t, "infiniband.cm.req.ip_cm.ipv")), ipcm["ip_version"])
                    eq("cm.ip_cm.source_port", num(first(t, "infiniband.cm.req.ip_cm.sport")), ipcm["source_port"])
                    v = "4" if ipcm["ip_version"] == 4 else "6"
                    eq("cm.ip_cm.source_ip", first(t, "infiniband.cm.req.ip_cm.sip" + v), ipcm["source_ip"])
                    eq("cm.ip_cm.destination_ip", first(t, "infiniband.cm.req.ip_cm.dip" + v), ipcm["destination_ip"])
            if msg == "rep":
                for ts_name, ours in (("respres", "responder_resources"), ("initdepth", "initiator_depth"),
                                      ("tgtackdelay", "target_ack_delay"), ("rnrretrcount", "rnr_retry_count")):
                    eq("cm." + ours, num(first(t, "infiniband.cm.rep." + ts_name)), cm[ours])
                eq("cm.srq", bool(num(first(t, "infiniband.cm.rep.srq"))), cm["srq"])
            if msg == "dreq":
                eq("cm.remote_qpn", num(first(t, "infiniband.cm.req.remoteqpneecn")), cm["remote_qpn"])
            if msg == "rej":
                eq("cm.reason", num(first(t, "infiniband.cm.rej.reason")), cm["reason"])
        # Wireshark shows the ICRC as the big-endian number of its 4 bytes; urxe the little-endian one.
        crc = first(t, "infiniband.invariant.crc")
        if crc is not None:
            eq("icrc", int.from_bytes(num(crc).to_bytes(4, "big"), "little"), u["icrc"])
        # Payload (with its pad bytes) where tshark shows it as payload or undissected data.
        payload = first(t, "infiniband.payload") or first(t, "data.data")
        if payload is not None:
            eq("payload_len + pad", nbytes(payload), u["payload_len"] + u["pad"])


def compare(urxe, path):
    res = subprocess.run([urxe, "pcap", "decode", "--json", path], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        return [f"{path}: urxe exited {res.returncode}: {res.stderr}"], 0, 0
    ours = {}
    for line in res.stdout.splitlines():
        obj = json.loads(line)
        ours[obj["frame"]] = obj
    theirs = tshark_frames(path)
    c = Checker(path)
    if sorted(ours) != sorted(theirs):
        c.errors.append(f"{path}: frame numbers differ: urxe {len(ours)}, tshark {len(theirs)}")
    ts_roce = sorted(n for n, t in theirs.items() if first(t, "udp.dstport") == "4791")
    our_roce = sorted(n for n, u in ours.items() if u["roce"])
    if ts_roce != our_roce:
        c.errors.append(f"{c.path}: RoCE frames: tshark counts {len(ts_roce)} with udp.dstport==4791, "
                        f"urxe {len(our_roce)}; differing frames "
                        f"{sorted(set(ts_roce) ^ set(our_roce))[:10]}")
    for n in ts_roce:
        if n in ours:
            try:
                c.check_frame(n, theirs[n], ours[n])
            except (KeyError, TypeError) as e:  # a key urxe should have written is missing or null
                c.errors.append(f"{c.path} frame {n}: urxe JSON lacks {e!r}: {ours[n]}")
    return c.errors, len(ts_roce), c.compared


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    urxe = sys.argv[1]
    failed = False
    for path in sys.argv[2:]:
        errors, roce, compared = compare(urxe, path)
        print(f"{os.path.basename(path)}: {roce} RoCE frames, {compared} field comparisons, "
              f"{len(errors)} mismatches")
        for e in errors[:20]:
            print("  " + e)
        failed |= bool(errors)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
