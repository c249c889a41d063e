// Capture replay (replay.h, README.md): what must agree — emitted requests and responses against the
// capture, completions and memory.
#include "tests/replay/replay_internal.h"

namespace urxe::replay {
namespace detail {

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

}  // namespace detail
}  // namespace urxe::replay
