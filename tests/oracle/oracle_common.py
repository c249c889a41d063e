"""Shared pieces of the oracle tests: an IBTA opcode table and header layouts written from the spec (not
from wire/), the seed, and how to run wire_oracle. Runs under Debian's /usr/bin/python3."""

import argparse
import json
import os
import random
import struct
import subprocess
import sys
import zlib

# IBTA 1.4 vol 1, 9.2 Table 35 (low 5 bits of the opcode) and 9.3: which extension headers follow the BTH,
# in wire order, and whether a data payload may follow.
_OPS = {
    0x00: ("SEND_FIRST", [], True),
    0x01: ("SEND_MIDDLE", [], True),
    0x02: ("SEND_LAST", [], True),
    0x03: ("SEND_LAST_WITH_IMMEDIATE", ["immdt"], True),
    0x04: ("SEND_ONLY", [], True),
    0x05: ("SEND_ONLY_WITH_IMMEDIATE", ["immdt"], True),
    0x06: ("RDMA_WRITE_FIRST", ["reth"], True),
    0x07: ("RDMA_WRITE_MIDDLE", [], True),
    0x08: ("RDMA_WRITE_LAST", [], True),
    0x09: ("RDMA_WRITE_LAST_WITH_IMMEDIATE", ["immdt"], True),
    0x0A: ("RDMA_WRITE_ONLY", ["reth"], True),
    0x0B: ("RDMA_WRITE_ONLY_WITH_IMMEDIATE", ["reth", "immdt"], True),
    0x0C: ("RDMA_READ_REQUEST", ["reth"], False),
    0x0D: ("RDMA_READ_RESPONSE_FIRST", ["aeth"], True),
    0x0E: ("RDMA_READ_RESPONSE_MIDDLE", [], True),
    0x0F: ("RDMA_READ_RESPONSE_LAST", ["aeth"], True),
    0x10: ("RDMA_READ_RESPONSE_ONLY", ["aeth"], True),
    0x11: ("ACKNOWLEDGE", ["aeth"], False),
    0x12: ("ATOMIC_ACKNOWLEDGE", ["aeth", "atomicacketh"], False),
    0x13: ("COMPARE_SWAP", ["atomiceth"], False),
    0x14: ("FETCH_ADD", ["atomiceth"], False),
    0x16: ("SEND_LAST_WITH_INVALIDATE", ["ieth"], True),
    0x17: ("SEND_ONLY_WITH_INVALIDATE", ["ieth"], True),
}
# IBTA 9.2 Table 35: the responder's packets (RDMA READ responses, ACKNOWLEDGE, ATOMIC ACKNOWLEDGE).
RESPONSES = {0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12}
CNP_OPCODE = 0x81  # RoCEv2 Annex A17.9: BTH + 16 reserved bytes + ICRC
# IBTA 1.2+ Annex A14 (XRC): RC's operations at 0xA0 | low (RESYNC, 0xB5, is not implemented, as RC's 0x15);
# every request carries an XRCETH (8 reserved bits, 24-bit XRC SRQ number) right after the BTH, before any
# RETH/AtomicETH/ImmDt/IETH; responses carry none.
XRC_BASE = 0xA0
# IBTA 1.5 Annex A19 (Memory Placement Extensions), RC only: ATOMIC WRITE is BTH + RETH + 8 payload bytes.
# (FLUSH, 0x1c, is not implemented.)
ATOMIC_WRITE_OPCODE = 0x1D


def ibta_opcodes():
    """{opcode: (name, [headers], has_payload)} for RC, UC, UD, XRC and the RoCEv2 CNP."""
    t = {}
    for low, (name, hdrs, pay) in _OPS.items():
        t[0x00 | low] = ("RC " + name, hdrs, pay)
        if low <= 0x0B:  # UC: SEND and RDMA WRITE only
            t[0x20 | low] = ("UC " + name, hdrs, pay)
        t[XRC_BASE | low] = ("XRC " + name, hdrs if low in RESPONSES else ["xrceth"] + hdrs, pay)
    for low in (0x04, 0x05):  # UD: SEND_ONLY [WITH_IMMEDIATE], with a DETH first
        name, hdrs, pay = _OPS[low]
        t[0x60 | low] = ("UD " + name, ["deth"] + hdrs, pay)
    t[ATOMIC_WRITE_OPCODE] = ("RC ATOMIC_WRITE", ["reth"], True)
    t[CNP_OPCODE] = ("CNP", [], False)
    return t


