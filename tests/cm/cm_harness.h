// The CM service core's test harness: two simulated hosts (A 10.0.0.1, B 10.0.0.2, one urxe device each)
// whose MADs pass through the wire/ codec on a simulated wire that can lose them, in virtual time, and an
// application channel issuing UCMA commands as librdmacm writes them.
#pragma once
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <functional>

#include "cm/service.h"
#include "cm/ucma_abi.h"
#include "hostnet/gid.h"
#include "wire/mad.h"

namespace urxe::cm {
namespace {

wire::Gid v4(const char* s) {  // "10.0.0.1" as its IPv4-mapped GID
  wire::Gid g{};
  hostnet::gid_from_string(s, g);
  return g;
}

struct Net;

struct Node final : CmHost {
  Net* net = nullptr;
  int index = 0;
  std::unique_ptr<CmService> svc;
  CmDevice dev;
  std::map<ChannelId, int64_t> eventfd;  // the daemon's eventfd count per channel
  uint64_t now_ns() override;
  void event_queued(ChannelId ch) override { ++eventfd[ch]; }
  void events_dequeued(ChannelId ch, uint32_t n) override {
    eventfd[ch] -= n;
    EXPECT_GE(eventfd[ch], 0);
  }
  void send_mad(const MadOut& m) override;
  RouteResult lookup_route(const wire::Gid& dst, const wire::Gid&, int, bool) override;
  int local_address_ifindex(const wire::Gid& addr) override { return addr == dev.gids[1] ? dev.ifindex : 0; }
  struct IpJoin {
    int ifindex;
    wire::Gid group;
    bool join;
  };
  std::vector<IpJoin> ip_joins;  // ip_multicast calls, in order
  int ip_multicast(int ifindex, const wire::Gid& group, bool join) override {
    ip_joins.push_back({ifindex, group, join});
    return 0;
  }
};

struct Net {
  uint64_t now = 1'000'000'000;
  Node nodes[2];
  std::deque<std::pair<int, MadOut>> wire;       // (destination node, MAD)
  std::function<bool(const wire::CmMad&)> drop;  // true = lose this MAD
  std::vector<uint16_t> sent_attrs;
  std::vector<uint64_t> sent_tids;

  Net() {
    for (int i = 0; i < 2; ++i) {
      Node& n = nodes[i];
      n.net = this;
      n.index = i;
      n.dev.index = 0;
      n.dev.name = "urxe0";
      n.dev.node_guid = 0x0200'00ff'fe00'0001ull + i;
      n.dev.mac = {0x02, 0, 0, 0, 0, uint8_t(1 + i)};
      n.dev.ifindex = 7;
      n.dev.mtu = 1500;
      n.dev.gids = {wire::Gid{0xfe, 0x80}, v4(i == 0 ? "10.0.0.1" : "10.0.0.2")};
      n.svc = CmService::create(n);
      n.svc->set_devices({n.dev});
    }
  }
  // Delivers queued MADs and runs timers until nothing is left before `until` (virtual ns).
  void run(uint64_t for_ns = 0) {
    const uint64_t until = now + for_ns;
    for (;;) {
      while (!wire.empty()) {
        auto [to, m] = wire.front();
        wire.pop_front();
        MadIn in;
        in.device = 0;
        in.sgid = m.sgid;
        in.dgid = m.dgid;
        in.smac = nodes[1 - to].dev.mac;
        in.hop_limit = m.hop_limit;
        in.src_qp = 1;
        in.mad = m.mad;
        nodes[to].svc->on_mad(in);
      }
      uint64_t next = std::min(nodes[0].svc->next_deadline_ns(), nodes[1].svc->next_deadline_ns());
      if (next > until || next == UINT64_MAX) break;
      now = std::max(now, next);
      for (auto& n : nodes) n.svc->on_timer();
    }
    now = std::max(now, until);
  }
};

uint64_t Node::now_ns() {
  return net->now;
}
void Node::send_mad(const MadOut& m) {
  wire::CmMad mad;
  ASSERT_EQ(wire::parse_cm_mad(m.mad, mad), wire::MadError::ok);
  net->sent_attrs.push_back(mad.header.attribute_id);
  net->sent_tids.push_back(mad.header.transaction_id);
  EXPECT_EQ(m.sgid, dev.gids[1]);
  if (net->drop && net->drop(mad)) return;
  const int to = m.dgid == net->nodes[0].dev.gids[1] ? 0 : 1;
  net->wire.emplace_back(to, m);
}
RouteResult Node::lookup_route(const wire::Gid& dst, const wire::Gid&, int, bool) {
  RouteResult r;
  for (auto& n : net->nodes)
    if (n.dev.gids[1] == dst) {
      r.state = RouteResult::State::resolved;
      r.device = 0;
      r.src = dev.gids[1];
      r.dmac = n.dev.mac;
      return r;
    }
  r.state = RouteResult::State::unreachable;
  return r;
}

// One application channel on a node, issuing commands as librdmacm writes them.
struct App {
  Node& node;
  ChannelId ch;
  explicit App(Node& n, uint32_t uid = 0) : node(n), ch(n.svc->open_channel({100, uid})) {}

