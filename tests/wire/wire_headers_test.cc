// Unit tests of wire/: Header encodings (BTH and the extension headers at their IBTA offsets, GIDs), PSN
// arithmetic modulo 2^24, AETH syndromes and the RNR timer table (IBTA Table 45).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tests/wire/wire_test_util.h"

using namespace urxe::wire;
using namespace wire_test;

// ================================ Header encodings ================================

TEST(Headers, BthEveryFieldAtItsBitPosition) {
  Bth h;
  h.opcode = 0x0a;
  h.se = true;
  h.migreq = true;
  h.pad = 2;
  h.tver = 0;
  h.pkey = 0x8001;
  h.fecn = true;
  h.becn = false;
  h.resv6 = 0x15;
  h.dqpn = 0xabcdef;
  h.ack_req = true;
  h.resv7 = 0x55;
  h.psn = 0x123456;
  uint8_t b[12];
  write_bth(b, h);
  const uint8_t want[12] = {0x0a, 0xe0, 0x80, 0x01, 0x95, 0xab, 0xcd, 0xef, 0xd5, 0x12, 0x34, 0x56};
  EXPECT_EQ(0, std::memcmp(b, want, 12));
  const Bth r = parse_bth(b);
  EXPECT_EQ(r.opcode, 0x0a);
  EXPECT_TRUE(r.se);
  EXPECT_TRUE(r.migreq);
  EXPECT_EQ(r.pad, 2);
  EXPECT_EQ(r.pkey, 0x8001);
  EXPECT_TRUE(r.fecn);
  EXPECT_FALSE(r.becn);
  EXPECT_EQ(r.resv6, 0x15);
  EXPECT_EQ(r.dqpn, 0xabcdefu);
  EXPECT_EQ(bth_dqpn(b), 0xabcdefu);  // (the ports' shortcut: the QPN alone, the bits around it set)
  EXPECT_TRUE(r.ack_req);
  EXPECT_EQ(r.resv7, 0x55);
  EXPECT_EQ(r.psn, 0x123456u);
  // TVer and BECN on their own.
  Bth t;
  t.tver = 0xf;
  t.becn = true;
  write_bth(b, t);
  EXPECT_EQ(b[1], 0x0f);
  EXPECT_EQ(b[4], 0x40);
}

TEST(Headers, ExtensionHeadersAreBigEndianAtIbtaOffsets) {
  uint8_t b[28];
  write_reth(b, kValReth);
  EXPECT_EQ(Bytes(b, b + 16), (Bytes{1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44, 0, 0, 0x10, 0}));
  EXPECT_EQ(parse_reth(b).va, kValReth.va);
  EXPECT_EQ(parse_reth(b).rkey, kValReth.rkey);
  EXPECT_EQ(parse_reth(b).dma_len, kValReth.dma_len);

  write_aeth(b, kValAeth);
  EXPECT_EQ(Bytes(b, b + 4), (Bytes{0x1f, 0xab, 0xcd, 0xef}));
  EXPECT_EQ(parse_aeth(b).syndrome, 0x1f);
  EXPECT_EQ(parse_aeth(b).msn, 0xabcdefu);

  write_atomic_eth(b, kValAtomicEth);
  Bytes want = be(kValAtomicEth.va, 8);
  for (auto& part : {be(kValAtomicEth.rkey, 4), be(kValAtomicEth.swap_add, 8), be(kValAtomicEth.compare, 8)})
    want.insert(want.end(), part.begin(), part.end());
  EXPECT_EQ(Bytes(b, b + 28), want);
  const AtomicEth a = parse_atomic_eth(b);
  EXPECT_EQ(a.va, kValAtomicEth.va);
  EXPECT_EQ(a.rkey, kValAtomicEth.rkey);
  EXPECT_EQ(a.swap_add, kValAtomicEth.swap_add);
  EXPECT_EQ(a.compare, kValAtomicEth.compare);

  write_atomic_ack_eth(b, kValAtomicAckEth);
  EXPECT_EQ(Bytes(b, b + 8), be(kValAtomicAckEth.orig_data, 8));
  EXPECT_EQ(parse_atomic_ack_eth(b).orig_data, kValAtomicAckEth.orig_data);

  std::memset(b, 0xee, sizeof b);
  write_deth(b, kValDeth);
  EXPECT_EQ(Bytes(b, b + 8), (Bytes{0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x01, 0x23}));  // byte 4 reserved
  b[4] = 0x77;  // a reserved byte does not leak into the source QP
  EXPECT_EQ(parse_deth(b).qkey, kValDeth.qkey);
  EXPECT_EQ(parse_deth(b).src_qp, kValDeth.src_qp);
}

