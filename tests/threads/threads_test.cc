// The provider's threading model, on the engine alone: each engine has a "progress thread" running
// progress() in a loop while the "application" thread posts and polls its CQ, calling try_progress() before
// every poll as the provider's poll_cq does. Both may run the engine at any moment; what users rely on is
// that every message still arrives exactly once, in order, with its data, and every WR completes once.
// Real threads and a real clock (the ports are tests/sim's SimNet, locked), so it runs under ASan/UBSan
// (label sim) and is bounded in time.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "tests/sim/sim_net.h"
#include "wire/headers.h"

namespace urxe::engine {
namespace {

struct SteadyClock : Clock {
  uint64_t now_ns() const override {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
  }
};

struct Side {
  sim::SimPort* port = nullptr;
  std::unique_ptr<Engine> eng;
  uint32_t pd = 0, cq = 0, qpn = 0;
  std::vector<uint8_t> mem;
  MrInfo mr;
  wire::Gid gid{};
  wire::MacAddr mac{};
};

TEST(Threads, AppPollsWhileProgressThreadRuns) {
  constexpr uint32_t kMsg = 3000, kLen = 3000;  // 3 packets per message at path MTU 1024
  constexpr uint32_t kSlots = 32;               // receive buffers in flight
  // The two ports are tests/sim's SimNet with its lock on (both threads of an engine use its port) and a
  // link of no latency: the net's own clock never moves, so every frame is due at once and a receiver's
  // rx_burst delivers it (PortConfig::deliver_on_rx). The engines keep the real clock for their timers.
  sim::SimNet net;
  net.set_thread_safe(true);
  SteadyClock clock;
  Side s[2];
  for (int i = 0; i < 2; i++) {
    s[i].gid = wire::gid_from_ipv4({10, 1, 0, static_cast<uint8_t>(1 + i)});
    s[i].mac = {0x02, 0, 0, 0, 1, static_cast<uint8_t>(1 + i)};
    sim::PortConfig pc;
    pc.mac = s[i].mac;
    pc.mtu = 1500;
    pc.gids = {s[i].gid};
    pc.grow = true;
    pc.deliver_on_rx = true;
    s[i].port = &net.add_port(pc);
    EngineConfig cfg;
    cfg.qpn_base = 0x11 + static_cast<uint32_t>(i) * 0x100;
    s[i].eng = std::make_unique<Engine>(*s[i].port, clock, cfg);
    ASSERT_EQ(0, s[i].eng->alloc_pd(s[i].pd));
    ASSERT_EQ(0, s[i].eng->create_cq(1024, s[i].cq));
    s[i].mem.assign(static_cast<size_t>(kSlots + 1) * kLen, 0);
    ASSERT_EQ(0, s[i].eng->reg_mr(s[i].pd, s[i].mem.data(), s[i].mem.size(),
                                  reinterpret_cast<uintptr_t>(s[i].mem.data()), ACCESS_LOCAL_WRITE, s[i].mr));
    QpInitAttr init;
    init.send_cq = init.recv_cq = s[i].cq;
    init.cap = {256, 256, 1, 1, 0};
    init.qp_type = QPT_RC;
    ASSERT_EQ(0, s[i].eng->create_qp(s[i].pd, init, s[i].qpn));
  }
  sim::LinkConfig lc;
  lc.latency_ns = 0;
  net.connect(0, 1, lc);
  for (int i = 0; i < 2; i++) {
    Side &me = s[i], &peer = s[1 - i];
    QpAttr at;
    at.qp_state = QPS_INIT;
    at.port_num = 1;
    ASSERT_EQ(0, me.eng->modify_qp(me.qpn, at, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS));
    at.qp_state = QPS_RTR;
    at.path_mtu = MTU_1024;
    at.dest_qp_num = peer.qpn;
    at.rq_psn = 0x10;
    at.max_dest_rd_atomic = 1;
    at.min_rnr_timer = 1;
    at.ah_attr.dgid = peer.gid;
    at.ah_attr.dmac = peer.mac;
    ASSERT_EQ(0, me.eng->modify_qp(me.qpn, at,
                                   QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN |
                                       QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER));
    at.qp_state = QPS_RTS;
    at.sq_psn = 0x10;
    at.timeout = 14;
    at.retry_cnt = 7;
    at.rnr_retry = 7;
    at.max_rd_atomic = 1;
    ASSERT_EQ(0, me.eng->modify_qp(
                     me.qpn, at,
                     QP_STATE | QP_SQ_PSN | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC));
  }

  std::atomic<bool> stop{false};
  std::thread progress[2];
  for (int i = 0; i < 2; i++)
    progress[i] = std::thread([&, i] {
      while (!stop.load(std::memory_order_relaxed))
        if (!s[i].eng->progress()) std::this_thread::yield();
    });

  Side &a = s[0], &b = s[1];
  auto post_recv = [&](uint32_t slot) {
    Sge sge{reinterpret_cast<uintptr_t>(b.mem.data()) + static_cast<uint64_t>(slot) * kLen, kLen, b.mr.lkey};
    RecvWr rw;
    rw.wr_id = slot;
    rw.sg_list = &sge;
    rw.num_sge = 1;
    const RecvWr* bad = nullptr;
    return b.eng->post_recv(b.qpn, &rw, &bad);
  };
  for (uint32_t k = 0; k < kSlots; k++) ASSERT_EQ(0, post_recv(k));

  // Message m carries its number in every byte pair: a message delivered twice, lost or out of order,
  // or data mixed between messages, shows in what B receives.
  uint8_t* src = a.mem.data() + static_cast<size_t>(kSlots) * kLen;
  uint32_t sent = 0, send_done = 0, received = 0;
  std::vector<uint32_t> out_of_order;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((received < kMsg || send_done < kMsg) && std::chrono::steady_clock::now() < deadline) {
    // A: one message at a time in flight from its single source buffer; post the next when the last one
    // completed (so the buffer may be rewritten).
    if (sent == send_done && sent < kMsg && sent - received < kSlots) {
      for (uint32_t j = 0; j < kLen; j += 2) {
        src[j] = static_cast<uint8_t>(sent);
        src[j + 1] = static_cast<uint8_t>(sent >> 8);
      }
      Sge sge{reinterpret_cast<uintptr_t>(src), kLen, a.mr.lkey};
      SendWr wr;
      wr.wr_id = sent;
      wr.opcode = WR_SEND;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.send_flags = SEND_SIGNALED;
      const SendWr* bad = nullptr;
      ASSERT_EQ(0, a.eng->post_send(a.qpn, &wr, &bad));
      ++sent;
    }
    Wc wc[8];
    a.eng->try_progress();
    for (int n = a.eng->poll_cq(a.cq, 8, wc), k = 0; k < n; k++) {
      ASSERT_EQ(WC_SUCCESS, wc[k].status);
      ASSERT_EQ(send_done, wc[k].wr_id);
      ++send_done;
    }
    b.eng->try_progress();
    for (int n = b.eng->poll_cq(b.cq, 8, wc), k = 0; k < n; k++) {
      ASSERT_EQ(WC_SUCCESS, wc[k].status);
      ASSERT_EQ(kLen, wc[k].byte_len);
      const uint32_t slot = static_cast<uint32_t>(wc[k].wr_id);
      const uint8_t* d = b.mem.data() + static_cast<size_t>(slot) * kLen;
      const uint32_t m = d[0] | static_cast<uint32_t>(d[1]) << 8;
      if (m != (received & 0xffff)) out_of_order.push_back(m);
      for (uint32_t j = 0; j < kLen; j += 2) ASSERT_EQ(m, d[j] | static_cast<uint32_t>(d[j + 1]) << 8u);
      ++received;
      ASSERT_EQ(0, post_recv(slot));
    }
  }
  stop.store(true);
  for (auto& t : progress) t.join();
  EXPECT_EQ(kMsg, received);
  EXPECT_EQ(kMsg, send_done);
  EXPECT_TRUE(out_of_order.empty()) << out_of_order.size() << " messages out of order";
  EXPECT_EQ(0u, a.eng->counter(Counter::duplicate_request));  // a lossless link: nothing resent
  EXPECT_EQ(0u, b.eng->counter(Counter::out_of_seq_request));
}

}  // namespace
}  // namespace urxe::engine
