#!/usr/bin/python3
# Bounded waits on both sockets.
"""host-roce-demo.py - a ~100-line "userspace RoCEv2 NIC" in the host namespace
talking RC to kernel rxe in a peer VM: it plays the *client* of
`ibv_rc_pingpong -g 1 -n 1 -s 64` running in the guest.

  ./peer-exec.sh 1 'bgrun /tmp/pp.log ibv_rc_pingpong -d rxe0 -g 1 -n 1 -s 64'
  ip netns exec urxe-rxenet python3 host-roce-demo.py 10.77.0.11 10.77.0.1

Steps: TCP out-of-band exchange (the pingpong "LID:QPN:PSN:GID" text), then
over UDP/4791: send one RC SEND Only (64 B) with a correct ICRC, receive rxe's
ACK, receive the server's SEND Only and ACK it.  The guest's pingpong server
completes its iteration only if kernel rxe accepted every packet we built."""
import os, socket, struct, sys, zlib, random

srv_ip, my_ip = sys.argv[1], sys.argv[2]
MY_QPN, MY_PSN = 0x000abc, random.randrange(1 << 24)
SIZE = 64

def gid_v4(ip):             # IPv4-mapped GID ::ffff:a.b.c.d
    return b'\0' * 10 + b'\xff\xff' + socket.inet_aton(ip)

def icrc(ip_hdr, udp_hdr, bth_and_payload):
    """IBA A17.3.3: CRC32 over 8 x 0xff | IPv4 hdr (TOS, TTL, csum = ones) |
    UDP hdr (csum = ones) | BTH (byte 4 = ones) | rest; sent little-endian."""
    ip = bytearray(ip_hdr); ip[1] = 0xff; ip[8] = 0xff; ip[10:12] = b'\xff\xff'
    udp = bytearray(udp_hdr); udp[6:8] = b'\xff\xff'
    b = bytearray(bth_and_payload); b[4] = 0xff
    return struct.pack('<I', zlib.crc32(b'\xff' * 8 + ip + udp + b))

def roce_packet(bth_and_payload, src, dst, sport=4791):
    """UDP payload (BTH..ICRC) as the host kernel will send it: we use an
    unconnected UDP socket with DF set, for which Linux puts IP ID = 0."""
    udp_len = 8 + len(bth_and_payload) + 4
    ip = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 20 + udp_len, 0, 0x4000, 64, 17, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    udp = struct.pack('!HHHH', sport, 4791, udp_len, 0)
    return bth_and_payload + icrc(ip, udp, bth_and_payload)

def bth(opcode, dqpn, psn, ackreq, pad=0):
    return struct.pack('!BBHII', opcode, pad << 4, 0xffff, dqpn & 0xffffff,
                       (ackreq << 31) | (psn & 0xffffff))

# --- 1. out-of-band exchange exactly like ibv_rc_pingpong's client
t = socket.create_connection((srv_ip, 18515), timeout=20)
msg = '%04x:%06x:%06x:%s' % (0, MY_QPN, MY_PSN, gid_v4(my_ip).hex())
t.sendall(msg.encode() + b'\0')
rem = b''
while len(rem) < 52:
    rem += t.recv(52 - len(rem))
_, rqpn, rpsn, rgid = rem.rstrip(b'\0').decode().split(':')
rqpn, rpsn = int(rqpn, 16), int(rpsn, 16)
t.sendall(b'done\0')
print(f'local  QPN {MY_QPN:#08x} PSN {MY_PSN:#08x} GID ::ffff:{my_ip}')
print(f'remote QPN {rqpn:#08x} PSN {rpsn:#08x} GID {rgid}')

# --- 2. RoCEv2 over a plain UDP socket bound to <my_ip>:4791
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
u.setsockopt(socket.IPPROTO_IP, 10, 2)   # IP_MTU_DISCOVER = IP_PMTUDISC_DO -> DF, ID 0
u.bind((my_ip, 4791)); u.settimeout(5)
payload = b'hello from the host namespace!'.ljust(SIZE, b'.')
u.sendto(roce_packet(bth(0x04, rqpn, MY_PSN, 1) + payload, my_ip, srv_ip), (srv_ip, 4791))
print(f'sent   RC SEND Only psn={MY_PSN:#08x} len={SIZE}')

got_ack = got_send = False
while not (got_ack and got_send):
    data, (src, sport) = u.recvfrom(4096)
    op, _, _, dqp, apsn = struct.unpack('!BBHII', data[:12]); psn = apsn & 0xffffff
    # (a UDP socket does not show the IP header, so rxe's ICRC is not checked
    # here; roce-icrc.py checks it in the capture)
    if op == 0x11:                          # RC Acknowledge
        syn, msn = data[12], int.from_bytes(data[13:16], 'big')
        print(f'recv   RC ACK psn={psn:#08x} syndrome={syn:#04x} msn={msn}')
        got_ack = (psn == MY_PSN and syn >> 5 == 0)
    elif op == 0x04:                        # RC SEND Only from the server
        body = data[12:-4]
        print(f'recv   RC SEND Only psn={psn:#08x} len={len(body)} A={apsn >> 31}')
        ack = bth(0x11, rqpn, psn, 0) + struct.pack('!I', (0x1f << 24) | 1)   # ACK, MSN 1
        u.sendto(roce_packet(ack, my_ip, srv_ip), (srv_ip, 4791))
        print(f'sent   RC ACK psn={psn:#08x}')
        got_send = True
print('OK: kernel rxe accepted our packets (ACKed our SEND, its SEND got our ACK)')
