#include "dpdk/port_factory.h"

#include <linux/capability.h>

#include "dpdk/dpdk_port.h"
#include "dpdk/memory_port.h"
#include "dpdk/socket_port.h"
#include "hostnet/capability.h"

namespace urxe::dpdk {

std::unique_ptr<engine::Port> open_port(const PortOptions& opt, std::string* notice, std::string* err) {
  if (opt.kind == PortKind::loop || opt.kind == PortKind::null)
    return open_memory_port(opt.attr, opt.kind == PortKind::loop ? opt.bus : std::string());
  std::string why;
  bool try_dpdk = opt.kind == PortKind::dpdk;
  // auto: DPDK only for the user's own EAL/vdev arguments (a NIC's PMD, af_xdp, memif). Without them DPDK
  // would run its af_packet vdev, a kernel packet socket like the socket port, which measured slower here
  // (ib_write_bw 64 KiB between two namespaces: 279 vs 331 MB/s at MTU 1500, 855 vs 977 at 9000; a bare
  // frame's round trip 5.7 vs 5.1 us) and needs CAP_NET_ADMIN besides.
  if (opt.kind == PortKind::automatic) try_dpdk = !opt.dpdk_args.empty();
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
  c.gso = opt.gso;
  std::string serr;
  auto p = SocketPort::open(c, &serr);
  if (!p) {
    if (err) *err = why.empty() ? serr : serr + " (" + why + ")";
    return nullptr;
  }
  if (notice)
    *notice = "urxe: " + opt.ifname + ": using the kernel-socket port" +
              (why.empty() ? "" : " (" + why + ")") +
              (p->tx_gso_cut() == GsoCut::kernel ? ", with UDP GSO (cut by the kernel)"
               : p->tx_gso_cut() != GsoCut::off  ? ", with UDP GSO"
                                                 : "");
  return p;
}

}  // namespace urxe::dpdk
