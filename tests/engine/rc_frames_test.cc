// The frames an RC engine hands its port: where the BTH starts, the ICRC left to a port that fills it,
// payloads taken by reference by a port that gathers, and frames a full port refused made whole.
#include <random>

#include "tests/sim/loopback.h"

namespace urxe::engine::test {
namespace {

// Every frame the engine builds says where its BTH starts (PacketBuf::bth_offset): the same-host path routes
// by the destination QPN read there instead of parsing the headers again, so a wrong offset would send
// frames to the wrong process. Requests, READ responses and ACKs, over IPv4 and IPv6.
TEST(RcFrames, EveryBuiltFrameSaysWhereItsBthIs) {
  for (const bool ipv6 : {false, true}) {
    SCOPED_TRACE(ipv6 ? "IPv6" : "IPv4");
    WatchPort* ports[2] = {};
    Loopback lb(EngineConfig{}, 1500, 1 << 20, ipv6, wrap_side(-1, ports));
    ASSERT_TRUE(ports[0] && ports[1]);
    const uint32_t qa = lb.connect(QPT_RC).first;
    Sge sge{lb.a().addr(0), 3000, lb.a().mr.lkey};  // three packets each way
    uint64_t id = 0;
    for (const WrOpcode op : {WR_RDMA_WRITE, WR_RDMA_READ}) {
      post(lb.a(), qa, make_rdma_wr(op, &sge, lb.b().addr(8192), lb.b().mr.rkey, ++id));
    }
    const auto wc = lb.poll(lb.a(), 2);
    ASSERT_EQ(wc.size(), 2u);
    EXPECT_EQ(wc[1].status, WC_SUCCESS);
    EXPECT_GE(ports[0]->total_tx, 4u);  // WRITE packets and the READ request
    EXPECT_GE(ports[1]->total_tx, 3u);  // READ responses (which acknowledge the WRITE too)
    EXPECT_EQ(ports[0]->bth_offset_wrong + ports[1]->bth_offset_wrong, 0u);
  }
}

// A port that fills the ICRC itself where a frame needs one (tx_icrc_offload, as the same-host path does
// for frames that go to the wire): counts the frames that came without one, then writes it. On receive it
// can damage every frame's ICRC, flagged as having come without one (as over the path's rings) or not.
class IcrcPort final : public Port {
 public:
  explicit IcrcPort(Port& inner, bool offload) : inner_(inner), offload_(offload) {}
  const PortAttr& attr() const override { return inner_.attr(); }
  bool tx_icrc_offload() const override { return offload_; }
  bool tx_alloc(uint32_t size, PacketBuf& buf) override { return inner_.tx_alloc(size, buf); }
  uint32_t tx_burst(PacketBuf* bufs, uint32_t n) override {
    for (uint32_t i = 0; i < n; i++) {
      const wire::MutByteSpan f(bufs[i].data, bufs[i].len);
      wire::Packet pkt;
      if (wire::parse_frame(f, pkt) == wire::ParseError::bad_icrc) ++tx_without_icrc;
      if (bufs[i].icrc_absent) {
        ++tx_flagged;
        wire::write_icrc(f);
        bufs[i].icrc_absent = false;
      }
    }
    const uint32_t k = inner_.tx_burst(bufs, n);
    total_tx += k;
    return k;
  }
  void tx_free(PacketBuf& buf) override { inner_.tx_free(buf); }
  uint32_t rx_burst(PacketBuf* bufs, uint32_t n) override {
    const uint32_t k = inner_.rx_burst(bufs, n);
    for (uint32_t i = 0; i < k; i++) {
      if (damage_rx) bufs[i].data[bufs[i].len - 1] ^= 0x5a;
      if (damage_ip_checksum) bufs[i].data[wire::kEthLen + 11] ^= 0x01;  // (IPv4; the ICRC masks it)
      if (damage_rx || damage_ip_checksum) bufs[i].icrc_absent = flag_rx;
    }
    return k;
  }
  void rx_free(PacketBuf* bufs, uint32_t n) override { inner_.rx_free(bufs, n); }
  uint64_t total_tx = 0, tx_flagged = 0, tx_without_icrc = 0;
  bool damage_rx = false, flag_rx = false, damage_ip_checksum = false;

