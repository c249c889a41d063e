// ibv_rereg_mr and ibv_resize_cq in the engine: what each flag changes, the errors, and safety against
// traffic and pollers running on other threads at the same time (these tests also run under ASan, where a
// byte written through a re-registered MR into its freed old buffer is a heap-use-after-free).
#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <thread>

#include "tests/engine/driver.h"
#include "tests/sim/loopback.h"

namespace urxe::engine::test {
namespace {

constexpr uint32_t kAllAccess =
    ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;

class Rereg : public ::testing::Test {
 protected:
  Loopback lb;
  uint32_t qa = 0, qb = 0;
  void SetUp() override { std::tie(qa, qb) = lb.connect(QPT_RC); }

  // One signaled RDMA WRITE of `len` bytes from A's buffer to B's (va, rkey); its completion status.
  WcStatus write(uint64_t va, uint32_t rkey, uint32_t len, uint64_t wr_id = 1) {
    Sge sge{lb.a().addr(0), len, lb.a().mr.lkey};
    SendWr wr = make_wr(WR_RDMA_WRITE, &sge, 1, wr_id);
    wr.rdma.remote_addr = va;
    wr.rdma.rkey = rkey;
    post(lb.a(), qa, wr);
    auto wc = lb.poll(lb.a(), 1);
    EXPECT_EQ(wc.size(), 1u);
    return wc.empty() ? WC_GENERAL_ERR : wc[0].status;
  }
  // Back to RTS on both sides after an error (what pyverbs' restate_qps does).
  void restate() {
    QpAttr at;
    at.qp_state = QPS_RESET;
    ASSERT_EQ(0, lb.a().eng->modify_qp(qa, at, QP_STATE));
    ASSERT_EQ(0, lb.b().eng->modify_qp(qb, at, QP_STATE));
    Wc wc[64];
    while (lb.a().eng->poll_cq(lb.a().cq, 64, wc) > 0) {
    }
    while (lb.b().eng->poll_cq(lb.b().cq, 64, wc) > 0) {
    }
    ConnOpts o;
    o.sq_psn = o.rq_psn = 0x5000;
    lb.bring_up(lb.a(), qa, QPT_RC, lb.b(), qb, o.sq_psn, o.rq_psn, o);
    lb.bring_up(lb.b(), qb, QPT_RC, lb.a(), qa, o.rq_psn, o.sq_psn, o);
  }
};

TEST_F(Rereg, AccessChangeTakesRemoteWriteAwayAndBack) {
  Node& b = lb.b();
  fill(lb.a().mem, 0, 256, 3);
  ASSERT_EQ(WC_SUCCESS, write(b.addr(0x100), b.mr.rkey, 256));
  EXPECT_EQ(0, std::memcmp(b.mem.data() + 0x100, lb.a().mem.data(), 256));
  ASSERT_EQ(0, b.eng->rereg_mr(b.mr.lkey, REREG_MR_CHANGE_ACCESS, 0, nullptr, 0, ACCESS_LOCAL_WRITE));
  fill(lb.a().mem, 0, 256, 4);
  EXPECT_EQ(WC_REM_ACCESS_ERR, write(b.addr(0x100), b.mr.rkey, 256));
  EXPECT_NE(0, std::memcmp(b.mem.data() + 0x100, lb.a().mem.data(), 256));  // nothing written
  restate();
  // The keys did not change: the same rkey works again once the right is back.
  ASSERT_EQ(0, b.eng->rereg_mr(b.mr.lkey, REREG_MR_CHANGE_ACCESS, 0, nullptr, 0, kAllAccess));
  EXPECT_EQ(WC_SUCCESS, write(b.addr(0x100), b.mr.rkey, 256));
  EXPECT_EQ(0, std::memcmp(b.mem.data() + 0x100, lb.a().mem.data(), 256));
}

TEST_F(Rereg, PdChangeFailsReceivesOfTheOldPdAndMovesThePdReference) {
  Node& b = lb.b();
  uint32_t pd2 = 0;
  ASSERT_EQ(0, b.eng->alloc_pd(pd2));
  ASSERT_EQ(0, b.eng->rereg_mr(b.mr.lkey, REREG_MR_CHANGE_PD, pd2, nullptr, 0, 0));
  EXPECT_EQ(EBUSY, b.eng->dealloc_pd(pd2));  // the MR now holds pd2
  // B's QP is in the old PD: a receive into the MR fails (pyverbs test_mr_rereg_pd expects REM_OP_ERR).
  post_recv(b, qb, 0, 64, 9);
  post_recv(lb.a(), qa, 0x1000, 64, 10);  // as pyverbs' traffic(): a receive waits on the sender's QP too
  Sge sge{lb.a().addr(0), 64, lb.a().mr.lkey};
  post(lb.a(), qa, make_wr(WR_SEND, &sge, 1));
  auto wa = lb.poll(lb.a(), 2);
  auto wb = lb.poll(b, 1);
  ASSERT_EQ(wa.size(), 2u);
  ASSERT_EQ(wb.size(), 1u);
  // The failed SEND reports first, then the flushed receive (what pyverbs' test_mr_rereg_pd polls for).
  EXPECT_EQ(wa[0].status, WC_REM_OP_ERR) << wc_status_str(wa[0].status);
  EXPECT_EQ(wa[0].opcode, WC_SEND);
  EXPECT_EQ(wa[1].status, WC_WR_FLUSH_ERR);
  EXPECT_EQ(wa[1].wr_id, 10u);
  EXPECT_EQ(wb[0].status, WC_LOC_PROT_ERR) << wc_status_str(wb[0].status);
  restate();
  ASSERT_EQ(0, b.eng->rereg_mr(b.mr.lkey, REREG_MR_CHANGE_PD, b.pd, nullptr, 0, 0));
  EXPECT_EQ(0, b.eng->dealloc_pd(pd2));
  EXPECT_EQ(WC_SUCCESS, write(b.addr(0), b.mr.rkey, 64));
}

TEST_F(Rereg, TranslationMovesTheMrToNewMemoryWithTheSameKeys) {
  Node& b = lb.b();
  std::vector<uint8_t> other(8192, 0xee);
  const std::vector<uint8_t> old_before = b.mem;
  ASSERT_EQ(0, b.eng->rereg_mr(b.mr.lkey, REREG_MR_CHANGE_TRANSLATION, 0, other.data(), other.size(), 0));
  fill(lb.a().mem, 0, 4096, 7);
  const uint64_t new_va = reinterpret_cast<uintptr_t>(other.data());  // iova = addr, as rdma-core passes
  ASSERT_EQ(WC_SUCCESS, write(new_va + 100, b.mr.rkey, 4096));
  EXPECT_EQ(0, std::memcmp(other.data() + 100, lb.a().mem.data(), 4096));
  EXPECT_EQ(other[99], 0xee);
  EXPECT_EQ(other[4196], 0xee);
  EXPECT_EQ(b.mem, old_before);
  // The old range is no longer reachable through the key.
  EXPECT_EQ(WC_REM_ACCESS_ERR, write(b.addr(0), b.mr.rkey, 64));
  EXPECT_EQ(b.mem, old_before);
  // Local use follows too: an SGE over the old range fails, one over the new range works.
  restate();
  uint64_t v = 0;
  std::memcpy(&v, other.data() + 100, 8);
  Sge sge{new_va + 100, 8, b.mr.lkey};
  SendWr wr = make_wr(WR_RDMA_WRITE, &sge, 1, 5);
  wr.rdma.remote_addr = lb.a().addr(0x8000);
  wr.rdma.rkey = lb.a().mr.rkey;
  post(b, qb, wr);
  auto wc = lb.poll(b, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WC_SUCCESS);
  uint64_t got = 0;
  std::memcpy(&got, lb.a().mem.data() + 0x8000, 8);
  EXPECT_EQ(got, v);
}

TEST_F(Rereg, ErrorsLeaveTheMrUnchanged) {
  Node& b = lb.b();
  const uint32_t k = b.mr.lkey;
  int dummy = 0;
  EXPECT_EQ(EINVAL, b.eng->rereg_mr(k ^ 0x1, REREG_MR_CHANGE_ACCESS, 0, nullptr, 0, ACCESS_LOCAL_WRITE));
  EXPECT_EQ(EINVAL, b.eng->rereg_mr(0, REREG_MR_CHANGE_ACCESS, 0, nullptr, 0, ACCESS_LOCAL_WRITE));
  EXPECT_EQ(EINVAL, b.eng->rereg_mr(k, 0, 0, nullptr, 0, 0));
  EXPECT_EQ(EINVAL, b.eng->rereg_mr(k, 1u << 3, 0, nullptr, 0, 0));
  EXPECT_EQ(EINVAL, b.eng->rereg_mr(k, REREG_MR_CHANGE_PD, 77, nullptr, 0, 0));
  EXPECT_EQ(EINVAL, b.eng->rereg_mr(k, REREG_MR_CHANGE_TRANSLATION, 0, nullptr, 64, 0));
  EXPECT_EQ(EINVAL, b.eng->rereg_mr(k, REREG_MR_CHANGE_TRANSLATION, 0, &dummy, 0, 0));
  EXPECT_EQ(EINVAL, b.eng->rereg_mr(k, REREG_MR_CHANGE_ACCESS, 0, nullptr, 0, ACCESS_REMOTE_WRITE));
  EXPECT_EQ(EINVAL, b.eng->rereg_mr(k, REREG_MR_CHANGE_ACCESS, 0, nullptr, 0, 1u << 15));
  EXPECT_EQ(EOPNOTSUPP, b.eng->rereg_mr(k, REREG_MR_CHANGE_ACCESS, 0, nullptr, 0, ACCESS_ON_DEMAND));
  // Valid PD and translation, invalid access in the same call: nothing of it is applied.
  uint32_t pd2 = 0;
  ASSERT_EQ(0, b.eng->alloc_pd(pd2));
  std::vector<uint8_t> other(64);
  EXPECT_EQ(EINVAL,
            b.eng->rereg_mr(k, REREG_MR_CHANGE_PD | REREG_MR_CHANGE_TRANSLATION | REREG_MR_CHANGE_ACCESS, pd2,
                            other.data(), other.size(), ACCESS_REMOTE_ATOMIC));
  EXPECT_EQ(0, b.eng->dealloc_pd(pd2));  // not referenced: the PD change was not applied
  fill(lb.a().mem, 0, 128, 9);
  EXPECT_EQ(WC_SUCCESS, write(b.addr(0x40), b.mr.rkey, 128));
  EXPECT_EQ(0, std::memcmp(b.mem.data() + 0x40, lb.a().mem.data(), 128));
  // A deregistered MR cannot be re-registered.
  ASSERT_EQ(0, b.eng->dereg_mr(k));
  EXPECT_EQ(EINVAL, b.eng->rereg_mr(k, REREG_MR_CHANGE_ACCESS, 0, nullptr, 0, ACCESS_LOCAL_WRITE));
}


// B's MR is zero-based (VA 0..64 KiB for any backing memory) and moves to a fresh buffer again and again
// while A keeps 64 KiB WRITEs (64 packets each) in flight, until 200 WRITEs completed and 500 reregs
// happened; each old buffer is freed right after the rereg returns. Every WRITE must succeed, and under ASan
// any packet still landing in a freed buffer is reported.
TEST(ReregThreads, TranslationUnderTrafficNeverTouchesTheOldBuffer) {
  Loopback lb;
  lb.link.keep_trace = false;
  auto [qa, qb] = lb.connect(QPT_RC);
  Node &a = lb.a(), &b = lb.b();
  constexpr uint32_t kLen = 64 * 1024;
  auto buf = std::make_unique<std::vector<uint8_t>>(kLen, 0);
  MrInfo zmr;
  ASSERT_EQ(0, b.eng->reg_mr(b.pd, buf->data(), kLen, 0, kAllAccess | ACCESS_ZERO_BASED, zmr));
  fill(a.mem, 0, kLen, 1);
  Driver drv(lb);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  uint64_t posted = 0, done = 0;
  int reregs = 0;
  while ((done < 200 || reregs < 500) && std::chrono::steady_clock::now() < give_up) {
    while (posted - done < 4) {  // keep a few WRITEs in flight
      Sge sge{a.addr(0), kLen, a.mr.lkey};
      SendWr wr = make_wr(WR_RDMA_WRITE, &sge, 1, posted);
      wr.rdma.rkey = zmr.rkey;
      wr.rdma.remote_addr = 0;
      const SendWr* bad = nullptr;
      ASSERT_EQ(0, a.eng->post_send(qa, &wr, &bad));
      posted++;
    }
    Wc wc[8];
    const int n = a.eng->poll_cq(a.cq, 8, wc);
    ASSERT_GE(n, 0);
    for (int i = 0; i < n; i++) {
      ASSERT_EQ(wc[i].status, WC_SUCCESS) << wc_status_str(wc[i].status);
      ASSERT_EQ(wc[i].wr_id, done);
      done++;
    }
    auto next = std::make_unique<std::vector<uint8_t>>(kLen, 0);
    ASSERT_EQ(0, b.eng->rereg_mr(zmr.lkey, REREG_MR_CHANGE_TRANSLATION, 0, next->data(), kLen, 0));
    buf = std::move(next);  // frees the old buffer: no packet may reach it any more
    reregs++;
    std::this_thread::yield();
  }
  EXPECT_GE(done, 200u);
  EXPECT_GE(reregs, 500);
  std::printf("rereg under traffic: %d reregs, %llu WRITEs of 64 KiB completed\n", reregs,
              static_cast<unsigned long long>(done));
  // Drain what is in flight; then every byte of the current buffer is A's pattern.
  while (done < posted && std::chrono::steady_clock::now() < give_up) {
    Wc wc[8];
    const int n = a.eng->poll_cq(a.cq, 8, wc);
    for (int i = 0; i < n; i++) {
      ASSERT_EQ(wc[i].status, WC_SUCCESS);
      done++;
    }
  }
  ASSERT_EQ(done, posted);
  Sge sge{a.addr(0), kLen, a.mr.lkey};
  SendWr wr = make_wr(WR_RDMA_WRITE, &sge, 1, posted);
  wr.rdma.rkey = zmr.rkey;
  const SendWr* bad = nullptr;
  ASSERT_EQ(0, a.eng->post_send(qa, &wr, &bad));
  Wc last{};
  int got = 0;
  while ((got = a.eng->poll_cq(a.cq, 1, &last)) == 0 && std::chrono::steady_clock::now() < give_up)
    std::this_thread::yield();
  ASSERT_EQ(got, 1) << "the last WRITE did not complete within 60 s";
  EXPECT_EQ(last.status, WC_SUCCESS) << wc_status_str(last.status);
  EXPECT_EQ(last.wr_id, posted);
  EXPECT_EQ(0, std::memcmp(buf->data(), a.mem.data(), kLen));
  (void)qb;
}

// ---- resize_cq ----

class Resize : public ::testing::Test {
 protected:
  Loopback lb;
  uint32_t qa = 0, qb = 0, small_cq = 0;
  void SetUp() override {
    qa = lb.create_qp(lb.a(), QPT_RC);
    ASSERT_EQ(0, lb.b().eng->create_cq(8, small_cq));
    QpInitAttr init;
    init.send_cq = lb.b().cq;
    init.recv_cq = small_cq;
    init.cap = {64, 256, 4, 4, 64};
    ASSERT_EQ(0, lb.b().eng->create_qp(lb.b().pd, init, qb));
    ConnOpts o;
    lb.bring_up(lb.a(), qa, QPT_RC, lb.b(), qb, o.sq_psn, o.rq_psn, o);
    lb.bring_up(lb.b(), qb, QPT_RC, lb.a(), qa, o.rq_psn, o.sq_psn, o);
  }
  // n SENDs A → B with wr_ids first.., each received into its own posted receive.
  void sends(uint32_t first, uint32_t n) {
    for (uint32_t i = first; i < first + n; i++) post_recv(lb.b(), qb, 64 * (i % 256), 64, i);
    for (uint32_t i = first; i < first + n; i += 32) {  // A's send queue holds 64
      const uint32_t k = std::min(32u, first + n - i);
      for (uint32_t j = i; j < i + k; j++) {
        Sge sge{lb.a().addr(0), 16, lb.a().mr.lkey};
        post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, j));
      }
      ASSERT_EQ(lb.poll(lb.a(), k).size(), k);
    }
    lb.settle(1'000'000);
  }
  std::vector<Wc> drain() {
    std::vector<Wc> out;
    Wc wc[16];
    int k;
    while ((k = lb.b().eng->poll_cq(small_cq, 16, wc)) > 0) out.insert(out.end(), wc, wc + k);
    return out;
  }
};

