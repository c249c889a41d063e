#include "dpdk/socket_port.h"

#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <numeric>

#include "wire/opcode.h"

namespace urxe::dpdk {
namespace {

constexpr uint32_t kSnapAll = 0x40000;
constexpr uint32_t kTxDataOffset = TPACKET2_HDRLEN - sizeof(sockaddr_ll);  // where tx frame data starts

uint32_t status_load(const tpacket2_hdr* h) {
  return __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE);
}
void status_store(tpacket2_hdr* h, uint32_t v) {
  __atomic_store_n(&h->tp_status, v, __ATOMIC_RELEASE);
}

std::string errno_msg(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

// Kernel-side filter: PACKET_HOST frames (or PACKET_OUTGOING ones to our own MAC) carrying IPv4 (not a
// fragment) or IPv6 UDP to port 4791. Everything else is dropped before it is queued.
std::vector<sock_filter> roce_filter(const wire::MacAddr& mac, uint32_t snaplen, QpnRange qpns) {
  auto J = [](uint16_t code, uint32_t k, uint32_t i, uint32_t t, uint32_t f) {
    return sock_filter{code, static_cast<uint8_t>(t - i - 1), static_cast<uint8_t>(f - i - 1), k};
  };
  auto S = [](uint16_t code, uint32_t k) { return sock_filter{code, 0, 0, k}; };
  const uint32_t mac03 =
      (uint32_t{mac[0]} << 24) | (uint32_t{mac[1]} << 16) | (uint32_t{mac[2]} << 8) | mac[3];
  const uint32_t mac45 = (uint32_t{mac[4]} << 8) | mac[5];
  enum : uint32_t { kProto = 7, kV4 = 10, kV6 = 19, kQpn = 24, kAccept = 27, kDrop = 28 };
  return {
      /*0*/ S(BPF_LD | BPF_W | BPF_ABS, static_cast<uint32_t>(SKF_AD_OFF + SKF_AD_PKTTYPE)),
      /*1*/ J(BPF_JMP | BPF_JEQ | BPF_K, PACKET_HOST, 1, kProto, 2),
      /*2*/ J(BPF_JMP | BPF_JEQ | BPF_K, PACKET_OUTGOING, 2, 3, kDrop),
      /*3*/ S(BPF_LD | BPF_W | BPF_ABS, 0),
      /*4*/ J(BPF_JMP | BPF_JEQ | BPF_K, mac03, 4, 5, kDrop),
      /*5*/ S(BPF_LD | BPF_H | BPF_ABS, 4),
      /*6*/ J(BPF_JMP | BPF_JEQ | BPF_K, mac45, 6, kProto, kDrop),
      /*7*/ S(BPF_LD | BPF_H | BPF_ABS, 12),
      /*8*/ J(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IP, 8, kV4, 9),
      /*9*/ J(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IPV6, 9, kV6, kDrop),
      // IPv4: UDP, not a fragment, destination port 4791; then the BTH word holding the destination QP.
      /*10*/ S(BPF_LD | BPF_B | BPF_ABS, 23),
      /*11*/ J(BPF_JMP | BPF_JEQ | BPF_K, wire::kIpProtoUdp, 11, 12, kDrop),
      /*12*/ S(BPF_LD | BPF_H | BPF_ABS, 20),
      /*13*/ J(BPF_JMP | BPF_JSET | BPF_K, 0x3fff, 13, kDrop, 14),
      /*14*/ S(BPF_LDX | BPF_B | BPF_MSH, 14),
      /*15*/ S(BPF_LD | BPF_H | BPF_IND, 16),
      /*16*/ J(BPF_JMP | BPF_JEQ | BPF_K, wire::kRoceV2Port, 16, 17, kDrop),
      /*17*/ S(BPF_LD | BPF_W | BPF_IND, 14 + 8 + 4),
      /*18*/ S(BPF_JMP | BPF_JA, kQpn - 18 - 1),
      // IPv6 (no extension headers: RoCE uses none)
      /*19*/ S(BPF_LD | BPF_B | BPF_ABS, 20),
      /*20*/ J(BPF_JMP | BPF_JEQ | BPF_K, wire::kIpProtoUdp, 20, 21, kDrop),
      /*21*/ S(BPF_LD | BPF_H | BPF_ABS, 56),
      /*22*/ J(BPF_JMP | BPF_JEQ | BPF_K, wire::kRoceV2Port, 22, 23, kDrop),
      /*23*/ S(BPF_LD | BPF_W | BPF_ABS, 14 + 40 + 8 + 4),
      // Destination QP (low 24 bits of BTH bytes 4..7) in [first, end).
      /*24*/ S(BPF_ALU | BPF_AND | BPF_K, 0xffffff),
      /*25*/ J(BPF_JMP | BPF_JGE | BPF_K, qpns.first, 25, 26, kDrop),
      /*26*/ J(BPF_JMP | BPF_JGE | BPF_K, qpns.end, 26, kDrop, kAccept),
      /*27*/ S(BPF_RET | BPF_K, snaplen),
      /*28*/ S(BPF_RET | BPF_K, 0),
  };
}

bool attach(int fd, std::vector<sock_filter> f, std::string* err) {
  sock_fprog prog{static_cast<unsigned short>(f.size()), f.data()};
  if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) == 0) return true;
  if (err) *err = errno_msg("SO_ATTACH_FILTER");
  return false;
}

}  // namespace

