// Two engines joined by one SimNet link (tests/sim/sim_net.h), for the engine's behaviour tests: a fixed
// latency, a virtual clock, and a per-frame hook that can drop, corrupt, duplicate or hold frames. Time only
// moves when both engines are idle, to the nearest deadline or delivery. The ports grow their buffers on
// demand (PortConfig::grow), so nothing here limits the engine; random faults are off.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>
#include <vector>

#include "engine/engine.h"
#include "tests/sim/sim_net.h"
#include "wire/packet.h"

namespace urxe::engine::test {

// What the hook decides for one frame.
enum class Fate { pass, drop, duplicate };

// The frames on their way to one port (read-only view of the SimNet's events).
class Inbox {
 public:
  Inbox(const sim::SimNet& net, uint32_t port) : net_(net), port_(port) {}
  struct Head {
    uint64_t at;
  };
  size_t size() const { return net_.in_flight_to(port_); }
  bool empty() const { return size() == 0; }
  Head front() const { return {net_.next_delivery_to(port_)}; }

 private:
  const sim::SimNet& net_;
  uint32_t port_;
};

// One side's port: the SimPort the engine uses, its backpressure switch and what is on its way to it.
struct LoopPort {
  LoopPort(sim::SimNet& net, sim::SimPort& p) : sim(p), refuse(p.refuse), inbox(net, p.index()) {}
  sim::SimPort& sim;
  // Backpressure: when it returns true, tx_alloc fails and tx_burst takes at most half of what it is given.
  std::function<bool()>& refuse;
  Inbox inbox;
};

class Link {
 public:
  // Called for every frame sent by side 0 (A) or 1 (B), parsed; may modify the bytes (corruption).
  std::function<Fate(int side, const wire::Packet& pkt, std::vector<uint8_t>& bytes)> hook;
  uint64_t latency_ns = 1000;
  // Extra delay per frame (reordering when it varies); 0 keeps FIFO order.
  std::function<uint64_t(int side)> jitter;
  uint64_t hold_ns = 0;  // set by the hook: extra delay for the frame being sent
  sim::SimNet net;
  sim::SimClock& clock = net.clock();
  std::vector<std::pair<int, wire::Packet>> trace;  // every frame sent, as parsed (before the hook)
  bool keep_trace = true;
  LoopPort* ports[2] = {nullptr, nullptr};

  Link() {
    clock.t = 1'000'000;
    net.set_thread_safe(true);  // some tests progress the engines on their own threads
    net.on_frame = [this](uint32_t from, uint32_t, uint8_t* data, uint32_t len, sim::FrameVerdict& v) {
      frame(static_cast<int>(from), data, len, v);
    };
  }
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

 private:
  void frame(int side, uint8_t* data, uint32_t len, sim::FrameVerdict& v) {
    std::vector<uint8_t> bytes;  // what the hook sees and may change
    if (hook) bytes.assign(data, data + len);
    wire::Packet pkt;
    if (keep_trace || hook)
      wire::parse_frame(hook ? wire::ByteSpan(bytes.data(), bytes.size()) : wire::ByteSpan(data, len), pkt);
    if (keep_trace) {
      pkt.payload = {};
      trace.emplace_back(side, pkt);
    }
    Fate f = hook ? hook(side, pkt, bytes) : Fate::pass;
    if (hook) std::memcpy(data, bytes.data(), std::min<size_t>(len, bytes.size()));
    if (f == Fate::drop) {
      v.drop = true;
      return;
    }
    const uint64_t extra = hold_ns;  // a hook may hold back this one frame
    hold_ns = 0;
    if (f == Fate::duplicate) {
      v.duplicate = true;
      v.dup_delay_ns = latency_ns + (jitter ? jitter(side) : 0);
    }
    v.delay_ns = latency_ns + extra + (jitter ? jitter(side) : 0);
  }
};

struct Events : EventSink {
  std::vector<AsyncEvent> async;
  std::vector<uint32_t> comp;
  void async_event(const AsyncEvent& ev) override { async.push_back(ev); }
  void comp_event(uint32_t cq) override { comp.push_back(cq); }
  bool has(EventType t) const {
    for (auto& e : async)
      if (e.type == t) return true;
    return false;
  }
};

// One side: an engine, a PD, a CQ and a registered buffer.
struct Node {
  std::unique_ptr<LoopPort> port;
  std::unique_ptr<Port> wrapper;  // between the engine and its SimPort, when a test asks for one
  std::unique_ptr<Engine> eng;
  Events events;
  uint32_t pd = 0, cq = 0;
  std::vector<uint8_t> mem;
  MrInfo mr;
  wire::Gid gid{};
  wire::MacAddr mac{};

