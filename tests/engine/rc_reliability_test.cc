// RC reliability: each NAK code, RNR, retransmit timeout and retry exhaustion, duplicate READ re-execution,
// atomic replay, go-back-N, ACK coalescing, corruption, and each remote error status with the flush after it.
#include <random>

#include "tests/sim/loopback.h"

namespace urxe::engine::test {
namespace {

int count_naks(const Link& l, int side, wire::AethType type, uint8_t value) {
  int c = 0;
  for (auto& [s, p] : l.trace)
    if (s == side && p.bth.opcode == wire::op::acknowledge && p.aeth.type() == type &&
        p.aeth.value() == value)
      c++;
  return c;
}

// Sends `wr` from A; expects A's completion with `status`, then the QP in ERR and a second WR flushed.
void expect_remote_error(Loopback& lb, uint32_t qa, SendWr wr, WcStatus status) {
  Sge s2{lb.a().addr(0), 4, lb.a().mr.lkey};
  SendWr after = make_wr(WR_RDMA_WRITE, &s2, 1, 99);
  after.rdma.remote_addr = lb.b().addr(0);
  after.rdma.rkey = lb.b().mr.rkey;
  wr.next = &after;
  post(lb.a(), qa, wr);
  auto wa = lb.poll(lb.a(), 2);
  ASSERT_EQ(wa.size(), 2u);
  EXPECT_EQ(wa[0].status, status) << wc_status_str(wa[0].status);
  EXPECT_EQ(wa[0].wr_id, wr.wr_id);
  EXPECT_EQ(wa[1].status, WC_WR_FLUSH_ERR);
  EXPECT_EQ(wa[1].wr_id, 99u);
  QpAttr at;
  ASSERT_EQ(0, lb.a().eng->query_qp(qa, at));
  EXPECT_EQ(at.qp_state, QPS_ERR);
}

TEST(RcNak, RemoteAccessErrorBadRkey) {
  Loopback lb;
  auto [qa, qb] = lb.connect(QPT_RC);
  Sge sge{lb.a().addr(0), 100, lb.a().mr.lkey};
  SendWr w = make_wr(WR_RDMA_WRITE, &sge, 1, 1);
  w.rdma.remote_addr = lb.b().addr(0);
  w.rdma.rkey = lb.b().mr.rkey ^ 0x1;  // right index, wrong key
  expect_remote_error(lb, qa, w, WC_REM_ACCESS_ERR);
  EXPECT_EQ(count_naks(lb.link, 1, wire::AethType::nak, 2), 1);
  EXPECT_TRUE(lb.b().events.has(EVENT_QP_ACCESS_ERR));
  QpAttr at;
  ASSERT_EQ(0, lb.b().eng->query_qp(qb, at));
  EXPECT_EQ(at.qp_state, QPS_ERR);
}

TEST(RcNak, RemoteAccessErrorOutOfBounds) {
  Loopback lb;
  auto [qa, qb] = lb.connect(QPT_RC);
  Sge sge{lb.a().addr(0), 100, lb.a().mr.lkey};
  SendWr w = make_wr(WR_RDMA_READ, &sge, 1, 1);
  w.rdma.remote_addr = lb.b().addr(lb.b().mem.size() - 50);  // runs 50 bytes past the MR
  w.rdma.rkey = lb.b().mr.rkey;
  expect_remote_error(lb, qa, w, WC_REM_ACCESS_ERR);
}

TEST(RcNak, RemoteAccessErrorMrWithoutRemoteWrite) {
  Loopback lb;
  auto [qa, qb] = lb.connect(QPT_RC);
  std::vector<uint8_t> ro(256);
  MrInfo mr;
  ASSERT_EQ(0, lb.b().eng->reg_mr(lb.b().pd, ro.data(), ro.size(), reinterpret_cast<uintptr_t>(ro.data()),
                                  ACCESS_REMOTE_READ, mr));
  Sge sge{lb.a().addr(0), 16, lb.a().mr.lkey};
  SendWr w = make_wr(WR_RDMA_WRITE, &sge, 1, 1);
  w.rdma.remote_addr = reinterpret_cast<uintptr_t>(ro.data());
  w.rdma.rkey = mr.rkey;
  expect_remote_error(lb, qa, w, WC_REM_ACCESS_ERR);
  EXPECT_EQ(ro, std::vector<uint8_t>(256, 0));
}

TEST(RcNak, RemoteAccessErrorMrOfAnotherPd) {
  Loopback lb;
  auto [qa, qb] = lb.connect(QPT_RC);
  uint32_t pd2;
  ASSERT_EQ(0, lb.b().eng->alloc_pd(pd2));
  std::vector<uint8_t> other(256);
  MrInfo mr;
  ASSERT_EQ(0, lb.b().eng->reg_mr(pd2, other.data(), other.size(), reinterpret_cast<uintptr_t>(other.data()),
                                  ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE, mr));
  Sge sge{lb.a().addr(0), 16, lb.a().mr.lkey};
  SendWr w = make_wr(WR_RDMA_WRITE, &sge, 1, 1);
  w.rdma.remote_addr = reinterpret_cast<uintptr_t>(other.data());
  w.rdma.rkey = mr.rkey;
  expect_remote_error(lb, qa, w, WC_REM_ACCESS_ERR);
}

TEST(RcNak, InvalidRequestMisalignedAtomic) {
  Loopback lb;
  auto [qa, qb] = lb.connect(QPT_RC);
  Sge sge{lb.a().addr(0), 8, lb.a().mr.lkey};
  SendWr w = make_wr(WR_ATOMIC_FETCH_AND_ADD, &sge, 1, 1);
  w.atomic.remote_addr = lb.b().addr(4);
  w.atomic.rkey = lb.b().mr.rkey;
  w.atomic.compare_add = 1;
  expect_remote_error(lb, qa, w, WC_REM_INV_REQ_ERR);
  EXPECT_EQ(count_naks(lb.link, 1, wire::AethType::nak, 1), 1);
  EXPECT_TRUE(lb.b().events.has(EVENT_QP_REQ_ERR));
}

TEST(RcNak, InvalidRequestQpWithoutRemoteRead) {
  Loopback lb;
  ConnOpts o;
  o.access = ACCESS_REMOTE_WRITE;
  auto [qa, qb] = lb.connect(QPT_RC, o);
  Sge sge{lb.a().addr(0), 8, lb.a().mr.lkey};
  SendWr w = make_wr(WR_RDMA_READ, &sge, 1, 1);
  w.rdma.remote_addr = lb.b().addr(0);
  w.rdma.rkey = lb.b().mr.rkey;
  expect_remote_error(lb, qa, w, WC_REM_INV_REQ_ERR);
}

TEST(RcNak, InvalidRequestReceiveBufferTooSmall) {
  Loopback lb;
  auto [qa, qb] = lb.connect(QPT_RC);
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
TEST(RcNak, InvalidRequestReceiveBufferTooSmallForALongSend) {
  Loopback lb;
  auto [qa, qb] = lb.connect(QPT_RC);
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

TEST(RcNak, RemoteOperationalErrorBadReceiveLkey) {
  Loopback lb;
  auto [qa, qb] = lb.connect(QPT_RC);
  post_recv(lb.b(), qb, 0, 100, 5, lb.b().mr.lkey + 0x100);  // no such MR
  Sge sge{lb.a().addr(0), 50, lb.a().mr.lkey};
  expect_remote_error(lb, qa, make_wr(WR_SEND, &sge, 1, 1), WC_REM_OP_ERR);
  EXPECT_EQ(count_naks(lb.link, 1, wire::AethType::nak, 3), 1);
  auto wb = lb.poll(lb.b(), 1);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wb[0].status, WC_LOC_PROT_ERR);
}

TEST(RcNak, PsnSequenceErrorOncePerGapThenGoBackN) {
  Loopback lb;
  auto [qa, qb] = lb.connect(QPT_RC);
  post_recv(lb.b(), qb, 0, 16384, 1);
  fill(lb.a().mem, 0, 10 * 1024, 3);
  int seen = 0;
  uint32_t dropped_psn = 0;
  lb.link.hook = [&](int side, const wire::Packet& p, std::vector<uint8_t>&) {
    if (side == 0 && p.info && p.info->kind == wire::OpKind::send && ++seen == 3) {
      dropped_psn = p.bth.psn;
      return Fate::drop;  // the third packet of a ten-packet message
    }
    return Fate::pass;
  };
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

// READ, then a WRITE the responder refuses: the NAK may overtake the READ response.
struct ReadThenBadWrite {
  Loopback lb;
  uint32_t qa = 0, qb = 0;
  ReadThenBadWrite() {
    std::tie(qa, qb) = lb.connect(QPT_RC);
    fill(lb.b().mem, 0, 100, 3);
  }
  std::vector<Wc> run() {
    Sge rs{lb.a().addr(0), 100, lb.a().mr.lkey};
    SendWr r = make_wr(WR_RDMA_READ, &rs, 1, 1);
    r.rdma.remote_addr = lb.b().addr(0);
    r.rdma.rkey = lb.b().mr.rkey;
    Sge ws{lb.a().addr(0x1000), 8, lb.a().mr.lkey};
    SendWr w = make_wr(WR_RDMA_WRITE, &ws, 1, 2);
    w.rdma.remote_addr = lb.b().addr(0);
    w.rdma.rkey = 0xbad00;
    r.next = &w;
    post(lb.a(), qa, r);
    return lb.poll(lb.a(), 2);
  }
};

TEST(RcNak, ErrorNakOvertakingReadResponseStillCompletesTheRead) {
  ReadThenBadWrite t;
  t.lb.link.hook = [&](int side, const wire::Packet& p, std::vector<uint8_t>&) {
    if (side == 1 && p.info && p.info->kind == wire::OpKind::rdma_read_response) t.lb.link.hold_ns = 50'000;
    return Fate::pass;
  };
  auto wa = t.run();
  ASSERT_EQ(wa.size(), 2u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(t.lb.a().mem.data(), t.lb.b().mem.data(), 100));
  EXPECT_EQ(wa[1].status, WC_REM_ACCESS_ERR);
}

TEST(RcNak, ErrorNakAfterLostReadResponseFailsTheReadAndFlushesTheRest) {
  ReadThenBadWrite t;
  t.lb.link.hook = [&](int side, const wire::Packet& p, std::vector<uint8_t>&) {
    return (side == 1 && p.info && p.info->kind == wire::OpKind::rdma_read_response) ? Fate::drop
                                                                                     : Fate::pass;
  };
  auto wa = t.run();
  ASSERT_EQ(wa.size(), 2u);
  EXPECT_EQ(wa[0].status, WC_RETRY_EXC_ERR);  // the responder (now in ERR) never answers again
  EXPECT_EQ(wa[1].status, WC_WR_FLUSH_ERR);
}

TEST(RcRnr, RnrNakThenRetrySucceedsAfterReceivePosted) {
  Loopback lb;
  ConnOpts o;
  o.min_rnr_timer = 14;  // 1.92 ms
  o.rnr_retry = 3;
  auto [qa, qb] = lb.connect(QPT_RC, o);
  Sge sge{lb.a().addr(0), 64, lb.a().mr.lkey};
  post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, 1));
  lb.run([&] { return count_naks(lb.link, 1, wire::AethType::rnr_nak, 14) == 1; });
  ASSERT_EQ(count_naks(lb.link, 1, wire::AethType::rnr_nak, 14), 1);
  const uint64_t t_nak = lb.link.clock.t;
  post_recv(lb.b(), qb, 0, 64, 1);
  auto wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS);
  // the resend waited at least the coded RNR time
  uint64_t resend_at = 0;
  (void)resend_at;
  EXPECT_GE(lb.link.clock.t - t_nak, wire::rnr_timer_ns(14));
  EXPECT_EQ(lb.a().eng->counter(Counter::rcvd_rnr_err), 1u);
  EXPECT_EQ(lb.b().eng->counter(Counter::send_rnr_err), 1u);
}

TEST(RcRnr, RnrRetryExceeded) {
  Loopback lb;
  ConnOpts o;
  o.rnr_retry = 2;
  auto [qa, qb] = lb.connect(QPT_RC, o);
  Sge sge{lb.a().addr(0), 64, lb.a().mr.lkey};
  expect_remote_error(lb, qa, make_wr(WR_SEND, &sge, 1, 1), WC_RNR_RETRY_EXC_ERR);
  EXPECT_EQ(count_naks(lb.link, 1, wire::AethType::rnr_nak, 1), 3);  // first try + 2 retries
  EXPECT_EQ(lb.a().eng->counter(Counter::retry_rnr_exceeded_err), 1u);
}

TEST(RcRnr, RnrRetrySevenIsInfinite) {
  Loopback lb;
  ConnOpts o;
  o.rnr_retry = 7;
  auto [qa, qb] = lb.connect(QPT_RC, o);
  Sge sge{lb.a().addr(0), 64, lb.a().mr.lkey};
  post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, 1));
  lb.run([&] { return count_naks(lb.link, 1, wire::AethType::rnr_nak, 1) >= 20; });
  EXPECT_GE(count_naks(lb.link, 1, wire::AethType::rnr_nak, 1), 20);
  post_recv(lb.b(), qb, 0, 64, 1);
  auto wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS);
}

