#!/usr/bin/python3
"""Write generated-scapy-ipv6-vlan-naks.pcap: RoCEv2 frames the real captures lack, built with Scapy.

The captures in this directory hold no IPv6, no VLAN tag, no RNR NAK and no NAK other than PSN sequence error,
no IETH, no UD immediate, no IPv4 options, no Ethernet padding after a RoCE frame. This file fills those gaps, plus a few non-RoCE frames (ARP, ICMPv6,
UDP *from* port 4791). Headers come from Scapy (Ether, Dot1Q, IP, IPv6, UDP, and scapy.contrib.roce's BTH and
AETH); the other extension headers are packed here with struct, from IBTA 9.3. IPv4 ICRCs are Scapy's own;
Scapy 2.5 cannot compute IPv6 ICRCs, so `icrc_ipv6` below does it (IBTA A17.3.3: the IPv6 traffic class, flow
label and hop limit, the UDP checksum and BTH byte 4 are replaced by ones). Deterministic: rerunning it
reproduces the file byte for byte.

usage: /usr/bin/python3 make-generated.py [OUTPUT]
"""
import os
import struct
import sys
import zlib

from scapy.all import ARP, Dot1Q, Ether, ICMPv6EchoRequest, IP, IPOption_Router_Alert, IPv6, Raw, UDP, raw, wrpcap
from scapy.contrib.roce import AETH, BTH, CNPPadding

MAC_A, MAC_B = "02:00:00:00:00:0a", "02:00:00:00:00:0b"
V4_A, V4_B = "192.0.2.10", "192.0.2.11"  # TEST-NET-1
V6_A, V6_B = "2001:db8::a", "2001:db8::b"  # documentation prefix

# Opcodes (IBTA Table 35).
RC_SEND_ONLY, RC_SEND_ONLY_IMM, RC_WRITE_ONLY, RC_ACK, RC_ATOMIC_ACK, RC_CMP_SWAP = 0x04, 0x05, 0x0A, 0x11, 0x12, 0x13
RC_SEND_FIRST, RC_SEND_ONLY_INV, UD_SEND_ONLY_IMM, CNP = 0x00, 0x17, 0x65, 0x81


def reth(va, rkey, dma_len):
    return struct.pack("!QII", va, rkey, dma_len)


def atomic_eth(va, rkey, swap_add, compare):
    return struct.pack("!QIQQ", va, rkey, swap_add, compare)


def deth(qkey, src_qp):
    return struct.pack("!II", qkey, src_qp & 0xFFFFFF)


def u32(v):  # ImmDt, IETH, AtomicAckETH halves
    return struct.pack("!I", v)


def padded(payload):
    pad = -len(payload) % 4
    return payload + b"\0" * pad, pad


def icrc_ipv6(frame):
    """ICRC of an Ethernet [+ 802.1Q] / IPv6 / UDP / BTH ... frame whose last 4 bytes are the ICRC field."""
    l3 = 14 + (4 if frame[12:14] == b"\x81\x00" else 0)
    b = bytearray(frame[l3:-4])
    b[0] |= 0x0F  # traffic class, high nibble
    b[1:4] = b"\xff\xff\xff"  # traffic class low nibble + flow label
    b[7] = 0xFF  # hop limit
    b[40 + 6:40 + 8] = b"\xff\xff"  # UDP checksum
    b[48 + 4] = 0xFF  # BTH: FECN, BECN, reserved
    return zlib.crc32(b"\xff" * 8 + bytes(b)).to_bytes(4, "little")


def v6_roce(l2, ip6, udp, bth, rest, udp_checksum=False):
    """IPv6 RoCE frame with the ICRC computed here (and the UDP checksum by Scapy, over the final ICRC)."""
    bth.icrc = 0  # placeholder, so Scapy does not try (and warn)
    draft = raw(l2 / ip6 / UDP(sport=udp, dport=4791, chksum=0) / bth / Raw(rest))
    icrc = icrc_ipv6(draft)
    bth.icrc = int.from_bytes(icrc, "big")  # FCSField writes big-endian; the wire holds the CRC little-endian
    u = UDP(sport=udp, dport=4791) if udp_checksum else UDP(sport=udp, dport=4791, chksum=0)
    return l2 / ip6 / u / bth / Raw(rest)


def v4_roce(l2, ip4, udp, bth, rest=b""):
    """IPv4 RoCE frame; Scapy's BTH computes the ICRC itself."""
    return l2 / ip4 / UDP(sport=udp, dport=4791, chksum=0) / bth / Raw(rest)


