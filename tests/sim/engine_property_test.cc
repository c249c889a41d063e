// Randomized property test of the engine against a reference model, in a simulated network with faults.
//
// Each seed builds two engines joined by one SimNet link (random drop, duplication, reordering, jitter,
// corruption, or none), several QP pairs (RC in one or both directions, UC, UD) with random PSNs (some near
// the 24-bit wrap), path MTUs and engine tunables, and posts a random mix of every work request type with
// sizes 0, 1, MTU-1, MTU, MTU+1, multi-MTU, one to three SGEs, inline, fence and solicited flags, some
// receives posted late (RNR), IPv4 or (a quarter of the seeds) IPv6 GIDs, and in some seeds one invalid
// request (remote access error); a third of the one-way RC pairs take their receives from an SRQ. Then it
// checks:
//  - every byte of both hosts' memory equals the reference model (registered regions as the model says,
//    everything else untouched: guard bytes around every region, gaps between SGEs, receive-buffer tails);
//  - RC: every receive completed exactly once, in order, with the right length, opcode, flags and immediate;
//    UC/UD: every receive completion matches a message that was sent (all of them, in order, without faults);
//  - every signalled WR completed exactly once, in order, with the right status and opcode; after an error
//    the failing WR and every later one complete with an error status (flushed), the first of them not a
//    flush; both QPs end in ERR and the responder's receives are flushed;
//  - every corrupted frame was dropped by the receiving engine; UD messages sent with a wrong Q_Key (a tenth)
//    are dropped and counted;
//  - after a successful SEND_WITH_INV / LOCAL_INV the invalidated MR refuses access;
//  - at rest the engines hold no port buffers.
// The model applies each flow's operations in order to plain buffers; flows use disjoint memory, so their
// interleaving does not matter. RDMA READ results are only defined if no later unfenced WR of the same QP
// writes the bytes read (a duplicate READ may be re-executed), so the generator fences such writes, as an
// application must.
//
// URXE_SIM_SEEDS=N (default 10000) and URXE_SIM_FIRST_SEED=S choose the seeds; URXE_SIM_SEED=S runs one seed
// with a trace of its scenario.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "tests/sim/harness.h"
#include "wire/packet.h"

namespace urxe::sim {
namespace {

using namespace engine;

constexpr uint32_t kGrh = 40;  // UD receive buffers start with a 40-byte GRH area

struct Piece {
  uint64_t off = 0;  // arena offset on the host that owns it
  uint32_t len = 0;
};

struct Op {
  WrOpcode opcode = WR_SEND;
  uint32_t flags = 0;
  bool signaled = false;
  uint64_t wr_id = 0;
  std::vector<Piece> local;  // requester side: gather list (sends/writes) or scatter list (read/atomic)
  uint32_t len = 0;          // message length (atomics: 8)
  uint64_t remote_off = 0;   // offset in the flow's remote region
  uint32_t imm = 0, inv_rkey = 0;
  uint64_t compare_add = 0, swap = 0;
  bool consumes_recv = false;
  bool bad = false;           // deliberately invalid (remote access error expected)
  bool wrong_qkey = false;    // UD: sent with a Q_Key the receiver does not have: must be dropped
  int victim = -1;            // SEND_WITH_INV / LOCAL_INV: index of the MR invalidated
  std::vector<uint8_t> data;  // the message bytes (gathered) for sends and writes
};

struct RecvWqe {
  uint64_t wr_id = 0;
  std::vector<Piece> pieces;
  uint32_t cap = 0;
  bool late = false;
};

struct Flow {
  uint32_t req = 0, resp = 0;  // host indices
  uint32_t pair = 0;           // QP pair
  QpType type = QPT_RC;
  uint32_t mtu = 1024;
  GuardedArena::Region src, sink, remote, recvbuf;
  MrInfo src_mr{}, sink_mr{}, remote_mr{}, recv_mr{};
  uint64_t remote_iova = 0;  // peer-visible address of remote region offset 0
  std::vector<Op> ops;
  std::vector<RecvWqe> recvs;
  uint64_t late_recv_at = 0;
  std::vector<Wc> send_wcs, recv_wcs;
  bool error_injected = false;
};

struct Victim {
  uint32_t host = 0;
  GuardedArena::Region region;
  MrInfo mr{};
};

struct Pair {
  QpParams params;
  QpEnds ends;
  bool use_srq = false;
};

// Categories for the summary: which kinds of runs pass.
struct Tally {
  uint64_t runs = 0, failed = 0;
};

class Scenario {
 public:
  Scenario(uint64_t seed, bool verbose, int sabotage = 0)
      : seed_(seed),
        verbose_(verbose),
        rng_(seed ^ 0x5eed5eed5eedull),
        qkey_rng_(seed ^ 0x9e3779b97f4a7c15ull),
        srq_rng_(seed ^ 0x5a17ull),
        sabotage_(sabotage) {}
  // Checker self-test: after the run, damage one thing the checks must notice (1..kSabotages); applied()
  // tells whether this seed offered something to damage.
  static constexpr int kSabotages = 7;
  bool sabotage_applied() const { return sabotage_applied_; }
  // Returns failure descriptions (empty = pass).
  std::vector<std::string> run();
  std::string category() const { return category_; }
  std::string summary() const { return summary_; }
  uint64_t virtual_ns() const { return tb_ ? tb_->net.now_ns() : 0; }

 private:
  void choose_world();
  void sabotage();
  void probe_victims(std::vector<std::string>& errs);
  void plan_flow(Flow& f);
  void carve_and_register();
  void fill_ops(Flow& f);
  std::string post_ops(Flow& f, size_t from, size_t to);
  std::string post_recvs(Flow& f, bool late);
  void poll_all();
  bool all_done() const;
  void check_flow(Flow& f, std::vector<std::string>& errs);
  void check_memory(std::vector<std::string>& errs);
  uint32_t pick_size(uint32_t mtu, uint32_t max);
  void fail(std::vector<std::string>& errs, const Flow& f, const std::string& what) {
    char b[120];
    std::snprintf(b, sizeof b,
                  "flow %zu (%s host%u->host%u qp 0x%x->0x%x): ", static_cast<size_t>(&f - flows_.data()),
                  f.type == QPT_RC   ? "RC"
                  : f.type == QPT_UC ? "UC"
                                     : "UD",
                  f.req, f.resp, pairs_[f.pair].ends.qpn[f.req], pairs_[f.pair].ends.qpn[f.resp]);
    errs.push_back(b + what);
  }

