#!/usr/bin/python3
"""Oracle test: wire/ against Scapy's RoCE layer (scapy.contrib.roce), byte for byte, both directions.

1. wire_oracle gen builds random frames of every opcode in wire's table (IPv4/IPv6, with/without 802.1Q,
   random field values and payload lengths); for each, this script builds the same packet with Scapy from
   the field values alone and compares the bytes exactly.
2. This script builds random packets with Scapy; wire_oracle check parses them and compares every decoded
   field with the values Scapy was given.

Scapy's roce layer has only BTH, AETH and CNPPadding: the other extension headers, and XRC's XRCETH (IBTA
Annex A14, which Scapy 2.5 lacks, as it lacks the XRC opcode names), are laid out here from IBTA 9.3 and
A14 (oracle_common.ext_bytes). Scapy computes the IP/UDP lengths, IPv4 and UDP checksums and, for IPv4,
the ICRC. Scapy 2.5's BTH does not set the pad count and writes ICRC 0 (with a warning) under IPv6: the pad
count and pad bytes are set here per IBTA 9.2.5, and the IPv6 ICRC comes from oracle_common.icrc_ref, which
must also reproduce Scapy's ICRC on every IPv4 packet. Seed: URXE_ORACLE_SEED (printed on every run).
"""

import ipaddress
import json
import os
import struct
import sys
import tempfile
import time

from oracle_common import (CNP_OPCODE, EdgeRng, check_opcode_table, ext_bytes, fail, icrc_ref, pad_count,
                           parse_args, run_tool, seed_from_env)

try:
    import logging
    logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
    from scapy.compat import raw
    from scapy.contrib.roce import AETH, BTH, CNPPadding, _bth_opcodes
    from scapy.layers.inet import IP, UDP, IPOption_Router_Alert
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Dot1Q, Ether
    from scapy.packet import Raw
except ImportError as e:
    fail(f"cannot import Scapy's RoCE layer ({e}); install python3-scapy (tools/apt-packages.txt)")


# RoCE v1 frames (Ethernet / GRH / BTH, Mellanox source MACs) from the hex dumps in upstream Scapy's
# test/contrib/roce.uts (secdev/scapy a7fbb7cc17fc50a0b707c81f251abf0bbcf3ed55), ICRCs as the NIC sent them.
# A GRH is laid out exactly like an IPv6 header and its ICRC masks the same fields (traffic class, flow
# label, hop limit), so these pin down the IPv6 rules of icrc_ref that Scapy 2.5 cannot check.
ROCE_V1_VECTORS = [
    "7cfe90753cd87cfe90753cd889156020000000281b4000000000000000000000ffff0f00000200000000000000000000"
    "ffff0f0000020a70ffff0000010a80a788bc000055d4c0726000000047b3000000050000000001000000e3d856bb",
    "7cfe90753cd87cfe90753cd889156020000000141b4000000000000000000000ffff0f00000200000000000000000000"
    "ffff0f0000021140ffff0000010900a788c00000000525f0c038",
]


def check_icrc_ref_ipv6_rules():
    for i, h in enumerate(ROCE_V1_VECTORS):
        b = bytes.fromhex(h)
        if icrc_ref(b[14:-4], 6, 40, udp=False) != b[-4:]:
            fail(f"icrc_ref's IPv6/GRH masking does not reproduce hardware RoCE v1 vector {i}")


def mac(h):
    return ":".join(h[i:i + 2] for i in range(0, 12, 2))


def ip_text(h):
    b = bytes.fromhex(h)
    return str(ipaddress.IPv4Address(b) if len(b) == 4 else ipaddress.IPv6Address(b))


