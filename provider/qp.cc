// QP verbs: create (plain and ibv_qp_ex with its ibv_wr_* builder), modify, query, destroy, and the data
// path's post_send / post_recv.
#include <algorithm>
#include <cstring>
#include <vector>

#include "provider/internal.h"

namespace urxe::provider {

namespace {

en::QpCap to_cap(const ibv_qp_cap& c) {
  return {c.max_send_wr, c.max_recv_wr, c.max_send_sge, c.max_recv_sge, c.max_inline_data};
}
void from_cap(const en::QpCap& c, ibv_qp_cap& o) {
  o.max_send_wr = c.max_send_wr;
  o.max_recv_wr = c.max_recv_wr;
  o.max_send_sge = c.max_send_sge;
  o.max_recv_sge = c.max_recv_sge;
  o.max_inline_data = c.max_inline_data;
}

bool our_cq(ibv_cq* c, ibv_context* ctx) {
  return c && c->context == ctx;
}

ibv_qp* create_qp_common(ibv_context* ibctx, ibv_pd* ibpd, ibv_qp_init_attr* attr) {
  ContextState& st = state_of(ibctx);
  const bool xrc_send = attr->qp_type == IBV_QPT_XRC_SEND;
  if (attr->qp_type != IBV_QPT_RC && attr->qp_type != IBV_QPT_UC && attr->qp_type != IBV_QPT_UD &&
      !xrc_send) {
    errno = EOPNOTSUPP;  // (XRC_RECV: urxe_create_xrc_target)
    return nullptr;
  }
  if (xrc_send) {  // no receive queue: its receive CQ and SRQ are ignored, as by the kernel
    attr->recv_cq = attr->send_cq;
    attr->srq = nullptr;
    attr->cap.max_recv_wr = attr->cap.max_recv_sge = 0;
  }
  if (!ibpd || ibpd->context != ibctx || !our_cq(attr->send_cq, ibctx) || !our_cq(attr->recv_cq, ibctx) ||
      (attr->srq && attr->srq->context != ibctx)) {
    errno = EINVAL;
    return nullptr;
  }
  en::QpInitAttr init;
  init.send_cq = to_cq(attr->send_cq)->handle;
  init.recv_cq = to_cq(attr->recv_cq)->handle;
  init.srq = attr->srq ? to_srq(attr->srq)->handle : 0;
  init.cap = to_cap(attr->cap);
  init.qp_type = static_cast<en::QpType>(attr->qp_type);
  init.sq_sig_all = attr->sq_sig_all != 0;
  init.single_threaded = in_thread_domain(ibpd);  // its posts take no lock
  uint32_t qpn;
  en::QpCap actual;
  auto* qp = domain_zalloc<UrxeQp>(ibpd, kResTypeQp);
  if (int rc = st.engine->create_qp(to_pd(ibpd)->handle, init, qpn, &actual)) {
    domain_zfree(qp, kResTypeQp);
    errno = rc;
    return nullptr;
  }
  from_cap(actual, attr->cap);  // ibv_create_qp reports the capacities granted
  pd_hold(ibpd);
  qp->ctx = &st;
  qp->type = init.qp_type;
  ibv_qp& q = qp->vqp.qp;
  // ibv_create_qp fills nothing itself: everything the kernel path set is ours to set.
  q.context = ibctx;
  q.qp_context = attr->qp_context;
  q.pd = ibpd;
  q.send_cq = attr->send_cq;
  q.recv_cq = xrc_send ? nullptr : attr->recv_cq;
  q.srq = attr->srq;
  q.handle = qpn;
  q.qp_num = qpn;
  q.state = IBV_QPS_RESET;
  q.qp_type = attr->qp_type;
  q.events_completed = 0;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  qp->vqp.comp_mask = 0;  // no ibv_qp_ex ops: ibv_qp_to_qp_ex() must return NULL
  std::lock_guard g(st.map_mu);
  st.qps[qpn] = qp;
  return &q;
}

}  // namespace

ibv_qp* urxe_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  return guarded<ibv_qp*>(nullptr, [&] { return create_qp_common(pd->context, pd, attr); });
}

