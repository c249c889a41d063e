// Engine front: the public methods, the progress loop, frame rx dispatch and tx batching. The WR behaviour
// table is in wr_table.cc.
#include "engine/engine.h"

#include <cerrno>
#include <climits>
#include <functional>

#include "engine/internal.h"

namespace urxe::engine {

uint16_t udp_sport_connected(uint32_t flow_label, uint32_t lqpn, uint32_t rqpn) {
  uint32_t fl = flow_label & 0xfffff;
  if (fl == 0) {
    uint64_t v = uint64_t{lqpn} * rqpn;
    v ^= v >> 20;
    v ^= v >> 40;
    fl = static_cast<uint32_t>(v & 0xfffff);
  }
  const uint32_t low = (fl & 0x3fff) ^ ((fl & 0xfc000) >> 14);
  return static_cast<uint16_t>(low | 0xc000);
}

uint16_t udp_sport_ud(uint32_t qpn) {
  const uint32_t h = (qpn * 0x61C88647u) >> 18;  // 14-bit multiplicative hash
  return static_cast<uint16_t>(0xc000 | (h & 0x3fff));
}

namespace {
// The SGE a message offset falls in (num_sge: past the list); `offset` becomes the offset inside it.
uint32_t sge_seek(const Sge* sges, uint32_t num_sge, uint64_t& offset) {
  uint32_t i = 0;
  while (i < num_sge && offset >= sges[i].length) offset -= sges[i++].length;
  return i;
}
}  // namespace

bool sge_copy(EngineImpl& e, uint32_t pd, const Sge* sges, uint32_t num_sge, uint64_t offset, uint8_t* data,
              uint32_t len, bool to_sges) {
  uint32_t i = sge_seek(sges, num_sge, offset);
  while (len > 0) {
    if (i >= num_sge) return false;
    const Sge& s = sges[i];
    const uint64_t room = s.length - offset;
    const uint32_t n = static_cast<uint32_t>(room < len ? room : len);
    MrError err;
    uint8_t* p =
        e.mr_resolve(s.lkey, pd, to_sges ? uint32_t{ACCESS_LOCAL_WRITE} : 0u, s.addr + offset, n, err);
    if (!p) return false;
    if (to_sges)
      std::memcpy(p, data, n);
    else
      std::memcpy(data, p, n);
    data += n;
    len -= n;
    offset = 0;
    i++;
  }
  return true;
}

const uint8_t* sge_span(EngineImpl& e, uint32_t pd, const Sge* sges, uint32_t num_sge, uint64_t offset,
                        uint32_t len) {
  const uint32_t i = sge_seek(sges, num_sge, offset);
  if (i >= num_sge || sges[i].length - offset < len) return nullptr;
  MrError err;
  return e.mr_resolve(sges[i].lkey, pd, 0u, sges[i].addr + offset, len, err);
}

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
  mrs.resize(size_t{d.max_mr} + 1);
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

uint8_t* EngineImpl::begin_frame(const wire::FrameSpec& spec, uint32_t payload_len,
                                 const wire::HeaderPrefix* prefix) {
  const uint32_t size = wire::frame_size(spec, payload_len);
  if (tx.size() >= kTxBatch) {
    tx_flush();
    if (tx.size() >= kTxBatch) {  // the port takes nothing: backpressure
      count(Counter::tx_no_buf);
      return nullptr;
    }
  }
  cur_buf.gather = nullptr;
  cur_buf.batch = 0;
  if (!port.tx_alloc(size, cur_buf)) {
    count(Counter::tx_no_buf);
    return nullptr;
  }
  const wire::MutByteSpan out(cur_buf.data, size);
  if (!(prefix ? wire::build_headers(out, *prefix, spec, payload_len, cur_layout)
               : wire::build_headers(out, spec, payload_len, cur_layout))) {
    port.tx_free(cur_buf);
    return nullptr;
  }
  return cur_buf.data + cur_layout.payload_offset;
}

void EngineImpl::finish_frame(bool ack_only) {
  // A port that fills the ICRC where a frame needs one (the same-host path: not on its memory hop) gets
  // none (a UDP checksum covers it, so then it is there).
  wire::seal_frame(wire::MutByteSpan(cur_buf.data, cur_layout.frame_len), cur_layout, !port_icrc_offload);
  cur_buf.icrc_absent = port_icrc_offload && !cur_layout.udp_checksum;
  cur_buf.len = cur_layout.frame_len;
  cur_buf.bth_offset = cur_layout.l3_offset + cur_layout.ip_hdr_len + wire::kUdpLen;
  tx.push_back(cur_buf);
  if (!ack_only) tx_not_ack++;
  // a batch frame counts as the packets it stands for
  count(Counter::sent_pkts, cur_buf.batch ? cur_buf.batch : 1);
  count(Counter::sent_bytes, wire_bytes());
}

uint32_t EngineImpl::wire_bytes() const {
  const uint32_t len = cur_layout.frame_len;  // (a batch's packets are middles: no pad)
  return wire::batch_wire_len(len, len - cur_layout.payload_offset - wire::kIcrcLen, cur_buf.batch);
}

uint32_t EngineImpl::batch_bytes_for(const Qp& q, uint32_t npkts) {
  return port_batch_bytes && npkts >= 4 && !q.prefix.udp_checksum
             ? port.tx_batch_bytes_to(q.spec.dst_mac.data(), q.spec.bth.dqpn)
             : 0;
}

uint32_t EngineImpl::batch_packets(uint32_t batch_bytes, uint32_t mtu, uint64_t rest) {
  const auto k = static_cast<uint32_t>(std::min<uint64_t>(batch_bytes / mtu, (rest - 1) / mtu));
  return std::min({k, Port::kMaxBatch, 0xffffu / mtu});  // (the payload fits gather_len)
}

void EngineImpl::abort_frame() {
  port.tx_free(cur_buf);
}

void EngineImpl::tx_send(std::vector<PacketBuf>& q) {
  // Frames the port does not take now stay queued, in order, for the next flush.
  uint32_t done = 0;
  const uint32_t n = static_cast<uint32_t>(q.size());
  while (done < n) {
    const uint32_t k = port.tx_burst(q.data() + done, n - done);
    if (k == 0) break;
    done += k;
  }
  if (done) q.erase(q.begin(), q.begin() + done);
  // What stays queued may wait past this round, and its application memory may be gone by then.
  for (uint32_t i = done; i < n; i++) make_whole(q[i - done]);
}

void EngineImpl::tx_flush() {
  if (!held.empty()) {
    // A WRITE's hold that nobody answered (a stream, or an app that does not answer) skips the next rounds
    // that place a WRITE, twice as many each time in a row, up to kWriteHoldBackoff; an answered one ends
    // the backoff. (A fixed skip after any unanswered hold made one slow answer, an app off its CPU for a
    // moment, cost the next exchanges their hold; docs/performance.md.)
    if (held_for_write) {
      if (tx_not_ack == 0) {
        write_hold_fails = std::min(write_hold_fails + 1, kWriteHoldMaxFails);
        write_hold_skip = std::min(kWriteHoldBackoff, 1u << (write_hold_fails - 1));
      } else {
        write_hold_fails = 0;
      }
    }
    // After this round's frames and in the same transmit call (on a packet socket one send() per call,
    // which on a veth also delivers to the peer: its app, waiting for this ACK's send completion, would
    // wait for a second call). An ACK of an older PSN behind a newer response of the same QP is a
    // duplicate the requester ignores.
    tx.insert(tx.end(), held.begin(), held.end());
    held.clear();
    held_any.store(false, std::memory_order_relaxed);
  }
  tx_send(tx);
  if (tx.empty()) tx_not_ack = 0;
}

void EngineImpl::rx_frame(PacketBuf& buf) {
  wire::Packet& pkt = rx_pkt;
  wire::ParseOptions opt;
  opt.verify_icrc = config.verify_icrc && !buf.icrc_absent;
  // A frame that came without its ICRC crossed shared memory from another urxe (the same-host path), which
  // cannot corrupt it on the way: its IP header checksum, the sender's own, is not summed again either (as
  // a NIC's receive checksum offload; 2-3 % of the receiving side of a stream between two processes).
  opt.verify_checksums = !buf.icrc_absent;
  const wire::ParseError pe = wire::parse_frame(wire::ByteSpan(buf.data, buf.len), pkt, opt);
  if (pe != wire::ParseError::ok) {
    if (pe != wire::ParseError::not_roce)  // ARP, ND, ... that a raw port passes are not the device's
      count(pe == wire::ParseError::bad_icrc ? Counter::rx_drop_icrc : Counter::rx_drop_parse);
    if (pe != wire::ParseError::not_roce)
      note(pe == wire::ParseError::bad_icrc ? Note::drop_bad_icrc : Note::drop_malformed, pkt.bth.dqpn);
    return;
  }
  const uint32_t dqpn = pkt.bth.dqpn;
  Qp* qp = (dqpn >= config.qpn_base && dqpn - config.qpn_base < qps.size())
               ? qps[dqpn - config.qpn_base].load(std::memory_order_relaxed)
               : nullptr;
  const wire::OpcodeInfo& info = *pkt.info;
  if (info.kind == wire::OpKind::cnp) {  // to the QP whose data was marked (any transport's QP)
    Qp* rq = qp_get(dqpn);
    if (rq && rq->type != QPT_UD && config.dcqcn.rp_enable) {
      const CurQp in_qp(*this, rq);
      rp_cnp_received(*rq);
      activate_locked(*rq);  // its pacing changed
    } else {
      count(Counter::rp_cnp_ignored);
    }
    return;
  }
  const wire::Transport want = !qp                  ? wire::Transport::none
                               : qp->type == QPT_RC ? wire::Transport::rc
                               : qp->type == QPT_UC ? wire::Transport::uc
                                                    : wire::Transport::ud;
  if (!qp || info.transport != want) {
    count(Counter::rx_drop_qpn);
    // another process's QPN block on the same device is not a bad frame
    if (dqpn >= config.qpn_base && dqpn - config.qpn_base < qps.size()) note(Note::drop_unknown_qpn, dqpn);
    return;
  }
  const CurQp in_qp(*this, qp);
  activate_locked(
      *qp);  // whatever this frame does to it (ACK owed, window open, timers) is looked at in its visit
  // P_Key: the only table entry is the default full-membership key.
  if ((pkt.bth.pkey & 0x7fff) != 0x7fff) {
    count(Counter::rx_drop_pkey);
    note(Note::drop_bad_pkey, dqpn);
    return;
  }
  const QpState st = qp->state.load(std::memory_order_relaxed);
  // A batch frame (PacketBuf::batch, from the same-host path): the packets it stands for, one by one, each
  // as if it had come alone. Only a run of full middle packets (requests or READ responses) is one.
  const uint32_t k = buf.batch;
  if (k && (k < 2 || info.position != wire::Position::middle || pkt.bth.pad || pkt.payload_len % k)) {
    count(Counter::rx_drop_parse);
    note(Note::drop_malformed, dqpn);
    return;
  }
  const uint32_t seg = k ? pkt.payload_len / k : pkt.payload_len;
  const uint32_t psn0 = pkt.bth.psn;
  const uint8_t* payload0 = pkt.payload.data();
  auto packet = [&](uint32_t i) -> wire::Packet& {  // the batch's packet i (pkt itself when not a batch)
    if (k) {
      pkt.bth.psn = wire::psn_add(psn0, i);
      pkt.payload = wire::ByteSpan(payload0 + size_t{i} * seg, seg);
      pkt.payload_len = seg;
    }
    return pkt;
  };
  // Whether a batch's packet i still finds its QP in a state that takes it (one before it may have moved
  // the QP to ERR); the rest are dropped as frames arriving then would be.
  auto takes = [&](uint32_t i, bool response) {
    const QpState s = qp->state.load(std::memory_order_relaxed);
    const bool ok = response ? s == QPS_RTS || s == QPS_SQD
                             : s == QPS_RTR || s == QPS_RTS || s == QPS_SQD || s == QPS_SQE;
    if (!ok) count(Counter::rx_drop_qpn, (k ? k : 1) - i);
    return ok;
  };
  if (info.is_response) {
    if (st != QPS_RTS && st != QPS_SQD) {
      count(Counter::rx_drop_qpn);
      note(Note::drop_qp_state, dqpn);
      return;
    }
    count(Counter::rcvd_pkts, k ? k : 1);  // as rxe: frames that passed the header checks and reach a QP
    count(Counter::rcvd_bytes, wire::batch_wire_len(buf.len, pkt.payload_len, k));
    // READ responses are data too: CE on them notifies the responder (ACKs carry no payload to mark)
    if (pkt.payload_len && congested(pkt)) np_ce_received(*qp);
    for (uint32_t i = 0; i < (k ? k : 1) && (i == 0 || takes(i, true)); i++) completer_rx(*qp, packet(i));
    // Complete what this response finished now, before the next frame of the burst: completions then
    // appear in wire order, as on hardware. Apps waiting on one channel for a send and a receive CQ
    // (perftest -e) count on the send completion preceding the receive of the reply it provoked.
    completer_run(*qp);
  } else {
    if (st != QPS_RTR && st != QPS_RTS && st != QPS_SQD && st != QPS_SQE) {
      count(Counter::rx_drop_qpn);
      note(Note::drop_qp_state, dqpn);
      return;
    }
    count(Counter::rcvd_pkts, k ? k : 1);
    count(Counter::rcvd_bytes, wire::batch_wire_len(buf.len, pkt.payload_len, k));
    if (congested(pkt)) np_ce_received(*qp);
    if (st == QPS_RTR && !qp->comm_est && qp->type != QPT_UD) {  // none for UD (IBTA o11-5.1.1)
      qp->comm_est = true;
      async_event(EVENT_COMM_EST, qp->qpn);
    }
    for (uint32_t i = 0; i < (k ? k : 1) && (i == 0 || takes(i, false)); i++)
      responder_rx(*qp, packet(i), buf.data);
  }
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
int Engine::create_cq(uint32_t cqe, uint32_t& cq, uint32_t* actual) {
  LOCKED(create_cq(cqe, cq, actual));
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
int Engine::create_ah(uint32_t pd, const AddressVector& av, uint32_t& ah) {
  LOCKED(create_ah(pd, av, ah));
}
int Engine::destroy_ah(uint32_t ah) {
  LOCKED(destroy_ah(ah));
}
#undef LOCKED

bool Engine::progress() {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->progress_round();
}

bool Engine::try_progress(bool* ran, Round round) {
  std::unique_lock<std::mutex> g(impl_->mu, std::try_to_lock);
  if (ran) *ran = g.owns_lock();
  return g.owns_lock() && impl_->progress_round(round);
}

bool Engine::acks_held() const {
  return impl_->held_any.load(std::memory_order_relaxed);
}

uint32_t EngineImpl::rx_drain(uint32_t limit) {
  const uint32_t burst = static_cast<uint32_t>(rx.size());
  uint32_t total = 0;
  while (total < limit) {
    const uint32_t n = port.rx_burst(rx.data(), burst);
    // every burst so far came back full: the frames now read waited behind `total` others in the ring
    rx_backlogged = rx_mark_frames && total >= rx_mark_frames;
    for (uint32_t i = 0; i < n; i++) rx_frame(rx[i]);
    rx_backlogged = false;
    if (n) port.rx_free(rx.data(), n);
    total += n;
    if (n < burst) break;
  }
  return total;
}

bool EngineImpl::progress_round(Engine::Round round) {
  EngineImpl& e = *this;
  const bool app_round = round == Engine::Round::app;
  e.now = e.clock.now_ns();
  const uint64_t cq_mark = e.cq_posts, event_mark = e.comp_events, write_mark = e.writes_placed;
  if (e.held.empty()) e.n_cq_marks = 0;
  // Only a round that may hold ACKs, or one while some are held, needs to know which completions it wrote.
  e.mark_cqes = (app_round && e.config.hold_acks) || !e.held.empty();
  const uint32_t burst = static_cast<uint32_t>(e.rx.size());
  // At least four bursts, and past the marking threshold: frames that deep in the ring are the ones marked.
  bool did = e.rx_drain(std::max(4 * burst, e.rx_mark_frames + 2 * burst)) > 0;
  // due timers: their QPs get a visit
  const uint64_t stall_before = e.stall_ns;
  while (!e.wakes.empty() && e.wakes.front().t <= e.now) {
    const Wake w = e.wakes.front();
    std::pop_heap(e.wakes.begin(), e.wakes.end(), std::greater<>{});
    e.wakes.pop_back();
    Qp* q = e.qps[w.index].load(std::memory_order_relaxed);
    if (q && q->scheduled_wake == w.t) {
      q->scheduled_wake = UINT64_MAX;
      if (e.stall_ns == stall_before) e.note_late_wake(*q, w.t);  // the earliest due: the whole delay
      e.activate_locked(*q);
    }
  }
  // The receive ring is drained as fast as this round sends: for every burst of frames out, up to two bursts
  // in. A round that sent the window of many QPs before reading again let the peer's ACKs overflow the ring
  // (counted as rx_ring_drops); the lost ACKs then cost timeouts and resends of whole windows.
  const uint64_t& sent = e.counters[static_cast<size_t>(Counter::sent_pkts)];
  uint64_t sent_mark = sent;
  // The active QPs in index order from walk_start round to it again. The next round starts right after the
  // last QP that sent in this one: when the windows of all QPs cannot fit the path, the same QPs must not
  // always be the ones whose frames come last (and that a full queue drops), and when a shared path rate
  // lets only a few QPs send per round, the turns go round.
  // Words with bits are taken (the top word first, then each summary word it names, then each word); a bit
  // set meanwhile stays for the next round.
  uint32_t nw = 0, n_active = 0;
  uint64_t top =
      e.active_top.load(std::memory_order_relaxed) ? e.active_top.exchange(0, std::memory_order_seq_cst) : 0;
  const size_t n_words = e.active_words.size();
  while (top) {
    const size_t g = static_cast<size_t>(__builtin_ctzll(top));
    top &= top - 1;
    const size_t end = std::min(n_words, (g + 1) << e.active_top_shift);
    for (size_t s = g << e.active_top_shift; s < end; s++) {
      uint64_t sum = e.active_words[s].load(std::memory_order_relaxed)
                         ? e.active_words[s].exchange(0, std::memory_order_seq_cst)
                         : 0;
      while (sum) {
        const uint32_t w = static_cast<uint32_t>(s * 64 + static_cast<size_t>(__builtin_ctzll(sum)));
        sum &= sum - 1;
        const uint64_t bits = e.active[w].exchange(0, std::memory_order_acquire);
        if (bits) e.taken[nw++] = {w, bits};
        n_active += static_cast<uint32_t>(__builtin_popcountll(bits));
      }
    }
  }
  // Each QP's turn sends at most visit_budget frames, so that a turn of every active QP stays near
  // kRoundFrames frames (at least 8 each: a QP's visit costs, and 4 took a third off 1,000 QPs' rate at MTU
  // 9000): with tx_budget for each of 1,000 QPs, a QP that pacing stopped in the middle of a message waited
  // 64,000 frames (~250 ms through a veth) for its next turn, past the retransmit timeout, and the QPs
  // first in a round got more than the others.
  e.visit_budget =
      std::clamp(kRoundFrames / std::max(n_active, 1u), std::min(8u, e.config.tx_budget), e.config.tx_budget);
  int64_t last_sender = -1;
  auto visit = [&](uint32_t word, uint64_t bits) {
    while (bits) {
      const uint32_t i = word * 64 + static_cast<uint32_t>(__builtin_ctzll(bits));
      bits &= bits - 1;
      Qp* qp = e.qps[i].load(std::memory_order_relaxed);
      if (!qp) continue;
      const uint64_t sent_before = sent;
      {
        const CurQp in_qp(e, qp);
        if (e.completer_run(*qp)) did = true;
        if (e.responder_tx(*qp, e.visit_budget)) did = true;
        if (e.requester_run(*qp)) did = true;
        if (e.completer_run(*qp)) did = true;
      }
      e.schedule(*qp);
      if (sent != sent_before) last_sender = i;
      if (sent - sent_mark >= burst) {
        e.tx_flush();
        if (e.rx_drain(2 * burst)) did = true;
        sent_mark = sent;
      }
    }
  };
  // from walk_start round to it again: the taken words in index order, the first one split at walk_start
  const uint32_t start = e.walk_start, sw = start >> 6, sb = start & 63;
  const uint64_t low = sb ? (uint64_t{1} << sb) - 1 : 0;
  uint32_t k0 = 0;
  while (k0 < nw && e.taken[k0].word < sw) k0++;
  for (uint32_t k = 0; k < nw; k++) {
    const auto [w, bits] = e.taken[(k0 + k) % nw];
    visit(w, w == sw ? bits & ~low : bits);
  }
  for (uint32_t k = 0; k < nw; k++)
    if (e.taken[k].word == sw) visit(sw, e.taken[k].bits & low);
  // A QP that the full port (or its budget) stopped in the middle of a message goes first next round: its
  // message's last packets carry the AckReq, and waiting for every other QP's turn first they waited past
  // the retransmit timeout with nothing lost.
  if (last_sender >= 0) {
    const Qp* q = e.qps[static_cast<uint32_t>(last_sender)].load(std::memory_order_relaxed);
    e.walk_start = static_cast<uint32_t>(last_sender) + (q && q->req.offset != 0 ? 0 : 1);
  }
  // An app round that completed work and has only ACKs to send keeps them until the app answers: it
  // answers a completion (ib_send_lat: a SEND) within a microsecond or two, and the answer then leaves
  // first, in the same transmit call, instead of waiting for the ACKs' own (a veth's transmit also runs the
  // receiving side's softirq, microseconds). The app's later rounds keep them while they make no other
  // frame and a completion written since is still unread (the app polls again before it answers: perftest
  // waits for its SEND's completion, then polls the receive CQ), for kAckHoldNs at most; then, or with
  // the first other frame (after it), or in a round of the progress thread, they go.
  // Nor does a round that raised a completion event hold anything: its app learns of the completion from
  // a channel, and the hold would put its peer's events in another order than a NIC that ACKs at once
  // gives (the answer's receive completion before the ACK's send completion). An app that takes both CQs'
  // events from one channel and polls the CQ it expects (Debian's perftest 4.5-0.17 with -e) then waits
  // for good (engine/README.md).
  // A WRITE placed in memory (no completion: its app may spin on that memory, as ib_write_lat and MPI's
  // eager protocols do) holds its ACK the same way, in the app's rounds and in the progress thread's
  // (which reads such frames when the app does not poll, and wakes by next_deadline_ns): the app's
  // answer, a post that runs a round itself (Engine::acks_held), then carries it in one transmit call,
  // and the peer takes both frames in one wake-up instead of two. While a hold for a WRITE waits, a
  // round that places another WRITE sends it (a stream, not an exchange), and a hold that nobody answered
  // lets the next rounds that place a WRITE send their ACKs at once (1, 2, 4 ... kWriteHoldBackoff of them
  // in a row: tx_flush).
  if (round != Engine::Round::other && e.config.hold_acks && e.tx_not_ack == 0 &&
      e.comp_events == event_mark) {
    const bool placed = e.writes_placed != write_mark;
    if (e.held.empty()) {
      const bool for_cqe = app_round && e.cq_posts != cq_mark;
      const bool for_write = placed && e.write_hold_skip == 0;
      if (placed && e.write_hold_skip) e.write_hold_skip--;
      if (!e.tx.empty() && (for_cqe || for_write)) {
        e.held.swap(e.tx);  // both keep the same capacity: no allocation
        e.held_since = e.now;
        e.held_for_write = !for_cqe;
        e.held_any.store(true, std::memory_order_relaxed);
        return did;
      }
    } else if (e.now - e.held_since < Engine::kAckHoldNs &&
               (e.held_for_write ? !placed : app_round && e.cqe_unread()) &&
               e.held.size() + e.tx.size() <= e.held.capacity()) {
      e.held.insert(e.held.end(), e.tx.begin(), e.tx.end());
      e.tx.clear();
      return did;
    }
  }
  e.tx_flush();
  return did;
}

bool EngineImpl::cqe_unread() const {
  for (uint32_t i = 0; i < n_cq_marks; i++) {
    const CqMark& m = cq_marks[i];
    const Cq* c = cq_get(m.handle);
    if (c && static_cast<int32_t>(m.prod - c->ring.cons.load(std::memory_order_acquire)) > 0) return true;
  }
  return false;
}

uint64_t EngineImpl::qp_wake(const Qp& q, bool& paced) const {
  paced = false;
  const QpState st = q.state.load(std::memory_order_relaxed);
  if (q.flush_needed) return 0;
  if ((st == QPS_ERR || st == QPS_SQE) &&
      q.sq.cons.load(std::memory_order_relaxed) != q.sq.prod.load(std::memory_order_acquire))
    return 0;
  if (st == QPS_ERR && !q.srq &&
      q.rq.ring.cons.load(std::memory_order_relaxed) != q.rq.ring.prod.load(std::memory_order_acquire))
    return 0;
  uint64_t best = UINT64_MAX, pace = 0;
  if (res_pending(q)) {
    pace = paced_until(q);  // READ responses wait for their rate (and ACKs behind them)
    if (!pace) return 0;
    best = pace;
  } else if (q.resp.ack_pending) {
    return 0;
  }
  if (q.comp.rnr_until) {
    best = std::min(best, q.comp.rnr_until);
  } else if (!requester_blocked(q)) {
    return 0;
  } else if (const uint64_t t = paced_until(q); t && q.req.idx != q.sq.prod.load(std::memory_order_acquire)) {
    pace = t;
    best = std::min(best, t);  // paced: it may send again then
  }
  if (q.comp.timer_deadline) best = std::min(best, q.comp.timer_deadline);
  if (q.comp.probe_deadline && (st == QPS_RTS || st == QPS_SQD)) best = std::min(best, q.comp.probe_deadline);
  paced = pace != 0 && best == pace;
  return best;
}

void EngineImpl::schedule(Qp& q) {
  bool paced = false;
  const uint64_t t = qp_wake(q, paced);
  if (t <= now) {
    activate_locked(q);
  } else if (t != UINT64_MAX && t < q.scheduled_wake) {
    if (wakes.size() == wakes.capacity()) {
      // full of stale entries: keep one per QP, its live one (no allocation here; at most one per QP
      // remains, and create_qp keeps room for two)
      std::erase_if(wakes, [this](const Wake& w) {
        const Qp* o = qps[w.index].load(std::memory_order_relaxed);
        return !o || o->scheduled_wake != w.t;
      });
      std::sort(wakes.begin(), wakes.end(), [](const Wake& a, const Wake& b) { return a.index < b.index; });
      wakes.erase(std::unique(wakes.begin(), wakes.end(),
                              [](const Wake& a, const Wake& b) { return a.index == b.index; }),
                  wakes.end());
      std::make_heap(wakes.begin(), wakes.end(), std::greater<>{});
    }
    q.scheduled_wake = t;
    q.wake_paced = paced;
    wakes.push_back({t, q.index});
    std::push_heap(wakes.begin(), wakes.end(), std::greater<>{});
  }
}

uint64_t Engine::next_deadline_ns(bool wait_for_lock, bool* lock_busy) const {
  EngineImpl& e = *impl_;
  std::unique_lock<std::mutex> g(e.mu, std::defer_lock);
  const bool busy = !wait_for_lock && !g.try_lock();
  if (lock_busy) *lock_busy = busy;
  if (busy) return 0;
  if (!g.owns_lock()) g.lock();
  if (!e.tx.empty()) return 0;
  for (const auto& w : e.active_words)
    if (w.load(std::memory_order_acquire)) return 0;
  // ACKs an app round held: the app's next round that makes a frame sends them, any round once they
  // waited kAckHoldNs
  const uint64_t hold = e.held.empty() ? UINT64_MAX : e.held_since + Engine::kAckHoldNs;
  // the earliest live timer (stale entries on top are dropped here)
  while (!e.wakes.empty()) {
    const EngineImpl::Wake w = e.wakes.front();
    const Qp* q = e.qps[w.index].load(std::memory_order_relaxed);
    if (q && q->scheduled_wake == w.t) return std::min(w.t, hold);
    std::pop_heap(e.wakes.begin(), e.wakes.end(), std::greater<>{});
    e.wakes.pop_back();
  }
  return hold;
}

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
