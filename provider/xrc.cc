// XRC verbs: ibv_open_xrcd / ibv_close_xrcd, XRC SRQs (ibv_create_srq_ex, which also makes basic SRQs and
// hands tag-matching ones to tag_matching.cc; ibv_get_srq_num), XRC target QPs
// (ibv_create_qp_ex with IBV_QPT_XRC_RECV) and ibv_open_qp. XRC_SEND QPs are created by qp.cc as RC QPs are.
//
// An XRC domain opened on a file follows the file's inode, as the kernel's: every ibv_open_xrcd of that
// file on this context reaches the same domain (O_CREAT creates it when absent, O_CREAT | O_EXCL fails with
// EEXIST when present), and it goes when the last one is closed. The engine lives in the process, so a
// domain is the process's: another process opening the same file gets its own, and its target QPs reach
// only its own SRQs (ibv_open_qp of a QP it did not create fails with EINVAL).
#include <fcntl.h>
#include <sys/stat.h>

#include <cstring>

#include "provider/internal.h"

namespace urxe::provider {

namespace {

UrxeXrcd* to_xrcd(ibv_xrcd* x) {
  return reinterpret_cast<UrxeXrcd*>(x);
}

// The QP wrapper of an XRC target (a new one, or another handle on one): no PD, CQs or SRQ of its own.
ibv_qp* target_handle(ContextState& st, ibv_context* ibctx, UrxeXrcd* xrcd, uint32_t qpn, void* qp_context,
                      bool registered) {
  auto* qp = domain_zalloc<UrxeQp>(nullptr, kResTypeQp);
  qp->ctx = &st;
  qp->type = en::QPT_XRC_RECV;
  ibv_qp& q = qp->vqp.qp;
  q.context = ibctx;
  q.qp_context = qp_context;
  q.handle = qpn;
  q.qp_num = qpn;
  q.state = IBV_QPS_RESET;
  q.qp_type = IBV_QPT_XRC_RECV;
  q.events_completed = 0;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  qp->vqp.comp_mask = URXE_VERBS_QP_XRCD;
  qp->vqp.xrcd = &xrcd->vxrcd;
  if (registered) {  // the creator's handle gets the QP's async events
    std::lock_guard g(st.map_mu);
    st.qps[qpn] = qp;
  }
  return &q;
}

}  // namespace

ibv_xrcd* urxe_open_xrcd(ibv_context* ibctx, ibv_xrcd_init_attr* attr) {
  return guarded<ibv_xrcd*>(nullptr, [&]() -> ibv_xrcd* {
    ContextState& st = state_of(ibctx);
    // (as the kernel's ib_uverbs_open_xrcd: both fields are required, and only these flags mean anything)
    constexpr uint32_t kNeeded = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    if ((attr->comp_mask & kNeeded) != kNeeded ||
        (attr->comp_mask & ~(kNeeded | IBV_XRCD_INIT_ATTR_RESERVED))) {
      errno = EINVAL;
      return nullptr;
    }
    const bool create = attr->oflags & O_CREAT, excl = attr->oflags & O_EXCL;
    std::pair<uint64_t, uint64_t> file{};
    if (attr->fd >= 0) {
      struct stat sb;
      if (fstat(attr->fd, &sb) != 0) {
        errno = EBADF;
        return nullptr;
      }
      file = {sb.st_dev, sb.st_ino};
    } else if (!create) {
      errno = EINVAL;  // a private domain (no file) is only ever created
      return nullptr;
    }
    auto* x = zalloc<UrxeXrcd>();
    x->ctx = &st;
    x->vxrcd.xrcd.context = ibctx;
    {
      std::lock_guard g(st.map_mu);
      auto it = attr->fd >= 0 ? st.xrcd_files.find(file) : st.xrcd_files.end();
      int rc = 0;
      if (it != st.xrcd_files.end()) {
        if (excl)
          rc = EEXIST;
        else
          x->handle = it->second.first, it->second.second++;
      } else if (!create) {
        rc = EINVAL;  // no domain on this file yet, and not asked to make one
      } else {
        rc = st.engine->alloc_xrcd(x->handle);
        if (!rc && attr->fd >= 0) st.xrcd_files[file] = {x->handle, 1};
      }
      if (rc) {
        zfree(x);
        errno = rc;
        return nullptr;
      }
    }
    x->on_file = attr->fd >= 0;
    x->file = file;
    x->vxrcd.handle = x->handle;
    return &x->vxrcd.xrcd;
  });
}

int urxe_close_xrcd(ibv_xrcd* ibxrcd) {
  return guarded(EIO, [&] {
    UrxeXrcd* x = to_xrcd(ibxrcd);
    ContextState& st = *x->ctx;
    std::lock_guard g(st.map_mu);
    if (x->on_file) {
      auto it = st.xrcd_files.find(x->file);
      if (it != st.xrcd_files.end() && it->second.second > 1) {  // other handles keep the domain
        it->second.second--;
        zfree(x);
        return 0;
      }
    }
    if (int rc = st.engine->dealloc_xrcd(x->handle)) return rc;  // EBUSY: SRQs or target QPs in it
    if (x->on_file) st.xrcd_files.erase(x->file);
    zfree(x);
    return 0;
  });
}

ibv_srq* urxe_create_srq_ex(ibv_context* ibctx, ibv_srq_init_attr_ex* attr) {
  return guarded<ibv_srq*>(nullptr, [&]() -> ibv_srq* {
    ContextState& st = state_of(ibctx);
    constexpr uint32_t kKnown =
        IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
    const ibv_srq_type type = (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) ? attr->srq_type : IBV_SRQT_BASIC;
    if (type == IBV_SRQT_TM) return urxe_create_tm_srq(ibctx, attr);
    if ((attr->comp_mask & ~kKnown) || (type != IBV_SRQT_BASIC && type != IBV_SRQT_XRC)) {
      errno = EOPNOTSUPP;  // anything newer
      return nullptr;
    }
    const bool xrc = type == IBV_SRQT_XRC;
    ibv_pd* ibpd = (attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) ? attr->pd : nullptr;
    ibv_xrcd* ibxrcd = (attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) ? attr->xrcd : nullptr;
    ibv_cq* ibcq = (attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) ? attr->cq : nullptr;
    if (!ibpd || ibpd->context != ibctx ||
        (xrc && (!ibxrcd || ibxrcd->context != ibctx || !ibcq || ibcq->context != ibctx))) {
      errno = EINVAL;
      return nullptr;
    }
    if (!xrc) {
      ibv_srq_init_attr basic{attr->srq_context, attr->attr};
      ibv_srq* s = urxe_create_srq(ibpd, &basic);
      if (!s) return nullptr;
      attr->attr = basic.attr;
      pthread_mutex_init(&s->mutex, nullptr);  // (ibv_create_srq does this for urxe_create_srq)
      pthread_cond_init(&s->cond, nullptr);
      s->events_completed = 0;
      return s;
    }
    en::SrqAttr in{attr->attr.max_wr, attr->attr.max_sge, attr->attr.srq_limit}, actual;
    auto* srq = domain_zalloc<UrxeSrq>(ibpd, kResTypeSrq);
    uint32_t h;
    if (int rc = st.engine->create_xrc_srq(to_xrcd(ibxrcd)->handle, to_pd(ibpd)->handle, to_cq(ibcq)->handle,
                                           in, h, &actual)) {
      domain_zfree(srq, kResTypeSrq);
      errno = rc;
      return nullptr;
    }
    attr->attr.max_wr = actual.max_wr;
    attr->attr.max_sge = actual.max_sge;
    pd_hold(ibpd);
    srq->handle = h;
    srq->ctx = &st;
    ibv_srq& s = srq->vsrq.srq;
    s.context = ibctx;
    s.srq_context = attr->srq_context;
    s.pd = ibpd;
    s.handle = h;
    s.events_completed = 0;
    pthread_mutex_init(&s.mutex, nullptr);
    pthread_cond_init(&s.cond, nullptr);
    srq->vsrq.srq_type = IBV_SRQT_XRC;
    srq->vsrq.xrcd = &to_xrcd(ibxrcd)->vxrcd;
    srq->vsrq.cq = ibcq;
    srq->vsrq.srq_num = h;
    std::lock_guard g(st.map_mu);
    st.srqs[h] = srq;
    return &s;
  });
}

int urxe_get_srq_num(ibv_srq* ibsrq, uint32_t* srq_num) {
  UrxeSrq* srq = to_srq(ibsrq);
  if (srq->vsrq.srq_type != IBV_SRQT_XRC) return EINVAL;  // (only XRC SRQs are named on the wire)
  *srq_num = srq->vsrq.srq_num;
  return 0;
}

ibv_qp* urxe_create_xrc_target(ibv_context* ibctx, ibv_qp_init_attr_ex* ax) {
  ContextState& st = state_of(ibctx);
  if (!(ax->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !ax->xrcd || ax->xrcd->context != ibctx ||
      (ax->comp_mask & ~uint32_t(IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_PD))) {
    errno = EINVAL;
    return nullptr;
  }
  en::QpInitAttr init;
  init.qp_type = en::QPT_XRC_RECV;
  init.xrcd = to_xrcd(ax->xrcd)->handle;
  uint32_t qpn;
  if (int rc = st.engine->create_qp(0, init, qpn, nullptr)) {
    errno = rc;
    return nullptr;
  }
  ax->cap = ibv_qp_cap{};  // no queues of its own
  return target_handle(st, ibctx, to_xrcd(ax->xrcd), qpn, ax->qp_context, true);
}

ibv_qp* urxe_open_qp(ibv_context* ibctx, ibv_qp_open_attr* attr) {
  return guarded<ibv_qp*>(nullptr, [&]() -> ibv_qp* {
    ContextState& st = state_of(ibctx);
    constexpr uint32_t kNeeded = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
    if ((attr->comp_mask & kNeeded) != kNeeded || attr->qp_type != IBV_QPT_XRC_RECV || !attr->xrcd ||
        attr->xrcd->context != ibctx) {
      errno = EINVAL;
      return nullptr;
    }
    UrxeXrcd* x = to_xrcd(attr->xrcd);
    if (int rc = st.engine->open_qp(x->handle, attr->qp_num)) {
      errno = rc;
      return nullptr;
    }
    void* qp_context = (attr->comp_mask & IBV_QP_OPEN_ATTR_CONTEXT) ? attr->qp_context : nullptr;
    return target_handle(st, ibctx, x, attr->qp_num, qp_context, false);
  });
}

}  // namespace urxe::provider
