// Receive: rx_drain takes the port's frames in bursts, rx_frame parses each one and hands it to its QP's
// completer (responses) or responder (requests), a batch frame's packets one by one.
#include "engine/internal.h"

namespace urxe::engine {

namespace {

// A frame that reached its QP: the QP state's checks, then the completer (a response) or the responder (a
// request) gets its packets.
void deliver(EngineImpl& e, Qp* qp, wire::Packet& pkt, const PacketBuf& buf) {
  const uint32_t dqpn = pkt.bth.dqpn;
  const wire::OpcodeInfo& info = *pkt.info;
  const QpState st = qp->state.load(std::memory_order_relaxed);
  // A batch frame (PacketBuf::batch, from the same-host path): the packets it stands for, one by one, each
  // as if it had come alone. Only a run of full middle packets (requests or READ responses) is one.
  const uint32_t k = buf.batch;
  if (k && (k < 2 || info.position != wire::Position::middle || pkt.bth.pad || pkt.payload_len % k)) {
    e.count(Counter::rx_drop_parse);
    e.note(Note::drop_malformed, dqpn);
    return;
  }
  const uint32_t seg = k ? pkt.payload_len / k : pkt.payload_len;
  const uint32_t psn0 = pkt.bth.psn;
  const uint8_t* payload0 = pkt.payload.data();
  auto packet = [&](uint32_t i) -> wire::Packet& {  // the batch's packet i (pkt itself when not a batch)
    if (k) {
      pkt.bth.psn = wire::psn_add(psn0, i);
      pkt.payload = wire::ByteSpan(payload0 + size_t{i} * seg, seg);
      pkt.payload_len = seg;
    }
    return pkt;
  };
  // Whether a batch's packet i still finds its QP in a state that takes it (one before it may have moved
  // the QP to ERR); the rest are dropped as frames arriving then would be.
  auto takes = [&](uint32_t i, bool response) {
    const QpState s = qp->state.load(std::memory_order_relaxed);
    const bool ok = response ? s == QPS_RTS || s == QPS_SQD
                             : s == QPS_RTR || s == QPS_RTS || s == QPS_SQD || s == QPS_SQE;
    if (!ok) e.count(Counter::rx_drop_qpn, (k ? k : 1) - i);
    return ok;
  };
  if (info.is_response) {
    if (st != QPS_RTS && st != QPS_SQD) {
      e.count(Counter::rx_drop_qpn);
      e.note(Note::drop_qp_state, dqpn);
      return;
    }
    e.count(Counter::rcvd_pkts, k ? k : 1);  // as rxe: frames that passed the header checks and reach a QP
    e.count(Counter::rcvd_bytes, wire::batch_wire_len(buf.len, pkt.payload_len, k));
    // READ responses are data too: CE on them notifies the responder (ACKs carry no payload to mark)
    if (pkt.payload_len && e.congested(pkt)) e.np_ce_received(*qp);
    for (uint32_t i = 0; i < (k ? k : 1) && (i == 0 || takes(i, true)); i++) e.completer_rx(*qp, packet(i));
    // Complete what this response finished now, before the next frame of the burst: completions then
    // appear in wire order, as on hardware. Apps waiting on one channel for a send and a receive CQ
    // (perftest -e) count on the send completion preceding the receive of the reply it provoked.
    e.completer_run(*qp);
  } else {
    if (st != QPS_RTR && st != QPS_RTS && st != QPS_SQD && st != QPS_SQE) {
      e.count(Counter::rx_drop_qpn);
      e.note(Note::drop_qp_state, dqpn);
      return;
    }
    e.count(Counter::rcvd_pkts, k ? k : 1);
    e.count(Counter::rcvd_bytes, wire::batch_wire_len(buf.len, pkt.payload_len, k));
    if (e.congested(pkt)) e.np_ce_received(*qp);
    if (st == QPS_RTR && !qp->comm_est && qp->type != QPT_UD) {  // none for UD (IBTA o11-5.1.1)
      qp->comm_est = true;
      e.async_event(EVENT_COMM_EST, qp->qpn);
    }
    for (uint32_t i = 0; i < (k ? k : 1) && (i == 0 || takes(i, false)); i++)
      e.responder_rx(*qp, packet(i), buf.data);
  }
}

}  // namespace

void EngineImpl::rx_frame(PacketBuf& buf) {
  wire::Packet& pkt = rx_pkt;
  wire::ParseOptions opt;
  opt.verify_icrc = config.verify_icrc && !buf.icrc_absent;
  // A frame that came without its ICRC crossed shared memory from another urxe (the same-host path), which
  // cannot corrupt it on the way: its IP header checksum, the sender's own, is not summed again either (as
  // a NIC's receive checksum offload).
  opt.verify_checksums = !buf.icrc_absent;
  const wire::ParseError pe = wire::parse_frame(wire::ByteSpan(buf.data, buf.len), pkt, opt);
  if (pe != wire::ParseError::ok) {
    if (pe != wire::ParseError::not_roce)  // ARP, ND, ... that a raw port passes are not the device's
      count(pe == wire::ParseError::bad_icrc ? Counter::rx_drop_icrc : Counter::rx_drop_parse);
    if (pe != wire::ParseError::not_roce)
      note(pe == wire::ParseError::bad_icrc ? Note::drop_bad_icrc : Note::drop_malformed, pkt.bth.dqpn);
    return;
  }
  const uint32_t dqpn = pkt.bth.dqpn;
  Qp* qp = (dqpn >= config.qpn_base && dqpn - config.qpn_base < qps.size())
               ? qps[dqpn - config.qpn_base].load(std::memory_order_relaxed)
               : nullptr;
  const wire::OpcodeInfo& info = *pkt.info;
  if (info.kind == wire::OpKind::cnp) {  // to the QP whose data was marked (any transport's QP)
    Qp* rq = qp_get(dqpn);
    if (rq && rq->type != QPT_UD && config.dcqcn.rp_enable) {
      const CurQp in_qp(*this, rq);
      rp_cnp_received(*rq);
      activate_locked(*rq);  // its pacing changed
    } else {
      count(Counter::rp_cnp_ignored);
    }
    return;
  }
  const wire::Transport want = !qp                  ? wire::Transport::none
                               : qp->type == QPT_RC ? wire::Transport::rc
                               : qp->type == QPT_UC ? wire::Transport::uc
                               : qp->type == QPT_UD ? wire::Transport::ud
                                                    : wire::Transport::xrc;
  // XRC: an initiator takes only responses, a target only requests
  if (!qp || info.transport != want ||
      (want == wire::Transport::xrc && (qp->type == QPT_XRC_SEND ? info.is_request : info.is_response))) {
    if (dqpn == kMulticastQpn) return rx_mcast(pkt, buf, false);  // (no QP has that number)
    count(Counter::rx_drop_qpn);
    // another process's QPN block on the same device is not a bad frame
    if (dqpn >= config.qpn_base && dqpn - config.qpn_base < qps.size()) note(Note::drop_unknown_qpn, dqpn);
    return;
  }
  const CurQp in_qp(*this, qp);
  activate_locked(
      *qp);  // whatever this frame does to it (ACK owed, window open, timers) is looked at in its visit
  // P_Key: the only table entry is the default full-membership key.
  if ((pkt.bth.pkey & 0x7fff) != 0x7fff) {
    count(Counter::rx_drop_pkey);
    note(Note::drop_bad_pkey, dqpn);
    return;
  }
  deliver(*this, qp, pkt, buf);
}

void EngineImpl::rx_mcast(wire::Packet& pkt, const PacketBuf& buf, bool own) {
  if (pkt.info->transport != wire::Transport::ud) {  // multicast is UD's alone
    count(Counter::rx_drop_qpn);
    return;
  }
  const wire::Gid src = pkt.src_gid();
  // Our own frame back from the host (a packet socket sees what the interface sends): its members here
  // got it as it was sent (mc_loopback). Another process on this device has other QPNs.
  if (!own && pkt.deth.src_qp >= config.qpn_base && pkt.deth.src_qp - config.qpn_base < qps.size() &&
      std::find(gids.begin(), gids.end(), src) != gids.end())
    return;
  McGroup* g = mc_groups.empty() ? nullptr : mc_find(pkt.dst_gid());
  if (!g) {
    count(Counter::rx_drop_mcast);
    return;
  }
  if ((pkt.bth.pkey & 0x7fff) != 0x7fff) {
    count(Counter::rx_drop_pkey);
    note(Note::drop_bad_pkey, kMulticastQpn);
    return;
  }
  // Each member as if the frame had come to it alone: its state, then its Q_Key (responder ud()).
  for (const uint32_t qpn : g->qpns) {
    Qp* qp = qp_get(qpn);
    const CurQp in_qp(*this, qp);
    activate_locked(*qp);
    deliver(*this, qp, pkt, buf);
  }
}

uint32_t EngineImpl::rx_drain(uint32_t limit) {
  const uint32_t burst = static_cast<uint32_t>(rx.size());
  uint32_t total = 0;
  while (total < limit) {
    const uint32_t n = port.rx_burst(rx.data(), burst);
    // every burst so far came back full: the frames now read waited behind `total` others in the ring
    rx_backlogged = rx_mark_frames && total >= rx_mark_frames;
    for (uint32_t i = 0; i < n; i++) rx_frame(rx[i]);
    rx_backlogged = false;
    if (n) port.rx_free(rx.data(), n);
    total += n;
    if (n < burst) break;
  }
  return total;
}

}  // namespace urxe::engine
