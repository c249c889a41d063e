// XRC (IBTA Annex A14): XRC domains, XRC SRQs and the binding of an XRC target QP's requests to the SRQ each
// one names. The initiator (XRC_SEND) and the target (XRC_RECV) are otherwise RC's requester, completer and
// responder: the target borrows, per request, the receive queue, PD and CQ of the SRQ its XRCETH names, so
// that SEND placement, R_Key checks (against the SRQ's PD) and receive completions (on the SRQ's CQ) are RC's
// code unchanged.
#include <cerrno>

#include "engine/internal.h"

namespace urxe::engine {

int EngineImpl::alloc_xrcd(uint32_t& xrcd) {
  for (uint32_t i = 0; i < xrcds.size(); i++)
    if (!xrcds[i]) {
      xrcds[i] = 1;
      xrcd = i + 1;
      return 0;
    }
  if (xrcds.size() >= config.device.max_xrcds) return ENOMEM;
  xrcds.push_back(1);
  xrcd = static_cast<uint32_t>(xrcds.size());
  return 0;
}

int EngineImpl::dealloc_xrcd(uint32_t xrcd) {
  if (!xrcd_valid(xrcd)) return EINVAL;
  if (xrcds[xrcd - 1] > 1) return EBUSY;  // XRC SRQs or target QPs still in it
  xrcds[xrcd - 1] = 0;
  return 0;
}

int EngineImpl::create_xrc_srq(uint32_t xrcd, uint32_t pd, uint32_t cq, const SrqAttr& attr, uint32_t& srq,
                               SrqAttr* actual) {
  Cq* c = cq_get(cq);
  if (!xrcd_valid(xrcd) || !c) return EINVAL;
  if (int rc = create_srq(pd, attr, srq, actual)) return rc;
  Srq* s = srq_get(srq);
  s->xrcd = xrcd;
  s->cq = c;
  c->refs++;
  xrcds[xrcd - 1]++;
  return 0;
}

int EngineImpl::open_qp(uint32_t xrcd, uint32_t qpn) {
  Qp* q = qp_get(qpn);
  if (!xrcd_valid(xrcd) || !q || q->type != QPT_XRC_RECV || q->xrcd != xrcd) return EINVAL;
  q->opens++;
  return 0;
}

bool EngineImpl::xrc_bind(Qp& q, const wire::Packet& pkt) {
  if (q.srq && q.srq->handle == pkt.xrc_srqn) return true;  // the same SRQ as the last request
  // A message's packets all name one SRQ: its receive WQE came from there. Refused: bound to none (its CQ
  // stays, for the receive in progress).
  Srq* s = q.resp.in_msg == InMsg::none ? srq_get(pkt.xrc_srqn) : nullptr;
  if (!s || s->xrcd != q.xrcd) {
    q.srq = nullptr;
    q.pd = 0;
    return false;
  }
  q.srq = s;
  q.pd = s->pd;
  q.rcq = s->cq;
  return true;
}

void EngineImpl::xrc_srq_gone(const Srq& s) {
  for (Qp* q : qp_list)
    if (q->type == QPT_XRC_RECV && q->srq == &s) {
      q->srq = nullptr;
      q->rcq = nullptr;
      q->pd = 0;
      q->resp.have_recv = false;  // (a message in progress into it fails at its next packet)
    }
}

}  // namespace urxe::engine
