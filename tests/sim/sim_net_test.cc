// Tests of the simulated network itself: what the engine tests rely on it for (delivery, timing, each fault
// at its configured rate, corruption that the ICRC catches, determinism per seed, buffer-pool accounting).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "tests/sim/sim_net.h"
#include "wire/packet.h"

namespace urxe::sim {
namespace {

struct Rx {
  uint32_t psn;
  uint64_t time;
  wire::ParseError err;
  uint32_t len;
  uint8_t ecn;
};

class SimNetTest : public ::testing::Test {
 protected:
  void make(uint64_t seed, const LinkConfig& link, uint32_t pool = 4096) {
    net_ = std::make_unique<SimNet>(seed);
    for (uint32_t i = 0; i < 2; ++i) {
      PortConfig pc;
      pc.mac = sim_mac(i);
      pc.gids = {sim_gid_v4(i)};
      pc.pool_bufs = pool;
      net_->add_port(pc);
    }
    net_->connect(0, 1, link);
    // Port 1's node drains everything it receives and records it.
    net_->add_node(
        {[this] {
           engine::PacketBuf b[32];
           uint32_t n;
           while ((n = net_->port(1).rx_burst(b, 32)) > 0) {
             for (uint32_t i = 0; i < n; ++i) {
               wire::Packet p;
               auto e = wire::parse_frame(wire::ByteSpan(b[i].data, b[i].len), p);
               rx_.push_back({p.bth.psn, net_->now_ns(), e, b[i].len, static_cast<uint8_t>(p.ip4.tos & 3)});
             }
             net_->port(1).rx_free(b, n);
           }
           return false;
         },
         [] { return ~0ull; }});
  }
  // One RC SEND_ONLY from port 0 to port 1 with `payload` bytes; the PSN numbers the frame.
  bool send(uint32_t psn, uint32_t payload, uint8_t traffic_class = 0) {
    wire::FrameSpec s;
    s.traffic_class = traffic_class;
    s.src_mac = sim_mac(0);
    s.dst_mac = sim_mac(1);
    s.src_ip = sim_gid_v4(0);
    s.dst_ip = sim_gid_v4(1);
    s.bth.opcode = wire::op::send_only;
    s.bth.dqpn = 17;
    s.bth.psn = psn;
    std::vector<uint8_t> body(payload, static_cast<uint8_t>(psn));
    engine::PacketBuf b;
    uint32_t size = wire::frame_size(s, payload);
    if (!net_->port(0).tx_alloc(size, b)) return false;
    b.len = wire::build_frame(wire::MutByteSpan(b.data, size), s, body);
    EXPECT_EQ(b.len, size);
    return net_->port(0).tx_burst(&b, 1) == 1;
  }
  void drain() { net_->run_until_idle(~0ull); }

