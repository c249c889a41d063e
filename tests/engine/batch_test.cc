// Batch frames (PacketBuf::batch, wire::batch_packet): a requester whose port takes them (the same-host
// path, Port::tx_batch_bytes) sends a run of a message's middle packets as one frame (a responder, a run of
// READ responses), and the receiving side processes the packets it stands for one by one. What users rely on:
// the bytes land as with single packets, loss and go-back-N from inside a batch recover, the counters count
// packets, and wherever a batch is cut for a wire its packets are the frames the requester would have sent
// one by one.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "tests/sim/loopback.h"
#include "wire/psn.h"

namespace urxe::engine::test {
namespace {

// A port as the same-host path is for batches. `whole`: a batch frame goes to the peer as it is and the
// peer's BatchPort hands it out with its packet count (a ring slot's flag there; here a table by first PSN
// and length that both sides share). Otherwise each batch is cut into its packets for the wire.
class BatchPort final : public Port {
 public:
  using Table = std::map<std::pair<uint32_t, uint32_t>, uint8_t>;
  BatchPort(Port& inner, Table& table, bool whole) : inner_(inner), table_(table), whole_(whole) {}
  const PortAttr& attr() const override { return inner_.attr(); }
  bool tx_icrc_offload() const override { return true; }
  bool tx_gather() const override { return true; }
  uint32_t tx_batch_bytes() const override { return 8192; }
  uint32_t tx_batch_bytes_to(const uint8_t*, uint32_t) override { return batch_bytes_to; }
  bool tx_alloc(uint32_t size, PacketBuf& buf) override { return inner_.tx_alloc(size, buf); }
  void tx_free(PacketBuf& buf) override { inner_.tx_free(buf); }
  uint32_t tx_burst(PacketBuf* bufs, uint32_t n) override {
    for (uint32_t i = 0; i < n; i++) {
      PacketBuf& b = bufs[i];
      make_whole(b);
      if (!b.batch || whole_) {
        if (b.batch) {
          ++batches;
          packets_in_batches += b.batch;
          wire::Packet pkt;
          wire::ParseOptions o;
          o.verify_icrc = false;
          EXPECT_EQ(wire::parse_frame(wire::ByteSpan(b.data, b.len), pkt, o), wire::ParseError::ok);
          table_[{pkt.bth.psn, b.len}] = b.batch;
        } else if (b.icrc_absent) {
          wire::write_icrc(wire::MutByteSpan(b.data, b.len));
        }
        b.icrc_absent = false;
        if (inner_.tx_burst(&b, 1) != 1) return i;
        continue;
      }
      // cut: its packets for the wire, each whole with its ICRC (the wire's hook checks them)
      ++batches;
      packets_in_batches += b.batch;
      for (uint32_t j = 0; j < b.batch; j++) {
        PacketBuf p{};
        if (!inner_.tx_alloc(4096 + 256, p)) return i;  // (the sim grows: never here)
        p.len = wire::batch_packet(wire::ByteSpan(b.data, b.len), b.batch, j,
                                   wire::MutByteSpan(p.data, 4096 + 256));
        EXPECT_GT(p.len, 0u);
        if (inner_.tx_burst(&p, 1) != 1) inner_.tx_free(p);  // lost, as on a wire
      }
      inner_.tx_free(b);
    }
    return n;
  }
  uint32_t rx_burst(PacketBuf* bufs, uint32_t n) override {
    const uint32_t k = inner_.rx_burst(bufs, n);
    for (uint32_t i = 0; i < k; i++) {
      bufs[i].batch = 0;
      bufs[i].icrc_absent = false;
      wire::Packet pkt;
      wire::ParseOptions o;
      o.verify_icrc = false;
      if (wire::parse_frame(wire::ByteSpan(bufs[i].data, bufs[i].len), pkt, o) != wire::ParseError::ok)
        continue;
      if (force_batch && (!force_middle_only || pkt.info->position == wire::Position::middle)) {
        // a peer that flags a frame it should not have
        bufs[i].batch = force_batch;
        bufs[i].icrc_absent = true;
        force_batch = 0;
        continue;
      }
      auto it = table_.find({pkt.bth.psn, bufs[i].len});
      if (it != table_.end()) {
        bufs[i].batch = it->second;
        bufs[i].icrc_absent = true;  // (as over a ring: not written, not checked)
      }
    }
    return k;
  }
  void rx_free(PacketBuf* bufs, uint32_t n) override { inner_.rx_free(bufs, n); }
  uint64_t batches = 0, packets_in_batches = 0;
  uint8_t force_batch = 0;
  bool force_middle_only = false;  // force_batch waits for a middle packet
  uint32_t batch_bytes_to = 8192;  // what it answers for any destination