 private:
  Port& inner_;
  const bool offload_;
};

// The engine leaves the ICRC out only for a port that fills it (Port::tx_icrc_offload), flagging each such
// frame, and does not check the ICRC (nor sum the IPv4 header checksum) of a received frame that is flagged
// as having come without one; an unflagged frame with a bad ICRC is still dropped and counted.
TEST(RcFrames, IcrcLeftOutOnlyForAPortThatFillsIt) {
  for (const bool offload : {true, false}) {
    SCOPED_TRACE(offload ? "offload" : "no offload");
    IcrcPort* ports[2] = {};
    Loopback lb(EngineConfig{}, 1500, 1 << 20, false, [&](int side, Port& inner) -> std::unique_ptr<Port> {
      auto p = std::make_unique<IcrcPort>(inner, side == 0 && offload);
      ports[side] = p.get();
      return p;
    });
    ASSERT_TRUE(ports[0] && ports[1]);
    const uint32_t qa = lb.connect(QPT_RC).first;
    Sge sge{lb.a().addr(0), 3000, lb.a().mr.lkey};
    auto write = [&](uint64_t id) {
      SendWr wr = make_rdma_wr(WR_RDMA_WRITE, &sge, lb.b().addr(8192), lb.b().mr.rkey, id);
      post(lb.a(), qa, wr);
      return lb.poll(lb.a(), 1, 1'000'000'000);
    };
    auto completes = [&](uint64_t id) {
      const auto wc = write(id);
      return wc.size() == 1 && wc[0].status == WC_SUCCESS;
    };
    // A's frames: without their ICRC and flagged exactly when its port fills it; B gets them whole
    EXPECT_TRUE(completes(1));
    EXPECT_GE(ports[0]->total_tx, 3u);
    EXPECT_EQ(ports[0]->tx_flagged, offload ? ports[0]->total_tx : 0u);
    EXPECT_EQ(ports[0]->tx_without_icrc, offload ? ports[0]->total_tx : 0u);
    EXPECT_EQ(ports[1]->tx_flagged + ports[1]->tx_without_icrc, 0u);
    // B receives damaged ICRCs flagged as absent: not checked, the WRITE completes
    ports[1]->damage_rx = ports[1]->flag_rx = true;
    EXPECT_TRUE(completes(2));
    EXPECT_EQ(lb.b().eng->counter(Counter::rx_drop_icrc), 0u);
    // nor is their IPv4 header checksum summed again: a wrong one, flagged, and the WRITE completes
    // (unflagged, parse_frame rejects it: tests/wire/wire_parse_errors_test.cc)
    ports[1]->damage_rx = false;
    ports[1]->damage_ip_checksum = true;
    EXPECT_TRUE(completes(4));
    EXPECT_EQ(lb.b().eng->counter(Counter::rx_drop_parse), 0u);
    ports[1]->damage_ip_checksum = false;
    ports[1]->damage_rx = true;
    // the ICRC's damage unflagged: dropped and counted, nothing completes
    ports[1]->flag_rx = false;
    const auto wc = write(3);
    EXPECT_TRUE(wc.empty() || wc[0].status != WC_SUCCESS);
    EXPECT_GE(lb.b().eng->counter(Counter::rx_drop_icrc), 3u);
  }
}

// A port that takes payloads by reference as the same-host path does (Port::tx_gather, with the ICRC offload
// it needs): counts the frames that came so, makes them whole and writes their ICRC before the wire. While
// `refuse` is set it takes nothing, as a full ring.
class GatherPort final : public Port {
 public:
  explicit GatherPort(Port& inner, bool gather) : inner_(inner), gather_(gather) {}
  const PortAttr& attr() const override { return inner_.attr(); }
  bool tx_icrc_offload() const override { return true; }
  bool tx_gather() const override { return gather_; }
  bool tx_alloc(uint32_t size, PacketBuf& buf) override { return inner_.tx_alloc(size, buf); }
  uint32_t tx_burst(PacketBuf* bufs, uint32_t n) override {
    if (refuse) return 0;
    for (uint32_t i = 0; i < n; i++) {
      if (bufs[i].gather) {
        ++tx_gathered;
        EXPECT_LE(bufs[i].gather_offset + bufs[i].gather_len + wire::kIcrcLen, bufs[i].len);
      }
      make_whole(bufs[i]);
      if (bufs[i].icrc_absent) wire::write_icrc(wire::MutByteSpan(bufs[i].data, bufs[i].len));
      bufs[i].icrc_absent = false;
    }
    return inner_.tx_burst(bufs, n);
  }
  void tx_free(PacketBuf& buf) override { inner_.tx_free(buf); }
  uint32_t rx_burst(PacketBuf* bufs, uint32_t n) override { return inner_.rx_burst(bufs, n); }
  void rx_free(PacketBuf* bufs, uint32_t n) override { inner_.rx_free(bufs, n); }
  uint64_t tx_gathered = 0;
  bool refuse = false;

 private:
  Port& inner_;
  const bool gather_;
};

// A port that gathers gets payloads of Port::kGatherMin bytes or more by reference, straight from the
// application's MR (a requester's data, a responder's READ responses), and the peer receives the same
// bytes; smaller payloads, and a frame whose payload spans two SGEs, are copied as before.
TEST(RcFrames, GatheringPortGetsLargePayloadsByReference) {
  GatherPort* ports[2] = {};
  Loopback lb(EngineConfig{}, 1500, 1 << 20, false, wrap_side(0, ports, true));
  GatherPort* const port = ports[0];
  ASSERT_NE(port, nullptr);
  const auto [qa, qb] = lb.connect(QPT_RC);
  std::mt19937 rng(7);
  for (size_t i = 0; i < 70000; i++) lb.a().mem[i] = static_cast<uint8_t>(rng());
  Sge sge{lb.a().addr(0), 65536 + 700, lb.a().mr.lkey};  // 65 frames of 1024 B, the last 700 B
  post(lb.a(), qa, make_rdma_wr(WR_RDMA_WRITE, &sge, lb.b().addr(100000), lb.b().mr.rkey));
  auto wc = lb.poll(lb.a(), 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WC_SUCCESS);
  EXPECT_EQ(port->tx_gathered, 65u);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data() + 100000, 65536 + 700));
  // A's READ responses to B: 8 frames by reference
  Sge rd{lb.b().addr(200000), 8192, lb.b().mr.lkey};
  post(lb.b(), qb, make_rdma_wr(WR_RDMA_READ, &rd, lb.a().addr(1000), lb.a().mr.rkey));
  wc = lb.poll(lb.b(), 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WC_SUCCESS);
  EXPECT_EQ(port->tx_gathered, 65u + 8u);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data() + 1000, lb.b().mem.data() + 200000, 8192));
  // two SGEs: the frame that spans both is copied, the others go by reference
  std::memset(lb.b().mem.data() + 400000, 0, 8192);
  const Sge two[2] = {{lb.a().addr(0), 1536, lb.a().mr.lkey}, {lb.a().addr(20000), 2560, lb.a().mr.lkey}};
  SendWr wr = make_wr(WR_RDMA_WRITE, two, 2, 3);
  wr.rdma.remote_addr = lb.b().addr(400000);
  wr.rdma.rkey = lb.b().mr.rkey;
  post(lb.a(), qa, wr);
  wc = lb.poll(lb.a(), 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WC_SUCCESS);
  EXPECT_EQ(port->tx_gathered, 65u + 8u + 3u);  // [0,1024) and [2048,3072), [3072,4096); not [1024,2048)
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data() + 400000, 1536));
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data() + 20000, lb.b().mem.data() + 400000 + 1536, 2560));
  // below Port::kGatherMin: copied
  post_recv(lb.b(), qb, 300000, 4096, 1);
  Sge small{lb.a().addr(0), Port::kGatherMin - 1, lb.a().mr.lkey};
  post(lb.a(), qa, make_wr(WR_SEND, &small, 1, 2));
  ASSERT_EQ(lb.poll(lb.a(), 1).size(), 1u);
  auto wb = lb.poll(lb.b(), 1);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wb[0].status, WC_SUCCESS);
  EXPECT_EQ(port->tx_gathered, 65u + 8u + 3u);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data() + 300000, Port::kGatherMin - 1));
}