  uint64_t addr(uint64_t off = 0) { return reinterpret_cast<uintptr_t>(mem.data()) + off; }
};

struct ConnOpts {
  uint32_t sq_psn = 0x100, rq_psn = 0x100;  // A's sq_psn = B's rq_psn and vice versa
  Mtu mtu = MTU_1024;
  uint8_t timeout = 14, retry_cnt = 7, rnr_retry = 7, min_rnr_timer = 1;
  uint8_t max_rd_atomic = 16, max_dest_rd_atomic = 16;
  uint32_t access = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
  uint32_t qkey = 0x11111111;
};

class Loopback {
 public:
  using ConnOpts = urxe::engine::test::ConnOpts;
  // wrap: makes a Port over a side's SimPort for its engine to use (e.g. to watch how the engine polls).
  using PortWrap = std::function<std::unique_ptr<Port>(int side, Port& inner)>;
  explicit Loopback(EngineConfig cfg = {}, uint32_t link_mtu = 1500, size_t mem = 1 << 20, bool ipv6 = false,
                    const PortWrap& wrap = nullptr) {
    for (int s = 0; s < 2; s++) {
      Node& n = node[s];
      n.gid = wire::gid_from_ipv4({10, 0, 0, static_cast<uint8_t>(1 + s)});
      if (ipv6)
        n.gid = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 0, 0, static_cast<uint8_t>(1 + s)};
      n.mac = {0x02, 0, 0, 0, 0, static_cast<uint8_t>(1 + s)};
      sim::PortConfig pc;
      pc.mac = n.mac;
      pc.mtu = link_mtu;
      pc.gids = {n.gid};
      pc.grow = true;
      pc.deliver_on_rx = true;
      sim::SimPort& sp = link.net.add_port(pc);
      n.port = std::make_unique<LoopPort>(link.net, sp);
      link.ports[s] = n.port.get();
      cfg.qpn_base = 0x11 + static_cast<uint32_t>(s) * 0x100;
      if (wrap) n.wrapper = wrap(s, sp);
      n.eng = std::make_unique<Engine>(n.wrapper ? *n.wrapper : static_cast<Port&>(sp), link.clock, cfg);
      n.eng->set_event_sink(&n.events);
      EXPECT_EQ(0, n.eng->alloc_pd(n.pd));
      EXPECT_EQ(0, n.eng->create_cq(4096, n.cq));
      n.mem.assign(mem, 0);
      EXPECT_EQ(
          0, n.eng->reg_mr(
                 n.pd, n.mem.data(), n.mem.size(), n.addr(),
                 ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC, n.mr));
    }
    // Delays come from Link (latency, jitter, hold); no MTU limit on the wire, no random faults.
    sim::LinkConfig lc;
    lc.latency_ns = 0;
    lc.mtu = 1u << 30;
    link.net.connect(0, 1, lc);
  }

  Node& a() { return node[0]; }
  Node& b() { return node[1]; }

  uint32_t create_qp(Node& n, QpType type, uint32_t srq = 0, QpCap cap = {64, 64, 4, 4, 64}) {
    QpInitAttr init;
    init.send_cq = init.recv_cq = n.cq;
    init.srq = srq;
    init.cap = cap;
    init.qp_type = type;
    uint32_t qpn = 0;
    EXPECT_EQ(0, n.eng->create_qp(n.pd, init, qpn));
    return qpn;
  }

