// RDMA CM multicast joins in the CM service core: JOIN_IP_MCAST, JOIN_MCAST, LEAVE_MCAST as the kernel's
// ucma.c and cma.c (RoCEv2) answer them, the MULTICAST_JOIN event, the IP-level membership.
#include "tests/cm/cm_harness.h"

namespace urxe::cm {
namespace {

// A UD id resolved to a group (mckey's steps): the join answers a handle and queues MULTICAST_JOIN under the
// join's uid and handle, with the address handle to send with; the full member holds the group at IP
// level (IGMP). LEAVE answers the join's events_reported and drops the IP membership.
struct McApp {
  Net net;
  App a{net.nodes[0]};
  int join(uint32_t id, const char* group, uint64_t uid, uint32_t* handle = nullptr, uint16_t flags = 0,
           bool legacy = true) {
    CommandResult r;
    if (legacy) {
      rdma_ucm_join_ip_mcast j{};
      j.id = id;
      j.uid = uid;
      j.addr = App::sin(group, 0);
      r = a.cmd(RDMA_USER_CM_CMD_JOIN_IP_MCAST, j, 4);
    } else {
      rdma_ucm_join_mcast j{};
      j.id = id;
      j.uid = uid;
      j.join_flags = flags;
      const sockaddr_in6 s6 = App::sin(group, 0);
      std::memcpy(&j.addr, &s6, sizeof s6);
      j.addr_size = sizeof(sockaddr_in);
      r = a.cmd(RDMA_USER_CM_CMD_JOIN_MCAST, j, 4);
    }
    if (!r.err && handle) std::memcpy(handle, r.out.data(), 4);
    return r.err;
  }
  int leave(uint32_t handle, uint32_t* reported = nullptr, App* from = nullptr) {
    rdma_ucm_destroy_id l{};
    l.id = handle;
    auto r = (from ? *from : a).cmd(RDMA_USER_CM_CMD_LEAVE_MCAST, l, 4);
    if (!r.err && reported) std::memcpy(reported, r.out.data(), 4);
    return r.err;
  }
  uint32_t ud_id(const char* bind_ip = "10.0.0.1") {
    const uint32_t id = a.create_id(1, RDMA_PS_UDP, 4);
    EXPECT_EQ(a.bind(id, bind_ip, 0), 0);
    return id;
  }
};

TEST(CmService, MulticastJoinLikeMckeyThenLeave) {
  McApp m;
  const uint32_t id = m.ud_id();
  ASSERT_EQ(m.a.resolve_ip(id, "239.1.1.1", 0), 0);
  m.a.expect_event(id, UcmaEvent::addr_resolved);  // as the kernel resolves a group address (no ARP)
  uint32_t mc = 0;
  ASSERT_EQ(m.join(id, "239.1.1.1", 0x77, &mc), 0);
  EXPECT_NE(mc, id);
  rdma_ucm_event_resp e{};
  m.a.expect_event(mc, UcmaEvent::multicast_join, &e);
  EXPECT_EQ(e.uid, 0x77u);
  EXPECT_EQ(e.status, 0u);
  const rdma_ucm_ud_param& ud = e.param.ud;
  EXPECT_EQ(ud.qp_num, 0xffffffu);
  EXPECT_EQ(ud.qkey, 0x01234567u);  // RDMA_UDP_QKEY
  EXPECT_EQ(ud.ah_attr.is_global, 1);
  EXPECT_EQ(ud.ah_attr.port_num, 1);
  EXPECT_EQ(ud.ah_attr.grh.hop_limit, 64);  // IPv4 on RoCEv2
  EXPECT_EQ(ud.ah_attr.grh.sgid_index, 1);  // 10.0.0.1's GID
  EXPECT_EQ(ud.ah_attr.dlid, 0);
  const wire::Gid g = v4("239.1.1.1");
  EXPECT_EQ(std::memcmp(ud.ah_attr.grh.dgid, g.data(), 16), 0);
  const auto ids = m.net.nodes[0].svc->describe_ids();  // `urxe cm show`
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_NE(ids[0].find(" mcast 239.1.1.1"), std::string::npos) << ids[0];
  auto& ip = m.net.nodes[0].ip_joins;
  ASSERT_EQ(ip.size(), 1u);
  EXPECT_TRUE(ip[0].join && ip[0].ifindex == 7 && ip[0].group == g);
  uint32_t reported = 9;
  ASSERT_EQ(m.leave(mc, &reported), 0);
  EXPECT_EQ(reported, 1u);
  ASSERT_EQ(ip.size(), 2u);
  EXPECT_TRUE(!ip[1].join && ip[1].group == g);
  EXPECT_EQ(m.leave(mc), ENOENT);
  ASSERT_EQ(m.a.destroy(id, &reported), 0);
  EXPECT_EQ(reported, 2u);  // ADDR_RESOLVED and MULTICAST_JOIN
}

// The kernel's rules (ucma_process_join, rdma_join_multicast, cma_iboe_join_multicast) for commands an app
// gets wrong or forges.
TEST(CmService, MulticastJoinRules) {
  McApp m;
  App& a = m.a;
  const uint32_t tcp = a.create_id(2, RDMA_PS_TCP, 2);
  ASSERT_EQ(a.bind(tcp, "10.0.0.1", 0), 0);
  EXPECT_EQ(m.join(tcp, "239.1.1.1", 1), EINVAL);  // UD ids only
  const uint32_t idle = a.create_id(3, RDMA_PS_UDP, 4);
  EXPECT_EQ(m.join(idle, "239.1.1.1", 1), EINVAL);  // neither bound nor resolved
  const uint32_t any = m.ud_id("0.0.0.0");
  EXPECT_EQ(m.join(any, "239.1.1.1", 1), EINVAL);   // bound, but to no device
  EXPECT_EQ(m.join(4242, "239.1.1.1", 1), EINVAL);  // no such id
  const uint32_t id = m.ud_id();
  EXPECT_EQ(m.join(id, "0.0.0.0", 1), EINVAL);
  EXPECT_EQ(m.join(id, "239.1.1.1", 1, nullptr, 2, false), EINVAL);  // join_flags
  rdma_ucm_join_mcast j{};
  j.id = id;
  const sockaddr_in6 s6 = App::sin("239.1.1.1", 0);
  std::memcpy(&j.addr, &s6, sizeof s6);
  j.addr_size = sizeof(sockaddr_in6);  // not an AF_INET address's size
  EXPECT_EQ(a.cmd(RDMA_USER_CM_CMD_JOIN_MCAST, j, 4).err, EINVAL);
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  inet_pton(AF_INET6, "ff0e::1", &v6.sin6_addr);
  std::memcpy(&j.addr, &v6, sizeof v6);
  EXPECT_EQ(a.cmd(RDMA_USER_CM_CMD_JOIN_MCAST, j, 4).err, 524);  // IPv6 groups on RoCEv2: ENOTSUPP
  App other(m.net.nodes[0]);
  rdma_ucm_join_ip_mcast ji{};
  ji.id = id;
  ji.addr = App::sin("239.1.1.1", 0);
  EXPECT_EQ(other.cmd(RDMA_USER_CM_CMD_JOIN_IP_MCAST, ji, 4).err, EINVAL);  // another channel's id
  EXPECT_TRUE(m.net.nodes[0].ip_joins.empty());
  EXPECT_EQ(a.queued(), 0);

  // A send-only member joins nothing at IP level; two full joins of one group hold it twice.
  uint32_t so = 0, f1 = 0, f2 = 0;
  ASSERT_EQ(m.join(id, "239.1.1.2", 5, &so, RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER, false), 0);
  ASSERT_EQ(m.join(id, "239.1.1.3", 6, &f1, RDMA_MC_JOIN_FLAG_FULLMEMBER, false), 0);
  ASSERT_EQ(m.join(id, "239.1.1.3", 7, &f2), 0);
  auto& ip = m.net.nodes[0].ip_joins;
  ASSERT_EQ(ip.size(), 2u);
  EXPECT_TRUE(ip[0].join && ip[1].join && ip[0].group == v4("239.1.1.3"));
  EXPECT_EQ(a.queued(), 3);
  EXPECT_EQ(m.leave(so, nullptr, &other), EINVAL);  // not other's
  // LEAVE takes the join's unread event with it (events_reported 0); destroying the id leaves the rest.
  uint32_t reported = 9;
  ASSERT_EQ(m.leave(so, &reported), 0);
  EXPECT_EQ(reported, 0u);
  EXPECT_EQ(a.queued(), 2);
  rdma_ucm_event_resp e{};
  m.a.expect_event(f1, UcmaEvent::multicast_join, &e);
  EXPECT_EQ(e.uid, 6u);
  ASSERT_EQ(a.destroy(id, &reported), 0);
  EXPECT_EQ(reported, 1u);
  EXPECT_EQ(a.queued(), 0);
  ASSERT_EQ(ip.size(), 4u);
  EXPECT_TRUE(!ip[2].join && !ip[3].join);
  EXPECT_EQ(m.leave(f2), ENOENT);
}

}  // namespace
}  // namespace urxe::cm