  uint64_t seed_;
  bool verbose_;
  Rng rng_;
  Rng qkey_rng_;
  Rng srq_rng_;
  LinkConfig link_;
  EngineConfig ecfg_;
  bool faults_ = false;
  std::unique_ptr<Testbed> tb_;
  std::vector<Pair> pairs_;
  std::vector<Flow> flows_;
  std::vector<Victim> victims_;
  std::unique_ptr<GuardedArena> arena_[2];
  uint64_t arena_need_[2] = {0, 0};
  std::vector<uint8_t> want_[2];  // expected arena images
  std::vector<uint8_t> mode_[2];  // 0: must equal want; 1: want or the initial byte; 2: anything
  std::vector<uint8_t> init_[2];
  std::string category_, summary_;
  int sabotage_ = 0;
  bool sabotage_applied_ = false;
};

std::string wc_str(const Wc& w);
uint64_t g_ipv6_runs;  // seeds run over IPv6 GIDs, for the summary
uint64_t g_probes[2];  // invalidation probes run (remote, local), for the summary

// An MR invalidated by a successful SEND_WITH_INV or LOCAL_INV must refuse access afterwards: a WRITE with
// the invalidated rkey fails with REM_ACCESS_ERR, a SEND gathering through the invalidated lkey with
// LOC_PROT_ERR. Each probe uses a fresh RC pair (the error moves it to ERR) and the first victim of each
// kind.
void Scenario::probe_victims(std::vector<std::string>& errs) {
  bool done_remote = false, done_local = false;
  for (auto& f : flows_) {
    if (f.type != QPT_RC || f.error_injected) continue;
    for (auto& op : f.ops) {
      if (op.victim < 0) continue;
      bool remote = op.opcode == WR_SEND_WITH_INV;
      if (remote ? done_remote : done_local) continue;
      bool ok = false;  // did the invalidating WR succeed?
      if (remote) {
        for (auto& w : f.recv_wcs)
          ok |= w.status == WC_SUCCESS && (w.wc_flags & WC_WITH_INV) && w.imm_data == op.inv_rkey;
      } else {
        ok = true;  // LOCAL_INV: in a flow without errors every op succeeded (checked above)
      }
      if (!ok) continue;
      (remote ? done_remote : done_local) = true;
      const Victim& v = victims_[static_cast<size_t>(op.victim)];
      // The probe runs on a clean link: its outcome is then exact.
      LinkConfig clean;
      clean.latency_ns = link_.latency_ns;
      tb_->net.set_link(0, 1, clean);
      tb_->net.set_link(1, 0, clean);
      QpParams p;
      QpEnds ends;
      std::string e = tb_->connect(p, ends);
      if (!e.empty()) {
        errs.push_back("probe connect: " + e);
        return;
      }
      uint32_t from = f.req;
      Sge sg;
      SendWr wr;
      wr.wr_id = 1;
      wr.send_flags = SEND_SIGNALED;
      wr.num_sge = 1;
      wr.sg_list = &sg;
      if (remote) {
        // From the requester's source MR into the responder's invalidated victim.
        sg = {reinterpret_cast<uint64_t>(arena_[from]->at(f.src)), 8, f.src_mr.lkey};
        wr.opcode = WR_RDMA_WRITE;
        wr.rdma = {reinterpret_cast<uint64_t>(arena_[v.host]->at(v.region)), v.mr.rkey};
      } else {
        sg = {reinterpret_cast<uint64_t>(arena_[v.host]->at(v.region)), 8, v.mr.lkey};
        wr.opcode = WR_SEND;
        from = v.host;
      }
      const SendWr* bad = nullptr;
      int rc = tb_->host[from].eng->post_send(ends.qpn[from], &wr, &bad);
      Wc wc{};
      int n = 0;
      if (rc == 0)
        tb_->net.run_until([&] { return (n = tb_->host[from].eng->poll_cq(ends.send_cq[from], 1, &wc)) > 0; },
                           tb_->net.now_ns() + 1'000'000'000);
      WcStatus want = remote ? WC_REM_ACCESS_ERR : WC_LOC_PROT_ERR;
      ++g_probes[remote ? 0 : 1];
      if (rc != 0 || n <= 0 || wc.status != want)
        errs.push_back(std::string(remote ? "after SEND_WITH_INV" : "after LOCAL_INV") +
                       " the invalidated MR still works or fails wrongly: post " + std::to_string(rc) +
                       (n > 0 ? ", completion " + wc_str(wc) : ", no completion") + ", expected " +
                       wc_status_str(want));
    }
  }
}

void Scenario::sabotage() {
  Flow* rc = nullptr;
  for (auto& f : flows_)
    if (f.type == QPT_RC && !f.error_injected) rc = &f;
  if (!rc) return;
  auto first_ok = [](std::vector<Wc>& v) -> Wc* {
    for (auto& w : v)
      if (w.status == WC_SUCCESS) return &w;
    return nullptr;
  };
  switch (sabotage_) {
    case 1:  // a byte of remote memory
      arena_[rc->resp]->at(rc->remote)[rng_.below(rc->remote.len)] ^= 0x10;
      break;
    case 2:  // a guard byte before the first region
      arena_[rc->resp]->base()[3] ^= 1;
      break;
    case 3:  // the last byte of a receive region: past every receive buffer, never written
      arena_[rc->resp]->at(rc->recvbuf)[rc->recvbuf.len - 1] ^= 0x80;
      break;
    case 4:  // a lost send completion
      if (rc->send_wcs.empty()) return;
      rc->send_wcs.pop_back();
      break;
    case 5:  // a receive completed twice
      if (rc->recv_wcs.empty()) return;
      rc->recv_wcs.push_back(rc->recv_wcs.back());
      break;
    case 6:  // a wrong status
      if (Wc* w = first_ok(rc->send_wcs))
        w->status = WC_RETRY_EXC_ERR;
      else
        return;
      break;
    case 7:  // a wrong byte count on a receive
      if (Wc* w = first_ok(rc->recv_wcs))
        ++w->byte_len;
      else
        return;
      break;
  }
  sabotage_applied_ = true;
}

uint32_t max_recv_len(const Flow& f) {
  uint32_t m = 0;
  for (auto& op : f.ops)
    if (op.consumes_recv && op.opcode != WR_RDMA_WRITE_WITH_IMM) m = std::max(m, op.len);
  return m;
}

uint32_t Scenario::pick_size(uint32_t mtu, uint32_t max) {
  uint32_t s;
  switch (rng_.below(10)) {
    case 0:
      s = 0;
      break;
    case 1:
      s = 1;
      break;
    case 2:
      s = mtu - 1;
      break;
    case 3:
      s = mtu;
      break;
    case 4:
      s = mtu + 1;
      break;
    case 5:
      s = 2 * mtu + static_cast<uint32_t>(rng_.below(mtu));
      break;
    case 6:
      s = 3 * mtu + static_cast<uint32_t>(rng_.range(1, mtu));
      break;
    case 7:
      s = static_cast<uint32_t>(rng_.range(2, 64));
      break;
    default:
      s = static_cast<uint32_t>(rng_.range(2, mtu));
      break;
  }
  return std::min(s, max);
}

void Scenario::choose_world() {
  // Faults: a quarter of the seeds run lossless (everything must then be exact, UC and UD included).
  faults_ = rng_.below(4) != 0;
  link_.latency_ns = rng_.range(500, 10000);
  if (faults_) {
    auto rate = [&](double max) { return rng_.chance(0.5) ? rng_.unit() * max : 0.0; };
    link_.drop = rate(0.05);
    link_.duplicate = rate(0.03);
    link_.reorder = rate(0.05);
    link_.corrupt = rate(0.03);
    link_.jitter_ns = rng_.chance(0.5) ? rng_.range(0, 5000) : 0;
    link_.reorder_delay_ns = rng_.range(2000, 40000);
  }
  static constexpr uint32_t kAckN[] = {1, 2, 3, 4, 16, 64};
  static constexpr uint32_t kWin[] = {4, 16, 64, 256};
  static constexpr uint32_t kBudget[] = {1, 4, 64};
  static constexpr uint32_t kBurst[] = {1, 8, 32};
  ecfg_.ack_every_n = kAckN[rng_.below(6)];
  ecfg_.max_unacked_psns = kWin[rng_.below(4)];
  ecfg_.tx_budget = kBudget[rng_.below(3)];
  ecfg_.rx_burst = kBurst[rng_.below(3)];
  // Small object tables: the engine preallocates them, and a seed needs only a handful of each.
  ecfg_.device.max_mr = 256;
  ecfg_.device.max_ah = 16;
  ecfg_.device.max_pd = 4;
  ecfg_.device.max_qp = 16;
  ecfg_.device.max_cq = 32;
  ecfg_.device.max_srq = 4;
  // A quarter of the seeds run over IPv6 GIDs (side stream: the other choices of a seed stay as they were).
  bool ipv6 = Rng(seed_ ^ 0x1b6ull).chance(0.25);
  g_ipv6_runs += ipv6;
  tb_ = std::make_unique<Testbed>(seed_, link_, ecfg_, 4200, 256, ipv6);

  // QP pairs: 1..3 RC (each with traffic one way or both), 0..1 UC, 0..1 UD.
  uint32_t n_rc = static_cast<uint32_t>(rng_.range(1, 3));
  bool uc = rng_.chance(0.5), ud = rng_.chance(0.5);
  bool inject = rng_.chance(0.1);
  auto new_pair = [&](QpType t) {
    Pair p;
    p.params.type = t;
    p.params.path_mtu = static_cast<Mtu>(rng_.range(MTU_256, MTU_4096));
    for (auto& psn : p.params.psn) {
      // A third of the QPs start just below the 24-bit wrap so multi-packet messages cross it.
      psn = rng_.chance(0.33) ? static_cast<uint32_t>(0xffffff - rng_.below(8))
                              : static_cast<uint32_t>(rng_.below(1u << 24));
    }
    p.params.sq_sig_all = rng_.chance(0.1);
    p.params.max_rd_atomic = static_cast<uint8_t>(rng_.range(1, 16));
    p.params.max_dest_rd_atomic = p.params.max_rd_atomic;
    p.params.timeout = static_cast<uint8_t>(rng_.range(8, 12));  // 1 ms .. 17 ms
    p.params.min_rnr_timer = static_cast<uint8_t>(rng_.range(1, 4));
    pairs_.push_back(p);
    return static_cast<uint32_t>(pairs_.size() - 1);
  };
  for (uint32_t i = 0; i < n_rc; ++i) {
    uint32_t p = new_pair(QPT_RC);
    uint32_t dir = static_cast<uint32_t>(rng_.below(3));  // 0: 0->1, 1: 1->0, 2: both
    bool err_here = inject && i == 0;
    if (err_here) dir = static_cast<uint32_t>(rng_.below(2));  // an errored QP carries one flow only
    // A third of the one-way RC pairs without an injected error take their receives from an SRQ on the
    // responder (drawn from a side stream so the other choices of a seed stay as they were).
    if (dir != 2 && !err_here && srq_rng_.chance(0.33)) pairs_[p].use_srq = true;
    for (uint32_t d = 0; d < 2; ++d) {
      if (dir != 2 && dir != d) continue;
      Flow f;
      f.req = d;
      f.resp = 1 - d;
      f.pair = p;
      f.type = QPT_RC;
      f.error_injected = err_here;
      flows_.push_back(f);
    }
  }
  if (uc) {
    Flow f;
    f.pair = new_pair(QPT_UC);
    f.type = QPT_UC;
    f.req = static_cast<uint32_t>(rng_.below(2));
    f.resp = 1 - f.req;
    flows_.push_back(f);
  }
  if (ud) {
    Flow f;
    f.pair = new_pair(QPT_UD);
    f.type = QPT_UD;
    f.req = static_cast<uint32_t>(rng_.below(2));
    f.resp = 1 - f.req;
    flows_.push_back(f);
  }
  bool any_srq = false;
  for (auto& p : pairs_) any_srq |= p.use_srq;
  category_ = std::string(faults_ ? "faults" : "lossless") + (any_srq ? "+SRQ" : "") +
              (inject ? "+error" : "") + (uc ? "+UC" : "") + (ud ? "+UD" : "");
}

// Chooses each op's kind, flags and length, and the region sizes they need.
void Scenario::plan_flow(Flow& f) {
  f.mtu = mtu_to_bytes(pairs_[f.pair].params.path_mtu);
  uint32_t n = static_cast<uint32_t>(rng_.range(1, 24));
  uint32_t max_msg = f.type == QPT_UD ? f.mtu : 4 * f.mtu;
  f.remote.len = 4 * f.mtu + 64;
  uint64_t sink = 0, recv = 0, uc_remote = 0;
  for (uint32_t i = 0; i < n; ++i) {
    Op op;
    uint64_t r = rng_.below(100);
    if (f.type == QPT_RC) {
      op.opcode = r < 14   ? WR_SEND
                  : r < 24 ? WR_SEND_WITH_IMM
                  : r < 27 ? WR_SEND_WITH_INV
                  : r < 42 ? WR_RDMA_WRITE
                  : r < 52 ? WR_RDMA_WRITE_WITH_IMM
                  : r < 70 ? WR_RDMA_READ
                  : r < 80 ? WR_ATOMIC_CMP_AND_SWP
                  : r < 90 ? WR_ATOMIC_FETCH_AND_ADD
                  : r < 93 ? WR_LOCAL_INV
                           : WR_SEND;
    } else if (f.type == QPT_UC) {
      op.opcode = r < 30   ? WR_SEND
                  : r < 50 ? WR_SEND_WITH_IMM
                  : r < 80 ? WR_RDMA_WRITE
                           : WR_RDMA_WRITE_WITH_IMM;
    } else {
      op.opcode = r < 60 ? WR_SEND : WR_SEND_WITH_IMM;
    }
    switch (op.opcode) {
      case WR_ATOMIC_CMP_AND_SWP:
      case WR_ATOMIC_FETCH_AND_ADD:
        op.len = 8;
        break;
      case WR_LOCAL_INV:
        op.len = 0;
        break;
      default:
        op.len = pick_size(f.mtu, max_msg);
    }
    if (f.type == QPT_UC && (op.opcode == WR_RDMA_WRITE || op.opcode == WR_RDMA_WRITE_WITH_IMM)) {
      // UC writes go to disjoint bytes: a lost one then leaves its range either old or new, nothing else.
      if (uc_remote + op.len > f.remote.len) op.len = 0;
      op.remote_off = uc_remote;
      uc_remote += op.len;
    }
    op.consumes_recv = op.opcode == WR_SEND || op.opcode == WR_SEND_WITH_IMM ||
                       op.opcode == WR_SEND_WITH_INV || op.opcode == WR_RDMA_WRITE_WITH_IMM;
    // A tenth of UD sends carry a wrong Q_Key (drawn from a side stream, so the other choices of a seed stay
    // as they were): the receiver drops them, they consume no receive.
    if (f.type == QPT_UD && qkey_rng_.chance(0.1)) {
      op.wrong_qkey = true;
      op.consumes_recv = false;
    }
    if (op.opcode == WR_RDMA_READ || op.opcode == WR_ATOMIC_CMP_AND_SWP ||
        op.opcode == WR_ATOMIC_FETCH_AND_ADD)
      sink += op.len + 3 * 40 + 8;  // room for SGE gaps
    if (op.consumes_recv) recv += op.len + kGrh + 3 * 40 + 24;
    f.ops.push_back(std::move(op));
  }
  uint32_t extra_recvs = static_cast<uint32_t>(rng_.below(3));
  // Receive buffers as fill_ops sizes them: the message (or, for UC/UD under faults, the largest message),
  // the GRH area, up to 16 bytes of slack and two gaps of up to 40 bytes between SGEs, 8 bytes apart.
  const bool any_msg = f.type != QPT_RC && faults_;
  recv = 0;
  for (auto& op : f.ops)
    if (op.consumes_recv) recv += (any_msg ? max_recv_len(f) : op.len) + kGrh + 16 + 2 * 40 + 8;
  uint32_t extra_cap = any_msg ? max_recv_len(f) + kGrh : (f.type == QPT_UD ? f.mtu + kGrh : 4 * f.mtu);
  recv += uint64_t{extra_recvs} * (extra_cap + 2 * 8 + 8);
  if (f.error_injected) recv += extra_cap + 2 * 8 + 8;  // the invalid op's receive becomes a spare
  f.src.len = 4 * f.mtu + 64;
  f.sink.len = sink + 8;
  f.recvbuf.len = recv + 8;
  // Receives: one per consuming op plus spares; some flows post a part of them late to provoke RNR NAKs.
  uint32_t nrecv = 0;
  for (auto& op : f.ops) nrecv += op.consumes_recv;
  f.recvs.resize(nrecv + extra_recvs);
  bool late = f.type == QPT_RC && rng_.chance(0.2);
  for (uint32_t i = 0; i < f.recvs.size(); ++i) f.recvs[i].late = late && i >= nrecv / 2;
  f.late_recv_at = rng_.range(20000, 500000);
  arena_need_[f.req] += f.src.len + f.sink.len + 4 * GuardedArena::kGuard;
  arena_need_[f.resp] += f.remote.len + f.recvbuf.len + 4 * GuardedArena::kGuard;
}

void Scenario::carve_and_register() {
  for (uint32_t h = 0; h < 2; ++h) arena_[h] = std::make_unique<GuardedArena>(arena_need_[h] + 64 * 1024);
  auto reg = [&](uint32_t h, const GuardedArena::Region& r, uint32_t access, uint64_t iova, MrInfo& mr) {
    Engine& e = *tb_->host[h].eng;
    uint8_t* p = arena_[h]->at(r);
    int rc = e.reg_mr(tb_->host[h].pd, p, r.len, iova ? iova : reinterpret_cast<uint64_t>(p), access, mr);
    if (rc) {
      std::fprintf(stderr, "seed %" PRIu64 ": reg_mr failed: %d\n", seed_, rc);
      std::abort();
    }
  };
  for (auto& f : flows_) {
    Rng& g = rng_;
    f.src = arena_[f.req]->carve(f.src.len, g);
    f.sink = arena_[f.req]->carve(f.sink.len, g);
    f.remote = arena_[f.resp]->carve(f.remote.len, g, 64);
    f.recvbuf = arena_[f.resp]->carve(f.recvbuf.len, g);
    reg(f.req, f.src, 0, 0, f.src_mr);
    reg(f.req, f.sink, ACCESS_LOCAL_WRITE, 0, f.sink_mr);
    reg(f.resp, f.recvbuf, ACCESS_LOCAL_WRITE, 0, f.recv_mr);
    uint32_t acc = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
    // The peer addresses the remote region by VA (ibv_reg_mr), by an unrelated IOVA (ibv_reg_mr_iova), or
    // zero-based.
    uint64_t how = rng_.below(3);
    if (how == 2) {
      acc |= ACCESS_ZERO_BASED;
      f.remote_iova = 0;
      Engine& e = *tb_->host[f.resp].eng;
      if (e.reg_mr(tb_->host[f.resp].pd, arena_[f.resp]->at(f.remote), f.remote.len, 0, acc, f.remote_mr))
        std::abort();
    } else {
      f.remote_iova = how == 0 ? reinterpret_cast<uint64_t>(arena_[f.resp]->at(f.remote))
                               : (rng_.next() & 0x0000ffffffff0000ull) + 0x10000;
      reg(f.resp, f.remote, acc, f.remote_iova, f.remote_mr);
    }
  }
  // One victim MR per invalidation op: SEND_WITH_INV invalidates one on the responder, LOCAL_INV one on the
  // requester. Nobody else uses them.
  for (auto& f : flows_)
    for (auto& op : f.ops)
      if (op.opcode == WR_SEND_WITH_INV || op.opcode == WR_LOCAL_INV) {
        Victim v;
        v.host = op.opcode == WR_SEND_WITH_INV ? f.resp : f.req;
        v.region = arena_[v.host]->carve(64, rng_);
        reg(v.host, v.region, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE, 0, v.mr);
        op.victim = static_cast<int>(victims_.size());
        op.inv_rkey = v.mr.rkey;
        victims_.push_back(v);
      }
  for (uint32_t h = 0; h < 2; ++h) {
    uint64_t n = arena_[h]->used() + GuardedArena::kGuard;
    init_[h].assign(arena_[h]->base(), arena_[h]->base() + n);
    want_[h] = init_[h];
    mode_[h].assign(n, 0);
  }
}

// Splits [off, off+len) into 1..3 SGEs, with `gap` untouched bytes between scatter pieces.
std::vector<Piece> split(Rng& rng, uint64_t off, uint32_t len, uint32_t gap, uint32_t max_sge) {
  std::vector<Piece> v;
  uint32_t n = len < 2 ? 1 : static_cast<uint32_t>(rng.range(1, std::min<uint32_t>(3, max_sge)));
  uint32_t left = len;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t take = i + 1 == n ? left : static_cast<uint32_t>(rng.range(1, left - (n - 1 - i)));
    v.push_back({off, take});
    off += take + gap;
    left -= take;
  }
  return v;
}

void Scenario::fill_ops(Flow& f) {
  uint64_t sink = f.sink.off, recv = f.recvbuf.off;
  uint64_t wr_id = (uint64_t{static_cast<uint32_t>(&f - flows_.data())} << 32) | 1;
  bool sig_all = pairs_[f.pair].params.sq_sig_all;
  // Remote ranges read by READs or atomics since the last fence: a later write to them must be fenced.
  std::vector<std::pair<uint64_t, uint64_t>> danger;
  int bad_at = f.error_injected ? static_cast<int>(rng_.below(f.ops.size())) : -1;
  for (size_t i = 0; i < f.ops.size(); ++i) {
    Op& op = f.ops[i];
    op.wr_id = wr_id++;
    op.signaled = sig_all || rng_.chance(0.6) || i + 1 == f.ops.size();  // the last is signalled: an end mark
    if (op.signaled && !sig_all) op.flags |= SEND_SIGNALED;
    if (rng_.chance(0.1) && op.opcode != WR_LOCAL_INV) op.flags |= SEND_SOLICITED;
    bool is_send = op.opcode == WR_SEND || op.opcode == WR_SEND_WITH_IMM || op.opcode == WR_SEND_WITH_INV;
    bool is_write = op.opcode == WR_RDMA_WRITE || op.opcode == WR_RDMA_WRITE_WITH_IMM;
    bool is_atomic = op.opcode == WR_ATOMIC_CMP_AND_SWP || op.opcode == WR_ATOMIC_FETCH_AND_ADD;
    if (op.opcode == WR_SEND_WITH_IMM || op.opcode == WR_RDMA_WRITE_WITH_IMM)
      op.imm = static_cast<uint32_t>(rng_.next());
    if (is_send || is_write) {
      // Gather from anywhere in the read-only source region; SGEs may overlap.
      uint32_t n = op.len < 2 ? 1 : static_cast<uint32_t>(rng_.range(1, 3));
      uint32_t left = op.len;
      for (uint32_t k = 0; k < n; ++k) {
        uint32_t take = k + 1 == n ? left : static_cast<uint32_t>(rng_.range(1, left - (n - 1 - k)));
        uint64_t o = f.src.off + rng_.below(f.src.len - take + 1);
        op.local.push_back({o, take});
        op.data.insert(op.data.end(), arena_[f.req]->base() + o, arena_[f.req]->base() + o + take);
        left -= take;
      }
      if (op.len <= pairs_[f.pair].params.max_inline && rng_.chance(0.3)) op.flags |= SEND_INLINE;
      if (op.len == 0 && rng_.chance(0.5)) op.local.clear();  // zero-length with num_sge = 0
    }
    if (f.type == QPT_RC && (is_write || op.opcode == WR_RDMA_READ || is_atomic)) {
      uint64_t align = is_atomic ? 8 : 1;
      op.remote_off = rng_.below((f.remote.len - op.len) / align + 1) * align;
    }
    if (op.opcode == WR_RDMA_READ || is_atomic) {
      op.local = split(rng_, sink, op.len, is_atomic ? 0 : static_cast<uint32_t>(rng_.range(0, 40)), 3);
      if (is_atomic) op.local = {{sink, 8}};
      sink = op.local.empty() ? sink : op.local.back().off + op.local.back().len + 8;
      if (op.len == 0 && rng_.chance(0.5)) op.local.clear();
      op.compare_add = rng_.chance(0.5) ? rng_.next() : 0;
      op.swap = rng_.next();
    }
    if (op.opcode == WR_ATOMIC_CMP_AND_SWP && rng_.chance(0.5)) {
      // Make the compare succeed half the time: use the model's current value at that point later.
      op.compare_add = ~0ull;  // marker, resolved when the model runs (see below)
    }
    if (f.type == QPT_RC) {
      bool writes_remote = is_write || is_atomic;
      uint64_t lo = op.remote_off, hi = op.remote_off + op.len;
      bool overlap = false;
      for (auto [a, b] : danger) overlap |= lo < b && a < hi;
      if ((writes_remote && overlap) || rng_.chance(0.05)) {
        op.flags |= SEND_FENCE;
        danger.clear();
      }
      if ((op.opcode == WR_RDMA_READ || is_atomic) && op.len) danger.push_back({lo, hi});
    }
    if (static_cast<int>(i) == bad_at) {
      // Invalid: past the end of the remote MR, or a wrong key. Both must give a remote access error.
      op.bad = true;
      if (!(is_write || op.opcode == WR_RDMA_READ || is_atomic) || op.len == 0) {
        op.opcode = WR_RDMA_WRITE;
        op.consumes_recv = false;
        op.imm = 0;
        op.len = static_cast<uint32_t>(rng_.range(1, f.mtu));
        op.data.assign(op.len, 0);
        op.local = {{f.src.off, op.len}};
        std::copy_n(arena_[f.req]->base() + f.src.off, op.len, op.data.begin());
        op.flags &= ~SEND_INLINE;
      }
      op.remote_off = rng_.chance(0.5) ? f.remote.len - op.len + (is_atomic ? 8 : 1) : op.remote_off;
      if (op.remote_off + op.len <= f.remote.len) op.remote_off |= 1ull << 40;  // marks a bad rkey (below)
    }
  }
  // Receive WQEs in order; each buffer fits the message it will get (plus slack), split into SGEs.
  size_t k = 0;
  for (auto& op : f.ops) {
    if (!op.consumes_recv || op.bad) continue;
    RecvWqe& r = f.recvs[k++];
    // Under faults a UC/UD message may be lost and the next one takes its WQE: every buffer must then fit the
    // largest message (as an application's would).
    uint32_t len = f.type != QPT_RC && faults_ ? max_recv_len(f) : op.len;
    r.cap = len + (f.type == QPT_UD ? kGrh : 0) + static_cast<uint32_t>(rng_.range(0, 16));
    if (f.type == QPT_UD && r.cap > f.mtu + kGrh) r.cap = f.mtu + kGrh;
    r.pieces = split(rng_, recv, r.cap, static_cast<uint32_t>(rng_.range(0, 40)), 3);
    recv = r.pieces.back().off + r.pieces.back().len + 8;
  }
  for (; k < f.recvs.size(); ++k) {
    RecvWqe& r = f.recvs[k];
    r.cap = f.type != QPT_RC && faults_ ? max_recv_len(f) + (f.type == QPT_UD ? kGrh : 0)
                                        : (f.type == QPT_UD ? f.mtu + kGrh : 4 * f.mtu);
    r.pieces = split(rng_, recv, r.cap, 8, 3);
    recv = r.pieces.back().off + r.pieces.back().len + 8;
  }
  if (recv > f.recvbuf.off + f.recvbuf.len || sink > f.sink.off + f.sink.len) {
    std::fprintf(stderr, "seed %" PRIu64 ": test bug: receive or sink region too small\n", seed_);
    std::abort();
  }
  for (size_t i = 0; i < f.recvs.size(); ++i)
    f.recvs[i].wr_id = (uint64_t{0x80000000u | static_cast<uint32_t>(&f - flows_.data())} << 32) | i;
}

std::string Scenario::post_ops(Flow& f, size_t from, size_t to) {
  Engine& e = *tb_->host[f.req].eng;
  uint32_t qpn = pairs_[f.pair].ends.qpn[f.req];
  for (size_t i = from; i < to; ++i) {
    Op& op = f.ops[i];
    Sge sg[4];
    SendWr wr;
    wr.wr_id = op.wr_id;
    wr.opcode = op.opcode;
    wr.send_flags = op.flags;
    wr.num_sge = static_cast<int>(op.local.size());
    for (size_t k = 0; k < op.local.size(); ++k) {
      sg[k].addr = reinterpret_cast<uint64_t>(arena_[f.req]->base() + op.local[k].off);
      sg[k].length = op.local[k].len;
      bool sink = op.opcode == WR_RDMA_READ || op.opcode == WR_ATOMIC_CMP_AND_SWP ||
                  op.opcode == WR_ATOMIC_FETCH_AND_ADD;
      sg[k].lkey = sink ? f.sink_mr.lkey : f.src_mr.lkey;
    }
    wr.sg_list = sg;
    wr.imm_data = op.imm;
    wr.invalidate_rkey = op.inv_rkey;
    uint32_t rkey = f.remote_mr.rkey;
    uint64_t roff = op.remote_off;
    if (roff & (1ull << 40)) {
      roff &= ~(1ull << 40);
      rkey ^= 0x5a;  // same index, wrong key byte
    }
    wr.rdma.remote_addr = f.remote_iova + roff;
    wr.rdma.rkey = rkey;
    wr.atomic.remote_addr = f.remote_iova + roff;
    wr.atomic.rkey = rkey;
    wr.atomic.compare_add = op.compare_add;
    wr.atomic.swap = op.swap;
    if (f.type == QPT_UD) {
      wr.ud.ah = pairs_[f.pair].ends.ah[f.req];
      wr.ud.remote_qpn = pairs_[f.pair].ends.qpn[f.resp];
      // Half the time the "privileged" Q_Key: the sender's own, which both sides share here.
      wr.ud.remote_qkey = (op.wr_id & 1) ? pairs_[f.pair].params.qkey : 0x80000000u;
      if (op.wrong_qkey) wr.ud.remote_qkey = pairs_[f.pair].params.qkey ^ 0x5a5a;
    }
    const SendWr* bad = nullptr;
    int rc = e.post_send(qpn, &wr, &bad);
    if (rc) {
      char b[160];
      std::snprintf(b, sizeof b, "post_send of op %zu (opcode %u, len %u, flags 0x%x) failed: %d (%s)", i,
                    op.opcode, op.len, op.flags, rc, std::strerror(rc));
      return b;
    }
  }
  return {};
}

std::string Scenario::post_recvs(Flow& f, bool late) {
  Engine& e = *tb_->host[f.resp].eng;
  uint32_t qpn = pairs_[f.pair].ends.qpn[f.resp];
  for (auto& r : f.recvs) {
    if (r.late != late) continue;
    Sge sg[4];
    for (size_t k = 0; k < r.pieces.size(); ++k) {
      sg[k].addr = reinterpret_cast<uint64_t>(arena_[f.resp]->base() + r.pieces[k].off);
      sg[k].length = r.pieces[k].len;
      sg[k].lkey = f.recv_mr.lkey;
    }
    RecvWr wr;
    wr.wr_id = r.wr_id;
    wr.sg_list = sg;
    wr.num_sge = static_cast<int>(r.pieces.size());
    const RecvWr* bad = nullptr;
    uint32_t srq = pairs_[f.pair].params.srq[f.resp];
    int rc = srq ? e.post_srq_recv(srq, &wr, &bad) : e.post_recv(qpn, &wr, &bad);
    if (rc) return "post_recv failed: " + std::to_string(rc);
  }
  return {};
}

void Scenario::poll_all() {
  Wc wc[16];
  for (auto& f : flows_) {
    auto& ends = pairs_[f.pair].ends;
    // Two flows may share an RC pair (one each way); completions are routed to the flow by wr_id.
    for (uint32_t side = 0; side < 2; ++side) {
      for (uint32_t cq : {ends.send_cq[side], ends.recv_cq[side]}) {
        int n;
        while ((n = tb_->host[side].eng->poll_cq(cq, 16, wc)) > 0) {
          for (int i = 0; i < n; ++i) {
            uint32_t fi = static_cast<uint32_t>(wc[i].wr_id >> 32) & 0x7fffffffu;
            bool is_recv = (wc[i].wr_id >> 63) != 0;
            if (fi >= flows_.size()) {
              // Unknown wr_id: keep it on this flow so the check reports it.
              (is_recv ? f.recv_wcs : f.send_wcs).push_back(wc[i]);
              continue;
            }
            (is_recv ? flows_[fi].recv_wcs : flows_[fi].send_wcs).push_back(wc[i]);
          }
        }
      }
    }
  }
}

bool Scenario::all_done() const {
  for (auto& f : flows_) {
    // The last op is signalled; after an error every op completes.
    if (f.send_wcs.empty() || f.send_wcs.back().wr_id != f.ops.back().wr_id) {
      if (!f.error_injected) return false;
      bool err = false;
      for (auto& w : f.send_wcs) err |= w.status != WC_SUCCESS;
      if (!err) return false;
      if (f.send_wcs.back().wr_id != f.ops.back().wr_id) return false;
    }
    if (f.type == QPT_RC) {
      size_t want = 0;
      for (auto& op : f.ops) want += op.consumes_recv && !op.bad;
      if (f.error_injected) want = f.recvs.size();  // the rest are flushed when the responder QP errs
      if (f.recv_wcs.size() < want) return false;
    }
  }
  return true;
}

const char* opname(WrOpcode o) {
  switch (o) {
    case WR_SEND:
      return "SEND";
    case WR_SEND_WITH_IMM:
      return "SEND_IMM";
    case WR_SEND_WITH_INV:
      return "SEND_INV";
    case WR_RDMA_WRITE:
      return "WRITE";
    case WR_RDMA_WRITE_WITH_IMM:
      return "WRITE_IMM";
    case WR_RDMA_READ:
      return "READ";
    case WR_ATOMIC_CMP_AND_SWP:
      return "CAS";
    case WR_ATOMIC_FETCH_AND_ADD:
      return "FAA";
    case WR_LOCAL_INV:
      return "LOCAL_INV";
    default:
      return "?";
  }
}

WcOpcode wc_opcode_of(WrOpcode o) {
  switch (o) {
    case WR_RDMA_WRITE:
    case WR_RDMA_WRITE_WITH_IMM:
      return WC_RDMA_WRITE;
    case WR_RDMA_READ:
      return WC_RDMA_READ;
    case WR_ATOMIC_CMP_AND_SWP:
      return WC_COMP_SWAP;
    case WR_ATOMIC_FETCH_AND_ADD:
      return WC_FETCH_ADD;
    case WR_LOCAL_INV:
      return WC_LOCAL_INV;
    default:
      return WC_SEND;
  }
}

std::string wc_str(const Wc& w) {
  char b[200];
  std::snprintf(
      b, sizeof b, "{wr_id=0x%" PRIx64 " status=%s opcode=%u len=%u imm=0x%x flags=0x%x qp=0x%x src_qp=0x%x}",
      w.wr_id, wc_status_str(w.status), w.opcode, w.byte_len, w.imm_data, w.wc_flags, w.qp_num, w.src_qp);
  return b;
}

bool is_write_imm(const Op& op) {
  return op.opcode == WR_RDMA_WRITE_WITH_IMM;
}

// Writes `bytes` scattered over `pieces` into the expected image.
void scatter(std::vector<uint8_t>& img, const std::vector<Piece>& pieces, const uint8_t* bytes, uint64_t n) {
  for (auto& p : pieces) {
    uint64_t t = std::min<uint64_t>(p.len, n);
    std::copy_n(bytes, t, img.begin() + static_cast<std::ptrdiff_t>(p.off));
    bytes += t;
    n -= t;
  }
}
void set_mode(std::vector<uint8_t>& mode, uint64_t off, uint64_t len, uint8_t m) {
  std::fill_n(mode.begin() + static_cast<std::ptrdiff_t>(off), len, m);
}

void Scenario::check_flow(Flow& f, std::vector<std::string>& errs) {
  const uint32_t R = f.req, S = f.resp;
  std::vector<uint8_t>& wreq = want_[R];
  std::vector<uint8_t>& wresp = want_[S];
  const uint32_t resp_qpn = pairs_[f.pair].ends.qpn[S], req_qpn = pairs_[f.pair].ends.qpn[R];

  // ---- requester completions ----
  // Index of the first op with an error completion (ops.size() when none).
  std::map<uint64_t, size_t> by_id;
  for (size_t i = 0; i < f.ops.size(); ++i) by_id[f.ops[i].wr_id] = i;
  size_t first_err = f.ops.size();
  {
    size_t expect_from = 0;  // completions must come in op order
    for (size_t c = 0; c < f.send_wcs.size(); ++c) {
      const Wc& w = f.send_wcs[c];
      auto it = by_id.find(w.wr_id);
      if (it == by_id.end()) {
        fail(errs, f, "send completion with unknown wr_id " + wc_str(w));
        return;
      }
      size_t i = it->second;
      if (i < expect_from) {
        fail(errs, f, "send completion out of order or twice: op " + std::to_string(i) + " " + wc_str(w));
        return;
      }
      // Unsignalled ops skipped over must have been successful (no completion); an error always completes.
      for (size_t k = expect_from; k < i; ++k)
        if (f.ops[k].signaled) {
          fail(errs, f,
               "signalled op " + std::to_string(k) + " (" + opname(f.ops[k].opcode) +
                   ") has no completion; next was " + wc_str(w));
          return;
        }
      if (first_err < f.ops.size() && i > first_err && w.status != WC_WR_FLUSH_ERR) {
        fail(errs, f, "op after the first error not flushed: op " + std::to_string(i) + " " + wc_str(w));
        return;
      }
      if (w.status != WC_SUCCESS && first_err == f.ops.size()) {
        first_err = i;
        // A flush only follows the error that moved the QP to ERR; as the first error it hides the cause.
        if (w.status == WC_WR_FLUSH_ERR) {
          fail(errs, f,
               "the first error completion is a flush (op " + std::to_string(i) + ", " +
                   opname(f.ops[i].opcode) + "): no completion reports the error " + wc_str(w));
          return;
        }
      }
      if (w.status == WC_SUCCESS && !f.ops[i].signaled) {
        fail(errs, f, "unsignalled op " + std::to_string(i) + " completed " + wc_str(w));
        return;
      }
      if (w.status == WC_SUCCESS || (w.status != WC_WR_FLUSH_ERR && i == first_err)) {
        if (w.status == WC_SUCCESS && w.opcode != wc_opcode_of(f.ops[i].opcode)) {
          fail(errs, f, std::string("wrong WC opcode for ") + opname(f.ops[i].opcode) + " " + wc_str(w));
        }
      }
      if (w.qp_num != req_qpn) fail(errs, f, "send completion with wrong qp_num " + wc_str(w));
      expect_from = i + 1;
    }
    // What must have completed: everything signalled, and after an error every op.
    size_t last_needed = f.ops.size();
    if (first_err == f.ops.size()) {
      for (size_t k = expect_from; k < f.ops.size(); ++k)
        if (f.ops[k].signaled) {
          fail(errs, f,
               "signalled op " + std::to_string(k) + " (" + opname(f.ops[k].opcode) + ", len " +
                   std::to_string(f.ops[k].len) + ") never completed (" + std::to_string(f.send_wcs.size()) +
                   " completions)");
          break;
        }
    } else if (expect_from != last_needed) {
      fail(errs, f,
           "after the error at op " + std::to_string(first_err) + " only ops up to " +
               std::to_string(expect_from) + " completed");
    }
  }
  // Which op must be the error, and with which status.
  int bad = -1;
  for (size_t i = 0; i < f.ops.size(); ++i)
    if (f.ops[i].bad) bad = static_cast<int>(i);
  if (bad < 0 && first_err < f.ops.size()) {
    const Wc* w = nullptr;
    for (auto& x : f.send_wcs)
      if (x.wr_id == f.ops[first_err].wr_id) w = &x;
    fail(errs, f,
         "op " + std::to_string(first_err) + " (" + opname(f.ops[first_err].opcode) + ", len " +
             std::to_string(f.ops[first_err].len) +
             ") failed without a reason: " + (w ? wc_str(*w) : std::string()));
  }
  if (bad >= 0) {
    const Wc* w = nullptr;
    for (auto& x : f.send_wcs)
      if (x.wr_id == f.ops[first_err < f.ops.size() ? first_err : 0].wr_id) w = &x;
    if (first_err == f.ops.size()) {
      fail(errs, f, "invalid op " + std::to_string(bad) + " completed without error");
    } else if (w && static_cast<int>(first_err) == bad) {
      if (w->status != WC_REM_ACCESS_ERR && !(faults_ && w->status == WC_RETRY_EXC_ERR))
        fail(errs, f,
             "invalid op " + std::to_string(bad) + " (" + opname(f.ops[bad].opcode) +
                 "): expected REM_ACCESS_ERR, got " + wc_str(*w));
    } else if (w && static_cast<int>(first_err) < bad) {
      // Only a lost ACK/NAK before the responder's error can fail an earlier op, and only by retries.
      if (w->status == WC_WR_FLUSH_ERR)
        fail(errs, f,
             "the first error completion is a flush (op " + std::to_string(first_err) +
                 ", before the invalid op " + std::to_string(bad) + "): no completion reports the error " +
                 wc_str(*w));
      else if (!(faults_ && w->status == WC_RETRY_EXC_ERR))
        fail(errs, f,
             "op " + std::to_string(first_err) + " before the invalid op " + std::to_string(bad) +
                 " failed: " + wc_str(*w));
    } else if (w) {
      fail(errs, f,
           "invalid op " + std::to_string(bad) + " did not fail first; op " + std::to_string(first_err) +
               " did: " + wc_str(*w));
    }
  }

  // ---- model: remote memory, local sinks, receive buffers ----
  const uint64_t rbase = f.remote.off;
  size_t executed = bad >= 0 ? static_cast<size_t>(bad) : f.ops.size();
  for (size_t i = 0; i < f.ops.size(); ++i) {
    Op& op = f.ops[i];
    bool done = i < executed;
    bool sure = i < first_err;  // the requester saw it succeed, so its local effects are in place
    const bool rc = f.type == QPT_RC;
    switch (op.opcode) {
      case WR_RDMA_WRITE:
      case WR_RDMA_WRITE_WITH_IMM:
        if (rc) {
          if (done)
            std::copy(op.data.begin(), op.data.end(),
                      wresp.begin() + static_cast<std::ptrdiff_t>(rbase + op.remote_off));
        } else {
          std::copy(op.data.begin(), op.data.end(),
                    wresp.begin() + static_cast<std::ptrdiff_t>(rbase + op.remote_off));
          if (faults_)
            set_mode(mode_[S], rbase + op.remote_off, op.len, 1);  // decided below from the recv WCs
        }
        break;
      case WR_RDMA_READ:
        if (done) {
          scatter(wreq, op.local, wresp.data() + rbase + op.remote_off, op.len);
          if (!sure)
            for (auto& p : op.local) set_mode(mode_[R], p.off, p.len, 2);
        }
        break;
      case WR_ATOMIC_CMP_AND_SWP:
      case WR_ATOMIC_FETCH_AND_ADD:
        if (done) {
          uint8_t* t = wresp.data() + rbase + op.remote_off;
          uint64_t orig;
          std::memcpy(&orig, t, 8);
          uint64_t nv = orig;
          if (op.opcode == WR_ATOMIC_FETCH_AND_ADD)
            nv = orig + op.compare_add;
          else if (orig == op.compare_add)
            nv = op.swap;
          std::memcpy(t, &nv, 8);
          if (!op.local.empty()) {
            scatter(wreq, op.local, reinterpret_cast<const uint8_t*>(&orig), 8);
            if (!sure) set_mode(mode_[R], op.local[0].off, 8, 2);
          }
        }
        break;
      default:
        break;
    }
  }

  // ---- responder receive completions ----
  auto recv_index = [&](const Wc& w) -> int64_t {
    for (size_t k = 0; k < f.recvs.size(); ++k)
      if (f.recvs[k].wr_id == w.wr_id) return static_cast<int64_t>(k);
    return -1;
  };
  auto check_recv_wc = [&](const Wc& w, const Op& op, const char* where) {
    bool is_write = op.opcode == WR_RDMA_WRITE_WITH_IMM;
    uint32_t want_len = op.len + (f.type == QPT_UD ? kGrh : 0);
    WcOpcode want_op = is_write ? WC_RECV_RDMA_WITH_IMM : WC_RECV;
    bool want_imm = op.opcode == WR_SEND_WITH_IMM || is_write;
    bool want_inv = op.opcode == WR_SEND_WITH_INV;
    std::string e;
    if (w.status != WC_SUCCESS) e += " status";
    if (w.opcode != want_op) e += " opcode";
    if (w.byte_len != want_len) e += " byte_len(want " + std::to_string(want_len) + ")";
    if (!!(w.wc_flags & WC_WITH_IMM) != want_imm || (want_imm && w.imm_data != op.imm)) e += " imm";
    if (!!(w.wc_flags & WC_WITH_INV) != want_inv || (want_inv && w.imm_data != op.inv_rkey)) e += " inv";
    if (w.qp_num != resp_qpn) e += " qp_num";
    if (f.type == QPT_UD && (w.src_qp != req_qpn || !(w.wc_flags & WC_GRH))) e += " src_qp/GRH";
    if (!e.empty())
      fail(errs, f,
           std::string(where) + ": receive of " + opname(op.opcode) + " len " + std::to_string(op.len) +
               " wrong:" + e + " " + wc_str(w));
  };
  auto place_recv = [&](size_t k, const Op& op) {
    // The message lands in the receive buffer's SGEs (after the GRH area for UD); nothing else changes.
    const RecvWqe& r = f.recvs[k];
    if (op.opcode == WR_RDMA_WRITE_WITH_IMM) return;
    std::vector<Piece> ps = r.pieces;
    if (f.type == QPT_UD) {
      uint32_t skip = kGrh;
      std::vector<Piece> q;
      for (auto p : ps) {
        uint32_t s = std::min(skip, p.len);
        set_mode(mode_[S], p.off, s, 2);  // the GRH area: the engine writes the IP header there
        skip -= s;
        if (p.len > s) q.push_back({p.off + s, p.len - s});
      }
      ps = q;
    }
    scatter(wresp, ps, op.data.data(), op.len);
  };
  std::vector<size_t> consuming;  // op indices that consume a receive, in order
  for (size_t i = 0; i < f.ops.size(); ++i)
    if (f.ops[i].consumes_recv && !f.ops[i].bad) consuming.push_back(i);

  if (f.type == QPT_RC) {
    size_t ok = 0, flushed = 0;
    for (size_t c = 0; c < f.recv_wcs.size(); ++c) {
      const Wc& w = f.recv_wcs[c];
      int64_t k = recv_index(w);
      if (k != static_cast<int64_t>(c)) {
        fail(errs, f,
             "receive completion " + std::to_string(c) + " is for WQE " + std::to_string(k) +
                 " (not in order, twice, or unknown) " + wc_str(w));
        return;
      }
      if (w.status == WC_WR_FLUSH_ERR) {
        ++flushed;
        continue;
      }
      if (flushed) {
        fail(errs, f, "successful receive after a flushed one " + wc_str(w));
        return;
      }
      if (c >= consuming.size()) {
        fail(errs, f,
             "receive " + std::to_string(c) + " completed but only " + std::to_string(consuming.size()) +
                 " messages were sent " + wc_str(w));
        return;
      }
      check_recv_wc(w, f.ops[consuming[c]], "RC");
      place_recv(c, f.ops[consuming[c]]);
      ++ok;
    }
    size_t want_ok = 0;
    for (size_t i : consuming) want_ok += i < executed;
    if (ok != want_ok)
      fail(errs, f, "RC: " + std::to_string(ok) + " receives completed, expected " + std::to_string(want_ok));
    if (bad >= 0 && ok + flushed != f.recvs.size())
      fail(errs, f,
           "RC after error: " + std::to_string(ok + flushed) + " of " + std::to_string(f.recvs.size()) +
               " receives completed (the rest must be flushed)");
    if (bad >= 0) {
      for (uint32_t side : {R, S}) {
        QpAttr a;
        tb_->host[side].eng->query_qp(pairs_[f.pair].ends.qpn[side], a);
        if (a.qp_state != QPS_ERR)
          fail(errs, f,
               "after the remote access error host" + std::to_string(side) + "'s QP is in " +
                   qp_state_str(a.qp_state) + ", not ERR");
      }
    }
  } else {
    // UC / UD: receives complete in WQE order; each matches a sent message, in send order for UC; without
    // faults exactly all of them, in order.
    size_t next_msg = 0;
    std::vector<bool> msg_seen(consuming.size());
    for (size_t c = 0; c < f.recv_wcs.size(); ++c) {
      const Wc& w = f.recv_wcs[c];
      int64_t k = recv_index(w);
      if (k != static_cast<int64_t>(c)) {
        fail(
            errs, f,
            "receive completion " + std::to_string(c) + " is for WQE " + std::to_string(k) + " " + wc_str(w));
        return;
      }
      // Find the message: same kind, length, immediate and bytes.
      int64_t m = -1;
      // UC keeps message order only on a link that keeps frame order: like rxe, a UC responder takes any
      // first/only packet whatever its PSN (it cannot tell late from new), so a reordered or duplicated
      // message is delivered out of order or twice.
      bool ordered = !faults_ ||
                     (f.type == QPT_UC && link_.reorder == 0 && link_.duplicate == 0 && link_.jitter_ns == 0);
      size_t from = ordered ? next_msg : 0;
      for (size_t j = from; j < consuming.size() && m < 0; ++j) {
        const Op& op = f.ops[consuming[j]];
        uint32_t want_len = op.len + (f.type == QPT_UD ? kGrh : 0);
        bool is_write = op.opcode == WR_RDMA_WRITE_WITH_IMM;
        if (w.byte_len != want_len || (w.opcode == WC_RECV_RDMA_WITH_IMM) != is_write) continue;
        if (!!(w.wc_flags & WC_WITH_IMM) != (op.imm != 0 || op.opcode == WR_SEND_WITH_IMM || is_write))
          continue;
        if ((w.wc_flags & WC_WITH_IMM) && w.imm_data != op.imm) continue;
        if (!is_write) {
          // Compare the bytes in the buffer with the message.
          std::vector<uint8_t> got;
          uint32_t skip = f.type == QPT_UD ? kGrh : 0, need = op.len;
          for (auto& p : f.recvs[c].pieces) {
            const uint8_t* b = arena_[S]->base() + p.off;
            uint32_t s = std::min(skip, p.len);
            skip -= s;
            uint32_t t = std::min(need, p.len - s);
            got.insert(got.end(), b + s, b + s + t);
            need -= t;
          }
          if (got != op.data) continue;
        }
        m = static_cast<int64_t>(j);
      }
      if (m < 0) {
        fail(errs, f,
             "receive " + std::to_string(c) + " matches no sent message (or is out of order) " + wc_str(w));
        return;
      }
      if (!faults_ && static_cast<size_t>(m) != c)
        fail(errs, f, "lossless: receive " + std::to_string(c) + " got message " + std::to_string(m));
      const Op& op = f.ops[consuming[m]];
      check_recv_wc(w, op, f.type == QPT_UC ? "UC" : "UD");
      if (f.type == QPT_UC && faults_) {
        // A lost packet of an earlier message may have left bytes in this WQE beyond this message.
        for (auto& p : f.recvs[c].pieces) set_mode(mode_[S], p.off, p.len, 2);
      }
      place_recv(c, op);
      if (f.type == QPT_UC && faults_ && !is_write_imm(op)) {
        // The message's own bytes are exact again (a WRITE_WITH_IMM puts nothing in the buffer).
        uint32_t need = op.len;
        for (auto& p : f.recvs[c].pieces) {
          uint32_t t = std::min(need, p.len);
          set_mode(mode_[S], p.off, t, 0);
          need -= t;
        }
      }
      if (is_write_imm(op)) {
        // A completed WRITE_WITH_IMM proves the whole write landed.
        set_mode(mode_[S], rbase + op.remote_off, op.len, 0);
      }
      msg_seen[m] = true;
      next_msg = static_cast<size_t>(m) + 1;
    }
    if (!faults_ && f.recv_wcs.size() != consuming.size())
      fail(errs, f,
           "lossless: " + std::to_string(f.recv_wcs.size()) + " receives completed, expected " +
               std::to_string(consuming.size()));
    if (faults_ && f.type == QPT_UC) {
      // Receive WQEs never completed may hold the first packets of lost messages.
      for (size_t c = f.recv_wcs.size(); c < f.recvs.size(); ++c)
        for (auto& p : f.recvs[c].pieces) set_mode(mode_[S], p.off, p.len, 2);
    }
  }
}

void Scenario::check_memory(std::vector<std::string>& errs) {
  for (uint32_t h = 0; h < 2; ++h) {
    std::string g = arena_[h]->check_guards();
    if (!g.empty()) errs.push_back("host" + std::to_string(h) + ": " + g);
    const uint8_t* got = arena_[h]->base();
    uint64_t n = want_[h].size(), bad = 0, first = n;
    for (uint64_t i = 0; i < n; ++i) {
      bool ok = got[i] == want_[h][i] || (mode_[h][i] == 1 && got[i] == init_[h][i]) || mode_[h][i] == 2;
      if (!ok) {
        if (first == n) first = i;
        ++bad;
      }
    }
    if (bad) {
      // Name the region the first bad byte is in.
      std::string where = "outside any region";
      for (size_t fi = 0; fi < flows_.size(); ++fi) {
        const Flow& f = flows_[fi];
        auto in = [&](const GuardedArena::Region& r) { return first >= r.off && first < r.off + r.len; };
        char b[120];
        auto name = [&](const char* what, const GuardedArena::Region& r) {
          std::snprintf(b, sizeof b, "%s %s region (flow %zu, +%llu)",
                        f.type == QPT_RC   ? "RC"
                        : f.type == QPT_UC ? "UC"
                                           : "UD",
                        what, fi, static_cast<unsigned long long>(first - r.off));
          where = b;
        };
        if (f.req == h && in(f.src)) name("source", f.src);
        if (f.req == h && in(f.sink)) name("READ/atomic sink", f.sink);
        if (f.resp == h && in(f.remote)) name("remote", f.remote);
        if (f.resp == h && in(f.recvbuf)) name("receive", f.recvbuf);
      }
      char b[200];
      std::snprintf(
          b, sizeof b,
          "memory differs from the model in the %s: %llu bytes on host%u, first at arena offset %llu, "
          "got 0x%02x want 0x%02x (initially 0x%02x)",
          where.c_str(), static_cast<unsigned long long>(bad), h, static_cast<unsigned long long>(first),
          got[first], want_[h][first], init_[h][first]);
      errs.push_back(b);
    }
  }
}

std::vector<std::string> Scenario::run() {
  std::vector<std::string> errs;
  choose_world();
  for (auto& f : flows_) plan_flow(f);
  for (auto& p : pairs_) {
    if (p.use_srq) {
      // On the responder of the pair's only flow.
      for (auto& f : flows_)
        if (&pairs_[f.pair] == &p) {
          SrqAttr a;
          a.max_wr = 128;
          a.max_sge = 4;
          int rc = tb_->host[f.resp].eng->create_srq(tb_->host[f.resp].pd, a, p.params.srq[f.resp]);
          if (rc) return {"create_srq failed: " + std::to_string(rc)};
        }
    }
    std::string e = tb_->connect(p.params, p.ends);
    if (!e.empty()) return {"connect: " + e};
  }
  carve_and_register();
  for (auto& f : flows_) fill_ops(f);
  // Resolve "compare equal" CAS markers against the model so half the compares succeed: run the model of
  // each RC flow up to that op (cheap: flows are short).
  for (auto& f : flows_) {
    if (f.type != QPT_RC) continue;
    std::vector<uint8_t> remote(
        init_[f.resp].begin() + static_cast<std::ptrdiff_t>(f.remote.off),
        init_[f.resp].begin() + static_cast<std::ptrdiff_t>(f.remote.off + f.remote.len));
    for (auto& op : f.ops) {
      if (op.bad) break;
      uint8_t* t = remote.data() + op.remote_off;
      if (op.opcode == WR_RDMA_WRITE || op.opcode == WR_RDMA_WRITE_WITH_IMM)
        std::copy(op.data.begin(), op.data.end(), t);
      if (op.opcode == WR_ATOMIC_CMP_AND_SWP || op.opcode == WR_ATOMIC_FETCH_AND_ADD) {
        uint64_t v;
        std::memcpy(&v, t, 8);
        if (op.opcode == WR_ATOMIC_CMP_AND_SWP && op.compare_add == ~0ull) op.compare_add = v;
        uint64_t nv =
            op.opcode == WR_ATOMIC_FETCH_AND_ADD ? v + op.compare_add : (v == op.compare_add ? op.swap : v);
        std::memcpy(t, &nv, 8);
      }
    }
  }
  if (verbose_) {
    std::printf("seed %" PRIu64
                " [%s]: link latency %llu ns jitter %llu drop %.3f dup %.3f reorder %.3f corrupt %.3f; "
                "ack_every_n %u window %u tx_budget %u rx_burst %u\n",
                seed_, category_.c_str(), (unsigned long long)link_.latency_ns,
                (unsigned long long)link_.jitter_ns, link_.drop, link_.duplicate, link_.reorder,
                link_.corrupt, ecfg_.ack_every_n, ecfg_.max_unacked_psns, ecfg_.tx_budget, ecfg_.rx_burst);
    for (size_t fi = 0; fi < flows_.size(); ++fi) {
      Flow& f = flows_[fi];
      auto& p = pairs_[f.pair].params;
      std::printf(
          " flow %zu: %s host%u->host%u qp 0x%x->0x%x mtu %u psn 0x%06x->0x%06x sig_all %d timeout %u "
          "max_rd_atomic %u%s\n",
          fi,
          f.type == QPT_RC   ? "RC"
          : f.type == QPT_UC ? "UC"
                             : "UD",
          f.req, f.resp, pairs_[f.pair].ends.qpn[f.req], pairs_[f.pair].ends.qpn[f.resp], f.mtu, p.psn[f.req],
          p.psn[f.resp], p.sq_sig_all, p.timeout, p.max_rd_atomic,
          f.recvs.empty() || !f.recvs.back().late ? "" : " (late receives)");
      for (size_t i = 0; i < f.ops.size(); ++i) {
        auto& op = f.ops[i];
        std::printf("   op %2zu %-9s len %5u roff %5llu sges %zu flags 0x%x%s%s\n", i, opname(op.opcode),
                    op.len, (unsigned long long)(op.remote_off & 0xffffffffff), op.local.size(), op.flags,
                    op.signaled ? " signalled" : "", op.bad ? " INVALID" : "");
        if (op.opcode == WR_RDMA_READ || op.opcode == WR_ATOMIC_CMP_AND_SWP ||
            op.opcode == WR_ATOMIC_FETCH_AND_ADD)
          for (auto& pc : op.local)
            std::printf("        sink +%llu len %u\n", (unsigned long long)(pc.off - f.sink.off), pc.len);
      }
    }
  }

  if (verbose_ && std::getenv("URXE_SIM_TRACE")) {
    // Every frame as it enters the link (before faults), one line each.
    tb_->net.on_transmit = [this](uint32_t from, uint32_t to, const uint8_t* d, uint32_t len) {
      wire::Packet p;
      wire::ParseOptions o;
      o.verify_icrc = false;
      auto e = wire::parse_frame(wire::ByteSpan(d, len), p, o);
      if (e != wire::ParseError::ok) {
        std::printf("  %10" PRIu64 " %u->%u unparsable (%s)\n", tb_->net.now_ns(), from, to,
                    std::string(wire::to_string(e)).c_str());
        return;
      }
      std::printf("  %10" PRIu64 " %u->%u %-28s qp 0x%06x psn 0x%06x%s len %4u", tb_->net.now_ns(), from, to,
                  std::string(p.info->name).c_str(), p.bth.dqpn, p.bth.psn, p.bth.ack_req ? " A" : "  ",
                  p.payload_len);
      if (p.present & wire::kAeth) std::printf(" aeth %02x msn %u", p.aeth.syndrome, p.aeth.msn);
      if (p.present & wire::kReth) std::printf(" reth len %u", p.reth.dma_len);
      std::printf("\n");
    };
  }
  // Post: receives first (except late ones), then each flow's ops in 1..3 batches at random times.
  for (auto& f : flows_) {
    std::string e = post_recvs(f, false);
    if (!e.empty()) return {e};
  }
  struct Post {
    uint64_t at;
    size_t flow, from, to;
    bool recvs;
  };
  std::vector<Post> posts;
  for (size_t fi = 0; fi < flows_.size(); ++fi) {
    Flow& f = flows_[fi];
    size_t n = f.ops.size(), at = 0;
    uint32_t batches = static_cast<uint32_t>(rng_.range(1, 3));
    uint64_t when = 0;  // batches of one flow are posted in order, at increasing times
    for (uint32_t b = 0; b < batches && at < n; ++b) {
      size_t to = b + 1 == batches ? n : at + rng_.below(n - at + 1);
      posts.push_back({when, fi, at, to, false});
      when += rng_.range(0, 150000);
      at = to;
    }
    if (!f.recvs.empty() && f.recvs.back().late) posts.push_back({f.late_recv_at, fi, 0, 0, true});
  }
  std::stable_sort(posts.begin(), posts.end(), [](const Post& a, const Post& b) { return a.at < b.at; });
  for (auto& p : posts) {
    tb_->net.run_until(
        [&] {
          poll_all();
          return false;
        },
        p.at);
    std::string e = p.recvs ? post_recvs(flows_[p.flow], true) : post_ops(flows_[p.flow], p.from, p.to);
    if (!e.empty()) return {"flow " + std::to_string(p.flow) + ": " + e};
  }
  const uint64_t deadline = tb_->net.now_ns() + 30'000'000'000ull;  // 30 s of virtual time
  bool done = tb_->net.run_until(
      [&] {
        poll_all();
        return all_done();
      },
      deadline);
  // Let duplicates and late frames settle, then take the final completions.
  tb_->net.run_until(
      [&] {
        poll_all();
        return false;
      },
      tb_->net.now_ns() + 50'000'000);
  poll_all();
  if (sabotage_) sabotage();
  if (!done)
    errs.push_back("did not finish within 30 s of virtual time (stalled at " +
                   std::to_string(tb_->net.now_ns()) + " ns)");
  if (verbose_)
    for (size_t fi = 0; fi < flows_.size(); ++fi) {
      for (auto& w : flows_[fi].send_wcs) std::printf(" flow %zu send wc %s\n", fi, wc_str(w).c_str());
      for (auto& w : flows_[fi].recv_wcs) std::printf(" flow %zu recv wc %s\n", fi, wc_str(w).c_str());
    }
  for (auto& f : flows_) check_flow(f, errs);
  if (errs.empty()) probe_victims(errs);
  check_memory(errs);
  // Corrupted frames: each one the link corrupted must have been dropped by an engine as bad (ICRC/parse).
  LinkStats ls = tb_->net.total_stats();
  uint64_t dropped_bad = 0;
  for (auto& h : tb_->host)
    dropped_bad += h.eng->counter(Counter::rx_drop_icrc) + h.eng->counter(Counter::rx_drop_parse);
  // At rest the engines hold no port buffers: every received frame was freed, every allocated one sent or
  // freed.
  if (done && tb_->net.in_flight() == 0)
    for (auto& h : tb_->host)
      if (h.port->held_by_user() || h.port->rx_pending())
        errs.push_back("host" + std::to_string(h.index) + " at rest still holds " +
                       std::to_string(h.port->held_by_user()) + " port buffers (" +
                       std::to_string(h.port->rx_pending()) + " frames not taken from rx)");
  // Wrong Q_Keys: without faults every such UD message reaches the receiver and is dropped there.
  if (!faults_) {
    for (auto& f : flows_) {
      if (f.type != QPT_UD) continue;
      uint64_t wrong = 0;
      for (auto& op : f.ops) wrong += op.wrong_qkey;
      uint64_t got = tb_->host[f.resp].eng->counter(Counter::rx_drop_qkey);
      if (got != wrong)
        errs.push_back("UD: " + std::to_string(wrong) +
                       " messages with a wrong Q_Key sent, receiver counted " + std::to_string(got) +
                       " Q_Key drops");
    }
  }
  if (ls.rx_overflow == 0 && dropped_bad != ls.corrupted)
    errs.push_back("the link corrupted " + std::to_string(ls.corrupted) + " frames but the engines dropped " +
                   std::to_string(dropped_bad) + " as bad");
  if (!errs.empty() || verbose_) summary_ = tb_->describe_counters();
  return errs;
}

uint64_t env_u64(const char* name, uint64_t dflt) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 0) : dflt;
}

