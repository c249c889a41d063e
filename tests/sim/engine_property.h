// Randomized property test of the engine against a reference model, in a simulated network with faults.
//
// Each seed builds two engines joined by one SimNet link (random drop, duplication, reordering, jitter,
// corruption, or none), several QP pairs (RC in one or both directions, UC, UD) with random PSNs (some near
// the 24-bit wrap), path MTUs and engine tunables, and posts a random mix of every work request type with
// sizes 0, 1, MTU-1, MTU, MTU+1, multi-MTU, one to three SGEs, inline, fence and solicited flags, some
// receives posted late (RNR), IPv4 or (a quarter of the seeds) IPv6 GIDs, and in some seeds one invalid
// request (remote access error); a third of the one-way RC pairs take their receives from an SRQ, and a
// third of the RC/UC flows reach their remote region only through a type-2 memory window. Two fifths of
// the one-way RC pairs are XRC instead (IBTA Annex A14): an XRC_SEND initiator and an XRC_RECV target whose
// domain holds 2-3 XRC SRQs on two PDs and two CQs; each WR names one of them (its receives, its CQ, its PD
// for the R_Key: the remote region is registered in both PDs, a WR uses the rkey of its SRQ's PD; the
// invalid request may instead use the other PD's). Then it checks:
//  - every byte of both hosts' memory equals the reference model (registered regions as the model says,
//    everything else untouched: guard bytes around every region, gaps between SGEs, receive-buffer tails);
//  - RC: every receive completed exactly once, in order, with the right length, opcode, flags and immediate;
//    XRC: the same per SRQ, on that SRQ's CQ, with the target QP's number (no flush: an SRQ outlives its QPs'
//    errors); UC/UD: every receive completion matches a message that was sent (all of them, in order,
//    without faults); every completion on the CQ it belongs to;
//  - every signalled WR completed exactly once, in order, with the right status and opcode; after an error
//    the failing WR and every later one complete with an error status (flushed), the first of them not a
//    flush; both QPs end in ERR and the responder's receives are flushed;
//  - every corrupted frame was dropped by the receiving engine; UD messages sent with a wrong Q_Key (a tenth)
//    are dropped and counted;
//  - after a successful SEND_WITH_INV / LOCAL_INV the invalidated type-2 window is FREE (binds again) and
//    its old key opens nothing;
//  - at rest the engines hold no port buffers.
// The model applies each flow's operations in order to plain buffers; flows use disjoint memory, so their
// interleaving does not matter. RDMA READ results are only defined if no later unfenced WR of the same QP
// writes the bytes read (a duplicate READ may be re-executed), so the generator fences such writes, as an
// application must.
//
// URXE_SIM_SEEDS=N (default 10000) and URXE_SIM_FIRST_SEED=S choose the seeds; URXE_SIM_SEED=S runs one seed
// with a trace of its scenario.
#pragma once

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

namespace urxe::sim::property {

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
  int victim = -1;            // SEND_WITH_INV / LOCAL_INV: index of the window invalidated
  int srq = -1;               // XRC: the flow's XRC SRQ (index in Flow::xsrqs) the WR names
  bool wrong_pd = false;      // XRC invalid op: the rkey of the remote region's MR in the other PD
  std::vector<uint8_t> data;  // the message bytes (gathered) for sends and writes
};

struct RecvWqe {
  uint64_t wr_id = 0;
  std::vector<Piece> pieces;
  uint32_t cap = 0;
  bool late = false;
  int srq = -1;  // XRC: the XRC SRQ (index in Flow::xsrqs) it is posted to
};

struct XrcSrq {
  uint32_t pdi = 0, cqi = 0;  // which of the target's two PDs and of the flow's two CQs
  uint32_t srqn = 0, cq = 0;  // handles
};