TEST_F(Resize, KeepsWaitingCompletionsInOrderAndRefusesToDropAny) {
  Engine& e = *lb.b().eng;
  sends(0, 6);  // 6 completions waiting in an 8-entry CQ
  uint32_t actual = 0;
  EXPECT_EQ(EINVAL, e.resize_cq(small_cq, 5, &actual));  // fewer than waiting
  EXPECT_EQ(0, e.resize_cq(small_cq, 6, &actual));       // exactly what waits: allowed
  EXPECT_EQ(actual, 6u);
  EXPECT_EQ(0, e.resize_cq(small_cq, 100, &actual));
  EXPECT_EQ(actual, 100u);
  sends(6, 90);  // would overflow the old size
  auto wc = drain();
  ASSERT_EQ(wc.size(), 96u);
  for (uint32_t i = 0; i < wc.size(); i++) {
    EXPECT_EQ(wc[i].wr_id, i);
    EXPECT_EQ(wc[i].status, WC_SUCCESS);
    EXPECT_EQ(wc[i].opcode, WC_RECV);
  }
  EXPECT_FALSE(lb.b().events.has(EVENT_CQ_ERR));
  EXPECT_EQ(lb.b().eng->counter(Counter::cq_overflow), 0u);
}

TEST_F(Resize, NewSizeIsTheCapacity) {
  Engine& e = *lb.b().eng;
  ASSERT_EQ(0, e.resize_cq(small_cq, 3));
  sends(0, 3);
  EXPECT_FALSE(lb.b().events.has(EVENT_CQ_ERR));
  sends(3, 1);  // the 4th completion does not fit: the CQ overflows (EVENT_CQ_ERR), as on hardware
  EXPECT_TRUE(lb.b().events.has(EVENT_CQ_ERR));
  EXPECT_EQ(drain().size(), 3u);
}

