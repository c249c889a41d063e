// Fault mutations (wire/fault_rule.h apply_fault_mutation), each checked by parsing the frame again with
// wire::parse_frame: a corrupted field arrives in a valid frame, a corrupted ICRC does not, ECN CE and
// truncation keep the frame valid.
#include <gtest/gtest.h>

#include "tests/wire/wire_test_util.h"
#include "wire/fault_rule.h"

namespace {

using namespace wire_test;

FaultRule rule(std::string_view text) {
  const FaultParse r = parse_fault_rule(text);
  EXPECT_TRUE(r) << text << ": " << r.error;
  return r.rule.value_or(FaultRule{});
}

// Applies `text` to `f`, in place; returns whether it applied.
bool mutate(std::string_view text, Bytes& f) {
  size_t len = f.size();
  const bool ok = apply_fault_mutation(rule(text), f, len);
  EXPECT_LE(len, f.size());
  f.resize(len);
  return ok;
}

// `payload` bytes where the opcode carries any.
Bytes frame(uint8_t opcode, size_t payload = 16, const Variant& v = kVariants[0]) {
  return build(make_spec(opcode, v), payload_of(opcode_info(opcode).has_payload ? payload : 0));
}

struct FieldCase {
  const char* field;
  uint8_t opcode;
  uint64_t before;  // make_spec's value
  uint64_t (*read)(const Packet&);
};
const FieldCase kFieldCases[] = {
    {"bth.opcode", op::kRc | op::send_only, 0x04, [](const Packet& p) -> uint64_t { return p.bth.opcode; }},
    {"bth.se", op::kRc | op::send_only, 1, [](const Packet& p) -> uint64_t { return p.bth.se; }},
    {"bth.migreq", op::kRc | op::send_only, 0, [](const Packet& p) -> uint64_t { return p.bth.migreq; }},
    {"bth.pkey", op::kRc | op::send_only, 0xffff, [](const Packet& p) -> uint64_t { return p.bth.pkey; }},
    {"bth.destqp", op::kRc | op::send_only, 0x11, [](const Packet& p) -> uint64_t { return p.bth.dqpn; }},
    {"bth.ackreq", op::kRc | op::send_only, 1, [](const Packet& p) -> uint64_t { return p.bth.ack_req; }},
    {"bth.psn", op::kRc | op::send_only, 0xfffffe, [](const Packet& p) -> uint64_t { return p.bth.psn; }},
    {"reth.va", op::kRc | op::write_first, kValReth.va,
     [](const Packet& p) -> uint64_t { return p.reth.va; }},
    {"reth.rkey", op::kRc | op::read_request, kValReth.rkey,
     [](const Packet& p) -> uint64_t { return p.reth.rkey; }},
    {"reth.len", op::kRc | op::write_only, kValReth.dma_len,
     [](const Packet& p) -> uint64_t { return p.reth.dma_len; }},
    {"aeth.syndrome", op::kRc | op::acknowledge, kValAeth.syndrome,
     [](const Packet& p) -> uint64_t { return p.aeth.syndrome; }},
    {"aeth.msn", op::kRc | op::read_response_last, kValAeth.msn,
     [](const Packet& p) -> uint64_t { return p.aeth.msn; }},
    {"atomiceth.va", op::kRc | op::fetch_add, kValAtomicEth.va,
     [](const Packet& p) -> uint64_t { return p.atomic_eth.va; }},
    {"atomiceth.rkey", op::kRc | op::compare_swap, kValAtomicEth.rkey,
     [](const Packet& p) -> uint64_t { return p.atomic_eth.rkey; }},
    {"atomiceth.swap", op::kRc | op::compare_swap, kValAtomicEth.swap_add,
     [](const Packet& p) -> uint64_t { return p.atomic_eth.swap_add; }},
    {"atomiceth.compare", op::kXrc | op::compare_swap, kValAtomicEth.compare,
     [](const Packet& p) -> uint64_t { return p.atomic_eth.compare; }},
    {"atomicacketh.orig", op::kRc | op::atomic_acknowledge, kValAtomicAckEth.orig_data,
     [](const Packet& p) -> uint64_t { return p.atomic_ack_eth.orig_data; }},
    {"deth.qkey", op::kUd | op::send_only_imm, kValDeth.qkey,
     [](const Packet& p) -> uint64_t { return p.deth.qkey; }},
    {"deth.srcqp", op::kUd | op::send_only, kValDeth.src_qp,
     [](const Packet& p) -> uint64_t { return p.deth.src_qp; }},
    {"xrceth.srqn", op::kXrc | op::write_first, kXrcSrqn,
     [](const Packet& p) -> uint64_t { return p.xrc_srqn; }},
    {"immdt", op::kUc | op::write_only_imm, kImm, [](const Packet& p) -> uint64_t { return p.imm; }},
    {"ieth.rkey", op::kRc | op::send_last_inv, kIethRkey,
     [](const Packet& p) -> uint64_t { return p.ieth_rkey; }},
    {"payload", op::kRc | op::send_only, 0xa0, [](const Packet& p) -> uint64_t { return p.payload[0]; }},
};

TEST(WireFaultMutate, CorruptFieldKeepsTheFrameValid) {
  for (const FieldCase& c : kFieldCases) {
    const FaultFieldInfo* info = nullptr;
    for (const FaultFieldInfo& f : kFaultFields)
      if (f.name == c.field) info = &f;
    ASSERT_NE(info, nullptr) << c.field;
    const uint64_t mask = info->width == 64 ? ~uint64_t{0} : (uint64_t{1} << info->width) - 1;
    const uint64_t value = (c.before ^ 0xa5a5a5a5a5a5a5a5ull) & mask;
    for (const Variant& v : kVariants) {
      SCOPED_TRACE(std::string(c.field) + " " + v.name);
      const Bytes orig = frame(c.opcode, 16, v);
      Packet p;
      ASSERT_EQ(parse_frame(orig, p), ParseError::ok);
      ASSERT_EQ(c.read(p), c.before);
      // Default: the lowest bit flips. The ICRC is recomputed: the frame parses with a valid ICRC.
      Bytes f = orig;
      ASSERT_TRUE(mutate(std::string("corrupt ") + c.field, f));
      ASSERT_EQ(f.size(), orig.size());
      Packet q;
      const ParseError e = parse_frame(f, q);
      if (std::string(c.field) == "bth.opcode") {
        EXPECT_EQ(e, ParseError::ok);  // SEND_ONLY_WITH_IMMEDIATE: 4 more header bytes, the same frame
        EXPECT_EQ(q.bth.opcode, 0x05);
      } else {
        ASSERT_EQ(e, ParseError::ok);
        EXPECT_TRUE(q.icrc_ok);
        EXPECT_EQ(c.read(q), c.before ^ 1);
      }
      // =VALUE: the field takes it, nothing else in the headers changes.
      f = orig;
      ASSERT_TRUE(mutate(std::string("corrupt ") + c.field + "=" + std::to_string(value), f));
      if (std::string(c.field) == "bth.opcode") continue;  // another layout: checked above
      ASSERT_EQ(parse_frame(f, q), ParseError::ok);
      EXPECT_TRUE(q.icrc_ok);
      EXPECT_EQ(c.read(q), value);
      size_t diff = 0;
      for (size_t i = 0; i + kIcrcLen < f.size(); ++i) diff += f[i] != orig[i];
      EXPECT_GE(diff, 1u);
      EXPECT_LE(diff, info->bytes);
    }
  }
}

TEST(WireFaultMutate, CorruptBthBitsNextToOthers) {
  // pad and tver share byte 1 with SE and M; each write leaves its neighbours alone.
  Bytes f = frame(op::kRc | op::send_only, 13);  // pad 3
  ASSERT_TRUE(mutate("corrupt bth.pad=1", f));
  Packet p;
  EXPECT_EQ(parse_frame(f, p), ParseError::ok);  // 16 bytes after the headers, 15 payload
  EXPECT_EQ(p.bth.pad, 1);
  EXPECT_TRUE(p.bth.se);
  EXPECT_EQ(p.payload_len, 15u);
  f = frame(op::kRc | op::send_only);
  ASSERT_TRUE(mutate("corrupt bth.tver", f));
  EXPECT_EQ(parse_frame(f, p), ParseError::bad_version);
  EXPECT_EQ(p.bth.tver, 1);
  EXPECT_TRUE(p.bth.se);
  EXPECT_EQ(p.bth.pad, 0);
  EXPECT_EQ(load_le32(f.data() + f.size() - 4), ref_icrc(f.data() + kL3, f.size() - kL3 - 4, 4, 20));
}

TEST(WireFaultMutate, CorruptIcrc) {
  for (const Variant& v : kVariants) {
    const Bytes orig = frame(op::kRc | op::send_only, 16, v);
    Bytes f = orig;
    ASSERT_TRUE(mutate("corrupt icrc", f));
    Packet p;
    EXPECT_EQ(parse_frame(f, p), ParseError::bad_icrc) << v.name;
    EXPECT_EQ(p.icrc, ~p.icrc_expected);
    EXPECT_TRUE(std::equal(orig.begin(), orig.end() - 4, f.begin()));  // only the ICRC changed
  }
}

TEST(WireFaultMutate, EcnCe) {
  for (const Variant& v : kVariants) {
    SCOPED_TRACE(v.name);
    const Bytes orig = frame(op::kRc | op::write_only, 16, v);
    Bytes f = orig;
    ASSERT_TRUE(mutate("ecn-ce", f));
    Packet p;
    ASSERT_EQ(parse_frame(f, p), ParseError::ok);  // checksum and ICRC verified
    EXPECT_TRUE(p.icrc_ok);
    if (v.ip_version == 4) {
      EXPECT_EQ(p.ip4.tos, 0x63);  // make_spec's DSCP, ECN 11
    } else {
      EXPECT_EQ(p.ip6.traffic_class, 0x63);
      EXPECT_EQ(p.ip6.flow_label, 0xabcdeu);
    }
    EXPECT_TRUE(std::equal(orig.end() - 4, orig.end(), f.end() - 4));  // the ICRC masks ECN
  }
}

TEST(WireFaultMutate, Truncate) {
  for (const Variant& v : kVariants) {
    SCOPED_TRACE(v.name);
    const Bytes orig = frame(op::kRc | op::send_only, 16, v);
    Bytes f = orig;
    ASSERT_TRUE(mutate("truncate 4", f));
    ASSERT_EQ(f.size(), orig.size() - 4);
    Packet p;
    ASSERT_EQ(parse_frame(f, p), ParseError::ok);
    EXPECT_TRUE(p.icrc_ok);
    EXPECT_EQ(p.payload_len, 12u);
    const Bytes want = payload_of(12);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), p.payload.begin()));
    EXPECT_EQ(p.udp.length, kUdpLen + kBthLen + 12 + kIcrcLen);
    // More than there is: everything after the BTH goes.
    f = orig;
    ASSERT_TRUE(mutate("truncate 1000", f));
    ASSERT_EQ(parse_frame(f, p), ParseError::ok);
    EXPECT_EQ(p.payload_len, 0u);
    Bytes again = f;
    EXPECT_FALSE(mutate("truncate 1", again));  // nothing left to cut
    EXPECT_EQ(again, f);
  }
  // A fixed-layout opcode cut short: valid lengths and ICRC, a length error for the receiver.
  Bytes f = frame(op::kRc | op::acknowledge, 0);
  ASSERT_TRUE(mutate("truncate 2", f));
  EXPECT_EQ(parse(f, ParseOptions{.verify_icrc = false}), ParseError::bad_length);
  EXPECT_EQ(load_le32(f.data() + f.size() - 4), ref_icrc(f.data() + kL3, f.size() - kL3 - 4, 4, 20));
  EXPECT_EQ(ref_ipv4_checksum(f.data() + kL3, 20), get_be16(f, kL3 + 10));
}

