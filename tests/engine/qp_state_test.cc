// The QP state machine (each transition with its required and optional attributes, invalid masks and
// transitions → EINVAL), posting rules per state, flush to ERR, SQD drain, and the verbs values.
#include <infiniband/verbs.h>

#include "tests/sim/loopback.h"

namespace urxe::engine::test {
namespace {

// The engine's enums are libibverbs' numbers.
#define SAME(a, b) static_assert(static_cast<long>(a) == static_cast<long>(b), #a " != " #b)
SAME(WC_SUCCESS, IBV_WC_SUCCESS);
SAME(WC_GENERAL_ERR, IBV_WC_GENERAL_ERR);
SAME(WC_RNR_RETRY_EXC_ERR, IBV_WC_RNR_RETRY_EXC_ERR);
SAME(WC_REM_OP_ERR, IBV_WC_REM_OP_ERR);
SAME(WC_RECV, IBV_WC_RECV);
SAME(WC_RECV_RDMA_WITH_IMM, IBV_WC_RECV_RDMA_WITH_IMM);
SAME(WC_LOCAL_INV, IBV_WC_LOCAL_INV);
SAME(WC_FETCH_ADD, IBV_WC_FETCH_ADD);
SAME(WC_GRH, IBV_WC_GRH);
SAME(WC_WITH_IMM, IBV_WC_WITH_IMM);
SAME(WC_WITH_INV, IBV_WC_WITH_INV);
SAME(WC_IP_CSUM_OK, IBV_WC_IP_CSUM_OK);
SAME(WR_SEND_WITH_INV, IBV_WR_SEND_WITH_INV);
SAME(WR_LOCAL_INV, IBV_WR_LOCAL_INV);
SAME(WR_BIND_MW, IBV_WR_BIND_MW);
SAME(WC_BIND_MW, IBV_WC_BIND_MW);
SAME(WC_MW_BIND_ERR, IBV_WC_MW_BIND_ERR);
SAME(MW_TYPE_1, IBV_MW_TYPE_1);
SAME(MW_TYPE_2, IBV_MW_TYPE_2);
SAME(ACCESS_MW_BIND, IBV_ACCESS_MW_BIND);
SAME(WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_CMP_AND_SWP);
SAME(WR_TSO, IBV_WR_TSO);
SAME(SEND_FENCE, IBV_SEND_FENCE);
SAME(SEND_INLINE, IBV_SEND_INLINE);
SAME(SEND_IP_CSUM, IBV_SEND_IP_CSUM);
SAME(ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_ATOMIC);
SAME(ACCESS_ZERO_BASED, IBV_ACCESS_ZERO_BASED);
SAME(ACCESS_RELAXED_ORDERING, IBV_ACCESS_RELAXED_ORDERING);
SAME(QPT_RC, IBV_QPT_RC);
SAME(QPT_UC, IBV_QPT_UC);
SAME(QPT_UD, IBV_QPT_UD);
SAME(QPS_SQE, IBV_QPS_SQE);
SAME(QPS_ERR, IBV_QPS_ERR);
SAME(QPS_UNKNOWN, IBV_QPS_UNKNOWN);
SAME(MTU_256, IBV_MTU_256);
SAME(MTU_4096, IBV_MTU_4096);
SAME(QP_MIN_RNR_TIMER, IBV_QP_MIN_RNR_TIMER);
SAME(QP_DEST_QPN, IBV_QP_DEST_QPN);
SAME(QP_RATE_LIMIT, IBV_QP_RATE_LIMIT);
SAME(QP_CAP, IBV_QP_CAP);
SAME(SRQ_LIMIT, IBV_SRQ_LIMIT);
SAME(SRQ_MAX_WR, IBV_SRQ_MAX_WR);
SAME(EVENT_SRQ_LIMIT_REACHED, IBV_EVENT_SRQ_LIMIT_REACHED);
SAME(EVENT_GID_CHANGE, IBV_EVENT_GID_CHANGE);
SAME(EVENT_QP_LAST_WQE_REACHED, IBV_EVENT_QP_LAST_WQE_REACHED);
SAME(WC_LOC_PROT_ERR, IBV_WC_LOC_PROT_ERR);
SAME(WC_RETRY_EXC_ERR, IBV_WC_RETRY_EXC_ERR);
SAME(WC_REM_ACCESS_ERR, IBV_WC_REM_ACCESS_ERR);
SAME(WC_REM_INV_REQ_ERR, IBV_WC_REM_INV_REQ_ERR);
SAME(WC_WR_FLUSH_ERR, IBV_WC_WR_FLUSH_ERR);
SAME(QP_ALT_PATH, IBV_QP_ALT_PATH);
SAME(QP_PATH_MIG_STATE, IBV_QP_PATH_MIG_STATE);
SAME(EVENT_CQ_ERR, IBV_EVENT_CQ_ERR);
SAME(EVENT_COMM_EST, IBV_EVENT_COMM_EST);
SAME(EVENT_SQ_DRAINED, IBV_EVENT_SQ_DRAINED);
SAME(EVENT_QP_ACCESS_ERR, IBV_EVENT_QP_ACCESS_ERR);
#undef SAME

class QpStateTest : public ::testing::Test {
 protected:
  Loopback lb;
  Engine& eng() { return *lb.a().eng; }
  QpState state(uint32_t qpn) {
    QpAttr at;
    EXPECT_EQ(0, eng().query_qp(qpn, at));
    return at.qp_state;
  }
  QpAttr base() {
    QpAttr at;
    at.port_num = 1;
    at.qkey = 0x1234;
    at.path_mtu = MTU_1024;
    at.dest_qp_num = 0x99;
    at.ah_attr.dgid = lb.b().gid;
    at.ah_attr.dmac = lb.b().mac;
    at.timeout = 14;
    at.retry_cnt = 7;
    at.rnr_retry = 7;
    at.max_rd_atomic = 1;
    at.max_dest_rd_atomic = 1;
    at.min_rnr_timer = 12;
    return at;
  }
  int to(uint32_t qpn, QpState s, uint32_t mask) {
    QpAttr at = base();
    at.qp_state = s;
    return eng().modify_qp(qpn, at, QP_STATE | mask);
  }
  static constexpr uint32_t kInitRc = QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS;
  static constexpr uint32_t kInitUd = QP_PKEY_INDEX | QP_PORT | QP_QKEY;
  static constexpr uint32_t kRtrRc =
      QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN | QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER;
  static constexpr uint32_t kRtrUc = QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN;
  static constexpr uint32_t kRtsRc =
      QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_SQ_PSN | QP_MAX_QP_RD_ATOMIC;
};

TEST_F(QpStateTest, RcFullPathWithRequiredAttributes) {
  const uint32_t q = lb.create_qp(lb.a(), QPT_RC);
  EXPECT_EQ(state(q), QPS_RESET);
  EXPECT_EQ(0, to(q, QPS_INIT, kInitRc));
  EXPECT_EQ(state(q), QPS_INIT);
  EXPECT_EQ(0, to(q, QPS_INIT, QP_ACCESS_FLAGS));  // INIT → INIT with an optional attribute
  EXPECT_EQ(0, to(q, QPS_RTR, kRtrRc));
  EXPECT_EQ(state(q), QPS_RTR);
  EXPECT_EQ(0, to(q, QPS_RTS, kRtsRc));
  EXPECT_EQ(state(q), QPS_RTS);
  EXPECT_EQ(0, to(q, QPS_RTS, QP_MIN_RNR_TIMER));  // RTS → RTS
  EXPECT_EQ(0, to(q, QPS_SQD, 0));
  EXPECT_EQ(state(q), QPS_SQD);
  EXPECT_EQ(0, to(q, QPS_SQD, QP_TIMEOUT));  // SQD → SQD may change path attributes
  EXPECT_EQ(0, to(q, QPS_RTS, 0));
  EXPECT_EQ(0, to(q, QPS_ERR, 0));
  EXPECT_EQ(state(q), QPS_ERR);
  EXPECT_EQ(0, to(q, QPS_RESET, 0));
  EXPECT_EQ(state(q), QPS_RESET);
  QpAttr at;
  ASSERT_EQ(0, eng().query_qp(q, at));
  EXPECT_EQ(at.cap.max_send_wr, 64u);
}

TEST_F(QpStateTest, MissingRequiredAttributeIsEinval) {
  const uint32_t q = lb.create_qp(lb.a(), QPT_RC);
  EXPECT_EQ(EINVAL, to(q, QPS_INIT, QP_PKEY_INDEX | QP_PORT));  // no ACCESS_FLAGS
  ASSERT_EQ(0, to(q, QPS_INIT, kInitRc));
  for (uint32_t bit = 1; bit < (1u << 21); bit <<= 1) {
    if (!(kRtrRc & bit)) continue;
    EXPECT_EQ(EINVAL, to(q, QPS_RTR, kRtrRc & ~bit)) << "without bit " << bit;
    EXPECT_EQ(state(q), QPS_INIT);
  }
  ASSERT_EQ(0, to(q, QPS_RTR, kRtrRc));
  for (uint32_t bit = 1; bit < (1u << 21); bit <<= 1) {
    if (!(kRtsRc & bit)) continue;
    EXPECT_EQ(EINVAL, to(q, QPS_RTS, kRtsRc & ~bit)) << "without bit " << bit;
  }
  EXPECT_EQ(state(q), QPS_RTR);
}

TEST_F(QpStateTest, AttributeNotAllowedInTransitionIsEinval) {
  const uint32_t q = lb.create_qp(lb.a(), QPT_RC);
  EXPECT_EQ(EINVAL, to(q, QPS_INIT, kInitRc | QP_QKEY));  // Q_Key is for UD
  EXPECT_EQ(EINVAL, to(q, QPS_INIT, kInitRc | QP_SQ_PSN));
  ASSERT_EQ(0, to(q, QPS_INIT, kInitRc));
  EXPECT_EQ(EINVAL, to(q, QPS_RTR, kRtrRc | QP_SQ_PSN));
  ASSERT_EQ(0, to(q, QPS_RTR, kRtrRc));
  EXPECT_EQ(EINVAL, to(q, QPS_RTS, kRtsRc | QP_PATH_MTU));
  ASSERT_EQ(0, to(q, QPS_RTS, kRtsRc));
  EXPECT_EQ(EINVAL, to(q, QPS_RTS, QP_DEST_QPN));
  EXPECT_EQ(EINVAL, eng().modify_qp(q, base(), QP_CAP));
}

TEST_F(QpStateTest, InvalidTransitionsAndValuesAreEinval) {
  const uint32_t q = lb.create_qp(lb.a(), QPT_RC);
  EXPECT_EQ(EINVAL, to(q, QPS_RTR, kRtrRc));  // RESET → RTR
  EXPECT_EQ(EINVAL, to(q, QPS_RTS, kRtsRc));  // RESET → RTS
  EXPECT_EQ(EINVAL, to(q, QPS_SQE, 0));       // → SQE is the engine's, not the user's
  EXPECT_EQ(EINVAL, to(q, QPS_UNKNOWN, 0));
  ASSERT_EQ(0, to(q, QPS_INIT, kInitRc));
  EXPECT_EQ(EINVAL, to(q, QPS_RTS, kRtsRc));  // INIT → RTS
  EXPECT_EQ(EINVAL, to(q, QPS_SQD, 0));       // INIT → SQD
  QpAttr at = base();
  at.qp_state = QPS_RTR;
  at.path_mtu = static_cast<Mtu>(6);
  EXPECT_EQ(EINVAL, eng().modify_qp(q, at, QP_STATE | kRtrRc));
  at.path_mtu = MTU_1024;
  at.ah_attr.sgid_index = 3;  // no such GID
  EXPECT_EQ(EINVAL, eng().modify_qp(q, at, QP_STATE | kRtrRc));
  at.ah_attr.sgid_index = 0;
  at.max_dest_rd_atomic = 200;
  EXPECT_EQ(EINVAL, eng().modify_qp(q, at, QP_STATE | kRtrRc));
  at.max_dest_rd_atomic = 1;
  ASSERT_EQ(0, eng().modify_qp(q, at, QP_STATE | kRtrRc));
  at.qp_state = QPS_RTS;
  at.retry_cnt = 8;
  EXPECT_EQ(EINVAL, eng().modify_qp(q, at, QP_STATE | kRtsRc));
  at.retry_cnt = 7;
  at.cur_qp_state = QPS_INIT;  // wrong current state
  EXPECT_EQ(EINVAL, eng().modify_qp(q, at, QP_STATE | QP_CUR_STATE | kRtsRc));
  at.cur_qp_state = QPS_RTR;
  EXPECT_EQ(0, eng().modify_qp(q, at, QP_STATE | QP_CUR_STATE | kRtsRc));
  EXPECT_EQ(EINVAL, eng().modify_qp(0x7777, at, QP_STATE));
}

TEST_F(QpStateTest, UcAndUdMasks) {
  const uint32_t uc = lb.create_qp(lb.a(), QPT_UC);
  ASSERT_EQ(0, to(uc, QPS_INIT, kInitRc));
  EXPECT_EQ(EINVAL, to(uc, QPS_RTR, kRtrRc));  // MAX_DEST_RD_ATOMIC / MIN_RNR_TIMER are RC-only
  ASSERT_EQ(0, to(uc, QPS_RTR, kRtrUc));
  EXPECT_EQ(EINVAL, to(uc, QPS_RTS, kRtsRc));
  ASSERT_EQ(0, to(uc, QPS_RTS, QP_SQ_PSN));

  const uint32_t ud = lb.create_qp(lb.a(), QPT_UD);
  EXPECT_EQ(EINVAL, to(ud, QPS_INIT, kInitRc));  // UD takes Q_Key, not access flags
  ASSERT_EQ(0, to(ud, QPS_INIT, kInitUd));
  EXPECT_EQ(EINVAL, to(ud, QPS_RTR, QP_AV));
  ASSERT_EQ(0, to(ud, QPS_RTR, 0));
  ASSERT_EQ(0, to(ud, QPS_RTS, QP_SQ_PSN));
  EXPECT_EQ(0, to(ud, QPS_RTS, QP_QKEY));
}

TEST_F(QpStateTest, PostingRulesPerState) {
  const uint32_t q = lb.create_qp(lb.a(), QPT_RC);
  Sge sge{lb.a().addr(0), 8, lb.a().mr.lkey};
  SendWr wr = make_wr(WR_SEND, &sge, 1);
  RecvWr rw;
  rw.sg_list = &sge;
  rw.num_sge = 1;
  const SendWr* bs = nullptr;
  const RecvWr* br = nullptr;
  EXPECT_EQ(EINVAL, eng().post_send(q, &wr, &bs));  // RESET
  EXPECT_EQ(bs, &wr);
  EXPECT_EQ(EINVAL, eng().post_recv(q, &rw, &br));  // RESET
  ASSERT_EQ(0, to(q, QPS_INIT, kInitRc));
  EXPECT_EQ(0, eng().post_recv(q, &rw, &br));  // receives may be posted from INIT on
  EXPECT_EQ(EINVAL, eng().post_send(q, &wr, &bs));
  ASSERT_EQ(0, to(q, QPS_RTR, kRtrRc));
  EXPECT_EQ(EINVAL, eng().post_send(q, &wr, &bs));
  ASSERT_EQ(0, to(q, QPS_RTS, kRtsRc));
  // wrong use: too many SGEs, bad opcode for RC, unsupported, queue full
  SendWr bad = wr;
  bad.num_sge = 5;
  EXPECT_EQ(EINVAL, eng().post_send(q, &bad, &bs));
  bad = wr;
  bad.opcode = WR_TSO;
  EXPECT_EQ(EOPNOTSUPP, eng().post_send(q, &bad, &bs));
  bad.opcode = static_cast<WrOpcode>(42);
  EXPECT_EQ(EINVAL, eng().post_send(q, &bad, &bs));
  bad = wr;
  bad.send_flags |= SEND_IP_CSUM;
  EXPECT_EQ(EINVAL, eng().post_send(q, &bad, &bs));
  bad = wr;
  bad.send_flags |= SEND_INLINE;
  Sge big{lb.a().addr(0), 65, 0};
  bad.sg_list = &big;
  EXPECT_EQ(EINVAL, eng().post_send(q, &bad, &bs));  // max_inline_data is 64
  // a list stops at the first bad WR and reports it
  SendWr w1 = wr, w2 = wr;
  w2.num_sge = 9;
  w1.next = &w2;
  EXPECT_EQ(EINVAL, eng().post_send(q, &w1, &bs));
  EXPECT_EQ(bs, &w2);
  int posted = 1;  // w1 went in
  while (eng().post_send(q, &wr, &bs) == 0) posted++;
  EXPECT_EQ(posted, 64);
  EXPECT_EQ(ENOMEM, eng().post_send(q, &wr, &bs));
}

TEST_F(QpStateTest, ErrorStateFlushesEverythingWithFlushErr) {
  auto [qa, qb] = lb.connect(QPT_RC);
  Sge sge{lb.b().addr(0), 8, lb.b().mr.lkey};
  for (int i = 0; i < 3; i++) {
    RecvWr rw;
    rw.wr_id = static_cast<uint64_t>(10 + i);
    rw.sg_list = &sge;
    rw.num_sge = 1;
    const RecvWr* br;
    ASSERT_EQ(0, lb.b().eng->post_recv(qb, &rw, &br));
  }
  QpAttr at;
  at.qp_state = QPS_ERR;
  ASSERT_EQ(0, lb.b().eng->modify_qp(qb, at, QP_STATE));
  auto wb = lb.poll(lb.b(), 3);
  ASSERT_EQ(wb.size(), 3u);
  for (int i = 0; i < 3; i++) {
    EXPECT_EQ(wb[i].status, WC_WR_FLUSH_ERR);
    EXPECT_EQ(wb[i].wr_id, static_cast<uint64_t>(10 + i));
  }
  // posting in ERR is allowed and completes with a flush (unsignaled or not)
  Sge s{lb.b().addr(0), 8, lb.b().mr.lkey};
  SendWr w = make_wr(WR_SEND, &s, 1, 77, 0);
  const SendWr* bs;
  ASSERT_EQ(0, lb.b().eng->post_send(qb, &w, &bs));
  wb = lb.poll(lb.b(), 1);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wb[0].wr_id, 77u);
  EXPECT_EQ(wb[0].status, WC_WR_FLUSH_ERR);
}

TEST_F(QpStateTest, SqdDrainsAndNotifies) {
  auto [qa, qb] = lb.connect(QPT_RC);
  Sge sge{lb.a().addr(0), 4000, lb.a().mr.lkey};
  SendWr w = make_wr(WR_RDMA_WRITE, &sge, 1, 1);
  w.rdma.remote_addr = lb.b().addr(0);
  w.rdma.rkey = lb.b().mr.rkey;
  const SendWr* bs;
  ASSERT_EQ(0, lb.a().eng->post_send(qa, &w, &bs));
  lb.a().eng->progress();  // the WRITE starts
  QpAttr at;
  at.qp_state = QPS_SQD;
  at.en_sqd_async_notify = 1;
  ASSERT_EQ(0, lb.a().eng->modify_qp(qa, at, QP_STATE | QP_EN_SQD_ASYNC_NOTIFY));
  w.wr_id = 2;  // posted in SQD: waits until RTS
  ASSERT_EQ(0, lb.a().eng->post_send(qa, &w, &bs));
  auto wa = lb.poll(lb.a(), 2, 1'000'000'000);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].wr_id, 1u);
  EXPECT_TRUE(lb.a().events.has(EVENT_SQ_DRAINED));
  at.qp_state = QPS_RTS;
  ASSERT_EQ(0, lb.a().eng->modify_qp(qa, at, QP_STATE));
  wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].wr_id, 2u);
}

