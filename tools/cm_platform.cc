#include "tools/cm_platform.h"

#include <sys/socket.h>

#include <algorithm>

#include "dpdk/socket_port.h"
#include "hostnet/gid.h"
#include "provider/ports.h"
#include "provider/stats.h"
#include "wire/mad.h"

namespace urxe::tools {
namespace {

namespace prov = urxe::provider;

// A socket port letting in destination QP 1 only, under the device's live capture (urxe link add --pcap,
// $URXE_PCAP) as every process of the device has one: the CM MADs land in the same directory as the apps'
// frames.
class SocketQp1Port final : public cm::Qp1Port {
 public:
  SocketQp1Port(std::unique_ptr<dpdk::SocketPort> port, const prov::DeviceConfig& config)
      : port_(std::move(port)), capture_(prov::open_capture(*port_, config)) {}
  ~SocketQp1Port() override { capture_.reset(); }

  int wait_fd() const override { return port_->rx_wait_fd(); }

  int take_error() override {
    int err = 0;
    socklen_t len = sizeof err;
    return getsockopt(port_->rx_wait_fd(), SOL_SOCKET, SO_ERROR, &err, &len) == 0 ? err : 0;
  }

  uint32_t receive(uint32_t max, const std::function<void(wire::ByteSpan)>& frame) override {
    engine::PacketBuf bufs[32];
    const uint32_t n = io().rx_burst(bufs, std::min<uint32_t>(max, 32));
    for (uint32_t i = 0; i < n; ++i) frame(wire::ByteSpan(bufs[i].data, bufs[i].len));
    io().rx_free(bufs, n);
    return n;
  }

  bool send(uint32_t max_len, const std::function<uint32_t(wire::MutByteSpan)>& build) override {
    engine::PacketBuf b;
    if (!io().tx_alloc(max_len, b)) return false;
    b.len = build(wire::MutByteSpan(b.data, max_len));
    if (b.len == 0 || io().tx_burst(&b, 1) != 1) {
      io().tx_free(b);
      return false;
    }
    return true;
  }

 private:
  engine::Port& io() { return capture_ ? *capture_ : *port_; }
  std::unique_ptr<dpdk::SocketPort> port_;
  std::unique_ptr<engine::Port> capture_;  // nullptr when capture is off
};

}  // namespace

// As the provider sees them: the node GUID it reports, the GID table it uses (sync_gid_table, so sgid_index
// agrees).
std::vector<cm::FoundDevice> CmPlatformImpl::scan_devices() {
  std::vector<cm::FoundDevice> found;
  for (prov::DeviceInfo& d : prov::list_devices(paths_)) {
    if (d.other_netns || !d.netdev_present) continue;
    prov::NetdevInfo nd;
    if (!prov::query_netdev(d.config.netdev, nd)) continue;
    std::vector<prov::GidEntry> table;
    std::string err;
    prov::sync_gid_table(d.ibdev_path, d.config, table, err);  // EACCES still yields the table
    cm::FoundDevice f;
    cm::CmDevice& dev = f.dev;
    dev.name = d.config.name;
    dev.node_guid = hostnet::eui64(nd.mac);  // as the provider derives it (the node_guid file)
    dev.mac = nd.mac;
    dev.ifindex = nd.ifindex;
    dev.mtu = d.config.mtu && d.config.mtu < nd.mtu ? d.config.mtu : nd.mtu;
    dev.gids.assign(d.config.gid_tbl_len, wire::Gid{});
    for (size_t i = 0; i < table.size() && i < dev.gids.size(); ++i)
      if (!table[i].ndev.empty()) dev.gids[i] = table[i].gid;
    dev.up = nd.up;
    f.netdev = d.config.netdev;
    f.ibdev_path = d.ibdev_path;
    configs_[dev.name] = d.config;
    found.push_back(std::move(f));
  }
  return found;
}

std::unique_ptr<cm::Qp1Port> CmPlatformImpl::open_qp1(const cm::FoundDevice& d, std::string& err) {
  dpdk::SocketPortConfig pc;
  pc.ifname = d.netdev;
  pc.ring_frames = 64;
  pc.rx_ring_bytes = 1u << 20;
  pc.gids = d.dev.gids;  // only its attr(); given so that it does not build the table again
  auto port = dpdk::SocketPort::open(pc, &err);
  if (port && !port->set_rx_qpn_range(wire::kQp1, wire::kQp1 + 1)) {
    err = "cannot filter on QP1";
    port.reset();
  }
  if (!port) return nullptr;
  return std::make_unique<SocketQp1Port>(std::move(port), configs_[d.dev.name]);
}

bool CmPlatformImpl::write_counters(const cm::FoundDevice& d, const cm::CmService::Counters& k,
                                    std::string& err) {
  prov::CmCounterTable t{};
  for (size_t m = 0; m < t[0].size(); ++m) {
    t[0][m] = k.tx[m];
    t[1][m] = k.rx[m];
    t[2][m] = k.tx_retries[m];
    t[3][m] = k.rx_duplicates[m];
  }
  return prov::write_cm_counters(d.ibdev_path, t, err);
}

}  // namespace urxe::tools
