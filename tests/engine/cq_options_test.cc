// CQ options (engine::CqOptions): completion timestamps.
#include "tests/sim/loopback.h"

namespace urxe::engine::test {
namespace {

struct Stamped {
  Wc wc;
  uint64_t ts;
};

// Polls `count` completions with their timestamps from cq, running the engines until they come.
std::vector<Stamped> poll_ts(Loopback& lb, Node& n, uint32_t cq, size_t count) {
  std::vector<Stamped> out;
  lb.run([&] {
    Wc wc[8];
    uint64_t ts[8];
    int k;
    while (out.size() < count && (k = n.eng->poll_cq_ts(cq, 8, wc, ts)) > 0)
      for (int i = 0; i < k; i++) out.push_back({wc[i], ts[i]});
    return out.size() >= count;
  });
  return out;
}

class CqTimestamps : public ::testing::Test {
 protected:
  Loopback lb;
  uint32_t qa = 0, qb = 0;
  void SetUp() override {
    // Both sides' QPs complete into CQs that keep timestamps.
    for (Node* n : {&lb.a(), &lb.b()})
      ASSERT_EQ(0, n->eng->create_cq(64, n->cq, nullptr, {.timestamps = true}));
    std::tie(qa, qb) = lb.connect(QPT_RC);
  }
};

// Each completion carries the time it was written: after its WR was posted (a receive: one link latency
// after; a send: after its ACK came back), before it was polled, and never decreasing in CQ order.
TEST_F(CqTimestamps, TimeOfCompletionNotOfPoll) {
  uint64_t last_a = 0, last_b = 0;
  for (uint32_t i = 0; i < 4; i++) {
    lb.link.clock.t += 10'000;
    const uint64_t posted = lb.link.clock.t;
    post_recv(lb.b(), qb, 0x1000, 256, 100 + i);
    Sge sge{lb.a().addr(0), 64, lb.a().mr.lkey};
    post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, i));
    Sge wsge{lb.a().addr(0), 128, lb.a().mr.lkey};
    post(lb.a(), qa, make_rdma_wr(WR_RDMA_WRITE, &wsge, lb.b().addr(0x2000), lb.b().mr.rkey, 50 + i));
    lb.settle();  // both completions written; then time passes before the app polls
    lb.link.clock.t += 50'000;
    const uint64_t polled = lb.link.clock.t;
    auto a = poll_ts(lb, lb.a(), lb.a().cq, 2);
    auto b = poll_ts(lb, lb.b(), lb.b().cq, 1);
    ASSERT_EQ(a.size(), 2u);
    ASSERT_EQ(b.size(), 1u);
    EXPECT_EQ(a[0].wc.opcode, WC_SEND);
    EXPECT_EQ(a[1].wc.opcode, WC_RDMA_WRITE);
    EXPECT_EQ(b[0].wc.opcode, WC_RECV);
    EXPECT_GE(b[0].ts, posted + lb.link.latency_ns);
    EXPECT_GE(a[0].ts, posted + 2 * lb.link.latency_ns);  // the SEND's ACK came back
    for (const Stamped& s : {a[0], a[1], b[0]}) {
      EXPECT_EQ(s.wc.status, WC_SUCCESS);
      EXPECT_LT(s.ts, polled);
    }
    EXPECT_LE(a[0].ts, a[1].ts);
    EXPECT_GE(a[0].ts, last_a);
    EXPECT_GE(b[0].ts, last_b);
    last_a = a[1].ts;
    last_b = b[0].ts;
  }
}

// Timestamps follow their completions through resize_cq and the RESET clean of another QP's completions.
TEST_F(CqTimestamps, KeptThroughResizeAndClean) {
  const uint32_t other = lb.create_qp(lb.b(), QPT_RC);  // completes into B's CQ too
  QpAttr at;
  at.qp_state = QPS_INIT;
  at.port_num = 1;
  ASSERT_EQ(0, lb.b().eng->modify_qp(other, at, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS));
  uint64_t posted[3];
  for (uint32_t i = 0; i < 3; i++) {
    lb.link.clock.t += 10'000;
    posted[i] = lb.link.clock.t;
    post_recv(lb.b(), qb, 0x1000 + 256 * i, 256, i);
    Sge sge{lb.a().addr(0), 32, lb.a().mr.lkey};
    post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, i));
    lb.settle();
    if (i == 0) {  // a flushed receive of `other` between them, cleaned away by its RESET below
      post_recv(lb.b(), other, 0x8000, 64, 99);
      at.qp_state = QPS_ERR;
      ASSERT_EQ(0, lb.b().eng->modify_qp(other, at, QP_STATE));
      lb.settle();
    }
  }
  at.qp_state = QPS_RESET;
  ASSERT_EQ(0, lb.b().eng->modify_qp(other, at, QP_STATE));
  uint32_t actual = 0;
  ASSERT_EQ(0, lb.b().eng->resize_cq(lb.b().cq, 200, &actual));
  auto b = poll_ts(lb, lb.b(), lb.b().cq, 3);
  ASSERT_EQ(b.size(), 3u);
  for (uint32_t i = 0; i < 3; i++) {
    EXPECT_EQ(b[i].wc.wr_id, i);
    EXPECT_GE(b[i].ts, posted[i] + lb.link.latency_ns);
    if (i < 2) {
      EXPECT_LT(b[i].ts, posted[i + 1]);
    }
  }
  Wc wc;
  uint64_t ts;
  EXPECT_EQ(0, lb.b().eng->poll_cq_ts(lb.b().cq, 1, &wc, &ts));  // the flushed one went with its QP
}

// A CQ created without the option keeps no time: poll_cq_ts refuses it, poll_cq works as ever.
TEST(CqTimestampsOff, OnlyWhenAsked) {
  Loopback lb;
  auto [qa, qb] = lb.connect(QPT_RC);
  post_recv(lb.b(), qb, 0, 64, 7);
  Sge sge{lb.a().addr(0), 16, lb.a().mr.lkey};
  post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, 8));
  lb.settle();
  Wc wc;
  uint64_t ts = 0;
  EXPECT_EQ(-EINVAL, lb.b().eng->poll_cq_ts(lb.b().cq, 1, &wc, &ts));
  EXPECT_EQ(1, lb.b().eng->poll_cq(lb.b().cq, 1, &wc));
  EXPECT_EQ(wc.wr_id, 7u);
}

}  // namespace
}  // namespace urxe::engine::test
