#include "hostnet/interface.h"

#include <linux/ethtool.h>
#include <linux/if_link.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "hostnet/netlink.h"

namespace urxe::hostnet {
namespace {

void set_err(std::string* err, std::string msg) {
  if (err) *err = std::move(msg);
}

int link_cb(const nlmsghdr* nlh, void* data) {
  auto& out = *static_cast<Interface*>(data);
  if (nlh->nlmsg_type != RTM_NEWLINK) return MNL_CB_OK;
  const auto* ifi = static_cast<const ifinfomsg*>(mnl_nlmsg_get_payload(nlh));
  out.ifindex = ifi->ifi_index;
  out.up = (ifi->ifi_flags & IFF_UP) != 0;
  out.running = (ifi->ifi_flags & IFF_RUNNING) != 0;
  netlink::for_each_attr(nlh, sizeof(*ifi), [&](const nlattr* attr) {
    const uint16_t type = mnl_attr_get_type(attr);
    if (type == IFLA_ADDRESS && mnl_attr_get_payload_len(attr) == out.mac.size()) {
      std::memcpy(out.mac.data(), mnl_attr_get_payload(attr), out.mac.size());
    } else if (type == IFLA_MTU && mnl_attr_validate(attr, MNL_TYPE_U32) == 0) {
      out.mtu = mnl_attr_get_u32(attr);
    } else if (type == IFLA_IFNAME && mnl_attr_validate(attr, MNL_TYPE_NUL_STRING) == 0) {
      out.name = mnl_attr_get_str(attr);
    } else if (type == IFLA_CARRIER_DOWN_COUNT && mnl_attr_validate(attr, MNL_TYPE_U32) == 0) {
      out.carrier_down_count = mnl_attr_get_u32(attr);
      out.has_carrier_down_count = true;
    }
  });
  return MNL_CB_OK;
}

struct AddrDump {
  int ifindex;  // 0: every interface's
  std::vector<Address> v4, v6;
  const wire::Gid* find = nullptr;  // address_ifindex: only look for this one
  int found = 0;
};

int addr_cb(const nlmsghdr* nlh, void* data) {
  auto& d = *static_cast<AddrDump*>(data);
  if (nlh->nlmsg_type != RTM_NEWADDR) return MNL_CB_OK;
  const auto* ifa = static_cast<const ifaddrmsg*>(mnl_nlmsg_get_payload(nlh));
  if (d.ifindex != 0 && static_cast<int>(ifa->ifa_index) != d.ifindex) return MNL_CB_OK;
  const size_t len = ifa->ifa_family == AF_INET ? 4 : ifa->ifa_family == AF_INET6 ? 16 : 0;
  if (len == 0) return MNL_CB_OK;
  // IFA_LOCAL is the interface's own address (IFA_ADDRESS is the peer's on a point-to-point link).
  const nlattr *local = nullptr, *address = nullptr;
  netlink::for_each_attr(nlh, sizeof(*ifa), [&](const nlattr* attr) {
    if (mnl_attr_get_payload_len(attr) != len) return;
    if (mnl_attr_get_type(attr) == IFA_LOCAL) local = attr;
    if (mnl_attr_get_type(attr) == IFA_ADDRESS) address = attr;
  });
  const nlattr* a = local ? local : address;
  if (!a) return MNL_CB_OK;
  Address out;
  out.prefix_len = ifa->ifa_prefixlen;
  if (len == 4) {
    std::array<uint8_t, 4> v4{};
    std::memcpy(v4.data(), mnl_attr_get_payload(a), 4);
    out.addr = wire::gid_from_ipv4(v4);
    out.ipv4 = true;
  } else {
    std::memcpy(out.addr.data(), mnl_attr_get_payload(a), 16);
  }
  if (d.find) {
    if (!d.found && out.addr == *d.find) d.found = static_cast<int>(ifa->ifa_index);
    return MNL_CB_OK;
  }
  (out.ipv4 ? d.v4 : d.v6).push_back(out);
  return MNL_CB_OK;
}

int name_cb(const nlmsghdr* nlh, void* data) {
  auto& names = *static_cast<std::string*>(data);
  if (nlh->nlmsg_type != RTM_NEWLINK) return MNL_CB_OK;
  netlink::for_each_attr(nlh, sizeof(ifinfomsg), [&](const nlattr* attr) {
    if (mnl_attr_get_type(attr) == IFLA_IFNAME && mnl_attr_validate(attr, MNL_TYPE_NUL_STRING) == 0)
      names += (names.empty() ? "" : ", ") + std::string(mnl_attr_get_str(attr));
  });
  return MNL_CB_OK;
}

}  // namespace

bool query_interface(const std::string& name, Interface& out, std::string* err, bool with_addrs) {
  out = Interface{};
  out.name = name;
  if (name.empty() || name.size() >= IFNAMSIZ) {
    set_err(err, "bad interface name '" + name + "'");
    return false;
  }
  alignas(nlmsghdr) char buf[netlink::kRequestSize];
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = RTM_GETLINK;
  nlh->nlmsg_flags = NLM_F_REQUEST;
  auto* ifi = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  ifi->ifi_family = AF_UNSPEC;
  mnl_attr_put_strz(nlh, IFLA_IFNAME, name.c_str());
  if (netlink::request(nlh, link_cb, &out) < 0 || out.ifindex == 0) {
    set_err(err, "no interface '" + name + "': " + std::strerror(errno ? errno : ENODEV));
    return false;
  }
  if (!with_addrs) return true;
  nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = RTM_GETADDR;
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  auto* ifa = static_cast<ifaddrmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifaddrmsg)));
  ifa->ifa_family = AF_UNSPEC;
  AddrDump d{out.ifindex, {}, {}, nullptr, 0};
  if (netlink::request(nlh, addr_cb, &d) < 0) {
    set_err(err, name + ": address dump: " + std::strerror(errno));
    return false;
  }
  out.addrs = std::move(d.v4);
  out.addrs.insert(out.addrs.end(), d.v6.begin(), d.v6.end());
  return true;
}

