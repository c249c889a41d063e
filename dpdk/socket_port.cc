#include "dpdk/socket_port.h"

#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <numeric>

#include "engine/engine.h"
#include "wire/gso.h"
#include "wire/opcode.h"
#include "wire/packet.h"

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

// The virtio-net header a packet socket with PACKET_VNET_HDR puts before each frame (linux/virtio_net.h,
// little-endian fields on the hosts urxe runs on). Debian 12's headers predate GSO_UDP_L4 (kernel 6.2).
struct VnetHdr {
  uint8_t flags;
  uint8_t gso_type;
  uint16_t hdr_len, gso_size, csum_start, csum_offset;
};
static_assert(sizeof(VnetHdr) == 10);
constexpr uint8_t kVnetNeedsCsum = 1;  // VIRTIO_NET_HDR_F_NEEDS_CSUM
constexpr uint8_t kVnetGsoUdpL4 = 5;   // VIRTIO_NET_HDR_GSO_UDP_L4
constexpr int kPacketVnetHdr = 15;     // PACKET_VNET_HDR
constexpr int kPacketCopyThresh = 7;   // PACKET_COPY_THRESH

// A GSO batch: at most this many frames and bytes (IPv4 total length is 16 bits).
constexpr uint32_t kGsoMaxSegs = 64, kGsoMaxBytes = 65000;
// Buffers for the frames split from received batches.
constexpr uint32_t kSegBufs = 256;

// Whether two frames with `hdr` bytes of headers are of one flow: equal in every header field the kernel
// copies from a GSO datagram's header into each segment (all but lengths, IPv4 ID and checksums).
bool same_flow(const uint8_t* a, const uint8_t* b, uint32_t hdr) {
  if (hdr == 42)  // MACs, type, version/IHL, TOS | flags/fragment, TTL, protocol | addresses, UDP ports
    return std::memcmp(a, b, 16) == 0 && std::memcmp(a + 20, b + 20, 4) == 0 &&
           std::memcmp(a + 26, b + 26, 12) == 0;
  // MACs, type, version/class/flow label | next header, hop limit, addresses, UDP ports
  return std::memcmp(a, b, 18) == 0 && std::memcmp(a + 20, b + 20, 38) == 0;
}

// The 16-bit big-endian words of p[0, n) summed (n even), unfolded.
uint32_t sum_words(const uint8_t* p, uint32_t n) {
  uint32_t s = 0;
  for (uint32_t i = 0; i < n; i += 2) s += wire::load_be16(p + i);
  return s;
}