TEST(RcRetry, LostAckRecoveredByTimeout) {
  Loopback lb;
  auto [qa, qb] = lb.connect(QPT_RC);
  post_recv(lb.b(), qb, 0, 64, 1);
  bool dropped = false;
  lb.link.hook = [&](int side, const wire::Packet& p, std::vector<uint8_t>&) {
    if (side == 1 && p.bth.opcode == wire::op::acknowledge && !dropped) {
      dropped = true;
      return Fate::drop;
    }
    return Fate::pass;
  };
  Sge sge{lb.a().addr(0), 64, lb.a().mr.lkey};
  post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, 1));
  const uint64_t t0 = lb.link.clock.t;
  auto wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS);
  EXPECT_GE(lb.link.clock.t - t0, uint64_t{4096} << 14);  // timeout 14 = 67 ms
  EXPECT_EQ(lb.b().eng->counter(Counter::duplicate_request), 1u);
  EXPECT_EQ(lb.a().eng->counter(Counter::completer_retry_err), 1u);
  auto wb = lb.poll(lb.b(), 2, 1'000'000'000);
  EXPECT_EQ(wb.size(), 1u);  // the duplicate is not delivered twice
}

// A duplicate SEND or WRITE whose newest executed request is a READ is acknowledged up to the request
// before it, never with that READ's PSN: kernel rxe's completer takes an ACK whose PSN is a pending READ's
// last PSN for that READ's completion, with no data (rping -V against rxe under loss: its server then
// wrote stale data). The READ, retried after the SEND, is then answered with its data.
TEST(RcRetry, AckOfDuplicateSendStopsBeforeALaterRead) {
  Loopback lb;
  auto [qa, qb] = lb.connect(QPT_RC);
  post_recv(lb.b(), qb, 0, 64, 1);
  fill(lb.b().mem, 4096, 64, 5);
  bool dropped = false;  // B's first frame after the SEND and READ went: their ACK / READ response
  lb.link.hook = [&](int side, const wire::Packet& p, std::vector<uint8_t>&) {
    if (side == 1 && p.info && p.info->kind == wire::OpKind::rdma_read_response && !dropped) {
      dropped = true;
      return Fate::drop;
    }
    return Fate::pass;
  };
  Sge s{lb.a().addr(0), 64, lb.a().mr.lkey}, r{lb.a().addr(8192), 64, lb.a().mr.lkey};
  post(lb.a(), qa, make_wr(WR_SEND, &s, 1, 1));
  post(lb.a(), qa, make_rdma_wr(WR_RDMA_READ, &r, lb.b().addr(4096), lb.b().mr.rkey, 2));
  const auto wa = lb.poll(lb.a(), 2);
  ASSERT_EQ(wa.size(), 2u);
  for (const Wc& c : wa) EXPECT_EQ(c.status, WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data() + 8192, lb.b().mem.data() + 4096, 64));
  uint32_t read_psn = 0, sends = 0;
  for (auto& [side, p] : lb.link.trace) {
    if (side == 0 && p.bth.opcode == wire::op::read_request) read_psn = p.bth.psn;
    if (side == 0 && p.bth.opcode == wire::op::send_only) sends++;
  }
  EXPECT_EQ(sends, 2u);  // the SEND went again (go-back-N from it), so B saw it as a duplicate
  EXPECT_GE(lb.b().eng->counter(Counter::duplicate_request), 1u);
  for (auto& [side, p] : lb.link.trace) {
    if (side == 1 && p.bth.opcode == wire::op::acknowledge) {
      EXPECT_NE(p.bth.psn, read_psn);
    }
  }
}

