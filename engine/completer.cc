// Completer: consumes ACKs, NAKs, READ responses and atomic ACKs, completes send WQEs in order, runs the
// retransmit timer (4.096 µs × 2^timeout, retry_cnt) and RNR waits (IBTA Table 45, rnr_retry, 7 = forever),
// and turns fatal outcomes into error completions followed by WR_FLUSH_ERR for the rest.
#include "engine/internal.h"

namespace urxe::engine {

bool EngineImpl::send_completion(const Qp& q, const SendWqe& w, Wc& wc) const {
  const bool signaled = q.sq_sig_all || (w.send_flags & SEND_SIGNALED);
  if ((!signaled && w.status == WC_SUCCESS) || (w.send_flags & kSendTmInternal)) return false;
  wc = Wc{};
  wc.wr_id = w.wr_id;
  wc.status = w.status;
  const WrInfo& info = wr_info(w.opcode);
  wc.opcode = info.wc_opcode;
  wc.byte_len = info.is_atomic ? 8u : static_cast<uint32_t>(w.length);
  wc.qp_num = q.qpn;
  return true;
}

void EngineImpl::retire_send(Qp& q, SendWqe& w, uint32_t& cons) {
  // Free the slot before the completion is visible: an app that polls it may post again at once into a
  // queue it sized to exactly its outstanding WRs (ibv_rc_pingpong -e with max_send_wr 1).
  Wc wc;
  if (w.send_flags & kSendTmInternal) [[unlikely]]
    tm_send_retired(q, w, w.status);  // the NIC's own READ/FIN of a rendezvous (tag_matching.cc)
  const bool post = send_completion(q, w, wc);
  w.started = w.sent_all = w.done = false;
  cons++;
  q.sq.cons.store(cons, std::memory_order_release);
  if (post) cq_post(*q.scq, wc, false);
}

namespace {

// The timeout grows with each retry spent since the last progress, up to 4x (IBTA lets the transport timer
// run up to four times the nominal value): a slow peer that is only behind gets time to catch up before the
// retries run out, instead of another window of resends every nominal timeout. It is also jittered (up to
// +1/4 for the first, −1/8 for later ones, inside those bounds): QPs that lost frames together in one
// overflow must not all time out and resend their windows into the same queue at the same instant again.
uint64_t backoff_ns(EngineImpl& e, const Qp& q) {
  const uint32_t spent = q.attr.retry_cnt > q.comp.retry_left ? q.attr.retry_cnt - q.comp.retry_left : 0u;
  const uint64_t d = retransmit_timeout_ns(q.attr.timeout) << (spent < 2 ? spent : 2u);
  uint64_t& x = e.jitter_state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  const uint64_t u = x >> 48;  // 16 random bits
  return spent == 0 ? d + ((d >> 2) * u >> 16) : d - ((d >> 3) * u >> 16);
}

// What a tail loss probe resends: the last packet, except for a READ, whose unanswered part is asked for
// again from its first missing response. A request for a READ's tail alone would make kernel rxe replay
// that tail and remember its address as the READ's start, after which it drops every request for the
// READ that starts lower (the go-back that a gap in the responses causes): the QP would then exhaust its
// retries against a live peer.
uint32_t probe_psn(const Qp& q) {
  const uint32_t last = wire::psn_sub(q.req.sent_end, 1);
  const uint32_t prod = q.sq.prod.load(std::memory_order_acquire);
  for (uint32_t i = q.sq.cons.load(std::memory_order_relaxed); i != prod; i++) {
    const SendWqe& w = q.sq.at(i);
    if (!w.started) break;
    if (wire::psn_ge(last, w.first_psn) && wire::psn_le(last, w.last_psn))
      return wr_info(w.opcode).is_read && wire::psn_le(w.resp_psn, last) ? w.resp_psn : last;
  }
  return last;
}

void restart_timer(EngineImpl& e, Qp& q) {
  q.comp.timer_deadline = (q.comp.una_psn != q.req.sent_end && q.attr.timeout) ? e.now + backoff_ns(e, q) : 0;
}

// Marks the WQE that PSN `psn` belongs to (the oldest outstanding one when psn is UINT32_MAX) failed with
// `status` and moves the QP to ERR; qp_flush then completes the WQEs before it that were acknowledged, this
// one with its status, and flushes the rest (IBTA 10.8.3.3).
void fail_wqe(EngineImpl& e, Qp& q, WcStatus status, uint32_t psn = UINT32_MAX) {
  const uint32_t prod = q.sq.prod.load(std::memory_order_acquire);
  SendWqe* target = nullptr;
  for (uint32_t i = q.sq.cons.load(std::memory_order_relaxed); i != prod; i++) {
    SendWqe& w = q.sq.at(i);
    if (w.done && w.status == WC_SUCCESS) continue;
    if (!target) target = &w;  // the oldest outstanding, the default
    if (psn == UINT32_MAX) break;
    if (!w.started) break;
    if (wr_info(w.opcode).is_local) continue;
    if (wire::psn_ge(psn, w.first_psn) && wire::psn_le(psn, w.last_psn)) {
      target = &w;
      break;
    }
  }
  if (target) {
    target->status = status;
    target->started = target->sent_all = target->done = true;
  }
  e.log_qp_error(q, status, psn);
  if (q.reliable) {
    e.qp_set_error(q, false, EVENT_QP_FATAL);
  } else {
    q.state.store(QPS_SQE, std::memory_order_release);
    q.attr.qp_state = QPS_SQE;
    q.flush_needed = true;
  }
}

void rtt_sample(uint64_t& srtt, uint64_t& rttvar, uint64_t sample) {
  if (!srtt) {
    srtt = sample;
    rttvar = sample / 2;
    return;
  }
  const uint64_t dev = sample > srtt ? sample - srtt : srtt - sample;
  rttvar = (3 * rttvar + dev) / 4;
  srtt = (7 * srtt + sample) / 8;
}

// Everything through `psn` is acknowledged. READs and atomics are only done once their data arrived: an
// ACK beyond one that is not means its responses were lost, so the requester goes back to re-ask.
// Returns whether anything new was acknowledged.
bool ack_upto(EngineImpl& e, Qp& q, uint32_t psn) {
  if (wire::psn_lt(psn, wire::psn_sub(q.comp.una_psn, 1)) || !wire::psn_lt(psn, q.req.sent_end)) return false;
  bool progress = false;
  uint64_t sample_ns = 0;  // round trip of the newest WQE this acknowledges (not resent)
  const uint32_t prod = q.sq.prod.load(std::memory_order_acquire);
  uint32_t new_una = wire::psn_add(psn, 1);
  for (uint32_t i = q.sq.cons.load(std::memory_order_relaxed); i != prod; i++) {
    SendWqe& w = q.sq.at(i);
    if (!w.started) break;
    const WrInfo& info = wr_info(w.opcode);
    if (info.is_local || w.done) continue;
    if (info.is_atomic_write && psn == w.last_psn) {
      // its RDMA READ RESPONSE ONLY is the answer Annex A19 gives; a plain ACK of exactly its PSN (what
      // kernel rxe's completer also takes) answers it too
      w.done = true;
      progress = true;
      continue;
    }
    if (info.is_read || info.is_atomic) {
      // only its own responses acknowledge a READ/atomic: una stops at the first response still missing
      const uint32_t from = info.is_read ? w.resp_psn : w.first_psn;
      if (wire::psn_lt(from, new_una)) new_una = from;
      if (wire::psn_lt(psn, w.last_psn)) break;
      if (!(q.comp.retry_marker && q.comp.marker_psn == from)) {
        q.comp.retry_marker = true;
        q.comp.marker_psn = from;
        e.go_back(q, from);
      }
      break;
    }
    if (wire::psn_lt(psn, w.last_psn)) break;
    w.done = true;
    progress = true;
    if (w.sent_ns && wire::psn_ge(w.first_psn, q.comp.karn_psn))
      sample_ns = std::max<uint64_t>(e.now - w.sent_ns, 1);
  }
  if (wire::psn_gt(new_una, q.comp.una_psn)) {
    q.comp.una_psn = new_una;
    progress = true;
  }
  if (progress) {
    if (sample_ns) {
      // RFC 6298's estimators: a round trip that grows with a queue raises the deviation at once
      rtt_sample(q.comp.srtt_ns, q.comp.rttvar_ns, sample_ns);
      rtt_sample(e.srtt_any_ns, e.rttvar_any_ns, sample_ns);
    }
    q.comp.probed = false;
    q.comp.retry_left = q.attr.retry_cnt;
    q.comp.rnr_left = q.attr.rnr_retry;
    if (q.comp.rnr_until && wire::psn_lt(q.comp.rnr_psn, q.comp.una_psn))
      q.comp.rnr_until = 0;  // the RNR'd request got through
    // an ACK past the requester's go-back position: skip what is already acknowledged
    if (wire::psn_lt(q.req.next_psn, q.comp.una_psn)) e.go_back(q, q.comp.una_psn);
    restart_timer(e, q);
    e.arm_probe(q);
  }
  return progress;
}

// The oldest WQE not yet done (skipping executed LOCAL_INVs); nullptr when none is outstanding.
SendWqe* head_wqe(Qp& q) {
  const uint32_t prod = q.sq.prod.load(std::memory_order_acquire);
  for (uint32_t i = q.sq.cons.load(std::memory_order_relaxed); i != prod; i++) {
    SendWqe& w = q.sq.at(i);
    if (!w.started) return nullptr;
    if (w.done) continue;
    return &w;
  }
  return nullptr;
}

}  // namespace

void EngineImpl::restart_retransmit_timer(Qp& q) {
  restart_timer(*this, q);
}

namespace {

// The steps of completer_rx, after rxe's completer states: an ACK or NAK (check_ack: ACK, RNR NAK, NAK by
// its AETH syndrome), a response checked against the oldest outstanding WQE (check_psn), then its data
// (do_read, do_atomic) and what it acknowledges (complete_ack). File-local so that they inline.

// Whether `psn` is sent and not yet acknowledged: what a NAK or response may answer.
bool psn_outstanding(const Qp& q, uint32_t psn) {
  return wire::psn_ge(psn, q.comp.una_psn) && wire::psn_lt(psn, q.req.sent_end);
}

void ack_received(EngineImpl& e, Qp& q, uint32_t psn) {
  if (!ack_upto(e, q, psn)) {
    e.count(Counter::rx_drop_stale_response);
    // A repeated ACK of the newest acknowledged PSN answers request packets the responder already
    // had: it is alive and working through what we sent, only behind (a slow peer with a queue of
    // our resends). Restart the timer without spending a retry, else every timeout adds another
    // window of resends to its queue until the retries run out while it is still acknowledging.
    if (psn == wire::psn_sub(q.comp.una_psn, 1) && q.comp.timer_deadline) restart_timer(e, q);
  }
}

// Receiver not ready: everything before `psn` is acknowledged; wait the RNR time the AETH gives (IBTA
// Table 45), then resend from `psn` (completer_run), unless the RNR retries are spent.
void rnr_nak_received(EngineImpl& e, Qp& q, uint32_t psn, uint8_t timer) {
  if (!psn_outstanding(q, psn)) return;
  ack_upto(e, q, wire::psn_sub(psn, 1));
  e.count(Counter::rcvd_rnr_err);
  e.note(Note::rnr_nak_received, q.qpn);
  if (q.comp.rnr_left == 0) {
    e.count(Counter::retry_rnr_exceeded_err);
    fail_wqe(e, q, WC_RNR_RETRY_EXC_ERR, psn);
    return;
  }
  if (q.attr.rnr_retry != 7) q.comp.rnr_left--;
  // From the clock read now: a NAK read in the middle of a long round (rx after a burst sent) came after
  // the round's `now`, and the wait is a lower bound (IBTA: no resend before the timer has run out).
  q.comp.rnr_until = e.clock.now_ns() + wire::rnr_timer_ns(timer);
  if (q.comp.rnr_until == 0) q.comp.rnr_until = 1;
  q.comp.rnr_psn = psn;
  q.comp.timer_deadline = 0;
}

// The completion status of a NAK other than a PSN sequence error.
WcStatus nak_status(wire::NakCode code) {
  return code == wire::NakCode::invalid_request            ? WC_REM_INV_REQ_ERR
         : code == wire::NakCode::remote_access_error      ? WC_REM_ACCESS_ERR
         : code == wire::NakCode::remote_operational_error ? WC_REM_OP_ERR
         : code == wire::NakCode::invalid_rd_request       ? WC_REM_INV_RD_REQ_ERR
                                                           : WC_BAD_RESP_ERR;
}

// A NAK: everything before `psn` is acknowledged; a PSN sequence error resends from `psn`, any other code
// fails the WQE it names, at once or once the answers to earlier WQEs are in (completer_run).
void nak_received(EngineImpl& e, Qp& q, uint32_t psn, wire::NakCode code) {
  if (!psn_outstanding(q, psn)) return;
  ack_upto(e, q, wire::psn_sub(psn, 1));
  if (code == wire::NakCode::psn_seq_error) {
    e.count(Counter::rcvd_seq_err);
    e.go_back(q, psn);
    restart_timer(e, q);
    return;
  }
  const WcStatus st = nak_status(code);
  // READ responses / atomic ACKs for earlier WQEs may still be on their way (the responder sent
  // them before this NAK; the network may have reordered them): wait for them up to one
  // retransmit timeout before the error takes the QP down. A NAK of a packet of the oldest WQE
  // itself (a long SEND that overflows the receive buffer, NAKed at the packet that overflows)
  // fails it at once.
  const SendWqe* h = head_wqe(q);
  if (h && wire::psn_lt(h->last_psn, psn)) {
    q.comp.nak_pending = true;
    q.comp.nak_psn = psn;
    q.comp.nak_status = st;
    q.comp.timer_deadline =
        e.now + (q.attr.timeout ? retransmit_timeout_ns(q.attr.timeout) : retransmit_timeout_ns(14));
    return;
  }
  fail_wqe(e, q, st, psn);
}

// check_ack: an ACK, RNR NAK or NAK by its AETH syndrome.
void check_ack(EngineImpl& e, Qp& q, const wire::Packet& pkt) {
  const uint32_t psn = pkt.bth.psn;
  const wire::Aeth& a = pkt.aeth;
  switch (a.type()) {
    case wire::AethType::ack:
      ack_received(e, q, psn);
      return;
    case wire::AethType::rnr_nak:
      rnr_nak_received(e, q, psn, a.value());
      return;
    case wire::AethType::nak:
      nak_received(e, q, psn, static_cast<wire::NakCode>(a.value()));
      return;
    default:
      e.count(Counter::rx_drop_bad_response);
      return;
  }
}

// do_atomic: the atomic ACK of WQE w (its only PSN) brings the original value to w's SGE; w is done.
void do_atomic(EngineImpl& e, Qp& q, SendWqe& w, const WrInfo& wi, const wire::Packet& pkt) {
  const uint32_t psn = pkt.bth.psn;
  if (!wi.is_atomic || wi.is_atomic_write || w.first_psn != psn) {
    e.count(Counter::rx_drop_bad_response);
    return;
  }
  uint8_t orig[8];
  const uint64_t v = pkt.atomic_ack_eth.orig_data;
  std::memcpy(orig, &v, 8);  // host order, as verbs returns it
  if (!sge_copy(e, q.pd, q.sq_sges.data() + w.sge_base, w.num_sge, 0, orig, 8, true))
    w.status = WC_LOC_PROT_ERR;
  w.done = true;
  q.comp.retry_marker = false;
  ack_upto(e, q, psn);
  restart_timer(e, q);
}

// A READ response of w past the one expected next: a response went missing, so ask again for the rest,
// once per gap.
void read_response_gap(EngineImpl& e, Qp& q, SendWqe& w, uint32_t psn) {
  if (wire::psn_gt(psn, w.resp_psn) && !(q.comp.retry_marker && q.comp.marker_psn == w.resp_psn)) {
    q.comp.retry_marker = true;
    q.comp.marker_psn = w.resp_psn;
    e.count(Counter::rcvd_seq_err);
    e.go_back(q, w.resp_psn);
  }
  // responses past a gap still show the responder at work (behind a queue on a slow path): restart
  // the timer, as for a repeated ACK, so a timeout does not resend what is already on its way
  restart_timer(e, q);
}

// do_read: a READ response of WQE w, in order and of the size its place in the message requires, scattered
// into w's SGEs; the last one completes w.
void do_read(EngineImpl& e, Qp& q, SendWqe& w, const WrInfo& wi, const wire::Packet& pkt) {
  const uint32_t psn = pkt.bth.psn;
  if (wi.is_atomic_write) {
    // its answer: an RDMA READ RESPONSE ONLY without payload (Annex A19), at its PSN
    if (pkt.info->kind != wire::OpKind::rdma_read_response || !pkt.info->is_first() || !pkt.info->is_last() ||
        pkt.payload_len != 0 || psn != w.first_psn) {
      e.count(Counter::rx_drop_bad_response);
      return;
    }
    q.comp.retry_marker = false;
    ack_upto(e, q, psn);  // completes it (its last PSN)
    restart_timer(e, q);
    return;
  }
  if (pkt.info->kind != wire::OpKind::rdma_read_response || !wi.is_read || wire::psn_lt(psn, w.first_psn) ||
      wire::psn_gt(psn, w.last_psn)) {
    e.count(Counter::rx_drop_bad_response);
    return;
  }
  if (psn != w.resp_psn) {
    read_response_gap(e, q, w, psn);
    return;
  }
  const uint32_t len = pkt.payload_len;
  const bool last = pkt.info->is_last();
  if (len > q.mtu || (!last && len != q.mtu) || w.resp_offset + len > w.length ||
      (last && w.resp_offset + len != w.length)) {
    e.count(Counter::rx_drop_bad_response);
    return;
  }
  if (len && !sge_copy(e, q.pd, q.sq_sges.data() + w.sge_base, w.num_sge, w.resp_offset,
                       const_cast<uint8_t*>(pkt.payload.data()), len, true)) {
    w.status = WC_LOC_PROT_ERR;
    w.done = true;
    return;
  }
  w.resp_offset += len;
  w.resp_psn = wire::psn_add(w.resp_psn, 1);
  q.comp.retry_marker = false;
  q.comp.retry_left = q.attr.retry_cnt;
  if (last) {
    w.done = true;
    ack_upto(e, q, psn);
  } else if (wire::psn_gt(psn, q.comp.una_psn) || psn == q.comp.una_psn) {
    q.comp.una_psn = wire::psn_add(psn, 1);
  }
  restart_timer(e, q);
}

}  // namespace

void EngineImpl::completer_rx(Qp& q, const wire::Packet& pkt) {
  if (!q.reliable) {
    count(Counter::rx_drop_opcode);
    return;
  }
  if (pkt.info->kind == wire::OpKind::ack) {
    check_ack(*this, q, pkt);
    return;
  }
  // check_psn: READ responses and atomic ACKs acknowledge everything before them
  const uint32_t psn = pkt.bth.psn;
  if (!psn_outstanding(q, psn)) {
    count(Counter::rx_drop_stale_response);  // an old duplicate
    return;
  }
  ack_upto(*this, q, wire::psn_sub(psn, 1));
  SendWqe* w = head_wqe(q);
  if (!w) return;
  const WrInfo& wi = wr_info(w->opcode);
  if (pkt.info->kind == wire::OpKind::atomic_ack)
    do_atomic(*this, q, *w, wi, pkt);
  else
    do_read(*this, q, *w, wi, pkt);
}

namespace {

// The steps of completer_run: the flush of a QP in ERR or SQE, in-order completions (complete_wqe), and the
// timers: tail loss probe, an error NAK held for earlier answers, RNR wait, retransmit timer.

// ERR / SQE: flushes what is left in the queues (qp_flush). Returns whether there was anything.
bool flush_if_pending(EngineImpl& e, Qp& q, QpState st) {
  const bool pending =
      q.flush_needed ||
      q.sq.cons.load(std::memory_order_relaxed) != q.sq.prod.load(std::memory_order_acquire) ||
      (st == QPS_ERR && !q.srq &&
       q.rq.ring.cons.load(std::memory_order_relaxed) != q.rq.ring.prod.load(std::memory_order_acquire));
  if (pending) e.qp_flush(q);
  return pending;
}

// The failed WQE at `cons`, the oldest: RC: the QP goes to ERR; UC/UD: the send queue goes to SQE. qp_flush
// reports this WQE with its own status and flushes the rest.
void send_queue_error(EngineImpl& e, Qp& q, const SendWqe& w, uint32_t cons) {
  e.log_qp_error(q, w.status, UINT32_MAX);
  if (q.reliable) {
    e.qp_set_error(q, false, EVENT_QP_FATAL);
  } else {
    q.state.store(QPS_SQE, std::memory_order_release);
    q.attr.qp_state = QPS_SQE;
  }
  q.sq.cons.store(cons, std::memory_order_release);
  e.qp_flush(q);
}

// Tail loss probe: the last packet again, once per stall, when the requester is not resending already and
// it is a tail (a paced QP with more to send provokes an answer with its next packet; its next new packet
// arms the probe again). It is a retransmission, so it spends a retry: retry_cnt bounds how often a request
// is sent again without progress, whatever made it go again (retry_cnt 0: never). Returns whether it probed.
bool tail_loss_probe(EngineImpl& e, Qp& q) {
  if (!q.comp.probe_deadline || e.now < q.comp.probe_deadline) return false;
  q.comp.probe_deadline = 0;
  if (q.comp.probed || !q.reliable || q.comp.nak_pending || q.comp.una_psn == q.req.sent_end ||
      q.comp.rnr_until || q.req.next_psn != q.req.sent_end || q.comp.retry_left == 0 ||
      (q.comp.timer_deadline && e.now >= q.comp.timer_deadline) ||
      (e.paced_until(q) && q.req.idx != q.sq.prod.load(std::memory_order_acquire)))
    return false;
  q.comp.probed = true;
  q.comp.retry_left--;
  e.count(Counter::tail_loss_probes);
  e.go_back(q, probe_psn(q));
  return true;
}

// An error NAK waiting for earlier READ/atomic answers: applied once they are in. If they do not come
// within a retransmit timeout they never will (the responder is in ERR and answers nothing): the oldest
// unanswered WQE then fails as a transport retry failure, and everything after it is flushed. Returns
// whether a WQE failed.
bool apply_pending_nak(EngineImpl& e, Qp& q) {
  const SendWqe* h = head_wqe(q);
  if (!h || !wire::psn_lt(h->last_psn, q.comp.nak_psn)) {
    q.comp.nak_pending = false;
    fail_wqe(e, q, q.comp.nak_status, q.comp.nak_psn);
    return true;
  }
  if (e.now >= q.comp.timer_deadline) {
    q.comp.nak_pending = false;
    e.count(Counter::retry_exceeded_err);
    fail_wqe(e, q, WC_RETRY_EXC_ERR);
    return true;
  }
  return false;
}

// RNR wait over: resend from the NAKed PSN. Returns whether it was.
bool rnr_wait_over(EngineImpl& e, Qp& q) {
  if (!q.comp.rnr_until || e.now < q.comp.rnr_until) return false;
  q.comp.rnr_until = 0;
  e.go_back(q, q.comp.rnr_psn);
  restart_timer(e, q);
  return true;
}

// The retransmit timer ran out: stopped if nothing is outstanding; the oldest WQE fails when the retries
// are spent; else a retry resends from the oldest unacknowledged PSN. Returns whether it did either.
bool retransmit_timer_expired(EngineImpl& e, Qp& q) {
  if (!q.comp.timer_deadline || e.now < q.comp.timer_deadline) return false;
  if (q.comp.una_psn == q.req.sent_end) {
    q.comp.timer_deadline = 0;
    return false;
  }
  if (q.comp.retry_left == 0) {
    e.count(Counter::retry_exceeded_err);
    q.comp.timer_deadline = 0;
    fail_wqe(e, q, WC_RETRY_EXC_ERR);
    return true;
  }
  q.comp.retry_left--;
  e.count(Counter::completer_retry_err);
  q.comp.retry_marker = false;
  e.go_back(q, q.comp.una_psn);
  e.rp_timeout(q);
  q.comp.timer_deadline = e.now + backoff_ns(e, q);
  return true;
}

}  // namespace

bool EngineImpl::completer_run(Qp& q) {
  bool did = false;
  const QpState st = q.state.load(std::memory_order_relaxed);
  if (st == QPS_RESET || st == QPS_INIT) return false;
  if (st == QPS_ERR || st == QPS_SQE) return flush_if_pending(*this, q, st);
  // complete_wqe: in-order completions
  const uint32_t prod = q.sq.prod.load(std::memory_order_acquire);
  uint32_t cons = q.sq.cons.load(std::memory_order_relaxed);
  while (cons != prod) {
    SendWqe& w = q.sq.at(cons);
    if (!w.done) break;
    if (w.status != WC_SUCCESS) {
      send_queue_error(*this, q, w, cons);
      return true;
    }
    retire_send(q, w, cons);
    did = true;
  }
  if (static_cast<int32_t>(q.req.idx - cons) < 0) {
    q.req.idx = cons;
    q.req.offset = 0;
  }
  if (tail_loss_probe(*this, q)) did = true;
  if (q.comp.nak_pending) return apply_pending_nak(*this, q) || did;
  if (rnr_wait_over(*this, q)) did = true;
  if (retransmit_timer_expired(*this, q)) did = true;
  if (st == QPS_SQD && !q.comp.sqd_notified && q.comp.una_psn == q.req.sent_end && cons == q.req.idx) {
    q.comp.sqd_notified = true;
    if (q.attr.en_sqd_async_notify) async_event(EVENT_SQ_DRAINED, q.qpn);
  }
  return did;
}

}  // namespace urxe::engine