// Frames the port does not take in a round are made whole before the round ends: the application's
// memory may change or go once the engine lets go of it, and what the peer receives is what a copying
// port would have sent. The sender's buffer is overwritten after the refused round; both ports must deliver
// the same bytes (the frames built before it with the old ones).
TEST(RcFrames, FramesAGatheringPortRefusesAreMadeWholeInTheRound) {
  std::vector<uint8_t> got[2];
  for (const bool gather : {false, true}) {
    SCOPED_TRACE(gather ? "gather" : "copy");
    GatherPort* ports[2] = {};
    Loopback lb(EngineConfig{}, 1500, 1 << 20, false, wrap_side(0, ports, gather));
    GatherPort* const port = ports[0];
    ASSERT_NE(port, nullptr);
    const uint32_t qa = lb.connect(QPT_RC).first;
    const size_t len = 256 * 1024;
    std::memset(lb.a().mem.data(), 0x11, len);
    Sge sge{lb.a().addr(0), static_cast<uint32_t>(len), lb.a().mr.lkey};
    port->refuse = true;
    post(lb.a(), qa, make_rdma_wr(WR_RDMA_WRITE, &sge, lb.b().addr(300000), lb.b().mr.rkey));
    lb.a().eng->progress();  // builds frames the port does not take
    std::memset(lb.a().mem.data(), 0xee, len);
    port->refuse = false;
    auto wc = lb.poll(lb.a(), 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, WC_SUCCESS);
    EXPECT_EQ(port->tx_gathered > 0, gather);
    got[gather].assign(lb.b().mem.begin() + 300000, lb.b().mem.begin() + 300000 + len);
    EXPECT_EQ(got[gather].front(), 0x11);  // built in the refused round
    EXPECT_EQ(got[gather].back(), 0xee);   // built after the overwrite
  }
  EXPECT_TRUE(got[0] == got[1]);
}

}  // namespace
}  // namespace urxe::engine::test
