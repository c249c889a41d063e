// Capture replay into the engine: see replay.h and tests/replay/README.md.
#include "tests/replay/replay.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "engine/engine.h"
#include "tools/pcap_decode.h"
#include "wire/packet.h"
#include "wire/psn.h"

namespace urxe::replay {
namespace {

using namespace urxe::engine;
namespace w = urxe::wire;
using Bytes = std::vector<uint8_t>;

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

std::string mac_str(const w::MacAddr& m) {
  return fmt("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
}

// One RoCE frame, from the capture or emitted by the engine.
struct Frame {
  size_t no = 0;        // capture: 1-based frame number; emitted: 1-based emission order
  uint64_t t = 0;       // capture: ns since the first frame; emitted: engine clock
  bool played = false;  // sent by the played side (capture) / by the engine (emitted)
  Bytes bytes;
  w::Packet pkt;
  Bytes data;  // payload without pad
  const w::OpcodeInfo& info() const { return *pkt.info; }
};

bool parse(Frame& f) {
  w::ParseError e = w::parse_frame(w::ByteSpan(f.bytes.data(), f.bytes.size()), f.pkt);
  if (e != w::ParseError::ok) return false;
  f.data.assign(f.pkt.payload.begin(), f.pkt.payload.end());
  f.pkt.payload = {};
  return true;
}

// ---- the engine's world: a port fed from the capture, a manual clock ----

struct ManualClock : Clock {
  uint64_t t = 1'000'000'000;
  uint64_t now_ns() const override { return t; }
};

class ReplayPort : public Port {
 public:
  ReplayPort(PortAttr a, const ManualClock& c) : attr_(std::move(a)), clock_(c) {}
  const PortAttr& attr() const override { return attr_; }
  bool tx_alloc(uint32_t size, PacketBuf& buf) override {
    auto* v = new Bytes(size);
    buf = PacketBuf{v->data(), size, v};
    return true;
  }
  uint32_t tx_burst(PacketBuf* bufs, uint32_t n) override {
    for (uint32_t i = 0; i < n; i++) {
      auto* v = static_cast<Bytes*>(bufs[i].opaque);
      v->resize(bufs[i].len);
      sent.push_back(Frame{sent.size() + 1, clock_.t, true, std::move(*v), {}, {}});
      delete v;
    }
    return n;
  }
  void tx_free(PacketBuf& buf) override { delete static_cast<Bytes*>(buf.opaque); }
  uint32_t rx_burst(PacketBuf* bufs, uint32_t n) override {
    uint32_t k = 0;
    for (; k < n && !inbox.empty(); k++) {
      auto* v = new Bytes(std::move(inbox.front()));
      inbox.pop_front();
      bufs[k] = PacketBuf{v->data(), static_cast<uint32_t>(v->size()), v};
    }
    return k;
  }
  void rx_free(PacketBuf* bufs, uint32_t n) override {
    for (uint32_t i = 0; i < n; i++) delete static_cast<Bytes*>(bufs[i].opaque);
  }
  std::deque<Bytes> inbox;
  std::vector<Frame> sent;

 private:
  PortAttr attr_;
  const ManualClock& clock_;
};

// ---- what the capture says ----

// One message of one requester, rebuilt from the distinct PSNs of its packets (first copy of each).
struct Msg {
  uint32_t psn = 0;   // first PSN
  uint32_t npsn = 1;  // PSNs it occupies (READ: one per response packet)
  uint32_t last = 0;  // psn + npsn - 1
  w::OpKind kind = w::OpKind::none;
  const Frame* head = nullptr;  // the first packet (RETH, AtomicETH, DETH, ...)
  const Frame* tail = nullptr;  // the last packet (ImmDt, IETH, SE)
  Bytes data;                   // SEND/WRITE payload
  size_t trigger = ~size_t{0};  // capture index of the earliest frame of the message
  uint32_t len() const {
    return kind == w::OpKind::rdma_read_request ? head->pkt.reth.dma_len : static_cast<uint32_t>(data.size());
  }
  bool takes_recv() const {
    return kind == w::OpKind::send || (kind == w::OpKind::rdma_write && tail->info().with_imm);
  }
};

// One connection (RC/UC: a QP pair; UD: one of the played side's QPs).
struct Conn {
  QpType type = QPT_RC;
  uint32_t lqpn = 0;            // the played side's QPN (0: never on the wire; the engine picks one)
  uint32_t rqpn = 0;            // the fed side's QPN (RC/UC)
  std::vector<size_t> in, out;  // capture indices: fed → played, played → fed
  uint32_t mtu = 0;
  std::vector<Msg> in_msgs, out_msgs;  // requests of the fed side / of the played side
  uint32_t qpn = 0;                    // as created in the engine
  uint32_t rq_psn = 0, sq_psn = 0;
  // requester side: local buffer and where each message's data or result lives
  Bytes lbuf;
  std::vector<uint64_t> loff;
  uint32_t lkey = 0;
  // receive side
  Bytes rbuf;
  uint32_t rslot = 0, rkey_recv = 0;
};

uint32_t transport_of(const w::Packet& p) {
  switch (p.info->transport) {
    case w::Transport::rc:
      return QPT_RC;
    case w::Transport::uc:
      return QPT_UC;
    case w::Transport::ud:
      return QPT_UD;
    default:
      return 0;
  }
}

uint32_t round_mtu(uint32_t n) {
  uint32_t m = 256;
  while (m < n && m < 4096) m <<= 1;
  return m;
}

Mtu mtu_enum(uint32_t bytes) {
  return bytes <= 256    ? MTU_256
         : bytes <= 512  ? MTU_512
         : bytes <= 1024 ? MTU_1024
         : bytes <= 2048 ? MTU_2048
                         : MTU_4096;
}

// Memory of one rkey as the fed side's requests see it, byte by byte.
struct Region {
  uint32_t rkey = 0;
  uint64_t lo = ~0ull, hi = 0;
  Bytes init, cur;
  std::vector<uint8_t> st;  // 0 untouched, 1 defined (cur), 2 undefined (data the capture does not show)
  Bytes mem;                // the engine's memory
};

class Replayer {
 public:
  Replayer(const std::string& path, const Options& opt) : path_(path), opt_(opt) {}
  Result run();

 private:
  bool load();
  bool build_conns();
  bool build_msgs(Conn& c, const std::vector<size_t>& frames, std::vector<Msg>& out, const char* who);
  bool build_memory();
  bool setup_engine();
  void post_msg(Conn& c, size_t k);
  void drain();
  void advance_to(uint64_t t);
  void compare();
  void compare_requests(Conn& c, const std::vector<const Frame*>& ours);
  void compare_responses(Conn& c, const std::vector<const Frame*>& ours);
  void check_completions();
  void check_memory();
  void write_pcap();
  void fail(std::string s) { r_.failures.push_back(std::move(s)); }
  void diff(std::string s) { r_.differences.push_back(std::move(s)); }
  bool cannot(std::string s) {
    r_.replayable = false;
    r_.why = std::move(s);
    return false;
  }
  Region* region_of(uint32_t rkey, uint64_t va, uint64_t len) {
    auto it = regions_.find(rkey);
    if (it == regions_.end() || va < it->second.lo || va + len > it->second.hi) return nullptr;
    return &it->second;
  }

  std::string path_;
  Options opt_;
  Result r_;
  std::vector<Frame> cap_;
  w::MacAddr play_mac_{}, peer_mac_{};
  w::Gid play_gid_{}, peer_gid_{};
  std::vector<Conn> conns_;
  std::map<uint32_t, Region> regions_;
  struct Patch {  // a byte the application wrote locally, seen only in a later READ response or atomic ACK
    size_t at;    // applied before capture frame index `at` is fed
    Region* r;
    size_t off;
    uint8_t v;
  };
  std::vector<Patch> patches_;
  std::unique_ptr<ManualClock> clock_;
  std::unique_ptr<ReplayPort> port_;
  std::unique_ptr<Engine> eng_;
  uint32_t pd_ = 0, cq_ = 0, srq_ = 0;
  std::map<std::pair<w::MacAddr, w::Gid>, uint32_t> ahs_;
  std::vector<std::pair<size_t, size_t>> posted_;  // (conn, msg) in post order
  std::vector<size_t> next_post_;
  std::vector<Wc> wcs_;
};

bool Replayer::load() {
  tools::PcapReader rd;
  std::string err;
  if (!rd.open(path_, err)) return cannot("cannot open: " + err);
  tools::PcapReader::Frame f;
  int64_t s0 = 0;
  uint32_t n0 = 0;
  size_t no = 0;
  int rc;
  std::set<w::MacAddr> macs;
  while ((rc = rd.next(f, err)) == 1) {
    no++;
    if (no == 1) s0 = f.ts_sec, n0 = f.ts_nsec;
    Frame fr;
    fr.no = no;
    fr.t = static_cast<uint64_t>((f.ts_sec - s0) * 1'000'000'000ll + (int64_t(f.ts_nsec) - n0));
    fr.bytes.assign(f.eth.begin(), f.eth.end());
    if (!parse(fr)) continue;  // not RoCE (TCP out-of-band exchange, ARP, ...)
    if (fr.pkt.bth.dqpn == 1 || !transport_of(fr.pkt)) continue;  // CM MADs to QP1, CNPs: not the engine's
    if (!opt_.peer_mac.empty() &&
        !((mac_str(fr.pkt.eth.src) == opt_.play_mac && mac_str(fr.pkt.eth.dst) == opt_.peer_mac) ||
          (mac_str(fr.pkt.eth.src) == opt_.peer_mac && mac_str(fr.pkt.eth.dst) == opt_.play_mac)))
      continue;  // a third host's traffic
    macs.insert(fr.pkt.eth.src);
    macs.insert(fr.pkt.eth.dst);
    cap_.push_back(std::move(fr));
  }
  if (rc < 0) return cannot("read error: " + err);
  if (macs.size() != 2)
    return cannot(fmt("RoCE frames between %zu MAC addresses, not the two sides of a link", macs.size()));
  bool found = false;
  for (const auto& m : macs) {
    if (mac_str(m) == opt_.play_mac)
      play_mac_ = m, found = true;
    else
      peer_mac_ = m;
  }
  if (!found) return cannot("no RoCE frame from or to " + opt_.play_mac);
  for (auto& fr : cap_) {
    fr.played = fr.pkt.eth.src == play_mac_;
    (fr.played ? play_gid_ : peer_gid_) = fr.pkt.src_gid();
    (fr.played ? peer_gid_ : play_gid_) = fr.pkt.dst_gid();
  }
  return true;
}

bool Replayer::build_conns() {
  // RC/UC: the played side's QPN is the destination QPN of what it receives, the fed side's QPN that of what
  // it sends; a pair shares the UDP source port (rxe and urxe hash both QPNs symmetrically), else, when each
  // side has one QP of the type, those two.
  struct Flow {
    std::set<uint16_t> sports;
    std::vector<size_t> idx;
  };
  std::map<std::pair<uint32_t, uint32_t>, Flow> to_play, to_peer;  // (type, dqpn)
  std::map<uint32_t, Conn> ud;                                     // played UD QPN → conn
  for (size_t i = 0; i < cap_.size(); i++) {
    const w::Packet& p = cap_[i].pkt;
    uint32_t type = transport_of(p);
    if (type == QPT_UD) {
      uint32_t q = cap_[i].played ? p.deth.src_qp : p.bth.dqpn;
      Conn& c = ud[q];
      c.type = QPT_UD;
      c.lqpn = q;
      (cap_[i].played ? c.out : c.in).push_back(i);
      continue;
    }
    Flow& fl = (cap_[i].played ? to_peer : to_play)[{type, p.bth.dqpn}];
    fl.sports.insert(p.udp.sport);
    fl.idx.push_back(i);
  }
  std::set<std::pair<uint32_t, uint32_t>> used_peer;
  for (auto& [k, fl] : to_play) {
    Conn c;
    c.type = static_cast<QpType>(k.first);
    c.lqpn = k.second;
    c.in = fl.idx;
    std::vector<std::pair<uint32_t, uint32_t>> cand;
    for (auto& [k2, fl2] : to_peer)
      if (k2.first == k.first)
        for (uint16_t s : fl.sports)
          if (fl2.sports.count(s)) {
            cand.push_back(k2);
            break;
          }
    if (cand.empty()) {
      size_t n_play = 0, n_peer = 0;
      for (auto& [k3, f3] : to_play) n_play += k3.first == k.first;
      for (auto& [k3, f3] : to_peer) n_peer += k3.first == k.first;
      if (n_play == 1 && n_peer == 1)
        for (auto& [k2, fl2] : to_peer)
          if (k2.first == k.first) cand.push_back(k2);
    }
    if (cand.size() > 1)
      return cannot(fmt("QP 0x%x: cannot tell its peer QP (several share its UDP port)", c.lqpn));
    if (!cand.empty()) {
      if (used_peer.count(cand[0])) return cannot(fmt("peer QP 0x%x paired twice", cand[0].second));
      used_peer.insert(cand[0]);
      c.rqpn = cand[0].second;
      c.out = to_peer[cand[0]].idx;
    }
    conns_.push_back(std::move(c));
  }
  for (auto& [k, fl] : to_peer) {
    if (used_peer.count(k)) continue;
    Conn c;  // the played side only sends on it (UC): its own QPN never appears on the wire
    c.type = static_cast<QpType>(k.first);
    c.rqpn = k.second;
    c.out = fl.idx;
    conns_.push_back(std::move(c));
  }
  for (auto& [q, c] : ud) conns_.push_back(std::move(c));
  // path MTU: the payload of any FIRST/MIDDLE packet; else the largest ONLY payload rounded up
  for (Conn& c : conns_) {
    uint32_t full = 0, only = 0;
    for (auto* v : {&c.in, &c.out})
      for (size_t i : *v) {
        const Frame& f = cap_[i];
        if (f.info().position == w::Position::first || f.info().position == w::Position::middle)
          full = std::max<uint32_t>(full, static_cast<uint32_t>(f.data.size()));
        else
          only = std::max<uint32_t>(only, static_cast<uint32_t>(f.data.size()));
      }
    c.mtu = full ? full : std::max<uint32_t>(round_mtu(only), 1024);
    if (c.type == QPT_UD) c.mtu = 4096;
    if (full && (full & (full - 1))) return cannot(fmt("path MTU %u is not a power of two", full));
  }
  return true;
}

// The requests among `frames` (one side's packets of one connection), as messages in PSN order.
bool Replayer::build_msgs(Conn& c, const std::vector<size_t>& frames, std::vector<Msg>& out,
                          const char* who) {
  std::map<int32_t, size_t> first;  // PSN relative to the first request seen → first copy's index
  std::map<int32_t, size_t> earliest;
  bool have = false;
  uint32_t base = 0;
  for (size_t i : frames) {
    const Frame& f = cap_[i];
    if (!f.info().is_request) continue;
    if (!have) base = f.pkt.bth.psn, have = true;
    int32_t d = w::psn_diff(f.pkt.bth.psn, base);
    first.emplace(d, i);
    earliest.emplace(d, i);
  }
  Msg* cur = nullptr;
  for (auto& [d, i] : first) {
    const Frame& f = cap_[i];
    const uint32_t psn = f.pkt.bth.psn;
    if (!out.empty()) {
      const Msg& prev = out.back();
      if (prev.kind == w::OpKind::rdma_read_request && w::psn_gt(psn, prev.psn) &&
          w::psn_le(psn, prev.last)) {
        if (f.info().kind != w::OpKind::rdma_read_request)
          return cannot(fmt("%s frame %zu: a request inside a READ's PSN range", who, f.no));
        continue;  // a READ re-issued from the middle of its response (go-back-N): not a new message
      }
    }
    if (f.info().is_first() || c.type == QPT_UD) {
      if (cur && cur->tail == nullptr)
        return cannot(fmt("%s: message at PSN 0x%x has no last packet", who, cur->psn));
      out.push_back(Msg{});
      cur = &out.back();
      cur->psn = psn;
      cur->kind = f.info().kind;
      cur->head = &f;
      cur->trigger = i;
      if (cur->kind == w::OpKind::rdma_read_request) {
        uint32_t len = f.pkt.reth.dma_len;
        cur->npsn = len ? (len + c.mtu - 1) / c.mtu : 1;
      }
    } else {
      if (!cur || cur->tail || w::psn_add(cur->last, 1) != psn)
        return cannot(
            fmt("%s frame %zu: PSN 0x%x does not continue a message (packets missing from the capture)", who,
                f.no, psn));
    }
    cur->last = w::psn_add(cur->psn, cur->npsn - 1);
    if (cur->kind == w::OpKind::send || cur->kind == w::OpKind::rdma_write) {
      cur->data.insert(cur->data.end(), f.data.begin(), f.data.end());
      cur->last = psn;
      cur->npsn = w::psn_sub(psn, cur->psn) + 1;
    }
    cur->trigger = std::min(cur->trigger, i);
    if (f.info().is_last() || c.type == QPT_UD) cur->tail = &f;
  }
  if (cur && !cur->tail)
    return cannot(fmt("%s: message at PSN 0x%x has no last packet in the capture", who, cur->psn));
  // a READ request retried from the middle may have come first in capture order only if earlier copies were
  // lost
  for (Msg& m : out)
    for (auto& [d, i] : earliest) {
      uint32_t psn = cap_[i].pkt.bth.psn;
      if (w::psn_ge(psn, m.psn) && w::psn_le(psn, m.last)) m.trigger = std::min(m.trigger, i);
    }
  return true;
}

// The responder's memory: one region per rkey the fed side used, with the initial bytes the played side's
// READ responses and atomic ACKs reveal, and the final bytes its requests imply (executed in PSN order).
bool Replayer::build_memory() {
  for (Conn& c : conns_)
    for (const Msg& m : c.in_msgs) {
      const w::Packet& p = m.head->pkt;
      if (m.kind == w::OpKind::rdma_write || m.kind == w::OpKind::rdma_read_request) {
        Region& r = regions_[p.reth.rkey];
        r.rkey = p.reth.rkey;
        r.lo = std::min(r.lo, p.reth.va);
        r.hi = std::max(r.hi, p.reth.va + std::max<uint64_t>(m.len(), p.reth.dma_len));
      } else if (m.kind == w::OpKind::compare_swap || m.kind == w::OpKind::fetch_add) {
        Region& r = regions_[p.atomic_eth.rkey];
        r.rkey = p.atomic_eth.rkey;
        r.lo = std::min(r.lo, p.atomic_eth.va);
        r.hi = std::max(r.hi, p.atomic_eth.va + 8);
      }
    }
  for (auto& [k, r] : regions_) {
    if (r.hi - r.lo > (256u << 20))
      return cannot(fmt("rkey 0x%x spans %llu bytes", k, (unsigned long long)(r.hi - r.lo)));
    r.init.assign(r.hi - r.lo, 0);
    r.cur = r.init;
    r.st.assign(r.hi - r.lo, 0);
  }
  for (Conn& c : conns_) {
    // the played side's responses, first copy per PSN
    std::map<uint32_t, const Frame*> resp;
    for (size_t i : c.out)
      if (cap_[i].info().is_response) resp.emplace(cap_[i].pkt.bth.psn, &cap_[i]);
    for (const Msg& m : c.in_msgs) {
      const w::Packet& p = m.head->pkt;
      if (m.kind == w::OpKind::rdma_write) {
        Region* r = region_of(p.reth.rkey, p.reth.va, m.data.size());
        for (size_t j = 0; j < m.data.size(); j++) {
          r->cur[p.reth.va - r->lo + j] = m.data[j];
          r->st[p.reth.va - r->lo + j] = 1;
        }
      } else if (m.kind == w::OpKind::rdma_read_request) {
        Region* r = region_of(p.reth.rkey, p.reth.va, p.reth.dma_len);
        for (uint32_t k = 0; k < m.npsn; k++) {
          auto it = resp.find(w::psn_add(m.psn, k));
          uint64_t off = p.reth.va - r->lo + uint64_t(k) * c.mtu;
          uint32_t n = std::min<uint32_t>(c.mtu, p.reth.dma_len - k * c.mtu);
          if (it == resp.end() || it->second->info().kind != w::OpKind::rdma_read_response) {
            for (uint32_t j = 0; j < n; j++)
              if (r->st[off + j] != 1) r->st[off + j] = 2;
            continue;
          }
          const Bytes& d = it->second->data;
          uint32_t changed = 0;
          for (uint32_t j = 0; j < n && j < d.size(); j++) {
            if (r->st[off + j] == 0)
              r->init[off + j] = d[j];
            else if (r->st[off + j] == 1 && r->cur[off + j] != d[j])
              changed++, patches_.push_back(Patch{m.trigger, r, off + j, d[j]});
            if (changed == 1 && !opt_.app_writes)
              fail(
                  fmt("the captured READ response PSN 0x%x returns bytes the earlier requests did not leave "
                      "there (from VA "
                      "0x%llx)",
                      it->first, (unsigned long long)(r->lo + off + j)));
            r->cur[off + j] = d[j];
            r->st[off + j] = 1;
          }
          if (changed)
            diff(
                fmt("the application changed %u bytes the READ at PSN 0x%x returns (response PSN 0x%x) since "
                    "the peer last "
                    "touched them: written into the engine's memory before that READ is fed",
                    changed, m.psn, it->first));
        }
      } else if (m.kind == w::OpKind::compare_swap || m.kind == w::OpKind::fetch_add) {
        Region* r = region_of(p.atomic_eth.rkey, p.atomic_eth.va, 8);
        uint64_t off = p.atomic_eth.va - r->lo;
        auto it = resp.find(m.psn);
        if (it == resp.end() || it->second->info().kind != w::OpKind::atomic_ack) {
          for (int j = 0; j < 8; j++) r->st[off + j] = 2;
          continue;
        }
        uint64_t orig = it->second->pkt.atomic_ack_eth.orig_data;
        bool untouched = true, defined = true;
        for (int j = 0; j < 8; j++) untouched &= r->st[off + j] == 0, defined &= r->st[off + j] == 1;
        if (untouched) memcpy(&r->init[off], &orig, 8);
        uint64_t model;
        memcpy(&model, &r->cur[off], 8);
        if (defined && model != orig && !opt_.app_writes)
          fail(fmt("the captured atomic ACK of PSN 0x%x returns 0x%llx, the earlier requests left 0x%llx",
                   m.psn, (unsigned long long)orig, (unsigned long long)model));
        if (defined && model != orig) {
          diff(
              fmt("the application changed the atomic target of PSN 0x%x: written into the engine's memory "
                  "before it",
                  m.psn));
          for (int j = 0; j < 8; j++)
            patches_.push_back(Patch{m.trigger, r, off + j, reinterpret_cast<uint8_t*>(&orig)[j]});
        }
        uint64_t v = orig;
        if (m.kind == w::OpKind::fetch_add)
          v = orig + p.atomic_eth.swap_add;
        else if (orig == p.atomic_eth.compare)
          v = p.atomic_eth.swap_add;
        memcpy(&r->cur[off], &v, 8);
        for (int j = 0; j < 8; j++) r->st[off + j] = 1;
      }
    }
  }
  for (auto& [k, r] : regions_) r.mem = r.init;
  return true;
}

bool Replayer::setup_engine() {
  PortAttr pa;
  pa.mac = play_mac_;
  pa.mtu = 9000;
  pa.gids = {play_gid_};
  EngineConfig cfg;
  uint32_t lo = ~0u, hi = 0;
  for (Conn& c : conns_)
    if (c.lqpn) lo = std::min(lo, c.lqpn), hi = std::max(hi, c.lqpn);
  if (lo == ~0u) lo = hi = 0x11;
  cfg.qpn_base = lo;
  cfg.device.max_qp = hi - lo + 1 + 16;  // room for QPs whose QPN the capture does not show
  uint32_t max_index = 0;
  for (auto& [k, r] : regions_) max_index = std::max(max_index, k >> 8);
  cfg.device.max_mr = std::max<uint32_t>(cfg.device.max_mr, max_index + 64);
  clock_ = std::make_unique<ManualClock>();
  port_ = std::make_unique<ReplayPort>(pa, *clock_);
  eng_ = std::make_unique<Engine>(*port_, *clock_, cfg);
  if (eng_->alloc_pd(pd_)) return cannot("alloc_pd");
  // rkeys as in the capture: the engine's rkey is index << 8 | key, the lowest free index, its key one more
  // than the last one at that index; fill lower indices with 1-byte MRs and cycle the key.
  static uint8_t dummy;
  const uint32_t all = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
  uint32_t next_index = 1;
  for (auto& [rkey, r] : regions_) {
    uint32_t idx = rkey >> 8, key = rkey & 0xff;
    if (idx < next_index)
      return cannot(fmt("rkey 0x%x: its index is taken by another rkey of the capture", rkey));
    MrInfo mi;
    for (; next_index < idx; next_index++)
      if (eng_->reg_mr(pd_, &dummy, 1, 0, ACCESS_LOCAL_WRITE, mi)) return cannot("reg_mr (filler)");
    for (uint32_t n = (key - 1) & 0xff; n > 0; n--) {
      if (eng_->reg_mr(pd_, &dummy, 1, 0, ACCESS_LOCAL_WRITE, mi) || eng_->dereg_mr(mi.lkey))
        return cannot("key cycle");
    }
    if (eng_->reg_mr(pd_, r.mem.data(), r.mem.size(), r.lo, all, mi)) return cannot("reg_mr");
    if (mi.rkey != rkey) return cannot(fmt("rkey 0x%x could not be recreated (got 0x%x)", rkey, mi.rkey));
    next_index = idx + 1;
  }
  uint32_t nwr = 64;
  for (Conn& c : conns_) nwr += 2 * static_cast<uint32_t>(c.in_msgs.size() + c.out_msgs.size());
  if (eng_->create_cq(nwr, cq_)) return cannot("create_cq");
  uint32_t nrecv_all = 0;
  for (Conn& c : conns_)
    for (const Msg& m : c.in_msgs) nrecv_all += m.takes_recv();
  if (opt_.srq) {
    SrqAttr sa;
    sa.max_wr = nrecv_all + 1;
    sa.max_sge = 1;
    if (eng_->create_srq(pd_, sa, srq_)) return cannot("create_srq");
  }
  for (Conn& c : conns_) {
    // receive buffers: one slot per message that takes a receive, as large as the largest (+ GRH on UD)
    uint32_t nrecv = 0, slot = 0;
    for (const Msg& m : c.in_msgs)
      if (m.takes_recv()) nrecv++, slot = std::max(slot, m.len());
    c.rslot = slot + (c.type == QPT_UD ? 40 : 0);
    c.rbuf.assign(std::max<size_t>(1, size_t(c.rslot) * nrecv), 0);
    MrInfo mi;
    if (eng_->reg_mr(pd_, c.rbuf.data(), c.rbuf.size(), reinterpret_cast<uintptr_t>(c.rbuf.data()),
                     ACCESS_LOCAL_WRITE, mi))
      return cannot("reg_mr (receive buffers)");
    c.rkey_recv = mi.lkey;
    // requester: message data and READ/atomic results, 8-byte aligned
    uint64_t off = 0;
    for (const Msg& m : c.out_msgs) {
      c.loff.push_back(off);
      uint64_t n = (m.kind == w::OpKind::compare_swap || m.kind == w::OpKind::fetch_add) ? 8 : m.len();
      off += (n + 7) & ~7ull;
    }
    c.lbuf.assign(std::max<uint64_t>(off, 8), 0);
    for (size_t k = 0; k < c.out_msgs.size(); k++) {
      const Msg& m = c.out_msgs[k];
      if (!m.data.empty()) memcpy(&c.lbuf[c.loff[k]], m.data.data(), m.data.size());
    }
    if (eng_->reg_mr(pd_, c.lbuf.data(), c.lbuf.size(), reinterpret_cast<uintptr_t>(c.lbuf.data()),
                     ACCESS_LOCAL_WRITE, mi))
      return cannot("reg_mr (requester buffer)");
    c.lkey = mi.lkey;

    QpInitAttr ia;
    ia.send_cq = ia.recv_cq = cq_;
    ia.srq = opt_.srq ? srq_ : 0;
    ia.qp_type = c.type;
    ia.sq_sig_all = true;
    ia.qpn = c.lqpn;
    ia.cap.max_send_wr = static_cast<uint32_t>(c.out_msgs.size()) + 1;
    ia.cap.max_recv_wr = nrecv + 1;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    if (int e = eng_->create_qp(pd_, ia, c.qpn)) return cannot(fmt("create_qp 0x%x: errno %d", c.lqpn, e));
    // PSNs: the lowest request PSN of each direction (a first packet lost in the capture shows up
    // retransmitted)
    c.rq_psn = c.in_msgs.empty() ? 0 : c.in_msgs.front().psn;
    c.sq_psn = c.out_msgs.empty() ? 0 : c.out_msgs.front().psn;
    QpAttr a;
    a.qp_state = QPS_INIT;
    a.qp_access_flags = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
    a.qkey = 0;
    for (size_t i : c.in)
      if (c.type == QPT_UD) a.qkey = cap_[i].pkt.deth.qkey;
    uint32_t m = QP_STATE | QP_PKEY_INDEX | QP_PORT | (c.type == QPT_UD ? QP_QKEY : QP_ACCESS_FLAGS);
    if (eng_->modify_qp(c.qpn, a, m)) return cannot("modify_qp INIT");
    a.qp_state = QPS_RTR;
    a.path_mtu = mtu_enum(c.mtu);
    a.dest_qp_num = c.rqpn;
    a.rq_psn = c.rq_psn;
    a.max_dest_rd_atomic = 128;
    a.min_rnr_timer = 12;
    a.ah_attr.dgid = peer_gid_;
    a.ah_attr.dmac = peer_mac_;
    a.ah_attr.sgid_index = 0;
    m = QP_STATE;
    if (c.type == QPT_RC)
      m |= QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN | QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER;
    if (c.type == QPT_UC) m |= QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN;
    if (eng_->modify_qp(c.qpn, a, m)) return cannot("modify_qp RTR");
    a.qp_state = QPS_RTS;
    a.sq_psn = c.sq_psn;
    a.timeout = opt_.timeout;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 128;
    m = QP_STATE | QP_SQ_PSN;
    if (c.type == QPT_RC) m |= QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC;
    if (eng_->modify_qp(c.qpn, a, m)) return cannot("modify_qp RTS");
    // every receive up front (the capture shows no RNR NAK from the played side; checked by the caller)
    for (uint32_t k = 0; k < nrecv; k++) {
      Sge sge{reinterpret_cast<uintptr_t>(c.rbuf.data()) + uint64_t(k) * c.rslot, c.rslot, c.rkey_recv};
      RecvWr wr;
      wr.wr_id = (uint64_t(&c - conns_.data()) << 32) | k;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      const RecvWr* bad;
      if (opt_.srq ? eng_->post_srq_recv(srq_, &wr, &bad) : eng_->post_recv(c.qpn, &wr, &bad))
        return cannot("post_recv");
    }
    if (c.type == QPT_UD)
      for (size_t i : c.out) {
        const w::Packet& p = cap_[i].pkt;
        auto key = std::make_pair(p.eth.dst, p.dst_gid());
        if (ahs_.count(key)) continue;
        AddressVector av;
        av.dgid = key.second;
        av.dmac = key.first;
        uint32_t ah;
        if (eng_->create_ah(pd_, av, ah)) return cannot("create_ah");
        ahs_[key] = ah;
      }
  }
  return true;
}

// Posts the played side's message k as the WR its application must have posted.
void Replayer::post_msg(Conn& c, size_t k) {
  const Msg& m = c.out_msgs[k];
  const w::Packet& h = m.head->pkt;
  const w::Packet& t = m.tail->pkt;
  SendWr wr;
  Sge sge{reinterpret_cast<uintptr_t>(c.lbuf.data()) + c.loff[k], m.len(), c.lkey};
  wr.wr_id = (uint64_t(&c - conns_.data()) << 32) | k;
  wr.sg_list = &sge;
  wr.num_sge = m.len() ? 1 : 0;
  if (t.bth.se) wr.send_flags |= SEND_SOLICITED;
  switch (m.kind) {
    case w::OpKind::send:
      wr.opcode = m.tail->info().with_imm   ? WR_SEND_WITH_IMM
                  : m.tail->info().with_inv ? WR_SEND_WITH_INV
                                            : WR_SEND;
      wr.imm_data = htonl(t.imm);
      wr.invalidate_rkey = t.ieth_rkey;
      if (c.type == QPT_UD) {
        wr.ud.ah = ahs_[{h.eth.dst, h.dst_gid()}];
        wr.ud.remote_qpn = h.bth.dqpn;
        wr.ud.remote_qkey = h.deth.qkey;
      }
      break;
    case w::OpKind::rdma_write:
      wr.opcode = m.tail->info().with_imm ? WR_RDMA_WRITE_WITH_IMM : WR_RDMA_WRITE;
      wr.imm_data = htonl(t.imm);
      wr.rdma.remote_addr = h.reth.va;
      wr.rdma.rkey = h.reth.rkey;
      break;
    case w::OpKind::rdma_read_request:
      wr.opcode = WR_RDMA_READ;
      wr.rdma.remote_addr = h.reth.va;
      wr.rdma.rkey = h.reth.rkey;
      break;
    case w::OpKind::compare_swap:
    case w::OpKind::fetch_add:
      wr.opcode = m.kind == w::OpKind::compare_swap ? WR_ATOMIC_CMP_AND_SWP : WR_ATOMIC_FETCH_AND_ADD;
      wr.atomic.remote_addr = h.atomic_eth.va;
      wr.atomic.rkey = h.atomic_eth.rkey;
      wr.atomic.compare_add =
          m.kind == w::OpKind::compare_swap ? h.atomic_eth.compare : h.atomic_eth.swap_add;
      wr.atomic.swap = h.atomic_eth.swap_add;
      sge.length = 8;
      wr.num_sge = 1;
      break;
    default:
      fail(fmt("frame %zu: cannot post opcode 0x%x", m.head->no, h.bth.opcode));
      return;
  }
  const SendWr* bad;
  if (int e = eng_->post_send(c.qpn, &wr, &bad))
    fail(fmt("post_send of the message at PSN 0x%x: errno %d", m.psn, e));
  posted_.emplace_back(&c - conns_.data(), k);
}

void Replayer::drain() {
  for (int i = 0; i < 100000 && eng_->progress(); i++) {
  }
  Wc wc[64];
  int n;
  while ((n = eng_->poll_cq(cq_, 64, wc)) > 0) wcs_.insert(wcs_.end(), wc, wc + n);
}

// Moves the clock to t, stopping at every engine deadline on the way (retransmit and RNR timers fire at their
// time relative to the fed frames).
void Replayer::advance_to(uint64_t t) {
  for (int i = 0; i < 100000; i++) {
    drain();
    uint64_t d = eng_->next_deadline_ns();
    if (d == 0) continue;
    if (d > t) break;
    clock_->t = std::max(clock_->t, d);
  }
  clock_->t = std::max(clock_->t, t);
  drain();
}

Result Replayer::run() {
  if (!load() || !build_conns()) return r_;
  for (Conn& c : conns_) {
    if (!build_msgs(c, c.in, c.in_msgs, "fed side") || !build_msgs(c, c.out, c.out_msgs, "played side"))
      return r_;
    for (size_t i : c.out)
      if (cap_[i].info().kind == w::OpKind::ack && cap_[i].pkt.aeth.type() == w::AethType::rnr_nak)
        return (
            cannot(fmt(
                "frame %zu: the played side sent an RNR NAK; when its application posted receives is not in "
                "the capture",
                cap_[i].no)),
            r_);
  }
  if (!build_memory() || !setup_engine()) return r_;
  next_post_.assign(conns_.size(), 0);
  const uint64_t t0 = clock_->t;
  for (size_t i = 0; i < cap_.size(); i++) {
    advance_to(t0 + cap_[i].t);
    for (size_t c = 0; c < conns_.size(); c++)
      while (next_post_[c] < conns_[c].out_msgs.size() && conns_[c].out_msgs[next_post_[c]].trigger <= i)
        post_msg(conns_[c], next_post_[c]++);
    drain();
    if (cap_[i].played) continue;
    for (const Patch& p : patches_)
      if (p.at == i) p.r->mem[p.off] = p.v;
    port_->inbox.push_back(cap_[i].bytes);
    r_.fed++;
    drain();
  }
  // let the last timers run out (a lost final ACK is retransmitted for), bounded: 10 s of engine time
  advance_to(clock_->t + 10'000'000'000ull);
  for (auto& f : port_->sent) {
    if (!parse(f)) fail(fmt("emitted frame %zu does not parse or has a bad ICRC", f.no));
  }
  r_.emitted = static_cast<uint32_t>(port_->sent.size());
  compare();
  check_completions();
  check_memory();
  for (Counter k :
       {Counter::rx_drop_parse, Counter::rx_drop_icrc, Counter::rx_drop_qpn, Counter::rx_drop_qkey})
    if (eng_->counter(k))
      fail(fmt("engine dropped %llu fed frames (%s)", (unsigned long long)eng_->counter(k), counter_name(k)));
  if (eng_->counter(Counter::rx_drop_other))
    diff(fmt("engine silently dropped %llu fed frames (rx_drop_other: stray or duplicate responses)",
             (unsigned long long)eng_->counter(Counter::rx_drop_other)));
  if (!opt_.write_pcap.empty()) write_pcap();
  return r_;
}

// ---- comparison ----

bool same_request(const Frame& a, const Frame& b, std::string& what) {
  const w::Packet &p = a.pkt, &q = b.pkt;
  std::ostringstream o;
  if (p.bth.opcode != q.bth.opcode) o << fmt(" opcode 0x%x/0x%x", p.bth.opcode, q.bth.opcode);
  if (p.bth.dqpn != q.bth.dqpn) o << fmt(" dqpn 0x%x/0x%x", p.bth.dqpn, q.bth.dqpn);
  if (p.bth.se != q.bth.se) o << " SE";
  if (p.bth.pad != q.bth.pad) o << " pad";
  if (p.bth.pkey != q.bth.pkey) o << " pkey";
  if (p.bth.tver != q.bth.tver) o << " tver";
  if (p.present & w::kReth) {
    if (p.reth.va != q.reth.va)
      o << fmt(" RETH.va 0x%llx/0x%llx", (unsigned long long)p.reth.va, (unsigned long long)q.reth.va);
    if (p.reth.rkey != q.reth.rkey) o << fmt(" RETH.rkey 0x%x/0x%x", p.reth.rkey, q.reth.rkey);
    if (p.reth.dma_len != q.reth.dma_len) o << fmt(" RETH.len %u/%u", p.reth.dma_len, q.reth.dma_len);
  }
  if (p.present & w::kAtomicEth)
    if (p.atomic_eth.va != q.atomic_eth.va || p.atomic_eth.rkey != q.atomic_eth.rkey ||
        p.atomic_eth.swap_add != q.atomic_eth.swap_add || p.atomic_eth.compare != q.atomic_eth.compare)
      o << " AtomicETH";
  if (p.present & w::kDeth)
    if (p.deth.qkey != q.deth.qkey || p.deth.src_qp != q.deth.src_qp) o << " DETH";
  if ((p.present & w::kImmDt) && p.imm != q.imm) o << " ImmDt";
  if ((p.present & w::kIeth) && p.ieth_rkey != q.ieth_rkey) o << " IETH";
  if (a.data != b.data) o << fmt(" payload (%zu/%zu bytes)", a.data.size(), b.data.size());
  what = o.str();
  return what.empty();
}

void Replayer::compare() {
  for (Conn& c : conns_) {
    std::vector<const Frame*> ours;
    for (const Frame& f : port_->sent) {
      if (!f.pkt.info) continue;
      bool mine = c.type == QPT_UD ? (f.pkt.present & w::kDeth) && f.pkt.deth.src_qp == c.qpn
                                   : f.pkt.bth.dqpn == c.rqpn && transport_of(f.pkt) == c.type;
      if (mine) ours.push_back(&f);
    }
    compare_requests(c, ours);
    compare_responses(c, ours);
    r_.summary.push_back(
        fmt("%s QP 0x%x <-> 0x%x (path MTU %u, rq_psn 0x%x, sq_psn 0x%x): fed %zu frames (%zu request "
            "messages), captured %zu from the played side (%zu request messages), engine emitted %zu",
            c.type == QPT_RC   ? "RC"
            : c.type == QPT_UC ? "UC"
                               : "UD",
            c.qpn, c.rqpn, c.mtu, c.rq_psn, c.sq_psn, c.in.size(), c.in_msgs.size(), c.out.size(),
            c.out_msgs.size(), ours.size()));
  }
}

void Replayer::compare_requests(Conn& c, const std::vector<const Frame*>& ours) {
  std::map<uint32_t, const Frame*> cap, our;
  std::map<uint32_t, int> ncap, nour;
  for (size_t i : c.out)
    if (cap_[i].info().is_request) cap.emplace(cap_[i].pkt.bth.psn, &cap_[i]), ncap[cap_[i].pkt.bth.psn]++;
  for (const Frame* f : ours)
    if (f->info().is_request) {
      auto [it, fresh] = our.emplace(f->pkt.bth.psn, f);
      nour[f->pkt.bth.psn]++;
      std::string what;
      if (!fresh && f->info().kind != w::OpKind::rdma_read_request && !same_request(*it->second, *f, what))
        fail(fmt("QP 0x%x: our retransmission of PSN 0x%x differs from our first copy:%s", c.qpn,
                 f->pkt.bth.psn, what.c_str()));
    }
  int ackreq = 0, retried_reads = 0;
  std::string ackreq_at;
  for (auto& [psn, f] : cap) {
    auto it = our.find(psn);
    if (it == our.end()) {
      fail(fmt("QP 0x%x: captured request PSN 0x%x (frame %zu, opcode 0x%x) never emitted by the engine",
               c.qpn, psn, f->no, f->pkt.bth.opcode));
      continue;
    }
    std::string what;
    if (!same_request(*f, *it->second, what)) {
      bool retry = false;  // a READ re-issued from a middle PSN: where it restarts follows the
                           // implementation's go-back-N
      for (const Msg& m : c.out_msgs)
        retry |= m.kind == w::OpKind::rdma_read_request && w::psn_gt(psn, m.psn) && w::psn_le(psn, m.last);
      if (retry)
        retried_reads++;
      else
        fail(fmt("QP 0x%x request PSN 0x%x (capture frame %zu vs ours):%s", c.qpn, psn, f->no, what.c_str()));
    }
    if (f->pkt.bth.ack_req != it->second->pkt.bth.ack_req && ackreq++ < 4)
      ackreq_at += fmt(" 0x%x(%s)", psn, f->pkt.bth.ack_req ? "captured" : "engine");
    r_.compared_requests++;
  }
  for (auto& [psn, f] : our)
    if (!cap.count(psn)) {
      bool retry = false;
      for (const Msg& m : c.out_msgs)
        retry |= m.kind == w::OpKind::rdma_read_request && w::psn_gt(psn, m.psn) && w::psn_le(psn, m.last);
      if (retry)
        retried_reads++;
      else
        fail(fmt("QP 0x%x: the engine sent request PSN 0x%x (opcode 0x%x) the capture does not have", c.qpn,
                 psn, f->pkt.bth.opcode));
    }
  if (ackreq)
    diff(fmt("QP 0x%x: AckReq bit differs on %d of %zu request PSNs (set by):%s", c.qpn, ackreq, cap.size(),
             ackreq_at.c_str()));
  if (retried_reads)
    diff(fmt("QP 0x%x: %d READ requests re-issued from a middle PSN differ or exist on one side only", c.qpn,
             retried_reads));
  size_t rc = 0, ro = 0;
  for (auto& [p, n] : ncap) rc += n - 1;
  for (auto& [p, n] : nour) ro += n - 1;
  if (rc || ro)
    diff(fmt("QP 0x%x: retransmitted request packets: captured %zu, engine %zu (timing-dependent)", c.qpn, rc,
             ro));
}

void Replayer::compare_responses(Conn& c, const std::vector<const Frame*>& ours) {
  if (c.type != QPT_RC) return;
  // the MSN each ACK must carry: messages of the fed side completed up to its PSN
  auto msn_model = [&](uint32_t psn) {
    uint32_t n = 0;
    for (const Msg& m : c.in_msgs) n += w::psn_le(m.last, psn);
    return n & 0xffffff;
  };
  std::map<uint32_t, const Frame*> cap_data, our_data;  // READ responses and atomic ACKs
  std::map<uint32_t, const Frame*> cap_ack, our_ack;    // positive ACKs
  std::set<std::pair<uint8_t, uint32_t>> cap_nak, our_nak;
  auto sort_in = [&](const Frame* f, auto& data, auto& ack, auto& nak) {
    const w::OpcodeInfo& in = f->info();
    if (!in.is_response) return;
    if (in.kind == w::OpKind::ack) {
      if (f->pkt.aeth.type() == w::AethType::ack)
        ack.emplace(f->pkt.bth.psn, f);
      else
        nak.insert({f->pkt.aeth.syndrome, f->pkt.bth.psn});
    } else {
      data.emplace(f->pkt.bth.psn, f);
    }
  };
  for (size_t i : c.out) sort_in(&cap_[i], cap_data, cap_ack, cap_nak);
  for (const Frame* f : ours) sort_in(f, our_data, our_ack, our_nak);
  // READ responses and atomic ACKs, PSN by PSN
  for (auto& [psn, f] : cap_data) {
    auto it = our_data.find(psn);
    if (it == our_data.end()) {
      fail(fmt("QP 0x%x: captured response PSN 0x%x (frame %zu, opcode 0x%x) never emitted by the engine",
               c.qpn, psn, f->no, f->pkt.bth.opcode));
      continue;
    }
    const Frame* o = it->second;
    std::ostringstream d;
    if (f->pkt.bth.opcode != o->pkt.bth.opcode)
      d << fmt(" opcode 0x%x/0x%x", f->pkt.bth.opcode, o->pkt.bth.opcode);
    if (f->pkt.bth.pad != o->pkt.bth.pad) d << " pad";
    if (f->data != o->data) d << fmt(" payload (%zu/%zu bytes)", f->data.size(), o->data.size());
    if ((f->pkt.present & w::kAeth) && (o->pkt.present & w::kAeth)) {
      if (f->pkt.aeth.type() != o->pkt.aeth.type())
        d << fmt(" AETH syndrome 0x%x/0x%x", f->pkt.aeth.syndrome, o->pkt.aeth.syndrome);
      else if (f->pkt.aeth.syndrome != o->pkt.aeth.syndrome)
        diff(fmt("QP 0x%x response PSN 0x%x: AETH credit field 0x%x (capture) vs 0x%x", c.qpn, psn,
                 f->pkt.aeth.syndrome, o->pkt.aeth.syndrome));
      if (f->pkt.aeth.msn != o->pkt.aeth.msn) d << fmt(" MSN %u/%u", f->pkt.aeth.msn, o->pkt.aeth.msn);
    }
    if ((f->pkt.present & w::kAtomicAckEth) &&
        f->pkt.atomic_ack_eth.orig_data != o->pkt.atomic_ack_eth.orig_data)
      d << fmt(" original value 0x%llx/0x%llx", (unsigned long long)f->pkt.atomic_ack_eth.orig_data,
               (unsigned long long)o->pkt.atomic_ack_eth.orig_data);
    if (!d.str().empty())
      fail(fmt("QP 0x%x response PSN 0x%x (capture frame %zu vs ours):%s", c.qpn, psn, f->no,
               d.str().c_str()));
    r_.compared_responses++;
  }
  {
    size_t nc = 0, no = 0;
    for (size_t i : c.out) nc += cap_[i].info().is_response && cap_[i].info().kind != w::OpKind::ack;
    for (const Frame* f : ours) no += f->info().is_response && f->info().kind != w::OpKind::ack;
    if (nc - cap_data.size() || no - our_data.size())
      diff(fmt(
          "QP 0x%x: READ responses/atomic ACKs sent again for duplicate requests: captured %zu, engine %zu "
          "(depends on when the duplicates arrived)",
          c.qpn, nc - cap_data.size(), no - our_data.size()));
  }
  for (auto& [psn, f] : our_data)
    if (!cap_data.count(psn))
      diff(
          fmt("QP 0x%x: engine sent response PSN 0x%x (opcode 0x%x) the capture lacks (lost before the "
              "capture point?)",
              c.qpn, psn, f->pkt.bth.opcode));
  // ACKs: the MSN of every one of ours must be the model's; ACKs at the same PSN agree; every request message
  // the captured responder acknowledged (by an ACK, READ response or atomic ACK at or after its last PSN)
  // ours does too
  std::set<uint32_t> dup_psns;  // request PSNs the fed side sent more than once
  {
    std::set<uint32_t> seen;
    for (size_t i : c.in)
      if (cap_[i].info().is_request && !seen.insert(cap_[i].pkt.bth.psn).second)
        dup_psns.insert(cap_[i].pkt.bth.psn);
  }
  for (auto& [psn, f] : our_ack) {
    if (f->pkt.aeth.msn != msn_model(psn))
      fail(fmt("QP 0x%x: our ACK of PSN 0x%x carries MSN %u, the requests imply %u", c.qpn, psn,
               f->pkt.aeth.msn, msn_model(psn)));
  }
  int only_cap = 0, only_our = 0;
  for (auto& [psn, f] : cap_ack) {
    if (f->pkt.aeth.msn != msn_model(psn))
      fail(fmt("QP 0x%x: captured ACK of PSN 0x%x (frame %zu) carries MSN %u, the requests imply %u", c.qpn,
               psn, f->no, f->pkt.aeth.msn, msn_model(psn)));
    auto it = our_ack.find(psn);
    if (it == our_ack.end()) {
      // both implementations ACK every packet with AckReq (urxe also every 16 packets): an ACK point the
      // capture has and the engine lacks is a difference in what was acknowledged, not coalescing
      only_cap++;
      // rxe answers every duplicate request packet with an ACK of its newest PSN; the engine only duplicates
      // with AckReq or ending a message (IBTA 9.7.5.1.2 asks no more)
      bool after_dup = false;
      for (uint32_t q : dup_psns) after_dup |= w::psn_le(q, psn) && w::psn_diff(psn, q) < 256;
      std::string m =
          fmt("QP 0x%x: captured ACK of PSN 0x%x (frame %zu) has no ACK of the engine at that PSN", c.qpn,
              psn, f->no);
      if (after_dup)
        diff(m + " (an ACK of a duplicate request)");
      else
        fail(m);
      continue;
    }
    if (f->pkt.aeth.msn != it->second->pkt.aeth.msn)
      fail(fmt("QP 0x%x: ACK of PSN 0x%x: MSN %u in the capture, %u ours", c.qpn, psn, f->pkt.aeth.msn,
               it->second->pkt.aeth.msn));
    if (f->pkt.aeth.syndrome != it->second->pkt.aeth.syndrome)
      diff(fmt("QP 0x%x: ACK of PSN 0x%x: syndrome 0x%x in the capture, 0x%x ours", c.qpn, psn,
               f->pkt.aeth.syndrome, it->second->pkt.aeth.syndrome));
  }
  for (auto& [psn, f] : our_ack) only_our += !cap_ack.count(psn);
  if (only_cap || only_our)
    diff(fmt("QP 0x%x: ACK coalescing: %zu ACK PSNs in the capture, %zu ours; %d only captured, %d only ours",
             c.qpn, cap_ack.size(), our_ack.size(), only_cap, only_our));
  auto covered = [](const std::map<uint32_t, const Frame*>& ack, const std::map<uint32_t, const Frame*>& data,
                    uint32_t psn) {
    for (auto* m : {&ack, &data})
      for (auto& [p, f] : *m)
        if (w::psn_ge(p, psn) && w::psn_diff(p, psn) < 0x10000) return true;
    return false;
  };
  for (const Msg& m : c.in_msgs) {
    bool in_cap = covered(cap_ack, cap_data, m.last), in_our = covered(our_ack, our_data, m.last);
    if (in_cap && !in_our)
      fail(fmt("QP 0x%x: request message at PSN 0x%x..0x%x acknowledged in the capture, never by the engine",
               c.qpn, m.psn, m.last));
    r_.acks_covered += in_our;
  }
  // NAKs: same syndromes at the same PSNs
  for (auto& n : cap_nak)
    if (!our_nak.count(n))
      fail(fmt("QP 0x%x: captured NAK syndrome 0x%x PSN 0x%x not sent by the engine", c.qpn, n.first,
               n.second));
  for (auto& n : our_nak)
    if (!cap_nak.count(n)) {
      std::string m =
          fmt("QP 0x%x: engine sent NAK syndrome 0x%x PSN 0x%x the capture lacks", c.qpn, n.first, n.second);
      if (opt_.played_output_lossy)
        diff(m + " (the played side's output was lossy before the capture point)");
      else
        fail(m);
    }
}

void Replayer::check_completions() {
  // the played side's requests: one successful completion each, in order per QP
  std::map<uint32_t, std::vector<Wc>> sends, recvs;
  for (const Wc& wc : wcs_) (wc.opcode & WC_RECV ? recvs : sends)[wc.qp_num].push_back(wc);
  for (Conn& c : conns_) {
    const auto& s = sends[c.qpn];
    if (s.size() != c.out_msgs.size())
      fail(fmt("QP 0x%x: %zu send completions for %zu posted WRs", c.qpn, s.size(), c.out_msgs.size()));
    for (size_t k = 0; k < s.size() && k < c.out_msgs.size(); k++) {
      const Msg& m = c.out_msgs[k];
      if (s[k].status != WC_SUCCESS || s[k].wr_id != ((uint64_t(&c - conns_.data()) << 32) | k))
        fail(fmt("QP 0x%x WR %zu (PSN 0x%x): completion %s wr_id %llx", c.qpn, k, m.psn,
                 wc_status_str(s[k].status), (unsigned long long)s[k].wr_id));
    }
    // READ data and atomic original values: what the fed side's responses carried
    std::map<uint32_t, const Frame*> resp;
    for (size_t i : c.in)
      if (cap_[i].info().is_response) resp.emplace(cap_[i].pkt.bth.psn, &cap_[i]);
    for (size_t k = 0; k < c.out_msgs.size(); k++) {
      const Msg& m = c.out_msgs[k];
      if (m.kind == w::OpKind::rdma_read_request) {
        for (uint32_t j = 0; j < m.npsn; j++) {
          auto it = resp.find(w::psn_add(m.psn, j));
          if (it == resp.end()) continue;
          const Bytes& d = it->second->data;
          if (memcmp(&c.lbuf[c.loff[k] + uint64_t(j) * c.mtu], d.data(), d.size()))
            fail(fmt("QP 0x%x READ at PSN 0x%x: local buffer differs from the captured response PSN 0x%x",
                     c.qpn, m.psn, it->first));
        }
      } else if (m.kind == w::OpKind::compare_swap || m.kind == w::OpKind::fetch_add) {
        auto it = resp.find(m.psn);
        uint64_t v;
        memcpy(&v, &c.lbuf[c.loff[k]], 8);
        if (it != resp.end() && v != it->second->pkt.atomic_ack_eth.orig_data)
          fail(fmt("QP 0x%x atomic at PSN 0x%x: result 0x%llx, captured original value 0x%llx", c.qpn, m.psn,
                   (unsigned long long)v, (unsigned long long)it->second->pkt.atomic_ack_eth.orig_data));
      }
    }
    // receives: the fed side's SENDs (and WRITE with immediate) in PSN order, each in its own buffer
    std::vector<const Msg*> want;
    for (const Msg& m : c.in_msgs)
      if (m.takes_recv()) want.push_back(&m);
    const auto& r = recvs[c.qpn];
    if (r.size() != want.size())
      fail(fmt("QP 0x%x: %zu receive completions, the capture has %zu messages", c.qpn, r.size(),
               want.size()));
    for (size_t k = 0; k < r.size() && k < want.size(); k++) {
      const Msg& m = *want[k];
      const Wc& wc = r[k];
      const uint32_t grh = c.type == QPT_UD ? 40 : 0;
      // WRITE with immediate: byte_len is the length written (as rxe and mlx5 report it)
      uint32_t len = static_cast<uint32_t>(m.data.size()) + grh;
      if (wc.status != WC_SUCCESS || wc.byte_len != len)
        fail(fmt("QP 0x%x receive %zu (PSN 0x%x): %s byte_len %u, want %u", c.qpn, k, m.psn,
                 wc_status_str(wc.status), wc.byte_len, len));
      if (m.tail->info().with_imm && (!(wc.wc_flags & WC_WITH_IMM) || wc.imm_data != htonl(m.tail->pkt.imm)))
        fail(fmt("QP 0x%x receive %zu: immediate data", c.qpn, k));
      // the buffer this receive used (wr_id names conn and slot, also through an SRQ)
      size_t ci = wc.wr_id >> 32, slot = wc.wr_id & 0xffffffff;
      if (m.kind == w::OpKind::send && ci < conns_.size()) {
        const Conn& bc = conns_[ci];
        if (memcmp(&bc.rbuf[slot * bc.rslot + grh], m.data.data(), m.data.size()))
          fail(
              fmt("QP 0x%x receive %zu (PSN 0x%x): data differs from the captured message", c.qpn, k, m.psn));
      }
    }
  }
}

void Replayer::check_memory() {
  for (auto& [rkey, r] : regions_) {
    size_t bad = 0, first = 0, unknown = 0;
    for (size_t j = 0; j < r.mem.size(); j++) {
      if (r.st[j] == 2) {
        unknown++;
        continue;
      }
      if (r.mem[j] != r.cur[j] && !bad++) first = j;
    }
    if (bad)
      fail(fmt("rkey 0x%x: %zu of %zu bytes differ from what the capture implies (first at VA 0x%llx)", rkey,
               bad, r.mem.size(), (unsigned long long)(r.lo + first)));
    r_.summary.push_back(
        fmt("rkey 0x%x VA 0x%llx..0x%llx: memory as the capture implies (%zu bytes, %zu not shown by it)",
            rkey, (unsigned long long)r.lo, (unsigned long long)r.hi, r.mem.size(), unknown));
  }
}

void Replayer::write_pcap() {
  FILE* f = fopen(opt_.write_pcap.c_str(), "wb");
  if (!f) {
    fail("cannot write " + opt_.write_pcap);
    return;
  }
  const uint32_t hdr[6] = {0xa1b2c3d4, 0x00040002, 0, 0, 65535, 1};  // pcap, version 2.4, Ethernet
  fwrite(hdr, 4, 6, f);
  for (const Frame& fr : port_->sent) {
    uint64_t us = fr.t / 1000;
    const uint32_t rec[4] = {static_cast<uint32_t>(us / 1000000), static_cast<uint32_t>(us % 1000000),
                             static_cast<uint32_t>(fr.bytes.size()), static_cast<uint32_t>(fr.bytes.size())};
    fwrite(rec, 4, 4, f);
    fwrite(fr.bytes.data(), 1, fr.bytes.size(), f);
  }
  fclose(f);
}

}  // namespace

Result replay_capture(const std::string& path, const Options& opt) {
  Replayer r(path, opt);
  return r.run();
}

}  // namespace urxe::replay