struct Flow {
  uint32_t req = 0, resp = 0;  // host indices
  uint32_t pair = 0;           // QP pair
  QpType type = QPT_RC;
  uint32_t mtu = 1024;
  GuardedArena::Region src, sink, remote, recvbuf;
  MrInfo src_mr{}, sink_mr{}, remote_mr{}, recv_mr{};
  uint32_t remote_rkey = 0;  // the remote region's rkey: remote_mr's, or a type-2 window's over it
  uint64_t remote_iova = 0;  // peer-visible address of remote region offset 0
  std::vector<Op> ops;
  std::vector<RecvWqe> recvs;
  uint64_t late_recv_at = 0;
  std::vector<Wc> send_wcs, recv_wcs;
  std::vector<uint64_t> send_wc_cq, recv_wc_cq;  // where each completion was polled: host << 32 | CQ
  bool error_injected = false;
  // XRC (type stays QPT_RC: the model is RC's): the target's XRC SRQs, and the remote and receive regions
  // registered again in its second PD.
  bool xrc = false;
  std::vector<XrcSrq> xsrqs;
  MrInfo remote_mr_pd2{}, recv_mr_pd2{};
  uint64_t remote_iova_pd2 = 0;
};

struct Victim {
  uint32_t host = 0;
  GuardedArena::Region region;
  MrInfo mr{};        // the region's MR (MW_BIND, no remote right)
  uint32_t rkey = 0;  // the type-2 window over it that the op invalidates
};

struct Pair {
  QpParams params;
  QpEnds ends;
  bool use_srq = false;
  bool xrc = false;  // XRC_SEND -> XRC_RECV (Testbed::connect_xrc), one flow
  uint32_t xrcd = 0;
};

inline const char* kind(const Flow& f) {
  return f.xrc ? "XRC" : f.type == QPT_RC ? "RC" : f.type == QPT_UC ? "UC" : "UD";
}

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
        mw_rng_(seed ^ 0x3a11d0ull),
        xrc_rng_(seed ^ 0x0a14ull),
        sabotage_(sabotage) {}
  // Checker self-test: after the run, damage one thing the checks must notice (1..kSabotages); applied()
  // tells whether this seed offered something to damage.
  static constexpr int kSabotages = 8;
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
  std::string connect_xrc(Pair& p);
  // Binds a new type-2 window on `host`'s QP of `pair` over [addr, addr + len) of `mr`; returns its rkey.
  uint32_t bind_window(uint32_t host, const Pair& pair, const MrInfo& mr, uint64_t addr, uint64_t len,
                       uint32_t access);
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
                  kind(f), f.req, f.resp, pairs_[f.pair].ends.qpn[f.req], pairs_[f.pair].ends.qpn[f.resp]);
    errs.push_back(b + what);
  }

  uint64_t seed_;
  bool verbose_;
  Rng rng_;
  Rng qkey_rng_;
  Rng srq_rng_;
  Rng mw_rng_;
  Rng xrc_rng_;
  uint32_t pd2_[2] = {0, 0};  // a second PD per host (XRC SRQs), allocated when needed
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

inline uint64_t g_ipv6_runs;     // seeds run over IPv6 GIDs, for the summary
inline uint64_t g_probes[2];     // invalidation probes run (remote, local), for the summary
inline uint64_t g_window_flows;  // flows whose remote region was reached through a memory window
inline uint64_t g_xrc_flows;     // XRC flows, and the XRC SRQs they named
inline uint64_t g_xrc_srqs;

// Shared by the scenario, its checks and the summary.
inline const char* opname(WrOpcode o) {
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
    case WR_ATOMIC_WRITE:
      return "ATOMIC_WRITE";
    default:
      return "?";
  }
}

inline std::string wc_str(const Wc& w) {
  char b[200];
  std::snprintf(
      b, sizeof b, "{wr_id=0x%" PRIx64 " status=%s opcode=%u len=%u imm=0x%x flags=0x%x qp=0x%x src_qp=0x%x}",
      w.wr_id, wc_status_str(w.status), w.opcode, w.byte_len, w.imm_data, w.wc_flags, w.qp_num, w.src_qp);
  return b;
}

}  // namespace urxe::sim::property
