// RC work requests end to end between two engines: every opcode, sizes, immediates, inline, SGE lists,
// PSN wraparound, fence, zero-length and large messages.
#include <sys/mman.h>
#include <unistd.h>

#include <numeric>

#include "tests/sim/loopback.h"

namespace urxe::engine::test {
namespace {

class RcOps : public ::testing::Test {
 protected:
  Loopback lb;
  uint32_t qa = 0, qb = 0;
  void SetUp() override { std::tie(qa, qb) = lb.connect(QPT_RC); }
};

TEST_F(RcOps, SendSizesAcrossMtuBoundaries) {
  for (uint32_t len : {1u, 63u, 1023u, 1024u, 1025u, 4096u, 10000u}) {
    fill(lb.a().mem, 0, len, static_cast<uint8_t>(len));
    post_recv(lb.b(), qb, 0x10000, 16384, len);
    Sge sge{lb.a().addr(0), len, lb.a().mr.lkey};
    post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, len));
    auto wa = lb.poll(lb.a(), 1);
    auto wb = lb.poll(lb.b(), 1);
    ASSERT_EQ(wa.size(), 1u);
    ASSERT_EQ(wb.size(), 1u);
    EXPECT_EQ(wa[0].status, WC_SUCCESS) << wc_status_str(wa[0].status);
    EXPECT_EQ(wa[0].opcode, WC_SEND);
    EXPECT_EQ(wa[0].wr_id, len);
    EXPECT_EQ(wb[0].status, WC_SUCCESS);
    EXPECT_EQ(wb[0].opcode, WC_RECV);
    EXPECT_EQ(wb[0].byte_len, len);
    EXPECT_EQ(wb[0].wr_id, len);
    EXPECT_EQ(wb[0].qp_num, qb);
    EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data() + 0x10000, len));
  }
  // one ACK per message, with rxe's syndrome
  int acks = 0;
  for (auto& [s, p] : lb.link.trace)
    if (s == 1 && p.bth.opcode == wire::op::acknowledge) {
      acks++;
      EXPECT_EQ(p.aeth.syndrome, 0x1f);
    }
  EXPECT_EQ(acks, 7);
}

TEST_F(RcOps, SegmentationOpcodesAndAckReq) {
  post_recv(lb.b(), qb, 0, 8192, 1);
  Sge sge{lb.a().addr(0), 3000, lb.a().mr.lkey};
  post(lb.a(), qa, make_wr(WR_SEND, &sge, 1));
  ASSERT_EQ(lb.poll(lb.a(), 1).size(), 1u);
  std::vector<uint8_t> ops;
  for (auto& [s, p] : lb.link.trace)
    if (s == 0) {
      ops.push_back(p.bth.opcode);
      EXPECT_EQ(p.bth.ack_req, p.bth.opcode == wire::op::send_last);
      EXPECT_EQ(p.udp.sport, 0xc000 | ((qa * qb) & 0x3fff));  // rxe: flow label of the QPN pair
      EXPECT_EQ(p.ip4.ttl, 64);
      EXPECT_TRUE(p.ip4.frag & wire::kIpv4FlagDf);
    }
  EXPECT_EQ(ops, (std::vector<uint8_t>{wire::op::send_first, wire::op::send_middle, wire::op::send_last}));
}

TEST_F(RcOps, SendWithImmAndSolicited) {
  post_recv(lb.b(), qb, 0, 64, 7);
  ASSERT_EQ(0, lb.b().eng->req_notify_cq(lb.b().cq, true));
  Sge sge{lb.a().addr(0), 16, lb.a().mr.lkey};
  SendWr wr = make_wr(WR_SEND_WITH_IMM, &sge, 1, 1, SEND_SIGNALED | SEND_SOLICITED);
  const uint8_t imm_bytes[4] = {0xde, 0xad, 0xbe, 0xef};
  std::memcpy(&wr.imm_data, imm_bytes, 4);
  post(lb.a(), qa, wr);
  auto wb = lb.poll(lb.b(), 1);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_TRUE(wb[0].wc_flags & WC_WITH_IMM);
  EXPECT_EQ(0, std::memcmp(&wb[0].imm_data, imm_bytes, 4));  // network order, like ibv_wc
  EXPECT_EQ(lb.b().events.comp, std::vector<uint32_t>{lb.b().cq});
  for (auto& [s, p] : lb.link.trace)
    if (s == 0) {
      EXPECT_EQ(p.imm, 0xdeadbeefu);
      EXPECT_TRUE(p.bth.se);
    }
}