std::string errno_msg(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

// Kernel-side filter: PACKET_HOST frames not from our own MAC (or PACKET_OUTGOING ones to our own MAC)
// carrying IPv4 (not a fragment) or IPv6 UDP to port 4791, to a destination QP in `qpns`. Everything else is
// dropped before it is queued. A frame to our own MAC reaches us as PACKET_OUTGOING (LoopbackSender) and also
// leaves on the wire; a switch port that reflects frames (hairpin, VEPA) brings that copy back as PACKET_HOST
// from our own MAC: dropped, or a UD receiver would take the message twice. With `multicast` (the process has
// a multicast group) also frames to a multicast MAC and DestQP 0xFFFFFF: from the wire (PACKET_MULTICAST,
// not from our own MAC, for the same reason) or sent by another socket on this interface (PACKET_OUTGOING:
// another process on the device, through its LoopbackSender).
std::vector<sock_filter> roce_filter(const wire::MacAddr& mac, uint32_t snaplen, QpnRange qpns,
                                     bool multicast) {
  auto J = [](uint16_t code, uint32_t k, uint32_t i, uint32_t t, uint32_t f) {
    return sock_filter{code, static_cast<uint8_t>(t - i - 1), static_cast<uint8_t>(f - i - 1), k};
  };
  auto S = [](uint16_t code, uint32_t k) { return sock_filter{code, 0, 0, k}; };
  const uint32_t mac03 =
      (uint32_t{mac[0]} << 24) | (uint32_t{mac[1]} << 16) | (uint32_t{mac[2]} << 8) | mac[3];
  const uint32_t mac45 = (uint32_t{mac[4]} << 8) | mac[5];
  enum : uint32_t {
    kSrc = 4,
    kDst = 8,
    kProto = 14,
    kV4 = 17,
    kV6 = 26,
    kQpn = 31,
    kAccept = 35,
    kDrop = 36
  };
  const uint32_t mc_src = multicast ? kSrc : kDrop;      // where a multicast frame from the wire goes
  const uint32_t mc_proto = multicast ? kProto : kDrop;  // and one another process sent
  const uint32_t mc_qpn = multicast ? kAccept : kQpn + 2;
  return {
      /*0*/ S(BPF_LD | BPF_W | BPF_ABS, static_cast<uint32_t>(SKF_AD_OFF + SKF_AD_PKTTYPE)),
      /*1*/ J(BPF_JMP | BPF_JEQ | BPF_K, PACKET_HOST, 1, kSrc, 2),
      /*2*/ J(BPF_JMP | BPF_JEQ | BPF_K, PACKET_OUTGOING, 2, kDst, 3),
      /*3*/ J(BPF_JMP | BPF_JEQ | BPF_K, PACKET_MULTICAST, 3, mc_src, kDrop),
      // PACKET_HOST (or MULTICAST): not from our own MAC (bytes 6..11)
      /*4*/ S(BPF_LD | BPF_W | BPF_ABS, 6),
      /*5*/ J(BPF_JMP | BPF_JEQ | BPF_K, mac03, 5, 6, kProto),
      /*6*/ S(BPF_LD | BPF_H | BPF_ABS, 10),
      /*7*/ J(BPF_JMP | BPF_JEQ | BPF_K, mac45, 7, kDrop, kProto),
      // PACKET_OUTGOING: to our own MAC (bytes 0..5), or to a group (its group bit)
      /*8*/ S(BPF_LD | BPF_W | BPF_ABS, 0),
      /*9*/ J(BPF_JMP | BPF_JEQ | BPF_K, mac03, 9, 10, 12),
      /*10*/ S(BPF_LD | BPF_H | BPF_ABS, 4),
      /*11*/ J(BPF_JMP | BPF_JEQ | BPF_K, mac45, 11, kProto, kDrop),
      /*12*/ S(BPF_LD | BPF_B | BPF_ABS, 0),
      /*13*/ J(BPF_JMP | BPF_JSET | BPF_K, 1, 13, mc_proto, kDrop),
      /*14*/ S(BPF_LD | BPF_H | BPF_ABS, 12),
      /*15*/ J(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IP, 15, kV4, 16),
      /*16*/ J(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IPV6, 16, kV6, kDrop),
      // IPv4: UDP, not a fragment, destination port 4791; then the BTH word holding the destination QP.
      /*17*/ S(BPF_LD | BPF_B | BPF_ABS, 23),
      /*18*/ J(BPF_JMP | BPF_JEQ | BPF_K, wire::kIpProtoUdp, 18, 19, kDrop),
      /*19*/ S(BPF_LD | BPF_H | BPF_ABS, 20),
      /*20*/ J(BPF_JMP | BPF_JSET | BPF_K, 0x3fff, 20, kDrop, 21),
      /*21*/ S(BPF_LDX | BPF_B | BPF_MSH, 14),
      /*22*/ S(BPF_LD | BPF_H | BPF_IND, 16),
      /*23*/ J(BPF_JMP | BPF_JEQ | BPF_K, wire::kRoceV2Port, 23, 24, kDrop),
      /*24*/ S(BPF_LD | BPF_W | BPF_IND, 14 + 8 + 4),
      /*25*/ S(BPF_JMP | BPF_JA, kQpn - 25 - 1),
      // IPv6 (no extension headers: RoCE uses none)
      /*26*/ S(BPF_LD | BPF_B | BPF_ABS, 20),
      /*27*/ J(BPF_JMP | BPF_JEQ | BPF_K, wire::kIpProtoUdp, 27, 28, kDrop),
      /*28*/ S(BPF_LD | BPF_H | BPF_ABS, 56),
      /*29*/ J(BPF_JMP | BPF_JEQ | BPF_K, wire::kRoceV2Port, 29, 30, kDrop),
      /*30*/ S(BPF_LD | BPF_W | BPF_ABS, 14 + 40 + 8 + 4),
      // Destination QP (low 24 bits of BTH bytes 4..7) in [first, end), or the multicast QP.
      /*31*/ S(BPF_ALU | BPF_AND | BPF_K, 0xffffff),
      /*32*/ J(BPF_JMP | BPF_JEQ | BPF_K, engine::kMulticastQpn, 32, mc_qpn, 33),
      /*33*/ J(BPF_JMP | BPF_JGE | BPF_K, qpns.first, 33, 34, kDrop),
      /*34*/ J(BPF_JMP | BPF_JGE | BPF_K, qpns.end, 34, kDrop, kAccept),
      /*35*/ S(BPF_RET | BPF_K, snaplen),
      /*36*/ S(BPF_RET | BPF_K, 0),
  };
}

bool attach(int fd, std::vector<sock_filter> f, std::string* err) {
  sock_fprog prog{static_cast<unsigned short>(f.size()), f.data()};
  if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) == 0) return true;
  if (err) *err = errno_msg("SO_ATTACH_FILTER");
  return false;
}

}  // namespace

