// Tag-matching SRQs in the engine (engine/tag_matching.cc): the tag list operations and their completions,
// eager matching in posting order with the data placed after the TMH, unexpected and NO_TAG messages into
// ordinary SRQ WQEs with the TMH kept, phase synchronisation, and rendezvous served by the NIC's own READ
// followed by a FIN to the sender, all over the loopback: A is the sender (an RC QP with its own RQ), B the
// receiver (an RC QP with max_send_wr 0 on a TM SRQ, as rdma-core's pyverbs test builds it).
#include <infiniband/tm_types.h>
#include <infiniband/verbs.h>

#include <cstring>
#include <vector>

#include "tests/engine/driver.h"
#include "tests/sim/loopback.h"
#include "wire/bytes.h"

namespace urxe::engine::test {
namespace {

// The tag-matching vocabulary has libibverbs' numbers (the provider converts by cast).
#define SAME(a, b) static_assert(static_cast<long>(a) == static_cast<long>(b), #a " != " #b)
SAME(WC_TM_ERR, IBV_WC_TM_ERR);
SAME(WC_TM_RNDV_INCOMPLETE, IBV_WC_TM_RNDV_INCOMPLETE);
SAME(WC_TM_ADD, IBV_WC_TM_ADD);
SAME(WC_TM_DEL, IBV_WC_TM_DEL);
SAME(WC_TM_SYNC, IBV_WC_TM_SYNC);
SAME(WC_TM_RECV, IBV_WC_TM_RECV);
SAME(WC_TM_NO_TAG, IBV_WC_TM_NO_TAG);
SAME(WC_TM_SYNC_REQ, IBV_WC_TM_SYNC_REQ);
SAME(WC_TM_MATCH, IBV_WC_TM_MATCH);
SAME(WC_TM_DATA_VALID, IBV_WC_TM_DATA_VALID);
SAME(SRQT_TM, IBV_SRQT_TM);
SAME(SRQT_XRC, IBV_SRQT_XRC);
SAME(WR_TAG_ADD, IBV_WR_TAG_ADD);
SAME(WR_TAG_DEL, IBV_WR_TAG_DEL);
SAME(WR_TAG_SYNC, IBV_WR_TAG_SYNC);
SAME(OPS_SIGNALED, IBV_OPS_SIGNALED);
SAME(OPS_TM_SYNC, IBV_OPS_TM_SYNC);
SAME(TMH_NO_TAG, IBV_TMH_NO_TAG);
SAME(TMH_RNDV, IBV_TMH_RNDV);
SAME(TMH_FIN, IBV_TMH_FIN);
SAME(TMH_EAGER, IBV_TMH_EAGER);
SAME(kTmCapRc, IBV_TM_CAP_RC);
static_assert(kTmhSize == sizeof(ibv_tmh) && kRvhSize == sizeof(ibv_rvh));
#undef SAME

constexpr uint64_t kMask = 0xffff;
constexpr uint32_t kTags = 16;  // the SRQ's max_num_tags

class TagMatching : public ::testing::Test {
 protected:
  Loopback lb;
  uint32_t srq = 0, qa = 0, qb = 0;
  uint32_t qp_cq = 0;  // B's QP's own CQs: a TM SRQ's completions all go to the SRQ's CQ (B's main one)
  void SetUp() override {
    SrqAttr sa{64, 1, 0};
    TmSrqAttr tm{kTags, 16, lb.b().cq};
    ASSERT_EQ(0, lb.b().eng->create_srq_tm(lb.b().pd, sa, tm, srq));
    ASSERT_EQ(0, lb.b().eng->create_cq(64, qp_cq));
    qa = lb.create_qp(lb.a(), QPT_RC);
    QpInitAttr init;
    init.send_cq = init.recv_cq = qp_cq;
    init.srq = srq;
    init.qp_type = QPT_RC;  // max_send_wr 0, as the pyverbs test's server
    ASSERT_EQ(0, lb.b().eng->create_qp(lb.b().pd, init, qb));
    ConnOpts o;
    lb.bring_up(lb.a(), qa, QPT_RC, lb.b(), qb, 1, 1, o);
    lb.bring_up(lb.b(), qb, QPT_RC, lb.a(), qa, 1, 1, o);
  }
  void TearDown() override {
    Wc wc[4];
    EXPECT_EQ(0, eb().poll_cq(qp_cq, 4, wc));  // nothing ever on the QP's own CQs
  }
  Engine& eb() { return *lb.b().eng; }
  // TAG_ADD of B's buffer [off, off+len); returns post_srq_op's result, the handle in `handle`.
  int add(uint64_t tag, uint64_t wr_id, uint64_t off, uint32_t len, uint32_t* handle = nullptr,
          uint32_t flags = OPS_SIGNALED, uint32_t unexpected = 0) {
    Sge sge{lb.b().addr(off), len, lb.b().mr.lkey};
    OpsWr op;
    op.wr_id = 1000 + wr_id;
    op.opcode = WR_TAG_ADD;
    op.flags = flags;
    op.unexpected_cnt = unexpected;
    op.recv_wr_id = wr_id;
    op.sg_list = &sge;
    op.num_sge = 1;
    op.tag = tag;
    op.mask = kMask;
    const int rc = eb().post_srq_op(srq, op);
    if (handle) *handle = op.handle;
    return rc;
  }
  int simple_op(OpsWrOpcode opcode, uint32_t handle, uint32_t flags, uint32_t unexpected = 0) {
    OpsWr op;
    op.wr_id = 77;
    op.opcode = opcode;
    op.flags = flags;
    op.handle = handle;
    op.unexpected_cnt = unexpected;
    return eb().post_srq_op(srq, op);
  }
  Wc poll_b() {
    auto wc = lb.poll(lb.b(), 1);
    EXPECT_EQ(wc.size(), 1u);
    return wc.empty() ? Wc{} : wc[0];
  }
  void post_srq(uint64_t wr_id, uint64_t off, uint32_t len) {
    Sge sge{lb.b().addr(off), len, lb.b().mr.lkey};
    RecvWr rw;
    rw.wr_id = wr_id;
    rw.sg_list = &sge;
    rw.num_sge = 1;
    const RecvWr* bad = nullptr;
    ASSERT_EQ(0, eb().post_srq_recv(srq, &rw, &bad));
  }
  // A SEND from A of `len` bytes at A's offset `off`: a TMH (opcode, app_ctx, tag), then a pattern.
  void send(uint8_t opcode, uint64_t tag, uint32_t len, uint64_t off = 0, uint32_t app_ctx = 0xabcd0123) {
    std::vector<uint8_t>& m = lb.a().mem;
    fill(m, off, len, static_cast<uint8_t>(tag));
    std::memset(m.data() + off, 0, kTmhSize);
    m[off] = opcode;
    wire::store_be32(m.data() + off + 4, app_ctx);
    wire::store_be64(m.data() + off + 8, tag);
    Sge sge{lb.a().addr(off), len, lb.a().mr.lkey};
    post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, 500 + tag));
    auto wc = lb.poll(lb.a(), 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, WC_SUCCESS);
    EXPECT_EQ(wc[0].opcode, WC_SEND);
  }
  bool same(uint64_t b_off, uint64_t a_off, uint32_t len) {
    return std::memcmp(lb.b().mem.data() + b_off, lb.a().mem.data() + a_off, len) == 0;
  }
};

