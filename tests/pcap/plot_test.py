#!/usr/bin/python3
"""`urxe pcap plot`: the SVG of a known connection holds the marks its frames call for.

A pcapng built here with Scapy (IPv4 RoCEv2, Scapy's ICRCs) and per-packet comments as urxe's captures write
them: a SEND whose middle packet a fault rule dropped ("(not sent)"), the PSN sequence error NAK, the two
packets sent again across the 24-bit PSN wrap, a WRITE a fault rule delayed; the peer's READ, atomic and an
RNR-NAKed SEND sent again; a CNP; a SEND whose ICRC a fault rule corrupted; and another QP pair between the
same two hosts that must stay out. Then a lossy interop capture, against counts taken here from
`urxe pcap decode --json`.

usage: plot_test.py URXE_BINARY FIXTURES_DIR [unittest args]
"""
import collections
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest
import xml.dom.minidom

from scapy.all import IP, UDP, Ether, Raw, raw
from scapy.contrib.roce import AETH, BTH, CNPPadding

URXE = ""
FIXTURES = ""
SVG_NS = "http://www.w3.org/2000/svg"

# Opcodes (IBTA 9.2 Table 35), written out independently of wire/.
SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_ONLY, WRITE_ONLY = 0x00, 0x01, 0x02, 0x04, 0x0A
READ_REQ, READ_RESP_FIRST, READ_RESP_LAST, ACK, ATOMIC_ACK, FETCH_ADD, CNP = 0x0C, 0x0D, 0x0F, 0x11, 0x12, 0x14, 0x81
QP_N, QP_PEER = 0x11, 0x22  # N at 10.0.0.1, its peer at 10.0.0.2
A, B = "10.0.0.1", "10.0.0.2"


def frame(src, dst, opcode, dqpn, psn, rest=b"", aeth=None):
    bth = BTH(opcode=opcode, dqpn=dqpn, psn=psn, ackreq=1)
    if opcode == CNP:
        bth = BTH(opcode=CNP, becn=1, dqpn=dqpn, psn=0) / CNPPadding()
    elif aeth is not None:
        bth = bth / AETH(syndrome=aeth, msn=1)
    return raw(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src=src, dst=dst) /
               UDP(sport=0xC000, dport=4791, chksum=0) / bth / Raw(rest))


def corrupt(data):
    return data[:-1] + bytes([data[-1] ^ 0xFF])


def write_pcapng(path, frames):
    """frames: [(seconds, bytes, comment)] -> pcapng (SHB, one Ethernet IDB in us, one EPB each)."""
    def block(btype, body):
        body += b"\0" * (-len(body) % 4)
        return struct.pack("<II", btype, len(body) + 12) + body + struct.pack("<I", len(body) + 12)

    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    out += block(1, struct.pack("<HHI", 1, 0, 0))
    for t, data, comment in frames:
        us = int(round(t * 1e6))
        body = struct.pack("<IIIII", 0, us >> 32, us & 0xFFFFFFFF, len(data), len(data)) + data
        body += b"\0" * (-len(body) % 4)
        if comment:
            c = comment if isinstance(comment, bytes) else comment.encode()
            body += struct.pack("<HH", 1, len(c)) + c + b"\0" * (-len(c) % 4) + struct.pack("<HH", 0, 0)
        out += block(6, body)
    with open(path, "wb") as f:
        f.write(out)