// ---- ibv_qp_ex: work requests built with ibv_wr_*() between wr_start and wr_complete ----
// Preallocated at create time for max_send_wr WRs, their SGEs and their inline bytes, so building and
// posting allocate nothing. A builder error (too many WRs or SGEs) is reported by wr_complete.
struct WrBatch {
  uint32_t max_wr = 0, max_sge = 0, max_inline = 0;
  std::vector<en::SendWr> wrs;
  std::vector<en::Sge> sges;        // max_sge per WR
  std::vector<uint8_t> inline_buf;  // max_inline per WR
  // 8 bytes per WR: an ATOMIC WRITE's value (with IBV_QP_EX_WITH_ATOMIC_WRITE)
  std::vector<uint8_t> atomic_buf;
  uint32_t n = 0;
  int err = 0;
};

namespace {

// A BIND_MW WR for the engine: the window by its current key (ibv_mw.rkey: an app that bound a type-2
// window stores the key it gave there, as with rdma-core's rxe), the MR by its lkey (none: 0).
void set_bind(en::SendWr& e, const ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info& info) {
  e.bind_mw.mw_rkey = mw ? mw->rkey : 0;
  e.bind_mw.rkey = rkey;
  e.bind_mw.mr_lkey = info.mr ? info.mr->lkey : 0;
  e.bind_mw.addr = info.addr;
  e.bind_mw.length = info.length;
  e.bind_mw.access = info.mw_access_flags;
}

UrxeQp* qpx_qp(ibv_qp_ex* x) {
  return reinterpret_cast<UrxeQp*>(x);
}

en::SendWr* wr_new(ibv_qp_ex* x, en::WrOpcode op) {
  WrBatch& b = *qpx_qp(x)->batch;
  if (b.n >= b.max_wr) {
    b.err = ENOMEM;
    return nullptr;
  }
  en::SendWr& w = b.wrs[b.n++];
  w = en::SendWr{};
  w.wr_id = x->wr_id;
  w.send_flags = x->wr_flags;
  w.opcode = op;
  return &w;
}
en::SendWr* wr_cur(ibv_qp_ex* x) {
  WrBatch& b = *qpx_qp(x)->batch;
  return b.n ? &b.wrs[b.n - 1] : nullptr;
}

void wrx_rdma(ibv_qp_ex* x, en::WrOpcode op, uint32_t rkey, uint64_t addr, __be32 imm) {
  if (en::SendWr* w = wr_new(x, op)) {
    w->rdma.rkey = rkey;
    w->rdma.remote_addr = addr;
    w->imm_data = imm;
  }
}
void wrx_rdma_write(ibv_qp_ex* x, uint32_t rkey, uint64_t addr) {
  wrx_rdma(x, en::WR_RDMA_WRITE, rkey, addr, 0);
}
void wrx_rdma_write_imm(ibv_qp_ex* x, uint32_t rkey, uint64_t addr, __be32 imm) {
  wrx_rdma(x, en::WR_RDMA_WRITE_WITH_IMM, rkey, addr, imm);
}
void wrx_rdma_read(ibv_qp_ex* x, uint32_t rkey, uint64_t addr) {
  wrx_rdma(x, en::WR_RDMA_READ, rkey, addr, 0);
}
void wrx_send(ibv_qp_ex* x) {
  wr_new(x, en::WR_SEND);
}
void wrx_send_imm(ibv_qp_ex* x, __be32 imm) {
  if (en::SendWr* w = wr_new(x, en::WR_SEND_WITH_IMM)) w->imm_data = imm;
}
void wrx_send_inv(ibv_qp_ex* x, uint32_t rkey) {
  if (en::SendWr* w = wr_new(x, en::WR_SEND_WITH_INV)) w->invalidate_rkey = rkey;
}
void wrx_local_inv(ibv_qp_ex* x, uint32_t rkey) {
  if (en::SendWr* w = wr_new(x, en::WR_LOCAL_INV)) w->invalidate_rkey = rkey;
}
void wrx_bind_mw(ibv_qp_ex* x, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) {
  if (en::SendWr* w = wr_new(x, en::WR_BIND_MW)) set_bind(*w, mw, rkey, *info);
}
void wrx_cmp_swp(ibv_qp_ex* x, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap) {
  if (en::SendWr* w = wr_new(x, en::WR_ATOMIC_CMP_AND_SWP)) {
    w->atomic.rkey = rkey;
    w->atomic.remote_addr = addr;
    w->atomic.compare_add = compare;
    w->atomic.swap = swap;
  }
}
void wrx_fetch_add(ibv_qp_ex* x, uint32_t rkey, uint64_t addr, uint64_t add) {
  if (en::SendWr* w = wr_new(x, en::WR_ATOMIC_FETCH_AND_ADD)) {
    w->atomic.rkey = rkey;
    w->atomic.remote_addr = addr;
    w->atomic.compare_add = add;
  }
}
// ATOMIC WRITE (IBV_QP_EX_WITH_ATOMIC_WRITE, RC): the 8 bytes at atomic_wr, copied now (the caller's
// buffer need not outlive the call), go inline: the engine keeps them in the WQE, whatever max_inline_data.
void wrx_atomic_write(ibv_qp_ex* x, uint32_t rkey, uint64_t addr, const void* atomic_wr) {
  WrBatch& b = *qpx_qp(x)->batch;
  en::SendWr* w = wr_new(x, en::WR_ATOMIC_WRITE);
  if (!w) return;
  w->rdma.rkey = rkey;
  w->rdma.remote_addr = addr;
  uint8_t* dst = &b.atomic_buf[size_t{b.n - 1} * 8];
  std::memcpy(dst, atomic_wr, 8);
  en::Sge* sge = &b.sges[size_t{b.n - 1} * b.max_sge];
  *sge = {reinterpret_cast<uintptr_t>(dst), 8, 0};
  w->sg_list = sge;
  w->num_sge = 1;
  w->send_flags |= en::SEND_INLINE;
}
void wrx_set_ud_addr(ibv_qp_ex* x, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  if (en::SendWr* w = wr_cur(x)) {
    w->ud.ah = ah ? reinterpret_cast<UrxeAh*>(ah)->handle : 0;
    w->ud.remote_qpn = remote_qpn;
    w->ud.remote_qkey = remote_qkey;
  }
}
void wrx_set_xrc_srqn(ibv_qp_ex* x, uint32_t remote_srqn) {
  if (en::SendWr* w = wr_cur(x)) w->xrc_remote_srqn = remote_srqn;
}
void wrx_set_sge_list(ibv_qp_ex* x, size_t num, const ibv_sge* list) {
  WrBatch& b = *qpx_qp(x)->batch;
  en::SendWr* w = wr_cur(x);
  if (!w) return;
  if (num > b.max_sge) {
    b.err = EINVAL;
    return;
  }
  en::Sge* dst = &b.sges[size_t{b.n - 1} * b.max_sge];
  for (size_t i = 0; i < num; ++i) dst[i] = {list[i].addr, list[i].length, list[i].lkey};
  w->sg_list = dst;
  w->num_sge = static_cast<int>(num);
}
void wrx_set_sge(ibv_qp_ex* x, uint32_t lkey, uint64_t addr, uint32_t length) {
  const ibv_sge one{addr, length, lkey};
  wrx_set_sge_list(x, 1, &one);
}
void wrx_set_inline_data_list(ibv_qp_ex* x, size_t num, const ibv_data_buf* bufs) {
  WrBatch& b = *qpx_qp(x)->batch;
  en::SendWr* w = wr_cur(x);
  if (!w) return;
  size_t total = 0;
  for (size_t i = 0; i < num; ++i) total += bufs[i].length;
  if (total > b.max_inline) {
    b.err = EINVAL;
    return;
  }
  uint8_t* dst = &b.inline_buf[size_t{b.n - 1} * b.max_inline];
  size_t off = 0;
  for (size_t i = 0; i < num; ++i) {
    if (bufs[i].length) std::memcpy(dst + off, bufs[i].addr, bufs[i].length);
    off += bufs[i].length;
  }
  en::Sge* sge = &b.sges[size_t{b.n - 1} * b.max_sge];
  *sge = {reinterpret_cast<uintptr_t>(dst), static_cast<uint32_t>(total), 0};
  w->sg_list = sge;
  w->num_sge = 1;
  w->send_flags |= en::SEND_INLINE;
}
void wrx_set_inline_data(ibv_qp_ex* x, void* addr, size_t length) {
  const ibv_data_buf one{addr, length};
  wrx_set_inline_data_list(x, 1, &one);
}
void wrx_start(ibv_qp_ex* x) {
  WrBatch& b = *qpx_qp(x)->batch;
  b.n = 0;
  b.err = 0;
}
void wrx_abort(ibv_qp_ex* x) {
  wrx_start(x);
}
int wrx_complete(ibv_qp_ex* x) {
  UrxeQp* qp = qpx_qp(x);
  WrBatch& b = *qp->batch;
  int rc = b.err;
  if (!rc && b.n) {
    for (uint32_t i = 0; i + 1 < b.n; ++i) b.wrs[i].next = &b.wrs[i + 1];
    b.wrs[b.n - 1].next = nullptr;
    const en::SendWr* bad = nullptr;
    try {
      rc = qp->ctx->engine->post_send(qp->vqp.qp.qp_num, b.wrs.data(), &bad);  // rings the doorbell
    } catch (...) {
      rc = ENOMEM;
    }
  }
  b.n = 0;
  b.err = 0;
  return rc;
}

}  // namespace

