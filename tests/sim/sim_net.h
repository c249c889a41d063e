// A deterministic simulated Ethernet for engine tests: a virtual clock and N ports joined by links that drop,
// reorder, duplicate, delay (with jitter), corrupt and MTU-limit frames, every decision drawn from a seeded
// generator so one seed always replays the same run. Frames live in preallocated per-port buffer pools (no
// allocation on the data path) and travel as events ordered by (delivery time, sequence number).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/port.h"

namespace urxe::sim {

// splitmix64-seeded xoshiro256**: the same sequence on every platform and standard library (std::
// distributions are not portable), which is what makes a printed seed a reproducer.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { reseed(seed); }
  void reseed(uint64_t seed);
  uint64_t next();
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }  // [0, n); the modulo bias is irrelevant here
  uint64_t range(uint64_t lo, uint64_t hi) { return lo + below(hi - lo + 1); }  // [lo, hi]
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }       // [0, 1)
  bool chance(double p) { return p > 0 && unit() < p; }

 private:
  uint64_t s_[4]{};
};

// Virtual time. `t` is public so a test can step the clock by hand between runs.
class SimClock final : public engine::Clock {
 public:
  uint64_t now_ns() const override {
    const uint64_t v = t;
    if (read_step_ns) t += read_step_ns;  // (no write otherwise: engines on several threads read it)
    return v;
  }
  void set(uint64_t now) { t = now; }
  mutable uint64_t t = 0;
  // Each read finds the clock this much later: an engine round that takes time, as on a busy CPU (0: time
  // moves only between rounds).
  uint64_t read_step_ns = 0;
};

// Faults and timing of one direction of a link. Rates are probabilities per frame.
struct LinkConfig {
  uint64_t latency_ns = 1000;  // base one-way delay
  uint64_t jitter_ns = 0;      // + uniform [0, jitter_ns]; jitter alone can reorder frames
  double drop = 0;
  double duplicate = 0;  // the copy gets its own delay
  double reorder = 0;    // this frame is held back by reorder_delay_ns so later ones overtake it
  uint64_t reorder_delay_ns = 20000;
  double corrupt = 0;     // flip 1..3 random bits inside the ICRC-covered bytes
  uint32_t mtu = 0;       // IP MTU of the link; 0 = the sending port's attr().mtu. Larger frames drop.
  uint64_t rate_bps = 0;  // serialisation rate; 0 = infinitely fast
  // A switch's egress queue in front of the serialisation (needs rate_bps): the bytes waiting to be sent.
  // A frame that would make it exceed queue_limit_bytes is dropped (0 = unbounded). ECN as a DCQCN switch
  // marks (RED on the instantaneous queue): an ECN-capable frame that finds more than ecn_kmin_bytes queued
  // is marked CE with a probability rising linearly to ecn_pmax at ecn_kmax_bytes, and always above it.
  // ecn_kmax_bytes = 0: no marking.
  uint64_t queue_limit_bytes = 0;
  uint64_t ecn_kmin_bytes = 0, ecn_kmax_bytes = 0;
  double ecn_pmax = 0;
};

struct LinkStats {
  uint64_t sent = 0;         // frames offered to the link
  uint64_t delivered = 0;    // frames placed in the receiver's rx queue (duplicates included)
  uint64_t dropped = 0;      // by the drop fault
  uint64_t duplicated = 0;   // extra copies made
  uint64_t reordered = 0;    // frames held back
  uint64_t corrupted = 0;    // frames whose bits were flipped (each must fail ICRC at the receiver)
  uint64_t oversize = 0;     // dropped for exceeding the MTU
  uint64_t rx_overflow = 0;  // dropped because the receiver's rx queue was full
  uint64_t bytes = 0;        // bytes of delivered frames
  uint64_t queue_drops = 0;  // dropped because the egress queue was full (queue_limit_bytes)
  uint64_t ce_marked = 0;    // ECN-capable frames marked CE by the queue
  uint64_t max_queue_bytes = 0;
};

struct PortConfig {
  wire::MacAddr mac{};
  uint32_t mtu = 1500;
  std::vector<wire::Gid> gids;
  uint32_t pool_bufs = 1024;  // preallocated tx buffers of this port
  uint32_t buf_size = 9216;   // each at least as large as any frame the link can carry
  uint32_t rx_queue = 1024;   // rx ring depth; frames arriving at a full ring are dropped
  // The NIC's own line rate (0 = infinitely fast): frames leave one after another at this rate, and tx_burst
  // takes a frame only once the previous one is on its way (backpressure, as a NIC's send queue): a sender
  // cannot put more into the path than its link carries, whatever its QPs post.
  uint64_t line_rate_bps = 0;
  // No pool: every tx buffer is allocated at exactly the size asked for (so ASan sees an overrun of the frame
  // itself), buffers and the rx ring grow on demand. The engine behaviour tests use this; the pool's limits
  // are part of what the property tests exercise.
  bool grow = false;
  // rx_burst first delivers every frame due by now (SimNet::deliver_due), for tests that call the engines'
  // progress() themselves instead of SimNet::run_until.
  bool deliver_on_rx = false;
};

