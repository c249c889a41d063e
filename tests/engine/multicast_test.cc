// UD multicast: attach/detach rules and limits, the port's multicast filter, fan-out to every attached QP
// (each with its own state and Q_Key check), frames to a group without members, the engine's own members
// (loopback) and its own frames echoed back by the host.
#include "tests/sim/loopback.h"

namespace urxe::engine::test {
namespace {

const wire::Gid kGroup = wire::gid_from_ipv4({239, 1, 2, 3});
const wire::Gid kGroup2 = wire::gid_from_ipv4({224, 1, 2, 3});  // the same Ethernet address (low 23 bits)
const wire::Gid kGroup6 = {0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0x56, 0x78};

// Records the multicast addresses the engine asks for; payloads by reference (as the same-host path), made
// whole before the wire.
class McPort final : public Port {
 public:
  explicit McPort(Port& inner) : inner_(inner) {}
  const PortAttr& attr() const override { return inner_.attr(); }
  bool tx_icrc_offload() const override { return true; }
  bool tx_gather() const override { return true; }
  bool tx_alloc(uint32_t size, PacketBuf& buf) override { return inner_.tx_alloc(size, buf); }
  uint32_t tx_burst(PacketBuf* bufs, uint32_t n) override {
    for (uint32_t i = 0; i < n; i++) {
      if (bufs[i].gather) ++gathered;
      make_whole(bufs[i]);
      if (bufs[i].icrc_absent) wire::write_icrc(wire::MutByteSpan(bufs[i].data, bufs[i].len));
      bufs[i].icrc_absent = false;
    }
    return inner_.tx_burst(bufs, n);
  }
  void tx_free(PacketBuf& buf) override { inner_.tx_free(buf); }
  uint32_t rx_burst(PacketBuf* bufs, uint32_t n) override { return inner_.rx_burst(bufs, n); }
  void rx_free(PacketBuf* bufs, uint32_t n) override { inner_.rx_free(bufs, n); }
  bool set_multicast_mac(const wire::MacAddr& mac, bool member) override {
    calls.emplace_back(mac, member);
    return !refuse;
  }
  std::vector<std::pair<wire::MacAddr, bool>> calls;
  bool refuse = false;
  uint64_t gathered = 0;

 private:
  Port& inner_;
};

class Multicast : public ::testing::Test {
 protected:
  explicit Multicast(EngineConfig cfg = {}) : lb(cfg, 1500, 1 << 20, false, wrap_side(-1, ports)) {}
  McPort* ports[2] = {};
  Loopback lb;

