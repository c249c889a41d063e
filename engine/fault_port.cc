// FaultPort: fault rules on the frames between an engine and its port (engine/fault_port.h).
//
// With rules set or frames held (`active_`), every burst first services the port: it takes a new rule set
// from the mailbox, moves held frames that are due to their direction's queue, and hands the transmit queue
// to the inner port. Frames then go through process(): parsed, matched, their action done. Each direction
// has one queue in order (tx_out: taken from the engine, not yet taken by the inner port; rx_ready: for the
// engine's next rx_burst), so a duplicate follows its original and a reordered frame follows the N-th
// frame after it.
//
// Split (split_rx): the FaultPort face takes the engine's frames and hands tx_out to the middle port; the
// RxFace takes frames from the inner port into rx_ready and gives them to the middle port. Both faces run on
// the progress thread and use the one Impl; a burst of the FaultPort face services both directions (due
// frames of either, the transmit queue), a burst of the RxFace only the receive direction, so the RxFace
// never calls the middle port (that port is inside its own call to the RxFace then).
#include "engine/fault_port.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace urxe::engine {

namespace {

using wire::FaultAction;
using wire::FaultDir;

// A reorder hold ends after this long even when fewer than N frames followed (a stream that stopped).
constexpr uint64_t kReorderBoundNs = 10'000'000;
// Frames read from the inner port per rx_burst, and taken from the engine per tx_burst, at most.
constexpr uint32_t kScratch = 64;
constexpr uint32_t kTxTake = 256;
// What one frame from the engine can add to a queue: a batch's packets, each with its copies.
constexpr uint32_t kFrameWorst = Port::kMaxBatch * (1 + wire::kFaultMaxDuplicate);

}  // namespace

// A rule set as handed over: the table and the caller's id of each entry. `next`: the retired stack.
struct FaultRules {
  wire::FaultTable table;
  std::array<uint32_t, wire::kFaultTableSize> ids{};
  FaultRules* next = nullptr;
};

struct FaultPort::Impl {
  Impl(FaultPort& o, Port& in, const Clock& c, const FaultPortConfig& cf)
      : owner(o), inner(in), tx_port(&in), clock(c), cfg(cf), observer(cf.observer) {
    pool_mem = std::make_unique<uint8_t[]>(size_t{cfg.pool_frames} * cfg.pool_frame_bytes);
    pool_tokens = std::make_unique<uint8_t[]>(std::max(cfg.pool_frames, 1u));
    pool_free.reserve(cfg.pool_frames);
    for (uint32_t i = cfg.pool_frames; i-- > 0;) pool_free.push_back(i);
    held.reserve(cfg.pool_frames);
    // what tx_out can hold: frames taken in one burst, the last one's packets and copies, every held frame
    tx_out.reserve(kTxTake + kFrameWorst + cfg.pool_frames);
    rx_ready.reserve(cfg.pool_frames + 2 * kScratch);
    scratch.resize(kScratch);
  }

  FaultPort& owner;
  Port& inner;    // where received frames come from (and go back to)
  Port* tx_port;  // where sent frames go: inner, or the middle port when split
  const Clock& clock;
  const FaultPortConfig cfg;
  FaultObserver* observer;
  std::unique_ptr<Port> rx_face;  // when split

  // Control thread to frame path: the newest rule set not yet taken; frame path to control thread: the sets
  // it no longer uses (a stack through FaultRules::next).
  std::atomic<FaultRules*> pending{nullptr};
  std::atomic<FaultRules*> retired{nullptr};
  FaultRules* cur = nullptr;  // the frame path's

  struct StatSlot {
    std::atomic<uint32_t> id{0};
    std::atomic<uint64_t> matched{0}, hits{0}, applied{0};
  };
  std::array<StatSlot, wire::kFaultTableSize> stat{};
  std::atomic<uint32_t> stat_count{0};
  std::atomic<uint64_t> dropped{0}, duplicated{0}, held_now{0}, pool_exhausted{0}, next_due{UINT64_MAX};
  std::atomic<bool> holding{false};

  // Receive-side buffers: slot i's bytes at pool_mem + i * pool_frame_bytes, its handle &pool_tokens[i].
  std::unique_ptr<uint8_t[]> pool_mem, pool_tokens;
  std::vector<uint32_t> pool_free;
  uint32_t pool_out = 0;  // pool buffers the engine holds

