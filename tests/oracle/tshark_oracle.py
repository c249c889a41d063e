#!/usr/bin/python3
"""Oracle test: every frame wire/ builds dissects in tshark as RoCEv2 (InfiniBand over UDP 4791) with the
field values it was built from, and with no malformed field and no expert warning or error.

wire_oracle gen --tshark-safe writes random frames of every opcode in wire's table (IPv4/IPv6, with and
without 802.1Q) to a pcap plus a JSON line of field values per frame; tshark dissects the pcap and this
script compares field by field. Which extension headers a frame must show comes from the IBTA table in
oracle_common, not from wire/.

How tshark is run, and why:
- HOME and XDG_* point to a temporary directory: no profile, no writable home needed, no root features.
- Every heuristic sub-dissector on "infiniband.payload" is disabled (RPC-over-RDMA, SMB Direct, NVMe-oF,
  iSER, SMC-R, LNet, SDP, FCoIB, DRBD, EoIB, Ethernet-over-IB): they would try to parse random SEND payloads
  as their own protocols and report them malformed. None of them is about the RoCE headers.
- udp.ignore_ipv6_zero_checksum: RoCEv2 sends UDP checksum 0 over IPv6 too (kernel rxe does); without it
  tshark flags every such frame as an error of the UDP layer.
- ip.check_checksum / udp.check_checksum: tshark verifies our IPv4 header and non-zero UDP checksums.
- The generator keeps UDP source ports above 4791 (Wireshark's UDP hands a datagram to the lower port's
  dissector first) and QPNs away from 0/1 (payloads of QP0/QP1 are dissected as management datagrams).
Wireshark 4.0 has no dissection for the RoCEv2 CNP (opcode 0x81): it shows "Unknown OpCode" in the Info
column, the BTH fields, and the rest of the frame (16 reserved bytes + ICRC) as "Vendor Specific or Unknown
Header Sequence" (infiniband.vendor), with no ICRC field. That is what is asserted for CNPs. The same holds
for Annex A19's ATOMIC WRITE (0x1d, "Unknown (29)"), whose layout the Scapy oracle checks instead.
XRC (IBTA Annex A14, 0xa0-0xb7): Wireshark 4.0 names the opcodes ("Extended Reliable Connection (XRC) -
...", checked against its RC names with `tshark -G values`) but has no header sequence for them: it does not
dissect the XRCETH, nor any header after the BTH (a request's RETH/AtomicETH/ImmDt/IETH, a response's AETH),
the payload or the ICRC. Info says "Unknown OpCode" and everything after the BTH is vendor data. What is
asserted for XRC frames: opcode, BTH fields, lengths (Ethernet/IP/UDP) and checksums as for every frame, the
bytes after the BTH (beginning with the XRCETH on requests) and the ICRC by oracle_common.icrc_ref. The
XRCETH's place and every XRC header field are checked by the Scapy oracle.
Seed: URXE_ORACLE_SEED (printed on every run).
"""

import collections
import ipaddress
import json
import os
import shutil
import subprocess
import tempfile
import time

from oracle_common import (ATOMIC_WRITE_OPCODE, CNP_OPCODE, XRC_BASE, check_opcode_table, fail, icrc_ref,
                           pad_count, parse_args, run_tool, seed_from_env)

HEURISTICS_OFF = ["rpcrdma_infiniband", "smb_direct_infiniband", "nvme_rdma", "iser_infiniband",
                  "smcr_infiniband", "lnet_ib", "sdp_infiniband", "fc_infiniband", "drbd_rdma", "mellanox_eoib",
                  "eth_over_ib"]
PREFS = ["udp.ignore_ipv6_zero_checksum:TRUE", "ip.check_checksum:TRUE", "udp.check_checksum:TRUE"]
PI_WARN = 0x00600000  # epan/proto.h expert severities: comment < chat < note < warn < error
CHECKSUM_GOOD, CHECKSUM_NOT_PRESENT = 1, 3  # proto_checksum_enum_e

