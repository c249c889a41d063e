// Unit tests of wire/: CRC-32 backends and the ICRC (Annex A17.3.3): computed independently here and against
// real frames, variant fields masked, IPv4 options covered.
#include <gtest/gtest.h>

#include "tests/bench/crc_backends.h"  // the CRC-32 implementations compared with wire::crc32
#include "tests/wire/wire_test_util.h"

using namespace urxe::wire;
using namespace wire_test;
using urxe::bench::CrcImpl;

// ================================ CRC-32 and ICRC ================================

TEST(Crc, EveryBackendIsTheIeeeCrc32) {
  const char* check = "123456789";
  for (CrcImpl impl : {CrcImpl::isal, CrcImpl::zlib, CrcImpl::table}) {
    SCOPED_TRACE(crc_impl_name(impl));
    EXPECT_EQ(crc32_with(impl, 0, reinterpret_cast<const uint8_t*>(check), 9), 0xCBF43926u);
    EXPECT_EQ(crc32_with(impl, 0x12345678, nullptr, 0), 0x12345678u);
    Bytes data = payload_of(5000);
    // Every length 0..300 and a few big ones, at odd alignments, against the bitwise reference.
    for (size_t off : {0u, 1u, 3u}) {
      for (size_t n = 0; n <= 300; ++n)
        ASSERT_EQ(crc32_with(impl, 0, data.data() + off, n), ref_crc32(0, data.data() + off, n)) << n;
      for (size_t n : {1024u, 4093u, 4096u})
        ASSERT_EQ(crc32_with(impl, 0, data.data() + off, n), ref_crc32(0, data.data() + off, n)) << n;
    }
    // Running CRC: crc(crc(0, a), b) == crc(0, a ++ b), which the ICRC relies on (pseudo-header, then rest).
    for (size_t split : {0u, 1u, 7u, 64u, 999u, 1000u}) {
      const uint32_t a = crc32_with(impl, 0, data.data(), split);
      EXPECT_EQ(crc32_with(impl, a, data.data() + split, 1000 - split), ref_crc32(0, data.data(), 1000));
    }
  }
  EXPECT_EQ(crc32(0, reinterpret_cast<const uint8_t*>(check), 9), 0xCBF43926u);
  EXPECT_STREQ(crc_impl_name(CrcImpl::isal), "isal");
  EXPECT_STREQ(crc_impl_name(CrcImpl::zlib), "zlib");
  EXPECT_STREQ(crc_impl_name(CrcImpl::table), "table");
}

// The Scapy RoCE test vector (test/contrib/roce.uts "an example UC packet"): UC SEND_ONLY, MigReq, pad 2,
// UDP checksum 0xaca2, ICRC 0x78f353f3 as Scapy prints the stored bytes. Same bytes as
// pcap-fixtures/scapy-testvector-uc-send-only-pad2.pcap.
const Bytes kScapyUcSendOnly = {0x24, 0x8a, 0x07, 0xa8, 0xfa, 0x22, 0x24, 0x8a, 0x07, 0xa8, 0xfa, 0x22, 0x08,
                                0x00, 0x45, 0x01, 0x00, 0x40, 0x04, 0x78, 0x40, 0x00, 0x40, 0x11, 0xb4, 0xd5,
                                0xc0, 0xa8, 0x00, 0x07, 0xc0, 0xa8, 0x00, 0x07, 0xc0, 0x00, 0x12, 0xb7, 0x00,
                                0x2c, 0xac, 0xa2, 0x24, 0x60, 0xff, 0xff, 0x00, 0x00, 0x00, 0xd3, 0x00, 0xcf,
                                0x17, 0x10, 0x46, 0x30, 0x81, 0x8b, 0xe2, 0x89, 0x35, 0xd9, 0x0e, 0x9a, 0x95,
                                0x50, 0x54, 0x01, 0xbe, 0x88, 0x5e, 0x50, 0x00, 0x00, 0x78, 0xf3, 0x53, 0xf3};

// A DCQCN CNP captured on an NVIDIA ConnectX-4 Lx (Scapy test/contrib/roce.uts): BECN set, 16 reserved bytes,
// DSCP 48 + ECT(0), UDP source port 0, ICRC bytes 82 fd 00 2a. Same as pcap-fixtures/cx4lx-scapy-cnp.pcap.
const Bytes kCx4LxCnp = {0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2, 0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32, 0x08,
                         0x00, 0x45, 0xc2, 0x00, 0x3c, 0x71, 0x8c, 0x40, 0x00, 0x40, 0x11, 0x91, 0x61,
                         0x0a, 0x00, 0x11, 0x01, 0x0a, 0x00, 0x12, 0x01, 0x00, 0x00, 0x12, 0xb7, 0x00,
                         0x28, 0x00, 0x00, 0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00,
                         0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                         0x00, 0x00, 0x00, 0x00, 0x00, 0x82, 0xfd, 0x00, 0x2a};