def scapy_packet(f, hdrs, has_payload, payload, icrc=None, ip_options=None):
    """The Scapy packet for field dict `f`. `icrc` overrides the BTH ICRC field (wire bytes)."""
    layers = [Ether(dst=mac(f["dst_mac"]), src=mac(f["src_mac"]))]
    if f["vlan"]:
        tci = f["vlan_tci"]
        layers.append(Dot1Q(prio=tci >> 13, id=(tci >> 12) & 1, vlan=tci & 0xFFF))
    if f["ipv"] == 4:
        ip = IP(tos=f["tc"], id=f["ip_id"], flags="DF" if f["df"] else 0, ttl=f["ttl"], proto=17,
                src=ip_text(f["src_ip"]), dst=ip_text(f["dst_ip"]))
        if ip_options:
            ip.options = ip_options
    else:
        ip = IPv6(tc=f["tc"], fl=f["flow"], hlim=f["ttl"], nh=17, src=ip_text(f["src_ip"]),
                  dst=ip_text(f["dst_ip"]))
    pad = pad_count(len(payload)) if has_payload else 0
    bth = BTH(opcode=f["op"], solicited=f["se"], migreq=f["m"], padcount=pad, version=0, pkey=f["pkey"],
              fecn=f["fecn"], becn=f["becn"], resv6=f["resv6"], dqpn=f["dqpn"], ackreq=f["ackreq"],
              resv7=f["resv7"], psn=f["psn"])
    if icrc is not None:
        bth.icrc = struct.unpack("!I", icrc)[0]  # Scapy packs the field big-endian
    layers += [ip, UDP(sport=f["sport"], dport=f["dport"], chksum=None if f["udp_csum"] else 0), bth]
    rest = list(hdrs)
    if rest and rest[0] == "aeth":  # the one extension header Scapy knows
        layers.append(AETH(syndrome=f["aeth_syn"], msn=f["aeth_msn"]))
        rest = rest[1:]
    if f["op"] == CNP_OPCODE:
        layers.append(CNPPadding())
    tail = b"".join(ext_bytes(h, f) for h in rest) + payload + b"\0" * pad
    if tail:
        layers.append(Raw(tail))
    # Same as layers[0] / layers[1] / ..., without '/' copying the whole chain at every step.
    for lower, upper in zip(layers, layers[1:]):
        lower.add_payload(upper)
    return layers[0]


def build(f, hdrs, has_payload, payload, ip_options=None):
    """Frame bytes as Scapy builds them; under IPv6 the ICRC is filled in from icrc_ref."""
    if f["ipv"] == 4:
        return raw(scapy_packet(f, hdrs, has_payload, payload, ip_options=ip_options))
    l3 = 14 + (4 if f["vlan"] else 0)
    zero = raw(scapy_packet(f, hdrs, has_payload, payload, icrc=b"\0\0\0\0"))
    icrc = icrc_ref(zero[l3:-4], 6, 40)
    return raw(scapy_packet(f, hdrs, has_payload, payload, icrc=icrc))


def region(f, hdrs, off, frame_len):
    """Name of the header an offset of a frame falls in, for failure messages."""
    if off >= frame_len - 4:
        return f"icrc+{off - (frame_len - 4)}"
    parts = [("eth", 14)] + ([("vlan", 4)] if f["vlan"] else [])
    parts += [("ipv4" if f["ipv"] == 4 else "ipv6", 20 if f["ipv"] == 4 else 40), ("udp", 8), ("bth", 12)]
    sizes = {"deth": 8, "xrceth": 4, "reth": 16, "atomiceth": 28, "aeth": 4, "atomicacketh": 8, "immdt": 4, "ieth": 4}
    parts += [(h, sizes[h]) for h in hdrs] + ([("cnp_reserved", 16)] if f["op"] == CNP_OPCODE else [])
    start = 0
    for name, n in parts:
        if off < start + n:
            return f"{name}+{off - start}"
        start += n
    return f"payload_or_pad+{off - start}"


def forward(tool, table, seed, count, tmp):
    """wire builds, Scapy rebuilds from the same field values, bytes must be equal."""
    path = os.path.join(tmp, "wire.jsonl")
    rc, out, err = run_tool(tool, "gen", seed, count, path)
    if rc != 0:
        fail(f"wire_oracle gen failed: {out}{err}")
    n = v4_icrc_checked = 0
    seen_ops = set()
    with open(path) as fh:
        for line in fh:
            f = json.loads(line)
            name, hdrs, has_payload = table[f["op"]]
            payload = bytes.fromhex(f["payload"])
            ours = bytes.fromhex(f["frame"])
            theirs = build(f, hdrs, has_payload, payload)
            if ours != theirs:
                diff = [i for i in range(min(len(ours), len(theirs))) if ours[i] != theirs[i]]
                where = []
                for i in diff:
                    r = region(f, hdrs, i, len(ours)).split("+")[0]
                    if r not in where:
                        where.append(r)
                fail(f"seed {seed} index {f['idx']} ({name}, IPv{f['ipv']}, vlan={f['vlan']}, payload "
                     f"{len(payload)}): wire and Scapy differ first at byte {diff[0] if diff else '-'} "
                     f"({region(f, hdrs, diff[0], len(ours)) if diff else 'length'}), in {', '.join(where) or '-'}; "
                     f"lengths {len(ours)}/{len(theirs)}\n  wire : {ours.hex()}\n  scapy: {theirs.hex()}")
            if f["ipv"] == 4:  # the reference ICRC used for IPv6 must agree with Scapy's on IPv4
                l3 = 14 + (4 if f["vlan"] else 0)
                if icrc_ref(theirs[l3:-4], 4, 20) != theirs[-4:]:
                    fail(f"seed {seed} index {f['idx']}: icrc_ref disagrees with Scapy's IPv4 ICRC")
                v4_icrc_checked += 1
            seen_ops.add(f["op"])
            n += 1
    if seen_ops != set(table):
        fail(f"generator missed opcodes {sorted(set(table) - seen_ops)}")
    print(f"forward: {n} wire-built frames equal Scapy's byte for byte ({len(seen_ops)} opcodes); "
          f"icrc_ref == Scapy ICRC on {v4_icrc_checked} IPv4 frames", flush=True)
    return n


