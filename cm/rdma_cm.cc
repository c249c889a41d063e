// rdma_cm: addresses, port spaces, routes, QP attributes and the app's connection commands, as the
// kernel's cma.c (cm/internal.h).
#include "cm/internal.h"

namespace urxe::cm::detail {

int Service::device_of_ifindex(int ifindex) const {
  for (const auto& d : devices_)
    if (d.ifindex == ifindex) return static_cast<int>(d.index);
  return -1;
}

bool Service::port_conflict(const Id& self, const Addr& a) const {
  for (const auto& [h, o] : ids_) {
    if (&o == &self || !o.bound || !o.channel || o.ps != self.ps || o.src.port != a.port || o.listener)
      continue;
    if (o.state != State::idle && o.state != State::listen && o.state != State::addr_query &&
        o.state != State::addr_resolved && o.state != State::route_resolved && o.src.port == a.port &&
        !(o.state == State::listen))
      continue;  // connected children share their listener's port
    const bool overlap = o.src.any() || a.any() || o.src.ip == a.ip;
    if (!overlap) continue;
    if (self.reuseaddr && o.reuseaddr && o.state != State::listen) continue;
    return true;
  }
  return false;
}

int Service::bind(Id& id, const Addr& a) {
  if (id.bound) return EINVAL;
  if (a.family != AF_INET && a.family != AF_INET6) return EAFNOSUPPORT;
  id.device = -1;
  if (!a.any() && !a.loopback()) {  // a loopback address binds no device, as the wildcard
    const int ifindex = host_.local_address_ifindex(a.ip);
    if (!ifindex) return EADDRNOTAVAIL;
    id.device = device_of_ifindex(ifindex);
    if (id.device < 0) return ENODEV;  // a local address, but not on a urxe device
  }
  Addr bound = a;
  if (bound.port == 0) {
    // Ephemeral port from the kernel's default ip_local_port_range, at a random start.
    const uint32_t lo = 32768, n = 60999 - 32768 + 1;
    const uint32_t start = static_cast<uint32_t>(host_.random_u64()) % n;
    bool found = false;
    for (uint32_t i = 0; i < n && !found; ++i) {
      bound.port = static_cast<uint16_t>(lo + (start + i) % n);
      found = !port_conflict(id, bound);
    }
    if (!found) return EADDRNOTAVAIL;
  } else if (port_conflict(id, bound)) {
    return EADDRINUSE;
  }
  id.src = bound;
  id.bound = true;
  return 0;
}

CommandResult Service::bind_ip(const rdma_ucm_bind_ip& c) {
  Id* id = find(c.id);
  if (!id) return {EINVAL, {}};
  Addr a;
  if (!read_sockaddr(&c.addr, sizeof c.addr, a) || a.family == 0) return {EAFNOSUPPORT, {}};
  if (id->state != State::idle) return {EINVAL, {}};
  return {bind(*id, a), {}};
}

CommandResult Service::resolve_ip(const rdma_ucm_resolve_ip& c) {
  Id* id = find(c.id);
  if (!id) return {EINVAL, {}};
  Addr src, dst;
  if (!read_sockaddr(&c.dst_addr, sizeof c.dst_addr, dst) || dst.family == 0) return {EAFNOSUPPORT, {}};
  read_sockaddr(&c.src_addr, sizeof c.src_addr, src);
  if (id->state != State::idle && id->state != State::addr_resolved) return {EINVAL, {}};
  if (!id->bound) {
    if (src.family == 0) {
      src = {};
      src.family = dst.family;
      if (dst.family == AF_INET) src.ip = v4_gid("\0\0\0\0");
    }
    src.scope_id = src.scope_id ? src.scope_id : dst.scope_id;
    if (const int err = bind(*id, src)) return {err, {}};
  }
  if (dst.scope_id == 0) dst.scope_id = id->src.scope_id;
  id->dst = dst;
  id->state = State::addr_query;
  id->addr_deadline = host_.now_ns() + uint64_t{c.timeout_ms ? c.timeout_ms : 2000} * 1'000'000;
  const bool multicast = dst.is_v4() ? (dst.ip[12] & 0xf0) == 0xe0 : dst.ip[0] == 0xff;
  if (multicast) {
    // A group address resolves to the bound device (or the only one), as the kernel resolves it (no ARP:
    // the MAC is the group's); an unbound source takes the device's first address of the group's family.
    const int dev = id->device >= 0 ? id->device : devices_.size() == 1 ? 0 : -1;
    if (dev < 0) {
      id->state = State::idle;
      queue_event(*id, UcmaEvent::addr_error, -ENODEV);
      return {};
    }
    id->device = dev;
    if (id->src.any())
      for (const wire::Gid& g : devices_[dev].gids)
        if (g != wire::Gid{} && wire::gid_is_ipv4_mapped(g) == dst.is_v4()) {
          id->src.ip = g;
          break;
        }
    id->sgid = id->src.ip;
    id->state = State::addr_resolved;
    queue_event(*id, UcmaEvent::addr_resolved, 0);
    return {};
  }
  if (dst.loopback()) {
    // As the kernel: the first device, the loopback source address; RESOLVE_ROUTE then fails (ENODEV).
    if (devices_.empty()) {
      id->state = State::idle;
      queue_event(*id, UcmaEvent::addr_error, -ENODEV);
      return {};
    }
    if (id->device < 0) id->device = 0;
    if (id->src.any()) {
      const uint16_t port = id->src.port;
      id->src = dst;
      if (dst.is_v4()) id->src.ip = v4_gid("\x7f\0\0\x01");
      id->src.port = port;
    }
    id->state = State::addr_resolved;
    queue_event(*id, UcmaEvent::addr_resolved, 0);
    return {};
  }
  poll_address(*id, true);
  return {};
}

// One look at the route for a pending RESOLVE_IP; ADDR_RESOLVED or ADDR_ERROR when it is decided.
void Service::poll_address(Id& id, bool first) {
  const RouteResult r = host_.lookup_route(id.dst.ip, id.src.any() ? wire::Gid{} : id.src.ip,
                                           static_cast<int>(id.dst.scope_id), first);
  using S = RouteResult::State;
  if (r.state == S::pending && host_.now_ns() < id.addr_deadline) {
    id.deadline = std::min(host_.now_ns() + kAddrPollNs, id.addr_deadline);
    return;
  }
  id.deadline = UINT64_MAX;
  if (r.state != S::resolved || r.device >= devices_.size() ||
      (id.device >= 0 && uint32_t(id.device) != r.device)) {
    id.state = State::idle;
    const int err = r.state == S::pending       ? -ETIMEDOUT
                    : r.state == S::not_urxe    ? -ENODEV
                    : r.state == S::unreachable ? -EHOSTUNREACH
                                                : -ENODEV;
    queue_event(id, UcmaEvent::addr_error, err);
    return;
  }
  id.device = static_cast<int>(r.device);
  if (id.src.any()) {
    const uint16_t port = id.src.port;
    id.src.ip = r.src;
    id.src.port = port;
    if (id.src.family == AF_INET6 && wire::gid_is_ipv4_mapped(r.src) && id.dst.family == AF_INET)
      id.src.family = AF_INET;
  }
  id.dmac = r.dmac;
  id.hop_limit = r.hop_limit ? r.hop_limit : 64;
  id.state = State::addr_resolved;
  queue_event(id, UcmaEvent::addr_resolved, 0);
}

CommandResult Service::resolve_route(const rdma_ucm_resolve_route& c) {
  Id* id = find(c.id);
  if (!id) return {EINVAL, {}};
  if (id->state != State::addr_resolved && id->state != State::route_resolved) return {EINVAL, {}};
  if (id->dst.loopback()) return {ENODEV, {}};  // no RoCE path to a loopback address (kernel: the same)
  const CmDevice& d = devices_[id->device];
  id->path_mtu = path_mtu_code(d.mtu);
  id->sgid = id->src.ip;
  id->dgid = id->dst.ip;
  // rdma_cm's flow label for RoCE: a hash of the port pair.
  id->flow_label = (uint32_t{id->src.port} * 31 + id->dst.port) & 0xfffff;
  id->state = State::route_resolved;
  queue_event(*id, UcmaEvent::route_resolved, 0);
  return {};
}

void Service::fill_path(const Id& id, ib_user_path_rec& p) const {
  std::memcpy(p.dgid, id.dgid.data(), 16);
  std::memcpy(p.sgid, id.sgid.data(), 16);
  p.dlid = p.slid = 0;
  p.flow_label = htonl(id.flow_label);
  p.reversible = 1;
  p.mtu = id.path_mtu;
  p.pkey = htons(0xffff);
  p.hop_limit = id.hop_limit;
  p.traffic_class = id.tos;
  p.numb_path = 1;
  p.mtu_selector = 2;  // exactly
  p.rate_selector = 2;
  p.packet_life_time_selector = 2;
  p.packet_life_time = kPacketLifeTime;
}

CommandResult Service::query_route(const rdma_ucm_query& c) {
  Id* id = find(c.id);
  if (!id) return {EINVAL, {}};
  rdma_ucm_query_route_resp r{};
  write_sockaddr(id->src, r.src_addr);
  write_sockaddr(id->dst, r.dst_addr);
  r.ibdev_index = UINT32_MAX;  // libibverbs in sysfs mode has no index: librdmacm matches the GUID
  if (id->device >= 0) {
    // __be64 on the wire of this ABI: the GUID's bytes in network order.
    const uint64_t be = htobe64(devices_[id->device].node_guid);
    std::memcpy(&r.node_guid, &be, sizeof be);
    r.port_num = 1;
  }
  if (id->state >= State::route_resolved && id->state != State::listen && id->device >= 0) {
    r.num_paths = 1;
    fill_path(*id, r.ib_route[0]);
  }
  r.ib_route[0].pkey = htons(0xffff);
  return answer(r);
}

CommandResult Service::listen(const rdma_ucm_listen& c) {
  Id* id = find(c.id);
  if (!id) return {EINVAL, {}};
  if (id->state == State::listen) {
    id->backlog = c.backlog > 0 && c.backlog < kDefaultBacklog ? c.backlog : kDefaultBacklog;
    return {};
  }
  if (id->state != State::idle) return {EINVAL, {}};
  if (!id->bound) {
    Addr any;
    any.family = AF_INET;
    any.ip = v4_gid("\0\0\0\0");
    if (const int err = bind(*id, any)) return {err, {}};
  }
  for (const auto& [h, o] : ids_)
    if (&o != id && o.channel && o.state == State::listen && o.ps == id->ps && o.src.port == id->src.port &&
        (o.src.any() || id->src.any() || o.src.ip == id->src.ip))
      return {EADDRINUSE, {}};
  id->backlog = c.backlog > 0 && c.backlog < kDefaultBacklog ? c.backlog : kDefaultBacklog;
  id->state = State::listen;
  return {};
}

CommandResult Service::connect(const rdma_ucm_connect& c) {
  Id* id = find(c.id);
  if (!id) return {EINVAL, {}};
  if (!c.conn_param.valid) return {EINVAL, {}};
  if (id->state != State::route_resolved) return {EINVAL, {}};
  const CmDevice& d = devices_[id->device];
  id->local_comm_id = new_comm_id();
  id->tid = (uint64_t{next_tid_hi_++} << 32) | id->local_comm_id;
  if (is_ud(*id)) {
    // UD: service ID resolution (SIDR) instead of a connection; ESTABLISHED comes with the peer's QPN,
    // Q_Key and address handle (cma_resolve_ib_udp).
    wire::CmSidrReq sreq;
    sreq.request_id = id->local_comm_id;
    sreq.partition_key = 0xffff;
    sreq.service_id = wire::make_ip_cm_service_id(ps_byte(id->ps), id->dst.port);
    write_ip_cm(*id, sreq.private_data);
    const size_t pd =
        std::min<size_t>(c.conn_param.private_data_len, sreq.private_data.size() - wire::kIpCmHeaderSize);
    std::memcpy(sreq.private_data.data() + wire::kIpCmHeaderSize, c.conn_param.private_data, pd);
    id->local_qpn = c.conn_param.qp_num & 0xffffff;
    id->state = State::sidr_req_sent;
    send_with_retry(*id, sreq, cm_timeout_ns(kCmResponseTimeout), kMaxCmRetries);
    return {};
  }
  id->local_qpn = c.conn_param.qp_num & 0xffffff;
  id->rq_psn = random24();
  id->responder_resources = c.conn_param.responder_resources;
  id->initiator_depth = c.conn_param.initiator_depth;
  id->retry_count = std::min<uint8_t>(c.conn_param.retry_count, 7);
  id->rnr_retry_count = std::min<uint8_t>(c.conn_param.rnr_retry_count, 7);
  id->srq = c.conn_param.srq;
  id->local_ack_timeout = id->ack_timeout ? id->ack_timeout : kPacketLifeTime + 1;

  wire::CmReq req;
  req.local_comm_id = id->local_comm_id;
  req.service_id = wire::make_ip_cm_service_id(ps_byte(id->ps), id->dst.port);
  req.local_ca_guid = d.node_guid;
  req.local_qpn = id->local_qpn;
  req.responder_resources = id->responder_resources;
  req.initiator_depth = id->initiator_depth;
  req.remote_cm_response_timeout = kCmResponseTimeout;
  req.transport_service_type =
      static_cast<uint8_t>(id->qp_type == kIbvQptUc ? wire::CmTransport::uc : wire::CmTransport::rc);
  req.end_to_end_flow_control = c.conn_param.flow_control != 0;
  req.starting_psn = id->rq_psn;
  req.local_cm_response_timeout = kCmResponseTimeout;
  req.retry_count = id->retry_count;
  req.partition_key = 0xffff;
  req.path_mtu = id->path_mtu;
  req.rnr_retry_count = id->rnr_retry_count;
  req.max_cm_retries = kMaxCmRetries;
  req.srq = id->srq;
  req.primary.local_lid = req.primary.remote_lid = 0xffff;
  req.primary.local_gid = id->sgid;
  req.primary.remote_gid = id->dgid;
  req.primary.flow_label = id->flow_label;
  req.primary.traffic_class = id->tos;
  req.primary.hop_limit = id->hop_limit;
  req.primary.subnet_local = id->hop_limit <= 1;
  req.primary.local_ack_timeout = id->local_ack_timeout;
  write_ip_cm(*id, req.private_data);
  const size_t pd =
      std::min<size_t>(c.conn_param.private_data_len, req.private_data.size() - wire::kIpCmHeaderSize);
  std::memcpy(req.private_data.data() + wire::kIpCmHeaderSize, c.conn_param.private_data, pd);
  id->state = State::req_sent;
  id->peer_response_timeout = kCmResponseTimeout;
  id->max_cm_retries = kMaxCmRetries;
  send_with_retry(*id, req, 2 * cm_timeout_ns(kPacketLifeTime) + cm_timeout_ns(kCmResponseTimeout),
                  kMaxCmRetries);
  return {};
}

CommandResult Service::accept(const rdma_ucm_accept& c) {
  Id* id = find(c.id);
  if (!id) return {EINVAL, {}};
  if (id->state == State::rep_rcvd) {
    // The active side's ACCEPT (librdmacm after moving its QP to RTS, or rdma_establish): RTU.
    send_rtu(*id);
    id->state = State::established;
    id->deadline = UINT64_MAX;
    return {};
  }
  if (id->state != State::req_rcvd || !c.conn_param.valid) return {EINVAL, {}};
  id->uid = c.uid;
  id->listener = 0;
  if (is_ud(*id)) {
    send_sidr_rep(*id, 0, c.conn_param.qp_num & 0xffffff, c.conn_param.qkey ? c.conn_param.qkey : kUdQkey,
                  {c.conn_param.private_data, c.conn_param.private_data_len});
    id->state = State::closed;  // nothing more happens on a resolved UD id
    return {};
  }
  id->local_qpn = c.conn_param.qp_num & 0xffffff;
  id->responder_resources = c.conn_param.responder_resources;
  id->initiator_depth = c.conn_param.initiator_depth;
  if (c.conn_param.rnr_retry_count < 8) id->rnr_retry_count = c.conn_param.rnr_retry_count;
  wire::CmRep rep;
  rep.local_comm_id = id->local_comm_id;
  rep.remote_comm_id = id->remote_comm_id;
  rep.local_qpn = id->local_qpn;
  rep.starting_psn = id->rq_psn;
  rep.responder_resources = id->responder_resources;
  rep.initiator_depth = id->initiator_depth;
  rep.target_ack_delay = kTargetAckDelay;
  rep.end_to_end_flow_control = c.conn_param.flow_control != 0;
  rep.rnr_retry_count = std::min<uint8_t>(c.conn_param.rnr_retry_count, 7);
  rep.srq = c.conn_param.srq;
  rep.local_ca_guid = devices_[id->device].node_guid;
  std::memcpy(rep.private_data.data(), c.conn_param.private_data,
              std::min<size_t>(c.conn_param.private_data_len, rep.private_data.size()));
  id->state = State::rep_sent;
  send_with_retry(*id, rep, cm_timeout_ns(id->peer_response_timeout), id->max_cm_retries);
  return {};
}

CommandResult Service::reject(const rdma_ucm_reject& c) {
  Id* id = find(c.id);
  if (!id) return {EINVAL, {}};
  if (id->state != State::req_rcvd && id->state != State::rep_rcvd) return {EINVAL, {}};
  if (is_ud(*id)) {
    send_sidr_rep(*id, 2 /* rejected */, 0, 0, {c.private_data, c.private_data_len});
    id->state = State::closed;
    return {};
  }
  const uint8_t len = std::min<uint8_t>(c.private_data_len, 148);
  send_rej(*id, wire::CmRejReason::consumer_reject, id->state == State::req_rcvd ? 0 : 1,
           {c.private_data, len});
  id->state = State::closed;
  id->deadline = UINT64_MAX;
  return {};
}

// The IP CM header that starts REQ and SIDR_REQ private data: versions, our port, both addresses.
void Service::write_ip_cm(const Id& id, std::span<uint8_t> pd) const {
  wire::IpCmHeader h;
  h.ip_version = id.src.family == AF_INET ? 4 : 6;
  h.source_port = id.src.port;
  auto put_ip = [](const Addr& a, std::array<uint8_t, 16>& out) {
    out = {};
    if (a.family == AF_INET)
      std::memcpy(&out[12], &a.ip[12], 4);
    else
      std::memcpy(out.data(), a.ip.data(), 16);
  };
  put_ip(id.src, h.source_ip);
  put_ip(id.dst, h.destination_ip);
  wire::write_ip_cm_header(pd, h);
}

// The listener a REQ or SIDR_REQ to (port space, port) reaches on `device`: same address or a wildcard of a
// compatible family (an IPv6 wildcard takes IPv4 unless AFONLY); a specific listener wins.
Id* Service::find_listener(uint32_t device, uint16_t ps, uint16_t port, const wire::IpCmHeader& iph) {
  const bool v4 = iph.ip_version == 4;
  const wire::Gid dst_ip = wire::ip_cm_addr_to_gid(iph, iph.destination_ip);
  Id* lis = nullptr;
  for (auto& [h, id] : ids_) {
    if (id.state != State::listen || !id.channel || id.ps != ps || id.src.port != port) continue;
    if (id.device >= 0 && uint32_t(id.device) != device) continue;
    if (id.src.any()) {
      if (v4 ? (id.src.family == AF_INET6 && id.afonly) : id.src.family == AF_INET) continue;
    } else if (id.src.ip != dst_ip) {
      continue;
    }
    if (!lis || (lis->src.any() && !id.src.any())) lis = &id;
  }
  return lis;
}

CommandResult Service::disconnect(const rdma_ucm_disconnect& c) {
  Id* id = find(c.id);
  if (!id) return {EINVAL, {}};
  switch (id->state) {
    case State::established:
    case State::rep_sent:  // data may already flow before the RTU (the kernel allows it)
      send_dreq(*id);
      return {};
    case State::dreq_sent:
    case State::timewait:
    case State::closed:
      return {};  // the peer disconnected first (we answered its DREQ) or we already did
    default:
      return {EINVAL, {}};
  }
}

CommandResult Service::notify(const rdma_ucm_notify& c) {
  Id* id = find(c.id);
  if (!id) return {EINVAL, {}};
  // IB_EVENT_COMM_EST: data arrived before the RTU, which counts as the RTU (ib_cm_notify).
  if (c.event == 6 /* IB_EVENT_COMM_EST */ && id->state == State::rep_sent) {
    id->state = State::established;
    id->deadline = UINT64_MAX;
    queue_event(*id, UcmaEvent::established, 0);
  }
  return {};
}

CommandResult Service::init_qp_attr(const rdma_ucm_init_qp_attr& c) {
  Id* id = find(c.id);
  if (!id) return {EINVAL, {}};
  if (id->device < 0) return {EINVAL, {}};
  ib_uverbs_qp_attr a{};
  a.qp_state = c.qp_state;
  a.port_num = 1;
  const bool ud = id->qp_type == kIbvQptUd || id->ps == RDMA_PS_UDP;
  const bool have_cm = id->state == State::req_rcvd || id->state == State::rep_sent ||
                       id->state == State::rep_rcvd || id->state == State::established ||
                       id->state == State::req_sent;
  switch (c.qp_state) {
    case kQpsInit:
      a.qp_attr_mask = kQpState | kQpPkeyIndex | kQpPort;
      a.pkey_index = 0;
      if (ud) {
        a.qp_attr_mask |= kQpQkey;
        a.qkey = kUdQkey;
      } else {
        a.qp_attr_mask |= kQpAccessFlags;
        a.qp_access_flags = have_cm ? uint32_t{kAccessRemoteWrite} : 0u;
        if (have_cm && id->responder_resources) a.qp_access_flags |= kAccessRemoteRead | kAccessRemoteAtomic;
      }
      break;
    case kQpsRtr: {
      if (ud) {
        a.qp_attr_mask = kQpState;
        break;
      }
      if (!have_cm || id->state == State::req_sent) return {EINVAL, {}};
      a.qp_attr_mask =
          kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic | kQpMinRnrTimer;
      a.path_mtu = id->path_mtu;
      a.dest_qp_num = id->remote_qpn;
      a.rq_psn = id->rq_psn;
      a.max_dest_rd_atomic = id->responder_resources;
      a.min_rnr_timer = 0;
      auto& ah = a.ah_attr;
      ah.is_global = 1;
      ah.port_num = 1;
      std::memcpy(ah.grh.dgid, id->dgid.data(), 16);
      ah.grh.flow_label = id->flow_label;
      ah.grh.hop_limit = id->hop_limit;
      ah.grh.traffic_class = id->tos;
      ah.grh.sgid_index = sgid_index(*id);
      break;
    }
    case kQpsRts:
      if (ud) {
        a.qp_attr_mask = kQpState | kQpSqPsn;
        a.sq_psn = 0;
        break;
      }
      // The passive side moves its QP to RTS before it accepts (rdma_accept), as cm_init_qp_rts_attr allows.
      if (!have_cm || id->state == State::req_sent) return {EINVAL, {}};
      a.qp_attr_mask = kQpState | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpSqPsn | kQpMaxQpRdAtomic;
      a.sq_psn = id->sq_psn;
      a.timeout = id->local_ack_timeout;
      a.retry_cnt = id->retry_count;
      a.rnr_retry = id->rnr_retry_count;
      a.max_rd_atomic = id->initiator_depth;
      break;
    default:
      return {EINVAL, {}};
  }
  return answer(a);
}

uint8_t Service::sgid_index(const Id& id) const {
  const auto& gids = devices_[id.device].gids;
  for (size_t i = 0; i < gids.size(); ++i)
    if (gids[i] == id.sgid) return static_cast<uint8_t>(i);
  return 0;
}

}  // namespace urxe::cm::detail