TEST_F(RcOps, InlineAndMultipleSges) {
  std::vector<uint8_t> local = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  post_recv(lb.b(), qb, 0, 64, 1);
  Sge in{reinterpret_cast<uintptr_t>(local.data()), 10, 0};
  post(lb.a(), qa, make_wr(WR_SEND, &in, 1, 1, SEND_SIGNALED | SEND_INLINE));
  local.assign(10, 0);  // inline data was copied at post time
  ASSERT_EQ(lb.poll(lb.b(), 1).size(), 1u);
  EXPECT_EQ(lb.b().mem[0], 1);
  EXPECT_EQ(lb.b().mem[9], 10);

  fill(lb.a().mem, 0, 3000, 9);
  Sge sges[3] = {{lb.a().addr(0), 1000, lb.a().mr.lkey},
                 {lb.a().addr(1000), 0, lb.a().mr.lkey},
                 {lb.a().addr(1000), 2000, lb.a().mr.lkey}};
  Sge rs[2] = {{lb.b().addr(0x1000), 1500, lb.b().mr.lkey}, {lb.b().addr(0x4000), 1500, lb.b().mr.lkey}};
  RecvWr rw;
  rw.wr_id = 2;
  rw.sg_list = rs;
  rw.num_sge = 2;
  const RecvWr* bad;
  ASSERT_EQ(0, lb.b().eng->post_recv(qb, &rw, &bad));
  post(lb.a(), qa, make_wr(WR_SEND, sges, 3, 2));
  auto wb = lb.poll(lb.b(), 1);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wb[0].byte_len, 3000u);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data() + 0x1000, 1500));
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data() + 1500, lb.b().mem.data() + 0x4000, 1500));
}

TEST_F(RcOps, RdmaWriteAndWriteWithImm) {
  fill(lb.a().mem, 0, 5000, 3);
  Sge sge{lb.a().addr(0), 5000, lb.a().mr.lkey};
  SendWr wr = make_wr(WR_RDMA_WRITE, &sge, 1);
  wr.rdma.remote_addr = lb.b().addr(0x2000);
  wr.rdma.rkey = lb.b().mr.rkey;
  post(lb.a(), qa, wr);
  auto wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS);
  EXPECT_EQ(wa[0].opcode, WC_RDMA_WRITE);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data() + 0x2000, 5000));
  Wc none[1];
  EXPECT_EQ(0, lb.b().eng->poll_cq(lb.b().cq, 1, none));  // a plain WRITE consumes no receive

  post_recv(lb.b(), qb, 0, 0, 9);
  wr.opcode = WR_RDMA_WRITE_WITH_IMM;
  wr.imm_data = 0x01020304;
  post(lb.a(), qa, wr);
  auto wb = lb.poll(lb.b(), 1);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wb[0].opcode, WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(wb[0].byte_len, 5000u);
  EXPECT_EQ(wb[0].imm_data, 0x01020304u);
}

TEST_F(RcOps, RdmaReadMultiPacket) {
  fill(lb.b().mem, 0x3000, 7000, 5);
  Sge sge{lb.a().addr(0x100), 7000, lb.a().mr.lkey};
  SendWr wr = make_wr(WR_RDMA_READ, &sge, 1);
  wr.rdma.remote_addr = lb.b().addr(0x3000);
  wr.rdma.rkey = lb.b().mr.rkey;
  post(lb.a(), qa, wr);
  auto wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS);
  EXPECT_EQ(wa[0].opcode, WC_RDMA_READ);
  EXPECT_EQ(wa[0].byte_len, 7000u);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data() + 0x100, lb.b().mem.data() + 0x3000, 7000));
  EXPECT_EQ(count_ops(lb.link, 0, wire::op::read_request), 1);
  EXPECT_EQ(count_ops(lb.link, 1, wire::op::read_response_first), 1);
  EXPECT_EQ(count_ops(lb.link, 1, wire::op::read_response_middle), 5);
  EXPECT_EQ(count_ops(lb.link, 1, wire::op::read_response_last), 1);
}