bool attach_roce_filter(int fd, const wire::MacAddr& mac, uint32_t snaplen, QpnRange qpns, std::string* err) {
  return attach(fd, roce_filter(mac, snaplen, qpns), err);
}

bool attach_drop_filter(int fd, std::string* err) {
  return attach(fd, {sock_filter{BPF_RET | BPF_K, 0, 0, 0}}, err);
}

LoopbackSender::~LoopbackSender() {
  if (fd_ >= 0) close(fd_);
}

bool LoopbackSender::open(int ifindex, std::string* err) {
  // Protocol 0: this socket never receives.
  fd_ = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
  if (fd_ < 0) {
    if (err) *err = errno_msg("socket(AF_PACKET) (needs CAP_NET_RAW)");
    return false;
  }
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_ifindex = ifindex;
  if (bind(fd_, reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) {
    if (err) *err = errno_msg("bind(AF_PACKET loopback)");
    return false;
  }
  return true;
}

bool LoopbackSender::send(const uint8_t* frame, uint32_t len) {
  if (::send(fd_, frame, len, MSG_DONTWAIT) != static_cast<ssize_t>(len)) return false;
  ++sent_;
  return true;
}

std::unique_ptr<SocketPort> SocketPort::open(const SocketPortConfig& cfg, std::string* err) {
  std::unique_ptr<SocketPort> p(new SocketPort());
  if (!hostnet::query_interface(cfg.ifname, p->info_, err)) return nullptr;
  p->attr_.mac = p->info_.mac;
  p->attr_.mtu = p->info_.mtu;
  p->attr_.gids = cfg.gids.empty() ? hostnet::build_gid_table(p->info_) : cfg.gids;

  p->max_frame_ = cfg.max_frame ? cfg.max_frame : p->info_.mtu + 18;
  // Slot = tpacket2 header + sockaddr_ll + alignment (the kernel puts the MAC header at ~66) + frame.
  p->frame_size_ = (p->max_frame_ + 128 + 2047) / 2048 * 2048;
  const uint32_t block_size = std::lcm(p->frame_size_, static_cast<uint32_t>(getpagesize()));
  const uint32_t per_block = block_size / p->frame_size_;
  const uint32_t tx_blocks = (std::max(cfg.ring_frames, 16u) + per_block - 1) / per_block;
  const uint32_t rx_want = std::max(std::max(cfg.ring_frames, 16u), cfg.rx_ring_bytes / p->frame_size_);
  const uint32_t rx_blocks = (rx_want + per_block - 1) / per_block;
  p->tx_frame_nr_ = tx_blocks * per_block;
  p->rx_frame_nr_ = rx_blocks * per_block;
  p->attr_.rx_ring_frames = p->rx_frame_nr_;

  // Protocol 0: nothing is queued until bind(), by which time the filter and rings are in place.
  p->fd_ = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (p->fd_ < 0) {
    if (err) *err = errno_msg("socket(AF_PACKET) (needs CAP_NET_RAW)");
    return nullptr;
  }
  if (!attach_roce_filter(p->fd_, p->info_.mac, kSnapAll, {}, err)) return nullptr;
  int v = TPACKET_V2;
  if (setsockopt(p->fd_, SOL_PACKET, PACKET_VERSION, &v, sizeof v) != 0) {
    if (err) *err = errno_msg("PACKET_VERSION");
    return nullptr;
  }
  int one = 1;
  // Malformed tx frames are skipped instead of stalling the ring.
  setsockopt(p->fd_, SOL_PACKET, PACKET_LOSS, &one, sizeof one);
  if (cfg.qdisc_bypass) setsockopt(p->fd_, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one);
  tpacket_req rx_req{block_size, rx_blocks, p->frame_size_, p->rx_frame_nr_};
  if (setsockopt(p->fd_, SOL_PACKET, PACKET_RX_RING, &rx_req, sizeof rx_req) != 0) {
    if (err) *err = errno_msg("PACKET_RX_RING");
    return nullptr;
  }
  tpacket_req tx_req{block_size, tx_blocks, p->frame_size_, p->tx_frame_nr_};
  if (setsockopt(p->fd_, SOL_PACKET, PACKET_TX_RING, &tx_req, sizeof tx_req) != 0) {
    if (err) *err = errno_msg("PACKET_TX_RING");
    return nullptr;
  }
  // One mapping: the rx ring, then the tx ring.
  p->rx_bytes_ = static_cast<size_t>(block_size) * rx_blocks;
  p->ring_bytes_ = p->rx_bytes_ + static_cast<size_t>(block_size) * tx_blocks;
  void* m = mmap(nullptr, p->ring_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, p->fd_, 0);
  if (m == MAP_FAILED) {
    if (err) *err = errno_msg("mmap(packet ring)");
    return nullptr;
  }
  p->ring_ = static_cast<uint8_t*>(m);
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(ETH_P_ALL);
  sll.sll_ifindex = p->info_.ifindex;
  if (bind(p->fd_, reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) {
    if (err) *err = errno_msg("bind(AF_PACKET)");
    return nullptr;
  }
  if (!p->loop_.open(p->info_.ifindex, err)) return nullptr;
  p->rx_held_.assign(p->rx_frame_nr_, 0);
  p->pool_.resize(static_cast<size_t>(p->tx_frame_nr_) * p->max_frame_);
  p->pool_free_.reserve(p->tx_frame_nr_);
  for (uint32_t i = p->tx_frame_nr_; i-- > 0;) p->pool_free_.push_back(i);
  if (cfg.guard_udp_port) {
    std::string gerr;
    if (!p->guard_.open(&gerr)) {
      // Not fatal: RoCE still works, the kernel just answers with ICMP port unreachable.
      fprintf(stderr, "urxe: %s: cannot hold UDP port 4791 (%s); the kernel may answer RoCE with ICMP\n",
              cfg.ifname.c_str(), gerr.c_str());
    }
  }
  return p;
}

SocketPort::~SocketPort() {
  if (ring_) munmap(ring_, ring_bytes_);
  if (fd_ >= 0) close(fd_);
}

bool SocketPort::tx_alloc(uint32_t size, engine::PacketBuf& buf) {
  if (size > max_frame_ || pool_free_.empty()) return false;
  uint32_t i = pool_free_.back();
  pool_free_.pop_back();
  buf.data = pool_.data() + static_cast<size_t>(i) * max_frame_;
  buf.len = 0;
  buf.opaque = reinterpret_cast<void*>(static_cast<uintptr_t>(i) + 1);
  return true;
}

void SocketPort::tx_free(engine::PacketBuf& buf) {
  if (!buf.opaque) return;
  pool_free_.push_back(static_cast<uint32_t>(reinterpret_cast<uintptr_t>(buf.opaque) - 1));
  buf.opaque = nullptr;
  buf.data = nullptr;
}

uint32_t SocketPort::tx_burst(engine::PacketBuf* bufs, uint32_t n) {
  uint32_t done = 0;
  bool kick = false;
  for (; done < n; ++done) {
    engine::PacketBuf& b = bufs[done];
    uint32_t len = b.len <= max_frame_ ? b.len : max_frame_;
    if (is_to_mac(b.data, len, attr_.mac)) {
      if (!loop_.send(b.data, len)) break;  // socket buffer full: backpressure
      ++stats_.tx_loopback;
      tx_free(b);
      continue;
    }
    auto* h = reinterpret_cast<tpacket2_hdr*>(tx_slot(tx_head_));
    kick = true;
    if (status_load(h) != TP_STATUS_AVAILABLE) {
      ++stats_.tx_ring_full;
      break;
    }
    std::memcpy(reinterpret_cast<uint8_t*>(h) + kTxDataOffset, b.data, len);
    h->tp_len = len;
    status_store(h, TP_STATUS_SEND_REQUEST);
    tx_head_ = tx_head_ + 1 == tx_frame_nr_ ? 0 : tx_head_ + 1;
    tx_free(b);
  }
  stats_.tx_frames += done;
  // One syscall per burst; with MSG_DONTWAIT the kernel sends what is queued and returns. A full ring is
  // kicked too, so frames left queued by an interrupted kick cannot stall it.
  if (kick) {
    if (send(fd_, nullptr, 0, MSG_DONTWAIT) < 0 && errno != EAGAIN && errno != ENOBUFS)
      ++stats_.tx_kick_errors;
  }
  return done;
}

uint32_t SocketPort::rx_burst(engine::PacketBuf* bufs, uint32_t n) {
  uint32_t got = 0;
  while (got < n) {
    // A slot still held by the engine (not yet rx_free'd) after a full lap: the ring is full, stop.
    if (rx_held_[rx_head_]) break;
    auto* h = reinterpret_cast<tpacket2_hdr*>(rx_slot(rx_head_));
    uint32_t st = status_load(h);
    if (!(st & TP_STATUS_USER)) break;
    const uint32_t slot = rx_head_;
    rx_head_ = rx_head_ + 1 == rx_frame_nr_ ? 0 : rx_head_ + 1;
    if (h->tp_snaplen != h->tp_len || (st & TP_STATUS_COPY)) {  // larger than a slot: not deliverable whole
      __atomic_fetch_add(&stats_.rx_truncated, 1, __ATOMIC_RELAXED);  // read by rx_loss()
      status_store(h, TP_STATUS_KERNEL);
      continue;
    }
    uint8_t* data = reinterpret_cast<uint8_t*>(h) + h->tp_mac;
    uint32_t len = h->tp_snaplen;
    if ((st & TP_STATUS_VLAN_VALID) && h->tp_mac >= 4 + sizeof(tpacket2_hdr)) {
      // The kernel moved the 802.1Q tag to metadata; put it back so the engine sees the frame as sent.
      uint16_t tpid = (st & TP_STATUS_VLAN_TPID_VALID) ? h->tp_vlan_tpid : ETH_P_8021Q;
      std::memmove(data - 4, data, 12);
      data -= 4;
      wire::store_be16(data + 12, tpid);
      wire::store_be16(data + 14, h->tp_vlan_tci);
      len += 4;
    }
    rx_held_[slot] = 1;
    bufs[got++] = engine::PacketBuf{.data = data, .len = len, .opaque = h};
  }
  stats_.rx_frames += got;
  return got;
}

void SocketPort::rx_free(engine::PacketBuf* bufs, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) {
    if (bufs[i].opaque) {
      auto* h = static_cast<tpacket2_hdr*>(bufs[i].opaque);
      rx_held_[static_cast<size_t>(reinterpret_cast<uint8_t*>(h) - ring_) / frame_size_] = 0;
      status_store(h, TP_STATUS_KERNEL);
    }
    bufs[i].opaque = nullptr;
  }
}

bool SocketPort::set_rx_qpn_range(uint32_t first, uint32_t end) {
  return attach_roce_filter(fd_, info_.mac, kSnapAll, {first, end}, nullptr);
}

PortStats SocketPort::stats() {
  tpacket_stats st{};
  socklen_t len = sizeof st;
  std::lock_guard<std::mutex> g(stats_mu_);  // PACKET_STATISTICS resets on read: one reader at a time
  if (getsockopt(fd_, SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0) {
    stats_.kernel_rx_packets += st.tp_packets;
    stats_.kernel_rx_drops += st.tp_drops;
  }
  return stats_;  // the data path's counters as last written (a statistics snapshot)
}

engine::PortRxLoss SocketPort::rx_loss() {
  tpacket_stats st{};
  socklen_t len = sizeof st;
  std::lock_guard<std::mutex> g(stats_mu_);
  if (getsockopt(fd_, SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0) {
    stats_.kernel_rx_packets += st.tp_packets;
    stats_.kernel_rx_drops += st.tp_drops;
  }
  return {.ring_full = stats_.kernel_rx_drops,
          .no_buffer = 0,
          .errors = __atomic_load_n(&stats_.rx_truncated, __ATOMIC_RELAXED)};
}

}  // namespace urxe::dpdk
