// Requester: turns send WQEs into request packets. Segments by path MTU, assigns PSNs (24-bit, wrapping),
// adds RETH / AtomicETH / ImmDt / IETH / DETH, gathers payload from SGEs or inline bytes straight into the
// port's frame, and honours fence, max_rd_atomic and a bounded window of unacknowledged PSNs. Go-back-N
// (go_back) rewinds it to any PSN still outstanding; segmentation is deterministic, so a WQE resent from
// the middle gets the same PSNs and offsets as the first time.
#include "engine/internal.h"

namespace urxe::engine {

bool EngineImpl::requester_blocked(const Qp& q) const {
  const QpState st = q.state.load(std::memory_order_relaxed);
  if (st != QPS_RTS && st != QPS_SQD) return true;
  if (q.comp.rnr_until) return true;
  if (paced_until(q)) return true;  // paced by the reaction point
  const uint32_t prod = q.sq.prod.load(std::memory_order_acquire);
  if (q.req.idx == prod) return true;
  const SendWqe& w = q.sq.at(q.req.idx);
  const WrInfo& info = wr_info(w.opcode);
  // Window of unacknowledged PSNs (local WRs use no PSN). It holds every PSN never sent before, also in the
  // middle of a started message: letting a 64-packet message finish past the window put up to 191 PSNs in
  // flight, and each go-back-N after a loss resent all of them. Resends (below sent_end) are not held.
  const bool window_full =
      q.reliable && !info.is_local && wire::psn_ge(q.req.next_psn, q.req.sent_end) &&
      static_cast<uint32_t>(wire::psn_diff(q.req.next_psn, q.comp.una_psn)) >= config.max_unacked_psns &&
      wire::psn_diff(q.req.next_psn, q.comp.una_psn) > 0;
  if (w.started) return window_full;  // the rest of a message or a resend: its other limits were checked
  if (st == QPS_SQD) return true;     // SQD: no new WQE starts
  if (!q.reliable) return false;
  if (window_full) return true;
  // A fence holds local WRs too (LOCAL_INV behind a READ): the queue is ordered, so it also holds the WRs
  // after them.
  const bool fence = w.send_flags & SEND_FENCE;
  if (!fence && !info.is_read && !info.is_atomic) return false;
  // READs/atomics in flight (sent, not yet answered)
  uint32_t inflight = 0;
  for (uint32_t i = q.sq.cons.load(std::memory_order_relaxed); i != q.req.idx; i++) {
    const SendWqe& o = q.sq.at(i);
    const WrInfo& oi = wr_info(o.opcode);
    if ((oi.is_read || oi.is_atomic) && !o.done) inflight++;
  }
  if (fence && inflight) return true;
  const uint32_t limit = q.attr.max_rd_atomic ? q.attr.max_rd_atomic : 1;
  return (info.is_read || info.is_atomic) && inflight >= limit;
}

uint32_t EngineImpl::batch_run(const Qp& q, uint32_t psn, uint64_t rest, uint32_t every,
                               uint32_t budget) const {
  // Middle packets only, all full: the message's last packet (which may be short, and carries the AckReq,
  // immediate data, solicited event) is sent alone, and so is any packet that needs the AckReq (one every
  // `every` packets, and the last of this turn: the batch's packets must all be plain middles). No PSN past
  // the window (RC): a batch ends where the packets sent one by one would have stopped.
  uint32_t k = std::min(batch_packets(q.req.batch_bytes, q.mtu, rest), budget - 1);
  if (q.reliable) {
    const uint32_t used = q.req.noack_pkts + 1;
    k = std::min(k, every > used ? every - used : 0u);
    const auto inflight = static_cast<uint32_t>(wire::psn_diff(psn, q.comp.una_psn));
    k = std::min(k, config.max_unacked_psns > inflight ? config.max_unacked_psns - inflight : 0u);
  }
  return k;
}

void EngineImpl::arm_probe(Qp& q) {
  // Two smoothed round trips or the RFC 6298 timeout (srtt + 4 rttvar), whichever is longer, and at least
  // 10 ms as Linux's TCP tail loss probe (a peer off its CPU is not a loss: on two busy cores round trips
  // jump to several milliseconds, and with a 1 ms floor ~0.7 % of the packets of ib_write_bw -q 16 were
  // probes answered as duplicates); only when that is sooner than the retransmit timeout, and not before a
  // round trip was measured (by this QP, or else by any).
  constexpr uint64_t kMinProbeNs = 10'000'000;
  const bool own = q.comp.srtt_ns != 0;
  const uint64_t srtt = own ? q.comp.srtt_ns : srtt_any_ns, rttvar = own ? q.comp.rttvar_ns : rttvar_any_ns;
  const uint64_t pto = std::max({2 * srtt, srtt + 4 * rttvar, kMinProbeNs});
  q.comp.probe_deadline =
      srtt && q.comp.una_psn != q.req.sent_end && pto < retransmit_timeout_ns(q.attr.timeout) ? now + pto : 0;
}

void EngineImpl::go_back(Qp& q, uint32_t psn) {
  q.comp.karn_psn = q.req.sent_end;  // what is resent now gives no round trip sample (Karn)
  // never behind what is acknowledged (a stale RNR wait or NAK must not rewind PSN assignment)
  if (wire::psn_lt(psn, q.comp.una_psn)) psn = q.comp.una_psn;
  const uint32_t prod = q.sq.prod.load(std::memory_order_acquire);
  uint32_t i = q.sq.cons.load(std::memory_order_relaxed);
  for (; i != prod; i++) {
    SendWqe& w = q.sq.at(i);
    if (!w.started) break;
    const WrInfo& info = wr_info(w.opcode);
    if (info.is_local || w.done) continue;
    if (wire::psn_le(psn, w.last_psn)) {
      int32_t off = wire::psn_diff(psn, w.first_psn);
      if (off < 0) off = 0;
      q.req.idx = i;
      q.req.offset = info.is_atomic ? 0 : uint64_t(static_cast<uint32_t>(off)) * q.mtu;
      if (q.req.offset > w.length) q.req.offset = w.length;
      q.req.next_psn = wire::psn_add(w.first_psn, static_cast<uint32_t>(off));
      if (info.is_read && wire::psn_lt(q.req.next_psn, w.resp_psn)) {
        w.resp_psn = q.req.next_psn;
        w.resp_offset = q.req.offset;
      }
      return;
    }
  }
  // nothing outstanding from psn on: continue with the first WQE not started, at the first unsent PSN
  q.req.idx = i;
  q.req.offset = 0;
  q.req.next_psn = q.req.sent_end;
}

namespace {

// The steps of requester_run, in the order of rxe's requester: start the WQE (get_wqe, local operations,
// resource checks, its PSNs), lay out its next packet (next_opcode, init_req_packet), fill in its payload
// (fill_packet), then move the WQE and the QP on (update_wqe_state, update_state). File-local so that they
// inline into the per-packet loop.

// Ends a WQE that sends no packet: a LOCAL_INV or BIND_MW executed here, or one that failed its checks (the
// completer reports it in order, with its status).
void complete_unsent(Qp& q, SendWqe& w) {
  w.started = w.sent_all = w.done = true;
  q.req.idx++;
}

// LOCAL_INV and BIND_MW execute here, in order, and complete without a packet (rxe_do_local_ops).
void execute_local_op(EngineImpl& e, Qp& q, SendWqe& w) {
  if (w.opcode == WR_BIND_MW)
    w.status = e.bind_mw(q, w);
  else if (e.invalidate_mw(w.inv_rkey, q.pd) != 0)
    w.status = WC_LOC_QP_OP_ERR;
  complete_unsent(q, w);
}

// The checks a WQE passes before its first packet: its lkeys resolve with the access it needs (local write
// for the data a READ or atomic brings back), and a UD WQE's AH, as it was when posted, is one of its PD.
// False, with w.status set, when one fails. `start_src`: a WQE of one SGE, where its bytes are (nothing can
// change the MR before its first packet is built), so that packet copies without resolving the key again.
bool check_wqe(EngineImpl& e, const Qp& q, SendWqe& w, const WrInfo& info, const uint8_t*& start_src) {
  bool ok = true;
  if (!w.is_inline) {
    const bool writes_back = info.is_read || (info.is_atomic && !info.is_atomic_write);
    const uint32_t need = writes_back ? uint32_t{ACCESS_LOCAL_WRITE} : 0u;
    for (uint32_t k = 0; k < w.num_sge && ok; k++) {
      const Sge& s = q.sq_sges[w.sge_base + k];
      if (!s.length) continue;
      MrError err;
      const uint8_t* p = e.mr_resolve(s.lkey, q.pd, need, s.addr, s.length, err);
      if (!p) ok = false;
      if (w.num_sge == 1) start_src = p;
    }
  }
  if (!ok) w.status = WC_LOC_PROT_ERR;
  if (ok && q.type == QPT_UD &&
      (w.ah >= e.ahs.size() || w.ah_gen == 0 || e.ahs[w.ah].gen != w.ah_gen || e.ahs[w.ah].pd != q.pd)) {
    ok = false;
    w.status = WC_LOC_QP_OP_ERR;
  }
  return ok;
}

// Segments the WQE and gives it its PSNs, from the QP's next one.
void start_wqe(EngineImpl& e, Qp& q, SendWqe& w, const WrInfo& info) {
  w.npkts = (info.is_atomic || q.type == QPT_UD) ? 1 : packets_for(w.length, q.mtu);
  // Whether this message's middle packets may go as batch frames: only if it has two middles at least,
  // and only to a destination the port passes batches to whole.
  q.req.batch_bytes = info.is_read ? 0 : e.batch_bytes_for(q, w.npkts);
  w.first_psn = q.req.next_psn;
  w.last_psn = wire::psn_add(w.first_psn, w.npkts - 1);
  w.resp_psn = w.first_psn;
  w.started = true;
  w.sent_all = w.done = false;
  q.req.offset = 0;
  if (info.is_send) e.count(Counter::rdma_sends);
}

// UD: the destination from the WQE's address handle, and the DETH.
void set_ud_destination(EngineImpl& e, const Qp& q, const SendWqe& w, wire::FrameSpec& spec) {
  const AddressVector& av = e.ahs[w.ah].av;
  spec.src_mac = e.port.attr().mac;
  spec.dst_mac = av.dmac;
  const wire::Gid sgid = e.ahs[w.ah].sgid;
  spec.ip_version = wire::gid_is_ipv4_mapped(sgid) ? 4 : 6;
  spec.src_ip = sgid;
  spec.dst_ip = av.dgid;
  spec.traffic_class = e.wire_traffic_class(av.traffic_class);
  spec.ttl = av.hop_limit ? av.hop_limit : 64;
  spec.flow_label = av.flow_label;
  spec.udp_sport = udp_sport_ud(q.qpn);
  spec.bth.dqpn = w.remote_qpn;
  spec.deth.qkey = (w.remote_qkey & 0x80000000u) ? q.attr.qkey : w.remote_qkey;
  spec.deth.src_qp = q.qpn;
}

// One request packet, or batch frame, as laid out: what filling it in and moving on need.
struct ReqPacket {
  uint32_t psn = 0;
  uint32_t payload = 0;
  uint32_t psn_used = 1;
  uint32_t batch = 0;  // packets in this frame when it is a batch frame (batch_run)
  bool last = true;
  const uint8_t* inline_src = nullptr;
};

// An RDMA READ request for the rest of the WQE (all of it, or from where a go-back left it): one packet that
// takes a PSN for each response packet it asks for.
void read_request(const Qp& q, const SendWqe& w, const WrInfo& info, uint8_t base, wire::FrameSpec& spec,
                  ReqPacket& p) {
  const uint64_t rest = w.length - q.req.offset;
  spec.bth.opcode = wire::make_opcode(base, info.ops.only);
  spec.reth = wire::Reth{w.remote_addr + q.req.offset, w.rkey, static_cast<uint32_t>(rest)};
  p.psn_used = packets_for(rest, q.mtu);
  spec.bth.ack_req = true;
}

void atomic_request(const SendWqe& w, const WrInfo& info, uint8_t base, wire::FrameSpec& spec) {
  spec.bth.opcode = wire::make_opcode(base, info.ops.only);
  spec.atomic_eth =
      wire::AtomicEth{w.remote_addr, w.rkey, w.opcode == WR_ATOMIC_CMP_AND_SWP ? w.swap : w.compare_add,
                      w.opcode == WR_ATOMIC_CMP_AND_SWP ? w.compare_add : 0};
  spec.bth.ack_req = true;
}

// ATOMIC WRITE (Annex A19): RETH with DMA length 8, and the 8 bytes (inline or from the SGEs) as payload.
void atomic_write_request(const SendWqe& w, const WrInfo& info, uint8_t base, wire::FrameSpec& spec,
                          ReqPacket& p) {
  spec.bth.opcode = wire::make_opcode(base, info.ops.only);
  spec.reth = wire::Reth{w.remote_addr, w.rkey, 8};
  spec.bth.ack_req = true;
  p.payload = 8;
  if (w.is_inline) p.inline_src = reinterpret_cast<const uint8_t*>(&w.compare_add);  // copied there by post
}

// The next packet of a SEND or RDMA WRITE: first / middle / last / only by its offset, RETH on a WRITE's
// first, ImmDt / IETH / SE on the last, and AckReq where the window needs one; a run of full middle packets
// may go as one batch frame.
void send_write_packet(EngineImpl& e, const Qp& q, const SendWqe& w, const WrInfo& info, uint8_t base,
                       uint32_t budget, wire::FrameSpec& spec, ReqPacket& p) {
  const uint64_t rest = w.length - q.req.offset;
  p.payload = static_cast<uint32_t>(rest < q.mtu ? rest : q.mtu);
  const bool first = q.req.offset == 0;
  p.last = q.req.offset + p.payload >= w.length;
  spec.bth.opcode = wire::make_opcode(base, info.ops.pick(first, p.last));
  if (info.is_write && first) spec.reth = wire::Reth{w.remote_addr, w.rkey, static_cast<uint32_t>(w.length)};
  if (p.last) {
    spec.imm = w.imm;
    spec.ieth_rkey = w.inv_rkey;
    spec.bth.se = (w.send_flags & SEND_SOLICITED) != 0;
  }
  // AckReq on the last packet, and every so often inside long messages: peers such as rxe only ACK
  // on AckReq, and the window of unacknowledged PSNs must keep moving. Also on the last packet of this
  // turn (the QP's next turn may be a while away when many QPs share the port): what it sent is
  // acknowledged meanwhile, instead of waiting, unanswered, for the rest of its message.
  const uint32_t every = std::min<uint32_t>(64, std::max<uint32_t>(1, e.config.max_unacked_psns / 2));
  spec.bth.ack_req = q.reliable && (p.last || q.req.noack_pkts + 1 >= every || budget == 1);
  if (w.is_inline)
    p.inline_src = q.sq_inline.data() + w.inline_base + q.req.offset;
  else if (!first && !p.last && q.req.batch_bytes)
    p.batch = e.batch_run(q, p.psn, rest, every, budget);
  if (p.batch > 1) {
    p.payload = p.batch * q.mtu;
    p.psn_used = p.batch;
  }
}

// The next packet of the WQE at the requester's offset: its PSN, opcode and headers in `spec`.
ReqPacket next_packet(EngineImpl& e, const Qp& q, const SendWqe& w, const WrInfo& info, uint32_t budget,
                      wire::FrameSpec& spec) {
  const uint8_t base = transport_base(q.type);
  ReqPacket p;
  p.psn = wire::psn_add(w.first_psn, packet_at(q.req.offset, q.mtu));
  spec.bth.psn = p.psn;
  if (info.is_read)
    read_request(q, w, info, base, spec, p);
  else if (info.is_atomic_write)
    atomic_write_request(w, info, base, spec, p);
  else if (info.is_atomic)
    atomic_request(w, info, base, spec);
  else
    send_write_packet(e, q, w, info, base, budget, spec, p);
  return p;
}

// The payload into the frame at `dst`, or, contiguous in one MR, left there for a port that gathers. False
// when an SGE no longer resolves.
bool fill_payload(EngineImpl& e, const Qp& q, const SendWqe& w, const ReqPacket& p, const uint8_t* start_src,
                  uint8_t* dst) {
  const Sge* sges = q.sq_sges.data() + w.sge_base;
  const bool gather = e.gathers(p.payload);
  if (p.inline_src) {
    std::memcpy(dst, p.inline_src, p.payload);
    return true;
  }
  if (const uint8_t* src = start_src && q.req.offset == 0 ? start_src
                           : gather ? sge_span(e, q.pd, sges, w.num_sge, q.req.offset, p.payload)
                                    : nullptr) {
    if (gather)
      e.gather_payload(src, p.payload);
    else
      std::memcpy(dst, src, p.payload);
    return true;
  }
  return sge_copy(e, q.pd, sges, w.num_sge, q.req.offset, dst, p.payload, false);
}

// The WQE after its packet went out: its offset, and once its last packet is sent the next WQE.
void update_wqe_state(Qp& q, SendWqe& w, const WrInfo& info, const ReqPacket& p) {
  if (info.is_read || info.is_atomic) {
    q.req.offset = w.length;
  } else {
    q.req.offset += p.payload;
  }
  if (p.last) {
    w.sent_all = true;
    if (!q.reliable) w.done = true;  // UC/UD complete once sent
    q.req.idx++;
    q.req.offset = 0;
  }
}

// The QP after a packet went out: its next PSN, AckReq count, the end of what was ever sent, the round trip
// timing, the tail loss probe and the retransmit timer.
void update_state(EngineImpl& e, Qp& q, SendWqe& w, const ReqPacket& p, bool ack_req) {
  q.req.noack_pkts = ack_req ? 0 : q.req.noack_pkts + p.psn_used;
  q.req.next_psn = wire::psn_add(p.psn, p.psn_used);
  // The resend of the oldest unacknowledged packet restarts the retransmit timer: pacing can hold a
  // go-back resend long after the timeout that asked for it, and the timer must not spend the next retry
  // on frames that have not been resent yet.
  if (q.reliable && p.psn == q.comp.una_psn && q.comp.timer_deadline &&
      !wire::psn_gt(q.req.next_psn, q.req.sent_end))
    e.restart_retransmit_timer(q);
  if (wire::psn_gt(q.req.next_psn, q.req.sent_end)) {  // new PSNs, not a resend
    q.req.sent_end = q.req.next_psn;
    if (q.reliable) {
      if (p.last) w.sent_ns = e.now ? e.now : 1;  // 0 = not timed
      e.arm_probe(q);
    }
  } else {
    e.count(Counter::retransmitted_pkts);
  }
  if (q.reliable && !q.comp.timer_deadline && q.attr.timeout)
    q.comp.timer_deadline = e.now + retransmit_timeout_ns(q.attr.timeout);
}

}  // namespace

bool EngineImpl::requester_run(Qp& q) {
  bool did = false;
  uint32_t budget = visit_budget;
  rp_update(q);
  while (budget > 0) {
    // paced by the round's clock: perhaps not by the clock of now (paced_now)
    if (requester_blocked(q) && (!paced_until(q) || paced_now(q) || requester_blocked(q))) break;
    SendWqe& w = q.sq.at(q.req.idx);
    const WrInfo& info = wr_info(w.opcode);
    const uint8_t* start_src = nullptr;  // check_wqe
    if (!w.started) {
      w.status = WC_SUCCESS;
      w.resp_offset = 0;
      w.sent_ns = 0;
      if (info.is_local) {
        execute_local_op(*this, q, w);
        did = true;
        continue;
      }
      if (!check_wqe(*this, q, w, info, start_src)) {
        // the completer reports it in order and moves the QP to ERR (RC) or SQE (UC/UD)
        complete_unsent(q, w);
        did = true;
        break;
      }
      start_wqe(*this, q, w, info);
    }
    if (info.is_local) {  // passing an executed local WR again after a go-back
      q.req.idx++;
      continue;
    }

    wire::FrameSpec spec = q.spec;
    spec.xrc_srqn = w.xrc_srqn;  // (XRC requests' XRCETH; no header of other transports)
    if (q.type == QPT_UD) set_ud_destination(*this, q, w, spec);
    const ReqPacket p = next_packet(*this, q, w, info, budget, spec);
    uint8_t* dst = begin_frame(spec, p.payload, q.type == QPT_UD ? nullptr : &q.prefix);
    if (!dst) break;  // port backpressure: try again next round
    if (p.payload && !fill_payload(*this, q, w, p, start_src, dst)) {
      abort_frame();
      w.status = WC_LOC_PROT_ERR;
      w.sent_all = w.done = true;
      q.req.idx++;
      q.req.offset = 0;
      did = true;
      break;
    }
    cur_buf.batch = static_cast<uint8_t>(p.batch > 1 ? p.batch : 0);
    const uint32_t bytes = wire_bytes();
    finish_frame();
    if (q.type == QPT_UD && spec.bth.dqpn == kMulticastQpn && !mc_groups.empty() && mc_find(spec.dst_ip))
      mc_loopback();
    rp_sent(q, bytes);
    did = true;
    budget--;
    update_wqe_state(q, w, info, p);
    update_state(*this, q, w, p, spec.bth.ack_req);
  }
  return did;
}

}  // namespace urxe::engine
