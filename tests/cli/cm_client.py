#!/usr/bin/python3
# A client of the CM service's socket (cm/protocol.h), speaking as the provider's shim does, for
# cm_service_test.sh. Prints one "ok: ..." / "FAIL: ..." line per check; exit status 1 when any failed.
#   usage: cm_client.py SOCKET URXE [--events]
#     SOCKET  the service's socket; URXE  the urxe command (`urxe cm show` while a channel is open)
#     --events  against cm_echo_daemon instead: an event queued by its timer after CREATE_ID makes the
#               eventfd readable, GET_EVENT takes it and the eventfd is empty again
import errno
import select
import os
import socket
import struct
import subprocess
import sys

PROTO_MAGIC, STATUS_MAGIC, VERSION = 0x4D435255, 0x53435255, 1
CREATE_ID, DESTROY_ID, GET_EVENT = 0, 1, 12
RDMA_PS_TCP, IBV_QPT_RC = 0x0106, 2

sock_path, urxe = sys.argv[1], sys.argv[2]
events_mode = sys.argv[3:] == ["--events"]
failed = False


def check(what, cond, detail=""):
    global failed
    print(("ok: " if cond else "FAIL: ") + what + ("" if cond else " " + str(detail)))
    failed |= not cond


def connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(5)
    s.connect(sock_path)
    return s


seq = 0


def request(s, cmd, out, body, extra=b""):
    """One UCMA write(): header {cmd, in, out} + body; returns (err, out bytes)."""
    global seq
    seq += 1
    ucma = struct.pack("<IHH", cmd, len(body), out) + body
    s.send(struct.pack("<IIII", seq, len(ucma), len(extra), 0) + ucma + extra)
    reply = s.recv(8192)
    rseq, err, out_len, _ = struct.unpack_from("<IiII", reply)
    check("reply %d carries its request's seq" % seq, rseq == seq, rseq)
    check("reply %d is as long as out_len says" % seq, len(reply) == 16 + out_len, (len(reply), out_len))
    return err, reply[16:]


# Hello: HelloReply with an eventfd attached.
s = connect()
s.send(struct.pack("<II", PROTO_MAGIC, VERSION))
msg, anc, flags, _ = s.recvmsg(64, socket.CMSG_SPACE(4 * 4))
magic, version, err, _, token = struct.unpack("<IIiIQ", msg)
check("HelloReply: magic, version, err 0", (magic, version, err) == (PROTO_MAGIC, VERSION, 0), (magic, version, err))
check("HelloReply: non-zero channel token", token != 0)
fds = []
for level, kind, data in anc:
    if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
        fds += list(struct.unpack("<%di" % (len(data) // 4), data))
check("HelloReply carries exactly one fd (SCM_RIGHTS)", len(fds) == 1, fds)
efd = fds[0] if fds else -1
if efd >= 0:
    target = os.readlink("/proc/self/fd/%d" % efd)
    check("  it is an eventfd", target == "anon_inode:[eventfd]", target)
    # The application's fd: its O_NONBLOCK is the application's to set, so the service must not.
    check("  not O_NONBLOCK", os.get_blocking(efd), "O_NONBLOCK set")
    os.set_blocking(efd, False)
    try:
        os.read(efd, 8)
        check("  with count 0 (no event queued)", False, "readable")
    except BlockingIOError:
        check("  with count 0 (no event queued)", True)
    os.set_blocking(efd, True)


def readable(fd, timeout):
    return bool(select.select([fd], [], [], timeout)[0])


if events_mode:
    err, out = request(s, CREATE_ID, 4, struct.pack("<QQHB5x", 1, 0xDEAD0000, RDMA_PS_TCP, IBV_QPT_RC))
    check("CREATE_ID: err 0", err == 0, err)
    check("  no event at once (the event is due 200 ms later)", not readable(efd, 0))
    err, out = request(s, GET_EVENT, 336, struct.pack("<Q", 0xDEAD1000))
    check("  GET_EVENT before it: EAGAIN", err == errno.EAGAIN, err)
    check("the timer queues it: the eventfd turns readable", readable(efd, 2))
    err, out = request(s, GET_EVENT, 336, struct.pack("<Q", 0xDEAD1000))
    check("GET_EVENT takes it: err 0, 336 bytes", err == 0 and len(out) == 336, (err, len(out)))
    check("  and the eventfd is empty again", not readable(efd, 0.1))
    err, out = request(s, GET_EVENT, 336, struct.pack("<Q", 0xDEAD1000))
    check("  GET_EVENT again: EAGAIN", err == errno.EAGAIN, err)
    sys.exit(1 if failed else 0)

# CREATE_ID (struct rdma_ucm_create_id: uid, response, ps, qp_type, reserved[5]) -> 4-byte id.
err, out = request(s, CREATE_ID, 4, struct.pack("<QQHB5x", 0x1234, 0xDEAD0000, RDMA_PS_TCP, IBV_QPT_RC))
check("CREATE_ID: err 0, 4 bytes out", err == 0 and len(out) == 4, (err, out))
cm_id = struct.unpack("<I", out)[0] if len(out) == 4 else 0

status = subprocess.run([urxe, "cm", "show"], capture_output=True, text=True, timeout=10)
check("urxe cm show while connected: exit 0, 1 channel", status.returncode == 0 and ", 1 channel\n" in status.stdout,
      status.stdout + status.stderr)

# GET_EVENT (struct rdma_ucm_get_event: response) with nothing queued: EAGAIN, the service never blocks.
err, out = request(s, GET_EVENT, 336, struct.pack("<Q", 0xDEAD1000))
check("GET_EVENT with no event: EAGAIN", err == errno.EAGAIN, err)

# DESTROY_ID (struct rdma_ucm_destroy_id: response, id, reserved) -> events_reported.
err, out = request(s, DESTROY_ID, 4, struct.pack("<QII", 0xDEAD2000, cm_id, 0))
check("DESTROY_ID: err 0, 4 bytes out (events_reported 0)", err == 0 and out == b"\0\0\0\0", (err, out))
err, out = request(s, DESTROY_ID, 4, struct.pack("<QII", 0xDEAD2000, cm_id, 0))
check("DESTROY_ID again: EINVAL", err == errno.EINVAL, err)

# A request whose lengths disagree with its message: the connection is closed.
s.send(struct.pack("<IIII", 99, 100, 0, 0) + b"\0" * 8)
try:
    check("malformed request: connection closed", s.recv(64) == b"")
except OSError as e:
    check("malformed request: connection closed", isinstance(e, ConnectionResetError), e)
s.close()

# A Hello with another magic or version: closed without a reply.
for what, hello in (("bad magic", struct.pack("<II", 0x12345678, VERSION)),
                    ("bad version", struct.pack("<II", PROTO_MAGIC, VERSION + 1)),
                    ("short Hello", struct.pack("<I", PROTO_MAGIC))):
    s = connect()
    s.send(hello)
    try:
        got = s.recv(64)
    except OSError as e:
        got = e
    check("%s: closed without a reply" % what, got == b"" or isinstance(got, ConnectionResetError), got)
    s.close()

# The status Hello answers text, then closes.
s = connect()
s.send(struct.pack("<II", STATUS_MAGIC, VERSION))
text = b""
while True:
    part = s.recv(8192)
    if not part:
        break
    text += part
check("status Hello: text, then closed", text.startswith(b"CM service pid ") and b"\nMADs:" in text, text[:200])
sys.exit(1 if failed else 0)
