#include "tests/sim/harness.h"

#include <cstdio>
#include <cstring>

namespace urxe::sim {

using namespace engine;

GuardedArena::GuardedArena(uint64_t capacity)
    : buf_(new uint8_t[capacity + kGuard]), cap_(capacity + kGuard) {}

GuardedArena::Region GuardedArena::carve(uint64_t len, Rng& rng, uint64_t align) {
  uint64_t start = (used_ + kGuard + align - 1) & ~(align - 1);
  if (start + len + kGuard > cap_) {  // a test sizing bug, not an engine one
    std::fprintf(stderr, "GuardedArena: out of space (%llu + %llu > %llu)\n",
                 static_cast<unsigned long long>(start), static_cast<unsigned long long>(len),
                 static_cast<unsigned long long>(cap_));
    std::abort();
  }
  // Gaps between regions are guards; the gap after the newest region is one more guard until the next carve.
  if (!guards_.empty()) guards_.pop_back();
  guards_.push_back({used_, start - used_});
  for (uint64_t i = used_; i < start; ++i) buf_[i] = guard_byte(i);
  uint64_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t v = rng.next();
    std::memcpy(buf_.get() + start + i, &v, 8);
  }
  for (; i < len; ++i) buf_[start + i] = static_cast<uint8_t>(rng.next());
  used_ = start + len;
  guards_.push_back({used_, kGuard});
  for (uint64_t j = used_; j < used_ + kGuard; ++j) buf_[j] = guard_byte(j);
  return {start, len};
}

std::string GuardedArena::check_guards() const {
  for (auto [off, len] : guards_) {
    for (uint64_t i = off; i < off + len; ++i) {
      if (buf_[i] != guard_byte(i)) {
        char b[160];
        std::snprintf(b, sizeof b, "guard byte at arena offset %llu changed: 0x%02x, expected 0x%02x",
                      static_cast<unsigned long long>(i), buf_[i], guard_byte(i));
        return b;
      }
    }
  }
  return {};
}

Testbed::Testbed(uint64_t seed, const LinkConfig& link, const EngineConfig& ecfg, uint32_t port_mtu,
                 uint32_t pool_bufs, bool ipv6)
    : net(seed), ipv6_(ipv6) {
  for (uint32_t i = 0; i < 2; ++i) {
    PortConfig pc;
    pc.mac = sim_mac(i);
    pc.gids = {gid(i)};
    pc.mtu = port_mtu;
    pc.pool_bufs = pool_bufs;
    pc.buf_size = port_mtu + 64;
    pc.rx_queue = pool_bufs * 2;
    host[i].port = &net.add_port(pc);
    host[i].index = i;
  }
  net.connect(0, 1, link);
  for (uint32_t i = 0; i < 2; ++i) {
    EngineConfig c = ecfg;
    c.qpn_base = ecfg.qpn_base + i * 0x1000;  // distinct QPNs per host make traces easier to read
    host[i].eng = std::make_unique<Engine>(*host[i].port, net.clock(), c);
    host[i].eng->alloc_pd(host[i].pd);
    Engine* e = host[i].eng.get();
    net.add_node({[e] { return e->progress(); }, [e] { return e->next_deadline_ns(); }});
  }
}

