#include "cm/service/route.h"

#include "hostnet/interface.h"
#include "hostnet/neighbour.h"

namespace urxe::cm {

RouteResult lookup_cm_route(const std::vector<CmDevice>& devs, const wire::Gid& dst, const wire::Gid& src,
                            int ifindex, bool trigger) {
  RouteResult r;
  const hostnet::Route rt = hostnet::lookup_route(dst, src, ifindex);
  if (!rt.ok) return r;
  // A local destination's route leaves through lo: the device is the one holding the address.
  const int oif = rt.local ? (ifindex > 0 ? ifindex : hostnet::address_ifindex(dst)) : rt.ifindex;
  const CmDevice* dev = nullptr;
  for (const CmDevice& d : devs)
    if (oif > 0 && d.ifindex == oif) dev = &d;
  if (!dev) {
    r.state = RouteResult::State::not_urxe;
    return r;
  }
  r.device = dev->index;
  r.src = rt.src;
  if (rt.local) {  // the frames loop back through the device's own MAC
    r.dmac = dev->mac;
    r.state = RouteResult::State::resolved;
    return r;
  }
  const hostnet::NeighResult n = hostnet::lookup_neighbor(rt.next_hop, oif, trigger);
  switch (n.state) {
    case hostnet::NeighState::resolved:
      r.dmac = n.mac;
      r.state = RouteResult::State::resolved;
      break;
    case hostnet::NeighState::pending:
      r.state = RouteResult::State::pending;
      break;
    case hostnet::NeighState::unreachable:
      r.state = RouteResult::State::unreachable;
      break;
  }
  return r;
}

}  // namespace urxe::cm