  struct Held {
    PacketBuf buf;
    uint64_t due = 0;   // delay: when it goes; reorder: the bound
    uint32_t left = 0;  // reorder: frames still to pass before it; 0 for a delay
    FaultDir dir = FaultDir::tx;
  };
  std::vector<Held> held;  // in the order held
  std::vector<PacketBuf> tx_out, rx_ready, scratch;
  uint32_t inner_in_ready = 0;  // rx_ready frames in the inner port's buffers

  bool is_pool(const PacketBuf& b) const {
    const auto* p = static_cast<const uint8_t*>(b.opaque);
    return p >= pool_tokens.get() && p < pool_tokens.get() + cfg.pool_frames;
  }
  std::vector<PacketBuf>& out(FaultDir d) { return d == FaultDir::tx ? tx_out : rx_ready; }

  // A pool buffer for `len` bytes.
  bool pool_alloc(uint32_t len, PacketBuf& b) {
    if (pool_free.empty() || len > cfg.pool_frame_bytes) return false;
    const uint32_t i = pool_free.back();
    pool_free.pop_back();
    b = PacketBuf{
        .data = pool_mem.get() + size_t{i} * cfg.pool_frame_bytes, .len = len, .opaque = &pool_tokens[i]};
    return true;
  }
  void pool_release(const PacketBuf& b) {
    pool_free.push_back(static_cast<uint32_t>(static_cast<const uint8_t*>(b.opaque) - pool_tokens.get()));
  }
  // A new buffer for a frame of `len` bytes in direction d (tx: the inner port's, rx: the pool's).
  bool alloc(FaultDir d, uint32_t len, PacketBuf& b) {
    if (d == FaultDir::rx) return pool_alloc(len, b);
    b = PacketBuf{};
    if (!tx_port->tx_alloc(len, b)) return false;
    b.len = len;
    return true;
  }
  // Gives back a frame that goes nowhere.
  void release(FaultDir d, PacketBuf& b) {
    if (d == FaultDir::tx)
      tx_port->tx_free(b);
    else if (is_pool(b))
      pool_release(b);
    else
      inner.rx_free(&b, 1);
  }
  // A copy of `b` in a new buffer, marked as made by rule `id`.
  bool copy(FaultDir d, const PacketBuf& b, uint32_t id, FaultAction a, PacketBuf& c) {
    if (!alloc(d, b.len, c)) return false;
    std::memcpy(c.data, b.data, b.len);
    c.len = b.len;
    c.bth_offset = b.bth_offset;
    c.icrc_absent = b.icrc_absent;
    c.fault_rule = id;
    c.fault_action = static_cast<uint8_t>(a);
    return true;
  }

  // Puts `b` on its direction's queue as a frame that passed, then the reordered frames it was the last of.
  void emit(FaultDir d, const PacketBuf& b, const PacketBuf* extra = nullptr, uint32_t n_extra = 0) {
    auto& q = out(d);
    q.push_back(b);
    for (uint32_t i = 0; i < n_extra; i++) q.push_back(extra[i]);
    for (size_t i = 0; i < held.size();) {
      Held& h = held[i];
      if (h.dir == d && h.left > 0 && --h.left == 0) {
        q.push_back(h.buf);
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        i++;
      }
    }
  }

  // Holds `b` until `due` (or `left` frames passed): tx keeps its buffer, rx moves it into the pool. False
  // when there is no room (the frame then passes).
  bool hold(FaultDir d, PacketBuf& b, uint64_t due, uint32_t left, uint32_t id, FaultAction a) {
    if (held.size() >= cfg.pool_frames) return false;
    PacketBuf h = b;
    if (d == FaultDir::rx) {
      if (!copy(d, b, id, a, h)) return false;
      release(d, b);
    }
    h.fault_rule = id;
    h.fault_action = static_cast<uint8_t>(a);
    held.push_back(Held{h, due, left, d});
    return true;
  }

