// On-demand paging: ON_DEMAND and implicit MRs, every access to them asked of EngineConfig::odp_fault_in
// first (for writing when it writes), and an access to memory that is not mapped ending as a NIC ends it: a
// remote access NAK for the peer, a local protection error for the poster, never a fault. ibv_advise_mr's
// rules. The fault-in hook here is a fake that knows one hole; MRs without ON_DEMAND never reach it.
#include "tests/sim/loopback.h"

namespace urxe::engine::test {
namespace {

struct FaultIns {
  uintptr_t hole = 0, hole_len = 0;  // "not mapped"
  uint64_t calls = 0, writes = 0;
  uintptr_t last = 0;
  uint64_t last_len = 0;
};
FaultIns g_odp;

bool fake_fault_in(uintptr_t addr, uint64_t len, bool write) {
  g_odp.calls++;
  g_odp.writes += write;
  g_odp.last = addr;
  g_odp.last_len = len;
  return addr + len <= g_odp.hole || addr >= g_odp.hole + g_odp.hole_len;
}

EngineConfig odp_config() {
  EngineConfig c;
  c.odp_fault_in = fake_fault_in;
  return c;
}

constexpr uint32_t kRemote =
    ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;

class Odp : public ::testing::Test {
 protected:
  Loopback lb{odp_config()};
  uint32_t qa = 0, qb = 0;
  MrInfo odp_a, odp_b;  // ON_DEMAND MRs over each side's buffer
  void SetUp() override {
    g_odp = {};
    std::tie(qa, qb) = lb.connect(QPT_RC);
    ASSERT_EQ(0, lb.a().eng->reg_mr(lb.a().pd, lb.a().mem.data(), lb.a().mem.size(), lb.a().addr(),
                                    kRemote | ACCESS_ON_DEMAND, odp_a));
    ASSERT_EQ(0, lb.b().eng->reg_mr(lb.b().pd, lb.b().mem.data(), lb.b().mem.size(), lb.b().addr(),
                                    kRemote | ACCESS_ON_DEMAND, odp_b));
  }
  // One WR from A on the ODP MRs; its completion.
  Wc run(SendWr wr) {
    post(lb.a(), qa, wr);
    auto wc = lb.poll(lb.a(), 1);
    EXPECT_EQ(wc.size(), 1u);
    return wc.empty() ? Wc{} : wc[0];
  }
};

TEST(OdpOff, OnDemandRegistrationIsRefusedWithoutTheHook) {
  Loopback lb;
  MrInfo mr;
  EXPECT_EQ(EOPNOTSUPP, lb.a().eng->reg_mr(lb.a().pd, lb.a().mem.data(), 4096, lb.a().addr(),
                                           ACCESS_LOCAL_WRITE | ACCESS_ON_DEMAND, mr));
  EXPECT_EQ(EOPNOTSUPP, lb.a().eng->reg_mr(lb.a().pd, nullptr, UINT64_MAX, 0, ACCESS_ON_DEMAND, mr));
}

TEST_F(Odp, WriteReadAndAtomicFaultPagesInAndPlaceData) {
  fill(lb.a().mem, 0, 5000, 7);
  Sge sge{lb.a().addr(0), 5000, odp_a.lkey};
  SendWr wr = make_wr(WR_RDMA_WRITE, &sge, 1);
  wr.rdma.remote_addr = lb.b().addr(0x8000);
  wr.rdma.rkey = odp_b.rkey;
  EXPECT_EQ(run(wr).status, WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data() + 0x8000, 5000));
  EXPECT_GT(g_odp.writes, 0u);  // the placement asked for writable pages

  Sge back{lb.a().addr(0x20000), 5000, odp_a.lkey};
  wr = make_wr(WR_RDMA_READ, &back, 1, 2);
  wr.rdma.remote_addr = lb.b().addr(0x8000);
  wr.rdma.rkey = odp_b.rkey;
  EXPECT_EQ(run(wr).status, WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data() + 0x20000, lb.b().mem.data() + 0x8000, 5000));

  uint64_t v = 40;
  std::memcpy(lb.b().mem.data() + 0x9000, &v, 8);
  Sge res{lb.a().addr(0x30000), 8, odp_a.lkey};
  wr = make_wr(WR_ATOMIC_FETCH_AND_ADD, &res, 1, 3);
  wr.atomic.remote_addr = lb.b().addr(0x9000);
  wr.atomic.rkey = odp_b.rkey;
  wr.atomic.compare_add = 2;
  EXPECT_EQ(run(wr).status, WC_SUCCESS);
  std::memcpy(&v, lb.b().mem.data() + 0x9000, 8);
  EXPECT_EQ(v, 42u);
}