def known_capture(path):
    out = "pid 7 (app) out, to QP 0x%06x" % QP_PEER
    inn = "pid 7 (app) in, to QP 0x%06x" % QP_N
    payload = bytes(16)
    frames = [
        # N's SEND of three packets across the PSN wrap; the middle one dropped by fault rule 3.
        (0.000, frame(A, B, SEND_FIRST, QP_PEER, 0xFFFFFE, payload), out),
        (0.001, frame(A, B, SEND_MIDDLE, QP_PEER, 0xFFFFFF, payload), out + ", fault rule 3: drop (not sent)"),
        (0.002, frame(A, B, SEND_LAST, QP_PEER, 0x000000, payload), out),
        (0.003, frame(B, A, ACK, QP_N, 0xFFFFFF, aeth=0x60), inn),  # NAK: PSN sequence error
        (0.004, frame(A, B, SEND_MIDDLE, QP_PEER, 0xFFFFFF, payload), out),  # sent again
        (0.005, frame(A, B, SEND_LAST, QP_PEER, 0x000000, payload), out),  # sent again
        (0.006, frame(A, B, WRITE_ONLY, QP_PEER, 0x000001, struct.pack("!QII", 0x1000, 7, 4) + bytes(4)),
         out + ", fault rule 2: delay 1ms"),
        (0.007, frame(B, A, ACK, QP_N, 0x000001, aeth=0x1F), inn),
        # Another QP pair between the same hosts: not part of the connection.
        (0.0075, frame(A, B, SEND_ONLY, 0x33, 7000, payload), ""),
        (0.0076, frame(B, A, ACK, 0x44, 7000, aeth=0x1F), ""),
        # The peer's requests to N and N's responses.
        (0.008, frame(B, A, READ_REQ, QP_N, 500, struct.pack("!QII", 0x2000, 9, 32)), inn),
        (0.009, frame(A, B, READ_RESP_FIRST, QP_PEER, 500, bytes(16), aeth=0x1F), out),
        (0.010, frame(A, B, READ_RESP_LAST, QP_PEER, 501, bytes(16), aeth=0x1F), out),
        (0.011, frame(B, A, FETCH_ADD, QP_N, 502, struct.pack("!QIQQ", 0x3000, 9, 1, 0)), inn),
        (0.012, frame(A, B, ATOMIC_ACK, QP_PEER, 502, struct.pack("!II", 0, 5), aeth=0x1F), out),
        (0.013, frame(B, A, SEND_ONLY, QP_N, 503, payload), inn),
        (0.014, frame(A, B, ACK, QP_PEER, 503, aeth=0x2C), out),  # RNR NAK
        (0.015, frame(B, A, SEND_ONLY, QP_N, 503, payload), inn),  # sent again
        (0.016, frame(A, B, ACK, QP_PEER, 503, aeth=0x1F), out),
        # A process name with markup, a control character, a byte that is not UTF-8, and UTF-8.
        (0.017, frame(B, A, CNP, QP_N, 0), b"pid 7 (x<&\x01\xff\xc3\xa9) in"),
        # A fault rule corrupted the ICRC: still drawn, its BTH reads.
        (0.018, corrupt(frame(B, A, SEND_ONLY, QP_N, 504, payload)), inn + ", fault rule 4: corrupt icrc"),
    ]
    write_pcapng(path, frames)


def run(*args):
    return subprocess.run([URXE, *args], capture_output=True, text=True, check=False)


def marks(svg_path):
    """Well-formed SVG -> ({class tokens tuple: count}, [mark elements], document)."""
    doc = xml.dom.minidom.parse(svg_path)  # raises on malformed XML
    root = doc.documentElement
    assert root.tagName == "svg" and root.getAttribute("xmlns") == SVG_NS, root.tagName
    found = []
    for tag in ("circle", "rect", "path"):
        for e in doc.getElementsByTagName(tag):
            cls = e.getAttribute("class").split()
            if cls and cls[0] == "mark":
                found.append(e)
    return found, doc


def with_class(elems, *tokens):
    return [e for e in elems if set(tokens) <= set(e.getAttribute("class").split())]


def title_of(e):
    t = e.getElementsByTagName("title")
    return t[0].firstChild.data if t and t[0].firstChild else ""


