#include "provider/gid_watch.h"

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace urxe::provider {

GidWatch::~GidWatch() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<wire::Gid> GidWatch::table_as_gids(const std::vector<GidEntry>& t) const {
  std::vector<wire::Gid> g(cfg_.gid_tbl_len, wire::Gid{});
  for (size_t i = 0; i < t.size() && i < g.size(); ++i)
    if (!t[i].ndev.empty()) g[i] = t[i].gid;
  return g;
}

std::vector<wire::Gid> GidWatch::open(const std::string& ibdev_path, const DeviceConfig& cfg, int ifindex) {
  ibdev_path_ = ibdev_path;
  cfg_ = cfg;
  ifindex_ = ifindex;
  fd_ = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
  if (fd_ >= 0) {
    sockaddr_nl sa{};
    sa.nl_family = AF_NETLINK;
    sa.nl_groups = RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR | RTMGRP_LINK;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  NetdevInfo nd;
  port_up_ = query_netdev(cfg.netdev, nd) && nd.up;
  std::vector<GidEntry> table;
  std::string err;
  // EACCES/EROFS (an app that may only read the tree) still yields the table this context uses.
  sync_gid_table(ibdev_path_, cfg_, table, err);
  return table_as_gids(table);
}

int GidWatch::handle(engine::Engine& engine) {
  if (fd_ < 0) return 0;
  bool relevant = false, link = false;
  alignas(nlmsghdr) char buf[8192];
  for (int reads = 0; reads < 64; ++reads) {  // bounded: a flood of other interfaces' changes waits
    const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == ENOBUFS) {  // the kernel dropped messages: ours may be among them
        relevant = link = true;
        continue;
      }
      break;  // EAGAIN: drained
    }
    if (n == 0) break;
    int len = static_cast<int>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
      if (h->nlmsg_type == NLMSG_OVERRUN) {
        relevant = link = true;
      } else if (h->nlmsg_type == RTM_NEWADDR || h->nlmsg_type == RTM_DELADDR) {
        const auto* ifa = static_cast<const ifaddrmsg*>(NLMSG_DATA(h));
        if (static_cast<int>(ifa->ifa_index) == ifindex_) relevant = true;
      } else if (h->nlmsg_type == RTM_NEWLINK || h->nlmsg_type == RTM_DELLINK) {
        const auto* ifi = static_cast<const ifinfomsg*>(NLMSG_DATA(h));
        if (ifi->ifi_index == ifindex_) relevant = link = true;  // MAC (default GID), state, or gone
      }
    }
  }
  if (link) {
    NetdevInfo nd;
    const bool up = query_netdev(cfg_.netdev, nd) && nd.up;
    if (up != port_up_) {
      port_up_ = up;
      port_changed_ = true;
    }
  }
  if (!relevant) return 0;
  std::vector<GidEntry> table;
  std::string err;
  sync_gid_table(ibdev_path_, cfg_, table, err);
  const std::vector<wire::Gid> want = table_as_gids(table);
  const std::vector<wire::Gid> have = engine.gid_table();
  int changed = 0;
  for (uint32_t i = 0; i < want.size() && i < have.size(); ++i)
    if (want[i] != have[i] && engine.set_gid(i, want[i]) == 0) ++changed;
  return changed;
}

bool GidWatch::take_port_change(bool& up) {
  if (!port_changed_) return false;
  port_changed_ = false;
  up = port_up_;
  return true;
}

}  // namespace urxe::provider
