// RC error NAKs and PSN gaps: each remote error status (access, invalid request, operational) with the
// flush after it, the PSN-sequence NAK and go-back-N, an error NAK racing a READ response, and the error
// of a bad local key, the error NAK sent before the error completion shows. (Invalidation: mw_test.cc.)
#include "tests/sim/loopback.h"

namespace urxe::engine::test {
namespace {

using RcNak = RcLoopbackTest;
using RcLocal = RcLoopbackTest;

TEST_F(RcNak, RemoteAccessErrorBadRkey) {
  connect();
  Sge sge{lb.a().addr(0), 100, lb.a().mr.lkey};
  const uint32_t wrong_key = lb.b().mr.rkey ^ 0x1;  // right index, wrong key
  SendWr w = make_rdma_wr(WR_RDMA_WRITE, &sge, lb.b().addr(0), wrong_key, 1);
  expect_remote_error(lb, qa, w, WC_REM_ACCESS_ERR);
  EXPECT_EQ(count_naks(lb.link, 1, wire::AethType::nak, 2), 1);
  EXPECT_TRUE(lb.b().events.has(EVENT_QP_ACCESS_ERR));
  expect_qp_state(lb.b(), qb, QPS_ERR);
}

TEST_F(RcNak, RemoteAccessErrorOutOfBounds) {
  connect();
  Sge sge{lb.a().addr(0), 100, lb.a().mr.lkey};
  const uint64_t past_end = lb.b().addr(lb.b().mem.size() - 50);  // runs 50 bytes past the MR
  SendWr w = make_rdma_wr(WR_RDMA_READ, &sge, past_end, lb.b().mr.rkey, 1);
  expect_remote_error(lb, qa, w, WC_REM_ACCESS_ERR);
}

TEST_F(RcNak, RemoteAccessErrorMrWithoutRemoteWrite) {
  connect();
  std::vector<uint8_t> ro(256);
  MrInfo mr;
  ASSERT_EQ(0, reg_vec(lb.b(), lb.b().pd, ro, ACCESS_REMOTE_READ, mr));
  Sge sge{lb.a().addr(0), 16, lb.a().mr.lkey};
  SendWr w = make_rdma_wr(WR_RDMA_WRITE, &sge, vaddr(ro), mr.rkey, 1);
  expect_remote_error(lb, qa, w, WC_REM_ACCESS_ERR);
  EXPECT_EQ(ro, std::vector<uint8_t>(256, 0));
}

TEST_F(RcNak, RemoteAccessErrorMrOfAnotherPd) {
  connect();
  uint32_t pd2;
  ASSERT_EQ(0, lb.b().eng->alloc_pd(pd2));
  std::vector<uint8_t> other(256);
  MrInfo mr;
  ASSERT_EQ(0, reg_vec(lb.b(), pd2, other, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE, mr));
  Sge sge{lb.a().addr(0), 16, lb.a().mr.lkey};
  SendWr w = make_rdma_wr(WR_RDMA_WRITE, &sge, vaddr(other), mr.rkey, 1);
  expect_remote_error(lb, qa, w, WC_REM_ACCESS_ERR);
}

TEST_F(RcNak, InvalidRequestMisalignedAtomic) {
  connect();
  Sge sge{lb.a().addr(0), 8, lb.a().mr.lkey};
  SendWr w = make_atomic_wr(WR_ATOMIC_FETCH_AND_ADD, &sge, lb.b().addr(4), lb.b().mr.rkey, 1, 1);
  expect_remote_error(lb, qa, w, WC_REM_INV_REQ_ERR);
  EXPECT_EQ(count_naks(lb.link, 1, wire::AethType::nak, 1), 1);
  EXPECT_TRUE(lb.b().events.has(EVENT_QP_REQ_ERR));
}

TEST_F(RcNak, InvalidRequestQpWithoutRemoteRead) {
  ConnOpts o;
  o.access = ACCESS_REMOTE_WRITE;
  connect(o);
  Sge sge{lb.a().addr(0), 8, lb.a().mr.lkey};
  SendWr w = make_rdma_wr(WR_RDMA_READ, &sge, lb.b().addr(0), lb.b().mr.rkey, 1);
  expect_remote_error(lb, qa, w, WC_REM_INV_REQ_ERR);
}

TEST_F(RcNak, InvalidRequestReceiveBufferTooSmall) {
  connect();
  post_recv(lb.b(), qb, 0, 100, 5);
  Sge sge{lb.a().addr(0), 200, lb.a().mr.lkey};
  expect_remote_error(lb, qa, make_wr(WR_SEND, &sge, 1, 1), WC_REM_INV_REQ_ERR);
  auto wb = lb.poll(lb.b(), 1);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wb[0].wr_id, 5u);
  EXPECT_EQ(wb[0].status, WC_LOC_LEN_ERR);
}

// The same with a SEND of several packets: the responder NAKs the packet that overflows (not the first),
// and the requester reports that NAK's status at once, not a retry failure after a timeout.
TEST_F(RcNak, InvalidRequestReceiveBufferTooSmallForALongSend) {
  connect();
  post_recv(lb.b(), qb, 0, 1500, 5);
  Sge sge{lb.a().addr(0), 4000, lb.a().mr.lkey};
  const uint64_t t0 = lb.link.clock.now_ns();
  expect_remote_error(lb, qa, make_wr(WR_SEND, &sge, 1, 1), WC_REM_INV_REQ_ERR);
  EXPECT_LT(lb.link.clock.now_ns() - t0, 1'000'000u);  // (the retransmit timeout is 67 ms)
  EXPECT_EQ(lb.a().eng->counter(Counter::retry_exceeded_err), 0u);
  auto wb = lb.poll(lb.b(), 1);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wb[0].status, WC_LOC_LEN_ERR);
}