TEST_F(Odp, RemoteWriteToAPageThatIsNotMappedIsARemoteAccessError) {
  g_odp.hole = lb.b().addr(0x10000);
  g_odp.hole_len = 0x1000;
  Sge sge{lb.a().addr(0), 64, odp_a.lkey};
  SendWr wr = make_wr(WR_RDMA_WRITE, &sge, 1);
  wr.rdma.remote_addr = lb.b().addr(0x10000 + 100);
  wr.rdma.rkey = odp_b.rkey;
  EXPECT_EQ(run(wr).status, WC_REM_ACCESS_ERR);
  // The responder's QP is in error (IBTA class C), as after any remote access violation.
  QpAttr at{};
  ASSERT_EQ(0, lb.b().eng->query_qp(qb, at));
  EXPECT_EQ(at.qp_state, QPS_ERR);
}

// A memory window over an ON_DEMAND MR: an access through it faults its pages in as one through the MR.
TEST_F(Odp, AccessThroughAWindowFaultsPagesInToo) {
  MrInfo mr;
  ASSERT_EQ(0, lb.b().eng->reg_mr(lb.b().pd, lb.b().mem.data(), lb.b().mem.size(), lb.b().addr(),
                                  ACCESS_LOCAL_WRITE | ACCESS_MW_BIND | ACCESS_ON_DEMAND, mr));
  uint32_t mw = 0;
  ASSERT_EQ(0, lb.b().eng->alloc_mw(lb.b().pd, MW_TYPE_1, mw));
  SendWr bind = make_wr(WR_BIND_MW, nullptr, 0, 9);
  bind.bind_mw = {mw, mw + 1, mr.lkey, lb.b().addr(0x8000), 0x10000, ACCESS_REMOTE_WRITE};
  post(lb.b(), qb, bind);
  ASSERT_EQ(lb.poll(lb.b(), 1).size(), 1u);
  g_odp = {};
  g_odp.hole = lb.b().addr(0x10000);
  g_odp.hole_len = 0x1000;
  fill(lb.a().mem, 0, 64, 4);
  Sge sge{lb.a().addr(0), 64, odp_a.lkey};
  SendWr wr = make_rdma_wr(WR_RDMA_WRITE, &sge, lb.b().addr(0x9000), mw + 1);
  EXPECT_EQ(run(wr).status, WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(lb.b().mem.data() + 0x9000, lb.a().mem.data(), 64));
  EXPECT_GE(g_odp.writes, 1u);  // the responder's write into the window (A's source is only read)
  EXPECT_EQ(g_odp.last, lb.b().addr(0x9000));
  wr.rdma.remote_addr = lb.b().addr(0x10000 + 100);  // in the window, not mapped
  EXPECT_EQ(run(wr).status, WC_REM_ACCESS_ERR);
}

TEST_F(Odp, RemoteReadOfAPageThatIsNotMappedIsARemoteAccessError) {
  g_odp.hole = lb.b().addr(0x10000);
  g_odp.hole_len = 0x1000;
  Sge sge{lb.a().addr(0), 4096, odp_a.lkey};
  SendWr wr = make_wr(WR_RDMA_READ, &sge, 1);
  wr.rdma.remote_addr = lb.b().addr(0x10000 - 2048);  // its second half is in the hole
  wr.rdma.rkey = odp_b.rkey;
  EXPECT_EQ(run(wr).status, WC_REM_ACCESS_ERR);
}

TEST_F(Odp, ALocalSgeThatIsNotMappedIsALocalProtectionError) {
  g_odp.hole = lb.a().addr(0x40000);
  g_odp.hole_len = 0x1000;
  post_recv(lb.b(), qb, 0, 4096, 9);
  Sge sge{lb.a().addr(0x40000), 256, odp_a.lkey};
  EXPECT_EQ(run(make_wr(WR_SEND, &sge, 1)).status, WC_LOC_PROT_ERR);
}

