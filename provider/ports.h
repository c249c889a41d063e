// Packet ports the provider can open for a device, chosen by the device config's `port=` (or $URXE_PORT).
// Real I/O (dpdk, kernel sockets) comes from dpdk/ once it exists; the two here need no network:
//   loop — every frame sent is received by every loop port of the same device in this process (the
//          sender's own included): contexts of one process talk to each other and to themselves;
//   null — frames sent are dropped, nothing is received (open/query/PD/MR/CQ work, traffic does not).
#pragma once
#include <memory>
#include <string>

#include "engine/port.h"
#include "provider/device_tree.h"

namespace urxe::provider {

struct PortRequest {
  DeviceConfig config;
  NetdevInfo netdev;
  engine::PortAttr attr;  // MAC, MTU and GID table the device presents
};

// Returns nullptr with a message in err when the kind is unknown or cannot start.
std::unique_ptr<engine::Port> make_port(const std::string& kind, const PortRequest& req, std::string& err);

// Tells a port from make_port that this process owns destination QPNs [first, end) only, so frames for
// other processes' QPs on the same device never reach (nor wake) it. No-op for ports without a filter.
void restrict_rx_qpns(engine::Port& port, uint32_t first, uint32_t end);

}  // namespace urxe::provider