TEST(RcRetry, RetryExceededOnBlackhole) {
  Loopback lb;
  ConnOpts o;
  o.retry_cnt = 3;
  o.timeout = 10;
  auto [qa, qb] = lb.connect(QPT_RC, o);
  lb.link.hook = [&](int side, const wire::Packet&, std::vector<uint8_t>&) {
    return side == 0 ? Fate::drop : Fate::pass;
  };
  Sge sge{lb.a().addr(0), 64, lb.a().mr.lkey};
  expect_remote_error(lb, qa, make_wr(WR_SEND, &sge, 1, 1), WC_RETRY_EXC_ERR);
  EXPECT_EQ(count_ops(lb.link, 0, wire::op::send_only), 4);  // first try + retry_cnt
  EXPECT_EQ(lb.a().eng->counter(Counter::retry_exceeded_err), 1u);
}

TEST(RcRead, LostResponseReRequestsRemainingBytes) {
  Loopback lb;
  auto [qa, qb] = lb.connect(QPT_RC);
  fill(lb.b().mem, 0, 8192, 7);
  int n = 0;
  uint32_t lost_psn = 0;
  lb.link.hook = [&](int side, const wire::Packet& p, std::vector<uint8_t>&) {
    if (side == 1 && p.info && p.info->kind == wire::OpKind::rdma_read_response && ++n == 4) {
      lost_psn = p.bth.psn;
      return Fate::drop;
    }
    return Fate::pass;
  };
  Sge sge{lb.a().addr(0), 8192, lb.a().mr.lkey};
  SendWr w = make_wr(WR_RDMA_READ, &sge, 1, 1);
  w.rdma.remote_addr = lb.b().addr(0);
  w.rdma.rkey = lb.b().mr.rkey;
  post(lb.a(), qa, w);
  auto wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data(), 8192));
  // the second READ request starts at the lost PSN and asks for the rest only (like rxe)
  std::vector<wire::Packet> reqs;
  for (auto& [s, p] : lb.link.trace)
    if (s == 0 && p.bth.opcode == wire::op::read_request) reqs.push_back(p);
  if (reqs.size() != 2u)
    for (auto& [s, p] : lb.link.trace)
      printf("%d %s psn=%x len=%u aeth=%x\n", s, std::string(p.info ? p.info->name : "?").c_str(), p.bth.psn,
             p.payload_len, p.aeth.syndrome);
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[1].bth.psn, lost_psn);
  EXPECT_EQ(reqs[1].reth.dma_len, 8192u - 3 * 1024);
  EXPECT_EQ(reqs[1].reth.va, lb.b().addr(3 * 1024));
  EXPECT_EQ(lb.b().eng->counter(Counter::duplicate_request), 1u);  // re-executed as a duplicate
}