TEST_F(TagMatching, EagerMatchesInPostingOrderAndPlacesTheDataAfterTheTmh) {
  uint32_t h1 = 0, h2 = 0;
  ASSERT_EQ(0, add(7, 1, 0x1000, 4096, &h1));
  Wc wc = poll_b();
  EXPECT_EQ(wc.opcode, WC_TM_ADD);
  EXPECT_EQ(wc.wr_id, 1001u);
  EXPECT_EQ(wc.status, WC_SUCCESS);
  EXPECT_EQ(wc.wc_flags, 0u);
  ASSERT_EQ(0, add(7, 2, 0x3000, 4096, &h2));  // the same tag again: matched second
  EXPECT_EQ(poll_b().opcode, WC_TM_ADD);
  EXPECT_NE(h1, h2);
  for (uint64_t wr_id : {1u, 2u}) {
    const uint32_t len = wr_id == 1 ? 200 : 3000;  // one packet; three (MTU 1024)
    send(TMH_EAGER, 0x30007, len, 0x100 * wr_id);  // (0x30007 & 0xffff) == 7
    wc = poll_b();
    EXPECT_EQ(wc.status, WC_SUCCESS);
    EXPECT_EQ(wc.opcode, WC_TM_RECV);
    EXPECT_EQ(wc.wr_id, wr_id);
    EXPECT_EQ(wc.wc_flags, uint32_t{WC_TM_MATCH | WC_TM_DATA_VALID});
    EXPECT_EQ(wc.byte_len, len - kTmhSize);
    EXPECT_EQ(wc_tm_tag(wc), 0x30007u);
    EXPECT_EQ(wc_tm_priv(wc), 0xabcd0123u);
    EXPECT_EQ(wc.qp_num, qb);
    const uint64_t buf = wr_id == 1 ? 0x1000 : 0x3000;
    EXPECT_TRUE(same(buf, 0x100 * wr_id + kTmhSize, len - kTmhSize)) << wr_id;
  }
  // both consumed: a third message is unexpected (and waits for an SRQ WQE: RNR until one is posted)
  post_srq(9, 0x8000, 4096);
  send(TMH_EAGER, 7, 100);
  wc = poll_b();
  EXPECT_EQ(wc.opcode, WC_TM_RECV);
  EXPECT_EQ(wc.wr_id, 9u);
}

