// wire/gso.h: a run of RoCEv2 frames as one UDP GSO datagram and back. The frames are built independently
// (build_frame, each with the IPv4 ID segment i must carry), the datagram is made as a sender hands it to the
// kernel (headers once, then each frame's UDP payload), and cutting it must give the frames back byte for
// byte, as the kernel's segmentation does on a wire.
#include <random>

#include "tests/wire/wire_test_util.h"
#include "wire/gso.h"

namespace wire_test {
namespace {

constexpr uint8_t kSendFirst = 0x00, kSendMiddle = 0x01, kSendLast = 0x02, kSendOnly = 0x04, kAck = 0x11;

struct Batch {
  std::vector<Bytes> frames;
  Bytes datagram;
};

// Frames of one flow (QP 0x11, PSNs from psn0), opcode and payload length each, IPv4 ID id0 + i; and
// the datagram that carries them.
Batch make_run(const Variant& v, const std::vector<std::pair<uint8_t, uint32_t>>& ops, uint32_t psn0,
               uint16_t id0, bool same_psn = false) {
  Batch r;
  for (size_t i = 0; i < ops.size(); ++i) {
    FrameSpec s = make_spec(ops[i].first, v);
    s.bth.psn = same_psn ? psn0 : (psn0 + static_cast<uint32_t>(i)) & 0xffffff;
    s.ip_id = static_cast<uint16_t>(id0 + i);
    r.frames.push_back(build(s, payload_of(ops[i].second)));
  }
  const uint32_t hdr = gso_headers_len(r.frames[0].data(), static_cast<uint32_t>(r.frames[0].size()));
  EXPECT_NE(hdr, 0u);
  r.datagram.assign(r.frames[0].begin(), r.frames[0].begin() + hdr);
  uint32_t total = 0;
  for (const Bytes& f : r.frames) {
    r.datagram.insert(r.datagram.end(), f.begin() + hdr, f.end());
    total += static_cast<uint32_t>(f.size()) - hdr;
  }
  set_gso_segment_headers(r.datagram.data(), hdr, total, id0, 0);
  return r;
}

void expect_cut_back(const Batch& r, uint32_t want_seg) {
  EXPECT_EQ(gso_segment_len(r.datagram), want_seg);
  Bytes out(r.datagram.size());
  for (uint32_t i = 0; i < r.frames.size(); ++i) {
    const uint32_t n = gso_segment(r.datagram, want_seg, i, out);
    ASSERT_EQ(n, r.frames[i].size()) << "segment " << i;
    EXPECT_TRUE(std::equal(r.frames[i].begin(), r.frames[i].end(), out.begin())) << "segment " << i;
    Packet p;
    EXPECT_EQ(parse(Bytes(out.begin(), out.begin() + n), p), ParseError::ok);
    EXPECT_TRUE(p.icrc_ok);
  }
  EXPECT_EQ(gso_segment(r.datagram, want_seg, static_cast<uint32_t>(r.frames.size()), out), 0u);
}

TEST(WireGso, HeadersLenOnlyForUntaggedUdp) {
  EXPECT_EQ(gso_headers_len(build(make_spec(kSendOnly, kVariants[0]), payload_of(8)).data(), 80), 42u);
  EXPECT_EQ(gso_headers_len(build(make_spec(kSendOnly, kVariants[1]), payload_of(8)).data(), 100), 62u);
  const Bytes tagged = build(make_spec(kSendOnly, kVariants[2]), payload_of(8));
  EXPECT_EQ(gso_headers_len(tagged.data(), static_cast<uint32_t>(tagged.size())), 0u);
  Bytes opts = build(make_spec(kSendOnly, kVariants[0]), payload_of(8));
  opts[kEthLen] = 0x46;  // IHL 6: options
  EXPECT_EQ(gso_headers_len(opts.data(), static_cast<uint32_t>(opts.size())), 0u);
  EXPECT_EQ(gso_headers_len(opts.data(), 10), 0u);
}

TEST(WireGso, MessageSegmentsCutBackIpv4AndIpv6) {
  for (const Variant& v : {kVariants[0], kVariants[1]}) {
    SCOPED_TRACE(v.name);
    // A 3.5 KiB SEND at path MTU 1024 (FIRST, MIDDLE, MIDDLE, a shorter LAST), PSNs across the 24-bit wrap
    // and IPv4 IDs across the 16-bit one.
    const Batch r =
        make_run(v, {{kSendFirst, 1024}, {kSendMiddle, 1024}, {kSendMiddle, 1024}, {kSendLast, 510}},
                 0xfffffe, 0xfffe);
    expect_cut_back(r, kBthLen + 1024 + kIcrcLen);
  }
}

TEST(WireGso, HeaderChecksumUpdatedInPlaceEqualsOneSummedAgain) {
  // The transmit path updates the engine's own IPv4 checksum for the words it changes (RFC 1624); it must
  // give exactly what summing the header again gives, for every ID (across the wrap) and length.
  std::mt19937 rng(7);
  for (int k = 0; k < 20000; ++k) {
    FrameSpec s = make_spec(kSendMiddle, kVariants[0]);
    s.ip_id = static_cast<uint16_t>(rng());
    s.traffic_class = static_cast<uint8_t>(rng());
    s.ttl = static_cast<uint8_t>(rng() | 1);
    Bytes f = build(s, payload_of(8 + rng() % 1500));
    const uint32_t hdr = gso_headers_len(f.data(), static_cast<uint32_t>(f.size()));
    ASSERT_EQ(hdr, 42u);
    Bytes g = f;
    const auto payload = k % 2 ? static_cast<uint32_t>(f.size()) - hdr : static_cast<uint32_t>(rng() % 9000);
    const auto id0 = static_cast<uint16_t>(rng());
    const uint32_t index = rng() % 64;
    set_gso_segment_headers(f.data(), hdr, payload, id0, index, true);
    set_gso_segment_headers(g.data(), hdr, payload, id0, index, false);
    ASSERT_EQ(f, g) << "ID " << id0 << "+" << index << " payload " << payload;
    EXPECT_TRUE(ipv4_header_checksum_ok(f.data() + kEthLen, kIpv4MinLen));
  }
}

TEST(WireGso, SmallMessagesAndAcknowledgements) {
  // Equal SEND_ONLYs of 64 bytes: a segment size that is no path MTU.
  expect_cut_back(make_run(kVariants[0], std::vector<std::pair<uint8_t, uint32_t>>(6, {kSendOnly, 64}), 5, 0),
                  kBthLen + 64 + kIcrcLen);
  // A SEND and, shorter and last, the ACK of the peer's request: another PSN space.
  {
    Batch r = make_run(kVariants[0], {{kSendOnly, 64}, {kAck, 0}}, 40, 3);
    FrameSpec s = make_spec(kAck, kVariants[0]);
    s.bth.psn = 0x777777;
    s.ip_id = 4;
    r.frames[1] = build(s, {});
    std::copy(r.frames[1].begin() + 42, r.frames[1].end(),
              r.datagram.begin() + 42 + (r.frames[0].size() - 42));
    expect_cut_back(r, kBthLen + 64 + kIcrcLen);
  }
  // Acknowledgements repeat their PSN.
  expect_cut_back(make_run(kVariants[1], std::vector<std::pair<uint8_t, uint32_t>>(5, {kAck, 0}), 77, 0,
                           /*same_psn=*/true),
                  kBthLen + kAethLen + kIcrcLen);
}

TEST(WireGso, NotABatch) {
  // One frame alone is not a batch, whatever its length.
  for (uint32_t len : {0u, 64u, 1024u, 4096u})
    EXPECT_EQ(gso_segment_len(build(make_spec(kSendOnly, kVariants[0]), payload_of(len))), 0u) << len;
  // Frames whose sender left every IPv4 ID at the first: the first segment still checks, but the second,
  // given ID + 1 as the kernel will, fails its ICRC. That is what a receiver then sees too.
  Batch r = make_run(kVariants[0], {{kSendMiddle, 256}, {kSendMiddle, 256}}, 1, 9);
  Bytes wrong = r.frames[1];
  set_be16(wrong, kEthLen + 4, 9);
  refresh_v4(wrong);  // (header checksum of the wrong ID; the ICRC was computed with ID 10)
  const uint32_t hdr = 42;
  std::copy(wrong.begin() + hdr, wrong.end(), r.datagram.begin() + hdr + (r.frames[0].size() - hdr));
  const uint32_t seg = gso_segment_len(r.datagram);
  EXPECT_EQ(seg, kBthLen + 256 + kIcrcLen);
  Bytes out(r.datagram.size());
  ASSERT_NE(gso_segment(r.datagram, seg, 1, out), 0u);
  Packet p;
  EXPECT_EQ(parse(Bytes(out.begin(), out.begin() + static_cast<long>(r.frames[1].size())), p),
            ParseError::bad_icrc);
}

TEST(WireGso, AnyBytesAreSafe) {
  // Every prefix of a real batch, and random mutations of it: no crash, no read past the end (ASan),
  // and a segment length only when segment 0 is a RoCEv2 frame with a good ICRC.
  const Batch r =
      make_run(kVariants[0], std::vector<std::pair<uint8_t, uint32_t>>(4, {kSendMiddle, 256}), 3, 0);
  for (size_t n = 0; n <= r.datagram.size(); ++n) {
    Bytes d(r.datagram.begin(), r.datagram.begin() + static_cast<long>(n));
    const uint32_t s = gso_segment_len(d);
    if (s) {
      Bytes out(d.size());
      const uint32_t len = gso_segment(d, s, 0, out);
      ASSERT_NE(len, 0u);
      Packet p;
      EXPECT_EQ(parse(Bytes(out.begin(), out.begin() + len), p), ParseError::ok);
    }
  }
  std::mt19937 rng(7);
  for (int k = 0; k < 3000; ++k) {
    Bytes d = r.datagram;
    for (int m = 0; m < 4; ++m) d[rng() % d.size()] = static_cast<uint8_t>(rng());
    const uint32_t s = gso_segment_len(d);
    Bytes out(d.size());
    for (uint32_t i = 0; s && gso_segment(d, s, i, out); ++i) {
    }
  }
}

// wire/packet.h's batch frames (the same-host path's run of a message's middle packets under the first
// one's headers): packet i cut from one is, byte for byte, the frame built alone for that packet (PSN + i,
// its payload, its ICRC), in every header variant and across the PSN's wrap.
TEST(WireBatch, PacketsCutFromABatchAreTheFramesBuiltAlone) {
  for (const Variant& v : kVariants) {
    SCOPED_TRACE(v.name);
    for (const uint8_t opcode : {uint8_t{op::kRc | op::send_middle}, uint8_t{op::kUc | op::write_middle},
                                 uint8_t{op::kRc | op::read_response_middle}}) {
      const uint32_t k = 5, seg = 1024, psn0 = 0xfffffe;  // (PSNs 0xfffffe, 0xffffff, 0, 1, 2)
      Bytes all = payload_of(k * seg);
      for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint8_t>(all[i] ^ (i >> 10) * 37);
      FrameSpec s = make_spec(opcode, v);
      s.bth.psn = psn0;
      Bytes batch = build(s, all);
      std::fill(batch.end() - kIcrcLen, batch.end(), 0);  // (a batch carries no ICRC)
      Bytes out(seg + 200);
      for (uint32_t i = 0; i < k; ++i) {
        FrameSpec si = s;
        si.bth.psn = psn_add(psn0, i);
        const Bytes alone = build(si, Bytes(all.begin() + i * seg, all.begin() + (i + 1) * seg));
        const uint32_t n = batch_packet(batch, k, i, out);
        ASSERT_EQ(n, alone.size()) << i;
        EXPECT_TRUE(std::equal(alone.begin(), alone.end(), out.begin())) << i;
        Packet p;
        EXPECT_EQ(parse(Bytes(out.begin(), out.begin() + n), p), ParseError::ok);
      }
      EXPECT_EQ(batch_packet(batch, k, k, out), 0u);                           // past the last
      EXPECT_EQ(batch_packet(batch, 1, 0, out), 0u);                           // one packet is no batch
      EXPECT_EQ(batch_packet(batch, 3, 0, out), 0u);                           // payload not k equal parts
      EXPECT_EQ(batch_packet(batch, k, 0, MutByteSpan(out.data(), 100)), 0u);  // no room
    }
  }
  // only middle packets are batched
  for (const uint8_t opcode : {uint8_t{op::kRc | op::send_first}, uint8_t{op::kRc | op::send_last},
                               uint8_t{op::kRc | op::write_only}, uint8_t{op::kUd | op::send_only}}) {
    const Bytes f = build(make_spec(opcode), payload_of(2048));
    Bytes out(4096);
    EXPECT_EQ(batch_packet(f, 2, 0, out), 0u) << int{opcode};
  }
  const Bytes junk = payload_of(300);
  Bytes out(4096);
  EXPECT_EQ(batch_packet(junk, 2, 0, out), 0u);
}

}  // namespace
}  // namespace wire_test
