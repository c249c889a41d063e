#include "provider/gid_watch.h"

#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

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
  uint64_t down_count = 0;
  const bool have_count = carrier_down_count(cfg.netdev, down_count);
  port_.reset(query_netdev(cfg.netdev, nd) && nd.up, have_count, static_cast<uint32_t>(down_count));
  mac_ = nd.mac;
  std::vector<GidEntry> table;
  std::string err;
  // EACCES/EROFS (an app that may only read the tree) still yields the table this context uses.
  sync_gid_table(ibdev_path_, cfg_, table, err);
  return table_as_gids(table);
}

int GidWatch::handle(engine::Engine& engine) {
  if (fd_ < 0) return 0;
  bool relevant = false, lost = false;
  alignas(nlmsghdr) char buf[8192];
  for (int reads = 0; reads < 64; ++reads) {  // bounded: a flood of other interfaces' changes waits
    const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == ENOBUFS) {  // the kernel dropped messages: ours may be among them
        relevant = lost = true;
        continue;
      }
      break;  // EAGAIN: drained
    }
    if (n == 0) break;
    int len = static_cast<int>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
      if (h->nlmsg_type == NLMSG_OVERRUN) {
        relevant = lost = true;
      } else if (h->nlmsg_type == RTM_NEWADDR || h->nlmsg_type == RTM_DELADDR) {
        const auto* ifa = static_cast<const ifaddrmsg*>(NLMSG_DATA(h));
        if (static_cast<int>(ifa->ifa_index) == ifindex_) relevant = true;
      } else if (h->nlmsg_type == RTM_NEWLINK || h->nlmsg_type == RTM_DELLINK) {
        const auto* ifi = static_cast<const ifinfomsg*>(NLMSG_DATA(h));
        if (ifi->ifi_index != ifindex_) continue;
        // The GIDs depend on the addresses and the MAC (the default GID): a link message matters to them
        // only when the interface is gone or its MAC changed, not for the flag changes that come often
        // (promiscuous mode when DPDK starts, carrier), whose sync would write files and allocate.
        if (h->nlmsg_type == RTM_DELLINK) relevant = true;
        // Each message's own state, in order (provider/port_tracker.h), not a query after the batch.
        bool have_count = false;
        uint32_t down_count = 0;
        int alen = static_cast<int>(IFLA_PAYLOAD(h));
        for (auto* a = IFLA_RTA(ifi); RTA_OK(a, alen); a = RTA_NEXT(a, alen)) {
          if (a->rta_type == IFLA_CARRIER_DOWN_COUNT && RTA_PAYLOAD(a) >= sizeof(uint32_t)) {
            std::memcpy(&down_count, RTA_DATA(a), sizeof down_count);
            have_count = true;
          } else if (a->rta_type == IFLA_ADDRESS && RTA_PAYLOAD(a) == mac_.size() &&
                     std::memcmp(RTA_DATA(a), mac_.data(), mac_.size()) != 0) {
            std::memcpy(mac_.data(), RTA_DATA(a), mac_.size());
            relevant = true;
          }
        }
        const bool up =
            h->nlmsg_type == RTM_NEWLINK && (ifi->ifi_flags & IFF_UP) && (ifi->ifi_flags & IFF_RUNNING);
        port_.on_link(up, have_count, down_count);
      }
    }
  }
  if (lost) {  // messages were dropped: take the state as it is now
    NetdevInfo nd;
    uint64_t down_count = 0;
    const bool have_count = carrier_down_count(cfg_.netdev, down_count);
    port_.on_link(query_netdev(cfg_.netdev, nd) && nd.up, have_count, static_cast<uint32_t>(down_count));
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
  return port_.take(up);
}

}  // namespace urxe::provider