FIELDS = [
    "frame.len", "frame.protocols", "_ws.col.Info", "_ws.malformed", "_ws.expert.severity", "_ws.expert.message",
    "eth.dst", "eth.src", "vlan.priority", "vlan.dei", "vlan.id",
    "ip.dsfield", "ip.id", "ip.flags.df", "ip.ttl", "ip.len", "ip.src", "ip.dst", "ip.checksum.status",
    "ipv6.tclass", "ipv6.flow", "ipv6.hlim", "ipv6.plen", "ipv6.src", "ipv6.dst",
    "udp.srcport", "udp.dstport", "udp.length", "udp.checksum.status",
    "infiniband.bth.opcode", "infiniband.bth.se", "infiniband.bth.m", "infiniband.bth.padcnt",
    "infiniband.bth.tver", "infiniband.bth.p_key", "infiniband.reserved", "infiniband.bth.destqp",
    "infiniband.bth.a", "infiniband.bth.reserved7", "infiniband.bth.psn",
    "infiniband.deth.q_key", "infiniband.deth.srcqp",
    "infiniband.reth.va", "infiniband.reth.r_key", "infiniband.reth.dmalen",
    "infiniband.atomiceth.swapdt", "infiniband.atomiceth.cmpdt",
    "infiniband.aeth.syndrome", "infiniband.aeth.msn", "infiniband.atomicacketh.origremdt",
    "infiniband.immdt", "infiniband.ieth", "infiniband.vendor", "infiniband.invariant.crc",
    "data.data", "data.len",
]
# Header-specific fields that must be absent when the header is absent.
HDR_FIELDS = {
    "deth": ["infiniband.deth.q_key", "infiniband.deth.srcqp"],
    "reth": ["infiniband.reth.dmalen"],
    "atomiceth": ["infiniband.atomiceth.swapdt", "infiniband.atomiceth.cmpdt"],
    "aeth": ["infiniband.aeth.syndrome", "infiniband.aeth.msn"],
    "atomicacketh": ["infiniband.atomicacketh.origremdt"],
    "immdt": ["infiniband.immdt"],
    "ieth": ["infiniband.ieth"],
}


def tshark_env(tmp):
    env = dict(os.environ)
    home = os.path.join(tmp, "home")
    os.makedirs(home, exist_ok=True)
    env.update(HOME=home, XDG_CONFIG_HOME=os.path.join(home, ".config"),
               XDG_CACHE_HOME=os.path.join(home, ".cache"), XDG_DATA_HOME=os.path.join(home, ".local"))
    return env


def run_tshark(tshark, pcap, tmp):
    cmd = [tshark, "-n", "-r", pcap, "-T", "fields", "-E", "separator=\t", "-E", "occurrence=a",
           "-E", "aggregator=|", "-E", "quote=n"]
    for h in HEURISTICS_OFF:
        cmd += ["--disable-heuristic", h]
    for p in PREFS:
        cmd += ["-o", p]
    for f in FIELDS:
        cmd += ["-e", f]
    r = subprocess.run(cmd, capture_output=True, text=True, env=tshark_env(tmp))
    errs = [l for l in r.stderr.splitlines() if "could be dangerous" not in l and l.strip()]
    if r.returncode != 0 or errs:
        fail(f"tshark failed (rc {r.returncode}): {' '.join(cmd)}\n" + "\n".join(errs))
    rows = []
    for line in r.stdout.splitlines():
        vals = line.split("\t")
        if len(vals) != len(FIELDS):
            fail(f"tshark printed {len(vals)} columns, expected {len(FIELDS)}: {line[:200]}")
        rows.append({k: (v.split("|") if v else []) for k, v in zip(FIELDS, vals)})
    return rows


def check_xrc_names(tshark, table, tmp):
    """tshark's name of every XRC opcode is its RC twin's with the transport changed, and tshark names exactly
    the XRC opcodes wire's table has (RESYNC, 0xb5, is in neither)."""
    r = subprocess.run([tshark, "-G", "values"], capture_output=True, text=True, env=tshark_env(tmp))
    if r.returncode != 0:
        fail(f"tshark -G values failed (rc {r.returncode}): {r.stderr}")
    names = {}
    for line in r.stdout.splitlines():
        p = line.split("\t")
        if len(p) == 4 and p[0] == "V" and p[1] == "infiniband.bth.opcode":
            names[int(p[2])] = p[3]
    rc_prefix, xrc_prefix = "Reliable Connection (RC) - ", "Extended Reliable Connection (XRC) - "
    ours = {op for op in table if op & 0xE0 == XRC_BASE}
    theirs = {op for op, n in names.items() if n.startswith(xrc_prefix)}
    if ours != theirs:
        fail(f"XRC opcodes: wire {sorted(ours)}, tshark {sorted(theirs)}")
    for op in sorted(ours):
        rc = names.get(op & 0x1F, "")
        if not rc.startswith(rc_prefix) or names[op] != xrc_prefix + rc[len(rc_prefix):]:
            fail(f"opcode 0x{op:02x}: tshark calls it {names[op]!r}, its RC twin {rc!r}")
    return len(ours)


