// A Port on one kernel AF_PACKET socket (TPACKET_V2 rx and tx rings, bound to the interface, no promiscuous
// mode), for where DPDK's af_packet vdev cannot start: a container with CAP_NET_RAW but no CAP_NET_ADMIN
// (Docker's default set). It sends and receives whole Ethernet frames, so what the engine builds is exactly
// what goes on the wire and received frames keep their IP headers for the ICRC check.
//
// Per packet: rx_burst reads the ring (no syscall, no copy); tx_burst copies each frame into the tx ring and
// kicks it with one send() per burst. A classic-BPF filter in the kernel passes only UDP/4791 frames that
// are addressed to this host (or sent by another socket on this host to this interface's MAC, which only
// happens when that sender does not bypass the qdisc layer), so the process is not woken for other traffic.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/port.h"
#include "hostnet/gid.h"
#include "hostnet/interface.h"
#include "hostnet/kernel_guard.h"

struct tpacket2_hdr;
struct sockaddr_ll;

namespace urxe::dpdk {

// Bytes of receive ring per port (socket port and DPDK's af_packet vdev): 4096 frames at MTU 1500.
inline constexpr uint32_t kRxRingBytes = 8u << 20;

struct SocketPortConfig {
  std::string ifname;
  uint32_t ring_frames = 512;  // tx ring, and the least the rx ring holds
  // The rx ring holds this many bytes of frames (~20 ms at 3 Gbit/s): a receiver descheduled for a few
  // milliseconds (2 shared cores) must not lose frames, which UC/UD never resend and RC resends slowly.
  uint32_t rx_ring_bytes = kRxRingBytes;
  uint32_t max_frame = 0;  // largest Ethernet frame handled; 0 = interface MTU + 18 (Ethernet + VLAN)
  // ~10 % faster; other packet sockets (tcpdump) then do not see our tx frames. Not where the kernel cuts
  // the UDP GSO batches (GsoCut::kernel), which it does only in the qdisc layer.
  bool qdisc_bypass = true;
  bool guard_udp_port = true;  // hold a UdpPortGuard so the kernel does not answer RoCE with ICMP
  // Transmit runs of equal-size frames of one flow as one UDP GSO datagram (dpdk/README.md, "UDP GSO"):
  // -1 = where gso_cut says, 0 = never, 1 = wherever the kernel takes them. Receiving such datagrams
  // (splitting them into their frames) is always on.
  int gso = -1;
  std::vector<wire::Gid> gids;  // GID table override; empty = build_gid_table(interface)
};

// Where a run of frames the socket port sends as one UDP GSO datagram is cut into its frames.
enum class GsoCut {
  off,     // not sent as datagrams: asked so, or by default where the interface segments UDP itself (a
           // NIC's own USO, whose IPv4 ID numbering these machines cannot check) or says nothing
  peer,    // a veth: the datagram reaches the other namespace whole
  kernel,  // the interface does not segment UDP: the kernel cuts the datagram in software on its way to the
           // driver, which then takes the frames in one go. Only through the qdisc layer (qdisc bypass
           // refuses what needs cutting), so both of the port's sockets go through it then.
  device,  // asked for (gso 1) where the interface segments UDP itself or says nothing
};
// By the interface (its driver, its tx-udp-segmentation feature) and SocketPortConfig::gso.
GsoCut gso_cut(const std::string& ifname, int gso);

struct PortStats {
  uint64_t rx_frames = 0, rx_truncated = 0, tx_frames = 0, tx_ring_full = 0, tx_kick_errors = 0;
  uint64_t tx_loopback = 0;  // frames to our own MAC, sent through the LoopbackSender
  uint64_t kernel_rx_packets = 0, kernel_rx_drops = 0;  // PACKET_STATISTICS (reset on every read)
  // UDP GSO: datagrams sent / frames in them; received / frames split from them; received ones dropped
  // (no split possible: not UDP GSO, tagged, too many or too large segments, the copy missing).
  uint64_t tx_gso_batches = 0, tx_gso_frames = 0, rx_gso_batches = 0, rx_gso_frames = 0, rx_gso_dropped = 0;
  uint64_t rx_gso_resync = 0;  // the socket queue's copies were out of step with the ring, and emptied
};

// Destination QPNs a port delivers: [first, end). Several processes share a device, each with its own block
// of QPNs (the provider's urxe.qpn locks); a port told its block drops the other processes' RoCE frames
// before they cost a wakeup. Default: every QPN.
struct QpnRange {
  uint32_t first = 0, end = 1u << 24;
  bool contains(uint32_t qpn) const { return qpn >= first && qpn < end; }
};

// Classic-BPF filters on a packet socket `fd` (also used by DpdkPort's wakeup socket): pass RoCE frames for
// this host (see above) whose destination QP is in `qpns`, truncated to `snaplen` bytes; or drop everything.
// `multicast`: also frames to a multicast MAC and DestQP 0xFFFFFF (a process with multicast groups).
bool attach_roce_filter(int fd, const wire::MacAddr& mac, uint32_t snaplen, QpnRange qpns, std::string* err,
                        bool multicast = false);
// PACKET_ADD_MEMBERSHIP / PACKET_DROP_MEMBERSHIP of a multicast MAC (PACKET_MR_MULTICAST): the interface's
// filter passes that address while a socket holds it (no IGMP/MLD: that is an IP-level join).
bool set_packet_membership(int fd, int ifindex, const wire::MacAddr& mac, bool member);
bool attach_drop_filter(int fd, std::string* err);

// Frames addressed to the port's own MAC (another QP on this device, in this process or another one) are
// sent through this plain packet socket instead of the port's fast path: it does not bypass the qdisc layer,
// so the kernel shows each such frame to every packet socket on the interface, including the ports' own
// receive sockets (as PACKET_OUTGOING). That is how two processes on one device, or two QPs of one process,
// reach each other, like a NIC's internal loopback. One send() per such frame; it also goes out on the
// wire, where nobody else takes a frame to our MAC.
class LoopbackSender {
 public:
  LoopbackSender() = default;
  LoopbackSender(const LoopbackSender&) = delete;
  LoopbackSender& operator=(const LoopbackSender&) = delete;
  ~LoopbackSender();
  bool open(int ifindex, std::string* err);
  bool send(const uint8_t* frame, uint32_t len);
  uint64_t sent() const { return sent_; }

