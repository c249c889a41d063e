// IP-level multicast memberships (IGMP): what the kernel's RDMA CM does with ip_mc_inc_group for a RoCEv2
// join, done from userspace with IP_ADD_MEMBERSHIP on one UDP socket. The kernel then sends the IGMP
// reports (snooping switches forward the group to this port) and programs the interface's filter.
#pragma once
#include <cstdint>
#include <map>
#include <utility>

#include "wire/headers.h"

namespace urxe::hostnet {

class IpMulticast {
 public:
  IpMulticast() = default;
  IpMulticast(const IpMulticast&) = delete;
  IpMulticast& operator=(const IpMulticast&) = delete;
  ~IpMulticast();  // closing the socket drops every membership
  // One more holder of IPv4 group `group` (IPv4-mapped) on interface `ifindex`: the first joins. 0 or an
  // errno (EINVAL: not an IPv4 multicast address).
  int join(int ifindex, const wire::Gid& group);
  // One fewer: the last leaves. EINVAL when not held.
  int leave(int ifindex, const wire::Gid& group);
  uint32_t holders(int ifindex, const wire::Gid& group) const;

 private:
  int fd_ = -1;
  std::map<std::pair<int, wire::Gid>, uint32_t> held_;
};

}  // namespace urxe::hostnet
