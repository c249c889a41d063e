// The CM's route lookups (CmHost::lookup_route) through hostnet/: the kernel's routes and neighbours.
#pragma once
#include <vector>

#include "cm/service.h"

namespace urxe::cm {

// For the devices `devs` (a device that has gone has ifindex 0): the kernel's route to `dst` (from `src`
// unless zero; `ifindex` scopes a link-local dst), not_urxe unless it leaves through one of `devs`; a local
// destination is resolved to the device's own MAC (the frames loop back), any other next hop by the
// neighbour table (with `trigger`, resolution is provoked; never waits). device is the CmDevice::index of
// the device found.
RouteResult lookup_cm_route(const std::vector<CmDevice>& devs, const wire::Gid& dst, const wire::Gid& src,
                            int ifindex, bool trigger);

}  // namespace urxe::cm