// Built by Scapy 2.5 (BTH.compute_icrc, which covers IPv4 options):
//   Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") /
//   IP(src="10.0.0.1", dst="10.0.0.2", flags="DF", options=[IPOption_Router_Alert()]) /
//   UDP(sport=49152, dport=4791, chksum=0) / BTH(opcode=0x04, dqpn=0x11, psn=5) / Raw(b"abcdefgh")
const Bytes kScapyIpv4Options = {0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01,
                                 0x08, 0x00, 0x46, 0x00, 0x00, 0x38, 0x00, 0x01, 0x40, 0x00, 0x40, 0x11,
                                 0x91, 0xad, 0x0a, 0x00, 0x00, 0x01, 0x0a, 0x00, 0x00, 0x02, 0x94, 0x04,
                                 0x00, 0x00, 0xc0, 0x00, 0x12, 0xb7, 0x00, 0x20, 0x00, 0x00, 0x04, 0x00,
                                 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x00, 0x00, 0x00, 0x05, 0x61, 0x62,
                                 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x8f, 0xa9, 0x6d, 0xa4};

TEST(Icrc, KnownAnswerScapyUcSendOnlyPad2) {
  const Bytes& f = kScapyUcSendOnly;
  Packet p;
  ASSERT_EQ(parse(f, p), ParseError::ok);
  EXPECT_EQ(p.bth.opcode, 0x24);
  EXPECT_EQ(p.info->name, "UC SEND_ONLY");
  EXPECT_TRUE(p.bth.migreq);
  EXPECT_EQ(p.bth.pad, 2);
  EXPECT_EQ(p.bth.dqpn, 0xd3u);
  EXPECT_EQ(p.payload_len, 78u - 54u - 4u - 2u);
  EXPECT_EQ(p.udp.checksum, 0xaca2);  // non-zero, so the parser verified it
  EXPECT_TRUE(p.icrc_ok);
  const uint32_t stored = load_le32(&f[74]);
  EXPECT_EQ(Bytes(f.end() - 4, f.end()), (Bytes{0x78, 0xf3, 0x53, 0xf3}));
  EXPECT_EQ(p.icrc, stored);
  EXPECT_EQ(ref_icrc(&f[kL3], 60, 4, 20), stored);
  for (CrcImpl impl : {CrcImpl::isal, CrcImpl::zlib, CrcImpl::table})
    EXPECT_EQ(compute_icrc(ByteSpan(&f[kL3], 60), 4, 20, impl), stored) << crc_impl_name(impl);
  // The builder reproduces the vector byte for byte from its fields (UDP checksum included).
  FrameSpec s;
  s.dst_mac = p.eth.dst;
  s.src_mac = p.eth.src;
  s.src_ip = p.src_gid();
  s.dst_ip = p.dst_gid();
  s.traffic_class = p.ip4.tos;
  s.ttl = p.ip4.ttl;
  s.ip_id = p.ip4.id;
  s.udp_sport = p.udp.sport;
  s.udp_checksum = true;
  s.bth = p.bth;
  EXPECT_EQ(build(s, Bytes(p.payload.begin(), p.payload.end())), f);
}

TEST(Icrc, KnownAnswerConnectX4LxCnp) {
  const Bytes& f = kCx4LxCnp;
  Packet p;
  ASSERT_EQ(parse(f, p), ParseError::ok);
  EXPECT_EQ(p.info->kind, OpKind::cnp);
  EXPECT_TRUE(p.bth.becn);
  EXPECT_EQ(p.bth.dqpn, 0x000118u);
  EXPECT_EQ(p.ip4.tos, 0xc2);
  EXPECT_EQ(p.payload_len, 0u);
  EXPECT_EQ(p.payload_offset, kBth + 12 + 16);
  EXPECT_EQ(Bytes(f.end() - 4, f.end()), (Bytes{0x82, 0xfd, 0x00, 0x2a}));
  EXPECT_EQ(ref_icrc(&f[kL3], f.size() - kL3 - 4, 4, 20), load_le32(&f[f.size() - 4]));
  FrameSpec s;
  s.dst_mac = p.eth.dst;
  s.src_mac = p.eth.src;
  s.src_ip = p.src_gid();
  s.dst_ip = p.dst_gid();
  s.traffic_class = p.ip4.tos;
  s.ttl = p.ip4.ttl;
  s.ip_id = p.ip4.id;
  s.udp_sport = 0;
  s.bth = p.bth;
  EXPECT_EQ(build(s, {}), f);
}

