// Responder: executes incoming requests. RC: PSN check (expected / duplicate / out of sequence, one
// PSN-sequence NAK per gap), opcode sequence, rkey/PD/access/bounds/alignment checks, SEND into receive
// WQEs (RNR NAK when none), RDMA WRITE, READ and atomics through responder resources that also answer
// duplicates (READ re-executed, atomic replayed from the saved original value), ATOMIC WRITE (Annex A19),
// MSN, and ACK coalescing
// (an ACK owed on AckReq and on the last packet of a message, sent once per round or at once after
// ack_every_n packets). Responses are sent in PSN order by responder_tx: READ responses and atomic ACKs
// first, then the newest ACK/NAK.
// UC: no responses; a gap drops the rest of that message. UD: Q_Key check, GRH into the receive buffer.
#include "engine/internal.h"

namespace urxe::engine {

namespace {

uint64_t recv_capacity(const Qp& q) {
  uint64_t c = 0;
  for (uint32_t i = 0; i < q.resp.recv_num_sge; i++) c += q.resp.recv_sges[i].length;
  return c;
}

// One ACK/NAK frame, sent now.
void emit_ack(EngineImpl& e, Qp& q, uint8_t syndrome, uint32_t psn, uint32_t msn) {
  q.resp.pkts_since_ack = 0;
  wire::FrameSpec spec = q.spec;
  spec.bth.opcode = wire::make_opcode(transport_base(q.type), wire::op::acknowledge);
  spec.bth.psn = psn;
  spec.aeth = wire::Aeth{syndrome, msn & wire::kPsnMask};
  if (e.begin_frame(spec, 0, &q.prefix)) e.finish_frame(/*ack_only=*/true);
}

// An ACK/NAK is owed. It goes out in the QP's visit later in this same round (responder_tx; rx_frame
// activated the QP), after the READ responses and atomic ACKs still owed (PSN order), and only the newest
// owed one, since it implies the older ones: the requests of one round's received frames share an ACK (an
// ACK acknowledges every request before its PSN, so one may stand for several: coalesced ACKs), and a
// stream of small WRITEs costs both ends an ACK frame per round instead of one per message. Once
// ack_every_n packets went unacknowledged it goes out at once, so a long burst still moves the requester's
// window as it arrives.
void queue_ack(EngineImpl& e, Qp& q, uint8_t syndrome, uint32_t psn) {
  if (q.resp.pkts_since_ack >= e.config.ack_every_n && !res_pending(q)) {
    q.resp.ack_pending = false;
    emit_ack(e, q, syndrome, psn, q.resp.msn);
    return;
  }
  q.resp.ack_pending = true;
  q.resp.ack_syndrome = syndrome;
  q.resp.ack_psn = psn;
  q.resp.ack_msn = q.resp.msn;
}

constexpr uint8_t kAckSyndrome = wire::make_syndrome(wire::AethType::ack, wire::kCreditInvalid);

}  // namespace

namespace {

struct Responder {
  EngineImpl& e;
  Qp& q;
  const wire::Packet& pkt;
  const uint8_t* frame;

  void complete_recv(WcStatus status, WcOpcode opcode, uint32_t byte_len, uint32_t flags,
                     uint32_t imm_or_rkey, uint32_t src_qp, bool solicited, uint8_t sl = 0) {
    Wc wc;
    wc.wr_id = q.resp.recv_wr_id;
    wc.status = status;
    wc.opcode = opcode;
    wc.byte_len = byte_len;
    wc.wc_flags = flags;
    wc.imm_data = imm_or_rkey;
    wc.qp_num = q.qpn;
    wc.src_qp = src_qp;
    wc.sl = sl;
    q.resp.have_recv = false;
    e.cq_post(*q.rcq, wc, solicited);
    if (status == WC_SUCCESS) e.count(Counter::rdma_recvs);
  }

