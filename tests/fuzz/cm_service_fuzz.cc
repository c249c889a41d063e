// Fuzz target for the CM service core (cm/service.h): an input is a script of CM MADs from the network
// (any bytes), application commands (well-formed steps and raw UCMA command bytes) and time passing, played
// against one service with a listener. Invariants: no crash or sanitizer report; every MAD the service sends
// parses; the eventfd count always equals what GET_EVENT can still return; after the channel closes and
// the timers run out, no id is left (orphans finish their DREQ retries and timewait).
#include <arpa/inet.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cm/service.h"
#include "cm/ucma_abi.h"
#include "hostnet/gid.h"
#include "wire/mad.h"

namespace {

using namespace urxe;

wire::Gid v4(const char* s) {  // "10.0.0.1" as its IPv4-mapped GID
  wire::Gid g{};
  hostnet::gid_from_string(s, g);
  return g;
}

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "cm_service_fuzz: invariant broken: %s\n", what);
  std::abort();
}

}  // namespace

// The host's randomness is a known sequence, so seeds can answer the comm IDs the service picks
// (cm_service_fuzz_replay.cc computes them the same way).
uint64_t cm_fuzz_random(uint64_t i) {
  uint64_t z = i * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

namespace {

struct Host final : cm::CmHost {
  uint64_t now = 1'000'000'000;
  uint64_t draws = 0;
  uint64_t random_u64() override { return cm_fuzz_random(++draws); }
  int64_t queued = 0;
  uint64_t now_ns() override { return now; }
  void event_queued(cm::ChannelId) override { ++queued; }
  void events_dequeued(cm::ChannelId, uint32_t n) override {
    queued -= n;
    if (queued < 0) fail("eventfd count below zero");
  }
  void send_mad(const cm::MadOut& m) override {
    wire::CmMad mad;
    if (wire::parse_cm_mad(m.mad, mad) != wire::MadError::ok) fail("sent a MAD that does not parse");
  }
  cm::RouteResult lookup_route(const wire::Gid& dst, const wire::Gid&, int, bool) override {
    cm::RouteResult r;
    r.state =
        dst == v4("10.77.0.12") ? cm::RouteResult::State::resolved : cm::RouteResult::State::unreachable;
    r.src = v4("10.77.0.11");
    return r;
  }
  int local_address_ifindex(const wire::Gid& a) override { return a == v4("10.77.0.11") ? 3 : 0; }
  int64_t ip_groups = 0;  // IP-level multicast memberships held
  int ip_multicast(int, const wire::Gid&, bool join) override {
    ip_groups += join ? 1 : -1;
    if (ip_groups < 0) fail("left an IP multicast group never joined");
    return 0;
  }
};

template <class Cmd>
cm::CommandResult run(cm::CmService& s, cm::ChannelId ch, uint32_t op, const Cmd& body, uint16_t out,
                      std::span<const uint8_t> extra = {}) {
  uint8_t buf[sizeof(rdma_ucm_cmd_hdr) + sizeof(Cmd)];
  const rdma_ucm_cmd_hdr hdr{op, uint16_t(sizeof body), out};
  std::memcpy(buf, &hdr, sizeof hdr);
  std::memcpy(buf + sizeof hdr, &body, sizeof body);
  return s.command(ch, buf, extra);
}

sockaddr_in6 sin4(const char* ip, uint16_t port) {
  sockaddr_in6 s6{};
  sockaddr_in s{};
  s.sin_family = AF_INET;
  s.sin_port = htons(port);
  inet_pton(AF_INET, ip, &s.sin_addr);
  std::memcpy(&s6, &s, sizeof s);
  return s6;
}

uint32_t create(cm::CmService& s, cm::ChannelId ch, uint16_t ps, uint8_t qpt) {
  rdma_ucm_create_id c{};
  c.uid = 7;
  c.ps = ps;
  c.qp_type = qpt;
  auto r = run(s, ch, RDMA_USER_CM_CMD_CREATE_ID, c, 4);
  uint32_t id = 0;
  if (!r.err) std::memcpy(&id, r.out.data(), 4);
  return id;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Host host;
  auto svc = cm::CmService::create(host);
  cm::CmDevice dev;
  dev.name = "urxe0";
  dev.node_guid = 0x5254'00ff'fe77'0001ull;
  dev.ifindex = 3;
  dev.gids = {wire::Gid{0xfe, 0x80}, v4("10.77.0.11")};
  svc->set_devices({dev});
  const cm::ChannelId ch = svc->open_channel({1, 0});
  for (uint16_t ps : {uint16_t{RDMA_PS_TCP}, uint16_t{RDMA_PS_UDP}}) {
    const uint32_t lid = create(*svc, ch, ps, ps == RDMA_PS_TCP ? 2 : 4);
    rdma_ucm_bind_ip b{};
    b.id = lid;
    b.addr = sin4("0.0.0.0", 7174);
    run(*svc, ch, RDMA_USER_CM_CMD_BIND_IP, b, 0);
    rdma_ucm_listen l{lid, 8};
    run(*svc, ch, RDMA_USER_CM_CMD_LISTEN, l, 0);
  }
  uint32_t last_id = 0;
  size_t i = 0;
  while (i < size) {
    const uint8_t op = data[i++];
    switch (op & 3) {
      case 0: {  // a MAD from 10.77.0.12
        const size_t n = std::min<size_t>(size - i, wire::kMadSize);
        cm::MadIn in;
        in.sgid = v4("10.77.0.12");
        in.dgid = v4("10.77.0.11");
        in.mad = {data + i, n};
        i += n;
        svc->on_mad(in);
        break;
      }
      case 1: {  // an application step on the last id an event named (or a new outgoing one)
        rdma_ucm_event_resp e{};
        rdma_ucm_get_event g{};
        switch (op >> 2 & 7) {
          case 0: {
            auto r = run(*svc, ch, RDMA_USER_CM_CMD_GET_EVENT, g, sizeof e);
            if (!r.err) std::memcpy(&e, r.out.data(), sizeof e), last_id = e.id;
            break;
          }
          case 1: {
            rdma_ucm_accept a{};
            a.id = last_id;
            a.uid = 9;
            a.conn_param.qp_num = 0x42;
            a.conn_param.valid = op >> 5 & 1;
            run(*svc, ch, RDMA_USER_CM_CMD_ACCEPT, a, 0);
            break;
          }
          case 2: {
            rdma_ucm_disconnect d{last_id};
            run(*svc, ch, RDMA_USER_CM_CMD_DISCONNECT, d, 0);
            break;
          }
          case 3: {
            rdma_ucm_destroy_id d{};
            d.id = last_id;
            run(*svc, ch, RDMA_USER_CM_CMD_DESTROY_ID, d, 4);
            break;
          }
          case 4: {
            rdma_ucm_reject r{};
            r.id = last_id;
            r.private_data_len = op;
            run(*svc, ch, RDMA_USER_CM_CMD_REJECT, r, 0);
            break;
          }
          case 5: {  // an outgoing connection to 10.77.0.12
            const bool ud = op >> 5 & 1;
            last_id = create(*svc, ch, ud ? RDMA_PS_UDP : RDMA_PS_TCP, ud ? 4 : 2);
            rdma_ucm_resolve_ip rip{};
            rip.id = last_id;
            rip.dst_addr = sin4("10.77.0.12", 7174);
            run(*svc, ch, RDMA_USER_CM_CMD_RESOLVE_IP, rip, 0);
            rdma_ucm_resolve_route rr{last_id, 100};
            run(*svc, ch, RDMA_USER_CM_CMD_RESOLVE_ROUTE, rr, 0);
            rdma_ucm_connect c{};
            c.id = last_id;
            c.conn_param.qp_num = 0x43;
            c.conn_param.valid = 1;
            run(*svc, ch, RDMA_USER_CM_CMD_CONNECT, c, 0);
            break;
          }
          case 6: {  // a multicast join (flags from op, 2 and 3 invalid), or a leave of the last handle
            if (op >> 7) {
              rdma_ucm_destroy_id l{};
              l.id = last_id;
              run(*svc, ch, RDMA_USER_CM_CMD_LEAVE_MCAST, l, 4);
              break;
            }
            last_id = create(*svc, ch, RDMA_PS_UDP, 4);
            rdma_ucm_bind_ip b{};
            b.id = last_id;
            b.addr = sin4("10.77.0.11", 0);
            run(*svc, ch, RDMA_USER_CM_CMD_BIND_IP, b, 0);
            rdma_ucm_join_mcast j{};
            j.id = last_id;
            j.join_flags = op >> 5 & 3;
            j.addr_size = sizeof(sockaddr_in);
            const sockaddr_in6 grp = sin4("239.1.1.1", 0);
            std::memcpy(&j.addr, &grp, sizeof grp);
            run(*svc, ch, RDMA_USER_CM_CMD_JOIN_MCAST, j, 4);
            break;
          }
          default: {
            rdma_ucm_init_qp_attr q{};
            q.id = last_id;
            q.qp_state = op >> 5;
            run(*svc, ch, RDMA_USER_CM_CMD_INIT_QP_ATTR, q, sizeof(ib_uverbs_qp_attr));
            break;
          }
        }
        break;
      }
      case 2:  // time passes: op's upper bits x 300 ms
        host.now += static_cast<uint64_t>(op >> 2) * 300'000'000;
        if (svc->next_deadline_ns() <= host.now) svc->on_timer();
        break;
      default: {  // raw command bytes
        const size_t n = std::min<size_t>(size - i, op >> 2);
        svc->command(ch, {data + i, n}, {data + i, n / 2});
        i += n;
        break;
      }
    }
  }
  // Everything the eventfd promises can be read, then nothing more.
  for (int64_t n = host.queued; n > 0; --n) {
    rdma_ucm_get_event g{};
    if (run(*svc, ch, RDMA_USER_CM_CMD_GET_EVENT, g, sizeof(rdma_ucm_event_resp)).err)
      fail("promised event missing");
  }
  rdma_ucm_get_event g{};
  if (run(*svc, ch, RDMA_USER_CM_CMD_GET_EVENT, g, sizeof(rdma_ucm_event_resp)).err != EAGAIN)
    fail("event beyond the eventfd count");
  // The app goes away: every id ends within the longest CM timeout chain.
  svc->close_channel(ch);
  for (int k = 0; k < 64 && svc->next_deadline_ns() != UINT64_MAX; ++k) {
    host.now = std::max(host.now, svc->next_deadline_ns());
    svc->on_timer();
  }
  if (!svc->describe_ids().empty()) fail("ids left after the channel closed and the timers ran out");
  if (host.queued != 0) fail("eventfd count not zero after close");
  if (host.ip_groups != 0) fail("IP multicast groups still held after the channel closed");
  return 0;
}