// A port that polls B's CQ whenever the engine hands it frames, as an app thread polls without the engine
// lock while a round runs.
class PollAtTxPort final : public Port {
 public:
  explicit PollAtTxPort(Port& inner) : inner_(inner) {}
  const PortAttr& attr() const override { return inner_.attr(); }
  bool tx_alloc(uint32_t size, PacketBuf& buf) override { return inner_.tx_alloc(size, buf); }
  uint32_t tx_burst(PacketBuf* bufs, uint32_t n) override {
    if (poll) poll();
    return inner_.tx_burst(bufs, n);
  }
  void tx_free(PacketBuf& buf) override { inner_.tx_free(buf); }
  uint32_t rx_burst(PacketBuf* bufs, uint32_t n) override { return inner_.rx_burst(bufs, n); }
  void rx_free(PacketBuf* bufs, uint32_t n) override { inner_.rx_free(bufs, n); }
  std::function<void()> poll;

 private:
  Port& inner_;
};

// The error NAK reaches the port before the error completion is visible, in any round, an app's that may
// hold ACKs included: an app exits on the completion (ibv_rc_pingpong does), and a NAK still queued would
// die with its process while the requester retries into silence.
TEST(RcNakOrder, ErrorNakReachesThePortBeforeTheErrorCompletion) {
  for (const Engine::Round round : {Engine::Round::app, Engine::Round::thread}) {
    SCOPED_TRACE(round == Engine::Round::app ? "app round" : "progress thread's round");
    EngineConfig cfg;
    cfg.hold_acks = true;
    PollAtTxPort* ports[2] = {};
    Loopback lb(cfg, 1500, 1 << 20, false, wrap_side(1, ports));
    const auto [qa, qb] = lb.connect(QPT_RC);
    Engine& b = *lb.b().eng;
    std::vector<Wc> seen;
    ports[1]->poll = [&] {
      Wc wc[4];
      for (int n = b.poll_cq(lb.b().cq, 4, wc), i = 0; i < n; i++) seen.push_back(wc[i]);
    };
    post_recv(lb.b(), qb, 0, 64, 1);
    Sge sa{lb.a().addr(0), 128, lb.a().mr.lkey};
    post(lb.a(), qa, make_wr(WR_SEND, &sa, 1, 2));
    lb.a().eng->progress();
    const uint64_t next = lb.link.net.next_event_time();
    if (next != UINT64_MAX && next > lb.link.clock.t) lb.link.clock.t = next;
    b.try_progress(nullptr, round);
    EXPECT_EQ(count_naks(lb.link, 1, wire::AethType::nak, 1), 1);
    EXPECT_TRUE(seen.empty());  // polled as the NAK went: no completion yet
    ports[1]->poll();
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].status, WC_LOC_LEN_ERR);
    EXPECT_FALSE(b.acks_held());
  }
}

