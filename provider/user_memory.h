// What the kernel checks when a real NIC's driver pins memory for ibv_reg_mr (ib_umem_get): every page of
// the range is mapped and readable, and writable when the access asks for writes (local write, remote
// write, remote atomic). urxe pins nothing — the engine reaches the app's memory directly — so without this
// check a bad registration would succeed and the app would crash at the first access instead.
#pragma once
#include <cstddef>
#include <cstdint>

namespace urxe::provider {

// 0 when [addr, addr + length) is mapped readable (and writable if `write`), else EFAULT (as the kernel's
// pinning fails), or EINVAL when the range wraps. Reads /proc/self/maps: control path only.
int check_user_range(const void* addr, size_t length, bool write);

// On-demand paging (engine::OdpFaultIn): faults the pages of [addr, addr + len) in, for writing when
// `write`, as a NIC's page-fault handler would (madvise MADV_POPULATE_READ/_WRITE, Linux 5.14): false
// when they are not mapped so. One system call per access to an ON_DEMAND MR, none for other MRs.
bool odp_fault_in(uintptr_t addr, uint64_t len, bool write);
// Whether this kernel can fault pages in on request (MADV_POPULATE_*): ODP is offered only then.
bool odp_available();

}  // namespace urxe::provider