  // A UD QP on `n` in `st` (INIT, RTR or RTS) with Q_Key `qkey`.
  uint32_t ud_qp(Node& n, QpState st = QPS_RTS, uint32_t qkey = 0x11111111) {
    const uint32_t qpn = lb.create_qp(n, QPT_UD);
    QpAttr at;
    at.qp_state = QPS_INIT;
    at.qkey = qkey;
    EXPECT_EQ(0, n.eng->modify_qp(qpn, at, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_QKEY));
    for (QpState s : {QPS_RTR, QPS_RTS}) {
      if (st < s) break;
      at.qp_state = s;
      EXPECT_EQ(0, n.eng->modify_qp(qpn, at, QP_STATE | (s == QPS_RTS ? QP_SQ_PSN : 0u)));
    }
    return qpn;
  }
  // Sends `len` bytes from A's QP `from` to the group (AH with the group's GID and MAC, DestQP 0xFFFFFF).
  void send_to_group(uint32_t from, const wire::Gid& group, uint32_t len = 64, uint32_t qkey = 0x11111111) {
    AddressVector av;
    av.dgid = group;
    av.dmac = multicast_mac(group);
    uint32_t ah = 0;
    ASSERT_EQ(0, lb.a().eng->create_ah(lb.a().pd, av, ah));
    Sge sge{lb.a().addr(0), len, lb.a().mr.lkey};
    SendWr w = make_wr(WR_SEND, &sge, 1, 7);
    w.ud.ah = ah;
    w.ud.remote_qpn = kMulticastQpn;
    w.ud.remote_qkey = qkey;
    post(lb.a(), from, w);
  }
  // The receive completions on `n` per QP, after everything settled.
  std::vector<Wc> recvs(Node& n) {
    lb.settle(100'000'000);
    std::vector<Wc> out;
    Wc wc[16];
    int k;
    while ((k = n.eng->poll_cq(n.cq, 16, wc)) > 0)
      for (int i = 0; i < k; i++)
        if (wc[i].opcode == WC_RECV) out.push_back(wc[i]);
    return out;
  }
};

TEST_F(Multicast, AttachRules) {
  Engine& e = *lb.a().eng;
  const uint32_t ud = ud_qp(lb.a()), rc = lb.create_qp(lb.a(), QPT_RC), uc = lb.create_qp(lb.a(), QPT_UC);
  EXPECT_EQ(EINVAL, e.attach_mcast(rc, kGroup));  // UD only
  EXPECT_EQ(EINVAL, e.attach_mcast(uc, kGroup));
  EXPECT_EQ(EINVAL, e.attach_mcast(0x999999, kGroup));                         // no such QP
  EXPECT_EQ(EINVAL, e.attach_mcast(ud, wire::gid_from_ipv4({10, 0, 0, 2})));   // unicast
  EXPECT_EQ(EINVAL, e.attach_mcast(ud, wire::gid_from_ipv4({240, 0, 0, 1})));  // class E
  EXPECT_EQ(EINVAL, e.attach_mcast(ud, wire::Gid{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}));
  EXPECT_EQ(0, e.attach_mcast(ud, kGroup));
  EXPECT_EQ(0, e.attach_mcast(ud, kGroup));  // again: nothing changes
  EXPECT_EQ(0, e.attach_mcast(ud, kGroup6));
  EXPECT_EQ(EINVAL, e.detach_mcast(ud, kGroup2));  // not a member
  EXPECT_EQ(EBUSY, e.destroy_qp(ud));              // attached: the kernel's uverbs refuses too
  EXPECT_EQ(0, e.detach_mcast(ud, kGroup));
  EXPECT_EQ(EINVAL, e.detach_mcast(ud, kGroup));  // once only
  EXPECT_EQ(EBUSY, e.destroy_qp(ud));
  EXPECT_EQ(0, e.detach_mcast(ud, kGroup6));
  EXPECT_EQ(0, e.destroy_qp(ud));
  EXPECT_EQ(EINVAL, e.detach_mcast(ud, kGroup6));  // the QP is gone
}

// One Ethernet address per group address mapping, asked of the port at its first group, dropped after its
// last; a port that refuses it fails the attach with nothing attached.
TEST_F(Multicast, PortFilterFollowsGroups) {
  Engine& e = *lb.b().eng;
  McPort& port = *ports[1];
  const uint32_t q1 = ud_qp(lb.b()), q2 = ud_qp(lb.b());
  const wire::MacAddr mac{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03};
  ASSERT_EQ(0, e.attach_mcast(q1, kGroup));
  ASSERT_EQ(0, e.attach_mcast(q2, kGroup));
  ASSERT_EQ(0, e.attach_mcast(q1, kGroup2));
  ASSERT_EQ(port.calls.size(), 1u);
  EXPECT_EQ(port.calls[0], std::make_pair(mac, true));
  ASSERT_EQ(0, e.attach_mcast(q1, kGroup6));
  ASSERT_EQ(port.calls.size(), 2u);
  EXPECT_EQ(port.calls[1], std::make_pair(wire::MacAddr{0x33, 0x33, 0x12, 0x34, 0x56, 0x78}, true));
  ASSERT_EQ(0, e.detach_mcast(q1, kGroup));
  ASSERT_EQ(0, e.detach_mcast(q2, kGroup));
  EXPECT_EQ(port.calls.size(), 2u);  // 224.1.2.3 still needs it
  ASSERT_EQ(0, e.detach_mcast(q1, kGroup2));
  ASSERT_EQ(port.calls.size(), 3u);
  EXPECT_EQ(port.calls[2], std::make_pair(mac, false));
  port.refuse = true;
  EXPECT_EQ(EIO, e.attach_mcast(q2, kGroup));
  EXPECT_EQ(EINVAL, e.detach_mcast(q2, kGroup));
  EXPECT_EQ(0, e.destroy_qp(q2));
}

class MulticastLimits : public Multicast {
 protected:
  static EngineConfig cfg() {
    EngineConfig c;
    c.device.max_mcast_grp = 2;
    c.device.max_mcast_qp_attach = 2;
    c.device.max_total_mcast_qp_attach = 3;
    return c;
  }
  MulticastLimits() : Multicast(cfg()) {}
};

TEST_F(MulticastLimits, EnomemBeyondEachLimit) {
  Engine& e = *lb.b().eng;
  const uint32_t q1 = ud_qp(lb.b()), q2 = ud_qp(lb.b()), q3 = ud_qp(lb.b());
  ASSERT_EQ(0, e.attach_mcast(q1, kGroup));
  ASSERT_EQ(0, e.attach_mcast(q2, kGroup));
  EXPECT_EQ(ENOMEM, e.attach_mcast(q3, kGroup));  // max_mcast_qp_attach
  ASSERT_EQ(0, e.attach_mcast(q1, kGroup2));
  EXPECT_EQ(ENOMEM, e.attach_mcast(q1, kGroup6));  // max_mcast_grp
  EXPECT_EQ(ENOMEM, e.attach_mcast(q2, kGroup2));  // max_total_mcast_qp_attach
  EXPECT_EQ(0, e.attach_mcast(q1, kGroup));        // already attached: no new attachment
  ASSERT_EQ(0, e.detach_mcast(q2, kGroup));
  EXPECT_EQ(0, e.attach_mcast(q2, kGroup2));
}

// Every attached QP in RTR or later gets its own copy, through its own Q_Key check; a QP before RTR or
// not attached gets none. The frame goes to DestQP 0xFFFFFF and the group's Ethernet address.
TEST_F(Multicast, FanOutChecksEachMembersStateAndQkey) {
  Node& b = lb.b();
  const uint32_t qa = ud_qp(lb.a());
  const uint32_t ok1 = ud_qp(b), ok2 = ud_qp(b, QPS_RTR), bad_qkey = ud_qp(b, QPS_RTS, 0x22222222),
                 init = ud_qp(b, QPS_INIT), outsider = ud_qp(b);
  for (uint32_t q : {ok1, ok2, bad_qkey, init, outsider}) post_recv(b, q, 0, 2048, q);
  for (uint32_t q : {ok1, ok2, bad_qkey, init}) ASSERT_EQ(0, b.eng->attach_mcast(q, kGroup));
  fill(lb.a().mem, 0, 64, 9);
  send_to_group(qa, kGroup);
  const auto wcs = recvs(b);
  ASSERT_EQ(wcs.size(), 2u);
  std::vector<uint32_t> got{wcs[0].qp_num, wcs[1].qp_num};
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<uint32_t>{std::min(ok1, ok2), std::max(ok1, ok2)}));
  for (const Wc& wc : wcs) {
    EXPECT_EQ(wc.status, WC_SUCCESS);
    EXPECT_EQ(wc.byte_len, 64u + 40);
    EXPECT_EQ(wc.src_qp, qa);
    EXPECT_TRUE(wc.wc_flags & WC_GRH);
  }
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), b.mem.data() + 40, 64));
  EXPECT_EQ(b.eng->counter(Counter::rx_drop_qkey), 1u);
  EXPECT_EQ(b.eng->counter(Counter::rx_drop_qpn), 1u);  // the member still in INIT
  ASSERT_EQ(lb.link.trace.size(), 1u);
  const wire::Packet& p = lb.link.trace[0].second;
  EXPECT_EQ(p.bth.dqpn, kMulticastQpn);
  EXPECT_EQ(p.dst_gid(), kGroup);
  EXPECT_EQ(p.eth.dst, (wire::MacAddr{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03}));
}

