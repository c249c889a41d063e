// XRC (IBTA Annex A14) in the engine: an XRC_SEND initiator on A, an XRC_RECV target on B whose requests go
// to the XRC SRQ each one names (its receive WQEs, its PD for R_Keys, its CQ for completions), the XRCETH on
// the wire, the errors for an SRQ that does not exist or is of another domain, RNR from an empty XRC SRQ,
// the modify masks (the kernel's table, RC's extra attributes ignored as uverbs ignores them), and the
// lifetimes of domains, XRC SRQs and shared target QPs.
#include <cstring>

#include "tests/engine/driver.h"
#include "tests/sim/loopback.h"

namespace urxe::engine::test {
namespace {

class Xrc : public ::testing::Test {
 protected:
  Loopback lb;
  uint32_t xrcd = 0, cq1 = 0, cq2 = 0, srq1 = 0, srq2 = 0, ini = 0, tgt = 0;

  uint32_t make_srq(uint32_t domain, uint32_t pd, uint32_t cq, uint32_t max_wr = 16) {
    uint32_t s = 0;
    EXPECT_EQ(0, lb.b().eng->create_xrc_srq(domain, pd, cq, SrqAttr{max_wr, 2, 0}, s));
    return s;
  }
  uint32_t make_target(uint32_t domain) {
    QpInitAttr init;
    init.qp_type = QPT_XRC_RECV;
    init.xrcd = domain;
    uint32_t q = 0;
    EXPECT_EQ(0, lb.b().eng->create_qp(0, init, q));
    return q;
  }
  // RESET → INIT → RTR → RTS with the kernel's required attributes for the XRC QP type.
  void bring_up(Node& n, uint32_t qpn, QpType type, const Node& peer, uint32_t peer_qpn, uint32_t sq_psn,
                uint32_t rq_psn) {
    QpAttr at;
    at.qp_state = QPS_INIT;
    at.port_num = 1;
    at.qp_access_flags = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
    ASSERT_EQ(0, n.eng->modify_qp(qpn, at, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS));
    at.qp_state = QPS_RTR;
    at.path_mtu = MTU_1024;
    at.dest_qp_num = peer_qpn;
    at.rq_psn = rq_psn;
    at.max_dest_rd_atomic = 4;
    at.min_rnr_timer = 1;
    at.ah_attr.dgid = peer.gid;
    at.ah_attr.dmac = peer.mac;
    uint32_t m = QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN;
    if (type == QPT_XRC_RECV) m |= QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER;
    ASSERT_EQ(0, n.eng->modify_qp(qpn, at, m));
    at.qp_state = QPS_RTS;
    at.sq_psn = sq_psn;
    at.timeout = 14;
    at.retry_cnt = 7;
    at.rnr_retry = 7;
    at.max_rd_atomic = 4;
    m = QP_STATE | QP_SQ_PSN | QP_TIMEOUT;
    if (type == QPT_XRC_SEND) m |= QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC;
    ASSERT_EQ(0, n.eng->modify_qp(qpn, at, m));
  }
  void SetUp() override {
    Engine& b = *lb.b().eng;
    ASSERT_EQ(0, b.alloc_xrcd(xrcd));
    ASSERT_EQ(0, b.create_cq(64, cq1));
    ASSERT_EQ(0, b.create_cq(64, cq2));
    srq1 = make_srq(xrcd, lb.b().pd, cq1);
    srq2 = make_srq(xrcd, lb.b().pd, cq2);
    tgt = make_target(xrcd);
    QpInitAttr init;
    init.qp_type = QPT_XRC_SEND;
    init.send_cq = lb.a().cq;
    init.cap = {16, 0, 2, 0, 64};
    ASSERT_EQ(0, lb.a().eng->create_qp(lb.a().pd, init, ini));
    bring_up(lb.a(), ini, QPT_XRC_SEND, lb.b(), tgt, 0x10, 0x20);
    bring_up(lb.b(), tgt, QPT_XRC_RECV, lb.a(), ini, 0x20, 0x10);
  }
  void post_srq(uint32_t srq, uint64_t wr_id, uint64_t off, uint32_t len) {
    Sge s{lb.b().addr(off), len, lb.b().mr.lkey};
    RecvWr rw;
    rw.wr_id = wr_id;
    rw.sg_list = &s;
    rw.num_sge = 1;
    const RecvWr* bad = nullptr;
    ASSERT_EQ(0, lb.b().eng->post_srq_recv(srq, &rw, &bad));
  }
  // A SEND of `len` bytes from A's offset `off` to the XRC SRQ `srqn`.
  void send_to(uint32_t srqn, uint64_t wr_id, uint64_t off, uint32_t len) {
    Sge s{lb.a().addr(off), len, lb.a().mr.lkey};
    SendWr wr = make_wr(WR_SEND, &s, 1, wr_id);
    wr.xrc_remote_srqn = srqn;
    post(lb.a(), ini, wr);
  }
  std::vector<Wc> poll_cq(uint32_t cq, size_t n) {
    std::vector<Wc> out;
    lb.run([&] {
      Wc wc[8];
      int k;
      while (out.size() < n && (k = lb.b().eng->poll_cq(cq, 8, wc)) > 0) out.insert(out.end(), wc, wc + k);
      return out.size() >= n;
    });
    return out;
  }
};

TEST_F(Xrc, SendsLandInTheNamedSrqAndCompleteOnItsCq) {
  fill(lb.a().mem, 0, 3000, 0x5a);
  fill(lb.a().mem, 4096, 100, 0xa5);
  post_srq(srq1, 11, 0, 4096);
  post_srq(srq2, 22, 8192, 4096);
  send_to(srq2, 2, 4096, 100);  // to the second SRQ first: each goes where it names, not in post order
  send_to(srq1, 1, 0, 3000);    // three packets, each with the XRCETH
  const auto wa = lb.poll(lb.a(), 2);
  ASSERT_EQ(wa.size(), 2u);
  for (const Wc& w : wa) EXPECT_EQ(w.status, WC_SUCCESS) << wc_status_str(w.status);
  const auto w2 = poll_cq(cq2, 1), w1 = poll_cq(cq1, 1);
  ASSERT_EQ(w2.size(), 1u);
  ASSERT_EQ(w1.size(), 1u);
  EXPECT_EQ(w2[0].wr_id, 22u);
  EXPECT_EQ(w2[0].byte_len, 100u);
  EXPECT_EQ(w1[0].wr_id, 11u);
  EXPECT_EQ(w1[0].byte_len, 3000u);
  for (const Wc& w : {w1[0], w2[0]}) {
    EXPECT_EQ(w.status, WC_SUCCESS);
    EXPECT_EQ(w.opcode, WC_RECV);
    EXPECT_EQ(w.qp_num, tgt);  // the target QP's number, as ConnectX reports it
  }
  EXPECT_EQ(0, std::memcmp(lb.b().mem.data(), lb.a().mem.data(), 3000));
  EXPECT_EQ(0, std::memcmp(lb.b().mem.data() + 8192, lb.a().mem.data() + 4096, 100));
  Wc none[1];
  EXPECT_EQ(0, lb.b().eng->poll_cq(lb.b().cq, 1, none));  // nothing on B's other CQ
  // On the wire: XRC opcodes, the XRCETH in every request, responses in XRC's ACK opcode
  int requests = 0;
  for (auto& [side, p] : lb.link.trace) {
    ASSERT_EQ(p.bth.opcode & 0xe0, wire::op::kXrc);
    if (side == 0) {
      EXPECT_TRUE(p.present & wire::kXrceth);
      EXPECT_TRUE(p.xrc_srqn == srq1 || p.xrc_srqn == srq2);
      requests++;
    } else {
      EXPECT_EQ(p.bth.opcode, wire::op::kXrc | wire::op::acknowledge);
      EXPECT_FALSE(p.present & wire::kXrceth);
    }
  }
  EXPECT_EQ(requests, 4);  // 100 bytes in one packet, 3000 in three
}

TEST_F(Xrc, RdmaAndAtomicsCheckRkeysAgainstTheNamedSrqsPd) {
  Engine& b = *lb.b().eng;
  uint32_t pd2 = 0;
  ASSERT_EQ(0, b.alloc_pd(pd2));
  std::vector<uint8_t> mem2(4096, 0);
  MrInfo mr2;
  ASSERT_EQ(
      0, b.reg_mr(pd2, mem2.data(), mem2.size(), reinterpret_cast<uintptr_t>(mem2.data()),
                  ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC, mr2));
  const uint32_t srq_pd2 = make_srq(xrcd, pd2, cq1);
  const uint64_t va2 = reinterpret_cast<uintptr_t>(mem2.data());
  fill(lb.a().mem, 0, 64, 0x33);
  Sge s{lb.a().addr(0), 64, lb.a().mr.lkey};
  SendWr w = make_rdma_wr(WR_RDMA_WRITE, &s, va2, mr2.rkey, 1);
  w.xrc_remote_srqn = srq_pd2;  // the MR's PD: allowed
  post(lb.a(), ini, w);
  auto wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS) << wc_status_str(wa[0].status);
  EXPECT_EQ(0, std::memcmp(mem2.data(), lb.a().mem.data(), 64));
  Sge r{lb.a().addr(1024), 64, lb.a().mr.lkey};
  w = make_rdma_wr(WR_RDMA_READ, &r, va2, mr2.rkey, 2);
  w.xrc_remote_srqn = srq_pd2;
  post(lb.a(), ini, w);
  Sge at{lb.a().addr(2048), 8, lb.a().mr.lkey};
  w = make_atomic_wr(WR_ATOMIC_FETCH_AND_ADD, &at, va2 + 64, mr2.rkey, 5, 3);
  w.xrc_remote_srqn = srq_pd2;
  post(lb.a(), ini, w);
  wa = lb.poll(lb.a(), 2);
  ASSERT_EQ(wa.size(), 2u);
  for (const Wc& c : wa) EXPECT_EQ(c.status, WC_SUCCESS) << wc_status_str(c.status);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data() + 1024, mem2.data(), 64));
  uint64_t v = 0;
  std::memcpy(&v, mem2.data() + 64, 8);
  EXPECT_EQ(v, 5u);
  // The same rkey through an SRQ of B's first PD: a remote access error, the target QP in error
  w = make_rdma_wr(WR_RDMA_WRITE, &s, va2, mr2.rkey, 4);
  w.xrc_remote_srqn = srq1;
  post(lb.a(), ini, w);
  wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_REM_ACCESS_ERR) << wc_status_str(wa[0].status);
  QpAttr qa;
  ASSERT_EQ(0, b.query_qp(tgt, qa));
  EXPECT_EQ(qa.qp_state, QPS_ERR);
}