 private:
  int fd_ = -1;
  uint64_t sent_ = 0;
};

inline bool is_multicast(const uint8_t* frame, uint32_t len) {
  return len >= 6 && (frame[0] & 1);
}

inline bool is_to_mac(const uint8_t* frame, uint32_t len, const wire::MacAddr& mac) {
  return len >= 6 && frame[0] == mac[0] && frame[1] == mac[1] && frame[2] == mac[2] && frame[3] == mac[3] &&
         frame[4] == mac[4] && frame[5] == mac[5];
}

// Not thread-safe: one thread (the engine's progress thread) drives a port.
class SocketPort final : public engine::Port {
 public:
  // nullptr with a reason in *err (e.g. "socket(AF_PACKET): Operation not permitted" without CAP_NET_RAW).
  static std::unique_ptr<SocketPort> open(const SocketPortConfig& cfg, std::string* err);
  ~SocketPort() override;

  const engine::PortAttr& attr() const override { return attr_; }
  bool tx_alloc(uint32_t size, engine::PacketBuf& buf) override;
  uint32_t tx_burst(engine::PacketBuf* bufs, uint32_t n) override;
  void tx_free(engine::PacketBuf& buf) override;
  uint32_t rx_burst(engine::PacketBuf* bufs, uint32_t n) override;
  void rx_free(engine::PacketBuf* bufs, uint32_t n) override;
  int rx_wait_fd() const override { return fd_; }  // POLLIN when the rx ring holds a frame
  // The port writes each frame's ICRC as it sends it: a frame of a GSO run needs one over its new IPv4 ID,
  // so one the engine computed would be computed again.
  bool tx_icrc_offload() const override { return true; }

