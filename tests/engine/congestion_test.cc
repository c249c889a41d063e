// Congestion notification: frames leave ECN-capable, a CE-marked request is answered with a CNP in the
// ConnectX-4 Lx format (pcap-fixtures/cx4lx-scapy-cnp.pcap), at most one per QP per
// np_min_time_between_cnps, and a CNP received is counted.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
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
  cfg.dcqcn.np_min_time_between_cnps = 50;  // us
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
  EXPECT_EQ(lb.a().eng->counter(Counter::rp_cnp_handled), cnps);  // each reached the sending QP
  EXPECT_EQ(lb.a().eng->counter(Counter::rp_cnp_ignored), 0u);

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

// Virtual time for `n` 64 KiB WRITEs posted at once, with CE marks on A's data while `mark` says so.
struct BurstRun {
  uint64_t ns = 0, cnps_handled = 0;
  bool data_ok = false;
};
BurstRun write_burst(Loopback& lb, uint32_t qa, int n, const std::function<bool()>& mark) {
  lb.link.hook = [&](int side, const wire::Packet& p, std::vector<uint8_t>& bytes) {
    if (side == 0 && p.info && p.info->kind == wire::OpKind::rdma_write && mark()) mark_ce(p, bytes);
    return Fate::pass;
  };
  fill(lb.a().mem, 0, 65536, 7);
  Sge sge{lb.a().addr(0), 65536, lb.a().mr.lkey};
  const uint64_t t0 = lb.link.clock.t, h0 = lb.a().eng->counter(Counter::rp_cnp_handled);
  for (int i = 0; i < n; i++) {
    SendWr w = make_wr(WR_RDMA_WRITE, &sge, 1, static_cast<uint64_t>(i));
    w.rdma.remote_addr = lb.b().addr(65536);
    w.rdma.rkey = lb.b().mr.rkey;
    post(lb.a(), qa, w);
  }
  BurstRun r;
  const auto wc = lb.poll(lb.a(), static_cast<size_t>(n), 60'000'000'000ull);
  r.ns = lb.link.clock.t - t0;
  r.cnps_handled = lb.a().eng->counter(Counter::rp_cnp_handled) - h0;
  r.data_ok = wc.size() == static_cast<size_t>(n) &&
              std::all_of(wc.begin(), wc.end(), [](const Wc& w) { return w.status == WC_SUCCESS; }) &&
              std::memcmp(lb.a().mem.data(), lb.b().mem.data() + 65536, 65536) == 0;
  lb.link.hook = nullptr;
  return r;
}

// The receiver as a congestion point: frames that waited deeper than np_rx_ring_mark_frames in the receive
// ring are answered as if CE-marked (a CNP to their sender, which slows down), without any CE on the wire.
TEST(Ecn, FramesDeepInTheReceiveRingAreAnsweredAsIfMarked) {
  for (const uint32_t threshold : {64u, 0u}) {
    EngineConfig cfg;
    cfg.dcqcn.np_rx_ring_mark_enable = threshold != 0;
    cfg.dcqcn.np_rx_ring_mark_frames = threshold;
    Loopback lb(cfg);
    auto [qa, qb] = lb.connect(QPT_RC);
    lb.link.latency_ns = 10'000;
    // One 128-packet WRITE (path MTU 1024): the sender's window lets all of it out at once, so all 128
    // frames wait in the receiver's ring when it next drains.
    Sge sge{lb.a().addr(0), 128 * 1024, lb.a().mr.lkey};
    post(lb.a(), qa, make_rdma_wr(WR_RDMA_WRITE, &sge, lb.b().addr(0), lb.b().mr.rkey));
    const auto wc = lb.poll(lb.a(), 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, WC_SUCCESS);
    Engine& rx = *lb.b().eng;
    EXPECT_EQ(rx.counter(Counter::np_ecn_marked_roce_packets), 0u);  // nothing marked on the wire
    if (threshold) {
      EXPECT_EQ(rx.counter(Counter::np_rx_backlog_marked), 128u - threshold);  // the frames past it
      EXPECT_EQ(rx.counter(Counter::np_cnp_sent), 1u);  // all in one drain: one CNP (per-QP limit)
      EXPECT_EQ(lb.a().eng->counter(Counter::rp_cnp_handled), 1u);
      EXPECT_GT(lb.a().eng->qp_rate_mbps(qa), 0u);  // the sender is paced now
    } else {
      EXPECT_EQ(rx.counter(Counter::np_rx_backlog_marked), 0u);
      EXPECT_EQ(rx.counter(Counter::np_cnp_sent), 0u);
      EXPECT_EQ(lb.a().eng->qp_rate_mbps(qa), 0u);
    }
  }
}

// The DCQCN tests' engines: line rate 10 Gbit/s (64 KiB in ~52 us), CE on the wire only (the loopback
// delivers whole bursts at once, which would look like a deep receive ring).
EngineConfig dcqcn_config(uint32_t min_rate_mbps = EngineConfig::Dcqcn{}.rp_min_rate) {
  EngineConfig cfg;
  cfg.dcqcn.rp_max_rate = 10000;
  cfg.dcqcn.rp_min_rate = min_rate_mbps;
  cfg.dcqcn.np_rx_ring_mark_enable = 0;
  return cfg;
}

// The reaction point: CNPs cut the sender's rate (the same WRITEs take longer while marked), and without
// marks the rate recovers on the timers (after an idle second the burst is as fast as before).
TEST(Dcqcn, CnpsCutTheRateAndTimersRecoverIt) {
  Loopback lb(dcqcn_config(), 1500, 4 << 20);
  auto [qa, qb] = lb.connect(QPT_RC);
  lb.link.latency_ns = 5'000;
  const BurstRun clean = write_burst(lb, qa, 20, [] { return false; });
  ASSERT_TRUE(clean.data_ok);
  EXPECT_EQ(clean.cnps_handled, 0u);
  const BurstRun marked = write_burst(lb, qa, 20, [] { return true; });
  ASSERT_TRUE(marked.data_ok);
  EXPECT_GT(marked.cnps_handled, 0u);
  // Paced from line rate down: at least 4 times slower than the unpaced burst.
  EXPECT_GT(marked.ns, 4 * clean.ns) << "clean " << clean.ns << " ns, marked " << marked.ns << " ns";
  const uint32_t slowed = lb.a().eng->qp_rate_mbps(qa);
  EXPECT_GT(slowed, 0u);
  EXPECT_LT(slowed, 5000u);          // under half the line rate
  lb.link.clock.t += 1'000'000'000;  // one idle second: ~3,300 increase periods
  const BurstRun after = write_burst(lb, qa, 20, [] { return false; });
  ASSERT_TRUE(after.data_ok);
  EXPECT_EQ(lb.a().eng->qp_rate_mbps(qa), 0u);  // back at line rate: unpaced
  EXPECT_LT(after.ns, 2 * clean.ns) << "clean " << clean.ns << " ns, after recovery " << after.ns << " ns";
  std::printf("20 x 64 KiB: clean %.0f us, CE-marked %.0f us (%llu CNPs), after 1 s idle %.0f us\n",
              static_cast<double>(clean.ns) / 1e3, static_cast<double>(marked.ns) / 1e3,
              static_cast<unsigned long long>(marked.cnps_handled), static_cast<double>(after.ns) / 1e3);
}

// The engine off the CPU while a paced sender's frames are due (a loaded machine) is not time its rate
// recovers in: the CNPs of that time are read in one go and cut once, so the periods it hid must not count
// as increases either. An idle QP's rate does recover over the same time.
TEST(Dcqcn, AStalledEngineDoesNotCountTheStallAsRecovery) {
  // rate after a 20 ms jump of the clock with the QP paced and frames due (stalled) or with nothing posted
  auto rate_after_jump = [](bool stalled, uint32_t& before) {
    Loopback lb(dcqcn_config(), 1500, 4 << 20);
    auto [qa, qb] = lb.connect(QPT_RC);
    lb.link.latency_ns = 5'000;
    EXPECT_TRUE(write_burst(lb, qa, 20, [] { return true; }).data_ok);
    lb.settle(1'000'000);
    Sge sge{lb.a().addr(0), 65536, lb.a().mr.lkey};
    before = lb.a().eng->qp_rate_mbps(qa);
    if (stalled) {
      for (int i = 0; i < 4; i++)
        post(lb.a(), qa, make_rdma_wr(WR_RDMA_WRITE, &sge, lb.b().addr(65536), lb.b().mr.rkey));
      lb.a().eng->progress();  // sends what its rate allows, then waits for its pacing time
      before = lb.a().eng->qp_rate_mbps(qa);
      lb.link.clock.t += 20'000'000;
      lb.a().eng->progress();
    } else {
      lb.link.clock.t += 20'000'000;
      post(lb.a(), qa, make_rdma_wr(WR_RDMA_WRITE, &sge, lb.b().addr(65536), lb.b().mr.rkey));
      lb.a().eng->progress();
    }
    const uint32_t r = lb.a().eng->qp_rate_mbps(qa);
    lb.settle();
    return r;
  };
  uint32_t stalled0 = 0, idle0 = 0;
  const uint32_t stalled = rate_after_jump(true, stalled0), idle = rate_after_jump(false, idle0);
  ASSERT_GT(stalled0, 0u);
  ASSERT_LT(stalled0, 5000u);  // paced after the marked burst
  EXPECT_EQ(stalled0, idle0);  // the same start
  // 20 ms are ~66 increase periods: hyper increases add ~3 Gbit/s (or unpaced at 10). A stall counts at
  // most the grace and the wait for the pacing time: a period or two.
  EXPECT_TRUE(idle == 0 || idle > stalled0 + 2000) << "idle " << idle << ", from " << idle0;
  EXPECT_GT(stalled, 0u);
  EXPECT_LT(stalled, stalled0 + 500) << "from " << stalled0;
  std::printf("rate %u Mbit/s; after 20 ms stalled with frames due %u, after 20 ms idle %u\n", stalled0,
              stalled, idle);
}

// A round over many QPs takes time, and the clock read at its start falls behind: a paced QP must be paced
// by the clock of now, not by that reading, or each round lets one frame through whatever the rate (with
// 1,000 QPs on one path through a veth, a QP's next frame then waited past its retransmit timeout). Here
// every read of the clock finds it 10 us later, longer than a frame takes at the QP's rate (held at
// 1-5 Gbit/s): one round sends many frames of a 64 KiB WRITE.
TEST(Dcqcn, APacedQpIsPacedByTheClockOfNowWithinARound) {
  Loopback lb(dcqcn_config(1000), 1500, 4 << 20);  // at least 1 Gbit/s: 1 KiB frames at most ~9 us apart
  auto [qa, qb] = lb.connect(QPT_RC);
  lb.link.latency_ns = 5'000;
  ASSERT_TRUE(write_burst(lb, qa, 20, [] { return true; }).data_ok);
  const uint32_t rate = lb.a().eng->qp_rate_mbps(qa);
  ASSERT_GE(rate, 1000u);
  ASSERT_LT(rate, 5000u);  // paced
  lb.settle(1'000'000);
  fill(lb.a().mem, 0, 65536, 3);
  Sge sge{lb.a().addr(0), 65536, lb.a().mr.lkey};
  post(lb.a(), qa, make_rdma_wr(WR_RDMA_WRITE, &sge, lb.b().addr(65536), lb.b().mr.rkey));
  lb.link.clock.read_step_ns = 10'000;
  const uint64_t sent0 = lb.a().eng->counter(Counter::sent_pkts);
  lb.a().eng->progress();
  const uint64_t sent = lb.a().eng->counter(Counter::sent_pkts) - sent0;
  lb.link.clock.read_step_ns = 0;
  EXPECT_GE(sent, 8u) << "rate " << rate << " Mbit/s";
  const auto wc = lb.poll(lb.a(), 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data() + 65536, 65536));
}

