// Engine throughput, two engines over a SimNet link in one thread (tests/sim): 64 B SENDs per second and
// 64 KiB RDMA WRITE bytes per second (the engines' CPU cost: both sides' protocol work, ICRC and copies),
// each beside memcpy of the same bytes; then goodput with 1% random loss as a fraction of lossless goodput,
// in virtual time on a 10 Gb/s, 5 µs link (what the loss recovery costs on the wire).
// Rates are per CPU second of this thread (Google Benchmark's default), bytes in binary units (G = 2^30): on
// a shared machine that is the stable figure. Pin it: taskset -c 1 build/tests/bench/engine_bench
#include <benchmark/benchmark.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/sim/harness.h"

namespace {

using namespace urxe;
using namespace urxe::engine;
using namespace urxe::sim;

// A requester on host 0 and a responder on host 1 over one RC QP, with `depth` WRs kept in flight.
class Pipe {
 public:
  Pipe(const LinkConfig& link, uint32_t msg, uint32_t depth, Mtu mtu = MTU_4096, uint64_t seed = 1,
       bool single_threaded = false)
      : tb_(seed, link, EngineConfig{}, 4200, 2048), msg_(msg), depth_(depth) {
    QpParams p;
    p.single_threaded = single_threaded;
    p.path_mtu = mtu;
    p.max_send_wr = p.max_recv_wr = 2 * depth;
    p.cqe = 4 * depth;
    p.timeout = 10;  // 4.2 ms
    p.retry_cnt = 7;
    p.rnr_retry = 7;
    std::string e = tb_.connect(p, ends_);
    if (!e.empty()) {
      std::fprintf(stderr, "engine_bench: %s\n", e.c_str());
      std::abort();
    }
    src_.assign(msg ? msg : 1, 0xab);
    dst_.assign(static_cast<size_t>(msg ? msg : 1) * depth, 0);
    auto& e0 = *tb_.host[0].eng;
    auto& e1 = *tb_.host[1].eng;
    must(e0.reg_mr(tb_.host[0].pd, src_.data(), src_.size(), reinterpret_cast<uint64_t>(src_.data()),
                   ACCESS_LOCAL_WRITE, src_mr_));
    must(e1.reg_mr(tb_.host[1].pd, dst_.data(), dst_.size(), reinterpret_cast<uint64_t>(dst_.data()),
                   ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE, dst_mr_));
  }
  static void must(int rc) {
    if (rc) {
      std::fprintf(stderr, "engine_bench: verb failed: %d\n", rc);
      std::abort();
    }
  }
  void post_recvs() {
    for (uint32_t i = 0; i < depth_; ++i) post_recv(i);
  }
  void post_recv(uint32_t slot) {
    Sge s{reinterpret_cast<uint64_t>(dst_.data()) + uint64_t{slot} * msg_, msg_, dst_mr_.lkey};
    RecvWr w;
    w.wr_id = slot;
    w.sg_list = &s;
    w.num_sge = 1;
    const RecvWr* bad;
    must(tb_.host[1].eng->post_recv(ends_.qpn[1], &w, &bad));
  }
  void post(WrOpcode op, uint32_t slot) {
    Sge s{reinterpret_cast<uint64_t>(src_.data()), msg_, src_mr_.lkey};
    SendWr w;
    w.wr_id = slot;
    w.sg_list = &s;
    w.num_sge = 1;
    w.opcode = op;
    w.send_flags = SEND_SIGNALED;
    w.rdma.remote_addr = reinterpret_cast<uint64_t>(dst_.data()) + uint64_t{slot} * msg_;
    w.rdma.rkey = dst_mr_.rkey;
    const SendWr* bad;
    must(tb_.host[0].eng->post_send(ends_.qpn[0], &w, &bad));
  }
  // Completes `n` messages of kind `op`, keeping depth_ in flight; SEND receives are reposted as consumed.
  void run(WrOpcode op, uint64_t n) {
    uint64_t posted = 0, done = 0;
    Wc wc[64];
    while (done < n) {
      while (posted < n && posted - done < depth_) post(op, static_cast<uint32_t>(posted++ % depth_));
      bool got = tb_.net.run_until(
          [&] {
            int k = tb_.host[0].eng->poll_cq(ends_.send_cq[0], 64, wc);
            for (int i = 0; i < k; ++i) {
              if (wc[i].status != WC_SUCCESS) {
                std::fprintf(stderr, "engine_bench: completion error %s\n", wc_status_str(wc[i].status));
                std::abort();
              }
            }
            done += static_cast<uint64_t>(k > 0 ? k : 0);
            if (op == WR_SEND) {
              int r = tb_.host[1].eng->poll_cq(ends_.recv_cq[1], 64, wc);
              for (int i = 0; i < r; ++i) post_recv(static_cast<uint32_t>(wc[i].wr_id));
            }
            return k > 0;
          },
          tb_.net.now_ns() + 10'000'000'000ull);
      if (!got) {
        std::fprintf(stderr, "engine_bench: stalled after %" PRIu64 " of %" PRIu64 "\n", done, n);
        std::abort();
      }
    }
  }
  // n more connected RC QP pairs that carry nothing (one shared CQ per side): what an idle QP costs.
  void add_idle_qps(uint32_t n) {
    uint32_t cq[2];
    for (uint32_t h = 0; h < 2; ++h) must(tb_.host[h].eng->create_cq(16, cq[h]));
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t qpn[2];
      for (uint32_t h = 0; h < 2; ++h) {
        QpInitAttr ia;
        ia.send_cq = ia.recv_cq = cq[h];
        ia.qp_type = QPT_RC;
        ia.cap.max_send_wr = ia.cap.max_recv_wr = 1;
        ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
        must(tb_.host[h].eng->create_qp(tb_.host[h].pd, ia, qpn[h]));
      }
      for (uint32_t h = 0; h < 2; ++h) {
        Engine& e = *tb_.host[h].eng;
        QpAttr a;
        a.qp_state = QPS_INIT;
        a.port_num = 1;
        must(e.modify_qp(qpn[h], a, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS));
        a = {};
        a.qp_state = QPS_RTR;
        a.ah_attr.dgid = tb_.gid(1 - h);
        a.ah_attr.dmac = sim_mac(1 - h);
        a.path_mtu = MTU_1024;
        a.dest_qp_num = qpn[1 - h];
        a.max_dest_rd_atomic = 1;
        must(e.modify_qp(qpn[h], a,
                         QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN | QP_MAX_DEST_RD_ATOMIC |
                             QP_MIN_RNR_TIMER));
        a = {};
        a.qp_state = QPS_RTS;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.max_rd_atomic = 1;
        must(e.modify_qp(
            qpn[h], a,
            QP_STATE | QP_SQ_PSN | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC));
      }
    }
  }
  // The application's side alone: `n` posts of one WR, each followed by a poll of the (still empty) send CQ,
  // as a busy-polling app does; no round runs in between. Then (not timed) the work is done and reaped.
  void app_posts_and_polls(benchmark::State& state, WrOpcode op, uint32_t n) {
    Wc wc[64];
    int polled = 0;
    for (uint32_t i = 0; i < n; ++i) {
      post(op, i % depth_);
      polled += tb_.host[0].eng->poll_cq(ends_.send_cq[0], 64, wc);
    }
    state.PauseTiming();
    uint64_t done = static_cast<uint64_t>(polled);
    tb_.net.run_until(
        [&] {
          int k = tb_.host[0].eng->poll_cq(ends_.send_cq[0], 64, wc);
          done += static_cast<uint64_t>(k > 0 ? k : 0);
          return done >= n;
        },
        tb_.net.now_ns() + 10'000'000'000ull);
    if (done != n) {
      std::fprintf(stderr, "engine_bench: %" PRIu64 " of %u completions\n", done, n);
      std::abort();
    }
    state.ResumeTiming();
  }
  uint64_t now_ns() const { return const_cast<Testbed&>(tb_).net.now_ns(); }
  Testbed& tb() { return tb_; }

 private:
  Testbed tb_;
  QpEnds ends_;
  uint32_t msg_, depth_;
  std::vector<uint8_t> src_, dst_;
  MrInfo src_mr_{}, dst_mr_{};
};

LinkConfig lossless() {
  LinkConfig l;
  l.latency_ns = 1000;
  return l;
}

void BM_Send64(benchmark::State& state) {
  Pipe p(lossless(), 64, 64);
  p.post_recvs();
  for (auto _ : state) p.run(WR_SEND, 1000);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * 1000);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 1000 * 64);
}
BENCHMARK(BM_Send64)->Unit(benchmark::kMillisecond);

