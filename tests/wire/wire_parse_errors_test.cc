// Unit tests of wire/: Every ParseError path of parse_frame.
#include <gtest/gtest.h>

#include "tests/wire/wire_test_util.h"

using namespace urxe::wire;
using namespace wire_test;

// ================================ Every ParseError ================================

TEST(ParseErrors, Truncated) {
  const Bytes g4 = good_v4(), g6 = good_v6();
  ASSERT_EQ(parse(g4), ParseError::ok);
  ASSERT_EQ(parse(g6), ParseError::ok);
  EXPECT_EQ(parse(Bytes{}), ParseError::truncated);
  EXPECT_EQ(parse(slice(g4, 0, 13)), ParseError::truncated);  // not even an Ethernet header
  {
    Bytes f = build(make_spec(op::kRc | op::send_only, kVariants[2]), payload_of(16));
    EXPECT_EQ(parse(slice(f, 0, 17)), ParseError::truncated);  // VLAN tag cut
  }
  EXPECT_EQ(parse(slice(g4, 0, kL3 + 19)), ParseError::truncated);  // IPv4 header cut
  {
    Bytes f = slice(g4, 0, kL3 + 24);  // IHL says 60 bytes of header, 24 present
    f[kL3] = 0x4f;
    EXPECT_EQ(parse(f), ParseError::truncated);
  }
  {
    Bytes f = g4;  // IPv4 total length beyond the frame
    adjust_lengths_v4(f, 4);
    refresh_v4(f);
    EXPECT_EQ(parse(f), ParseError::truncated);
  }
  EXPECT_EQ(parse(slice(g6, 0, kL3 + 39)), ParseError::truncated);  // IPv6 header cut
  {
    Bytes f = g6;  // IPv6 payload length beyond the frame
    set_be16(f, kL3 + 4, static_cast<uint16_t>(get_be16(f, kL3 + 4) + 1));
    EXPECT_EQ(parse(f), ParseError::truncated);
  }
  EXPECT_EQ(parse(slice(g4, 0, g4.size() - 1)), ParseError::truncated);  // last ICRC byte missing
}

TEST(ParseErrors, NotRoce) {
  const Bytes g4 = good_v4(), g6 = good_v6();
  {
    Bytes f = g4;  // ARP
    set_be16(f, 12, 0x0806);
    EXPECT_EQ(parse(f), ParseError::not_roce);
  }
  {
    Bytes f = g4;  // TCP
    f[kL3 + 9] = 6;
    refresh_v4(f);
    EXPECT_EQ(parse(f), ParseError::not_roce);
  }
  for (uint16_t frag : {uint16_t{kIpv4FlagMf}, uint16_t{0x0001}, uint16_t{kIpv4FlagDf | 0x1fff}}) {
    Bytes f = g4;  // IP fragments (more-fragments flag or an offset) are not reassembled
    set_be16(f, kL3 + 6, frag);
    refresh_v4(f);
    EXPECT_EQ(parse(f), ParseError::not_roce) << frag;
  }
  {
    Bytes f = g4;  // another UDP port
    set_be16(f, kUdp + 2, 4790);
    EXPECT_EQ(parse(f), ParseError::not_roce);
  }
  {
    Bytes f = g6;  // IPv6 next header TCP
    f[kL3 + 6] = 6;
    EXPECT_EQ(parse(f), ParseError::not_roce);
  }
  {
    Bytes f = g6;  // IPv6 extension headers are not followed
    f[kL3 + 6] = 0;
    EXPECT_EQ(parse(f), ParseError::not_roce);
  }
  {
    Bytes f = g6;  // IPv6 to another UDP port
    set_be16(f, kL3 + 40 + 2, 1234);
    EXPECT_EQ(parse(f), ParseError::not_roce);
  }
}

TEST(ParseErrors, BadVersion) {
  {
    Bytes f = good_v4();  // IPv4 ethertype, version 6
    f[kL3] = 0x65;
    EXPECT_EQ(parse(f), ParseError::bad_version);
  }
  {
    Bytes f = good_v6();  // IPv6 ethertype, version 4
    f[kL3] = static_cast<uint8_t>((f[kL3] & 0x0f) | 0x40);
    EXPECT_EQ(parse(f), ParseError::bad_version);
  }
  for (uint8_t tver = 1; tver < 16; ++tver) {
    Bytes f = good_v4();  // BTH TVer other than 0
    f[kBth + 1] = static_cast<uint8_t>((f[kBth + 1] & 0xf0) | tver);
    refresh_v4(f);
    EXPECT_EQ(parse(f), ParseError::bad_version) << int(tver);
  }
}

