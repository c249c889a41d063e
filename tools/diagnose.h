// Checks the `urxe` command makes before acting, so a failure names what is wrong and how to fix it instead
// of surfacing later as an application that silently finds no device.
#pragma once
#include <string>

#include "provider/device_tree.h"

namespace urxe::tools {

// True when this kernel answers NETLINK_RDMA (ib_core loaded). libibverbs (rdma-core 44, ibdev_nl.c) then
// takes its device list from the kernel and never scans SYSFS_PATH, so no application sees urxe devices.
// URXE_TEST_KERNEL_RDMA=1 forces true (tests only: the CI kernel has no RDMA).
bool kernel_rdma_active();

// If kernel_rdma_active(): prints on stderr, prefixed by prog, why urxe devices stay invisible and how to fix
// it. Returns whether it printed.
bool warn_if_kernel_rdma(const char* prog);

// Whether `link add`/`link del` can write what they must: the run directory (paths.run_dir, or the nearest
// existing parent it would be created in) and the device-node directory (paths.dev_dir, /dev/infiniband).
// "" when both are writable, else one message saying which, why (errno) and how to fix it.
std::string check_device_dirs_writable(const provider::Paths& paths);

// For `urxe run` / `urxe env`: when some device of paths moves real packets (port auto, dpdk or socket) and
// this process has no CAP_NET_RAW, prints on stderr that opening it will fail and how to grant the
// capability. Returns whether it printed.
bool warn_if_no_net_raw(const char* prog, const provider::Paths& paths);

// For `urxe run` / `urxe env`: devices applications would not see or could not open from here, because
// their /dev/infiniband/uverbsN node or their interface is missing in this mount / network namespace
// (made in another container or namespace, or the node was removed). Prints one line per such device with
// the fix. Returns how many it found.
int warn_unusable_devices(const char* prog, const provider::Paths& paths);

}  // namespace urxe::tools
