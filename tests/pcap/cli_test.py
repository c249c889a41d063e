#!/usr/bin/python3
"""Behaviour of the `urxe` command line: subcommand dispatch, `urxe pcap decode` output formats, exit codes.

usage: cli_test.py URXE_BINARY FIXTURES_DIR [unittest args]
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

URXE = ""
FIXTURES = ""

# IBTA 9.2 Table 35, by the low 5 bits of the opcode (RC/UC) - written out here, independently of wire/.
RETH_OPS = {0x06, 0x0A, 0x0B, 0x0C}
AETH_OPS = {0x0D, 0x0F, 0x10, 0x11, 0x12}
IMM_OPS = {0x03, 0x05, 0x09, 0x0B}
IETH_OPS = {0x16, 0x17}
ATOMIC_OPS = {0x13, 0x14}
REQUIRED = ["frame", "roce", "opcode", "opcode_name", "dqpn", "psn", "ack_req", "payload_len", "icrc_ok", "error",
            "se", "migreq", "pad", "tver", "pkey", "fecn", "becn", "ip", "udp", "eth"]
EXT_KEYS = {"reth": {"va", "rkey", "dma_len"}, "aeth": {"syndrome", "type", "value", "msn"},
            "atomic_eth": {"va", "rkey", "swap_add", "compare"}, "atomic_ack_eth": {"orig_data"},
            "deth": {"qkey", "src_qp"}, "ieth": {"rkey"}, "xrceth": {"srqn"}}


def run(*args):
    return subprocess.run([URXE, *args], capture_output=True, text=True, check=False)


def fixture(name):
    return os.path.join(FIXTURES, name)


def all_fixtures():
    return sorted(fixture(f) for f in os.listdir(FIXTURES) if f.endswith((".pcap", ".pcapng")))


def read_pcap(path):
    """Classic pcap (either byte order, us or ns) -> (global header bytes, endian, [(record header, data)])."""
    with open(path, "rb") as f:
        raw = f.read()
    magic = raw[:4]
    endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    recs, off = [], 24
    while off < len(raw):
        hdr = raw[off:off + 16]
        caplen = struct.unpack(endian + "IIII", hdr)[2]
        recs.append((hdr, bytearray(raw[off + 16:off + 16 + caplen])))
        off += 16 + caplen
    return raw[:24], recs


def write_pcap(path, ghdr, recs):
    with open(path, "wb") as f:
        f.write(ghdr)
        for hdr, data in recs:
            f.write(hdr)
            f.write(data)


def decode_json(path, *extra):
    r = run("pcap", "decode", "--json", path, *extra)
    return r, [json.loads(line) for line in r.stdout.splitlines()]


class Dispatch(unittest.TestCase):
    def test_help_lists_commands(self):
        r = run("--help")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("pcap", r.stdout)
        r = run("pcap", "--help")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("decode", r.stdout)
        r = run("pcap", "decode", "--help")
        self.assertEqual(r.returncode, 0, r.stderr)
        for word in ("--json", "--strict", "exit status"):
            self.assertIn(word, r.stdout)

    def test_unknown_command_names_the_valid_ones(self):
        r = run("frobnicate")
        self.assertEqual(r.returncode, 2)
        self.assertIn("frobnicate", r.stderr)
        self.assertIn("pcap", r.stderr)
        r = run("pcap", "frobnicate")
        self.assertEqual(r.returncode, 2)
        self.assertIn("decode", r.stderr)

    def test_no_arguments_is_usage_error(self):
        self.assertEqual(run().returncode, 2)
        self.assertEqual(run("pcap").returncode, 2)
        self.assertEqual(run("pcap", "decode").returncode, 2)
        self.assertEqual(run("pcap", "decode", "--bogus", fixture("rxe-qemu-rc_send_s64.pcap")).returncode, 2)
        self.assertEqual(run("pcap", "decode", fixture("rxe-qemu-rc_send_s64.pcap"),
                             fixture("rxe-qemu-rc_send_s64.pcap")).returncode, 2)


class FileErrors(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="urxe-cli-")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def test_missing_file(self):
        path = os.path.join(self.tmp, "nope.pcap")
        r = run("pcap", "decode", path)
        self.assertEqual(r.returncode, 2)
        self.assertIn(path, r.stderr)
        self.assertEqual(r.stdout, "")

    def test_not_a_capture(self):
        path = os.path.join(self.tmp, "text.pcap")
        with open(path, "w") as f:
            f.write("hello, this is not a capture file\n")
        r = run("pcap", "decode", "--strict", path)
        self.assertEqual(r.returncode, 2)
        self.assertIn(path, r.stderr)

    def test_capture_cut_in_the_middle_prints_what_it_read(self):
        ghdr, recs = read_pcap(fixture("rxe-qemu-rc_send_s64.pcap"))
        path = os.path.join(self.tmp, "cut.pcap")
        write_pcap(path, ghdr, recs[:3])
        with open(path, "ab") as f:
            f.write(recs[3][0] + recs[3][1][:10])
        r = run("pcap", "decode", path)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(r.stdout.splitlines()), 3)
        self.assertIn("after frame 3", r.stderr)


class DecodeOutput(unittest.TestCase):
    def test_json_lines_have_the_required_keys(self):
        frames = roce = 0
        for path in all_fixtures():
            r, objs = decode_json(path)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual([o["frame"] for o in objs], list(range(1, len(objs) + 1)), path)
            for o in objs:
                frames += 1
                if not o["roce"]:
                    self.assertRegex(o["skipped"], r"^[a-z0-9-]+$")
                    continue
                roce += 1
                missing = [k for k in REQUIRED if k not in o]
                self.assertEqual(missing, [], f"{path} frame {o['frame']}")
                self.assertIs(o["icrc_ok"], True)
                self.assertIsNone(o["error"])
                self.assertIsInstance(o["ack_req"], bool)
                self.check_extension_headers(path, o)
        print(f"\n  {frames} frames, {roce} RoCE, JSON keys checked", file=sys.stderr)

    def check_extension_headers(self, path, o):
        op, low, transport = o["opcode"], o["opcode"] & 0x1F, o["opcode"] & 0xE0
        want = set()
        if transport in (0x00, 0x20, 0xA0):  # RC, UC, XRC (Annex A14: RC's headers, an XRCETH on requests)
            want |= {"xrceth"} if transport == 0xA0 and low not in AETH_OPS | {0x0E} else set()
            want |= {"reth"} if low in RETH_OPS else set()
            want |= {"aeth"} if low in AETH_OPS else set()
            want |= {"immdt"} if low in IMM_OPS else set()
            want |= {"ieth"} if low in IETH_OPS else set()
            want |= {"atomic_eth"} if low in ATOMIC_OPS else set()
            want |= {"atomic_ack_eth"} if low == 0x12 else set()
        elif transport == 0x60:  # UD
            want |= {"deth"} | ({"immdt"} if low == 0x05 else set())
        have = {k for k in ("reth", "aeth", "immdt", "ieth", "atomic_eth", "atomic_ack_eth", "deth", "xrceth")
                if k in o}
        self.assertEqual(have, want, f"{path} frame {o['frame']} opcode {op:#x}")
        for k in have - {"immdt"}:
            self.assertTrue(EXT_KEYS[k] <= set(o[k]), f"{path} frame {o['frame']}: {k} {o[k]}")
        if "aeth" in o:
            a = o["aeth"]
            self.assertEqual(a["syndrome"] >> 5 & 3, ["ACK", "RNR_NAK", "RESERVED", "NAK"].index(a["type"]))
            self.assertEqual(a["syndrome"] & 0x1F, a["value"])
            if a["type"] == "ACK":
                self.assertEqual(a["credit"], a["value"])
            if a["type"] == "NAK":  # IBTA 9.7.5.2.4
                names = ["PSN_SEQUENCE_ERROR", "INVALID_REQUEST", "REMOTE_ACCESS_ERROR", "REMOTE_OPERATIONAL_ERROR",
                         "INVALID_RD_REQUEST"]
                self.assertEqual(a["nak_code"], a["value"])
                self.assertEqual(a["nak_name"], names[a["value"]] if a["value"] < len(names) else "RESERVED")

    def test_non_roce_frames_are_skipped(self):
        path = fixture("rxe-linlinw5-pingpong_rc.pcap")  # ibv_rc_pingpong: TCP exchange, then RoCE
        r, objs = decode_json(path)
        self.assertEqual(r.returncode, 0)
        skipped = [o for o in objs if not o["roce"]]
        self.assertGreater(len(skipped), 0)
        for o in skipped:
            self.assertEqual(o["skipped"], "tcp")
            self.assertEqual(o["ip"]["protocol"], 6)
            self.assertNotIn("opcode", o)
        text = run("pcap", "decode", path)
        lines = text.stdout.splitlines()
        self.assertEqual(len(lines), len(objs))
        for o, line in zip(objs, lines):
            self.assertTrue(line.split()[0] == str(o["frame"]), line)
            self.assertEqual("skipped tcp" in line, not o["roce"], line)
            self.assertEqual(line.endswith("icrc=ok"), o["roce"], line)
        self.assertIn(f"{len(objs)} frames: {len(objs) - len(skipped)} RoCEv2", text.stderr)

    def test_text_shows_the_fields(self):
        r = run("pcap", "decode", fixture("rxe-qemu-rc_atomic_cswap_bw.pcap"))
        self.assertEqual(r.returncode, 0)
        first = r.stdout.splitlines()[0]
        for s in ("52:54:00:77:00:02 > 52:54:00:77:00:01", "10.77.0.12:50521 > 10.77.0.11:4791",
                  "RC COMPARE_SWAP (0x13)", "dqpn=0x000025", "ack_req=1", "atomic_eth[va=0x0000555a48eec000",
                  "rkey=0x0000133b", "icrc=ok"):
            self.assertIn(s, first)
        r = run("pcap", "decode", fixture("rxe-qemu-lossy_rc_write_bw.pcap"))
        naks = [l for l in r.stdout.splitlines() if "aeth[NAK" in l]
        self.assertGreater(len(naks), 0)
        self.assertIn("PSN_SEQUENCE_ERROR (0)", naks[0])


class GeneratedFixture(unittest.TestCase):
    """pcap-fixtures/generated-scapy-ipv6-vlan-naks.pcap: the encapsulations and AETH kinds real captures lack.
    Expected values are the generator's inputs (pcap-fixtures/make-generated.py)."""

    PATH = "generated-scapy-ipv6-vlan-naks.pcap"

    def test_generator_reproduces_the_file(self):
        with tempfile.TemporaryDirectory(prefix="urxe-cli-") as tmp:
            out = os.path.join(tmp, "g.pcap")
            subprocess.run(["/usr/bin/python3", fixture("make-generated.py"), out], check=True, capture_output=True)
            with open(out, "rb") as a, open(fixture(self.PATH), "rb") as b:
                self.assertEqual(a.read(), b.read())

    def test_ipv6_vlan_and_aeth_kinds(self):
        r, objs = decode_json(fixture(self.PATH), "--strict")
        self.assertEqual(r.returncode, 0, r.stderr)
        o = {x["frame"]: x for x in objs}
        self.assertEqual(o[1]["vlan"]["vid"], 100)
        self.assertEqual(o[1]["vlan"]["pcp"], 5)
        self.assertEqual((o[1]["ip"]["version"], o[1]["ip"]["src"], o[1]["ip"]["dst"]), (6, "2001:db8::a", "2001:db8::b"))
        self.assertEqual((o[1]["ip"]["tc"], o[1]["ip"]["flow_label"], o[1]["ip"]["hop_limit"]), (0x68, 0x12345, 17))
        self.assertEqual((o[1]["immdt"], o[1]["se"], o[1]["pad"], o[1]["payload_len"]), (0xCAFEF00D, True, 1, 7))
        self.assertEqual(o[2]["ieth"]["rkey"], 0xABCDEF)
        self.assertNotEqual(o[2]["udp"]["checksum"], 0)
        self.assertEqual((o[4]["deth"]["qkey"], o[4]["deth"]["src_qp"], o[4]["immdt"]), (0x80010000, 0xABC, 0x01020304))
        self.assertEqual((o[5]["migreq"], o[5]["pkey"], o[5]["reth"]["va"]), (True, 0x8001, 0xFFFF800012345678))
        self.assertEqual(o[6]["atomic_eth"]["swap_add"], 0xFEDCBA9876543210)
        self.assertEqual(o[7]["atomic_ack_eth"]["orig_data"], 0x0123456789ABCDEF)
        self.assertEqual((o[8]["opcode_name"], o[8]["becn"]), ("CNP", True))
        rnr = o[9]["aeth"]
        self.assertEqual((rnr["type"], rnr["rnr_timer"], rnr["rnr_timer_ns"], rnr["msn"]), ("RNR_NAK", 12, 640000, 10))
        self.assertEqual(o[10]["aeth"]["rnr_timer_ns"], 10000)
        for frame, code in zip(range(11, 16), range(5)):
            self.assertEqual((o[frame]["aeth"]["type"], o[frame]["aeth"]["nak_code"]), ("NAK", code))
        self.assertEqual(o[16]["fecn"], True)
        self.assertEqual(o[16]["ip"]["tos"], 3)
        self.assertEqual(o[17]["payload_len"], 256)
        self.assertEqual((o[18]["payload_len"], o[18]["caplen"], o[18]["ip"]["version"]), (0, 60, 4))
        self.assertEqual([o[n]["skipped"] for n in (19, 20, 21)], ["udp", "arp", "icmpv6"])
        self.assertEqual(o[19]["udp"]["sport"], 4791)
        text = run("pcap", "decode", fixture(self.PATH)).stdout.splitlines()
        self.assertIn("vlan 100 pcp 5 ip6 [2001:db8::a]:49443 > [2001:db8::b]:4791", text[0])
        self.assertIn("aeth[RNR_NAK timer=12 (0.64 ms) syndrome=0x2c msn=10]", text[8])
        self.assertIn("aeth[NAK REMOTE_ACCESS_ERROR (2) syndrome=0x62 msn=14]", text[12])