// A duplicate is RC's duplicate whatever SRQ it names: only a request about to execute takes its SRQ.
TEST_F(Xrc, ADuplicateNamingAnotherSrqIsAnsweredAsADuplicate) {
  Engine& b = *lb.b().eng;
  post_srq(srq1, 11, 0, 256);
  fill(lb.a().mem, 0, 64, 0x42);
  int requests = 0, acks = 0;
  lb.link.hook = [&](int side, const wire::Packet& p, std::vector<uint8_t>& bytes) {
    if (side == 1) return ++acks == 1 ? Fate::drop : Fate::pass;  // the first ACK is lost
    if (++requests == 2) {  // the retransmission names an SRQ of no domain of the target's
      const size_t x = p.bth_offset + wire::kBthLen;
      bytes[x + 1] = 0x00;
      bytes[x + 2] = 0x03;
      bytes[x + 3] = 0xe7;  // 999
      wire::write_icrc(wire::MutByteSpan(bytes.data(), bytes.size()));
    }
    return Fate::pass;
  };
  send_to(srq1, 1, 0, 64);
  const auto wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS) << wc_status_str(wa[0].status);
  EXPECT_EQ(requests, 2);
  EXPECT_EQ(b.counter(Counter::duplicate_request), 1u);
  EXPECT_EQ(b.counter(Counter::rx_drop_parse) + b.counter(Counter::rx_drop_icrc), 0u);
  const auto w1 = poll_cq(cq1, 2);  // one receive: the duplicate was not executed again
  ASSERT_EQ(w1.size(), 1u);
  EXPECT_EQ(w1[0].wr_id, 11u);
  QpAttr qa;
  ASSERT_EQ(0, b.query_qp(tgt, qa));
  EXPECT_EQ(qa.qp_state, QPS_RTS);
}