  // RESET → INIT → RTR → RTS with the usual attributes.
  void bring_up(Node& n, uint32_t qpn, QpType type, const Node& peer, uint32_t peer_qpn, uint32_t sq_psn,
                uint32_t rq_psn, const ConnOpts& o) {
    QpAttr at;
    at.qp_state = QPS_INIT;
    at.pkey_index = 0;
    at.port_num = 1;
    at.qp_access_flags = o.access;
    at.qkey = o.qkey;
    uint32_t m = QP_STATE | QP_PKEY_INDEX | QP_PORT | (type == QPT_UD ? QP_QKEY : QP_ACCESS_FLAGS);
    ASSERT_EQ(0, n.eng->modify_qp(qpn, at, m));
    at.qp_state = QPS_RTR;
    at.path_mtu = o.mtu;
    at.dest_qp_num = peer_qpn;
    at.rq_psn = rq_psn;
    at.max_dest_rd_atomic = o.max_dest_rd_atomic;
    at.min_rnr_timer = o.min_rnr_timer;
    at.ah_attr.dgid = peer.gid;
    at.ah_attr.dmac = peer.mac;
    at.ah_attr.sgid_index = 0;
    m = QP_STATE;
    if (type == QPT_RC)
      m |= QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN | QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER;
    else if (type == QPT_UC)
      m |= QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN;
    ASSERT_EQ(0, n.eng->modify_qp(qpn, at, m));
    at.qp_state = QPS_RTS;
    at.sq_psn = sq_psn;
    at.timeout = o.timeout;
    at.retry_cnt = o.retry_cnt;
    at.rnr_retry = o.rnr_retry;
    at.max_rd_atomic = o.max_rd_atomic;
    m = QP_STATE | QP_SQ_PSN;
    if (type == QPT_RC) m |= QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC;
    ASSERT_EQ(0, n.eng->modify_qp(qpn, at, m));
  }

  // Creates and connects one QP on each side; returns {qpn on A, qpn on B}.
  std::pair<uint32_t, uint32_t> connect(QpType type, const ConnOpts& o = {}) {
    const uint32_t qa = create_qp(a(), type), qb = create_qp(b(), type);
    bring_up(a(), qa, type, b(), qb, o.sq_psn, o.rq_psn, o);
    bring_up(b(), qb, type, a(), qa, o.rq_psn, o.sq_psn, o);
    return {qa, qb};
  }

  // Runs both engines until `done` holds or `limit_ns` of virtual time passed. Returns done().
  bool run(const std::function<bool()>& done, uint64_t limit_ns = 10'000'000'000ull) {
    const uint64_t end = link.clock.t + limit_ns;
    while (!done()) {
      bool did = node[0].eng->progress();
      did |= node[1].eng->progress();
      if (did) continue;
      uint64_t next = std::min(node[0].eng->next_deadline_ns(), node[1].eng->next_deadline_ns());
      next = std::min(next, link.net.next_event_time());
      for (const auto& w : wakes) next = std::min(next, w());
      if (next == UINT64_MAX) return done();  // nothing can ever happen
      if (next > end) return done();
      if (next > link.clock.t)
        link.clock.t = next;
      else if (next == 0 || next <= link.clock.t) {
        // work reported as pending but progress did nothing: let time move to break a livelock
        link.clock.t += 1;
        idle_spins++;
      }
    }
    return true;
  }
  // Runs until nothing is pending anywhere (or the limit).
  void settle(uint64_t limit_ns = 10'000'000'000ull) {
    run([] { return false; }, limit_ns);
  }

  // Polls up to `n` completions from a node's CQ, running the engines until they come.
  std::vector<Wc> poll(Node& n, size_t count, uint64_t limit_ns = 10'000'000'000ull) {
    std::vector<Wc> out;
    run(
        [&] {
          Wc wc[16];
          int k;
          while (out.size() < count && (k = n.eng->poll_cq(n.cq, 16, wc)) > 0)
            out.insert(out.end(), wc, wc + k);
          return out.size() >= count;
        },
        limit_ns);
    return out;
  }

  Link link;
  Node node[2];
  uint64_t idle_spins = 0;  // rounds where an engine claimed work but did none (should stay 0)
  // More times run() moves the clock to, besides the engines' deadlines and the deliveries: a wrapper's
  // (e.g. FaultPort::next_due_ns, when it holds frames).
  std::vector<std::function<uint64_t()>> wakes;
};

inline SendWr make_wr(WrOpcode op, const Sge* sge, int num_sge, uint64_t wr_id = 1,
                      uint32_t flags = SEND_SIGNALED) {
  SendWr wr;
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.sg_list = sge;
  wr.num_sge = num_sge;
  wr.send_flags = flags;
  return wr;
}

// A one-SGE RDMA WRITE/READ (or WRITE with immediate) to `remote_addr` in the peer's MR `rkey`.
inline SendWr make_rdma_wr(WrOpcode op, const Sge* sge, uint64_t remote_addr, uint32_t rkey,
                           uint64_t wr_id = 1) {
  SendWr wr = make_wr(op, sge, 1, wr_id);
  wr.rdma.remote_addr = remote_addr;
  wr.rdma.rkey = rkey;
  return wr;
}

