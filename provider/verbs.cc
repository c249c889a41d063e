// PD, MR, AH and SRQ verbs.
#include <cstring>

#include "provider/internal.h"
#include "provider/user_memory.h"

// ibv_resolve_eth_l2_from_gid (IBVERBS_1.1) is exported but declared only in driver.h.
extern "C" int ibv_resolve_eth_l2_from_gid(struct ibv_context* context, struct ibv_ah_attr* attr,
                                           uint8_t eth_mac[6], uint16_t* vid);

namespace urxe::provider {

// ---------------------------------------------------------------------------------------------------
// PD, MR

ibv_pd* urxe_alloc_pd(ibv_context* ibctx) {
  return guarded<ibv_pd*>(nullptr, [&]() -> ibv_pd* {
    uint32_t h;
    if (int rc = state_of(ibctx).engine->alloc_pd(h)) {
      errno = rc;
      return nullptr;
    }
    auto* pd = zalloc<UrxePd>();
    pd->pd.context = ibctx;
    pd->pd.handle = h;
    pd->handle = h;
    return &pd->pd;
  });
}

// A PD or a parent domain (domains.cc): EBUSY while parent domains, or objects created through the
// parent domain, use it.
int urxe_dealloc_pd(ibv_pd* ibpd) {
  return guarded(EIO, [&] {
    auto* pd = to_pd(ibpd);
    if (pd->users.load(std::memory_order_relaxed)) return EBUSY;
    if (pd->protection) {
      pd->protection->users.fetch_sub(1, std::memory_order_relaxed);
      if (pd->td) pd->td->users.fetch_sub(1, std::memory_order_relaxed);
      zfree(pd);
      return 0;
    }
    if (int rc = state_of(ibpd->context).engine->dealloc_pd(pd->handle)) return rc;
    zfree(pd);
    return 0;
  });
}

namespace {

// reg_mr/rereg_mr's range check (provider/user_memory.h): what the kernel's pinning would find, for writing
// when the access writes (ib_access_writable). Done before any key exists that a peer could aim at; skipped
// when the kernel's access rule (remote write or atomic needs local write) fails first: the engine's EINVAL.
int pin_check(const void* addr, size_t length, int access) {
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))
    return 0;
  constexpr int kWritable =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND;
  return urxe::provider::check_user_range(addr, length, (access & kWritable) != 0);
}

}  // namespace

ibv_mr* urxe_reg_mr(ibv_pd* ibpd, void* addr, size_t length, uint64_t hca_va, int access) {
  return guarded<ibv_mr*>(nullptr, [&]() -> ibv_mr* {
    en::MrInfo info;
    const uint64_t iova = (access & IBV_ACCESS_ZERO_BASED) ? 0 : hca_va;
    // On-demand paging pins nothing: pages are faulted in at each access (engine::OdpFaultIn).
    if (int rc = (access & IBV_ACCESS_ON_DEMAND) ? 0 : pin_check(addr, length, access)) {
      errno = rc;
      return nullptr;
    }
    if (int rc = state_of(ibpd->context)
                     .engine->reg_mr(to_pd(ibpd)->handle, addr, length, iova, static_cast<uint32_t>(access),
                                     info)) {
      errno = rc;
      return nullptr;
    }
    auto* mr = zalloc<UrxeMr>();
    mr->vmr.ibv_mr.context = ibpd->context;
    mr->vmr.ibv_mr.pd = ibpd;
    mr->vmr.ibv_mr.addr = addr;
    mr->vmr.ibv_mr.length = length;
    mr->vmr.ibv_mr.handle = info.lkey;
    mr->vmr.ibv_mr.lkey = info.lkey;
    mr->vmr.ibv_mr.rkey = info.rkey;
    mr->vmr.mr_type = URXE_IBV_MR_TYPE_MR;
    mr->vmr.access = access;
    pd_hold(ibpd);
    return &mr->vmr.ibv_mr;
  });
}

