#include "dpdk/netdev_info.h"

#include "wire/opcode.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

namespace urxe::dpdk {
namespace {

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

void set_err(std::string* err, std::string msg) {
  if (err) *err = std::move(msg);
}

uint8_t prefix_from_mask(const sockaddr* sa) {
  if (!sa) return 0;
  const uint8_t* p = nullptr;
  size_t n = 0;
  if (sa->sa_family == AF_INET) {
    p = reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(sa)->sin_addr);
    n = 4;
  } else if (sa->sa_family == AF_INET6) {
    p = reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr);
    n = 16;
  }
  int bits = 0;
  for (size_t i = 0; i < n; ++i) bits += __builtin_popcount(p[i]);
  return static_cast<uint8_t>(bits);
}

bool is_link_local(const wire::Gid& g) {
  return g[0] == 0xfe && (g[1] & 0xc0) == 0x80;
}

// A netlink request/one-reply exchange on NETLINK_ROUTE. Returns the reply length, or -1.
ssize_t rtnl_request(void* req, uint32_t len, uint8_t* reply, size_t reply_cap) {
  Fd s(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (s.fd < 0) return -1;
  timeval tv{1, 0};
  setsockopt(s.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_nl sa{};
  sa.nl_family = AF_NETLINK;
  if (sendto(s.fd, req, len, 0, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != static_cast<ssize_t>(len))
    return -1;
  return recv(s.fd, reply, reply_cap, 0);
}

void add_attr(nlmsghdr* h, size_t cap, uint16_t type, const void* data, size_t len) {
  size_t off = NLMSG_ALIGN(h->nlmsg_len);
  auto* rta = reinterpret_cast<rtattr*>(reinterpret_cast<uint8_t*>(h) + off);
  size_t rlen = RTA_LENGTH(len);
  if (off + RTA_ALIGN(rlen) > cap) return;
  rta->rta_type = type;
  rta->rta_len = static_cast<uint16_t>(rlen);
  std::memcpy(RTA_DATA(rta), data, len);
  h->nlmsg_len = static_cast<uint32_t>(off + RTA_ALIGN(rlen));
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
  wire::Gid next_hop{};
};

RouteInfo route_get(const wire::Gid& dst, int ifindex) {
  RouteInfo r;
  const uint8_t* a;
  size_t alen;
  int family = gid_family(dst, &a, &alen);
  alignas(nlmsghdr) uint8_t req[256] = {};
  auto* rh = reinterpret_cast<nlmsghdr*>(req);
  rh->nlmsg_len = NLMSG_LENGTH(sizeof(rtmsg));
  rh->nlmsg_type = RTM_GETROUTE;
  rh->nlmsg_flags = NLM_F_REQUEST;
  auto* rm = static_cast<rtmsg*>(NLMSG_DATA(rh));
  rm->rtm_family = static_cast<uint8_t>(family);
  rm->rtm_dst_len = static_cast<uint8_t>(alen * 8);
  add_attr(rh, sizeof req, RTA_DST, a, alen);
  if (ifindex > 0 && family == AF_INET6 && is_link_local(dst)) {
    uint32_t oif = static_cast<uint32_t>(ifindex);
    add_attr(rh, sizeof req, RTA_OIF, &oif, sizeof oif);
  }
  alignas(nlmsghdr) uint8_t buf[8192];
  ssize_t n = rtnl_request(req, rh->nlmsg_len, buf, sizeof buf);
  if (n <= 0) return r;
  auto* h = reinterpret_cast<nlmsghdr*>(buf);
  if (!NLMSG_OK(h, static_cast<uint32_t>(n)) || h->nlmsg_type != RTM_NEWROUTE) return r;
  auto* m = static_cast<rtmsg*>(NLMSG_DATA(h));
  r.local = m->rtm_type == RTN_LOCAL;
  r.next_hop = dst;
  int alen_left = static_cast<int>(RTM_PAYLOAD(h));
  for (rtattr* rta = RTM_RTA(m); RTA_OK(rta, alen_left); rta = RTA_NEXT(rta, alen_left)) {
    if (rta->rta_type == RTA_OIF) {
      uint32_t v;
      std::memcpy(&v, RTA_DATA(rta), sizeof v);
      r.oif = static_cast<int>(v);
    } else if (rta->rta_type == RTA_GATEWAY) {
      r.next_hop = gid_from_bytes(family, RTA_DATA(rta));
    }
  }
  r.ok = m->rtm_type == RTN_UNICAST || m->rtm_type == RTN_LOCAL;
  return r;
}

struct NeighEntry {
  bool found = false;
  uint16_t state = 0;
  bool has_mac = false;
  wire::MacAddr mac{};
};

NeighEntry neigh_get(const wire::Gid& addr, int ifindex) {
  NeighEntry e;
  const uint8_t* a;
  size_t alen;
  int family = gid_family(addr, &a, &alen);
  alignas(nlmsghdr) uint8_t req[256] = {};
  auto* rh = reinterpret_cast<nlmsghdr*>(req);
  rh->nlmsg_len = NLMSG_LENGTH(sizeof(ndmsg));
  rh->nlmsg_type = RTM_GETNEIGH;
  rh->nlmsg_flags = NLM_F_REQUEST;
  auto* nm = static_cast<ndmsg*>(NLMSG_DATA(rh));
  nm->ndm_family = static_cast<uint8_t>(family);
  nm->ndm_ifindex = ifindex;
  add_attr(rh, sizeof req, NDA_DST, a, alen);
  alignas(nlmsghdr) uint8_t buf[4096];
  ssize_t n = rtnl_request(req, rh->nlmsg_len, buf, sizeof buf);
  if (n <= 0) return e;
  auto* h = reinterpret_cast<nlmsghdr*>(buf);
  if (!NLMSG_OK(h, static_cast<uint32_t>(n)) || h->nlmsg_type != RTM_NEWNEIGH) return e;
  auto* m = static_cast<ndmsg*>(NLMSG_DATA(h));
  e.found = true;
  e.state = m->ndm_state;
  int left = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof(ndmsg)));
  for (auto* rta = reinterpret_cast<rtattr*>(reinterpret_cast<uint8_t*>(m) + NLMSG_ALIGN(sizeof(ndmsg)));
       RTA_OK(rta, left); rta = RTA_NEXT(rta, left)) {
    if (rta->rta_type == NDA_LLADDR && RTA_PAYLOAD(rta) == 6) {
      std::memcpy(e.mac.data(), RTA_DATA(rta), 6);
      e.has_mac = true;
    }
  }
  return e;
}

// An empty UDP datagram makes the kernel resolve the next hop (ARP / ND). It goes to port 4791: a RoCE peer
// drops it as a truncated packet without answering, where the discard port would draw ICMP unreachable.
void trigger_resolution(const wire::Gid& dst, int ifindex) {
  const uint8_t* a;
  size_t alen;
  int family = gid_family(dst, &a, &alen);
  Fd s(socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (s.fd < 0) return;
  if (family == AF_INET) {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(wire::kRoceV2Port);
    std::memcpy(&sa.sin_addr, a, 4);
    sendto(s.fd, "", 0, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  } else {
    sockaddr_in6 sa{};
    sa.sin6_family = AF_INET6;
    sa.sin6_port = htons(wire::kRoceV2Port);
    std::memcpy(&sa.sin6_addr, a, 16);
    if (is_link_local(dst)) sa.sin6_scope_id = static_cast<uint32_t>(ifindex);
    sendto(s.fd, "", 0, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  }
}

}  // namespace

bool query_netdev(const std::string& name, NetdevInfo& out, std::string* err) {
  out = NetdevInfo{};
  out.name = name;
  if (name.empty() || name.size() >= IFNAMSIZ) {
    set_err(err, "bad interface name '" + name + "'");
    return false;
  }
  out.ifindex = static_cast<int>(if_nametoindex(name.c_str()));
  if (out.ifindex == 0) {
    set_err(err, "no interface '" + name + "': " + std::strerror(errno));
    return false;
  }
  Fd s(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (s.fd < 0) {
    set_err(err, std::string("socket: ") + std::strerror(errno));
    return false;
  }
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, name.c_str(), name.size());
  if (ioctl(s.fd, SIOCGIFHWADDR, &ifr) != 0) {
    set_err(err, name + ": SIOCGIFHWADDR: " + std::strerror(errno));
    return false;
  }
  std::memcpy(out.mac.data(), ifr.ifr_hwaddr.sa_data, 6);
  if (ioctl(s.fd, SIOCGIFMTU, &ifr) != 0) {
    set_err(err, name + ": SIOCGIFMTU: " + std::strerror(errno));
    return false;
  }
  out.mtu = static_cast<uint32_t>(ifr.ifr_mtu);
  if (ioctl(s.fd, SIOCGIFFLAGS, &ifr) == 0) {
    out.up = (ifr.ifr_flags & IFF_UP) != 0;
    out.running = (ifr.ifr_flags & IFF_RUNNING) != 0;
  }
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    set_err(err, std::string("getifaddrs: ") + std::strerror(errno));
    return false;
  }
  std::vector<NetdevAddr> v4, v6;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || name != i->ifa_name) continue;
    NetdevAddr a;
    if (i->ifa_addr->sa_family == AF_INET) {
      a.ipv4 = true;
      a.addr = gid_from_bytes(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr);
      a.prefix_len = prefix_from_mask(i->ifa_netmask);
      v4.push_back(a);
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      a.addr = gid_from_bytes(AF_INET6, &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr);
      a.prefix_len = prefix_from_mask(i->ifa_netmask);
      v6.push_back(a);
    }
  }
  freeifaddrs(list);
  out.addrs = v4;
  out.addrs.insert(out.addrs.end(), v6.begin(), v6.end());
  return true;
}