def frames():
    eth_ab = Ether(src=MAC_A, dst=MAC_B)
    eth_ba = Ether(src=MAC_B, dst=MAC_A)
    vlan_ab = Ether(src=MAC_A, dst=MAC_B) / Dot1Q(prio=5, id=0, vlan=100)
    v6_ab = IPv6(src=V6_A, dst=V6_B, tc=0x68, fl=0x12345, hlim=17)
    v6_ba = IPv6(src=V6_B, dst=V6_A, tc=0x02, fl=0xABCDE, hlim=64)
    v4_ab = IP(src=V4_A, dst=V4_B, tos=0x02, ttl=64, id=0x1234, flags="DF")
    v4_ba = IP(src=V4_B, dst=V4_A, tos=0x00, ttl=63, id=0x4321, flags="DF")
    out = []

    # IPv6 over VLAN: SEND with immediate, SE, pad 1.
    body, pad = padded(bytes(range(7)))
    out.append(v6_roce(vlan_ab, v6_ab, 0xC123,
                       BTH(opcode=RC_SEND_ONLY_IMM, solicited=1, padcount=pad, dqpn=0x000123, ackreq=1, psn=0xFFFFFE),
                       u32(0xCAFEF00D) + body))
    # IPv6, SEND with invalidate (IETH), pad 2, and a real UDP checksum.
    body, pad = padded(b"invali")
    out.append(v6_roce(eth_ab, v6_ab, 0xC123,
                       BTH(opcode=RC_SEND_ONLY_INV, padcount=pad, dqpn=0x000123, ackreq=1, psn=0xFFFFFF),
                       u32(0x00ABCDEF) + body, udp_checksum=True))
    # IPv6 ACK for it (AETH ACK, credit 5).
    out.append(v6_roce(eth_ba, v6_ba, 0xC123, BTH(opcode=RC_ACK, dqpn=0x000456, psn=0xFFFFFF) / AETH(syndrome=0x05,
                                                                                                     msn=2), b""))
    # IPv6 UD SEND with immediate: DETH then ImmDt.
    body, pad = padded(bytes(range(16)))
    out.append(v6_roce(eth_ab, v6_ab, 0xD001, BTH(opcode=UD_SEND_ONLY_IMM, padcount=pad, dqpn=0x000789, psn=7),
                       deth(0x80010000, 0x00ABC) + u32(0x01020304) + body))
    # IPv6 RDMA WRITE Only, MigReq, non-default P_Key, high VA.
    body, pad = padded(bytes(range(100, 112)))
    out.append(v6_roce(eth_ab, v6_ab, 0xC123,
                       BTH(opcode=RC_WRITE_ONLY, migreq=1, pkey=0x8001, padcount=pad, dqpn=0x000123, ackreq=1,
                           psn=0),
                       reth(0xFFFF800012345678, 0x1234ABCD, 12) + body))
    # IPv6 CmpSwap and its Atomic ACK (AETH + AtomicAckETH).
    out.append(v6_roce(eth_ab, v6_ab, 0xC123, BTH(opcode=RC_CMP_SWAP, dqpn=0x000123, ackreq=1, psn=1),
                       atomic_eth(0x00007F0000001000, 0x42, 0xFEDCBA9876543210, 0x0123456789ABCDEF)))
    out.append(v6_roce(eth_ba, v6_ba, 0xC123, BTH(opcode=RC_ATOMIC_ACK, dqpn=0x000456, psn=1) / AETH(syndrome=0x1F,
                                                                                                    msn=3),
                       u32(0x01234567) + u32(0x89ABCDEF)))
    # IPv6 CNP with BECN.
    out.append(v6_roce(eth_ba, v6_ba, 0, BTH(opcode=CNP, becn=1, dqpn=0x000123, psn=0) / CNPPadding(), b""))
    # IPv4 NAKs: RNR (timer 12 = 0.64 ms) and every NAK code, AETH syndrome = type << 5 | value.
    for i, syndrome in enumerate([0x2C, 0x21, 0x60, 0x61, 0x62, 0x63, 0x64]):
        out.append(v4_roce(eth_ba, v4_ba, 0xC200, BTH(opcode=RC_ACK, dqpn=0x000456, psn=100 + i) /
                           AETH(syndrome=syndrome, msn=10 + i)))
    # IPv4 over VLAN, FECN set (ECN CE), SEND Only.
    out.append(v4_roce(vlan_ab, IP(src=V4_A, dst=V4_B, tos=0x03, ttl=5, id=7, flags="DF"), 0xC200,
                       BTH(opcode=RC_SEND_ONLY, fecn=1, dqpn=0x000123, ackreq=1, psn=200), b"ping"))
    # IPv4 with an option (Router Alert, IHL 6): the ICRC covers the options.
    out.append(v4_roce(eth_ab, IP(src=V4_A, dst=V4_B, tos=0, ttl=64, id=8, flags="DF", options=[IPOption_Router_Alert()]),
                       0xC200, BTH(opcode=RC_SEND_FIRST, dqpn=0x000123, psn=201), bytes(256)))
    # The shortest RoCE frame (SEND_LAST, no payload: 58 bytes) with the 2 bytes of Ethernet padding a receiver
    # sees after it; they are outside the IP datagram and the ICRC.
    out.append(Ether(raw(v4_roce(eth_ab, v4_ab, 0xC200, BTH(opcode=0x02, dqpn=0x000123, ackreq=1, psn=202))) +
                     b"\0\0"))
    # Not RoCE: UDP from port 4791 (RoCE is the destination port), ARP, ICMPv6.
    out.append(eth_ab / v4_ab / UDP(sport=4791, dport=5000) / Raw(b"not roce, only from 4791"))
    out.append(Ether(src=MAC_A, dst="ff:ff:ff:ff:ff:ff") / ARP(hwsrc=MAC_A, psrc=V4_A, pdst=V4_B))
    out.append(eth_ab / IPv6(src=V6_A, dst=V6_B) / ICMPv6EchoRequest(id=1, seq=1))
    for i, p in enumerate(out):
        p.time = 1767225600 + i / 1000  # 2026-01-01T00:00:00Z + i ms
    return out


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                "generated-scapy-ipv6-vlan-naks.pcap")
    wrpcap(path, frames())
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
