// A Port on a DPDK ethdev. EAL is started lazily inside the application, once per process, with arguments
// that work without any host setup: a unique --file-prefix, --no-huge
// -m N when no hugepages are free, --no-pci unless the user names a PCI device, --no-telemetry, the main
// lcore allowed on every CPU the process may use (so the app's thread is not pinned). The default device is
// net_af_packet on the kernel interface (needs CAP_NET_RAW and CAP_NET_ADMIN: it sets promiscuous mode);
// a user string passes any EAL and --vdev arguments through (net_af_xdp, net_memif, a NIC's PMD with -a).
//
// Per packet: tx_alloc = rte_pktmbuf_alloc, tx_burst = rte_eth_tx_burst, rx_burst = rte_eth_rx_burst,
// nothing else. Idle sleep: the PMD's rx interrupt fd when it has one, else (af_packet) a second packet
// socket on the interface whose filter passes RoCE frames only while armed.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "dpdk/socket_port.h"
#include "engine/port.h"
#include "hostnet/gid.h"
#include "hostnet/interface.h"
#include "hostnet/kernel_guard.h"

struct rte_mempool;
struct rte_mbuf;

namespace urxe::dpdk {

struct DpdkPortConfig {
  std::string ifname;     // the kernel interface: MAC, MTU, GIDs, and the default af_packet vdev
  std::string dpdk_args;  // extra EAL/vdev arguments, shell-like words; a --vdev here replaces the default
  uint32_t mbufs = 4096;
  uint16_t rx_desc = 1024, tx_desc = 1024;
  uint32_t eal_mem_mb = 256;    // -m with --no-huge
  bool guard_udp_port = true;   // hold a UdpPortGuard
  std::vector<wire::Gid> gids;  // GID table override; empty = build_gid_table(interface)
};

struct DpdkPortStats {
  uint64_t ipackets = 0, opackets = 0, imissed = 0, ierrors = 0, oerrors = 0, rx_nombuf = 0;
  uint64_t rx_multiseg_dropped = 0;
  uint64_t rx_not_ours_dropped = 0;
  uint64_t tx_loopback = 0;  // frames to our own MAC, sent through the LoopbackSender  // destination MAC not
                             // the port's (the interface is promiscuous)
};

// Starts EAL (once; later calls return the first result). `extra` are appended to the defaults.
bool eal_init_once(const std::vector<std::string>& extra, uint32_t mem_mb, std::string* err);
// The argv EAL was (or would be) started with, for diagnostics.
std::vector<std::string> eal_default_args(uint32_t mem_mb);

class DpdkPort final : public engine::Port {
 public:
  static std::unique_ptr<DpdkPort> open(const DpdkPortConfig& cfg, std::string* err);
  ~DpdkPort() override;

  const engine::PortAttr& attr() const override { return attr_; }
  bool tx_alloc(uint32_t size, engine::PacketBuf& buf) override;
  uint32_t tx_burst(engine::PacketBuf* bufs, uint32_t n) override;
  void tx_free(engine::PacketBuf& buf) override;
  uint32_t rx_burst(engine::PacketBuf* bufs, uint32_t n) override;
  void rx_free(engine::PacketBuf* bufs, uint32_t n) override;
  int rx_wait_fd() const override { return wait_fd_; }
  void rx_wait_arm(bool armed) override;

  uint16_t port_id() const { return port_id_; }
  const std::string& device_name() const { return dev_name_; }
  const hostnet::Interface& netdev() const { return info_; }
  bool udp_guard_active() const { return guard_.active(); }
  DpdkPortStats stats() const;
  engine::PortRxLoss rx_loss() override;
  // Deliver only RoCE frames whose destination QP is in `qpns` (checked in rx_burst; the PMD still copies
  // them) and wake only for those.
  bool set_rx_qpn_range(uint32_t first, uint32_t end) override;
  // The NIC's multicast list (else all multicast); frames to a group pass rx_burst's own filter.
  bool set_multicast_mac(const wire::MacAddr& mac, bool member) override;

 private:
  DpdkPort() = default;
  // open's steps, in order (dpdk_port.cc); attach_ethdev takes hotplug_vdev or find_pci_ethdev.
  bool pick_device(const DpdkPortConfig& cfg, const std::vector<std::string>& eal_extra,
                   const std::vector<std::string>& vdevs, uint32_t framesz, uint32_t blocksz,
                   std::string& vdev_args);
  void open_wakeup_socket();
  bool claim_af_packet_interface(const std::string& ifname, std::string* err);
  bool attach_ethdev(const std::string& vdev_args, std::string* err);
  bool hotplug_vdev(const std::string& vdev_args, std::string* err);
  bool find_pci_ethdev(std::string* err);
  bool start_ethdev(const DpdkPortConfig& cfg, uint32_t framesz, bool af_packet, bool& rx_intr,
                    std::string* err);
  void pick_wait_fd(bool rx_intr, bool af_packet, const std::set<int>& packet_fds_before);
  uint32_t drain_wait_fd();
  static constexpr uint16_t kStash = 32;
  rte_mbuf* stash_[kStash] = {};  // frames rx_wait_arm(false) took from the PMD; rx_burst serves them first
  uint16_t stash_n_ = 0, stash_pos_ = 0;
  QpnRange qpns_;
  bool qpn_filter_ = false;
  std::vector<wire::MacAddr> mc_macs_;  // multicast MACs asked for (set_multicast_mac: engine lock)
  std::atomic<bool> mc_any_{false};     // !mc_macs_.empty(), for rx_wait_arm (the thread, without the lock)
  bool looped(const engine::PacketBuf& b) const {
    return is_to_mac(b.data, b.len, attr_.mac) || is_multicast(b.data, b.len);
  }

  uint16_t port_id_ = 0;
  bool started_ = false;
  bool hotplugged_ = false;
  int af_packet_ifindex_ = -1;  // counted in the process's af_packet users of that interface
  bool have_port_ = false;      // port_id_ names an ethdev this port claimed
  std::string dev_name_;
  rte_mempool* pool_ = nullptr;
  uint32_t buf_size_ = 0;
  int wait_fd_ = -1;
  bool wait_is_socket_ = false;  // our own packet socket (else the PMD's rx interrupt or ring socket)
  std::mutex loss_mu_;           // rx_loss() from a statistics thread
  uint64_t ring_drops_ = 0;      // tp_drops of ring_fd_, summed (PACKET_STATISTICS resets on read)
  int ring_fd_ = -1;             // af_packet: the PMD's own ring socket (polled; owned by the PMD)
  uint64_t multiseg_dropped_ = 0, not_ours_dropped_ = 0;
  hostnet::Interface info_;
  engine::PortAttr attr_;
  hostnet::UdpPortGuard guard_;
  LoopbackSender loop_;
};

}  // namespace urxe::dpdk
