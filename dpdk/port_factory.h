// Opens the right Port for an interface: DPDK when it can start (the user passed DPDK arguments, or the
// process has CAP_NET_ADMIN and CAP_NET_RAW for the default af_packet vdev), else the kernel-socket port,
// with a one-line notice saying which and why.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/port.h"
#include "wire/headers.h"

namespace urxe::dpdk {

enum class PortKind { automatic, dpdk, socket };

struct PortOptions {
  std::string ifname;
  std::string dpdk_args;  // EAL/vdev words passed through (see DpdkPortConfig)
  PortKind kind = PortKind::automatic;
  std::vector<wire::Gid> gids;  // GID table override; empty = from the interface
  bool guard_udp_port = true;   // hold a UdpPortGuard (see kernel_guard.h)
};

// Whether the process has CAP_NET_ADMIN / CAP_NET_RAW in its effective set.
bool have_cap_net_admin();
bool have_cap_net_raw();
bool have_cap_ipc_lock();  // locked memory beyond RLIMIT_MEMLOCK (DPDK's af_packet rings are MAP_LOCKED)

// Tells a port from open_port which destination QPNs this process owns, [first, end): frames for other
// QPNs (another process's on the same device) are dropped by the port. False for other Port types.
bool set_rx_qpn_range(engine::Port& port, uint32_t first, uint32_t end);

// nullptr with *err set when no port could be opened. *notice receives one line (no newline) describing
// the choice, e.g. "urxe: eth0: using the kernel-socket port (no CAP_NET_ADMIN for DPDK af_packet)".
std::unique_ptr<engine::Port> open_port(const PortOptions& opt, std::string* notice, std::string* err);

}  // namespace urxe::dpdk
