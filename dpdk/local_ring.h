// Shared-memory frame rings between urxe processes on one host: the building block of the same-host path, on
// which two urxe contexts whose frames could reach each other exchange them without the kernel.
//
// Each receiving context publishes one segment, a file in a directory all its peers can open (the device's
// run directory): a header and `lanes` single-producer/single-consumer rings of `slots` frame slots. A
// sender claims a free lane (compare-and-swap of its owner id) and then owns it alone, so a push is a copy
// and a release store, no lock; a sender that dies leaves only its own lane behind, which the receiver
// reclaims once the lane is drained and its owner is gone (it cannot block other senders, as a dead
// producer of a shared multi-producer ring would). The receiver polls the claimed lanes and hands out
// pointers into the slots, returned in order.
//
// Sleep: a receiver about to sleep sets `sleeping` and then checks its lanes once more; a sender that pushed
// reads `sleeping` after a full fence and, when set, sends a byte to the segment's wake socket (name +
// ".wake", a unix datagram socket: a FIFO would SIGPIPE a sender whose receiver died), which the receiver
// polls beside its other descriptors. So a busy receiver costs its senders no syscall.
//
// Files: NAME.seg (the mapped segment, published by rename once initialised) and NAME.wake (the socket), both
// mode 0600, removed by the receiver when it closes; a crashed receiver's files are recognised by their
// owner's liveness (the caller's check) and removed by whoever finds them.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "engine/port.h"

namespace urxe::dpdk {

struct LocalRingParams {
  uint32_t lanes = 8;          // senders at once
  uint32_t slots = 128;        // frames per lane (a power of 2)
  uint32_t slot_bytes = 2048;  // the largest frame (Ethernet header to ICRC)
};

// The receiving side of a segment (one per context).
class LocalReceiver {
 public:
  LocalReceiver() = default;
  ~LocalReceiver();
  LocalReceiver(const LocalReceiver&) = delete;
  LocalReceiver& operator=(const LocalReceiver&) = delete;

  // Creates DIR/NAME.seg and DIR/NAME.wake (replacing stale ones); owner_id is written into the header
  // (for the liveness check of whoever finds the files). False with `err` set on failure.
  bool create(const std::string& dir, const std::string& name, uint64_t owner_id, const LocalRingParams& p,
              std::string& err);
  // Up to n frames, oldest first per lane, lanes in turn; each points into its slot until rx_free.
  uint32_t rx_burst(engine::PacketBuf* bufs, uint32_t n);
  // Returns frames rx_burst handed out, in the order it handed them out.
  void rx_free(engine::PacketBuf* bufs, uint32_t n);
  // Whether `data` points into this segment (a frame rx_burst handed out).
  bool owns(const uint8_t* data) const;
  // Sleep: arm(true) before the last look at the lanes, then poll wake_fd(); arm(false) after waking
  // (drains the wake socket).
  int wake_fd() const { return wake_rd_; }
  void arm(bool armed);
  // After arm(false): when the first sender kicked during the sleep (CLOCK_MONOTONIC ns), 0 if none did.
  uint64_t last_kick_ns() const { return last_kick_ns_; }
  // Frees the lanes whose owner is gone (alive(owner) false) and that hold no frame. Returns how many.
  uint32_t reap(const std::function<bool(uint64_t)>& alive);
  // Claimed lanes now (for tests and statistics).
  uint32_t lanes_in_use() const;
  // Marks the segment closed (senders stop pushing) and removes its files, keeping the mapping (another
  // thread may still be reading it): for exit().
  void unpublish();
  // unpublish(), then unmaps.
  void close();

 private:
  struct Mapping* m_ = nullptr;
  std::string seg_path_, wake_path_;
  int wake_rd_ = -1;
  uint32_t next_lane_ = 0;  // where rx_burst starts (turns between lanes)
  uint64_t last_kick_ns_ = 0;
};

// A sender's lane in one receiver's segment.
class LocalSender {
 public:
  LocalSender() = default;
  ~LocalSender();
  LocalSender(const LocalSender&) = delete;
  LocalSender& operator=(const LocalSender&) = delete;

  // Maps DIR/NAME.seg and claims a free lane for owner_id (non-zero). False with `err` when the segment is
  // missing, malformed, closed, or has no free lane.
  bool attach(const std::string& dir, const std::string& name, uint64_t owner_id, std::string& err);
  bool attached() const { return m_ != nullptr; }
  // Copies one frame into the lane; false when the lane is full, the frame too large or the receiver
  // closed (then `closed()` is true).
  bool push(const uint8_t* frame, uint32_t len, bool icrc_absent = false);
  // The same for an engine frame, whose payload may be elsewhere (PacketBuf::gather).
  bool push(const engine::PacketBuf& b);
  // After a burst of pushes: wakes the receiver if it sleeps (one datagram to its wake socket).
  void kick();
  bool closed() const;
  uint32_t slot_bytes() const;
  uint64_t receiver_id() const;  // the receiver's owner_id
  // Releases the lane (owner 0) once the receiver took everything in it, else leaves it for reap().
  void detach();

 private:
  struct Mapping* m_ = nullptr;
  uint32_t lane_ = 0;
  uint32_t tail_seen_ = 0;  // the lane's tail when last read (it only grows)
  uint64_t owner_ = 0;
  int wake_wr_ = -1;
};

// CLOCK_MONOTONIC in ns: the clock of the ring's kick_ns (system-wide, so sender and receiver processes
// compare the same time).
uint64_t local_mono_ns();
// The same clock to the kernel's tick (CLOCK_MONOTONIC_COARSE, from the vDSO without reading the TSC), for
// timers of 100 ms on a path taken for every frame: 6.5-14 ns a call here against 22-31 for local_mono_ns,
// paid once per transmit burst, which for small messages is once per message.
uint64_t local_coarse_ns();

// The owner_id of the receiver that published DIR/NAME.seg, or 0 when there is no valid segment.
uint64_t local_segment_owner(const std::string& dir, const std::string& name);

}  // namespace urxe::dpdk
