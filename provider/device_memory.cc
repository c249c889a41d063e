// Device memory (ibv_alloc_dm, ibv_reg_dm_mr, ibv_memcpy_to_dm/from_dm): memory the device owns and the app
// reaches only through the copy calls and through MRs over it, as ConnectX's on-chip memory (MEMIC). Here it
// is the provider's own pages, kept out of the app's fork children (MADV_DONTFORK, as a BAR mapping is) and
// drawn from a per-context budget of kDeviceMemoryBytes (device_attr_ex.max_dm_size), as a NIC's is finite.
// The rules are rdma-core's and mlx5's, which pyverbs tests: copies go in 4-byte words at 4-byte offsets
// (EINVAL otherwise) and within the allocation (EFAULT); an MR over it is zero-based (its addresses are
// offsets), within the allocation, with at most local write and remote read/write/atomic rights.
#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "provider/internal.h"

namespace urxe::provider {

namespace {

constexpr uint32_t kMaxLogAlign = 21;  // 2 MiB: beyond it, an allocation request is refused (EINVAL)
constexpr unsigned kDmMrAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                 IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ZERO_BASED;

UrxeDm* to_dm(ibv_dm* dm) {
  return reinterpret_cast<UrxeDm*>(dm);
}

// Both copy directions: the range first (EFAULT), then the 4-byte rule (EINVAL), as mlx5_access_dm. Word
// by word with relaxed atomics: the engine may place a peer's WRITE into the same memory meanwhile.
int access_dm(UrxeDm* dm, uint64_t offset, void* host, size_t length, bool read) {
  if (offset > dm->length || length > dm->length - offset) return EFAULT;
  if ((offset & 3) || (length & 3)) return EINVAL;
  auto* words = reinterpret_cast<std::atomic<uint32_t>*>(dm->base + offset);
  auto* bytes = static_cast<uint8_t*>(host);
  for (size_t i = 0; i < length / 4; i++) {
    uint32_t w;
    if (read) {
      w = words[i].load(std::memory_order_relaxed);
      std::memcpy(bytes + 4 * i, &w, 4);
    } else {
      std::memcpy(&w, bytes + 4 * i, 4);
      words[i].store(w, std::memory_order_relaxed);
    }
  }
  return 0;
}

int memcpy_to_dm(ibv_dm* dm, uint64_t dm_offset, const void* host_addr, size_t length) {
  return access_dm(to_dm(dm), dm_offset, const_cast<void*>(host_addr), length, false);
}

int memcpy_from_dm(void* host_addr, ibv_dm* dm, uint64_t dm_offset, size_t length) {
  return access_dm(to_dm(dm), dm_offset, host_addr, length, true);
}

// Zeroed pages aligned to 2^log_align (at least a page), kept from fork children; nullptr on failure.
uint8_t* map_pages(size_t length, uint32_t log_align, size_t& mapped) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t align = std::max(page, size_t{1} << log_align);
  const size_t size = (length + page - 1) / page * page;
  const size_t span = size + align - page;
  void* p = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = (start + align - 1) & ~(uintptr_t{align} - 1);
  if (aligned > start) ::munmap(p, aligned - start);
  if (const size_t tail = start + span - (aligned + size))
    ::munmap(reinterpret_cast<void*>(aligned + size), tail);
  ::madvise(reinterpret_cast<void*>(aligned), size, MADV_DONTFORK);
  mapped = size;
  return reinterpret_cast<uint8_t*>(aligned);
}

}  // namespace

ibv_dm* urxe_alloc_dm(ibv_context* ibctx, ibv_alloc_dm_attr* attr) {
  return guarded<ibv_dm*>(nullptr, [&]() -> ibv_dm* {
    ContextState& st = state_of(ibctx);
    if (attr->comp_mask || attr->length == 0 || attr->length > kDeviceMemoryBytes ||
        attr->log_align_req > kMaxLogAlign) {
      errno = EINVAL;
      return nullptr;
    }
    // The budget: what this context's allocations hold (a NIC's memory is finite; ENOMEM as the kernel's).
    size_t used = st.dm_bytes.load();
    do {
      if (attr->length > kDeviceMemoryBytes - used) {
        errno = ENOMEM;
        return nullptr;
      }
    } while (!st.dm_bytes.compare_exchange_weak(used, used + attr->length));
    auto* dm = zalloc<UrxeDm>();
    dm->base = map_pages(attr->length, attr->log_align_req, dm->mapped);
    if (!dm->base) {
      st.dm_bytes.fetch_sub(attr->length);
      zfree(dm);
      errno = ENOMEM;
      return nullptr;
    }
    dm->length = attr->length;
    dm->vdm.dm.context = ibctx;
    dm->vdm.dm.memcpy_to_dm = memcpy_to_dm;
    dm->vdm.dm.memcpy_from_dm = memcpy_from_dm;
    dm->vdm.dm.comp_mask = 0;
    return &dm->vdm.dm;
  });
}

int urxe_free_dm(ibv_dm* ibdm) {
  return guarded(EIO, [&] {
    UrxeDm* dm = to_dm(ibdm);
    if (dm->mrs.load() != 0) return EBUSY;  // MRs over it: the kernel's uobject use count refuses too
    state_of(ibdm->context).dm_bytes.fetch_sub(dm->length);
    ::munmap(dm->base, dm->mapped);
    zfree(dm);
    return 0;
  });
}

ibv_mr* urxe_reg_dm_mr(ibv_pd* ibpd, ibv_dm* ibdm, uint64_t dm_offset, size_t length, unsigned int access) {
  return guarded<ibv_mr*>(nullptr, [&]() -> ibv_mr* {
    UrxeDm* dm = to_dm(ibdm);
    // Zero-based (the pages are the device's: an MR's addresses are offsets), within the allocation, and
    // rights a memory region of the device can have.
    if (!(access & IBV_ACCESS_ZERO_BASED) || (access & ~kDmMrAccess) || ibdm->context != ibpd->context ||
        dm_offset > dm->length || length > dm->length - dm_offset) {
      errno = EINVAL;
      return nullptr;
    }
    en::MrInfo info;
    if (int rc = state_of(ibpd->context)
                     .engine->reg_mr(to_pd(ibpd)->handle, dm->base + dm_offset, length, 0, access, info)) {
      errno = rc;
      return nullptr;
    }
    dm->mrs.fetch_add(1);
    auto* mr = zalloc<UrxeMr>();
    mr->dm = dm;
    mr->vmr.ibv_mr.context = ibpd->context;
    mr->vmr.ibv_mr.pd = ibpd;
    mr->vmr.ibv_mr.addr = nullptr;  // as ibv_cmd_reg_dm_mr: the mapping stays hidden
    mr->vmr.ibv_mr.length = length;
    mr->vmr.ibv_mr.handle = info.lkey;
    mr->vmr.ibv_mr.lkey = info.lkey;
    mr->vmr.ibv_mr.rkey = info.rkey;
    mr->vmr.mr_type = URXE_IBV_MR_TYPE_MR;
    mr->vmr.access = static_cast<int>(access);
    pd_hold(ibpd);  // a parent domain's (dereg_mr releases it)
    return &mr->vmr.ibv_mr;
  });
}

}  // namespace urxe::provider
