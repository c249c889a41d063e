// The packet port a device context opens, chosen by the device config's `port=` (or $URXE_PORT): the
// ports themselves (DPDK, kernel socket, loop, null) are dpdk/'s; this maps a device to their options and
// says once per process and device which one it got.
#pragma once
#include <memory>
#include <string>

#include "dpdk/capture_port.h"
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

// Wraps `port` in the same-host path (dpdk/local_port.h: frames to another urxe device or process of this
// run directory through shared memory, rings in RUN_DIR/local/) unless the device was made with
// --no-local-path, its port is loop/null, or its interface (ifindex) has an ingress qdisc (tc filters that
// frames must keep crossing; a one-line notice says so); $URXE_LOCAL_PATH=0/1 overrides all that for one
// run. The port stays as it is, with a debug line, when the ring cannot be published.
void add_local_path(std::unique_ptr<engine::Port>& port, const DeviceConfig& config, int ifindex,
                    const std::string& ibdev_path, uint32_t block, uint32_t block_size);

// Live capture (dpdk/capture_port.h) with the device's settings overridden by the environment (URXE_PCAP,
// URXE_PCAP_SIZE in MB, URXE_PCAP_FILES; URXE_PCAP=off), its lines going to the provider's log.
dpdk::CaptureConfig capture_config(const DeviceConfig& dev);
// The capture around `inner`; nullptr when it is off or DIR cannot be written (logged).
std::unique_ptr<engine::Port> open_capture(engine::Port& inner, const DeviceConfig& dev);

}  // namespace urxe::provider