// A READ's responses, sent again for its duplicate, read through the PD of the SRQ the READ named, though a
// later request has bound the target to an SRQ of another PD.
TEST_F(Xrc, AReplayedReadKeepsItsOwnSrqsPd) {
  Engine& b = *lb.b().eng;
  uint32_t pd2 = 0;
  ASSERT_EQ(0, b.alloc_pd(pd2));
  std::vector<uint8_t> mem2(4096, 0x6b);
  MrInfo mr2;
  ASSERT_EQ(0, b.reg_mr(pd2, mem2.data(), mem2.size(), reinterpret_cast<uintptr_t>(mem2.data()),
                        ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ, mr2));
  const uint32_t srq_pd2 = make_srq(xrcd, pd2, cq2);
  int responses = 0;
  lb.link.hook = [&](int side, const wire::Packet& p, std::vector<uint8_t>&) {
    const bool read_response = (p.bth.opcode & 0x1f) >= wire::op::read_response_first &&
                               (p.bth.opcode & 0x1f) <= wire::op::read_response_only;
    return side == 1 && read_response && ++responses == 1 ? Fate::drop : Fate::pass;
  };
  Sge r{lb.a().addr(1024), 64, lb.a().mr.lkey};
  SendWr w = make_rdma_wr(WR_RDMA_READ, &r, reinterpret_cast<uintptr_t>(mem2.data()), mr2.rkey, 1);
  w.xrc_remote_srqn = srq_pd2;
  post(lb.a(), ini, w);
  fill(lb.a().mem, 0, 64, 0x19);
  Sge s{lb.a().addr(0), 64, lb.a().mr.lkey};
  w = make_rdma_wr(WR_RDMA_WRITE, &s, lb.b().addr(2048), lb.b().mr.rkey, 2);
  w.xrc_remote_srqn = srq1;  // B's first PD
  post(lb.a(), ini, w);
  const auto wa = lb.poll(lb.a(), 2);
  ASSERT_EQ(wa.size(), 2u);
  for (const Wc& c : wa) EXPECT_EQ(c.status, WC_SUCCESS) << wc_status_str(c.status);
  EXPECT_GE(responses, 2);
  EXPECT_GE(b.counter(Counter::duplicate_request), 1u);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data() + 1024, mem2.data(), 64));
  EXPECT_EQ(0, std::memcmp(lb.b().mem.data() + 2048, lb.a().mem.data(), 64));
  QpAttr qa;
  ASSERT_EQ(0, b.query_qp(tgt, qa));
  EXPECT_EQ(qa.qp_state, QPS_RTS);
}