 private:
  Port& inner_;
  Table& table_;
  const bool whole_;
};

struct Pair {
  BatchPort::Table table;
  BatchPort* port[2] = {nullptr, nullptr};
  Loopback lb;
  explicit Pair(bool whole, uint32_t link_mtu = 1500)
      : lb(EngineConfig{}, link_mtu, 4 << 20, false, [this, whole](int side, Port& inner) {
          auto p = std::make_unique<BatchPort>(inner, table, whole);
          port[side] = p.get();
          return p;
        }) {}
};

uint64_t packets_for_len(uint64_t len, uint32_t mtu) {
  return len ? (len + mtu - 1) / mtu : 1;
}

// Long WRITEs and SENDs cross as batches (whole): the bytes land as sent, every packet is counted once on
// each side, and only middle packets were batched (first and last alone, so at least 2 frames a message
// are not batches).
TEST(Batch, LongMessagesCrossAsBatchesAndLandWhole) {
  for (const QpType type : {QPT_RC, QPT_UC}) {
    SCOPED_TRACE(type == QPT_RC ? "RC" : "UC");
    Pair t(true);
    Loopback& lb = t.lb;
    const auto [qa, qb] = lb.connect(type);
    std::mt19937 rng(11);
    for (size_t i = 0; i < 300000; i++) lb.a().mem[i] = static_cast<uint8_t>(rng());
    const uint64_t sent0 = lb.a().eng->counter(Counter::sent_pkts);
    const uint64_t rcvd0 = lb.b().eng->counter(Counter::rcvd_pkts);
    uint64_t packets = 0;
    for (const uint32_t len : {65536u + 700, 4097u, 200000u}) {
      Sge sge{lb.a().addr(0), len, lb.a().mr.lkey};
      post(lb.a(), qa, make_rdma_wr(WR_RDMA_WRITE, &sge, lb.b().addr(1000000), lb.b().mr.rkey));
      if (type == QPT_RC) {
        auto wc = lb.poll(lb.a(), 1);
        ASSERT_EQ(wc.size(), 1u);
        EXPECT_EQ(wc[0].status, WC_SUCCESS);
      }
      lb.settle();
      EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data() + 1000000, len)) << len;
      packets += packets_for_len(len, 1024);
    }
    post_recv(lb.b(), qb, 2000000, 100000, 7);
    Sge sge{lb.a().addr(1000), 99999, lb.a().mr.lkey};
    post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, 8));
    auto wb = lb.poll(lb.b(), 1);
    ASSERT_EQ(wb.size(), 1u);
    EXPECT_EQ(wb[0].status, WC_SUCCESS);
    EXPECT_EQ(wb[0].byte_len, 99999u);
    EXPECT_EQ(0, std::memcmp(lb.a().mem.data() + 1000, lb.b().mem.data() + 2000000, 99999));
    packets += packets_for_len(99999, 1024);
    lb.settle();
    EXPECT_GT(t.port[0]->batches, 0u);
    EXPECT_LE(t.port[0]->packets_in_batches, packets - 2 * 4);
    EXPECT_EQ(lb.a().eng->counter(Counter::sent_pkts) - sent0, packets);
    EXPECT_EQ(lb.b().eng->counter(Counter::rcvd_pkts) - rcvd0, packets);
  }
}

