// QPs: creation, the state machine with the attribute masks the IBTA requires per transition and QP type
// (the table the kernel's ib_modify_qp_is_ok applies for rdma-core), flush on error. Posts: post.cc.
#include <array>
#include <cerrno>

#include "engine/internal.h"

namespace urxe::engine {

namespace {

// The attributes modify_qp must set (req) and may set (opt) for one transition and QP type.
struct QpParams {
  uint32_t req = 0;
  uint32_t opt = 0;
};

enum QpTypeBit : uint8_t {
  kRc = 1,
  kUc = 2,
  kUd = 4,
  kXrcSend = 8,
  kXrcRecv = 16,
  kAllTypes = kRc | kUc | kUd | kXrcSend | kXrcRecv
};

// One cell of the state table, as core/verbs.c's qp_state_table[cur][next].
struct QpTransition {
  QpState cur = QPS_RESET, next = QPS_RESET;  // its place in the table
  uint8_t types = 0;                          // QpTypeBits of the QP types that may make it; 0: invalid
  QpParams rc, uc, ud, xrc_send, xrc_recv;
};

constexpr uint32_t kPath = QP_ALT_PATH | QP_PATH_MIG_STATE;

// IBTA 11.2.4.2 (XRC: Annex A14), as ib_modify_qp_is_ok encodes it for RC, UC, UD, XRC_INI and XRC_TGT. Any
// state may also go to RESET or ERR with no attributes (added by build_state_table).
constexpr QpTransition kTransitions[] = {
    {.cur = QPS_RESET,
     .next = QPS_INIT,
     .types = kAllTypes,
     .rc = {.req = QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS},
     .uc = {.req = QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS},
     .ud = {.req = QP_PKEY_INDEX | QP_PORT | QP_QKEY},
     .xrc_send = {.req = QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS},
     .xrc_recv = {.req = QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS}},
    {.cur = QPS_INIT,
     .next = QPS_INIT,
     .types = kAllTypes,
     .rc = {.opt = QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS},
     .uc = {.opt = QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS},
     .ud = {.opt = QP_PKEY_INDEX | QP_PORT | QP_QKEY},
     .xrc_send = {.opt = QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS},
     .xrc_recv = {.opt = QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS}},
    {.cur = QPS_INIT,
     .next = QPS_RTR,
     .types = kAllTypes,
     .rc = {.req = QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN | QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER,
            .opt = QP_ALT_PATH | QP_ACCESS_FLAGS | QP_PKEY_INDEX},
     .uc = {.req = QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN,
            .opt = QP_ALT_PATH | QP_ACCESS_FLAGS | QP_PKEY_INDEX},
     .ud = {.opt = QP_PKEY_INDEX | QP_QKEY},
     .xrc_send = {.req = QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN,
                  .opt = QP_ALT_PATH | QP_ACCESS_FLAGS | QP_PKEY_INDEX},
     .xrc_recv = {.req = QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN | QP_MAX_DEST_RD_ATOMIC |
                         QP_MIN_RNR_TIMER,
                  .opt = QP_ALT_PATH | QP_ACCESS_FLAGS | QP_PKEY_INDEX}},
    {.cur = QPS_RTR,
     .next = QPS_RTS,
     .types = kAllTypes,
     .rc = {.req = QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_SQ_PSN | QP_MAX_QP_RD_ATOMIC,
            .opt = QP_CUR_STATE | kPath | QP_ACCESS_FLAGS | QP_MIN_RNR_TIMER},
     .uc = {.req = QP_SQ_PSN, .opt = QP_CUR_STATE | kPath | QP_ACCESS_FLAGS},
     .ud = {.req = QP_SQ_PSN, .opt = QP_CUR_STATE | QP_QKEY},
     .xrc_send = {.req = QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_SQ_PSN | QP_MAX_QP_RD_ATOMIC,
                  .opt = QP_CUR_STATE | kPath | QP_ACCESS_FLAGS},
     .xrc_recv = {.req = QP_TIMEOUT | QP_SQ_PSN,
                  .opt = QP_CUR_STATE | kPath | QP_ACCESS_FLAGS | QP_MIN_RNR_TIMER}},
    {.cur = QPS_RTS,
     .next = QPS_RTS,
     .types = kAllTypes,
     .rc = {.opt = QP_CUR_STATE | QP_ACCESS_FLAGS | kPath | QP_MIN_RNR_TIMER},
     .uc = {.opt = QP_CUR_STATE | QP_ACCESS_FLAGS | kPath},
     .ud = {.opt = QP_CUR_STATE | QP_QKEY},
     .xrc_send = {.opt = QP_CUR_STATE | QP_ACCESS_FLAGS | kPath},
     .xrc_recv = {.opt = QP_CUR_STATE | QP_ACCESS_FLAGS | kPath | QP_MIN_RNR_TIMER}},
    {.cur = QPS_RTS,
     .next = QPS_SQD,
     .types = kAllTypes,
     .rc = {.opt = QP_EN_SQD_ASYNC_NOTIFY},
     .uc = {.opt = QP_EN_SQD_ASYNC_NOTIFY},
     .ud = {.opt = QP_EN_SQD_ASYNC_NOTIFY},
     .xrc_send = {.opt = QP_EN_SQD_ASYNC_NOTIFY},
     .xrc_recv = {.opt = QP_EN_SQD_ASYNC_NOTIFY}},
    {.cur = QPS_SQD,
     .next = QPS_RTS,
     .types = kAllTypes,
     .rc = {.opt = QP_CUR_STATE | kPath | QP_ACCESS_FLAGS | QP_MIN_RNR_TIMER},
     .uc = {.opt = QP_CUR_STATE | kPath | QP_ACCESS_FLAGS},
     .ud = {.opt = QP_CUR_STATE | QP_QKEY},
     .xrc_send = {.opt = QP_CUR_STATE | kPath | QP_ACCESS_FLAGS},
     .xrc_recv = {.opt = QP_CUR_STATE | kPath | QP_ACCESS_FLAGS | QP_MIN_RNR_TIMER}},
    {.cur = QPS_SQD,
     .next = QPS_SQD,
     .types = kAllTypes,
     .rc = {.opt = QP_PORT | QP_AV | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC |
                   QP_MAX_DEST_RD_ATOMIC | kPath | QP_ACCESS_FLAGS | QP_PKEY_INDEX | QP_MIN_RNR_TIMER},
     .uc = {.opt = QP_AV | kPath | QP_ACCESS_FLAGS | QP_PKEY_INDEX},
     .ud = {.opt = QP_PKEY_INDEX | QP_QKEY},
     .xrc_send = {.opt = QP_PORT | QP_AV | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC |
                         kPath | QP_ACCESS_FLAGS | QP_PKEY_INDEX},
     .xrc_recv = {.opt = QP_PORT | QP_AV | QP_TIMEOUT | QP_MAX_DEST_RD_ATOMIC | kPath | QP_ACCESS_FLAGS |
                         QP_PKEY_INDEX | QP_MIN_RNR_TIMER}},
    // UC and UD only: RC and XRC send errors go to ERR, never SQE
    {.cur = QPS_SQE,
     .next = QPS_RTS,
     .types = kUc | kUd,
     .rc = {},
     .uc = {.opt = QP_CUR_STATE | QP_ACCESS_FLAGS},
     .ud = {.opt = QP_CUR_STATE | QP_QKEY},
     .xrc_send = {},
     .xrc_recv = {}},
};

constexpr size_t kNumStates = QPS_ERR + 1;
using StateTable = std::array<std::array<QpTransition, kNumStates>, kNumStates>;

constexpr StateTable build_state_table() {
  StateTable t{};
  for (uint32_t c = 0; c < kNumStates; c++)
    for (uint32_t n = 0; n < kNumStates; n++) {
      t[c][n].cur = static_cast<QpState>(c);
      t[c][n].next = static_cast<QpState>(n);
      if (n == QPS_RESET || n == QPS_ERR) t[c][n].types = kAllTypes;
    }
  for (const QpTransition& r : kTransitions) t[r.cur][r.next] = r;
  return t;
}

constexpr StateTable kStateTable = build_state_table();

// Each row sits at [cur][next], and no two rows name the same transition.
constexpr bool transitions_placed() {
  for (size_t i = 0; i < std::size(kTransitions); i++) {
    const QpTransition& r = kTransitions[i];
    if (r.next == QPS_RESET || r.next == QPS_ERR || r.types == 0) return false;
    for (size_t j = 0; j < i; j++)
      if (kTransitions[j].cur == r.cur && kTransitions[j].next == r.next) return false;
  }
  for (uint32_t c = 0; c < kNumStates; c++)
    for (uint32_t n = 0; n < kNumStates; n++)
      if (kStateTable[c][n].cur != c || kStateTable[c][n].next != n) return false;
  return true;
}
static_assert(transitions_placed());

constexpr uint8_t type_bit(QpType t) {
  return t == QPT_RC ? kRc : t == QPT_UC ? kUc : t == QPT_UD ? kUd : t == QPT_XRC_SEND ? kXrcSend : kXrcRecv;
}

// The transition's attribute rules for a QP of type t, or nullptr when that QP may not make it.
const QpParams* transition_params(QpState cur, QpState next, QpType t) {
  if (cur >= kNumStates || next >= kNumStates) return nullptr;
  const QpTransition& r = kStateTable[cur][next];
  if (!(r.types & type_bit(t))) return nullptr;
  return t == QPT_RC         ? &r.rc
         : t == QPT_UC       ? &r.uc
         : t == QPT_UD       ? &r.ud
         : t == QPT_XRC_SEND ? &r.xrc_send
                             : &r.xrc_recv;
}

}  // namespace

int EngineImpl::create_qp(uint32_t pd, const QpInitAttr& init, uint32_t& qpn, QpCap* actual) {
  const QpType t = init.qp_type;
  if (t != QPT_RC && t != QPT_UC && t != QPT_UD && t != QPT_XRC_SEND && t != QPT_XRC_RECV) return EOPNOTSUPP;
  // An XRC target has no PD, CQ or queue of its own: its XRC domain's SRQs lend theirs per request.
  const bool target = t == QPT_XRC_RECV;
  Pd* p = target ? nullptr : pd_get(pd);
  if (target ? !xrcd_valid(init.xrcd) : !p) return EINVAL;
  Cq* scq = target ? nullptr : cq_get(init.send_cq);
  Cq* rcq = target ? nullptr : t == QPT_XRC_SEND ? scq : cq_get(init.recv_cq);  // XRC_SEND: no RQ
  if (!target && (!scq || !rcq)) return EINVAL;
  Srq* srq = nullptr;
  if (init.srq && (t == QPT_RC || t == QPT_UC || t == QPT_UD)) {
    srq = srq_get(init.srq);
    if (!srq || srq->pd != pd || srq->xrcd) return EINVAL;
    if (srq->tm && init.qp_type != QPT_RC) return EINVAL;  // tag matching: RC only (IBV_TM_CAP_RC)
  }
  const bool no_rq = srq || t == QPT_XRC_SEND || target;
  const DeviceAttr& d = config.device;
  QpCap cap = init.cap;
  if (target) cap = QpCap{};
  if (cap.max_send_wr > d.max_qp_wr || cap.max_send_sge > d.max_sge ||
      cap.max_inline_data > d.max_inline_data)
    return EINVAL;
  if (!no_rq && (cap.max_recv_wr > d.max_qp_wr || cap.max_recv_sge > d.max_sge)) return EINVAL;
  if (!target) {
    if (cap.max_send_wr < 1) cap.max_send_wr = 1;
    if (cap.max_send_sge < 1) cap.max_send_sge = 1;
  }
  if (no_rq) {
    cap.max_recv_wr = cap.max_recv_sge = 0;
  } else {
    if (cap.max_recv_wr < 1) cap.max_recv_wr = 1;
    if (cap.max_recv_sge < 1) cap.max_recv_sge = 1;
  }
  // pick the QPN
  uint32_t idx = UINT32_MAX;
  if (init.qpn) {
    if (init.qpn < config.qpn_base || init.qpn - config.qpn_base >= qps.size() || init.qpn == kMulticastQpn)
      return EINVAL;
    idx = init.qpn - config.qpn_base;
    if (qps[idx].load(std::memory_order_relaxed)) return EBUSY;
  } else {
    const auto n = static_cast<uint32_t>(qps.size());
    for (uint32_t k = 0; k < n; k++) {
      const uint32_t i = (next_qp_index + k) % n;
      if (config.qpn_base + i == kMulticastQpn) continue;  // a destination, never a QP's number
      if (!qps[i].load(std::memory_order_relaxed)) {
        idx = i;
        break;
      }
    }
    if (idx == UINT32_MAX) return ENOMEM;
    next_qp_index = (idx + 1) % n;
  }
  auto* q = new Qp;
  q->qpn = config.qpn_base + idx;
  q->index = idx;
  q->type = init.qp_type;
  q->reliable = qp_type_reliable(t);
  q->pd = target ? 0 : pd;
  q->xrcd = target ? init.xrcd : 0;
  q->scq = scq;
  q->rcq = rcq;
  q->srq = srq;
  q->sq_sig_all = init.sq_sig_all;
  q->cap = cap;
  q->sq.init(cap.max_send_wr);  // (a target's one slot is never posted to)
  q->sq_sges.assign(size_t{q->sq.slots.size()} * cap.max_send_sge, Sge{});
  q->sq_inline.assign(size_t{q->sq.slots.size()} * cap.max_inline_data, 0);
  for (uint32_t i = 0; i < q->sq.slots.size(); i++) {
    q->sq.slots[i].sge_base = i * cap.max_send_sge;
    q->sq.slots[i].inline_base = i * cap.max_inline_data;
  }
  if (srq && srq->tm) tm_qp_init(*q);
  if (!srq) q->rq.init(cap.max_recv_wr, cap.max_recv_sge);  // (XRC: empty, never posted to)
  q->sq.app_unlocked = q->rq.ring.app_unlocked = init.single_threaded;
  q->resp.recv_sges.assign(target ? d.max_srq_sge : srq ? srq->rq.max_sge : q->rq.max_sge, Sge{});
  q->attr.qp_state = QPS_RESET;
  q->attr.cap = cap;
  q->attr.path_mtu = active_mtu();
  q->mtu = mtu_to_bytes(q->attr.path_mtu);
  q->resp.res.resize(1);
  if (p) p->refs++;
  if (scq) scq->refs++;
  if (rcq) rcq->refs++;
  if (srq) srq->refs++;
  if (target) xrcds[init.xrcd - 1]++;
  qps[idx].store(q, std::memory_order_release);
  qp_list.push_back(q);
  // Room for two timer entries per QP, made here (a verb) so that schedule() never allocates: it drops the
  // stale entries when the heap is full, and at most one per QP is live.
  if (wakes.capacity() < 2 * qp_list.size() + 16) wakes.reserve(4 * qp_list.size() + 64);
  qpn = q->qpn;
  if (actual) *actual = cap;
  return 0;
}

Qp* EngineImpl::qp_get(uint32_t qpn) const {
  if (qpn < config.qpn_base || qpn - config.qpn_base >= qps.size()) return nullptr;
  return qps[qpn - config.qpn_base].load(std::memory_order_acquire);
}

void EngineImpl::qp_reset(Qp& q) {
  // Everything posted is discarded without completions (IBTA: RESET empties the queues).
  q.sq.prod.store(0, std::memory_order_relaxed);
  q.sq.cons.store(0, std::memory_order_relaxed);
  if (!q.srq) {
    q.rq.ring.prod.store(0, std::memory_order_relaxed);
    q.rq.ring.cons.store(0, std::memory_order_relaxed);
  }
  for (auto& w : q.sq.slots) {
    w.started = w.sent_all = w.done = false;
    w.status = WC_SUCCESS;
  }
  q.req.idx = 0;
  q.req.offset = 0;
  q.req.next_psn = q.comp.una_psn = q.req.sent_end = 0;
  q.comp.sqd_notified = false;
  q.comp.timer_deadline = 0;
  q.comp.rnr_until = 0;
  q.comp.retry_marker = false;
  q.comp.srtt_ns = q.comp.rttvar_ns = 0;
  q.comp.probed = false;
  q.comp.karn_psn = 0;
  q.comp.probe_deadline = 0;
  q.rate = Qp::Rate{};
  q.resp.epsn = q.resp.msn = 0;
  q.resp.nak_sent = false;
  q.resp.in_msg = InMsg::none;
  q.resp.uc_dropping = false;
  q.resp.msg_offset = 0;
  q.resp.have_recv = false;
  q.resp.ack_pending = false;
  q.resp.pkts_since_ack = 0;
  for (auto& r : q.resp.res) r = RespRes{};
  q.resp.res_next = 0;
  q.flush_needed = false;
  q.flushing = false;
  q.flush_gap = false;
  q.comp.nak_pending = false;
  q.error_event_sent = false;
  q.comm_est = false;
}

void EngineImpl::qp_set_error(Qp& q, bool event, EventType type) {
  if (q.state.load(std::memory_order_relaxed) == QPS_ERR) return;
  q.state.store(QPS_ERR, std::memory_order_release);
  q.attr.qp_state = QPS_ERR;
  q.flush_needed = true;
  q.comp.timer_deadline = 0;
  q.comp.rnr_until = 0;
  q.resp.ack_pending = false;
  for (auto& r : q.resp.res) r.pending = false;
  if (event && !q.error_event_sent) {
    q.error_event_sent = true;
    async_event(type, q.qpn);
  }
}

void EngineImpl::qp_flush(Qp& q) {
  const QpState st = q.state.load(std::memory_order_relaxed);
  if (st != QPS_ERR && st != QPS_SQE) return;
  // send queue: every WQE not yet completed
  const uint32_t prod = q.sq.prod.load(std::memory_order_acquire);
  uint32_t cons = q.sq.cons.load(std::memory_order_relaxed);
  while (cons != prod) {
    SendWqe& w = q.sq.at(cons);
    if (!q.flushing && !q.flush_gap && w.done && w.status == WC_SUCCESS) {
      retire_send(q, w, cons);  // finished before the error: a normal completion
      continue;
    } else {
      Wc wc;
      wc.wr_id = w.wr_id;
      // the WQE that failed reports its own status (even after unfinished ones before it were flushed);
      // everything after it is flushed
      const bool failed = !q.flushing && w.done && w.status != WC_SUCCESS;
      wc.status = failed ? w.status : WC_WR_FLUSH_ERR;
      if (failed) q.flushing = true;
      if (!w.done) q.flush_gap = true;
      wc.opcode = wr_info(w.opcode).wc_opcode;
      wc.qp_num = q.qpn;
      if (w.send_flags & kSendTmInternal) [[unlikely]]
        tm_send_retired(q, w, wc.status);
      else if (!cq_post(*q.scq, wc, false))
        break;
    }
    w.started = w.sent_all = w.done = false;
    cons++;
    q.sq.cons.store(cons, std::memory_order_release);
  }
  q.req.idx = cons;
  q.req.offset = 0;
  if (st != QPS_ERR) return;
  // receive side
  if (q.resp.have_recv) {
    Wc wc;
    wc.wr_id = q.resp.recv_wr_id;
    wc.status = WC_WR_FLUSH_ERR;
    wc.opcode = WC_RECV;
    wc.qp_num = q.qpn;
    // an SRQ with a CQ of its own (XRC, tag matching) reports its receives there
    if (cq_post(q.srq && q.srq->cq ? *q.srq->cq : *q.rcq, wc, false)) q.resp.have_recv = false;
  }
  if (q.srq) {
    if (q.flush_needed) async_event(EVENT_QP_LAST_WQE_REACHED, q.qpn);
  } else {
    LockedRing<RecvWqe>& r = q.rq.ring;
    const uint32_t rp = r.prod.load(std::memory_order_acquire);
    uint32_t rc = r.cons.load(std::memory_order_relaxed);
    while (rc != rp) {
      Wc wc;
      wc.wr_id = r.at(rc).wr_id;
      wc.status = WC_WR_FLUSH_ERR;
      wc.opcode = WC_RECV;
      wc.qp_num = q.qpn;
      if (!cq_post(*q.rcq, wc, false)) break;
      rc++;
      r.cons.store(rc, std::memory_order_release);
    }
  }
  q.flush_needed = false;
}

bool EngineImpl::pop_recv(Qp& q) {
  if (q.resp.have_recv) return true;
  RecvQueue& rq = q.srq ? q.srq->rq : q.rq;
  LockedRing<RecvWqe>& r = rq.ring;
  const uint32_t c = r.cons.load(std::memory_order_relaxed);
  if (r.prod.load(std::memory_order_acquire) == c) return false;
  const RecvWqe& w = r.at(c);
  q.resp.recv_wr_id = w.wr_id;
  q.resp.recv_num_sge = w.num_sge;
  for (uint32_t i = 0; i < w.num_sge; i++) q.resp.recv_sges[i] = rq.sges[w.sge_base + i];
  r.cons.store(c + 1, std::memory_order_release);
  q.resp.have_recv = true;
  if (q.srq) srq_check_limit(*q.srq);
  return true;
}

int EngineImpl::modify_qp(uint32_t qpn, const QpAttr& a, uint32_t mask) {
  Qp* qp = qp_get(qpn);
  if (!qp) return EINVAL;
  Qp& q = *qp;
  // As the kernel's uverbs (modify_qp_mask): what an XRC QP's half of RC has no use for is ignored, not
  // refused (perftest sets RC's attributes on both)
  if (q.type == QPT_XRC_SEND) mask &= ~(QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER);
  if (q.type == QPT_XRC_RECV) mask &= ~(QP_MAX_QP_RD_ATOMIC | QP_RETRY_CNT | QP_RNR_RETRY);
  const QpState cur = q.state.load(std::memory_order_relaxed);
  if ((mask & QP_CUR_STATE) && a.cur_qp_state != cur) return EINVAL;
  const QpState next = (mask & QP_STATE) ? a.qp_state : cur;
  const QpParams* params = transition_params(cur, next, q.type);
  if (!params) return EINVAL;
  const uint32_t attrs = mask & ~QP_STATE;
  if ((attrs & params->req) != params->req) return EINVAL;
  if (attrs & ~(params->req | params->opt)) return EINVAL;

  // value checks before anything changes
  const DeviceAttr& d = config.device;
  if ((mask & QP_PORT) && a.port_num != 1) return EINVAL;
  if ((mask & QP_PKEY_INDEX) && a.pkey_index != 0) return EINVAL;
  if ((mask & QP_PATH_MTU) && (a.path_mtu < MTU_256 || a.path_mtu > MTU_4096)) return EINVAL;
  if ((mask & QP_AV) && (a.ah_attr.sgid_index >= gids.size() || gids[a.ah_attr.sgid_index] == wire::Gid{} ||
                         a.ah_attr.port_num > 1))
    return EINVAL;
  if ((mask & QP_RETRY_CNT) && a.retry_cnt > 7) return EINVAL;
  if ((mask & QP_RNR_RETRY) && a.rnr_retry > 7) return EINVAL;
  if ((mask & QP_TIMEOUT) && a.timeout > 31) return EINVAL;
  if ((mask & QP_MIN_RNR_TIMER) && a.min_rnr_timer > 31) return EINVAL;
  if ((mask & QP_MAX_QP_RD_ATOMIC) && a.max_rd_atomic > d.max_qp_rd_atom) return EINVAL;
  if ((mask & QP_MAX_DEST_RD_ATOMIC) && a.max_dest_rd_atomic > d.max_qp_init_rd_atom) return EINVAL;
  if ((mask & QP_DEST_QPN) && a.dest_qp_num > wire::kPsnMask) return EINVAL;
  if ((mask & QP_PATH_MIG_STATE) && a.path_mig_state != MIG_MIGRATED) return EINVAL;  // no APM
  if (mask & QP_ALT_PATH) return EINVAL;                                              // no APM

  QpAttr& s = q.attr;
  if (mask & QP_ACCESS_FLAGS) s.qp_access_flags = a.qp_access_flags;
  if (mask & QP_PKEY_INDEX) s.pkey_index = a.pkey_index;
  if (mask & QP_PORT) s.port_num = a.port_num;
  if (mask & QP_QKEY) s.qkey = a.qkey;
  if (mask & QP_AV) s.ah_attr = a.ah_attr;
  if (mask & QP_PATH_MTU) s.path_mtu = a.path_mtu;
  if (mask & QP_TIMEOUT) s.timeout = a.timeout;
  if (mask & QP_RETRY_CNT) s.retry_cnt = a.retry_cnt;
  if (mask & QP_RNR_RETRY) s.rnr_retry = a.rnr_retry;
  if (mask & QP_RQ_PSN) s.rq_psn = a.rq_psn & wire::kPsnMask;
  if (mask & QP_SQ_PSN) s.sq_psn = a.sq_psn & wire::kPsnMask;
  if (mask & QP_MAX_QP_RD_ATOMIC) s.max_rd_atomic = a.max_rd_atomic;
  if (mask & QP_MAX_DEST_RD_ATOMIC) s.max_dest_rd_atomic = a.max_dest_rd_atomic;
  if (mask & QP_MIN_RNR_TIMER) s.min_rnr_timer = a.min_rnr_timer;
  if (mask & QP_DEST_QPN) s.dest_qp_num = a.dest_qp_num;
  if (mask & QP_EN_SQD_ASYNC_NOTIFY) s.en_sqd_async_notify = a.en_sqd_async_notify;
  if (mask & QP_PATH_MIG_STATE) s.path_mig_state = a.path_mig_state;

  if (mask & QP_RQ_PSN) q.resp.epsn = s.rq_psn;
  if (mask & QP_SQ_PSN) q.req.next_psn = q.comp.una_psn = q.req.sent_end = q.comp.karn_psn = s.sq_psn;
  if (mask & QP_MAX_DEST_RD_ATOMIC) {
    q.resp.res.assign(s.max_dest_rd_atomic ? s.max_dest_rd_atomic : 1, RespRes{});
    q.resp.res_next = 0;
  }
  if (mask & (QP_PATH_MTU | QP_AV | QP_DEST_QPN | QP_STATE)) {
    const Mtu eff = q.type == QPT_UD ? active_mtu() : (s.path_mtu < active_mtu() ? s.path_mtu : active_mtu());
    q.mtu = mtu_to_bytes(eff);
    // frame template toward the peer
    const PortAttr& pa = port.attr();
    wire::FrameSpec& f = q.spec;
    f = wire::FrameSpec{};
    f.src_mac = pa.mac;
    f.dst_mac = s.ah_attr.dmac;
    const wire::Gid sgid = s.ah_attr.sgid_index < gids.size() ? gids[s.ah_attr.sgid_index] : wire::Gid{};
    f.ip_version = wire::gid_is_ipv4_mapped(sgid) ? 4 : 6;
    f.src_ip = sgid;
    f.dst_ip = s.ah_attr.dgid;
    f.traffic_class = wire_traffic_class(s.ah_attr.traffic_class);
    f.ttl = s.ah_attr.hop_limit ? s.ah_attr.hop_limit : 64;
    f.flow_label = s.ah_attr.flow_label;
    f.udp_sport = q.type == QPT_UD ? udp_sport_ud(q.qpn)
                                   : udp_sport_connected(s.ah_attr.flow_label, q.qpn, s.dest_qp_num);
    f.bth.dqpn = s.dest_qp_num;
    wire::make_prefix(f, q.prefix);
    if (q.type != QPT_UD) qp_set_path(q, &s.ah_attr.dgid);
  }
  if (mask & (QP_RETRY_CNT | QP_RNR_RETRY)) {
    q.comp.retry_left = s.retry_cnt;
    q.comp.rnr_left = s.rnr_retry;
  }

  if (next != cur) {
    if (next == QPS_RESET) {
      qp_reset(q);
      cq_clean(q);
      q.attr.qp_state = QPS_RESET;
      q.state.store(QPS_RESET, std::memory_order_release);
    } else if (next == QPS_ERR) {
      log_qp_line(LogLevel::debug, q, "to error by modify_qp");
      qp_set_error(q, false, EVENT_QP_FATAL);
      qp_flush(q);
    } else {
      if (next == QPS_SQD) q.comp.sqd_notified = false;
      if (cur == QPS_SQE) {  // SQE → RTS: the send queue restarts where it was flushed
        q.req.idx = q.sq.cons.load(std::memory_order_relaxed);
        q.flushing = false;
        q.flush_gap = false;
      }
      s.qp_state = next;
      q.state.store(next, std::memory_order_release);
    }
  }
  return 0;
}

int EngineImpl::query_qp(uint32_t qpn, QpAttr& attr, QpInitAttr* init) {
  Qp* q = qp_get(qpn);
  if (!q) return EINVAL;
  attr = q->attr;
  attr.qp_state = attr.cur_qp_state = q->state.load(std::memory_order_relaxed);
  attr.cap = q->cap;
  attr.sq_psn = q->req.next_psn;  // like rxe: the PSN the requester will use next
  attr.rq_psn = q->resp.epsn;
  attr.sq_draining = (attr.qp_state == QPS_SQD && q->comp.una_psn != q->req.next_psn) ? 1 : 0;
  if (init) {
    const bool target = q->type == QPT_XRC_RECV;
    init->send_cq = target ? 0 : q->scq->handle;
    init->recv_cq = target ? 0 : q->rcq->handle;
    init->srq = q->srq && !target ? q->srq->handle : 0;
    init->xrcd = q->xrcd;
    init->cap = q->cap;
    init->qp_type = q->type;
    init->sq_sig_all = q->sq_sig_all;
    init->qpn = q->qpn;
  }
  return 0;
}

void EngineImpl::qp_set_path(Qp& q, const wire::Gid* dgid) {
  if (q.path >= 0) {
    PathRate& old = paths[static_cast<size_t>(q.path)];
    if (dgid && old.dgid == *dgid) return;
    old.refs--;
    q.path = -1;
  }
  if (!dgid) return;
  size_t free_slot = paths.size();
  for (size_t i = 0; i < paths.size(); i++) {
    if (paths[i].refs && paths[i].dgid == *dgid) {
      paths[i].refs++;
      q.path = static_cast<int32_t>(i);
      return;
    }
    if (!paths[i].refs && free_slot == paths.size()) free_slot = i;
  }
  if (free_slot == paths.size()) paths.emplace_back();
  paths[free_slot] = PathRate{*dgid, 1, Qp::Rate{}};
  q.path = static_cast<int32_t>(free_slot);
}

int EngineImpl::destroy_qp(uint32_t qpn) {
  Qp* q = qp_get(qpn);
  if (!q) return EINVAL;
  if (q->mcast_groups) return EBUSY;  // detach first (the kernel's uverbs_free_qp)
  if (q->opens) {                     // an XRC target another handle still holds (open_qp)
    q->opens--;
    return 0;
  }
  // A type-2 window opens memory only to the QP that bound it: with that QP gone it opens nothing, and
  // must not open it to a later QP given the same QPN.
  if (q->bound_mws) free_qp_windows(*q);
  qps[qpn - config.qpn_base].store(nullptr, std::memory_order_release);
  for (size_t i = 0; i < qp_list.size(); i++)
    if (qp_list[i] == q) {
      qp_list[i] = qp_list.back();
      qp_list.pop_back();
      break;
    }
  qp_set_path(*q, nullptr);
  if (q->type == QPT_XRC_RECV) {
    xrcds[q->xrcd - 1]--;  // its SRQ, PD and CQ are borrowed, not held
  } else {
    q->scq->refs--;
    q->rcq->refs--;
    if (q->srq) q->srq->refs--;
    if (Pd* p = pd_get(q->pd)) p->refs--;
  }
  delete q;
  return 0;
}

}  // namespace urxe::engine