bool carrier_down_count(const std::string& name, uint64_t& out) {
  Interface i;
  if (!query_interface(name, i, nullptr, false) || !i.has_carrier_down_count) return false;
  out = i.carrier_down_count;
  return true;
}

int address_ifindex(const wire::Gid& addr) {
  alignas(nlmsghdr) char buf[netlink::kRequestSize];
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = RTM_GETADDR;
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  auto* ifa = static_cast<ifaddrmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifaddrmsg)));
  ifa->ifa_family = wire::gid_is_ipv4_mapped(addr) ? AF_INET : AF_INET6;
  AddrDump d{0, {}, {}, &addr, 0};
  if (netlink::request(nlh, addr_cb, &d) < 0) return 0;
  return d.found;
}

uint32_t link_speed_mbps(const std::string& name) {
  if (name.empty() || name.size() >= IFNAMSIZ) return 0;
  const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return 0;
  ethtool_cmd cmd{};
  cmd.cmd = ETHTOOL_GSET;
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, name.c_str(), name.size());
  ifr.ifr_data = reinterpret_cast<char*>(&cmd);
  uint32_t mbps = 0;
  if (::ioctl(s, SIOCETHTOOL, &ifr) == 0) {
    const uint32_t v = ethtool_cmd_speed(&cmd);
    if (v != static_cast<uint32_t>(SPEED_UNKNOWN)) mbps = v;
  }
  ::close(s);
  return mbps;
}

std::string link_driver(const std::string& name) {
  if (name.empty() || name.size() >= IFNAMSIZ) return {};
  const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return {};
  ethtool_drvinfo info{};
  info.cmd = ETHTOOL_GDRVINFO;
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, name.c_str(), name.size());
  ifr.ifr_data = reinterpret_cast<char*>(&info);
  std::string driver;
  if (::ioctl(s, SIOCETHTOOL, &ifr) == 0)
    driver.assign(info.driver, strnlen(info.driver, sizeof info.driver));
  ::close(s);
  return driver;
}