TEST(Icrc, VariantFieldsAreMaskedInvariantOnesAreNot) {
  for (const Variant& v : kVariants) {
    SCOPED_TRACE(v.name);
    const Bytes good = build(make_spec(op::kRc | op::write_only, v), payload_of(30));
    Packet p0;
    ASSERT_EQ(parse(good, p0), ParseError::ok);
    const size_t l3 = p0.l3_offset, udp = p0.l4_offset, bth = p0.bth_offset;
    EXPECT_EQ(p0.icrc, ref_icrc(&good[l3], p0.frame_len - l3 - 4, v.ip_version, udp - l3));
    const ParseOptions no_csum{.verify_icrc = true, .verify_checksums = false};
    // Variant fields: the routers and switches on the path may change them; the ICRC must not care.
    std::vector<size_t> variant = {udp + 6, udp + 7, bth + 4};
    if (v.ip_version == 4)
      variant.insert(variant.end(), {l3 + 1, l3 + 8, l3 + 10, l3 + 11});
    else
      variant.insert(variant.end(), {l3 + 0, l3 + 1, l3 + 2, l3 + 3, l3 + 7});
    for (size_t off : variant) {
      Bytes f = good;
      f[off] ^= off == l3 ? 0x0f : 0xff;  // IPv6 byte 0: only the traffic class nibble is variant
      Packet p;
      EXPECT_EQ(parse(f, p, no_csum), ParseError::ok) << "variant byte at " << off;
      EXPECT_EQ(p.icrc_expected, p0.icrc);
    }
    // Invariant fields: addresses, IP ID, UDP source port, the BTH (opcode, SE/M/pad, P_Key, dest QP,
    // AckReq/resv7, PSN), extension headers, payload, and the ICRC itself.
    std::vector<size_t> invariant = {udp + 0,         udp + 1, bth + 0,  bth + 1,  bth + 2,
                                     bth + 5,         bth + 8, bth + 11, bth + 12, p0.payload_offset + 3,
                                     p0.frame_len - 1};
    if (v.ip_version == 4)
      invariant.insert(invariant.end(), {l3 + 4, l3 + 5, l3 + 12, l3 + 19});
    else
      invariant.insert(invariant.end(), {l3 + 8, l3 + 23, l3 + 24, l3 + 39});
    for (size_t off : invariant) {
      Bytes f = good;
      f[off] ^= off == bth + 0 ? 0x01 : 0x10;  // opcode 0x0a -> 0x0b, still a valid layout
      Packet p;
      EXPECT_EQ(parse(f, p, no_csum), ParseError::bad_icrc) << "invariant byte at " << off;
    }
  }
}

TEST(Icrc, Ipv4OptionsAreSkippedAndCoveredByTheIcrc) {
  // Scapy's own frame with a Router Alert option (IHL 6).
  {
    Packet p;
    ASSERT_EQ(parse(kScapyIpv4Options, p), ParseError::ok);
    EXPECT_EQ(p.ip4.ihl, 6);
    EXPECT_EQ(p.l4_offset, kL3 + 24);
    EXPECT_EQ(p.bth_offset, kL3 + 24 + 8);
    EXPECT_EQ(p.bth.opcode, op::send_only);
    EXPECT_EQ(p.bth.psn, 5u);
    EXPECT_EQ(Bytes(p.payload.begin(), p.payload.end()), (Bytes{'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'}));
    EXPECT_EQ(p.icrc, ref_icrc(&kScapyIpv4Options[kL3], kScapyIpv4Options.size() - kL3 - 4, 4, 24));
  }
  // Options of every length (1..10 words) spliced into a built frame.
  const Bytes good = build(make_spec(op::kRc | op::write_only_imm), payload_of(21));
  Packet p0;
  ASSERT_EQ(parse(good, p0), ParseError::ok);
  for (size_t words = 1; words <= 10; ++words) {
    SCOPED_TRACE(words);
    Bytes opts(words * 4, 0x01);  // NOPs ...
    opts[0] = 0x94;               // ... after a Router Alert (type 148, length 4, value 0)
    opts[1] = 0x04;
    opts[2] = opts[3] = 0x00;
    Bytes f = good;
    f.insert(f.begin() + kL3 + 20, opts.begin(), opts.end());
    f[kL3] = static_cast<uint8_t>(0x40 | (5 + words));
    set_be16(f, kL3 + 2, static_cast<uint16_t>(get_be16(f, kL3 + 2) + opts.size()));
    refresh_v4(f);
    const uint32_t want = load_le32(&f[f.size() - 4]);
    Packet p;
    ASSERT_EQ(parse(f, p), ParseError::ok);
    EXPECT_EQ(p.ip4.ihl, 5 + words);
    EXPECT_EQ(p.l4_offset, kL3 + 20 + opts.size());
    EXPECT_EQ(p.bth.psn, p0.bth.psn);
    EXPECT_EQ(p.reth.rkey, p0.reth.rkey);
    EXPECT_EQ(p.imm, p0.imm);
    EXPECT_EQ(Bytes(p.payload.begin(), p.payload.end()), Bytes(p0.payload.begin(), p0.payload.end()));
    EXPECT_EQ(p.icrc_expected, want);
    // The options are part of the ICRC: an ICRC computed as if they were not there does not verify.
    Bytes without(f.begin() + kL3, f.end() - 4);
    without.erase(without.begin() + 20, without.begin() + 20 + static_cast<long>(opts.size()));
    store_le32(&f[f.size() - 4], ref_icrc(without.data(), without.size(), 4, 20));
    EXPECT_EQ(parse(f), ParseError::bad_icrc);
  }
}
