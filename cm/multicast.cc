// Multicast joins as the kernel's ucma.c (ucma_process_join, ucma_leave_multicast) and cma.c
// (rdma_join_multicast, cma_iboe_join_multicast: RoCEv2, no SA) do them: the join answers a handle and
// queues MULTICAST_JOIN with the address handle the app sends with (librdmacm then attaches its QP itself);
// a full member of an IPv4 group also holds the group at IP level on the device's interface (IGMP).
#include "cm/internal.h"

namespace urxe::cm::detail {

namespace {

constexpr int kEnotsupp = 524;  // the kernel's ENOTSUPP (IPv6 groups on RoCEv2)
constexpr uint32_t kMulticastQpn = 0xffffff;

// rdma_addr_size: the sockaddr length of a family the CM knows (0: none).
size_t addr_size(sa_family_t family) {
  return family == AF_INET    ? sizeof(sockaddr_in)
         : family == AF_INET6 ? sizeof(sockaddr_in6)
         : family == AF_IB    ? 48
                              : 0;
}

sa_family_t family_of(const void* p) {
  sa_family_t f;
  std::memcpy(&f, p, sizeof f);
  return f;
}

bool is_ipv4_multicast(const Addr& a) {
  return a.is_v4() && (a.ip[12] & 0xf0) == 0xe0;
}

}  // namespace

CommandResult Service::join_ip_mcast(const rdma_ucm_join_ip_mcast& c) {
  // The kernel forces a full member here (no join_flags in this command).
  const sa_family_t f = family_of(&c.addr);
  if (f != AF_INET && f != AF_INET6) return {EINVAL, {}};
  Addr group;
  if (!read_sockaddr(&c.addr, addr_size(f), group)) return {EINVAL, {}};
  return join(c.id, c.uid, group, false);
}

CommandResult Service::join_mcast(const rdma_ucm_join_mcast& c) {
  const sa_family_t f = family_of(&c.addr);
  if (!addr_size(f) || c.addr_size != addr_size(f)) return {EINVAL, {}};
  if (c.join_flags != RDMA_MC_JOIN_FLAG_FULLMEMBER && c.join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
    return {EINVAL, {}};
  Addr group;
  if (f != AF_IB && !read_sockaddr(&c.addr, c.addr_size, group)) return {EINVAL, {}};
  if (f == AF_IB) return find(c.id) ? CommandResult{kEnotsupp, {}} : CommandResult{EINVAL, {}};
  return join(c.id, c.uid, group, c.join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER);
}

CommandResult Service::join(uint32_t handle, uint64_t uid, const Addr& group, bool send_only) {
  Id* id = find(handle);
  if (!id || id->device < 0 || size_t(id->device) >= devices_.size()) return {EINVAL, {}};  // no device
  const bool addr_bound = id->state == State::idle && id->bound;
  if (!addr_bound && id->state != State::addr_resolved) return {EINVAL, {}};
  if (id->qp_type != kIbvQptUd) return {EINVAL, {}};  // UD ids only
  if (group.any()) return {EINVAL, {}};
  if (!group.is_v4()) return {kEnotsupp, {}};  // an IPv6 group on RoCEv2, as the kernel
  const CmDevice& dev = devices_[id->device];
  Multicast mc;
  mc.handle = next_handle_++;
  mc.uid = uid;
  mc.id = handle;
  mc.addr = group;
  mc.send_only = send_only;
  if (!send_only && is_ipv4_multicast(group)) {
    if (const int err = host_.ip_multicast(dev.ifindex, group.ip, true))
      host_.note("multicast: IP-level join on " + dev.name + " failed: " + std::strerror(err));
    else
      mc.ip_joined = true;
  }
  // The event (cma_make_mc_event, ib_init_ah_from_mcmember): the group as the destination GID, the
  // source address's GID, hop limit 64 (IPv4 on RoCEv2), the permissive QP, the id's Q_Key.
  rdma_ucm_event_resp param{};
  rdma_ucm_ud_param& ud = param.param.ud;
  ud.qp_num = kMulticastQpn;
  ud.qkey = id->ps == RDMA_PS_UDP ? kUdQkey : 0;
  std::memcpy(ud.ah_attr.grh.dgid, group.ip.data(), 16);
  id->sgid = id->src.ip;
  ud.ah_attr.grh.sgid_index = sgid_index(*id);
  ud.ah_attr.grh.hop_limit = 64;
  ud.ah_attr.is_global = 1;
  ud.ah_attr.port_num = 1;
  mcs_[mc.handle] = mc;
  // Reported under the join's uid and handle; counted in the id's events_reported and the join's.
  Event e;
  e.owner = handle;
  e.mc = mc.handle;
  e.resp = param;
  e.resp.uid = uid;
  e.resp.id = mc.handle;
  e.resp.event = static_cast<uint32_t>(UcmaEvent::multicast_join);
  channels_[id->channel].events.push_back(e);
  host_.event_queued(id->channel);
  return answer(rdma_ucm_create_id_resp{mc.handle});
}

CommandResult Service::leave_mcast(const rdma_ucm_destroy_id& c) {
  auto it = mcs_.find(c.id);
  if (it == mcs_.end()) return {ENOENT, {}};
  if (!find(it->second.id)) return {EINVAL, {}};  // another process's
  const uint32_t reported = it->second.events_reported;
  leave(it->second);
  mcs_.erase(it);
  return answer(rdma_ucm_destroy_id_resp{reported});
}

void Service::leave(Multicast& mc) {
  const auto id = ids_.find(mc.id);
  if (mc.ip_joined && id != ids_.end() && id->second.device >= 0 &&
      size_t(id->second.device) < devices_.size())
    host_.ip_multicast(devices_[id->second.device].ifindex, mc.addr.ip, false);
  mc.ip_joined = false;
  if (id == ids_.end()) return;
  auto ch = channels_.find(id->second.channel);
  if (ch == channels_.end()) return;
  auto& q = ch->second.events;
  const size_t before = q.size();
  q.erase(std::remove_if(q.begin(), q.end(), [&](const Event& e) { return e.mc == mc.handle; }), q.end());
  if (before != q.size()) host_.events_dequeued(id->second.channel, static_cast<uint32_t>(before - q.size()));
}

void Service::leave_all(uint32_t id) {
  for (auto it = mcs_.begin(); it != mcs_.end();) {
    if (it->second.id == id) {
      leave(it->second);
      it = mcs_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace urxe::cm::detail