bool attach_roce_filter(int fd, const wire::MacAddr& mac, uint32_t snaplen, QpnRange qpns, std::string* err,
                        bool multicast) {
  return attach(fd, roce_filter(mac, snaplen, qpns, multicast), err);
}

bool attach_drop_filter(int fd, std::string* err) {
  return attach(fd, {sock_filter{BPF_RET | BPF_K, 0, 0, 0}}, err);
}

bool set_packet_membership(int fd, int ifindex, const wire::MacAddr& mac, bool member) {
  packet_mreq mr{};
  mr.mr_ifindex = ifindex;
  mr.mr_type = PACKET_MR_MULTICAST;
  mr.mr_alen = 6;
  std::memcpy(mr.mr_address, mac.data(), 6);
  return setsockopt(fd, SOL_PACKET, member ? PACKET_ADD_MEMBERSHIP : PACKET_DROP_MEMBERSHIP, &mr,
                    sizeof mr) == 0;
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

GsoCut gso_cut(const std::string& ifname, int gso) {
  if (gso == 0) return GsoCut::off;
  if (hostnet::link_feature(ifname, "tx-udp-segmentation") == 0) return GsoCut::kernel;
  if (hostnet::link_driver(ifname) == "veth") return GsoCut::peer;
  return gso > 0 ? GsoCut::device : GsoCut::off;
}

// SocketPort::open's steps. Each failing step leaves what it took in the port's members: ~SocketPort
// releases it.

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

  if (!p->open_socket(err)) return nullptr;
  const GsoCut cut = p->vnet_ ? gso_cut(cfg.ifname, cfg.gso) : GsoCut::off;
  // Where the kernel cuts the batches, they and the ring's frames go through the qdisc layer alike: a frame
  // that bypassed it could overtake a batch waiting there.
  const bool bypass = cfg.qdisc_bypass && cut != GsoCut::kernel;
  int one = 1;
  if (bypass) setsockopt(p->fd_, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one);
  if (!p->map_rings(block_size, rx_blocks, tx_blocks, err)) return nullptr;
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(ETH_P_ALL);
  sll.sll_ifindex = p->info_.ifindex;
  if (bind(p->fd_, reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) {
    if (err) *err = errno_msg("bind(AF_PACKET)");
    return nullptr;
  }
  if (!p->loop_.open(p->info_.ifindex, err)) return nullptr;
  p->cut_ = cut;
  if (cut != GsoCut::off) p->open_gso_socket(sll, bypass);
  p->init_buffers();
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

// fd_: the packet socket with the RoCE filter, TPACKET_V2, the virtio-net header when the kernel has it
// (vnet_) and PACKET_LOSS; not yet bound, no rings.
bool SocketPort::open_socket(std::string* err) {
  // Protocol 0: nothing is queued until bind(), by which time the filter and rings are in place.
  fd_ = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0) {
    if (err) *err = errno_msg("socket(AF_PACKET) (needs CAP_NET_RAW)");
    return false;
  }
  if (!attach_roce_filter(fd_, info_.mac, kSnapAll, {}, err)) return false;
  int v = TPACKET_V2;
  if (setsockopt(fd_, SOL_PACKET, PACKET_VERSION, &v, sizeof v) != 0) {
    if (err) *err = errno_msg("PACKET_VERSION");
    return false;
  }
  int one = 1;
  // Every frame with a virtio-net header: received UDP GSO datagrams say their segment size in it (and
  // the ring frames carry one too, zero: no offload). With PACKET_COPY_THRESH a datagram larger than a
  // slot also waits whole in the socket's queue, in order with the ring (TP_STATUS_COPY).
  if (setsockopt(fd_, SOL_PACKET, kPacketVnetHdr, &one, sizeof one) == 0) {
    vnet_ = sizeof(VnetHdr);
    setsockopt(fd_, SOL_PACKET, kPacketCopyThresh, &one, sizeof one);
    int rcvbuf = 8 << 20;  // a few batches of 64 KiB queue there while the progress thread is away
    if (setsockopt(fd_, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) != 0)
      setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);  // capped at net.core.rmem_max
  }
  // Malformed tx frames are skipped instead of stalling the ring.
  setsockopt(fd_, SOL_PACKET, PACKET_LOSS, &one, sizeof one);
  return true;
}