// The IPv4 header checksum (RFC 791: one's complement of the one's-complement sum of the header's 16-bit
// words, the checksum field read as 0): a published example, and 16-bit-word sums (the definition) over
// random headers with and without options, whatever the checksum field holds.
TEST(Headers, Ipv4ChecksumIsTheOnesComplementSum) {
  const uint8_t example[20] = {0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
                               0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7};
  EXPECT_EQ(ipv4_header_checksum(example, 20), 0xb861);
  std::mt19937 rng(7);
  for (int n = 0; n < 2000; n++) {
    const uint32_t len = 20 + 4 * (static_cast<uint32_t>(n) % 11);  // IHL 5..15
    std::vector<uint8_t> h(len);
    for (auto& b : h) b = static_cast<uint8_t>(rng());
    if (n % 5 == 0) std::fill(h.begin(), h.end(), 0xff);  // sums that carry the most
    uint32_t sum = 0;
    for (uint32_t i = 0; i < len; i += 2)
      if (i != 10) sum += static_cast<uint32_t>(h[i] << 8 | h[i + 1]);
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    ASSERT_EQ(ipv4_header_checksum(h.data(), len), static_cast<uint16_t>(~sum)) << "len " << len;
  }
}

// One's-complement arithmetic has two zeros: where the header's other words sum to 0xffff the checksum
// field may hold 0x0000 (what the computation gives) or 0xffff (what an incremental update such as a
// router's or netem's ECN CE mark leaves); both verify, as in Wireshark. Any other value does not.
TEST(Headers, Ipv4ChecksumAcceptsBothZeros) {
  uint8_t h[20] = {0x45, 0x02, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
                   0x00, 0x00, 0x0a, 0x00, 0x00, 0x01, 0x0a, 0x00, 0x00, 0x02};
  // The ID word that makes the other words sum to -0: exactly one value of 16 bits does.
  int found = 0;
  for (uint32_t id = 0; id <= 0xffff; ++id) {
    h[4] = static_cast<uint8_t>(id >> 8);
    h[5] = static_cast<uint8_t>(id);
    if (ipv4_header_checksum(h, 20) == 0) {
      found++;
      break;
    }
  }
  ASSERT_EQ(found, 1);
  for (uint16_t stored : {uint16_t{0x0000}, uint16_t{0xffff}}) {
    h[10] = static_cast<uint8_t>(stored >> 8);
    h[11] = static_cast<uint8_t>(stored);
    EXPECT_TRUE(ipv4_header_checksum_ok(h, 20)) << stored;
  }
  for (uint16_t stored : {uint16_t{0x0001}, uint16_t{0xfffe}, uint16_t{0x8000}}) {
    h[10] = static_cast<uint8_t>(stored >> 8);
    h[11] = static_cast<uint8_t>(stored);
    EXPECT_FALSE(ipv4_header_checksum_ok(h, 20)) << stored;
  }
  // Elsewhere only the one value verifies, 0xffff among the wrong ones.
  h[5] ^= 1;
  const uint16_t right = ipv4_header_checksum(h, 20);
  ASSERT_NE(right, 0);
  for (uint16_t stored : {right, uint16_t{0xffff}, uint16_t{0}, static_cast<uint16_t>(right ^ 1)}) {
    h[10] = static_cast<uint8_t>(stored >> 8);
    h[11] = static_cast<uint8_t>(stored);
    EXPECT_EQ(ipv4_header_checksum_ok(h, 20), stored == right) << stored;
  }
}

TEST(Headers, GidHelpers) {
  const Gid g = gid_from_ipv4({192, 168, 0, 7});
  EXPECT_EQ(g, (Gid{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 0, 7}));
  EXPECT_TRUE(gid_is_ipv4_mapped(g));
  Gid link_local{0xfe, 0x80};
  EXPECT_FALSE(gid_is_ipv4_mapped(link_local));
  Gid almost = g;
  almost[3] = 1;
  EXPECT_FALSE(gid_is_ipv4_mapped(almost));
}

// ================================ PSN arithmetic ================================

TEST(Psn, AddAndSubWrapModulo2To24) {
  EXPECT_EQ(kPsnMask, 0xffffffu);
  EXPECT_EQ(psn_add(0xffffff, 1), 0u);
  EXPECT_EQ(psn_add(0xfffffe, 5), 3u);
  EXPECT_EQ(psn_add(5, 0x1000000), 5u);
  EXPECT_EQ(psn_add(0, 0xffffff), 0xffffffu);
  EXPECT_EQ(psn_sub(0, 1), 0xffffffu);
  EXPECT_EQ(psn_sub(3, 5), 0xfffffeu);
  EXPECT_EQ(psn_sub(0x123456, 0x123456), 0u);
  for (uint32_t a : {0u, 1u, 0x7fffffu, 0x800000u, 0xfffffeu, 0xffffffu})
    for (uint32_t n : {0u, 1u, 2u, 1000u, 0x7fffffu, 0xffffffu}) EXPECT_EQ(psn_sub(psn_add(a, n), n), a);
}