TEST_F(TagMatching, UnexpectedAndNoTagKeepTheTmhAndSyncArmsLaterTags) {
  post_srq(50, 0x8000, 4096);
  post_srq(51, 0x9000, 4096);
  post_srq(52, 0xa000, 4096);
  ASSERT_EQ(0, add(1, 1, 0x1000, 4096));
  EXPECT_EQ(poll_b().opcode, WC_TM_ADD);
  send(TMH_EAGER, 0x1234, 300);  // no tag matches: unexpected, whole message with its TMH
  Wc wc = poll_b();
  EXPECT_EQ(wc.opcode, WC_TM_RECV);
  EXPECT_EQ(wc.wr_id, 50u);
  EXPECT_EQ(wc.wc_flags, 0u);
  EXPECT_EQ(wc.byte_len, 300u);
  EXPECT_EQ(wc_tm_tag(wc), 0u);
  EXPECT_TRUE(same(0x8000, 0, 300));
  send(TMH_NO_TAG, 1, 200);  // NO_TAG: an ordinary receive even though tag 1 is posted
  wc = poll_b();
  EXPECT_EQ(wc.opcode, WC_TM_NO_TAG);
  EXPECT_EQ(wc.wr_id, 51u);
  EXPECT_EQ(wc.wc_flags, 0u);
  EXPECT_TRUE(same(0x9000, 0, 200));
  // the app has not yet handled the unexpected message: a tag it adds now asks for a sync and is not armed
  ASSERT_EQ(0, add(2, 2, 0x3000, 4096, nullptr, OPS_SIGNALED | OPS_TM_SYNC, 0));
  wc = poll_b();
  EXPECT_EQ(wc.opcode, WC_TM_ADD);
  EXPECT_EQ(wc.wc_flags, uint32_t{WC_TM_SYNC_REQ});
  send(TMH_EAGER, 2, 100);
  wc = poll_b();
  EXPECT_EQ(wc.wr_id, 52u);  // unexpected: tag 2 is not armed
  EXPECT_EQ(wc.wc_flags, 0u);
  // tag 1, added before the unexpected messages, still matches
  send(TMH_EAGER, 1, 100);
  wc = poll_b();
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.wc_flags, uint32_t{WC_TM_MATCH | WC_TM_DATA_VALID});
  // a sync with both unexpected messages arms tag 2
  ASSERT_EQ(0, simple_op(WR_TAG_SYNC, 0, OPS_SIGNALED | OPS_TM_SYNC, 2));
  wc = poll_b();
  EXPECT_EQ(wc.opcode, WC_TM_SYNC);
  EXPECT_EQ(wc.wr_id, 77u);
  send(TMH_EAGER, 2, 100);
  wc = poll_b();
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(wc.wc_flags, uint32_t{WC_TM_MATCH | WC_TM_DATA_VALID});
}