// fd_'s rx and tx rings (frame_size_ slots, rx_frame_nr_ and tx_frame_nr_ of them), mapped at ring_.
bool SocketPort::map_rings(uint32_t block_size, uint32_t rx_blocks, uint32_t tx_blocks, std::string* err) {
  tpacket_req rx_req{block_size, rx_blocks, frame_size_, rx_frame_nr_};
  if (setsockopt(fd_, SOL_PACKET, PACKET_RX_RING, &rx_req, sizeof rx_req) != 0) {
    if (err) *err = errno_msg("PACKET_RX_RING");
    return false;
  }
  tpacket_req tx_req{block_size, tx_blocks, frame_size_, tx_frame_nr_};
  if (setsockopt(fd_, SOL_PACKET, PACKET_TX_RING, &tx_req, sizeof tx_req) != 0) {
    if (err) *err = errno_msg("PACKET_TX_RING");
    return false;
  }
  // One mapping: the rx ring, then the tx ring.
  rx_bytes_ = static_cast<size_t>(block_size) * rx_blocks;
  ring_bytes_ = rx_bytes_ + static_cast<size_t>(block_size) * tx_blocks;
  void* m = mmap(nullptr, ring_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_, 0);
  if (m == MAP_FAILED) {
    if (err) *err = errno_msg("mmap(packet ring)");
    return false;
  }
  ring_ = static_cast<uint8_t*>(m);
  return true;
}

// gso_fd_: batches are sent from a socket of their own (one with rings sends only from its tx ring); stays
// -1 (batches off) when it cannot be set up.
void SocketPort::open_gso_socket(const sockaddr_ll& sll, bool bypass) {
  int one = 1;
  gso_fd_ = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
  if (gso_fd_ >= 0 && (setsockopt(gso_fd_, SOL_PACKET, kPacketVnetHdr, &one, sizeof one) != 0 ||
                       bind(gso_fd_, reinterpret_cast<const sockaddr*>(&sll), sizeof sll) != 0)) {
    close(gso_fd_);
    gso_fd_ = -1;
  }
  if (gso_fd_ >= 0 && bypass) setsockopt(gso_fd_, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one);
}

// The tx frame pool, the rx slots' held marks and (with the virtio-net header) the split-segment buffers.
void SocketPort::init_buffers() {
  if (vnet_) {
    seg_pool_.resize(static_cast<size_t>(kSegBufs) * max_frame_);
    seg_free_.reserve(kSegBufs);
    for (uint32_t i = kSegBufs; i-- > 0;) seg_free_.push_back(i);
    seg_ready_.reserve(kSegBufs);
  }
  rx_held_.assign(rx_frame_nr_, 0);
  pool_.resize(static_cast<size_t>(tx_frame_nr_) * max_frame_);
  pool_free_.reserve(tx_frame_nr_);
  for (uint32_t i = tx_frame_nr_; i-- > 0;) pool_free_.push_back(i);
}