TEST(Psn, DiffAndOrderAcrossTheWrap) {
  EXPECT_EQ(psn_diff(2, 0xffffff), 3);
  EXPECT_EQ(psn_diff(0xffffff, 2), -3);
  EXPECT_EQ(psn_diff(0, 0xffffff), 1);
  EXPECT_EQ(psn_diff(7, 7), 0);
  EXPECT_TRUE(psn_lt(0xfffffe, 1));
  EXPECT_TRUE(psn_gt(1, 0xfffffe));
  EXPECT_TRUE(psn_le(5, 5));
  EXPECT_TRUE(psn_ge(5, 5));
  EXPECT_FALSE(psn_lt(5, 5));
  EXPECT_FALSE(psn_gt(5, 5));
  // Inside the half window the distance is exact and antisymmetric, whichever side of the wrap.
  for (uint32_t b : {0u, 1u, 0x400000u, 0x7fffffu, 0x800000u, 0xfffff0u, 0xffffffu}) {
    for (int32_t d : {1, 2, 100, 0x3fffff, 0x7ffffe, 0x7fffff}) {
      const uint32_t a = psn_add(b, static_cast<uint32_t>(d));
      EXPECT_EQ(psn_diff(a, b), d) << b << "+" << d;
      EXPECT_EQ(psn_diff(b, a), -d) << b << "+" << d;
      EXPECT_TRUE(psn_gt(a, b));
      EXPECT_TRUE(psn_lt(b, a));
      EXPECT_FALSE(psn_lt(a, b));
      EXPECT_TRUE(psn_ge(a, b));
      EXPECT_TRUE(psn_le(b, a));
    }
  }
  // Exactly half the space apart is ambiguous; psn_diff resolves it to -2^23 both ways.
  EXPECT_EQ(psn_diff(0x800000, 0), -0x800000);
  EXPECT_EQ(psn_diff(0, 0x800000), -0x800000);
}

// ================================ AETH, RNR timer ================================

TEST(Aeth, SyndromeEncodingAndHelpers) {
  // IBTA 9.7.5.1 / Table 44: bit 7 reserved, bits 6:5 type, bits 4:0 value.
  EXPECT_EQ(make_syndrome(AethType::ack, kCreditInvalid), 0x1f);
  EXPECT_EQ(make_syndrome(AethType::ack, 0), 0x00);
  EXPECT_EQ(make_syndrome(AethType::rnr_nak, 14), 0x2e);
  EXPECT_EQ(make_syndrome(AethType::nak, static_cast<uint8_t>(NakCode::psn_seq_error)), 0x60);
  EXPECT_EQ(make_syndrome(AethType::nak, static_cast<uint8_t>(NakCode::invalid_request)), 0x61);
  EXPECT_EQ(make_syndrome(AethType::nak, static_cast<uint8_t>(NakCode::remote_access_error)), 0x62);
  EXPECT_EQ(make_syndrome(AethType::nak, static_cast<uint8_t>(NakCode::remote_operational_error)), 0x63);
  EXPECT_EQ(make_syndrome(AethType::nak, static_cast<uint8_t>(NakCode::invalid_rd_request)), 0x64);
  EXPECT_EQ(make_syndrome(AethType::ack, 0x3f), 0x1f);  // value is 5 bits

  for (int s = 0; s < 256; ++s) {
    Aeth a{static_cast<uint8_t>(s), 0};
    EXPECT_EQ(static_cast<int>(a.type()), (s >> 5) & 3);
    EXPECT_EQ(a.value(), s & 0x1f);
    if (!(s & 0x80)) {
      EXPECT_EQ(make_syndrome(a.type(), a.value()), s);
    }
  }
  EXPECT_EQ((Aeth{0x60, 0}.type()), AethType::nak);
  EXPECT_EQ((Aeth{0x2e, 0}.type()), AethType::rnr_nak);
  EXPECT_EQ((Aeth{0x1f, 0}.type()), AethType::ack);

  EXPECT_EQ(nak_code_name(0), "PSN_SEQUENCE_ERROR");
  EXPECT_EQ(nak_code_name(1), "INVALID_REQUEST");
  EXPECT_EQ(nak_code_name(2), "REMOTE_ACCESS_ERROR");
  EXPECT_EQ(nak_code_name(3), "REMOTE_OPERATIONAL_ERROR");
  EXPECT_EQ(nak_code_name(4), "INVALID_RD_REQUEST");
  for (uint8_t c = 5; c < 32; ++c) EXPECT_EQ(nak_code_name(c), "RESERVED");
}

TEST(Aeth, RnrTimerIsIbtaTable45) {
  // IBTA Table 45 "Encoding for RNR NAK Timer Field", in milliseconds as printed there.
  const double table45_ms[32] = {655.36, 0.01,  0.02,  0.03,   0.04,   0.06,   0.08,   0.12,
                                 0.16,   0.24,  0.32,  0.48,   0.64,   0.96,   1.28,   1.92,
                                 2.56,   3.84,  5.12,  7.68,   10.24,  15.36,  20.48,  30.72,
                                 40.96,  61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52};
  for (uint8_t code = 0; code < 32; ++code) {
    const uint64_t want_ns = static_cast<uint64_t>(table45_ms[code] * 1e6 + 0.5);
    EXPECT_EQ(rnr_timer_ns(code), want_ns) << "code " << int(code);
  }
  // Monotonic from code 1 up; code 0 is the longest.
  for (uint8_t code = 2; code < 32; ++code) EXPECT_GT(rnr_timer_ns(code), rnr_timer_ns(code - 1));
  EXPECT_GT(rnr_timer_ns(0), rnr_timer_ns(31));
}