std::string Testbed::connect(const QpParams& p, QpEnds& out) {
  char err[200];
  auto fail = [&](const char* what, uint32_t side, int rc) {
    std::snprintf(err, sizeof err, "%s on host %u failed: %d (%s)", what, side, rc, std::strerror(rc));
    return std::string(err);
  };
  for (uint32_t s = 0; s < 2; ++s) {
    Engine& e = *host[s].eng;
    int rc;
    CqOptions co;
    co.single_threaded = p.single_threaded;
    if ((rc = e.create_cq(p.cqe, out.send_cq[s], nullptr, co))) return fail("create_cq", s, rc);
    if ((rc = e.create_cq(p.cqe, out.recv_cq[s], nullptr, co))) return fail("create_cq", s, rc);
    QpInitAttr ia;
    ia.send_cq = out.send_cq[s];
    ia.recv_cq = out.recv_cq[s];
    ia.qp_type = p.type;
    ia.srq = p.srq[s];
    ia.sq_sig_all = p.sq_sig_all;
    ia.single_threaded = p.single_threaded;
    ia.cap.max_send_wr = p.max_send_wr;
    ia.cap.max_recv_wr = p.max_recv_wr;
    ia.cap.max_send_sge = p.max_sge;
    ia.cap.max_recv_sge = p.max_sge;
    ia.cap.max_inline_data = p.max_inline;
    if ((rc = e.create_qp(host[s].pd, ia, out.qpn[s]))) return fail("create_qp", s, rc);
  }
  for (uint32_t s = 0; s < 2; ++s) {
    Engine& e = *host[s].eng;
    uint32_t peer = 1 - s;
    AddressVector av;
    av.dgid = gid(peer);
    av.dmac = sim_mac(peer);
    av.sgid_index = 0;
    int rc;
    QpAttr a;
    a.qp_state = QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    uint32_t mask = QP_STATE | QP_PKEY_INDEX | QP_PORT;
    if (p.type == QPT_UD) {
      a.qkey = p.qkey;
      mask |= QP_QKEY;
    } else {
      a.qp_access_flags = p.access;
      mask |= QP_ACCESS_FLAGS;
    }
    if ((rc = e.modify_qp(out.qpn[s], a, mask))) return fail("modify_qp INIT", s, rc);
    a = {};
    a.qp_state = QPS_RTR;
    mask = QP_STATE;
    if (p.type != QPT_UD) {
      a.ah_attr = av;
      a.path_mtu = p.path_mtu;
      a.dest_qp_num = out.qpn[peer];
      a.rq_psn = p.psn[peer];
      mask |= QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN;
      if (p.type == QPT_RC) {
        a.max_dest_rd_atomic = p.max_dest_rd_atomic;
        a.min_rnr_timer = p.min_rnr_timer;
        mask |= QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER;
      }
    }
    if ((rc = e.modify_qp(out.qpn[s], a, mask))) return fail("modify_qp RTR", s, rc);
    a = {};
    a.qp_state = QPS_RTS;
    a.sq_psn = p.psn[s];
    mask = QP_STATE | QP_SQ_PSN;
    if (p.type == QPT_RC) {
      a.timeout = p.timeout;
      a.retry_cnt = p.retry_cnt;
      a.rnr_retry = p.rnr_retry;
      a.max_rd_atomic = p.max_rd_atomic;
      mask |= QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC;
    }
    if ((rc = e.modify_qp(out.qpn[s], a, mask))) return fail("modify_qp RTS", s, rc);
    if (p.type == QPT_UD) {
      if ((rc = e.create_ah(host[s].pd, av, out.ah[s]))) return fail("create_ah", s, rc);
    }
  }
  return {};
}

