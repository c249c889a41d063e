// The engine property test (engine_property.h), part 2: the checks of a finished run against the reference
// model (memory images, completions, invalidation probes) and the sabotage that proves they catch damage.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/sim/engine_property.h"

namespace urxe::sim::property {

// A window invalidated by a successful SEND_WITH_INV or LOCAL_INV must be FREE afterwards: a BIND_MW of it
// on a fresh QP of its host succeeds (a still-bound type-2 window fails with MW_BIND_ERR), and a WRITE from
// the peer through its old key fails with REM_ACCESS_ERR. Each probe uses a fresh RC pair (the error moves
// it to ERR) and the first victim of each kind.
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
      const std::string what = remote ? "after SEND_WITH_INV" : "after LOCAL_INV";
      ++g_probes[remote ? 0 : 1];
      auto complete = [&](uint32_t host, const SendWr& wr, Wc& wc) {
        const SendWr* bad = nullptr;
        int rc = tb_->host[host].eng->post_send(ends.qpn[host], &wr, &bad);
        int n = 0;
        if (rc == 0)
          tb_->net.run_until(
              [&] { return (n = tb_->host[host].eng->poll_cq(ends.send_cq[host], 1, &wc)) > 0; },
              tb_->net.now_ns() + 1'000'000'000);
        return rc == 0 && n > 0;
      };
      SendWr bind;
      bind.wr_id = 1;
      bind.opcode = WR_BIND_MW;
      bind.send_flags = SEND_SIGNALED;
      const uint32_t key = (op.inv_rkey & ~0xffu) | ((op.inv_rkey + 1) & 0xff);
      bind.bind_mw = {op.inv_rkey, key,
                      v.mr.lkey,   reinterpret_cast<uint64_t>(arena_[v.host]->at(v.region)),
                      64,          ACCESS_REMOTE_WRITE};
      Wc wc{};
      if (!complete(v.host, bind, wc) || wc.status != WC_SUCCESS) {
        errs.push_back(what + " the window cannot be bound again: " + wc_str(wc));
        continue;
      }
      // From the peer's source MR into the window through its old key.
      const uint32_t from = 1 - v.host;
      const Flow* src = nullptr;
      for (auto& g : flows_)
        if (g.req == from) src = &g;
      if (!src) continue;  // no source region on the peer
      Sge sg{reinterpret_cast<uint64_t>(arena_[from]->at(src->src)), 8, src->src_mr.lkey};
      SendWr wr;
      wr.wr_id = 2;
      wr.send_flags = SEND_SIGNALED;
      wr.num_sge = 1;
      wr.sg_list = &sg;
      wr.opcode = WR_RDMA_WRITE;
      wr.rdma = {reinterpret_cast<uint64_t>(arena_[v.host]->at(v.region)), op.inv_rkey};
      wc = Wc{};
      if (!complete(from, wr, wc) || wc.status != WC_REM_ACCESS_ERR)
        errs.push_back(what + " the window's old key still works or fails wrongly: " + wc_str(wc) +
                       ", expected " + wc_status_str(WC_REM_ACCESS_ERR));
    }
  }
}

