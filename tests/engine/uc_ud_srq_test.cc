// UC (no ACKs; a gap drops the rest of the message), UD (DETH, Q_Key incl. the privileged bit, GRH area,
// source QPN, one MTU), SRQ (shared by QPs, limit event), and posting from another thread.
#include <atomic>
#include <chrono>
#include <thread>

#include "tests/sim/loopback.h"

namespace urxe::engine::test {
namespace {

TEST(Uc, SendAndWriteWithoutAcks) {
  Loopback lb;
  auto [qa, qb] = lb.connect(QPT_UC);
  fill(lb.a().mem, 0, 3000, 1);
  post_recv(lb.b(), qb, 0x10000, 4096, 1);
  Sge sge{lb.a().addr(0), 3000, lb.a().mr.lkey};
  SendWr s = make_wr(WR_SEND, &sge, 1, 1);
  SendWr w = make_wr(WR_RDMA_WRITE_WITH_IMM, &sge, 1, 2);
  w.rdma.remote_addr = lb.b().addr(0x20000);
  w.rdma.rkey = lb.b().mr.rkey;
  w.imm_data = 5;
  s.next = &w;
  post_recv(lb.b(), qb, 0, 0, 2);
  const SendWr* bad;
  ASSERT_EQ(0, lb.a().eng->post_send(qa, &s, &bad));
  auto wa = lb.poll(lb.a(), 2);
  ASSERT_EQ(wa.size(), 2u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS);
  auto wb = lb.poll(lb.b(), 2);
  ASSERT_EQ(wb.size(), 2u);
  EXPECT_EQ(wb[0].byte_len, 3000u);
  EXPECT_EQ(wb[1].opcode, WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data() + 0x10000, 3000));
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data() + 0x20000, 3000));
  for (auto& [side, p] : lb.link.trace) {
    EXPECT_EQ(side, 0) << "UC sends no responses";
    EXPECT_FALSE(p.bth.ack_req);
  }
  // READ and atomics do not exist on UC
  SendWr r = make_wr(WR_RDMA_READ, &sge, 1, 3);
  EXPECT_EQ(EINVAL, lb.a().eng->post_send(qa, &r, &bad));
}

TEST(Uc, LostPacketDropsRestOfMessageAndReceiveIsReused) {
  Loopback lb;
  auto [qa, qb] = lb.connect(QPT_UC);
  fill(lb.a().mem, 0, 8192, 2);
  post_recv(lb.b(), qb, 0x10000, 8192, 1);
  int n = 0;
  lb.link.hook = [&](int, const wire::Packet&, std::vector<uint8_t>&) {
    return ++n == 2 ? Fate::drop : Fate::pass;
  };
  Sge s1{lb.a().addr(0), 3000, lb.a().mr.lkey};
  Sge s2{lb.a().addr(4096), 2000, lb.a().mr.lkey};
  SendWr m1 = make_wr(WR_SEND, &s1, 1, 1);
  SendWr m2 = make_wr(WR_SEND, &s2, 1, 2);
  m1.next = &m2;
  const SendWr* bad;
  ASSERT_EQ(0, lb.a().eng->post_send(qa, &m1, &bad));
  auto wa = lb.poll(lb.a(), 2);
  ASSERT_EQ(wa.size(), 2u);  // the sender completes both: UC has no acknowledgement
  auto wb = lb.poll(lb.b(), 2, 100'000'000);
  ASSERT_EQ(wb.size(), 1u);  // only the second message arrives, into the first receive WQE
  EXPECT_EQ(wb[0].wr_id, 1u);
  EXPECT_EQ(wb[0].byte_len, 2000u);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data() + 4096, lb.b().mem.data() + 0x10000, 2000));
}

class Ud : public ::testing::Test {
 protected:
  Loopback lb;
  uint32_t qa = 0, qb = 0, ah = 0;
  void SetUp() override {
    std::tie(qa, qb) = lb.connect(QPT_UD);
    AddressVector av;
    av.dgid = lb.b().gid;
    av.dmac = lb.b().mac;
    ASSERT_EQ(0, lb.a().eng->create_ah(lb.a().pd, av, ah));
  }
  SendWr ud_wr(Sge* sge, uint32_t qkey, uint64_t id = 1) {
    SendWr w = make_wr(WR_SEND, sge, 1, id);
    w.ud.ah = ah;
    w.ud.remote_qpn = qb;
    w.ud.remote_qkey = qkey;
    return w;
  }
};