TEST(RcRead, DuplicateReadAfterLostLastResponseReExecuted) {
  Loopback lb;
  auto [qa, qb] = lb.connect(QPT_RC);
  fill(lb.b().mem, 0, 100, 9);
  bool dropped = false;
  lb.link.hook = [&](int side, const wire::Packet& p, std::vector<uint8_t>&) {
    if (side == 1 && p.info && p.info->kind == wire::OpKind::rdma_read_response && !dropped) {
      dropped = true;
      return Fate::drop;
    }
    return Fate::pass;
  };
  Sge sge{lb.a().addr(0), 100, lb.a().mr.lkey};
  SendWr w = make_wr(WR_RDMA_READ, &sge, 1, 1);
  w.rdma.remote_addr = lb.b().addr(0);
  w.rdma.rkey = lb.b().mr.rkey;
  post(lb.a(), qa, w);
  auto wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data(), 100));
  EXPECT_EQ(count_ops(lb.link, 1, wire::op::read_response_only), 2);
  EXPECT_EQ(lb.b().eng->counter(Counter::duplicate_request), 1u);
}

TEST(RcAtomic, LostAtomicAckReplayedNotReExecuted) {
  Loopback lb;
  auto [qa, qb] = lb.connect(QPT_RC);
  uint64_t v = 1000;
  std::memcpy(lb.b().mem.data() + 8, &v, 8);
  bool dropped = false;
  lb.link.hook = [&](int side, const wire::Packet& p, std::vector<uint8_t>&) {
    if (side == 1 && p.bth.opcode == wire::op::atomic_acknowledge && !dropped) {
      dropped = true;
      return Fate::drop;
    }
    return Fate::pass;
  };
  Sge sge{lb.a().addr(0), 8, lb.a().mr.lkey};
  SendWr w = make_wr(WR_ATOMIC_FETCH_AND_ADD, &sge, 1, 1);
  w.atomic.remote_addr = lb.b().addr(8);
  w.atomic.rkey = lb.b().mr.rkey;
  w.atomic.compare_add = 1;
  post(lb.a(), qa, w);
  auto wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS);
  uint64_t orig, now;
  std::memcpy(&orig, lb.a().mem.data(), 8);
  std::memcpy(&now, lb.b().mem.data() + 8, 8);
  EXPECT_EQ(orig, 1000u);  // the replayed answer is the original one
  EXPECT_EQ(now, 1001u);   // added once
  EXPECT_EQ(count_ops(lb.link, 0, wire::op::fetch_add), 2);
  EXPECT_EQ(count_ops(lb.link, 1, wire::op::atomic_acknowledge), 2);
}