def random_fields(r, op, sweep_idx, n_ops):
    f = {"op": op}
    if sweep_idx is not None:
        f["vlan"], f["ipv"] = (sweep_idx // n_ops) & 1, 6 if (sweep_idx // n_ops) & 2 else 4
    else:
        f["vlan"], f["ipv"] = r.getrandbits(1), r.choice((4, 6))
    f["dst_mac"] = r.bits(48).to_bytes(6, "big").hex()
    f["src_mac"] = r.bits(48).to_bytes(6, "big").hex()
    f["vlan_tci"] = r.bits(16)
    alen = 4 if f["ipv"] == 4 else 16
    f["src_ip"] = r.bits(8 * alen).to_bytes(alen, "big").hex()
    f["dst_ip"] = r.bits(8 * alen).to_bytes(alen, "big").hex()
    f["tc"], f["ttl"], f["ip_id"], f["flow"] = r.bits(8), r.bits(8), r.bits(16), r.bits(20)
    f["df"] = r.getrandbits(1)
    f["sport"], f["dport"], f["udp_csum"] = r.bits(16), 4791, r.getrandbits(1)
    f["se"], f["m"], f["fecn"], f["becn"], f["ackreq"] = (r.getrandbits(1) for _ in range(5))
    f["pkey"], f["dqpn"], f["psn"] = r.bits(16), r.bits(24), r.bits(24)
    f["resv6"] = r.bits(6) if r.randrange(8) == 0 else 0
    f["resv7"] = r.bits(7) if r.randrange(8) == 0 else 0
    f["reth_va"], f["reth_rkey"], f["reth_len"] = r.bits(64), r.bits(32), r.bits(32)
    f["aeth_syn"], f["aeth_msn"] = r.bits(8), r.bits(24)
    f["at_va"], f["at_rkey"], f["at_swap"], f["at_cmp"] = r.bits(64), r.bits(32), r.bits(64), r.bits(64)
    f["ack_orig"], f["imm"], f["ieth"] = r.bits(64), r.bits(32), r.bits(32)
    f["qkey"], f["srcqp"] = r.bits(32), r.bits(24)
    f["xrc_srqn"] = r.bits(24)
    return f


def random_payload_len(r):
    k = r.randrange(10)
    if k == 0:
        return 0
    if k == 1:
        return r.randint(1, 8)
    if k <= 4:
        return r.randint(1, 64)
    if k == 9:
        return r.randint(1501, 4096)
    return r.randint(65, 1500)


# Expected decoded value of each header's fields, in wire_oracle check's key names.
_HDR_KEYS = {"deth": ("qkey", "srcqp"), "xrceth": ("xrc_srqn",), "reth": ("reth_va", "reth_rkey", "reth_len"),
             "atomiceth": ("at_va", "at_rkey", "at_swap", "at_cmp"), "aeth": ("aeth_syn", "aeth_msn"),
             "atomicacketh": ("ack_orig",), "immdt": ("imm",), "ieth": ("ieth",)}


def reverse(tool, table, seed, count, tmp):
    """Scapy builds, wire parses, every decoded field must equal what Scapy was told."""
    r = EdgeRng(seed ^ 0x5CA9)
    ops = sorted(table)
    path = os.path.join(tmp, "scapy.txt")
    extras = {"ip_opts": 0, "eth_pad": 0}
    with open(path, "w") as out:
        for idx in range(count):
            sweep = idx if idx < 4 * len(ops) else None
            op = ops[idx % len(ops)] if sweep is not None else r.choice(ops)
            name, hdrs, has_payload = table[op]
            f = random_fields(r, op, sweep, len(ops))
            payload = r.randbytes(random_payload_len(r)) if has_payload else b""
            # IPv4 options (Router Alert) now and then: wire must honour IHL and cover options in the ICRC.
            opts = [IPOption_Router_Alert()] if f["ipv"] == 4 and r.randrange(16) == 0 else None
            frame = build(f, hdrs, has_payload, payload, ip_options=opts)
            frame_len = len(frame)
            if frame_len < 60:  # a NIC pads short frames; the IP length says where RoCE ends
                frame += r.randbytes(60 - frame_len)
                extras["eth_pad"] += 1
            extras["ip_opts"] += bool(opts)
            l3 = 14 + (4 if f["vlan"] else 0)
            ihl = 24 if opts else (20 if f["ipv"] == 4 else 40)
            exp = {"idx": idx, "frame": frame.hex(), "frame_len": frame_len, "vlan": f["vlan"], "ipv": f["ipv"],
                   "dst_mac": f["dst_mac"], "src_mac": f["src_mac"], "src_ip": f["src_ip"],
                   "dst_ip": f["dst_ip"], "tc": f["tc"], "ttl": f["ttl"], "sport": f["sport"],
                   "dport": f["dport"], "udp_len": frame_len - l3 - ihl,
                   "udp_csum_val": struct.unpack("!H", frame[l3 + ihl + 6:l3 + ihl + 8])[0],
                   "op": op, "se": f["se"], "m": f["m"], "tver": 0, "pkey": f["pkey"], "fecn": f["fecn"],
                   "becn": f["becn"], "resv6": f["resv6"], "dqpn": f["dqpn"], "ackreq": f["ackreq"],
                   "resv7": f["resv7"], "psn": f["psn"], "hdrs": ",".join(hdrs) or "-",
                   "pad": pad_count(len(payload)) if has_payload else 0, "payload_len": len(payload),
                   "payload": payload.hex() or "-", "icrc": struct.unpack("<I", frame[frame_len - 4:frame_len])[0],
                   "icrc_ok": 1}
            if f["udp_csum"] and exp["udp_csum_val"] == 0:
                fail(f"index {idx}: Scapy left the UDP checksum 0")
            if f["vlan"]:
                exp["vlan_tci"] = f["vlan_tci"]
            if f["ipv"] == 4:
                exp.update(ihl=ihl // 4, ip_id=f["ip_id"], ip_frag=0x4000 if f["df"] else 0,
                           src_gid="00" * 10 + "ffff" + f["src_ip"], dst_gid="00" * 10 + "ffff" + f["dst_ip"])
            else:
                exp.update(flow=f["flow"], src_gid=f["src_ip"], dst_gid=f["dst_ip"])
            for h in hdrs:
                for k in _HDR_KEYS[h]:
                    exp[k] = f[k]
            out.write(" ".join(f"{k}={v}" for k, v in exp.items()) + "\n")
    rc, outp, err = run_tool(tool, "check", path)
    sys.stdout.write(outp)
    if rc != 0:
        fail(f"seed {seed}: wire's parse of Scapy-built frames differs (see MISMATCH lines above){err}")
    print(f"reverse: {count} Scapy-built frames parsed by wire with every field equal "
          f"({extras['ip_opts']} with IPv4 options, {extras['eth_pad']} with Ethernet padding)", flush=True)
    return count


def main():
    args = parse_args(3000)
    seed = seed_from_env()
    print(f"oracle_scapy_roce: seed {seed} (replay with URXE_ORACLE_SEED={seed}), {args.count} frames each way",
          flush=True)
    t0 = time.monotonic()
    table = check_opcode_table(args.tool)
    check_icrc_ref_ipv6_rules()
    # Scapy's own opcode names must agree with the IBTA table for every opcode Scapy knows.
    for op, sname in _bth_opcodes.items():
        if op in table and sname.replace("_", " ", 1) != table[op][0]:
            fail(f"opcode 0x{op:02x}: Scapy calls it {sname}, IBTA table says {table[op][0]}")
    with tempfile.TemporaryDirectory(prefix="urxe-oracle-") as tmp:
        nf = forward(args.tool, table, seed, args.count, tmp)
        nr = reverse(args.tool, table, seed, args.count, tmp)
    print(f"PASS: {nf + nr} frames compared with Scapy {len(table)} opcodes, seed {seed}, "
          f"{time.monotonic() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