  // One whole frame (not a batch) in direction d: match it and do the action of the rule that applies.
  void process(FaultDir d, PacketBuf& b) {
    b.fault_rule = 0;
    b.fault_action = 0;
    const bool dir_on = d == FaultDir::tx ? cfg.tx : cfg.rx;
    if (!dir_on || cur == nullptr || cur->table.empty()) return emit(d, b);
    wire::Packet pkt;
    wire::ParseOptions opt;
    opt.verify_icrc = false;
    opt.verify_checksums = false;
    if (wire::parse_frame(wire::ByteSpan(b.data, b.len), pkt, opt) != wire::ParseError::ok) return emit(d, b);
    const wire::FaultTable::Entry* e = cur->table.match(d, pkt, cur->table.timed() ? clock.now_ns() : 0);
    if (e == nullptr) return emit(d, b);
    const uint32_t id = cur->ids[static_cast<size_t>(e - cur->table.entries().data())];
    const wire::FaultRule& r = e->matcher.rule();
    // A frame without its ICRC (the same-host path's) gets it before anyone sees it: the observer records
    // the frame the wire would have carried, and each mutation then leaves the ICRC it means (corrupt icrc:
    // wrong; the others: right, ecn-ce's masked), so whoever checks it next sees it.
    if (b.icrc_absent && b.len >= wire::kIcrcLen) {
      wire::write_icrc(wire::MutByteSpan(b.data, b.len));
      b.icrc_absent = false;
    }
    if (observer) observer->fault_hit(d, b.data, b.len, id, r.action);
    switch (r.action) {
      case FaultAction::drop:
        release(d, b);
        dropped.fetch_add(1, std::memory_order_relaxed);
        return;
      case FaultAction::duplicate: {
        std::array<PacketBuf, wire::kFaultMaxDuplicate> copies;
        uint32_t made = 0;
        const uint32_t want = std::min(std::max(r.count, 1u), wire::kFaultMaxDuplicate);
        while (made < want && copy(d, b, id, r.action, copies[made])) made++;
        if (made < want) pool_exhausted.fetch_add(want - made, std::memory_order_relaxed);
        duplicated.fetch_add(made, std::memory_order_relaxed);
        return emit(d, b, copies.data(), made);
      }
      case FaultAction::delay:
      case FaultAction::reorder: {
        const bool delay = r.action == FaultAction::delay;
        const uint64_t due = clock.now_ns() + (delay ? r.delay_ns : kReorderBoundNs);
        if (hold(d, b, due, delay ? 0 : std::max(r.count, 1u), id, r.action)) return;
        pool_exhausted.fetch_add(1, std::memory_order_relaxed);
        return emit(d, b);
      }
      default:
        break;
    }
    if (wire::fault_mutates(r.action)) {
      size_t len = b.len;
      if (wire::apply_fault_mutation(r, wire::MutByteSpan(b.data, b.len), len)) {
        b.len = static_cast<uint32_t>(len);
        b.fault_rule = id;
        b.fault_action = static_cast<uint8_t>(r.action);
      }
    }
    emit(d, b);
  }

  // A batch frame cut into its packets, each then processed; when the buffers are not there, the batch
  // passes whole (unmatched).
  void process_batch(FaultDir d, PacketBuf& b) {
    wire::Packet pkt;
    wire::ParseOptions opt;
    opt.verify_icrc = false;
    opt.verify_checksums = false;
    const uint32_t segs = b.batch;
    std::array<PacketBuf, Port::kMaxBatch> parts;
    uint32_t got = 0;
    bool ok = segs >= 2 && segs <= Port::kMaxBatch &&
              wire::parse_frame(wire::ByteSpan(b.data, b.len), pkt, opt) == wire::ParseError::ok &&
              pkt.payload_len % segs == 0;
    const uint32_t plen = ok ? pkt.payload_offset + pkt.payload_len / segs + wire::kIcrcLen : 0;
    while (ok && got < segs && alloc(d, plen, parts[got])) {
      PacketBuf& p = parts[got++];
      p.len =
          wire::batch_packet(wire::ByteSpan(b.data, b.len), segs, got - 1, wire::MutByteSpan(p.data, plen));
      p.bth_offset = b.bth_offset;
      ok = p.len != 0;
    }
    if (!ok || got < segs) {
      for (uint32_t i = 0; i < got; i++) release(d, parts[i]);
      if (ok) pool_exhausted.fetch_add(1, std::memory_order_relaxed);
      b.fault_rule = 0;
      b.fault_action = 0;
      return emit(d, b);
    }
    release(d, b);
    for (uint32_t i = 0; i < segs; i++) process(d, parts[i]);
  }

