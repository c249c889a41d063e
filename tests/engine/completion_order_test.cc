// Completions appear in the order the frames that finished them arrived, as on hardware. An application
// that waits on one completion channel for its send and its receive CQ (perftest -e) takes one event per
// completion and polls the CQ it expects: a reply's receive completion overtaking the send completion of
// the ACK that came before it leaves a completion unpolled, and a second one overflows the CQ.
#include "tests/sim/loopback.h"

namespace urxe::engine::test {
namespace {

// B receives, in one burst, the ACK of its SEND and then A's SEND that answers it.
TEST(CompletionOrder, AckThenSendInOneBurstCompleteInWireOrder) {
  Loopback lb;
  const auto [qa, qb] = lb.connect(QPT_RC);
  Node& a = lb.a();
  Node& b = lb.b();
  post_recv(a, qa, 0, 64, 100);
  post_recv(b, qb, 0, 64, 200);
  const Sge sb{b.addr(4096), 8, b.mr.lkey};
  post(b, qb, make_wr(WR_SEND, &sb, 1, 1));
  ASSERT_TRUE(b.eng->progress());  // B's SEND leaves
  lb.link.clock.t += lb.link.latency_ns;
  // A's answer is posted before A's engine runs: its round takes B's SEND (an ACK goes out at once) and
  // sends A's SEND after it.
  const Sge sa{a.addr(4096), 8, a.mr.lkey};
  post(a, qa, make_wr(WR_SEND, &sa, 1, 2));
  ASSERT_TRUE(a.eng->progress());
  lb.link.clock.t += lb.link.latency_ns;
  ASSERT_EQ(2u, b.port->inbox.size());
  const size_t events_before = b.events.comp.size();
  ASSERT_EQ(0, b.eng->req_notify_cq(b.cq, false));
  ASSERT_TRUE(b.eng->progress());  // one round, one burst: ACK, SEND
  Wc wc[4];
  ASSERT_EQ(2, b.eng->poll_cq(b.cq, 4, wc));
  EXPECT_EQ(WC_SEND, wc[0].opcode);
  EXPECT_EQ(1u, wc[0].wr_id);
  EXPECT_EQ(WC_RECV, wc[1].opcode);
  EXPECT_EQ(200u, wc[1].wr_id);
  // the armed CQ reported the first of them (the send completion) once
  EXPECT_EQ(events_before + 1, b.events.comp.size());
  EXPECT_EQ(0u, lb.idle_spins);
}

}  // namespace
}  // namespace urxe::engine::test
