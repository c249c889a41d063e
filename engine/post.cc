// The post verbs (application threads): post_send checks each WR against its QP's type (kWrTable) and
// writes it into the send queue, post_recv and post_srq_recv queue receive WQEs; each rings the doorbell.
// No engine lock, no allocation, no syscall.
#include <cerrno>
#include <cstring>

#include "engine/internal.h"

namespace urxe::engine {

int Engine::post_send(uint32_t qpn, const SendWr* wr, const SendWr** bad_wr) {
  EngineImpl& e = *impl_;
  Qp* qp = e.qp_get(qpn);
  if (!qp) {
    if (bad_wr) *bad_wr = wr;
    return EINVAL;
  }
  Qp& q = *qp;
  const QpState st = q.state.load(std::memory_order_acquire);
  int rc = 0;
  bool posted = false;
  if (st == QPS_RESET || st == QPS_INIT || st == QPS_RTR) {
    rc = EINVAL;
  } else {
    AppSide<SendWqe> g(q.sq);
    const uint32_t ud_max = q.type == QPT_UD ? e.active_mtu_bytes() : 0;  // the port's MTU: UD only
    for (; wr; wr = wr->next) {
      const WrInfo& info = wr_info(wr->opcode);
      if (wr->opcode == WR_TSO || wr->opcode == WR_FLUSH) {
        rc = EOPNOTSUPP;
        break;
      }
      // XRC_SEND takes RC's WRs (each to the XRC SRQ it names); an XRC target takes none
      const bool ok_type = q.type == QPT_RC || q.type == QPT_XRC_SEND ? info.rc
                           : q.type == QPT_UC                         ? info.uc
                           : q.type == QPT_UD                         ? info.ud
                                                                      : false;
      // ATOMIC WRITE has no XRC opcode (Annex A14's rows stop at RC's 0x17)
      if (!info.valid || !ok_type || (q.type == QPT_XRC_SEND && info.is_atomic_write)) {
        rc = EINVAL;
        break;
      }
      if (wr->send_flags & ~(SEND_FENCE | SEND_SIGNALED | SEND_SOLICITED | SEND_INLINE)) {
        rc = EINVAL;
        break;
      }
      if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > q.cap.max_send_sge) {
        rc = EINVAL;
        break;
      }
      if (wr->opcode == WR_BIND_MW && (wr->num_sge || (wr->send_flags & SEND_INLINE))) {
        rc = EINVAL;  // a bind carries no data (rdma-core's rxe: no SGE, no inline)
        break;
      }
      const bool is_inline = (wr->send_flags & SEND_INLINE) && !info.is_read &&
                             (!info.is_atomic || info.is_atomic_write) && !info.is_local;
      uint64_t len = 0;
      for (int i = 0; i < wr->num_sge; i++) len += wr->sg_list[i].length;
      if (is_inline && len > q.cap.max_inline_data && !info.is_atomic_write) {  // (its 8 bytes: in the WQE)
        rc = EINVAL;
        break;
      }
      // an atomic's 8-byte result buffer is one SGE; an ATOMIC WRITE's 8 bytes may be inline or several SGEs
      if (len > e.config.device.max_msg_sz || (info.is_atomic && len != 8) ||
          (info.is_atomic && !info.is_atomic_write && wr->num_sge != 1) ||
          (q.type == QPT_UD && len > ud_max)) {
        rc = EINVAL;
        break;
      }
      if (q.type == QPT_UD && (wr->ud.ah == 0 || wr->ud.ah >= e.ahs.size())) {
        rc = EINVAL;
        break;
      }
      const uint32_t p = q.sq.prod.load(std::memory_order_relaxed);
      if (p - q.sq.cons.load(std::memory_order_acquire) >= q.sq.capacity) {
        rc = ENOMEM;
        break;
      }
      SendWqe& w = q.sq.at(p);
      w.wr_id = wr->wr_id;
      w.opcode = wr->opcode;
      w.send_flags = wr->send_flags;
      uint8_t b[4];
      std::memcpy(b, &wr->imm_data, 4);
      w.imm = wire::load_be32(b);
      w.inv_rkey = wr->invalidate_rkey;
      if (info.is_atomic && !info.is_atomic_write) {
        w.remote_addr = wr->atomic.remote_addr;
        w.rkey = wr->atomic.rkey;
      } else {
        w.remote_addr = wr->rdma.remote_addr;
        w.rkey = wr->rdma.rkey;
      }
      if (wr->opcode == WR_BIND_MW) {
        w.inv_rkey = wr->bind_mw.mw_rkey;
        w.rkey = wr->bind_mw.rkey;
        w.remote_addr = wr->bind_mw.addr;
        w.bind_mr = wr->bind_mw.mr_lkey;
        w.bind_length = wr->bind_mw.length;
        w.bind_access = wr->bind_mw.access;
      }
      w.compare_add = wr->atomic.compare_add;
      w.swap = wr->atomic.swap;
      w.ah = wr->ud.ah;
      if (q.type == QPT_UD) {  // the AH as it is now: destroying it later does not take the WQE's address
        Ah& a = e.ahs[w.ah];
        w.ah_gen = std::atomic_ref<bool>(a.used).load(std::memory_order_relaxed)
                       ? std::atomic_ref<uint32_t>(a.gen).load(std::memory_order_acquire)
                       : 0;
      }
      w.remote_qpn = wr->ud.remote_qpn & wire::kPsnMask;
      w.xrc_srqn = wr->xrc_remote_srqn & wire::kPsnMask;  // (24 bits, as a QPN)
      w.remote_qkey = wr->ud.remote_qkey;
      w.length = len;
      w.is_inline = is_inline;
      if (is_inline) {
        uint8_t* dst = info.is_atomic_write ? reinterpret_cast<uint8_t*>(&w.compare_add)
                                            : q.sq_inline.data() + w.inline_base;
        for (int i = 0; i < wr->num_sge; i++) {
          const Sge& s = wr->sg_list[i];
          if (s.length)
            std::memcpy(dst, reinterpret_cast<const void*>(static_cast<uintptr_t>(s.addr)), s.length);
          dst += s.length;
        }
        w.num_sge = 0;
      } else {
        w.num_sge = static_cast<uint32_t>(wr->num_sge);
        for (uint32_t i = 0; i < w.num_sge; i++) q.sq_sges[w.sge_base + i] = wr->sg_list[i];
      }
      w.started = w.sent_all = w.done = false;
      w.status = WC_SUCCESS;
      w.resp_offset = 0;
      q.sq.prod.store(p + 1, std::memory_order_release);
      posted = true;
    }
  }
  if (rc && bad_wr) *bad_wr = wr;
  if (posted) {
    e.activate(q);  // after prod is stored: the visit that takes the bit sees the WQEs
    if (e.sink) e.sink->doorbell(true);
  }
  return rc;
}