TEST(WireFaultMutate, FramesAroundTheFrame) {
  // Ethernet padding after the ICRC is dropped; the frame itself mutates as without it.
  Bytes padded = frame(op::kRc | op::acknowledge, 0);
  const size_t real = padded.size();
  padded.resize(real + 6, 0);
  ASSERT_TRUE(mutate("corrupt aeth.msn=5", padded));
  EXPECT_EQ(padded.size(), real);
  Packet p;
  ASSERT_EQ(parse_frame(padded, p), ParseError::ok);
  EXPECT_EQ(p.aeth.msn, 5u);

  // A non-zero UDP checksum is zeroed: the payload it covered changed.
  FrameSpec s = make_spec(op::kRc | op::send_only, kVariants[1]);
  s.udp_checksum = true;
  Bytes f = build(s, payload_of(16));
  ASSERT_NE(get_be16(f, 14 + 40 + 6), 0);
  ASSERT_TRUE(mutate("corrupt payload", f));
  EXPECT_EQ(get_be16(f, 14 + 40 + 6), 0);
  ASSERT_EQ(parse_frame(f, p), ParseError::ok);

  // Nothing to do: scheduling actions, a frame without the field, bytes that are no RoCEv2 frame.
  const Bytes ack = frame(op::kRc | op::acknowledge, 0);
  for (const char* text : {"drop", "delay 1ms", "corrupt reth.rkey", "corrupt payload"}) {
    Bytes g = ack;
    EXPECT_FALSE(mutate(text, g)) << text;
    EXPECT_EQ(g, ack) << text;
  }
  Bytes junk(60, 0x45);
  EXPECT_FALSE(mutate("corrupt icrc", junk));
  EXPECT_EQ(junk, Bytes(60, 0x45));
  size_t too_long = 100;
  Bytes small = frame(op::kRc | op::send_only);
  EXPECT_FALSE(apply_fault_mutation(rule("ecn-ce"), std::span(small).first(50), too_long));
}