// An atomic (fetch-and-add or compare-and-swap) on the 8 bytes at `remote_addr` in the peer's MR `rkey`.
inline SendWr make_atomic_wr(WrOpcode op, const Sge* sge, uint64_t remote_addr, uint32_t rkey,
                             uint64_t compare_add, uint64_t wr_id = 1) {
  SendWr wr = make_wr(op, sge, 1, wr_id);
  wr.atomic.remote_addr = remote_addr;
  wr.atomic.rkey = rkey;
  wr.atomic.compare_add = compare_add;
  return wr;
}

inline int count_ops(const Link& l, int side, uint8_t opcode) {
  int c = 0;
  for (auto& [s, p] : l.trace)
    if (s == side && p.bth.opcode == opcode) c++;
  return c;
}

// The PSNs of the frames with this BTH opcode that `side` sent, in order.
inline std::vector<uint32_t> psns_of(const Link& l, int side, uint8_t opcode) {
  std::vector<uint32_t> psns;
  for (auto& [s, p] : l.trace)
    if (s == side && p.bth.opcode == opcode) psns.push_back(p.bth.psn);
  return psns;
}

// The ACK frames (RC's or XRC's) `side` sent with this AETH type and value (an RNR NAK's value is its timer
// code).
inline int count_naks(const Link& l, int side, wire::AethType type, uint8_t value) {
  int c = 0;
  for (auto& [s, p] : l.trace)
    if (s == side && p.info && p.info->kind == wire::OpKind::ack && p.aeth.type() == type &&
        p.aeth.value() == value)
      c++;
  return c;
}

// Frame matchers for drop_frames.
using FrameMatch = std::function<bool(const wire::Packet&)>;
inline FrameMatch with_opcode(uint8_t opcode) {
  return [opcode](const wire::Packet& p) { return p.bth.opcode == opcode; };
}
inline FrameMatch of_kind(wire::OpKind kind) {
  return [kind](const wire::Packet& p) { return p.info && p.info->kind == kind; };
}

// For drop_frames: every matching frame from the first dropped on.
inline constexpr int kEveryFrame = INT_MAX;

// Sets the link's hook to drop `count` frames that `side` sends and `match` accepts, from the `nth` such
// frame (counted from 1) on; `psn`, when given, gets the first dropped frame's PSN.
inline void drop_frames(Link& l, int side, FrameMatch match, int nth = 1, int count = 1,
                        uint32_t* psn = nullptr) {
  l.hook = [side, match = std::move(match), nth, count, psn, seen = 0](int s, const wire::Packet& p,
                                                                       std::vector<uint8_t>&) mutable {
    if (s != side || !match(p)) return Fate::pass;
    ++seen;
    if (seen == nth && psn) *psn = p.bth.psn;
    return seen >= nth && seen - nth < count ? Fate::drop : Fate::pass;
  };
}

