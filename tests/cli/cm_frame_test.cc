// `urxe cm`'s QP1 frames against kernel rxe's own in pcap-fixtures/: every CM MAD rxe sent is taken by
// parse_qp1_frame, and build_qp1_frame, given what the CM knows of it (addresses, MACs, traffic class, hop
// limit, destination QP, the MAD) and rxe's PSN and IP identification, makes the same bytes: UDP source
// port, BTH, DETH, padding and ICRC as rxe's QP1. Frames that are not CM MADs are refused for their reason.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cm/service/qp1_frame.h"
#include "tools/pcap_decode.h"
#include "wire/mad.h"

using namespace urxe;

namespace {

std::vector<std::vector<uint8_t>> read_capture(const std::string& name) {
  tools::PcapReader r;
  std::string err;
  const std::string path = std::string(URXE_PCAP_FIXTURES) + "/" + name;
  EXPECT_TRUE(r.open(path, err)) << path << ": " << err;
  std::vector<std::vector<uint8_t>> v;
  tools::PcapReader::Frame f;
  while (r.next(f, err) == 1) v.emplace_back(f.eth.begin(), f.eth.end());
  return v;
}

class RxeQp1 : public testing::TestWithParam<const char*> {};

TEST_P(RxeQp1, TakenAndRebuiltByteForByte) {
  size_t mads = 0;
  for (const std::vector<uint8_t>& bytes : read_capture(GetParam())) {
    wire::Packet p;
    if (wire::parse_frame(bytes, p) != wire::ParseError::ok || p.bth.dqpn != wire::kQp1) continue;
    cm::MadIn in;
    ASSERT_EQ(cm::parse_qp1_frame(bytes, in), cm::Qp1Rx::mad) << "frame " << mads;
    EXPECT_EQ(in.src_qp, wire::kQp1);
    EXPECT_EQ(in.pkey, 0xffff);
    EXPECT_EQ(in.smac, p.eth.src);
    ASSERT_EQ(in.mad.size(), wire::kMadSize);

    cm::MadOut out;
    out.sgid = in.sgid;
    out.dgid = in.dgid;
    out.dmac = p.eth.dst;
    out.traffic_class = in.traffic_class;
    out.hop_limit = in.hop_limit;
    out.flow_label = p.ip_version == 6 ? p.ip6.flow_label : 0;
    out.dest_qp = p.bth.dqpn;
    std::copy(in.mad.begin(), in.mad.end(), out.mad.begin());
    std::vector<uint8_t> built(cm::kQp1FrameMax);
    const uint32_t len =
        cm::build_qp1_frame(out, in.smac, p.bth.psn, p.ip_version == 4 ? p.ip4.id : 0, built);
    ASSERT_EQ(len, p.frame_len);
    built.resize(len);
    size_t diff = 0;
    while (diff < len && built[diff] == bytes[diff]) ++diff;
    EXPECT_EQ(diff, len) << "frame " << mads << " differs from rxe's first at byte " << diff << ": "
                         << int{built[diff % len]} << " for " << int{bytes[diff % len]};
    ++mads;
  }
  EXPECT_GE(mads, 4u) << "the capture's CM exchange";
}

INSTANTIATE_TEST_SUITE_P(Captures, RxeQp1,
                         testing::Values("rxe-linlinw5-rdma_cm.pcap", "rxe-qemu-rdma_cm_rping.pcap",
                                         "rxe-qemu-rdma_cm_send_bw.pcap"));

// One of rxe's MADs, then spoilt one way at a time.
TEST(Qp1Frame, RefusedForTheirReason) {
  cm::MadOut out;
  out.sgid = wire::gid_from_ipv4({10, 0, 0, 2});
  out.dgid = wire::gid_from_ipv4({10, 0, 0, 1});
  out.dmac = {2, 0, 0, 0, 0, 1};
  out.mad[0] = 1;
  out.mad[1] = wire::kMgmtClassCm;
  const wire::MacAddr smac{2, 0, 0, 0, 0, 2};
  auto build = [&](const cm::MadOut& o) {
    std::vector<uint8_t> f(cm::kQp1FrameMax);
    f.resize(cm::build_qp1_frame(o, smac, 5, 0, f));
    return f;
  };
  cm::MadIn in;
  std::vector<uint8_t> good = build(out);
  ASSERT_EQ(cm::parse_qp1_frame(good, in), cm::Qp1Rx::mad);
  EXPECT_EQ(in.sgid, out.sgid);
  EXPECT_EQ(in.dgid, out.dgid);
  EXPECT_EQ(in.hop_limit, 64);

  std::vector<uint8_t> f = good;
  f.back() ^= 1;
  EXPECT_EQ(cm::parse_qp1_frame(f, in), cm::Qp1Rx::icrc);
  f = good;
  f.resize(f.size() - 10);
  EXPECT_EQ(cm::parse_qp1_frame(f, in), cm::Qp1Rx::parse);

  cm::MadOut to_qp2 = out;
  to_qp2.dest_qp = 2;
  EXPECT_EQ(cm::parse_qp1_frame(build(to_qp2), in), cm::Qp1Rx::opcode);

  // Q_Key and length: rewrite the frame with wire's builder, which tools' builder is a use of.
  wire::Packet p;
  ASSERT_EQ(wire::parse_frame(good, p), wire::ParseError::ok);
  wire::FrameSpec s;
  s.dst_mac = p.eth.dst;
  s.src_mac = p.eth.src;
  s.src_ip = out.sgid;
  s.dst_ip = out.dgid;
  s.udp_sport = p.udp.sport;
  s.bth = p.bth;
  s.bth.pad = 0;
  s.deth = p.deth;
  s.deth.qkey = 0x11111111;
  std::vector<uint8_t> g(cm::kQp1FrameMax);
  g.resize(wire::build_frame(g, s, p.payload));
  EXPECT_EQ(cm::parse_qp1_frame(g, in), cm::Qp1Rx::qkey);
  s.deth = p.deth;
  g.assign(cm::kQp1FrameMax, 0);
  g.resize(wire::build_frame(g, s, p.payload.first(128)));
  EXPECT_EQ(cm::parse_qp1_frame(g, in), cm::Qp1Rx::length);
}

}  // namespace
