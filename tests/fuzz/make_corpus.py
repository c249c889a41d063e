#!/usr/bin/python3
"""Writes the parse_frame seed corpus: a few frames of every opcode found in real captures, plus frames the
captures lack (IPv6, 802.1Q, IPv4 options, UDP checksum, CNP, XRC, a UDP GSO datagram, non-RoCE). Run with Debian's python3 (scapy):
    /usr/bin/python3 tests/fuzz/make_corpus.py [PCAP_DIR ...]   (default pcap-fixtures/)
Files are named by the SHA-1 of their contents, like libFuzzer names its own finds."""
import glob
import hashlib
import os
import struct
import sys
import zlib

from scapy.layers.inet import IP, UDP, TCP, IPOption_Router_Alert
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Dot1Q, Ether
from scapy.packet import Raw
from scapy.contrib.roce import BTH, cnp

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "parse_frame")
PER_OPCODE = 2  # frames kept per opcode


def pcap_frames(path):
    """Ethernet frames of a pcap or pcapng file."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] == b"\x0a\x0d\x0d\x0a":  # pcapng: walk the blocks, keep enhanced/simple packet blocks
        endian = "<" if data[8:12] == b"\x4d\x3c\x2b\x1a" else ">"
        off, linktypes = 0, []
        while off + 12 <= len(data):
            btype, blen = struct.unpack(endian + "II", data[off:off + 8])
            body = data[off + 8:off + blen - 4]
            if btype == 1:  # interface description
                linktypes.append(struct.unpack(endian + "H", body[:2])[0])
            elif btype == 6:  # enhanced packet
                ifid, _, _, caplen = struct.unpack(endian + "IIII", body[:16])
                if linktypes[ifid] == 1:
                    yield body[20:20 + caplen]
            elif btype == 3 and linktypes and linktypes[0] == 1:  # simple packet
                yield body[4:4 + struct.unpack(endian + "I", body[:4])[0]]
            off += blen
        return
    endian = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    if struct.unpack(endian + "I", data[20:24])[0] != 1:  # Ethernet only
        return
    off = 24
    while off + 16 <= len(data):
        incl = struct.unpack(endian + "I", data[off + 8:off + 12])[0]
        yield data[off + 16:off + 16 + incl]
        off += 16 + incl


def roce_opcode(frame):
    """BTH opcode of an untagged IPv4 RoCEv2 frame, or None."""
    if len(frame) < 14 + 20 + 8 + 12 or frame[12:14] != b"\x08\x00":
        return None
    ihl = (frame[14] & 0xf) * 4
    udp = 14 + ihl
    if len(frame) < udp + 8 + 1 or struct.unpack(">H", frame[udp + 2:udp + 4])[0] != 4791:
        return None
    return frame[udp + 8]


def icrc(l3, ip_hdr_len, v6):
    """Annex A17.3.3 invariant CRC over the L3 bytes (without the ICRC), returned as the 4 stored bytes."""
    p = bytearray(l3)
    if v6:
        p[0] |= 0x0F
        p[1] = p[2] = p[3] = 0xFF
        p[7] = 0xFF
    else:
        p[1] = 0xFF
        p[8] = 0xFF
        p[10] = p[11] = 0xFF
    u = ip_hdr_len
    p[u + 6] = p[u + 7] = 0xFF
    p[u + 8 + 4] = 0xFF
    return struct.pack("<I", zlib.crc32(b"\xff" * 8 + bytes(p)) & 0xFFFFFFFF)


def seal(frame, l3=14):
    """Replaces the last 4 bytes with the right ICRC (IPv4 or IPv6 at offset l3)."""
    v6 = (frame[l3] >> 4) == 6
    ip_hdr_len = 40 if v6 else (frame[l3] & 0xF) * 4
    return frame[:-4] + icrc(frame[l3:-4], ip_hdr_len, v6)


def bth(opcode, dqpn, psn):
    return struct.pack(">BBHII", opcode, 0, 0xFFFF, dqpn & 0xFFFFFF, psn & 0xFFFFFF)


def crafted():
    mac = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    icrc0 = b"\0\0\0\0"
    v4 = dict(src="10.0.0.1", dst="10.0.0.2", flags="DF")
    v6 = dict(src="fd00::1", dst="fd00::2")
    reth = struct.pack(">QII", 0x7F0000001000, 0x1234, 8)
    out = {}
    # IPv4 with a Router Alert option (IHL 6): scapy computes the ICRC over the option too.
    out["ipv4-options"] = bytes(Ether(**mac) / IP(options=[IPOption_Router_Alert()], **v4) /
                                UDP(sport=49152, dport=4791, chksum=0) /
                                BTH(opcode=0x04, dqpn=0x11, psn=5, padcount=0) / Raw(b"abcdefgh"))
    # 802.1Q tagged RC ACK.
    out["vlan-ack"] = bytes(Ether(**mac) / Dot1Q(vlan=100, prio=3) / IP(**v4) /
                            UDP(sport=49152, dport=4791, chksum=0) / BTH(opcode=0x11, dqpn=0x11, psn=7) /
                            Raw(b"\x1f\x00\x00\x01"))
    # UDP checksum over IPv4 (scapy fills it in).
    out["ipv4-udpcsum-write"] = bytes(Ether(**mac) / IP(**v4) / UDP(sport=49152, dport=4791) /
                                      BTH(opcode=0x0A, dqpn=0x12, psn=9) / Raw(reth + b"12345678"))
    # IPv6 frames: scapy does not compute RoCE ICRCs over IPv6, so seal them here.
    for name, op, body, csum in [("ipv6-send-only", 0x04, b"hello ipv6!!", 0),
                                 ("ipv6-read-req", 0x0C, reth, 0),
                                 ("ipv6-ud-send", 0x64, struct.pack(">II", 0x11111111, 0x18) + b"x" * 8, 0)]:
        f = bytes(Ether(**mac) / IPv6(**v6) / UDP(sport=49152, dport=4791, chksum=csum) /
                  Raw(bth(op, dqpn=0x13, psn=1) + body + icrc0))
        out[name] = seal(f)
    # CNP as DCQCN sends it (BECN set, 16 reserved bytes).
    out["cnp"] = bytes(Ether(**mac) / IP(tos=0xC2, **v4) / UDP(sport=0, dport=4791, chksum=0) / cnp(0x11))
    # XRC (IBTA Annex A14): requests with an XRCETH (8 reserved bits, 24-bit XRC SRQ number) right after the
    # BTH, before RETH/AtomicETH/ImmDt/IETH; a response without one. No capture holds XRC.
    xrceth = struct.pack(">I", 0x00ABCDEF)
    for name, op, body in [("xrc-send-only", 0xA4, xrceth + b"xrc send"),
                           ("xrc-write-only-imm", 0xAB, xrceth + reth + struct.pack(">I", 0xCAFEF00D) + b"12345678"),
                           ("xrc-send-only-inv", 0xB7, xrceth + struct.pack(">I", 0x1234) + b"abcd"),
                           ("xrc-cmp-swap", 0xB3, xrceth + struct.pack(">QIQQ", 0x7F0000001000, 0x1234, 1, 2)),
                           ("xrc-ack", 0xB1, b"\x1f\x00\x00\x05")]:
        out[name] = bytes(Ether(**mac) / IP(**v4) / UDP(sport=49152, dport=4791, chksum=0) /
                          BTH(opcode=op, dqpn=0x14, psn=3, padcount=0) / Raw(body))
    # A UDP GSO datagram (wire/gso.h) of three SEND_MIDDLEs: headers once, segment i's ICRC over the
    # headers the kernel gives it (IPv4 ID 5 + i, its own lengths).
    segs = []
    for i in range(3):
        body = bth(0x01, dqpn=0x11, psn=100 + i) + bytes((i * 7 + k) & 0xFF for k in range(256))
        f = bytes(Ether(**mac) / IP(id=5 + i, **v4) / UDP(sport=49152, dport=4791, chksum=0) / Raw(body + icrc0))
        segs.append(seal(f)[42:])
    out["gso-send-middle-x3"] = bytes(Ether(**mac) / IP(id=5, **v4) / UDP(sport=49152, dport=4791, chksum=0) /
                                      Raw(b"".join(segs)))
    # Not RoCE at all.
    out["arp"] = bytes(Ether(**mac) / ARP())
    out["tcp"] = bytes(Ether(**mac) / IP(**v4) / TCP(dport=18515) / Raw(b"0000:000000:000000"))
    out["udp-other-port"] = bytes(Ether(**mac) / IP(**v4) / UDP(dport=4790) / Raw(b"x" * 20))
    return out


def main():
    dirs = sys.argv[1:] or [os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "pcap-fixtures")]
    os.makedirs(OUT, exist_ok=True)
    frames = {}
    kept = {}  # opcode -> lengths kept, over all captures
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "**", "*.pcap"), recursive=True)):
            for fr in pcap_frames(path):
                op = roce_opcode(fr)
                # QP1 (UD SEND_ONLY to QP 1): one seed per CM attribute, so the MAD decoder sees each message.
                if op == 0x64 and len(fr) >= 14 + 20 + 8 + 12 + 8 + 24 and fr[47:50] == b"\x00\x00\x01":
                    op = ("cm", fr[14 + 20 + 8 + 12 + 8 + 17])
                lens = kept.setdefault(op, set())
                # A few frames per opcode, of different lengths (pad counts, payload sizes).
                if op is None or len(lens) >= PER_OPCODE or len(fr) in lens:
                    continue
                lens.add(len(fr))
                frames["%s-op%s-%d" % (os.path.basename(path), "cm%02x" % op[1] if isinstance(op, tuple) else "%02x" % op, len(fr))] = fr
    frames.update(crafted())
    for name, fr in sorted(frames.items()):
        h = hashlib.sha1(fr).hexdigest()
        with open(os.path.join(OUT, h), "wb") as f:
            f.write(fr)
        print("%s %5d %s" % (h, len(fr), name))
    print("%d frames in %s" % (len(frames), OUT), file=sys.stderr)


if __name__ == "__main__":
    main()
