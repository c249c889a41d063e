// ATOMIC WRITE (IBTA Annex A19, Memory Placement Extensions) between two engines: the request (RETH with
// DMA length 8, 8 payload bytes, one packet), the responder's rules (QP and R_Key remote write, a responder
// resource, 8-byte alignment, exactly 8 bytes, one store) with the NAK each breaks, the answer (an RDMA READ
// RESPONSE ONLY without payload), the completion, and a duplicate answered again without a second store.
#include <algorithm>
#include <cstring>

#include "tests/sim/loopback.h"
#include "tools/pcap_decode.h"

namespace urxe::engine::test {
namespace {

constexpr uint8_t kAtomicWrite = wire::op::kRc | wire::op::atomic_write;
constexpr uint8_t kReadRespOnly = wire::op::kRc | wire::op::read_response_only;

// An ATOMIC WRITE of the 8 bytes at A's buffer offset `src` to `remote_addr` in B's MR `rkey`.
SendWr make_aw(const Sge* sge, int num_sge, uint64_t remote_addr, uint32_t rkey, uint64_t wr_id = 1) {
  SendWr wr = make_wr(WR_ATOMIC_WRITE, sge, num_sge, wr_id);
  wr.rdma.remote_addr = remote_addr;
  wr.rdma.rkey = rkey;
  return wr;
}

uint64_t load64(const Node& n, uint64_t off) {
  uint64_t v;
  std::memcpy(&v, n.mem.data() + off, 8);
  return v;
}
void store64(Node& n, uint64_t off, uint64_t v) {
  std::memcpy(n.mem.data() + off, &v, 8);
}

class AtomicWrite : public RcLoopbackTest {
 protected:
  void SetUp() override { connect(); }
};

TEST_F(AtomicWrite, StoresEightBytesAndCompletesOnAnEmptyReadResponse) {
  Node &a = lb.a(), &b = lb.b();
  store64(a, 0, 0x1122334455667788ull);
  Sge sge{a.addr(0), 8, a.mr.lkey};
  post(a, qa, make_aw(&sge, 1, b.addr(64), b.mr.rkey, 7));
  auto wc = lb.poll(a, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WC_SUCCESS) << wc_status_str(wc[0].status);
  EXPECT_EQ(wc[0].opcode, WC_ATOMIC_WRITE);
  EXPECT_EQ(wc[0].byte_len, 8u);
  EXPECT_EQ(wc[0].wr_id, 7u);
  EXPECT_EQ(load64(b, 64), 0x1122334455667788ull);
  EXPECT_EQ(count_ops(lb.link, 0, kAtomicWrite), 1);
  // the answer is an RDMA READ RESPONSE ONLY without payload at its PSN, no ACKNOWLEDGE, no AtomicAckETH
  ASSERT_EQ(psns_of(lb.link, 1, kReadRespOnly).size(), 1u);
  EXPECT_EQ(psns_of(lb.link, 1, kReadRespOnly)[0], psns_of(lb.link, 0, kAtomicWrite)[0]);
  EXPECT_EQ(count_ops(lb.link, 1, wire::op::kRc | wire::op::atomic_acknowledge), 0);
  for (auto& [side, p] : lb.link.trace) {
    if (side == 0 && p.bth.opcode == kAtomicWrite) {
      EXPECT_EQ(p.reth.dma_len, 8u);
      EXPECT_EQ(p.reth.va, b.addr(64));
      EXPECT_EQ(p.reth.rkey, b.mr.rkey);
      EXPECT_EQ(p.payload_len, 8u);
      EXPECT_TRUE(p.bth.ack_req);
    }
    if (side == 1 && p.bth.opcode == kReadRespOnly) {
      EXPECT_EQ(p.payload_len, 0u);
    }
  }
}

TEST_F(AtomicWrite, InlineAndSeveralSgesCarryTheSameEightBytes) {
  Node &a = lb.a(), &b = lb.b();
  const uint64_t v = 0x0102030405060708ull;
  Sge in{reinterpret_cast<uintptr_t>(&v), 8, 0};
  SendWr w1 = make_aw(&in, 1, b.addr(128), b.mr.rkey, 1);
  w1.send_flags |= SEND_INLINE;
  post(a, qa, w1);
  ASSERT_EQ(lb.poll(a, 1).size(), 1u);
  EXPECT_EQ(load64(b, 128), v);
  store64(a, 0, 0xa1a2a3a4b1b2b3b4ull);
  Sge two[2] = {{a.addr(0), 4, a.mr.lkey}, {a.addr(4), 4, a.mr.lkey}};
  post(a, qa, make_aw(two, 2, b.addr(136), b.mr.rkey, 2));
  auto wc = lb.poll(a, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WC_SUCCESS);
  EXPECT_EQ(load64(b, 136), 0xa1a2a3a4b1b2b3b4ull);
}

TEST_F(AtomicWrite, PostRefusesAnythingButEightBytesOnRc) {
  Node& a = lb.a();
  Sge s4{a.addr(0), 4, a.mr.lkey}, s16{a.addr(0), 16, a.mr.lkey};
  const SendWr* bad = nullptr;
  SendWr w = make_aw(&s4, 1, lb.b().addr(0), lb.b().mr.rkey);
  EXPECT_EQ(EINVAL, a.eng->post_send(qa, &w, &bad));
  w = make_aw(&s16, 1, lb.b().addr(0), lb.b().mr.rkey);
  EXPECT_EQ(EINVAL, a.eng->post_send(qa, &w, &bad));
  auto [ua, ub] = lb.connect(QPT_UC);
  Sge s8{a.addr(0), 8, a.mr.lkey};
  w = make_aw(&s8, 1, lb.b().addr(0), lb.b().mr.rkey);
  EXPECT_EQ(EINVAL, a.eng->post_send(ua, &w, &bad));  // RC only
  w.opcode = WR_FLUSH;
  EXPECT_EQ(EOPNOTSUPP, a.eng->post_send(qa, &w, &bad));
  (void)ub;
}

// Each responder rule broken gives its NAK: the WR completes with the matching status, memory untouched.
TEST(AtomicWriteErrors, EachRuleHasItsNak) {
  struct Case {
    const char* what;
    uint32_t qp_access;
    uint8_t max_dest_rd_atomic;
    uint32_t mr_access;  // B's target MR
    uint64_t offset;     // in B's MR
    WcStatus want;
  };
  constexpr uint32_t kW = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE;
  const Case cases[] = {
      {"QP without REMOTE_WRITE", ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC, 16, kW, 0, WC_REM_INV_REQ_ERR},
      {"R_Key without remote write", ACCESS_REMOTE_WRITE, 16, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ, 0,
       WC_REM_ACCESS_ERR},
      {"no responder resources", ACCESS_REMOTE_WRITE, 0, kW, 0, WC_REM_INV_REQ_ERR},
      {"misaligned target", ACCESS_REMOTE_WRITE, 16, kW, 4, WC_REM_INV_REQ_ERR},
      {"beyond the MR", ACCESS_REMOTE_WRITE, 16, kW, 4096 - 4, WC_REM_ACCESS_ERR},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Loopback lb;
    ConnOpts o;
    o.access = c.qp_access;
    o.max_dest_rd_atomic = c.max_dest_rd_atomic;
    auto [qa, qb] = lb.connect(QPT_RC, o);
    std::vector<uint8_t> target(4096, 0);
    MrInfo mr;
    ASSERT_EQ(0, reg_vec(lb.b(), lb.b().pd, target, c.mr_access, mr));
    store64(lb.a(), 0, ~0ull);
    Sge sge{lb.a().addr(0), 8, lb.a().mr.lkey};
    expect_remote_error(lb, qa, make_aw(&sge, 1, vaddr(target) + c.offset, mr.rkey), c.want);
    EXPECT_EQ(std::count(target.begin(), target.end(), 0), 4096);
    (void)qb;
  }
}

// A request not of exactly 8 bytes (oA19-28), made so on the wire: DMA length 16, or 7 payload bytes and a
// pad of 1. Invalid Request NAK; nothing stored.
TEST(AtomicWriteErrors, NotExactlyEightBytesIsAnInvalidRequest) {
  for (int variant = 0; variant < 2; variant++) {
    SCOPED_TRACE(variant == 0 ? "DMA length 16" : "payload 7 + pad 1");
    Loopback lb;
    auto [qa, qb] = lb.connect(QPT_RC);
    lb.link.hook = [variant](int side, const wire::Packet& p, std::vector<uint8_t>& f) {
      if (side != 0 || p.bth.opcode != kAtomicWrite) return Fate::pass;
      if (variant == 0)
        f[p.bth_offset + wire::kBthLen + 15] = 16;  // RETH DMA length, low byte
      else
        f[p.bth_offset + 1] = static_cast<uint8_t>((f[p.bth_offset + 1] & 0xcf) | (1 << 4));  // pad 1
      wire::write_icrc(wire::MutByteSpan(f.data(), f.size()));
      return Fate::pass;
    };
    store64(lb.a(), 0, ~0ull);
    Sge sge{lb.a().addr(0), 8, lb.a().mr.lkey};
    expect_remote_error(lb, qa, make_aw(&sge, 1, lb.b().addr(0), lb.b().mr.rkey), WC_REM_INV_REQ_ERR);
    EXPECT_EQ(load64(lb.b(), 0), 0u);
    (void)qb;
  }
}

// The answer is lost: A asks again, B answers the duplicate from its responder resource without storing
// again (B's memory was changed locally in between and keeps that value).
TEST_F(AtomicWrite, DuplicateIsAnsweredNotStoredAgain) {
  Node &a = lb.a(), &b = lb.b();
  drop_frames(lb.link, 1, with_opcode(kReadRespOnly));
  store64(a, 0, 0x5555);
  Sge sge{a.addr(0), 8, a.mr.lkey};
  post(a, qa, make_aw(&sge, 1, b.addr(256), b.mr.rkey, 3));
  ASSERT_TRUE(lb.run([&] { return load64(b, 256) == 0x5555; }));
  store64(b, 256, 0x6666);  // a local store after the remote one
  auto wc = lb.poll(a, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WC_SUCCESS);
  EXPECT_EQ(wc[0].opcode, WC_ATOMIC_WRITE);
  EXPECT_EQ(count_ops(lb.link, 0, kAtomicWrite), 2);   // resent once
  EXPECT_EQ(count_ops(lb.link, 1, kReadRespOnly), 2);  // answered twice
  EXPECT_EQ(load64(b, 256), 0x6666u);                  // stored once
  EXPECT_GE(b.eng->counter(Counter::duplicate_request), 1u);
}

// Ordered with the rest: a WRITE, then an ATOMIC WRITE of a flag, then a READ of both, all in one post; the
// READ sees the WRITE's data and the flag.
TEST_F(AtomicWrite, OrderedWithWritesAndReads) {
  Node &a = lb.a(), &b = lb.b();
  fill(a.mem, 0, 256, 9);
  store64(a, 512, 1);
  Sge wsge{a.addr(0), 256, a.mr.lkey}, fsge{a.addr(512), 8, a.mr.lkey}, rsge{a.addr(1024), 264, a.mr.lkey};
  SendWr w = make_rdma_wr(WR_RDMA_WRITE, &wsge, b.addr(2048), b.mr.rkey, 1);
  SendWr f = make_aw(&fsge, 1, b.addr(2048 + 256), b.mr.rkey, 2);
  SendWr r = make_rdma_wr(WR_RDMA_READ, &rsge, b.addr(2048), b.mr.rkey, 3);
  w.next = &f;
  f.next = &r;
  post(a, qa, w);
  auto wc = lb.poll(a, 3);
  ASSERT_EQ(wc.size(), 3u);
  for (int i = 0; i < 3; i++) EXPECT_EQ(wc[i].status, WC_SUCCESS) << i;
  EXPECT_EQ(wc[1].opcode, WC_ATOMIC_WRITE);
  EXPECT_EQ(0, std::memcmp(a.mem.data() + 1024, a.mem.data(), 256));
  EXPECT_EQ(load64(a, 1024 + 256), 1u);
}

// The frames of an ATOMIC WRITE exchange as captured on the link decode strictly with `urxe pcap decode`'s
// decoder (what --strict requires of every RoCE frame: parsed, ICRC good), named, with the tshark note.
TEST_F(AtomicWrite, CapturedFramesDecodeStrictly) {
  Node &a = lb.a(), &b = lb.b();
  std::vector<std::vector<uint8_t>> frames;
  lb.link.hook = [&frames](int, const wire::Packet&, std::vector<uint8_t>& f) {
    frames.push_back(f);
    return Fate::pass;
  };
  store64(a, 0, 42);
  Sge sge{a.addr(0), 8, a.mr.lkey};
  post(a, qa, make_aw(&sge, 1, b.addr(8), b.mr.rkey));
  ASSERT_EQ(lb.poll(a, 1).size(), 1u);
  int aw = 0, resp = 0;
  for (size_t i = 0; i < frames.size(); i++) {
    const tools::DecodedFrame d =
        tools::decode_frame(wire::ByteSpan(frames[i].data(), frames[i].size()), i + 1);
    EXPECT_TRUE(d.good()) << tools::format_text(d, 0, 0);
    const std::string line = tools::format_text(d, 0, 0);
    if (d.pkt.bth.opcode == kAtomicWrite) {
      aw++;
      EXPECT_NE(line.find("RC ATOMIC_WRITE (0x1d)"), std::string::npos) << line;
      EXPECT_NE(line.find("tshark 4.0: Unknown (29)"), std::string::npos) << line;
    }
    if (d.pkt.bth.opcode == kReadRespOnly) resp++;
  }
  EXPECT_EQ(aw, 1);
  EXPECT_EQ(resp, 1);
}

}  // namespace
}  // namespace urxe::engine::test
