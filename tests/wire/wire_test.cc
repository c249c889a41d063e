#include <gtest/gtest.h>

#include <vector>

#include "wire/packet.h"
#include "wire/psn.h"

using namespace urxe::wire;

TEST(Psn, WrapAndCompare) {
  EXPECT_EQ(psn_add(0xffffff, 1), 0u);
  EXPECT_EQ(psn_sub(0, 1), 0xffffffu);
  EXPECT_TRUE(psn_lt(0xfffffe, 1));
  EXPECT_EQ(psn_diff(2, 0xffffff), 3);
  EXPECT_EQ(psn_diff(0xffffff, 2), -3);
}

TEST(Frame, BuildParseRoundTrip) {
  FrameSpec s;
  s.bth.opcode = op::kRc | op::write_only_imm;
  s.bth.dqpn = 0x123456;
  s.bth.psn = 0xabcdef;
  s.bth.ack_req = true;
  s.reth = {0x1122334455667788ull, 0xdeadbeef, 5};
  s.imm = 0x01020304;
  s.src_ip = gid_from_ipv4({10, 0, 0, 1});
  s.dst_ip = gid_from_ipv4({10, 0, 0, 2});
  std::vector<uint8_t> buf(2048), payload = {1, 2, 3, 4, 5};
  uint32_t n = build_frame(buf, s, payload);
  ASSERT_GT(n, 0u);
  Packet p;
  ASSERT_EQ(parse_frame(ByteSpan(buf.data(), n), p), ParseError::ok);
  EXPECT_EQ(p.bth.pad, 3);
  EXPECT_EQ(p.payload_len, 5u);
  EXPECT_EQ(p.reth.rkey, 0xdeadbeefu);
  EXPECT_EQ(p.imm, 0x01020304u);
  EXPECT_TRUE(p.icrc_ok);
  buf[n - 10] ^= 1;
  EXPECT_EQ(parse_frame(ByteSpan(buf.data(), n), p), ParseError::bad_icrc);
}
