// Congestion notification: frames leave ECN-capable, a CE-marked request is answered with a CNP in the
// ConnectX-4 Lx format (pcap-fixtures/cx4lx-scapy-cnp.pcap), at most one per QP per
// np_min_time_between_cnps, and a CNP received is counted.
#include <cstdio>
#include <string>

#include "tests/sim/loopback.h"
#include "tools/pcap_decode.h"

namespace urxe::engine::test {
namespace {

// Marks an IPv4 frame CE (ECN 11) as a congested hop does: the TOS changes and so does the header checksum;
// the ICRC masks the TOS, so it stays valid.
void mark_ce(const wire::Packet& p, std::vector<uint8_t>& f) {
  uint8_t* ip = &f[p.l3_offset];
  ip[1] |= 3;
  ip[10] = ip[11] = 0;
  const uint16_t c = wire::ipv4_header_checksum(ip, p.l4_offset - p.l3_offset);
  ip[10] = static_cast<uint8_t>(c >> 8);
  ip[11] = static_cast<uint8_t>(c);
}

wire::Packet fixture_cnp(std::vector<uint8_t>& bytes) {
  tools::PcapReader r;
  std::string err;
  const std::string path = std::string(URXE_PCAP_FIXTURES) + "/cx4lx-scapy-cnp.pcap";
  EXPECT_TRUE(r.open(path, err)) << path << ": " << err;
  tools::PcapReader::Frame f;
  EXPECT_EQ(r.next(f, err), 1) << err;
  bytes.assign(f.eth.begin(), f.eth.end());
  wire::Packet p;
  EXPECT_EQ(wire::parse_frame(wire::ByteSpan(bytes.data(), bytes.size()), p), wire::ParseError::ok);
  return p;
}

TEST(Ecn, FramesLeaveEctUnlessDisabled) {
  for (const bool ecn : {true, false}) {
    EngineConfig cfg;
    cfg.ecn = ecn;
    Loopback lb(cfg);
    auto [qa, qb] = lb.connect(QPT_RC);
    post_recv(lb.b(), qb, 0, 64, 1);
    Sge sge{lb.a().addr(0), 64, lb.a().mr.lkey};
    post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, 1));
    ASSERT_EQ(lb.poll(lb.a(), 1).size(), 1u);
    ASSERT_FALSE(lb.link.trace.empty());
    for (const auto& [side, p] : lb.link.trace)
      EXPECT_EQ(p.ip4.tos & 3, ecn ? 2 : 0) << "side " << side << " opcode " << int(p.bth.opcode);
  }
}

TEST(Ecn, CeMarkedRequestsAreAnsweredWithRateLimitedCnpsInConnectXFormat) {
  EngineConfig cfg;
  cfg.np_min_time_between_cnps_ns = 50'000;
  Loopback lb(cfg);
  auto [qa, qb] = lb.connect(QPT_RC);
  lb.link.latency_ns = 20'000;
  int marked = 0;
  lb.link.hook = [&](int side, const wire::Packet& p, std::vector<uint8_t>& bytes) {
    if (side == 0 && p.info && p.info->kind == wire::OpKind::rdma_write) {
      mark_ce(p, bytes);
      marked++;
    }
    return Fate::pass;
  };
  // 20 WRITEs of 4 packets each, one WR at a time with 100 us between posts.
  Sge sge{lb.a().addr(0), 4096, lb.a().mr.lkey};
  for (int i = 0; i < 20; i++) {
    SendWr w = make_wr(WR_RDMA_WRITE, &sge, 1, static_cast<uint64_t>(i));
    w.rdma.remote_addr = lb.b().addr(8192);
    w.rdma.rkey = lb.b().mr.rkey;
    post(lb.a(), qa, w);
    ASSERT_EQ(lb.poll(lb.a(), 1).size(), 1u);
    lb.link.clock.t += 100'000;
  }
  lb.settle(10'000'000);
  EXPECT_EQ(marked, 80);
  EXPECT_EQ(lb.b().eng->counter(Counter::np_ecn_marked_roce_packets), 80u);
  const uint64_t cnps = lb.b().eng->counter(Counter::np_cnp_sent);
  EXPECT_GE(cnps, 20u);  // every WR came 100 us after the last: a CNP each
  EXPECT_LE(cnps, 40u);  // not one per marked packet: 4 packets of a WR come within 50 us
  EXPECT_EQ(lb.a().eng->counter(Counter::rp_cnp_ignored), cnps);  // no rate control yet: counted only

  std::vector<uint8_t> ref_bytes;
  const wire::Packet ref = fixture_cnp(ref_bytes);
  ASSERT_EQ(ref.bth.opcode, wire::op::cnp);
  int seen = 0;
  for (const auto& [side, p] : lb.link.trace) {
    if (p.bth.opcode != wire::op::cnp) continue;
    seen++;
    EXPECT_EQ(side, 1);
    EXPECT_TRUE(p.icrc_ok);
    EXPECT_EQ(p.frame_len, ref.frame_len);
    EXPECT_EQ(p.ip4.tos, ref.ip4.tos);  // DSCP 48, ECT(0)
    EXPECT_EQ(p.ip4.ttl, ref.ip4.ttl);
    EXPECT_EQ(p.udp.sport, ref.udp.sport);  // 0
    EXPECT_EQ(p.udp.length, ref.udp.length);
    EXPECT_EQ(p.bth.pkey, ref.bth.pkey);
    EXPECT_EQ(p.bth.becn, ref.bth.becn);
    EXPECT_EQ(p.bth.fecn, ref.bth.fecn);
    EXPECT_EQ(p.bth.se, ref.bth.se);
    EXPECT_EQ(p.bth.ack_req, ref.bth.ack_req);
    EXPECT_EQ(p.bth.psn, ref.bth.psn);
    EXPECT_EQ(p.bth.dqpn, qa);  // to the QP that sent the marked data
  }
  EXPECT_EQ(static_cast<uint64_t>(seen), cnps);
  std::printf("%d marked packets, %llu CNPs\n", marked, static_cast<unsigned long long>(cnps));
}

}  // namespace
}  // namespace urxe::engine::test