TEST(ParseErrors, BadLength) {
  const Bytes g4 = good_v4();
  for (uint8_t ihl = 0; ihl < 5; ++ihl) {
    Bytes f = g4;  // IHL below 5
    f[kL3] = static_cast<uint8_t>(0x40 | ihl);
    EXPECT_EQ(parse(f), ParseError::bad_length) << int(ihl);
  }
  {
    Bytes f = g4;  // total length shorter than the IP header
    set_be16(f, kL3 + 2, 19);
    refresh_v4(f);
    EXPECT_EQ(parse(f), ParseError::bad_length);
  }
  {
    Bytes f = g4;  // no room for the UDP header
    set_be16(f, kL3 + 2, 20 + 7);
    refresh_v4(f);
    EXPECT_EQ(parse(f), ParseError::bad_length);
  }
  for (int d : {-4, -1, 1, 4}) {
    Bytes f = g4;  // UDP length disagrees with IP
    set_be16(f, kUdp + 4, static_cast<uint16_t>(get_be16(f, kUdp + 4) + d));
    EXPECT_EQ(parse(f), ParseError::bad_length) << d;
  }
  {
    Bytes f = good_v6();  // IPv6 payload too short for UDP
    set_be16(f, kL3 + 4, 7);
    EXPECT_EQ(parse(f), ParseError::bad_length);
  }
  {
    Bytes f = g4;  // UDP datagram too short for BTH + ICRC (the rest is Ethernet padding)
    adjust_lengths_v4(f, -static_cast<int>(f.size() - kBth) + 15);
    refresh_v4(f);
    EXPECT_EQ(parse(f), ParseError::bad_length);
  }
  {
    // Extension headers do not fit: a READ request (RETH) cut 8 bytes short.
    Bytes f = build(make_spec(op::kRc | op::read_request), {});
    adjust_lengths_v4(f, -8);
    refresh_v4(f);
    EXPECT_EQ(parse(f), ParseError::bad_length);
  }
  for (uint8_t op :
       {uint8_t{op::kRc | op::acknowledge}, uint8_t{op::kRc | op::compare_swap}, uint8_t{op::cnp}}) {
    // Bytes after the fixed headers of an opcode that carries no payload.
    Bytes f = build(make_spec(op), {});
    f.insert(f.end() - 4, 4, 0);
    adjust_lengths_v4(f, 4);
    refresh_v4(f);
    EXPECT_EQ(parse(f), ParseError::bad_length) << int(op);
  }
}

TEST(ParseErrors, BadChecksum) {
  {
    Bytes f = good_v4();
    set_be16(f, kL3 + 10, static_cast<uint16_t>(get_be16(f, kL3 + 10) ^ 0x0100));
    EXPECT_EQ(parse(f), ParseError::bad_checksum);
    EXPECT_EQ(parse(f, ParseOptions{.verify_icrc = true, .verify_checksums = false}), ParseError::ok);
  }
  {
    Bytes f = good_v4();  // header changed (TTL), checksum stale; TTL is ICRC-variant so only this catches it
    f[kL3 + 8] = 1;
    EXPECT_EQ(parse(f), ParseError::bad_checksum);
  }
  {
    // A frame whose header words sum to -0, its checksum field 0xffff rather than 0x0000 (what netem's CE
    // mark leaves after an incremental update): valid, both in the header and, with the ICRC redone over
    // the new ID, as a whole.
    Bytes f = good_v4();
    for (uint32_t id = 0; id <= 0xffff; ++id) {
      set_be16(f, kL3 + 4, static_cast<uint16_t>(id));
      refresh_v4(f);
      if (get_be16(f, kL3 + 10) == 0) break;
    }
    ASSERT_EQ(get_be16(f, kL3 + 10), 0);
    EXPECT_EQ(parse(f), ParseError::ok);
    set_be16(f, kL3 + 10, 0xffff);
    EXPECT_EQ(parse(f), ParseError::ok);
    set_be16(f, kL3 + 10, 0xfffe);
    EXPECT_EQ(parse(f), ParseError::bad_checksum);
  }
  // UDP checksums over IPv4 and IPv6: Frame.UdpChecksumIsWrittenAndVerified.
}