// A destination the port would only cut batches for (tx_batch_bytes_to 0: a peer through the real port)
// gets single packets, whatever the port takes elsewhere; asked per message, so a later answer counts.
TEST(Batch, NoBatchesWhereThePortSaysNone) {
  Pair t(true);
  Loopback& lb = t.lb;
  const uint32_t qa = lb.connect(QPT_RC).first;
  fill(lb.a().mem, 0, 65536, 3);
  t.port[0]->batch_bytes_to = 0;
  Sge sge{lb.a().addr(0), 65536, lb.a().mr.lkey};
  post(lb.a(), qa, make_rdma_wr(WR_RDMA_WRITE, &sge, lb.b().addr(100000), lb.b().mr.rkey, 1));
  ASSERT_EQ(lb.poll(lb.a(), 1).size(), 1u);
  EXPECT_EQ(t.port[0]->batches, 0u);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data() + 100000, 65536));
  t.port[0]->batch_bytes_to = 4096;  // (4 packets a batch at most)
  post(lb.a(), qa, make_rdma_wr(WR_RDMA_WRITE, &sge, lb.b().addr(200000), lb.b().mr.rkey, 2));
  ASSERT_EQ(lb.poll(lb.a(), 1).size(), 1u);
  EXPECT_GT(t.port[0]->batches, 0u);
  EXPECT_LE(t.port[0]->packets_in_batches, 4 * t.port[0]->batches);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data() + 200000, 65536));
}

// Frames lost, batches among them (whole), and go-back-N resends that start inside a batch the responder
// never saw: every WRITE still lands whole and completes in order.
TEST(Batch, LossOfBatchesRecoversByGoBackN) {
  Pair t(true);
  Loopback& lb = t.lb;
  const auto [qa, qb] = lb.connect(QPT_RC);
  (void)qb;
  std::mt19937 rng(5);
  uint64_t dropped_batches = 0;
  lb.link.hook = [&](int side, const wire::Packet& p, std::vector<uint8_t>& bytes) {
    if (side != 0 || rng() % 100 >= 4) return Fate::pass;
    if (t.table.count({p.bth.psn, static_cast<uint32_t>(bytes.size())})) dropped_batches++;
    return Fate::drop;
  };
  for (size_t i = 0; i < 1 << 20; i++) lb.a().mem[i] = static_cast<uint8_t>(rng());
  for (uint64_t id = 1; id <= 8; id++) {
    Sge sge{lb.a().addr((id - 1) * 131072), 131072, lb.a().mr.lkey};
    post(lb.a(), qa, make_rdma_wr(WR_RDMA_WRITE, &sge, lb.b().addr((id - 1) * 131072), lb.b().mr.rkey, id));
  }
  auto wc = lb.poll(lb.a(), 8, 60'000'000'000ull);
  ASSERT_EQ(wc.size(), 8u);
  for (uint64_t i = 0; i < 8; i++) {
    EXPECT_EQ(wc[i].status, WC_SUCCESS);
    EXPECT_EQ(wc[i].wr_id, i + 1);
  }
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data(), 1 << 20));
  EXPECT_GT(dropped_batches, 0u);
}

