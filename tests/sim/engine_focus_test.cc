// Focused reproductions of engine behaviours the property test found wrong (each names the seed class it was
// found by), on a lossless SimNet link so that the failing order of events is fixed.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/sim/harness.h"
#include "wire/packet.h"

namespace urxe::sim {
namespace {

using namespace engine;

class EngineFocusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LinkConfig l;
    l.latency_ns = 2000;
    tb_ = std::make_unique<Testbed>(7, l);
    QpParams p;
    p.path_mtu = MTU_1024;
    p.psn[0] = 0x100;
    p.psn[1] = 0x200;
    ASSERT_EQ(tb_->connect(p, q_), "");
    Rng rng(3);
    for (uint32_t h = 0; h < 2; ++h) arena_[h] = std::make_unique<GuardedArena>(64 * 1024);
    src_ = arena_[0]->carve(8192, rng);
    sink_ = arena_[0]->carve(8192, rng);
    victim_ = arena_[0]->carve(64, rng);
    remote_ = arena_[1]->carve(8192, rng, 64);
    remote_init_.assign(arena_[1]->at(remote_), arena_[1]->at(remote_) + remote_.len);
    reg(0, src_, 0, src_mr_);
    reg(0, sink_, ACCESS_LOCAL_WRITE, sink_mr_);
    reg(0, victim_, ACCESS_LOCAL_WRITE | ACCESS_MW_BIND, victim_mr_);
    reg(1, remote_, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC,
        remote_mr_);
    // Which frames entered the link, in order: "<from><opcode name>".
    tb_->net.on_transmit = [this](uint32_t from, uint32_t, const uint8_t* d, uint32_t len) {
      wire::Packet pkt;
      if (wire::parse_frame(wire::ByteSpan(d, len), pkt) == wire::ParseError::ok)
        wire_.push_back(std::to_string(from) + " " + std::string(pkt.info->name));
    };
    // What a LOCAL_INV invalidates: a type-2 window over the victim, bound by host 0's QP.
    uint32_t mw = 0;
    ASSERT_EQ(tb_->host[0].eng->alloc_mw(tb_->host[0].pd, MW_TYPE_2, mw), 0);
    SendWr bind = wr(100, WR_BIND_MW, 0, nullptr);
    victim_key_ = mw + 1;
    bind.bind_mw = {
        mw,          victim_key_,        victim_mr_.lkey, reinterpret_cast<uint64_t>(arena_[0]->at(victim_)),
        victim_.len, ACCESS_REMOTE_WRITE};
    post(bind);
    auto wcs = complete(1);
    ASSERT_EQ(wcs.size(), 1u);
    ASSERT_EQ(wcs[0].status, WC_SUCCESS);
    wire_.clear();
  }
  void reg(uint32_t h, const GuardedArena::Region& r, uint32_t acc, MrInfo& mr) {
    uint8_t* p = arena_[h]->at(r);
    ASSERT_EQ(tb_->host[h].eng->reg_mr(tb_->host[h].pd, p, r.len, reinterpret_cast<uint64_t>(p), acc, mr), 0);
  }
  uint64_t raddr(uint64_t off) const { return reinterpret_cast<uint64_t>(arena_[1]->at(remote_)) + off; }
  SendWr wr(uint64_t id, WrOpcode op, uint32_t flags, const Sge* sge) {
    SendWr w;
    w.wr_id = id;
    w.opcode = op;
    w.send_flags = flags | SEND_SIGNALED;
    w.sg_list = sge;
    w.num_sge = sge ? 1 : 0;
    return w;
  }
  void post(const SendWr& w) {
    const SendWr* bad = nullptr;
    ASSERT_EQ(tb_->host[0].eng->post_send(q_.qpn[0], &w, &bad), 0);
  }
  // Runs until `n` send completions are in, returns them.
  std::vector<Wc> complete(size_t n) {
    std::vector<Wc> out;
    tb_->net.run_until(
        [&] {
          Wc wc[16];
          int k = tb_->host[0].eng->poll_cq(q_.send_cq[0], 16, wc);
          for (int i = 0; i < k; ++i) out.push_back(wc[i]);
          return out.size() >= n;
        },
        1'000'000'000);
    return out;
  }
  size_t first(const std::string& what) const {
    for (size_t i = 0; i < wire_.size(); ++i)
      if (wire_[i] == what) return i;
    return wire_.size();
  }

  std::unique_ptr<Testbed> tb_;
  QpEnds q_;
  std::unique_ptr<GuardedArena> arena_[2];
  GuardedArena::Region src_, sink_, victim_, remote_;
  MrInfo src_mr_{}, sink_mr_{}, victim_mr_{}, remote_mr_{};
  uint32_t victim_key_ = 0;  // the victim window's rkey
  std::vector<uint8_t> remote_init_;
  std::vector<std::string> wire_;
};

// Found by the property test (seeds 1407, 5708, 7855 at engine fb5e920+): a FENCE on a LOCAL_INV does not
// hold it (and so every later WR) back until the earlier RDMA READ completes, so a later WRITE to the bytes
// being read goes out at once and the READ returns the WRITE's data. IBTA 10.8.3.3 / rdma-core: a fenced WR
// is not started before all prior READs and atomics have completed, whatever its opcode.
TEST_F(EngineFocusTest, FenceOnLocalInvHoldsLaterWritesBehindRead) {
  Sge rd{reinterpret_cast<uint64_t>(arena_[0]->at(sink_)), 4096, sink_mr_.lkey};
  SendWr read = wr(1, WR_RDMA_READ, 0, &rd);
  read.rdma = {raddr(0), remote_mr_.rkey};
  post(read);
  SendWr inv = wr(2, WR_LOCAL_INV, SEND_FENCE, nullptr);
  inv.invalidate_rkey = victim_key_;
  post(inv);
  Sge wsge{reinterpret_cast<uint64_t>(arena_[0]->at(src_)), 4096, src_mr_.lkey};
  SendWr write = wr(3, WR_RDMA_WRITE, 0, &wsge);
  write.rdma = {raddr(0), remote_mr_.rkey};
  post(write);
  auto wcs = complete(3);
  ASSERT_EQ(wcs.size(), 3u);
  for (auto& w : wcs) EXPECT_EQ(w.status, WC_SUCCESS) << w.wr_id;
  // The READ returned the memory as it was before the WRITE.
  EXPECT_EQ(std::memcmp(arena_[0]->at(sink_), remote_init_.data(), 4096), 0) << "READ saw the later WRITE";
  // On the wire: the WRITE left after the READ's last response.
  EXPECT_LT(first("1 RC RDMA_READ_RESPONSE_LAST"), first("0 RC RDMA_WRITE_FIRST"));
}

// The same without LOCAL_INV: a FENCE on the WRITE itself (which the engine honours).
TEST_F(EngineFocusTest, FenceOnWriteHoldsItBehindRead) {
  Sge rd{reinterpret_cast<uint64_t>(arena_[0]->at(sink_)), 4096, sink_mr_.lkey};
  SendWr read = wr(1, WR_RDMA_READ, 0, &rd);
  read.rdma = {raddr(0), remote_mr_.rkey};
  post(read);
  Sge wsge{reinterpret_cast<uint64_t>(arena_[0]->at(src_)), 4096, src_mr_.lkey};
  SendWr write = wr(2, WR_RDMA_WRITE, SEND_FENCE, &wsge);
  write.rdma = {raddr(0), remote_mr_.rkey};
  post(write);
  auto wcs = complete(2);
  ASSERT_EQ(wcs.size(), 2u);
  for (auto& w : wcs) EXPECT_EQ(w.status, WC_SUCCESS) << w.wr_id;
  EXPECT_EQ(std::memcmp(arena_[0]->at(sink_), remote_init_.data(), 4096), 0);
  EXPECT_LT(first("1 RC RDMA_READ_RESPONSE_LAST"), first("0 RC RDMA_WRITE_FIRST"));
}

// Found by the property test (seeds 51, 56, 309, 407 ... in the "+error" class): when a request is NAKed with
// a remote access error, an earlier atomic (or READ) of the same QP whose response the responder still owed
// completes with the NAK's error instead of its own result. The responder executed it (in PSN order, before
// the invalid request), so it must send the atomic ACK before the NAK and the requester must complete it with
// success; only the invalid WR fails.
TEST_F(EngineFocusTest, AtomicBeforeInvalidRequestStillSucceeds) {
  uint64_t orig;
  std::memcpy(&orig, arena_[1]->at(remote_) + 64, 8);
  Sge a{reinterpret_cast<uint64_t>(arena_[0]->at(sink_)), 8, sink_mr_.lkey};
  SendWr faa = wr(1, WR_ATOMIC_FETCH_AND_ADD, 0, &a);
  faa.atomic = {raddr(64), 5, 0, remote_mr_.rkey};
  post(faa);
  Sge wsge{reinterpret_cast<uint64_t>(arena_[0]->at(src_)), 16, src_mr_.lkey};
  SendWr bad = wr(2, WR_RDMA_WRITE, 0, &wsge);
  bad.rdma = {raddr(0), remote_mr_.rkey ^ 0x5a};  // wrong key
  post(bad);
  auto wcs = complete(2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, WC_SUCCESS) << wc_status_str(wcs[0].status);
  EXPECT_EQ(wcs[1].status, WC_REM_ACCESS_ERR) << wc_status_str(wcs[1].status);
  uint64_t got, now;
  std::memcpy(&got, arena_[0]->at(sink_), 8);
  std::memcpy(&now, arena_[1]->at(remote_) + 64, 8);
  EXPECT_EQ(now, orig + 5);  // executed once
  EXPECT_EQ(got, orig) << "the FETCH_ADD result never reached the requester";
  EXPECT_LT(first("1 RC ATOMIC_ACKNOWLEDGE"), wire_.size()) << "the responder never sent the atomic ACK";
}

TEST_F(EngineFocusTest, ReadBeforeInvalidRequestStillSucceeds) {
  Sge rd{reinterpret_cast<uint64_t>(arena_[0]->at(sink_)), 3000, sink_mr_.lkey};
  SendWr read = wr(1, WR_RDMA_READ, 0, &rd);
  read.rdma = {raddr(0), remote_mr_.rkey};
  post(read);
  Sge wsge{reinterpret_cast<uint64_t>(arena_[0]->at(src_)), 16, src_mr_.lkey};
  SendWr bad = wr(2, WR_RDMA_WRITE, 0, &wsge);
  bad.rdma = {raddr(remote_.len - 8), remote_mr_.rkey};  // runs past the end of the MR
  post(bad);
  auto wcs = complete(2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, WC_SUCCESS) << wc_status_str(wcs[0].status);
  EXPECT_EQ(wcs[1].status, WC_REM_ACCESS_ERR) << wc_status_str(wcs[1].status);
  EXPECT_EQ(std::memcmp(arena_[0]->at(sink_), remote_init_.data(), 3000), 0);
}

// Found by the property test at engine 86c97c3 (seeds 449, 480, 1381, ... in the "faults+error" class): a
// READ whose response was lost, followed by a request the responder NAKs with a remote access error. The
// engine then flushes everything, the READ included, so the first error completion the application sees is
// WR_FLUSH_ERR and no completion says what went wrong. A flush may only follow an error completion: the READ
// must be retried (and, the responder's QP being in ERR, end in RETRY_EXC_ERR, as kernel rxe does) or the
// NAKed WR must report REM_ACCESS_ERR first.
TEST_F(EngineFocusTest, LostReadResponseThenRemoteAccessNakReportsAnError) {
  bool dropped = false;
  tb_->net.drop_if = [&](uint32_t from, uint32_t, const uint8_t* d, uint32_t len) {
    wire::Packet pkt;
    if (dropped || from != 1 || wire::parse_frame(wire::ByteSpan(d, len), pkt) != wire::ParseError::ok)
      return false;
    if (pkt.bth.opcode != wire::op::read_response_only) return false;
    return dropped = true;
  };
  Sge rd{reinterpret_cast<uint64_t>(arena_[0]->at(sink_)), 512, sink_mr_.lkey};
  SendWr read = wr(1, WR_RDMA_READ, 0, &rd);
  read.rdma = {raddr(0), remote_mr_.rkey};
  post(read);
  Sge wsge{reinterpret_cast<uint64_t>(arena_[0]->at(src_)), 16, src_mr_.lkey};
  SendWr bad = wr(2, WR_RDMA_WRITE, 0, &wsge);
  bad.rdma = {raddr(0), remote_mr_.rkey ^ 0x5a};
  post(bad);
  auto wcs = complete(2);
  ASSERT_TRUE(dropped);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_NE(wcs[0].status, WC_WR_FLUSH_ERR)
      << "first error completion is a flush: " << wc_status_str(wcs[0].status) << ", then "
      << wc_status_str(wcs[1].status);
  EXPECT_TRUE(wcs[0].status == WC_RETRY_EXC_ERR || wcs[0].status == WC_SUCCESS)
      << wc_status_str(wcs[0].status);
  if (wcs[0].status == WC_SUCCESS) {
    EXPECT_EQ(wcs[1].status, WC_REM_ACCESS_ERR);
  }
}

}  // namespace
}  // namespace urxe::sim