// The same with 10,000 more connected QP pairs that carry nothing: progress() visits only QPs with work (a
// post, a frame, a timer), so the rate should match BM_Send64's.
void BM_Send64With10kIdleQps(benchmark::State& state) {
  Pipe p(lossless(), 64, 64);
  p.add_idle_qps(10000);
  p.post_recvs();
  for (auto _ : state) p.run(WR_SEND, 1000);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * 1000);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 1000 * 64);
}
BENCHMARK(BM_Send64With10kIdleQps)->Unit(benchmark::kMillisecond);

// post_send + poll_cq on the application's side, with (arg 0) and without (arg 1: a thread domain's QP
// and CQ, engine QpInitAttr/CqOptions::single_threaded) the per-queue spinlocks. Items: post+poll pairs.
void BM_AppPostPoll(benchmark::State& state) {
  constexpr uint32_t kBatch = 64;
  Pipe p(lossless(), 64, kBatch, MTU_4096, 1, state.range(0) != 0);
  for (auto _ : state) p.app_posts_and_polls(state, WR_RDMA_WRITE, kBatch);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * kBatch);
}
BENCHMARK(BM_AppPostPoll)->ArgName("single_threaded")->Arg(0)->Arg(1);

// BM_Send64's whole protocol work with a thread domain's QPs and CQs: what the locks weigh in it.
void BM_Send64SingleThreaded(benchmark::State& state) {
  Pipe p(lossless(), 64, 64, MTU_4096, 1, true);
  p.post_recvs();
  for (auto _ : state) p.run(WR_SEND, 1000);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * 1000);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 1000 * 64);
}
BENCHMARK(BM_Send64SingleThreaded)->Unit(benchmark::kMillisecond);