int Engine::post_recv(uint32_t qpn, const RecvWr* wr, const RecvWr** bad_wr) {
  EngineImpl& e = *impl_;
  Qp* qp = e.qp_get(qpn);
  const QpState st = qp ? qp->state.load(std::memory_order_acquire) : QPS_RESET;
  // (XRC QPs have no receive queue: an XRC SRQ takes the posts)
  if (!qp || qp->srq || qp->type == QPT_XRC_SEND || qp->type == QPT_XRC_RECV || st == QPS_RESET) {
    if (bad_wr) *bad_wr = wr;
    return EINVAL;
  }
  const int rc = e.post_recv_wrs(qp->rq, wr, bad_wr);
  e.activate(*qp);  // a QP in ERR flushes what is posted to it
  return rc;
}

int EngineImpl::post_recv_wrs(RecvQueue& rq, const RecvWr* wr, const RecvWr** bad_wr) {
  int rc = 0;
  bool posted = false;
  {
    AppSide<RecvWqe> g(rq.ring);
    for (; wr; wr = wr->next) {
      if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > rq.max_sge) {
        rc = EINVAL;
        break;
      }
      const uint32_t p = rq.ring.prod.load(std::memory_order_relaxed);
      if (p - rq.ring.cons.load(std::memory_order_acquire) >= rq.ring.capacity) {
        rc = ENOMEM;
        break;
      }
      RecvWqe& w = rq.ring.at(p);
      w.wr_id = wr->wr_id;
      w.num_sge = static_cast<uint32_t>(wr->num_sge);
      for (uint32_t i = 0; i < w.num_sge; i++) rq.sges[w.sge_base + i] = wr->sg_list[i];
      rq.ring.prod.store(p + 1, std::memory_order_release);
      posted = true;
    }
  }
  if (rc && bad_wr) *bad_wr = wr;
  if (posted && sink) sink->doorbell(false);
  return rc;
}

}  // namespace urxe::engine