def num(v):
    if v in ("True", "False"):
        return int(v == "True")
    return int(v, 0)


class Checker:
    def __init__(self, seed):
        self.seed, self.compared, self.problems = seed, 0, []

    def eq(self, f, what, got, want):
        self.compared += 1
        if got != want:
            self.problems.append(f"index {f['idx']} ({f['name']}): {what}: tshark {got!r}, built {want!r}")

    def one(self, f, row, field, want, conv=num):
        vals = row[field]
        if not vals:
            self.eq(f, field, None, want)
            return
        # Some headers show the same value twice (the header item and its field); all must agree.
        got = {conv(v) for v in vals}
        self.eq(f, field, got.pop() if len(got) == 1 else sorted(got), want)

    def absent(self, f, row, field):
        self.eq(f, field + " (must be absent)", row[field], [])


def check_frame(c, f, row, table):
    frame = bytes.fromhex(f["frame"])
    name, hdrs, has_payload = table[f["op"]]
    payload = bytes.fromhex(f["payload"])
    pad = pad_count(len(payload)) if has_payload else 0
    l3 = 14 + (4 if f["vlan"] else 0)
    v4 = f["ipv"] == 4
    ip_hdr = 20 if v4 else 40
    carried = payload + b"\0" * pad  # Wireshark shows pad bytes as part of the payload
    xrc = f["op"] & 0xE0 == XRC_BASE
    if f["op"] == ATOMIC_WRITE_OPCODE or xrc:
        carried = b""  # an unknown opcode's bytes are all "vendor" data (below)
    protos = ["eth", "ethertype"] + (["vlan", "ethertype"] if f["vlan"] else []) + \
             ["ip" if v4 else "ipv6", "udp", "infiniband"] + (["data"] if carried else [])
    c.eq(f, "frame.protocols", row["frame.protocols"], [":".join(protos)])
    c.one(f, row, "frame.len", len(frame))
    c.eq(f, "_ws.malformed", row["_ws.malformed"], [])
    sev = [num(s) for s in row["_ws.expert.severity"]]
    c.eq(f, "expert warnings/errors", [m for s, m in zip(sev, row["_ws.expert.message"]) if s >= PI_WARN], [])
    mac = lambda h: ":".join(h[i:i + 2] for i in range(0, 12, 2))
    c.one(f, row, "eth.dst", mac(f["dst_mac"]), str)
    c.one(f, row, "eth.src", mac(f["src_mac"]), str)
    if f["vlan"]:
        c.one(f, row, "vlan.priority", f["vlan_tci"] >> 13)
        c.one(f, row, "vlan.dei", (f["vlan_tci"] >> 12) & 1)
        c.one(f, row, "vlan.id", f["vlan_tci"] & 0xFFF)
    addr = lambda h: ipaddress.ip_address(bytes.fromhex(h))
    if v4:
        c.one(f, row, "ip.dsfield", f["tc"])
        c.one(f, row, "ip.id", f["ip_id"])
        c.one(f, row, "ip.flags.df", f["df"])
        c.one(f, row, "ip.ttl", f["ttl"])
        c.one(f, row, "ip.len", len(frame) - l3)
        c.one(f, row, "ip.src", addr(f["src_ip"]), ipaddress.ip_address)
        c.one(f, row, "ip.dst", addr(f["dst_ip"]), ipaddress.ip_address)
        c.one(f, row, "ip.checksum.status", CHECKSUM_GOOD)
    else:
        c.one(f, row, "ipv6.tclass", f["tc"])
        c.one(f, row, "ipv6.flow", f["flow"])
        c.one(f, row, "ipv6.hlim", f["ttl"])
        c.one(f, row, "ipv6.plen", len(frame) - l3 - 40)
        c.one(f, row, "ipv6.src", addr(f["src_ip"]), ipaddress.ip_address)
        c.one(f, row, "ipv6.dst", addr(f["dst_ip"]), ipaddress.ip_address)
    c.one(f, row, "udp.srcport", f["sport"])
    c.one(f, row, "udp.dstport", 4791)
    c.one(f, row, "udp.length", len(frame) - l3 - ip_hdr)
    c.one(f, row, "udp.checksum.status", CHECKSUM_GOOD if f["udp_csum"] else CHECKSUM_NOT_PRESENT)

    c.one(f, row, "infiniband.bth.opcode", f["op"])
    c.one(f, row, "infiniband.bth.se", f["se"])
    c.one(f, row, "infiniband.bth.m", f["m"])
    c.one(f, row, "infiniband.bth.padcnt", pad)
    c.one(f, row, "infiniband.bth.tver", 0)
    c.one(f, row, "infiniband.bth.p_key", f["pkey"])
    # Wireshark 4.0 has no FECN/BECN fields: the byte holding them and the 6 reserved bits is
    # "infiniband.reserved" (the DETH's reserved byte, when present, is a second occurrence).
    resv = [f["fecn"] << 7 | f["becn"] << 6 | f["resv6"]] + ([0] if "deth" in hdrs else [])
    c.eq(f, "infiniband.reserved", [int(v, 16) for v in row["infiniband.reserved"]], resv)
    c.one(f, row, "infiniband.bth.destqp", f["dqpn"])
    c.one(f, row, "infiniband.bth.a", f["ackreq"])
    c.one(f, row, "infiniband.bth.reserved7", f["resv7"])
    c.one(f, row, "infiniband.bth.psn", f["psn"])
    if f["op"] == ATOMIC_WRITE_OPCODE:
        # IBTA Annex A19 postdates Wireshark 4.0: "Unknown OpCode", everything after the BTH (RETH, the 8
        # bytes, ICRC) as "Vendor Specific or Unknown Header Sequence". Its layout is checked by the Scapy
        # oracle; here only that tshark still dissects the headers before it.
        bth_end = l3 + ip_hdr + 8 + 12
        c.eq(f, "Info", row["_ws.col.Info"][0].startswith("Unknown OpCode"), True)
        c.eq(f, "infiniband.vendor", row["infiniband.vendor"][-1:], [frame[bth_end:].hex()])
        c.absent(f, row, "infiniband.reth.va")
        return
    if xrc:
        # Annex A14: tshark 4.0 names the opcode in the BTH but dissects nothing after it (module docstring).
        bth_end = l3 + ip_hdr + 8 + 12
        c.eq(f, "Info", row["_ws.col.Info"][0].startswith("Unknown OpCode"), True)
        c.eq(f, "infiniband.vendor", row["infiniband.vendor"][-1:], [frame[bth_end:].hex()])
        if "xrceth" in hdrs:  # reserved byte 0, then the XRC SRQ number
            c.eq(f, "XRCETH", row["infiniband.vendor"][-1][:8], "00" + f"{f['xrc_srqn']:06x}")
        for fields in HDR_FIELDS.values():
            for fld in fields:
                c.absent(f, row, fld)
        c.absent(f, row, "infiniband.invariant.crc")
        c.absent(f, row, "data.data")
        c.eq(f, "ICRC (icrc_ref)", frame[-4:], icrc_ref(frame[l3:-4], f["ipv"], ip_hdr))
        return

    for h, fields in HDR_FIELDS.items():
        if h not in hdrs:
            for fld in fields:
                c.absent(f, row, fld)
    if "deth" in hdrs:
        c.one(f, row, "infiniband.deth.q_key", f["qkey"])
        c.one(f, row, "infiniband.deth.srcqp", f["srcqp"])
    if "reth" in hdrs:  # AtomicETH's VA and R_Key are shown with the RETH field names
        c.one(f, row, "infiniband.reth.va", f["reth_va"])
        c.one(f, row, "infiniband.reth.r_key", f["reth_rkey"])
        c.one(f, row, "infiniband.reth.dmalen", f["reth_len"])
    elif "atomiceth" in hdrs:
        c.one(f, row, "infiniband.reth.va", f["at_va"])
        c.one(f, row, "infiniband.reth.r_key", f["at_rkey"])
    else:
        c.absent(f, row, "infiniband.reth.va")
        c.absent(f, row, "infiniband.reth.r_key")
    if "atomiceth" in hdrs:
        c.one(f, row, "infiniband.atomiceth.swapdt", f["at_swap"])
        c.one(f, row, "infiniband.atomiceth.cmpdt", f["at_cmp"])
    if "aeth" in hdrs:
        c.one(f, row, "infiniband.aeth.syndrome", f["aeth_syn"])
        c.one(f, row, "infiniband.aeth.msn", f["aeth_msn"])
    if "atomicacketh" in hdrs:
        c.one(f, row, "infiniband.atomicacketh.origremdt", f["ack_orig"])
    hexnum = lambda v: int(v, 16)
    if "immdt" in hdrs:
        c.one(f, row, "infiniband.immdt", f["imm"], hexnum)
    if "ieth" in hdrs:
        c.one(f, row, "infiniband.ieth", f["ieth"], hexnum)

    if carried:
        c.one(f, row, "data.data", carried.hex(), str)
        c.one(f, row, "data.len", len(carried))
    else:
        c.absent(f, row, "data.data")
    if f["op"] == CNP_OPCODE:
        bth_end = l3 + ip_hdr + 8 + 12
        c.eq(f, "Info", row["_ws.col.Info"][0].startswith("Unknown OpCode"), True)
        c.eq(f, "infiniband.vendor", row["infiniband.vendor"], [frame[bth_end:bth_end + 4].hex(),
                                                                  frame[bth_end:].hex()])
        c.eq(f, "CNP reserved bytes", frame[bth_end:-4], bytes(16))
        c.absent(f, row, "infiniband.invariant.crc")
    else:
        c.absent(f, row, "infiniband.vendor")
        c.one(f, row, "infiniband.invariant.crc", int.from_bytes(frame[-4:], "big"))