void BM_Write64K(benchmark::State& state) {
  Pipe p(lossless(), 65536, 16);
  for (auto _ : state) p.run(WR_RDMA_WRITE, 64);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * 64);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 64 * 65536);
}
BENCHMARK(BM_Write64K)->Unit(benchmark::kMillisecond);

// memcpy of the same bytes, through buffers as large as the benchmarks' (so caches behave alike). Source and
// destination sit 2 KiB apart modulo 4 KiB: measured here (AMD EPYC, glibc 2.36), a destination 16 bytes past
// the source modulo 4 KiB copies 64 KiB at 2.6 GB/s instead of ~40, and heap addresses sometimes land so,
// which made the baseline swing between about 2 and 40 GiB/s from run to run.
void BM_Memcpy(benchmark::State& state) {
  const size_t sz = static_cast<size_t>(state.range(0)), slots = sz < 4096 ? 64 : 16;
  std::vector<uint8_t> src_buf(sz + 4096, 0xab), dst_buf(sz * slots + 8192);
  uint8_t* src = src_buf.data() + (4096 - reinterpret_cast<uintptr_t>(src_buf.data()) % 4096);
  uint8_t* dst = dst_buf.data() + (4096 - reinterpret_cast<uintptr_t>(dst_buf.data()) % 4096) + 2048;
  size_t i = 0;
  for (auto _ : state) {
    std::memcpy(dst + (i++ % slots) * sz, src, sz);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * sz));
}
BENCHMARK(BM_Memcpy)->Arg(64)->Arg(65536);

// Goodput in virtual time: 64 KiB WRITEs, 16 in flight, on a 10 Gb/s link with 5 µs one-way latency, with
// loss in permille (both directions, so ACKs are lost too). Reported as Gb/s of payload per virtual second.
std::map<int64_t, double> g_goodput;

void BM_WriteGoodput(benchmark::State& state) {
  LinkConfig l;
  l.latency_ns = 5000;
  l.rate_bps = 10'000'000'000ull;
  l.drop = static_cast<double>(state.range(0)) / 1000.0;
  double gbps = 0;
  uint64_t seed = 1;
  for (auto _ : state) {
    Pipe p(l, 65536, 16, MTU_4096, seed++);
    const uint64_t n = 256;  // 16 MiB
    uint64_t t0 = p.now_ns();
    p.run(WR_RDMA_WRITE, n);
    gbps = static_cast<double>(n * 65536 * 8) / static_cast<double>(p.now_ns() - t0);
    state.counters["virtual_Gbps"] = gbps;
    state.counters["retransmit_timeouts"] =
        static_cast<double>(p.tb().host[0].eng->counter(Counter::completer_retry_err));
    state.counters["seq_naks_rcvd"] = static_cast<double>(p.tb().host[0].eng->counter(Counter::rcvd_seq_err));
  }
  g_goodput[state.range(0)] = gbps;
}
BENCHMARK(BM_WriteGoodput)->Arg(0)->Arg(10)->Iterations(3)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (g_goodput.count(0) && g_goodput.count(10) && g_goodput[0] > 0)
    std::printf(
        "\ngoodput with 1%% loss: %.2f Gb/s = %.1f%% of lossless %.2f Gb/s (virtual time, 10 Gb/s link, 5 "
        "us, "
        "64 KiB WRITEs x16 in flight, timeout 4.2 ms)\n",
        g_goodput[10], 100.0 * g_goodput[10] / g_goodput[0], g_goodput[0]);
  return 0;
}