TEST_F(Ud, SendCarriesGrhAndSourceQpn) {
  fill(lb.a().mem, 0, 512, 4);
  post_recv(lb.b(), qb, 0, 40 + 1024, 1);
  Sge sge{lb.a().addr(0), 512, lb.a().mr.lkey};
  SendWr w = ud_wr(&sge, 0x11111111);
  const SendWr* bad;
  ASSERT_EQ(0, lb.a().eng->post_send(qa, &w, &bad));
  auto wb = lb.poll(lb.b(), 1);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wb[0].status, WC_SUCCESS);
  EXPECT_EQ(wb[0].byte_len, 512u + 40);
  EXPECT_TRUE(wb[0].wc_flags & WC_GRH);
  EXPECT_EQ(wb[0].src_qp, qa);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data() + 40, 512));
  // IPv4: the header sits in the last 20 bytes of the GRH area
  EXPECT_EQ(lb.b().mem[20], 0x45);
  EXPECT_EQ(0, std::memcmp(lb.b().mem.data() + 20 + 12, lb.a().gid.data() + 12, 4));
  // wc.sl says so, as ConnectX's CQE does (UCX's UD transport relies on it): RoCEv2, IPv4
  EXPECT_EQ(wb[0].sl, 0xa);
  auto& [side, p] = lb.link.trace.at(0);
  EXPECT_EQ(p.bth.opcode, wire::make_opcode(wire::op::kUd, wire::op::send_only));
  EXPECT_EQ(p.deth.src_qp, qa);
  EXPECT_EQ(p.deth.qkey, 0x11111111u);
  EXPECT_EQ(p.udp.sport, 0xc000 | (((qa * 0x61C88647u) >> 18) & 0x3fff));
}

// The address is the AH's as posted: an app may destroy its AH once the send is posted (mckey destroys it
// right after posting its unsignaled sends), as a NIC copies the address vector into the WQE. Posting with
// an AH already destroyed fails the WQE (IBV_WC_LOC_QP_OP_ERR), as before.
TEST_F(Ud, AhDestroyedAfterThePostStillAddressesTheSend) {
  fill(lb.a().mem, 0, 256, 3);
  for (uint64_t i = 0; i < 4; i++) post_recv(lb.b(), qb, 0x1000 * i, 256 + 40, 10 + i);
  Sge sge{lb.a().addr(0), 256, lb.a().mr.lkey};
  SendWr wr[3];
  for (uint64_t i = 0; i < 3; i++) {
    wr[i] = make_wr(WR_SEND, &sge, 1, i + 1);
    wr[i].ud.ah = ah;
    wr[i].ud.remote_qpn = qb;
    wr[i].ud.remote_qkey = 0x11111111;
    if (i) wr[i - 1].next = &wr[i];
  }
  const SendWr* bad;
  ASSERT_EQ(0, lb.a().eng->post_send(qa, &wr[0], &bad));
  ASSERT_EQ(0, lb.a().eng->destroy_ah(ah));  // before the engine ran
  uint32_t other = 0;
  AddressVector av;
  av.dgid = lb.a().gid;
  av.dmac = lb.a().mac;
  ASSERT_EQ(0, lb.a().eng->create_ah(lb.a().pd, av, other));
  EXPECT_NE(other, ah);  // round robin: the destroyed slot is not the next one created
  auto wa = lb.poll(lb.a(), 3);
  ASSERT_EQ(wa.size(), 3u);
  for (const Wc& w : wa) EXPECT_EQ(w.status, WC_SUCCESS);
  auto wb = lb.poll(lb.b(), 3);
  ASSERT_EQ(wb.size(), 3u);
  for (const Wc& w : wb) EXPECT_EQ(w.byte_len, 256u + 40u);
  // Posting with the destroyed AH: the WQE fails.
  SendWr late = make_wr(WR_SEND, &sge, 1, 9);
  late.ud.ah = ah;
  late.ud.remote_qpn = qb;
  late.ud.remote_qkey = 0x11111111;
  ASSERT_EQ(0, lb.a().eng->post_send(qa, &late, &bad));
  auto wl = lb.poll(lb.a(), 1);
  ASSERT_EQ(wl.size(), 1u);
  EXPECT_EQ(wl[0].status, WC_LOC_QP_OP_ERR);
}