def main():
    args = parse_args(5000)
    seed = seed_from_env()
    print(f"oracle_tshark_roce: seed {seed} (replay with URXE_ORACLE_SEED={seed}), {args.count} frames",
          flush=True)
    tshark = shutil.which("tshark") or ("/usr/bin/tshark" if os.path.exists("/usr/bin/tshark") else None)
    if not tshark:
        fail("tshark not found; install it (tools/apt-packages.txt)")
    t0 = time.monotonic()
    table = check_opcode_table(args.tool)
    with tempfile.TemporaryDirectory(prefix="urxe-oracle-") as tmp:
        n_xrc = check_xrc_names(tshark, table, tmp)
        jsonl, pcap = os.path.join(tmp, "wire.jsonl"), os.path.join(tmp, "wire.pcap")
        rc, out, err = run_tool(args.tool, "gen", seed, args.count, jsonl, pcap, "--tshark-safe")
        if rc != 0:
            fail(f"wire_oracle gen failed: {out}{err}")
        with open(jsonl) as fh:
            frames = [json.loads(l) for l in fh]
        rows = run_tshark(tshark, pcap, tmp)
    if len(rows) != len(frames):
        fail(f"tshark dissected {len(rows)} frames, wire built {len(frames)}")
    c = Checker(seed)
    ops = collections.Counter()
    for f, row in zip(frames, rows):
        check_frame(c, f, row, table)
        ops[f["op"]] += 1
    if set(ops) != set(table):
        fail(f"generator missed opcodes {sorted(set(table) - set(ops))}")
    if c.problems:
        fail(f"seed {seed}: {len(c.problems)} differences between wire and tshark, first ones:\n  " +
             "\n  ".join(c.problems[:25]))
    xrc_frames = sum(n for op, n in ops.items() if op & 0xE0 == XRC_BASE)
    print(f"PASS: {len(frames)} frames ({len(ops)} opcodes, {ops[CNP_OPCODE]} CNPs, {xrc_frames} XRC frames; "
          f"tshark's names of the {n_xrc} XRC opcodes checked) dissected by tshark as built, {c.compared} field comparisons, seed {seed}, {time.monotonic() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