// IPv6 groups: the frame's IPv6 destination is the MGID, 33:33 + its low 32 bits.
TEST_F(Multicast, Ipv6GroupFromIpv6Source) {
  Loopback lb6(EngineConfig{}, 1500, 1 << 20, true);
  const auto [qa, qb] = lb6.connect(QPT_UD);
  post_recv(lb6.b(), qb, 0, 2048, 1);
  ASSERT_EQ(0, lb6.b().eng->attach_mcast(qb, kGroup6));
  AddressVector av;
  av.dgid = kGroup6;
  av.dmac = multicast_mac(kGroup6);
  uint32_t ah = 0;
  ASSERT_EQ(0, lb6.a().eng->create_ah(lb6.a().pd, av, ah));
  Sge sge{lb6.a().addr(0), 16, lb6.a().mr.lkey};
  SendWr w = make_wr(WR_SEND, &sge, 1, 1);
  w.ud.ah = ah;
  w.ud.remote_qpn = kMulticastQpn;
  w.ud.remote_qkey = 0x11111111;
  post(lb6.a(), qa, w);
  const auto wc = lb6.poll(lb6.b(), 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].qp_num, qb);
  EXPECT_EQ(lb6.link.trace.at(0).second.ip_version, 6);
  EXPECT_EQ(lb6.link.trace.at(0).second.eth.dst, (wire::MacAddr{0x33, 0x33, 0x12, 0x34, 0x56, 0x78}));
}

