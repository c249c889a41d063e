// Memory windows (IBTA 10.6.7, as kernel rxe implements them): allocation, BIND_MW and invalidation, and
// the window's own checks on the data path (rkey_resolve's slow path). A window is a slot of
// EngineImpl::mrs with is_mw set (its bound part of an MR: addr/iova/length/access) and an Mw in
// EngineImpl::mws (its type, state, MR and QP); a remote access through it passes the same PD, access and
// bounds checks as one through an MR.
#include <cerrno>

#include "engine/internal.h"

namespace urxe::engine {

namespace {

// What a window's bind may grant (the bits ibv_mw_bind_info.mw_access_flags may carry; others: a bind
// error). LOCAL_WRITE is accepted and means nothing for a window, as in rxe.
constexpr uint32_t kMwAccess =
    ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC | ACCESS_ZERO_BASED;

}  // namespace

// Drops a window's binding: its MR is no longer pinned, its key opens nothing.
void EngineImpl::unbind_mw(Mr& m) {
  Mw& w = mw_of(m);
  if (w.mr) mrs[w.mr].num_mw--;
  if (w.qpn)
    if (Qp* q = qp_get(w.qpn)) q->bound_mws--;
  w.mr = 0;
  w.qpn = 0;
  m.addr = nullptr;
  m.length = 0;
  m.iova = 0;
  m.access = 0;
}

// Only when q bound windows: a scan of the windows, on a control verb.
void EngineImpl::free_qp_windows(const Qp& q) {
  for (uint32_t i = 0; i < mws.size() && q.bound_mws; i++) {
    Mr& m = mrs[mw_base + i];
    if (m.used && mws[i].qpn == q.qpn) {
      unbind_mw(m);
      mws[i].valid = false;
    }
  }
}

int EngineImpl::alloc_mw(uint32_t pd, MwType type, uint32_t& rkey) {
  Pd* p = pd_get(pd);
  if (!p || (type != MW_TYPE_1 && type != MW_TYPE_2)) return EINVAL;
  for (uint32_t i = mw_base; i < mrs.size() && i < (1u << 24); i++) {
    Mr& m = mrs[i];
    if (m.used) continue;
    const uint8_t key = static_cast<uint8_t>(m.key + 1);  // a new key each time the index is reused
    m = Mr{};
    m.used = m.is_mw = true;
    m.key = key;
    m.pd = pd;
    mw_of(m) = Mw{type, type == MW_TYPE_1, 0, 0};  // rxe_alloc_mw: type 1 VALID, type 2 FREE
    rkey = (i << 8) | key;
    p->refs++;
    return 0;
  }
  return ENOMEM;
}

int EngineImpl::dealloc_mw(uint32_t handle) {
  if (handle < mw_base || handle >= mrs.size() || !mrs[handle].used) return EINVAL;
  Mr& m = mrs[handle];
  unbind_mw(m);
  if (Pd* p = pd_get(m.pd)) p->refs--;
  m.used = false;
  return 0;
}

uint8_t* EngineImpl::mw_resolve(const Mr& m, const Qp& q, uint32_t pd, uint32_t access, uint64_t va,
                                uint64_t len, MrError& err) const {
  // rxe_lookup_mw: VALID, bound (length != 0), and a type-2 window only through the QP that bound it; then
  // the PD, access and range as for an MR.
  const Mw& w = mw_of(m);
  if (!w.valid || m.length == 0 || (w.type == MW_TYPE_2 && w.qpn != q.qpn)) {
    err = MrError::bad_key;
    return nullptr;
  }
  err = m.pd != pd                                                      ? MrError::bad_pd
        : (m.access & access) != access                                 ? MrError::bad_access
        : va < m.iova || len > m.length || va - m.iova > m.length - len ? MrError::bad_bounds
                                                                        : MrError::ok;
  if (err != MrError::ok) return nullptr;
  // In integers: a window on an implicit ODP MR starts at its address from 0.
  const uintptr_t at = reinterpret_cast<uintptr_t>(m.addr) + (va - m.iova);
  if (mrs[w.mr].access & ACCESS_ON_DEMAND) return odp_fault_in(at, len, access, err);
  return reinterpret_cast<uint8_t*>(at);
}

WcStatus EngineImpl::bind_mw(Qp& q, const SendWqe& wqe) {
  Mr* m = mr_slot(wqe.inv_rkey);  // the WR names the window by its current rkey
  if (!m || !m->is_mw || (wqe.bind_access & ~kMwAccess)) return WC_MW_BIND_ERR;
  Mw& w = mw_of(*m);
  const bool zero_based = wqe.bind_access & ACCESS_ZERO_BASED;
  if (m->pd != q.pd) return WC_MW_BIND_ERR;  // C10-72 (rxe checks it for type 2 only)
  if (w.type == MW_TYPE_1) {
    if (!w.valid || zero_based) return WC_MW_BIND_ERR;  // o10-36.2.2
  } else {
    // o10-37.2.30: a bound type-2 window is invalidated before it is bound again; o10-37.2.40: and
    // never bound to nothing.
    if (w.valid || wqe.bind_length == 0) return WC_MW_BIND_ERR;
  }
  Mr* mr = nullptr;
  uint8_t* addr = nullptr;
  if (wqe.bind_mr || wqe.bind_length) {
    mr = mr_slot(wqe.bind_mr);
    if (!mr || mr->is_mw || mr->pd != m->pd) return WC_MW_BIND_ERR;
    if (mr->access & ACCESS_ZERO_BASED) return WC_MW_BIND_ERR;  // as rxe: no window on a zero-based MR
    if (!(mr->access & ACCESS_MW_BIND)) return WC_MW_BIND_ERR;  // C10-73
    // C10-74: a window that lets peers write needs an MR the HCA may write. Its rights need not be a
    // subset of the MR's remote rights.
    if ((wqe.bind_access & (ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC)) &&
        !(mr->access & ACCESS_LOCAL_WRITE))
      return WC_MW_BIND_ERR;
    // C10-75: within the MR. A zero-based window starts at addr too; peers then name its bytes from 0.
    const uint64_t va = wqe.remote_addr;
    if (va < mr->iova || wqe.bind_length > mr->length || va - mr->iova > mr->length - wqe.bind_length)
      return WC_MW_BIND_ERR;
    if (mr->num_mw == UINT16_MAX) return WC_MW_BIND_ERR;  // (a count that would wrap: never in practice)
    addr = reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(mr->addr) + (va - mr->iova));
  }
  unbind_mw(*m);
  m->key = static_cast<uint8_t>(wqe.rkey);  // the new key: the low byte from the WR
  w.valid = true;
  if (wqe.bind_length == 0) return WC_SUCCESS;  // type 1: unbound, still VALID
  w.mr = static_cast<uint32_t>(mr - mrs.data());
  mr->num_mw++;
  m->addr = addr;
  m->length = wqe.bind_length;
  m->iova = zero_based ? 0 : wqe.remote_addr;
  m->access = wqe.bind_access;
  if (w.type == MW_TYPE_2) {
    w.qpn = q.qpn;
    q.bound_mws++;
  }
  return WC_SUCCESS;
}

int EngineImpl::invalidate_mw(uint32_t rkey, uint32_t pd) {
  Mr* m = mr_slot(rkey);
  if (!m || !m->is_mw) return EINVAL;
  Mw& w = mw_of(*m);
  // o10-37.2.26: a type-1 window is not invalidated (it is unbound by a zero-length bind)
  if (w.type != MW_TYPE_2 || !w.valid || m->pd != pd) return EINVAL;
  unbind_mw(*m);
  w.valid = false;  // FREE: may be bound again
  return 0;
}

// ---- Engine ----

int Engine::alloc_mw(uint32_t pd, MwType type, uint32_t& rkey) {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->alloc_mw(pd, type, rkey);
}

int Engine::dealloc_mw(uint32_t handle) {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->dealloc_mw(handle);
}

}  // namespace urxe::engine
