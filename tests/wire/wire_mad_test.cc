// wire/mad.h without captures: the bit-field accessors, typed CM messages built → encoded → decoded equal,
// the IP CM service ID and header, and every way a MAD can be short or foreign.
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "wire/mad.h"
#include "wire/packet.h"

using namespace urxe::wire;

namespace {

template <typename T>
T round_trip(const T& m, uint64_t tid = 0x1122334455667788ull) {
  CmMad mad{.header = MadHeader{.transaction_id = tid}, .msg = m};
  std::array<uint8_t, kMadSize> buf;
  buf.fill(0xa5);  // the builder must write every byte
  EXPECT_TRUE(build_cm_mad(buf, mad));
  CmMad back;
  EXPECT_EQ(parse_cm_mad(buf, back), MadError::ok);
  EXPECT_EQ(back.header.transaction_id, tid);
  EXPECT_EQ(back.header.attribute_id, cm_attr_id(mad.msg));
  EXPECT_EQ(back.header.method, kMadMethodSend);
  std::array<uint8_t, kMadSize> again{};
  EXPECT_TRUE(build_cm_mad(again, back));
  EXPECT_EQ(again, buf);
  const T* t = std::get_if<T>(&back.msg);
  EXPECT_NE(t, nullptr);
  return t ? *t : T{};
}

TEST(WireMad, FieldAccessorsAreMsbFirstAndLeaveNeighboursAlone) {
  std::array<uint8_t, 12> b{};
  b.fill(0xff);
  put_field(b.data(), MadField{3, 5, 2}, 0);
  EXPECT_EQ(b[3], 0xf9);  // bits 5..6 below the MSB
  EXPECT_EQ(get_field(b.data(), MadField{3, 5, 2}), 0u);
  EXPECT_EQ(get_field(b.data(), MadField{3, 0, 5}), 0x1fu);
  b.fill(0);
  put_field(b.data(), MadField{1, 0, 24}, 0xabcdef12);  // truncated to 24 bits
  EXPECT_EQ(b[0], 0);
  EXPECT_EQ(b[1], 0xcd);
  EXPECT_EQ(b[2], 0xef);
  EXPECT_EQ(b[3], 0x12);
  EXPECT_EQ(b[4], 0);
  put_field(b.data(), MadField{4, 0, 64}, 0x0102030405060708ull);
  EXPECT_EQ(get_field(b.data(), MadField{4, 0, 64}), 0x0102030405060708ull);
  EXPECT_EQ(b[4], 1);
  EXPECT_EQ(b[11], 8);
  b.fill(0);
  put_field(b.data(), MadField{0, 2, 6}, 0x3f);
  EXPECT_EQ(b[0], 0x3f);
}

TEST(WireMad, HeaderLayout) {
  std::array<uint8_t, kMadSize> buf{};
  CmMad mad{.header = MadHeader{.status = 0x0102,
                                .class_specific = 0x0304,
                                .transaction_id = 0x26dc5c06eull,
                                .attribute_modifier = 0xdeadbeef},
            .msg = CmRtu{.local_comm_id = 1, .remote_comm_id = 2}};
  ASSERT_TRUE(build_cm_mad(buf, mad));
  const std::array<uint8_t, 24> want = {1,    7,    2,    3,    1,    2,    3,    4,
                                        0,    0,    0,    2,    0x6d, 0xc5, 0xc0, 0x6e,
                                        0x00, 0x14, 0x00, 0x00, 0xde, 0xad, 0xbe, 0xef};
  EXPECT_TRUE(std::equal(want.begin(), want.end(), buf.begin()));
  EXPECT_EQ(buf[24 + 3], 1);  // RTU local comm ID right after the header
  EXPECT_EQ(buf[24 + 7], 2);
}

TEST(WireMad, ReqRoundTripAndOffsets) {
  CmReq r{.local_comm_id = 0x6ec0c56d,
          .service_id = make_ip_cm_service_id(kPortSpaceTcp, 7174),
          .local_ca_guid = 0x525400fffe770002ull,
          .local_qpn = 0x2c,
          .responder_resources = 1,
          .initiator_depth = 1,
          .remote_cm_response_timeout = 20,
          .transport_service_type = static_cast<uint8_t>(CmTransport::rc),
          .end_to_end_flow_control = true,
          .starting_psn = 0xabcdef,
          .local_cm_response_timeout = 20,
          .retry_count = 7,
          .path_mtu = 3,
          .rnr_retry_count = 7,
          .max_cm_retries = 15,
          .srq = true,
          .primary = {.local_lid = 0xffff,
                      .remote_lid = 0xffff,
                      .local_gid = gid_from_ipv4({10, 77, 0, 12}),
                      .remote_gid = gid_from_ipv4({10, 77, 0, 11}),
                      .flow_label = 0x70bbd,
                      .packet_rate = 0x2a,
                      .hop_limit = 64,
                      .sl = 5,
                      .subnet_local = true,
                      .local_ack_timeout = 17},
          .alternate = {},
          .private_data = {}};
  IpCmHeader ip{.ip_version = 4, .source_port = 0xbd69};
  ip.source_ip[15] = 12;
  ip.destination_ip[15] = 11;
  ASSERT_TRUE(write_ip_cm_header(r.private_data, ip));
  r.private_data[91] = 0x5a;
  EXPECT_EQ(round_trip(r), r);

  std::array<uint8_t, kMadSize> buf{};
  ASSERT_TRUE(build_cm_mad(buf, CmMad{.header = {}, .msg = r}));
  const uint8_t* d = buf.data() + kMadHeaderSize;
  EXPECT_EQ(load_be64(d + 8), 0x0000000001061c06ull);
  EXPECT_EQ(load_be24(d + 32), 0x2cu);
  EXPECT_EQ(d[43], (20 << 3) | (0 << 1) | 1);  // timeout | RC | E2E flow control
  EXPECT_EQ(load_be24(d + 44), 0xabcdefu);
  EXPECT_EQ(d[47], (20 << 3) | 7);
  EXPECT_EQ(load_be16(d + 48), 0xffff);
  EXPECT_EQ(d[50], (3 << 4) | 7);
  EXPECT_EQ(d[51], (15 << 4) | (1 << 3));
  EXPECT_EQ(load_be32(d + 88), (0x70bbdu << 12) | 0x2a);
  EXPECT_EQ(d[93], 64);
  EXPECT_EQ(d[94], (5 << 4) | (1 << 3));
  EXPECT_EQ(d[95], 17 << 3);
  EXPECT_EQ(d[140 + 1], 0x40);
  EXPECT_EQ(d[231], 0x5a);
}

TEST(WireMad, OtherMessagesRoundTrip) {
  CmRep rep{.local_comm_id = 0x11,
            .remote_comm_id = 0x22,
            .local_qkey = 0x33,
            .local_qpn = 0xabcdef,
            .local_eecn = 0x123456,
            .starting_psn = 0xfedcba,
            .responder_resources = 16,
            .initiator_depth = 16,
            .target_ack_delay = 15,
            .failover_accepted = 2,
            .end_to_end_flow_control = true,
            .rnr_retry_count = 7,
            .srq = true,
            .local_ca_guid = 0x0102030405060708ull};
  rep.private_data[0] = 1;
  rep.private_data[195] = 2;
  EXPECT_EQ(round_trip(rep), rep);
  CmRtu rtu{.local_comm_id = 5, .remote_comm_id = 6};
  rtu.private_data[223] = 9;
  EXPECT_EQ(round_trip(rtu), rtu);
  CmRej rej{.local_comm_id = 0,
            .remote_comm_id = 7,
            .message_rejected = 0,
            .reject_info_length = 8,
            .reason = static_cast<uint16_t>(CmRejReason::timeout)};
  rej.additional_reject_information[7] = 0x77;
  rej.private_data[147] = 0x99;
  EXPECT_EQ(round_trip(rej), rej);
  CmMra mra{.local_comm_id = 1, .remote_comm_id = 2, .message_mraed = 1, .service_timeout = 24};
  EXPECT_EQ(round_trip(mra), mra);
  CmDreq dreq{.local_comm_id = 1, .remote_comm_id = 2, .remote_qpn = 0x2b};
  EXPECT_EQ(round_trip(dreq), dreq);
  CmDrep drep{.local_comm_id = 2, .remote_comm_id = 1};
  EXPECT_EQ(round_trip(drep), drep);
  CmSidrReq sreq{
      .request_id = 3, .partition_key = 0xffff, .service_id = make_ip_cm_service_id(kPortSpaceUdp, 1)};
  EXPECT_EQ(round_trip(sreq), sreq);
  CmSidrRep srep{.request_id = 3,
                 .status = 0,
                 .additional_info_length = 0,
                 .qpn = 0x44,
                 .service_id = sreq.service_id,
                 .qkey = 0x01234567};
  srep.class_port_info[71] = 1;
  EXPECT_EQ(round_trip(srep), srep);

  // Fixed offsets the kernel reads (see wire/README.md).
  std::array<uint8_t, kMadSize> buf{};
  ASSERT_TRUE(build_cm_mad(buf, CmMad{.header = {}, .msg = rep}));
  const uint8_t* d = buf.data() + kMadHeaderSize;
  EXPECT_EQ(load_be24(d + 12), 0xabcdefu);
  EXPECT_EQ(load_be24(d + 20), 0xfedcbau);
  EXPECT_EQ(d[26], (15 << 3) | (2 << 1) | 1);
  EXPECT_EQ(d[27], (7 << 5) | (1 << 4));
  ASSERT_TRUE(build_cm_mad(buf, CmMad{.header = {}, .msg = rej}));
  EXPECT_EQ(d[9], 8 << 1);
  EXPECT_EQ(load_be16(d + 10), 4);
  ASSERT_TRUE(build_cm_mad(buf, CmMad{.header = {}, .msg = mra}));
  EXPECT_EQ(d[8], 1 << 6);
  EXPECT_EQ(d[9], 24 << 3);
}

TEST(WireMad, IpCmServiceId) {
  const uint64_t sid = make_ip_cm_service_id(kPortSpaceTcp, 18515);
  EXPECT_EQ(sid, 0x0000000001064853ull);
  EXPECT_TRUE(is_ip_cm_service_id(sid));
  EXPECT_EQ(ip_cm_port_space(sid), kPortSpaceTcp);
  EXPECT_EQ(ip_cm_port(sid), 18515);
  EXPECT_FALSE(is_ip_cm_service_id(0x0000000002064853ull));
}

TEST(WireMad, IpCmHeader) {
  std::array<uint8_t, 36> pd{};
  IpCmHeader h{.ip_version = 6, .source_port = 0x1234};
  h.source_ip[0] = 0xfe;
  h.destination_ip[15] = 1;
  ASSERT_TRUE(write_ip_cm_header(pd, h));
  EXPECT_EQ(pd[1], 0x60);
  IpCmHeader back;
  ASSERT_TRUE(parse_ip_cm_header(pd, back));
  EXPECT_EQ(back, h);
  EXPECT_FALSE(parse_ip_cm_header(std::span(pd).first(35), back));
  pd[1] = 0x50;
  EXPECT_FALSE(parse_ip_cm_header(pd, back));
  std::array<uint8_t, 35> small{};
  EXPECT_FALSE(write_ip_cm_header(small, h));
  IpCmHeader v4{.ip_version = 4};
  v4.source_ip[12] = 10;
  v4.source_ip[15] = 9;
  EXPECT_EQ(ip_cm_addr_to_gid(v4, v4.source_ip), gid_from_ipv4({10, 0, 0, 9}));
}

TEST(WireMad, ShortAndForeignMads) {
  std::array<uint8_t, kMadSize> buf{};
  ASSERT_TRUE(build_cm_mad(buf, CmMad{.header = {}, .msg = CmRtu{}}));
  CmMad out;
  for (size_t n = 0; n < kMadSize; ++n) {
    std::vector<uint8_t> part(buf.begin(),
                              buf.begin() + static_cast<long>(n));  // exact size, ASan sees overreads
    EXPECT_EQ(parse_cm_mad(part, out), MadError::truncated) << n;
  }
  std::array<uint8_t, kMadSize - 1> small{};
  EXPECT_FALSE(build_cm_mad(small, CmMad{}));
  auto with = [&](size_t i, uint8_t v) {
    auto b = buf;
    b[i] = v;
    return parse_cm_mad(b, out);
  };
  EXPECT_EQ(with(0, 2), MadError::bad_base_version);
  EXPECT_EQ(with(1, 0x81), MadError::not_cm);
  EXPECT_EQ(with(2, 1), MadError::bad_class_version);
  EXPECT_EQ(with(17, 0x19), MadError::unsupported);  // LAP
  EXPECT_EQ(with(17, 0x1a), MadError::unsupported);  // APR
  EXPECT_EQ(with(17, 0x01), MadError::unsupported);  // ClassPortInfo
  EXPECT_EQ(with(17, 0x1b), MadError::unknown_attribute);
  EXPECT_EQ(cm_attr_name(0x0013), "REP");
  EXPECT_EQ(cm_attr_name(0x1b), "?");
}

TEST(WireMad, Qp1Recognition) {
  std::array<uint8_t, kMadSize> mad{};
  ASSERT_TRUE(build_cm_mad(mad, CmMad{.header = {}, .msg = CmRtu{.local_comm_id = 9}}));
  FrameSpec s;
  s.src_ip = gid_from_ipv4({10, 0, 0, 1});
  s.dst_ip = gid_from_ipv4({10, 0, 0, 2});
  s.bth.opcode = make_opcode(op::kUd, op::send_only);
  s.bth.dqpn = kQp1;
  s.deth = Deth{kQp1Qkey, kQp1};
  std::array<uint8_t, 512> frame{};
  uint32_t n = build_frame(frame, s, mad);
  ASSERT_GT(n, 0u);
  Packet p;
  ASSERT_EQ(parse_frame(std::span(frame).first(n), p), ParseError::ok);
  ByteSpan got = qp1_mad(p);
  ASSERT_EQ(got.size(), kMadSize);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), mad.begin()));

  auto recognised = [&](FrameSpec t, ByteSpan payload) {
    std::array<uint8_t, 512> f{};
    uint32_t len = build_frame(f, t, payload);
    Packet q;
    EXPECT_EQ(parse_frame(std::span(f).first(len), q), ParseError::ok);
    return !qp1_mad(q).empty();
  };
  EXPECT_TRUE(recognised(s, mad));
  FrameSpec t = s;
  t.bth.dqpn = 2;
  EXPECT_FALSE(recognised(t, mad));
  t = s;
  t.deth.qkey = 0x01234567;
  EXPECT_FALSE(recognised(t, mad));
  EXPECT_FALSE(recognised(s, std::span(mad).first(255)));
  t = s;
  t.bth.opcode = make_opcode(op::kRc, op::send_only);
  EXPECT_FALSE(recognised(t, mad));
  EXPECT_TRUE(qp1_mad(Packet{}).empty());
}

}  // namespace
