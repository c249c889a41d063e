// ibv_modify_srq(IBV_SRQ_MAX_WR) in the engine: posted WQEs kept in order with their SGEs, shrinking while
// they fit, the checks (an invalid attribute modifies nothing), and resizing while app threads post and the
// engine consumes on other threads.
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "tests/engine/driver.h"
#include "tests/sim/loopback.h"

namespace urxe::engine::test {
namespace {

// Two RC QPs on B share one SRQ; A sends to both.
class SrqResize : public ::testing::Test {
 protected:
  Loopback lb;
  uint32_t srq = 0, a1 = 0, a2 = 0, b1 = 0, b2 = 0;
  void SetUp() override {
    SrqAttr sa{8, 2, 0};
    ASSERT_EQ(0, lb.b().eng->create_srq(lb.b().pd, sa, srq));
    a1 = lb.create_qp(lb.a(), QPT_RC);
    a2 = lb.create_qp(lb.a(), QPT_RC);
    b1 = lb.create_qp(lb.b(), QPT_RC, srq);
    b2 = lb.create_qp(lb.b(), QPT_RC, srq);
    ConnOpts o;
    lb.bring_up(lb.a(), a1, QPT_RC, lb.b(), b1, 1, 1, o);
    lb.bring_up(lb.b(), b1, QPT_RC, lb.a(), a1, 1, 1, o);
    lb.bring_up(lb.a(), a2, QPT_RC, lb.b(), b2, 1, 1, o);
    lb.bring_up(lb.b(), b2, QPT_RC, lb.a(), a2, 1, 1, o);
  }
  // A receive of 64 bytes into B's buffer slot `wr_id` as two SGEs of 32 (so the SGE pool's copy is seen).
  int post_srq(uint64_t wr_id) {
    const uint64_t off = 64 * (wr_id % 1024);
    Sge s[2] = {{lb.b().addr(off), 32, lb.b().mr.lkey}, {lb.b().addr(off + 32), 32, lb.b().mr.lkey}};
    RecvWr rw;
    rw.wr_id = wr_id;
    rw.sg_list = s;
    rw.num_sge = 2;
    const RecvWr* bad = nullptr;
    return lb.b().eng->post_srq_recv(srq, &rw, &bad);
  }
  // n SENDs of 64 bytes, alternating QPs, each carrying its sequence number from `first`; B's completions.
  std::vector<Wc> sends(uint64_t first, uint32_t n) {
    for (uint64_t i = first; i < first + n; i++) {
      fill(lb.a().mem, 64 * (i % 1024), 64, static_cast<uint8_t>(i));
      Sge sge{lb.a().addr(64 * (i % 1024)), 64, lb.a().mr.lkey};
      post(lb.a(), (i % 2) ? a2 : a1, make_wr(WR_SEND, &sge, 1, i));
      EXPECT_EQ(lb.poll(lb.a(), 1).size(), 1u);  // one at a time: SRQ WQEs are then taken in send order
    }
    return lb.poll(lb.b(), n);
  }
  SrqAttr query() {
    SrqAttr q;
    EXPECT_EQ(0, lb.b().eng->query_srq(srq, q));
    return q;
  }
  bool landed(uint64_t wr_id, uint64_t seq) {
    std::vector<uint8_t> want(64);
    fill(want, 0, 64, static_cast<uint8_t>(seq));
    return std::memcmp(lb.b().mem.data() + 64 * (wr_id % 1024), want.data(), 64) == 0;
  }
};

TEST_F(SrqResize, KeepsPostedWqesInOrderAndShrinksOnlyWhileTheyFit) {
  Engine& e = *lb.b().eng;
  for (uint64_t i = 0; i < 6; i++) ASSERT_EQ(0, post_srq(i));
  SrqAttr sa;
  sa.max_wr = 5;
  EXPECT_EQ(EINVAL, e.modify_srq(srq, sa, SRQ_MAX_WR));  // 6 posted: they would not fit
  EXPECT_EQ(query().max_wr, 8u);
  sa.max_wr = 6;
  ASSERT_EQ(0, e.modify_srq(srq, sa, SRQ_MAX_WR));  // exactly what is posted: allowed
  EXPECT_EQ(query().max_wr, 6u);
  EXPECT_EQ(query().max_sge, 2u);
  EXPECT_EQ(ENOMEM, post_srq(6));  // the new size is the capacity
  sa.max_wr = 100;
  ASSERT_EQ(0, e.modify_srq(srq, sa, SRQ_MAX_WR));
  EXPECT_EQ(query().max_wr, 100u);
  for (uint64_t i = 6; i < 100; i++) ASSERT_EQ(0, post_srq(i));
  EXPECT_EQ(ENOMEM, post_srq(100));
  auto wc = sends(0, 100);
  ASSERT_EQ(wc.size(), 100u);
  for (uint64_t i = 0; i < 100; i++) {
    ASSERT_EQ(wc[i].status, WC_SUCCESS) << i;
    EXPECT_EQ(wc[i].wr_id, i);  // WQEs still taken in posting order across the resizes
    EXPECT_EQ(wc[i].byte_len, 64u);
    EXPECT_TRUE(landed(i, i)) << "receive " << i << " did not land in its own two SGEs";
  }
}

TEST_F(SrqResize, InvalidAttributesModifyNothing) {
  Engine& e = *lb.b().eng;
  const uint32_t max = e.device_attr().max_srq_wr;
  for (uint64_t i = 0; i < 6; i++) ASSERT_EQ(0, post_srq(i));
  SrqAttr sa;
  sa.srq_limit = 4;
  ASSERT_EQ(0, e.modify_srq(srq, sa, SRQ_LIMIT));  // armed: 6 posted, not below 4
  EXPECT_EQ(query().srq_limit, 4u);
  struct Case {
    const char* what;
    uint32_t max_wr, srq_limit, mask;
  };
  const Case cases[] = {
      {"max_wr 0", 0, 0, SRQ_MAX_WR},
      {"max_wr beyond max_srq_wr", max + 1, 0, SRQ_MAX_WR},
      {"max_wr below the armed limit", 3, 0, SRQ_MAX_WR},
      {"new limit above the new max_wr", 16, 17, SRQ_MAX_WR | SRQ_LIMIT},
      {"max_wr 0 with a valid limit", 0, 2, SRQ_MAX_WR | SRQ_LIMIT},
      {"limit above the current max_wr", 0, 9, SRQ_LIMIT},
      {"unknown mask bit", 16, 0, SRQ_MAX_WR | (1u << 2)},
  };
  for (const Case& c : cases) {
    SrqAttr a{c.max_wr, 0, c.srq_limit};
    EXPECT_EQ(EINVAL, e.modify_srq(srq, a, c.mask)) << c.what;
    const SrqAttr q = query();
    EXPECT_EQ(q.max_wr, 8u) << c.what;
    EXPECT_EQ(q.srq_limit, 4u) << c.what;
  }
  // Both at once: the new limit replaces the armed one, so it is checked against the new size.
  SrqAttr both{16, 0, 12};
  ASSERT_EQ(0, e.modify_srq(srq, both, SRQ_MAX_WR | SRQ_LIMIT));  // 12 > the old size 8: allowed
  EXPECT_EQ(query().max_wr, 16u);
  EXPECT_TRUE(lb.b().events.has(EVENT_SRQ_LIMIT_REACHED));  // 6 posted < 12: fires at once, disarms
  EXPECT_EQ(query().srq_limit, 0u);
  both = {max, 0, 5};
  ASSERT_EQ(0, e.modify_srq(srq, both, SRQ_MAX_WR | SRQ_LIMIT));
  EXPECT_EQ(query().max_wr, max);
  EXPECT_EQ(query().srq_limit, 5u);
  EXPECT_EQ(EINVAL, e.modify_srq(999, both, SRQ_MAX_WR));
  // The armed limit still works after the resizes: 6 posted, limit 5; the 2nd receive leaves 4 < 5.
  lb.b().events.async.clear();
  ASSERT_EQ(sends(0, 1).size(), 1u);
  EXPECT_FALSE(lb.b().events.has(EVENT_SRQ_LIMIT_REACHED));
  ASSERT_EQ(sends(1, 1).size(), 1u);
  EXPECT_TRUE(lb.b().events.has(EVENT_SRQ_LIMIT_REACHED));
  EXPECT_EQ(query().srq_limit, 0u);
}

struct Threads {
  std::atomic<bool>& stop;
  std::vector<std::thread> t;
  explicit Threads(std::atomic<bool>& s) : stop(s) {}
  void join() {
    stop.store(true);
    for (auto& x : t)
      if (x.joinable()) x.join();
  }
  ~Threads() { join(); }
};

// Four threads at once: the driver runs both engines (B's responders take SRQ WQEs), two poster threads keep
// their 16 receive buffers each posted to the SRQ, a resizer resizes it between 4 and 48 WQEs as fast as it
// can, and the test thread sends numbered 64-byte messages on two QPs and checks every receive: its buffer
// (named by wr_id, zeroed before posting) holds exactly one message, each message arrives exactly once, in
// order per QP. A WQE or SGE lost, repeated or mixed up by a resize fails one of these checks.
TEST(SrqResizeThreads, ConcurrentPostersConsumersAndResizer) {
  Loopback lb;
  lb.link.keep_trace = false;
  Node &a = lb.a(), &b = lb.b();
  uint32_t srq = 0;
  SrqAttr sa{16, 1, 0};
  ASSERT_EQ(0, b.eng->create_srq(b.pd, sa, srq));
  const uint32_t qa[2] = {lb.create_qp(a, QPT_RC), lb.create_qp(a, QPT_RC)};
  const uint32_t qb[2] = {lb.create_qp(b, QPT_RC, srq), lb.create_qp(b, QPT_RC, srq)};
  ConnOpts o;
  for (int i = 0; i < 2; i++) {
    lb.bring_up(a, qa[i], QPT_RC, b, qb[i], 1, 1, o);
    lb.bring_up(b, qb[i], QPT_RC, a, qa[i], 1, 1, o);
  }
  constexpr uint64_t kMsgs = 10000, kWindow = 16;
  constexpr uint32_t kBufs = 32, kLen = 64;
  std::array<std::atomic<bool>, kBufs> posted_buf{};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> resizes{0}, refused{0};
  Driver drv(lb);
  auto poster = [&](uint32_t first) {
    while (!stop.load()) {
      for (uint32_t k = first; k < first + kBufs / 2; k++) {
        if (posted_buf[k].load(std::memory_order_acquire)) continue;
        posted_buf[k].store(true, std::memory_order_relaxed);  // before posting: it may complete at once
        std::memset(b.mem.data() + kLen * k, 0, kLen);
        Sge s{b.addr(kLen * k), kLen, b.mr.lkey};
        RecvWr rw;
        rw.wr_id = k;
        rw.sg_list = &s;
        rw.num_sge = 1;
        const RecvWr* bad = nullptr;
        const int rc = b.eng->post_srq_recv(srq, &rw, &bad);
        if (rc) posted_buf[k].store(false, std::memory_order_relaxed);
        if (rc == ENOMEM) break;  // the SRQ is full at its current size: try again later
        if (rc) ADD_FAILURE() << "post_srq_recv " << rc;
      }
      std::this_thread::yield();
    }
  };
  Threads threads(stop);  // stopped and joined on every way out of the test
  threads.t.emplace_back(poster, 0);
  threads.t.emplace_back(poster, kBufs / 2);
  threads.t.emplace_back([&] {
    std::mt19937 rng(4321);
    while (!stop.load()) {
      SrqAttr r;
      r.max_wr = 4 + static_cast<uint32_t>(rng() % 45);
      const int rc = b.eng->modify_srq(srq, r, SRQ_MAX_WR);
      if (rc == 0)
        resizes++;
      else if (rc == EINVAL)
        refused++;  // more posted than the new size: allowed answer, nothing changed
      else
        ADD_FAILURE() << "modify_srq " << rc;
      std::this_thread::yield();
    }
  });
  std::vector<bool> seen(kMsgs, false);
  uint64_t last_seq[2] = {UINT64_MAX, UINT64_MAX};
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  uint64_t sent = 0, received = 0;
  bool ok = true;
  while (ok && received < kMsgs && std::chrono::steady_clock::now() < give_up) {
    while (sent < kMsgs && sent < received + kWindow) {
      const uint64_t off = kLen * (sent % 256);
      fill(a.mem, off, kLen, static_cast<uint8_t>(sent));
      std::memcpy(a.mem.data() + off, &sent, sizeof sent);
      Sge sge{a.addr(off), kLen, a.mr.lkey};
      SendWr wr = make_wr(WR_SEND, &sge, 1, sent);
      const SendWr* bad = nullptr;
      const int rc = a.eng->post_send(qa[sent % 2], &wr, &bad);
      EXPECT_EQ(rc, 0);
      ok = ok && rc == 0;
      sent++;
    }
    Wc wc[8];
    const int n = b.eng->poll_cq(b.cq, 8, wc);
    for (int i = 0; i < n && ok; i++) {
      ok = wc[i].status == WC_SUCCESS && wc[i].byte_len == kLen && wc[i].wr_id < kBufs &&
           posted_buf[wc[i].wr_id].load(std::memory_order_acquire);
      if (!ok) {
        ADD_FAILURE() << "receive " << received << ": " << wc_status_str(wc[i].status) << " wr_id "
                      << wc[i].wr_id;
        break;
      }
      const uint8_t* buf = b.mem.data() + kLen * wc[i].wr_id;
      uint64_t seq = 0;
      std::memcpy(&seq, buf, sizeof seq);
      std::vector<uint8_t> want(kLen);
      fill(want, 0, kLen, static_cast<uint8_t>(seq));
      std::memcpy(want.data(), &seq, sizeof seq);
      const int side = wc[i].qp_num == qb[0] ? 0 : 1;
      ok = seq < kMsgs && !seen[seq] && std::memcmp(buf, want.data(), kLen) == 0 &&
           seq % 2 == uint64_t(side) && (last_seq[side] == UINT64_MAX || seq > last_seq[side]);
      if (!ok) {
        ADD_FAILURE() << "buffer " << wc[i].wr_id << " holds seq " << seq << " (lost, repeated or mixed up)";
        break;
      }
      seen[seq] = true;
      last_seq[side] = seq;
      posted_buf[wc[i].wr_id].store(false, std::memory_order_release);  // the poster may reuse it now
      received++;
    }
    while (a.eng->poll_cq(a.cq, 8, wc) > 0) {
    }
  }
  threads.join();
  EXPECT_EQ(received, kMsgs);
  EXPECT_GT(resizes.load(), 0u);
  std::printf("SRQ resize under traffic: %llu receives, %llu resizes, %llu refused (EINVAL)\n",
              static_cast<unsigned long long>(received), static_cast<unsigned long long>(resizes.load()),
              static_cast<unsigned long long>(refused.load()));
}

}  // namespace
}  // namespace urxe::engine::test
