// `urxe run`'s view of /sys: the fake tree's classes where tools that have /sys compiled in look for them.
//
// libibverbs and librdmacm follow SYSFS_PATH, but other readers do not: pyverbs' RDMA CM tests look for a
// device's netdev under /sys/class/infiniband/DEV/device/net/, libibumad (ibstat) and ibstatus list
// /sys/class/infiniband. sysfs takes no new directories, so in a private mount namespace /sys/class gets a
// tmpfs holding every class the kernel has (each its original directory, bind-mounted) plus the fake
// tree's infiniband, infiniband_verbs and misc/rdma_cm. /sys/class/infiniband lists only the devices of the
// caller's network namespace, as the kernel's exclusive rdma netns mode shows them.
#pragma once
#include <string>

#include "provider/device_tree.h"

namespace urxe::tools {

// Enters a private mount namespace (the caller's mounts become its slaves: nothing made here reaches the
// host) and shows paths' fake classes at /sys/class as above. Needs CAP_SYS_ADMIN. Returns "" when done,
// else why not; the caller's view of /sys is then unchanged (possibly in a new mount namespace).
std::string show_fake_sysfs(const provider::Paths& paths);

}  // namespace urxe::tools