// The checks themselves: a run that passes must fail once one byte, completion or field is damaged.
TEST(EnginePropertyTest, CheckerCatchesDamage) {
  uint64_t tried = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    if (!Scenario(seed, false).run().empty()) continue;  // only seeds that pass untouched
    for (int k = 1; k <= Scenario::kSabotages; ++k) {
      Scenario s(seed, false, k);
      auto errs = s.run();
      if (!s.sabotage_applied()) continue;
      ++tried;
      EXPECT_FALSE(errs.empty()) << "seed " << seed << ": damage " << k << " went unnoticed";
    }
  }
  EXPECT_GT(tried, 100u);
}

TEST(EnginePropertyTest, RandomWorkloadsMatchModel) {
  if (const char* one = std::getenv("URXE_SIM_SEED"); one && *one) {
    uint64_t seed = std::strtoull(one, nullptr, 0);
    Scenario s(seed, true);
    auto errs = s.run();
    std::printf("%s\n", s.summary().c_str());
    for (auto& e : errs) ADD_FAILURE() << "seed " << seed << ": " << e;
    return;
  }
  // ctest runs the seeds in shards (URXE_SIM_SHARD=i/n, set per test) so they spread over cores and each
  // stays short under ASan; URXE_SIM_SEEDS is the total over all shards.
  uint64_t first = env_u64("URXE_SIM_FIRST_SEED", 1), n = env_u64("URXE_SIM_SEEDS", 10000);
  if (const char* sh = std::getenv("URXE_SIM_SHARD"); sh && *sh) {
    unsigned i = 0, k = 1;
    if (std::sscanf(sh, "%u/%u", &i, &k) == 2 && k > 0 && i < k) {
      uint64_t lo = first + n * i / k, hi = first + n * (i + 1) / k;
      first = lo;
      n = hi - lo;
    }
  }
  std::printf("engine property test: seeds [%" PRIu64 ", %" PRIu64
              ") (URXE_SIM_SEEDS / URXE_SIM_FIRST_SEED; reproduce one with URXE_SIM_SEED=N)\n",
              first, first + n);
  std::map<std::string, Tally> tally;
  std::map<std::string, uint64_t> reasons;
  std::vector<std::pair<uint64_t, std::string>> failures;
  auto t0 = std::chrono::steady_clock::now();
  uint64_t vtime = 0;
  for (uint64_t seed = first; seed < first + n; ++seed) {
    Scenario s(seed, false);
    auto errs = s.run();
    vtime += s.virtual_ns();
    auto& t = tally[s.category()];
    ++t.runs;
    if (!errs.empty()) {
      ++t.failed;
      // Reason class: the text up to the first digit-free prefix after "): ".
      // Reason class: the first error without its numbers, e.g. "receive # matches no sent message".
      std::string e = errs[0];
      auto p = e.rfind("memory differs", 0) == 0 ? std::string::npos : e.find("): ");
      std::string cls, raw = p == std::string::npos ? e : e.substr(p + 3);
      raw = raw.substr(0, std::min({raw.find('{'), raw.find(" (flow"), raw.find(": got")}));
      for (char ch : raw.substr(0, std::min<size_t>(raw.size(), 80))) {
        bool digit = (ch >= '0' && ch <= '9') || ch == 'x';
        if (!digit)
          cls += ch;
        else if (cls.empty() || cls.back() != '#')
          cls += '#';
      }
      ++reasons[cls];
      if (failures.size() < env_u64("URXE_SIM_LIST_FAILURES", 20))
        failures.push_back(
            {seed, "[" + s.category() + "] " + errs[0] +
                       (errs.size() > 1 ? " (+" + std::to_string(errs.size() - 1) + " more)" : "")});
    }
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%" PRIu64 " seeds in %.2f s wall (%.2f ms/seed), %.1f s of virtual time\n", n, secs,
              1000 * secs / static_cast<double>(n), static_cast<double>(vtime) / 1e9);
  std::printf("  IPv6 GIDs in %" PRIu64 " seeds, IPv4 in the others\n", g_ipv6_runs);
  std::printf("  invalidation probes: %" PRIu64 " after SEND_WITH_INV, %" PRIu64 " after LOCAL_INV\n",
              g_probes[0], g_probes[1]);
  uint64_t total_failed = 0;
  for (auto& [cat, t] : tally) {
    std::printf("  %-28s %6" PRIu64 " runs %6" PRIu64 " failed\n", cat.c_str(), t.runs, t.failed);
    total_failed += t.failed;
  }
  for (auto& [r, c] : reasons) std::printf("  failure class x%-5" PRIu64 " %s\n", c, r.c_str());
  for (auto& [seed, e] : failures)
    ADD_FAILURE() << "seed " << seed << ": " << e << "\n  reproduce: URXE_SIM_SEED=" << seed << " "
                  << ::testing::internal::GetArgvs()[0] << " --gtest_filter=EnginePropertyTest.*";
  EXPECT_EQ(total_failed, 0u) << "failing seeds: see above";
}

}  // namespace
}  // namespace urxe::sim
