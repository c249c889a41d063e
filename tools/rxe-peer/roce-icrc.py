#!/usr/bin/python3
# An independent ICRC check, no dependencies.
"""roce-icrc.py PCAP... - recompute the RoCEv2 ICRC of every UDP/4791 packet in a
pcap (Ethernet link type) and compare it with the 4 trailing bytes on the wire.
Wireshark/tshark 4.0 only *displays* the Invariant CRC; this script checks it.

ICRC (IBA Annex A17.3.3): CRC-32 (Ethernet polynomial, same as zlib.crc32) over
  8 bytes 0xff (masked LRH) | IP header with TOS/TClass, TTL/HopLimit, IPv4
  checksum, IPv6 flow label set to all ones | UDP header with checksum = 0xffff |
  BTH with byte 4 (resv8a / FECN/BECN) = 0xff | rest of packet up to the ICRC.
The result is stored little-endian on the wire (the bytes of zlib.crc32 LE)."""
import struct, sys, zlib

def packets(path):
    with open(path, 'rb') as f:
        hdr = f.read(24)
        magic = struct.unpack('<I', hdr[:4])[0]
        e = '<' if magic in (0xa1b2c3d4, 0xa1b23c4d) else '>'
        linktype = struct.unpack(e + 'I', hdr[20:24])[0]
        assert linktype == 1, 'need Ethernet pcap'
        while True:
            ph = f.read(16)
            if len(ph) < 16:
                return
            _, _, incl, orig = struct.unpack(e + 'IIII', ph)
            yield f.read(incl), orig

def check(frame):
    eth_type = struct.unpack('!H', frame[12:14])[0]
    off = 14
    if eth_type == 0x8100:
        eth_type = struct.unpack('!H', frame[16:18])[0]; off = 18
    if eth_type == 0x0800:
        ihl = (frame[off] & 0xf) * 4
        ip = bytearray(frame[off:off + ihl])
        if ip[9] != 17: return None
        ip[1] = 0xff; ip[8] = 0xff; ip[10:12] = b'\xff\xff'
        udp_off = off + ihl
    elif eth_type == 0x86dd:
        ip = bytearray(frame[off:off + 40])
        if ip[6] != 17: return None
        ip[0] |= 0x0f; ip[1:4] = b'\xff\xff\xff'; ip[7] = 0xff
        udp_off = off + 40
    else:
        return None
    udp = bytearray(frame[udp_off:udp_off + 8])
    if struct.unpack('!H', udp[2:4])[0] != 4791: return None
    udp_len = struct.unpack('!H', udp[4:6])[0]
    udp[6:8] = b'\xff\xff'
    bth_off = udp_off + 8
    end = udp_off + udp_len                  # ignore Ethernet padding
    bth = bytearray(frame[bth_off:bth_off + 12]); bth[4] = 0xff
    rest = frame[bth_off + 12:end - 4]
    wire = frame[end - 4:end]
    crc = zlib.crc32(b'\xff' * 8 + bytes(ip) + bytes(udp) + bytes(bth) + rest)
    return struct.pack('<I', crc) == wire, crc, wire.hex()

def main():
    bad_total = 0
    for p in sys.argv[1:]:
        n = ok = 0; bad = []
        for i, (fr, orig) in enumerate(packets(p), 1):
            if len(fr) < orig:
                continue                      # truncated capture
            r = check(fr)
            if r is None: continue
            n += 1
            if r[0]: ok += 1
            else: bad.append((i, '%08x' % r[1], r[2]))
        print(f'{p}: {n} RoCEv2 packets, ICRC ok {ok}, bad {len(bad)}'
              + (f' first bad: {bad[:3]}' if bad else ''))
        bad_total += len(bad)
    sys.exit(1 if bad_total else 0)

if __name__ == '__main__':
    main()