// Helpers shared by the engine tests.
// A pattern that differs per seed and per 256-byte block, so misplaced or shifted bytes show.
inline void fill(std::vector<uint8_t>& m, size_t off, size_t len, uint8_t seed) {
  for (size_t i = 0; i < len; i++) m[off + i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
}

inline void post_recv(Node& n, uint32_t qpn, uint64_t off, uint32_t len, uint64_t wr_id, uint32_t lkey = 0) {
  Sge sge{n.addr(off), len, lkey ? lkey : n.mr.lkey};
  RecvWr rw;
  rw.wr_id = wr_id;
  rw.sg_list = &sge;
  rw.num_sge = 1;
  const RecvWr* bad = nullptr;
  ASSERT_EQ(0, n.eng->post_recv(qpn, &rw, &bad));
}

inline void post(Node& n, uint32_t qpn, const SendWr& wr) {
  const SendWr* bad = nullptr;
  ASSERT_EQ(0, n.eng->post_send(qpn, &wr, &bad));
}

// The address of a buffer, for an MR over it and the WRs that use that MR.
inline uint64_t vaddr(const std::vector<uint8_t>& buf) {
  return reinterpret_cast<uintptr_t>(buf.data());
}

// Registers `buf` with a node's engine in protection domain `pd`; returns reg_mr's result.
inline int reg_vec(Node& n, uint32_t pd, std::vector<uint8_t>& buf, uint32_t access, MrInfo& mr) {
  return n.eng->reg_mr(pd, buf.data(), buf.size(), vaddr(buf), access, mr);
}

inline void expect_qp_state(Node& n, uint32_t qpn, QpState state) {
  QpAttr at;
  ASSERT_EQ(0, n.eng->query_qp(qpn, at));
  EXPECT_EQ(at.qp_state, state);
}

// Posts `wr` on A's QP `qa` with a signaled WRITE behind it; expects `wr` to complete with `status`, the
// WRITE to be flushed, and the QP to be in ERR.
inline void expect_remote_error(Loopback& lb, uint32_t qa, SendWr wr, WcStatus status) {
  Sge s2{lb.a().addr(0), 4, lb.a().mr.lkey};
  SendWr after = make_rdma_wr(WR_RDMA_WRITE, &s2, lb.b().addr(0), lb.b().mr.rkey, 99);
  wr.next = &after;
  post(lb.a(), qa, wr);
  auto wa = lb.poll(lb.a(), 2);
  ASSERT_EQ(wa.size(), 2u);
  EXPECT_EQ(wa[0].status, status) << wc_status_str(wa[0].status);
  EXPECT_EQ(wa[0].wr_id, wr.wr_id);
  EXPECT_EQ(wa[1].status, WC_WR_FLUSH_ERR);
  EXPECT_EQ(wa[1].wr_id, 99u);
  expect_qp_state(lb.a(), qa, QPS_ERR);
}

// A port between an engine and its SimPort that watches what the engine sends: the BTH opcodes and burst
// sizes it takes, the frames between two looks at the receive ring, and the frames whose bth_offset is not
// where parse_frame finds the BTH.
class WatchPort final : public Port {
 public:
  explicit WatchPort(Port& inner) : inner_(inner) {}
  const PortAttr& attr() const override { return inner_.attr(); }
  bool tx_alloc(uint32_t size, PacketBuf& buf) override { return inner_.tx_alloc(size, buf); }
  uint32_t tx_burst(PacketBuf* bufs, uint32_t n) override {
    for (uint32_t i = 0; i < n; i++) {
      wire::Packet pkt;
      if (wire::parse_frame(wire::ByteSpan(bufs[i].data, bufs[i].len), pkt) != wire::ParseError::ok ||
          bufs[i].bth_offset != pkt.bth_offset)
        ++bth_offset_wrong;
    }
    const uint32_t k = inner_.tx_burst(bufs, n);
    for (uint32_t i = 0; i < k; i++) {
      wire::Packet pkt;
      if (wire::parse_frame(wire::ByteSpan(bufs[i].data, bufs[i].len), pkt) == wire::ParseError::ok)
        opcodes.push_back(pkt.bth.opcode);
    }
    if (k) bursts.push_back(k);
    since_rx += k;
    total_tx += k;
    max_between_rx = std::max(max_between_rx, since_rx);
    return k;
  }
  void tx_free(PacketBuf& buf) override { inner_.tx_free(buf); }
  uint32_t rx_burst(PacketBuf* bufs, uint32_t n) override {
    since_rx = 0;
    return inner_.rx_burst(bufs, n);
  }
  void rx_free(PacketBuf* bufs, uint32_t n) override { inner_.rx_free(bufs, n); }
  uint64_t since_rx = 0, max_between_rx = 0, total_tx = 0, bth_offset_wrong = 0;
  std::vector<uint8_t> opcodes;  // BTH opcodes of the frames the port took, in order
  std::vector<uint32_t> bursts;  // frames the port took per tx_burst call (calls that took none left out)

 private:
  Port& inner_;
};

// A fixture for RC tests over a default Loopback: connect() makes the QP pair, qa on A and qb on B.
class RcLoopbackTest : public ::testing::Test {
 protected:
  void connect(const ConnOpts& o = {}) { std::tie(qa, qb) = lb.connect(QPT_RC, o); }
  Loopback lb;
  uint32_t qa = 0, qb = 0;
};

// A Loopback::PortWrap that puts a P(inner, args...) under the engine of side `side` (-1: both sides) and
// points out[side] at it.
template <class P, class... Args>
Loopback::PortWrap wrap_side(int side, P* (&out)[2], Args... args) {
  return [side, &out, args...](int s, Port& inner) -> std::unique_ptr<Port> {
    if (side >= 0 && s != side) return nullptr;
    auto p = std::make_unique<P>(inner, args...);
    out[s] = p.get();
    return p;
  };
}

}  // namespace urxe::engine::test