  // RC responder error (IBTA 9.9.3 class C/D): NAK now, report the receive WQE if one was in use, QP → ERR.
  void fatal(wire::NakCode code, WcStatus recv_status) {
    // READ responses / atomic ACKs owed for earlier requests go first: the NAK acknowledges them
    if (q.reliable) e.responder_tx(q, UINT32_MAX);
    if (q.reliable) {
      emit_ack(e, q, wire::make_syndrome(wire::AethType::nak, static_cast<uint8_t>(code)), pkt.bth.psn,
               q.resp.msn);
      // To the port now, before the error completion below is visible: the app polls its CQ without the
      // engine lock and usually exits on an error, and a NAK left for the round's end (or held for an
      // answer: hold_acks) would end with its process, unsent, its requester retrying into silence.
      e.tx_flush();
    }
    if (q.resp.have_recv && recv_status != WC_SUCCESS)
      complete_recv(recv_status, WC_RECV, 0, 0, 0, q.attr.dest_qp_num, false);
    if (code == wire::NakCode::remote_access_error) e.count(Counter::resp_remote_access_errors);
    const EventType ev = code == wire::NakCode::remote_access_error ? EVENT_QP_ACCESS_ERR
                         : code == wire::NakCode::invalid_request   ? EVENT_QP_REQ_ERR
                                                                    : EVENT_QP_FATAL;
    e.log_responder_error(q, static_cast<uint8_t>(code), pkt);
    e.qp_set_error(q, true, ev);
  }

  // UC drops what it cannot take; RC answers with a NAK and errors the QP.
  void reject(wire::NakCode code, WcStatus recv_status) {
    if (q.type == QPT_UC) {
      e.count(Counter::rx_drop_uc);
      if (code == wire::NakCode::remote_access_error) e.count(Counter::resp_remote_access_errors);
      q.resp.in_msg = InMsg::none;
      q.resp.uc_dropping = true;
      return;
    }
    fatal(code, recv_status);
  }

  // No receive WQE for a SEND or WRITE with immediate: RC answers RNR NAK (the requester retries after
  // min_rnr_timer), UC drops the rest of the message. Returns false (not accepted).
  bool no_recv() {
    if (q.reliable) {
      e.count(Counter::send_rnr_err);
      e.note(Note::rnr_nak_sent, q.qpn);
      queue_ack(e, q, wire::make_syndrome(wire::AethType::rnr_nak, q.attr.min_rnr_timer), pkt.bth.psn);
      q.resp.nak_sent = true;
    } else {
      e.count(Counter::rx_drop_no_recv_wqe);
      q.resp.in_msg = InMsg::none;  // (a SEND's first packet already found none in progress)
      q.resp.uc_dropping = true;
    }
    return false;
  }

  // Returns false when the packet is not the position it should be in the current message.
  bool sequence_ok(InMsg kind) const {
    const wire::OpcodeInfo& info = *pkt.info;
    if (info.is_first()) return q.resp.in_msg == InMsg::none;
    return q.resp.in_msg == kind;
  }

  bool length_ok() const {
    const wire::OpcodeInfo& info = *pkt.info;
    const uint32_t len = pkt.payload_len;
    if (info.position == wire::Position::first || info.position == wire::Position::middle)
      return len == q.mtu;
    if (info.position == wire::Position::last) return len >= 1 && len <= q.mtu;  // (as rxe's check_length)
    return len <= q.mtu;
  }