TEST_F(RcNak, RemoteOperationalErrorBadReceiveLkey) {
  connect();
  post_recv(lb.b(), qb, 0, 100, 5, lb.b().mr.lkey + 0x100);  // no such MR
  Sge sge{lb.a().addr(0), 50, lb.a().mr.lkey};
  expect_remote_error(lb, qa, make_wr(WR_SEND, &sge, 1, 1), WC_REM_OP_ERR);
  EXPECT_EQ(count_naks(lb.link, 1, wire::AethType::nak, 3), 1);
  auto wb = lb.poll(lb.b(), 1);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wb[0].status, WC_LOC_PROT_ERR);
}

TEST_F(RcNak, PsnSequenceErrorOncePerGapThenGoBackN) {
  connect();
  post_recv(lb.b(), qb, 0, 16384, 1);
  fill(lb.a().mem, 0, 10 * 1024, 3);
  uint32_t dropped_psn = 0;  // the third packet of a ten-packet message
  drop_frames(lb.link, 0, of_kind(wire::OpKind::send), 3, 1, &dropped_psn);
  Sge sge{lb.a().addr(0), 10 * 1024, lb.a().mr.lkey};
  post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, 1));
  auto wb = lb.poll(lb.b(), 1);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wb[0].status, WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data(), 10 * 1024));
  // exactly one PSN-sequence NAK, carrying the missing PSN; the requester resent from it
  int naks = 0;
  for (auto& [s, p] : lb.link.trace)
    if (s == 1 && p.bth.opcode == wire::op::acknowledge && p.aeth.type() == wire::AethType::nak) {
      naks++;
      EXPECT_EQ(p.aeth.value(), 0);
      EXPECT_EQ(p.bth.psn, dropped_psn);
    }
  EXPECT_EQ(naks, 1);
  EXPECT_EQ(lb.a().eng->counter(Counter::rcvd_seq_err), 1u);
  EXPECT_EQ(lb.b().eng->counter(Counter::out_of_seq_request), 7u);
  int resent = 0;
  for (auto& [s, p] : lb.link.trace)
    if (s == 0 && p.bth.psn == dropped_psn) resent++;
  EXPECT_EQ(resent, 2);
  auto wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS);
}

// A READs 100 bytes of B's, then a WRITE the responder refuses: the NAK may overtake the READ response.
// Returns A's two completions.
std::vector<Wc> read_then_bad_write(Loopback& lb, uint32_t qa) {
  fill(lb.b().mem, 0, 100, 3);
  Sge rs{lb.a().addr(0), 100, lb.a().mr.lkey};
  SendWr r = make_rdma_wr(WR_RDMA_READ, &rs, lb.b().addr(0), lb.b().mr.rkey, 1);
  Sge ws{lb.a().addr(0x1000), 8, lb.a().mr.lkey};
  SendWr w = make_rdma_wr(WR_RDMA_WRITE, &ws, lb.b().addr(0), 0xbad00, 2);
  r.next = &w;
  post(lb.a(), qa, r);
  return lb.poll(lb.a(), 2);
}

TEST_F(RcNak, ErrorNakOvertakingReadResponseStillCompletesTheRead) {
  connect();
  lb.link.hook = [&](int side, const wire::Packet& p, std::vector<uint8_t>&) {
    if (side == 1 && of_kind(wire::OpKind::rdma_read_response)(p)) lb.link.hold_ns = 50'000;
    return Fate::pass;
  };
  auto wa = read_then_bad_write(lb, qa);
  ASSERT_EQ(wa.size(), 2u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data(), 100));
  EXPECT_EQ(wa[1].status, WC_REM_ACCESS_ERR);
}

TEST_F(RcNak, ErrorNakAfterLostReadResponseFailsTheReadAndFlushesTheRest) {
  connect();
  drop_frames(lb.link, 1, of_kind(wire::OpKind::rdma_read_response), 1, kEveryFrame);
  auto wa = read_then_bad_write(lb, qa);
  ASSERT_EQ(wa.size(), 2u);
  EXPECT_EQ(wa[0].status, WC_RETRY_EXC_ERR);  // the responder (now in ERR) never answers again
  EXPECT_EQ(wa[1].status, WC_WR_FLUSH_ERR);
}

TEST_F(RcLocal, BadLkeyIsLocalProtectionError) {
  connect();
  Sge sge{lb.a().addr(0), 8, lb.a().mr.lkey + 0x300};
  post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, 1));
  auto wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_LOC_PROT_ERR);
  expect_qp_state(lb.a(), qa, QPS_ERR);
}

}  // namespace
}  // namespace urxe::engine::test
