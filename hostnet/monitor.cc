#include "hostnet/monitor.h"

#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace urxe::hostnet {
namespace {

int message_cb(const nlmsghdr* nlh, void* data) {
  auto& sink = *static_cast<MonitorSink*>(data);
  if (nlh->nlmsg_type == NLMSG_OVERRUN) {
    sink.on_lost();
  } else if (nlh->nlmsg_type == RTM_NEWADDR || nlh->nlmsg_type == RTM_DELADDR) {
    const auto* ifa = static_cast<const ifaddrmsg*>(mnl_nlmsg_get_payload(nlh));
    sink.on_address({nlh->nlmsg_type == RTM_DELADDR, static_cast<int>(ifa->ifa_index)});
  } else if (nlh->nlmsg_type == RTM_NEWLINK || nlh->nlmsg_type == RTM_DELLINK) {
    const auto* ifi = static_cast<const ifinfomsg*>(mnl_nlmsg_get_payload(nlh));
    LinkChange c;
    c.deleted = nlh->nlmsg_type == RTM_DELLINK;
    c.ifindex = ifi->ifi_index;
    c.up = (ifi->ifi_flags & IFF_UP) != 0;
    c.running = (ifi->ifi_flags & IFF_RUNNING) != 0;
    netlink::for_each_attr(nlh, sizeof(*ifi), [&](const nlattr* attr) {
      const uint16_t type = mnl_attr_get_type(attr);
      if (type == IFLA_CARRIER_DOWN_COUNT && mnl_attr_get_payload_len(attr) >= sizeof(uint32_t)) {
        c.carrier_down_count = mnl_attr_get_u32(attr);
        c.has_carrier_down_count = true;
      } else if (type == IFLA_ADDRESS && mnl_attr_get_payload_len(attr) == c.mac.size()) {
        std::memcpy(c.mac.data(), mnl_attr_get_payload(attr), c.mac.size());
        c.has_mac = true;
      }
    });
    sink.on_link(c);
  }
  return MNL_CB_OK;
}

}  // namespace

bool Monitor::open(bool nonblock, std::string* err) {
  return sock_.open(RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR | RTMGRP_LINK, nonblock, err);
}

int Monitor::drain(MonitorSink& sink, int max_reads) {
  if (!sock_.is_open()) return -1;
  int reads = 0;
  for (int i = 0; i < max_reads; ++i) {
    // Only the first read may block; the rest take what is already queued.
    const ssize_t n = ::recv(sock_.fd(), buf_, sizeof buf_, reads == 0 ? 0 : MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == ENOBUFS) {  // the kernel dropped messages
        sink.on_lost();
        ++reads;
        continue;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return reads ? reads : -1;
    }
    if (n == 0) break;
    ++reads;
    // Notifications carry sequence 0 and port 0: no filter.
    mnl_cb_run(buf_, static_cast<size_t>(n), 0, 0, message_cb, &sink);
  }
  return reads;
}

}  // namespace urxe::hostnet