  // SEND_* packet at the expected PSN. Returns false if it was not accepted (RNR, error).
  bool do_send() {
    const wire::OpcodeInfo& info = *pkt.info;
    if (!sequence_ok(InMsg::send) || !length_ok()) {
      reject(wire::NakCode::invalid_request, WC_REM_INV_REQ_ERR);
      return false;
    }
    uint32_t skip = 0;  // leading payload bytes not placed (a tag-matching header consumed by the NIC)
    if (info.is_first()) {
      if (q.srq && q.srq->tm) [[unlikely]] {
        const int r = e.tm_recv_first(q, pkt);
        if (r < 0) return no_recv();
        skip = static_cast<uint32_t>(r);
      } else if (!e.pop_recv(q)) {
        return no_recv();
      }
      q.resp.msg_offset = 0;
    }
    const uint32_t len = pkt.payload_len - skip;
    if (q.resp.msg_offset + len > recv_capacity(q)) {
      reject(wire::NakCode::invalid_request, WC_LOC_LEN_ERR);
      return false;
    }
    if (len && !sge_copy(e, q.pd, q.resp.recv_sges.data(), q.resp.recv_num_sge, q.resp.msg_offset,
                         const_cast<uint8_t*>(pkt.payload.data()) + skip, len, true)) {
      reject(wire::NakCode::remote_operational_error, WC_LOC_PROT_ERR);
      return false;
    }
    q.resp.msg_offset += len;
    if (!info.is_last()) {
      q.resp.in_msg = InMsg::send;
      return true;
    }
    q.resp.in_msg = InMsg::none;
    uint32_t flags = 0, imm = 0;
    if (info.with_imm) {
      flags |= WC_WITH_IMM;
      uint8_t b[4];
      wire::store_be32(b, pkt.imm);
      std::memcpy(&imm, b, 4);  // network order, as ibv_wc.imm_data
    }
    if (info.with_inv) {
      if (e.invalidate_mw(pkt.ieth_rkey, q.pd) != 0) {
        fatal(wire::NakCode::invalid_request, WC_REM_INV_REQ_ERR);
        return false;
      }
      flags |= WC_WITH_INV;
      imm = pkt.ieth_rkey;
    }
    q.resp.msn = wire::psn_add(q.resp.msn, 1);
    if (q.resp.tm.kind != TmKind::none) [[unlikely]] {
      e.tm_complete_recv(q, static_cast<uint32_t>(q.resp.msg_offset), flags, imm, pkt.bth.se);
      return true;
    }
    complete_recv(WC_SUCCESS, WC_RECV, static_cast<uint32_t>(q.resp.msg_offset), flags, imm,
                  q.attr.dest_qp_num, pkt.bth.se);
    return true;
  }