// Cut for the wire (a batch to a peer without a ring): each packet on the wire is a valid frame with its
// ICRC, the PSNs follow one another, and with loss the data still lands.
TEST(Batch, BatchesCutForTheWireAreTheFramesOfTheirPackets) {
  for (const uint32_t mtu : {1500u, 9000u}) {
    SCOPED_TRACE(mtu);
    Pair t(false, mtu);
    Loopback& lb = t.lb;
    ConnOpts o;
    o.mtu = mtu == 1500 ? MTU_1024 : MTU_4096;
    const auto [qa, qb] = lb.connect(QPT_RC, o);
    (void)qb;
    std::mt19937 rng(3);
    uint64_t bad = 0, frames = 0;
    uint32_t next_psn = o.sq_psn;
    bool in_order = true;
    lb.link.hook = [&](int side, const wire::Packet& p, std::vector<uint8_t>& bytes) {
      if (side != 0) return Fate::pass;
      frames++;
      wire::Packet full;
      if (wire::parse_frame(wire::ByteSpan(bytes.data(), bytes.size()), full) != wire::ParseError::ok) bad++;
      if (p.bth.psn != next_psn) in_order = false;
      next_psn = wire::psn_add(p.bth.psn, 1);
      return Fate::pass;
    };
    for (size_t i = 0; i < 600000; i++) lb.a().mem[i] = static_cast<uint8_t>(rng());
    Sge sge{lb.a().addr(0), 600000, lb.a().mr.lkey};
    post(lb.a(), qa, make_rdma_wr(WR_RDMA_WRITE, &sge, lb.b().addr(1000000), lb.b().mr.rkey));
    auto wc = lb.poll(lb.a(), 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, WC_SUCCESS);
    EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data() + 1000000, 600000));
    EXPECT_GT(t.port[0]->batches, 0u);
    EXPECT_EQ(bad, 0u);
    EXPECT_TRUE(in_order);
    EXPECT_EQ(frames, packets_for_len(600000, mtu == 1500 ? 1024 : 4096));
    // and with 3 % of the packets lost
    lb.link.hook = [&](int side, const wire::Packet&, std::vector<uint8_t>&) {
      return side == 0 && rng() % 100 < 3 ? Fate::drop : Fate::pass;
    };
    std::memset(lb.b().mem.data() + 1000000, 0, 600000);
    post(lb.a(), qa, make_rdma_wr(WR_RDMA_WRITE, &sge, lb.b().addr(1000000), lb.b().mr.rkey, 2));
    wc = lb.poll(lb.a(), 1, 60'000'000'000ull);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, WC_SUCCESS);
    EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data() + 1000000, 600000));
  }
}

