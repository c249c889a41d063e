// Found by replaying the interop capture interop-rdma_check_s16384_c4096_m256_lossy_urxe_server.pcap: when
// several READ/atomic requests arrived in one receive burst, their responses carried the MSN of the newest
// one (q.msn when sent), so the first READ's responses already acknowledged the later requests. Each response
// must carry the MSN of its own request, independent of batching.
#include "tests/sim/loopback.h"

namespace urxe::engine::test {
namespace {

TEST(ResponderMsn, ReadAndAtomicResponsesCarryTheirOwnRequestsMsn) {
  Loopback lb;
  auto [qa, qb] = lb.connect(QPT_RC);
  // two 2-packet READs and a FETCH_AND_ADD posted together: the responder takes all three in one burst
  Sge r1{lb.a().addr(0), 2048, lb.a().mr.lkey}, r2{lb.a().addr(4096), 2048, lb.a().mr.lkey},
      at{lb.a().addr(8192), 8, lb.a().mr.lkey};
  SendWr w1 = make_wr(WR_RDMA_READ, &r1, 1, 1), w2 = make_wr(WR_RDMA_READ, &r2, 1, 2),
         w3 = make_wr(WR_ATOMIC_FETCH_AND_ADD, &at, 1, 3);
  w1.rdma = {lb.b().addr(0), lb.b().mr.rkey};
  w2.rdma = {lb.b().addr(4096), lb.b().mr.rkey};
  w3.atomic.remote_addr = lb.b().addr(16384);
  w3.atomic.rkey = lb.b().mr.rkey;
  w3.atomic.compare_add = 1;
  w1.next = &w2;
  w2.next = &w3;
  post(lb.a(), qa, w1);
  auto wc = lb.poll(lb.a(), 3);
  ASSERT_EQ(wc.size(), 3u);
  for (auto& w : wc) EXPECT_EQ(w.status, WC_SUCCESS);
  std::vector<std::pair<uint8_t, uint32_t>> got;  // (opcode, MSN) of every response with an AETH
  for (auto& [s, p] : lb.link.trace)
    if (s == 1 && (p.present & wire::kAeth)) got.emplace_back(p.bth.opcode, p.aeth.msn);
  const std::vector<std::pair<uint8_t, uint32_t>> want = {{wire::op::read_response_first, 1},
                                                          {wire::op::read_response_last, 1},
                                                          {wire::op::read_response_first, 2},
                                                          {wire::op::read_response_last, 2},
                                                          {wire::op::atomic_acknowledge, 3}};
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace urxe::engine::test