wire::Gid default_gid(const wire::MacAddr& mac) {
  wire::Gid g{};
  g[0] = 0xfe;
  g[1] = 0x80;
  g[8] = static_cast<uint8_t>(mac[0] ^ 0x02);  // flip the universal/local bit (modified EUI-64)
  g[9] = mac[1];
  g[10] = mac[2];
  g[11] = 0xff;
  g[12] = 0xfe;
  g[13] = mac[3];
  g[14] = mac[4];
  g[15] = mac[5];
  return g;
}

std::vector<wire::Gid> build_gid_table(const NetdevInfo& info) {
  std::vector<wire::Gid> t;
  t.push_back(default_gid(info.mac));
  for (const auto& a : info.addrs)
    if (a.ipv4) t.push_back(a.addr);
  for (const auto& a : info.addrs)
    if (!a.ipv4 && std::find(t.begin(), t.end(), a.addr) == t.end()) t.push_back(a.addr);
  return t;
}

std::string gid_to_string(const wire::Gid& gid) {
  char buf[INET6_ADDRSTRLEN];
  if (!inet_ntop(AF_INET6, gid.data(), buf, sizeof buf)) return "?";
  return buf;
}

bool gid_from_string(const std::string& s, wire::Gid& out) {
  std::array<uint8_t, 4> v4{};
  if (inet_pton(AF_INET, s.c_str(), v4.data()) == 1) {
    out = wire::gid_from_ipv4(v4);
    return true;
  }
  return inet_pton(AF_INET6, s.c_str(), out.data()) == 1;
}

NeighResult lookup_neighbor(const wire::Gid& dst, int ifindex, bool trigger) {
  NeighResult res;
  RouteInfo r = route_get(dst, ifindex);
  if (!r.ok) return res;
  res.ifindex = r.oif;
  res.next_hop = r.next_hop;
  if (r.local) {
    // Our own address: frames go to the MAC of the interface that owns it (ifindex given, else the route's).
    res.local = true;
    int idx = ifindex > 0 ? ifindex : r.oif;
    char name[IF_NAMESIZE] = {};
    NetdevInfo info;
    if (!if_indextoname(static_cast<unsigned>(idx), name) || !query_netdev(name, info)) return res;
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

}  // namespace urxe::dpdk