// READ responses cross as batches too (the responder's middle responses), and a READ whose responses are
// lost, batches among them, is resent from inside them: the bytes land as read, and A counts every packet.
TEST(Batch, ReadResponsesCrossAsBatches) {
  Pair t(true);
  Loopback& lb = t.lb;
  const uint32_t qa = lb.connect(QPT_RC).first;
  std::mt19937 rng(17);
  for (size_t i = 0; i < 1 << 20; i++) lb.b().mem[i] = static_cast<uint8_t>(rng());
  const uint64_t rcvd0 = lb.a().eng->counter(Counter::rcvd_pkts);
  Sge rd{lb.a().addr(2 << 20), 200000, lb.a().mr.lkey};
  post(lb.a(), qa, make_rdma_wr(WR_RDMA_READ, &rd, lb.b().addr(0), lb.b().mr.rkey, 1));
  auto wc = lb.poll(lb.a(), 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(lb.b().mem.data(), lb.a().mem.data() + (2 << 20), 200000));
  EXPECT_GT(t.port[1]->batches, 0u);
  lb.settle();
  EXPECT_EQ(lb.a().eng->counter(Counter::rcvd_pkts) - rcvd0, packets_for_len(200000, 1024));
  uint64_t lost = 0;
  lb.link.hook = [&](int side, const wire::Packet&, std::vector<uint8_t>&) {
    if (side != 1 || rng() % 100 >= 4) return Fate::pass;
    lost++;
    return Fate::drop;
  };
  std::memset(lb.a().mem.data() + (2 << 20), 0, 1 << 20);
  for (uint64_t id = 2; id <= 5; id++) {
    Sge r{lb.a().addr((2 << 20) + (id - 2) * 250000), 250000, lb.a().mr.lkey};
    post(lb.a(), qa, make_rdma_wr(WR_RDMA_READ, &r, lb.b().addr((id - 2) * 250000), lb.b().mr.rkey, id));
  }
  wc = lb.poll(lb.a(), 4, 60'000'000'000ull);
  ASSERT_EQ(wc.size(), 4u);
  for (const Wc& w : wc) EXPECT_EQ(w.status, WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(lb.b().mem.data(), lb.a().mem.data() + (2 << 20), 1000000));
  EXPECT_GT(lost, 0u);
}

// A frame flagged as a batch that is not a run of middle packets (here a SEND ONLY, then a READ response)
// is dropped and counted, never placed; the requester's resend then delivers it.
TEST(Batch, AFrameFlaggedAsABatchThatIsNoneIsDropped) {
  Pair t(true);
  Loopback& lb = t.lb;
  const auto [qa, qb] = lb.connect(QPT_RC);
  post_recv(lb.b(), qb, 0, 4096, 1);
  fill(lb.a().mem, 0, 100, 9);
  t.port[1]->force_batch = 2;
  Sge sge{lb.a().addr(0), 100, lb.a().mr.lkey};
  post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, 1));
  auto wb = lb.poll(lb.b(), 1, 60'000'000'000ull);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wb[0].status, WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data(), 100));
  EXPECT_EQ(lb.b().eng->counter(Counter::rx_drop_parse), 1u);
  // nor is a response ever one: A drops the READ response so flagged, and its READ goes again
  fill(lb.b().mem, 8192, 2048, 4);
  t.port[0]->force_batch = 2;
  Sge rd{lb.a().addr(16384), 2048, lb.a().mr.lkey};
  post(lb.a(), qa, make_rdma_wr(WR_RDMA_READ, &rd, lb.b().addr(8192), lb.b().mr.rkey, 2));
  auto wa = lb.poll(lb.a(), 2, 60'000'000'000ull);  // (the SEND's completion, then the READ's)
  ASSERT_EQ(wa.size(), 2u);
  EXPECT_EQ(wa[1].status, WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(lb.b().mem.data() + 8192, lb.a().mem.data() + 16384, 2048));
  EXPECT_EQ(lb.a().eng->counter(Counter::rx_drop_parse), 1u);
}

// A batch whose first packet moves the QP to ERR (here: a middle packet flagged as 2 of half its length,
// which the responder refuses as an invalid request) delivers none of the rest: they are dropped as frames
// arriving at a QP in ERR are (rx_drop_qpn), never processed.
TEST(Batch, PacketsAfterOneThatFailsTheQpAreDropped) {
  Pair t(true);
  Loopback& lb = t.lb;
  const auto [qa, qb] = lb.connect(QPT_RC);
  t.port[0]->batch_bytes_to = 0;  // (A sends single packets; B is told one of them is a batch)
  post_recv(lb.b(), qb, 0, 65536, 1);
  t.port[1]->force_batch = 2;
  t.port[1]->force_middle_only = true;
  Sge sge{lb.a().addr(0), 8192, lb.a().mr.lkey};
  post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, 1));
  auto wa = lb.poll(lb.a(), 1, 60'000'000'000ull);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_REM_INV_REQ_ERR);
  EXPECT_EQ(lb.b().eng->counter(Counter::rx_drop_parse), 0u);
  // every packet A sent but the FIRST and the flagged frame's first half arrived at a QP in ERR: the
  // flagged frame's second half too
  EXPECT_EQ(lb.b().eng->counter(Counter::rx_drop_qpn), lb.a().eng->counter(Counter::sent_pkts) - 1);
  QpAttr at;
  ASSERT_EQ(0, lb.b().eng->query_qp(qb, at));
  EXPECT_EQ(at.qp_state, QPS_ERR);
}

}  // namespace
}  // namespace urxe::engine::test