TEST_F(TagMatching, DelSyncAndBadOperations) {
  uint32_t h = 0;
  ASSERT_EQ(0, add(3, 3, 0x1000, 4096, &h));
  EXPECT_EQ(poll_b().opcode, WC_TM_ADD);
  ASSERT_EQ(0, simple_op(WR_TAG_DEL, h, OPS_SIGNALED));
  Wc wc = poll_b();
  EXPECT_EQ(wc.opcode, WC_TM_DEL);
  EXPECT_EQ(wc.status, WC_SUCCESS);
  EXPECT_EQ(EINVAL, simple_op(WR_TAG_DEL, h, OPS_SIGNALED));     // no longer on the list
  EXPECT_EQ(EINVAL, simple_op(WR_TAG_DEL, 1000, OPS_SIGNALED));  // no such handle
  post_srq(60, 0x8000, 4096);
  send(TMH_EAGER, 3, 64);  // its tag was deleted: unexpected
  EXPECT_EQ(poll_b().wr_id, 60u);
  ASSERT_EQ(0, simple_op(WR_TAG_SYNC, 0, OPS_TM_SYNC, 1));  // unsignaled: no completion
  ASSERT_EQ(0, add(4, 4, 0x1000, 4096, &h, 0));             // unsignaled ADD
  send(TMH_EAGER, 4, 64);
  wc = poll_b();
  EXPECT_EQ(wc.wr_id, 4u);  // the first completion is the receive: no ADD/SYNC completion came
  EXPECT_EQ(wc.opcode, WC_TM_RECV);
  ASSERT_EQ(0, simple_op(WR_TAG_DEL, h, 0));  // consumed meanwhile: TM_ERR, reported even unsignaled
  wc = poll_b();
  EXPECT_EQ(wc.opcode, WC_TM_DEL);
  EXPECT_EQ(wc.status, WC_TM_ERR);
  // the list holds max_num_tags
  for (uint32_t i = 0; i < kTags; i++) ASSERT_EQ(0, add(100 + i, i, 0x1000, 64, nullptr, 0)) << i;
  EXPECT_EQ(ENOMEM, add(200, 9, 0x1000, 64, nullptr, 0));
  OpsWr op;
  op.opcode = WR_TAG_ADD;
  Sge two[2] = {{lb.b().addr(0), 8, lb.b().mr.lkey}, {lb.b().addr(8), 8, lb.b().mr.lkey}};
  op.sg_list = two;
  op.num_sge = 2;  // beyond tm_caps.max_sge
  EXPECT_EQ(EINVAL, eb().post_srq_op(srq, op));
  op.num_sge = 0;
  op.opcode = static_cast<OpsWrOpcode>(9);
  EXPECT_EQ(EINVAL, eb().post_srq_op(srq, op));
  op.opcode = WR_TAG_SYNC;
  op.flags = 1u << 5;
  EXPECT_EQ(EINVAL, eb().post_srq_op(srq, op));
  // operations on an ordinary SRQ; bad tm_cap; a UC QP on a TM SRQ
  uint32_t basic = 0, other = 0;
  ASSERT_EQ(0, eb().create_srq(lb.b().pd, SrqAttr{4, 1, 0}, basic));
  op.flags = 0;
  EXPECT_EQ(EINVAL, eb().post_srq_op(basic, op));
  EXPECT_EQ(EINVAL, eb().create_srq_tm(lb.b().pd, SrqAttr{4, 1, 0}, TmSrqAttr{0, 1, lb.b().cq}, other));
  EXPECT_EQ(EINVAL, eb().create_srq_tm(lb.b().pd, SrqAttr{4, 1, 0},
                                       TmSrqAttr{kTmCaps.max_num_tags + 1, 1, lb.b().cq}, other));
  EXPECT_EQ(EINVAL, eb().create_srq_tm(lb.b().pd, SrqAttr{4, 1, 0}, TmSrqAttr{4, 1, 9999}, other));
  QpInitAttr init;
  init.send_cq = init.recv_cq = lb.b().cq;
  init.srq = srq;
  init.qp_type = QPT_UC;
  uint32_t qpn = 0;
  EXPECT_EQ(EINVAL, eb().create_qp(lb.b().pd, init, qpn));
  EXPECT_EQ(EBUSY, eb().destroy_cq(lb.b().cq));  // the TM SRQ's CQ
}

