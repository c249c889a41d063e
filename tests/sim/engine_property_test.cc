// The engine property test (engine_property.h): Scenario::run drives one seed; the tests run 10,000 seeds in
// shards and check that the checker catches damage.
//
// URXE_SIM_SEEDS=N (default 10000) and URXE_SIM_FIRST_SEED=S choose the seeds; URXE_SIM_SEED=S runs one seed
// with a trace of its scenario.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "tests/sim/engine_property.h"

namespace urxe::sim::property {

// The XRC pair's only flow: a domain on its target host with the flow's XRC SRQs (on the host's two PDs
// and two new CQs), then the initiator and the target.
std::string Scenario::connect_xrc(Pair& p) {
  Flow* f = nullptr;
  for (auto& g : flows_)
    if (&pairs_[g.pair] == &p) f = &g;
  Engine& e = *tb_->host[f->resp].eng;
  int rc;
  if ((rc = e.alloc_xrcd(p.xrcd))) return "alloc_xrcd failed: " + std::to_string(rc);
  if (!pd2_[f->resp] && (rc = e.alloc_pd(pd2_[f->resp]))) return "alloc_pd failed: " + std::to_string(rc);
  uint32_t cq[2];
  for (auto& c : cq)
    if ((rc = e.create_cq(p.params.cqe, c))) return "create_cq failed: " + std::to_string(rc);
  for (auto& x : f->xsrqs) {
    SrqAttr a;
    a.max_wr = 128;
    a.max_sge = 4;
    x.cq = cq[x.cqi];
    if ((rc = e.create_xrc_srq(p.xrcd, x.pdi ? pd2_[f->resp] : tb_->host[f->resp].pd, x.cq, a, x.srqn)))
      return "create_xrc_srq failed: " + std::to_string(rc);
  }
  ++g_xrc_flows;
  g_xrc_srqs += f->xsrqs.size();
  std::string err = tb_->connect_xrc(p.params, f->req, p.xrcd, p.ends);
  return err.empty() ? err : "connect_xrc: " + err;
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
    if (p.xrc) {
      std::string e = connect_xrc(p);
      if (!e.empty()) return {e};
      continue;
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
          fi, kind(f), f.req, f.resp, pairs_[f.pair].ends.qpn[f.req], pairs_[f.pair].ends.qpn[f.resp], f.mtu,
          p.psn[f.req], p.psn[f.resp], p.sq_sig_all, p.timeout, p.max_rd_atomic,
          f.recvs.empty() || !f.recvs.back().late ? "" : " (late receives)");
      for (size_t i = 0; i < f.ops.size(); ++i) {
        auto& op = f.ops[i];
        std::printf("   op %2zu %-9s len %5u roff %5llu sges %zu flags 0x%x%s%s", i, opname(op.opcode),
                    op.len, (unsigned long long)(op.remote_off & 0xffffffffff), op.local.size(), op.flags,
                    op.signaled ? " signalled" : "",
                    op.bad ? (op.wrong_pd ? " INVALID (other PD)" : " INVALID") : "");
        if (op.srq >= 0) {
          const XrcSrq& x = f.xsrqs[static_cast<size_t>(op.srq)];
          std::printf(" -> XRC SRQ %u (pd %u, cq %u)", x.srqn, x.pdi, x.cq);
        }
        std::printf("\n");
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
  std::printf("  flows reaching their remote region through a memory window: %" PRIu64 "\n", g_window_flows);
  std::printf("  XRC flows: %" PRIu64 ", naming %" PRIu64 " XRC SRQs\n", g_xrc_flows, g_xrc_srqs);
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

}  // namespace urxe::sim::property