// What SimNet::on_frame decides for one frame.
struct FrameVerdict {
  bool drop = false;
  bool duplicate = false;  // one extra copy, delivered after dup_delay_ns more (scheduled first)
  uint64_t delay_ns = 0;   // added to the link's latency
  uint64_t dup_delay_ns = 0;
};

class SimNet;

class SimPort final : public engine::Port {
 public:
  const engine::PortAttr& attr() const override { return attr_; }
  bool tx_alloc(uint32_t size, engine::PacketBuf& buf) override;
  uint32_t tx_burst(engine::PacketBuf* bufs, uint32_t n) override;
  void tx_free(engine::PacketBuf& buf) override;
  uint32_t rx_burst(engine::PacketBuf* bufs, uint32_t n) override;
  void rx_free(engine::PacketBuf* bufs, uint32_t n) override;

  uint32_t index() const { return index_; }
  uint32_t free_bufs() const { return static_cast<uint32_t>(free_.size()); }
  uint32_t pool_size() const { return static_cast<uint32_t>(slots_.size()); }
  uint32_t rx_pending() const { return rx_count_; }
  uint64_t tx_frames() const { return tx_frames_; }
  uint64_t tx_kept() const { return tx_kept_; }  // buffers tx_alloc gave out and tx_free did not take back
  uint64_t rx_frames() const { return rx_frames_; }
  uint64_t tx_alloc_failures() const { return tx_alloc_failures_; }
  // Buffers currently held by the engine (allocated and not yet sent/freed, or received and not yet freed).
  uint32_t held_by_user() const { return held_; }
  void set_line_rate(uint64_t bps) { cfg_.line_rate_bps = bps; }  // PortConfig::line_rate_bps
  // Backpressure: while it returns true, tx_alloc fails and tx_burst takes at most half of what it is given.
  std::function<bool()> refuse;
  // A transmit queue of bounded room (a packet socket's ring, whose slots tx_alloc hands out and which the
  // kernel empties in one go): tx_alloc fails while it returns 0. Whoever sets it wakes the net when room
  // comes back (a Node's next_deadline).
  std::function<uint32_t()> tx_room;

 private:
  friend class SimNet;
  struct Slot {
    std::unique_ptr<uint8_t[]> data;
    uint32_t cap = 0;  // bytes allocated
    uint32_t len = 0;
    uint32_t state = 0;  // free / tx-held / in flight / rx-queued / rx-held: misuse aborts
  };
  SimPort(SimNet* net, uint32_t index, const PortConfig& cfg);
  int32_t grab(uint32_t size);  // a free slot of at least size bytes, or -1
  void release(int32_t slot);
  bool rx_push(SimPort* owner, int32_t slot);

  SimNet* net_;
  uint32_t index_;
  engine::PortAttr attr_;
  PortConfig cfg_;
  std::vector<Slot> slots_;
  std::vector<int32_t> free_;
  // rx ring of (owner port, slot): the frame stays in the sender's pool buffer (zero copy, like a NIC's DMA
  // into an mbuf) and goes back to that pool on rx_free.
  struct RxEntry {
    SimPort* owner = nullptr;
    int32_t slot = -1;
  };
  std::vector<RxEntry> rx_ring_;
  uint32_t rx_head_ = 0, rx_count_ = 0;
  uint32_t held_ = 0;
  uint64_t tx_frames_ = 0, rx_frames_ = 0, tx_alloc_failures_ = 0, tx_kept_ = 0;
  uint64_t nic_free_at_ = 0;  // line_rate_bps: when the last frame taken has left the NIC
  bool tx_refused_ = false;   // a tx_burst was cut short by the line rate: wake at nic_free_at_
};

// Anything that the network drives: an engine, usually. progress() polls the port and fires due timers, and
// returns whether it did anything; next_deadline() is the virtual time at which it wants progress() again if
// no frame arrives (UINT64_MAX for none, <= now for "work pending now"). Without next_deadline the node is
// polled every microsecond of virtual time.
struct Node {
  std::function<bool()> progress;
  std::function<uint64_t()> next_deadline;
};

class SimNet {
 public:
  explicit SimNet(uint64_t seed = 1);
  ~SimNet();
  SimNet(const SimNet&) = delete;
  SimNet& operator=(const SimNet&) = delete;

  uint64_t seed() const { return seed_; }
  SimClock& clock() { return clock_; }
  uint64_t now_ns() const { return clock_.now_ns(); }

  SimPort& add_port(const PortConfig& cfg);
  SimPort& port(uint32_t i) { return *ports_[i]; }
  uint32_t num_ports() const { return static_cast<uint32_t>(ports_.size()); }
  // Joins a and b with one link each way (same config both ways unless set_link is used afterwards).
  void connect(uint32_t a, uint32_t b, const LinkConfig& cfg = {});
  void set_link(uint32_t from, uint32_t to, const LinkConfig& cfg);  // must be connected
  LinkConfig& link_config(uint32_t from, uint32_t to);
  const LinkStats& link_stats(uint32_t from, uint32_t to) const;
  LinkStats total_stats() const;

