// Thread domains and parent domains (ibv_alloc_td, ibv_alloc_parent_domain), as mlx5 has them: a parent
// domain stands for its PD in every verb (it carries the PD's engine handle), holds its PD and TD, and is
// freed by dealloc_pd (urxe_dealloc_pd, verbs.cc). Objects created through one hold it. A TD's objects take
// no lock on their posts and polls (engine QpInitAttr/CqOptions::single_threaded); a parent domain's
// allocator gives the provider's per-QP/CQ/SRQ memory (domain_alloc).
#include <cstring>

#include "provider/internal.h"

namespace urxe::provider {

void pd_hold(ibv_pd* pd) {
  if (UrxePd* p = parent_domain_of(pd)) p->users.fetch_add(1, std::memory_order_relaxed);
}

void pd_release(ibv_pd* pd) {
  if (UrxePd* p = parent_domain_of(pd)) p->users.fetch_sub(1, std::memory_order_relaxed);
}

void* domain_alloc(ibv_pd* pd, size_t size, uint64_t resource_type, ibv_pd*& from) {
  from = nullptr;
  if (UrxePd* p = parent_domain_of(pd); p && p->alloc) {
    // Cache-line aligned: the app threads write these objects on every post and poll.
    void* m = p->alloc(pd, p->pd_context, size, 64, resource_type);
    if (m != IBV_ALLOCATOR_USE_DEFAULT) {
      if (!m) throw std::bad_alloc();
      std::memset(m, 0, size);  // the app's allocator need not zero it
      from = pd;
      return m;
    }
  }
  void* m = std::calloc(1, size);
  if (!m) throw std::bad_alloc();
  return m;
}

void domain_free(ibv_pd* from, void* p, uint64_t resource_type) {
  if (UrxePd* d = parent_domain_of(from)) {
    d->free(from, d->pd_context, p, resource_type);
  } else {
    std::free(p);
  }
}

// ibv_alloc_td: no attributes yet (comp_mask must be 0: EINVAL otherwise).
ibv_td* urxe_alloc_td(ibv_context* ibctx, ibv_td_init_attr* attr) {
  return guarded<ibv_td*>(nullptr, [&]() -> ibv_td* {
    if (!attr || attr->comp_mask) {
      errno = EINVAL;
      return nullptr;
    }
    auto* td = zalloc<UrxeTd>();
    td->td.context = ibctx;
    return &td->td;
  });
}

int urxe_dealloc_td(ibv_td* ibtd) {
  return guarded(EIO, [&] {
    auto* td = reinterpret_cast<UrxeTd*>(ibtd);
    if (td->users.load(std::memory_order_relaxed)) return EBUSY;
    zfree(td);
    return 0;
  });
}

// ibv_alloc_parent_domain: a PD of this context is required (not another parent domain), the TD is
// optional; comp_mask bits other than ALLOCATORS and PD_CONTEXT: EINVAL. The allocator counts only when
// both its functions are given (as mlx5).
ibv_pd* urxe_alloc_parent_domain(ibv_context* ibctx, ibv_parent_domain_init_attr* attr) {
  return guarded<ibv_pd*>(nullptr, [&]() -> ibv_pd* {
    constexpr uint32_t kKnown =
        IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
    if (!attr || !attr->pd || attr->pd->context != ibctx || parent_domain_of(attr->pd) ||
        (attr->td && attr->td->context != ibctx) || (attr->comp_mask & ~kKnown)) {
      errno = EINVAL;
      return nullptr;
    }
    auto* pd = zalloc<UrxePd>();
    UrxePd* protection = to_pd(attr->pd);
    pd->pd.context = ibctx;  // what libibverbs' ibv_initialize_parent_domain copies
    pd->pd.handle = protection->pd.handle;
    pd->handle = protection->handle;
    pd->protection = protection;
    pd->td = reinterpret_cast<UrxeTd*>(attr->td);
    if ((attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) && attr->alloc && attr->free) {
      pd->alloc = attr->alloc;
      pd->free = attr->free;
    }
    if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT) pd->pd_context = attr->pd_context;
    protection->users.fetch_add(1, std::memory_order_relaxed);
    if (pd->td) pd->td->users.fetch_add(1, std::memory_order_relaxed);
    return &pd->pd;
  });
}

}  // namespace urxe::provider