TEST_F(Resize, Errors) {
  Engine& e = *lb.b().eng;
  EXPECT_EQ(EINVAL, e.resize_cq(small_cq, 0));
  EXPECT_EQ(EINVAL, e.resize_cq(small_cq, e.device_attr().max_cqe + 1));
  EXPECT_EQ(EINVAL, e.resize_cq(999, 8));
  EXPECT_EQ(0, e.resize_cq(small_cq, e.device_attr().max_cqe));
}

// Three threads at once: the driver produces completions (progress), the test thread polls them, a third
// thread resizes the CQ between 8 and 64 entries as fast as it can. A allows at most 8 SENDs beyond what B
// polled, so the CQ can never overflow; every completion must arrive exactly once, in order.
TEST(ResizeThreads, ConcurrentPollerAndResizer) {
  Loopback lb;
  lb.link.keep_trace = false;
  Node &a = lb.a(), &b = lb.b();
  uint32_t cq = 0, qb = 0;
  ASSERT_EQ(0, b.eng->create_cq(16, cq));
  const uint32_t qa = lb.create_qp(a, QPT_RC);
  QpInitAttr init;
  init.send_cq = b.cq;
  init.recv_cq = cq;
  init.cap = {64, 64, 1, 1, 0};
  ASSERT_EQ(0, b.eng->create_qp(b.pd, init, qb));
  ConnOpts o;
  lb.bring_up(a, qa, QPT_RC, b, qb, o.sq_psn, o.rq_psn, o);
  lb.bring_up(b, qb, QPT_RC, a, qa, o.rq_psn, o.sq_psn, o);
  constexpr uint64_t kMsgs = 20000;
  constexpr uint64_t kWindow = 8;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> resizes{0}, refused{0};
  Driver drv(lb);
  std::thread resizer([&] {
    std::mt19937 rng(12345);
    while (!stop.load()) {
      const int rc = b.eng->resize_cq(cq, static_cast<uint32_t>(kWindow + rng() % 57));
      if (rc == 0)
        resizes++;
      else if (rc == EINVAL)
        refused++;  // more waiting than the new size: allowed answer, nothing changed
      else
        ADD_FAILURE() << "resize_cq " << rc;
      if (resizes % 16 == 0) std::this_thread::yield();  // leave the engine lock to progress() now and then
    }
  });
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  uint64_t posted = 0, polled = 0;
  while (polled < kMsgs && std::chrono::steady_clock::now() < give_up) {
    while (posted < kMsgs && posted < polled + kWindow) {
      Sge rs{b.addr(64 * (posted % 64)), 64, b.mr.lkey};
      RecvWr rw;
      rw.wr_id = posted;
      rw.sg_list = &rs;
      rw.num_sge = 1;
      const RecvWr* rbad = nullptr;
      ASSERT_EQ(0, b.eng->post_recv(qb, &rw, &rbad));
      Sge sge{a.addr(0), 8, a.mr.lkey};
      SendWr wr = make_wr(WR_SEND, &sge, 1, posted, (posted % 16 == 15) ? uint32_t{SEND_SIGNALED} : 0u);
      const SendWr* bad = nullptr;
      ASSERT_EQ(0, a.eng->post_send(qa, &wr, &bad));
      posted++;
    }
    Wc wc[4];
    const int n = b.eng->poll_cq(cq, 4, wc);
    ASSERT_GE(n, 0);
    for (int i = 0; i < n; i++) {
      ASSERT_EQ(wc[i].status, WC_SUCCESS) << wc_status_str(wc[i].status);
      ASSERT_EQ(wc[i].wr_id, polled) << "completion lost, repeated or reordered";
      polled++;
    }
    while (a.eng->poll_cq(a.cq, 4, wc) > 0) {
    }
  }
  stop.store(true);
  resizer.join();
  EXPECT_EQ(polled, kMsgs);
  EXPECT_EQ(b.eng->counter(Counter::cq_overflow), 0u);
  EXPECT_GT(resizes.load(), 0u);
  std::printf("resize under traffic: %llu completions, %llu resizes, %llu refused (EINVAL)\n",
              static_cast<unsigned long long>(polled), static_cast<unsigned long long>(resizes.load()),
              static_cast<unsigned long long>(refused.load()));
}

