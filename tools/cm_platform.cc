#include "tools/cm_platform.h"

#include <sys/socket.h>

#include <algorithm>

#include "cm/service/common.h"
#include "dpdk/socket_port.h"
#include "hostnet/gid.h"
#include "provider/fault_stack.h"
#include "provider/ports.h"
#include "provider/stats.h"
#include "wire/mad.h"

namespace urxe::tools {
namespace {

namespace prov = urxe::provider;

// The service's clock (cm/service/common.h) for the fault port: its due times are what the loop waits for.
class ServiceClock final : public engine::Clock {
 public:
  uint64_t now_ns() const override { return cm::monotonic_ns(); }
};

// A socket port letting in destination QP 1 only, under the device's fault rules and live capture as every
// process of the device has them (provider/fault_stack.h: urxe link add --pcap, $URXE_PCAP; urxe fault): the
// CM MADs land in the same directory as the apps' frames, and a rule (class cm:req, ...) acts on them.
// The rules' counters go to a counters file of the service's own (no counters but the rules'), summed by
// `urxe stats` and `urxe fault list` with the apps'.
class SocketQp1Port final : public cm::Qp1Port {
 public:
  SocketQp1Port(std::unique_ptr<dpdk::SocketPort> port, const prov::DeviceConfig& config,
                const std::string& ibdev_path)
      : port_(std::move(port)) {
    engine::FaultPortConfig fc;  // a pool for CM MADs (duplicates, held frames), not for an engine's bursts
    fc.pool_frames = 32;
    fc.pool_frame_bytes = 2048;
    faults_.open(*port_, clock_, config, fc);
    if (ibdev_path.empty()) return;
    std::string err;
    if (!counters_.open(ibdev_path, {}, wire::kQp1, err))
      cm::service_log("%s: fault rule counters stay private: %s", config.name.c_str(), err.c_str());
    faults_.follow(ibdev_path, counters_, [name = config.name](engine::LogLevel, const std::string& line) {
      cm::service_log("%s: %s", name.c_str(), line.c_str());
    });
    counters_.start_mirror();
  }
  ~SocketQp1Port() override {
    faults_.stop_watch();
    counters_.close();  // the rules' last counts, folded into the device's total
    faults_.close();
  }

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

  uint64_t next_due_ns() const override { return faults_.next_due_ns(); }

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
  engine::Port& io() { return faults_.port(); }
  ServiceClock clock_;
  std::unique_ptr<dpdk::SocketPort> port_;
  prov::FaultStack faults_;
  prov::CounterFile counters_;
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
  try {
    return std::make_unique<SocketQp1Port>(std::move(port), configs_[d.dev.name], d.ibdev_path);
  } catch (const std::exception& ex) {  // the fault port's pool
    err = std::string("fault port: ") + ex.what();
    return nullptr;
  }
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
