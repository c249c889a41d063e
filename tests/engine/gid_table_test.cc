// The engine's GID table follows address changes (Engine::set_gid, called by the provider when the
// interface's addresses change): new QPs and AHs use the new entry, existing ones keep the source address
// they resolved (as the kernel's cached GID attributes), an unused entry cannot be used.
#include "tests/sim/loopback.h"

namespace urxe::engine::test {
namespace {

std::array<uint8_t, 4> last_src_ip4(const Link& l, int side) {
  std::array<uint8_t, 4> ip{};
  for (auto& [s, p] : l.trace)
    if (s == side) ip = p.ip4.src;
  return ip;
}

TEST(GidTable, NewEntryUsedByNewQpsOldQpsKeepTheirAddress) {
  Loopback lb;
  Node &a = lb.a(), &b = lb.b();
  auto [qa, qb] = lb.connect(QPT_RC);
  const wire::Gid old_gid = a.gid, new_gid = wire::gid_from_ipv4({10, 0, 9, 9});
  EXPECT_EQ(a.eng->gid_table(), std::vector<wire::Gid>{old_gid});
  EXPECT_EQ(EINVAL, a.eng->set_gid(1, new_gid));  // beyond the table
  ASSERT_EQ(0, a.eng->set_gid(0, new_gid));
  EXPECT_EQ(a.eng->gid_table(), std::vector<wire::Gid>{new_gid});

  // The connected QP keeps its address.
  post_recv(b, qb, 0, 64, 1);
  Sge sge{a.addr(0), 64, a.mr.lkey};
  post(a, qa, make_wr(WR_SEND, &sge, 1));
  ASSERT_EQ(lb.poll(b, 1).size(), 1u);
  EXPECT_EQ(last_src_ip4(lb.link, 0), (std::array<uint8_t, 4>{10, 0, 0, 1}));

  // A QP connected now takes the new entry.
  const uint32_t qa2 = lb.create_qp(a, QPT_RC), qb2 = lb.create_qp(b, QPT_RC);
  ConnOpts o;
  lb.bring_up(a, qa2, QPT_RC, b, qb2, o.sq_psn, o.rq_psn, o);
  lb.bring_up(b, qb2, QPT_RC, a, qa2, o.rq_psn, o.sq_psn, o);
  post_recv(b, qb2, 0, 64, 2);
  post(a, qa2, make_wr(WR_SEND, &sge, 1));
  ASSERT_EQ(lb.poll(b, 1).size(), 1u);
  EXPECT_EQ(last_src_ip4(lb.link, 0), (std::array<uint8_t, 4>{10, 0, 9, 9}));
  (void)old_gid;
}

TEST(GidTable, UnusedEntryRefusedAndUdAhKeepsItsSource) {
  Loopback lb;
  Node &a = lb.a(), &b = lb.b();
  auto [qa, qb] = lb.connect(QPT_UD);
  AddressVector av;
  av.dgid = b.gid;
  av.dmac = b.mac;
  uint32_t ah = 0, ah2 = 0;
  ASSERT_EQ(0, a.eng->create_ah(a.pd, av, ah));
  ASSERT_EQ(0, a.eng->set_gid(0, wire::Gid{}));  // the address went away
  EXPECT_EQ(EINVAL, a.eng->create_ah(a.pd, av, ah2));
  const uint32_t q3 = lb.create_qp(a, QPT_RC);
  QpAttr at;
  at.qp_state = QPS_INIT;
  at.port_num = 1;
  ASSERT_EQ(0, a.eng->modify_qp(q3, at, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS));
  at.qp_state = QPS_RTR;
  at.path_mtu = MTU_1024;
  at.dest_qp_num = qb;
  at.ah_attr.dgid = b.gid;
  at.ah_attr.sgid_index = 0;
  EXPECT_EQ(EINVAL, a.eng->modify_qp(q3, at,
                                     QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN |
                                         QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER));
  // The AH made before still sends from the address it resolved.
  post_recv(b, qb, 0, 40 + 64, 1);
  Sge sge{a.addr(0), 64, a.mr.lkey};
  SendWr w = make_wr(WR_SEND, &sge, 1);
  w.ud.ah = ah;
  w.ud.remote_qpn = qb;
  w.ud.remote_qkey = ConnOpts{}.qkey;
  post(a, qa, w);
  auto wb = lb.poll(b, 1);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wb[0].status, WC_SUCCESS);
  EXPECT_EQ(last_src_ip4(lb.link, 0), (std::array<uint8_t, 4>{10, 0, 0, 1}));
  // Back again: usable.
  ASSERT_EQ(0, a.eng->set_gid(0, a.gid));
  EXPECT_EQ(0, a.eng->create_ah(a.pd, av, ah2));
}

}  // namespace
}  // namespace urxe::engine::test
