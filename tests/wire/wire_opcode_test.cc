// Unit tests of wire/: The opcode table against IBTA Table 35.
#include <gtest/gtest.h>

#include "tests/wire/wire_test_util.h"

using namespace urxe::wire;
using namespace wire_test;

// ================================ Opcode table ================================

TEST(OpcodeTable, EveryOpcodeMatchesIbtaTable35) {
  const auto expected = expected_opcodes();
  // RC, UC, UD, XRC (Annex A14: RC's 23 again), CNP, Annex A19's ATOMIC WRITE
  EXPECT_EQ(expected.size(), 23u + 12u + 2u + 23u + 1u + 1u);
  std::set<int> seen;
  for (const auto& [op, e] : expected) {
    SCOPED_TRACE(e.name);
    seen.insert(op);
    const OpcodeInfo& i = opcode_info(op);
    ASSERT_TRUE(i.valid());
    EXPECT_EQ(i.name, e.name);
    EXPECT_EQ(i.transport, e.transport);
    EXPECT_EQ(i.kind, e.row.kind);
    EXPECT_EQ(i.position, e.row.pos);
    EXPECT_EQ(i.headers, e.row.headers);
    EXPECT_EQ(i.has_payload, e.row.payload);
    if (e.transport == Transport::cnp) {
      EXPECT_EQ(i.ext_len, kCnpPayloadLen);  // 16 reserved bytes, no payload after them
      EXPECT_FALSE(i.is_request);
      EXPECT_FALSE(i.is_response);
    } else {
      EXPECT_EQ(i.ext_len, header_len(e.row.headers));
      EXPECT_EQ(i.is_request, e.row.request);
      EXPECT_EQ(i.is_response, !e.row.request);
    }
    EXPECT_EQ(i.with_imm, (e.row.headers & kImmDt) != 0);
    EXPECT_EQ(i.with_inv, (e.row.headers & kIeth) != 0);
    EXPECT_EQ(i.is_first(), e.row.pos == Position::first || e.row.pos == Position::only);
    EXPECT_EQ(i.is_last(), e.row.pos == Position::last || e.row.pos == Position::only);
    // Responses are RC's or XRC's: UC and UD have no responder packets.
    if (i.is_response) {
      EXPECT_TRUE(i.transport == Transport::rc || i.transport == Transport::xrc);
    }
  }
  for (int op = 0; op < 256; ++op) {
    if (seen.count(op)) continue;
    SCOPED_TRACE(op);
    EXPECT_FALSE(opcode_info(static_cast<uint8_t>(op)).valid());
    EXPECT_EQ(opcode_info(static_cast<uint8_t>(op)).transport, Transport::none);
  }
  EXPECT_EQ(make_opcode(op::kUc, op::send_only), 0x24);
  EXPECT_EQ(make_opcode(op::kUd, op::send_only_imm), 0x65);
  EXPECT_EQ(make_opcode(op::kXrc, op::fetch_add), 0xb4);
}

// Annex A14: an XRC opcode is its RC twin plus 0xa0; every request carries the 4-byte XRCETH right after the
// BTH (before RETH/AtomicETH/ImmDt/IETH), no response does. RESYNC (0xb5), like RC's 0x15, and the Annex A19
// operations (FLUSH 0xbc, ATOMIC WRITE 0xbd) are not implemented: unknown opcodes.
TEST(OpcodeTable, XrcIsRcWithAnXrcethOnEveryRequest) {
  int xrc = 0;
  for (int low = 0; low < 0x20; ++low) {
    SCOPED_TRACE(low);
    const OpcodeInfo& r = opcode_info(static_cast<uint8_t>(op::kRc | low));
    const OpcodeInfo& x = opcode_info(static_cast<uint8_t>(op::kXrc | low));
    if (low >= 0x18) {
      EXPECT_FALSE(x.valid());
      continue;
    }
    ASSERT_EQ(x.valid(), r.valid());
    if (!x.valid()) continue;
    ++xrc;
    EXPECT_EQ(x.transport, Transport::xrc);
    EXPECT_EQ(x.name, "X" + std::string(r.name));
    EXPECT_EQ(x.kind, r.kind);
    EXPECT_EQ(x.position, r.position);
    EXPECT_EQ(x.has_payload, r.has_payload);
    EXPECT_EQ(x.is_request, r.is_request);
    EXPECT_EQ(x.headers, r.is_request ? (r.headers | kXrceth) : r.headers);
    EXPECT_EQ(x.ext_len, r.ext_len + (r.is_request ? kXrcethLen : 0u));
  }
  EXPECT_EQ(xrc, 23);
  EXPECT_FALSE(opcode_info(op::kXrc | 0x15).valid());
  EXPECT_FALSE(opcode_info(op::kXrc | op::flush).valid());
  EXPECT_FALSE(opcode_info(op::kXrc | op::atomic_write).valid());
}

// Annex A19: ATOMIC WRITE (0x1d) is an RC request of one packet with a RETH and payload; FLUSH (0x1c) is not
// implemented and stays an unknown opcode (dropped by the parser's caller as any other), as do both on UC.
TEST(OpcodeTable, AtomicWriteIsAnRcOnlyRequestAndFlushIsUnknown) {
  const OpcodeInfo& aw = opcode_info(op::kRc | op::atomic_write);
  EXPECT_EQ(aw.opcode, 0x1d);
  EXPECT_EQ(aw.kind, OpKind::atomic_write);
  EXPECT_EQ(aw.ext_len, kRethLen);
  EXPECT_TRUE(aw.is_first() && aw.is_last() && aw.is_request && aw.has_payload);
  EXPECT_FALSE(opcode_info(op::kRc | op::flush).valid());
  EXPECT_FALSE(opcode_info(op::kUc | op::atomic_write).valid());
  EXPECT_FALSE(opcode_info(op::kUc | op::flush).valid());
}