TEST_F(Ud, QkeyMismatchDropped) {
  post_recv(lb.b(), qb, 0, 2048, 1);
  Sge sge{lb.a().addr(0), 16, lb.a().mr.lkey};
  SendWr w = ud_wr(&sge, 0x22222222);
  const SendWr* bad;
  ASSERT_EQ(0, lb.a().eng->post_send(qa, &w, &bad));
  EXPECT_EQ(lb.poll(lb.b(), 1, 100'000'000).size(), 0u);
  EXPECT_EQ(lb.b().eng->counter(Counter::rx_drop_qkey), 1u);
}

TEST_F(Ud, PrivilegedQkeyUsesOwnQkey) {
  post_recv(lb.b(), qb, 0, 2048, 1);
  Sge sge{lb.a().addr(0), 16, lb.a().mr.lkey};
  SendWr w = ud_wr(&sge, 0x80000000u);  // high bit: send the QP's own Q_Key (0x11111111)
  const SendWr* bad;
  ASSERT_EQ(0, lb.a().eng->post_send(qa, &w, &bad));
  EXPECT_EQ(lb.poll(lb.b(), 1).size(), 1u);
  EXPECT_EQ(lb.link.trace.at(0).second.deth.qkey, 0x11111111u);
}

TEST_F(Ud, MessageLargerThanMtuRefusedAndNoReceiveDrops) {
  Sge sge{lb.a().addr(0), 1025, lb.a().mr.lkey};
  SendWr w = ud_wr(&sge, 0x11111111);
  const SendWr* bad;
  EXPECT_EQ(EINVAL, lb.a().eng->post_send(qa, &w, &bad));
  sge.length = 1024;
  ASSERT_EQ(0, lb.a().eng->post_send(qa, &w, &bad));  // no receive posted: silently dropped
  lb.settle(100'000'000);
  EXPECT_EQ(lb.b().eng->counter(Counter::rx_drop_no_recv_wqe), 1u);
  w.ud.ah = 0;
  EXPECT_EQ(EINVAL, lb.a().eng->post_send(qa, &w, &bad));
}

TEST_F(Ud, LocalErrorMovesSendQueueToSqeAndBackToRts) {
  Sge sge{lb.a().addr(0), 16, lb.a().mr.lkey};
  SendWr w = ud_wr(&sge, 0x11111111, 1);
  w.ud.ah = 999;  // never created
  SendWr w2 = ud_wr(&sge, 0x11111111, 2);
  w.next = &w2;
  const SendWr* bad;
  ASSERT_EQ(0, lb.a().eng->post_send(qa, &w, &bad));
  auto wa = lb.poll(lb.a(), 2);
  ASSERT_EQ(wa.size(), 2u);
  EXPECT_EQ(wa[0].status, WC_LOC_QP_OP_ERR);
  EXPECT_EQ(wa[1].status, WC_WR_FLUSH_ERR);
  QpAttr at;
  ASSERT_EQ(0, lb.a().eng->query_qp(qa, at));
  EXPECT_EQ(at.qp_state, QPS_SQE);
  at.qp_state = QPS_RTS;
  ASSERT_EQ(0, lb.a().eng->modify_qp(qa, at, QP_STATE));
  post_recv(lb.b(), qb, 0, 2048, 7);
  SendWr ok = ud_wr(&sge, 0x11111111, 3);
  ASSERT_EQ(0, lb.a().eng->post_send(qa, &ok, &bad));
  wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS);
  EXPECT_EQ(lb.poll(lb.b(), 1).size(), 1u);
}

TEST_F(Ud, ReceiveTooSmallForGrhPlusPayload) {
  post_recv(lb.b(), qb, 0, 100, 1);
  Sge sge{lb.a().addr(0), 61, lb.a().mr.lkey};
  SendWr w = ud_wr(&sge, 0x11111111);
  const SendWr* bad;
  ASSERT_EQ(0, lb.a().eng->post_send(qa, &w, &bad));
  auto wb = lb.poll(lb.b(), 1);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wb[0].status, WC_LOC_LEN_ERR);
}

