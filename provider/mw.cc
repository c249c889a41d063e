// Memory windows: ibv_alloc_mw, ibv_dealloc_mw and ibv_bind_mw (type 1) onto the engine (engine/mw.cc).
// Type-2 windows are bound by IBV_WR_BIND_MW / ibv_wr_bind_mw (qp.cc).
#include "provider/internal.h"

namespace urxe::provider {

static_assert(static_cast<uint32_t>(en::MW_TYPE_1) == IBV_MW_TYPE_1 &&
              static_cast<uint32_t>(en::MW_TYPE_2) == IBV_MW_TYPE_2);

ibv_mw* urxe_alloc_mw(ibv_pd* ibpd, ibv_mw_type type) {
  return guarded<ibv_mw*>(nullptr, [&]() -> ibv_mw* {
    uint32_t rkey = 0;
    if (int rc = state_of(ibpd->context)
                     .engine->alloc_mw(to_pd(ibpd)->handle, static_cast<en::MwType>(type), rkey)) {
      errno = rc;  // EINVAL for a type other than 1 and 2, as the kernel's uverbs
      return nullptr;
    }
    auto* mw = zalloc<ibv_mw>();
    mw->context = ibpd->context;
    mw->pd = ibpd;
    mw->rkey = rkey;
    mw->handle = rkey >> 8;  // the window's index: its key changes with each bind
    mw->type = type;
    pd_hold(ibpd);  // a parent domain is held by what is created through it
    return mw;
  });
}

int urxe_dealloc_mw(ibv_mw* mw) {
  return guarded(EIO, [&] {
    if (int rc = state_of(mw->context).engine->dealloc_mw(mw->handle)) return rc;
    pd_release(mw->pd);
    zfree(mw);
    return 0;
  });
}

// As rdma-core's rxe provider: a BIND_MW WR with the window's next key, posted on the QP; ibv_mw.rkey takes
// that key at once (an app that gets IBV_WC_MW_BIND_ERR puts the old one back).
int urxe_bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind) {
  const ibv_mw_bind_info& info = bind->bind_info;
  if (mw->type != IBV_MW_TYPE_1) return EINVAL;  // type 2: IBV_WR_BIND_MW
  if (!info.mr && (info.addr || info.length)) return EINVAL;
  if (info.mw_access_flags & IBV_ACCESS_ZERO_BASED) return EINVAL;  // o10-36.2.2: not for type 1
  ibv_send_wr wr{};
  wr.wr_id = bind->wr_id;
  wr.send_flags = bind->send_flags;
  wr.opcode = IBV_WR_BIND_MW;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  wr.bind_mw.bind_info = info;
  ibv_send_wr* bad = nullptr;
  if (int rc = urxe_post_send(qp, &wr, &bad)) return rc;
  mw->rkey = wr.bind_mw.rkey;
  return 0;
}

}  // namespace urxe::provider