TEST_F(QpStateTest, ResetClearsQueuesAndAllowsReconnect) {
  auto [qa, qb] = lb.connect(QPT_RC);
  Sge s{lb.b().addr(0), 8, lb.b().mr.lkey};
  RecvWr rw;
  rw.sg_list = &s;
  rw.num_sge = 1;
  const RecvWr* br;
  ASSERT_EQ(0, lb.b().eng->post_recv(qb, &rw, &br));
  QpAttr at;
  at.qp_state = QPS_RESET;
  ASSERT_EQ(0, lb.b().eng->modify_qp(qb, at, QP_STATE));
  ASSERT_EQ(0, lb.a().eng->modify_qp(qa, at, QP_STATE));
  Wc wc[4];
  lb.settle(1'000'000);
  EXPECT_EQ(0, lb.b().eng->poll_cq(lb.b().cq, 4, wc));  // RESET discards without completions
  ConnOpts o;
  lb.bring_up(lb.a(), qa, QPT_RC, lb.b(), qb, 0x500, 0x600, o);
  lb.bring_up(lb.b(), qb, QPT_RC, lb.a(), qa, 0x600, 0x500, o);
  ASSERT_EQ(0, lb.b().eng->post_recv(qb, &rw, &br));
  Sge sa{lb.a().addr(0), 8, lb.a().mr.lkey};
  SendWr w = make_wr(WR_SEND, &sa, 1, 5);
  const SendWr* bs;
  ASSERT_EQ(0, lb.a().eng->post_send(qa, &w, &bs));
  auto wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS);
}