TEST(RcAck, CoalescedAckEveryNPackets) {
  EngineConfig cfg;
  cfg.ack_every_n = 4;
  Loopback lb(cfg);
  auto [qa, qb] = lb.connect(QPT_RC);
  Sge sge{lb.a().addr(0), 10 * 1024, lb.a().mr.lkey};
  SendWr w = make_wr(WR_RDMA_WRITE, &sge, 1, 1);
  w.rdma.remote_addr = lb.b().addr(0);
  w.rdma.rkey = lb.b().mr.rkey;
  post(lb.a(), qa, w);
  ASSERT_EQ(lb.poll(lb.a(), 1).size(), 1u);
  std::vector<uint32_t> ack_psns;
  for (auto& [s, p] : lb.link.trace)
    if (s == 1 && p.bth.opcode == wire::op::acknowledge) ack_psns.push_back(p.bth.psn);
  // 10 packets from PSN 0x100: ACKs after the 4th, the 8th and the last (AckReq)
  EXPECT_EQ(ack_psns, (std::vector<uint32_t>{0x103, 0x107, 0x109}));
}

TEST(RcAck, LongMessageAgainstAPeerThatAcksOnlyOnAckReq) {
  EngineConfig cfg;
  cfg.ack_every_n = 1u << 30;  // B acknowledges only on AckReq or the last packet, like rxe
  cfg.max_unacked_psns = 128;
  Loopback lb(cfg);
  auto [qa, qb] = lb.connect(QPT_RC);
  Sge sge{lb.a().addr(0), 512 * 1024, lb.a().mr.lkey};  // 512 packets: four windows
  SendWr w = make_wr(WR_RDMA_WRITE, &sge, 1, 1);
  w.rdma.remote_addr = lb.b().addr(0);
  w.rdma.rkey = lb.b().mr.rkey;
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

TEST(RcAck, CumulativeAckCompletesSeveralWrs) {
  EngineConfig cfg;
  cfg.ack_every_n = 1;  // an ACK per WRITE (else the three, read in one round, share one)
  Loopback lb(cfg);
  auto [qa, qb] = lb.connect(QPT_RC);
  // drop the ACKs of the first two WRITEs: the third ACK completes all three, in order
  int acks = 0;
  lb.link.hook = [&](int side, const wire::Packet& p, std::vector<uint8_t>&) {
    if (side == 1 && p.bth.opcode == wire::op::acknowledge && ++acks <= 2) return Fate::drop;
    return Fate::pass;
  };
  std::vector<Sge> sges(3);
  std::vector<SendWr> wrs(3);
  for (int i = 0; i < 3; i++) {
    sges[i] = {lb.a().addr(0), 16, lb.a().mr.lkey};
    wrs[i] = make_wr(WR_RDMA_WRITE, &sges[i], 1, static_cast<uint64_t>(i + 1));
    wrs[i].rdma.remote_addr = lb.b().addr(0);
    wrs[i].rdma.rkey = lb.b().mr.rkey;
    if (i) wrs[i - 1].next = &wrs[i];
  }
  post(lb.a(), qa, wrs[0]);
  auto wa = lb.poll(lb.a(), 3);
  ASSERT_EQ(wa.size(), 3u);
  for (int i = 0; i < 3; i++) {
    EXPECT_EQ(wa[i].wr_id, static_cast<uint64_t>(i + 1));
    EXPECT_EQ(wa[i].status, WC_SUCCESS);
  }
  EXPECT_EQ(lb.a().eng->counter(Counter::completer_retry_err), 0u);  // no timeout was needed
}

TEST(RcAck, WritesReadInOneRoundShareAnAck) {
  Loopback lb;  // ack_every_n 16 by default
  auto [qa, qb] = lb.connect(QPT_RC);
  constexpr int kWrites = 8;
  std::vector<Sge> sges(kWrites);
  std::vector<SendWr> wrs(kWrites);
  for (int i = 0; i < kWrites; i++) {
    sges[i] = {lb.a().addr(64 * static_cast<uint64_t>(i)), 64, lb.a().mr.lkey};
    lb.a().mem[64 * static_cast<size_t>(i)] = static_cast<uint8_t>(i + 1);
    wrs[i] = make_wr(WR_RDMA_WRITE, &sges[i], 1, static_cast<uint64_t>(i + 1));
    wrs[i].rdma.remote_addr = lb.b().addr(64 * static_cast<uint64_t>(i));
    wrs[i].rdma.rkey = lb.b().mr.rkey;
    if (i) wrs[i - 1].next = &wrs[i];
  }
  post(lb.a(), qa, wrs[0]);  // one post: the eight frames leave in one burst, so B reads them in one round
  auto wa = lb.poll(lb.a(), kWrites);
  ASSERT_EQ(wa.size(), static_cast<size_t>(kWrites));
  for (int i = 0; i < kWrites; i++) {
    EXPECT_EQ(wa[i].wr_id, static_cast<uint64_t>(i + 1));  // in order, each completed by the shared ACK
    EXPECT_EQ(wa[i].status, WC_SUCCESS);
    EXPECT_EQ(lb.b().mem[64 * static_cast<size_t>(i)], i + 1);
  }
  std::vector<uint32_t> ack_psns;
  for (auto& [s, p] : lb.link.trace)
    if (s == 1 && p.bth.opcode == wire::op::acknowledge) ack_psns.push_back(p.bth.psn);
  EXPECT_EQ(ack_psns, (std::vector<uint32_t>{0x107}));  // the last WRITE's PSN (the first is 0x100)
  EXPECT_EQ(lb.a().eng->counter(Counter::completer_retry_err), 0u);  // no timeout was needed
}

TEST(RcWire, CorruptedFramesFailIcrcAndAreRecovered) {
  Loopback lb;
  auto [qa, qb] = lb.connect(QPT_RC);
  post_recv(lb.b(), qb, 0, 8192, 1);
  fill(lb.a().mem, 0, 5000, 1);
  int n = 0;
  lb.link.hook = [&](int side, const wire::Packet& p, std::vector<uint8_t>& bytes) {
    if (side == 0 && p.info && p.info->kind == wire::OpKind::send && ++n == 2)
      bytes[bytes.size() - 10] ^= 0x40;
    return Fate::pass;
  };
  Sge sge{lb.a().addr(0), 5000, lb.a().mr.lkey};
  post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, 1));
  auto wb = lb.poll(lb.b(), 1);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data(), 5000));
  EXPECT_EQ(lb.b().eng->counter(Counter::rx_drop_icrc), 1u);
}