  template <class Cmd>
  CommandResult cmd(uint32_t op, const Cmd& body, uint16_t out, std::span<const uint8_t> extra = {}) {
    std::vector<uint8_t> buf(sizeof(rdma_ucm_cmd_hdr) + sizeof body);
    rdma_ucm_cmd_hdr hdr{op, uint16_t(sizeof body), out};
    std::memcpy(buf.data(), &hdr, sizeof hdr);
    std::memcpy(buf.data() + sizeof hdr, &body, sizeof body);
    return node.svc->command(ch, buf, extra);
  }
  uint32_t create_id(uint64_t uid, uint16_t ps = RDMA_PS_TCP, uint8_t qp_type = 2) {
    rdma_ucm_create_id c{};
    c.uid = uid;
    c.ps = ps;
    c.qp_type = qp_type;
    auto r = cmd(RDMA_USER_CM_CMD_CREATE_ID, c, 4);
    EXPECT_EQ(r.err, 0);
    rdma_ucm_create_id_resp resp{};
    std::memcpy(&resp, r.out.data(), sizeof resp);
    return resp.id;
  }
  static sockaddr_in6 sin(const char* ip, uint16_t port) {
    sockaddr_in6 s6{};
    sockaddr_in s{};
    s.sin_family = AF_INET;
    s.sin_port = htons(port);
    inet_pton(AF_INET, ip, &s.sin_addr);
    std::memcpy(&s6, &s, sizeof s);
    return s6;
  }
  int bind(uint32_t id, const char* ip, uint16_t port) {
    rdma_ucm_bind_ip c{};
    c.id = id;
    c.addr = sin(ip, port);
    return cmd(RDMA_USER_CM_CMD_BIND_IP, c, 0).err;
  }
  int listen(uint32_t id, uint32_t backlog = 3) {
    rdma_ucm_listen c{id, backlog};
    return cmd(RDMA_USER_CM_CMD_LISTEN, c, 0).err;
  }
  int resolve_ip(uint32_t id, const char* dst, uint16_t port) {
    rdma_ucm_resolve_ip c{};
    c.id = id;
    c.dst_addr = sin(dst, port);
    c.timeout_ms = 2000;
    return cmd(RDMA_USER_CM_CMD_RESOLVE_IP, c, 0).err;
  }
  // QUERY_ROUTE's answer (addresses, device GUID, paths); err != 0 fails the test.
  rdma_ucm_query_route_resp query_route(uint32_t id) {
    rdma_ucm_query q{};
    q.id = id;
    auto r = cmd(RDMA_USER_CM_CMD_QUERY_ROUTE, q, sizeof(rdma_ucm_query_route_resp));
    EXPECT_EQ(r.err, 0);
    rdma_ucm_query_route_resp resp{};
    std::memcpy(&resp, r.out.data(), std::min(r.out.size(), sizeof resp));
    return resp;
  }
  int resolve_route(uint32_t id) {
    rdma_ucm_resolve_route c{id, 2000};
    return cmd(RDMA_USER_CM_CMD_RESOLVE_ROUTE, c, 0).err;
  }
  bool get_event(rdma_ucm_event_resp& e) {
    rdma_ucm_get_event c{};
    auto r = cmd(RDMA_USER_CM_CMD_GET_EVENT, c, sizeof e);
    if (r.err) {
      EXPECT_EQ(r.err, EAGAIN);
      return false;
    }
    EXPECT_EQ(r.out.size(), sizeof e);
    std::memcpy(&e, r.out.data(), sizeof e);
    return true;
  }
  UcmaEvent expect_event(uint32_t id, UcmaEvent want, rdma_ucm_event_resp* out = nullptr) {
    rdma_ucm_event_resp e{};
    EXPECT_TRUE(get_event(e)) << "no event, wanted " << ucma_event_name(want);
    EXPECT_EQ(e.event, uint32_t(want))
        << ucma_event_name(UcmaEvent(e.event)) << " status " << int32_t(e.status);
    if (id) {
      EXPECT_EQ(e.id, id);
    }
    if (out) *out = e;
    return UcmaEvent(e.event);
  }
  int64_t queued() { return node.eventfd[ch]; }
  ib_uverbs_qp_attr qp_attr(uint32_t id, uint32_t state, int* err = nullptr) {
    rdma_ucm_init_qp_attr c{};
    c.id = id;
    c.qp_state = state;
    auto r = cmd(RDMA_USER_CM_CMD_INIT_QP_ATTR, c, sizeof(ib_uverbs_qp_attr));
    ib_uverbs_qp_attr a{};
    if (err) *err = r.err;
    if (!r.err) std::memcpy(&a, r.out.data(), sizeof a);
    return a;
  }
  int connect(uint32_t id, uint32_t qpn, const char* pd = "hello") {
    rdma_ucm_connect c{};
    c.id = id;
    c.conn_param.qp_num = qpn;
    c.conn_param.valid = 1;
    c.conn_param.responder_resources = 1;
    c.conn_param.initiator_depth = 1;
    c.conn_param.retry_count = 7;
    c.conn_param.rnr_retry_count = 7;
    c.conn_param.private_data_len = uint8_t(std::strlen(pd));
    std::memcpy(c.conn_param.private_data, pd, std::strlen(pd));
    return cmd(RDMA_USER_CM_CMD_CONNECT, c, 0).err;
  }
  int accept(uint32_t id, uint64_t uid, uint32_t qpn) {
    rdma_ucm_accept c{};
    c.id = id;
    c.uid = uid;
    if (qpn) {
      c.conn_param.qp_num = qpn;
      c.conn_param.valid = 1;
      c.conn_param.responder_resources = 1;
      c.conn_param.initiator_depth = 1;
      c.conn_param.rnr_retry_count = 7;
    }
    return cmd(RDMA_USER_CM_CMD_ACCEPT, c, 0).err;
  }
  int disconnect(uint32_t id) {
    rdma_ucm_disconnect c{id};
    return cmd(RDMA_USER_CM_CMD_DISCONNECT, c, 0).err;
  }
  int destroy(uint32_t id, uint32_t* reported = nullptr) {
    rdma_ucm_destroy_id c{};
    c.id = id;
    auto r = cmd(RDMA_USER_CM_CMD_DESTROY_ID, c, 4);
    if (!r.err && reported) std::memcpy(reported, r.out.data(), 4);
    return r.err;
  }
};

}  // namespace
}  // namespace urxe::cm