// modify_qp to RESET drops the QP's completions still waiting in the CQ (as mlx4/mlx5 do; pyverbs'
// test_mr_rereg_pd/addr recycle their QPs through RESET and must not poll the old flushed receives), and
// keeps every other QP's, in order.
TEST(CqClean, ResetDropsOnlyThatQpsWaitingCompletions) {
  Loopback lb;
  Node &a = lb.a(), &b = lb.b();
  auto [qa, qb] = lb.connect(QPT_RC);
  auto [qa2, qb2] = lb.connect(QPT_RC);
  for (uint64_t i = 0; i < 6; i++) {
    Sge sge{a.addr(64 * i), 64, a.mr.lkey};
    SendWr wr = make_wr(WR_RDMA_WRITE, &sge, 1, i);
    wr.rdma.remote_addr = b.addr(64 * i);
    wr.rdma.rkey = b.mr.rkey;
    post(a, i % 2 ? qa2 : qa, wr);
  }
  lb.settle();
  QpAttr at;
  at.qp_state = QPS_RESET;
  ASSERT_EQ(0, a.eng->modify_qp(qa, at, QP_STATE));
  Wc wc[16];
  const int n = a.eng->poll_cq(a.cq, 16, wc);
  ASSERT_EQ(n, 3);
  for (int i = 0; i < n; i++) {
    EXPECT_EQ(wc[i].wr_id, 2u * i + 1);
    EXPECT_EQ(wc[i].qp_num, qa2);
  }
  (void)qb;
  (void)qb2;
}

}  // namespace
}  // namespace urxe::engine::test