  // Hands tx_out to the inner port, in order; what it refuses stays.
  void flush_tx() {
    size_t done = 0;
    while (done < tx_out.size()) {
      const uint32_t k = tx_port->tx_burst(tx_out.data() + done, static_cast<uint32_t>(tx_out.size() - done));
      if (k == 0) break;
      done += k;
    }
    tx_out.erase(tx_out.begin(), tx_out.begin() + static_cast<std::ptrdiff_t>(done));
  }

  // At each burst: a new rule set, due frames, the transmit queue (`tx_side`: due frames of both directions
  // and the transmit queue; else the received ones only).
  void service(bool tx_side) {
    if (FaultRules* r = pending.exchange(nullptr, std::memory_order_acq_rel)) {
      if (cur) retire(cur);
      cur = r;
    }
    const uint64_t now = clock.now_ns();
    for (;;) {  // due frames, earliest first
      size_t pick = held.size();
      for (size_t i = 0; i < held.size(); i++)
        if (held[i].due <= now && (tx_side || held[i].dir == FaultDir::rx) &&
            (pick == held.size() || held[i].due < held[pick].due))
          pick = i;
      if (pick == held.size()) break;
      const Held h = held[pick];
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(pick));
      out(h.dir).push_back(h.buf);
      if (h.dir == FaultDir::rx && !is_pool(h.buf)) inner_in_ready++;
    }
    if (tx_side) flush_tx();
  }

  // Received frames from the inner port, through the rules, to `bufs` (after service).
  uint32_t rx_take(PacketBuf* bufs, uint32_t n) {
    if (rx_ready.size() < n && inner_in_ready < kScratch) {
      const uint32_t k = inner.rx_burst(scratch.data(), std::min(n, kScratch - inner_in_ready));
      for (uint32_t i = 0; i < k; i++) {
        PacketBuf& b = scratch[i];
        if (b.batch)
          process_batch(FaultDir::rx, b);
        else
          process(FaultDir::rx, b);
      }
      inner_in_ready = 0;
      for (const PacketBuf& b : rx_ready) inner_in_ready += !is_pool(b);
    }
    const auto give = static_cast<uint32_t>(std::min<size_t>(n, rx_ready.size()));
    for (uint32_t i = 0; i < give; i++) {
      bufs[i] = rx_ready[i];
      if (is_pool(bufs[i]))
        pool_out++;
      else
        inner_in_ready--;
    }
    rx_ready.erase(rx_ready.begin(), rx_ready.begin() + give);
    return give;
  }

  // Received frames back: pool buffers to the pool, runs of the inner port's together to it.
  void rx_give_back(PacketBuf* bufs, uint32_t n) {
    uint32_t i = 0;
    while (i < n) {
      if (is_pool(bufs[i])) {
        pool_release(bufs[i]);
        pool_out--;
        i++;
        continue;
      }
      uint32_t j = i;
      while (j < n && !is_pool(bufs[j])) j++;
      inner.rx_free(bufs + i, j - i);
      i = j;
    }
  }

  void retire(FaultRules* r) {
    r->next = retired.load(std::memory_order_relaxed);
    while (!retired.compare_exchange_weak(r->next, r, std::memory_order_release, std::memory_order_relaxed)) {
    }
  }

  // After a burst: counters and due time for other threads; idle when nothing is left to do.
  void finish() {
    const size_t n = cur ? cur->table.size() : 0;
    for (size_t i = 0; i < n; i++) {
      const auto& e = cur->table.entries()[i];
      stat[i].id.store(cur->ids[i], std::memory_order_relaxed);
      stat[i].matched.store(e.matcher.matched(), std::memory_order_relaxed);
      stat[i].hits.store(e.matcher.hits(), std::memory_order_relaxed);
      stat[i].applied.store(e.applied, std::memory_order_relaxed);
    }
    stat_count.store(static_cast<uint32_t>(n), std::memory_order_release);
    held_now.store(held.size(), std::memory_order_relaxed);
    uint64_t due = UINT64_MAX;
    for (const Held& h : held) due = std::min(due, h.due);
    if (!tx_out.empty() || !rx_ready.empty()) due = clock.now_ns();
    next_due.store(due, std::memory_order_relaxed);
    const bool busy = !held.empty() || !tx_out.empty() || !rx_ready.empty();
    holding.store(busy, std::memory_order_relaxed);
    if (n == 0 && !busy && pool_out == 0) {
      // (set_rules stores its set, then active_; here the order is reversed: one of the two sees the other)
      owner.active_.store(false, std::memory_order_seq_cst);
      if (pending.load(std::memory_order_seq_cst) != nullptr)
        owner.active_.store(true, std::memory_order_seq_cst);
    }
  }
};

