// What urxe needs to know about a kernel network interface: MAC, MTU, ifindex, its addresses, the RoCE
// GID table built from them the way the kernel builds it for a RoCE device, and the destination MAC of a
// GID from the kernel's neighbour table (ARP/ND). Needs no capability. Used by the ports, the provider and
// the `urxe` tool.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "wire/headers.h"

namespace urxe::dpdk {

struct NetdevAddr {
  wire::Gid addr{};  // IPv4 as ::ffff:a.b.c.d
  uint8_t prefix_len = 0;
  bool ipv4 = false;
};

struct NetdevInfo {
  std::string name;
  int ifindex = 0;
  wire::MacAddr mac{};
  uint32_t mtu = 0;
  bool up = false;                // IFF_UP
  bool running = false;           // IFF_RUNNING (carrier)
  std::vector<NetdevAddr> addrs;  // in the kernel's order: IPv4 first, then IPv6
};

// false (with a reason in *err) when the interface does not exist or cannot be queried.
bool query_netdev(const std::string& name, NetdevInfo& out, std::string* err = nullptr);

// The default GID the kernel gives every RoCE port: fe80::/64 with the modified EUI-64 of the MAC.
wire::Gid default_gid(const wire::MacAddr& mac);

// The RoCE v2 GID table of a port on `info` (index = sgid_index), in the kernel's order (drivers/infiniband/
// core/roce_gid_mgmt.c): the default link-local GID from the MAC first, then one IPv4-mapped GID per IPv4
// address, then every IPv6 address not already present. One entry per address: urxe speaks RoCE v2 only.
std::vector<wire::Gid> build_gid_table(const NetdevInfo& info);

std::string gid_to_string(const wire::Gid& gid);             // "::ffff:10.0.0.1", "fe80::1" (inet_ntop)
bool gid_from_string(const std::string& s, wire::Gid& out);  // accepts IPv4 dotted quad or IPv6

enum class NeighState : uint8_t {
  resolved,     // mac is valid
  pending,      // resolution in progress (or just triggered); ask again later
  unreachable,  // no route, or the kernel marked the neighbour FAILED
};

struct NeighResult {
  NeighState state = NeighState::unreachable;
  wire::MacAddr mac{};
  int ifindex = 0;       // interface the route goes out of
  wire::Gid next_hop{};  // the gateway, or the destination itself when on-link
  bool local = false;    // the destination is one of this host's addresses (mac = that interface's MAC)
};

// One look at the kernel's route and neighbour tables for `dst` (an IPv6 or IPv4-mapped GID). `ifindex`
// scopes link-local destinations (and is preferred for the route); 0 = any. When the neighbour is unknown
// or stale and `trigger` is set, provokes resolution by sending one empty UDP datagram to port 4791 of the
// next hop (a RoCE peer drops it silently), which needs no capability.
NeighResult lookup_neighbor(const wire::Gid& dst, int ifindex, bool trigger = true);

// Repeats lookup_neighbor (every millisecond, re-triggering every 200 ms) until it is resolved or
// unreachable, or `timeout_ms` passes (state pending). Control path only: it sleeps.
NeighResult resolve_neighbor(const wire::Gid& dst, int ifindex, int timeout_ms);

}  // namespace urxe::dpdk