TEST(RcWire, DuplicatedAndReorderedPacketsDeliverOnce) {
  Loopback lb;
  auto [qa, qb] = lb.connect(QPT_RC);
  for (int i = 0; i < 4; i++)
    post_recv(lb.b(), qb, static_cast<uint64_t>(i) * 4096, 4096, static_cast<uint64_t>(i));
  fill(lb.a().mem, 0, 16384, 5);
  // A's odd PSNs arrive twice; every fourth of its frames (PSN = 2 mod 4) arrives 50 us late, behind the
  // frames sent after it.
  lb.link.hook = [&](int side, const wire::Packet& p, std::vector<uint8_t>&) {
    if (side == 0 && (p.bth.psn & 3) == 2) lb.link.hold_ns = 50'000;
    return (side == 0 && (p.bth.psn & 1)) ? Fate::duplicate : Fate::pass;
  };
  for (int i = 0; i < 4; i++) {
    Sge sge{lb.a().addr(static_cast<uint64_t>(i) * 4096), 4096, lb.a().mr.lkey};
    post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, static_cast<uint64_t>(i)));
  }
  auto wb = lb.poll(lb.b(), 4);
  ASSERT_EQ(wb.size(), 4u);
  for (int i = 0; i < 4; i++) EXPECT_EQ(wb[i].wr_id, static_cast<uint64_t>(i));
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data(), 16384));
  EXPECT_EQ(lb.poll(lb.b(), 5, 500'000'000).size(), 0u);
  // both faults reached the responder
  EXPECT_GT(lb.b().eng->counter(Counter::duplicate_request), 0u);
  EXPECT_GT(lb.b().eng->counter(Counter::out_of_seq_request), 0u);
}

TEST(RcInvalidate, SendWithInvalidateInvalidatesTheRkey) {
  Loopback lb;
  auto [qa, qb] = lb.connect(QPT_RC);
  std::vector<uint8_t> buf(64);
  MrInfo mr;
  ASSERT_EQ(0, lb.b().eng->reg_mr(lb.b().pd, buf.data(), buf.size(), reinterpret_cast<uintptr_t>(buf.data()),
                                  ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE, mr));
  post_recv(lb.b(), qb, 0, 64, 1);
  Sge sge{lb.a().addr(0), 8, lb.a().mr.lkey};
  SendWr s = make_wr(WR_SEND_WITH_INV, &sge, 1, 1);
  s.invalidate_rkey = mr.rkey;
  post(lb.a(), qa, s);
  auto wb = lb.poll(lb.b(), 1);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_TRUE(wb[0].wc_flags & WC_WITH_INV);
  EXPECT_EQ(wb[0].imm_data, mr.rkey);  // invalidated_rkey
  SendWr w = make_wr(WR_RDMA_WRITE, &sge, 1, 2);
  w.rdma.remote_addr = reinterpret_cast<uintptr_t>(buf.data());
  w.rdma.rkey = mr.rkey;
  ASSERT_EQ(lb.poll(lb.a(), 1).size(), 1u);
  expect_remote_error(lb, qa, w, WC_REM_ACCESS_ERR);
}