class Strict(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="urxe-cli-")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def test_every_fixture_passes_strict(self):
        for path in all_fixtures():
            r = run("pcap", "decode", "--strict", path)
            self.assertEqual(r.returncode, 0, f"{path}: {r.stderr}")

    def test_flipped_capture_fails_strict(self):
        src = fixture("rxe-linlinw5-rdma_read_bw.pcap")
        ghdr, recs = read_pcap(src)
        _, objs = decode_json(src)
        roce = [o["frame"] for o in objs if o["roce"]]
        # One bit in the last byte before the ICRC of every third RoCE frame.
        flipped = roce[::3]
        for n in flipped:
            data = recs[n - 1][1]
            data[-5] ^= 0x04
        path = os.path.join(self.tmp, "flipped.pcap")
        write_pcap(path, ghdr, recs)
        r = run("pcap", "decode", "--strict", path)
        self.assertEqual(r.returncode, 1, r.stderr)
        r2, objs2 = decode_json(path, "--strict")
        self.assertEqual(r2.returncode, 1)
        bad = [o["frame"] for o in objs2 if o["roce"] and not o["icrc_ok"]]
        self.assertEqual(bad, flipped)
        for o in objs2:
            if o["frame"] in flipped:
                self.assertEqual(o["error"], "bad ICRC")
        self.assertEqual(run("pcap", "decode", path).returncode, 0)  # without --strict: report, exit 0

    def test_pcapng_decodes_like_pcap(self):
        src = fixture("rxe-linlinw5-rdma_atomic_bw.pcap")
        ng = os.path.join(self.tmp, "a.pcapng")
        subprocess.run(["/usr/bin/editcap", "-F", "pcapng", src, ng], check=True, capture_output=True)
        with open(ng, "rb") as f:
            self.assertEqual(f.read(4), b"\x0a\x0d\x0d\x0a")  # really pcapng
        a, b = run("pcap", "decode", "--json", src), run("pcap", "decode", "--json", "--strict", ng)
        self.assertEqual(b.returncode, 0, b.stderr)
        self.assertEqual(a.stdout, b.stdout)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    URXE, FIXTURES = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0]] + sys.argv[3:], verbosity=2)
