// The destination MAC of a GID from the kernel's route and neighbour tables (ARP/ND), and a way to make the
// kernel resolve it. Needs no capability. Used by tests/port's probe to address frames to a peer.
#pragma once
#include <cstdint>

#include "wire/headers.h"

namespace urxe::hostnet {

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

// The kernel's route (RTM_GETROUTE) from `src` (all zero = any) to `dst`, both IPv6 or IPv4-mapped;
// `ifindex` scopes a link-local `dst` (0 = any). What rdma_cm's address resolution asks before it picks a
// device and a source address.
struct Route {
  bool ok = false;       // a unicast or local route exists
  bool local = false;    // dst is an address of this host (ifindex is then the loopback's)
  int ifindex = 0;       // the interface the route goes out of
  wire::Gid src{};       // `src` when given, else the route's preferred source (dst itself when local)
  wire::Gid next_hop{};  // the gateway, or dst when on-link
};
Route lookup_route(const wire::Gid& dst, const wire::Gid& src, int ifindex);

// Repeats lookup_neighbor (every millisecond, re-triggering every 200 ms) until it is resolved or
// unreachable, or `timeout_ms` passes (state pending). Control path only: it sleeps.
NeighResult resolve_neighbor(const wire::Gid& dst, int ifindex, int timeout_ms);

}  // namespace urxe::hostnet