TEST(RcInvalidate, LocalInvalidateCompletesLocally) {
  Loopback lb;
  auto [qa, qb] = lb.connect(QPT_RC);
  std::vector<uint8_t> buf(64);
  MrInfo mr;
  ASSERT_EQ(0, lb.a().eng->reg_mr(lb.a().pd, buf.data(), buf.size(), reinterpret_cast<uintptr_t>(buf.data()),
                                  ACCESS_LOCAL_WRITE, mr));
  SendWr li = make_wr(WR_LOCAL_INV, nullptr, 0, 1);
  li.invalidate_rkey = mr.lkey;
  const size_t before = lb.link.trace.size();
  post(lb.a(), qa, li);
  auto wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS);
  EXPECT_EQ(wa[0].opcode, WC_LOCAL_INV);
  EXPECT_EQ(lb.link.trace.size(), before);  // no packet
  // the key is now unusable: a SEND from it fails locally
  Sge sge{reinterpret_cast<uintptr_t>(buf.data()), 8, mr.lkey};
  post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, 2));
  wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_LOC_PROT_ERR);
}

TEST(RcLocal, BadLkeyIsLocalProtectionError) {
  Loopback lb;
  auto [qa, qb] = lb.connect(QPT_RC);
  Sge sge{lb.a().addr(0), 8, lb.a().mr.lkey + 0x300};
  post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, 1));
  auto wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_LOC_PROT_ERR);
  QpAttr at;
  ASSERT_EQ(0, lb.a().eng->query_qp(qa, at));
  EXPECT_EQ(at.qp_state, QPS_ERR);
}

}  // namespace
}  // namespace urxe::engine::test

namespace urxe::engine::test {
namespace {

// Rewrites a frame's BTH P_Key and recomputes its ICRC, so that only the P_Key is wrong.
void set_pkey(std::vector<uint8_t>& f, uint16_t pkey) {
  wire::Packet p;
  ASSERT_TRUE(wire::parse_frame(wire::ByteSpan(f.data(), f.size()), p) == wire::ParseError::ok);
  f[p.bth_offset + 2] = static_cast<uint8_t>(pkey >> 8);
  f[p.bth_offset + 3] = static_cast<uint8_t>(pkey);
  const uint32_t icrc_off = static_cast<uint32_t>(f.size()) - 4;
  const uint32_t icrc = wire::compute_icrc(wire::ByteSpan(&f[p.l3_offset], icrc_off - p.l3_offset),
                                           p.ip_version, p.l4_offset - p.l3_offset);
  for (int i = 0; i < 4; i++) f[icrc_off + i] = static_cast<uint8_t>(icrc >> (8 * i));
}

// Every frame a receiver drops without a NAK is counted under its cause: a foreign P_Key at the receiver
// (the requester retransmits), a duplicate ACK at the requester (stale response).
TEST(RcDrops, ForeignPkeyAndStaleAckCountedByCause) {
  Loopback lb;
  auto [qa, qb] = lb.connect(QPT_RC);
  post_recv(lb.b(), qb, 0, 64, 1);
  bool changed = false, duplicated = false;
  lb.link.hook = [&](int side, const wire::Packet& p, std::vector<uint8_t>& bytes) {
    if (side == 0 && p.bth.opcode == (wire::op::kRc | wire::op::send_only) && !changed) {
      changed = true;
      set_pkey(bytes, 0x8001);  // a full-membership key other than the default
    }
    if (side == 1 && p.bth.opcode == wire::op::acknowledge && !duplicated) {
      duplicated = true;
      return Fate::duplicate;
    }
    return Fate::pass;
  };
  Sge sge{lb.a().addr(0), 64, lb.a().mr.lkey};
  post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, 1));
  auto wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS);
  lb.settle(100'000'000);
  EXPECT_EQ(lb.b().eng->counter(Counter::rx_drop_pkey), 1u);
  EXPECT_EQ(lb.a().eng->counter(Counter::completer_retry_err), 1u);  // the dropped SEND came back
  EXPECT_EQ(lb.a().eng->counter(Counter::rx_drop_stale_response), 1u);
  EXPECT_EQ(lb.a().eng->counter(Counter::rx_drop_bad_response), 0u);
}

}  // namespace
}  // namespace urxe::engine::test