TEST_F(RcOps, AtomicsCompareSwapAndFetchAdd) {
  uint64_t v = 100;
  std::memcpy(lb.b().mem.data() + 64, &v, 8);
  Sge sge{lb.a().addr(0), 8, lb.a().mr.lkey};
  SendWr wr = make_wr(WR_ATOMIC_FETCH_AND_ADD, &sge, 1, 1);
  wr.atomic.remote_addr = lb.b().addr(64);
  wr.atomic.rkey = lb.b().mr.rkey;
  wr.atomic.compare_add = 5;
  post(lb.a(), qa, wr);
  auto wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS);
  EXPECT_EQ(wa[0].opcode, WC_FETCH_ADD);
  uint64_t got, now;
  std::memcpy(&got, lb.a().mem.data(), 8);
  std::memcpy(&now, lb.b().mem.data() + 64, 8);
  EXPECT_EQ(got, 100u);
  EXPECT_EQ(now, 105u);

  wr = make_wr(WR_ATOMIC_CMP_AND_SWP, &sge, 1, 2);
  wr.atomic.remote_addr = lb.b().addr(64);
  wr.atomic.rkey = lb.b().mr.rkey;
  wr.atomic.compare_add = 105;
  wr.atomic.swap = 7;
  post(lb.a(), qa, wr);
  wr.wr_id = 3;  // compare fails now: memory stays 7, original returned
  wr.atomic.swap = 9;
  post(lb.a(), qa, wr);
  wa = lb.poll(lb.a(), 2);
  ASSERT_EQ(wa.size(), 2u);
  EXPECT_EQ(wa[1].opcode, WC_COMP_SWAP);
  std::memcpy(&got, lb.a().mem.data(), 8);
  std::memcpy(&now, lb.b().mem.data() + 64, 8);
  EXPECT_EQ(got, 7u);
  EXPECT_EQ(now, 7u);
}

TEST_F(RcOps, ZeroLengthMessages) {
  post_recv(lb.b(), qb, 0, 16, 1);
  post(lb.a(), qa, make_wr(WR_SEND, nullptr, 0, 1));
  SendWr w = make_wr(WR_RDMA_WRITE, nullptr, 0, 2);
  w.rdma.rkey = 0xdead;  // a zero-length RDMA is not checked against any MR
  post(lb.a(), qa, w);
  w = make_wr(WR_RDMA_READ, nullptr, 0, 3);
  w.rdma.rkey = 0xdead;
  post(lb.a(), qa, w);
  auto wa = lb.poll(lb.a(), 3);
  ASSERT_EQ(wa.size(), 3u);
  for (auto& c : wa) EXPECT_EQ(c.status, WC_SUCCESS) << c.wr_id << " " << wc_status_str(c.status);
  auto wb = lb.poll(lb.b(), 1);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wb[0].byte_len, 0u);
}

TEST_F(RcOps, UnsignaledCompletesSilentlyButInOrder) {
  Sge sge{lb.a().addr(0), 8, lb.a().mr.lkey};
  SendWr w1 = make_wr(WR_RDMA_WRITE, &sge, 1, 1, 0);
  w1.rdma.remote_addr = lb.b().addr(0);
  w1.rdma.rkey = lb.b().mr.rkey;
  SendWr w2 = w1;
  w2.wr_id = 2;
  w2.send_flags = SEND_SIGNALED;
  w1.next = &w2;
  post(lb.a(), qa, w1);
  auto wa = lb.poll(lb.a(), 2, 100'000'000);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].wr_id, 2u);
}

// A round visits only the groups of QP words its top-level word names: QPs at both ends of the QP table
// (the last word of the last group, the first of the first) are posted to, answered and completed.
TEST(RcQpTable, QpsAtBothEndsOfTheTableMakeProgress) {
  EngineConfig cfg;
  cfg.qpn_start = cfg.device.max_qp - 1;
  Loopback lb(cfg);
  const auto [qa_last, qb_last] = lb.connect(QPT_RC);
  const auto [qa_first, qb_first] = lb.connect(QPT_RC);
  EXPECT_EQ(qa_last - cfg.qpn_base, cfg.device.max_qp - 1);
  EXPECT_EQ(qa_first, cfg.qpn_base);
  for (const auto& [qa, qb] : {std::pair{qa_last, qb_last}, std::pair{qa_first, qb_first}}) {
    for (int i = 0; i < 3; i++) {
      post_recv(lb.b(), qb, 0x1000, 64, 7);
      Sge sge{lb.a().addr(0), 64, lb.a().mr.lkey};
      post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, 8));
      const auto wa = lb.poll(lb.a(), 1);
      const auto wb = lb.poll(lb.b(), 1);
      ASSERT_EQ(wa.size(), 1u) << "QP " << qa;
      ASSERT_EQ(wb.size(), 1u) << "QP " << qb;
      EXPECT_EQ(wa[0].status, WC_SUCCESS);
      EXPECT_EQ(wb[0].status, WC_SUCCESS);
      EXPECT_EQ(wb[0].qp_num, qb);
    }
  }
}