ibv_qp* urxe_create_qp_ex(ibv_context* ibctx, ibv_qp_init_attr_ex* ax) {
  return guarded<ibv_qp*>(nullptr, [&]() -> ibv_qp* {
    if (ax->qp_type == IBV_QPT_XRC_RECV) return urxe_create_xrc_target(ibctx, ax);
    if (!(ax->comp_mask & IBV_QP_INIT_ATTR_PD)) {
      errno = EINVAL;
      return nullptr;
    }
    if (ax->comp_mask & ~uint32_t(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
                                  IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_XRCD)) {
      errno = EOPNOTSUPP;  // TSO, RSS: not supported (an XRC_SEND QP needs no XRCD)
      return nullptr;
    }
    constexpr uint64_t kSendOps =
        IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
        IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
        IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV |
        IBV_QP_EX_WITH_ATOMIC_WRITE | IBV_QP_EX_WITH_BIND_MW;
    const bool want_ex = ax->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    if (want_ex && (ax->send_ops_flags & ~kSendOps)) {
      errno = EOPNOTSUPP;  // TSO, FLUSH
      return nullptr;
    }
    // ATOMIC WRITE is RC only (Annex A19); rdma-core 44 has no device capability bit for it, so an app
    // learns it here (pyverbs skips its test on this EOPNOTSUPP).
    if (want_ex && (ax->send_ops_flags & IBV_QP_EX_WITH_ATOMIC_WRITE) && ax->qp_type != IBV_QPT_RC) {
      errno = EOPNOTSUPP;
      return nullptr;
    }
    if ((ax->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && ax->create_flags) {
      errno = EOPNOTSUPP;
      return nullptr;
    }
    ibv_qp_init_attr a{};
    a.qp_context = ax->qp_context;
    a.send_cq = ax->send_cq;
    a.recv_cq = ax->recv_cq;
    a.srq = ax->srq;
    a.cap = ax->cap;
    a.qp_type = ax->qp_type;
    a.sq_sig_all = ax->sq_sig_all;
    ibv_qp* qp = create_qp_common(ibctx, ax->pd, &a);
    if (!qp) return nullptr;
    ax->cap = a.cap;
    if (want_ex) {
      UrxeQp* uq = to_qp(qp);
      auto* b = new WrBatch;
      b->max_wr = std::max(a.cap.max_send_wr, 1u);
      b->max_sge = std::max(a.cap.max_send_sge, 1u);
      b->max_inline = a.cap.max_inline_data;
      b->wrs.resize(b->max_wr);
      b->sges.resize(size_t{b->max_wr} * b->max_sge);
      b->inline_buf.resize(size_t{b->max_wr} * b->max_inline);
      if (ax->send_ops_flags & IBV_QP_EX_WITH_ATOMIC_WRITE) b->atomic_buf.resize(size_t{b->max_wr} * 8);
      uq->batch = b;
      ibv_qp_ex& x = uq->vqp.qp_ex;
      x.comp_mask = 0;
      x.wr_atomic_cmp_swp = wrx_cmp_swp;
      x.wr_bind_mw = wrx_bind_mw;
      x.wr_atomic_fetch_add = wrx_fetch_add;
      if (ax->send_ops_flags & IBV_QP_EX_WITH_ATOMIC_WRITE) x.wr_atomic_write = wrx_atomic_write;
      x.wr_local_inv = wrx_local_inv;
      x.wr_rdma_read = wrx_rdma_read;
      x.wr_rdma_write = wrx_rdma_write;
      x.wr_rdma_write_imm = wrx_rdma_write_imm;
      x.wr_send = wrx_send;
      x.wr_send_imm = wrx_send_imm;
      x.wr_send_inv = wrx_send_inv;
      x.wr_set_ud_addr = wrx_set_ud_addr;
      x.wr_set_xrc_srqn = wrx_set_xrc_srqn;
      x.wr_set_inline_data = wrx_set_inline_data;
      x.wr_set_inline_data_list = wrx_set_inline_data_list;
      x.wr_set_sge = wrx_set_sge;
      x.wr_set_sge_list = wrx_set_sge_list;
      x.wr_start = wrx_start;
      x.wr_complete = wrx_complete;
      x.wr_abort = wrx_abort;
      uq->vqp.comp_mask |= URXE_VERBS_QP_EX;  // now ibv_qp_to_qp_ex() hands out &qp_ex
    }
    return qp;
  });
}

int urxe_modify_qp(ibv_qp* ibqp, ibv_qp_attr* a, int mask) {
  return guarded(EIO, [&] {
    UrxeQp* qp = to_qp(ibqp);
    ContextState& st = *qp->ctx;
    en::QpAttr e;
    e.qp_state = static_cast<en::QpState>(a->qp_state);
    e.cur_qp_state = static_cast<en::QpState>(a->cur_qp_state);
    e.path_mtu = static_cast<en::Mtu>(a->path_mtu);
    e.path_mig_state = static_cast<en::MigState>(a->path_mig_state);
    e.qkey = a->qkey;
    e.rq_psn = a->rq_psn;
    e.sq_psn = a->sq_psn;
    e.dest_qp_num = a->dest_qp_num;
    e.qp_access_flags = static_cast<uint32_t>(a->qp_access_flags);
    e.cap = to_cap(a->cap);
    e.pkey_index = a->pkey_index;
    e.en_sqd_async_notify = a->en_sqd_async_notify;
    e.sq_draining = a->sq_draining;
    e.max_rd_atomic = a->max_rd_atomic;
    e.max_dest_rd_atomic = a->max_dest_rd_atomic;
    e.min_rnr_timer = a->min_rnr_timer;
    e.port_num = a->port_num;
    e.timeout = a->timeout;
    e.retry_cnt = a->retry_cnt;
    e.rnr_retry = a->rnr_retry;
    e.rate_limit = a->rate_limit;
    if (mask & IBV_QP_AV) {
      if (int rc = resolve_dmac(ibqp->context, st, a->ah_attr, e.ah_attr)) return rc;
    }
    return st.engine->modify_qp(ibqp->qp_num, e, static_cast<uint32_t>(mask));
  });
}

int urxe_query_qp(ibv_qp* ibqp, ibv_qp_attr* a, int /*mask*/, ibv_qp_init_attr* init) {
  return guarded(EIO, [&] {
    UrxeQp* qp = to_qp(ibqp);
    en::QpAttr e;
    en::QpInitAttr ei;
    if (int rc = qp->ctx->engine->query_qp(ibqp->qp_num, e, &ei)) return rc;
    std::memset(a, 0, sizeof *a);
    a->qp_state = static_cast<ibv_qp_state>(e.qp_state);
    a->cur_qp_state = static_cast<ibv_qp_state>(e.cur_qp_state);
    a->path_mtu = static_cast<ibv_mtu>(e.path_mtu);
    a->path_mig_state = static_cast<ibv_mig_state>(e.path_mig_state);
    a->qkey = e.qkey;
    a->rq_psn = e.rq_psn;
    a->sq_psn = e.sq_psn;
    a->dest_qp_num = e.dest_qp_num;
    a->qp_access_flags = static_cast<unsigned>(e.qp_access_flags);
    from_cap(e.cap, a->cap);
    a->ah_attr.is_global = 1;
    std::memcpy(a->ah_attr.grh.dgid.raw, e.ah_attr.dgid.data(), 16);
    a->ah_attr.grh.sgid_index = e.ah_attr.sgid_index;
    a->ah_attr.grh.hop_limit = e.ah_attr.hop_limit;
    a->ah_attr.grh.traffic_class = e.ah_attr.traffic_class;
    a->ah_attr.grh.flow_label = e.ah_attr.flow_label;
    a->ah_attr.sl = e.ah_attr.sl;
    a->ah_attr.port_num = e.ah_attr.port_num;
    a->pkey_index = e.pkey_index;
    a->en_sqd_async_notify = e.en_sqd_async_notify;
    a->sq_draining = e.sq_draining;
    a->max_rd_atomic = e.max_rd_atomic;
    a->max_dest_rd_atomic = e.max_dest_rd_atomic;
    a->min_rnr_timer = e.min_rnr_timer;
    a->port_num = e.port_num;
    a->timeout = e.timeout;
    a->retry_cnt = e.retry_cnt;
    a->rnr_retry = e.rnr_retry;
    a->rate_limit = e.rate_limit;
    if (init) {
      std::memset(init, 0, sizeof *init);
      init->qp_context = ibqp->qp_context;
      init->send_cq = ibqp->send_cq;
      init->recv_cq = ibqp->recv_cq;
      init->srq = ibqp->srq;
      from_cap(ei.cap, init->cap);
      init->qp_type = ibqp->qp_type;
      init->sq_sig_all = ei.sq_sig_all;
    }
    return 0;
  });
}

int urxe_destroy_qp(ibv_qp* ibqp) {
  return guarded(EIO, [&] {
    UrxeQp* qp = to_qp(ibqp);
    ContextState& st = *qp->ctx;
    // What has arrived is answered first, as a NIC that works as frames come would have: the ACK of a
    // message that reached the QP while the app was done polling (its progress thread naps while the app
    // drives and needs tens of us to wake). ibv_srq_pingpong's peer sends past its count and failed on
    // the missing ACK when this side tore down first.
    st.engine->progress();
    if (int rc = st.engine->destroy_qp(ibqp->qp_num)) return rc;
    uint32_t async;
    {
      std::lock_guard g(st.map_mu);
      // (an XRC target's other handles, ibv_open_qp's, are not the one events go to)
      if (auto it = st.qps.find(ibqp->qp_num); it != st.qps.end() && it->second == qp) st.qps.erase(it);
      async =
          qp->async_reported - purge_records(st.async_rd, st.async_wr, 16, reinterpret_cast<uintptr_t>(ibqp));
    }
    wait_acked(&ibqp->mutex, &ibqp->cond, &ibqp->events_completed, async, nullptr, 0);
    pthread_cond_destroy(&ibqp->cond);
    pthread_mutex_destroy(&ibqp->mutex);
    delete qp->batch;
    ibv_pd* pd = ibqp->pd;
    domain_zfree(qp, kResTypeQp);
    pd_release(pd);
    return 0;
  });
}

int urxe_post_send(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  UrxeQp* qp = to_qp(ibqp);
  en::Engine& eng = *qp->ctx->engine;
  try {
    while (wr) {
      WrChunk<en::SendWr> chunk;
      en::SendWr* ew = chunk.w;
      ibv_send_wr* src[kWrChunk];
      int n = 0;
      for (ibv_send_wr* w = wr; w && n < kWrChunk; w = w->next, ++n) {
        en::SendWr& e = *new (&ew[n]) en::SendWr{};
        src[n] = w;
        e.wr_id = w->wr_id;
        e.sg_list = reinterpret_cast<const en::Sge*>(w->sg_list);
        e.num_sge = w->num_sge;
        e.opcode = static_cast<en::WrOpcode>(w->opcode);
        e.send_flags = w->send_flags;
        e.imm_data = w->imm_data;  // shares storage with invalidate_rkey, as in the engine
        e.invalidate_rkey = w->invalidate_rkey;
        if (qp->type == en::QPT_UD) {
          e.ud.ah = w->wr.ud.ah ? reinterpret_cast<UrxeAh*>(w->wr.ud.ah)->handle : 0;
          e.ud.remote_qpn = w->wr.ud.remote_qpn;
          e.ud.remote_qkey = w->wr.ud.remote_qkey;
        } else if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
          e.atomic.remote_addr = w->wr.atomic.remote_addr;
          e.atomic.compare_add = w->wr.atomic.compare_add;
          e.atomic.swap = w->wr.atomic.swap;
          e.atomic.rkey = w->wr.atomic.rkey;
        } else if (w->opcode == IBV_WR_BIND_MW) {
          set_bind(e, w->bind_mw.mw, w->bind_mw.rkey, w->bind_mw.bind_info);
        } else {
          e.rdma.remote_addr = w->wr.rdma.remote_addr;
          e.rdma.rkey = w->wr.rdma.rkey;
        }
        if (qp->type == en::QPT_XRC_SEND) e.xrc_remote_srqn = w->qp_type.xrc.remote_srqn;
        if (n) ew[n - 1].next = &e;
      }
      const en::SendWr* bad = nullptr;
      int rc = eng.post_send(ibqp->qp_num, ew, &bad);  // rings the doorbell if it queued work
      if (rc) {
        URXE_DEBUG("post_send on QP 0x%x failed: %s", ibqp->qp_num, std::strerror(rc));
        *bad_wr = bad ? src[bad - ew] : wr;
        return rc;
      }
      wr = src[n - 1]->next;
    }
    return 0;
  } catch (...) {
    *bad_wr = wr;
    return ENOMEM;
  }
}

int urxe_post_recv(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  ContextState& st = *to_qp(ibqp)->ctx;
  return post_recv_list(wr, bad_wr, [&](const en::RecvWr* w, const en::RecvWr** bad) {
    return st.engine->post_recv(ibqp->qp_num, w, bad);
  });
}

}  // namespace urxe::provider