int link_feature(const std::string& name, const std::string& feature) {
  if (name.empty() || name.size() >= IFNAMSIZ) return -1;
  const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, name.c_str(), name.size());
  auto ethtool = [&](void* data) {
    ifr.ifr_data = static_cast<char*>(data);
    return ::ioctl(s, SIOCETHTOOL, &ifr) == 0;
  };
  int on = -1;
  // The feature's bit is its index among the kernel's feature names (string set ETH_SS_FEATURES), which
  // differ between kernels: count them, find the name, then read the active bits.
  alignas(ethtool_sset_info) uint8_t sset_buf[sizeof(ethtool_sset_info) + sizeof(uint32_t)] = {};
  auto* sset = reinterpret_cast<ethtool_sset_info*>(sset_buf);
  sset->cmd = ETHTOOL_GSSET_INFO;
  sset->sset_mask = uint64_t{1} << ETH_SS_FEATURES;
  if (ethtool(sset) && sset->sset_mask && sset->data[0] > 0 && sset->data[0] <= 4096) {
    const uint32_t n = sset->data[0];
    std::vector<uint8_t> strings(sizeof(ethtool_gstrings) + size_t{n} * ETH_GSTRING_LEN);
    auto* gs = reinterpret_cast<ethtool_gstrings*>(strings.data());
    gs->cmd = ETHTOOL_GSTRINGS;
    gs->string_set = ETH_SS_FEATURES;
    gs->len = n;
    uint32_t bit = n;
    if (ethtool(gs))
      for (uint32_t i = 0; i < std::min(n, gs->len) && bit == n; ++i) {
        const char* str = reinterpret_cast<const char*>(gs->data) + size_t{i} * ETH_GSTRING_LEN;
        if (feature == std::string(str, strnlen(str, ETH_GSTRING_LEN))) bit = i;
      }
    const uint32_t blocks = (n + 31) / 32;
    std::vector<uint8_t> feat(sizeof(ethtool_gfeatures) + blocks * sizeof(ethtool_get_features_block));
    auto* gf = reinterpret_cast<ethtool_gfeatures*>(feat.data());
    gf->cmd = ETHTOOL_GFEATURES;
    gf->size = blocks;
    if (bit < n && ethtool(gf)) on = (gf->features[bit / 32].active >> (bit % 32)) & 1;
  }
  ::close(s);
  return on;
}

namespace {
struct QdiscDump {
  int ifindex;
  std::string kind;
};
int qdisc_cb(const nlmsghdr* nlh, void* data) {
  auto& d = *static_cast<QdiscDump*>(data);
  if (nlh->nlmsg_type != RTM_NEWQDISC) return MNL_CB_OK;
  const auto* tcm = static_cast<const tcmsg*>(mnl_nlmsg_get_payload(nlh));
  if (tcm->tcm_ifindex != d.ifindex || tcm->tcm_parent != TC_H_INGRESS) return MNL_CB_OK;
  netlink::for_each_attr(nlh, sizeof(tcmsg), [&](const nlattr* a) {
    if (mnl_attr_get_type(a) == TCA_KIND && mnl_attr_validate(a, MNL_TYPE_STRING) >= 0)
      d.kind = mnl_attr_get_str(a);
  });
  return MNL_CB_OK;
}
}  // namespace

std::string ingress_qdisc(int ifindex) {
  alignas(nlmsghdr) char buf[netlink::kRequestSize];
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = RTM_GETQDISC;
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  auto* tcm = static_cast<tcmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(tcmsg)));
  tcm->tcm_family = AF_UNSPEC;
  tcm->tcm_ifindex = ifindex;
  QdiscDump d{ifindex, {}};
  netlink::request(nlh, qdisc_cb, &d);
  return d.kind;
}

std::string interface_names() {
  alignas(nlmsghdr) char buf[netlink::kRequestSize];
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = RTM_GETLINK;
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  auto* ifi = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  ifi->ifi_family = AF_UNSPEC;
  std::string names;
  netlink::request(nlh, name_cb, &names);
  return names;
}

}  // namespace urxe::hostnet