TEST(RcPsn, WraparoundAcrossMessages) {
  Loopback lb;
  Loopback::ConnOpts o;
  o.sq_psn = 0xfffffd;
  o.rq_psn = 0xfffffe;
  auto [qa, qb] = lb.connect(QPT_RC, o);
  for (int i = 0; i < 3; i++) {
    Sge rs{lb.b().addr(0x8000), 4096, lb.b().mr.lkey};
    RecvWr rw;
    rw.sg_list = &rs;
    rw.num_sge = 1;
    const RecvWr* bad;
    ASSERT_EQ(0, lb.b().eng->post_recv(qb, &rw, &bad));
  }
  fill(lb.a().mem, 0, 3000, 1);
  Sge sge{lb.a().addr(0), 3000, lb.a().mr.lkey};
  for (int i = 0; i < 3; i++) {
    SendWr wr = make_wr(WR_SEND, &sge, 1, static_cast<uint64_t>(i));
    const SendWr* bad;
    ASSERT_EQ(0, lb.a().eng->post_send(qa, &wr, &bad));
  }
  // and a READ whose responses wrap too
  fill(lb.a().mem, 0x20000, 5000, 2);
  Sge rd{lb.b().addr(0x10000), 5000, lb.b().mr.lkey};
  SendWr r = make_wr(WR_RDMA_READ, &rd, 1, 9);
  r.rdma.remote_addr = lb.a().addr(0x20000);
  r.rdma.rkey = lb.a().mr.rkey;
  const SendWr* bad;
  ASSERT_EQ(0, lb.b().eng->post_send(qb, &r, &bad));
  auto wa = lb.poll(lb.a(), 3);
  ASSERT_EQ(wa.size(), 3u);
  for (auto& c : wa) EXPECT_EQ(c.status, WC_SUCCESS);
  auto wb = lb.poll(lb.b(), 4);
  ASSERT_EQ(wb.size(), 4u);
  for (auto& c : wb) EXPECT_EQ(c.status, WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data() + 0x20000, lb.b().mem.data() + 0x10000, 5000));
  std::vector<uint32_t> psns;
  for (auto& [s, p] : lb.link.trace)
    if (s == 0 && p.info && p.info->is_request) psns.push_back(p.bth.psn);
  ASSERT_EQ(psns.size(), 9u);
  EXPECT_EQ(psns[0], 0xfffffdu);
  EXPECT_EQ(psns[3], 0u);
  EXPECT_EQ(psns[8], 5u);
  QpAttr at;
  ASSERT_EQ(0, lb.a().eng->query_qp(qa, at));
  EXPECT_EQ(at.sq_psn, 6u);
}

TEST(RcFence, FencedWriteWaitsForOutstandingRead) {
  Loopback lb;
  auto [qa, qb] = lb.connect(QPT_RC);
  fill(lb.b().mem, 0, 4000, 4);
  Sge rd{lb.a().addr(0), 4000, lb.a().mr.lkey};
  SendWr r = make_wr(WR_RDMA_READ, &rd, 1, 1);
  r.rdma.remote_addr = lb.b().addr(0);
  r.rdma.rkey = lb.b().mr.rkey;
  // the fenced WRITE sends what the READ brings: without the fence it would send stale bytes
  Sge wr_sge{lb.a().addr(0), 4000, lb.a().mr.lkey};
  SendWr w = make_wr(WR_RDMA_WRITE, &wr_sge, 1, 2, SEND_SIGNALED | SEND_FENCE);
  w.rdma.remote_addr = lb.b().addr(0x8000);
  w.rdma.rkey = lb.b().mr.rkey;
  r.next = &w;
  const SendWr* bad;
  ASSERT_EQ(0, lb.a().eng->post_send(qa, &r, &bad));
  auto wa = lb.poll(lb.a(), 2);
  ASSERT_EQ(wa.size(), 2u);
  EXPECT_EQ(0, std::memcmp(lb.b().mem.data(), lb.b().mem.data() + 0x8000, 4000));
  // on the wire: every READ response arrives before the first WRITE packet leaves
  size_t last_resp = 0, first_write = SIZE_MAX;
  for (size_t i = 0; i < lb.link.trace.size(); i++) {
    auto& [s, p] = lb.link.trace[i];
    if (s == 1 && p.info && p.info->kind == wire::OpKind::rdma_read_response) last_resp = i;
    if (s == 0 && p.info && p.info->kind == wire::OpKind::rdma_write && first_write == SIZE_MAX)
      first_write = i;
  }
  EXPECT_LT(last_resp, first_write);
}

