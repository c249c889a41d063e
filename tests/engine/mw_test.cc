// Memory windows (engine/mw.cc): binding type 1 and type 2 and each bind rule (WC_MW_BIND_ERR), remote
// READ/WRITE/atomics through a window within and outside its range and rights, the type-2 bound-QP rule,
// LOCAL_INV and SEND_WITH_INV of a type-2 window (and their refusal for a type-1 window and an MR), and
// dereg_mr, rereg_mr, dealloc_mw, dealloc_pd and destroy_qp with windows.
#include "tests/sim/loopback.h"

namespace urxe::engine::test {
namespace {

constexpr uint32_t kRemoteAll = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;

class Mw : public RcLoopbackTest {
 protected:
  // B's memory behind the windows: an MR that grants no remote right itself (a window's rights need not
  // be a subset of its MR's, as pyverbs' MW tests rely on).
  void SetUp() override {
    connect();
    ASSERT_EQ(0, reg_vec(lb.b(), lb.b().pd, buf, ACCESS_LOCAL_WRITE | ACCESS_MW_BIND, mr));
  }
  uint64_t at(uint64_t off) { return vaddr(buf) + off; }

  // Posts a BIND_MW on `qpn` of node `n` and returns its completion.
  Wc bind(Node& n, uint32_t qpn, uint32_t mw_rkey, uint32_t new_rkey, uint32_t lkey, uint64_t addr,
          uint64_t len, uint32_t access) {
    SendWr w = make_wr(WR_BIND_MW, nullptr, 0, 7);
    w.bind_mw = {mw_rkey, new_rkey, lkey, addr, len, access};
    post(n, qpn, w);
    auto wc = lb.poll(n, 1);
    EXPECT_EQ(wc.size(), 1u);
    return wc.empty() ? Wc{} : wc[0];
  }
  // Binds the window on B's qb (the QP A's qa talks to); returns its new rkey.
  uint32_t bind_ok(uint32_t mw_rkey, uint64_t off, uint64_t len, uint32_t access) {
    const uint32_t key = (mw_rkey & ~0xffu) | ((mw_rkey + 1) & 0xff);
    const Wc wc = bind(lb.b(), qb, mw_rkey, key, mr.lkey, at(off), len, access);
    EXPECT_EQ(wc.status, WC_SUCCESS) << wc_status_str(wc.status);
    EXPECT_EQ(wc.opcode, WC_BIND_MW);
    return key;
  }
  uint32_t alloc(MwType type, uint32_t pd = 0) {
    uint32_t rkey = 0;
    EXPECT_EQ(0, lb.b().eng->alloc_mw(pd ? pd : lb.b().pd, type, rkey));
    return rkey;
  }
  // A remote operation from A's qa into B through `rkey`; its completion status. A's bytes are at A's 0.
  WcStatus remote(WrOpcode op, uint32_t rkey, uint64_t va, uint32_t len, uint64_t add = 1) {
    Sge sge{lb.a().addr(0), len, lb.a().mr.lkey};
    SendWr w = op == WR_ATOMIC_FETCH_AND_ADD ? make_atomic_wr(op, &sge, va, rkey, add)
                                             : make_rdma_wr(op, &sge, va, rkey);
    post(lb.a(), qa, w);
    auto wc = lb.poll(lb.a(), 1);
    EXPECT_EQ(wc.size(), 1u);
    return wc.empty() ? WC_GENERAL_ERR : wc[0].status;
  }
  // A failed remote operation left both QPs in ERR: a fresh pair (type-2 windows stay bound to the old
  // qb, as a peer would find them).
  void reconnect() { connect(); }

