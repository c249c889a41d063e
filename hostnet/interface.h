// Facts about a network interface of the caller's network namespace, from rtnetlink: index, name, MAC,
// MTU, flags, carrier and its down count, and its IPv4/IPv6 addresses. Needs no capability.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "wire/headers.h"

namespace urxe::hostnet {

struct Address {
  wire::Gid addr{};  // IPv4 as ::ffff:a.b.c.d
  uint8_t prefix_len = 0;
  bool ipv4 = false;
};

struct Interface {
  std::string name;
  int ifindex = 0;
  wire::MacAddr mac{};
  uint32_t mtu = 0;
  bool up = false;       // IFF_UP
  bool running = false;  // IFF_RUNNING (carrier)
  // How many times the carrier went down since the interface was created (IFLA_CARRIER_DOWN_COUNT, kernel
  // 4.16+); has_carrier_down_count false on older kernels.
  bool has_carrier_down_count = false;
  uint32_t carrier_down_count = 0;
  std::vector<Address> addrs;  // IPv4 first, then IPv6, each in the kernel's order (query_interface only)

  // What a RoCE port calls ACTIVE: administratively up and with carrier.
  bool active() const { return up && running; }
};

// false (with a reason in *err) when the interface does not exist here or cannot be queried.
// `with_addrs` also fills addrs (one more rtnetlink dump).
bool query_interface(const std::string& name, Interface& out, std::string* err = nullptr,
                     bool with_addrs = true);

// How many times the interface lost its carrier since it was created (Interface::carrier_down_count, so it
// follows the caller's network namespace). false when the interface is not there or the kernel does not
// report it.
bool carrier_down_count(const std::string& name, uint64_t& out);

// The index of the interface that holds `addr` (IPv4-mapped for IPv4) in this namespace; 0 when no
// interface has it.
int address_ifindex(const wire::Gid& addr);

// The interface's link speed in Mb/s (ethtool ETHTOOL_GSET, which answers for the caller's network
// namespace where sysfs may not); 0 when unknown (veth, lo) or the interface is not there.
uint32_t link_speed_mbps(const std::string& name);

// The interface's driver as ethtool names it ("veth", "virtio_net", "mlx5_core"; ETHTOOL_GDRVINFO, no
// capability needed); "" when unknown or the interface is not there.
std::string link_driver(const std::string& name);

// Whether the interface's ethtool feature `feature` (as `ethtool -k` names it: "tx-udp-segmentation") is
// active: 1 on, 0 off, -1 unknown (no such interface or feature). ETHTOOL_GFEATURES, no capability needed.
int link_feature(const std::string& name, const std::string& feature);

// The interfaces of this network namespace, "lo, eth0, ..." (for "no such interface" errors).
std::string interface_names();

// The kind of the qdisc on the interface's ingress side ("ingress" or "clsact": tc filters may police,
// redirect or delay what comes in, e.g. through an ifb with netem), "" when there is none.
std::string ingress_qdisc(int ifindex);

}  // namespace urxe::hostnet