TEST(ParseErrors, UnknownOpcode) {
  const std::vector<uint8_t> valid = valid_opcodes();
  int unknown = 0;
  for (int op = 0; op < 256; ++op) {
    if (std::find(valid.begin(), valid.end(), op) != valid.end()) continue;
    Bytes f = good_v4();
    f[kBth] = static_cast<uint8_t>(op);
    refresh_v4(f);
    Packet p;
    EXPECT_EQ(parse(f, p), ParseError::unknown_opcode) << op;
    EXPECT_EQ(p.bth.opcode, op);  // the BTH is still reported
    EXPECT_EQ(p.info, nullptr);
    ++unknown;
  }
  // incl. FLUSH (0x1c, Annex A19) and RESYNC (0x15, 0xb5): not implemented, unknown
  EXPECT_EQ(unknown, 256 - 39 - 23);
}

TEST(ParseErrors, BadPad) {
  {
    Bytes f = build(make_spec(op::kRc | op::send_only), {});  // pad count 1 with no payload
    f[kBth + 1] |= 0x10;
    refresh_v4(f);
    EXPECT_EQ(parse(f), ParseError::bad_pad);
  }
  {
    Bytes f = build(make_spec(op::kRc | op::send_only), {});
    f.insert(f.end() - 4, 2, 0);  // 2 bytes of payload+pad, not a multiple of 4
    adjust_lengths_v4(f, 2);
    refresh_v4(f);
    EXPECT_EQ(parse(f), ParseError::bad_pad);
  }
  for (int extra : {1, 2, 3, 5}) {
    Bytes f = good_v4();  // payload + pad not a multiple of 4
    f.insert(f.end() - 4, static_cast<size_t>(extra), 0);
    adjust_lengths_v4(f, extra);
    refresh_v4(f);
    EXPECT_EQ(parse(f), ParseError::bad_pad) << extra;
  }
  for (uint8_t op : {uint8_t{op::kRc | op::acknowledge}, uint8_t{op::kRc | op::read_request},
                     uint8_t{op::kRc | op::fetch_add}, uint8_t{op::cnp}}) {
    Bytes f = build(make_spec(op), {});  // a pad count on an opcode without payload
    f[kBth + 1] |= 0x20;
    refresh_v4(f);
    EXPECT_EQ(parse(f), ParseError::bad_pad) << int(op);
  }
}

TEST(ParseErrors, BadIcrcStillReportsTheFields) {
  for (const Variant& v : kVariants) {
    SCOPED_TRACE(v.name);
    const Bytes good = build(make_spec(op::kRc | op::write_first, v), payload_of(64));
    Packet ok;
    ASSERT_EQ(parse(good, ok), ParseError::ok);
    for (size_t off :
         {size_t{ok.payload_offset}, size_t{ok.bth_offset + 10}, good.size() - 4, good.size() - 1}) {
      Bytes f = good;
      f[off] ^= 0x01;
      Packet p;
      ASSERT_EQ(parse(f, p), ParseError::bad_icrc) << off;
      EXPECT_TRUE(p.icrc_checked);
      EXPECT_FALSE(p.icrc_ok);
      EXPECT_EQ(p.icrc, load_le32(&f[f.size() - 4]));
      EXPECT_EQ(p.icrc_expected, ref_icrc(&f[ok.l3_offset], f.size() - ok.l3_offset - 4, v.ip_version,
                                          ok.l4_offset - ok.l3_offset));
      EXPECT_EQ(p.reth.rkey, kValReth.rkey);  // a decoder can still show the packet
      EXPECT_EQ(p.payload_len, 64u);
      // Without ICRC verification the same frame is accepted.
      Packet q;
      EXPECT_EQ(parse(f, q, ParseOptions{.verify_icrc = false}), ParseError::ok);
      EXPECT_FALSE(q.icrc_checked);
      EXPECT_EQ(q.icrc, 0u);  // not read
    }
  }
}

TEST(ParseErrors, NamesAreDistinct) {
  std::set<std::string_view> names;
  for (ParseError e : {ParseError::ok, ParseError::truncated, ParseError::not_roce, ParseError::bad_version,
                       ParseError::bad_length, ParseError::bad_checksum, ParseError::unknown_opcode,
                       ParseError::bad_pad, ParseError::bad_icrc}) {
    EXPECT_FALSE(to_string(e).empty());
    names.insert(to_string(e));
  }
  EXPECT_EQ(names.size(), 9u);
}
