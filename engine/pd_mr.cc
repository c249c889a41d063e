// Protection domains, memory regions (key → memory with PD/access/bounds checks) and address handles.
#include <cerrno>

#include "engine/internal.h"

namespace urxe::engine {

int EngineImpl::alloc_pd(uint32_t& pd) {
  for (uint32_t i = 1; i < pds.size(); i++) {
    if (!pds[i].used) {
      pds[i] = Pd{true, 0};
      pd = i;
      return 0;
    }
  }
  return ENOMEM;
}

Pd* EngineImpl::pd_get(uint32_t pd) {
  return (pd > 0 && pd < pds.size() && pds[pd].used) ? &pds[pd] : nullptr;
}

int EngineImpl::dealloc_pd(uint32_t pd) {
  Pd* p = pd_get(pd);
  if (!p) return EINVAL;
  if (p->refs) return EBUSY;
  p->used = false;
  return 0;
}

namespace {

int check_mr_access(uint32_t access, bool odp) {
  const uint32_t known = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ |
                         ACCESS_REMOTE_ATOMIC | ACCESS_MW_BIND | ACCESS_ZERO_BASED | ACCESS_ON_DEMAND |
                         ACCESS_HUGETLB | kAccessOptionalRange;
  if (access & ~known) return EINVAL;
  if ((access & ACCESS_ON_DEMAND) && !odp) return EOPNOTSUPP;
  // IBTA 10.6.3.1 / rdma-core: remote write or atomic access requires local write.
  if ((access & (ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC)) && !(access & ACCESS_LOCAL_WRITE))
    return EINVAL;
  return 0;
}

// An implicit ODP MR (ibv_reg_mr(pd, NULL, SIZE_MAX, ON_DEMAND)): the whole address space, iova 0.
bool implicit_odp(const void* addr, uint64_t length, uint32_t access) {
  return (access & ACCESS_ON_DEMAND) && !addr && length == UINT64_MAX;
}

int check_mr_range(const void* addr, uint64_t length, uint64_t iova, uint64_t max_mr_size) {
  if (!addr && length) return EINVAL;
  if (length > max_mr_size) return EINVAL;
  if (iova + length < iova) return EINVAL;
  return 0;
}

}  // namespace

int EngineImpl::reg_mr(uint32_t pd, void* addr, uint64_t length, uint64_t iova, uint32_t access,
                       MrInfo& out) {
  Pd* p = pd_get(pd);
  if (!p) return EINVAL;
  if (int rc = check_mr_access(access, config.odp_fault_in != nullptr)) return rc;
  if (access & ACCESS_ZERO_BASED) iova = 0;
  if (implicit_odp(addr, length, access)) {
    if (iova != 0 || (access & ACCESS_ZERO_BASED)) return EINVAL;  // an implicit MR's iova is the address
  } else if (int rc = check_mr_range(addr, length, iova, config.device.max_mr_size)) {
    return rc;
  }
  for (uint32_t i = 1; i < mw_base && i < (1u << 24); i++) {
    Mr& m = mrs[i];
    if (m.used) continue;
    const uint8_t key = static_cast<uint8_t>(m.key + 1);  // a new key each time the index is reused
    m = Mr{};
    m.used = true;
    m.key = key;
    m.pd = pd;
    m.addr = static_cast<uint8_t*>(addr);
    m.length = length;
    m.iova = iova;
    m.access = access & ~kAccessOptionalRange;
    out.lkey = out.rkey = (i << 8) | key;
    p->refs++;
    return 0;
  }
  return ENOMEM;
}

Mr* EngineImpl::mr_slot(uint32_t key) {
  const uint32_t i = key >> 8;
  return (i > 0 && i < mrs.size() && mrs[i].used && mrs[i].key == (key & 0xff)) ? &mrs[i] : nullptr;
}

int EngineImpl::dereg_mr(uint32_t lkey) {
  Mr* m = mr_slot(lkey);
  if (!m || m->is_mw) return EINVAL;
  // IBA 10.6.7.2.6: deregistration fails while windows are bound to the region. EBUSY, rdma-core's errno
  // for an object others still use (ibv_dealloc_pd, ibv_destroy_cq); kernel rxe answers EINVAL.
  if (m->num_mw) return EBUSY;
  if (Pd* p = pd_get(m->pd)) p->refs--;
  m->used = false;
  return 0;
}

// Here rather than behind EngineImpl: one verb, all of it under the engine lock, which every MR lookup of
// the data path (mr_resolve, from progress()) also holds.
int Engine::rereg_mr(uint32_t lkey, uint32_t flags, uint32_t pd, void* addr, uint64_t length,
                     uint32_t access) {
  EngineImpl& e = *impl_;
  std::lock_guard<std::mutex> g(e.mu);
  Mr* mp = e.mr_slot(lkey);
  if (!mp || mp->is_mw) return EINVAL;
  constexpr uint32_t kAll = REREG_MR_CHANGE_TRANSLATION | REREG_MR_CHANGE_PD | REREG_MR_CHANGE_ACCESS;
  if (flags == 0 || (flags & ~kAll)) return EINVAL;
  Mr& m = *mp;
  // A bound window opens part of this MR's memory: not while it may move (as dereg_mr).
  if (m.num_mw) return EBUSY;
  // Validate everything first: a failed rereg leaves the MR as it was.
  Pd* new_pd = nullptr;
  if (flags & REREG_MR_CHANGE_PD) {
    new_pd = e.pd_get(pd);
    if (!new_pd) return EINVAL;
  }
  uint32_t new_access = m.access;
  if (flags & REREG_MR_CHANGE_ACCESS) {
    if (int rc = check_mr_access(access, e.config.odp_fault_in != nullptr)) return rc;
    new_access = access & ~kAccessOptionalRange;
    if ((new_access ^ m.access) & ACCESS_ON_DEMAND) return EINVAL;  // paging is part of the registration
  }
  uint8_t* new_addr = m.addr;
  uint64_t new_length = m.length, new_iova = m.iova;
  if (flags & REREG_MR_CHANGE_TRANSLATION) {
    if (!addr || length == 0) return EINVAL;
    new_addr = static_cast<uint8_t*>(addr);
    new_length = length;
    new_iova = (new_access & ACCESS_ZERO_BASED) ? 0 : reinterpret_cast<uintptr_t>(addr);
    if (int rc = check_mr_range(addr, length, new_iova, e.config.device.max_mr_size)) return rc;
  } else if ((flags & REREG_MR_CHANGE_ACCESS) && ((new_access ^ m.access) & ACCESS_ZERO_BASED)) {
    return EINVAL;  // zero-based or not is part of the translation
  }
  if (new_pd) {
    if (Pd* old_pd = e.pd_get(m.pd)) old_pd->refs--;
    new_pd->refs++;
    m.pd = pd;
  }
  m.access = new_access;
  m.addr = new_addr;
  m.length = new_length;
  m.iova = new_iova;
  return 0;
}

uint8_t* EngineImpl::mr_resolve(uint32_t key, uint32_t pd, uint32_t access, uint64_t va, uint64_t len,
                                MrError& err) {
  const uint32_t i = key >> 8;
  if (i == 0 || i >= mrs.size() || !mrs[i].used || mrs[i].key != (key & 0xff)) {
    err = MrError::bad_key;
    return nullptr;
  }
  const Mr& m = mrs[i];
  if (m.is_mw) {  // where an MR's valid bit was tested before windows existed: no new test
    err = MrError::window;
    return nullptr;
  }
  if (m.pd != pd) {
    err = MrError::bad_pd;
    return nullptr;
  }
  if ((m.access & access) != access) {
    err = MrError::bad_access;
    return nullptr;
  }
  if (va < m.iova || len > m.length || va - m.iova > m.length - len) {
    err = MrError::bad_bounds;
    return nullptr;
  }
  // ODP: the pages may not be there (an implicit MR spans the whole address space): fault them in first,
  // for writing when the access writes. In integers: an implicit MR's base is address 0.
  if (m.access & ACCESS_ON_DEMAND) [[unlikely]]
    return odp_fault_in(reinterpret_cast<uintptr_t>(m.addr) + (va - m.iova), len, access, err);
  err = MrError::ok;
  return m.addr + (va - m.iova);
}

uint8_t* EngineImpl::odp_fault_in(uintptr_t at, uint64_t len, uint32_t access, MrError& err) const {
  constexpr uint32_t kWrites = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC;
  if (len && !config.odp_fault_in(at, len, (access & kWrites) != 0)) {
    err = MrError::not_mapped;
    return nullptr;
  }
  err = MrError::ok;
  return reinterpret_cast<uint8_t*>(at);
}

int EngineImpl::advise_mr(uint32_t pd, uint32_t advice, uint32_t flags, const Sge* sges, uint32_t num_sge) {
  if ((flags & ~uint32_t{ADVISE_MR_FLAG_FLUSH}) || !sges || num_sge == 0) return EINVAL;
  if (advice != ADVISE_MR_PREFETCH && advice != ADVISE_MR_PREFETCH_WRITE &&
      advice != ADVISE_MR_PREFETCH_NO_FAULT)
    return EOPNOTSUPP;
  for (uint32_t k = 0; k < num_sge; k++) {
    const Sge& s = sges[k];
    const uint32_t i = s.lkey >> 8;
    if (i == 0 || i >= mrs.size() || !mrs[i].used || mrs[i].key != (s.lkey & 0xff) || mrs[i].pd != pd ||
        !(mrs[i].access & ACCESS_ON_DEMAND))
      return EFAULT;
    if (advice == ADVISE_MR_PREFETCH_WRITE && !(mrs[i].access & ACCESS_LOCAL_WRITE)) return EPERM;
    // Faulting in is what mr_resolve does; PREFETCH_NO_FAULT maps only what is there, which needs nothing
    // here (the pages stay the process's own), so it checks the range alone.
    const uint32_t need = advice == ADVISE_MR_PREFETCH_WRITE ? uint32_t{ACCESS_LOCAL_WRITE} : 0u;
    const Mr& m = mrs[i];
    if (advice == ADVISE_MR_PREFETCH_NO_FAULT) {
      if (s.addr < m.iova || s.length > m.length || s.addr - m.iova > m.length - s.length) return EFAULT;
      continue;
    }
    MrError err;
    if (!mr_resolve(s.lkey, pd, need, s.addr, s.length, err)) return EFAULT;
  }
  return 0;
}

int EngineImpl::create_ah(uint32_t pd, const AddressVector& av, uint32_t& ah) {
  Pd* p = pd_get(pd);
  if (!p) return EINVAL;
  if (av.sgid_index >= gids.size() || gids[av.sgid_index] == wire::Gid{}) return EINVAL;
  if (av.port_num != 1) return EINVAL;
  // Round robin, so that a destroyed AH's slot (which posted WQEs may still name) is the last one reused.
  const uint32_t n = static_cast<uint32_t>(ahs.size());
  for (uint32_t k = 0; k + 1 < n; k++) {
    const uint32_t i = 1 + (ah_next - 1 + k) % (n - 1);
    if (ahs[i].used) continue;
    const uint32_t gen = ahs[i].gen + 1 ? ahs[i].gen + 1 : 1;
    ahs[i] = Ah{true, pd, av, gids[av.sgid_index]};
    std::atomic_ref<uint32_t>(ahs[i].gen).store(gen, std::memory_order_release);  // read by post_send
    p->refs++;
    ah = i;
    ah_next = i + 1 < n ? i + 1 : 1;
    return 0;
  }
  return ENOMEM;
}

int Engine::set_gid(uint32_t index, const wire::Gid& gid) {
  std::lock_guard<std::mutex> g(impl_->mu);
  if (index >= impl_->gids.size()) return EINVAL;
  impl_->gids[index] = gid;
  return 0;
}

std::vector<wire::Gid> Engine::gid_table() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->gids;
}

