#include "hostnet/multicast.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace urxe::hostnet {

namespace {

int membership(int fd, int ifindex, const wire::Gid& group, bool join) {
  ip_mreqn mr{};
  std::memcpy(&mr.imr_multiaddr, &group[12], 4);
  mr.imr_ifindex = ifindex;
  return setsockopt(fd, IPPROTO_IP, join ? IP_ADD_MEMBERSHIP : IP_DROP_MEMBERSHIP, &mr, sizeof mr) == 0
             ? 0
             : errno;
}

}  // namespace

IpMulticast::~IpMulticast() {
  if (fd_ >= 0) close(fd_);
}

int IpMulticast::join(int ifindex, const wire::Gid& group) {
  if (!wire::gid_is_ipv4_mapped(group) || (group[12] & 0xf0) != 0xe0) return EINVAL;
  uint32_t& n = held_[{ifindex, group}];
  if (n == 0) {
    if (fd_ < 0) fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    const int err = fd_ < 0 ? errno : membership(fd_, ifindex, group, true);
    if (err) {
      held_.erase({ifindex, group});
      return err;
    }
  }
  ++n;
  return 0;
}

int IpMulticast::leave(int ifindex, const wire::Gid& group) {
  auto it = held_.find({ifindex, group});
  if (it == held_.end()) return EINVAL;
  if (--it->second) return 0;
  held_.erase(it);
  return membership(fd_, ifindex, group, false);
}

uint32_t IpMulticast::holders(int ifindex, const wire::Gid& group) const {
  auto it = held_.find({ifindex, group});
  return it == held_.end() ? 0 : it->second;
}

}  // namespace urxe::hostnet
