// Many RC flows through one bottleneck, as DCQCN meets them in a fabric: host 0 sends 4 KiB RDMA WRITEs on N
// QPs to host 1 over a 10 Gb/s link whose egress queue is bounded and marks ECN-capable frames CE as a DCQCN
// switch does (RED on the instantaneous queue). Every flow keeps a few WRITEs outstanding, like perftest's
// ib_write_bw -q N. What users rely on, for N = 1 … 1,000: no QP fails (no RETRY_EXC_ERR), the bottleneck
// stays busy (goodput ≥ 90 %), the flows share it fairly (Jain's index ≥ 0.9) and every byte arrives intact.
// The same run without congestion control is reported beside it, to show what DCQCN changes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/sim/harness.h"
#include "wire/packet.h"

namespace urxe::sim {
namespace {

using namespace engine;

constexpr uint32_t kMsgLen = 4096;                    // one packet at path MTU 4096
constexpr uint32_t kDepth = 4;                        // WRITEs outstanding per flow
constexpr uint64_t kRateBps = 10'000'000'000ull;      // the bottleneck
constexpr uint64_t kLineRateBps = 25'000'000'000ull;  // each host's NIC

struct FlowsResult {
  uint32_t flows = 0;
  uint64_t window_ns = 0;
  std::vector<uint64_t> bytes;  // per flow, completed inside the measuring window
  uint64_t errors = 0;
  WcStatus first_error = WC_SUCCESS;
  bool drained = false;  // every WRITE posted completed after the run
  bool data_ok = false;
  double goodput = 0;  // of the bottleneck's rate, payload bytes
  double jain = 0;
  uint64_t queue_drops = 0, ce_marked = 0, max_queue = 0, rx_overflow = 0;
  uint64_t cnp_sent = 0, cnp_handled = 0, timeouts = 0, probes = 0, seq_naks = 0, data_pkts = 0, msgs = 0;
};

std::string describe(const FlowsResult& r) {
  char b[512];
  std::snprintf(
      b, sizeof b,
      "%4u flows: goodput %.3f of the bottleneck, Jain %.3f, errors %llu (first %s), queue drops %llu, "
      "CE marked %llu, max queue %llu B, CNPs sent %llu handled %llu, timeouts %llu, tail probes %llu, "
      "seq NAKs %llu, packets sent per WRITE %.3f",
      r.flows, r.goodput, r.jain, static_cast<unsigned long long>(r.errors), wc_status_str(r.first_error),
      static_cast<unsigned long long>(r.queue_drops), static_cast<unsigned long long>(r.ce_marked),
      static_cast<unsigned long long>(r.max_queue), static_cast<unsigned long long>(r.cnp_sent),
      static_cast<unsigned long long>(r.cnp_handled), static_cast<unsigned long long>(r.timeouts),
      static_cast<unsigned long long>(r.probes), static_cast<unsigned long long>(r.seq_naks),
      r.msgs ? static_cast<double>(r.data_pkts) / static_cast<double>(r.msgs) : 0.0);
  return b;
}

double jain_index(const std::vector<uint64_t>& x) {
  double sum = 0, sq = 0;
  for (uint64_t v : x) {
    sum += static_cast<double>(v);
    sq += static_cast<double>(v) * static_cast<double>(v);
  }
  return sq > 0 ? sum * sum / (static_cast<double>(x.size()) * sq) : 0;
}

LinkConfig bottleneck() {
  LinkConfig l;
  l.latency_ns = 2000;
  l.rate_bps = kRateBps;
  l.queue_limit_bytes = 2'000'000;  // a shallow-buffered switch port
  l.ecn_kmin_bytes = 40'000;
  l.ecn_kmax_bytes = 400'000;
  l.ecn_pmax = 0.2;
  return l;
}

// What the bottleneck cases above share; the turns case below changes it.
struct FlowsSetup {
  uint32_t depth = kDepth;                // WRITEs outstanding per flow
  Mtu path_mtu = MTU_4096;                // 4 KiB WRITEs of one packet
  uint32_t port_mtu = 4200;               // the hosts' Ethernet MTU
  uint32_t pool_bufs = 4096;              // each host port's transmit buffers
  uint8_t timeout = 14;                   // perftest's
  LinkConfig link = bottleneck();         // host 0 to host 1
  uint64_t rate_bps = kRateBps;           // what goodput is measured against
  uint64_t line_rate_bps = kLineRateBps;  // each host's NIC
  // Host 0 sends through a transmit ring of this many frames that the kernel empties whole, taking
  // ring_frame_ns per frame meanwhile (the socket port's PACKET_TX_RING and its send call), instead of a NIC
  // that takes one frame at a time: each round of the engine then finds the whole ring free. 0: off.
  uint32_t tx_ring = 0;
  uint64_t ring_frame_ns = 0;
};

FlowsResult run_flows(uint32_t flows, bool congestion_control, uint64_t warmup_ns, uint64_t window_ns,
                      uint64_t seed = 1, const FlowsSetup& su = {}) {
  const uint32_t depth = su.depth;
  EngineConfig ecfg;
  ecfg.dcqcn.rp_max_rate = static_cast<uint32_t>(su.line_rate_bps / 1'000'000);  // the NIC's link speed
  if (!congestion_control) ecfg.dcqcn.np_enable = ecfg.dcqcn.rp_enable = 0;
  if (const char* v = std::getenv("CLAMP"))
    ecfg.dcqcn.rp_clamp_tgt_rate = static_cast<uint32_t>(std::atoi(v));
  if (const char* v = std::getenv("HAI")) ecfg.dcqcn.rp_hai_rate = static_cast<uint32_t>(std::atoi(v));
  if (const char* v = std::getenv("TRESET")) ecfg.dcqcn.rp_time_reset = static_cast<uint32_t>(std::atoi(v));
  Testbed tb(seed, su.link, ecfg, su.port_mtu, su.pool_bufs);
  LinkConfig back;  // ACKs and CNPs: never congested
  back.latency_ns = 2000;
  tb.net.set_link(1, 0, back);
  for (uint32_t h = 0; h < 2; ++h) tb.host[h].port->set_line_rate(su.line_rate_bps);
  uint64_t ring_sent = 0, ring_busy_until = 0;  // tx_kept() when the kernel last emptied the ring
  if (su.tx_ring) {
    SimPort& p0 = *tb.host[0].port;
    p0.set_line_rate(0);
    p0.tx_room = [&]() -> uint32_t {
      if (tb.net.clock().now_ns() < ring_busy_until) return 0;
      return static_cast<uint32_t>(su.tx_ring - std::min<uint64_t>(su.tx_ring, p0.tx_kept() - ring_sent));
    };
    // After the engine's round (nodes run in order): the kernel sends the frames handed to the port, taking
    // ring_frame_ns a frame, and their slots are free again once it has.
    uint64_t taken_mark = 0;
    tb.net.add_node(
        {[&, taken_mark]() mutable {
           const uint64_t now = tb.net.clock().now_ns(), taken = p0.tx_frames() - taken_mark;
           if (now < ring_busy_until || taken == 0) return false;
           ring_busy_until = now + taken * su.ring_frame_ns;
           ring_sent += taken;
           taken_mark = p0.tx_frames();
           return true;
         },
         [&] { return ring_busy_until > tb.net.clock().now_ns() ? ring_busy_until : UINT64_MAX; }});
  }

  FlowsResult r;
  r.flows = flows;
  r.window_ns = window_ns;
  r.bytes.assign(flows, 0);
  // One CQ per side for every flow, as perftest does; each flow's WRITEs go to its own slots.
  uint32_t cq[2];
  for (uint32_t h = 0; h < 2; ++h) EXPECT_EQ(tb.host[h].eng->create_cq(flows * depth + 16, cq[h]), 0);
  const size_t bytes = size_t{flows} * depth * kMsgLen;
  std::vector<uint8_t> mem[2];
  MrInfo mr[2];
  for (uint32_t h = 0; h < 2; ++h) {
    mem[h].assign(bytes, static_cast<uint8_t>(h));
    EXPECT_EQ(
        tb.host[h].eng->reg_mr(tb.host[h].pd, mem[h].data(), bytes, reinterpret_cast<uint64_t>(mem[h].data()),
                               ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE, mr[h]),
        0);
  }
  std::vector<uint32_t> qpn[2];
  for (uint32_t f = 0; f < flows; ++f) {
    for (uint32_t h = 0; h < 2; ++h) {
      QpInitAttr ia;
      ia.send_cq = ia.recv_cq = cq[h];
      ia.qp_type = QPT_RC;
      ia.cap.max_send_wr = depth;
      ia.cap.max_recv_wr = 1;
      ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
      uint32_t n = 0;
      EXPECT_EQ(tb.host[h].eng->create_qp(tb.host[h].pd, ia, n), 0);
      qpn[h].push_back(n);
    }
  }
  for (uint32_t f = 0; f < flows; ++f) {
    for (uint32_t h = 0; h < 2; ++h) {
      Engine& e = *tb.host[h].eng;
      QpAttr a;
      a.qp_state = QPS_INIT;
      a.port_num = 1;
      a.qp_access_flags = ACCESS_REMOTE_WRITE;
      EXPECT_EQ(e.modify_qp(qpn[h][f], a, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS), 0);
      a = {};
      a.qp_state = QPS_RTR;
      a.ah_attr.dgid = tb.gid(1 - h);
      a.ah_attr.dmac = sim_mac(1 - h);
      a.path_mtu = su.path_mtu;
      a.dest_qp_num = qpn[1 - h][f];
      a.rq_psn = f * 7919;
      a.max_dest_rd_atomic = 1;
      a.min_rnr_timer = 1;
      EXPECT_EQ(e.modify_qp(qpn[h][f], a,
                            QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN | QP_MAX_DEST_RD_ATOMIC |
                                QP_MIN_RNR_TIMER),
                0);
      a = {};
      a.qp_state = QPS_RTS;
      a.sq_psn = f * 7919;
      a.timeout = su.timeout;
      a.retry_cnt = 7;
      a.rnr_retry = 7;
      a.max_rd_atomic = 1;
      EXPECT_EQ(
          e.modify_qp(qpn[h][f], a,
                      QP_STATE | QP_SQ_PSN | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC),
          0);
    }
  }
  tb.net.on_transmit = [&](uint32_t from, uint32_t, const uint8_t* d, uint32_t len) {
    wire::Packet pkt;
    if (from == 0 && wire::parse_frame(wire::ByteSpan(d, len), pkt) == wire::ParseError::ok &&
        pkt.payload_len)
      r.data_pkts++;
  };

  // wr_id = flow << 32 | sequence number; the source slot is refilled with the sequence's pattern first.
  std::vector<uint32_t> next_seq(flows, 0);
  bool posting = true;
  uint64_t outstanding = 0;
  auto post = [&](uint32_t f) {
    const uint32_t seq = next_seq[f]++;
    const size_t off = (size_t{f} * depth + seq % depth) * kMsgLen;
    for (uint32_t i = 0; i < kMsgLen; i += 8) {
      const uint64_t v = (uint64_t{f} << 40) ^ (uint64_t{seq} << 12) ^ i;
      std::memcpy(&mem[0][off + i], &v, 8);
    }
    Sge s{reinterpret_cast<uint64_t>(mem[0].data() + off), kMsgLen, mr[0].lkey};
    SendWr w;
    w.wr_id = uint64_t{f} << 32 | seq;
    w.opcode = WR_RDMA_WRITE;
    w.send_flags = SEND_SIGNALED;
    w.sg_list = &s;
    w.num_sge = 1;
    w.rdma = {reinterpret_cast<uint64_t>(mem[1].data() + off), mr[1].rkey};
    const SendWr* bad = nullptr;
    EXPECT_EQ(tb.host[0].eng->post_send(qpn[0][f], &w, &bad), 0);
    outstanding++;
  };
  for (uint32_t f = 0; f < flows; ++f)
    for (uint32_t k = 0; k < depth; ++k) post(f);

  const uint64_t t0 = tb.net.clock().now_ns(), w0 = t0 + warmup_ns, w1 = w0 + window_ns;
  std::vector<Wc> wc(256);
  auto reap = [&] {
    const int k = tb.host[0].eng->poll_cq(cq[0], static_cast<int>(wc.size()), wc.data());
    const uint64_t now = tb.net.clock().now_ns();
    for (int i = 0; i < k; ++i) {
      const uint32_t f = static_cast<uint32_t>(wc[i].wr_id >> 32);
      outstanding--;
      if (wc[i].status != WC_SUCCESS) {
        if (!r.errors) r.first_error = wc[i].status;
        r.errors++;
        continue;
      }
      r.msgs++;
      if (now >= w0 && now < w1) r.bytes[f] += kMsgLen;
      if (posting && f < flows) post(f);
    }
    return false;
  };
  tb.net.run_until(reap, w1);
  posting = false;
  r.drained = tb.net.run_until(
      [&] {
        reap();
        return outstanding == 0;
      },
      w1 + 2'000'000'000ull);
  uint64_t total = 0;
  for (uint64_t b : r.bytes) total += b;
  r.goodput =
      static_cast<double>(total) * 8e9 / static_cast<double>(window_ns) / static_cast<double>(su.rate_bps);
  r.jain = jain_index(r.bytes);
  if (std::getenv("SHOWFLOWS")) {
    for (uint32_t f = 0; f < flows && f < 40; ++f)
      std::printf("%llu ", static_cast<unsigned long long>(r.bytes[f] / kMsgLen));
    std::printf("\n");
  }
  // each destination slot holds what its source slot held last (the last WRITE through that slot)
  r.data_ok = r.errors == 0 && r.drained && mem[0] == mem[1];
  const LinkStats& st = tb.net.link_stats(0, 1);
  r.queue_drops = st.queue_drops;
  r.ce_marked = st.ce_marked;
  r.max_queue = st.max_queue_bytes;
  r.rx_overflow = st.rx_overflow + tb.net.link_stats(1, 0).rx_overflow;
  r.cnp_sent = tb.host[1].eng->counter(Counter::np_cnp_sent);
  r.cnp_handled = tb.host[0].eng->counter(Counter::rp_cnp_handled);
  r.timeouts = tb.host[0].eng->counter(Counter::completer_retry_err);
  r.seq_naks = tb.host[0].eng->counter(Counter::rcvd_seq_err);
  r.probes = tb.host[0].eng->counter(Counter::tail_loss_probes);
  return r;
}

struct Case {
  uint32_t flows;
  uint64_t warmup_ms, window_ms;
};

class ManyFlows : public ::testing::TestWithParam<Case> {};

TEST_P(ManyFlows, ShareTheBottleneckWithoutFailingOrCollapsing) {
  const Case c = GetParam();
  if (std::getenv("URXE_SIM_COMPARE")) {  // the same run without congestion control, for the figures
    const FlowsResult off = run_flows(c.flows, false, c.warmup_ms * 1'000'000, c.window_ms * 1'000'000);
    std::printf("without congestion control: %s\n", describe(off).c_str());
  }
  const FlowsResult r = run_flows(c.flows, true, c.warmup_ms * 1'000'000, c.window_ms * 1'000'000);
  std::printf("with DCQCN:                 %s\n", describe(r).c_str());
  EXPECT_EQ(r.errors, 0u) << describe(r);
  EXPECT_TRUE(r.drained) << describe(r);
  EXPECT_TRUE(r.data_ok) << describe(r);
  EXPECT_GE(r.goodput, 0.90) << describe(r);
  EXPECT_GE(r.jain, 0.90) << describe(r);
  if (c.flows > 1) {
    EXPECT_GT(r.ce_marked, 0u);  // the queue built up: the case exercised marking and DCQCN
    EXPECT_GT(r.cnp_handled, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Bottleneck, ManyFlows,
                         ::testing::Values(Case{1, 2, 10}, Case{16, 5, 20}, Case{128, 10, 30},
                                           Case{1000, 20, 60}),
                         [](const auto& p) { return std::to_string(p.param.flows) + "flows"; });

// Many QPs taking turns at one port, as ib_write_bw -q 1000 -t 32 through a veth: 4 KiB WRITEs of four
// packets (path MTU 1024), a queue of them on every QP, and a transmit ring of ~510 frames that the kernel
// empties whole while the engine waits (the socket port), 5 us a frame. Each round filled the ring from the
// QP after the last one that sent, so a QP whose message the full ring cut waited for every other QP's turn
// (200 x 64 frames, 64 ms) with the message's last packets, and so its AckReq, unsent: nothing was lost, yet
// such QPs timed out (219 timeouts), resent and had their rate halved (through a veth with 1,000 QPs some
// failed with RETRY_EXC_ERR). Now that QP goes first in the next round (without: 115 timeouts), and the
// last packet of every turn asks for an ACK (without: 271). What users rely on: no timeout where nothing is
// lost, no error, few resends, the port kept busy, the QPs served alike, the data intact.
FlowsSetup turns_setup() {
  FlowsSetup su;
  su.depth = 16;
  su.path_mtu = MTU_1024;
  su.port_mtu = 1500;
  su.link = LinkConfig{};
  su.link.latency_ns = 2000;
  su.tx_ring = 510;         // about the socket port's (so that it fills in the middle of a message)
  su.ring_frame_ns = 5000;  // the kernel's time per frame
  su.timeout = 12;          // 16.8 ms
  su.link.rate_bps = su.line_rate_bps = su.rate_bps = 1100ull * 8 * 1'000'000'000 / su.ring_frame_ns;
  return su;
}

TEST(ManyFlowsTakingTurns, NoQpWaitsPastItsRetransmitTimeout) {
  const FlowsResult r = run_flows(200, true, 50'000'000, 200'000'000, 1, turns_setup());
  std::printf("%s\n", describe(r).c_str());
  EXPECT_EQ(r.timeouts, 0u) << describe(r);
  EXPECT_EQ(r.errors, 0u) << describe(r);
  EXPECT_TRUE(r.drained) << describe(r);
  EXPECT_TRUE(r.data_ok) << describe(r);
  EXPECT_LE(r.data_pkts, r.msgs * 4 + r.msgs / 100) << describe(r);  // under 1 % resent
  EXPECT_GE(r.goodput, 0.90) << describe(r);  // of the ring's rate, headers included in it
  EXPECT_GE(r.jain, 0.90) << describe(r);
}

// The same behind a link a tenth slower than the ring, whose queue marks as a DCQCN switch does: paced QPs
// stop wherever their rate says, and with turns of tx_budget frames (a turn of all QPs 12,800 frames, 64
// ms) the QPs served first in each round got more (Jain 0.877). Turns that shrink with the number of QPs
// keep them alike.
TEST(ManyFlowsTakingTurns, QpsShareAMarkingBottleneckAlike) {
  FlowsSetup su = turns_setup();
  su.link.rate_bps = su.rate_bps = su.rate_bps * 9 / 10;
  su.link.ecn_kmin_bytes = 40'000;
  su.link.ecn_kmax_bytes = 400'000;
  su.link.ecn_pmax = 0.2;
  const FlowsResult r = run_flows(200, true, 50'000'000, 200'000'000, 1, su);
  std::printf("%s\n", describe(r).c_str());
  EXPECT_GT(r.cnp_handled, 0u);
  EXPECT_EQ(r.timeouts, 0u) << describe(r);
  EXPECT_EQ(r.errors, 0u) << describe(r);
  EXPECT_TRUE(r.data_ok) << describe(r);
  EXPECT_GE(r.goodput, 0.90) << describe(r);
  EXPECT_GE(r.jain, 0.92) << describe(r);
}

}  // namespace
}  // namespace urxe::sim