// ATOMIC WRITE has no XRC opcode: post_send refuses it, as it refuses any WR its QP type cannot carry.
TEST_F(Xrc, AtomicWriteIsNotAnXrcOperation) {
  uint64_t v = 7;
  Sge s{reinterpret_cast<uintptr_t>(&v), 8, 0};
  SendWr w = make_wr(WR_ATOMIC_WRITE, &s, 1, 1);
  w.send_flags |= SEND_INLINE;
  w.rdma.remote_addr = lb.b().addr(0);
  w.rdma.rkey = lb.b().mr.rkey;
  w.xrc_remote_srqn = srq1;
  const SendWr* bad = nullptr;
  EXPECT_EQ(EINVAL, lb.a().eng->post_send(ini, &w, &bad));
  EXPECT_EQ(bad, &w);
}

TEST_F(Xrc, AnSrqThatIsNotTheTargetsIsAnInvalidRequest) {
  Engine& b = *lb.b().eng;
  uint32_t other = 0, ocq = 0;
  ASSERT_EQ(0, b.alloc_xrcd(other));
  ASSERT_EQ(0, b.create_cq(16, ocq));
  const uint32_t foreign = make_srq(other, lb.b().pd, ocq);
  post_srq(foreign, 9, 0, 256);
  for (const uint32_t srqn : {foreign, 999u}) {  // another domain's SRQ; no SRQ at all
    SCOPED_TRACE(srqn);
    lb.link.trace.clear();
    send_to(srqn, 1, 0, 64);
    const auto wa = lb.poll(lb.a(), 1);
    ASSERT_EQ(wa.size(), 1u);
    EXPECT_EQ(wa[0].status, WC_REM_INV_REQ_ERR) << wc_status_str(wa[0].status);
    EXPECT_EQ(
        count_naks(lb.link, 1, wire::AethType::nak, static_cast<uint8_t>(wire::NakCode::invalid_request)), 1);
    Wc none[1];
    EXPECT_EQ(0, b.poll_cq(ocq, 1, none));  // nothing reached the foreign SRQ
    // both back to RTS for the next case
    QpAttr at;
    at.qp_state = QPS_RESET;
    ASSERT_EQ(0, lb.a().eng->modify_qp(ini, at, QP_STATE));
    ASSERT_EQ(0, b.modify_qp(tgt, at, QP_STATE));
    lb.poll(lb.a(), 1, 1'000'000);  // (drains the flush of the other WQEs, if any)
    bring_up(lb.a(), ini, QPT_XRC_SEND, lb.b(), tgt, 0x10, 0x20);
    bring_up(lb.b(), tgt, QPT_XRC_RECV, lb.a(), ini, 0x20, 0x10);
  }
}