// ibv_rereg_mr: in place, lkey/rkey kept (as kernel rxe); libibverbs itself then updates mr->pd, addr and
// length. A failure returns the errno value (the core turns it into IBV_REREG_MR_ERR_CMD) with errno set.
int urxe_rereg_mr(verbs_mr* vmr, int flags, ibv_pd* ibpd, void* addr, size_t length, int access) {
  const int rc = guarded(EIO, [&] {
    ibv_mr& mr = vmr->ibv_mr;
    uint32_t pd = 0;
    if (flags & IBV_REREG_MR_CHANGE_PD) {
      if (!ibpd || ibpd->context != mr.context) return EINVAL;
      pd = to_pd(ibpd)->handle;
    }
    // A new range, or new rights on the old one, must pass what pinning would check (as in reg_mr).
    if ((flags & (IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS)) &&
        !(vmr->access & IBV_ACCESS_ON_DEMAND)) {
      const bool moved = flags & IBV_REREG_MR_CHANGE_TRANSLATION;
      const int acc = (flags & IBV_REREG_MR_CHANGE_ACCESS) ? access : vmr->access;
      if (int r = pin_check(moved ? addr : mr.addr, moved ? length : mr.length, acc)) return r;
    }
    if (int r = state_of(mr.context)
                    .engine->rereg_mr(mr.lkey, static_cast<uint32_t>(flags), pd, addr, length,
                                      static_cast<uint32_t>(access)))
      return r;
    if (flags & IBV_REREG_MR_CHANGE_ACCESS) vmr->access = access;
    if (flags & IBV_REREG_MR_CHANGE_PD) {  // (libibverbs sets mr.pd = ibpd after this)
      pd_hold(ibpd);
      pd_release(mr.pd);
    }
    return 0;
  });
  if (rc) errno = rc;
  return rc;
}

// ibv_advise_mr: the engine faults the SGEs' pages in (prefetch), synchronously whatever the flags say.
int urxe_advise_mr(ibv_pd* ibpd, enum ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list,
                   uint32_t num_sge) {
  return guarded(EIO, [&] {
    if (!sg_list || num_sge == 0 || num_sge > 1024) return EINVAL;
    std::vector<en::Sge> sges(num_sge);
    for (uint32_t i = 0; i < num_sge; i++) sges[i] = {sg_list[i].addr, sg_list[i].length, sg_list[i].lkey};
    return state_of(ibpd->context)
        .engine->advise_mr(to_pd(ibpd)->handle, static_cast<uint32_t>(advice), flags, sges.data(), num_sge);
  });
}

int urxe_dereg_mr(verbs_mr* vmr) {
  return guarded(EIO, [&] {
    if (int rc = state_of(vmr->ibv_mr.context).engine->dereg_mr(vmr->ibv_mr.lkey)) return rc;
    auto* mr = reinterpret_cast<UrxeMr*>(vmr);
    if (mr->dm) mr->dm->mrs.fetch_sub(1);
    pd_release(vmr->ibv_mr.pd);
    zfree(mr);
    return 0;
  });
}

// ---------------------------------------------------------------------------------------------------
// AH

// The destination MAC of a RoCE address vector: our own MAC for our own GIDs (two QPs on one device),
// the multicast mapping for multicast GIDs, else the kernel's neighbour table (libibverbs' resolver).
int resolve_dmac(ibv_context* ibctx, ContextState& st, ibv_ah_attr& ah, en::AddressVector& av) {
  if (!ah.is_global) return EINVAL;  // RoCE needs a GRH
  std::memcpy(av.dgid.data(), ah.grh.dgid.raw, 16);
  av.sgid_index = ah.grh.sgid_index;
  av.hop_limit = ah.grh.hop_limit;
  av.traffic_class = ah.grh.traffic_class;
  av.flow_label = ah.grh.flow_label;
  av.sl = ah.sl;
  av.port_num = ah.port_num ? ah.port_num : 1;
  if (ah.grh.sgid_index >= st.config.gid_tbl_len) return EINVAL;
  const auto gids = st.engine->gid_table();
  for (const auto& g : gids) {
    if (g != urxe::wire::Gid{} && g == av.dgid) {
      av.dmac = st.netdev.mac;
      return 0;
    }
  }
  if (en::gid_is_multicast(av.dgid)) {  // 01:00:5e:… (IPv4) or 33:33:… (IPv6)
    av.dmac = en::multicast_mac(av.dgid);
    return 0;
  }
  uint16_t vid = 0xffff;
  if (ibv_resolve_eth_l2_from_gid(ibctx, &ah, av.dmac.data(), &vid) != 0) return errno ? errno : EHOSTUNREACH;
  return 0;
}

// ---------------------------------------------------------------------------------------------------
// Multicast (UD): the engine keeps the groups (and asks the port for their MACs). The LID is ignored, as
// the kernel does on RoCE ("multicast LID should be ignored"). A bare attach joins nothing at IP level
// (as rxe): the RDMA CM join does (IGMP), in the CM service.

int urxe_attach_mcast(ibv_qp* ibqp, const ibv_gid* gid, uint16_t /*lid*/) {
  return guarded(EIO, [&] {
    urxe::wire::Gid g;
    std::memcpy(g.data(), gid->raw, 16);
    return state_of(ibqp->context).engine->attach_mcast(ibqp->qp_num, g);
  });
}

int urxe_detach_mcast(ibv_qp* ibqp, const ibv_gid* gid, uint16_t /*lid*/) {
  return guarded(EIO, [&] {
    urxe::wire::Gid g;
    std::memcpy(g.data(), gid->raw, 16);
    return state_of(ibqp->context).engine->detach_mcast(ibqp->qp_num, g);
  });
}

