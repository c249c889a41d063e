#include "hostnet/neighbour.h"

#include <linux/neighbour.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "hostnet/interface.h"
#include "hostnet/netlink.h"
#include "wire/opcode.h"

namespace urxe::hostnet {
namespace {

bool is_link_local(const wire::Gid& g) {
  return g[0] == 0xfe && (g[1] & 0xc0) == 0x80;
}

// Family and raw address bytes of a GID (IPv4-mapped → AF_INET, 4 bytes).
int gid_family(const wire::Gid& g, const uint8_t** bytes, size_t* len) {
  if (wire::gid_is_ipv4_mapped(g)) {
    *bytes = g.data() + 12;
    *len = 4;
    return AF_INET;
  }
  *bytes = g.data();
  *len = 16;
  return AF_INET6;
}

wire::Gid gid_from_bytes(int family, const void* p) {
  wire::Gid g{};
  if (family == AF_INET) {
    std::array<uint8_t, 4> a{};
    std::memcpy(a.data(), p, 4);
    g = wire::gid_from_ipv4(a);
  } else {
    std::memcpy(g.data(), p, 16);
  }
  return g;
}

struct RouteInfo {
  bool ok = false;
  bool local = false;
  int oif = 0;
  int family = 0;
  wire::Gid next_hop{};
  bool has_prefsrc = false;
  wire::Gid prefsrc{};
};

int route_cb(const nlmsghdr* nlh, void* data) {
  auto& r = *static_cast<RouteInfo*>(data);
  if (nlh->nlmsg_type != RTM_NEWROUTE) return MNL_CB_OK;
  const auto* m = static_cast<const rtmsg*>(mnl_nlmsg_get_payload(nlh));
  r.local = m->rtm_type == RTN_LOCAL;
  const size_t alen = r.family == AF_INET ? 4 : 16;
  netlink::for_each_attr(nlh, sizeof(*m), [&](const nlattr* attr) {
    if (mnl_attr_get_type(attr) == RTA_OIF && mnl_attr_validate(attr, MNL_TYPE_U32) == 0) {
      r.oif = static_cast<int>(mnl_attr_get_u32(attr));
    } else if (mnl_attr_get_type(attr) == RTA_GATEWAY && mnl_attr_get_payload_len(attr) == alen) {
      r.next_hop = gid_from_bytes(r.family, mnl_attr_get_payload(attr));
    } else if (mnl_attr_get_type(attr) == RTA_PREFSRC && mnl_attr_get_payload_len(attr) == alen) {
      r.prefsrc = gid_from_bytes(r.family, mnl_attr_get_payload(attr));
      r.has_prefsrc = true;
    }
  });
  r.ok = m->rtm_type == RTN_UNICAST || m->rtm_type == RTN_LOCAL;
  return MNL_CB_OK;
}

RouteInfo route_get(const wire::Gid& dst, int ifindex, const wire::Gid* src = nullptr) {
  RouteInfo r;
  const uint8_t* a;
  size_t alen;
  r.family = gid_family(dst, &a, &alen);
  r.next_hop = dst;
  alignas(nlmsghdr) char buf[netlink::kRequestSize];
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = RTM_GETROUTE;
  nlh->nlmsg_flags = NLM_F_REQUEST;
  auto* rm = static_cast<rtmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(rtmsg)));
  rm->rtm_family = static_cast<uint8_t>(r.family);
  rm->rtm_dst_len = static_cast<uint8_t>(alen * 8);
  mnl_attr_put(nlh, RTA_DST, alen, a);
  if (src) {
    const uint8_t* sa;
    size_t slen;
    if (gid_family(*src, &sa, &slen) == r.family) {
      rm->rtm_src_len = static_cast<uint8_t>(slen * 8);
      mnl_attr_put(nlh, RTA_SRC, slen, sa);
    }
  }
  if (ifindex > 0 && r.family == AF_INET6 && is_link_local(dst))
    mnl_attr_put_u32(nlh, RTA_OIF, static_cast<uint32_t>(ifindex));
  if (netlink::request(nlh, route_cb, &r) < 0) r.ok = false;
  return r;
}

struct NeighEntry {
  bool found = false;
  uint16_t state = 0;
  bool has_mac = false;
  wire::MacAddr mac{};
};

int neigh_cb(const nlmsghdr* nlh, void* data) {
  auto& e = *static_cast<NeighEntry*>(data);
  if (nlh->nlmsg_type != RTM_NEWNEIGH) return MNL_CB_OK;
  const auto* m = static_cast<const ndmsg*>(mnl_nlmsg_get_payload(nlh));
  e.found = true;
  e.state = m->ndm_state;
  netlink::for_each_attr(nlh, sizeof(*m), [&](const nlattr* attr) {
    if (mnl_attr_get_type(attr) == NDA_LLADDR && mnl_attr_get_payload_len(attr) == e.mac.size()) {
      std::memcpy(e.mac.data(), mnl_attr_get_payload(attr), e.mac.size());
      e.has_mac = true;
    }
  });
  return MNL_CB_OK;
}