TEST_F(Xrc, AnEmptySrqAnswersRnrAndTheSendLandsOncePosted) {
  fill(lb.a().mem, 0, 64, 0x77);
  send_to(srq1, 1, 0, 64);
  lb.run([&] { return count_naks(lb.link, 1, wire::AethType::rnr_nak, 1) >= 1; }, 100'000'000);
  EXPECT_GE(count_naks(lb.link, 1, wire::AethType::rnr_nak, 1), 1);
  post_srq(srq1, 5, 0, 64);
  const auto wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS) << wc_status_str(wa[0].status);
  const auto wb = poll_cq(cq1, 1);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wb[0].wr_id, 5u);
}

TEST_F(Xrc, ModifyFollowsTheKernelsTableAndIgnoresRcsExtras) {
  Engine& b = *lb.b().eng;
  const uint32_t t2 = make_target(xrcd);
  QpAttr at;
  at.qp_state = QPS_INIT;
  at.port_num = 1;
  ASSERT_EQ(0, b.modify_qp(t2, at, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS));
  at.qp_state = QPS_RTR;
  at.ah_attr.dgid = lb.a().gid;
  at.path_mtu = MTU_1024;
  const uint32_t rtr = QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN;
  EXPECT_EQ(EINVAL, b.modify_qp(t2, at, rtr));  // a target needs MAX_DEST_RD_ATOMIC and MIN_RNR_TIMER
  ASSERT_EQ(0, b.modify_qp(t2, at, rtr | QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER));
  at.qp_state = QPS_RTS;
  // RC's RTS attributes a target has no use for are ignored (perftest sets them), SQ_PSN and TIMEOUT needed
  EXPECT_EQ(EINVAL, b.modify_qp(t2, at, QP_STATE | QP_SQ_PSN));
  ASSERT_EQ(
      0, b.modify_qp(t2, at,
                     QP_STATE | QP_SQ_PSN | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC));
  // and an initiator ignores RC's responder attributes at RTR
  QpInitAttr init;
  init.qp_type = QPT_XRC_SEND;
  init.send_cq = lb.a().cq;
  uint32_t i2 = 0;
  ASSERT_EQ(0, lb.a().eng->create_qp(lb.a().pd, init, i2));
  at = QpAttr{};
  at.qp_state = QPS_INIT;
  at.port_num = 1;
  ASSERT_EQ(0, lb.a().eng->modify_qp(i2, at, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS));
  at.qp_state = QPS_RTR;
  at.ah_attr.dgid = lb.b().gid;
  at.path_mtu = MTU_1024;
  EXPECT_EQ(0, lb.a().eng->modify_qp(i2, at, rtr | QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER));
  at.qp_state = QPS_RTS;
  EXPECT_EQ(EINVAL, lb.a().eng->modify_qp(i2, at, QP_STATE | QP_SQ_PSN | QP_TIMEOUT));  // needs RC's
}

