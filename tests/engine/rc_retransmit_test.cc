// RC loss recovery: RNR NAKs and their retries, the retransmit timeout and retry exhaustion, lost READ
// responses (re-requested or re-executed), atomic replay, duplicates, reordering, corruption, and the
// frames a receiver drops without a NAK.
#include "tests/sim/loopback.h"

namespace urxe::engine::test {
namespace {

using RcRnr = RcLoopbackTest;
using RcRetry = RcLoopbackTest;
using RcRead = RcLoopbackTest;
using RcAtomic = RcLoopbackTest;
using RcWire = RcLoopbackTest;
using RcDrops = RcLoopbackTest;

TEST_F(RcRnr, RnrNakThenRetrySucceedsAfterReceivePosted) {
  ConnOpts o;
  o.min_rnr_timer = 14;  // 1.92 ms
  o.rnr_retry = 3;
  connect(o);
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
  EXPECT_GE(lb.link.clock.t - t_nak, wire::rnr_timer_ns(14));
  EXPECT_EQ(lb.a().eng->counter(Counter::rcvd_rnr_err), 1u);
  EXPECT_EQ(lb.b().eng->counter(Counter::send_rnr_err), 1u);
}

// The RNR wait counts from when the NAK was read, not from the start of the round that read it: a round
// that lasts (a long burst sent, then the port read again) takes a NAK that arrived after its `now`, and a
// wait from that `now` let the resend leave before the coded time had passed since the NAK's arrival. Here
// A's round starts 50 us before the NAK is due and every clock read moves time 100 us on, so its first
// read of the port finds the NAK there.
TEST_F(RcRnr, RnrWaitCountsFromTheNakNotTheRoundStart) {
  ConnOpts o;
  o.min_rnr_timer = 14;  // 1.28 ms
  connect(o);
  lb.link.latency_ns = 300'000;
  uint64_t nak_due = 0, resent_at = 0;
  uint32_t nak_psn = 0;
  lb.link.hook = [&](int side, const wire::Packet& p, std::vector<uint8_t>&) {
    if (side == 1 && p.info->kind == wire::OpKind::ack && p.aeth.type() == wire::AethType::rnr_nak &&
        !nak_due) {
      nak_due = lb.link.clock.t + lb.link.latency_ns;
      nak_psn = p.bth.psn;
    } else if (side == 0 && nak_due && !resent_at && p.info->is_request && p.bth.psn == nak_psn) {
      resent_at = lb.link.clock.t;
    }
    return Fate::pass;
  };
  Sge sge{lb.a().addr(0), 64, lb.a().mr.lkey};
  post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, 1));
  lb.a().eng->progress();  // the SEND
  lb.link.clock.t += lb.link.latency_ns;
  lb.b().eng->progress();  // no receive: RNR NAK
  ASSERT_NE(nak_due, 0u);
  lb.link.clock.t = nak_due - 50'000;
  lb.link.clock.read_step_ns = 100'000;
  lb.a().eng->progress();  // reads the NAK
  lb.link.clock.read_step_ns = 0;
  ASSERT_EQ(lb.a().eng->counter(Counter::rcvd_rnr_err), 1u);
  lb.run([&] { return resent_at != 0; });
  ASSERT_NE(resent_at, 0u);
  EXPECT_GE(resent_at - nak_due, wire::rnr_timer_ns(14));
  post_recv(lb.b(), qb, 0, 64, 1);
  const auto wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS);
}

TEST_F(RcRnr, RnrRetryExceeded) {
  ConnOpts o;
  o.rnr_retry = 2;
  connect(o);
  Sge sge{lb.a().addr(0), 64, lb.a().mr.lkey};
  expect_remote_error(lb, qa, make_wr(WR_SEND, &sge, 1, 1), WC_RNR_RETRY_EXC_ERR);
  EXPECT_EQ(count_naks(lb.link, 1, wire::AethType::rnr_nak, 1), 3);  // first try + 2 retries
  EXPECT_EQ(lb.a().eng->counter(Counter::retry_rnr_exceeded_err), 1u);
}

TEST_F(RcRnr, RnrRetrySevenIsInfinite) {
  ConnOpts o;
  o.rnr_retry = 7;
  connect(o);
  Sge sge{lb.a().addr(0), 64, lb.a().mr.lkey};
  post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, 1));
  lb.run([&] { return count_naks(lb.link, 1, wire::AethType::rnr_nak, 1) >= 20; });
  EXPECT_GE(count_naks(lb.link, 1, wire::AethType::rnr_nak, 1), 20);
  post_recv(lb.b(), qb, 0, 64, 1);
  auto wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS);
}

