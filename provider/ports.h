// The packet port a device context opens, chosen by the device config's `port=` (or $URXE_PORT): the
// ports themselves (DPDK, kernel socket, loop, null) are dpdk/'s; this maps a device to their options and
// says once per process and device which one it got.
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

// Tells a port from make_port that this process owns destination QPNs [first, end) only
// (engine::Port::set_rx_qpn_range).
inline void restrict_rx_qpns(engine::Port& port, uint32_t first, uint32_t end) {
  port.set_rx_qpn_range(first, end);
}

}  // namespace urxe::provider