// No member (never attached, or after detach): dropped and counted; a unicast frame to a QP that is
// attached still arrives as before.
TEST_F(Multicast, GroupWithoutMembersDroppedAndCounted) {
  Node& b = lb.b();
  const uint32_t qa = ud_qp(lb.a()), qb = ud_qp(b);
  post_recv(b, qb, 0, 2048, 1);
  post_recv(b, qb, 0, 2048, 2);
  send_to_group(qa, kGroup);
  EXPECT_EQ(recvs(b).size(), 0u);
  EXPECT_EQ(b.eng->counter(Counter::rx_drop_mcast), 1u);
  ASSERT_EQ(0, b.eng->attach_mcast(qb, kGroup2));  // another group: still none for this one
  send_to_group(qa, kGroup);
  EXPECT_EQ(recvs(b).size(), 0u);
  EXPECT_EQ(b.eng->counter(Counter::rx_drop_mcast), 2u);
  ASSERT_EQ(0, b.eng->attach_mcast(qb, kGroup));
  send_to_group(qa, kGroup);
  EXPECT_EQ(recvs(b).size(), 1u);
  ASSERT_EQ(0, b.eng->detach_mcast(qb, kGroup));  // detach stops delivery
  send_to_group(qa, kGroup);
  EXPECT_EQ(recvs(b).size(), 0u);
  EXPECT_EQ(b.eng->counter(Counter::rx_drop_mcast), 3u);
  EXPECT_EQ(b.eng->counter(Counter::rx_drop_qpn), 0u);
}

// The sender's own engine delivers to its own members, the sending QP included, once each; the payload
// left by reference in the application's memory (a gathering port) is copied for them. The remote
// member gets it from the wire.
TEST_F(Multicast, OwnMembersGetTheirCopies) {
  Node& a = lb.a();
  const uint32_t sender = ud_qp(a), member = ud_qp(a), other_qkey = ud_qp(a, QPS_RTS, 0x5);
  const uint32_t remote = ud_qp(lb.b());
  for (uint32_t q : {sender, member, other_qkey}) {
    post_recv(a, q, 0x10000 + 0x1000 * (q & 0xf), 2048, q);
    ASSERT_EQ(0, a.eng->attach_mcast(q, kGroup));
  }
  post_recv(lb.b(), remote, 0, 2048, 1);
  ASSERT_EQ(0, lb.b().eng->attach_mcast(remote, kGroup));
  fill(a.mem, 0, 1000, 3);
  send_to_group(sender, kGroup, 1000);
  const auto own = recvs(a);
  ASSERT_EQ(own.size(), 2u);
  for (const Wc& wc : own) {
    EXPECT_TRUE(wc.qp_num == sender || wc.qp_num == member);
    EXPECT_EQ(wc.byte_len, 1040u);
    EXPECT_EQ(wc.src_qp, sender);
    EXPECT_EQ(0, std::memcmp(a.mem.data(), a.mem.data() + 0x10000 + 0x1000 * (wc.qp_num & 0xf) + 40, 1000));
  }
  EXPECT_NE(own[0].qp_num, own[1].qp_num);
  EXPECT_EQ(a.eng->counter(Counter::rx_drop_qkey), 1u);
  EXPECT_EQ(ports[0]->gathered, 1u);
  EXPECT_EQ(recvs(lb.b()).size(), 1u);
  EXPECT_EQ(lb.link.trace.size(), 1u);  // one frame on the wire
}

// A packet socket sees what its interface sends: our own frame coming back (source one of our GIDs, source
// QP one of ours) is not delivered a second time, and not counted as a drop.
TEST_F(Multicast, OwnFrameEchoedByTheHostIgnored) {
  Node& b = lb.b();
  const uint32_t qa = ud_qp(lb.a()), qb = ud_qp(b), qb2 = ud_qp(b);
  post_recv(b, qb, 0, 2048, 1);
  ASSERT_EQ(0, b.eng->attach_mcast(qb, kGroup));
  ASSERT_EQ(0, b.eng->set_gid(0, lb.a().gid));  // A's source address is now B's own too
  lb.link.hook = [&](int, const wire::Packet& p, std::vector<uint8_t>& bytes) {
    const size_t deth = p.bth_offset + wire::kBthLen + 4;  // the DETH's source QP
    bytes[deth + 1] = static_cast<uint8_t>(qb2 >> 16);
    bytes[deth + 2] = static_cast<uint8_t>(qb2 >> 8);
    bytes[deth + 3] = static_cast<uint8_t>(qb2);
    wire::write_icrc(wire::MutByteSpan(bytes.data(), bytes.size()));
    return Fate::pass;
  };
  send_to_group(qa, kGroup);
  EXPECT_EQ(recvs(b).size(), 0u);
  EXPECT_EQ(b.eng->counter(Counter::rx_drop_mcast), 0u);
  EXPECT_EQ(b.eng->counter(Counter::rx_drop_parse) + b.eng->counter(Counter::rx_drop_icrc), 0u);
  lb.link.hook = nullptr;  // A's own source QP: not one of B's
  send_to_group(qa, kGroup);
  EXPECT_EQ(recvs(b).size(), 1u);
}

}  // namespace
}  // namespace urxe::engine::test
