// RC acknowledgements: coalesced and cumulative ACKs, AckReq against a peer that acknowledges only on it,
// ACKs held for the application's answer, and the receive ring read while many QPs send.
#include "tests/sim/loopback.h"

namespace urxe::engine::test {
namespace {

TEST(RcAck, CoalescedAckEveryNPackets) {
  EngineConfig cfg;
  cfg.ack_every_n = 4;
  Loopback lb(cfg);
  auto [qa, qb] = lb.connect(QPT_RC);
  Sge sge{lb.a().addr(0), 10 * 1024, lb.a().mr.lkey};
  SendWr w = make_rdma_wr(WR_RDMA_WRITE, &sge, lb.b().addr(0), lb.b().mr.rkey, 1);
  post(lb.a(), qa, w);
  ASSERT_EQ(lb.poll(lb.a(), 1).size(), 1u);
  // 10 packets from PSN 0x100: ACKs after the 4th, the 8th and the last (AckReq)
  EXPECT_EQ(psns_of(lb.link, 1, wire::op::acknowledge), (std::vector<uint32_t>{0x103, 0x107, 0x109}));
}

TEST(RcAck, LongMessageAgainstAPeerThatAcksOnlyOnAckReq) {
  EngineConfig cfg;
  cfg.ack_every_n = 1u << 30;  // B acknowledges only on AckReq or the last packet, like rxe
  cfg.max_unacked_psns = 128;
  Loopback lb(cfg);
  auto [qa, qb] = lb.connect(QPT_RC);
  Sge sge{lb.a().addr(0), 512 * 1024, lb.a().mr.lkey};  // 512 packets: four windows
  SendWr w = make_rdma_wr(WR_RDMA_WRITE, &sge, lb.b().addr(0), lb.b().mr.rkey, 1);
  post(lb.a(), qa, w);
  auto wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS);
  EXPECT_EQ(lb.a().eng->counter(Counter::completer_retry_err), 0u);  // never stalled into a timeout
  int ackreq = 0;
  for (auto& [s, p] : lb.link.trace)
    if (s == 0 && p.bth.ack_req) ackreq++;
  EXPECT_EQ(ackreq, 512 / 64);  // every 64 packets (and the last)
}

// `n` signaled WRITEs chained for one post, with wr_ids 1 to n: the i-th (from 0) writes `len` bytes from
// A's offset i * stride to the same offset in B.
struct WriteChain {
  std::vector<Sge> sges;
  std::vector<SendWr> wrs;
  WriteChain(Loopback& lb, size_t n, uint32_t len, uint64_t stride) : sges(n), wrs(n) {
    for (size_t i = 0; i < n; i++) {
      const uint64_t off = stride * i;
      sges[i] = {lb.a().addr(off), len, lb.a().mr.lkey};
      wrs[i] = make_rdma_wr(WR_RDMA_WRITE, &sges[i], lb.b().addr(off), lb.b().mr.rkey, i + 1);
      if (i) wrs[i - 1].next = &wrs[i];
    }
  }
  // Posts the chain on A's QP `qa`; expects every WRITE to complete, successfully and in order.
  void run(Loopback& lb, uint32_t qa) {
    post(lb.a(), qa, wrs[0]);
    const auto wa = lb.poll(lb.a(), wrs.size());
    ASSERT_EQ(wa.size(), wrs.size());
    for (size_t i = 0; i < wa.size(); i++) {
      EXPECT_EQ(wa[i].wr_id, i + 1);
      EXPECT_EQ(wa[i].status, WC_SUCCESS);
    }
  }
};

TEST(RcAck, CumulativeAckCompletesSeveralWrs) {
  EngineConfig cfg;
  cfg.ack_every_n = 1;  // an ACK per WRITE (else the three, read in one round, share one)
  Loopback lb(cfg);
  auto [qa, qb] = lb.connect(QPT_RC);
  // drop the ACKs of the first two WRITEs: the third ACK completes all three, in order
  drop_frames(lb.link, 1, with_opcode(wire::op::acknowledge), 1, 2);
  WriteChain chain(lb, 3, 16, 0);
  ASSERT_NO_FATAL_FAILURE(chain.run(lb, qa));
  EXPECT_EQ(lb.a().eng->counter(Counter::completer_retry_err), 0u);  // no timeout was needed
}

TEST(RcAck, WritesReadInOneRoundShareAnAck) {
  Loopback lb;  // ack_every_n 16 by default
  auto [qa, qb] = lb.connect(QPT_RC);
  constexpr int kWrites = 8;
  for (int i = 0; i < kWrites; i++) lb.a().mem[64 * static_cast<size_t>(i)] = static_cast<uint8_t>(i + 1);
  WriteChain chain(lb, kWrites, 64, 64);
  // one post: the eight frames leave in one burst, so B reads them in one round; they complete in order,
  // each by the shared ACK
  ASSERT_NO_FATAL_FAILURE(chain.run(lb, qa));
  for (int i = 0; i < kWrites; i++) EXPECT_EQ(lb.b().mem[64 * static_cast<size_t>(i)], i + 1);
  // one ACK, with the last WRITE's PSN (the first is 0x100)
  EXPECT_EQ(psns_of(lb.link, 1, wire::op::acknowledge), (std::vector<uint32_t>{0x107}));
  EXPECT_EQ(lb.a().eng->counter(Counter::completer_retry_err), 0u);  // no timeout was needed
}

// An application's round (poll_cq's) that completes a receive and has only the ACK to send keeps the ACK
// for its next round, which sends the app's answer first and the ACK after it; any other round sends at
// once, and held ACKs wait at most Engine::kAckHoldNs (next_deadline_ns), so the peer's send completes.
TEST(RcAckHold, AppRoundSendsItsAnswerBeforeTheAck) {
  const uint8_t kSendOnly = wire::make_opcode(wire::op::kRc, wire::op::send_only);
  const uint8_t kAck = wire::make_opcode(wire::op::kRc, wire::op::acknowledge);
  for (const bool hold : {true, false}) {
    SCOPED_TRACE(hold ? "hold_acks" : "no hold_acks");
    EngineConfig cfg;
    cfg.hold_acks = hold;
    WatchPort* ports[2] = {};
    Loopback lb(cfg, 1500, 1 << 20, false, wrap_side(1, ports));
    WatchPort* const watch = ports[1];
    ASSERT_NE(watch, nullptr);
    const auto [qa, qb] = lb.connect(QPT_RC);
    Sge sa{lb.a().addr(0), 64, lb.a().mr.lkey}, sb{lb.b().addr(4096), 64, lb.b().mr.lkey};
    Engine& b = *lb.b().eng;
    Wc wc[4];
    auto arrive = [&] {  // the link's delivery time for what A sent
      const uint64_t next = lb.link.net.next_event_time();
      if (next != UINT64_MAX && next > lb.link.clock.t) lb.link.clock.t = next;
    };
    // A's SEND (B has a receive for it) reaches B in an app round of B's
    auto send_to_b = [&](uint64_t id) {
      post_recv(lb.b(), qb, 0, 64, id);
      post(lb.a(), qa, make_wr(WR_SEND, &sa, 1, id + 1));
      lb.a().eng->progress();
      arrive();
      b.try_progress(nullptr, Engine::Round::app);
    };
    // A's SEND reaches B in B's app round: the receive completes, the ACK is held (or not)
    send_to_b(1);
    ASSERT_EQ(b.poll_cq(lb.b().cq, 4, wc), 1);
    EXPECT_EQ(wc[0].opcode, WC_RECV);
    EXPECT_EQ(b.acks_held(), hold);
    EXPECT_EQ(watch->opcodes.size(), hold ? 0u : 1u);
    if (hold) {
      EXPECT_EQ(b.next_deadline_ns(), lb.link.clock.t + Engine::kAckHoldNs);
    }
    // B answers: its SEND leaves first, the held ACK behind it in the same round and the same transmit
    // call (a packet-socket port makes a send() per call; the peer waits for the ACK too)
    post_recv(lb.a(), qa, 0, 64, 3);
    post(lb.b(), qb, make_wr(WR_SEND, &sb, 1, 4));
    b.try_progress(nullptr, Engine::Round::app);
    EXPECT_FALSE(b.acks_held());
    const std::vector<uint8_t> order =
        hold ? std::vector<uint8_t>{kSendOnly, kAck} : std::vector<uint8_t>{kAck, kSendOnly};
    EXPECT_EQ(watch->opcodes, order);
    if (hold) {
      EXPECT_EQ(watch->bursts, std::vector<uint32_t>{2});
    }
    const auto done_a = lb.poll(lb.a(), 2);  // A: its SEND acknowledged, B's received
    ASSERT_EQ(done_a.size(), 2u);
    for (const Wc& w : done_a) EXPECT_EQ(w.status, WC_SUCCESS);
    auto quiet = [&] {  // everything delivered and B's completions taken (its SEND's, by A's ACK)
      lb.settle();
      while (b.poll_cq(lb.b().cq, 4, wc) > 0) {
      }
    };
    quiet();

    // A WRITE placed in memory (no completion: its app may spin on that memory, as ib_write_lat does) holds
    // its ACK too, also in a round of the progress thread; the app's answer, a post whose round runs at
    // once, takes it along in the same transmit call
    watch->opcodes.clear();
    watch->bursts.clear();
    const uint8_t kWriteOnly = wire::make_opcode(wire::op::kRc, wire::op::write_only);
    Sge wr_sge{lb.a().addr(0), 64, lb.a().mr.lkey};
    auto write_to_b = [&](uint64_t id) {
      post(lb.a(), qa, make_rdma_wr(WR_RDMA_WRITE, &wr_sge, lb.b().addr(8192), lb.b().mr.rkey, id));
      lb.a().eng->progress();
      arrive();
      b.try_progress(nullptr, Engine::Round::thread);
    };
    write_to_b(5);
    EXPECT_EQ(b.acks_held(), hold);
    EXPECT_EQ(watch->opcodes.size(), hold ? 0u : 1u);
    if (hold) {
      EXPECT_EQ(b.next_deadline_ns(), lb.link.clock.t + Engine::kAckHoldNs);
    }
    b.try_progress(nullptr, Engine::Round::thread);  // (nothing new: still held)
    EXPECT_EQ(b.acks_held(), hold);
    Sge back{lb.b().addr(0), 64, lb.b().mr.lkey};
    post(lb.b(), qb, make_rdma_wr(WR_RDMA_WRITE, &back, lb.a().addr(8192), lb.a().mr.rkey, 6));
    b.try_progress();
    EXPECT_FALSE(b.acks_held());
    const std::vector<uint8_t> write_order =
        hold ? std::vector<uint8_t>{kWriteOnly, kAck} : std::vector<uint8_t>{kAck, kWriteOnly};
    EXPECT_EQ(watch->opcodes, write_order);
    if (hold) {
      EXPECT_EQ(watch->bursts.back(), 2u);
    }
    ASSERT_EQ(lb.poll(lb.a(), 1).size(), 1u);
    quiet();
    // A stream: a WRITE placed while the ACK of the one before waits sends both ACKs (nobody answered), and
    // then the ACKs of the next rounds that place a WRITE go at once: one round after the first unanswered
    // hold, two after the second in a row, ... (EngineImpl::kWriteHoldBackoff at most); an answered hold
    // ends that, so an app that answered late once loses its hold for one exchange only
    watch->opcodes.clear();
    write_to_b(30);
    EXPECT_EQ(b.acks_held(), hold);
    write_to_b(31);
    EXPECT_FALSE(b.acks_held());
    EXPECT_EQ(watch->opcodes, (std::vector<uint8_t>{kAck, kAck}));
    write_to_b(32);  // the one round skipped: its ACK goes at once
    EXPECT_FALSE(b.acks_held());
    EXPECT_EQ(watch->opcodes.size(), 3u);
    write_to_b(33);  // held again
    EXPECT_EQ(b.acks_held(), hold);
    write_to_b(34);  // unanswered again, the second in a row: two rounds skip
    EXPECT_FALSE(b.acks_held());
    for (uint64_t id : {35, 36}) {
      write_to_b(id);
      EXPECT_FALSE(b.acks_held());
    }
    write_to_b(37);
    EXPECT_EQ(b.acks_held(), hold);
    post(lb.b(), qb, make_rdma_wr(WR_RDMA_WRITE, &back, lb.a().addr(8192), lb.a().mr.rkey, 38));
    b.try_progress();  // B's app answers: the ACK goes behind its WRITE
    EXPECT_FALSE(b.acks_held());
    EXPECT_EQ(watch->opcodes.size(), 9u);  // the 8 ACKs and B's WRITE, the last ACK behind it
    if (hold) {
      EXPECT_EQ(watch->opcodes.back(), kAck);
      EXPECT_EQ(watch->opcodes[watch->opcodes.size() - 2], kWriteOnly);
    }
    write_to_b(39);
    EXPECT_EQ(b.acks_held(), hold);
    write_to_b(40);  // unanswered, the first since the answer: one round skips
    EXPECT_FALSE(b.acks_held());
    write_to_b(41);
    EXPECT_FALSE(b.acks_held());
    write_to_b(42);
    EXPECT_EQ(b.acks_held(), hold);
    post(lb.b(), qb, make_rdma_wr(WR_RDMA_WRITE, &back, lb.a().addr(8192), lb.a().mr.rkey, 43));
    b.try_progress();
    EXPECT_FALSE(b.acks_held());
    ASSERT_EQ(lb.poll(lb.a(), 12).size(), 12u);  // A's 12 WRITEs acknowledged
    quiet();

    // A round that completed nothing and placed nothing holds nothing (A's READ), nor does a round that
    // is neither the app's nor the progress thread's (a control verb's, progress())
    watch->opcodes.clear();
    post(lb.a(), qa, make_rdma_wr(WR_RDMA_READ, &wr_sge, lb.b().addr(8192), lb.b().mr.rkey, 33));
    lb.a().eng->progress();
    arrive();
    b.try_progress(nullptr, Engine::Round::app);
    EXPECT_FALSE(b.acks_held());
    EXPECT_EQ(watch->opcodes.size(), 1u);  // the READ response
    ASSERT_EQ(lb.poll(lb.a(), 1).size(), 1u);
    quiet();
    watch->opcodes.clear();
    post_recv(lb.b(), qb, 0, 64, 6);
    post(lb.a(), qa, make_wr(WR_SEND, &sa, 1, 7));
    lb.a().eng->progress();
    arrive();
    b.progress();
    EXPECT_FALSE(b.acks_held());
    EXPECT_EQ(watch->opcodes, std::vector<uint8_t>{kAck});
    ASSERT_EQ(lb.poll(lb.a(), 1).size(), 1u);
    quiet();

    // A completion that raises an event (its CQ armed: the app waits on a channel) is not held for: the
    // peer's send completion must come before the answer's receive, as from a NIC that ACKs at once
    watch->opcodes.clear();
    ASSERT_EQ(b.req_notify_cq(lb.b().cq, false), 0);
    send_to_b(20);
    EXPECT_FALSE(b.acks_held());
    EXPECT_EQ(watch->opcodes, std::vector<uint8_t>{kAck});
    ASSERT_EQ(b.poll_cq(lb.b().cq, 4, wc), 1);
    ASSERT_EQ(lb.poll(lb.a(), 1).size(), 1u);
    quiet();

    // The app polls again before it answers (perftest waits for its SEND's completion, then polls the
    // receive CQ): while the completion is unread, its rounds keep the ACK; once it is read, or after
    // kAckHoldNs, the next round sends it
    for (const bool read_it : {true, false}) {
      SCOPED_TRACE(read_it ? "completion read" : "completion left unread");
      watch->opcodes.clear();
      send_to_b(10);
      EXPECT_EQ(b.acks_held(), hold);
      b.try_progress(nullptr, Engine::Round::app);
      EXPECT_EQ(b.acks_held(), hold);
      if (read_it) {
        ASSERT_EQ(b.poll_cq(lb.b().cq, 4, wc), 1);
      } else {
        lb.link.clock.t += Engine::kAckHoldNs;
      }
      b.try_progress(nullptr, Engine::Round::app);
      EXPECT_FALSE(b.acks_held());
      EXPECT_EQ(watch->opcodes, std::vector<uint8_t>{kAck});
      ASSERT_EQ(lb.poll(lb.a(), 1).size(), 1u);
      quiet();
    }

    // A held ACK whose app does not come back: the progress thread's next round sends it
    watch->opcodes.clear();
    send_to_b(8);
    EXPECT_EQ(b.acks_held(), hold);
    const auto sent = lb.poll(lb.a(), 1);
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_EQ(sent[0].status, WC_SUCCESS);
    EXPECT_FALSE(b.acks_held());
    EXPECT_EQ(watch->opcodes, std::vector<uint8_t>{kAck});
    EXPECT_EQ(lb.idle_spins, 0u);
  }
}

// A progress round that sends the windows of many QPs keeps reading the receive ring in between, so the
// peer's ACKs do not pile up there (on a real port a full ring drops them: timeouts, resends, collapse).
TEST(RcManyQps, ReceiveRingIsReadWhileManyQpsSend) {
  EngineConfig cfg;
  WatchPort* ports[2] = {};
  Loopback lb(cfg, 1500, 1 << 20, false, wrap_side(0, ports));
  WatchPort* const watch = ports[0];
  ASSERT_NE(watch, nullptr);
  constexpr int kQps = 128, kWrs = 16;
  std::vector<uint32_t> qas;
  for (int i = 0; i < kQps; i++) qas.push_back(lb.connect(QPT_RC).first);
  Sge sge{lb.a().addr(0), 64, lb.a().mr.lkey};
  for (uint32_t qa : qas)
    for (int w = 0; w < kWrs; w++) {
      post(lb.a(), qa,
           make_rdma_wr(WR_RDMA_WRITE, &sge, lb.b().addr(4096), lb.b().mr.rkey, static_cast<uint64_t>(w)));
    }
  // two rounds: every QP's window goes out (with this many QPs active a QP's turn in a round is shorter than
  // its window of 16 frames: a turn of all of them stays near a thousand frames)
  lb.a().eng->progress();
  lb.a().eng->progress();
  EXPECT_GE(watch->total_tx, uint64_t{kQps} * kWrs);
  EXPECT_LE(watch->max_between_rx, uint64_t{cfg.rx_burst + cfg.tx_budget});
  EXPECT_EQ(lb.poll(lb.a(), kQps * kWrs).size(), size_t{kQps} * kWrs);  // and all of them complete
}

}  // namespace
}  // namespace urxe::engine::test
