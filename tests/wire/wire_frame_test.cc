// Unit tests of wire/: Frames: every opcode built and parsed over every L2/L3 variant, every prefix
// truncated, build limits, Ethernet padding, VLAN, IPv6 and UDP checksums. Frames live in exactly sized heap
// buffers so the ASan build reports any read past their end.
#include <gtest/gtest.h>

#include "tests/bench/crc_backends.h"  // the CRC-32 implementations compared with wire::crc32
#include "tests/wire/wire_test_util.h"

using namespace urxe::wire;
using namespace wire_test;
using urxe::bench::CrcImpl;

// ================================ Every opcode ================================

TEST(Frame, EveryOpcodeBuildsAndParsesOverEveryL2L3Variant) {
  for (uint8_t op : valid_opcodes()) {
    const OpcodeInfo& info = opcode_info(op);
    for (const Variant& v : kVariants) {
      for (size_t len :
           info.has_payload ? std::vector<size_t>{0, 1, 2, 3, 4, 13, 256, 1024} : std::vector<size_t>{0}) {
        SCOPED_TRACE(name_of(op) + " " + v.name + " payload " + std::to_string(len));
        const FrameSpec s = make_spec(op, v);
        const Bytes payload = payload_of(len);
        const Bytes f = build(s, payload);
        const size_t l3 = kEthLen + (v.vlan ? kVlanLen : 0);
        const size_t ip_hdr = v.ip_version == 4 ? kIpv4MinLen : kIpv6Len;
        const size_t pad = (4 - len % 4) % 4;
        const size_t bth = l3 + ip_hdr + kUdpLen;
        const size_t hdrs = bth + kBthLen + info.ext_len;
        ASSERT_EQ(f.size(), hdrs + len + pad + kIcrcLen);

        // Bytes on the wire, read without the parser.
        EXPECT_EQ(get_be16(f, 12),
                  v.vlan ? kEtherTypeVlan : (v.ip_version == 4 ? kEtherTypeIpv4 : kEtherTypeIpv6));
        EXPECT_EQ(f[l3] >> 4, v.ip_version);
        EXPECT_EQ(get_be16(f, bth - 6), kRoceV2Port);
        EXPECT_EQ(get_be16(f, bth - 4), f.size() - bth + kUdpLen);
        EXPECT_EQ(f[bth], op);
        EXPECT_EQ((f[bth + 1] >> 4) & 3, pad);
        size_t h = bth + kBthLen;
        auto expect_at = [&](const Bytes& want, const char* what) {
          EXPECT_EQ(slice(f, h, want.size()), want) << what;
          h += want.size();
        };
        if (info.headers & kDeth) {
          Bytes d = be(kValDeth.qkey, 4), q = be(kValDeth.src_qp, 4);
          d.insert(d.end(), q.begin(), q.end());
          expect_at(d, "DETH");
        }
        if (info.headers & kXrceth)
          expect_at(Bytes{0x00, 0xfe, 0xdc, 0xba}, "XRCETH");  // reserved, SRQ number
        if (info.headers & kReth) {
          Bytes r = be(kValReth.va, 8), k = be(kValReth.rkey, 4), l = be(kValReth.dma_len, 4);
          r.insert(r.end(), k.begin(), k.end());
          r.insert(r.end(), l.begin(), l.end());
          expect_at(r, "RETH");
        }
        if (info.headers & kAtomicEth) h += kAtomicEthLen;  // layout checked in Headers.*
        if (info.headers & kAeth) expect_at(Bytes{0x1f, 0xab, 0xcd, 0xef}, "AETH");
        if (info.headers & kAtomicAckEth) expect_at(be(kValAtomicAckEth.orig_data, 8), "AtomicAckETH");
        if (info.headers & kImmDt) expect_at(be(kImm, 4), "ImmDt");
        if (info.headers & kIeth) expect_at(be(kIethRkey, 4), "IETH");
        if (info.kind == OpKind::cnp) expect_at(Bytes(16, 0), "CNP reserved");
        EXPECT_EQ(h, hdrs);
        if (info.has_payload) {
          EXPECT_EQ(slice(f, hdrs, len), payload);
          EXPECT_EQ(slice(f, hdrs + len, pad), Bytes(pad, 0));
        }
        const uint32_t icrc = ref_icrc(&f[l3], f.size() - l3 - 4, v.ip_version, ip_hdr);
        EXPECT_EQ(load_le32(&f[f.size() - 4]), icrc);
        if (v.ip_version == 4) {
          EXPECT_EQ(get_be16(f, l3 + 10), ref_ipv4_checksum(&f[l3], 20));
        }

        // The parser's view.
        Packet p;
        ASSERT_EQ(parse(f, p), ParseError::ok);
        EXPECT_EQ(p.info, &info);
        EXPECT_EQ(p.present, info.headers);
        EXPECT_EQ(p.eth.has_vlan, v.vlan);
        if (v.vlan) {
          EXPECT_EQ(p.eth.vlan_tci, 0x6064);
        }
        EXPECT_EQ(p.eth.dst, s.dst_mac);
        EXPECT_EQ(p.eth.src, s.src_mac);
        EXPECT_EQ(p.ip_version, v.ip_version);
        EXPECT_EQ(p.src_gid(), s.src_ip);
        EXPECT_EQ(p.dst_gid(), s.dst_ip);
        if (v.ip_version == 4) {
          EXPECT_EQ(p.ip4.tos, 0x62);
          EXPECT_EQ(p.ip4.ttl, 63);
          EXPECT_EQ(p.ip4.id, 0x1234);
          EXPECT_EQ(p.ip4.frag, kIpv4FlagDf);
        } else {
          EXPECT_EQ(p.ip6.traffic_class, 0x62);
          EXPECT_EQ(p.ip6.flow_label, 0xabcdeu);
          EXPECT_EQ(p.ip6.hop_limit, 63);
        }
        EXPECT_EQ(p.udp.sport, 0xc123);
        EXPECT_EQ(p.udp.checksum, 0);
        EXPECT_EQ(p.l3_offset, l3);
        EXPECT_EQ(p.l4_offset, l3 + ip_hdr);
        EXPECT_EQ(p.bth_offset, bth);
        EXPECT_EQ(p.payload_offset, hdrs);
        EXPECT_EQ(p.payload_len, info.has_payload ? len : 0);
        EXPECT_EQ(p.frame_len, f.size());
        EXPECT_EQ(p.bth.pad, info.has_payload ? pad : 0);
        EXPECT_EQ(p.bth.dqpn, 0x11u);
        EXPECT_EQ(p.bth.psn, 0xfffffeu);
        EXPECT_TRUE(p.bth.se);
        EXPECT_TRUE(p.bth.ack_req);
        if (len > 0) {
          EXPECT_EQ(p.payload.data(), f.data() + hdrs);  // a view into the frame, no copy
        }
        EXPECT_EQ(Bytes(p.payload.begin(), p.payload.end()), info.has_payload ? payload : Bytes{});
        if (info.headers & kReth) {
          EXPECT_EQ(p.reth.va, kValReth.va);
          EXPECT_EQ(p.reth.rkey, kValReth.rkey);
          EXPECT_EQ(p.reth.dma_len, kValReth.dma_len);
        }
        if (info.headers & kAeth) {
          EXPECT_EQ(p.aeth.syndrome, kValAeth.syndrome);
          EXPECT_EQ(p.aeth.msn, kValAeth.msn);
        }
        if (info.headers & kAtomicEth) {
          EXPECT_EQ(p.atomic_eth.va, kValAtomicEth.va);
          EXPECT_EQ(p.atomic_eth.swap_add, kValAtomicEth.swap_add);
          EXPECT_EQ(p.atomic_eth.compare, kValAtomicEth.compare);
        }
        if (info.headers & kAtomicAckEth) {
          EXPECT_EQ(p.atomic_ack_eth.orig_data, kValAtomicAckEth.orig_data);
        }
        if (info.headers & kDeth) {
          EXPECT_EQ(p.deth.qkey, kValDeth.qkey);
          EXPECT_EQ(p.deth.src_qp, kValDeth.src_qp);
        }
        if (info.headers & kImmDt) {
          EXPECT_EQ(p.imm, kImm);
        }
        if (info.headers & kIeth) {
          EXPECT_EQ(p.ieth_rkey, kIethRkey);
        }
        EXPECT_EQ(p.xrc_srqn, (info.headers & kXrceth) ? kXrcSrqn : 0u);
        EXPECT_TRUE(p.icrc_checked);
        EXPECT_TRUE(p.icrc_ok);
        EXPECT_EQ(p.icrc, icrc);
        EXPECT_EQ(p.icrc_expected, icrc);
        for (CrcImpl impl : {CrcImpl::zlib, CrcImpl::table})
          EXPECT_EQ(compute_icrc(ByteSpan(&f[l3], f.size() - l3 - 4), v.ip_version,
                                 static_cast<uint32_t>(ip_hdr), impl),
                    icrc);
      }
    }
  }
}

