// The engine's only contact with the outside: a Port moves Ethernet frames, a Clock tells the time. A real
// port (dpdk/) and a simulated one (tests/) implement the same interface, so every transport behaviour runs
// deterministically in virtual time.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "wire/headers.h"

namespace urxe::engine {

// A frame buffer owned by the port (an mbuf, a sim slot). `opaque` is the port's handle.
struct PacketBuf {
  uint8_t* data = nullptr;
  uint32_t len = 0;  // frame length (rx: as received; tx: set by the engine before tx_burst)
  // tx: where the BTH starts in a frame the engine built (a port that routes by QPN reads it there instead
  // of parsing the headers again); 0: unknown, parse.
  uint32_t bth_offset = 0;
  // tx: the engine left the ICRC out (the port said it fills it: Port::tx_icrc_offload); whatever puts the
  // frame on a wire or in a capture writes it first (wire::write_icrc). rx: the frame came without one over
  // a hop that cannot corrupt it (shared memory between two urxe processes): not checked.
  bool icrc_absent = false;
  // tx, only to a port whose tx_gather() is true: the frame's bytes [gather_offset, gather_offset +
  // gather_len) are not in `data` (that room is left unwritten) but at `gather`, the application's memory
  // (a payload straight from its memory region). Valid while the engine's round runs: a frame the port does
  // not take is made whole (make_whole) before the round ends. nullptr: the whole frame is in `data`.
  uint16_t gather_offset = 0;
  uint16_t gather_len = 0;
  const uint8_t* gather = nullptr;
  // A batch frame of this many packets (wire::batch_packet: a run of one message's middle packets under the
  // first one's headers), only to and from a port whose tx_batch_bytes() is not 0; 0: one packet.
  uint8_t batch = 0;
  // Set by a FaultPort (engine/fault_port.h) on the frames a fault rule made or changed: the copies of a
  // duplicated frame, delayed and reordered frames, mutated frames: the rule's id and its action
  // (wire::FaultAction). 0 otherwise: a FaultPort with rules or held frames zeroes them on every other
  // frame it passes; other ports leave them as they find them (0 in a PacketBuf made for the call).
  uint32_t fault_rule = 0;
  uint8_t fault_action = 0;
  void* opaque = nullptr;
};

// Copies a gathered payload into its room in `data` (a no-op for a whole frame).
inline void make_whole(PacketBuf& b) {
  if (!b.gather) return;
  std::memcpy(b.data + b.gather_offset, b.gather, b.gather_len);
  b.gather = nullptr;
}

struct PortAttr {
  wire::MacAddr mac{};
  uint32_t mtu = 1500;  // Ethernet (IP) MTU of the link; the RoCE path MTU is the largest 256..4096 that fits
                        // mtu - (IP + UDP + BTH + ext + ICRC) overhead, as rxe does.
  std::vector<wire::Gid> gids;  // GID table, index = sgid_index
  uint32_t rx_ring_frames = 0;  // frames the receive ring holds (0: unknown); the receiver marks past 3/4
};

// Frames a port lost before rx_burst could return them, cumulative since it opened.
struct PortRxLoss {
  uint64_t ring_full = 0;  // its receive ring was full: not drained in time (packet socket tp_drops, imissed)
  uint64_t no_buffer = 0;  // no buffer for a received frame (DPDK rx_nombuf)
  uint64_t errors = 0;     // received but not whole (DPDK ierrors, truncated or multi-segment frames, a
                           // GSO datagram that could not be split)
};

class Port {
 public:
  virtual ~Port() = default;
  virtual const PortAttr& attr() const = 0;
  // A buffer of at least `size` bytes for an outgoing frame; false when the port has none (backpressure).
  virtual bool tx_alloc(uint32_t size, PacketBuf& buf) = 0;
  // Hands frames to the port. Returns how many it took (from the front); the rest stay the caller's.
  virtual uint32_t tx_burst(PacketBuf* bufs, uint32_t n) = 0;
  virtual void tx_free(PacketBuf& buf) = 0;
  // Received frames; each must be returned with rx_free once processed.
  virtual uint32_t rx_burst(PacketBuf* bufs, uint32_t n) = 0;
  virtual void rx_free(PacketBuf* bufs, uint32_t n) = 0;

