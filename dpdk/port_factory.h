// Opens the right Port for a device. Real I/O: the kernel-socket port, or DPDK when the user passed DPDK
// arguments (or asked for it: PortKind::dpdk, its af_packet vdev by default), falling back to the socket
// port if DPDK cannot start; a one-line notice says which and why. In-process: the loop and null ports
// (memory_port.h).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "dpdk/port_kind.h"
#include "engine/port.h"
#include "wire/headers.h"

namespace urxe::dpdk {

struct PortOptions {
  std::string ifname;
  std::string dpdk_args;  // EAL/vdev words passed through (see DpdkPortConfig)
  PortKind kind = PortKind::automatic;
  std::vector<wire::Gid> gids;  // GID table override; empty = from the interface
  bool guard_udp_port = true;   // hold a UdpPortGuard (see hostnet/kernel_guard.h)
  int gso = -1;                 // the socket port's UDP GSO (SocketPortConfig::gso)
  // loop and null: the attributes the port presents (nothing to read them from), and the loop's bus (ports
  // with the same bus name in this process hear each other; the provider uses the device name).
  engine::PortAttr attr;
  std::string bus;
};

// nullptr with *err set when no port could be opened. *notice receives one line (no newline) describing
// the choice, e.g. "urxe: eth0: using the kernel-socket port (no CAP_NET_ADMIN for DPDK af_packet)";
// nothing for loop and null.
std::unique_ptr<engine::Port> open_port(const PortOptions& opt, std::string* notice, std::string* err);

}  // namespace urxe::dpdk
