#include "dpdk/port_factory.h"

#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "dpdk/dpdk_port.h"
#include "dpdk/socket_port.h"

namespace urxe::dpdk {
namespace {

bool have_cap(int cap) {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capget, &hdr, data) != 0) return false;
  return (data[cap / 32].effective >> (cap % 32)) & 1;
}

}  // namespace

bool have_cap_net_admin() {
  return have_cap(CAP_NET_ADMIN);
}
bool have_cap_net_raw() {
  return have_cap(CAP_NET_RAW);
}
bool have_cap_ipc_lock() {
  return have_cap(CAP_IPC_LOCK);
}

bool set_rx_qpn_range(engine::Port& port, uint32_t first, uint32_t end) {
  if (auto* s = dynamic_cast<SocketPort*>(&port)) return s->set_rx_qpn_range({first, end});
  if (auto* d = dynamic_cast<DpdkPort*>(&port)) return d->set_rx_qpn_range({first, end});
  return false;
}

std::unique_ptr<engine::Port> open_port(const PortOptions& opt, std::string* notice, std::string* err) {
  std::string why;
  bool try_dpdk = opt.kind == PortKind::dpdk;
  if (opt.kind == PortKind::automatic) {
    if (!opt.dpdk_args.empty())
      try_dpdk = true;
    else if (!have_cap_net_admin())
      why = "no CAP_NET_ADMIN for DPDK af_packet";
    else if (!have_cap_net_raw())
      why = "no CAP_NET_RAW for DPDK af_packet";
    else
      try_dpdk = true;
  }
  if (try_dpdk) {
    DpdkPortConfig c;
    c.ifname = opt.ifname;
    c.dpdk_args = opt.dpdk_args;
    c.gids = opt.gids;
    c.guard_udp_port = opt.guard_udp_port;
    std::string derr;
    auto p = DpdkPort::open(c, &derr);
    if (p) {
      if (notice) *notice = "urxe: " + opt.ifname + ": using DPDK " + p->device_name();
      return p;
    }
    if (opt.kind == PortKind::dpdk) {
      if (err) *err = derr;
      return nullptr;
    }
    why = "DPDK failed: " + derr;
  }
  SocketPortConfig c;
  c.ifname = opt.ifname;
  c.gids = opt.gids;
  c.guard_udp_port = opt.guard_udp_port;
  std::string serr;
  auto p = SocketPort::open(c, &serr);
  if (!p) {
    if (err) *err = why.empty() ? serr : serr + " (" + why + ")";
    return nullptr;
  }
  if (notice)
    *notice =
        "urxe: " + opt.ifname + ": using the kernel-socket port" + (why.empty() ? "" : " (" + why + ")");
  return p;
}

}  // namespace urxe::dpdk