  // Idle sleep for a progress thread: when rx_burst keeps returning 0, call rx_wait_arm(true), try rx_burst
  // once more (a frame may have come in before arming), then poll(rx_wait_fd(), POLLIN, timeout); after
  // waking call rx_wait_arm(false) and go back to rx_burst. Wakeups may be spurious. rx_wait_fd() == -1
  // means the port has nothing to sleep on: sleep briefly (tens of microseconds) instead.
  virtual int rx_wait_fd() const { return -1; }
  virtual void rx_wait_arm(bool /*armed*/) {}
  // After rx_wait_arm(false): when the event that ended the wait happened (CLOCK_MONOTONIC ns), if the port
  // knows; 0 if it does not or nothing did. A progress thread's idle spin learns from it how soon work came
  // after it slept, which its own wake-up time overstates by the wake-up's latency.
  virtual uint64_t rx_wait_event_ns() const { return 0; }
  // Whether the port fills the ICRC of the frames it is given with icrc_absent set (a NIC's ICRC offload):
  // the engine then leaves it out. Asked once, when the engine is made.
  virtual bool tx_icrc_offload() const { return false; }
  // Whether the port takes frames whose payload is elsewhere (PacketBuf::gather) and copies it from there
  // itself (the same-host path: into the peer's ring, one copy less). Only asked of a port with
  // tx_icrc_offload: the engine computes no ICRC over a payload it did not copy. Asked once.
  // Payloads below kGatherMin are copied still: there the port's extra copy call costs more than it saves.
  virtual bool tx_gather() const { return false; }
  static constexpr uint32_t kGatherMin = 512;
  // The most payload a batch frame (PacketBuf::batch) to this port may carry; 0: the port takes none. Only
  // asked of a port with tx_gather, once. Such a port cuts a batch into its packets wherever it cannot
  // pass it on whole (wire::batch_packet), and may hand batches out of rx_burst. tx_alloc gives a batch
  // frame's size.
  virtual uint32_t tx_batch_bytes() const { return 0; }
  // The same for frames to one destination now (the requester asks at the start of a message that could
  // hold a batch): 0 where batches would only be cut again (a peer reached through the real port). An
  // answer that is stale by the time the frames go costs a cut, never a wrong frame.
  virtual uint32_t tx_batch_bytes_to(const uint8_t* /*dst_mac*/, uint32_t /*dqpn*/) {
    return tx_batch_bytes();
  }
  static constexpr uint32_t kMaxBatch = 32;  // packets in one batch frame at most

  // This process owns destination QPNs [first, end) only (the provider's urxe.qpn blocks): a port with a
  // receive filter then drops other processes' frames on the same device before they cost a wakeup. False
  // when the filter could not be set; a port without one takes every QPN and returns true.
  virtual bool set_rx_qpn_range(uint32_t /*first*/, uint32_t /*end*/) { return true; }

  // UD multicast: the port passes frames to the multicast Ethernet address `mac` (and to DestQP
  // 0xFFFFFF) from now on (`member`), or no longer; the engine asks at a MAC's first group and after its
  // last. A port that passes everything returns true; false when the filter could not be changed.
  virtual bool set_multicast_mac(const wire::MacAddr& /*mac*/, bool /*member*/) { return true; }

  // What the port lost on receive (see PortRxLoss). May make a system call: for a statistics thread, never
  // the per-packet path. Safe to call while another thread moves frames.
  virtual PortRxLoss rx_loss() { return {}; }
};

class Clock {
 public:
  virtual ~Clock() = default;
  virtual uint64_t now_ns() const = 0;
};

}  // namespace urxe::engine