def ext_bytes(hdr, f):
    """One extension header's bytes (IBTA 9.3) from the field dict `f`."""
    if hdr == "deth":  # Q_Key, 8 reserved bits, source QP
        return struct.pack("!IB", f["qkey"], 0) + f["srcqp"].to_bytes(3, "big")
    if hdr == "xrceth":  # 8 reserved bits, XRC SRQ number
        return b"\0" + f["xrc_srqn"].to_bytes(3, "big")
    if hdr == "reth":  # virtual address, R_Key, DMA length
        return struct.pack("!QII", f["reth_va"], f["reth_rkey"], f["reth_len"])
    if hdr == "atomiceth":  # virtual address, R_Key, swap (or add) data, compare data
        return struct.pack("!QIQQ", f["at_va"], f["at_rkey"], f["at_swap"], f["at_cmp"])
    if hdr == "aeth":  # syndrome, MSN
        return bytes([f["aeth_syn"]]) + f["aeth_msn"].to_bytes(3, "big")
    if hdr == "atomicacketh":  # original remote data
        return struct.pack("!Q", f["ack_orig"])
    if hdr == "immdt":
        return struct.pack("!I", f["imm"])
    if hdr == "ieth":  # R_Key to invalidate
        return struct.pack("!I", f["ieth"])
    raise ValueError(hdr)


def pad_count(payload_len):
    return (4 - payload_len % 4) % 4


def icrc_ref(l3, ipv, ip_hdr_len, udp=True):
    """ICRC per IBTA Annex A17.3.3 over `l3` (IP header through the pad): CRC-32 of 8 bytes of ones for the
    absent LRH, then the packet with the variant fields set to ones: IPv4 TOS, TTL, header checksum; IPv6
    traffic class, flow label, hop limit; UDP checksum; the BTH byte holding FECN, BECN and 6 reserved bits.
    Returned as the 4 bytes stored on the wire (CRC little-endian). udp=False: RoCE v1, a GRH (laid out as
    an IPv6 header) directly followed by the BTH. Cross-checked against Scapy on IPv4 and against hardware
    RoCE v1 frames for the IPv6/GRH rules (scapy_oracle.py)."""
    b = bytearray(l3)
    if ipv == 4:
        b[1] = 0xFF
        b[8] = 0xFF
        b[10] = b[11] = 0xFF
    else:
        b[0] |= 0x0F
        b[1] = b[2] = b[3] = 0xFF
        b[7] = 0xFF
    if udp:
        b[ip_hdr_len + 6] = b[ip_hdr_len + 7] = 0xFF
    b[ip_hdr_len + (8 if udp else 0) + 4] = 0xFF
    return struct.pack("<I", zlib.crc32(b"\xff" * 8 + bytes(b)) & 0xFFFFFFFF)


def seed_from_env(name="URXE_ORACLE_SEED"):
    v = os.environ.get(name)
    if v:
        return int(v, 0)
    return int.from_bytes(os.urandom(4), "big")


def parse_args(default_count):
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True, help="path to wire_oracle")
    ap.add_argument("--count", type=int, default=int(os.environ.get("URXE_ORACLE_COUNT", default_count)))
    return ap.parse_args()


def run_tool(tool, *args):
    r = subprocess.run([tool, *map(str, args)], capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def check_opcode_table(tool):
    """wire's opcode table must be exactly the IBTA one above (same opcodes, names, headers, payload flag)."""
    rc, out, err = run_tool(tool, "opcodes")
    if rc != 0:
        fail(f"wire_oracle opcodes failed: {err}")
    wire = {}
    for line in out.splitlines():
        j = json.loads(line)
        hdrs = [] if j["hdrs"] == "-" else j["hdrs"].split(",")
        wire[j["op"]] = (j["name"], hdrs, j["payload"])
    ref = ibta_opcodes()
    problems = []
    for op in sorted(set(ref) | set(wire)):
        if ref.get(op) != wire.get(op):
            problems.append(f"opcode 0x{op:02x}: IBTA {ref.get(op)} wire {wire.get(op)}")
    if problems:
        fail("wire's opcode table differs from IBTA Table 35:\n  " + "\n  ".join(problems))
    return ref


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


class EdgeRng(random.Random):
    """Random field values biased towards the edges (0, all ones, one bit), where encoders go wrong."""

    def bits(self, n):
        k = self.randrange(8)
        if k == 0:
            return 0
        if k == 1:
            return (1 << n) - 1
        if k == 2:
            return 1 << self.randrange(n)
        return self.getrandbits(n)