  bool do_write() {
    const wire::OpcodeInfo& info = *pkt.info;
    if (!sequence_ok(InMsg::write) || !length_ok()) {
      reject(wire::NakCode::invalid_request, WC_SUCCESS);
      return false;
    }
    if (info.is_first()) {
      if (!(q.attr.qp_access_flags & ACCESS_REMOTE_WRITE)) {
        reject(wire::NakCode::invalid_request, WC_SUCCESS);
        return false;
      }
      const wire::Reth& r = pkt.reth;
      MrError err;
      if (r.dma_len && !e.rkey_resolve(r.rkey, q, ACCESS_REMOTE_WRITE, r.va, r.dma_len, err)) {
        reject(wire::NakCode::remote_access_error, WC_SUCCESS);
        return false;
      }
      q.resp.write_va = r.va;
      q.resp.write_rkey = r.rkey;
      q.resp.write_len = r.dma_len;
      q.resp.msg_offset = 0;
    }
    const uint32_t len = pkt.payload_len;
    if (q.resp.msg_offset + len > q.resp.write_len ||
        (info.is_last() && q.resp.msg_offset + len != q.resp.write_len)) {
      reject(wire::NakCode::invalid_request, WC_SUCCESS);
      return false;
    }
    // WRITE with immediate needs a receive WQE: check before touching memory so an RNR retry is clean
    if (info.with_imm && !e.pop_recv(q)) return no_recv();
    if (len) {
      MrError err;
      uint8_t* p = e.rkey_resolve(q.resp.write_rkey, q, ACCESS_REMOTE_WRITE,
                                  q.resp.write_va + q.resp.msg_offset, len, err);
      if (!p) {
        reject(wire::NakCode::remote_access_error, WC_SUCCESS);
        return false;
      }
      std::memcpy(p, pkt.payload.data(), len);
    }
    q.resp.msg_offset += len;
    if (!info.is_last()) {
      q.resp.in_msg = InMsg::write;
      return true;
    }
    q.resp.in_msg = InMsg::none;
    q.resp.msn = wire::psn_add(q.resp.msn, 1);
    if (!info.with_imm) {
      std::atomic_ref<uint64_t> placed(e.writes_placed);
      placed.store(placed.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
    if (info.with_imm) {
      uint32_t imm = 0;
      uint8_t b[4];
      wire::store_be32(b, pkt.imm);
      std::memcpy(&imm, b, 4);
      complete_recv(WC_SUCCESS, WC_RECV_RDMA_WITH_IMM, static_cast<uint32_t>(q.resp.write_len), WC_WITH_IMM,
                    imm, q.attr.dest_qp_num, pkt.bth.se);
    }
    return true;
  }

  RespRes& alloc_res() {
    RespRes& r = q.resp.res[q.resp.res_next % q.resp.res.size()];
    q.resp.res_next++;
    r = RespRes{};
    r.valid = true;
    r.pd = q.pd;
    return r;
  }

  void do_read() {
    if (q.resp.in_msg != InMsg::none) return reject(wire::NakCode::invalid_request, WC_SUCCESS);
    if (!(q.attr.qp_access_flags & ACCESS_REMOTE_READ) || q.attr.max_dest_rd_atomic == 0)
      return reject(wire::NakCode::invalid_request, WC_SUCCESS);
    const wire::Reth& r = pkt.reth;
    if (r.dma_len > e.config.device.max_msg_sz) return reject(wire::NakCode::invalid_request, WC_SUCCESS);
    MrError err;
    if (r.dma_len && !e.rkey_resolve(r.rkey, q, ACCESS_REMOTE_READ, r.va, r.dma_len, err))
      return reject(wire::NakCode::remote_access_error, WC_SUCCESS);
    const uint32_t n = packets_for(r.dma_len, q.mtu);
    RespRes& res = alloc_res();
    res.is_read = true;
    res.first_psn = pkt.bth.psn;
    res.last_psn = wire::psn_add(pkt.bth.psn, n - 1);
    res.va = r.va;
    res.rkey = r.rkey;
    res.length = r.dma_len;
    res.pending = true;
    res.cur_psn = res.first_psn;
    res.start_psn = res.first_psn;
    res.cur_offset = 0;
    q.resp.epsn = wire::psn_add(pkt.bth.psn, n);
    q.resp.msn = wire::psn_add(q.resp.msn, 1);
    res.msn = q.resp.msn;
    q.resp.ack_pending = false;  // the responses acknowledge everything before them
    q.resp.pkts_since_ack = 0;
  }

  void do_atomic() {
    if (q.resp.in_msg != InMsg::none) return reject(wire::NakCode::invalid_request, WC_SUCCESS);
    if (!(q.attr.qp_access_flags & ACCESS_REMOTE_ATOMIC) || q.attr.max_dest_rd_atomic == 0)
      return reject(wire::NakCode::invalid_request, WC_SUCCESS);
    const wire::AtomicEth& a = pkt.atomic_eth;
    if (a.va & 7) return reject(wire::NakCode::invalid_request, WC_SUCCESS);
    MrError err;
    uint8_t* p = e.rkey_resolve(a.rkey, q, ACCESS_REMOTE_ATOMIC, a.va, 8, err);
    if (!p) return reject(wire::NakCode::remote_access_error, WC_SUCCESS);
    if (reinterpret_cast<uintptr_t>(p) & 7) return reject(wire::NakCode::invalid_request, WC_SUCCESS);
    // The engine is the only writer of this memory on the wire side; the 8-byte aligned location is
    // updated with one atomic operation so a local CPU user sees no torn value.
    auto* loc = reinterpret_cast<uint64_t*>(p);
    uint64_t orig;
    if (pkt.info->kind == wire::OpKind::compare_swap) {
      orig = a.compare;
      __atomic_compare_exchange_n(loc, &orig, a.swap_add, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    } else {
      orig = __atomic_fetch_add(loc, a.swap_add, __ATOMIC_SEQ_CST);
    }
    RespRes& res = alloc_res();
    res.is_read = false;
    res.first_psn = res.last_psn = pkt.bth.psn;
    res.orig = orig;
    res.pending = true;
    q.resp.epsn = wire::psn_add(pkt.bth.psn, 1);
    q.resp.msn = wire::psn_add(q.resp.msn, 1);
    res.msn = q.resp.msn;
    q.resp.ack_pending = false;
    q.resp.pkts_since_ack = 0;
  }

  // ATOMIC WRITE (Annex A19), as kernel rxe: checked as an RDMA WRITE (QP and R_Key remote write access),
  // executed as an atomic (a responder resource, so max_dest_rd_atomic 0 refuses it; an 8-byte aligned
  // target; one 8-byte store, release-ordered after everything placed before it), answered as a READ of
  // nothing (an RDMA READ RESPONSE ONLY without payload, which a duplicate gets again).
  void do_atomic_write() {
    if (q.resp.in_msg != InMsg::none) return reject(wire::NakCode::invalid_request, WC_SUCCESS);
    if (!(q.attr.qp_access_flags & ACCESS_REMOTE_WRITE) || q.attr.max_dest_rd_atomic == 0)
      return reject(wire::NakCode::invalid_request, WC_SUCCESS);
    const wire::Reth& r = pkt.reth;
    // oA19-28: exactly 8 bytes, no pad
    if (r.dma_len != 8 || pkt.payload_len != 8 || pkt.bth.pad != 0)
      return reject(wire::NakCode::invalid_request, WC_SUCCESS);
    MrError err;
    uint8_t* p = e.rkey_resolve(r.rkey, q, ACCESS_REMOTE_WRITE, r.va, 8, err);
    if (!p) return reject(wire::NakCode::remote_access_error, WC_SUCCESS);
    // misaligned: the Invalid Request NAK of a misaligned atomic (IBTA 9.4.5; rxe's ERR_MISALIGNED_ATOMIC)
    if ((r.va & 7) || (reinterpret_cast<uintptr_t>(p) & 7))
      return reject(wire::NakCode::invalid_request, WC_SUCCESS);
    uint64_t v;
    std::memcpy(&v, pkt.payload.data(), 8);
    __atomic_store_n(reinterpret_cast<uint64_t*>(p), v, __ATOMIC_RELEASE);
    std::atomic_ref<uint64_t> placed(e.writes_placed);
    placed.store(placed.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    RespRes& res = alloc_res();
    res.is_read = true;
    res.atomic_write = true;
    res.first_psn = res.last_psn = res.cur_psn = res.start_psn = pkt.bth.psn;
    res.length = 0;
    res.pending = true;
    q.resp.epsn = wire::psn_add(pkt.bth.psn, 1);
    q.resp.msn = wire::psn_add(q.resp.msn, 1);
    res.msn = q.resp.msn;
    q.resp.ack_pending = false;  // the response acknowledges everything before it
    q.resp.pkts_since_ack = 0;
  }

  // Re-arms responder resource `k` (and drops the output of every later one, which the requester resends).
  void rearm_from(uint32_t slot) {
    const uint32_t n = static_cast<uint32_t>(q.resp.res.size());
    bool after = false;
    for (uint32_t j = 0; j < n; j++) {
      const uint32_t idx = (q.resp.res_next + j) % n;
      if (after) q.resp.res[idx].pending = false;
      if (idx == slot) after = true;
    }
  }

  // The PSN an ACK for a duplicate SEND/WRITE carries: the newest executed, unless that is the last PSN of
  // a READ or atomic request (then the PSN before that request, and so on back). Kernel rxe's completer
  // takes an ACK whose PSN is a pending READ's last PSN for that READ's completion, with no data; an ACK
  // past it makes it retry the READ (as IBTA wants), and one before it leaves the READ to its retry.
  uint32_t dup_ack_psn() const {
    uint32_t ack = wire::psn_sub(q.resp.epsn, 1);
    for (bool moved = true; moved;) {
      moved = false;
      for (const RespRes& r : q.resp.res)
        if (r.valid && r.last_psn == ack) {
          ack = wire::psn_sub(r.first_psn, 1);
          moved = true;
        }
    }
    return ack;
  }

  void duplicate() {
    e.count(Counter::duplicate_request);
    const wire::OpcodeInfo& info = *pkt.info;
    const uint32_t psn = pkt.bth.psn;
    switch (info.kind) {
      case wire::OpKind::send:
      case wire::OpKind::rdma_write:
        // IBTA 9.7.5.1.2: answer with the newest acknowledgement so a requester that lost ACKs moves on,
        // but never with the PSN a READ or atomic response carries (dup_ack_psn). (A duplicate does not
        // take the place of a newer ACK this round owes.)
        if (pkt.bth.ack_req || info.is_last()) {
          const uint32_t ack = dup_ack_psn();
          if (!q.resp.ack_pending || wire::psn_ge(ack, q.resp.ack_psn)) queue_ack(e, q, kAckSyndrome, ack);
        }
        return;
      case wire::OpKind::rdma_read_request: {
        for (uint32_t k = 0; k < q.resp.res.size(); k++) {
          RespRes& r = q.resp.res[k];
          if (!r.valid || !r.is_read || r.atomic_write || wire::psn_lt(psn, r.first_psn) ||
              wire::psn_gt(psn, r.last_psn))
            continue;
          // re-executed from the original request, starting where the duplicate asks
          const uint32_t off_pkts = static_cast<uint32_t>(wire::psn_diff(psn, r.first_psn));
          r.pending = true;
          r.cur_psn = psn;
          r.start_psn = psn;
          r.cur_offset = uint64_t{off_pkts} * q.mtu;
          if (r.cur_offset > r.length) r.cur_offset = r.length;
          rearm_from(k);
          q.resp.ack_pending = false;
          return;
        }
        e.count(Counter::rx_drop_dup_unmatched);
        return;
      }
      case wire::OpKind::atomic_write:
        for (uint32_t k = 0; k < q.resp.res.size(); k++) {
          RespRes& r = q.resp.res[k];
          if (!r.valid || !r.atomic_write || r.first_psn != psn) continue;
          r.pending = true;  // the response again; the store is not repeated
          r.cur_psn = r.start_psn = psn;
          r.cur_offset = 0;
          rearm_from(k);
          q.resp.ack_pending = false;
          return;
        }
        e.count(Counter::rx_drop_dup_unmatched);
        return;
      case wire::OpKind::compare_swap:
      case wire::OpKind::fetch_add: {
        for (uint32_t k = 0; k < q.resp.res.size(); k++) {
          RespRes& r = q.resp.res[k];
          if (!r.valid || r.is_read || r.first_psn != psn) continue;
          r.pending = true;  // replay the saved original value; the operation is not repeated
          rearm_from(k);
          q.resp.ack_pending = false;
          return;
        }
        e.count(Counter::rx_drop_dup_unmatched);
        return;
      }
      default:
        e.count(Counter::rx_drop_opcode);
        return;
    }
  }

  void rc() {
    const uint32_t psn = pkt.bth.psn;
    const int32_t d = wire::psn_diff(psn, q.resp.epsn);
    if (d < 0) return duplicate();
    if (d > 0) {
      e.count(Counter::out_of_seq_request);
      if (!q.resp.nak_sent) {
        q.resp.nak_sent = true;
        queue_ack(
            e, q,
            wire::make_syndrome(wire::AethType::nak, static_cast<uint8_t>(wire::NakCode::psn_seq_error)),
            q.resp.epsn);
      }
      return;
    }
    // An XRC target's request, about to execute, takes the receive queue, PD and CQ of the XRC SRQ its
    // XRCETH names (duplicates and out-of-sequence packets above are RC's, whatever SRQ they name)
    if (q.type == QPT_XRC_RECV && !e.xrc_bind(q, pkt))
      return fatal(wire::NakCode::invalid_request, WC_REM_INV_REQ_ERR);
    const wire::OpcodeInfo& info = *pkt.info;
    // READ data is read when its responses are built: before a later request may change memory, the
    // responses owed go out, so a READ never sees a later WRITE/atomic/SEND (in-order execution, as rxe).
    // If the port cannot take them now, this packet is dropped and comes back by go-back-N.
    if (info.kind != wire::OpKind::rdma_read_request && res_pending(q)) {
      e.responder_tx(q, UINT32_MAX, false);  // in order: not held back by pacing
      if (res_pending(q)) {
        e.count(Counter::rx_drop_resp_busy);
        return;
      }
    }
    q.resp.nak_sent = false;
    bool ok = false;
    switch (info.kind) {
      case wire::OpKind::send:
        ok = do_send();
        break;
      case wire::OpKind::rdma_write:
        ok = do_write();
        break;
      case wire::OpKind::rdma_read_request:
        do_read();
        return;
      case wire::OpKind::compare_swap:
      case wire::OpKind::fetch_add:
        do_atomic();
        return;
      case wire::OpKind::atomic_write:
        do_atomic_write();
        return;
      default:
        e.count(Counter::rx_drop_opcode);
        return;
    }
    if (!ok) return;
    q.resp.epsn = wire::psn_add(psn, 1);
    q.resp.pkts_since_ack++;
    if (pkt.bth.ack_req || info.is_last() || q.resp.pkts_since_ack >= e.config.ack_every_n)
      queue_ack(e, q, kAckSyndrome, psn);
    else
      e.count(Counter::ack_deferred);
  }

  void uc() {
    const wire::OpcodeInfo& info = *pkt.info;
    if (info.kind != wire::OpKind::send && info.kind != wire::OpKind::rdma_write) {
      e.count(Counter::rx_drop_opcode);
      return;
    }
    const uint32_t psn = pkt.bth.psn;
    if (info.is_first()) {
      if (psn != q.resp.epsn) e.count(Counter::out_of_seq_request);
      q.resp.in_msg = InMsg::none;  // a message whose tail was lost is abandoned; its receive WQE is reused
      q.resp.uc_dropping = false;
    } else if (q.resp.uc_dropping || psn != q.resp.epsn) {
      e.count(Counter::out_of_seq_request);
      q.resp.uc_dropping = true;
      q.resp.in_msg = InMsg::none;
      q.resp.epsn = wire::psn_add(psn, 1);
      return;
    }
    q.resp.epsn = wire::psn_add(psn, 1);
    if (info.kind == wire::OpKind::send)
      do_send();
    else
      do_write();
  }

  void ud() {
    const wire::OpcodeInfo& info = *pkt.info;
    if (info.kind != wire::OpKind::send) {
      e.count(Counter::rx_drop_opcode);
      return;
    }
    if (pkt.deth.qkey != q.attr.qkey) {
      e.count(Counter::rx_drop_qkey);
      e.note(Note::drop_bad_qkey, q.qpn);
      return;
    }
    if (!e.pop_recv(q)) {
      e.count(Counter::rx_drop_no_recv_wqe);
      return;
    }
    // 40-byte GRH area: the IPv6 header, or for IPv4 20 zero bytes then the IPv4 header (as rxe/mlx5)
    uint8_t grh[40] = {};
    // RoCE has no SL on the wire; like ConnectX (mlx5's CQE), wc.sl tells which L3 header the GRH area
    // holds: bit 3 = RoCEv2 (UDP), bits 2:0 = 1 IPv6, 2 IPv4. UCX's UD transport reads it to find the
    // destination address in the GRH area, and drops every packet when it is 0.
    const uint8_t sl = pkt.ip_version == 6 ? kWcSlRoceV2Ipv6 : kWcSlRoceV2Ipv4;
    if (pkt.ip_version == 6)
      std::memcpy(grh, frame + pkt.l3_offset, 40);
    else
      std::memcpy(grh + 20, frame + pkt.l3_offset, 20);
    const uint32_t len = pkt.payload_len;
    if (uint64_t{len} + 40 > recv_capacity(q)) {
      complete_recv(WC_LOC_LEN_ERR, WC_RECV, 0, 0, 0, pkt.deth.src_qp, false, sl);
      return;
    }
    if (!sge_copy(e, q.pd, q.resp.recv_sges.data(), q.resp.recv_num_sge, 0, grh, 40, true) ||
        (len && !sge_copy(e, q.pd, q.resp.recv_sges.data(), q.resp.recv_num_sge, 40,
                          const_cast<uint8_t*>(pkt.payload.data()), len, true))) {
      complete_recv(WC_LOC_PROT_ERR, WC_RECV, 0, 0, 0, pkt.deth.src_qp, false, sl);
      return;
    }
    uint32_t flags = WC_GRH, imm = 0;
    if (info.with_imm) {
      flags |= WC_WITH_IMM;
      uint8_t b[4];
      wire::store_be32(b, pkt.imm);
      std::memcpy(&imm, b, 4);
    }
    complete_recv(WC_SUCCESS, WC_RECV, len + 40, flags, imm, pkt.deth.src_qp, pkt.bth.se, sl);
  }
};

}  // namespace

void EngineImpl::responder_rx(Qp& q, const wire::Packet& pkt, const uint8_t* frame) {
  Responder r{*this, q, pkt, frame};
  switch (q.type) {
    case QPT_RC:
    case QPT_XRC_RECV:
      r.rc();
      break;
    case QPT_UC:
      r.uc();
      break;
    case QPT_UD:
      r.ud();
      break;
    case QPT_XRC_SEND:  // (rx_frame gives it no requests)
      break;
  }
}

bool EngineImpl::responder_tx(Qp& q, uint32_t budget, bool paced) {
  if (!q.reliable) return false;
  const QpState st = q.state.load(std::memory_order_relaxed);
  if (st != QPS_RTR && st != QPS_RTS && st != QPS_SQD) return false;
  bool did = false;
  rp_update(q);
  const uint32_t n = static_cast<uint32_t>(q.resp.res.size());
  for (uint32_t j = 0; j < n; j++) {
    RespRes& r = q.resp.res[(q.resp.res_next + j) % n];
    if (!r.pending) continue;
    if (!r.is_read) {
      wire::FrameSpec spec = q.spec;
      spec.bth.opcode = wire::make_opcode(transport_base(q.type), wire::op::atomic_acknowledge);
      spec.bth.psn = r.first_psn;
      spec.aeth = wire::Aeth{kAckSyndrome, r.msn & wire::kPsnMask};
      spec.atomic_ack_eth.orig_data = r.orig;
      if (!begin_frame(spec, 0, &q.prefix)) return did;
      finish_frame();
      r.pending = false;
      did = true;
      if (--budget == 0) return did;
      continue;
    }
    while (r.pending) {
      // READ responses are the responder's data: paced like the requester's by the QP's DCQCN rate (CNPs
      // from the requester, whose receive side the responses congest)
      if (budget == 0 || (paced && paced_now(q))) return did;
      const uint64_t rest = r.length - r.cur_offset;
      uint32_t len = static_cast<uint32_t>(rest < q.mtu ? rest : q.mtu);
      const bool first = r.cur_psn == r.start_psn;
      const bool last = r.cur_offset + len >= r.length;
      // Middle responses as batch frames where the port passes them whole (as the requester's packets:
      // engine/README.md), asked once per (re)transmission; never the last, which carries the AETH.
      if (first) r.batch_bytes = batch_bytes_for(q, packets_for(r.length, q.mtu));
      uint32_t batch = 0;
      if (!first && !last && r.batch_bytes) {
        batch = batch_packets(r.batch_bytes, q.mtu, rest);
        if (batch > 1)
          len = batch * q.mtu;
        else
          batch = 0;
      }
      MrError err;
      const uint8_t* src =
          len ? rkey_resolve(r.rkey, q, r.pd, ACCESS_REMOTE_READ, r.va + r.cur_offset, len, err) : nullptr;
      if (len && !src) {
        // the MR went away while the response was being sent
        emit_ack(*this, q,
                 wire::make_syndrome(wire::AethType::nak,
                                     static_cast<uint8_t>(wire::NakCode::remote_access_error)),
                 r.cur_psn, q.resp.msn);
        tx_flush();  // before the flush completions qp_set_error makes visible (fatal says why)
        log_qp_line(LogLevel::error, q, "to error: an MR was deregistered while READ responses were owed");
        qp_set_error(q, true, EVENT_QP_ACCESS_ERR);
        return true;
      }
      wire::FrameSpec spec = q.spec;
      spec.bth.opcode =
          wire::make_opcode(transport_base(q.type), wire::kReadResponseOpcodes.pick(first, last));
      spec.bth.psn = r.cur_psn;
      spec.aeth = wire::Aeth{kAckSyndrome, r.msn & wire::kPsnMask};
      uint8_t* dst = begin_frame(spec, len, &q.prefix);
      if (!dst) return did;
      if (gathers(len))
        gather_payload(src, len);
      else if (len)
        std::memcpy(dst, src, len);
      cur_buf.batch = static_cast<uint8_t>(batch);
      const uint32_t bytes = wire_bytes();
      finish_frame();
      rp_sent(q, bytes);
      did = true;
      budget--;
      r.cur_psn = wire::psn_add(r.cur_psn, batch ? batch : 1);
      r.cur_offset += len;
      if (last) r.pending = false;
    }
  }
  if (q.resp.ack_pending) {
    emit_ack(*this, q, q.resp.ack_syndrome, q.resp.ack_psn, q.resp.ack_msn);
    q.resp.ack_pending = false;
    did = true;
  }
  return did;
}

}  // namespace urxe::engine