TEST(Objects, PdMrCqLifetimesAndErrors) {
  Loopback lb;
  Engine& e = *lb.a().eng;
  uint32_t pd;
  ASSERT_EQ(0, e.alloc_pd(pd));
  std::vector<uint8_t> buf(100);
  MrInfo mr;
  EXPECT_EQ(EINVAL, e.reg_mr(pd, buf.data(), 100, 0, ACCESS_REMOTE_WRITE, mr));  // needs LOCAL_WRITE
  EXPECT_EQ(EOPNOTSUPP, e.reg_mr(pd, buf.data(), 100, 0, ACCESS_ON_DEMAND, mr));
  EXPECT_EQ(EINVAL, e.reg_mr(999, buf.data(), 100, 0, 0, mr));
  ASSERT_EQ(0, e.reg_mr(pd, buf.data(), 100, 0x1000, ACCESS_LOCAL_WRITE, mr));
  EXPECT_EQ(mr.lkey, mr.rkey);
  EXPECT_EQ(EBUSY, e.dealloc_pd(pd));
  ASSERT_EQ(0, e.dereg_mr(mr.lkey));
  EXPECT_EQ(EINVAL, e.dereg_mr(mr.lkey));
  // the index comes back with a new key
  MrInfo mr2;
  ASSERT_EQ(0, e.reg_mr(pd, buf.data(), 100, 0x1000, ACCESS_LOCAL_WRITE, mr2));
  EXPECT_EQ(mr2.lkey >> 8, mr.lkey >> 8);
  EXPECT_NE(mr2.lkey & 0xff, mr.lkey & 0xff);
  ASSERT_EQ(0, e.dereg_mr(mr2.lkey));
  EXPECT_EQ(0, e.dealloc_pd(pd));
  uint32_t cq;
  EXPECT_EQ(EINVAL, e.create_cq(0, cq));
  EXPECT_EQ(EINVAL, e.create_cq(1u << 20, cq));
}