int EngineImpl::destroy_ah(uint32_t ah) {
  if (ah == 0 || ah >= ahs.size() || !ahs[ah].used) return EINVAL;
  if (Pd* p = pd_get(ahs[ah].pd)) p->refs--;
  std::atomic_ref<bool>(ahs[ah].used).store(false, std::memory_order_relaxed);  // read by post_send
  return 0;
}

namespace {
// The SGE a message offset falls in (num_sge: past the list); `offset` becomes the offset inside it.
uint32_t sge_seek(const Sge* sges, uint32_t num_sge, uint64_t& offset) {
  uint32_t i = 0;
  while (i < num_sge && offset >= sges[i].length) offset -= sges[i++].length;
  return i;
}
}  // namespace

bool sge_copy(EngineImpl& e, uint32_t pd, const Sge* sges, uint32_t num_sge, uint64_t offset, uint8_t* data,
              uint32_t len, bool to_sges) {
  uint32_t i = sge_seek(sges, num_sge, offset);
  while (len > 0) {
    if (i >= num_sge) return false;
    const Sge& s = sges[i];
    const uint64_t room = s.length - offset;
    const uint32_t n = static_cast<uint32_t>(room < len ? room : len);
    MrError err;
    uint8_t* p =
        e.mr_resolve(s.lkey, pd, to_sges ? uint32_t{ACCESS_LOCAL_WRITE} : 0u, s.addr + offset, n, err);
    if (!p) return false;
    if (to_sges)
      std::memcpy(p, data, n);
    else
      std::memcpy(data, p, n);
    data += n;
    len -= n;
    offset = 0;
    i++;
  }
  return true;
}

const uint8_t* sge_span(EngineImpl& e, uint32_t pd, const Sge* sges, uint32_t num_sge, uint64_t offset,
                        uint32_t len) {
  const uint32_t i = sge_seek(sges, num_sge, offset);
  if (i >= num_sge || sges[i].length - offset < len) return nullptr;
  MrError err;
  return e.mr_resolve(sges[i].lkey, pd, 0u, sges[i].addr + offset, len, err);
}

}  // namespace urxe::engine