TEST_F(TagMatching, RendezvousIsReadByTheNicThenFinishedWithAFin) {
  constexpr uint32_t kLen = 5000;
  constexpr uint64_t kData = 0x10000;  // A's buffer the rendezvous names
  fill(lb.a().mem, kData, kLen, 0x5a);
  ASSERT_EQ(0, add(9, 9, 0x20000, 8192));
  EXPECT_EQ(poll_b().opcode, WC_TM_ADD);
  post_recv(lb.a(), qa, 0x30000, 64, 4242);  // for the FIN
  // the RNDV message: TMH + RVH (va, rkey, len) + a few bytes of app header, 64 bytes in all
  std::vector<uint8_t>& m = lb.a().mem;
  std::memset(m.data(), 0, 64);
  wire::store_be64(m.data() + kTmhSize, lb.a().addr(kData));
  wire::store_be32(m.data() + kTmhSize + 8, lb.a().mr.rkey);
  wire::store_be32(m.data() + kTmhSize + 12, kLen);
  m[0] = TMH_RNDV;
  wire::store_be32(m.data() + 4, 0x600d);
  wire::store_be64(m.data() + 8, 9);
  Sge sge{lb.a().addr(0), 64, lb.a().mr.lkey};
  post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, 1));
  auto a = lb.poll(lb.a(), 2);  // the SEND's completion and the FIN's receive
  ASSERT_EQ(a.size(), 2u);
  const Wc& fin = a[0].opcode == WC_RECV ? a[0] : a[1];
  EXPECT_EQ(fin.status, WC_SUCCESS);
  EXPECT_EQ(fin.wr_id, 4242u);
  EXPECT_EQ(fin.byte_len, kTmhSize);
  EXPECT_EQ(m[0x30000], TMH_FIN);
  EXPECT_EQ(wire::load_be32(m.data() + 0x30000 + 4), 0x600du);
  EXPECT_EQ(wire::load_be64(m.data() + 0x30000 + 8), 9u);
  auto b = lb.poll(lb.b(), 2);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].status, WC_SUCCESS);
  EXPECT_EQ(b[0].opcode, WC_TM_RECV);
  EXPECT_EQ(b[0].wr_id, 9u);
  EXPECT_EQ(b[0].wc_flags, uint32_t{WC_TM_MATCH});
  EXPECT_EQ(wc_tm_tag(b[0]), 9u);
  EXPECT_EQ(wc_tm_priv(b[0]), 0x600du);
  EXPECT_EQ(b[1].status, WC_SUCCESS);
  EXPECT_EQ(b[1].opcode, WC_TM_RECV);
  EXPECT_EQ(b[1].wr_id, 9u);
  EXPECT_EQ(b[1].wc_flags, uint32_t{WC_TM_DATA_VALID});
  EXPECT_EQ(b[1].byte_len, kLen);
  EXPECT_TRUE(same(0x20000, kData, kLen));
  lb.settle();
  Wc extra[4];
  EXPECT_EQ(0, lb.b().eng->poll_cq(lb.b().cq, 4, extra));  // the NIC's READ and FIN complete to nobody
}