namespace urxe::engine::test {
namespace {

// Counts the frames an engine hands its port between two looks at the receive ring, and those whose
// bth_offset is not where parse_frame finds the BTH.
class WatchPort final : public Port {
 public:
  explicit WatchPort(Port& inner) : inner_(inner) {}
  const PortAttr& attr() const override { return inner_.attr(); }
  bool tx_alloc(uint32_t size, PacketBuf& buf) override { return inner_.tx_alloc(size, buf); }
  uint32_t tx_burst(PacketBuf* bufs, uint32_t n) override {
    for (uint32_t i = 0; i < n; i++) {
      wire::Packet pkt;
      if (wire::parse_frame(wire::ByteSpan(bufs[i].data, bufs[i].len), pkt) != wire::ParseError::ok ||
          bufs[i].bth_offset != pkt.bth_offset)
        ++bth_offset_wrong;
    }
    const uint32_t k = inner_.tx_burst(bufs, n);
    for (uint32_t i = 0; i < k; i++) {
      wire::Packet pkt;
      if (wire::parse_frame(wire::ByteSpan(bufs[i].data, bufs[i].len), pkt) == wire::ParseError::ok)
        opcodes.push_back(pkt.bth.opcode);
    }
    if (k) bursts.push_back(k);
    since_rx += k;
    total_tx += k;
    max_between_rx = std::max(max_between_rx, since_rx);
    return k;
  }
  void tx_free(PacketBuf& buf) override { inner_.tx_free(buf); }
  uint32_t rx_burst(PacketBuf* bufs, uint32_t n) override {
    since_rx = 0;
    return inner_.rx_burst(bufs, n);
  }
  void rx_free(PacketBuf* bufs, uint32_t n) override { inner_.rx_free(bufs, n); }
  uint64_t since_rx = 0, max_between_rx = 0, total_tx = 0, bth_offset_wrong = 0;
  std::vector<uint8_t> opcodes;  // BTH opcodes of the frames the port took, in order
  std::vector<uint32_t> bursts;  // frames the port took per tx_burst call (calls that took none left out)

 private:
  Port& inner_;
};

// Every frame the engine builds says where its BTH starts (PacketBuf::bth_offset): the same-host path routes
// by the destination QPN read there instead of parsing the headers again, so a wrong offset would send
// frames to the wrong process. Requests, READ responses and ACKs, over IPv4 and IPv6.
TEST(RcFrames, EveryBuiltFrameSaysWhereItsBthIs) {
  for (const bool ipv6 : {false, true}) {
    SCOPED_TRACE(ipv6 ? "IPv6" : "IPv4");
    WatchPort* ports[2] = {};
    Loopback lb(EngineConfig{}, 1500, 1 << 20, ipv6, [&](int side, Port& inner) -> std::unique_ptr<Port> {
      auto p = std::make_unique<WatchPort>(inner);
      ports[side] = p.get();
      return p;
    });
    ASSERT_TRUE(ports[0] && ports[1]);
    const uint32_t qa = lb.connect(QPT_RC).first;
    Sge sge{lb.a().addr(0), 3000, lb.a().mr.lkey};  // three packets each way
    uint64_t id = 0;
    for (const WrOpcode op : {WR_RDMA_WRITE, WR_RDMA_READ}) {
      SendWr wr = make_wr(op, &sge, 1, ++id);
      wr.rdma.remote_addr = lb.b().addr(8192);
      wr.rdma.rkey = lb.b().mr.rkey;
      post(lb.a(), qa, wr);
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
      SendWr wr = make_wr(WR_RDMA_WRITE, &sge, 1, id);
      wr.rdma.remote_addr = lb.b().addr(8192);
      wr.rdma.rkey = lb.b().mr.rkey;
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

// A Loopback wrapper that puts a GatherPort on side A and tells where it is.
Loopback::PortWrap gather_on_a(bool gather, GatherPort*& out) {
  return [gather, &out](int side, Port& inner) -> std::unique_ptr<Port> {
    if (side != 0) return nullptr;
    auto p = std::make_unique<GatherPort>(inner, gather);
    out = p.get();
    return p;
  };
}

// A port that gathers gets payloads of Port::kGatherMin bytes or more by reference, straight from the
// application's MR (a requester's data, a responder's READ responses), and the peer receives the same
// bytes; smaller payloads, and a frame whose payload spans two SGEs, are copied as before.
TEST(RcFrames, GatheringPortGetsLargePayloadsByReference) {
  GatherPort* port = nullptr;
  Loopback lb(EngineConfig{}, 1500, 1 << 20, false, gather_on_a(true, port));
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
    GatherPort* port = nullptr;
    Loopback lb(EngineConfig{}, 1500, 1 << 20, false, gather_on_a(gather, port));
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

// A Loopback wrapper that puts a WatchPort on one side (`side`) and tells where it is.
Loopback::PortWrap watch_side(int side, WatchPort*& out) {
  return [side, &out](int s, Port& inner) -> std::unique_ptr<Port> {
    if (s != side) return nullptr;
    auto p = std::make_unique<WatchPort>(inner);
    out = p.get();
    return p;
  };
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
    WatchPort* watch = nullptr;
    Loopback lb(cfg, 1500, 1 << 20, false, watch_side(1, watch));
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
  WatchPort* watch = nullptr;
  Loopback lb(cfg, 1500, 1 << 20, false, watch_side(0, watch));
  ASSERT_NE(watch, nullptr);
  constexpr int kQps = 128, kWrs = 16;
  std::vector<uint32_t> qas;
  for (int i = 0; i < kQps; i++) qas.push_back(lb.connect(QPT_RC).first);
  Sge sge{lb.a().addr(0), 64, lb.a().mr.lkey};
  for (uint32_t qa : qas)
    for (int w = 0; w < kWrs; w++) {
      SendWr wr = make_wr(WR_RDMA_WRITE, &sge, 1, static_cast<uint64_t>(w));
      wr.rdma.remote_addr = lb.b().addr(4096);
      wr.rdma.rkey = lb.b().mr.rkey;
      post(lb.a(), qa, wr);
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