TEST_F(Odp, ImplicitMrSpansTheAddressSpace) {
  MrInfo imp;
  EXPECT_EQ(EINVAL,
            lb.b().eng->reg_mr(lb.b().pd, nullptr, UINT64_MAX, 0x1000, kRemote | ACCESS_ON_DEMAND, imp));
  ASSERT_EQ(0, lb.b().eng->reg_mr(lb.b().pd, nullptr, UINT64_MAX, 0, kRemote | ACCESS_ON_DEMAND, imp));
  fill(lb.a().mem, 0, 3000, 9);
  Sge sge{lb.a().addr(0), 3000, lb.a().mr.lkey};  // a pinned MR on A: never asked of the hook
  SendWr wr = make_wr(WR_RDMA_WRITE, &sge, 1);
  wr.rdma.remote_addr = lb.b().addr(0x50000);  // the process's own address
  wr.rdma.rkey = imp.rkey;
  const uint64_t calls = g_odp.calls;
  EXPECT_EQ(run(wr).status, WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data() + 0x50000, 3000));
  EXPECT_GT(g_odp.calls, calls);
  EXPECT_GE(g_odp.last, lb.b().addr(0x50000));
  // And what is not mapped in the process, through the same key.
  g_odp.hole = 0x1000;
  g_odp.hole_len = 0x1000;
  wr.rdma.remote_addr = 0x1000;
  EXPECT_EQ(run(wr).status, WC_REM_ACCESS_ERR);
}

TEST_F(Odp, PinnedMrsNeverAskTheHook) {
  fill(lb.a().mem, 0, 4096, 1);
  Sge sge{lb.a().addr(0), 4096, lb.a().mr.lkey};
  SendWr wr = make_wr(WR_RDMA_WRITE, &sge, 1);
  wr.rdma.remote_addr = lb.b().addr(0x1000);
  wr.rdma.rkey = lb.b().mr.rkey;
  EXPECT_EQ(run(wr).status, WC_SUCCESS);
  EXPECT_EQ(g_odp.calls, 0u);
}

TEST_F(Odp, AdviseMrFollowsItsRules) {
  Engine& e = *lb.a().eng;
  const uint32_t pd = lb.a().pd;
  Sge ok{lb.a().addr(0x2000), 8192, odp_a.lkey};
  EXPECT_EQ(EINVAL, e.advise_mr(pd, ADVISE_MR_PREFETCH, 2, &ok, 1));  // unknown flag
  EXPECT_EQ(EINVAL, e.advise_mr(pd, ADVISE_MR_PREFETCH, 0, &ok, 0));  // no SGE
  EXPECT_EQ(EOPNOTSUPP, e.advise_mr(pd, 3, 0, &ok, 1));
  Sge pinned{lb.a().addr(0), 64, lb.a().mr.lkey};
  EXPECT_EQ(EFAULT, e.advise_mr(pd, ADVISE_MR_PREFETCH, 0, &pinned, 1));  // not an ON_DEMAND MR
  Sge outside{lb.a().addr(lb.a().mem.size() - 8), 64, odp_a.lkey};
  EXPECT_EQ(EFAULT, e.advise_mr(pd, ADVISE_MR_PREFETCH_NO_FAULT, 0, &outside, 1));
  MrInfo ro;
  ASSERT_EQ(0, e.reg_mr(pd, lb.a().mem.data(), 4096, lb.a().addr(), ACCESS_ON_DEMAND, ro));
  Sge ro_sge{lb.a().addr(0), 4096, ro.lkey};
  EXPECT_EQ(EPERM, e.advise_mr(pd, ADVISE_MR_PREFETCH_WRITE, 0, &ro_sge, 1));
  EXPECT_EQ(0, e.advise_mr(pd, ADVISE_MR_PREFETCH, ADVISE_MR_FLAG_FLUSH, &ro_sge, 1));
  g_odp = {};
  EXPECT_EQ(0, e.advise_mr(pd, ADVISE_MR_PREFETCH_WRITE, ADVISE_MR_FLAG_FLUSH, &ok, 1));
  EXPECT_EQ(g_odp.writes, 1u);
  EXPECT_EQ(g_odp.last, ok.addr);
  EXPECT_EQ(g_odp.last_len, ok.length);
  g_odp.hole = lb.a().addr(0x3000);
  g_odp.hole_len = 0x1000;
  EXPECT_EQ(EFAULT, e.advise_mr(pd, ADVISE_MR_PREFETCH, 0, &ok, 1));
}

TEST_F(Odp, PagingIsFixedAtRegistration) {
  EXPECT_EQ(EINVAL, lb.a().eng->rereg_mr(odp_a.lkey, REREG_MR_CHANGE_ACCESS, 0, nullptr, 0, kRemote));
  EXPECT_EQ(EINVAL, lb.a().eng->rereg_mr(lb.a().mr.lkey, REREG_MR_CHANGE_ACCESS, 0, nullptr, 0,
                                         kRemote | ACCESS_ON_DEMAND));
}

}  // namespace
}  // namespace urxe::engine::test