TEST(Srq, SharedByTwoQpsWithLimitEvent) {
  Loopback lb;
  uint32_t srq;
  SrqAttr sa{16, 2, 0};
  ASSERT_EQ(0, lb.b().eng->create_srq(lb.b().pd, sa, srq));
  const uint32_t a1 = lb.create_qp(lb.a(), QPT_RC), a2 = lb.create_qp(lb.a(), QPT_RC);
  const uint32_t b1 = lb.create_qp(lb.b(), QPT_RC, srq), b2 = lb.create_qp(lb.b(), QPT_RC, srq);
  ConnOpts o;
  lb.bring_up(lb.a(), a1, QPT_RC, lb.b(), b1, 1, 1, o);
  lb.bring_up(lb.b(), b1, QPT_RC, lb.a(), a1, 1, 1, o);
  lb.bring_up(lb.a(), a2, QPT_RC, lb.b(), b2, 1, 1, o);
  lb.bring_up(lb.b(), b2, QPT_RC, lb.a(), a2, 1, 1, o);
  for (int i = 0; i < 4; i++) {
    Sge s{lb.b().addr(static_cast<uint64_t>(i) * 1024), 1024, lb.b().mr.lkey};
    RecvWr rw;
    rw.wr_id = static_cast<uint64_t>(i);
    rw.sg_list = &s;
    rw.num_sge = 1;
    const RecvWr* bad;
    ASSERT_EQ(0, lb.b().eng->post_srq_recv(srq, &rw, &bad));
  }
  RecvWr rw;
  EXPECT_EQ(EINVAL, lb.b().eng->post_recv(b1, &rw, nullptr));  // QPs with an SRQ have no own RQ
  sa.srq_limit = 3;
  ASSERT_EQ(0, lb.b().eng->modify_srq(srq, sa, SRQ_LIMIT));
  EXPECT_FALSE(lb.b().events.has(EVENT_SRQ_LIMIT_REACHED));
  Sge sge{lb.a().addr(0), 100, lb.a().mr.lkey};
  SendWr w1 = make_wr(WR_SEND, &sge, 1, 1), w2 = make_wr(WR_SEND, &sge, 1, 2);
  const SendWr* bad;
  ASSERT_EQ(0, lb.a().eng->post_send(a1, &w1, &bad));
  ASSERT_EQ(0, lb.a().eng->post_send(a2, &w2, &bad));
  auto wb = lb.poll(lb.b(), 2);
  ASSERT_EQ(wb.size(), 2u);
  EXPECT_EQ(wb[0].wr_id, 0u);  // SRQ WQEs are taken in order, whichever QP receives
  EXPECT_EQ(wb[1].wr_id, 1u);
  EXPECT_NE(wb[0].qp_num, wb[1].qp_num);
  EXPECT_TRUE(lb.b().events.has(EVENT_SRQ_LIMIT_REACHED));
  SrqAttr q;
  ASSERT_EQ(0, lb.b().eng->query_srq(srq, q));
  EXPECT_EQ(q.srq_limit, 0u);  // disarmed after firing
  EXPECT_EQ(EBUSY, lb.b().eng->destroy_srq(srq));
}

TEST(Ipv6, RcAndUdOverIpv6Gids) {
  Loopback lb({}, 1500, 1 << 20, true);
  auto [qa, qb] = lb.connect(QPT_RC);
  fill(lb.a().mem, 0, 3000, 6);
  post_recv(lb.b(), qb, 0, 4096, 1);
  Sge sge{lb.a().addr(0), 3000, lb.a().mr.lkey};
  SendWr w = make_wr(WR_SEND, &sge, 1, 1);
  const SendWr* bad;
  ASSERT_EQ(0, lb.a().eng->post_send(qa, &w, &bad));
  ASSERT_EQ(lb.poll(lb.b(), 1).size(), 1u);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data(), 3000));
  auto& [side, p] = lb.link.trace.at(0);
  EXPECT_EQ(p.ip_version, 6);
  EXPECT_EQ(p.ip6.hop_limit, 64);
  EXPECT_EQ(p.dst_gid(), lb.b().gid);
  EXPECT_EQ(p.udp.checksum, 0);  // like rxe, even over IPv6

  const uint32_t ua = lb.create_qp(lb.a(), QPT_UD), ub = lb.create_qp(lb.b(), QPT_UD);
  ConnOpts o;
  lb.bring_up(lb.a(), ua, QPT_UD, lb.b(), ub, 0, 0, o);
  lb.bring_up(lb.b(), ub, QPT_UD, lb.a(), ua, 0, 0, o);
  AddressVector av;
  av.dgid = lb.b().gid;
  av.dmac = lb.b().mac;
  av.flow_label = 0x12345;
  uint32_t ah;
  ASSERT_EQ(0, lb.a().eng->create_ah(lb.a().pd, av, ah));
  post_recv(lb.b(), ub, 0x8000, 1024 + 40, 2);
  sge.length = 100;
  SendWr u = make_wr(WR_SEND, &sge, 1, 2);
  u.ud.ah = ah;
  u.ud.remote_qpn = ub;
  u.ud.remote_qkey = o.qkey;
  ASSERT_EQ(0, lb.a().eng->post_send(ua, &u, &bad));
  auto wb = lb.poll(lb.b(), 1);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wb[0].byte_len, 140u);
  // the whole 40-byte IPv6 header is the GRH
  EXPECT_EQ(lb.b().mem[0x8000] >> 4, 6);
  EXPECT_EQ(wb[0].sl, 0x9);  // RoCEv2, IPv6 (ConnectX's CQE convention)
  EXPECT_EQ(0, std::memcmp(lb.b().mem.data() + 0x8000 + 8, lb.a().gid.data(), 16));
  EXPECT_EQ(0, std::memcmp(lb.b().mem.data() + 0x8000 + 24, lb.b().gid.data(), 16));
  EXPECT_EQ(lb.link.trace.back().second.ip6.flow_label, 0x12345u);
}

