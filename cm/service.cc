// The CM service's core (cm/service.h). Three layers in one state machine per id, as the kernel splits them
// into ucma.c, cma.c and cm.c:
//  - ucma: channels, ids and their event queues; events_reported; a connection request's new id belongs to
//    the listener's channel and gets its own uid only at ACCEPT;
//  - rdma_cm: addresses and port spaces (BIND_IP, RESOLVE_IP, RESOLVE_ROUTE, LISTEN), the IP CM header
//    and service ID, QP attributes for INIT/RTR/RTS (INIT_QP_ATTR);
//  - ib_cm: REQ/MRA/REJ/REP/RTU/DREQ/DREP with the kernel's timeouts, retries and duplicate handling.
#include "cm/service.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <random>

#include "cm/ucma_abi.h"
#include "wire/mad.h"

namespace urxe::cm {
namespace {

// Kernel ib_cm/rdma_cm defaults (cm.c, cma.c).
constexpr uint8_t kCmResponseTimeout = 20;  // CMA_CM_RESPONSE_TIMEOUT
constexpr uint8_t kMaxCmRetries = 15;       // CMA_MAX_CM_RETRIES
constexpr uint8_t kPacketLifeTime = 16;     // RoCE path record (ACK timeout 17 = this + 1)
constexpr uint8_t kTargetAckDelay = 15;     // rxe's local_ca_ack_delay
constexpr uint8_t kMraServiceTimeout = 24;  // CMA_CM_MRA_SETTING
constexpr uint32_t kDefaultBacklog = 1024;
constexpr uint64_t kAddrPollNs = 5'000'000;  // neighbour resolution is polled this often

// IB_QP_* attribute mask bits and access flags (the same values as libibverbs' IBV_QP_* / IBV_ACCESS_*).
enum : uint32_t {
  kQpState = 1u << 0,
  kQpAccessFlags = 1u << 3,
  kQpPkeyIndex = 1u << 4,
  kQpPort = 1u << 5,
  kQpQkey = 1u << 6,
  kQpAv = 1u << 7,
  kQpPathMtu = 1u << 8,
  kQpTimeout = 1u << 9,
  kQpRetryCnt = 1u << 10,
  kQpRnrRetry = 1u << 11,
  kQpRqPsn = 1u << 12,
  kQpMaxQpRdAtomic = 1u << 13,
  kQpMinRnrTimer = 1u << 15,
  kQpSqPsn = 1u << 16,
  kQpMaxDestRdAtomic = 1u << 17,
  kQpDestQpn = 1u << 20,
};
enum : uint32_t { kAccessRemoteWrite = 2, kAccessRemoteRead = 4, kAccessRemoteAtomic = 8 };
enum : uint32_t { kQpsInit = 1, kQpsRtr = 2, kQpsRts = 3 };
constexpr uint8_t kIbvQptRc = 2, kIbvQptUc = 3, kIbvQptUd = 4;
constexpr uint32_t kUdQkey = 0x01234567;  // RDMA_UDP_QKEY

// cm_convert_to_ms: 4.096 us * 2^t, rounded as the kernel does.
uint64_t cm_timeout_ns(uint8_t t) { return (1ull << (t > 8 ? t - 8 : 0)) * 1'000'000ull; }

// An IP address with port, from a sockaddr in a command (AF_INET or AF_INET6).
struct Addr {
  int family = 0;  // 0 = none
  wire::Gid ip{};  // IPv4 as ::ffff:a.b.c.d
  uint16_t port = 0;
  uint32_t scope_id = 0;
  bool any() const { return ip == wire::Gid{} || (is_v4() && ip[12] == 0 && ip[13] == 0 && ip[14] == 0 && ip[15] == 0); }
  bool is_v4() const { return family == AF_INET; }
};

wire::Gid v4_mapped(const uint8_t* a4) {
  wire::Gid g{};
  g[10] = g[11] = 0xff;
  std::memcpy(&g[12], a4, 4);
  return g;
}
bool is_v4_mapped(const wire::Gid& g) {
  static constexpr uint8_t p[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(g.data(), p, 12) == 0;
}

bool read_sockaddr(const void* p, size_t len, Addr& out) {
  sa_family_t fam;
  if (len < sizeof fam) return false;
  std::memcpy(&fam, p, sizeof fam);
  out = {};
  if (fam == AF_INET && len >= sizeof(sockaddr_in)) {
    sockaddr_in s;
    std::memcpy(&s, p, sizeof s);
    out.family = AF_INET;
    out.ip = v4_mapped(reinterpret_cast<const uint8_t*>(&s.sin_addr));
    out.port = ntohs(s.sin_port);
    return true;
  }
  if (fam == AF_INET6 && len >= sizeof(sockaddr_in6)) {
    sockaddr_in6 s;
    std::memcpy(&s, p, sizeof s);
    out.family = AF_INET6;
    std::memcpy(out.ip.data(), &s.sin6_addr, 16);
    out.port = ntohs(s.sin6_port);
    out.scope_id = s.sin6_scope_id;
    if (is_v4_mapped(out.ip)) out.family = AF_INET6;  // a v4-mapped IPv6 socket address stays AF_INET6
    return true;
  }
  if (fam == AF_UNSPEC) return true;
  return false;
}

void write_sockaddr(const Addr& a, sockaddr_in6& out) {
  std::memset(&out, 0, sizeof out);
  if (a.family == AF_INET) {
    sockaddr_in s{};
    s.sin_family = AF_INET;
    s.sin_port = htons(a.port);
    std::memcpy(&s.sin_addr, &a.ip[12], 4);
    std::memcpy(&out, &s, sizeof s);
  } else if (a.family == AF_INET6) {
    out.sin6_family = AF_INET6;
    out.sin6_port = htons(a.port);
    std::memcpy(&out.sin6_addr, a.ip.data(), 16);
    out.sin6_scope_id = a.scope_id;
  }
}

// The RoCE path MTU for an interface MTU (iboe_get_mtu(mtu - IB headers)): IBTA code 1..5.
uint8_t path_mtu_code(uint32_t mtu) {
  const uint32_t room = mtu > 96 ? mtu - 96 : 0;
  uint8_t code = 1;
  for (uint32_t m = 512; m <= 4096 && m <= room; m <<= 1) ++code;
  return room >= 256 ? code : 1;
}

enum class State : uint8_t {
  idle,
  addr_query,      // RESOLVE_IP pending
  addr_resolved,
  route_resolved,
  listen,
  req_sent,        // active: REQ out, waiting for REP (or MRA'd)
  req_rcvd,        // passive: REQ in, the app has not accepted yet
  rep_sent,        // passive: REP out, waiting for RTU
  rep_rcvd,        // active: REP in, waiting for the app's ACCEPT (then RTU)
  established,
  dreq_sent,
  timewait,
  closed,          // rejected, timed out or disconnected and out of timewait: nothing more happens
};
const char* state_name(State s) {
  static constexpr const char* kNames[] = {"IDLE",        "ADDR_QUERY", "ADDR_RESOLVED", "ROUTE_RESOLVED",
                                           "LISTEN",      "REQ_SENT",   "REQ_RCVD",      "REP_SENT",
                                           "REP_RCVD",    "ESTABLISHED", "DREQ_SENT",    "TIMEWAIT",
                                           "CLOSED"};
  return kNames[static_cast<int>(s)];
}

struct Event {
  uint32_t owner = 0;  // the id whose events_reported counts it (the listener for a CONNECT_REQUEST)
  rdma_ucm_event_resp resp{};
};

struct Id {
  uint32_t handle = 0;
  uint64_t uid = 0;
  ChannelId channel = 0;  // 0 = destroyed by the app; ib_cm state lives on until timewait ends
  uint32_t events_reported = 0;
  uint16_t ps = RDMA_PS_TCP;
  uint8_t qp_type = kIbvQptRc;
  State state = State::idle;
  bool bound = false, reuseaddr = false, afonly = false, tos_set = false;
  uint8_t tos = 0, ack_timeout = 0;  // ack_timeout 0 = packet life time + 1
  Addr src, dst;
  int device = -1;
  wire::MacAddr dmac{};
  uint8_t hop_limit = 64;
  uint32_t backlog = 0;
  uint32_t listener = 0;  // passive: the listener that got the REQ (until accepted)
  uint64_t addr_deadline = 0;
  // ib_cm
  uint32_t local_comm_id = 0, remote_comm_id = 0;
  uint64_t remote_ca_guid = 0;
  uint32_t local_qpn = 0, remote_qpn = 0;
  uint32_t rq_psn = 0, sq_psn = 0;  // ours: rq_psn is what we announce; sq_psn the peer's announcement
  uint8_t responder_resources = 0, initiator_depth = 0, retry_count = 7, rnr_retry_count = 7;
  uint8_t path_mtu = 3, local_ack_timeout = kPacketLifeTime + 1, peer_response_timeout = kCmResponseTimeout;
  uint8_t max_cm_retries = kMaxCmRetries;
  bool srq = false;
  uint32_t flow_label = 0;
  // the peer's address as the MADs go (IP header GIDs and next hop)
  wire::Gid sgid{}, dgid{};
  MadOut last;  // what a retransmission sends again
  uint64_t deadline = UINT64_MAX;
  uint32_t retries_left = 0;
};

class Service final : public CmService {
 public:
  explicit Service(CmHost& host) : host_(host), rng_(std::random_device{}()) {}

  void set_devices(std::vector<CmDevice> devices) override { devices_ = std::move(devices); }

  ChannelId open_channel(const ChannelOwner& owner) override {
    ChannelId t = 0;
    while (t == 0 || channels_.count(t)) t = rng_();
    channels_[t].owner = owner;
    return t;
  }

  void close_channel(ChannelId ch) override {
    std::vector<uint32_t> handles;
    for (auto& [h, id] : ids_)
      if (id.channel == ch) handles.push_back(h);
    for (uint32_t h : handles) destroy_id(h);
    channels_.erase(ch);
  }

  CommandResult command(ChannelId ch, std::span<const uint8_t> cmd, std::span<const uint8_t> extra) override {
    rdma_ucm_cmd_hdr hdr{};
    if (cmd.size() < sizeof hdr || !channels_.count(ch)) return {EINVAL, {}};
    std::memcpy(&hdr, cmd.data(), sizeof hdr);
    if (hdr.cmd >= kUcmaCommandCount || hdr.in + sizeof hdr > cmd.size()) return {EINVAL, {}};
    const UcmaCommandInfo& info = kUcmaCommands[hdr.cmd];
    if (hdr.cmd == RDMA_USER_CM_CMD_GET_OPTION) return {ENOSYS, {}};
    if (info.resp_size && hdr.out < info.resp_size) return {ENOSPC, {}};
    Body b;
    std::memcpy(b.bytes, cmd.data() + sizeof hdr, std::min<size_t>(hdr.in, sizeof b.bytes));
    out_limit_ = hdr.out;
    ch_ = ch;
    extra_ = extra;
    switch (hdr.cmd) {
      case RDMA_USER_CM_CMD_CREATE_ID: return create_id(b.as<rdma_ucm_create_id>());
      case RDMA_USER_CM_CMD_DESTROY_ID: return destroy_id_cmd(b.as<rdma_ucm_destroy_id>());
      case RDMA_USER_CM_CMD_BIND_IP: return bind_ip(b.as<rdma_ucm_bind_ip>());
      case RDMA_USER_CM_CMD_BIND: return {EAFNOSUPPORT, {}};  // AF_IB: librdmacm then uses the IP commands
      case RDMA_USER_CM_CMD_RESOLVE_IP: return resolve_ip(b.as<rdma_ucm_resolve_ip>());
      case RDMA_USER_CM_CMD_RESOLVE_ROUTE: return resolve_route(b.as<rdma_ucm_resolve_route>());
      case RDMA_USER_CM_CMD_QUERY_ROUTE: return query_route(b.as<rdma_ucm_query>());
      case RDMA_USER_CM_CMD_CONNECT: return connect(b.as<rdma_ucm_connect>());
      case RDMA_USER_CM_CMD_LISTEN: return listen(b.as<rdma_ucm_listen>());
      case RDMA_USER_CM_CMD_ACCEPT: return accept(b.as<rdma_ucm_accept>());
      case RDMA_USER_CM_CMD_REJECT: return reject(b.as<rdma_ucm_reject>());
      case RDMA_USER_CM_CMD_DISCONNECT: return disconnect(b.as<rdma_ucm_disconnect>());
      case RDMA_USER_CM_CMD_INIT_QP_ATTR: return init_qp_attr(b.as<rdma_ucm_init_qp_attr>());
      case RDMA_USER_CM_CMD_GET_EVENT: return get_event();
      case RDMA_USER_CM_CMD_SET_OPTION: return set_option(b.as<rdma_ucm_set_option>());
      case RDMA_USER_CM_CMD_NOTIFY: return notify(b.as<rdma_ucm_notify>());
      case RDMA_USER_CM_CMD_MIGRATE_ID: return migrate_id(b.as<rdma_ucm_migrate_id>());
      case RDMA_USER_CM_CMD_JOIN_IP_MCAST:
      case RDMA_USER_CM_CMD_JOIN_MCAST:
      case RDMA_USER_CM_CMD_LEAVE_MCAST: return {EOPNOTSUPP, {}};  // urxe has no multicast
      default: return {ENOSYS, {}};  // QUERY, RESOLVE_ADDR: AF_IB only
    }
  }

  void on_mad(const MadIn& m) override {
    wire::CmMad mad;
    if (m.device >= devices_.size() || wire::parse_cm_mad(m.mad, mad) != wire::MadError::ok ||
        mad.header.method != wire::kMadMethodSend) {
      ++counters_.rx_dropped;
      return;
    }
    const uint16_t attr = mad.header.attribute_id;
    if (attr >= 0x10 && attr < 0x20) ++counters_.rx[attr - 0x10];
    std::visit([&](const auto& msg) { handle(m, mad.header, msg); }, mad.msg);
  }

  uint64_t next_deadline_ns() const override {
    uint64_t d = UINT64_MAX;
    for (const auto& [h, id] : ids_) d = std::min(d, id.deadline);
    return d;
  }

  void on_timer() override {
    const uint64_t now = host_.now_ns();
    std::vector<uint32_t> due;
    for (const auto& [h, id] : ids_)
      if (id.deadline <= now) due.push_back(h);
    for (uint32_t h : due) {
      auto it = ids_.find(h);
      if (it != ids_.end()) expire(it->second, now);
    }
  }

  const Counters& counters() const override { return counters_; }

  std::vector<std::string> describe_ids() const override {
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
      std::snprintf(line, sizeof line,
                    "id %u pid %d dev %s ps %s state %s src %s:%u dst %s:%u qpn %u comm_id 0x%08x", h,
                    ch == channels_.end() ? 0 : ch->second.owner.pid,
                    id.device >= 0 && size_t(id.device) < devices_.size() ? devices_[id.device].name.c_str() : "-",
                    id.ps == RDMA_PS_TCP ? "TCP" : id.ps == RDMA_PS_UDP ? "UDP" : "IB", state_name(id.state), src,
                    id.src.port, dst, id.dst.port, id.local_qpn, id.local_comm_id);
      out.emplace_back(line);
    }
    return out;
  }

 private:
  struct Channel {
    ChannelOwner owner;
    std::deque<Event> events;
  };
  struct Body {
    alignas(8) uint8_t bytes[512] = {};
    template <class T>
    T as() const {
      static_assert(sizeof(T) <= sizeof bytes);
      T t;
      std::memcpy(&t, bytes, sizeof t);
      return t;
    }
  };

  template <class T>
  CommandResult answer(const T& resp) {
    CommandResult r;
    const auto* p = reinterpret_cast<const uint8_t*>(&resp);
    r.out.assign(p, p + std::min<size_t>(sizeof resp, out_limit_));
    return r;
  }

  Id* find(uint32_t handle) {
    auto it = ids_.find(handle);
    // An id is only reachable through the channel that holds it (a process cannot name another's ids).
    return it == ids_.end() || it->second.channel != ch_ || ch_ == 0 ? nullptr : &it->second;
  }

  uint32_t random24() { return static_cast<uint32_t>(rng_()) & 0xffffff; }
  uint32_t new_comm_id() {
    for (;;) {
      const auto c = static_cast<uint32_t>(rng_());
      if (c == 0) continue;
      bool used = false;
      for (const auto& [h, id] : ids_) used |= id.local_comm_id == c;
      if (!used) return c;
    }
  }

  // --- ucma: ids and events ---

  CommandResult create_id(const rdma_ucm_create_id& c) {
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

  CommandResult destroy_id_cmd(const rdma_ucm_destroy_id& c) {
    Id* id = find(c.id);
    if (!id) return {EINVAL, {}};
    const uint32_t reported = id->events_reported;
    destroy_id(c.id);
    return answer(rdma_ucm_destroy_id_resp{reported});
  }

  // As rdma_destroy_id: the peer learns (REJ before the connection is up, DREQ after) and the id's queued
  // events go. The ib_cm part stays as an orphan until it reaches CLOSED.
  void destroy_id(uint32_t handle) {
    auto it = ids_.find(handle);
    if (it == ids_.end()) return;
    Id& id = it->second;
    drop_events(id);
    // Children still waiting in the listener's queue go with it.
    if (id.state == State::listen) {
      std::vector<uint32_t> kids;
      for (auto& [h, k] : ids_)
        if (k.listener == handle && k.state == State::req_rcvd && k.uid == 0) kids.push_back(h);
      for (uint32_t k : kids) destroy_id(k);
    }
    switch (id.state) {
      case State::req_sent:
      case State::rep_rcvd:
        send_rej(id, wire::CmRejReason::timeout, id.state == State::req_sent ? 2 : 1, {});
        break;
      case State::req_rcvd:
      case State::rep_sent:
        send_rej(id, wire::CmRejReason::consumer_reject, id.state == State::req_rcvd ? 0 : 1, {});
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

  void drop_events(Id& id) {
    auto ch = channels_.find(id.channel);
    if (ch == channels_.end()) return;
    auto& q = ch->second.events;
    const size_t before = q.size();
    q.erase(std::remove_if(q.begin(), q.end(),
                           [&](const Event& e) { return e.owner == id.handle || e.resp.id == id.handle; }),
            q.end());
    if (before != q.size()) host_.events_dequeued(id.channel, static_cast<uint32_t>(before - q.size()));
  }

  // Queues an event for `id` (reported against `owner`, normally the id itself). Events of a connection
  // request's id before ACCEPT gave it a uid are dropped, as the kernel does.
  void queue_event(const Id& id, UcmaEvent ev, int32_t status, const Id* owner = nullptr,
                   const rdma_ucm_event_resp* param = nullptr) {
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

  CommandResult get_event() {
    auto& q = channels_[ch_].events;
    if (q.empty()) return {EAGAIN, {}};
    Event e = q.front();
    q.pop_front();
    host_.events_dequeued(ch_, 1);
    if (auto it = ids_.find(e.owner); it != ids_.end()) ++it->second.events_reported;
    return answer(e.resp);
  }

  CommandResult migrate_id(const rdma_ucm_migrate_id& c) {
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

  CommandResult set_option(const rdma_ucm_set_option& c) {
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

  // --- rdma_cm: addresses and port spaces ---

  uint8_t ps_byte(uint16_t ps) const { return static_cast<uint8_t>(ps & 0xff); }

  int device_of_ifindex(int ifindex) const {
    for (const auto& d : devices_)
      if (d.ifindex == ifindex) return static_cast<int>(d.index);
    return -1;
  }

  bool port_conflict(const Id& self, const Addr& a) const {
    for (const auto& [h, o] : ids_) {
      if (&o == &self || !o.bound || !o.channel || o.ps != self.ps || o.src.port != a.port || o.listener) continue;
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

  int bind(Id& id, const Addr& a) {
    if (id.bound) return EINVAL;
    if (a.family != AF_INET && a.family != AF_INET6) return EAFNOSUPPORT;
    id.device = -1;
    if (!a.any()) {
      const int ifindex = host_.local_address_ifindex(a.ip);
      if (!ifindex) return EADDRNOTAVAIL;
      id.device = device_of_ifindex(ifindex);
      if (id.device < 0) return ENODEV;  // a local address, but not on a urxe device
    }
    Addr bound = a;
    if (bound.port == 0) {
      // Ephemeral port from the kernel's default ip_local_port_range, at a random start.
      const uint32_t lo = 32768, n = 60999 - 32768 + 1;
      const uint32_t start = static_cast<uint32_t>(rng_()) % n;
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

  CommandResult bind_ip(const rdma_ucm_bind_ip& c) {
    Id* id = find(c.id);
    if (!id) return {EINVAL, {}};
    Addr a;
    if (!read_sockaddr(&c.addr, sizeof c.addr, a) || a.family == 0) return {EAFNOSUPPORT, {}};
    if (id->state != State::idle) return {EINVAL, {}};
    return {bind(*id, a), {}};
  }

  CommandResult resolve_ip(const rdma_ucm_resolve_ip& c) {
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
        if (dst.family == AF_INET) src.ip = v4_mapped(reinterpret_cast<const uint8_t*>("\0\0\0\0"));
      }
      src.scope_id = src.scope_id ? src.scope_id : dst.scope_id;
      if (const int err = bind(*id, src)) return {err, {}};
    }
    if (dst.scope_id == 0) dst.scope_id = id->src.scope_id;
    id->dst = dst;
    id->state = State::addr_query;
    id->addr_deadline = host_.now_ns() + uint64_t{c.timeout_ms ? c.timeout_ms : 2000} * 1'000'000;
    poll_address(*id, true);
    return {};
  }

  // One look at the route for a pending RESOLVE_IP; ADDR_RESOLVED or ADDR_ERROR when it is decided.
  void poll_address(Id& id, bool first) {
    const RouteResult r =
        host_.lookup_route(id.dst.ip, id.src.any() ? wire::Gid{} : id.src.ip, static_cast<int>(id.dst.scope_id), first);
    using S = RouteResult::State;
    if (r.state == S::pending && host_.now_ns() < id.addr_deadline) {
      id.deadline = std::min(host_.now_ns() + kAddrPollNs, id.addr_deadline);
      return;
    }
    id.deadline = UINT64_MAX;
    if (r.state != S::resolved || r.device >= devices_.size() || (id.device >= 0 && uint32_t(id.device) != r.device)) {
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
      if (id.src.family == AF_INET6 && is_v4_mapped(r.src) && id.dst.family == AF_INET) id.src.family = AF_INET;
    }
    id.dmac = r.dmac;
    id.hop_limit = r.hop_limit ? r.hop_limit : 64;
    id.state = State::addr_resolved;
    queue_event(id, UcmaEvent::addr_resolved, 0);
  }

  CommandResult resolve_route(const rdma_ucm_resolve_route& c) {
    Id* id = find(c.id);
    if (!id) return {EINVAL, {}};
    if (id->state != State::addr_resolved && id->state != State::route_resolved) return {EINVAL, {}};
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

  void fill_path(const Id& id, ib_user_path_rec& p) const {
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

  CommandResult query_route(const rdma_ucm_query& c) {
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

  CommandResult listen(const rdma_ucm_listen& c) {
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
      any.ip = v4_mapped(reinterpret_cast<const uint8_t*>("\0\0\0\0"));
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

  // --- ib_cm: sending ---

  MadOut address(const Id& id) const {
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

  void send(MadOut& o, const wire::CmMessage& msg, uint64_t tid) {
    wire::CmMad mad;
    mad.header.transaction_id = tid;
    mad.msg = msg;
    wire::build_cm_mad(o.mad, mad);
    const uint16_t attr = wire::cm_attr_id(msg);
    if (attr >= 0x10 && attr < 0x20) ++counters_.tx[attr - 0x10];
    host_.send_mad(o);
  }

  // Sends and keeps the MAD for retransmission every `timeout_ns`, `retries` times.
  void send_with_retry(Id& id, const wire::CmMessage& msg, uint64_t timeout_ns, uint32_t retries) {
    id.last = address(id);
    send(id.last, msg, tid_of(id));
    id.retries_left = retries;
    id.deadline = host_.now_ns() + timeout_ns;
  }

  uint64_t tid_of(const Id& id) const { return (uint64_t{id.local_comm_id} << 32) | id.local_comm_id; }

  void send_rej(const Id& id, wire::CmRejReason reason, uint8_t msg_rejected, std::span<const uint8_t> pd) {
    if (id.device < 0) return;
    wire::CmRej rej;
    rej.local_comm_id = id.local_comm_id;
    rej.remote_comm_id = id.remote_comm_id;
    rej.message_rejected = msg_rejected;
    rej.reason = static_cast<uint16_t>(reason);
    std::copy_n(pd.begin(), std::min(pd.size(), rej.private_data.size()), rej.private_data.begin());
    MadOut o = address(id);
    send(o, rej, tid_of(id));
  }

  void send_dreq(Id& id) {
    wire::CmDreq dreq;
    dreq.local_comm_id = id.local_comm_id;
    dreq.remote_comm_id = id.remote_comm_id;
    dreq.remote_qpn = id.remote_qpn;
    id.state = State::dreq_sent;
    send_with_retry(id, dreq, cm_timeout_ns(id.peer_response_timeout), id.max_cm_retries);
  }

  void send_drep(const MadIn& m, uint32_t local_comm_id, uint32_t remote_comm_id, uint64_t tid) {
    wire::CmDrep drep;
    drep.local_comm_id = local_comm_id;
    drep.remote_comm_id = remote_comm_id;
    MadOut o = reply_address(m);
    send(o, drep, tid);
  }

  // Replies go back the way the MAD came (ib_init_ah_attr_from_wc).
  MadOut reply_address(const MadIn& m) const {
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

  void enter_timewait(Id& id) {
    id.state = State::timewait;
    id.retries_left = 0;
    id.deadline = host_.now_ns() + cm_timeout_ns(id.local_ack_timeout);
  }

  void expire(Id& id, uint64_t now) {
    id.deadline = UINT64_MAX;
    switch (id.state) {
      case State::addr_query:
        poll_address(id, false);
        return;
      case State::req_sent:
      case State::rep_sent:
      case State::dreq_sent:
        if (id.retries_left > 0) {
          --id.retries_left;
          ++counters_.retries;
          host_.send_mad(id.last);
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

  // --- the app's connection commands ---

  CommandResult connect(const rdma_ucm_connect& c) {
    Id* id = find(c.id);
    if (!id) return {EINVAL, {}};
    if (!c.conn_param.valid) return {EINVAL, {}};
    if (id->state != State::route_resolved) return {EINVAL, {}};
    if (id->qp_type == kIbvQptUd || id->ps == RDMA_PS_UDP) return {EOPNOTSUPP, {}};  // SIDR: not yet
    const CmDevice& d = devices_[id->device];
    id->local_comm_id = new_comm_id();
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
    req.transport_service_type = static_cast<uint8_t>(id->qp_type == kIbvQptUc ? wire::CmTransport::uc
                                                                                : wire::CmTransport::rc);
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
    wire::IpCmHeader h;
    h.ip_version = id->src.family == AF_INET ? 4 : 6;
    h.source_port = id->src.port;
    auto put_ip = [&](const Addr& a, std::array<uint8_t, 16>& out) {
      out = {};
      if (a.family == AF_INET)
        std::memcpy(&out[12], &a.ip[12], 4);
      else
        std::memcpy(out.data(), a.ip.data(), 16);
    };
    put_ip(id->src, h.source_ip);
    put_ip(id->dst, h.destination_ip);
    wire::write_ip_cm_header(req.private_data, h);
    const size_t pd = std::min<size_t>(c.conn_param.private_data_len, req.private_data.size() - wire::kIpCmHeaderSize);
    std::memcpy(req.private_data.data() + wire::kIpCmHeaderSize, c.conn_param.private_data, pd);
    id->state = State::req_sent;
    id->peer_response_timeout = kCmResponseTimeout;
    id->max_cm_retries = kMaxCmRetries;
    send_with_retry(*id, req, 2 * cm_timeout_ns(kPacketLifeTime) + cm_timeout_ns(kCmResponseTimeout), kMaxCmRetries);
    return {};
  }

  CommandResult accept(const rdma_ucm_accept& c) {
    Id* id = find(c.id);
    if (!id) return {EINVAL, {}};
    if (id->state == State::rep_rcvd) {
      // The active side's ACCEPT (librdmacm after moving its QP to RTS, or rdma_establish): RTU.
      wire::CmRtu rtu;
      rtu.local_comm_id = id->local_comm_id;
      rtu.remote_comm_id = id->remote_comm_id;
      MadOut o = address(*id);
      send(o, rtu, tid_of(*id));
      id->state = State::established;
      id->deadline = UINT64_MAX;
      return {};
    }
    if (id->state != State::req_rcvd || !c.conn_param.valid) return {EINVAL, {}};
    id->uid = c.uid;
    id->listener = 0;
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

  CommandResult reject(const rdma_ucm_reject& c) {
    Id* id = find(c.id);
    if (!id) return {EINVAL, {}};
    if (id->state != State::req_rcvd && id->state != State::rep_rcvd) return {EINVAL, {}};
    const uint8_t len = std::min<uint8_t>(c.private_data_len, 148);
    send_rej(*id, wire::CmRejReason::consumer_reject, id->state == State::req_rcvd ? 0 : 1,
             {c.private_data, len});
    id->state = State::closed;
    id->deadline = UINT64_MAX;
    return {};
  }

  CommandResult disconnect(const rdma_ucm_disconnect& c) {
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

  CommandResult notify(const rdma_ucm_notify& c) {
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

  CommandResult init_qp_attr(const rdma_ucm_init_qp_attr& c) {
    Id* id = find(c.id);
    if (!id) return {EINVAL, {}};
    if (id->device < 0) return {EINVAL, {}};
    ib_uverbs_qp_attr a{};
    a.qp_state = c.qp_state;
    a.port_num = 1;
    const bool ud = id->qp_type == kIbvQptUd || id->ps == RDMA_PS_UDP;
    const bool have_cm = id->state == State::req_rcvd || id->state == State::rep_sent || id->state == State::rep_rcvd ||
                         id->state == State::established || id->state == State::req_sent;
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
        a.qp_attr_mask = kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic | kQpMinRnrTimer;
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
        if (!have_cm || id->state == State::req_sent || id->state == State::req_rcvd) return {EINVAL, {}};
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

  uint8_t sgid_index(const Id& id) const {
    const auto& gids = devices_[id.device].gids;
    for (size_t i = 0; i < gids.size(); ++i)
      if (gids[i] == id.sgid) return static_cast<uint8_t>(i);
    return 0;
  }

  // --- ib_cm: receiving ---

  Id* by_local_comm_id(uint32_t comm_id) {
    if (!comm_id) return nullptr;
    for (auto& [h, id] : ids_)
      if (id.local_comm_id == comm_id) return &id;
    return nullptr;
  }

  void handle(const MadIn& m, const wire::MadHeader& hdr, const wire::CmReq& req) {
    // A retransmitted REQ (same remote CA GUID and comm ID): MRA while the app has not accepted, the REP
    // again once it has; nothing after that.
    for (auto& [h, id] : ids_) {
      if (id.remote_comm_id == req.local_comm_id && id.remote_ca_guid == req.local_ca_guid &&
          id.listener != h && id.state != State::closed && id.state != State::listen) {
        ++counters_.duplicates;
        if (id.state == State::req_rcvd) {
          wire::CmMra mra;
          mra.local_comm_id = id.local_comm_id;
          mra.remote_comm_id = id.remote_comm_id;
          mra.message_mraed = 0;
          mra.service_timeout = kMraServiceTimeout;
          MadOut o = reply_address(m);
          send(o, mra, hdr.transaction_id);
        } else if (id.state == State::rep_sent) {
          ++counters_.retries;
          host_.send_mad(id.last);
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
    const bool v4 = iph.ip_version == 4;
    const wire::Gid dst_ip = wire::ip_cm_addr_to_gid(iph, iph.destination_ip);
    Id* lis = nullptr;
    for (auto& [h, id] : ids_) {
      if (id.state != State::listen || !id.channel || id.ps != ps || id.src.port != port) continue;
      if (id.device >= 0 && uint32_t(id.device) != m.device) continue;
      if (id.src.any()) {
        if (v4 ? (id.src.family == AF_INET6 && id.afonly) : id.src.family == AF_INET) continue;
      } else if (id.src.ip != dst_ip) {
        continue;
      }
      // A specific listener wins over a wildcard one.
      if (!lis || (lis->src.any() && !id.src.any())) lis = &id;
    }
    if (!lis) {
      refuse(wire::CmRejReason::invalid_service_id);
      return;
    }
    if (req.transport_service_type != static_cast<uint8_t>(wire::CmTransport::rc) &&
        req.transport_service_type != static_cast<uint8_t>(wire::CmTransport::uc)) {
      refuse(wire::CmRejReason::invalid_transport_type);
      return;
    }
    Id kid;
    kid.handle = next_handle_++;
    kid.uid = 0;
    kid.channel = lis->channel;
    kid.ps = lis->ps;
    kid.qp_type = req.transport_service_type == 1 ? kIbvQptUc : kIbvQptRc;
    kid.listener = lis->handle;
    kid.device = static_cast<int>(m.device);
    kid.bound = true;
    kid.src.family = kid.dst.family = v4 ? AF_INET : AF_INET6;
    kid.src.ip = dst_ip;
    kid.src.port = port;
    kid.dst.ip = wire::ip_cm_addr_to_gid(iph, iph.source_ip);
    kid.dst.port = iph.source_port;
    kid.tos = req.primary.traffic_class;
    kid.state = State::req_rcvd;
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
    kid.peer_response_timeout = req.remote_cm_response_timeout;
    kid.max_cm_retries = req.max_cm_retries;
    kid.flow_label = req.primary.flow_label;
    kid.sgid = m.dgid;
    kid.dgid = m.sgid;
    kid.dmac = m.smac;
    kid.hop_limit = req.primary.hop_limit ? req.primary.hop_limit : 64;
    Id& k = ids_[kid.handle] = kid;
    rdma_ucm_event_resp p{};
    p.param.conn.qp_num = req.local_qpn;
    p.param.conn.responder_resources = req.responder_resources;
    p.param.conn.initiator_depth = req.initiator_depth;
    p.param.conn.flow_control = req.end_to_end_flow_control;
    p.param.conn.retry_count = req.retry_count;
    p.param.conn.rnr_retry_count = req.rnr_retry_count;
    p.param.conn.srq = req.srq;
    p.param.conn.private_data_len = static_cast<uint8_t>(req.private_data.size() - wire::kIpCmHeaderSize);
    std::memcpy(p.param.conn.private_data, req.private_data.data() + wire::kIpCmHeaderSize,
                p.param.conn.private_data_len);
    queue_event(k, UcmaEvent::connect_request, 0, lis, &p);
  }

  void handle(const MadIn&, const wire::MadHeader&, const wire::CmRep& rep) {
    Id* id = by_local_comm_id(rep.remote_comm_id);
    if (!id) return;
    if (id->state == State::established && id->remote_comm_id == rep.local_comm_id) {
      // Our RTU was lost: send it again (cm_dup_rep_handler).
      ++counters_.duplicates;
      wire::CmRtu rtu;
      rtu.local_comm_id = id->local_comm_id;
      rtu.remote_comm_id = id->remote_comm_id;
      MadOut o = address(*id);
      send(o, rtu, tid_of(*id));
      return;
    }
    if (id->state == State::rep_rcvd) {
      ++counters_.duplicates;
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
    rdma_ucm_event_resp p{};
    p.param.conn.qp_num = rep.local_qpn;
    p.param.conn.responder_resources = rep.responder_resources;
    p.param.conn.initiator_depth = rep.initiator_depth;
    p.param.conn.flow_control = rep.end_to_end_flow_control;
    p.param.conn.rnr_retry_count = rep.rnr_retry_count;
    p.param.conn.srq = rep.srq;
    p.param.conn.private_data_len = static_cast<uint8_t>(rep.private_data.size());
    std::memcpy(p.param.conn.private_data, rep.private_data.data(), rep.private_data.size());
    queue_event(*id, UcmaEvent::connect_response, 0, nullptr, &p);
  }

  void handle(const MadIn&, const wire::MadHeader&, const wire::CmRtu& rtu) {
    Id* id = by_local_comm_id(rtu.remote_comm_id);
    if (!id || id->state != State::rep_sent || id->remote_comm_id != rtu.local_comm_id) return;
    id->state = State::established;
    id->deadline = UINT64_MAX;
    queue_event(*id, UcmaEvent::established, 0);
  }

  void handle(const MadIn&, const wire::MadHeader&, const wire::CmRej& rej) {
    Id* id = by_local_comm_id(rej.remote_comm_id);
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

  void handle(const MadIn&, const wire::MadHeader&, const wire::CmMra& mra) {
    Id* id = by_local_comm_id(mra.remote_comm_id);
    if (!id) return;
    // The peer needs longer: wait its service timeout before retransmitting (cm_mra_handler).
    if ((id->state == State::req_sent && mra.message_mraed == 0) ||
        (id->state == State::rep_sent && mra.message_mraed == 1))
      id->deadline = host_.now_ns() + cm_timeout_ns(mra.service_timeout) + cm_timeout_ns(kPacketLifeTime);
  }

  void handle(const MadIn& m, const wire::MadHeader& hdr, const wire::CmDreq& dreq) {
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
        ++counters_.duplicates;
        send_drep(m, id->local_comm_id, id->remote_comm_id, hdr.transaction_id);
        return;
      default:
        return;
    }
  }

  void handle(const MadIn&, const wire::MadHeader&, const wire::CmDrep& drep) {
    Id* id = by_local_comm_id(drep.remote_comm_id);
    if (!id || id->state != State::dreq_sent || id->remote_comm_id != drep.local_comm_id) return;
    enter_timewait(*id);
    queue_event(*id, UcmaEvent::disconnected, 0);
  }

  void handle(const MadIn&, const wire::MadHeader&, const wire::CmSidrReq&) {}
  void handle(const MadIn&, const wire::MadHeader&, const wire::CmSidrRep&) {}

  CmHost& host_;
  std::mt19937_64 rng_;
  std::vector<CmDevice> devices_;
  std::map<ChannelId, Channel> channels_;
  std::map<uint32_t, Id> ids_;
  uint32_t next_handle_ = 1;
  Counters counters_;
  // The command being handled.
  ChannelId ch_ = 0;
  uint32_t out_limit_ = 0;
  std::span<const uint8_t> extra_;
};

}  // namespace

std::unique_ptr<CmService> CmService::create(CmHost& host) { return std::make_unique<Service>(host); }

}  // namespace urxe::cm
