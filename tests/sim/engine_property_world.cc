// The engine property test (engine_property.h), part 1: a seed's world (link, engines, QP pairs, flows),
// its memory, its random work requests and posting and polling them.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/sim/engine_property.h"

namespace urxe::sim::property {

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
  ecfg_.device.max_mw = 64;
  ecfg_.device.max_ah = 16;
  ecfg_.device.max_pd = 4;
  ecfg_.device.max_qp = 16;
  ecfg_.device.max_cq = 48;
  ecfg_.device.max_srq = 16;
  ecfg_.device.max_xrcds = 4;
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
    // Two fifths of the one-way RC pairs (the erring one too) are XRC instead (another side stream).
    if (dir != 2 && xrc_rng_.chance(0.4)) {
      pairs_[p].xrc = true;
      pairs_[p].use_srq = false;
    }
    for (uint32_t d = 0; d < 2; ++d) {
      if (dir != 2 && dir != d) continue;
      Flow f;
      f.req = d;
      f.resp = 1 - d;
      f.pair = p;
      f.type = QPT_RC;
      f.error_injected = err_here;
      f.xrc = pairs_[p].xrc;
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
  bool any_srq = false, any_xrc = false;
  for (auto& p : pairs_) {
    any_srq |= p.use_srq;
    any_xrc |= p.xrc;
  }
  category_ = std::string(faults_ ? "faults" : "lossless") + (any_srq ? "+SRQ" : "") +
              (any_xrc ? "+XRC" : "") + (inject ? "+error" : "") + (uc ? "+UC" : "") + (ud ? "+UD" : "");
}

// Chooses each op's kind, flags and length, and the region sizes they need.
void Scenario::plan_flow(Flow& f) {
  f.mtu = mtu_to_bytes(pairs_[f.pair].params.path_mtu);
  if (f.xrc) {
    // 2-3 XRC SRQs: the first two on different PDs and different CQs, a third on either PD and either CQ.
    f.xsrqs.resize(xrc_rng_.range(2, 3));
    const uint32_t swap = static_cast<uint32_t>(xrc_rng_.below(2));
    for (uint32_t i = 0; i < f.xsrqs.size(); ++i) {
      f.xsrqs[i].pdi = i < 2 ? i : static_cast<uint32_t>(xrc_rng_.below(2));
      f.xsrqs[i].cqi = i < 2 ? i ^ swap : static_cast<uint32_t>(xrc_rng_.below(2));
    }
  }
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
                  : r < 97 ? WR_ATOMIC_WRITE
                           : WR_SEND;
      // XRC: no ATOMIC WRITE (no XRC opcode: post_send refuses it), no SEND_WITH_INV (its victim would be a
      // type-2 window bound by the target, which posts nothing). Each WR names one of the flow's XRC SRQs.
      if (f.xrc && op.opcode == WR_ATOMIC_WRITE) op.opcode = WR_RDMA_WRITE;
      if (f.xrc && op.opcode == WR_SEND_WITH_INV) op.opcode = WR_SEND_WITH_IMM;
      if (f.xrc) op.srq = static_cast<int>(xrc_rng_.below(f.xsrqs.size()));
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
      case WR_ATOMIC_WRITE:
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

uint32_t Scenario::bind_window(uint32_t host, const Pair& pair, const MrInfo& mr, uint64_t addr, uint64_t len,
                               uint32_t access) {
  Engine& e = *tb_->host[host].eng;
  uint32_t mw = 0;
  if (e.alloc_mw(tb_->host[host].pd, MW_TYPE_2, mw)) std::abort();
  SendWr wr;
  wr.wr_id = ~0ull;  // completes before any op is posted; polled here
  wr.opcode = WR_BIND_MW;
  wr.send_flags = SEND_SIGNALED;
  const uint32_t key = (mw & ~0xffu) | ((mw + 0x11) & 0xff);
  wr.bind_mw = {mw, key, mr.lkey, addr, len, access};
  const SendWr* bad = nullptr;
  if (e.post_send(pair.ends.qpn[host], &wr, &bad)) std::abort();
  Wc wc{};
  tb_->net.run_until([&] { return e.poll_cq(pair.ends.send_cq[host], 1, &wc) > 0; },
                     tb_->net.now_ns() + 1'000'000'000);
  if (wc.wr_id != ~0ull || wc.status != WC_SUCCESS || wc.opcode != WC_BIND_MW) {
    std::fprintf(stderr, "seed %" PRIu64 ": BIND_MW failed: %s\n", seed_, wc_status_str(wc.status));
    std::abort();
  }
  return key;
}

void Scenario::carve_and_register() {
  for (uint32_t h = 0; h < 2; ++h) arena_[h] = std::make_unique<GuardedArena>(arena_need_[h] + 64 * 1024);
  auto reg = [&](uint32_t h, const GuardedArena::Region& r, uint32_t access, uint64_t iova, MrInfo& mr,
                 uint32_t pd = 0) {
    Engine& e = *tb_->host[h].eng;
    uint8_t* p = arena_[h]->at(r);
    int rc = e.reg_mr(pd ? pd : tb_->host[h].pd, p, r.len, iova ? iova : reinterpret_cast<uint64_t>(p),
                      access, mr);
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
    // A third of the RC/UC flows with a non-zero-based MR reach their remote region only through a type-2
    // window over all of it (a side stream: the other choices of a seed stay as they were), bound by the
    // responder's QP; the MR itself then grants no remote right, the window all of them.
    const bool window = f.type != QPT_UD && how != 2 && mw_rng_.chance(0.33) && !f.xrc;
    if (window) acc = ACCESS_LOCAL_WRITE | ACCESS_MW_BIND;
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
    if (window) {
      const bool zero = mw_rng_.chance(0.5);
      f.remote_rkey = bind_window(f.resp, pairs_[f.pair], f.remote_mr, f.remote_iova, f.remote.len,
                                  ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC |
                                      (zero ? uint32_t{ACCESS_ZERO_BASED} : 0u));
      if (zero) f.remote_iova = 0;
      ++g_window_flows;
    } else {
      f.remote_rkey = f.remote_mr.rkey;
    }
    if (f.xrc) {
      // The same regions in the target's second PD: a WR reaches the remote region through the MR of its
      // SRQ's PD (addressed by VA, an unrelated IOVA or zero-based, like the first), receives into it.
      const uint32_t pd2 = pd2_[f.resp];
      reg(f.resp, f.recvbuf, ACCESS_LOCAL_WRITE, 0, f.recv_mr_pd2, pd2);
      const uint64_t how2 = xrc_rng_.below(3);
      f.remote_iova_pd2 = how2 == 0   ? reinterpret_cast<uint64_t>(arena_[f.resp]->at(f.remote))
                          : how2 == 1 ? (xrc_rng_.next() & 0x0000ffffffff0000ull) + 0x10000
                                      : 0;
      uint32_t acc2 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
      if (how2 == 2) {
        Engine& e = *tb_->host[f.resp].eng;
        if (e.reg_mr(pd2, arena_[f.resp]->at(f.remote), f.remote.len, 0, acc2 | ACCESS_ZERO_BASED,
                     f.remote_mr_pd2))
          std::abort();
      } else {
        reg(f.resp, f.remote, acc2, f.remote_iova_pd2, f.remote_mr_pd2, pd2);
      }
    }
  }
  // One victim per invalidation op, a type-2 window over 64 bytes of its own (an MR is never invalidated):
  // SEND_WITH_INV invalidates one on the responder, LOCAL_INV one on the requester, each bound by the
  // flow's QP on that host. Nobody else uses them.
  for (auto& f : flows_)
    for (auto& op : f.ops)
      if (op.opcode == WR_SEND_WITH_INV || op.opcode == WR_LOCAL_INV) {
        Victim v;
        v.host = op.opcode == WR_SEND_WITH_INV ? f.resp : f.req;
        v.region = arena_[v.host]->carve(64, rng_);
        const uint64_t va = reinterpret_cast<uint64_t>(arena_[v.host]->at(v.region));
        reg(v.host, v.region, ACCESS_LOCAL_WRITE | ACCESS_MW_BIND, 0, v.mr);
        v.rkey = bind_window(v.host, pairs_[f.pair], v.mr, va, 64, ACCESS_REMOTE_WRITE);
        op.victim = static_cast<int>(victims_.size());
        op.inv_rkey = v.rkey;
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
    // ATOMIC WRITE: gathered (or inline) like a WRITE, placed like an atomic (8 bytes, aligned)
    const bool is_awrite = op.opcode == WR_ATOMIC_WRITE;
    if (op.opcode == WR_SEND_WITH_IMM || op.opcode == WR_RDMA_WRITE_WITH_IMM)
      op.imm = static_cast<uint32_t>(rng_.next());
    if (is_send || is_write || is_awrite) {
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
    if (f.type == QPT_RC && (is_write || op.opcode == WR_RDMA_READ || is_atomic || is_awrite)) {
      uint64_t align = is_atomic || is_awrite ? 8 : 1;
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
      bool writes_remote = is_write || is_atomic || is_awrite;
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
      const uint64_t in_range = op.remote_off;  // (a send's 0: its length is at most one MTU)
      if (!(is_write || op.opcode == WR_RDMA_READ || is_atomic || is_awrite) || op.len == 0) {
        op.opcode = WR_RDMA_WRITE;
        op.consumes_recv = false;
        op.imm = 0;
        op.len = static_cast<uint32_t>(rng_.range(1, f.mtu));
        op.data.assign(op.len, 0);
        op.local = {{f.src.off, op.len}};
        std::copy_n(arena_[f.req]->base() + f.src.off, op.len, op.data.begin());
        op.flags &= ~SEND_INLINE;
      }
      op.remote_off =
          rng_.chance(0.5) ? f.remote.len - op.len + (is_atomic || is_awrite ? 8 : 1) : op.remote_off;
      if (op.remote_off + op.len <= f.remote.len) op.remote_off |= 1ull << 40;  // marks a bad rkey (below)
      if (f.xrc && xrc_rng_.chance(0.5)) {
        // XRC: in range, with a valid rkey of the remote region, but of its MR in the other PD than the named
        // SRQ's.
        op.remote_off = in_range;
        op.wrong_pd = true;
      }
    }
  }
  // Receive WQEs in order; each buffer fits the message it will get (plus slack), split into SGEs.
  size_t k = 0;
  for (auto& op : f.ops) {
    if (!op.consumes_recv || op.bad) continue;
    RecvWqe& r = f.recvs[k++];
    r.srq = op.srq;
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
    if (f.xrc) r.srq = static_cast<int>(xrc_rng_.below(f.xsrqs.size()));
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
    uint32_t rkey = f.remote_rkey;
    uint64_t iova = f.remote_iova;
    if (f.xrc) {
      wr.xrc_remote_srqn = f.xsrqs[static_cast<size_t>(op.srq)].srqn;
      // The region's MR in the named SRQ's PD (the invalid op: in the other one)
      if ((f.xsrqs[static_cast<size_t>(op.srq)].pdi == 1) != op.wrong_pd) {
        rkey = f.remote_mr_pd2.rkey;
        iova = f.remote_iova_pd2;
      }
    }
    uint64_t roff = op.remote_off;
    if (roff & (1ull << 40)) {
      roff &= ~(1ull << 40);
      rkey ^= 0x5a;  // same index, wrong key byte
    }
    wr.rdma.remote_addr = iova + roff;
    wr.rdma.rkey = rkey;
    wr.atomic.remote_addr = iova + roff;
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
    // XRC: to the WQE's XRC SRQ, through the receive region's MR in that SRQ's PD
    const XrcSrq* x = f.xrc ? &f.xsrqs[static_cast<size_t>(r.srq)] : nullptr;
    for (size_t k = 0; k < r.pieces.size(); ++k) {
      sg[k].addr = reinterpret_cast<uint64_t>(arena_[f.resp]->base() + r.pieces[k].off);
      sg[k].length = r.pieces[k].len;
      sg[k].lkey = x && x->pdi ? f.recv_mr_pd2.lkey : f.recv_mr.lkey;
    }
    RecvWr wr;
    wr.wr_id = r.wr_id;
    wr.sg_list = sg;
    wr.num_sge = static_cast<int>(r.pieces.size());
    const RecvWr* bad = nullptr;
    uint32_t srq = x ? x->srqn : pairs_[f.pair].params.srq[f.resp];
    int rc = srq ? e.post_srq_recv(srq, &wr, &bad) : e.post_recv(qpn, &wr, &bad);
    if (rc) return "post_recv failed: " + std::to_string(rc);
  }
  return {};
}

void Scenario::poll_all() {
  Wc wc[16];
  // Two flows may share an RC pair (one each way); completions are routed to the flow by wr_id, with the
  // CQ they were polled from.
  auto drain = [&](Flow& f, uint32_t side, uint32_t cq) {
    int n;
    while (cq && (n = tb_->host[side].eng->poll_cq(cq, 16, wc)) > 0) {
      for (int i = 0; i < n; ++i) {
        uint32_t fi = static_cast<uint32_t>(wc[i].wr_id >> 32) & 0x7fffffffu;
        bool is_recv = (wc[i].wr_id >> 63) != 0;
        Flow& to = fi < flows_.size() ? flows_[fi] : f;  // unknown wr_id: this flow's check reports it
        (is_recv ? to.recv_wcs : to.send_wcs).push_back(wc[i]);
        (is_recv ? to.recv_wc_cq : to.send_wc_cq).push_back(uint64_t{side} << 32 | cq);
      }
    }
  };
  for (auto& f : flows_) {
    auto& ends = pairs_[f.pair].ends;
    for (uint32_t side = 0; side < 2; ++side)
      for (uint32_t cq : {ends.send_cq[side], ends.recv_cq[side]}) drain(f, side, cq);
    for (auto& x : f.xsrqs) drain(f, f.resp, x.cq);
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
      bool before_bad = true;
      for (auto& op : f.ops) {
        before_bad &= !op.bad;
        want += op.consumes_recv && !op.bad && (before_bad || !f.xrc);
      }
      // RC: the rest are flushed when the responder QP errs; XRC: the SRQs keep them
      if (f.error_injected && !f.xrc) want = f.recvs.size();
      if (f.recv_wcs.size() < want) return false;
    }
  }
  return true;
}

}  // namespace urxe::sim::property
