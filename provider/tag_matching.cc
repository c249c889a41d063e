// Tag matching (engine/tag_matching.h) through libibverbs: ibv_create_srq_ex with IBV_SRQT_TM,
// ibv_post_srq_ops, ibv_wc_read_tm_info on an ibv_cq_ex made with IBV_WC_EX_WITH_TM_INFO, and
// ibv_query_device_ex's tm_caps. Ordinary SRQ verbs (post_srq_recv, destroy, query) work on a TM SRQ too.
#include <cerrno>
#include <mutex>

#include "provider/internal.h"

namespace urxe::provider {

void fill_tm_caps(ibv_tm_caps& caps) {
  caps.max_rndv_hdr_size = en::kTmCaps.max_rndv_hdr_size;
  caps.max_num_tags = en::kTmCaps.max_num_tags;
  caps.flags = en::kTmCaps.flags;
  caps.max_ops = en::kTmCaps.max_ops;
  caps.max_sge = en::kTmCaps.max_sge;
}

// ibv_srq_type BASIC never comes here (libibverbs calls create_srq for it); XRC is not supported.
ibv_srq* urxe_create_tm_srq(ibv_context* ibctx, ibv_srq_init_attr_ex* attr) {
  return guarded<ibv_srq*>(nullptr, [&]() -> ibv_srq* {
    constexpr uint32_t kKnown = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
                                IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
    if (attr->comp_mask & ~kKnown) {
      errno = EINVAL;
      return nullptr;
    }
    const ibv_srq_type type = (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) ? attr->srq_type : IBV_SRQT_BASIC;
    if (type != IBV_SRQT_TM) {
      errno = EOPNOTSUPP;
      return nullptr;
    }
    // a TM SRQ needs its PD, the CQ its list operations complete on, and its tm_cap
    constexpr uint32_t kTm = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
    if ((attr->comp_mask & kTm) != kTm || !attr->pd || !attr->cq || attr->pd->context != ibctx ||
        attr->cq->context != ibctx) {
      errno = EINVAL;
      return nullptr;
    }
    ContextState& st = state_of(ibctx);
    ibv_pd* ibpd = attr->pd;
    en::SrqAttr in{attr->attr.max_wr, attr->attr.max_sge, attr->attr.srq_limit}, actual;
    en::TmSrqAttr tm{attr->tm_cap.max_num_tags, attr->tm_cap.max_ops, to_cq(attr->cq)->handle};
    auto* srq = domain_zalloc<UrxeSrq>(ibpd, kResTypeSrq);
    uint32_t h;
    if (int rc = st.engine->create_srq_tm(to_pd(ibpd)->handle, in, tm, h, &actual)) {
      domain_zfree(srq, kResTypeSrq);
      errno = rc;
      return nullptr;
    }
    attr->attr.max_wr = actual.max_wr;
    attr->attr.max_sge = actual.max_sge;
    pd_hold(ibpd);
    srq->handle = h;
    srq->ctx = &st;
    srq->vsrq.srq.context = ibctx;
    srq->vsrq.srq.srq_context = attr->srq_context;
    srq->vsrq.srq.pd = ibpd;
    srq->vsrq.srq.handle = h;
    srq->vsrq.srq_type = IBV_SRQT_TM;
    srq->vsrq.cq = attr->cq;
    std::lock_guard g(st.map_mu);
    st.srqs[h] = srq;
    return &srq->vsrq.srq;
  });
}

int urxe_post_srq_ops(ibv_srq* ibsrq, ibv_ops_wr* wr, ibv_ops_wr** bad_wr) {
  return guarded(EIO, [&] {
    UrxeSrq* srq = to_srq(ibsrq);
    for (; wr; wr = wr->next) {
      en::OpsWr op;
      op.wr_id = wr->wr_id;
      op.opcode = static_cast<en::OpsWrOpcode>(wr->opcode);
      op.flags = static_cast<uint32_t>(wr->flags);
      op.unexpected_cnt = wr->tm.unexpected_cnt;
      op.handle = wr->tm.handle;
      op.recv_wr_id = wr->tm.add.recv_wr_id;
      op.sg_list = reinterpret_cast<const en::Sge*>(wr->tm.add.sg_list);
      op.num_sge = wr->tm.add.num_sge;
      op.tag = wr->tm.add.tag;
      op.mask = wr->tm.add.mask;
      if (op.opcode == en::WR_TAG_ADD && op.num_sge > 0 && !op.sg_list) {
        *bad_wr = wr;
        return EINVAL;
      }
      if (int rc = srq->ctx->engine->post_srq_op(srq->handle, op)) {
        *bad_wr = wr;
        return rc;
      }
      if (op.opcode == en::WR_TAG_ADD) wr->tm.handle = op.handle;
    }
    return 0;
  });
}

void urxe_cq_read_tm_info(ibv_cq_ex* c, ibv_wc_tm_info* info) {
  const en::Wc& wc = reinterpret_cast<UrxeCq*>(ibv_cq_ex_to_cq(c))->cur;
  info->tag = en::wc_tm_tag(wc);
  info->priv = en::wc_tm_priv(wc);
}

}  // namespace urxe::provider