  void add_node(Node n) { nodes_.push_back(std::move(n)); }

  // Runs the world until pred() holds (true) or virtual time reaches deadline_ns or nothing can ever happen
  // again (false). Each step delivers due frames, calls every node's progress(), and jumps the clock to the
  // next frame delivery or node deadline.
  bool run_until(const std::function<bool()>& pred, uint64_t deadline_ns);
  // Runs until no frame is in flight or queued and no node has a deadline before deadline_ns.
  bool run_until_idle(uint64_t deadline_ns);
  // One step at the current time: deliver due frames and progress every node once.
  void step();

  uint32_t in_flight() const { return static_cast<uint32_t>(events_.size()); }
  // Frames on their way to port `to`, and the time the first of them arrives (UINT64_MAX: none).
  uint32_t in_flight_to(uint32_t to) const;
  uint64_t next_delivery_to(uint32_t to) const;
  // The time of the next frame delivery (UINT64_MAX: none), and the delivery of every frame due by now into
  // its port's rx queue (true if any); run_until does both, a test driving its nodes itself calls them.
  uint64_t next_event_time() const;
  bool deliver_due();
  // For engines progressed on several threads at once (the engine's threading tests): every port operation
  // and the queries above then hold one lock, as the ports share the net's state (a received frame goes back
  // to its sender's pool). Off by default: run_until is single-threaded.
  void set_thread_safe(bool on) { thread_safe_ = on; }
  // Frames dropped at send for lack of a route (no link to a port with the destination MAC/IP).
  uint64_t unroutable() const { return unroutable_; }

  // Called by SimPort::tx_burst.
  void transmit(SimPort& from, int32_t slot);

  // Optional targeted fault: frames for which it returns true are dropped (counted as dropped) before the
  // random faults, e.g. "the first READ response" in a focused test.
  std::function<bool(uint32_t from, uint32_t to, const uint8_t* data, uint32_t len)> drop_if;
  // Optional observer of every frame as it enters a link (before faults), e.g. for traces.
  std::function<void(uint32_t from, uint32_t to, const uint8_t* data, uint32_t len)> on_transmit;
  // Optional per-frame decision after drop_if and before the random faults: the frame's bytes may be changed
  // in place (corruption), and it may be dropped, duplicated or delayed.
  std::function<void(uint32_t from, uint32_t to, uint8_t* data, uint32_t len, FrameVerdict& v)> on_frame;

 private:
  struct Link {
    uint32_t from = 0, to = 0;
    LinkConfig cfg;
    LinkStats stats;
    Rng rng;
    uint64_t busy_until = 0;  // serialisation (rate_bps)
  };
  struct Event {
    uint64_t time;
    uint64_t seq;
    uint32_t link;
    SimPort* owner;
    int32_t slot;
  };
  Link* find_link(uint32_t from, uint32_t to);
  const Link* find_link(uint32_t from, uint32_t to) const;
  Link* route(SimPort& from, const uint8_t* frame, uint32_t len);
  // `t_in`: when the frame enters the link (after its NIC serialised it).
  void schedule(Link& l, SimPort* owner, int32_t slot, uint64_t extra_ns, uint64_t t_in);
  void corrupt(Link& l, uint8_t* frame, uint32_t len);
  void push_event(const Event& e);
  Event pop_event();

  std::unique_lock<std::mutex> guard() const {
    return thread_safe_ ? std::unique_lock<std::mutex>(mu_) : std::unique_lock<std::mutex>();
  }
  bool deliver_due_unlocked();

  bool thread_safe_ = false;
  mutable std::mutex mu_;
  uint64_t seed_;
  SimClock clock_;
  std::vector<std::unique_ptr<SimPort>> ports_;
  std::vector<Link> links_;
  std::vector<Node> nodes_;
  std::vector<Event> events_;  // binary min-heap on (time, seq)
  uint64_t seq_ = 0;
  uint64_t unroutable_ = 0;
  uint64_t activity_ = 0;  // bumped by every tx/rx; lets run_until see whether a step did anything
  friend class SimPort;
};

// Helpers for tests.
wire::MacAddr sim_mac(uint32_t i);  // 02:00:00:00:00:i+1, locally administered
wire::Gid sim_gid_v4(uint32_t i);   // ::ffff:10.0.0.(i+1)
wire::Gid sim_gid_v6(uint32_t i);   // fd00::(i+1), a unique local address
std::string describe(const LinkStats& s);
// Marks an ECN-capable IPv4/IPv6 frame CE (the IPv4 header checksum updated; the ICRC masks the ECN bits,
// so it stays valid). False, and the frame unchanged, when it is not ECN-capable or not IP.
bool mark_ce(uint8_t* frame, uint32_t len);

}  // namespace urxe::sim