TEST(Mr, ZeroBasedAndIovaAddressing) {
  Loopback lb;
  auto [qa, qb] = lb.connect(QPT_RC);
  std::vector<uint8_t> zb(4096, 0), va(4096, 0);
  MrInfo mz, mv;
  ASSERT_EQ(0, lb.b().eng->reg_mr(lb.b().pd, zb.data(), zb.size(), 0x5555,
                                  ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_ZERO_BASED, mz));
  ASSERT_EQ(0, lb.b().eng->reg_mr(lb.b().pd, va.data(), va.size(), 0x7000000,
                                  ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE, mv));
  fill(lb.a().mem, 0, 64, 9);
  Sge sge{lb.a().addr(0), 64, lb.a().mr.lkey};
  SendWr w1 = make_wr(WR_RDMA_WRITE, &sge, 1, 1);
  w1.rdma.remote_addr = 100;  // zero-based: an offset into the region
  w1.rdma.rkey = mz.rkey;
  SendWr w2 = make_wr(WR_RDMA_WRITE, &sge, 1, 2);
  w2.rdma.remote_addr = 0x7000000 + 200;  // the iova given at registration
  w2.rdma.rkey = mv.rkey;
  w1.next = &w2;
  const SendWr* bad;
  ASSERT_EQ(0, lb.a().eng->post_send(qa, &w1, &bad));
  auto wa = lb.poll(lb.a(), 2);
  ASSERT_EQ(wa.size(), 2u);
  EXPECT_EQ(wa[1].status, WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), zb.data() + 100, 64));
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), va.data() + 200, 64));
  EXPECT_FALSE(lb.b().events.has(EVENT_COMM_EST));  // already RTS when the first packet came
}

TEST(Events, CommEstWhenFirstPacketArrivesInRtr) {
  Loopback lb;
  const uint32_t qa = lb.create_qp(lb.a(), QPT_RC), qb = lb.create_qp(lb.b(), QPT_RC);
  ConnOpts o;
  lb.bring_up(lb.a(), qa, QPT_RC, lb.b(), qb, 5, 5, o);
  // B only to RTR
  QpAttr at;
  at.qp_state = QPS_INIT;
  at.port_num = 1;
  at.qp_access_flags = ACCESS_REMOTE_WRITE;
  ASSERT_EQ(0, lb.b().eng->modify_qp(qb, at, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS));
  at.qp_state = QPS_RTR;
  at.ah_attr.dgid = lb.a().gid;
  at.ah_attr.dmac = lb.a().mac;
  at.dest_qp_num = qa;
  at.rq_psn = 5;
  at.max_dest_rd_atomic = 1;
  ASSERT_EQ(0, lb.b().eng->modify_qp(qb, at,
                                     QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN |
                                         QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER));
  Sge sge{lb.a().addr(0), 8, lb.a().mr.lkey};
  SendWr w = make_wr(WR_RDMA_WRITE, &sge, 1, 1);
  w.rdma.remote_addr = lb.b().addr(0);
  w.rdma.rkey = lb.b().mr.rkey;
  const SendWr* bad;
  ASSERT_EQ(0, lb.a().eng->post_send(qa, &w, &bad));
  auto wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS);  // an RTR responder answers
  EXPECT_TRUE(lb.b().events.has(EVENT_COMM_EST));
}