  const hostnet::Interface& netdev() const { return info_; }
  // Where runs of frames leaving as UDP GSO datagrams are cut; off when they do not (also once it turned
  // itself off because the kernel refused them: an interface that lost its offload under qdisc bypass).
  GsoCut tx_gso_cut() const { return gso_fd_ >= 0 ? cut_ : GsoCut::off; }
  bool udp_guard_active() const { return guard_.active(); }
  PortStats stats();
  engine::PortRxLoss rx_loss() override;
  // Deliver only RoCE frames whose destination QP is in `qpns` (in the kernel's socket filter).
  bool set_rx_qpn_range(uint32_t first, uint32_t end) override;
  // The group's MAC joins the interface's filter (PACKET_ADD_MEMBERSHIP) and, with the first group, the
  // socket filter passes frames to groups (DestQP 0xFFFFFF).
  bool set_multicast_mac(const wire::MacAddr& mac, bool member) override;

 private:
  SocketPort() = default;
  // open's steps (socket_port.cc).
  bool open_socket(std::string* err);
  bool map_rings(uint32_t block_size, uint32_t rx_blocks, uint32_t tx_blocks, std::string* err);
  void open_gso_socket(const sockaddr_ll& sll, bool bypass);
  void init_buffers();
  uint8_t* rx_slot(uint32_t i) const { return ring_ + static_cast<size_t>(i) * frame_size_; }
  uint8_t* tx_slot(uint32_t i) const { return ring_ + rx_bytes_ + static_cast<size_t>(i) * frame_size_; }
  uint32_t gso_run(const engine::PacketBuf* bufs, uint32_t n) const;
  int send_gso(engine::PacketBuf* bufs, uint32_t k);
  enum class Split { done, no_buffers };
  Split split_gso(tpacket2_hdr* h, uint32_t status);
  bool read_copy(const uint8_t* f, uint32_t snap, uint32_t nseg, uint32_t hdr, uint32_t seg, uint32_t total);
  uint8_t* seg_buf(uint32_t i) { return seg_pool_.data() + static_cast<size_t>(i) * max_frame_; }

  int fd_ = -1;
  uint8_t* ring_ = nullptr;
  size_t ring_bytes_ = 0, rx_bytes_ = 0;
  uint32_t frame_size_ = 0, rx_frame_nr_ = 0, tx_frame_nr_ = 0, max_frame_ = 0;
  uint32_t rx_head_ = 0, tx_head_ = 0;
  // tx buffers handed to the engine by tx_alloc: a fixed pool with a free stack (no allocation per packet).
  std::vector<uint8_t> pool_;
  std::vector<uint32_t> pool_free_;
  std::vector<uint8_t> rx_held_;  // rx slots handed to the engine and not yet returned
  // UDP GSO. fd_ carries a virtio_net_hdr before every frame (vnet_ bytes: in its rings and reads) when the
  // kernel has PACKET_VNET_HDR; gso_fd_ sends the batches (no ring), -1 when batches are off.
  uint32_t vnet_ = 0;
  int gso_fd_ = -1;
  GsoCut cut_ = GsoCut::off;
  uint32_t gso_refused_ = 0;  // datagrams refused in a row
  // Frames split from a received GSO datagram: a fixed pool of frame buffers and those not handed out yet.
  std::vector<uint8_t> seg_pool_;
  std::vector<uint32_t> seg_free_;
  std::vector<std::pair<uint32_t, uint32_t>> seg_ready_;  // (buffer, length), handed out from seg_next_
  size_t seg_next_ = 0;
  PortStats stats_;
  std::mutex stats_mu_;  // stats() from a statistics thread
  hostnet::Interface info_;
  engine::PortAttr attr_;
  hostnet::UdpPortGuard guard_;
  LoopbackSender loop_;
  QpnRange qpns_;
  std::vector<wire::MacAddr> mc_macs_;  // multicast MACs joined (one per engine request)
};

}  // namespace urxe::dpdk
