// ucma: channels, ids and their event queues, as the kernel's ucma.c keeps them (cm/internal.h).
#include "cm/internal.h"

namespace urxe::cm::detail {

ChannelId Service::open_channel(const ChannelOwner& owner) {
  ChannelId t = 0;
  while (t == 0 || channels_.count(t)) t = host_.random_u64();
  channels_[t].owner = owner;
  return t;
}

void Service::close_channel(ChannelId ch) {
  std::vector<uint32_t> handles;
  for (auto& [h, id] : ids_)
    if (id.channel == ch) handles.push_back(h);
  for (uint32_t h : handles) destroy_id(h);
  channels_.erase(ch);
}

CommandResult Service::command(ChannelId ch, std::span<const uint8_t> cmd, std::span<const uint8_t> extra) {
  if (!channels_.count(ch)) return {EINVAL, {}};
  UcmaCommand c;
  if (const int e = parse_ucma_command(cmd, c)) return {e, {}};
  if (const int e = check_ucma_response_room(c)) return {e, {}};
  const rdma_ucm_cmd_hdr& hdr = c.hdr;
  Body b;
  std::memcpy(b.bytes, c.body.data(), std::min<size_t>(hdr.in, sizeof b.bytes));
  out_limit_ = hdr.out;
  ch_ = ch;
  extra_ = extra;
  switch (hdr.cmd) {
    case RDMA_USER_CM_CMD_CREATE_ID:
      return create_id(b.as<rdma_ucm_create_id>());
    case RDMA_USER_CM_CMD_DESTROY_ID:
      return destroy_id_cmd(b.as<rdma_ucm_destroy_id>());
    case RDMA_USER_CM_CMD_BIND_IP:
      return bind_ip(b.as<rdma_ucm_bind_ip>());
    case RDMA_USER_CM_CMD_BIND:
      return {EAFNOSUPPORT, {}};  // AF_IB: librdmacm then uses the IP commands
    case RDMA_USER_CM_CMD_RESOLVE_IP:
      return resolve_ip(b.as<rdma_ucm_resolve_ip>());
    case RDMA_USER_CM_CMD_RESOLVE_ROUTE:
      return resolve_route(b.as<rdma_ucm_resolve_route>());
    case RDMA_USER_CM_CMD_QUERY_ROUTE:
      return query_route(b.as<rdma_ucm_query>());
    case RDMA_USER_CM_CMD_CONNECT:
      return connect(b.as<rdma_ucm_connect>());
    case RDMA_USER_CM_CMD_LISTEN:
      return listen(b.as<rdma_ucm_listen>());
    case RDMA_USER_CM_CMD_ACCEPT:
      return accept(b.as<rdma_ucm_accept>());
    case RDMA_USER_CM_CMD_REJECT:
      return reject(b.as<rdma_ucm_reject>());
    case RDMA_USER_CM_CMD_DISCONNECT:
      return disconnect(b.as<rdma_ucm_disconnect>());
    case RDMA_USER_CM_CMD_INIT_QP_ATTR:
      return init_qp_attr(b.as<rdma_ucm_init_qp_attr>());
    case RDMA_USER_CM_CMD_GET_EVENT:
      return get_event();
    case RDMA_USER_CM_CMD_SET_OPTION:
      return set_option(b.as<rdma_ucm_set_option>());
    case RDMA_USER_CM_CMD_NOTIFY:
      return notify(b.as<rdma_ucm_notify>());
    case RDMA_USER_CM_CMD_MIGRATE_ID:
      return migrate_id(b.as<rdma_ucm_migrate_id>());
    case RDMA_USER_CM_CMD_JOIN_IP_MCAST:
      return join_ip_mcast(b.as<rdma_ucm_join_ip_mcast>());
    case RDMA_USER_CM_CMD_JOIN_MCAST:
      return join_mcast(b.as<rdma_ucm_join_mcast>());
    case RDMA_USER_CM_CMD_LEAVE_MCAST:
      return leave_mcast(b.as<rdma_ucm_destroy_id>());
    default:
      return {ENOSYS, {}};  // QUERY, RESOLVE_ADDR: AF_IB only
  }
}

void Service::on_mad(const MadIn& m) {
  wire::CmMad mad;
  if (m.device >= devices_.size() || wire::parse_cm_mad(m.mad, mad) != wire::MadError::ok ||
      mad.header.method != wire::kMadMethodSend) {
    ++counters_.rx_dropped;
    if (m.device < per_device_.size()) ++per_device_[m.device].rx_dropped;
    return;
  }
  bump(m.device, &Counters::rx, mad.header.attribute_id);
  std::visit([&](const auto& msg) { handle(m, mad.header, msg); }, mad.msg);
}

uint64_t Service::next_deadline_ns() const {
  uint64_t d = UINT64_MAX;
  for (const auto& [h, id] : ids_) d = std::min(d, id.deadline);
  return d;
}

void Service::on_timer() {
  const uint64_t now = host_.now_ns();
  std::vector<uint32_t> due;
  for (const auto& [h, id] : ids_)
    if (id.deadline <= now) due.push_back(h);
  for (uint32_t h : due) {
    auto it = ids_.find(h);
    if (it != ids_.end()) expire(it->second, now);
  }
}

std::vector<std::string> Service::describe_ids() const {
  std::vector<std::string> out;
  for (const auto& [h, id] : ids_) {
    char line[256];
    char src[INET6_ADDRSTRLEN] = "-", dst[INET6_ADDRSTRLEN] = "-";
    auto text = [](const Addr& a, char* buf) {
      if (a.family == AF_INET) inet_ntop(AF_INET, &a.ip[12], buf, INET6_ADDRSTRLEN);
      if (a.family == AF_INET6) inet_ntop(AF_INET6, a.ip.data(), buf, INET6_ADDRSTRLEN);
    };
    text(id.src, src);
    text(id.dst, dst);
    const auto ch = channels_.find(id.channel);
    std::snprintf(
        line, sizeof line, "id %u pid %d dev %s ps %s state %s src %s:%u dst %s:%u qpn %u comm_id 0x%08x", h,
        ch == channels_.end() ? 0 : ch->second.owner.pid,
        id.device >= 0 && size_t(id.device) < devices_.size() ? devices_[id.device].name.c_str() : "-",
        id.ps == RDMA_PS_TCP   ? "TCP"
        : id.ps == RDMA_PS_UDP ? "UDP"
                               : "IB",
        state_name(id.state), src, id.src.port, dst, id.dst.port, id.local_qpn, id.local_comm_id);
    out.emplace_back(line);
    for (const auto& [mh, mc] : mcs_) {  // its multicast groups
      if (mc.id != h) continue;
      char group[INET6_ADDRSTRLEN] = "-";
      text(mc.addr, group);
      out.back() += std::string(" mcast ") + group + (mc.send_only ? " (send-only)" : "");
    }
  }
  return out;
}

Id* Service::find(uint32_t handle) {
  auto it = ids_.find(handle);
  // An id is only reachable through the channel that holds it (a process cannot name another's ids).
  return it == ids_.end() || it->second.channel != ch_ || ch_ == 0 ? nullptr : &it->second;
}

uint32_t Service::new_comm_id() {
  for (;;) {
    const auto c = static_cast<uint32_t>(host_.random_u64());
    if (c == 0) continue;
    bool used = false;
    for (const auto& [h, id] : ids_) used |= id.local_comm_id == c;
    if (!used) return c;
  }
}

CommandResult Service::create_id(const rdma_ucm_create_id& c) {
  if (c.ps != RDMA_PS_TCP && c.ps != RDMA_PS_UDP && c.ps != RDMA_PS_IB && c.ps != RDMA_PS_IPOIB)
    return {EINVAL, {}};
  Id id;
  id.handle = next_handle_++;
  id.uid = c.uid;
  id.channel = ch_;
  id.ps = c.ps;
  id.qp_type = c.qp_type;
  ids_[id.handle] = id;
  return answer(rdma_ucm_create_id_resp{id.handle});
}

CommandResult Service::destroy_id_cmd(const rdma_ucm_destroy_id& c) {
  Id* id = find(c.id);
  if (!id) return {EINVAL, {}};
  const uint32_t reported = id->events_reported;
  destroy_id(c.id);
  return answer(rdma_ucm_destroy_id_resp{reported});
}

// As rdma_destroy_id: the peer learns (REJ before the connection is up, DREQ after) and the id's queued
// events go. The ib_cm part stays as an orphan until it reaches CLOSED.
void Service::destroy_id(uint32_t handle) {
  auto it = ids_.find(handle);
  if (it == ids_.end()) return;
  Id& id = it->second;
  leave_all(handle);  // (as cma_leave_mc_groups)
  drop_events(id);
  // Children still waiting in the listener's queue go with it.
  if (id.state == State::listen) {
    std::vector<uint32_t> kids;
    for (auto& [h, k] : ids_)
      if (k.listener == handle && k.state == State::req_rcvd && k.uid == 0) kids.push_back(h);
    for (uint32_t k : kids) destroy_id(k);
  }
  // REJs as cm_destroy_id sends them; MessageRejected as cm_format_rej gives it for the state (the peer's
  // REQ, its REP, or none of its messages).
  switch (id.state) {
    case State::req_sent:
      if (id.device >= 0) {  // "timeout", our node GUID as the ARI
        std::array<uint8_t, 8> guid;
        for (size_t i = 0; i < guid.size(); ++i)
          guid[i] = static_cast<uint8_t>(devices_[id.device].node_guid >> (56 - 8 * i));
        send_rej(id, wire::CmRejReason::timeout, 2, {}, guid);
      }
      break;
    case State::req_rcvd:
      send_rej(id, wire::CmRejReason::consumer_reject, 0, {});
      break;
    case State::rep_rcvd:
      send_rej(id, wire::CmRejReason::consumer_reject, 1, {});
      break;
    case State::rep_sent:
      send_rej(id, wire::CmRejReason::consumer_reject, 2, {});
      break;
    case State::established:
      send_dreq(id);
      break;
    default:
      break;
  }
  if (id.state == State::dreq_sent || id.state == State::timewait) {
    id.channel = 0;  // orphan: finishes its DREQ retries / timewait
    id.uid = 0;
  } else {
    ids_.erase(it);
  }
}

void Service::drop_events(Id& id) {
  auto ch = channels_.find(id.channel);
  if (ch == channels_.end()) return;
  auto& q = ch->second.events;
  const size_t before = q.size();
  q.erase(std::remove_if(q.begin(), q.end(),
                         [&](const Event& e) { return e.owner == id.handle || e.resp.id == id.handle; }),
          q.end());
  if (before != q.size()) host_.events_dequeued(id.channel, static_cast<uint32_t>(before - q.size()));
}

CommandResult Service::get_event() {
  auto& q = channels_[ch_].events;
  if (q.empty()) return {EAGAIN, {}};
  Event e = q.front();
  q.pop_front();
  host_.events_dequeued(ch_, 1);
  if (auto it = ids_.find(e.owner); it != ids_.end()) ++it->second.events_reported;
  if (auto it = mcs_.find(e.mc); e.mc && it != mcs_.end()) ++it->second.events_reported;
  return answer(e.resp);
}

CommandResult Service::migrate_id(const rdma_ucm_migrate_id& c) {
  uint64_t from = 0;
  if (extra_.size() < sizeof from) return {EINVAL, {}};
  std::memcpy(&from, extra_.data(), sizeof from);
  auto src = channels_.find(from);
  auto it = ids_.find(c.id);
  if (src == channels_.end() || it == ids_.end() || it->second.channel != from) return {EINVAL, {}};
  if (src->second.owner.uid != channels_[ch_].owner.uid) return {EPERM, {}};
  Id& id = it->second;
  // Move the id's queued events along, in order (ucma_move_events).
  auto& q = src->second.events;
  uint32_t moved = 0;
  for (auto e = q.begin(); e != q.end();) {
    if (e->owner == id.handle) {
      channels_[ch_].events.push_back(*e);
      e = q.erase(e);
      ++moved;
    } else {
      ++e;
    }
  }
  if (moved) host_.events_dequeued(from, moved);
  for (uint32_t i = 0; i < moved; ++i) host_.event_queued(ch_);
  id.channel = ch_;
  return answer(rdma_ucm_migrate_resp{id.events_reported});
}

CommandResult Service::set_option(const rdma_ucm_set_option& c) {
  Id* id = find(c.id);
  if (!id) return {EINVAL, {}};
  if (extra_.size() < c.optlen) return {EINVAL, {}};
  auto int_opt = [&](int& v) {
    if (c.optlen != sizeof(int)) return false;
    std::memcpy(&v, extra_.data(), sizeof v);
    return true;
  };
  if (c.level == RDMA_OPTION_ID) {
    int v = 0;
    switch (c.optname) {
      case RDMA_OPTION_ID_TOS:
        if (c.optlen != 1) return {EINVAL, {}};
        id->tos = extra_[0];
        id->tos_set = true;
        return {};
      case RDMA_OPTION_ID_REUSEADDR:
        if (!int_opt(v)) return {EINVAL, {}};
        if (id->state != State::idle) return {EINVAL, {}};
        id->reuseaddr = v != 0;
        return {};
      case RDMA_OPTION_ID_AFONLY:
        if (!int_opt(v)) return {EINVAL, {}};
        if (id->state != State::idle) return {EINVAL, {}};
        id->afonly = v != 0;
        return {};
      case RDMA_OPTION_ID_ACK_TIMEOUT:
        if (c.optlen != 1) return {EINVAL, {}};
        id->ack_timeout = std::min<uint8_t>(extra_[0], 31);
        return {};
      default:
        return {ENOSYS, {}};
    }
  }
  return {ENOSYS, {}};  // RDMA_OPTION_IB_PATH: paths come from the IP route on RoCE
}

void Service::queue_event(const Id& id, UcmaEvent ev, int32_t status, const Id* owner,
                          const rdma_ucm_event_resp* param) {
  if (!id.channel || (!owner && id.uid == 0 && id.listener)) return;
  auto ch = channels_.find(id.channel);
  if (ch == channels_.end()) return;
  Event e;
  if (param) e.resp = *param;
  e.owner = owner ? owner->handle : id.handle;
  e.resp.uid = owner ? owner->uid : id.uid;
  e.resp.id = id.handle;
  e.resp.event = static_cast<uint32_t>(ev);
  e.resp.status = static_cast<uint32_t>(status);
  ch->second.events.push_back(e);
  host_.event_queued(id.channel);
}

}  // namespace urxe::cm::detail

namespace urxe::cm {

uint64_t CmService::Counters::retries() const {
  uint64_t n = 0;
  for (uint64_t v : tx_retries) n += v;
  return n;
}

uint64_t CmService::Counters::duplicates() const {
  uint64_t n = 0;
  for (uint64_t v : rx_duplicates) n += v;
  return n;
}

uint64_t CmHost::random_u64() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

std::unique_ptr<CmService> CmService::create(CmHost& host) {
  return std::make_unique<detail::Service>(host);
}

}  // namespace urxe::cm
