// The same-host path: a Port that wraps a device's real port and carries the frames it sends to another urxe
// device of the same run directory (another process of the same device, or a device in another network
// namespace of this host) through shared-memory rings (local_ring.h) instead of the kernel, which costs a
// packet-socket send, a pass through the interface's qdisc and a wake-up per frame. A frame goes that way
// when its destination MAC is a device that publishes rings here and its destination QPN falls in a block
// with a ring; everything else (a remote peer, QP1's CM MADs, a block without a ring: a process without
// the path or one that just left) goes to the real port as before. The frames are the same complete RoCEv2
// frames: a capture wrapped around this port records them, the engine counts them.
//
// Layout: DIR/<MAC>/bBLOCK.{seg,wake} (DIR: the run directory's local/, MAC: 12 hex digits), one ring per
// context. A context attaches to a peer's ring the first time it sends to that block (again at most every
// 100 ms while there is none, or when the peer's file was replaced). A peer that stays full for 100 ms and
// whose owner is gone is dropped, so that a dead process cannot hold up the sender's other traffic.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dpdk/local_ring.h"
#include "engine/port.h"

namespace urxe::dpdk {

struct LocalPathConfig {
  std::string dir;              // shared by every device of the run directory; created if missing
  uint32_t block = 0;           // this context's QPN block
  uint32_t qpn_base0 = 0x11;    // QPN of block 0's first QP
  uint32_t block_size = 65536;  // QPNs per block
  uint32_t blocks = 255;        // blocks a device has (the rest of the QPN space is not routed locally)
};

struct LocalPathStats {
  uint64_t tx_local = 0;         // frames pushed into a peer's (or our own) ring
  uint64_t rx_local = 0;         // frames taken from our ring
  uint64_t tx_dropped_dead = 0;  // frames for a peer found gone while its ring was full
  uint64_t tx_batches = 0;       // batch frames pushed into a ring (counted in tx_local too)
  uint64_t tx_batch_cut = 0;     // batch frames cut into their packets for the real port
};

class LocalPathPort final : public engine::Port {
 public:
  // nullptr with `err` when the ring cannot be published (the caller then uses `inner` as it is).
  static std::unique_ptr<LocalPathPort> open(std::unique_ptr<engine::Port>& inner, const LocalPathConfig& cfg,
                                             std::string& err);
  ~LocalPathPort() override;

  const engine::PortAttr& attr() const override { return inner_->attr(); }
  bool tx_alloc(uint32_t size, engine::PacketBuf& buf) override;
  uint32_t tx_burst(engine::PacketBuf* bufs, uint32_t n) override;
  void tx_free(engine::PacketBuf& buf) override;
  uint32_t rx_burst(engine::PacketBuf* bufs, uint32_t n) override;
  void rx_free(engine::PacketBuf* bufs, uint32_t n) override;
  int rx_wait_fd() const override { return epoll_fd_; }
  void rx_wait_arm(bool armed) override;
  uint64_t rx_wait_event_ns() const override {
    const uint64_t t = rx_.last_kick_ns();
    return t ? t : inner_->rx_wait_event_ns();
  }
  bool set_multicast_mac(const wire::MacAddr& mac, bool member) override {
    return inner_->set_multicast_mac(mac, member);
  }
  bool set_rx_qpn_range(uint32_t first, uint32_t end) override {
    return inner_->set_rx_qpn_range(first, end);
  }
  engine::PortRxLoss rx_loss() override { return inner_->rx_loss(); }
  // Frames cross the rings without their ICRC (a memory-to-memory hop cannot corrupt them, and the ICRC was
  // a third of what a 64 KiB stream between two processes cost); the ones that go to the real port get it
  // here (send_inner).
  bool tx_icrc_offload() const override { return true; }
  bool tx_gather() const override { return true; }  // (copied into the peer's ring, or made whole)
  // A run of a message's middle packets crosses a ring as one batch frame (one slot, one pass of each
  // side's per-frame work) and is cut into its packets wherever it goes to the real port instead.
  uint32_t tx_batch_bytes() const override { return batch_bytes_; }
  uint32_t tx_batch_bytes_to(const uint8_t* dst_mac, uint32_t dqpn) override;
  // At least this much payload in a batch; more where the device's MTU makes the slots larger anyway.
  static constexpr uint32_t kMinBatchBytes = 8192, kBatchHeadroom = 256;

  const LocalPathStats& stats() const { return stats_; }
  engine::Port& inner() { return *inner_; }

 private:
  LocalPathPort() = default;
  struct Peer;
  struct Dest;
  Dest* dest_for(const uint8_t* mac, uint64_t now);
  Peer* peer_for(const engine::PacketBuf& buf, uint64_t now);
  Peer* peer_to(const uint8_t* mac, uint32_t dqpn, uint64_t now);
  Peer* last_peer_for(const engine::PacketBuf& buf, uint64_t now) const;
  uint32_t send_inner(engine::PacketBuf* bufs, uint32_t n);
  bool send_cut(engine::PacketBuf& batch);
  bool big_buf(const uint8_t* data) const {
    return data >= big_pool_.data() && data < big_pool_.data() + big_pool_.size();
  }

  std::unique_ptr<engine::Port> inner_;
  bool inner_icrc_ = false;  // inner_->tx_icrc_offload(): frames go to it without their ICRC
  LocalPathConfig cfg_;
  LocalReceiver rx_;
  static constexpr uint32_t kMaxDests = 16;   // destination MACs remembered (local or not)
  std::vector<std::unique_ptr<Dest>> dests_;  // kMaxDests, made at open
  uint32_t next_victim_ = 0;                  // the Dest a new MAC replaces when all are taken
  std::vector<Peer*> kicked_;                 // peers pushed to in this burst
  Peer* last_peer_ = nullptr;                 // peer_for's last answer, for this MAC and QPN block
  std::array<uint8_t, 6> last_mac_{};
  uint32_t last_qpn_lo_ = 0, last_qpn_end_ = 0;
  uint64_t owner_id_ = 0;
  int epoll_fd_ = -1;
  uint64_t last_reap_ns_ = 0;
  LocalPathStats stats_;
  // Frame buffers for batch frames, larger than the real port's (tx_alloc of more than it gives).
  static constexpr uint32_t kBigBufs = 32;
  uint32_t batch_bytes_ = 0, big_buf_bytes_ = 0;  // a batch's payload at most; a buffer: that + headroom
  std::vector<uint8_t> big_pool_;
  std::vector<uint32_t> big_free_;
};

// The directory of a device's rings: DIR/<MAC as 12 hex digits>.
std::string local_mac_dir(const std::string& dir, const uint8_t* mac);

// The id a context writes into its ring and lanes: its pid and block, so a lane or ring left behind by a
// process that died is recognised (local_owner_alive).
uint64_t local_owner_id(uint32_t block);
bool local_owner_alive(uint64_t id);

}  // namespace urxe::dpdk