  std::unique_ptr<SimNet> net_;
  std::vector<Rx> rx_;
};

TEST_F(SimNetTest, DeliversInOrderAfterLatency) {
  LinkConfig l;
  l.latency_ns = 5000;
  make(1, l);
  for (uint32_t i = 0; i < 100; ++i) ASSERT_TRUE(send(i, i * 13));
  drain();
  ASSERT_EQ(rx_.size(), 100u);
  for (uint32_t i = 0; i < 100; ++i) {
    EXPECT_EQ(rx_[i].psn, i);
    EXPECT_EQ(rx_[i].err, wire::ParseError::ok);
    EXPECT_EQ(rx_[i].time, 5000u);  // all sent at t=0, no rate limit
  }
  EXPECT_EQ(net_->port(0).free_bufs(), net_->port(0).pool_size());  // every buffer back in its pool
  EXPECT_EQ(net_->port(1).held_by_user(), 0u);
}

TEST_F(SimNetTest, RateSerialisesFrames) {
  LinkConfig l;
  l.latency_ns = 0;
  l.rate_bps = 8'000'000'000;  // 1 byte per ns
  make(1, l);
  for (uint32_t i = 0; i < 3; ++i) ASSERT_TRUE(send(i, 958));
  drain();
  ASSERT_EQ(rx_.size(), 3u);
  EXPECT_EQ(rx_[0].time, rx_[0].len);
  EXPECT_EQ(rx_[2].time, 3ull * rx_[0].len);
}

// The egress queue: frames beyond queue_limit_bytes are dropped; ECN-capable frames are marked CE from
// ecn_kmin_bytes on (always past ecn_kmax_bytes), others never; marked frames still parse (IPv4 checksum
// redone, ICRC untouched by the ECN bits).
TEST_F(SimNetTest, QueueDropsAtItsLimitAndMarksEcnCapableFrames) {
  LinkConfig l;
  l.latency_ns = 0;
  l.rate_bps = 8'000'000'000;  // 1 byte per ns; nothing drains while the frames are sent at t = 0
  l.queue_limit_bytes = 50'000;
  l.ecn_kmin_bytes = 10'000;
  l.ecn_kmax_bytes = 20'000;
  l.ecn_pmax = 0.5;
  make(5, l);
  uint32_t frame = 0;
  for (uint32_t i = 0; i < 100; ++i) ASSERT_TRUE(send(i, 958, i % 2 ? 2 : 0));  // odd PSNs ECT(0)
  drain();
  frame = rx_.at(0).len;
  const auto& st = net_->link_stats(0, 1);
  const uint32_t fit = 50'000 / frame;
  EXPECT_EQ(rx_.size(), fit);
  EXPECT_EQ(st.queue_drops, 100 - fit);
  EXPECT_LE(st.max_queue_bytes, 50'000u);
  uint32_t marked = 0;
  for (const Rx& r : rx_) {
    EXPECT_EQ(r.err, wire::ParseError::ok) << r.psn;
    const uint64_t queued_before = uint64_t{r.psn} * frame;
    if (r.psn % 2 == 0) {
      EXPECT_EQ(r.ecn, 0) << "a frame that is not ECN-capable was marked: " << r.psn;
    } else if (queued_before <= l.ecn_kmin_bytes) {
      EXPECT_EQ(r.ecn, 2) << r.psn;
    } else if (queued_before >= l.ecn_kmax_bytes) {
      EXPECT_EQ(r.ecn, 3) << r.psn;
    }
    marked += r.ecn == 3;
  }
  EXPECT_EQ(st.ce_marked, marked);
  EXPECT_GT(marked, 10u);
}

TEST(SimNetMarkCe, Ipv6TrafficClassKeepsDscp) {
  wire::FrameSpec s;
  s.src_mac = sim_mac(0);
  s.dst_mac = sim_mac(1);
  s.src_ip = sim_gid_v6(0);
  s.dst_ip = sim_gid_v6(1);
  s.ip_version = 6;
  s.traffic_class = 0xb8 | 2;  // DSCP 46, ECT(0)
  s.bth.opcode = wire::op::send_only;
  std::vector<uint8_t> f(wire::frame_size(s, 16));
  const std::vector<uint8_t> body(16, 7);
  ASSERT_EQ(wire::build_frame(wire::MutByteSpan(f.data(), f.size()), s, body), f.size());
  ASSERT_TRUE(mark_ce(f.data(), static_cast<uint32_t>(f.size())));
  wire::Packet p;
  ASSERT_EQ(wire::parse_frame(wire::ByteSpan(f.data(), f.size()), p), wire::ParseError::ok);
  EXPECT_EQ(p.ip6.traffic_class, 0xb8 | 3);
  s.traffic_class = 0xb8;  // not ECN-capable: left alone
  ASSERT_EQ(wire::build_frame(wire::MutByteSpan(f.data(), f.size()), s, body), f.size());
  EXPECT_FALSE(mark_ce(f.data(), static_cast<uint32_t>(f.size())));
}

TEST_F(SimNetTest, DropRateMatchesConfig) {
  LinkConfig l;
  l.drop = 0.1;
  make(7, l);
  const uint32_t n = 20000;
  for (uint32_t i = 0; i < n; ++i) {
    ASSERT_TRUE(send(i, 8));
    if (i % 1000 == 999) drain();  // keep the pool from running dry
  }
  drain();
  auto& st = net_->link_stats(0, 1);
  EXPECT_EQ(st.sent, n);
  EXPECT_EQ(st.dropped + rx_.size(), n);
  double sd = std::sqrt(n * 0.1 * 0.9);
  EXPECT_NEAR(static_cast<double>(st.dropped), n * 0.1, 5 * sd);
  for (size_t i = 1; i < rx_.size(); ++i) EXPECT_LT(rx_[i - 1].psn, rx_[i].psn);  // drops never reorder
}

uint32_t inversions(const std::vector<Rx>& rx) {
  uint32_t inv = 0;
  for (size_t i = 1; i < rx.size(); ++i) inv += rx[i].psn < rx[i - 1].psn;
  return inv;
}

TEST_F(SimNetTest, ReorderHoldsFramesBack) {
  LinkConfig l;
  l.reorder = 0.2;
  l.reorder_delay_ns = 10000;
  make(3, l);
  // One frame per µs: a frame held back 10 µs is overtaken by about ten others.
  for (uint32_t i = 0; i < 2000; ++i) {
    ASSERT_TRUE(send(i, 8));
    net_->run_until([] { return false; }, net_->now_ns() + 1000);
  }
  drain();
  ASSERT_EQ(rx_.size(), 2000u);
  auto& st = net_->link_stats(0, 1);
  EXPECT_GT(st.reordered, 300u);
  EXPECT_LT(st.reordered, 500u);
  EXPECT_GT(inversions(rx_), 0u);
  EXPECT_LE(inversions(rx_), st.reordered);
}

TEST_F(SimNetTest, JitterAloneReorders) {
  LinkConfig l;
  l.jitter_ns = 5000;
  make(3, l);
  for (uint32_t i = 0; i < 1000; ++i) {
    ASSERT_TRUE(send(i, 8));
    net_->run_until([] { return false; }, net_->now_ns() + 500);
  }
  drain();
  EXPECT_EQ(rx_.size(), 1000u);
  EXPECT_GT(inversions(rx_), 0u);
}

TEST_F(SimNetTest, NoFaultsNoReorder) {
  make(3, LinkConfig{});
  for (uint32_t i = 0; i < 1000; ++i) ASSERT_TRUE(send(i, i % 1400));
  drain();
  EXPECT_EQ(rx_.size(), 1000u);
  EXPECT_EQ(inversions(rx_), 0u);
}

TEST_F(SimNetTest, DuplicatesAreExtraCopies) {
  LinkConfig l;
  l.duplicate = 0.25;
  make(5, l);
  for (uint32_t i = 0; i < 2000; ++i) {
    ASSERT_TRUE(send(i, 100));
    if (i % 500 == 499) drain();
  }
  drain();
  auto& st = net_->link_stats(0, 1);
  EXPECT_GT(st.duplicated, 400u);
  EXPECT_LT(st.duplicated, 600u);
  EXPECT_EQ(rx_.size(), 2000u + st.duplicated);
  std::vector<uint32_t> seen(2000);
  for (auto& r : rx_) {
    EXPECT_EQ(r.err, wire::ParseError::ok);
    ++seen[r.psn];
  }
  for (uint32_t c : seen) EXPECT_GE(c, 1u);
  EXPECT_EQ(net_->port(0).free_bufs(), net_->port(0).pool_size());
}

TEST_F(SimNetTest, EveryCorruptedFrameFailsParse) {
  LinkConfig l;
  l.corrupt = 0.3;
  make(11, l);
  for (uint32_t i = 0; i < 3000; ++i) {
    ASSERT_TRUE(send(i, i % 1400));
    if (i % 500 == 499) drain();
  }
  drain();
  auto& st = net_->link_stats(0, 1);
  ASSERT_EQ(rx_.size(), 3000u);
  uint32_t bad = 0, bad_icrc = 0;
  for (auto& r : rx_) {
    bad += r.err != wire::ParseError::ok;
    bad_icrc += r.err == wire::ParseError::bad_icrc;
  }
  EXPECT_GT(st.corrupted, 800u);
  EXPECT_EQ(bad, st.corrupted);           // each corrupted frame detected, no clean frame rejected
  EXPECT_GT(bad_icrc, st.corrupted / 2);  // most flips land in the payload/BTH and only the ICRC sees them
}

TEST_F(SimNetTest, OversizeFramesDropped) {
  LinkConfig l;
  l.mtu = 1024;
  make(1, l);
  // IP + UDP + BTH + ICRC = 20 + 8 + 12 + 4 = 44 bytes of overhead within the IP MTU.
  ASSERT_TRUE(send(0, 1024 - 44));
  ASSERT_TRUE(send(1, 1024 - 44 + 1));
  drain();
  ASSERT_EQ(rx_.size(), 1u);
  EXPECT_EQ(rx_[0].psn, 0u);
  EXPECT_EQ(net_->link_stats(0, 1).oversize, 1u);
}

TEST_F(SimNetTest, PoolExhaustionIsBackpressure) {
  make(1, LinkConfig{}, 8);
  for (uint32_t i = 0; i < 8; ++i) ASSERT_TRUE(send(i, 8));
  engine::PacketBuf b;
  EXPECT_FALSE(net_->port(0).tx_alloc(64, b));
  EXPECT_EQ(net_->port(0).tx_alloc_failures(), 1u);
  drain();
  EXPECT_EQ(net_->port(0).free_bufs(), 8u);
  EXPECT_TRUE(send(8, 8));
}

TEST_F(SimNetTest, SameSeedSameRunOtherSeedOtherRun) {
  auto trace = [this](uint64_t seed) {
    LinkConfig l;
    l.drop = 0.05;
    l.duplicate = 0.05;
    l.reorder = 0.05;
    l.corrupt = 0.05;
    l.jitter_ns = 3000;
    rx_.clear();
    make(seed, l);
    for (uint32_t i = 0; i < 500; ++i) {
      EXPECT_TRUE(send(i, i % 300));
      net_->run_until([] { return false; }, net_->now_ns() + 700);
    }
    drain();
    std::vector<uint64_t> t;
    for (auto& r : rx_) t.push_back((uint64_t{r.psn} << 40) ^ r.time ^ (uint64_t(r.err) << 60));
    return t;
  };
  auto a = trace(42), b = trace(42), c = trace(43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST_F(SimNetTest, NodeDeadlineAdvancesTime) {
  make(1, LinkConfig{});
  uint64_t wake = 5'000'000, woke_at = 0;
  net_->add_node({[&] {
                    if (net_->now_ns() >= wake && !woke_at) woke_at = net_->now_ns();
                    return false;
                  },
                  [&] { return woke_at ? ~0ull : wake; }});
  EXPECT_TRUE(net_->run_until([&] { return woke_at != 0; }, 10'000'000));
  EXPECT_EQ(woke_at, wake);
  // Nothing left to do: run_until returns false without burning time to the deadline.
  EXPECT_FALSE(net_->run_until([] { return false; }, 1'000'000'000));
}

TEST_F(SimNetTest, RoutesByMacThenIp) {
  net_ = std::make_unique<SimNet>(1);
  for (uint32_t i = 0; i < 3; ++i) {
    PortConfig pc;
    pc.mac = sim_mac(i);
    pc.gids = {sim_gid_v4(i)};
    net_->add_port(pc);
  }
  net_->connect(0, 1);
  net_->connect(0, 2);
  wire::FrameSpec s;
  s.src_mac = sim_mac(0);
  s.dst_mac = sim_mac(2);
  s.src_ip = sim_gid_v4(0);
  s.dst_ip = sim_gid_v4(1);
  s.bth.opcode = wire::op::send_only;
  auto tx = [&](const wire::FrameSpec& f) {
    engine::PacketBuf b;
    ASSERT_TRUE(net_->port(0).tx_alloc(200, b));
    b.len = wire::build_frame(wire::MutByteSpan(b.data, 200), f, {});
    net_->port(0).tx_burst(&b, 1);
  };
  tx(s);  // MAC says port 2
  s.dst_mac = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  tx(s);  // unknown MAC: IP says port 1
  s.dst_ip = sim_gid_v4(9);
  tx(s);  // neither: two neighbours, no route
  net_->run_until_idle(~0ull);
  EXPECT_EQ(net_->port(2).rx_pending(), 1u);
  EXPECT_EQ(net_->port(1).rx_pending(), 1u);
  EXPECT_EQ(net_->unroutable(), 1u);
}

}  // namespace
}  // namespace urxe::sim