NeighEntry neigh_get(const wire::Gid& addr, int ifindex) {
  NeighEntry e;
  const uint8_t* a;
  size_t alen;
  const int family = gid_family(addr, &a, &alen);
  alignas(nlmsghdr) char buf[netlink::kRequestSize];
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = RTM_GETNEIGH;
  nlh->nlmsg_flags = NLM_F_REQUEST;
  auto* nm = static_cast<ndmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ndmsg)));
  nm->ndm_family = static_cast<uint8_t>(family);
  nm->ndm_ifindex = ifindex;
  mnl_attr_put(nlh, NDA_DST, alen, a);
  if (netlink::request(nlh, neigh_cb, &e) < 0) e.found = false;
  return e;
}

// An empty UDP datagram makes the kernel resolve the next hop (ARP / ND). It goes to port 4791: a RoCE peer
// drops it as a truncated packet without answering, where the discard port would draw ICMP unreachable.
void trigger_resolution(const wire::Gid& dst, int ifindex) {
  const uint8_t* a;
  size_t alen;
  const int family = gid_family(dst, &a, &alen);
  const int s = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return;
  if (family == AF_INET) {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(wire::kRoceV2Port);
    std::memcpy(&sa.sin_addr, a, 4);
    sendto(s, "", 0, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  } else {
    sockaddr_in6 sa{};
    sa.sin6_family = AF_INET6;
    sa.sin6_port = htons(wire::kRoceV2Port);
    std::memcpy(&sa.sin6_addr, a, 16);
    if (is_link_local(dst)) sa.sin6_scope_id = static_cast<uint32_t>(ifindex);
    sendto(s, "", 0, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  }
  close(s);
}

}  // namespace

NeighResult lookup_neighbor(const wire::Gid& dst, int ifindex, bool trigger) {
  NeighResult res;
  RouteInfo r = route_get(dst, ifindex);
  if (!r.ok) return res;
  res.ifindex = r.oif;
  res.next_hop = r.next_hop;
  if (r.local) {
    // Our own address: frames go to the MAC of the interface that owns it (ifindex given, else the route's).
    res.local = true;
    const int idx = ifindex > 0 ? ifindex : r.oif;
    char name[IF_NAMESIZE] = {};
    Interface info;
    if (!if_indextoname(static_cast<unsigned>(idx), name) || !query_interface(name, info, nullptr, false))
      return res;
    res.mac = info.mac;
    res.state = NeighState::resolved;
    return res;
  }
  NeighEntry e = neigh_get(r.next_hop, r.oif);
  constexpr uint16_t kValid = NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_PERMANENT | NUD_NOARP;
  if (e.found && e.has_mac && (e.state & kValid)) {
    res.mac = e.mac;
    res.state = NeighState::resolved;
    // A STALE entry is still usable (the kernel would send on it too); poke it so it gets confirmed.
    if ((e.state & NUD_STALE) && trigger) trigger_resolution(r.next_hop, r.oif);
    return res;
  }
  if (e.found && (e.state & NUD_FAILED) && !trigger) return res;
  if (trigger) trigger_resolution(r.next_hop, r.oif);
  res.state = NeighState::pending;
  return res;
}

Route lookup_route(const wire::Gid& dst, const wire::Gid& src, int ifindex) {
  Route out;
  const bool any_src = src == wire::Gid{};
  RouteInfo r = route_get(dst, ifindex, any_src ? nullptr : &src);
  if (!r.ok) return out;
  out.ok = true;
  out.local = r.local;
  out.ifindex = r.oif;
  out.next_hop = r.next_hop;
  out.src = !any_src ? src : r.has_prefsrc ? r.prefsrc : r.local ? dst : wire::Gid{};
  return out;
}

NeighResult resolve_neighbor(const wire::Gid& dst, int ifindex, int timeout_ms) {
  auto start = std::chrono::steady_clock::now();
  auto last_trigger = start;
  NeighResult r = lookup_neighbor(dst, ifindex, true);
  while (r.state == NeighState::pending) {
    auto now = std::chrono::steady_clock::now();
    if (now - start >= std::chrono::milliseconds(timeout_ms)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    bool retrigger = now - last_trigger >= std::chrono::milliseconds(200);
    if (retrigger) last_trigger = now;
    r = lookup_neighbor(dst, ifindex, retrigger);
  }
  return r;
}

}  // namespace urxe::hostnet