TEST(RcFence, UnfencedWriteDoesNotWait) {
  Loopback lb;
  auto [qa, qb] = lb.connect(QPT_RC);
  Sge rd{lb.a().addr(0), 4000, lb.a().mr.lkey};
  SendWr r = make_wr(WR_RDMA_READ, &rd, 1, 1);
  r.rdma.remote_addr = lb.b().addr(0);
  r.rdma.rkey = lb.b().mr.rkey;
  Sge wr_sge{lb.a().addr(0x5000), 100, lb.a().mr.lkey};
  SendWr w = make_wr(WR_RDMA_WRITE, &wr_sge, 1, 2);
  w.rdma.remote_addr = lb.b().addr(0x8000);
  w.rdma.rkey = lb.b().mr.rkey;
  r.next = &w;
  const SendWr* bad;
  ASSERT_EQ(0, lb.a().eng->post_send(qa, &r, &bad));
  ASSERT_EQ(lb.poll(lb.a(), 2).size(), 2u);
  size_t first_resp = SIZE_MAX, first_write = SIZE_MAX;
  for (size_t i = 0; i < lb.link.trace.size(); i++) {
    auto& [s, p] = lb.link.trace[i];
    if (s == 1 && p.info && p.info->kind == wire::OpKind::rdma_read_response && first_resp == SIZE_MAX)
      first_resp = i;
    if (s == 0 && p.info && p.info->kind == wire::OpKind::rdma_write && first_write == SIZE_MAX)
      first_write = i;
  }
  EXPECT_LT(first_write, first_resp);
}

TEST(RcLimits, MaxRdAtomicBoundsOutstandingReads) {
  Loopback lb;
  Loopback::ConnOpts o;
  o.max_rd_atomic = 2;
  auto [qa, qb] = lb.connect(QPT_RC, o);
  std::vector<SendWr> wrs(6);
  std::vector<Sge> sges(6);
  for (int i = 0; i < 6; i++) {
    sges[i] = {lb.a().addr(static_cast<uint64_t>(i) * 100), 100, lb.a().mr.lkey};
    wrs[i] = make_wr(WR_RDMA_READ, &sges[i], 1, static_cast<uint64_t>(i));
    wrs[i].rdma.remote_addr = lb.b().addr(0);
    wrs[i].rdma.rkey = lb.b().mr.rkey;
    if (i) wrs[i - 1].next = &wrs[i];
  }
  const SendWr* bad;
  ASSERT_EQ(0, lb.a().eng->post_send(qa, &wrs[0], &bad));
  // track requests sent minus responses seen at every point of the trace
  ASSERT_EQ(lb.poll(lb.a(), 6).size(), 6u);
  int outstanding = 0, peak = 0;
  for (auto& [s, p] : lb.link.trace) {
    if (s == 0 && p.bth.opcode == wire::op::read_request) peak = std::max(peak, ++outstanding);
    if (s == 1 && p.bth.opcode == wire::op::read_response_only) outstanding--;
  }
  EXPECT_EQ(peak, 2);
}

TEST(RcLimits, LargeMessage16MiBAndMaxSizeRefusedBeyond2GiB) {
  Loopback lb({}, 9000, 33u << 20);
  auto [qa, qb] = lb.connect(QPT_RC, [] {
    Loopback::ConnOpts o;
    o.mtu = MTU_4096;
    return o;
  }());
  const uint32_t len = 16u << 20;
  fill(lb.a().mem, 0, len, 11);
  Sge sge{lb.a().addr(0), len, lb.a().mr.lkey};
  SendWr w = make_wr(WR_RDMA_WRITE, &sge, 1);
  w.rdma.remote_addr = lb.b().addr(16u << 20);
  w.rdma.rkey = lb.b().mr.rkey;
  lb.link.keep_trace = false;
  const SendWr* bad;
  ASSERT_EQ(0, lb.a().eng->post_send(qa, &w, &bad));
  auto wa = lb.poll(lb.a(), 1);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS);
  EXPECT_EQ(wa[0].byte_len, len);
  EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data() + (16u << 20), len));
  // 2^31 is the largest message (rxe's max_msg_sz); one byte more is refused at post time
  EXPECT_EQ(lb.a().eng->device_attr().max_msg_sz, 0x80000000u);
  Sge big[2] = {{lb.a().addr(0), 0x80000000u, lb.a().mr.lkey}, {lb.a().addr(0), 1, lb.a().mr.lkey}};
  SendWr b = make_wr(WR_RDMA_WRITE, big, 2);
  EXPECT_EQ(EINVAL, lb.a().eng->post_send(qa, &b, &bad));
  EXPECT_EQ(bad, &b);
}

}  // namespace
}  // namespace urxe::engine::test