SocketPort::~SocketPort() {
  if (ring_) munmap(ring_, ring_bytes_);
  if (fd_ >= 0) close(fd_);
  if (gso_fd_ >= 0) close(gso_fd_);
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

// How many frames from bufs[0] make one GSO batch: one flow (same_flow), each as long as the first but the
// last, which may be shorter, within kGsoMaxSegs/kGsoMaxBytes. 1 when bufs[0] cannot start one. A frame a
// fault rule made or changed goes on its own: a batch gives its frames new IPv4 IDs and ICRCs, which would
// repair a corrupted ICRC.
uint32_t SocketPort::gso_run(const engine::PacketBuf* bufs, uint32_t n) const {
  const engine::PacketBuf& b = bufs[0];
  if (n < 2 || b.gather || b.fault_rule || b.len > max_frame_) return 1;
  const uint32_t hdr = wire::gso_headers_len(b.data, b.len);
  if (hdr == 0 || b.len <= hdr) return 1;
  const uint32_t seg = b.len - hdr;
  const uint32_t most = std::min(kGsoMaxSegs, (kGsoMaxBytes - hdr) / seg);
  uint32_t k = 1;
  while (k < n && k < most) {
    const engine::PacketBuf& c = bufs[k];
    if (c.gather || c.fault_rule || c.len > b.len || c.len <= hdr || !same_flow(b.data, c.data, hdr)) break;
    ++k;
    if (c.len < b.len) break;
  }
  return k;
}

// Sends bufs[0, k) as one UDP GSO datagram: their headers once, then each frame's UDP payload. The kernel
// (or a NIC) cuts it at the first frame's length and gives segment i the first's headers with IPv4 ID
// first + i, so each frame is given that ID and its ICRC first. 1 = sent, 0 = no room now (EAGAIN),
// -1 = not sent (the frames, with their new IDs, are whole and go out one by one instead).
int SocketPort::send_gso(engine::PacketBuf* bufs, uint32_t k) {
  const uint8_t* f0 = bufs[0].data;
  const uint32_t hdr = wire::gso_headers_len(f0, bufs[0].len);
  uint32_t payload = 0;
  const uint16_t id0 = hdr == 42 ? wire::load_be16(f0 + 18) : 0;
  iovec iov[2 + kGsoMaxSegs];
  for (uint32_t i = 0; i < k; ++i) {
    engine::PacketBuf& b = bufs[i];
    if (hdr == 42 && i > 0) {
      wire::set_gso_segment_headers(b.data, hdr, b.len - hdr, id0, i, true);  // (the engine's frame)
      b.icrc_absent = true;                                                   // its ICRC covers the ID
    }
    if (b.icrc_absent) {
      wire::write_icrc(wire::MutByteSpan(b.data, b.len));
      b.icrc_absent = false;
    }
    iov[2 + i] = {b.data + hdr, b.len - hdr};
    payload += b.len - hdr;
  }
  uint8_t head[64];
  std::memcpy(head, f0, hdr);
  wire::set_gso_segment_headers(head, hdr, payload, id0, 0, true);
  // CHECKSUM_PARTIAL: the UDP checksum field holds the pseudo-header sum, the kernel completes each
  // segment's (a UDP checksum is allowed on RoCEv2; the ICRC does not cover it).
  uint32_t sum =
      sum_words(hdr == 42 ? head + 26 : head + 22, hdr == 42 ? 8 : 32) + wire::kIpProtoUdp + 8 + payload;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  wire::store_be16(head + hdr - 2, static_cast<uint16_t>(sum));
  VnetHdr vh{kVnetNeedsCsum,
             kVnetGsoUdpL4,
             static_cast<uint16_t>(hdr),
             static_cast<uint16_t>(bufs[0].len - hdr),
             static_cast<uint16_t>(hdr - 8),
             6};
  iov[0] = {&vh, sizeof vh};
  iov[1] = {head, hdr};
  msghdr m{};
  m.msg_iov = iov;
  m.msg_iovlen = 2 + k;
  if (sendmsg(gso_fd_, &m, MSG_DONTWAIT) >= 0) {
    gso_refused_ = 0;
    return 1;
  }
  if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
  // ENOBUFS: the interface lost its UDP segmentation offload since the port opened (the kernel would have
  // to cut the datagram in software, which qdisc bypass does not do), or it dropped it. Refused three times
  // running: batches off for good.
  // Other errors (ENETDOWN while the link is down) are the ring's too.
  if ((errno == ENOBUFS || errno == EINVAL || errno == EOPNOTSUPP || errno == EMSGSIZE) &&
      ++gso_refused_ >= 3) {
    close(gso_fd_);
    gso_fd_ = -1;
  }
  return -1;
}

uint32_t SocketPort::tx_burst(engine::PacketBuf* bufs, uint32_t n) {
  uint32_t done = 0;
  bool kick = false;
  while (done < n) {
    engine::PacketBuf& b = bufs[done];
    uint32_t len = b.len <= max_frame_ ? b.len : max_frame_;
    // To our MAC, or to a group: through the qdisc layer, where the kernel shows it to the other packet
    // sockets on the interface (other processes on this device) as well as sending it.
    if (is_to_mac(b.data, len, attr_.mac) || is_multicast(b.data, len)) {
      if (b.icrc_absent) {
        wire::write_icrc(wire::MutByteSpan(b.data, b.len));
        b.icrc_absent = false;
      }
      if (!loop_.send(b.data, len)) break;  // socket buffer full: backpressure
      ++stats_.tx_loopback;
      tx_free(b);
      ++done;
      continue;
    }
    if (gso_fd_ >= 0) {
      const uint32_t k = gso_run(bufs + done, n - done);
      if (k > 1) {
        if (kick) {  // what the ring holds goes first
          if (send(fd_, nullptr, 0, MSG_DONTWAIT) < 0 && errno != EAGAIN && errno != ENOBUFS)
            ++stats_.tx_kick_errors;
          kick = false;
        }
        const int r = send_gso(bufs + done, k);  // (writes the run's ICRCs)
        if (r == 0) break;
        if (r > 0) {
          for (uint32_t i = 0; i < k; ++i) tx_free(bufs[done + i]);
          done += k;
          ++stats_.tx_gso_batches;
          stats_.tx_gso_frames += k;
          continue;
        }
      }
    }
    if (b.icrc_absent) {
      wire::write_icrc(wire::MutByteSpan(b.data, b.len));
      b.icrc_absent = false;
    }
    auto* h = reinterpret_cast<tpacket2_hdr*>(tx_slot(tx_head_));
    kick = true;
    if (status_load(h) != TP_STATUS_AVAILABLE) {
      ++stats_.tx_ring_full;
      break;
    }
    uint8_t* out = reinterpret_cast<uint8_t*>(h) + kTxDataOffset;
    std::memset(out, 0, vnet_);  // no offload asked
    std::memcpy(out + vnet_, b.data, len);
    h->tp_len = vnet_ + len;
    status_store(h, TP_STATUS_SEND_REQUEST);
    tx_head_ = tx_head_ + 1 == tx_frame_nr_ ? 0 : tx_head_ + 1;
    tx_free(b);
    ++done;
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

// A slot marked TP_STATUS_COPY: the frame was larger than a slot, and a whole copy of it waits in the
// socket's queue (one per such slot, in the same order). A UDP GSO datagram (another urxe's batch, or any
// sender's UDP GSO) is read from there straight into frame buffers, a segment each, and every segment gets
// the headers the kernel would have given it: lengths, IPv4 ID first + i, header checksum, UDP checksum 0.
SocketPort::Split SocketPort::split_gso(tpacket2_hdr* h, uint32_t status) {
  const uint8_t* f = reinterpret_cast<const uint8_t*>(h) + h->tp_mac;
  VnetHdr vh{};
  std::memcpy(&vh, f - sizeof vh, sizeof vh);
  const uint32_t hdr = wire::gso_headers_len(f, h->tp_snaplen);
  const uint32_t total = h->tp_len;
  const uint32_t seg = vh.gso_size;
  uint32_t nseg = 0;
  if ((vh.gso_type & 0x7f) == kVnetGsoUdpL4 && hdr && seg && total > hdr && hdr + seg <= max_frame_ &&
      !(status & TP_STATUS_VLAN_VALID))
    nseg = (total - hdr + seg - 1) / seg;
  if (nseg > seg_free_.size()) {
    if (nseg <= kSegBufs) return Split::no_buffers;  // the engine returns some first
    nseg = 0;
  }
  if (!(status & TP_STATUS_COPY)) {  // the whole datagram is in the slot
    if (nseg == 0 || h->tp_snaplen != total) {
      __atomic_fetch_add(&stats_.rx_gso_dropped, 1, __ATOMIC_RELAXED);  // read by rx_loss()
      return Split::done;
    }
    for (uint32_t i = 0; i < nseg; ++i) {
      const uint32_t len = i + 1 < nseg ? seg : total - hdr - i * seg;
      std::memcpy(seg_buf(seg_free_[seg_free_.size() - 1 - i]) + hdr, f + hdr + i * seg, len);
    }
  } else if (!read_copy(f, h->tp_snaplen, nseg, hdr, seg, total)) {
    __atomic_fetch_add(&stats_.rx_gso_dropped, 1, __ATOMIC_RELAXED);
    return Split::done;
  }
  for (uint32_t i = 0; i < nseg; ++i) {
    const uint32_t b = seg_free_.back();
    seg_free_.pop_back();
    const uint32_t len = i + 1 < nseg ? seg : total - hdr - i * seg;
    wire::copy_gso_segment_headers(seg_buf(b), f, hdr, len, i);
    seg_ready_.push_back({b, hdr + len});
  }
  ++stats_.rx_gso_batches;
  stats_.rx_gso_frames += nseg;
  return Split::done;
}

// Reads the whole copy of a TP_STATUS_COPY slot (`f`, `snap` bytes of it there) from the socket's queue:
// its virtio header and headers to a scratch buffer, segment i into the i-th free segment buffer from the
// back, after room for its headers. nseg 0: read and discard. True when all of it came and it is the
// slot's datagram. The queue must stay in step with the ring's copy slots: a socket error (ENETDOWN when
// the interface went down) is reported by a read that returns no datagram, so the read is retried; a
// datagram that is not the slot's (its length, headers or first BTH differ) means the queue got out of
// step, and it is emptied (the slots still waiting then find no copy and are dropped, as a lossy link
// would: RC resends).
bool SocketPort::read_copy(const uint8_t* f, uint32_t snap, uint32_t nseg, uint32_t hdr, uint32_t seg,
                           uint32_t total) {
  uint8_t skip[sizeof(VnetHdr) + 64];
  iovec iov[2 + kSegBufs];
  uint32_t niov = 0;
  if (nseg) {
    iov[niov++] = {skip, sizeof(VnetHdr) + hdr};
    for (uint32_t i = 0; i < nseg; ++i)
      iov[niov++] = {seg_buf(seg_free_[seg_free_.size() - 1 - i]) + hdr, seg};
  } else {
    iov[niov++] = {skip, sizeof skip};
  }
  msghdr m{};
  m.msg_iov = iov;
  m.msg_iovlen = niov;
  ssize_t r = -1;
  for (int tries = 0; tries < 4 && r < 0; ++tries) {
    r = recvmsg(fd_, &m, MSG_DONTWAIT | MSG_TRUNC);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;  // no copy came
  }
  if (r < 0 || nseg == 0) return false;
  const uint8_t* seg0 = static_cast<const uint8_t*>(iov[1].iov_base);
  const uint32_t bth = std::min<uint32_t>(std::min(seg, wire::kBthLen), snap > hdr ? snap - hdr : 0);
  if (r == static_cast<ssize_t>(sizeof(VnetHdr) + total) &&
      std::memcmp(skip + sizeof(VnetHdr), f, hdr) == 0 && std::memcmp(seg0, f + hdr, bth) == 0)
    return true;
  ++stats_.rx_gso_resync;
  for (int i = 0; i < 4096 && recv(fd_, skip, sizeof skip, MSG_DONTWAIT | MSG_TRUNC) >= 0; ++i) {
  }
  return false;
}

uint32_t SocketPort::rx_burst(engine::PacketBuf* bufs, uint32_t n) {
  uint32_t got = 0;
  while (got < n) {
    if (seg_next_ <
        seg_ready_.size()) {  // the rest of a split datagram first: it came before the ring's next
      const auto [b, len] = seg_ready_[seg_next_++];
      if (seg_next_ == seg_ready_.size()) {
        seg_ready_.clear();
        seg_next_ = 0;
      }
      bufs[got++] = engine::PacketBuf{.data = seg_buf(b), .len = len, .opaque = seg_buf(b)};
      continue;
    }
    // A slot still held by the engine (not yet rx_free'd) after a full lap: the ring is full, stop.
    if (rx_held_[rx_head_]) break;
    auto* h = reinterpret_cast<tpacket2_hdr*>(rx_slot(rx_head_));
    uint32_t st = status_load(h);
    if (!(st & TP_STATUS_USER)) break;
    const uint32_t slot = rx_head_;
    uint8_t* data = reinterpret_cast<uint8_t*>(h) + h->tp_mac;
    VnetHdr vh{};  // (read once: its GSO type and checksum flags)
    if (vnet_) std::memcpy(&vh, data - sizeof vh, sizeof vh);
    // A UDP GSO datagram (in the slot, or larger than one and then whole in the socket's queue).
    if ((st & TP_STATUS_COPY) || vh.gso_type != 0) {
      if (split_gso(h, st) == Split::no_buffers) break;
      rx_head_ = rx_head_ + 1 == rx_frame_nr_ ? 0 : rx_head_ + 1;
      status_store(h, TP_STATUS_KERNEL);
      continue;
    }
    rx_head_ = rx_head_ + 1 == rx_frame_nr_ ? 0 : rx_head_ + 1;
    if (h->tp_snaplen != h->tp_len) {  // larger than a slot, and no copy: not deliverable whole
      __atomic_fetch_add(&stats_.rx_truncated, 1, __ATOMIC_RELAXED);  // read by rx_loss()
      status_store(h, TP_STATUS_KERNEL);
      continue;
    }
    uint32_t len = h->tp_snaplen;
    // A frame from this host whose UDP checksum the kernel left to an offload that never ran (a segment the
    // kernel cut from a datagram sent over a veth: the field holds only the pseudo-header's sum, and the
    // kernel vouches for the data): made 0, no checksum, as a segment split here gets. (csum_start counts
    // from the frame as the slot holds it, before a VLAN tag goes back in below, which moves only the MAC
    // addresses.)
    uint8_t* csum_field = nullptr;
    if (vh.flags & kVnetNeedsCsum) {
      const uint32_t at = uint32_t{vh.csum_start} + vh.csum_offset;
      if (at >= wire::kEthLen && at + 2 <= len) csum_field = data + at;
    }
    if ((st & TP_STATUS_VLAN_VALID) && h->tp_mac >= 4 + sizeof(tpacket2_hdr)) {
      // The kernel moved the 802.1Q tag to metadata; put it back so the engine sees the frame as sent.
      uint16_t tpid = (st & TP_STATUS_VLAN_TPID_VALID) ? h->tp_vlan_tpid : ETH_P_8021Q;
      std::memmove(data - 4, data, 12);
      data -= 4;
      wire::store_be16(data + 12, tpid);
      wire::store_be16(data + 14, h->tp_vlan_tci);
      len += 4;
    }
    if (csum_field) wire::store_be16(csum_field, 0);
    rx_held_[slot] = 1;
    bufs[got++] = engine::PacketBuf{.data = data, .len = len, .opaque = h};
  }
  stats_.rx_frames += got;
  return got;
}

void SocketPort::rx_free(engine::PacketBuf* bufs, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) {
    if (auto* o = static_cast<uint8_t*>(bufs[i].opaque)) {
      if (o >= ring_ && o < ring_ + rx_bytes_) {
        rx_held_[static_cast<size_t>(o - ring_) / frame_size_] = 0;
        status_store(reinterpret_cast<tpacket2_hdr*>(o), TP_STATUS_KERNEL);
      } else {  // a frame split from a GSO datagram
        seg_free_.push_back(static_cast<uint32_t>(static_cast<size_t>(o - seg_pool_.data()) / max_frame_));
      }
    }
    bufs[i].opaque = nullptr;
  }
}

bool SocketPort::set_rx_qpn_range(uint32_t first, uint32_t end) {
  qpns_ = {first, end};
  return attach_roce_filter(fd_, info_.mac, kSnapAll, qpns_, nullptr, !mc_macs_.empty());
}

bool SocketPort::set_multicast_mac(const wire::MacAddr& mac, bool member) {
  if (member) {
    if (!set_packet_membership(fd_, info_.ifindex, mac, true)) return false;
    mc_macs_.push_back(mac);
    if (mc_macs_.size() == 1 && !attach_roce_filter(fd_, info_.mac, kSnapAll, qpns_, nullptr, true)) {
      set_packet_membership(fd_, info_.ifindex, mac, false);
      mc_macs_.clear();
      return false;
    }
    return true;
  }
  set_packet_membership(fd_, info_.ifindex, mac, false);
  std::erase(mc_macs_, mac);
  if (mc_macs_.empty()) attach_roce_filter(fd_, info_.mac, kSnapAll, qpns_, nullptr, false);
  return true;
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
          .errors = __atomic_load_n(&stats_.rx_truncated, __ATOMIC_RELAXED) +
                    __atomic_load_n(&stats_.rx_gso_dropped, __ATOMIC_RELAXED)};
}

}  // namespace urxe::dpdk