// More rendezvous at once than the NIC's share of the SQ (kTmSqSlots: a READ and a FIN each): the excess is
// left to the app (WC_TM_RNDV_INCOMPLETE, headers in the tag's buffer); every one served gets its data and
// its FIN; nothing is lost and the QP stays usable.
TEST_F(TagMatching, RendezvousBeyondTheNicsShareIsLeftToTheApp) {
  constexpr uint32_t kN = kTags, kLen = 8192;
  for (uint32_t t = 0; t < kN; t++) {
    ASSERT_EQ(0, add(t, t, 0x40000 + uint64_t{t} * kLen, kLen, nullptr, 0));
    post_recv(lb.a(), qa, 0x30000 + uint64_t{t} * 64, 64, 900 + t);  // for the FINs
  }
  std::vector<uint8_t>& m = lb.a().mem;
  fill(m, 0x80000, size_t{kN} * kLen, 0x33);
  for (uint32_t t = 0; t < kN; t++) {  // all posted before any runs: they arrive together
    uint8_t* h = m.data() + uint64_t{t} * 64;
    std::memset(h, 0, 32);
    h[0] = TMH_RNDV;
    wire::store_be64(h + 8, t);
    wire::store_be64(h + kTmhSize, lb.a().addr(0x80000 + uint64_t{t} * kLen));
    wire::store_be32(h + kTmhSize + 8, lb.a().mr.rkey);
    wire::store_be32(h + kTmhSize + 12, kLen);
    Sge sge{lb.a().addr(uint64_t{t} * 64), 32, lb.a().mr.lkey};
    post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, t, 0));
  }
  lb.settle();
  Wc wc[64];
  std::vector<int> match(kN), incomplete(kN), data(kN);
  int n = 0, total = 0;
  while ((n = lb.b().eng->poll_cq(lb.b().cq, 64, wc)) > 0) {
    for (int i = 0; i < n; i++) {
      const Wc& w = wc[i];
      ASSERT_EQ(w.opcode, WC_TM_RECV);
      ASSERT_LT(w.wr_id, kN);
      total++;
      if (w.wc_flags == WC_TM_MATCH && w.status == WC_SUCCESS) match[w.wr_id]++;
      if (w.wc_flags == WC_TM_MATCH && w.status == WC_TM_RNDV_INCOMPLETE) incomplete[w.wr_id]++;
      if (w.wc_flags == WC_TM_DATA_VALID && w.status == WC_SUCCESS) data[w.wr_id]++;
    }
  }
  int served = 0, left = 0;
  for (uint32_t t = 0; t < kN; t++) {
    EXPECT_EQ(match[t] + incomplete[t], 1) << t;
    EXPECT_EQ(data[t], match[t]) << t;
    const uint64_t buf = 0x40000 + uint64_t{t} * kLen;
    if (match[t]) {
      EXPECT_TRUE(same(buf, 0x80000 + uint64_t{t} * kLen, kLen)) << t;
    } else {
      EXPECT_TRUE(same(buf, uint64_t{t} * 64, 32)) << t;
    }
    served += match[t];
    left += incomplete[t];
  }
  EXPECT_EQ(total, 2 * served + left);
  EXPECT_GE(served, 1);
  EXPECT_GE(left, 1);  // 16 at once need 32 slots: the NIC has 16
  // one FIN per served rendezvous
  auto fins = lb.poll(lb.a(), static_cast<size_t>(served) + 1, 100'000'000);
  EXPECT_EQ(fins.size(), static_cast<size_t>(served));
  for (const Wc& w : fins) EXPECT_EQ(w.opcode, WC_RECV);
  // the QP still works
  post_srq(70, 0x8000, 4096);
  send(TMH_EAGER, 0x777, 100);
  EXPECT_EQ(poll_b().wr_id, 70u);
}

TEST_F(TagMatching, RendezvousTooBigForTheTagIsLeftToTheApp) {
  ASSERT_EQ(0, add(9, 9, 0x20000, 1024));
  EXPECT_EQ(poll_b().opcode, WC_TM_ADD);
  std::vector<uint8_t>& m = lb.a().mem;
  std::memset(m.data(), 0, 48);
  m[0] = TMH_RNDV;
  wire::store_be64(m.data() + 8, 9);
  wire::store_be64(m.data() + kTmhSize, lb.a().addr(0x10000));
  wire::store_be32(m.data() + kTmhSize + 8, lb.a().mr.rkey);
  wire::store_be32(m.data() + kTmhSize + 12, 4096);  // more than the tag's 1024 bytes
  Sge sge{lb.a().addr(0), 48, lb.a().mr.lkey};
  post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, 1));
  ASSERT_EQ(lb.poll(lb.a(), 1).size(), 1u);
  Wc wc = poll_b();
  EXPECT_EQ(wc.status, WC_TM_RNDV_INCOMPLETE);
  EXPECT_EQ(wc.opcode, WC_TM_RECV);
  EXPECT_EQ(wc.wc_flags, uint32_t{WC_TM_MATCH});
  EXPECT_EQ(wc.byte_len, 48u);
  EXPECT_TRUE(same(0x20000, 0, 48));  // the headers, for the app to READ and FIN itself
}

}  // namespace
}  // namespace urxe::engine::test
