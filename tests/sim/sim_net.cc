#include "tests/sim/sim_net.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "wire/bytes.h"
#include "wire/packet.h"

namespace urxe::sim {

namespace {

constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

[[noreturn]] void sim_fatal(const char* what, uint32_t port, int64_t slot) {
  // A misuse of the Port contract is an engine memory-safety bug: stop at once, loudly.
  std::fprintf(stderr, "urxe sim: port %u slot %lld: %s\n", port, static_cast<long long>(slot), what);
  std::abort();
}

// Opaque handles: rx buffers name (owner port, slot) so rx_free returns them to the pool they came from.
void* encode(uint32_t port, int32_t slot) {
  return reinterpret_cast<void*>((uintptr_t{port} << 32) | (static_cast<uintptr_t>(slot) + 1));
}
void decode(const void* h, uint32_t& port, int32_t& slot) {
  auto v = reinterpret_cast<uintptr_t>(h);
  port = static_cast<uint32_t>(v >> 32);
  slot = static_cast<int32_t>(static_cast<uint32_t>(v) - 1);
}

enum SlotState : uint32_t { kFree = 0, kTxUser, kInFlight, kRxQueued, kRxUser };

}  // namespace

// ---- Rng ---------------------------------------------------------------------------------------------

void Rng::reseed(uint64_t seed) {
  uint64_t x = seed;
  for (auto& s : s_) s = splitmix64(x);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

// ---- SimPort -----------------------------------------------------------------------------------------

SimPort::SimPort(SimNet* net, uint32_t index, const PortConfig& cfg) : net_(net), index_(index), cfg_(cfg) {
  attr_.mac = cfg.mac;
  attr_.mtu = cfg.mtu;
  attr_.rx_ring_frames = cfg.grow ? 0 : cfg.rx_queue;
  attr_.gids = cfg.gids;
  const uint32_t bufs = cfg.grow ? 0 : cfg.pool_bufs;
  slots_.resize(bufs);
  free_.reserve(bufs);
  for (uint32_t i = 0; i < bufs; ++i) {
    // Separate allocations of exactly buf_size, so ASan sees any overrun of a frame buffer.
    slots_[i].data.reset(new uint8_t[cfg.buf_size]);
    slots_[i].cap = cfg.buf_size;
    std::memset(slots_[i].data.get(), 0, cfg.buf_size);
    free_.push_back(static_cast<int32_t>(bufs - 1 - i));
  }
  rx_ring_.resize(std::max<uint32_t>(cfg.rx_queue, 1));
}

int32_t SimPort::grab(uint32_t size) {
  if (cfg_.grow) {
    // A buffer of exactly `size` bytes, in a free slot or a new one.
    int32_t s;
    if (free_.empty()) {
      s = static_cast<int32_t>(slots_.size());
      slots_.emplace_back();
    } else {
      s = free_.back();
      free_.pop_back();
    }
    slots_[s].data.reset(new uint8_t[size ? size : 1]);
    slots_[s].cap = size;
    return s;
  }
  if (size > cfg_.buf_size || free_.empty()) return -1;
  int32_t s = free_.back();
  free_.pop_back();
  return s;
}

void SimPort::release(int32_t slot) {
  uint32_t& st = slots_[slot].state;
  if (st == kFree) sim_fatal("double free", index_, slot);
  st = kFree;
  free_.push_back(slot);
}

bool SimPort::tx_alloc(uint32_t size, engine::PacketBuf& buf) {
  auto lock = net_->guard();
  int32_t s = (refuse && refuse()) || (tx_room && tx_room() == 0) ? -1 : grab(size);
  if (s < 0) {
    ++tx_alloc_failures_;
    return false;
  }
  slots_[s].state = kTxUser;
  ++held_;
  ++tx_kept_;
  buf.data = slots_[s].data.get();
  buf.len = size;
  buf.opaque = encode(index_, s);
  return true;
}

uint32_t SimPort::tx_burst(engine::PacketBuf* bufs, uint32_t n) {
  auto lock = net_->guard();
  if (refuse && refuse()) n /= 2;
  tx_refused_ = false;
  for (uint32_t i = 0; i < n; ++i) {
    if (cfg_.line_rate_bps && nic_free_at_ > net_->clock_.now_ns()) {  // the NIC is still sending
      tx_refused_ = true;
      n = i;
      break;
    }
    uint32_t p;
    int32_t s;
    decode(bufs[i].opaque, p, s);
    if (p != index_ || s < 0 || static_cast<uint32_t>(s) >= slots_.size())
      sim_fatal("tx_burst of a foreign buffer", p, s);
    uint32_t& st = slots_[s].state;
    if (st != kTxUser) sim_fatal("tx_burst of a buffer not allocated for tx", p, s);
    if (bufs[i].len > slots_[s].cap || bufs[i].data != slots_[s].data.get())
      sim_fatal("tx frame overruns its buffer", p, s);
    st = kInFlight;
    --held_;
    ++tx_frames_;
    slots_[s].len = bufs[i].len;
    net_->transmit(*this, s);
  }
  net_->activity_ += n;
  return n;
}

void SimPort::tx_free(engine::PacketBuf& buf) {
  auto lock = net_->guard();
  uint32_t p;
  int32_t s;
  decode(buf.opaque, p, s);
  if (p != index_ || s < 0 || static_cast<uint32_t>(s) >= slots_.size())
    sim_fatal("tx_free of a foreign buffer", p, s);
  if (slots_[s].state != kTxUser) sim_fatal("tx_free of a buffer not held", p, s);
  --held_;
  --tx_kept_;
  release(s);
}

bool SimPort::rx_push(SimPort* owner, int32_t slot) {
  if (rx_count_ == rx_ring_.size()) {
    if (!cfg_.grow) return false;
    std::vector<RxEntry> ring(rx_ring_.size() * 2);
    for (uint32_t i = 0; i < rx_count_; ++i) ring[i] = rx_ring_[(rx_head_ + i) % rx_ring_.size()];
    rx_ring_ = std::move(ring);
    rx_head_ = 0;
  }
  rx_ring_[(rx_head_ + rx_count_) % rx_ring_.size()] = {owner, slot};
  ++rx_count_;
  owner->slots_[slot].state = kRxQueued;
  return true;
}

uint32_t SimPort::rx_burst(engine::PacketBuf* bufs, uint32_t n) {
  auto lock = net_->guard();
  if (cfg_.deliver_on_rx) net_->deliver_due_unlocked();
  uint32_t k = 0;
  while (k < n && rx_count_ > 0) {
    RxEntry e = rx_ring_[rx_head_];
    rx_head_ = static_cast<uint32_t>((rx_head_ + 1) % rx_ring_.size());
    --rx_count_;
    e.owner->slots_[e.slot].state = kRxUser;
    bufs[k].data = e.owner->slots_[e.slot].data.get();
    bufs[k].len = e.owner->slots_[e.slot].len;
    bufs[k].opaque = encode(e.owner->index_, e.slot);
    ++held_;
    ++rx_frames_;
    ++k;
  }
  net_->activity_ += k;
  return k;
}

void SimPort::rx_free(engine::PacketBuf* bufs, uint32_t n) {
  auto lock = net_->guard();
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t p;
    int32_t s;
    decode(bufs[i].opaque, p, s);
    if (p >= net_->ports_.size()) sim_fatal("rx_free of a foreign buffer", p, s);
    SimPort& owner = *net_->ports_[p];
    if (s < 0 || static_cast<uint32_t>(s) >= owner.slots_.size())
      sim_fatal("rx_free of a foreign buffer", p, s);
    if (owner.slots_[s].state != kRxUser) sim_fatal("rx_free of a buffer not received", p, s);
    --held_;
    owner.release(s);
  }
}

// ---- SimNet ------------------------------------------------------------------------------------------

SimNet::SimNet(uint64_t seed) : seed_(seed) {}
SimNet::~SimNet() = default;

SimPort& SimNet::add_port(const PortConfig& cfg) {
  auto idx = static_cast<uint32_t>(ports_.size());
  ports_.push_back(std::unique_ptr<SimPort>(new SimPort(this, idx, cfg)));
  return *ports_.back();
}

void SimNet::connect(uint32_t a, uint32_t b, const LinkConfig& cfg) {
  for (auto [f, t] : {std::pair{a, b}, std::pair{b, a}}) {
    Link l;
    l.from = f;
    l.to = t;
    l.cfg = cfg;
    // Each direction draws from its own stream, so adding traffic on one link never perturbs another's
    // faults.
    l.rng.reseed(seed_ * 0x100000001b3ull + (uint64_t{f} << 20) + t + 1);
    links_.push_back(std::move(l));
  }
  events_.reserve(links_.size() * 4096);
}

SimNet::Link* SimNet::find_link(uint32_t from, uint32_t to) {
  for (auto& l : links_)
    if (l.from == from && l.to == to) return &l;
  return nullptr;
}
const SimNet::Link* SimNet::find_link(uint32_t from, uint32_t to) const {
  for (auto& l : links_)
    if (l.from == from && l.to == to) return &l;
  return nullptr;
}

void SimNet::set_link(uint32_t from, uint32_t to, const LinkConfig& cfg) {
  link_config(from, to) = cfg;
}

LinkConfig& SimNet::link_config(uint32_t from, uint32_t to) {
  Link* l = find_link(from, to);
  if (!l) sim_fatal("no such link", from, to);
  return l->cfg;
}

const LinkStats& SimNet::link_stats(uint32_t from, uint32_t to) const {
  const Link* l = find_link(from, to);
  if (!l) sim_fatal("no such link", from, to);
  return l->stats;
}

LinkStats SimNet::total_stats() const {
  LinkStats t;
  for (auto& l : links_) {
    t.sent += l.stats.sent;
    t.delivered += l.stats.delivered;
    t.dropped += l.stats.dropped;
    t.duplicated += l.stats.duplicated;
    t.reordered += l.stats.reordered;
    t.corrupted += l.stats.corrupted;
    t.oversize += l.stats.oversize;
    t.rx_overflow += l.stats.rx_overflow;
    t.bytes += l.stats.bytes;
    t.queue_drops += l.stats.queue_drops;
    t.ce_marked += l.stats.ce_marked;
    t.max_queue_bytes = std::max(t.max_queue_bytes, l.stats.max_queue_bytes);
  }
  return t;
}

// Like a switch: by destination MAC, else by destination IP among the sender's neighbours, else the only
// neighbour of a point-to-point cable.
SimNet::Link* SimNet::route(SimPort& from, const uint8_t* f, uint32_t len) {
  Link* only = nullptr;
  unsigned n = 0;
  for (auto& l : links_) {
    if (l.from != from.index_) continue;
    ++n;
    only = &l;
    if (len >= 6 && std::memcmp(f, ports_[l.to]->attr_.mac.data(), 6) == 0) return &l;
  }
  if (len >= 14) {
    uint32_t off = 12;
    uint16_t et = wire::load_be16(f + off);
    if (et == wire::kEtherTypeVlan && len >= 18) {
      off += 4;
      et = wire::load_be16(f + off);
    }
    off += 2;
    wire::Gid dst{};
    bool have = false;
    if (et == wire::kEtherTypeIpv4 && len >= off + 20) {
      dst = wire::gid_from_ipv4({f[off + 16], f[off + 17], f[off + 18], f[off + 19]});
      have = true;
    } else if (et == wire::kEtherTypeIpv6 && len >= off + 40) {
      std::memcpy(dst.data(), f + off + 24, 16);
      have = true;
    }
    if (have)
      for (auto& l : links_)
        if (l.from == from.index_)
          for (auto& g : ports_[l.to]->attr_.gids)
            if (g == dst) return &l;
  }
  return n == 1 ? only : nullptr;
}

void SimNet::push_event(const Event& e) {
  events_.push_back(e);
  std::push_heap(events_.begin(), events_.end(), [](const Event& a, const Event& b) {
    return a.time != b.time ? a.time > b.time : a.seq > b.seq;
  });
}

SimNet::Event SimNet::pop_event() {
  std::pop_heap(events_.begin(), events_.end(), [](const Event& a, const Event& b) {
    return a.time != b.time ? a.time > b.time : a.seq > b.seq;
  });
  Event e = events_.back();
  events_.pop_back();
  return e;
}

uint64_t SimNet::next_event_time() const {
  auto lock = guard();
  return events_.empty() ? kNever : events_.front().time;
}

uint32_t SimNet::in_flight_to(uint32_t to) const {
  auto lock = guard();
  uint32_t n = 0;
  for (auto& e : events_) n += links_[e.link].to == to;
  return n;
}

uint64_t SimNet::next_delivery_to(uint32_t to) const {
  auto lock = guard();
  uint64_t t = kNever;
  for (auto& e : events_)
    if (links_[e.link].to == to) t = std::min(t, e.time);
  return t;
}

void SimNet::schedule(Link& l, SimPort* owner, int32_t slot, uint64_t extra_ns, uint64_t t_in) {
  uint64_t t = t_in;
  if (l.cfg.rate_bps) {
    uint64_t start = std::max(t, l.busy_until);
    uint64_t bits = uint64_t{owner->slots_[slot].len} * 8;
    l.busy_until = start + (bits * 1000000000ull + l.cfg.rate_bps - 1) / l.cfg.rate_bps;
    t = l.busy_until;
  }
  t += l.cfg.latency_ns + extra_ns;
  if (l.cfg.jitter_ns) t += l.rng.range(0, l.cfg.jitter_ns);
  push_event({t, seq_++, static_cast<uint32_t>(&l - links_.data()), owner, slot});
}

// Flips 1..3 bits among the bytes the ICRC covers (from the BTH to the end, less the masked BTH byte 4), so a
// corrupted frame is always detectable; bits outside (MACs, TTL, ...) are not the ICRC's to catch.
void SimNet::corrupt(Link& l, uint8_t* f, uint32_t len) {
  wire::Packet pkt;
  wire::ParseOptions opt;
  opt.verify_icrc = false;
  opt.verify_checksums = false;
  uint32_t lo = 0, hi = len;
  if (wire::parse_frame(wire::ByteSpan(f, len), pkt, opt) == wire::ParseError::ok) {
    lo = pkt.bth_offset;
    hi = pkt.frame_len;
  }
  if (hi <= lo) return;
  unsigned flips = static_cast<unsigned>(l.rng.range(1, 3));
  uint64_t used[3] = {~0ull, ~0ull, ~0ull};
  for (unsigned i = 0; i < flips;) {
    uint64_t bit = l.rng.below(uint64_t{hi - lo} * 8);
    uint32_t byte = lo + static_cast<uint32_t>(bit / 8);
    if (pkt.bth_offset && byte == pkt.bth_offset + 4) continue;  // FECN/BECN/resv: masked out of the ICRC
    if (bit == used[0] || bit == used[1]) continue;              // two flips of one bit would cancel
    used[i] = bit;
    f[byte] ^= static_cast<uint8_t>(1u << (bit % 8));
    ++i;
  }
}

void SimNet::transmit(SimPort& from, int32_t slot) {
  uint8_t* f = from.slots_[slot].data.get();
  uint32_t len = from.slots_[slot].len;
  Link* l = route(from, f, len);
  if (!l) {
    ++unroutable_;
    from.release(slot);
    return;
  }
  uint64_t t_in = clock_.now_ns();
  if (from.cfg_.line_rate_bps) {  // serialised by the sender's NIC first (tx_burst allowed it)
    const uint64_t start = std::max(t_in, from.nic_free_at_);
    from.nic_free_at_ =
        start + (uint64_t{len} * 8 * 1000000000ull + from.cfg_.line_rate_bps - 1) / from.cfg_.line_rate_bps;
    t_in = from.nic_free_at_;
  }
  if (on_transmit) on_transmit(l->from, l->to, f, len);
  ++l->stats.sent;
  if (drop_if && drop_if(l->from, l->to, f, len)) {
    ++l->stats.dropped;
    from.release(slot);
    return;
  }
  uint64_t extra = 0;
  if (on_frame) {
    FrameVerdict v;
    on_frame(l->from, l->to, f, len, v);
    if (v.drop) {
      ++l->stats.dropped;
      from.release(slot);
      return;
    }
    if (v.duplicate) {
      int32_t copy = from.grab(len);
      if (copy >= 0) {
        std::memcpy(from.slots_[copy].data.get(), f, len);
        from.slots_[copy].len = len;
        from.slots_[copy].state = kInFlight;
        ++l->stats.duplicated;
        schedule(*l, &from, copy, v.dup_delay_ns, t_in);
      }
    }
    extra = v.delay_ns;
  }
  uint32_t mtu = l->cfg.mtu ? l->cfg.mtu : from.attr_.mtu;
  // The Ethernet header (and a VLAN tag) is not part of the IP MTU.
  uint32_t l2 = (len >= 14 && wire::load_be16(f + 12) == wire::kEtherTypeVlan) ? 18 : 14;
  if (len > mtu + l2) {
    ++l->stats.oversize;
    from.release(slot);
    return;
  }
  // Every fault draws the same number of random values whatever the outcome, so one fault's rate does not
  // shift the next frame's other decisions.
  bool drop = l->rng.chance(l->cfg.drop);
  bool dup = l->rng.chance(l->cfg.duplicate);
  bool reorder = l->rng.chance(l->cfg.reorder);
  bool bad = l->rng.chance(l->cfg.corrupt);
  if (drop) {
    ++l->stats.dropped;
    from.release(slot);
    return;
  }
  if (dup) {
    int32_t copy = from.grab(len);
    if (copy >= 0) {
      std::memcpy(from.slots_[copy].data.get(), f, len);
      from.slots_[copy].len = len;
      from.slots_[copy].state = kInFlight;
      ++l->stats.duplicated;
      // The copy may itself be corrupted independently: faults compose as on a real path.
      if (l->rng.chance(l->cfg.corrupt)) {
        corrupt(*l, from.slots_[copy].data.get(), len);
        ++l->stats.corrupted;
      }
      schedule(*l, &from, copy, l->rng.range(0, l->cfg.reorder_delay_ns), t_in);
    }
  }
  if (bad) {
    corrupt(*l, f, len);
    ++l->stats.corrupted;
  }
  if (reorder) ++l->stats.reordered;
  if (l->cfg.rate_bps && (l->cfg.queue_limit_bytes || l->cfg.ecn_kmax_bytes)) {
    const uint64_t now = clock_.now_ns();
    const uint64_t queued = l->busy_until > now
                                ? static_cast<uint64_t>(static_cast<double>(l->busy_until - now) *
                                                        static_cast<double>(l->cfg.rate_bps) / 8e9)
                                : 0;
    if (l->cfg.queue_limit_bytes && queued + len > l->cfg.queue_limit_bytes) {
      ++l->stats.queue_drops;
      from.release(slot);
      return;
    }
    l->stats.max_queue_bytes = std::max(l->stats.max_queue_bytes, queued + len);
    if (l->cfg.ecn_kmax_bytes && queued > l->cfg.ecn_kmin_bytes) {
      // drawn only where marking is configured, so other links' random streams are unchanged
      const double span =
          static_cast<double>(l->cfg.ecn_kmax_bytes - std::min(l->cfg.ecn_kmin_bytes, l->cfg.ecn_kmax_bytes));
      const double p =
          queued >= l->cfg.ecn_kmax_bytes
              ? 1.0
              : l->cfg.ecn_pmax * static_cast<double>(queued - l->cfg.ecn_kmin_bytes) / std::max(span, 1.0);
      if (l->rng.chance(p) && mark_ce(f, len)) ++l->stats.ce_marked;
    }
  }
  schedule(*l, &from, slot, extra + (reorder ? l->cfg.reorder_delay_ns : 0), t_in);
}

bool SimNet::deliver_due() {
  auto lock = guard();
  return deliver_due_unlocked();
}

bool SimNet::deliver_due_unlocked() {
  bool any = false;
  while (!events_.empty() && events_.front().time <= clock_.now_ns()) {
    Event e = pop_event();
    Link& l = links_[e.link];
    SimPort& to = *ports_[l.to];
    if (to.rx_push(e.owner, e.slot)) {
      ++l.stats.delivered;
      l.stats.bytes += e.owner->slots_[e.slot].len;
    } else {
      ++l.stats.rx_overflow;
      e.owner->release(e.slot);
    }
    any = true;
  }
  return any;
}

void SimNet::step() {
  if (deliver_due()) ++activity_;
  for (auto& n : nodes_)
    if (n.progress && n.progress()) ++activity_;
}

bool SimNet::run_until(const std::function<bool()>& pred, uint64_t deadline_ns) {
  // Without a next_deadline a node is polled every kPollNs of virtual time while nothing else happens.
  constexpr uint64_t kPollNs = 1000;
  constexpr unsigned kMaxSameTime = 1u << 20;  // a node that keeps transmitting at one instant is a livelock
  unsigned same_time = 0;
  for (;;) {
    uint64_t before = activity_;
    step();
    if (pred()) return true;
    bool rx_waiting = false;
    for (auto& p : ports_) rx_waiting |= p->rx_count_ > 0;
    if ((activity_ != before || rx_waiting || next_event_time() <= clock_.now_ns()) &&
        ++same_time < kMaxSameTime)
      continue;
    same_time = 0;
    uint64_t now = clock_.now_ns();
    uint64_t t = next_event_time();
    for (auto& p : ports_)
      if (p->tx_refused_) t = std::min(t, std::max(p->nic_free_at_, now + 1));
    for (auto& n : nodes_) {
      uint64_t d = n.next_deadline ? n.next_deadline() : now + kPollNs;
      // A deadline already due whose progress() did nothing is not a reason to spin: go on to the next event.
      if (d > now) t = std::min(t, d);
    }
    if (t == kNever) return false;  // nothing can ever happen again
    if (t > deadline_ns) {
      if (now < deadline_ns) {
        clock_.set(deadline_ns);
        step();
      }
      return pred();
    }
    clock_.set(std::max(t, now + 1));
  }
}

bool SimNet::run_until_idle(uint64_t deadline_ns) {
  return run_until(
      [&] {
        if (!events_.empty()) return false;
        for (auto& p : ports_)
          if (p->rx_count_) return false;
        for (auto& n : nodes_)
          if (n.next_deadline && n.next_deadline() != kNever) return false;
        return true;
      },
      deadline_ns);
}

wire::MacAddr sim_mac(uint32_t i) {
  return {0x02, 0, 0, 0, static_cast<uint8_t>(i >> 8), static_cast<uint8_t>(i + 1)};
}

wire::Gid sim_gid_v6(uint32_t i) {
  wire::Gid g{};
  g[0] = 0xfd;
  g[14] = static_cast<uint8_t>(i >> 8);
  g[15] = static_cast<uint8_t>(i + 1);
  return g;
}

wire::Gid sim_gid_v4(uint32_t i) {
  return wire::gid_from_ipv4({10, 0, static_cast<uint8_t>(i >> 8), static_cast<uint8_t>(i + 1)});
}

bool mark_ce(uint8_t* f, uint32_t len) {
  if (len < 14) return false;
  uint32_t l3 = 14;
  uint16_t type = wire::load_be16(f + 12);
  if (type == wire::kEtherTypeVlan) {
    if (len < 18) return false;
    type = wire::load_be16(f + 16);
    l3 = 18;
  }
  if (type == 0x0800 && len >= l3 + 20) {
    uint8_t* ip = f + l3;
    const uint32_t ihl = (ip[0] & 0xf) * 4u;
    if ((ip[1] & 3) == 0 || ihl < 20 || len < l3 + ihl) return false;
    ip[1] |= 3;
    ip[10] = ip[11] = 0;
    uint32_t sum = 0;
    for (uint32_t i = 0; i < ihl; i += 2) sum += wire::load_be16(ip + i);
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    const uint16_t csum = static_cast<uint16_t>(~sum);
    ip[10] = static_cast<uint8_t>(csum >> 8);
    ip[11] = static_cast<uint8_t>(csum);
    return true;
  }
  if (type == 0x86dd && len >= l3 + 40) {
    uint8_t* ip = f + l3;  // traffic class = low 4 bits of byte 0, high 4 of byte 1; ECN its low 2 bits
    if ((ip[1] & 0x30) == 0) return false;
    ip[1] |= 0x30;
    return true;
  }
  return false;
}

std::string describe(const LinkStats& s) {
  char b[384];
  std::snprintf(b, sizeof b,
                "sent=%llu delivered=%llu dropped=%llu duplicated=%llu reordered=%llu corrupted=%llu "
                "oversize=%llu rx_overflow=%llu queue_drops=%llu ce_marked=%llu max_queue_bytes=%llu",
                static_cast<unsigned long long>(s.sent), static_cast<unsigned long long>(s.delivered),
                static_cast<unsigned long long>(s.dropped), static_cast<unsigned long long>(s.duplicated),
                static_cast<unsigned long long>(s.reordered), static_cast<unsigned long long>(s.corrupted),
                static_cast<unsigned long long>(s.oversize), static_cast<unsigned long long>(s.rx_overflow),
                static_cast<unsigned long long>(s.queue_drops), static_cast<unsigned long long>(s.ce_marked),
                static_cast<unsigned long long>(s.max_queue_bytes));
  return b;
}

}  // namespace urxe::sim