  std::vector<uint8_t> buf = std::vector<uint8_t>(4096);
  MrInfo mr;
};

TEST_F(Mw, Type1WindowOpensItsRangeToWriteReadAndAtomics) {
  const uint32_t mw = alloc(MW_TYPE_1);
  const uint32_t key = bind_ok(mw, 1024, 2048, kRemoteAll);
  EXPECT_NE(key, mw);
  EXPECT_EQ(key >> 8, mw >> 8);  // the same window: only the key byte changes
  fill(lb.a().mem, 0, 2048, 3);
  EXPECT_EQ(WC_SUCCESS, remote(WR_RDMA_WRITE, key, at(1024), 2048));  // two packets at MTU 1024
  EXPECT_EQ(0, std::memcmp(buf.data() + 1024, lb.a().mem.data(), 2048));
  EXPECT_EQ(buf[1023], 0);  // nothing outside the window
  EXPECT_EQ(buf[3072], 0);
  fill(buf, 1024, 2048, 9);
  EXPECT_EQ(WC_SUCCESS, remote(WR_RDMA_READ, key, at(1024), 2048));  // two response packets
  EXPECT_EQ(0, std::memcmp(buf.data() + 1024, lb.a().mem.data(), 2048));
  uint64_t v = 40;
  std::memcpy(buf.data() + 2048, &v, 8);
  EXPECT_EQ(WC_SUCCESS, remote(WR_ATOMIC_FETCH_AND_ADD, key, at(2048), 8, 2));
  std::memcpy(&v, buf.data() + 2048, 8);
  EXPECT_EQ(v, 42u);
  // The WRITE went out with the window's rkey in its RETH, as any other.
  bool seen = false;
  for (auto& [side, p] : lb.link.trace)
    seen |= side == 0 && p.bth.opcode == wire::op::write_first && p.reth.rkey == key && p.reth.va == at(1024);
  EXPECT_TRUE(seen);
}

TEST_F(Mw, AccessOutsideTheWindowFails) {
  const uint32_t key = bind_ok(alloc(MW_TYPE_1), 1024, 1024, kRemoteAll);
  EXPECT_EQ(WC_REM_ACCESS_ERR, remote(WR_RDMA_WRITE, key, at(2048 - 8), 16));  // past its end
  EXPECT_EQ(buf, std::vector<uint8_t>(4096, 0));
  reconnect();
  EXPECT_EQ(WC_REM_ACCESS_ERR, remote(WR_RDMA_READ, key, at(1024 - 8), 16));  // before its start
  reconnect();
  EXPECT_EQ(WC_REM_ACCESS_ERR, remote(WR_ATOMIC_FETCH_AND_ADD, key, at(0), 8));  // in the MR, not the window
  reconnect();
  EXPECT_EQ(WC_SUCCESS, remote(WR_RDMA_WRITE, key, at(2048 - 16), 16));  // its last bytes
}

TEST_F(Mw, AccessBeyondTheWindowsRightsFails) {
  const uint32_t mw = alloc(MW_TYPE_1);
  const uint32_t key = bind_ok(mw, 0, 1024, ACCESS_REMOTE_READ);
  EXPECT_EQ(WC_SUCCESS, remote(WR_RDMA_READ, key, at(0), 64));
  EXPECT_EQ(WC_REM_ACCESS_ERR, remote(WR_RDMA_WRITE, key, at(0), 64));
  reconnect();
  const uint32_t key2 = bind_ok(key, 0, 1024, ACCESS_REMOTE_WRITE);  // type 1: re-binding replaces it
  EXPECT_EQ(WC_REM_ACCESS_ERR, remote(WR_ATOMIC_FETCH_AND_ADD, key2, at(0), 8));
  reconnect();
  EXPECT_EQ(WC_REM_ACCESS_ERR, remote(WR_RDMA_WRITE, key, at(0), 8));  // the old key is gone
  reconnect();
  EXPECT_EQ(WC_SUCCESS, remote(WR_RDMA_WRITE, key2, at(0), 8));
}

TEST_F(Mw, Type1ZeroLengthBindUnbinds) {
  const uint32_t mw = alloc(MW_TYPE_1);
  const uint32_t key = bind_ok(mw, 0, 1024, kRemoteAll);
  EXPECT_EQ(WC_SUCCESS, remote(WR_RDMA_WRITE, key, at(0), 8));
  const uint32_t key2 = (key & ~0xffu) | ((key + 1) & 0xff);
  EXPECT_EQ(WC_SUCCESS, bind(lb.b(), qb, key, key2, 0, 0, 0, 0).status);  // no MR: unbound
  EXPECT_EQ(WC_REM_ACCESS_ERR, remote(WR_RDMA_WRITE, key2, at(0), 8));
  EXPECT_EQ(0, lb.b().eng->dereg_mr(mr.lkey));  // nothing bound to it any more
}

TEST_F(Mw, Type2IsFreeUntilBoundAndOpensMemoryOnlyToItsQp) {
  const uint32_t mw = alloc(MW_TYPE_2);
  EXPECT_EQ(WC_REM_ACCESS_ERR, remote(WR_RDMA_WRITE, mw, at(0), 8));  // FREE: its key opens nothing
  reconnect();
  const uint32_t key = bind_ok(mw, 0, 4096, kRemoteAll);  // bound by qb
  EXPECT_EQ(WC_SUCCESS, remote(WR_RDMA_WRITE, key, at(0), 64));
  // Another connection of the same PD: not the window's QP.
  const auto [qa1, qb1] = std::pair{qa, qb};
  reconnect();
  EXPECT_EQ(WC_REM_ACCESS_ERR, remote(WR_RDMA_READ, key, at(0), 64));
  // The window's own QP still reaches it.
  qa = qa1;
  qb = qb1;
  EXPECT_EQ(WC_SUCCESS, remote(WR_RDMA_READ, key, at(0), 64));
}

TEST_F(Mw, ZeroBasedType2WindowIsAddressedFromZero) {
  const uint32_t key = bind_ok(alloc(MW_TYPE_2), 512, 256, ACCESS_REMOTE_WRITE | ACCESS_ZERO_BASED);
  fill(lb.a().mem, 0, 16, 5);
  EXPECT_EQ(WC_SUCCESS, remote(WR_RDMA_WRITE, key, 16, 16));
  EXPECT_EQ(0, std::memcmp(buf.data() + 512 + 16, lb.a().mem.data(), 16));
  EXPECT_EQ(WC_REM_ACCESS_ERR, remote(WR_RDMA_WRITE, key, 256 - 8, 16));
}

TEST_F(Mw, UcWriteThroughAType2Window) {
  const auto [ua, ub] = lb.connect(QPT_UC);
  const uint32_t mw = alloc(MW_TYPE_2);
  const Wc b = bind(lb.b(), ub, mw, mw + 1, mr.lkey, at(0), 64, ACCESS_REMOTE_WRITE);
  ASSERT_EQ(b.status, WC_SUCCESS);
  fill(lb.a().mem, 0, 64, 1);
  Sge sge{lb.a().addr(0), 64, lb.a().mr.lkey};
  post(lb.a(), ua, make_rdma_wr(WR_RDMA_WRITE, &sge, at(0), mw + 1));
  ASSERT_EQ(lb.poll(lb.a(), 1).size(), 1u);
  lb.settle();
  EXPECT_EQ(0, std::memcmp(buf.data(), lb.a().mem.data(), 64));
}

// Each rule of rxe_check_bind_mw: the bind completes with MW_BIND_ERR and the QP goes to ERR.
TEST_F(Mw, EachBindRuleFailsWithBindError) {
  uint32_t pd2 = 0;
  ASSERT_EQ(0, lb.b().eng->alloc_pd(pd2));
  std::vector<uint8_t> no_bind(256), no_write(256), zero(256), other_pd(256);
  MrInfo m_no_bind, m_no_write, m_zero, m_other;
  ASSERT_EQ(0, reg_vec(lb.b(), lb.b().pd, no_bind, ACCESS_LOCAL_WRITE, m_no_bind));
  ASSERT_EQ(0, reg_vec(lb.b(), lb.b().pd, no_write, ACCESS_MW_BIND | ACCESS_REMOTE_READ, m_no_write));
  ASSERT_EQ(0, lb.b().eng->reg_mr(lb.b().pd, zero.data(), zero.size(), 0,
                                  ACCESS_LOCAL_WRITE | ACCESS_MW_BIND | ACCESS_ZERO_BASED, m_zero));
  ASSERT_EQ(0, reg_vec(lb.b(), pd2, other_pd, ACCESS_LOCAL_WRITE | ACCESS_MW_BIND, m_other));
  const uint32_t t1 = alloc(MW_TYPE_1), t2 = alloc(MW_TYPE_2), t2_pd2 = alloc(MW_TYPE_2, pd2);
  const uint32_t bound = alloc(MW_TYPE_2);
  ASSERT_EQ(WC_SUCCESS, bind(lb.b(), qb, bound, bound + 1, mr.lkey, at(0), 64, ACCESS_REMOTE_READ).status);
  struct Case {
    const char* rule;
    uint32_t mw, lkey;
    uint64_t addr, len;
    uint32_t access;
  };
  const Case cases[] = {
      {"type 2 not FREE (o10-37.2.30)", bound + 1, mr.lkey, at(0), 64, ACCESS_REMOTE_READ},
      {"window of another PD than the QP (C10-72)", t2_pd2, m_other.lkey, vaddr(other_pd), 64, 0},
      {"type 2 of length 0 (o10-37.2.40)", t2, mr.lkey, at(0), 0, ACCESS_REMOTE_READ},
      {"type 1 zero-based (o10-36.2.2)", t1, mr.lkey, at(0), 64, ACCESS_REMOTE_READ | ACCESS_ZERO_BASED},
      {"MR without MW_BIND (C10-73)", t2, m_no_bind.lkey, vaddr(no_bind), 64, ACCESS_REMOTE_READ},
      {"remote write on an MR without local write (C10-74)", t2, m_no_write.lkey, vaddr(no_write), 64,
       ACCESS_REMOTE_WRITE},
      {"past the MR's end (C10-75)", t2, mr.lkey, at(4096 - 32), 64, ACCESS_REMOTE_READ},
      {"before the MR's start (C10-75)", t2, mr.lkey, at(0) - 8, 64, ACCESS_REMOTE_READ},
      {"zero-based MR", t2, m_zero.lkey, 0, 64, ACCESS_REMOTE_READ},
      {"MR of another PD than the window", t1, m_other.lkey, vaddr(other_pd), 64, ACCESS_REMOTE_READ},
      {"not the window's current key", t2 + 1, mr.lkey, at(0), 64, ACCESS_REMOTE_READ},
      {"an MR's key for the window", mr.lkey, mr.lkey, at(0), 64, ACCESS_REMOTE_READ},
      {"unknown access bit", t2, mr.lkey, at(0), 64, ACCESS_MW_BIND},
  };
  for (const Case& c : cases) {
    reconnect();
    const Wc wc = bind(lb.b(), qb, c.mw, c.mw + 1, c.lkey, c.addr, c.len, c.access);
    EXPECT_EQ(wc.status, WC_MW_BIND_ERR) << c.rule;
    expect_qp_state(lb.b(), qb, QPS_ERR);
  }
  // None of them bound anything: t2 is still FREE and binds now.
  reconnect();
  EXPECT_EQ(WC_SUCCESS, bind(lb.b(), qb, t2, t2 + 1, mr.lkey, at(0), 64, ACCESS_REMOTE_READ).status);
}

TEST_F(Mw, LocalInvalidateFreesAType2Window) {
  const uint32_t mw = alloc(MW_TYPE_2);
  const uint32_t key = bind_ok(mw, 0, 256, ACCESS_REMOTE_WRITE);
  EXPECT_EQ(EBUSY, lb.b().eng->dereg_mr(mr.lkey));
  SendWr li = make_wr(WR_LOCAL_INV, nullptr, 0, 3);
  li.invalidate_rkey = key;
  const size_t frames = lb.link.trace.size();
  post(lb.b(), qb, li);
  auto wc = lb.poll(lb.b(), 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WC_SUCCESS);
  EXPECT_EQ(wc[0].opcode, WC_LOCAL_INV);
  EXPECT_EQ(lb.link.trace.size(), frames);  // no packet
  EXPECT_EQ(WC_REM_ACCESS_ERR, remote(WR_RDMA_WRITE, key, at(0), 8));
  reconnect();
  const uint32_t key2 = bind_ok(key, 0, 256, ACCESS_REMOTE_WRITE);  // FREE again: binds
  EXPECT_EQ(WC_SUCCESS, remote(WR_RDMA_WRITE, key2, at(0), 8));
}

TEST_F(Mw, LocalInvalidateRefusesAType1WindowAndAnMr) {
  const uint32_t t1 = bind_ok(alloc(MW_TYPE_1), 0, 256, ACCESS_REMOTE_WRITE);
  for (uint32_t key : {t1, mr.rkey, lb.b().mr.rkey}) {
    SendWr li = make_wr(WR_LOCAL_INV, nullptr, 0, 3);
    li.invalidate_rkey = key;
    post(lb.b(), qb, li);
    auto wc = lb.poll(lb.b(), 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, WC_LOC_QP_OP_ERR);
    reconnect();
  }
  // Still usable: the type-1 window, and the MR as an lkey and an rkey.
  EXPECT_EQ(WC_SUCCESS, remote(WR_RDMA_WRITE, t1, at(0), 8));
  EXPECT_EQ(WC_SUCCESS, remote(WR_RDMA_WRITE, lb.b().mr.rkey, lb.b().addr(0), 8));
}

TEST_F(Mw, SendWithInvalidateFreesTheReceiversType2Window) {
  const uint32_t key = bind_ok(alloc(MW_TYPE_2), 0, 256, ACCESS_REMOTE_WRITE);
  post_recv(lb.b(), qb, 0, 64, 5);
  Sge sge{lb.a().addr(0), 8, lb.a().mr.lkey};
  SendWr s = make_wr(WR_SEND_WITH_INV, &sge, 1, 1);
  s.invalidate_rkey = key;
  post(lb.a(), qa, s);
  auto wb = lb.poll(lb.b(), 1);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wb[0].status, WC_SUCCESS);
  EXPECT_TRUE(wb[0].wc_flags & WC_WITH_INV);
  EXPECT_EQ(wb[0].imm_data, key);  // invalidated_rkey
  ASSERT_EQ(lb.poll(lb.a(), 1).size(), 1u);
  EXPECT_EQ(WC_REM_ACCESS_ERR, remote(WR_RDMA_WRITE, key, at(0), 8));
  EXPECT_EQ(0, lb.b().eng->dereg_mr(mr.lkey));  // unbound: the MR is free to go
}

// A SEND_WITH_INV naming what cannot be invalidated: the receive completes REM_INV_REQ_ERR, the responder
// NAKs invalid request (the requester's WR fails the same way) and goes to ERR.
TEST_F(Mw, SendWithInvalidateRefusesAType1WindowAndAnMr) {
  const uint32_t t1 = bind_ok(alloc(MW_TYPE_1), 0, 256, ACCESS_REMOTE_WRITE);
  for (uint32_t key : {t1, lb.b().mr.rkey}) {
    post_recv(lb.b(), qb, 0, 64, 5);
    Sge sge{lb.a().addr(0), 8, lb.a().mr.lkey};
    SendWr s = make_wr(WR_SEND_WITH_INV, &sge, 1, 1);
    s.invalidate_rkey = key;
    post(lb.a(), qa, s);
    auto wb = lb.poll(lb.b(), 1);
    ASSERT_EQ(wb.size(), 1u);
    EXPECT_EQ(wb[0].status, WC_REM_INV_REQ_ERR);
    auto wa = lb.poll(lb.a(), 1);
    ASSERT_EQ(wa.size(), 1u);
    EXPECT_EQ(wa[0].status, WC_REM_INV_REQ_ERR);
    expect_qp_state(lb.b(), qb, QPS_ERR);
    reconnect();
  }
  EXPECT_EQ(WC_SUCCESS, remote(WR_RDMA_WRITE, t1, at(0), 8));
  EXPECT_EQ(WC_SUCCESS, remote(WR_RDMA_WRITE, lb.b().mr.rkey, lb.b().addr(0), 8));
}

TEST_F(Mw, BoundWindowsHoldTheirMrAndDeallocUnbinds) {
  const uint32_t mw1 = alloc(MW_TYPE_1), mw2 = alloc(MW_TYPE_2);
  const uint32_t k1 = bind_ok(mw1, 0, 64, ACCESS_REMOTE_WRITE);
  const uint32_t k2 = bind_ok(mw2, 64, 64, ACCESS_REMOTE_WRITE);
  // IBA 10.6.7.2.6: no deregistration (nor a new translation) under bound windows.
  EXPECT_EQ(EBUSY, lb.b().eng->dereg_mr(mr.lkey));
  EXPECT_EQ(EBUSY, lb.b().eng->rereg_mr(mr.lkey, REREG_MR_CHANGE_ACCESS, 0, nullptr, 0, ACCESS_LOCAL_WRITE));
  EXPECT_EQ(0, lb.b().eng->dealloc_mw(mw1 >> 8));
  EXPECT_EQ(EINVAL, lb.b().eng->dealloc_mw(mw1 >> 8));  // gone
  EXPECT_EQ(EINVAL, lb.b().eng->dereg_mr(k2));          // a window's key is no MR
  EXPECT_EQ(EBUSY, lb.b().eng->dereg_mr(mr.lkey));      // mw2 still bound
  EXPECT_EQ(WC_REM_ACCESS_ERR, remote(WR_RDMA_WRITE, k1, at(0), 8));
  reconnect();
  EXPECT_EQ(0, lb.b().eng->dealloc_mw(k2 >> 8));  // by its index: its key changed since alloc
  EXPECT_EQ(0, lb.b().eng->dereg_mr(mr.lkey));
}

TEST_F(Mw, DestroyingItsQpFreesAType2Window) {
  const uint32_t key = bind_ok(alloc(MW_TYPE_2), 0, 256, ACCESS_REMOTE_WRITE);
  EXPECT_EQ(EBUSY, lb.b().eng->dereg_mr(mr.lkey));
  ASSERT_EQ(0, lb.b().eng->destroy_qp(qb));
  reconnect();
  EXPECT_EQ(WC_REM_ACCESS_ERR, remote(WR_RDMA_WRITE, key, at(0), 8));  // opens nothing, to no QP
  reconnect();
  const uint32_t key2 = bind_ok(key, 0, 256, ACCESS_REMOTE_WRITE);  // FREE: binds on the new QP
  EXPECT_EQ(WC_SUCCESS, remote(WR_RDMA_WRITE, key2, at(0), 8));
  ASSERT_EQ(0, lb.b().eng->destroy_qp(qb));
  EXPECT_EQ(0, lb.b().eng->dereg_mr(mr.lkey));  // nothing holds the MR any more
}

TEST_F(Mw, AllocChecksTypeAndPdAndDeallocPdWaitsForWindows) {
  uint32_t rkey = 0, pd2 = 0;
  EXPECT_EQ(EINVAL, lb.b().eng->alloc_mw(lb.b().pd, static_cast<MwType>(3), rkey));
  EXPECT_EQ(EINVAL, lb.b().eng->alloc_mw(12345, MW_TYPE_1, rkey));
  ASSERT_EQ(0, lb.b().eng->alloc_pd(pd2));
  ASSERT_EQ(0, lb.b().eng->alloc_mw(pd2, MW_TYPE_2, rkey));
  EXPECT_NE(rkey >> 8, mr.lkey >> 8);  // one key space with the MRs
  EXPECT_EQ(EBUSY, lb.b().eng->dealloc_pd(pd2));
  EXPECT_EQ(0, lb.b().eng->dealloc_mw(rkey >> 8));
  EXPECT_EQ(0, lb.b().eng->dealloc_pd(pd2));
}

TEST_F(Mw, WindowKeyIsNeverAnLkey) {
  const uint32_t key = bind_ok(alloc(MW_TYPE_1), 0, 256, ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ);
  Sge sge{at(0), 8, key};
  post(lb.b(), qb, make_wr(WR_SEND, &sge, 1, 9));
  auto wc = lb.poll(lb.b(), 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WC_LOC_PROT_ERR);
}

TEST_F(Mw, PostSendChecksBindAndInvalidateOpcodes) {
  const auto [ua, ub] = lb.connect(QPT_UD);
  (void)ub;
  SendWr w = make_wr(WR_BIND_MW, nullptr, 0);
  const SendWr* bad = nullptr;
  EXPECT_EQ(EINVAL, lb.a().eng->post_send(ua, &w, &bad));  // no windows on UD
  w.opcode = WR_LOCAL_INV;
  EXPECT_EQ(EINVAL, lb.a().eng->post_send(ua, &w, &bad));
  Sge sge{lb.a().addr(0), 8, lb.a().mr.lkey};
  SendWr with_data = make_wr(WR_BIND_MW, &sge, 1);
  EXPECT_EQ(EINVAL, lb.a().eng->post_send(qa, &with_data, &bad));  // a bind carries no data
}

}  // namespace
}  // namespace urxe::engine::test