TEST_F(RcRetry, LostAckRecoveredByTimeout) {
  connect();
  post_recv(lb.b(), qb, 0, 64, 1);
  drop_frames(lb.link, 1, with_opcode(wire::op::acknowledge));
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
TEST_F(RcRetry, AckOfDuplicateSendStopsBeforeALaterRead) {
  connect();
  post_recv(lb.b(), qb, 0, 64, 1);
  fill(lb.b().mem, 4096, 64, 5);
  // B's first frame after the SEND and READ went: their ACK / READ response
  drop_frames(lb.link, 1, of_kind(wire::OpKind::rdma_read_response));
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

TEST_F(RcRetry, RetryExceededOnBlackhole) {
  ConnOpts o;
  o.retry_cnt = 3;
  o.timeout = 10;
  connect(o);
  drop_frames(
      lb.link, 0, [](const wire::Packet&) { return true; }, 1, kEveryFrame);
  Sge sge{lb.a().addr(0), 64, lb.a().mr.lkey};
  expect_remote_error(lb, qa, make_wr(WR_SEND, &sge, 1, 1), WC_RETRY_EXC_ERR);
  EXPECT_EQ(count_ops(lb.link, 0, wire::op::send_only), 4);  // first try + retry_cnt
  EXPECT_EQ(lb.a().eng->counter(Counter::retry_exceeded_err), 1u);
}

// A READs `len` bytes from the start of B's buffer into the start of its own; expects it to complete with
// B's data.
void expect_read_from_b(Loopback& lb, uint32_t qa, uint32_t len) {
  Sge sge{lb.a().addr(0), len, lb.a().mr.lkey};
  post(lb.a(), qa, make_rdma_wr(WR_RDMA_READ, &sge, lb.b().addr(0), lb.b().mr.rkey, 1));
  auto wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data(), len));
}

TEST_F(RcRead, LostResponseReRequestsRemainingBytes) {
  connect();
  fill(lb.b().mem, 0, 8192, 7);
  uint32_t lost_psn = 0;
  drop_frames(lb.link, 1, of_kind(wire::OpKind::rdma_read_response), 4, 1, &lost_psn);
  ASSERT_NO_FATAL_FAILURE(expect_read_from_b(lb, qa, 8192));
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

TEST_F(RcRead, DuplicateReadAfterLostLastResponseReExecuted) {
  connect();
  fill(lb.b().mem, 0, 100, 9);
  drop_frames(lb.link, 1, of_kind(wire::OpKind::rdma_read_response));
  ASSERT_NO_FATAL_FAILURE(expect_read_from_b(lb, qa, 100));
  EXPECT_EQ(count_ops(lb.link, 1, wire::op::read_response_only), 2);
  EXPECT_EQ(lb.b().eng->counter(Counter::duplicate_request), 1u);
}

TEST_F(RcAtomic, LostAtomicAckReplayedNotReExecuted) {
  connect();
  uint64_t v = 1000;
  std::memcpy(lb.b().mem.data() + 8, &v, 8);
  drop_frames(lb.link, 1, with_opcode(wire::op::atomic_acknowledge));
  Sge sge{lb.a().addr(0), 8, lb.a().mr.lkey};
  SendWr w = make_atomic_wr(WR_ATOMIC_FETCH_AND_ADD, &sge, lb.b().addr(8), lb.b().mr.rkey, 1, 1);
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

TEST_F(RcWire, CorruptedFramesFailIcrcAndAreRecovered) {
  connect();
  post_recv(lb.b(), qb, 0, 8192, 1);
  fill(lb.a().mem, 0, 5000, 1);
  int n = 0;
  lb.link.hook = [&](int side, const wire::Packet& p, std::vector<uint8_t>& bytes) {
    if (side == 0 && of_kind(wire::OpKind::send)(p) && ++n == 2) bytes[bytes.size() - 10] ^= 0x40;
    return Fate::pass;
  };
  Sge sge{lb.a().addr(0), 5000, lb.a().mr.lkey};
  post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, 1));
  auto wb = lb.poll(lb.b(), 1);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data(), 5000));
  EXPECT_EQ(lb.b().eng->counter(Counter::rx_drop_icrc), 1u);
}

TEST_F(RcWire, DuplicatedAndReorderedPacketsDeliverOnce) {
  connect();
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
TEST_F(RcDrops, ForeignPkeyAndStaleAckCountedByCause) {
  connect();
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