void Scenario::sabotage() {
  // The last RC flow, an XRC one if there is one
  Flow* rc = nullptr;
  for (auto& f : flows_)
    if (f.type == QPT_RC && !f.error_injected && (!rc || f.xrc || !rc->xrc)) rc = &f;
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
      rc->recv_wc_cq.push_back(rc->recv_wc_cq.back());
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
    case 8: {  // a receive completion on another CQ of its host: another XRC SRQ's, or the QP's send CQ
      if (rc->recv_wcs.empty()) return;
      uint32_t other = pairs_[rc->pair].ends.send_cq[rc->resp];
      for (auto& x : rc->xsrqs)
        if (x.cq != static_cast<uint32_t>(rc->recv_wc_cq[0])) other = x.cq;
      rc->recv_wc_cq[0] = uint64_t{rc->resp} << 32 | other;
      break;
    }
  }
  sabotage_applied_ = true;
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
    case WR_ATOMIC_WRITE:
      return WC_ATOMIC_WRITE;
    default:
      return WC_SEND;
  }
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
      if (f.send_wc_cq[c] != (uint64_t{R} << 32 | pairs_[f.pair].ends.send_cq[R]))
        fail(errs, f, "send completion on another CQ than the QP's send CQ " + wc_str(w));
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
      case WR_ATOMIC_WRITE:  // RC only; a duplicate is not placed again
        if (done)
          std::copy(op.data.begin(), op.data.end(),
                    wresp.begin() + static_cast<std::ptrdiff_t>(rbase + op.remote_off));
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

  // The CQ a receive WQE completes on: the QP's receive CQ (also with an SRQ), or its XRC SRQ's CQ.
  auto check_recv_cq = [&](size_t c, size_t k) {
    const uint32_t cq =
        f.xrc ? f.xsrqs[static_cast<size_t>(f.recvs[k].srq)].cq : pairs_[f.pair].ends.recv_cq[S];
    if (f.recv_wc_cq[c] == (uint64_t{S} << 32 | cq)) return;
    fail(errs, f,
         "receive completion " + std::to_string(c) + " polled from host" +
             std::to_string(f.recv_wc_cq[c] >> 32) + "'s CQ " +
             std::to_string(static_cast<uint32_t>(f.recv_wc_cq[c])) + ", not host" + std::to_string(S) +
             "'s CQ " + std::to_string(cq) + " " + wc_str(f.recv_wcs[c]));
  };
  if (f.xrc) {
    // Per XRC SRQ: its WQEs complete in order, on its CQ, each with the next message that named the SRQ.
    // Nothing is flushed: the SRQs keep their WQEs when the target QP errs.
    const size_t ns = f.xsrqs.size();
    std::vector<std::vector<size_t>> wqes(ns), msgs(ns);
    for (size_t k = 0; k < f.recvs.size(); ++k) wqes[static_cast<size_t>(f.recvs[k].srq)].push_back(k);
    for (size_t i : consuming) msgs[static_cast<size_t>(f.ops[i].srq)].push_back(i);
    std::vector<size_t> next(ns);
    size_t ok = 0;
    for (size_t c = 0; c < f.recv_wcs.size(); ++c) {
      const Wc& w = f.recv_wcs[c];
      const int64_t k = recv_index(w);
      if (k < 0) {
        fail(errs, f, "receive completion " + std::to_string(c) + " for an unknown WQE " + wc_str(w));
        return;
      }
      const size_t s = static_cast<size_t>(f.recvs[static_cast<size_t>(k)].srq), j = next[s]++;
      const std::string srq = "XRC SRQ " + std::to_string(f.xsrqs[s].srqn);
      if (j >= wqes[s].size() || wqes[s][j] != static_cast<size_t>(k)) {
        fail(errs, f,
             srq + ": receive completion " + std::to_string(c) + " is for WQE " + std::to_string(k) +
                 ", not its SRQ's next (not in order, or twice) " + wc_str(w));
        return;
      }
      if (j >= msgs[s].size()) {
        fail(errs, f,
             srq + ": receive " + std::to_string(j) + " completed but only " +
                 std::to_string(msgs[s].size()) + " messages named it " + wc_str(w));
        return;
      }
      check_recv_cq(c, static_cast<size_t>(k));
      check_recv_wc(w, f.ops[msgs[s][j]], "XRC");
      place_recv(static_cast<size_t>(k), f.ops[msgs[s][j]]);
      ++ok;
    }
    size_t want_ok = 0;
    for (size_t i : consuming) want_ok += i < executed;
    if (ok != want_ok)
      fail(errs, f,
           "XRC: " + std::to_string(ok) + " receives completed, expected " + std::to_string(want_ok));
  }
  if (f.type == QPT_RC && !f.xrc) {
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
      check_recv_cq(c, c);
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
  }
  if (f.type == QPT_RC) {
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
      check_recv_cq(c, c);
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
          std::snprintf(b, sizeof b, "%s %s region (flow %zu, +%llu)", kind(f), what, fi,
                        static_cast<unsigned long long>(first - r.off));
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

}  // namespace urxe::sim::property
