// The CM service core's shared declarations: one class, its member functions split by role as the
// kernel splits them (cm/ucma.cc: channels, ids, events; cm/rdma_cm.cc: addresses, port spaces, QP
// attributes and the app's connection commands; cm/ib_cm.cc: the CM MADs, timers and duplicate rules).
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <random>

#include "cm/service.h"
#include "cm/ucma_abi.h"
#include "wire/mad.h"

namespace urxe::cm::detail {

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
inline uint64_t cm_timeout_ns(uint8_t t) {
  return (1ull << (t > 8 ? t - 8 : 0)) * 1'000'000ull;
}

// An IP address with port, from a sockaddr in a command (AF_INET or AF_INET6).
struct Addr {
  int family = 0;  // 0 = none
  wire::Gid ip{};  // IPv4 as ::ffff:a.b.c.d
  uint16_t port = 0;
  uint32_t scope_id = 0;
  bool any() const {
    return ip == wire::Gid{} || (is_v4() && ip[12] == 0 && ip[13] == 0 && ip[14] == 0 && ip[15] == 0);
  }
  bool is_v4() const { return family == AF_INET; }
  // 127.0.0.0/8 or ::1: the kernel binds these without a device and resolves them to the first device,
  // whose route then fails with ENODEV (measured on kernel 6.1 with rxe).
  bool loopback() const {
    if (is_v4()) return ip[12] == 127;
    return ip == wire::Gid{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  }
};

// An IPv4 address (4 bytes in network order) as the ::ffff:a.b.c.d GID the core keeps addresses in.
inline wire::Gid v4_gid(const void* a4) {
  std::array<uint8_t, 4> a;
  std::memcpy(a.data(), a4, 4);
  return wire::gid_from_ipv4(a);
}

inline bool read_sockaddr(const void* p, size_t len, Addr& out) {
  sa_family_t fam;
  if (len < sizeof fam) return false;
  std::memcpy(&fam, p, sizeof fam);
  out = {};
  if (fam == AF_INET && len >= sizeof(sockaddr_in)) {
    sockaddr_in s;
    std::memcpy(&s, p, sizeof s);
    out.family = AF_INET;
    out.ip = v4_gid(&s.sin_addr);
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
    if (wire::gid_is_ipv4_mapped(out.ip))
      out.family = AF_INET6;  // a v4-mapped IPv6 socket address stays AF_INET6
    return true;
  }
  if (fam == AF_UNSPEC) return true;
  return false;
}

inline void write_sockaddr(const Addr& a, sockaddr_in6& out) {
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
inline uint8_t path_mtu_code(uint32_t mtu) {
  const uint32_t room = mtu > 96 ? mtu - 96 : 0;
  uint8_t code = 1;
  for (uint32_t m = 512; m <= 4096 && m <= room; m <<= 1) ++code;
  return room >= 256 ? code : 1;
}

enum class State : uint8_t {
  idle,
  addr_query,  // RESOLVE_IP pending
  addr_resolved,
  route_resolved,
  listen,
  sidr_req_sent,  // active UD: SIDR_REQ out, waiting for SIDR_REP
  req_sent,       // active: REQ out, waiting for REP (or MRA'd)
  req_rcvd,       // passive: REQ in, the app has not accepted yet
  rep_sent,       // passive: REP out, waiting for RTU
  rep_rcvd,       // active: REP in, waiting for the app's ACCEPT (then RTU)
  established,
  dreq_sent,
  timewait,
  closed,  // rejected, timed out or disconnected and out of timewait: nothing more happens
};
inline const char* state_name(State s) {
  static constexpr const char* kNames[] = {
      "IDLE",     "ADDR_QUERY", "ADDR_RESOLVED", "ROUTE_RESOLVED", "LISTEN",    "SIDR_REQ_SENT", "REQ_SENT",
      "REQ_RCVD", "REP_SENT",   "REP_RCVD",      "ESTABLISHED",    "DREQ_SENT", "TIMEWAIT",      "CLOSED"};
  return kNames[static_cast<int>(s)];
}

struct Event {
  uint32_t owner = 0;  // the id whose events_reported counts it (the listener for a CONNECT_REQUEST)
  uint32_t mc = 0;     // a multicast group's event: its handle (its events_reported counts it too)
  rdma_ucm_event_resp resp{};
};

// A multicast join (ucma's struct ucma_multicast): its handle (what JOIN answers, LEAVE names), the app's
// uid for its events, the id it belongs to, the group's address.
struct Multicast {
  uint32_t handle = 0;
  uint64_t uid = 0;
  uint32_t id = 0;
  Addr addr;
  bool send_only = false;
  bool ip_joined = false;  // holds an IP-level membership (an IPv4 full member)
  uint32_t events_reported = 0;
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
  // The MAD transaction ID of the exchange: the active side forms it from its comm ID, the passive side
  // answers with the REQ's (as cm.c; receivers match CM MADs by comm IDs, not by it).
  uint64_t tid = 0;
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
  explicit Service(CmHost& host) : host_(host) {}

  void set_devices(std::vector<CmDevice> devices) override {
    devices_ = std::move(devices);
    if (per_device_.size() < devices_.size()) per_device_.resize(devices_.size());
  }

  ChannelId open_channel(const ChannelOwner& owner) override;

  void close_channel(ChannelId ch) override;

  CommandResult command(ChannelId ch, std::span<const uint8_t> cmd, std::span<const uint8_t> extra) override;

  void on_mad(const MadIn& m) override;

  uint64_t next_deadline_ns() const override;

  void on_timer() override;

  const Counters& counters() const override { return counters_; }
  Counters device_counters(uint32_t device) const override {
    return device < per_device_.size() ? per_device_[device] : Counters{};
  }
  // One more in the total and in `device`'s counters, at attribute `attr` (0x10..0x1f) of counter `which`.
  void bump(uint32_t device, uint64_t (Counters::*which)[16], uint16_t attr) {
    if (attr < 0x10 || attr >= 0x20) return;
    ++(counters_.*which)[attr - 0x10];
    if (device < per_device_.size()) ++(per_device_[device].*which)[attr - 0x10];
  }
  static uint16_t attr_of(const MadOut& m) { return static_cast<uint16_t>(m.mad[16] << 8 | m.mad[17]); }

  std::vector<std::string> describe_ids() const override;

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

  Id* find(uint32_t handle);

  uint32_t random24() { return static_cast<uint32_t>(host_.random_u64()) & 0xffffff; }
  uint32_t new_comm_id();

  // --- ucma: ids and events ---

  CommandResult create_id(const rdma_ucm_create_id& c);

  CommandResult destroy_id_cmd(const rdma_ucm_destroy_id& c);

  // As rdma_destroy_id: the peer learns (REJ before the connection is up, DREQ after) and the id's queued
  // events go. The ib_cm part stays as an orphan until it reaches CLOSED.
  void destroy_id(uint32_t handle);

  void drop_events(Id& id);

  // Queues an event for `id` (reported against `owner`, normally the id itself). Events of a connection
  // request's id before ACCEPT gave it a uid are dropped, as the kernel does.
  void queue_event(const Id& id, UcmaEvent ev, int32_t status, const Id* owner = nullptr,
                   const rdma_ucm_event_resp* param = nullptr);

  CommandResult get_event();

  CommandResult migrate_id(const rdma_ucm_migrate_id& c);

  CommandResult set_option(const rdma_ucm_set_option& c);

  // --- rdma_cm: addresses and port spaces ---

  uint8_t ps_byte(uint16_t ps) const { return static_cast<uint8_t>(ps & 0xff); }

  int device_of_ifindex(int ifindex) const;

  bool port_conflict(const Id& self, const Addr& a) const;

  int bind(Id& id, const Addr& a);

  CommandResult bind_ip(const rdma_ucm_bind_ip& c);

  CommandResult resolve_ip(const rdma_ucm_resolve_ip& c);

  // One look at the route for a pending RESOLVE_IP; ADDR_RESOLVED or ADDR_ERROR when it is decided.
  void poll_address(Id& id, bool first);

  CommandResult resolve_route(const rdma_ucm_resolve_route& c);

  void fill_path(const Id& id, ib_user_path_rec& p) const;

  CommandResult query_route(const rdma_ucm_query& c);

  CommandResult listen(const rdma_ucm_listen& c);

  // --- ib_cm: sending ---

  MadOut address(const Id& id) const;

  void send(MadOut& o, const wire::CmMessage& msg, uint64_t tid);

  // Sends and keeps the MAD for retransmission every `timeout_ns`, `retries` times.
  void send_with_retry(Id& id, const wire::CmMessage& msg, uint64_t timeout_ns, uint32_t retries);

  void send_rej(const Id& id, wire::CmRejReason reason, uint8_t msg_rejected, std::span<const uint8_t> pd,
                std::span<const uint8_t> ari = {});

  void send_dreq(Id& id);
  void send_rtu(const Id& id);
  Id incoming_id(const Id& lis, const MadIn& m, const wire::MadHeader& hdr, const wire::IpCmHeader& iph,
                 uint16_t port);
  void resend(const Id& id);
  static rdma_ucm_event_resp conn_param(uint32_t qpn, uint8_t responder_resources, uint8_t initiator_depth,
                                        bool flow_control, uint8_t retry_count, uint8_t rnr_retry_count,
                                        bool srq, std::span<const uint8_t> private_data);

  void send_drep(const MadIn& m, uint32_t local_comm_id, uint32_t remote_comm_id, uint64_t tid);

  // Replies go back the way the MAD came (ib_init_ah_attr_from_wc).
  MadOut reply_address(const MadIn& m) const;

  void enter_timewait(Id& id);

  void expire(Id& id, uint64_t now);

  // --- the app's connection commands ---

  CommandResult connect(const rdma_ucm_connect& c);

  CommandResult accept(const rdma_ucm_accept& c);

  CommandResult reject(const rdma_ucm_reject& c);

  CommandResult disconnect(const rdma_ucm_disconnect& c);

  CommandResult notify(const rdma_ucm_notify& c);

  CommandResult init_qp_attr(const rdma_ucm_init_qp_attr& c);

  // --- multicast (cm/multicast.cc) ---

  CommandResult join_ip_mcast(const rdma_ucm_join_ip_mcast& c);
  CommandResult join_mcast(const rdma_ucm_join_mcast& c);
  CommandResult join(uint32_t id, uint64_t uid, const Addr& group, bool send_only);
  CommandResult leave_mcast(const rdma_ucm_destroy_id& c);
  // The group's IP-level membership and queued events go; LEAVE_MCAST and destroying the id.
  void leave(Multicast& mc);
  void leave_all(uint32_t id);
  void write_ip_cm(const Id& id, std::span<uint8_t> pd) const;
  Id* find_listener(uint32_t device, uint16_t ps, uint16_t port, const wire::IpCmHeader& iph);
  void send_sidr_rep(const Id& id, uint8_t status, uint32_t qpn, uint32_t qkey, std::span<const uint8_t> pd);
  static bool is_ud(const Id& id) { return id.qp_type == kIbvQptUd || id.ps == RDMA_PS_UDP; }

  uint8_t sgid_index(const Id& id) const;

  // --- ib_cm: receiving ---

  Id* by_local_comm_id(uint32_t comm_id);

  void handle(const MadIn& m, const wire::MadHeader& hdr, const wire::CmReq& req);

  void handle(const MadIn&, const wire::MadHeader&, const wire::CmRep& rep);

  void handle(const MadIn&, const wire::MadHeader&, const wire::CmRtu& rtu);

  void handle(const MadIn&, const wire::MadHeader&, const wire::CmRej& rej);

  void handle(const MadIn&, const wire::MadHeader&, const wire::CmMra& mra);

  void handle(const MadIn& m, const wire::MadHeader& hdr, const wire::CmDreq& dreq);

  void handle(const MadIn&, const wire::MadHeader&, const wire::CmDrep& drep);

  void handle(const MadIn& m, const wire::MadHeader& hdr, const wire::CmSidrReq& sreq);
  void handle(const MadIn& m, const wire::MadHeader& hdr, const wire::CmSidrRep& rep);

  CmHost& host_;
  std::vector<CmDevice> devices_;
  std::map<ChannelId, Channel> channels_;
  std::map<uint32_t, Id> ids_;
  std::map<uint32_t, Multicast> mcs_;  // by handle (drawn from next_handle_, as ids)
  uint32_t next_handle_ = 1;
  uint32_t next_tid_hi_ = 1;
  Counters counters_;
  std::vector<Counters> per_device_;  // by CmDevice::index
  // The command being handled.
  ChannelId ch_ = 0;
  uint32_t out_limit_ = 0;
  std::span<const uint8_t> extra_;
};

}  // namespace urxe::cm::detail