std::string Testbed::connect_xrc(const QpParams& p, uint32_t ini, uint32_t xrcd, QpEnds& out) {
  char err[200];
  auto fail = [&](const char* what, uint32_t side, int rc) {
    std::snprintf(err, sizeof err, "%s on host %u failed: %d (%s)", what, side, rc, std::strerror(rc));
    return std::string(err);
  };
  const uint32_t tgt = 1 - ini;
  int rc;
  Engine& ei = *host[ini].eng;
  CqOptions co;
  co.single_threaded = p.single_threaded;
  if ((rc = ei.create_cq(p.cqe, out.send_cq[ini], nullptr, co))) return fail("create_cq", ini, rc);
  out.recv_cq[ini] = out.send_cq[tgt] = out.recv_cq[tgt] = 0;
  QpInitAttr ia;
  ia.qp_type = QPT_XRC_SEND;
  ia.send_cq = out.send_cq[ini];
  ia.sq_sig_all = p.sq_sig_all;
  ia.single_threaded = p.single_threaded;
  ia.cap.max_send_wr = p.max_send_wr;
  ia.cap.max_send_sge = p.max_sge;
  ia.cap.max_inline_data = p.max_inline;
  if ((rc = ei.create_qp(host[ini].pd, ia, out.qpn[ini]))) return fail("create_qp XRC_SEND", ini, rc);
  QpInitAttr ta;
  ta.qp_type = QPT_XRC_RECV;
  ta.xrcd = xrcd;
  if ((rc = host[tgt].eng->create_qp(0, ta, out.qpn[tgt]))) return fail("create_qp XRC_RECV", tgt, rc);
  for (uint32_t s : {ini, tgt}) {
    Engine& e = *host[s].eng;
    const bool initiator = s == ini;
    const uint32_t peer = 1 - s;
    QpAttr a;
    a.qp_state = QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    a.qp_access_flags = p.access;
    if ((rc = e.modify_qp(out.qpn[s], a, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS)))
      return fail("modify_qp INIT", s, rc);
    a = {};
    a.qp_state = QPS_RTR;
    a.ah_attr.dgid = gid(peer);
    a.ah_attr.dmac = sim_mac(peer);
    a.path_mtu = p.path_mtu;
    a.dest_qp_num = out.qpn[peer];
    a.rq_psn = p.psn[peer];
    uint32_t mask = QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN;
    if (!initiator) {  // the responder's attributes: the target's only
      a.max_dest_rd_atomic = p.max_dest_rd_atomic;
      a.min_rnr_timer = p.min_rnr_timer;
      mask |= QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER;
    }
    if ((rc = e.modify_qp(out.qpn[s], a, mask))) return fail("modify_qp RTR", s, rc);
    a = {};
    a.qp_state = QPS_RTS;
    a.sq_psn = p.psn[s];
    a.timeout = p.timeout;
    mask = QP_STATE | QP_SQ_PSN | QP_TIMEOUT;
    if (initiator) {  // the requester's attributes: the initiator's only
      a.retry_cnt = p.retry_cnt;
      a.rnr_retry = p.rnr_retry;
      a.max_rd_atomic = p.max_rd_atomic;
      mask |= QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC;
    }
    if ((rc = e.modify_qp(out.qpn[s], a, mask))) return fail("modify_qp RTS", s, rc);
  }
  return {};
}

std::string Testbed::describe_counters() const {
  std::string s;
  for (uint32_t h = 0; h < 2; ++h) {
    s += "host" + std::to_string(h) + ":";
    for (uint32_t c = 0; c < static_cast<uint32_t>(Counter::num_counters); ++c) {
      uint64_t v = host[h].eng->counter(static_cast<Counter>(c));
      if (v) s += std::string(" ") + counter_name(static_cast<Counter>(c)) + "=" + std::to_string(v);
    }
    s += "\n";
  }
  s += "link 0->1: " + describe(net.link_stats(0, 1)) + "\nlink 1->0: " + describe(net.link_stats(1, 0));
  return s;
}

std::string hexdump_diff(const uint8_t* got, const uint8_t* want, uint64_t len, uint64_t base) {
  uint64_t first = len, last = 0, n = 0;
  for (uint64_t i = 0; i < len; ++i)
    if (got[i] != want[i]) {
      if (first == len) first = i;
      last = i;
      ++n;
    }
  if (!n) return {};
  char b[200];
  std::snprintf(b, sizeof b, "%llu bytes differ in [%llu, %llu]; first at %llu: got 0x%02x want 0x%02x",
                static_cast<unsigned long long>(n), static_cast<unsigned long long>(base + first),
                static_cast<unsigned long long>(base + last), static_cast<unsigned long long>(base + first),
                got[first], want[first]);
  return b;
}

}  // namespace urxe::sim
