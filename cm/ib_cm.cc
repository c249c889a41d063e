// ib_cm: the CM MADs on QP1, their timers, retries and duplicate rules, as the kernel's cm.c
// (cm/internal.h).
#include <cstdio>

#include "cm/internal.h"

namespace urxe::cm::detail {

MadOut Service::address(const Id& id) const {
  MadOut o;
  o.device = static_cast<uint32_t>(id.device);
  o.sgid = id.sgid;
  o.dgid = id.dgid;
  o.dmac = id.dmac;
  o.hop_limit = id.hop_limit;
  o.traffic_class = id.tos;
  o.flow_label = id.flow_label;
  return o;
}

void Service::send(MadOut& o, const wire::CmMessage& msg, uint64_t tid) {
  wire::CmMad mad;
  mad.header.transaction_id = tid;
  mad.msg = msg;
  wire::build_cm_mad(o.mad, mad);
  bump(o.device, &Counters::tx, wire::cm_attr_id(msg));
  host_.send_mad(o);
}

// The kept MAD again; counted as sent and as a retry (cm_send_handler counts both).
void Service::resend(const Id& id) {
  bump(id.last.device, &Counters::tx, attr_of(id.last));
  bump(id.last.device, &Counters::tx_retries, attr_of(id.last));
  host_.send_mad(id.last);
}

// Sends and keeps the MAD for retransmission every `timeout_ns`, `retries` times.
void Service::send_with_retry(Id& id, const wire::CmMessage& msg, uint64_t timeout_ns, uint32_t retries) {
  id.last = address(id);
  send(id.last, msg, id.tid);
  id.retries_left = retries;
  id.deadline = host_.now_ns() + timeout_ns;
}

void Service::send_rej(const Id& id, wire::CmRejReason reason, uint8_t msg_rejected,
                       std::span<const uint8_t> pd, std::span<const uint8_t> ari) {
  if (id.device < 0) return;
  wire::CmRej rej;
  rej.local_comm_id = id.local_comm_id;
  rej.remote_comm_id = id.remote_comm_id;
  rej.message_rejected = msg_rejected;
  rej.reason = static_cast<uint16_t>(reason);
  rej.reject_info_length =
      static_cast<uint8_t>(std::min(ari.size(), rej.additional_reject_information.size()));
  std::copy_n(ari.begin(), rej.reject_info_length, rej.additional_reject_information.begin());
  std::copy_n(pd.begin(), std::min(pd.size(), rej.private_data.size()), rej.private_data.begin());
  MadOut o = address(id);
  send(o, rej, id.tid);
}

void Service::send_dreq(Id& id) {
  wire::CmDreq dreq;
  dreq.local_comm_id = id.local_comm_id;
  dreq.remote_comm_id = id.remote_comm_id;
  dreq.remote_qpn = id.remote_qpn;
  id.state = State::dreq_sent;
  send_with_retry(id, dreq, cm_timeout_ns(id.peer_response_timeout), id.max_cm_retries);
}

void Service::send_drep(const MadIn& m, uint32_t local_comm_id, uint32_t remote_comm_id, uint64_t tid) {
  wire::CmDrep drep;
  drep.local_comm_id = local_comm_id;
  drep.remote_comm_id = remote_comm_id;
  MadOut o = reply_address(m);
  send(o, drep, tid);
}

// Replies go back the way the MAD came (ib_init_ah_attr_from_wc).
MadOut Service::reply_address(const MadIn& m) const {
  MadOut o;
  o.device = m.device;
  o.sgid = m.dgid;
  o.dgid = m.sgid;
  o.dmac = m.smac;
  o.hop_limit = m.hop_limit ? m.hop_limit : 64;
  o.traffic_class = m.traffic_class;
  o.dest_qp = m.src_qp;
  return o;
}

void Service::enter_timewait(Id& id) {
  id.state = State::timewait;
  id.retries_left = 0;
  id.deadline = host_.now_ns() + cm_timeout_ns(id.local_ack_timeout);
}

void Service::expire(Id& id, uint64_t now) {
  id.deadline = UINT64_MAX;
  switch (id.state) {
    case State::addr_query:
      poll_address(id, false);
      return;
    case State::sidr_req_sent:
      if (id.retries_left > 0) {
        --id.retries_left;
        resend(id);
        id.deadline = now + cm_timeout_ns(kCmResponseTimeout);
        return;
      }
      id.state = State::closed;
      queue_event(id, UcmaEvent::unreachable, -ETIMEDOUT);
      return;
    case State::req_sent:
    case State::rep_sent:
    case State::dreq_sent:
      if (id.retries_left > 0) {
        --id.retries_left;
        resend(id);
        const uint64_t t = id.state == State::req_sent
                               ? 2 * cm_timeout_ns(kPacketLifeTime) + cm_timeout_ns(id.peer_response_timeout)
                               : cm_timeout_ns(id.peer_response_timeout);
        id.deadline = now + t;
        return;
      }
      if (id.state == State::dreq_sent) {
        enter_timewait(id);
        queue_event(id, UcmaEvent::disconnected, 0);
      } else {
        // REQ or REP never answered: the peer learns by REJ (timeout) as cm.c does.
        send_rej(id, wire::CmRejReason::timeout, id.state == State::req_sent ? 0 : 1, {});
        id.state = State::closed;
        queue_event(id, UcmaEvent::unreachable, -ETIMEDOUT);
      }
      return;
    case State::timewait:
      id.state = State::closed;
      if (!id.channel) {
        ids_.erase(id.handle);
        return;
      }
      queue_event(id, UcmaEvent::timewait_exit, 0);
      return;
    default:
      return;
  }
}

Id* Service::by_local_comm_id(uint32_t comm_id) {
  if (!comm_id) return nullptr;
  for (auto& [h, id] : ids_)
    if (id.local_comm_id == comm_id) return &id;
  return nullptr;
}

void Service::handle(const MadIn& m, const wire::MadHeader& hdr, const wire::CmReq& req) {
  // A retransmitted REQ (same remote CA GUID and comm ID), as cm_dup_req_handler: MRA while the app has not
  // accepted (the kernel's rdma_cm holds the REQ in MRA_REQ_SENT, its MRA withheld until a duplicate);
  // ignored once the REP is out (only the REP's timer sends it again) and after.
  for (auto& [h, id] : ids_) {
    if (id.remote_comm_id == req.local_comm_id && id.remote_ca_guid == req.local_ca_guid &&
        id.listener != h && id.state != State::closed && id.state != State::listen) {
      bump(m.device, &Counters::rx_duplicates, 0x10);
      if (id.state == State::req_rcvd) {
        wire::CmMra mra;
        mra.local_comm_id = id.local_comm_id;
        mra.remote_comm_id = id.remote_comm_id;
        mra.message_mraed = 0;
        mra.service_timeout = kMraServiceTimeout;
        MadOut o = reply_address(m);
        send(o, mra, hdr.transaction_id);
      }
      return;
    }
  }
  wire::CmRej rej;
  rej.remote_comm_id = req.local_comm_id;
  rej.message_rejected = 0;
  auto refuse = [&](wire::CmRejReason r) {
    rej.local_comm_id = 0;
    rej.reason = static_cast<uint16_t>(r);
    MadOut o = reply_address(m);
    send(o, rej, hdr.transaction_id);
  };
  // A new REQ from a QP we are still connected to: the peer lost that connection (it restarted). Refuse the
  // REQ as stale and take the old connection down (cm_req_handler's remote-QPN check).
  for (auto& [h, id] : ids_) {
    if (id.remote_ca_guid == req.local_ca_guid && id.remote_qpn == req.local_qpn && id.listener != h &&
        (id.state == State::rep_sent || id.state == State::established)) {
      refuse(wire::CmRejReason::stale_connection);
      if (id.state == State::established) {
        send_dreq(id);
        queue_event(id, UcmaEvent::disconnected, 0);
      }
      return;
    }
  }
  wire::IpCmHeader iph;
  if (!wire::is_ip_cm_service_id(req.service_id) || !wire::parse_ip_cm_header(req.private_data, iph)) {
    refuse(wire::CmRejReason::invalid_service_id);
    return;
  }
  if (req.primary.local_gid != m.sgid || req.primary.remote_gid != m.dgid) {
    refuse(wire::CmRejReason::invalid_gid);  // the REQ's GIDs must be the IP header's (as the kernel checks)
    return;
  }
  const uint16_t ps = 0x0100 | wire::ip_cm_port_space(req.service_id);
  const uint16_t port = wire::ip_cm_port(req.service_id);
  Id* lis = find_listener(m.device, ps, port, iph);
  if (!lis) {
    // Which of two causes: no id listens on the port at all (the app is not listening yet), or ids do and
    // none matched the REQ's device and address (which a listener bug would give too).
    size_t on_port = 0;
    for (const auto& [h, id] : ids_)
      on_port += id.state == State::listen && id.ps == ps && id.src.port == port;
    char line[160];
    std::snprintf(
        line, sizeof line, "REQ for port space 0x%04x port %u refused (REJ 8): %s", ps, port,
        on_port ? "ids listen on the port, none for its device and address" : "no id listens on the port");
    host_.note(line);
    refuse(wire::CmRejReason::invalid_service_id);
    return;
  }
  if (req.transport_service_type != static_cast<uint8_t>(wire::CmTransport::rc) &&
      req.transport_service_type != static_cast<uint8_t>(wire::CmTransport::uc)) {
    refuse(wire::CmRejReason::invalid_transport_type);
    return;
  }
  Id kid = incoming_id(*lis, m, hdr, iph, port);
  kid.qp_type = req.transport_service_type == 1 ? kIbvQptUc : kIbvQptRc;
  kid.tos = req.primary.traffic_class;
  kid.local_comm_id = new_comm_id();
  kid.remote_comm_id = req.local_comm_id;
  kid.remote_ca_guid = req.local_ca_guid;
  kid.remote_qpn = req.local_qpn;
  kid.sq_psn = req.starting_psn;
  kid.rq_psn = random24();
  kid.responder_resources = req.initiator_depth;
  kid.initiator_depth = req.responder_resources;
  kid.retry_count = req.retry_count;
  kid.rnr_retry_count = req.rnr_retry_count;
  kid.srq = req.srq;
  kid.path_mtu = std::min(req.path_mtu, path_mtu_code(devices_[m.device].mtu));
  kid.local_ack_timeout = req.primary.local_ack_timeout ? req.primary.local_ack_timeout : kPacketLifeTime + 1;
  // How long the active side may take to answer our REP (or DREQ): the REQ's Local CM Response Timeout, its
  // own (cm_req_handler's timeout_ms).
  kid.peer_response_timeout = req.local_cm_response_timeout;
  kid.max_cm_retries = req.max_cm_retries;
  kid.flow_label = req.primary.flow_label;
  kid.hop_limit = req.primary.hop_limit ? req.primary.hop_limit : 64;
  Id& k = ids_[kid.handle] = kid;
  const rdma_ucm_event_resp p =
      conn_param(req.local_qpn, req.responder_resources, req.initiator_depth, req.end_to_end_flow_control,
                 req.retry_count, req.rnr_retry_count, req.srq,
                 std::span(req.private_data).subspan(wire::kIpCmHeaderSize));
  queue_event(k, UcmaEvent::connect_request, 0, lis, &p);
}

void Service::handle(const MadIn& m, const wire::MadHeader&, const wire::CmRep& rep) {
  Id* id = by_local_comm_id(rep.remote_comm_id);
  if (!id) return;
  if (id->state == State::established && id->remote_comm_id == rep.local_comm_id) {
    // Our RTU was lost: send it again (cm_dup_rep_handler).
    bump(m.device, &Counters::rx_duplicates, 0x13);
    send_rtu(*id);
    return;
  }
  if (id->state == State::rep_rcvd) {
    bump(m.device, &Counters::rx_duplicates, 0x13);
    return;
  }
  if (id->state != State::req_sent) return;
  id->remote_comm_id = rep.local_comm_id;
  id->remote_ca_guid = rep.local_ca_guid;
  id->remote_qpn = rep.local_qpn;
  id->sq_psn = rep.starting_psn;
  id->initiator_depth = std::min(id->initiator_depth, rep.responder_resources);
  id->responder_resources = std::min(id->responder_resources, rep.initiator_depth);
  id->rnr_retry_count = rep.rnr_retry_count;
  id->state = State::rep_rcvd;
  id->deadline = UINT64_MAX;
  const rdma_ucm_event_resp p =
      conn_param(rep.local_qpn, rep.responder_resources, rep.initiator_depth, rep.end_to_end_flow_control, 0,
                 rep.rnr_retry_count, rep.srq, rep.private_data);
  queue_event(*id, UcmaEvent::connect_response, 0, nullptr, &p);
}

void Service::handle(const MadIn&, const wire::MadHeader&, const wire::CmRtu& rtu) {
  Id* id = by_local_comm_id(rtu.remote_comm_id);
  if (!id || id->state != State::rep_sent || id->remote_comm_id != rtu.local_comm_id) return;
  id->state = State::established;
  id->deadline = UINT64_MAX;
  queue_event(*id, UcmaEvent::established, 0);
}

void Service::handle(const MadIn&, const wire::MadHeader&, const wire::CmRej& rej) {
  // A "timeout" REJ may come from a side that never learnt our comm ID (its REQ unanswered): it names
  // itself by node GUID (ARI) and its own comm ID (cm_acquire_rejected_id).
  Id* id = nullptr;
  if (rej.reason == static_cast<uint16_t>(wire::CmRejReason::timeout) && rej.reject_info_length >= 8 &&
      rej.local_comm_id) {
    uint64_t guid = 0;
    for (int i = 0; i < 8; ++i) guid = guid << 8 | rej.additional_reject_information[i];
    for (auto& [h, x] : ids_)
      if (x.remote_ca_guid == guid && x.remote_comm_id == rej.local_comm_id && x.state != State::listen) {
        id = &x;
        break;
      }
  }
  if (!id) id = by_local_comm_id(rej.remote_comm_id);
  if (!id) return;
  if (id->state != State::req_sent && id->state != State::rep_sent && id->state != State::rep_rcvd &&
      id->state != State::established)
    return;
  const bool was_req = id->state == State::req_sent;
  if (!was_req && id->remote_comm_id != rej.local_comm_id) return;
  id->state = State::closed;
  id->deadline = UINT64_MAX;
  rdma_ucm_event_resp p{};
  p.param.conn.private_data_len = static_cast<uint8_t>(rej.private_data.size());
  std::memcpy(p.param.conn.private_data, rej.private_data.data(), rej.private_data.size());
  // A timeout REJ means the peer gave up on us: UNREACHABLE, as cma reports IB_CM_REJ_TIMEOUT... the
  // kernel reports every REJ as REJECTED with the reason as status.
  queue_event(*id, UcmaEvent::rejected, rej.reason, nullptr, &p);
}

void Service::handle(const MadIn&, const wire::MadHeader&, const wire::CmMra& mra) {
  Id* id = by_local_comm_id(mra.remote_comm_id);
  if (!id) return;
  // The peer needs longer: wait its service timeout before retransmitting (cm_mra_handler).
  if ((id->state == State::req_sent && mra.message_mraed == 0) ||
      (id->state == State::rep_sent && mra.message_mraed == 1))
    id->deadline = host_.now_ns() + cm_timeout_ns(mra.service_timeout) + cm_timeout_ns(kPacketLifeTime);
}

void Service::handle(const MadIn& m, const wire::MadHeader& hdr, const wire::CmDreq& dreq) {
  Id* id = by_local_comm_id(dreq.remote_comm_id);
  if (!id || id->remote_comm_id != dreq.local_comm_id) {
    // Unknown or already gone: answer anyway so the peer stops retrying (cm_issue_drep).
    send_drep(m, dreq.remote_comm_id, dreq.local_comm_id, hdr.transaction_id);
    return;
  }
  switch (id->state) {
    case State::established:
    case State::rep_sent:
    case State::dreq_sent:  // crossing DREQs: both answer and both report the disconnect
      send_drep(m, id->local_comm_id, id->remote_comm_id, hdr.transaction_id);
      enter_timewait(*id);
      queue_event(*id, UcmaEvent::disconnected, 0);
      return;
    case State::timewait:
    case State::closed:
      bump(m.device, &Counters::rx_duplicates, 0x15);
      send_drep(m, id->local_comm_id, id->remote_comm_id, hdr.transaction_id);
      return;
    default:
      return;
  }
}

void Service::handle(const MadIn&, const wire::MadHeader&, const wire::CmDrep& drep) {
  Id* id = by_local_comm_id(drep.remote_comm_id);
  if (!id || id->state != State::dreq_sent || id->remote_comm_id != drep.local_comm_id) return;
  enter_timewait(*id);
  queue_event(*id, UcmaEvent::disconnected, 0);
}

void Service::handle(const MadIn& m, const wire::MadHeader& hdr, const wire::CmSidrReq& sreq) {
  // A retransmitted SIDR_REQ while the app decides: dropped (cm_sidr_req_handler keeps the remote IDs).
  for (auto& [h, id] : ids_)
    if (id.state == State::req_rcvd && is_ud(id) && id.remote_comm_id == sreq.request_id &&
        id.dgid == m.sgid) {
      bump(m.device, &Counters::rx_duplicates, 0x17);
      return;
    }
  auto answer_status = [&](uint8_t status) {
    wire::CmSidrRep rep;
    rep.request_id = sreq.request_id;
    rep.status = status;
    rep.service_id = sreq.service_id;
    MadOut o = reply_address(m);
    send(o, rep, hdr.transaction_id);
  };
  wire::IpCmHeader iph;
  if (!wire::is_ip_cm_service_id(sreq.service_id) || !wire::parse_ip_cm_header(sreq.private_data, iph)) {
    answer_status(1);  // service ID not supported
    return;
  }
  const uint16_t ps = 0x0100 | wire::ip_cm_port_space(sreq.service_id);
  const uint16_t port = wire::ip_cm_port(sreq.service_id);
  Id* lis = find_listener(m.device, ps, port, iph);
  if (!lis) {
    answer_status(1);
    return;
  }
  Id kid = incoming_id(*lis, m, hdr, iph, port);
  kid.qp_type = kIbvQptUd;
  kid.remote_comm_id = sreq.request_id;
  Id& k = ids_[kid.handle] = kid;
  rdma_ucm_event_resp p{};
  p.param.ud.private_data_len = static_cast<uint8_t>(sreq.private_data.size() - wire::kIpCmHeaderSize);
  std::memcpy(p.param.ud.private_data, sreq.private_data.data() + wire::kIpCmHeaderSize,
              p.param.ud.private_data_len);
  queue_event(k, UcmaEvent::connect_request, 0, lis, &p);
}

void Service::handle(const MadIn&, const wire::MadHeader&, const wire::CmSidrRep& rep) {
  Id* id = by_local_comm_id(rep.request_id);
  if (!id || id->state != State::sidr_req_sent) return;
  id->deadline = UINT64_MAX;
  id->state = State::closed;
  rdma_ucm_event_resp p{};
  if (rep.status != 0) {
    queue_event(*id, UcmaEvent::unreachable, rep.status, nullptr, &p);  // cma_sidr_rep_handler
    return;
  }
  auto& ud = p.param.ud;
  ud.qp_num = rep.qpn;
  ud.qkey = rep.qkey;
  ud.ah_attr.is_global = 1;
  ud.ah_attr.port_num = 1;
  std::memcpy(ud.ah_attr.grh.dgid, id->dgid.data(), 16);
  ud.ah_attr.grh.sgid_index = sgid_index(*id);
  ud.ah_attr.grh.hop_limit = id->hop_limit;
  ud.ah_attr.grh.traffic_class = id->tos;
  ud.ah_attr.grh.flow_label = id->flow_label;
  ud.private_data_len = static_cast<uint8_t>(rep.private_data.size());
  std::memcpy(ud.private_data, rep.private_data.data(), rep.private_data.size());
  queue_event(*id, UcmaEvent::established, 0, nullptr, &p);
}

void Service::send_sidr_rep(const Id& id, uint8_t status, uint32_t qpn, uint32_t qkey,
                            std::span<const uint8_t> pd) {
  wire::CmSidrRep rep;
  rep.request_id = id.remote_comm_id;
  rep.status = status;
  rep.qpn = qpn;
  rep.qkey = qkey;
  rep.service_id = wire::make_ip_cm_service_id(ps_byte(id.ps), id.src.port);
  std::copy_n(pd.begin(), std::min(pd.size(), rep.private_data.size()), rep.private_data.begin());
  MadOut o = address(id);
  send(o, rep, id.tid);
}

void Service::send_rtu(const Id& id) {
  wire::CmRtu rtu;
  rtu.local_comm_id = id.local_comm_id;
  rtu.remote_comm_id = id.remote_comm_id;
  MadOut o = address(id);
  send(o, rtu, id.tid);
}

// The conn part of a CONNECT_REQUEST or CONNECT_RESPONSE event, from the REQ's or REP's fields.
rdma_ucm_event_resp Service::conn_param(uint32_t qpn, uint8_t responder_resources, uint8_t initiator_depth,
                                        bool flow_control, uint8_t retry_count, uint8_t rnr_retry_count,
                                        bool srq, std::span<const uint8_t> private_data) {
  rdma_ucm_event_resp p{};
  auto& c = p.param.conn;
  c.qp_num = qpn;
  c.responder_resources = responder_resources;
  c.initiator_depth = initiator_depth;
  c.flow_control = flow_control;
  c.retry_count = retry_count;
  c.rnr_retry_count = rnr_retry_count;
  c.srq = srq;
  c.private_data_len = static_cast<uint8_t>(std::min(private_data.size(), sizeof c.private_data));
  std::memcpy(c.private_data, private_data.data(), c.private_data_len);
  return p;
}

// The new id of a connection request (REQ or SIDR_REQ) to listener `lis`: on the listener's channel and
// port space, without a uid until ACCEPT, addressed from the IP CM header and back the way the MAD came.
Id Service::incoming_id(const Id& lis, const MadIn& m, const wire::MadHeader& hdr,
                        const wire::IpCmHeader& iph, uint16_t port) {
  Id kid;
  kid.handle = next_handle_++;
  kid.channel = lis.channel;
  kid.ps = lis.ps;
  kid.listener = lis.handle;
  kid.device = static_cast<int>(m.device);
  kid.bound = true;
  kid.src.family = kid.dst.family = iph.ip_version == 4 ? AF_INET : AF_INET6;
  kid.src.ip = wire::ip_cm_addr_to_gid(iph, iph.destination_ip);
  kid.src.port = port;
  kid.dst.ip = wire::ip_cm_addr_to_gid(iph, iph.source_ip);
  kid.dst.port = iph.source_port;
  kid.state = State::req_rcvd;
  kid.tid = hdr.transaction_id;
  kid.sgid = m.dgid;
  kid.dgid = m.sgid;
  kid.dmac = m.smac;
  kid.hop_limit = m.hop_limit ? m.hop_limit : 64;
  return kid;
}

}  // namespace urxe::cm::detail
