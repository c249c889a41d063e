// What the kernel checks when a real NIC's driver pins memory for ibv_reg_mr (ib_umem_get): every page of
// the range is mapped and readable, and writable when the access asks for writes (local write, remote
// write, remote atomic). urxe pins nothing — the engine reaches the app's memory directly — so without this
// check a bad registration would succeed and the app would crash at the first access instead.
#pragma once
#include <cstddef>

namespace urxe::provider {

// 0 when [addr, addr + length) is mapped readable (and writable if `write`), else EFAULT (as the kernel's
// pinning fails), or EINVAL when the range wraps. Reads /proc/self/maps: control path only.
int check_user_range(const void* addr, size_t length, bool write);

}  // namespace urxe::provider
