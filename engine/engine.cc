// Engine front: construction and teardown, the public verbs forwarded to EngineImpl under the engine lock,
// and the names and counters read from outside. The flows are in rx.cc, tx.cc and progress.cc.
#include "engine/engine.h"

#include <cerrno>

#include "engine/internal.h"

namespace urxe::engine {

const char* wc_status_str(WcStatus s) {
  static const char* const names[] = {"success",
                                      "local length error",
                                      "local QP operation error",
                                      "local EE context operation error",
                                      "local protection error",
                                      "Work Request Flushed Error",
                                      "memory bind operation error",
                                      "bad response error",
                                      "local access error",
                                      "remote invalid request error",
                                      "remote access error",
                                      "remote operation error",
                                      "transport retry counter exceeded",
                                      "RNR retry counter exceeded",
                                      "local RDD violation error",
                                      "remote invalid RD request",
                                      "aborted error",
                                      "invalid EE context number",
                                      "invalid EE context state",
                                      "fatal error",
                                      "response timeout error",
                                      "general error"};
  return s < sizeof(names) / sizeof(names[0]) ? names[s] : "unknown";
}

const char* qp_state_str(QpState s) {
  static const char* const names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR", "UNKNOWN"};
  return s <= QPS_UNKNOWN ? names[s] : "UNKNOWN";
}

const char* counter_name(Counter c) {
  const auto i = static_cast<size_t>(c);
  return i < std::size(kCounterTable) ? kCounterTable[i].name : "?";
}

EngineImpl::EngineImpl(Port& p, Clock& c, const EngineConfig& cfg)
    : port(p),
      clock(c),
      config(cfg),
      port_icrc_offload(p.tx_icrc_offload()),
      port_gather(port_icrc_offload && p.tx_gather()),
      port_batch_bytes(port_gather ? p.tx_batch_bytes() : 0) {
  if (config.ack_every_n < 1) config.ack_every_n = 1;
  if (config.max_unacked_psns < 1) config.max_unacked_psns = 1;
  if (config.max_unacked_psns > 0x400000) config.max_unacked_psns = 0x400000;
  if (config.rx_burst < 1) config.rx_burst = 1;
  if (config.tx_budget < 1) config.tx_budget = 1;
  if (config.counter_storage) counters = config.counter_storage;
  if (config.dcqcn.np_rx_ring_mark_enable)
    rx_mark_frames = config.dcqcn.np_rx_ring_mark_frames ? config.dcqcn.np_rx_ring_mark_frames
                     : port.attr().rx_ring_frames        ? std::max(port.attr().rx_ring_frames / 4 * 3, 1u)
                                                         : 768;
  const DeviceAttr& d = config.device;
  pds.resize(size_t{d.max_pd} + 1);
  mrs.resize(size_t{d.max_mr} + d.max_mw + 1);
  mws.resize(d.max_mw);
  mw_base = d.max_mr + 1;
  ahs.resize(size_t{d.max_ah} + 1);
  gids = port.attr().gids;
  cqs = std::vector<std::atomic<Cq*>>(size_t{d.max_cq} + 1);
  srqs = std::vector<std::atomic<Srq*>>(size_t{d.max_srq} + 1);
  qps = std::vector<std::atomic<Qp*>>(d.max_qp);
  active = std::vector<std::atomic<uint64_t>>((size_t{d.max_qp} + 63) / 64);
  active_words = std::vector<std::atomic<uint64_t>>((active.size() + 63) / 64);
  while (((active_words.size() - 1) >> active_top_shift) >= 64) active_top_shift++;
  taken.resize(active.size());
  next_qp_index = d.max_qp ? config.qpn_start % d.max_qp : 0;
  qp_list.reserve(d.max_qp);
  // (held frames join tx for their transmit call, and a hold swaps the two: both have room for all)
  tx.reserve(3 * kTxBatch);
  held.reserve(3 * kTxBatch);
  rx.resize(config.rx_burst);
  // The CRC picks its implementation by timing them at first use (wire/crc32_fold.h): here, not in the
  // first frame's round.
  wire::crc32(0, nullptr, 0);
}

uint32_t EngineImpl::active_mtu_bytes() const {
  return mtu_to_bytes(active_mtu());
}

Mtu EngineImpl::active_mtu() const {
  // rxe: the largest IB MTU not above netdev MTU minus the RoCEv2 overhead (IPv6 40 + UDP 8 + BTH 12 +
  // the largest ext header (RETH/AtomicETH 28) + ICRC 4): 1500 → 1024, 9000 → 4096.
  const uint32_t link = port.attr().mtu;
  const uint32_t overhead =
      wire::kIpv6Len + wire::kUdpLen + wire::kBthLen + wire::kAtomicEthLen + wire::kIcrcLen;
  const uint32_t room = link > overhead ? link - overhead : 0;
  Mtu best = MTU_256;
  for (uint32_t m = MTU_256; m <= MTU_4096; m++)
    if (mtu_to_bytes(static_cast<Mtu>(m)) <= room) best = static_cast<Mtu>(m);
  return best;
}

void EngineImpl::async_event(EventType t, uint32_t element) {
  if (sink) sink->async_event(AsyncEvent{t, element});
}

// ---- Engine ----

Engine::Engine(Port& port, Clock& clock, const EngineConfig& config)
    : impl_(std::make_unique<EngineImpl>(port, clock, config)) {}

Engine::~Engine() {
  std::lock_guard<std::mutex> g(impl_->mu);
  for (auto& b : impl_->tx) impl_->port.tx_free(b);
  for (auto& b : impl_->held) impl_->port.tx_free(b);
  impl_->tx.clear();
  for (Qp* q : impl_->qp_list) delete q;
  for (auto& c : impl_->cqs) delete c.load();
  for (auto& s : impl_->srqs) delete s.load();
  impl_->qp_list.clear();
}

const DeviceAttr& Engine::device_attr() const {
  return impl_->config.device;
}
Mtu Engine::active_mtu() const {
  return impl_->active_mtu();
}
void Engine::set_event_sink(EventSink* sink) {
  std::lock_guard<std::mutex> g(impl_->mu);
  impl_->sink = sink;
}

#define LOCKED(expr)                           \
  do {                                         \
    std::lock_guard<std::mutex> g_(impl_->mu); \
    impl_->now = impl_->clock.now_ns();        \
    return impl_->expr;                        \
  } while (0)

int Engine::alloc_pd(uint32_t& pd) {
  LOCKED(alloc_pd(pd));
}
int Engine::dealloc_pd(uint32_t pd) {
  LOCKED(dealloc_pd(pd));
}
int Engine::reg_mr(uint32_t pd, void* addr, uint64_t length, uint64_t iova, uint32_t access, MrInfo& out) {
  LOCKED(reg_mr(pd, addr, length, iova, access, out));
}
int Engine::dereg_mr(uint32_t lkey) {
  LOCKED(dereg_mr(lkey));
}

int Engine::advise_mr(uint32_t pd, uint32_t advice, uint32_t flags, const Sge* sges, uint32_t num_sge) {
  LOCKED(advise_mr(pd, advice, flags, sges, num_sge));
}
int Engine::create_cq(uint32_t cqe, uint32_t& cq, uint32_t* actual, const CqOptions& options) {
  LOCKED(create_cq(cqe, cq, actual, options));
}
int Engine::destroy_cq(uint32_t cq) {
  LOCKED(destroy_cq(cq));
}
int Engine::create_qp(uint32_t pd, const QpInitAttr& init, uint32_t& qpn, QpCap* actual) {
  LOCKED(create_qp(pd, init, qpn, actual));
}
int Engine::modify_qp(uint32_t qpn, const QpAttr& attr, uint32_t mask) {
  std::lock_guard<std::mutex> g(impl_->mu);
  impl_->now = impl_->clock.now_ns();
  const int rc = impl_->modify_qp(qpn, attr, mask);
  if (Qp* q = impl_->qp_get(qpn)) impl_->activate_locked(*q);  // a new state may give it work (RTS, ERR, SQD)
  return rc;
}
int Engine::query_qp(uint32_t qpn, QpAttr& attr, QpInitAttr* init) {
  LOCKED(query_qp(qpn, attr, init));
}
int Engine::destroy_qp(uint32_t qpn) {
  LOCKED(destroy_qp(qpn));
}
int Engine::create_srq(uint32_t pd, const SrqAttr& attr, uint32_t& srq, SrqAttr* actual) {
  LOCKED(create_srq(pd, attr, srq, actual));
}
int Engine::modify_srq(uint32_t srq, const SrqAttr& attr, uint32_t mask) {
  LOCKED(modify_srq(srq, attr, mask));
}
int Engine::query_srq(uint32_t srq, SrqAttr& attr) {
  LOCKED(query_srq(srq, attr));
}
int Engine::destroy_srq(uint32_t srq) {
  LOCKED(destroy_srq(srq));
}
int Engine::alloc_xrcd(uint32_t& xrcd) {
  LOCKED(alloc_xrcd(xrcd));
}
int Engine::dealloc_xrcd(uint32_t xrcd) {
  LOCKED(dealloc_xrcd(xrcd));
}
int Engine::create_xrc_srq(uint32_t xrcd, uint32_t pd, uint32_t cq, const SrqAttr& attr, uint32_t& srq,
                           SrqAttr* actual) {
  LOCKED(create_xrc_srq(xrcd, pd, cq, attr, srq, actual));
}
int Engine::open_qp(uint32_t xrcd, uint32_t qpn) {
  LOCKED(open_qp(xrcd, qpn));
}
int Engine::create_ah(uint32_t pd, const AddressVector& av, uint32_t& ah) {
  LOCKED(create_ah(pd, av, ah));
}
int Engine::destroy_ah(uint32_t ah) {
  LOCKED(destroy_ah(ah));
}
int Engine::attach_mcast(uint32_t qpn, const wire::Gid& mgid) {
  LOCKED(attach_mcast(qpn, mgid));
}
int Engine::detach_mcast(uint32_t qpn, const wire::Gid& mgid) {
  LOCKED(detach_mcast(qpn, mgid));
}
#undef LOCKED

int Engine::qp_counters(uint32_t qpn, QpState& state, uint64_t* out) const {
  std::lock_guard<std::mutex> g(impl_->mu);
  const Qp* qp = impl_->qp_get(qpn);
  if (!qp) return EINVAL;
  state = qp->state.load(std::memory_order_relaxed);
  std::copy(qp->counters.begin(), qp->counters.end(), out);
  return 0;
}

uint32_t Engine::qp_rate_mbps(uint32_t qpn) const {
  std::lock_guard<std::mutex> g(impl_->mu);
  const Qp* qp = impl_->qp_get(qpn);
  if (!qp) return 0;
  double rc = qp->rate.limited ? qp->rate.rc : 0;  // the lower of its own and its path's, when paced
  if (const Qp::Rate* p = impl_->path_rate(*qp); p && p->limited) rc = rc > 0 ? std::min(rc, p->rc) : p->rc;
  return rc > 0 ? static_cast<uint32_t>(std::max(1.0, rc)) : 0;
}

uint64_t Engine::writes_placed() const {
  return std::atomic_ref<uint64_t>(impl_->writes_placed).load(std::memory_order_relaxed);
}

uint64_t Engine::counter(Counter c) const {
  const auto i = static_cast<size_t>(c);
  return i < static_cast<size_t>(Counter::num_counters)
             ? std::atomic_ref<uint64_t>(impl_->counters[i]).load(std::memory_order_relaxed)
             : 0;
}

}  // namespace urxe::engine