TEST(Objects, CqOverflowRaisesCqError) {
  Loopback lb;
  uint32_t small;
  ASSERT_EQ(0, lb.a().eng->create_cq(2, small));
  QpInitAttr init;
  init.send_cq = small;
  init.recv_cq = lb.a().cq;
  init.cap = {8, 8, 1, 1, 0};
  uint32_t qa, qb = lb.create_qp(lb.b(), QPT_RC);
  ASSERT_EQ(0, lb.a().eng->create_qp(lb.a().pd, init, qa));
  ConnOpts o;
  lb.bring_up(lb.a(), qa, QPT_RC, lb.b(), qb, 1, 2, o);
  lb.bring_up(lb.b(), qb, QPT_RC, lb.a(), qa, 2, 1, o);
  Sge sge{lb.a().addr(0), 8, lb.a().mr.lkey};
  for (int i = 0; i < 3; i++) {
    SendWr w = make_wr(WR_RDMA_WRITE, &sge, 1, static_cast<uint64_t>(i));
    w.rdma.remote_addr = lb.b().addr(0);
    w.rdma.rkey = lb.b().mr.rkey;
    const SendWr* bs;
    ASSERT_EQ(0, lb.a().eng->post_send(qa, &w, &bs));
  }
  lb.settle(100'000'000);
  EXPECT_TRUE(lb.a().events.has(EVENT_CQ_ERR));
  EXPECT_EQ(lb.a().eng->counter(Counter::cq_overflow), 1u);
  Wc wc[4];
  EXPECT_EQ(2, lb.a().eng->poll_cq(small, 4, wc));
  EXPECT_EQ(EBUSY, lb.a().eng->destroy_cq(small));
  ASSERT_EQ(0, lb.a().eng->destroy_qp(qa));
  EXPECT_EQ(0, lb.a().eng->destroy_cq(small));
}

TEST(Objects, ActiveMtuFollowsLinkMtu) {
  for (auto [link, mtu] :
       {std::pair{1500u, MTU_1024}, {9000u, MTU_4096}, {1100u, MTU_512}, {4200u, MTU_4096}}) {
    Loopback lb({}, link, 4096);
    EXPECT_EQ(lb.a().eng->active_mtu(), mtu) << link;
  }
}

}  // namespace
}  // namespace urxe::engine::test