// The receive face (split_rx): over the inner port; the receive rules; everything else passes through.
class FaultPort::RxFace final : public Port {
 public:
  RxFace(FaultPort& owner, Impl& m) : owner_(owner), m_(m), inner_(m.inner) {}

  const PortAttr& attr() const override { return inner_.attr(); }
  bool tx_alloc(uint32_t size, PacketBuf& buf) override { return inner_.tx_alloc(size, buf); }
  uint32_t tx_burst(PacketBuf* bufs, uint32_t n) override { return inner_.tx_burst(bufs, n); }
  void tx_free(PacketBuf& buf) override { inner_.tx_free(buf); }
  uint32_t rx_burst(PacketBuf* bufs, uint32_t n) override {
    if (!owner_.active_.load(std::memory_order_relaxed)) return inner_.rx_burst(bufs, n);
    m_.service(false);
    const uint32_t k = m_.rx_take(bufs, n);
    m_.finish();
    return k;
  }
  void rx_free(PacketBuf* bufs, uint32_t n) override {
    if (!owner_.active_.load(std::memory_order_relaxed)) return inner_.rx_free(bufs, n);
    m_.rx_give_back(bufs, n);
    m_.finish();
  }
  int rx_wait_fd() const override {
    return m_.holding.load(std::memory_order_relaxed) ? -1 : inner_.rx_wait_fd();
  }
  void rx_wait_arm(bool armed) override { inner_.rx_wait_arm(armed); }
  uint64_t rx_wait_event_ns() const override { return inner_.rx_wait_event_ns(); }
  bool tx_icrc_offload() const override { return inner_.tx_icrc_offload(); }
  bool tx_gather() const override { return inner_.tx_gather(); }
  uint32_t tx_batch_bytes() const override { return inner_.tx_batch_bytes(); }
  uint32_t tx_batch_bytes_to(const uint8_t* dst_mac, uint32_t dqpn) override {
    return owner_.active_.load(std::memory_order_relaxed) ? 0 : inner_.tx_batch_bytes_to(dst_mac, dqpn);
  }
  bool set_rx_qpn_range(uint32_t first, uint32_t end) override { return inner_.set_rx_qpn_range(first, end); }
  bool set_multicast_mac(const wire::MacAddr& mac, bool member) override {
    return inner_.set_multicast_mac(mac, member);
  }
  PortRxLoss rx_loss() override { return inner_.rx_loss(); }

 private:
  FaultPort& owner_;
  Impl& m_;
  Port& inner_;
};

FaultPort::FaultPort(Port& inner, const Clock& clock, FaultPortConfig config)
    : up_(&inner), impl_(std::make_unique<Impl>(*this, inner, clock, config)) {}

void FaultPort::split_rx(const std::function<Port*(Port& rx_face)>& make) {
  Impl& m = *impl_;
  if (m.rx_face) return;
  auto face = std::make_unique<RxFace>(*this, m);
  Port* mid = make(*face);
  if (mid == nullptr) return;
  m.rx_face = std::move(face);
  m.tx_port = mid;
  up_ = mid;
}

void FaultPort::set_observer(FaultObserver* observer) {
  impl_->observer = observer;
}

FaultPort::~FaultPort() {
  Impl& m = *impl_;
  for (auto& h : m.held) m.release(h.dir, h.buf);
  for (auto& b : m.tx_out) m.tx_port->tx_free(b);
  for (auto& b : m.rx_ready) m.release(FaultDir::rx, b);
  delete m.cur;
  delete m.pending.exchange(nullptr);
  for (FaultRules* r = m.retired.exchange(nullptr); r != nullptr;) {
    FaultRules* next = r->next;
    delete r;
    r = next;
  }
}

void FaultPort::set_rules(const std::vector<std::pair<uint32_t, wire::FaultRule>>& rules) {
  auto* r = new FaultRules;
  for (const auto& [id, rule] : rules) {
    if (r->table.size() == wire::kFaultTableSize) break;
    r->ids[r->table.size()] = id;
    r->table.add(rule);
  }
  delete impl_->pending.exchange(r, std::memory_order_seq_cst);  // (a set the frame path never took)
  active_.store(true, std::memory_order_seq_cst);
  for (FaultRules* old = impl_->retired.exchange(nullptr, std::memory_order_acquire); old != nullptr;) {
    FaultRules* next = old->next;
    delete old;
    old = next;
  }
}

