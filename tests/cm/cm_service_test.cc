// The CM service core between two simulated hosts (A 10.0.0.1, B 10.0.0.2, one urxe device each), driven
// by UCMA commands in the order librdmacm issues them, with the MADs passing through the wire/ codec on a
// simulated wire that can lose them, in virtual time.
#include "tests/cm/cm_harness.h"

namespace urxe::cm {
namespace {

// What rping does, both sides, up to ESTABLISHED on both.
struct Connected {
  Net net;
  App server{net.nodes[1]}, client{net.nodes[0]};
  uint32_t lid = 0, cid = 0, sid = 0;  // listener, client id, server's connection id
  rdma_ucm_event_resp req_ev{}, rep_ev{};

  void setup_listener(uint16_t port = 7174) {
    lid = server.create_id(0x1000);
    ASSERT_EQ(server.bind(lid, "0.0.0.0", port), 0);
    ASSERT_EQ(server.listen(lid), 0);
  }
  void resolve(uint16_t port = 7174) {
    cid = client.create_id(0x2000);
    ASSERT_EQ(client.resolve_ip(cid, "10.0.0.2", port), 0);
    net.run();
    client.expect_event(cid, UcmaEvent::addr_resolved);
    ASSERT_EQ(client.resolve_route(cid), 0);
    client.expect_event(cid, UcmaEvent::route_resolved);
  }
  // CONNECT, the server's CONNECT_REQUEST and its ACCEPT (the REP on the wire), the wire run after each.
  void connect_and_accept() {
    ASSERT_EQ(client.connect(cid, 0x11), 0);
    net.run();
    server.expect_event(0, UcmaEvent::connect_request, &req_ev);
    sid = req_ev.id;
    ASSERT_EQ(server.accept(sid, 0x3000, 0x22), 0);
    net.run();
  }
  void connect_all() {
    setup_listener();
    resolve();
    int err = -1;
    const auto init = client.qp_attr(cid, 1, &err);  // rdma_create_qp before the connection
    ASSERT_EQ(err, 0);
    EXPECT_EQ(init.qp_access_flags, 0u);
    ASSERT_EQ(client.connect(cid, 0x11), 0);
    net.run();
    server.expect_event(0, UcmaEvent::connect_request, &req_ev);
    sid = req_ev.id;
    // librdmacm's order: rdma_create_qp (INIT), then rdma_accept moves the QP to RTR and RTS before ACCEPT.
    for (uint32_t state : {1u, 2u, 3u}) {
      err = -1;
      server.qp_attr(sid, state, &err);
      ASSERT_EQ(err, 0) << "INIT_QP_ATTR " << state << " before ACCEPT";
    }
    ASSERT_EQ(server.accept(sid, 0x3000, 0x22), 0);
    net.run();
    client.expect_event(cid, UcmaEvent::connect_response, &rep_ev);
    for (uint32_t state : {1u, 2u, 3u}) {  // ucma_process_conn_resp: INIT (again), RTR, RTS, then ACCEPT
      client.qp_attr(cid, state, &err);
      ASSERT_EQ(err, 0) << "INIT_QP_ATTR " << state << " after the REP";
    }
    ASSERT_EQ(client.accept(cid, 0, 0), 0);  // librdmacm's "send RTU" after its QP is in RTS
    net.run();
    server.expect_event(sid, UcmaEvent::established);
  }
};

TEST(CmService, RpingLikeConnectCarriesQpnsPsnsAndPrivateData) {
  Connected c;
  c.connect_all();
  // The CONNECT_REQUEST belongs to the listener's uid and names the new id; the app data after the IP CM
  // header arrives as private data (56 bytes on RC).
  EXPECT_EQ(c.req_ev.uid, 0x1000u);
  EXPECT_NE(c.req_ev.id, c.lid);
  EXPECT_EQ(c.req_ev.param.conn.qp_num, 0x11u);
  EXPECT_EQ(c.req_ev.param.conn.private_data_len, 56);
  EXPECT_EQ(std::memcmp(c.req_ev.param.conn.private_data, "hello", 5), 0);
  EXPECT_EQ(c.rep_ev.param.conn.qp_num, 0x22u);
  EXPECT_EQ(c.rep_ev.param.conn.private_data_len, 196);

  // Each side's RTR/RTS attributes match the other's: dest QPN, and rq_psn = the peer's sq_psn.
  auto c_rtr = c.client.qp_attr(c.cid, 2), c_rts = c.client.qp_attr(c.cid, 3);
  auto s_rtr = c.server.qp_attr(c.sid, 2), s_rts = c.server.qp_attr(c.sid, 3);
  EXPECT_EQ(c_rtr.dest_qp_num, 0x22u);
  EXPECT_EQ(s_rtr.dest_qp_num, 0x11u);
  EXPECT_EQ(c_rtr.rq_psn, s_rts.sq_psn);
  EXPECT_EQ(s_rtr.rq_psn, c_rts.sq_psn);
  EXPECT_EQ(c_rtr.path_mtu, 3u);  // 1500-byte link: 1024
  EXPECT_EQ(c_rtr.ah_attr.is_global, 1);
  EXPECT_EQ(c_rtr.ah_attr.grh.sgid_index, 1);  // the index of 10.0.0.1 in the GID table
  EXPECT_EQ(std::memcmp(c_rtr.ah_attr.grh.dgid, c.net.nodes[1].dev.gids[1].data(), 16), 0);
  EXPECT_EQ(s_rts.timeout, 17);
  EXPECT_EQ(s_rts.retry_cnt, 7);
  EXPECT_EQ(c_rts.max_rd_atomic, 1);
  EXPECT_EQ(s_rtr.max_dest_rd_atomic, 1);
  auto s_init = c.server.qp_attr(c.sid, 1);
  EXPECT_EQ(s_init.qp_access_flags, 2u | 4u | 8u);
  // The wire saw exactly REQ, REP, RTU.
  EXPECT_EQ(c.net.sent_attrs, (std::vector<uint16_t>{0x10, 0x13, 0x14}));
  // One transaction ID for the exchange, as kernel rxe's captures show: the REP answers with the REQ's.
  ASSERT_EQ(c.net.sent_tids.size(), 3u);
  EXPECT_NE(c.net.sent_tids[0], 0u);
  EXPECT_EQ(c.net.sent_tids[1], c.net.sent_tids[0]);
  EXPECT_EQ(c.net.sent_tids[2], c.net.sent_tids[0]);
  EXPECT_EQ(c.client.queued(), 0);
  EXPECT_EQ(c.server.queued(), 0);
}

TEST(CmService, DisconnectBothSidesThenDestroyReportsEventCounts) {
  Connected c;
  c.connect_all();
  ASSERT_EQ(c.client.disconnect(c.cid), 0);
  c.net.run(1'000'000);
  c.server.expect_event(c.sid, UcmaEvent::disconnected);
  c.client.expect_event(c.cid, UcmaEvent::disconnected);
  ASSERT_EQ(c.server.disconnect(c.sid), 0);  // rping disconnects on both sides: no second DREQ goes out
  uint32_t reported = 0;
  ASSERT_EQ(c.client.destroy(c.cid, &reported), 0);
  EXPECT_EQ(reported, 4u);  // ADDR_RESOLVED, ROUTE_RESOLVED, CONNECT_RESPONSE, DISCONNECTED
  ASSERT_EQ(c.server.destroy(c.sid, &reported), 0);
  EXPECT_EQ(reported, 2u);  // ESTABLISHED, DISCONNECTED (the CONNECT_REQUEST counts on the listener)
  ASSERT_EQ(c.server.destroy(c.lid, &reported), 0);
  EXPECT_EQ(reported, 1u);
  EXPECT_EQ(c.net.sent_attrs, (std::vector<uint16_t>{0x10, 0x13, 0x14, 0x15, 0x16}));
  c.net.run(10'000'000'000);
  EXPECT_TRUE(c.net.nodes[0].svc->describe_ids().empty());
  EXPECT_TRUE(c.net.nodes[1].svc->describe_ids().empty());
}

TEST(CmService, NoListenerIsRejectedWithReason8AtOnce) {
  Connected c;
  c.resolve(9999);
  ASSERT_EQ(c.client.connect(c.cid, 0x11), 0);
  const uint64_t t0 = c.net.now;
  c.net.run();
  rdma_ucm_event_resp e{};
  c.client.expect_event(c.cid, UcmaEvent::rejected, &e);
  EXPECT_EQ(e.status, 8u);
  EXPECT_EQ(c.net.now, t0);  // no timer was needed
}

TEST(CmService, LostReqIsRetransmittedOnTheKernelsTimer) {
  Connected c;
  c.setup_listener();
  c.resolve();
  int lost = 0;
  c.net.drop = [&](const wire::CmMad& m) { return m.header.attribute_id == 0x10 && lost++ == 0; };
  ASSERT_EQ(c.client.connect(c.cid, 0x11), 0);
  const uint64_t t0 = c.net.now;
  c.net.run(4'000'000'000);
  rdma_ucm_event_resp e{};
  EXPECT_FALSE(c.server.get_event(e));  // not before 2 * 256 + 4096 ms
  c.net.run(1'000'000'000);
  c.server.expect_event(0, UcmaEvent::connect_request);
  EXPECT_EQ(c.net.nodes[0].svc->counters().retries(), 1u);
  // Counted as the kernel counts per port: the retry is also a REQ sent.
  const auto k = c.net.nodes[0].svc->device_counters(0);
  EXPECT_EQ(k.tx_retries[0], 1u);
  EXPECT_EQ(k.tx[0], 2u);
  EXPECT_EQ(c.net.nodes[1].svc->device_counters(0).rx[0], 1u);  // the first one was lost
  EXPECT_GE(c.net.now - t0, 4'608'000'000u);
}

TEST(CmService, DuplicateReqBeforeAcceptGetsMra) {
  Connected c;
  c.setup_listener();
  c.resolve();
  ASSERT_EQ(c.client.connect(c.cid, 0x11), 0);
  c.net.run(10'000'000'000);  // the server app is slow: the REQ is retransmitted after 4.6 s
  rdma_ucm_event_resp e{};
  c.server.expect_event(0, UcmaEvent::connect_request, &e);
  EXPECT_FALSE(c.server.get_event(e));  // one request, not two
  EXPECT_NE(std::find(c.net.sent_attrs.begin(), c.net.sent_attrs.end(), 0x11), c.net.sent_attrs.end());
  // After the MRA the client waits the service timeout (24: ~67 s) before it retransmits again.
  const size_t before = c.net.sent_attrs.size();
  c.net.run(30'000'000'000);
  EXPECT_EQ(c.net.sent_attrs.size(), before);
}

// A REQ again once the REP went out (cm_dup_req_handler in REP_SENT): ignored; the REP goes again only on
// its own timer.
TEST(CmService, DuplicateReqAfterAcceptIsIgnored) {
  Connected c;
  c.setup_listener();
  c.resolve();
  ASSERT_EQ(c.client.connect(c.cid, 0x11), 0);
  ASSERT_EQ(c.net.wire.size(), 1u);
  const auto req = c.net.wire.front();  // the REQ, to be delivered again
  c.net.run();
  rdma_ucm_event_resp e{};
  c.server.expect_event(0, UcmaEvent::connect_request, &e);
  c.sid = e.id;
  ASSERT_EQ(c.server.accept(c.sid, 0x3000, 0x22), 0);
  c.net.wire.push_back(req);  // behind the REP
  c.net.run();
  const auto reps = [&] { return std::count(c.net.sent_attrs.begin(), c.net.sent_attrs.end(), 0x13); };
  EXPECT_EQ(reps(), 1);
  EXPECT_EQ(c.net.nodes[1].svc->device_counters(0).rx_duplicates[0], 1u);  // counted as a duplicate REQ
  c.client.expect_event(c.cid, UcmaEvent::connect_response);
  ASSERT_EQ(c.client.accept(c.cid, 0, 0), 0);
  c.net.run(10'000'000'000);
  c.server.expect_event(c.sid, UcmaEvent::established);
  EXPECT_EQ(reps(), 1);
}

// An id destroyed before its connection is up tells the peer by REJ as cm_destroy_id does: "timeout" with
// the node GUID while its REQ is unanswered (MessageRejected: none of the peer's messages), "consumer" in
// REP_SENT (none either) and REP_RCVD (the peer's REP).
TEST(CmService, DestroyBeforeEstablishedRejectsAsTheKernel) {
  for (const int step : {0, 1, 2}) {
    SCOPED_TRACE(step);
    Connected c;
    c.setup_listener();
    c.resolve();
    std::vector<wire::CmRej> rejs;
    c.net.drop = [&](const wire::CmMad& m) {
      if (const auto* r = std::get_if<wire::CmRej>(&m.msg)) rejs.push_back(*r);
      return step < 2 && m.header.attribute_id == 0x13;  // the REP lost: the client stays in REQ_SENT
    };
    c.connect_and_accept();
    if (step == 2) c.client.expect_event(c.cid, UcmaEvent::connect_response);
    ASSERT_EQ((step == 1 ? c.server : c.client).destroy(step == 1 ? c.sid : c.cid), 0);
    c.net.run(1'000'000);
    ASSERT_EQ(rejs.size(), 1u);
    const wire::CmRej& r = rejs[0];
    if (step == 0) {
      EXPECT_EQ(r.reason, static_cast<uint16_t>(wire::CmRejReason::timeout));
      EXPECT_EQ(r.message_rejected, 2);
      ASSERT_EQ(r.reject_info_length, 8);
      uint64_t guid = 0;
      for (int i = 0; i < 8; ++i) guid = guid << 8 | r.additional_reject_information[i];
      EXPECT_EQ(guid, c.net.nodes[0].dev.node_guid);
    } else {
      EXPECT_EQ(r.reason, static_cast<uint16_t>(wire::CmRejReason::consumer_reject));
      EXPECT_EQ(r.message_rejected, step == 1 ? 2 : 1);
      EXPECT_EQ(r.reject_info_length, 0);
    }
    rdma_ucm_event_resp e{};
    (step == 1 ? c.client : c.server).expect_event(step == 1 ? c.cid : c.sid, UcmaEvent::rejected, &e);
  }
}

TEST(CmService, UnansweredReqEndsUnreachableAfterRetries) {
  Connected c;
  c.setup_listener();
  c.resolve();
  c.net.drop = [](const wire::CmMad& m) { return m.header.attribute_id == 0x10; };
  ASSERT_EQ(c.client.connect(c.cid, 0x11), 0);
  c.net.run(16 * 4'608'000'000ull + 1'000'000'000);
  rdma_ucm_event_resp e{};
  c.client.expect_event(c.cid, UcmaEvent::unreachable, &e);
  EXPECT_EQ(int32_t(e.status), -ETIMEDOUT);
  EXPECT_EQ(c.net.nodes[0].svc->counters().retries(), 15u);
  EXPECT_EQ(c.net.nodes[0].svc->device_counters(0).tx[0], 16u);
}

TEST(CmService, LostRtuIsRecoveredByRepRetransmission) {
  Connected c;
  c.setup_listener();
  c.resolve();
  int lost = 0;
  c.net.drop = [&](const wire::CmMad& m) { return m.header.attribute_id == 0x14 && lost++ == 0; };
  c.connect_and_accept();
  c.client.expect_event(c.cid, UcmaEvent::connect_response);
  ASSERT_EQ(c.client.accept(c.cid, 0, 0), 0);
  c.net.run(5'000'000'000);  // REP again after 4096 ms, answered by a fresh RTU
  c.server.expect_event(c.sid, UcmaEvent::established);
  EXPECT_EQ(c.net.nodes[0].svc->counters().duplicates(), 1u);
  EXPECT_EQ(c.net.nodes[0].svc->device_counters(0).rx_duplicates[0x13 - 0x10], 1u);  // a REP
}

TEST(CmService, RejectSendsConsumerRejectWithPrivateData) {
  Connected c;
  c.setup_listener();
  c.resolve();
  ASSERT_EQ(c.client.connect(c.cid, 0x11), 0);
  c.net.run();
  rdma_ucm_event_resp e{};
  c.server.expect_event(0, UcmaEvent::connect_request, &e);
  rdma_ucm_reject r{};
  r.id = e.id;
  r.private_data_len = 3;
  std::memcpy(r.private_data, "no!", 3);
  ASSERT_EQ(c.server.cmd(RDMA_USER_CM_CMD_REJECT, r, 0).err, 0);
  c.net.run();
  c.client.expect_event(c.cid, UcmaEvent::rejected, &e);
  EXPECT_EQ(e.status, 28u);
  EXPECT_EQ(std::memcmp(e.param.conn.private_data, "no!", 3), 0);
}

TEST(CmService, DestroyingAnEstablishedIdSendsDreqAndThePeerIsDisconnected) {
  Connected c;
  c.connect_all();
  int dreqs = 0, dreps = 0;
  c.net.drop = [&](const wire::CmMad& m) {
    dreqs += m.header.attribute_id == 0x15;
    dreps += m.header.attribute_id == 0x16;
    return false;
  };
  ASSERT_EQ(c.client.destroy(c.cid), 0);  // like a process that dies: no DISCONNECT first
  c.net.run(1'000'000);
  c.server.expect_event(c.sid, UcmaEvent::disconnected);
  EXPECT_EQ(dreqs, 1);  // the DREQ, sent once
  EXPECT_EQ(dreps, 1);  // and answered
}

// rping destroys its id right after rdma_disconnect. The kernel then cancels the DREQ (cm_destroy_id in
// DREQ_SENT), so its peer's server never learns of a lost one; the service keeps retrying it, as the id
// lives on until timewait ends.
TEST(CmService, LostDreqOfAnIdDestroyedAtOnceIsRetransmitted) {
  Connected c;
  c.connect_all();
  int lost = 0;
  c.net.drop = [&](const wire::CmMad& m) { return m.header.attribute_id == 0x15 && lost++ == 0; };
  ASSERT_EQ(c.client.disconnect(c.cid), 0);
  ASSERT_EQ(c.client.destroy(c.cid), 0);
  c.net.run(1'000'000);
  rdma_ucm_event_resp e{};
  EXPECT_FALSE(c.server.get_event(e));  // the first DREQ was lost
  c.net.run(10'000'000'000);
  c.server.expect_event(c.sid, UcmaEvent::disconnected);
  EXPECT_EQ(lost, 2);  // dropped once, retransmitted once
  EXPECT_EQ(c.net.nodes[0].svc->counters().retries(), 1u);
}

TEST(CmService, ClosingAChannelDestroysItsIds) {
  Connected c;
  c.connect_all();
  c.net.nodes[0].svc->close_channel(c.client.ch);  // SIGKILL: the shim's socket closes
  c.net.run(1'000'000);
  c.server.expect_event(c.sid, UcmaEvent::disconnected);
  c.net.run(10'000'000'000);
  EXPECT_TRUE(c.net.nodes[0].svc->describe_ids().empty());
}

TEST(CmService, CrossingDreqsBothDisconnect) {
  Connected c;
  c.connect_all();
  ASSERT_EQ(c.client.disconnect(c.cid), 0);
  ASSERT_EQ(c.server.disconnect(c.sid), 0);
  c.net.run(1'000'000);
  c.server.expect_event(c.sid, UcmaEvent::disconnected);
  c.client.expect_event(c.cid, UcmaEvent::disconnected);
  rdma_ucm_event_resp e{};
  EXPECT_FALSE(c.client.get_event(e));
  EXPECT_FALSE(c.server.get_event(e));
}

TEST(CmService, PortSpaceRules) {
  Net net;
  App a(net.nodes[0]);
  const uint32_t x = a.create_id(1), y = a.create_id(2), z = a.create_id(3);
  EXPECT_EQ(a.bind(x, "10.0.0.1", 5000), 0);
  EXPECT_EQ(a.listen(x), 0);
  EXPECT_EQ(a.bind(y, "0.0.0.0", 5000), EADDRINUSE);
  EXPECT_EQ(a.bind(z, "10.9.9.9", 5001), EADDRNOTAVAIL);  // not an address of this host
  const uint32_t w = a.create_id(4, RDMA_PS_UDP, 4);
  EXPECT_EQ(a.bind(w, "10.0.0.1", 5000), 0);  // another port space
  // Port 0: an ephemeral port, reported by QUERY_ROUTE.
  const uint32_t e = a.create_id(5);
  EXPECT_EQ(a.bind(e, "10.0.0.1", 0), 0);
  const rdma_ucm_query_route_resp resp = a.query_route(e);
  sockaddr_in sa{};
  std::memcpy(&sa, &resp.src_addr, sizeof sa);
  EXPECT_GE(ntohs(sa.sin_port), 32768);
  EXPECT_EQ(resp.num_paths, 0u);
  uint64_t guid = 0;
  std::memcpy(&guid, &resp.node_guid, 8);
  EXPECT_EQ(be64toh(guid), net.nodes[0].dev.node_guid);  // big-endian, as ibv_get_device_guid
}

TEST(CmService, CommandValidationAsUcmaWrite) {
  Net net;
  App a(net.nodes[0]);
  rdma_ucm_create_id c{};
  c.ps = RDMA_PS_TCP;
  EXPECT_EQ(a.cmd(RDMA_USER_CM_CMD_CREATE_ID, c, 2).err, ENOSPC);  // response buffer too small
  EXPECT_EQ(a.cmd(23, c, 4).err, EINVAL);
  EXPECT_EQ(a.cmd(RDMA_USER_CM_CMD_GET_OPTION, c, 4).err, ENOSYS);
  rdma_ucm_bind b{};
  EXPECT_EQ(a.cmd(RDMA_USER_CM_CMD_BIND, b, 0).err, EAFNOSUPPORT);  // the AF_IB probe
  rdma_ucm_join_ip_mcast j{};
  EXPECT_EQ(a.cmd(RDMA_USER_CM_CMD_JOIN_IP_MCAST, j, 2).err, ENOSPC);
  EXPECT_EQ(a.cmd(RDMA_USER_CM_CMD_JOIN_IP_MCAST, j, 4).err, EINVAL);  // no address family
  rdma_ucm_destroy_id l{};
  l.id = 12345;
  EXPECT_EQ(a.cmd(RDMA_USER_CM_CMD_LEAVE_MCAST, l, 4).err, ENOENT);
  // Another channel cannot name this channel's id.
  const uint32_t id = a.create_id(9);
  App other(net.nodes[0]);
  EXPECT_EQ(other.destroy(id), EINVAL);
  EXPECT_EQ(a.destroy(id), 0);
}

TEST(CmService, MigrateMovesTheIdAndItsEvents) {
  Connected c;
  c.setup_listener();
  c.resolve();
  App other(c.net.nodes[0]);
  c.connect_and_accept();
  // The CONNECT_RESPONSE waits unread on the client's channel when the id moves (rdma_migrate_id writes
  // to the new channel and names the old one).
  EXPECT_EQ(c.client.queued(), 1);
  rdma_ucm_migrate_id m{};
  m.id = c.cid;
  const uint64_t from = c.client.ch;
  auto r =
      other.cmd(RDMA_USER_CM_CMD_MIGRATE_ID, m, 4, {reinterpret_cast<const uint8_t*>(&from), sizeof from});
  ASSERT_EQ(r.err, 0);
  uint32_t reported = 0;
  std::memcpy(&reported, r.out.data(), 4);
  EXPECT_EQ(reported, 2u);  // ADDR_RESOLVED, ROUTE_RESOLVED were read on the old channel
  EXPECT_EQ(c.client.queued(), 0);
  EXPECT_EQ(other.queued(), 1);
  other.expect_event(c.cid, UcmaEvent::connect_response);
  EXPECT_EQ(c.client.destroy(c.cid), EINVAL);  // no longer on the old channel
  // A channel of another user cannot take it, even knowing the token.
  App stranger(c.net.nodes[0], 1000);
  const uint64_t now_in = other.ch;
  r = stranger.cmd(RDMA_USER_CM_CMD_MIGRATE_ID, m, 4,
                   {reinterpret_cast<const uint8_t*>(&now_in), sizeof now_in});
  EXPECT_EQ(r.err, EPERM);
  EXPECT_EQ(other.destroy(c.cid), 0);
}

TEST(CmService, EventfdCountFollowsTheQueue) {
  Connected c;
  c.setup_listener();
  c.cid = c.client.create_id(0x2000);
  ASSERT_EQ(c.client.resolve_ip(c.cid, "10.0.0.2", 7174), 0);
  EXPECT_EQ(c.client.queued(), 1);
  uint32_t reported = 0;
  ASSERT_EQ(c.client.destroy(c.cid, &reported), 0);  // its unread event goes with it
  EXPECT_EQ(reported, 0u);
  EXPECT_EQ(c.client.queued(), 0);
}

TEST(CmService, MalformedMadsAreDroppedAndCounted) {
  Net net;
  uint8_t junk[256] = {};
  MadIn in;
  in.mad = junk;
  net.nodes[0].svc->on_mad(in);
  in.mad = std::span<const uint8_t>(junk, 10);
  net.nodes[0].svc->on_mad(in);
  EXPECT_EQ(net.nodes[0].svc->counters().rx_dropped, 2u);
}

}  // namespace
}  // namespace urxe::cm

namespace urxe::cm {
namespace {

TEST(CmService, UdaddyLikeSidrResolvesQpnQkeyAndAddress) {
  Net net;
  App server(net.nodes[1]), client(net.nodes[0]);
  const uint32_t lid = server.create_id(0x1000, RDMA_PS_UDP, 4);
  ASSERT_EQ(server.bind(lid, "0.0.0.0", 7174), 0);
  ASSERT_EQ(server.listen(lid), 0);
  const uint32_t cid = client.create_id(0x2000, RDMA_PS_UDP, 4);
  ASSERT_EQ(client.resolve_ip(cid, "10.0.0.2", 7174), 0);
  net.run();
  client.expect_event(cid, UcmaEvent::addr_resolved);
  ASSERT_EQ(client.resolve_route(cid), 0);
  client.expect_event(cid, UcmaEvent::route_resolved);
  auto init = client.qp_attr(cid, 1);
  EXPECT_EQ(init.qkey, 0x01234567u);
  EXPECT_TRUE(init.qp_attr_mask & (1u << 6));  // IBV_QP_QKEY
  ASSERT_EQ(client.connect(cid, 0x44, "ud?"), 0);
  net.run();
  rdma_ucm_event_resp e{};
  server.expect_event(0, UcmaEvent::connect_request, &e);
  EXPECT_EQ(e.uid, 0x1000u);
  EXPECT_EQ(e.param.ud.private_data_len, 216 - 36);
  EXPECT_EQ(std::memcmp(e.param.ud.private_data, "ud?", 3), 0);
  rdma_ucm_accept acc{};
  acc.id = e.id;
  acc.uid = 0x3000;
  acc.conn_param.qp_num = 0x55;
  acc.conn_param.valid = 1;
  ASSERT_EQ(server.cmd(RDMA_USER_CM_CMD_ACCEPT, acc, 0).err, 0);
  net.run();
  client.expect_event(cid, UcmaEvent::established, &e);
  EXPECT_EQ(e.param.ud.qp_num, 0x55u);
  EXPECT_EQ(e.param.ud.qkey, 0x01234567u);
  EXPECT_EQ(e.param.ud.ah_attr.is_global, 1);
  EXPECT_EQ(std::memcmp(e.param.ud.ah_attr.grh.dgid, net.nodes[1].dev.gids[1].data(), 16), 0);
  EXPECT_EQ(e.param.ud.ah_attr.grh.sgid_index, 1);
  EXPECT_EQ(net.sent_attrs, (std::vector<uint16_t>{0x17, 0x18}));
}

TEST(CmService, SidrToNoListenerIsUnreachable) {
  Net net;
  App client(net.nodes[0]);
  const uint32_t cid = client.create_id(0x2000, RDMA_PS_UDP, 4);
  ASSERT_EQ(client.resolve_ip(cid, "10.0.0.2", 7174), 0);
  net.run();
  client.expect_event(cid, UcmaEvent::addr_resolved);
  ASSERT_EQ(client.resolve_route(cid), 0);
  client.expect_event(cid, UcmaEvent::route_resolved);
  ASSERT_EQ(client.connect(cid, 0x44), 0);
  net.run();
  rdma_ucm_event_resp e{};
  client.expect_event(cid, UcmaEvent::unreachable, &e);
  EXPECT_EQ(e.status, 1u);  // IB_SIDR_UNSUPPORTED
}

TEST(CmService, UnreachableAddressIsAddrError) {
  Net net;
  App client(net.nodes[0]);
  const uint32_t cid = client.create_id(1);
  ASSERT_EQ(client.resolve_ip(cid, "10.9.9.9", 1), 0);
  net.run();
  rdma_ucm_event_resp e{};
  client.expect_event(cid, UcmaEvent::addr_error, &e);
  EXPECT_EQ(int32_t(e.status), -EHOSTUNREACH);
}

}  // namespace
}  // namespace urxe::cm

namespace urxe::cm {
namespace {

TEST(CmService, ReqFromALiveRemoteQpnIsStale) {
  Connected c;
  c.connect_all();
  // The client side restarts without telling the server and offers the same QPN again.
  c.net.nodes[0].svc->close_channel(c.client.ch);
  c.net.wire.clear();  // its DREQ is lost
  App again(c.net.nodes[0]);
  const uint32_t id = again.create_id(0x4000);
  ASSERT_EQ(again.resolve_ip(id, "10.0.0.2", 7174), 0);
  c.net.run();
  again.expect_event(id, UcmaEvent::addr_resolved);
  ASSERT_EQ(again.resolve_route(id), 0);
  again.expect_event(id, UcmaEvent::route_resolved);
  ASSERT_EQ(again.connect(id, 0x11), 0);
  c.net.run(1'000'000);
  rdma_ucm_event_resp e{};
  again.expect_event(id, UcmaEvent::rejected, &e);
  EXPECT_EQ(e.status, 10u);
  c.server.expect_event(c.sid, UcmaEvent::disconnected);  // the old connection goes
}

}  // namespace
}  // namespace urxe::cm

namespace urxe::cm {
namespace {

// As kernel 6.1 answers (measured with rxe): a loopback address binds without a device (libfabric's verbs
// provider binds "localhost" first and then falls back to the interfaces' addresses); resolving one picks
// the first device and the loopback source address, and the route to it fails with ENODEV.
TEST(CmService, LoopbackBindsNoDeviceAndItsRouteFailsWithEnodev) {
  Net net;
  App a(net.nodes[0]);
  const uint32_t b = a.create_id(1);
  ASSERT_EQ(a.bind(b, "127.0.0.1", 0), 0);
  EXPECT_EQ(a.listen(b), 0);
  rdma_ucm_query_route_resp resp = a.query_route(b);
  EXPECT_EQ(resp.node_guid, 0u);                         // no device: librdmacm leaves id->verbs NULL
  EXPECT_EQ(a.bind(a.create_id(2), "127.0.0.2", 0), 0);  // all of 127/8 is local

  const uint32_t c = a.create_id(3);
  ASSERT_EQ(a.resolve_ip(c, "127.0.0.2", 7174), 0);
  net.run();
  a.expect_event(c, UcmaEvent::addr_resolved);
  resp = a.query_route(c);
  uint64_t guid = 0;
  std::memcpy(&guid, &resp.node_guid, 8);
  EXPECT_EQ(be64toh(guid), net.nodes[0].dev.node_guid);
  sockaddr_in sa{};
  std::memcpy(&sa, &resp.src_addr, sizeof sa);
  EXPECT_EQ(ntohl(sa.sin_addr.s_addr), 0x7f000001u);
  EXPECT_EQ(a.resolve_route(c), ENODEV);
}

}  // namespace
}  // namespace urxe::cm