// The engines run on the test's thread; the "application" posts and polls on another, through the rings
// only. Every message carries its own bytes (a slot per message in flight, reused once its completion was
// checked), and every completion's wr_id, status, opcode and length, and every received message's bytes,
// are checked. A broken engine fails the test after a generous bound instead of hanging it.
TEST(Threads, PostAndPollWhileProgressRunsOnAnotherThread) {
  Loopback lb;
  const auto conn = lb.connect(QPT_RC);  // named (lambdas capture it; clang 14 cannot capture bindings)
  const uint32_t qa = conn.first, qb = conn.second;
  lb.link.latency_ns = 0;
  constexpr int kMsgs = 2000, kWindow = 32;
  constexpr uint32_t kLen = 64;
  // message i's bytes: a pattern seeded by i, in A's slot i % kWindow; it lands in B's slot i % kWindow
  auto slot = [](int i) { return static_cast<uint64_t>(i % kWindow) * kLen; };
  auto message = [](int i) {
    std::vector<uint8_t> m(kLen);
    fill(m, 0, kLen, static_cast<uint8_t>(i));
    std::memcpy(m.data(), &i, sizeof i);
    return m;
  };
  std::atomic<bool> finished{false}, give_up{false};
  std::atomic<int> done{0}, recvd{0};
  std::thread app([&] {
    int sent = 0, rposted = 0;
    while ((done < kMsgs || recvd < kMsgs) && !give_up) {
      if (rposted < kMsgs && rposted - recvd < kWindow) {
        Sge rs{lb.b().addr(slot(rposted)), kLen, lb.b().mr.lkey};
        RecvWr rw;
        rw.sg_list = &rs;
        rw.num_sge = 1;
        rw.wr_id = static_cast<uint64_t>(rposted);
        const RecvWr* br;
        if (lb.b().eng->post_recv(qb, &rw, &br) == 0) rposted++;
      }
      if (sent < kMsgs && sent - done < kWindow && sent < rposted) {
        const std::vector<uint8_t> m = message(sent);  // the slot's message sent - kWindow has completed
        std::memcpy(lb.a().mem.data() + slot(sent), m.data(), kLen);
        Sge sge{lb.a().addr(slot(sent)), kLen, lb.a().mr.lkey};
        SendWr w = make_wr(WR_SEND, &sge, 1, static_cast<uint64_t>(sent));
        const SendWr* bs;
        if (lb.a().eng->post_send(qa, &w, &bs) == 0) sent++;
      }
      Wc wc[8];
      int n = lb.a().eng->poll_cq(lb.a().cq, 8, wc);
      for (int i = 0; i < n; i++, done++) {
        EXPECT_EQ(wc[i].wr_id, static_cast<uint64_t>(done.load()));
        EXPECT_EQ(wc[i].status, WC_SUCCESS) << wc_status_str(wc[i].status);
        EXPECT_EQ(wc[i].opcode, WC_SEND);
      }
      n = lb.b().eng->poll_cq(lb.b().cq, 8, wc);
      for (int i = 0; i < n; i++, recvd++) {
        const int r = recvd;
        EXPECT_EQ(wc[i].wr_id, static_cast<uint64_t>(r));
        EXPECT_EQ(wc[i].status, WC_SUCCESS) << wc_status_str(wc[i].status);
        EXPECT_EQ(wc[i].opcode, WC_RECV);
        EXPECT_EQ(wc[i].byte_len, kLen);
        // checked before the slot takes another receive (this thread posts them)
        EXPECT_EQ(0, std::memcmp(lb.b().mem.data() + slot(r), message(r).data(), kLen)) << "message " << r;
      }
    }
    finished = !give_up;
  });
  lb.link.keep_trace = false;
  const auto bound = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!finished && std::chrono::steady_clock::now() < bound) {
    lb.a().eng->progress();
    lb.b().eng->progress();
    lb.link.clock.t += 100;
  }
  give_up = true;
  app.join();
  EXPECT_TRUE(finished) << "not done after 60 s: " << done.load() << " of " << kMsgs << " sends completed, "
                        << recvd.load() << " received";
  EXPECT_EQ(done.load(), kMsgs);
  EXPECT_EQ(recvd.load(), kMsgs);
}

}  // namespace
}  // namespace urxe::engine::test