std::vector<FaultRuleStats> FaultPort::stats() const {
  std::vector<FaultRuleStats> v(impl_->stat_count.load(std::memory_order_acquire));
  for (size_t i = 0; i < v.size(); i++) {
    const auto& s = impl_->stat[i];
    v[i] = {s.id.load(std::memory_order_relaxed), s.matched.load(std::memory_order_relaxed),
            s.hits.load(std::memory_order_relaxed), s.applied.load(std::memory_order_relaxed)};
  }
  return v;
}

uint64_t FaultPort::dropped() const {
  return impl_->dropped.load(std::memory_order_relaxed);
}
uint64_t FaultPort::duplicated() const {
  return impl_->duplicated.load(std::memory_order_relaxed);
}
uint64_t FaultPort::held() const {
  return impl_->held_now.load(std::memory_order_relaxed);
}
uint64_t FaultPort::pool_exhausted() const {
  return impl_->pool_exhausted.load(std::memory_order_relaxed);
}
uint64_t FaultPort::next_due_ns() const {
  return impl_->next_due.load(std::memory_order_relaxed);
}

const PortAttr& FaultPort::attr() const {
  return up_->attr();
}

bool FaultPort::tx_alloc(uint32_t size, PacketBuf& buf) {
  return up_->tx_alloc(size, buf);
}

void FaultPort::tx_free(PacketBuf& buf) {
  up_->tx_free(buf);
}

uint32_t FaultPort::tx_burst(PacketBuf* bufs, uint32_t n) {
  if (!active_.load(std::memory_order_relaxed)) return up_->tx_burst(bufs, n);
  Impl& m = *impl_;
  m.service(true);
  uint32_t took = 0;
  if (m.tx_out.empty()) {  // else the inner port refuses: so does this one
    for (; took < n && m.tx_out.size() < kTxTake; took++) {
      PacketBuf b = bufs[took];
      make_whole(b);
      if (b.batch)
        m.process_batch(FaultDir::tx, b);
      else
        m.process(FaultDir::tx, b);
    }
    m.flush_tx();
  }
  m.finish();
  return took;
}

uint32_t FaultPort::rx_burst(PacketBuf* bufs, uint32_t n) {
  if (!active_.load(std::memory_order_relaxed)) return up_->rx_burst(bufs, n);
  Impl& m = *impl_;
  m.service(true);
  // split: the receive face (under the middle port) applies the rules
  const uint32_t k = m.rx_face ? up_->rx_burst(bufs, n) : m.rx_take(bufs, n);
  m.finish();
  return k;
}

void FaultPort::rx_free(PacketBuf* bufs, uint32_t n) {
  if (!active_.load(std::memory_order_relaxed) || impl_->rx_face) return up_->rx_free(bufs, n);
  impl_->rx_give_back(bufs, n);
  impl_->finish();
}

int FaultPort::rx_wait_fd() const {
  return impl_->holding.load(std::memory_order_relaxed) ? -1 : up_->rx_wait_fd();
}
void FaultPort::rx_wait_arm(bool armed) {
  up_->rx_wait_arm(armed);
}
uint64_t FaultPort::rx_wait_event_ns() const {
  return up_->rx_wait_event_ns();
}
bool FaultPort::tx_icrc_offload() const {
  return up_->tx_icrc_offload();
}
bool FaultPort::tx_gather() const {
  return up_->tx_gather();
}
uint32_t FaultPort::tx_batch_bytes() const {
  return up_->tx_batch_bytes();
}
uint32_t FaultPort::tx_batch_bytes_to(const uint8_t* dst_mac, uint32_t dqpn) {
  return active_.load(std::memory_order_relaxed) ? 0 : up_->tx_batch_bytes_to(dst_mac, dqpn);
}
bool FaultPort::set_rx_qpn_range(uint32_t first, uint32_t end) {
  return up_->set_rx_qpn_range(first, end);
}
bool FaultPort::set_multicast_mac(const wire::MacAddr& mac, bool member) {
  return up_->set_multicast_mac(mac, member);
}
PortRxLoss FaultPort::rx_loss() {
  return up_->rx_loss();
}

}  // namespace urxe::engine