// READ responses are the responder's data and are paced too: CE on them reaches the responder as CNPs
// (from the requester, whose receive side they congest), and the same READs then take longer.
TEST(Dcqcn, CnpsPaceTheResponderReadResponses) {
  Loopback lb(dcqcn_config(), 1500, 4 << 20);
  auto [qa, qb] = lb.connect(QPT_RC);
  lb.link.latency_ns = 5'000;
  fill(lb.b().mem, 0, 65536, 9);
  auto burst = [&](bool mark) {
    lb.link.hook = [&, mark](int side, const wire::Packet& p, std::vector<uint8_t>& bytes) {
      if (side == 1 && p.info && p.info->kind == wire::OpKind::rdma_read_response && mark) mark_ce(p, bytes);
      return Fate::pass;
    };
    Sge sge{lb.a().addr(65536), 65536, lb.a().mr.lkey};
    const uint64_t t0 = lb.link.clock.t;
    for (int i = 0; i < 10; i++) {
      SendWr w = make_wr(WR_RDMA_READ, &sge, 1, static_cast<uint64_t>(i));
      w.rdma.remote_addr = lb.b().addr(0);
      w.rdma.rkey = lb.b().mr.rkey;
      post(lb.a(), qa, w);
    }
    const auto wc = lb.poll(lb.a(), 10, 60'000'000'000ull);
    EXPECT_EQ(wc.size(), 10u);
    for (const Wc& w : wc) EXPECT_EQ(w.status, WC_SUCCESS);
    EXPECT_EQ(0, std::memcmp(lb.a().mem.data() + 65536, lb.b().mem.data(), 65536));
    lb.link.hook = nullptr;
    return lb.link.clock.t - t0;
  };
  const uint64_t clean = burst(false);
  EXPECT_EQ(lb.b().eng->counter(Counter::rp_cnp_handled), 0u);
  const uint64_t marked = burst(true);
  lb.settle(1'000'000);                                      // the last CNPs arrive
  EXPECT_GT(lb.a().eng->counter(Counter::np_cnp_sent), 0u);  // the requester
  EXPECT_EQ(lb.b().eng->counter(Counter::rp_cnp_handled), lb.a().eng->counter(Counter::np_cnp_sent));
  EXPECT_GT(lb.b().eng->qp_rate_mbps(qb), 0u);  // the responder is paced
  EXPECT_GT(marked, 4 * clean) << "clean " << clean << " ns, marked " << marked << " ns";
}

}  // namespace
}  // namespace urxe::engine::test