TEST_F(Xrc, ObjectsAndLifetimes) {
  Engine& b = *lb.b().eng;
  // what an XRC QP cannot do
  RecvWr rw;
  const RecvWr* rbad = nullptr;
  EXPECT_EQ(EINVAL, b.post_recv(tgt, &rw, &rbad));
  EXPECT_EQ(EINVAL, lb.a().eng->post_recv(ini, &rw, &rbad));
  Sge s{lb.b().addr(0), 8, lb.b().mr.lkey};
  SendWr sw = make_wr(WR_SEND, &s, 1);
  const SendWr* sbad = nullptr;
  EXPECT_EQ(EINVAL, b.post_send(tgt, &sw, &sbad));
  // creation errors
  QpInitAttr init;
  init.qp_type = QPT_XRC_RECV;
  uint32_t q = 0;
  EXPECT_EQ(EINVAL, b.create_qp(0, init, q));  // no domain
  init.xrcd = 77;
  EXPECT_EQ(EINVAL, b.create_qp(0, init, q));
  init = QpInitAttr{};
  init.qp_type = QPT_RC;
  init.send_cq = init.recv_cq = lb.b().cq;
  init.srq = srq1;
  EXPECT_EQ(EINVAL, b.create_qp(lb.b().pd, init, q));  // an RC QP takes no XRC SRQ
  uint32_t s2 = 0;
  EXPECT_EQ(EINVAL, b.create_xrc_srq(xrcd, lb.b().pd, 999, SrqAttr{4, 1, 0}, s2));  // no such CQ
  // a domain goes only when nothing is in it; an XRC SRQ holds its CQ
  EXPECT_EQ(EBUSY, b.dealloc_xrcd(xrcd));
  EXPECT_EQ(EBUSY, b.destroy_cq(cq2));
  // a shared target lives until its last handle goes
  ASSERT_EQ(0, b.open_qp(xrcd, tgt));
  EXPECT_EQ(EINVAL, b.open_qp(xrcd, ini + 12345));
  ASSERT_EQ(0, b.destroy_qp(tgt));  // the opener's handle
  QpAttr qa;
  EXPECT_EQ(0, b.query_qp(tgt, qa));  // still there
  ASSERT_EQ(0, b.destroy_qp(tgt));
  EXPECT_EQ(EINVAL, b.query_qp(tgt, qa));
  ASSERT_EQ(0, b.destroy_srq(srq1));
  ASSERT_EQ(0, b.destroy_srq(srq2));
  EXPECT_EQ(0, b.destroy_cq(cq2));
  EXPECT_EQ(0, b.dealloc_xrcd(xrcd));
  EXPECT_EQ(EINVAL, b.dealloc_xrcd(xrcd));
}

}  // namespace
}  // namespace urxe::engine::test
