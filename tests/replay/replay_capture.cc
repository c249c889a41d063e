// Capture replay (replay.h, README.md): what the capture says — its frames, connections, messages and the
// memory they imply.
#include "tests/replay/replay_internal.h"

namespace urxe::replay {
namespace detail {

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

}  // namespace detail
}  // namespace urxe::replay