TEST(WireFaultMutate, MatchingKnowsWhatCanBeMutated) {
  // A corrupt rule matches only frames with its field, so "first 1" spends its hit where it applies.
  FaultMatcher m(rule("first 1 corrupt reth.rkey"));
  const Bytes ack = frame(op::kRc | op::acknowledge, 0), read = frame(op::kRc | op::read_request, 0);
  Packet p;
  ASSERT_EQ(parse_frame(ack, p), ParseError::ok);
  EXPECT_FALSE(m.match(FaultDir::tx, p, 0));
  ASSERT_EQ(parse_frame(read, p), ParseError::ok);
  EXPECT_TRUE(m.match(FaultDir::tx, p, 0));
  FaultMatcher pl(rule("corrupt payload"));
  const Bytes empty = frame(op::kRc | op::send_only, 0);
  ASSERT_EQ(parse_frame(empty, p), ParseError::ok);
  EXPECT_FALSE(pl.match(FaultDir::tx, p, 0));
  FaultMatcher tr(rule("truncate 4"));
  EXPECT_FALSE(tr.match(FaultDir::tx, p, 0));  // nothing after the BTH
  ASSERT_EQ(parse_frame(ack, p), ParseError::ok);
  EXPECT_TRUE(tr.match(FaultDir::tx, p, 0));
}

}  // namespace
