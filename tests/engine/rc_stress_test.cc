// A quick randomized check of RC loss recovery (the sim family runs the big property test): random mixes of
// SEND / WRITE / WRITE_IMM / READ / FETCH_ADD / CMP_SWAP under random drop, duplication, corruption and
// reordering; the outcome must match a sequential model exactly. Seeds are printed on failure.
#include <cstdlib>
#include <random>

#include "tests/sim/loopback.h"

namespace urxe::engine::test {
namespace {

struct Faults {
  double drop = 0.05, dup = 0.03, corrupt = 0.02, reorder = 0.05, backpressure = 0.02;
};

void run_seed(uint32_t seed, const Faults& f, QpType type = QPT_RC) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto uni = [&](uint64_t lo, uint64_t hi) { return std::uniform_int_distribution<uint64_t>(lo, hi)(rng); };
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  Loopback lb({}, 1500, 4u << 20);
  ConnOpts o;
  o.timeout = 8;  // ~1 ms
  o.mtu = static_cast<Mtu>(uni(MTU_256, MTU_1024));
  o.sq_psn = static_cast<uint32_t>(uni(0, 0xffffff));
  o.rq_psn = static_cast<uint32_t>(uni(0, 0xffffff));
  auto [qa, qb] = lb.connect(type, o);
  lb.link.keep_trace = false;
  lb.link.hook = [&](int, const wire::Packet&, std::vector<uint8_t>& bytes) {
    if (chance(f.drop)) return Fate::drop;
    if (chance(f.corrupt)) bytes[uni(14, bytes.size() - 1)] ^= static_cast<uint8_t>(1u << uni(0, 7));
    return chance(f.dup) ? Fate::duplicate : Fate::pass;
  };
  lb.link.jitter = [&](int) { return chance(f.reorder) ? uni(1, 20000) : 0; };
  for (Node* nd : {&lb.a(), &lb.b()}) nd->port->refuse = [&] { return chance(f.backpressure); };

  Node& A = lb.a();
  Node& B = lb.b();
  // B's memory: [0, 1M) receive slots of 8 KiB, [1M, 2M) WRITE target, [2M, 3M) READ source,
  // [3M, 3M+4K) atomic counters. A's memory: [0, 1M) sources, [1M, 2M) READ destinations, [2M..) atomics.
  const uint64_t kRecv = 0, kWrite = 1 << 20, kRead = 2 << 20, kAtom = 3 << 20;
  for (size_t i = 0; i < (1u << 20); i += 8) {
    const uint64_t r1 = rng(), r2 = rng();
    std::memcpy(&A.mem[i], &r1, 8);
    std::memcpy(&B.mem[kRead + i], &r2, 8);
  }
  std::vector<uint8_t> model(B.mem.begin() + kWrite, B.mem.begin() + kWrite + (1 << 20));
  uint64_t counters[8] = {};