ibv_ah* urxe_create_ah(ibv_pd* ibpd, ibv_ah_attr* attr) {
  return guarded<ibv_ah*>(nullptr, [&]() -> ibv_ah* {
    ContextState& st = state_of(ibpd->context);
    en::AddressVector av;
    if (int rc = resolve_dmac(ibpd->context, st, *attr, av)) {
      errno = rc;
      return nullptr;
    }
    uint32_t h;
    if (int rc = st.engine->create_ah(to_pd(ibpd)->handle, av, h)) {
      errno = rc;
      return nullptr;
    }
    auto* ah = zalloc<UrxeAh>();
    ah->ah.context = ibpd->context;
    ah->ah.pd = ibpd;
    ah->ah.handle = h;
    ah->handle = h;
    pd_hold(ibpd);
    return &ah->ah;
  });
}

int urxe_destroy_ah(ibv_ah* ibah) {
  return guarded(EIO, [&] {
    auto* ah = reinterpret_cast<UrxeAh*>(ibah);
    if (int rc = state_of(ibah->context).engine->destroy_ah(ah->handle)) return rc;
    pd_release(ibah->pd);
    zfree(ah);
    return 0;
  });
}

// ---------------------------------------------------------------------------------------------------
// SRQ

ibv_srq* urxe_create_srq(ibv_pd* ibpd, ibv_srq_init_attr* attr) {
  return guarded<ibv_srq*>(nullptr, [&]() -> ibv_srq* {
    ContextState& st = state_of(ibpd->context);
    en::SrqAttr in{attr->attr.max_wr, attr->attr.max_sge, attr->attr.srq_limit}, actual;
    auto* srq = domain_zalloc<UrxeSrq>(ibpd, kResTypeSrq);
    uint32_t h;
    if (int rc = st.engine->create_srq(to_pd(ibpd)->handle, in, h, &actual)) {
      domain_zfree(srq, kResTypeSrq);
      errno = rc;
      return nullptr;
    }
    attr->attr.max_wr = actual.max_wr;
    attr->attr.max_sge = actual.max_sge;
    pd_hold(ibpd);
    srq->handle = h;
    srq->ctx = &st;
    srq->vsrq.srq.context = ibpd->context;
    srq->vsrq.srq.srq_context = attr->srq_context;
    srq->vsrq.srq.pd = ibpd;
    srq->vsrq.srq.handle = h;
    srq->vsrq.srq_type = IBV_SRQT_BASIC;
    std::lock_guard g(st.map_mu);
    st.srqs[h] = srq;
    return &srq->vsrq.srq;
  });
}

int urxe_modify_srq(ibv_srq* ibsrq, ibv_srq_attr* attr, int mask) {
  return guarded(EIO, [&] {
    UrxeSrq* srq = to_srq(ibsrq);
    en::SrqAttr a{attr->max_wr, attr->max_sge, attr->srq_limit};
    return srq->ctx->engine->modify_srq(srq->handle, a, static_cast<uint32_t>(mask));
  });
}

int urxe_query_srq(ibv_srq* ibsrq, ibv_srq_attr* attr) {
  return guarded(EIO, [&] {
    UrxeSrq* srq = to_srq(ibsrq);
    en::SrqAttr a;
    if (int rc = srq->ctx->engine->query_srq(srq->handle, a)) return rc;
    attr->max_wr = a.max_wr;
    attr->max_sge = a.max_sge;
    attr->srq_limit = a.srq_limit;
    return 0;
  });
}

int urxe_destroy_srq(ibv_srq* ibsrq) {
  return guarded(EIO, [&] {
    UrxeSrq* srq = to_srq(ibsrq);
    ContextState& st = *srq->ctx;
    if (int rc = st.engine->destroy_srq(srq->handle)) return rc;
    uint32_t async;
    {
      std::lock_guard g(st.map_mu);
      st.srqs.erase(srq->handle);
      async = srq->async_reported -
              purge_records(st.async_rd, st.async_wr, 16, reinterpret_cast<uintptr_t>(ibsrq));
    }
    wait_acked(&ibsrq->mutex, &ibsrq->cond, &ibsrq->events_completed, async, nullptr, 0);
    ibv_pd* pd = ibsrq->pd;
    domain_zfree(srq, kResTypeSrq);
    pd_release(pd);
    return 0;
  });
}

int urxe_post_srq_recv(ibv_srq* ibsrq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  UrxeSrq* srq = to_srq(ibsrq);
  return post_recv_list(wr, bad_wr, [&](const en::RecvWr* w, const en::RecvWr** bad) {
    return srq->ctx->engine->post_srq_recv(srq->handle, w, bad);
  });
}

}  // namespace urxe::provider
