// Fault injection where frames enter and leave the engine: a Port over another Port that applies a device's
// fault rules (wire/fault_rule.h) to every frame in the directions it is given, and performs their actions:
// drop, duplicate, delay, reorder, and the mutations (corrupt, ecn-ce, truncate). The same class runs over a
// real port, the same-host path and the simulator's ports, so a scenario found live replays in a test.
//
// Cost: with no rules, each burst is one relaxed load and the inner port's call; nothing per frame. With
// rules, each frame is parsed (wire::parse_frame, no ICRC check) and matched; batch frames are cut into
// their packets first, and the engine is told to make none (tx_batch_bytes_to answers 0).
//
// Two faces: by default one object does both directions (engine → FaultPort → port). A port that is to see
// the frames as the engine sends them and as it takes them (a capture) goes between two faces instead
// (split_rx): engine → FaultPort (transmit rules) → capture → receive face (receive rules) → port. The faces
// share one rule table, its counters, the pool and the held frames, so a rule without `dir` counts its
// matches over both directions together, as in one object.
//
// Threads: the engine's progress thread calls the Port methods of both faces (so the faces share their state
// without locks); set_rules and stats may be called from any other thread (the control thread that watches
// the device's rule file). A new rule set is handed over through a mailbox and taken at the next burst;
// nothing on the frame path allocates or locks.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/port.h"
#include "wire/fault_rule.h"

namespace urxe::engine {

// What a capture (or a test) is told about each frame a rule hit, in the order the actions happen.
class FaultObserver {
 public:
  virtual ~FaultObserver() = default;
  // `frame` as it was before the action (a dropped frame; the original of a duplicate; a frame before its
  // mutation), `rule_id` the rule whose action applied. Called on the progress thread.
  virtual void fault_hit(wire::FaultDir dir, const uint8_t* frame, uint32_t len, uint32_t rule_id,
                         wire::FaultAction action) = 0;
};

struct FaultPortConfig {
  bool tx = true, rx = true;   // the directions the rules apply to here
  uint32_t pool_frames = 256;  // buffers for duplicates, cut batches and held received frames
  uint32_t pool_frame_bytes = 9216 + 128;
  FaultObserver* observer = nullptr;
};

// One rule's counters, summed over both directions of this port.
struct FaultRuleStats {
  uint32_t id = 0;
  uint64_t matched = 0;  // frames its fields matched
  uint64_t hits = 0;     // frames its selectors picked
  uint64_t applied = 0;  // frames whose action it decided (the first hitting rule)
};

class FaultPort : public Port {
 public:
  FaultPort(Port& inner, const Clock& clock, FaultPortConfig config = {});
  ~FaultPort() override;

  // Puts a port between two faces of this one: `make` is given the receive face (a Port over this port's
  // inner port that applies the receive rules, marks the frames it made or changed and tells the observer of
  // its hits) and returns the port it built over it, or nullptr (nothing changes). This port then sends to
  // and receives from that middle port and applies the transmit rules only. The receive face belongs to this
  // port: once this port is destroyed the middle port may only be destroyed (its inner port is gone), so
  // destroy this port first and then the middle port. Before the first burst; once.
  void split_rx(const std::function<Port*(Port& rx_face)>& make);
  // The observer of both faces' hits (replaces the config's). Before the first burst.
  void set_observer(FaultObserver* observer);

  // Replaces the rules (each with its id, in table order; the first wire::kFaultTableSize); an empty list
  // turns injection off. Any thread. Frames held by the old rules (delay, reorder) still go out when due.
  // Held frames go at the first burst (either direction) once due; a reorder hold also ends 10 ms after it
  // began when fewer than N frames followed (a stream that stopped).
  void set_rules(const std::vector<std::pair<uint32_t, wire::FaultRule>>& rules);
  // The current rules' counters (as of the last burst). Any thread.
  std::vector<FaultRuleStats> stats() const;
  // Frames a rule made: extra copies, frames dropped, frames held now; and frames a full pool let pass
  // unharmed (a duplicate or a hold that found no buffer).
  uint64_t dropped() const;
  uint64_t duplicated() const;
  uint64_t held() const;
  uint64_t pool_exhausted() const;
  // When the next held frame is due (Clock ns), UINT64_MAX when none: a driver that sleeps (the progress
  // thread, the simulator's run loop) must come back by then. While frames are held rx_wait_fd() is -1.
  uint64_t next_due_ns() const;

  // Port
  const PortAttr& attr() const override;
  bool tx_alloc(uint32_t size, PacketBuf& buf) override;
  uint32_t tx_burst(PacketBuf* bufs, uint32_t n) override;
  void tx_free(PacketBuf& buf) override;
  uint32_t rx_burst(PacketBuf* bufs, uint32_t n) override;
  void rx_free(PacketBuf* bufs, uint32_t n) override;
  int rx_wait_fd() const override;
  void rx_wait_arm(bool armed) override;
  uint64_t rx_wait_event_ns() const override;
  bool tx_icrc_offload() const override;
  bool tx_gather() const override;
  uint32_t tx_batch_bytes() const override;
  uint32_t tx_batch_bytes_to(const uint8_t* dst_mac, uint32_t dqpn) override;
  bool set_rx_qpn_range(uint32_t first, uint32_t end) override;
  bool set_multicast_mac(const wire::MacAddr& mac, bool member) override;
  PortRxLoss rx_loss() override;

 private:
  struct Impl;
  class RxFace;
  Port* up_;  // where this face sends and takes frames: inner_, or the middle port after split_rx
  std::atomic<bool> active_{false};  // rules are set or frames are held: the burst paths look closer
  std::unique_ptr<Impl> impl_;
};

}  // namespace urxe::engine