  const int n = static_cast<int>(uni(20, 60));
  struct Expect {
    WcOpcode op;
    uint64_t len;
  };
  std::vector<Expect> sends;  // expected receives, in order
  std::vector<SendWr> wrs(static_cast<size_t>(n));
  std::vector<Sge> sges(static_cast<size_t>(n));
  std::vector<std::pair<uint64_t, uint64_t>> reads;  // (A dst offset, B src offset, len) checked below
  std::vector<uint64_t> read_len;
  // Each atomic's result in A's memory: (offset, the original value the sequential model gives back). The
  // responder executes a QP's atomics in order, once each, however often the request arrives.
  std::vector<std::pair<uint64_t, uint64_t>> atomic_results;
  int recv_slot = 0;
  const WrOpcode ops_rc[] = {
      WR_SEND,      WR_SEND_WITH_IMM,        WR_RDMA_WRITE,        WR_RDMA_WRITE_WITH_IMM,
      WR_RDMA_READ, WR_ATOMIC_FETCH_AND_ADD, WR_ATOMIC_CMP_AND_SWP};
  const int nops = type == QPT_RC ? 7 : 4;
  uint64_t read_dst = 1 << 20;
  for (int i = 0; i < n; i++) {
    SendWr& w = wrs[i];
    Sge& s = sges[i];
    w.wr_id = static_cast<uint64_t>(i);
    w.opcode = ops_rc[uni(0, nops - 1)];
    w.send_flags = SEND_SIGNALED;
    if (w.opcode == WR_SEND || w.opcode == WR_SEND_WITH_IMM) {
      const uint64_t len = uni(0, 8192);
      s = {A.addr(uni(0, (1 << 20) - 8192)), static_cast<uint32_t>(len), A.mr.lkey};
      w.sg_list = &s;
      w.num_sge = 1;
      w.imm_data = static_cast<uint32_t>(i);
      sends.push_back({WC_RECV, len});
      Sge rs{B.addr(kRecv + static_cast<uint64_t>(recv_slot++) * 8192), 8192, B.mr.lkey};
      RecvWr rw;
      rw.wr_id = static_cast<uint64_t>(i);
      rw.sg_list = &rs;
      rw.num_sge = 1;
      const RecvWr* bad;
      ASSERT_EQ(0, B.eng->post_recv(qb, &rw, &bad));
    } else if (w.opcode == WR_RDMA_WRITE || w.opcode == WR_RDMA_WRITE_WITH_IMM) {
      const uint64_t len = uni(0, 20000);
      const uint64_t src = uni(0, (1 << 20) - len), dst = uni(0, (1 << 20) - len);
      s = {A.addr(src), static_cast<uint32_t>(len), A.mr.lkey};
      w.sg_list = &s;
      w.num_sge = 1;
      w.rdma.remote_addr = B.addr(kWrite + dst);
      w.rdma.rkey = B.mr.rkey;
      std::memcpy(model.data() + dst, A.mem.data() + src, len);
      if (w.opcode == WR_RDMA_WRITE_WITH_IMM) {
        sends.push_back({WC_RECV_RDMA_WITH_IMM, len});
        Sge rs{B.addr(kRecv + static_cast<uint64_t>(recv_slot++) * 8192), 8192, B.mr.lkey};
        RecvWr rw;
        rw.wr_id = static_cast<uint64_t>(i);
        rw.sg_list = &rs;
        rw.num_sge = 1;
        const RecvWr* bad;
        ASSERT_EQ(0, B.eng->post_recv(qb, &rw, &bad));
      }
    } else if (w.opcode == WR_RDMA_READ) {
      const uint64_t len = uni(0, 9000);
      const uint64_t src = uni(0, (1 << 20) - len);
      s = {A.addr(read_dst), static_cast<uint32_t>(len), A.mr.lkey};
      w.sg_list = &s;
      w.num_sge = 1;
      w.rdma.remote_addr = B.addr(kRead + src);
      w.rdma.rkey = B.mr.rkey;
      reads.emplace_back(read_dst, src);
      read_len.push_back(len);
      read_dst += len;
    } else {
      const uint64_t c = uni(0, 7);
      s = {A.addr((2 << 20) + static_cast<uint64_t>(i) * 8), 8, A.mr.lkey};
      w.sg_list = &s;
      w.num_sge = 1;
      w.atomic.remote_addr = B.addr(kAtom + c * 8);
      w.atomic.rkey = B.mr.rkey;
      atomic_results.emplace_back((2 << 20) + static_cast<uint64_t>(i) * 8, counters[c]);
      if (w.opcode == WR_ATOMIC_FETCH_AND_ADD) {
        w.atomic.compare_add = uni(1, 1000);
        counters[c] += w.atomic.compare_add;
      } else {
        w.atomic.compare_add = ~0ull;  // never matches: the value stays, the original comes back
        w.atomic.swap = 5;
      }
    }
    const SendWr* bad;
    ASSERT_EQ(0, A.eng->post_send(qa, &w, &bad)) << i;
  }
  auto wa = lb.poll(A, static_cast<size_t>(n), 60'000'000'000ull);
  struct Dump {  // engine counters of both sides when this seed fails
    Loopback& lb;
    ~Dump() {
      if (!::testing::Test::HasFailure()) return;
      for (int s = 0; s < 2; s++) {
        std::string line = s ? "B:" : "A:";
        for (uint32_t c = 0; c < static_cast<uint32_t>(Counter::num_counters); c++)
          if (uint64_t v = lb.node[s].eng->counter(static_cast<Counter>(c)))
            line += std::string(" ") + counter_name(static_cast<Counter>(c)) + "=" + std::to_string(v);
        printf("%s\n", line.c_str());
      }
    }
  } dump{lb};
  ASSERT_EQ(wa.size(), static_cast<size_t>(n));
  for (int i = 0; i < n; i++) {
    EXPECT_EQ(wa[i].wr_id, static_cast<uint64_t>(i));
    EXPECT_EQ(wa[i].status, WC_SUCCESS) << wc_status_str(wa[i].status) << " wr " << i;
  }
  if (type == QPT_UC && f.drop == 0 && f.corrupt == 0 && f.reorder == 0) {
    // UC without loss: every message arrives, even with port backpressure
    auto wb = lb.poll(B, sends.size(), 60'000'000'000ull);
    ASSERT_EQ(wb.size(), sends.size());
    lb.settle(1'000'000);  // plain WRITEs after the last receive may still be on the link
    EXPECT_TRUE(std::equal(model.begin(), model.end(), B.mem.begin() + kWrite)) << "WRITE target differs";
  }
  if (type == QPT_RC) {
    auto wb = lb.poll(B, sends.size(), 60'000'000'000ull);
    ASSERT_EQ(wb.size(), sends.size());
    for (size_t i = 0; i < sends.size(); i++) {
      EXPECT_EQ(wb[i].status, WC_SUCCESS);
      EXPECT_EQ(wb[i].opcode, sends[i].op);
      EXPECT_EQ(wb[i].byte_len, sends[i].len);
    }
    EXPECT_TRUE(std::equal(model.begin(), model.end(), B.mem.begin() + kWrite)) << "WRITE target differs";
    for (size_t i = 0; i < reads.size(); i++)
      EXPECT_EQ(
          0, std::memcmp(A.mem.data() + reads[i].first, B.mem.data() + kRead + reads[i].second, read_len[i]))
          << "READ " << i;
    for (int c = 0; c < 8; c++) {
      uint64_t v;
      std::memcpy(&v, B.mem.data() + kAtom + static_cast<uint64_t>(c) * 8, 8);
      EXPECT_EQ(v, counters[c]) << "counter " << c;
    }
    for (const auto& [at, want] : atomic_results) {
      uint64_t got;
      std::memcpy(&got, A.mem.data() + at, 8);
      EXPECT_EQ(got, want) << "atomic result at A+" << at;
    }
    if (f.backpressure == 0) {
      EXPECT_EQ(lb.idle_spins, 0u);  // (a refusing port is legitimately retried)
    }
    // nothing more arrives later (no duplicate delivery)
    lb.settle(1'000'000'000);
    Wc extra[4];
    EXPECT_EQ(0, B.eng->poll_cq(B.cq, 4, extra));
  }
}

// URXE_ENGINE_SEED=N reruns only seed N (of any of the tests below).
bool skip_seed(uint32_t seed) {
  const char* only = std::getenv("URXE_ENGINE_SEED");
  return only && std::strtoul(only, nullptr, 0) != seed;
}

TEST(RcStress, RandomWrsUnderRandomFaults200Seeds) {
  Faults f;
  for (uint32_t seed = 1; seed <= 200; seed++) {
    if (skip_seed(seed)) continue;
    run_seed(seed, f);
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "first failing seed " << seed;
      return;
    }
  }
}

TEST(RcStress, NoIdleSpinsWithoutBackpressure50Seeds) {
  Faults f;
  f.backpressure = 0;
  for (uint32_t seed = 500; seed < 550; seed++) {
    if (skip_seed(seed)) continue;
    run_seed(seed, f);
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "first failing seed " << seed;
      return;
    }
  }
}

TEST(RcStress, HeavyLoss30Seeds) {
  Faults f;
  // (with 20% loss and much reordering, 8 timeouts in a row can legitimately exhaust retry_cnt 7)
  f.drop = 0.2;
  f.reorder = 0.05;
  for (uint32_t seed = 1000; seed < 1030; seed++) {
    if (skip_seed(seed)) continue;
    run_seed(seed, f);
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "first failing seed " << seed;
      return;
    }
  }
}

TEST(UcStress, PortBackpressureLosesNothing20Seeds) {
  Faults f;
  f.drop = f.dup = f.corrupt = f.reorder = 0;
  f.backpressure = 0.3;
  for (uint32_t seed = 2000; seed < 2020; seed++) {
    if (skip_seed(seed)) continue;
    run_seed(seed, f, QPT_UC);
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "first failing seed " << seed;
      return;
    }
  }
}

}  // namespace
}  // namespace urxe::engine::test