class KnownCapture(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="urxe-plot-test.")
        cls.cap = os.path.join(cls.tmp, "known.pcapng")
        known_capture(cls.cap)
        cls.svg = os.path.join(cls.tmp, "known.svg")
        r = run("pcap", "plot", cls.cap, "--qp", "0x11", "-o", cls.svg)
        assert r.returncode == 0, r.stderr
        cls.stderr = r.stderr
        cls.marks, cls.doc = marks(cls.svg)

    @classmethod
    def tearDownClass(cls):
        subprocess.run(["rm", "-rf", cls.tmp], check=False)

    def test_peer_found_by_the_answers(self):
        self.assertIn("peer QP 0x000022 (by answers)", self.stderr)

    def test_request_marks(self):
        self.assertEqual(len(with_class(self.marks, "request")), 8)  # first sendings only
        self.assertEqual(len(with_class(self.marks, "request", "send")), 5)
        self.assertEqual(len(with_class(self.marks, "request", "send", "middle")), 1)
        self.assertEqual(len(with_class(self.marks, "request", "write")), 1)
        self.assertEqual(len(with_class(self.marks, "request", "read")), 1)
        self.assertEqual(len(with_class(self.marks, "request", "atomic")), 1)

    def test_retransmissions(self):
        got = sorted(int(e.getAttribute("data-frame")) for e in with_class(self.marks, "retransmission"))
        self.assertEqual(got, [5, 6, 18])

    def test_naks_by_kind(self):
        seq = with_class(self.marks, "nak", "nak-seq")
        self.assertEqual([e.getAttribute("data-frame") for e in seq], ["4"])
        self.assertIn("NAK: PSN sequence error", title_of(seq[0]))
        self.assertEqual([e.getAttribute("data-frame") for e in with_class(self.marks, "nak-rnr")], ["17"])
        self.assertEqual(len(with_class(self.marks, "nak")), 2)

    def test_responses_and_cnp(self):
        self.assertEqual(len(with_class(self.marks, "ack")), 2)
        self.assertEqual(len(with_class(self.marks, "read-response")), 2)
        self.assertEqual(len(with_class(self.marks, "atomic-ack")), 1)
        self.assertEqual(len(with_class(self.marks, "cnp")), 1)

    def test_fault_marks(self):
        dropped = with_class(self.marks, "fault", "dropped")
        self.assertEqual([(e.getAttribute("data-frame"), e.getAttribute("data-rule")) for e in dropped], [("2", "3")])
        self.assertEqual(dropped[0].tagName, "path")  # the cross
        self.assertIn("fault rule 3: drop (not sent)", title_of(dropped[0]))
        changed = [e for e in with_class(self.marks, "fault") if "dropped" not in e.getAttribute("class")]
        self.assertEqual([(e.getAttribute("data-frame"), e.getAttribute("data-rule")) for e in changed],
                         [("7", "2"), ("21", "4")])
        self.assertIn("bad ICRC", title_of(changed[1]))

    def test_other_qps_stay_out(self):
        frames = {int(e.getAttribute("data-frame")) for e in self.marks}
        self.assertEqual(frames, set(range(1, 22)) - {9, 10})

    def test_tooltips(self):
        e = with_class(self.marks, "request", "write")[0]
        t = title_of(e)
        for want in ("frame 7", "t 0.006000000 s", "RC RDMA_WRITE_ONLY", "PSN 0x000001 (1)", "fault rule 2: delay"):
            self.assertIn(want, t)

    def test_comment_text_stays_well_formed(self):
        cnp = with_class(self.marks, "cnp")
        self.assertEqual(len(cnp), 1)
        self.assertIn("pid 7 (x<&??\u00e9) in", title_of(cnp[0]))  # parsed back from &lt; &amp;

    def test_axis_labels(self):
        texts = [t.firstChild.data for t in self.doc.getElementsByTagName("text") if t.firstChild]
        self.assertEqual(texts.count("time (s) since the connection's first frame"), 2)  # one per PSN space
        self.assertEqual(texts.count("PSN (unwrapped 24-bit)"), 2)

    def test_json_points_unwrap_the_psn(self):
        r = run("pcap", "plot", self.cap, "--qp", "17", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        pts = [json.loads(line) for line in r.stdout.splitlines()]
        by_frame = {p["frame"]: p for p in pts}
        self.assertEqual(by_frame[1]["y"], 0xFFFFFE)
        self.assertEqual(by_frame[3]["y"], 0x1000000)  # PSN 0 after 0xFFFFFF
        self.assertEqual(by_frame[7]["y"], 0x1000001)
        self.assertEqual(by_frame[6]["kind"], "retransmission")
        self.assertEqual(by_frame[2]["fault_rule"], 3)
        self.assertTrue(by_frame[2]["dropped"])
        self.assertEqual(by_frame[4]["space"], 0)  # the NAK answers N's requests
        self.assertEqual(by_frame[11]["space"], 1)
        self.assertEqual(by_frame[7]["t_ns"], 6000000)
        self.assertEqual(by_frame[20]["comment"], "pid 7 (x<&\x01?\u00e9) in")  # UTF-8 lines


class Errors(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="urxe-plot-test.")
        self.cap = os.path.join(self.tmp, "k.pcapng")
        known_capture(self.cap)

    def tearDown(self):
        subprocess.run(["rm", "-rf", self.tmp], check=False)

    def test_no_such_qp(self):
        out = os.path.join(self.tmp, "x.svg")
        r = run("pcap", "plot", self.cap, "--qp", "0x999", "-o", out)
        self.assertEqual(r.returncode, 1)
        self.assertIn("no RC/UC/XRC frame to or from QP 0x000999 (2457)\n", r.stderr)
        self.assertFalse(os.path.exists(out))

    def test_ud_qp(self):
        r = run("pcap", "plot", os.path.join(FIXTURES, "rxe-linlinw5-pingpong_ud.pcap"), "--qp", "34", "-o",
                os.path.join(self.tmp, "x.svg"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("QP 0x000022 (34); its frames are UD, which has no connection to plot", r.stderr)

    def test_usage_errors(self):
        for args in ([self.cap, "-o", "x.svg"], [self.cap, "--qp", "zz", "-o", "x.svg"], [self.cap, "--qp", "1"],
                     ["--qp", "1", "-o", "x.svg"], [self.cap, "--qp", "0x1000000", "-o", "x.svg"],
                     [self.cap, "--qp", "1", "-o", "x.svg", "--bogus"]):
            r = run("pcap", "plot", *args)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn("urxe pcap plot:", r.stderr)
            self.assertIn("usage: urxe pcap plot", r.stderr)

    def test_missing_file(self):
        r = run("pcap", "plot", os.path.join(self.tmp, "nosuch.pcap"), "--qp", "1", "-o", "x.svg")
        self.assertEqual(r.returncode, 2)


class SameQpNumberBothEnds(unittest.TestCase):
    def test_peer_with_the_same_number(self):
        with tempfile.TemporaryDirectory() as tmp:
            cap, svg = os.path.join(tmp, "s.pcapng"), os.path.join(tmp, "s.svg")
            write_pcapng(cap, [(0.0, frame(A, B, SEND_ONLY, QP_N, 10, bytes(8)), ""),
                               (0.001, frame(B, A, ACK, QP_N, 10, aeth=0x1F), "")])
            r = run("pcap", "plot", cap, "--qp", str(QP_N), "-o", svg)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("peer QP 0x000011 (by answers): 2 frames plotted", r.stderr)
            found, _ = marks(svg)
        self.assertEqual(len(with_class(found, "request")), 1)
        self.assertEqual(len(with_class(found, "ack")), 1)


class LossyInterop(unittest.TestCase):
    """A capture with real losses: the SVG's counts equal the ones counted here from `pcap decode --json`."""

    def test_counts_match_the_decoded_frames(self):
        cap = os.path.join(FIXTURES, "interop", "interop-rc_pingpong_s2048_m256_lossy_urxe_client.pcap")
        dec = subprocess.run([URXE, "pcap", "decode", "--json", cap], capture_output=True, text=True, check=True)
        want = collections.Counter()
        seen = set()
        for line in dec.stdout.splitlines():
            o = json.loads(line)
            if not o.get("roce") or o.get("dqpn") not in (17, 29):
                continue
            low = o["opcode"] & 0x1F
            if low in (SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_ONLY):
                key = (o["dqpn"], o["psn"])
                want["retransmission" if key in seen else "request"] += 1
                seen.add(key)
            elif low == ACK:
                syn = o["aeth"]["syndrome"]
                want[{0: "ack", 1: "nak-rnr", 3: "nak-" + str(syn & 0x1F)}[syn >> 5 & 3]] += 1
        with tempfile.TemporaryDirectory() as tmp:
            svg = os.path.join(tmp, "l.svg")
            r = run("pcap", "plot", cap, "--qp", "17", "-o", svg)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("peer QP 0x00001d", r.stderr)
            found, _ = marks(svg)
        self.assertGreater(want["retransmission"], 0)
        self.assertGreater(want["nak-0"], 0)
        self.assertEqual(len(with_class(found, "request")), want["request"])
        self.assertEqual(len(with_class(found, "retransmission")), want["retransmission"])
        self.assertEqual(len(with_class(found, "ack")), want["ack"])
        self.assertEqual(len(with_class(found, "nak-seq")), want["nak-0"])
        self.assertEqual(len(with_class(found, "nak")), sum(v for k, v in want.items() if k.startswith("nak")))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    URXE, FIXTURES = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0]] + sys.argv[3:], verbosity=2)