TEST(Frame, EveryPrefixOfEveryOpcodesFrameIsTruncated) {
  size_t checked = 0;
  for (uint8_t op : valid_opcodes()) {
    for (const Variant& v : kVariants) {
      SCOPED_TRACE(name_of(op) + " " + v.name);
      const Bytes f = build(make_spec(op, v), payload_of(opcode_info(op).has_payload ? 37 : 0));
      ASSERT_EQ(parse(f), ParseError::ok);
      for (size_t n = 0; n < f.size(); ++n) {
        const Bytes prefix(f.begin(), f.begin() + static_cast<long>(n));  // exactly n bytes on the heap
        Packet p;
        const ParseError e = parse(prefix, p);
        ASSERT_EQ(e, ParseError::truncated) << "prefix of " << n << " bytes: " << to_string(e);
        EXPECT_LE(p.frame_len, n);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 10000u);
}

// Also sealed without the ICRC (for a port that fills it: the same-host path leaves it out on its memory
// hop): the ICRC's bytes stay as they were, and write_icrc on the whole frame then makes exactly the frame
// build_frame makes. With a UDP checksum, which covers the ICRC, it is written at once.
TEST(Frame, BuildHeadersPlusSealEqualsBuildFrame) {
  for (uint8_t op : valid_opcodes()) {
    for (const Variant& v : kVariants) {
      for (int mode = 0; mode < 4; mode++) {
        const bool udp_csum = mode & 1, icrc_later = mode & 2;
        SCOPED_TRACE(name_of(op) + " " + v.name + (udp_csum ? " udp-csum" : "") +
                     (icrc_later ? " icrc later" : ""));
        FrameSpec s = make_spec(op, v);
        s.udp_checksum = udp_csum;
        const Bytes payload = payload_of(opcode_info(op).has_payload ? 61 : 0);
        const Bytes want = build(s, payload);
        Bytes f(want.size(), 0xcc);  // stale bytes in the pad and checksum must be overwritten
        FrameLayout l;
        ASSERT_TRUE(build_headers(f, s, static_cast<uint32_t>(payload.size()), l));
        EXPECT_EQ(l.frame_len, want.size());
        EXPECT_EQ(l.payload_len, payload.size());
        EXPECT_EQ(l.l3_offset, kEthLen + (v.vlan ? kVlanLen : 0));
        EXPECT_EQ(l.ip_hdr_len, v.ip_version == 4 ? 20u : 40u);
        EXPECT_EQ(l.pad, (4 - payload.size() % 4) % 4);
        std::copy(payload.begin(), payload.end(), f.begin() + l.payload_offset);
        seal_frame(f, l, !icrc_later);
        if (icrc_later) {
          EXPECT_TRUE(std::equal(f.begin(), f.end() - kIcrcLen, want.begin()));
          if (!udp_csum) {
            EXPECT_EQ(Bytes(f.end() - kIcrcLen, f.end()), Bytes(kIcrcLen, 0xcc));
          }
          ASSERT_TRUE(write_icrc(f));
        }
        EXPECT_EQ(f, want);
      }
    }
  }
}

// A connection's prefix (make_prefix, once) plus build_headers from it writes the same bytes and layout as
// build_headers from the whole spec, for every opcode, L2/L3 variant, payload length (every pad), with and
// without a UDP checksum; only the BTH and the extension headers come from the spec then, so a spec that
// differs below UDP is not read. Exactly sized buffers: ASan sees any overrun; a byte short is refused.
TEST(Frame, HeadersFromPrefixEqualHeadersFromSpec) {
  for (uint8_t op : valid_opcodes()) {
    for (const Variant& v : kVariants) {
      for (uint32_t len : {0u, 1u, 2u, 3u, 4u, 61u, 1024u}) {
        if (!opcode_info(op).has_payload && len) continue;
        for (bool udp_csum : {false, true}) {
          SCOPED_TRACE(name_of(op) + " " + v.name + " payload " + std::to_string(len) +
                       (udp_csum ? " udp-csum" : ""));
          FrameSpec s = make_spec(op, v);
          s.udp_checksum = udp_csum;
          HeaderPrefix prefix;
          make_prefix(s, prefix);
          const uint32_t size = frame_size(s, len);
          Bytes want(size, 0xcc), got(size, 0x33);
          FrameLayout lw, lg;
          ASSERT_TRUE(build_headers(want, s, len, lw));
          FrameSpec transport_only = s;  // what the prefix carries, changed: must not be read
          transport_only.dst_mac = {};
          transport_only.src_ip = transport_only.dst_ip = {};
          transport_only.ttl = 1;
          transport_only.has_vlan = !v.vlan;
          transport_only.ip_version = v.ip_version == 4 ? 6 : 4;
          ASSERT_TRUE(build_headers(got, prefix, transport_only, len, lg));
          EXPECT_EQ(Bytes(got.begin(), got.begin() + lg.payload_offset),
                    Bytes(want.begin(), want.begin() + lw.payload_offset));
          EXPECT_EQ(lg.l3_offset, lw.l3_offset);
          EXPECT_EQ(lg.ip_hdr_len, lw.ip_hdr_len);
          EXPECT_EQ(lg.payload_offset, lw.payload_offset);
          EXPECT_EQ(lg.payload_len, lw.payload_len);
          EXPECT_EQ(lg.pad, lw.pad);
          EXPECT_EQ(lg.frame_len, lw.frame_len);
          EXPECT_EQ(lg.ip_version, lw.ip_version);
          EXPECT_EQ(lg.udp_checksum, lw.udp_checksum);
          // sealed, the frame parses with its checksums and ICRC good
          std::fill(got.begin() + lg.payload_offset, got.begin() + lg.payload_offset + len, 0x5a);
          seal_frame(got, lg);
          Packet pkt;
          EXPECT_EQ(parse_frame(got, pkt), ParseError::ok);
          Bytes short_buf(size - 1);
          EXPECT_FALSE(build_headers(short_buf, prefix, s, len, lg));
        }
      }
    }
  }
}

// write_icrc refuses, writing nothing, what is not a whole enough IP frame: every prefix of a frame too
// short for the headers, and non-IP Ethernet types. (Exactly sized buffers: ASan sees any overread.)
TEST(Frame, WriteIcrcRefusesWhatIsNoRoceFrame) {
  for (const Variant& v : kVariants) {
    SCOPED_TRACE(v.name);
    const Bytes whole = build(make_spec(op::kRc | op::acknowledge, v), {});
    const size_t min_len = kEthLen + (v.vlan ? kVlanLen : 0) + (v.ip_version == 4 ? kIpv4MinLen : kIpv6Len) +
                           kUdpLen + kBthLen + kIcrcLen;
    for (size_t n = 0; n < min_len; n++) {
      Bytes f(whole.begin(), whole.begin() + static_cast<ptrdiff_t>(n));
      const Bytes before = f;
      EXPECT_FALSE(write_icrc(f)) << n;
      EXPECT_EQ(f, before);
    }
    Bytes arp = whole;
    arp[v.vlan ? 16 : 12] = 0x08;
    arp[v.vlan ? 17 : 13] = 0x06;
    EXPECT_FALSE(write_icrc(arp));
    Bytes wrong_version = whole;  // an IPv4 type over an IPv6 header, or the reverse
    wrong_version[kEthLen + (v.vlan ? kVlanLen : 0)] ^= 0x20;
    EXPECT_FALSE(write_icrc(wrong_version));
  }
}

TEST(Frame, BuildRefusesWhatDoesNotFit) {
  for (uint8_t op : valid_opcodes()) {
    for (const Variant& v : kVariants) {
      SCOPED_TRACE(name_of(op) + " " + v.name);
      const FrameSpec s = make_spec(op, v);
      const uint32_t len = opcode_info(op).has_payload ? 100 : 0;
      const uint32_t need = frame_size(s, len);
      for (uint32_t size : {0u, 1u, need / 2, need - 4, need - 1}) {
        Bytes buf(size, 0x5a);
        FrameLayout l;
        EXPECT_FALSE(build_headers(buf, s, len, l)) << size;
        EXPECT_EQ(buf, Bytes(size, 0x5a)) << "nothing written into a too-small buffer";
        EXPECT_EQ(build_frame(buf, s, payload_of(len)), 0u);
      }
      Bytes exact(need);
      FrameLayout l;
      EXPECT_TRUE(build_headers(exact, s, len, l));
      if (!opcode_info(op).has_payload) {
        Bytes big(need + 64);
        EXPECT_FALSE(build_headers(big, s, 4, l)) << "payload on an opcode without one";
      }
    }
  }
  // Unknown opcodes and payloads beyond the 16-bit IP length.
  Bytes big(70000);
  FrameLayout l;
  for (uint8_t op : {uint8_t{0x15}, uint8_t{0x40}, uint8_t{0x66}, uint8_t{0xb5}, uint8_t{0xff}})
    EXPECT_FALSE(build_headers(big, make_spec(op), 0, l)) << int(op);
  EXPECT_FALSE(build_headers(big, make_spec(op::kRc | op::send_only), 65536, l));
  EXPECT_EQ(build_frame(big, make_spec(op::kRc | op::send_only), payload_of(65536)), 0u);
}

// ================================ L2 / L3 variants ================================

TEST(Frame, EthernetPaddingAfterTheFrameIsIgnored) {
  // RC SEND_ONLY with no payload is 58 bytes: a NIC pads it to the 60-byte Ethernet minimum.
  for (size_t len : {0u, 5u, 64u}) {
    const Bytes f = build(make_spec(op::kRc | op::send_only), payload_of(len));
    for (size_t extra : {1u, 2u, 4u, 6u, 46u}) {
      for (uint8_t fill : {uint8_t{0x00}, uint8_t{0xa5}}) {
        SCOPED_TRACE(std::to_string(len) + "+" + std::to_string(extra));
        Bytes padded = f;
        padded.insert(padded.end(), extra, fill);
        Packet p;
        ASSERT_EQ(parse(padded, p), ParseError::ok);
        EXPECT_EQ(p.frame_len, f.size());
        EXPECT_EQ(p.payload_len, len);
        EXPECT_EQ(Bytes(p.payload.begin(), p.payload.end()), payload_of(len));
        EXPECT_EQ(p.icrc, load_le32(&f[f.size() - 4]));
      }
    }
  }
  const Bytes min = build(make_spec(op::kRc | op::send_only), {});
  EXPECT_EQ(min.size(), 58u);
}

TEST(Frame, VlanTagIsParsedAndKept) {
  for (uint8_t ipv : {uint8_t{4}, uint8_t{6}}) {
    FrameSpec s = make_spec(op::kRc | op::acknowledge, {"vlan", ipv, true});
    for (uint16_t tci : {uint16_t{0x0000}, uint16_t{0x0001}, uint16_t{0xefff}, uint16_t{0xffff}}) {
      s.vlan_tci = tci;
      const Bytes f = build(s, {});
      EXPECT_EQ(get_be16(f, 12), 0x8100);
      EXPECT_EQ(get_be16(f, 14), tci);
      Packet p;
      ASSERT_EQ(parse(f, p), ParseError::ok);
      EXPECT_TRUE(p.eth.has_vlan);
      EXPECT_EQ(p.eth.vlan_tci, tci);
      EXPECT_EQ(p.eth.ethertype, ipv == 4 ? kEtherTypeIpv4 : kEtherTypeIpv6);
      EXPECT_EQ(p.l3_offset, 18u);
    }
  }
}

TEST(Frame, Ipv6FieldsAndGids) {
  FrameSpec s = make_spec(op::kUd | op::send_only_imm, kVariants[1]);
  s.traffic_class = 0xb9;
  s.flow_label = 0xfffff;
  s.ttl = 1;
  const Bytes f = build(s, payload_of(40));
  EXPECT_EQ(load_be32(&f[kL3]), (6u << 28) | (0xb9u << 20) | 0xfffffu);
  EXPECT_EQ(get_be16(f, kL3 + 4), f.size() - kL3 - 40);
  EXPECT_EQ(f[kL3 + 6], kIpProtoUdp);
  EXPECT_EQ(f[kL3 + 7], 1);
  Packet p;
  ASSERT_EQ(parse(f, p), ParseError::ok);
  EXPECT_EQ(p.ip6.traffic_class, 0xb9);
  EXPECT_EQ(p.ip6.flow_label, 0xfffffu);
  EXPECT_EQ(p.ip6.hop_limit, 1);
  EXPECT_EQ(p.ip6.src, s.src_ip);
  EXPECT_EQ(p.src_gid(), s.src_ip);
  EXPECT_FALSE(gid_is_ipv4_mapped(p.dst_gid()));
  // IPv4 frames report IPv4-mapped GIDs.
  const Bytes f4 = build(make_spec(op::kRc | op::send_only), payload_of(4));
  ASSERT_EQ(parse(f4, p), ParseError::ok);
  EXPECT_EQ(p.src_gid(), gid_from_ipv4({10, 77, 0, 11}));
  EXPECT_EQ(p.dst_gid(), gid_from_ipv4({10, 77, 0, 12}));
}

TEST(Frame, UdpChecksumIsWrittenAndVerified) {
  for (const Variant& v : kVariants) {
    for (size_t len : {0u, 1u, 7u, 200u}) {
      SCOPED_TRACE(std::string(v.name) + " " + std::to_string(len));
      FrameSpec s = make_spec(op::kUc | op::send_only, v);
      s.udp_checksum = true;
      Bytes f = build(s, payload_of(len));
      const size_t l3 = kEthLen + (v.vlan ? 4 : 0), ip_hdr = v.ip_version == 4 ? 20 : 40;
      const size_t udp = l3 + ip_hdr;
      EXPECT_NE(get_be16(f, udp + 6), 0);
      EXPECT_EQ(ref_udp_sum(f, l3, v.ip_version, ip_hdr), 0xffff) << "checksum verifies independently";
      Packet p;
      ASSERT_EQ(parse(f, p), ParseError::ok);
      EXPECT_EQ(p.udp.checksum, get_be16(f, udp + 6));

      // Wrong checksum field: the ICRC does not cover it, so only the UDP check can catch it.
      Bytes bad = f;
      bad[udp + 7] ^= 0x01;
      EXPECT_EQ(parse(bad), ParseError::bad_checksum);
      EXPECT_EQ(parse(bad, ParseOptions{.verify_icrc = true, .verify_checksums = false}), ParseError::ok);
      // Payload changed and the ICRC redone: the stale UDP checksum still catches it.
      if (len > 0) {
        bad = f;
        bad[p.payload_offset] ^= 0x40;
        store_le32(&bad[bad.size() - 4], ref_icrc(&bad[l3], bad.size() - l3 - 4, v.ip_version, ip_hdr));
        EXPECT_EQ(parse(bad), ParseError::bad_checksum);
      }
      // A zero checksum means "none" and is not verified (what RoCE NICs and rxe send).
      Bytes none = f;
      set_be16(none, udp + 6, 0);
      EXPECT_EQ(parse(none), ParseError::ok);
    }
  }
}

// Annex A19's ATOMIC WRITE as urxe sends it: BTH, RETH (VA, R_Key, DMA length 8), the 8 bytes to store, no
// pad, ICRC; it parses back to the same fields.
TEST(Frame, AtomicWriteLayoutRoundTrips) {
  FrameSpec s = make_spec(op::kRc | op::atomic_write);
  s.reth = Reth{0x0000'7f00'1234'5678ull, 0x00abcd01, 8};
  const Bytes payload = {0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11};
  const Bytes f = build(s, payload);
  const size_t bth = kEthLen + kIpv4MinLen + kUdpLen;
  ASSERT_EQ(f.size(), bth + kBthLen + kRethLen + 8 + kIcrcLen);
  EXPECT_EQ(f[bth], 0x1d);
  EXPECT_EQ((f[bth + 1] >> 4) & 3, 0);  // pad
  EXPECT_EQ(slice(f, bth + kBthLen, 8), be(0x0000'7f00'1234'5678ull, 8));
  EXPECT_EQ(slice(f, bth + kBthLen + 8, 4), be(0x00abcd01, 4));
  EXPECT_EQ(slice(f, bth + kBthLen + 12, 4), be(8, 4));
  EXPECT_EQ(slice(f, bth + kBthLen + kRethLen, 8), payload);
  Packet p;
  ASSERT_EQ(parse(f, p), ParseError::ok);
  EXPECT_EQ(p.info->kind, OpKind::atomic_write);
  EXPECT_EQ(p.reth.va, 0x0000'7f00'1234'5678ull);
  EXPECT_EQ(p.reth.rkey, 0x00abcd01u);
  EXPECT_EQ(p.reth.dma_len, 8u);
  EXPECT_EQ(p.payload_len, 8u);
  EXPECT_EQ(Bytes(p.payload.begin(), p.payload.end()), payload);
}

// Annex A14: an XRC request's XRCETH (8 reserved bits, the 24-bit XRC SRQ number) comes right after the BTH
// and before the RETH and ImmDt; only 24 bits of FrameSpec::xrc_srqn are sent, the reserved byte as 0, and a
// receiver ignores that byte. Responses carry none: the AETH follows the BTH.
TEST(Frame, XrcethLayoutRoundTrips) {
  FrameSpec s = make_spec(op::kXrc | op::write_only_imm);
  s.xrc_srqn = 0xff123456;
  const Bytes payload = payload_of(8);
  Bytes f = build(s, payload);
  const size_t h = kBth + kBthLen;
  ASSERT_EQ(f.size(), h + kXrcethLen + kRethLen + kImmDtLen + 8 + kIcrcLen);
  EXPECT_EQ(f[kBth], 0xab);
  EXPECT_EQ(slice(f, h, 4), (Bytes{0x00, 0x12, 0x34, 0x56}));
  EXPECT_EQ(slice(f, h + kXrcethLen, 8), be(kValReth.va, 8));
  EXPECT_EQ(slice(f, h + kXrcethLen + kRethLen, 4), be(kImm, 4));
  Packet p;
  ASSERT_EQ(parse(f, p), ParseError::ok);
  EXPECT_EQ(p.info->transport, Transport::xrc);
  EXPECT_EQ(p.xrc_srqn, 0x123456u);
  EXPECT_EQ(p.reth.rkey, kValReth.rkey);
  EXPECT_EQ(p.imm, kImm);
  EXPECT_EQ(Bytes(p.payload.begin(), p.payload.end()), payload);

  f[h] = 0xa5;  // reserved: ignored on receipt
  refresh_v4(f);
  ASSERT_EQ(parse(f, p), ParseError::ok);
  EXPECT_EQ(p.xrc_srqn, 0x123456u);

  const Bytes ack = build(make_spec(op::kXrc | op::acknowledge), {});
  ASSERT_EQ(ack.size(), h + kAethLen + kIcrcLen);
  EXPECT_EQ(slice(ack, h, 4), (Bytes{0x1f, 0xab, 0xcd, 0xef}));
  ASSERT_EQ(parse(ack, p), ParseError::ok);
  EXPECT_EQ(p.present, kAeth);
  EXPECT_EQ(p.xrc_srqn, 0u);
}