namespace urxe::engine::test {
namespace {

// A 2 GiB virtual window backed by one small memfd mapped again and again, so a 2^31-byte message needs
// only `chunk` bytes of memory on each side.
struct AliasedWindow {
  static constexpr size_t kWindow = size_t{1} << 31;
  size_t chunk;
  uint8_t* base = nullptr;
  explicit AliasedWindow(size_t chunk_bytes) : chunk(chunk_bytes) {
    const int fd = memfd_create("urxe-engine-test", 0);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(chunk)) != 0) return;
    void* v = mmap(nullptr, kWindow, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (v == MAP_FAILED) return;
    base = static_cast<uint8_t*>(v);
    for (size_t off = 0; off < kWindow; off += chunk)
      if (mmap(base + off, chunk, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED)
        base = nullptr;
    close(fd);
  }
  ~AliasedWindow() {
    if (base) munmap(base, kWindow);
  }
};

TEST(RcLimits, MaxSizeMessage2GiBWriteAndRead) {
  Loopback lb({}, 9000, 4096);
  ConnOpts o;
  o.mtu = MTU_4096;
  o.sq_psn = 0xfff000;  // and the PSNs wrap on the way
  auto [qa, qb] = lb.connect(QPT_RC, o);
  lb.link.keep_trace = false;
  AliasedWindow src(16u << 20), dst(16u << 20);
  ASSERT_TRUE(src.base && dst.base);
  for (size_t i = 0; i < src.chunk; i++) src.base[i] = static_cast<uint8_t>(i * 7 + (i >> 12));
  MrInfo ms, md;
  ASSERT_EQ(0, lb.a().eng->reg_mr(lb.a().pd, src.base, AliasedWindow::kWindow,
                                  reinterpret_cast<uintptr_t>(src.base), ACCESS_LOCAL_WRITE, ms));
  ASSERT_EQ(0, lb.b().eng->reg_mr(lb.b().pd, dst.base, AliasedWindow::kWindow,
                                  reinterpret_cast<uintptr_t>(dst.base),
                                  ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ, md));
  Sge sge{reinterpret_cast<uintptr_t>(src.base), 0x80000000u, ms.lkey};
  SendWr w = make_wr(WR_RDMA_WRITE, &sge, 1, 1);
  w.rdma.remote_addr = reinterpret_cast<uintptr_t>(dst.base);
  w.rdma.rkey = md.rkey;
  const SendWr* bad;
  ASSERT_EQ(0, lb.a().eng->post_send(qa, &w, &bad));
  auto wa = lb.poll(lb.a(), 1, 600'000'000'000ull);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS);
  EXPECT_EQ(wa[0].byte_len, 0x80000000u);
  EXPECT_EQ(0, std::memcmp(src.base, dst.base, src.chunk));
  // and back: a 2^31-byte READ (one request, 524288 response packets)
  std::memset(src.base, 0, src.chunk);
  w = make_wr(WR_RDMA_READ, &sge, 1, 2);
  w.rdma.remote_addr = reinterpret_cast<uintptr_t>(dst.base);
  w.rdma.rkey = md.rkey;
  ASSERT_EQ(0, lb.a().eng->post_send(qa, &w, &bad));
  wa = lb.poll(lb.a(), 1, 600'000'000'000ull);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].status, WC_SUCCESS);
  EXPECT_EQ(wa[0].byte_len, 0x80000000u);
  EXPECT_EQ(0, std::memcmp(src.base, dst.base, src.chunk));
  EXPECT_EQ(lb.a().eng->counter(Counter::completer_retry_err), 0u);
}

}  // namespace
}  // namespace urxe::engine::test
