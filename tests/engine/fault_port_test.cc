// FaultPort (engine/fault_port.h): fault rules in the rule language applied between an engine and its port,
// in the simulator. What users rely on: each action does to the protocol what the same fault on a wire
// would (the engine's recovery and counters show it), the rule counters say what happened, nothing changes
// without rules, rules can change while traffic runs, and a rule set replays the same run.
#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <memory>
#include <thread>
#include <tuple>

#include "engine/fault_port.h"
#include "tests/sim/loopback.h"

namespace urxe::engine::test {
namespace {

using wire::FaultAction;
using wire::FaultDir;

wire::ParseError parse(const std::vector<uint8_t>& f, wire::Packet& p) {
  return wire::parse_frame(wire::ByteSpan(f.data(), f.size()), p);
}
wire::ParseError parse(const PacketBuf& b, wire::Packet& p) {
  return wire::parse_frame(wire::ByteSpan(b.data, b.len), p);
}

// Every frame on the wire, as bytes, in order, with the side that sent it.
using WireTrace = std::vector<std::pair<uint32_t, std::vector<uint8_t>>>;

// Records every frame on the loopback's wire. A RETH's VA (the peer's memory, at another address in each
// run) is written as its offset from the peer's buffer, and the ICRC again over that, so runs compare.
void record(Loopback& l, WireTrace& out) {
  l.link.net.on_transmit = [&l, &out](uint32_t from, uint32_t, const uint8_t* d, uint32_t len) {
    std::vector<uint8_t> f(d, d + len);
    wire::Packet p;
    if (parse(f, p) == wire::ParseError::ok && (p.present & wire::kReth) &&
        p.info->transport == wire::Transport::rc) {
      wire::store_be64(f.data() + p.bth_offset + wire::kBthLen, p.reth.va - l.node[1 - from].addr());
      wire::write_icrc(wire::MutByteSpan(f.data(), p.frame_len));
    }
    out.emplace_back(from, std::move(f));
  };
}

// Where two traces first differ (their length when one is a prefix of the other), -1 when equal.
long first_difference(const WireTrace& a, const WireTrace& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); i++)
    if (a[i] != b[i]) return static_cast<long>(i);
  return a.size() == b.size() ? -1 : static_cast<long>(std::min(a.size(), b.size()));
}

// A Loopback with a FaultPort under each engine and an RC QP pair (qa on A, qb on B); run() honours the
// FaultPorts' held frames' due times.
struct FaultLoop {
  FaultPort* fp[2] = {nullptr, nullptr};
  Loopback lb;
  WireTrace wire;
  uint32_t qa = 0, qb = 0;
  explicit FaultLoop(FaultPortConfig cfg = {}, size_t mem = 1 << 20)
      : lb(EngineConfig{}, 1500, mem, false, [this, cfg](int side, Port& inner) {
          auto p = std::make_unique<FaultPort>(inner, lb.link.clock, cfg);
          fp[side] = p.get();
          return p;
        }) {
    for (int s = 0; s < 2; s++) lb.wakes.push_back([this, s] { return fp[s]->next_due_ns(); });
    record(lb, wire);
    std::tie(qa, qb) = lb.connect(QPT_RC);
  }
  // Rules for one side's FaultPort, ids 1, 2, ...
  void rules(int side, std::initializer_list<const char*> texts) {
    std::vector<std::pair<uint32_t, wire::FaultRule>> v;
    for (const char* t : texts) {
      wire::FaultParse r = wire::parse_fault_rule(t);
      ASSERT_TRUE(r) << t << ": " << r.error;
      v.emplace_back(static_cast<uint32_t>(v.size() + 1), *r.rule);
    }
    fp[side]->set_rules(v);
  }
  uint64_t count(int side, Counter c) { return lb.node[side].eng->counter(c); }
  // The one rule's counters on a side (after a burst ran).
  FaultRuleStats only_rule(int side) {
    const auto s = fp[side]->stats();
    EXPECT_EQ(s.size(), 1u);
    return s.empty() ? FaultRuleStats{} : s[0];
  }

  // Posts an RDMA WRITE of `len` bytes from A's offset 0 to B's offset 0x40000 and waits for its completion.
  Wc write_and_wait(uint32_t len, uint8_t seed) {
    fill(lb.a().mem, 0, len, seed);
    Sge sge{lb.a().addr(0), len, lb.a().mr.lkey};
    post(lb.a(), qa, make_rdma_wr(WR_RDMA_WRITE, &sge, lb.b().addr(0x40000), lb.b().mr.rkey, 7));
    auto wc = lb.poll(lb.a(), 1);
    EXPECT_EQ(wc.size(), 1u);
    return wc.empty() ? Wc{} : wc[0];
  }
  void expect_written(uint32_t len) {
    EXPECT_EQ(0, std::memcmp(lb.a().mem.data(), lb.b().mem.data() + 0x40000, len));
  }
  // write_and_wait, expecting success and the bytes at B.
  void write_ok(uint32_t len, uint8_t seed) {
    EXPECT_EQ(write_and_wait(len, seed).status, WC_SUCCESS);
    expect_written(len);
  }
  // A 64-byte RDMA WRITE from A to B's offset 0 that completes with `status` (expect_remote_error).
  void write_fails(WcStatus status) {
    Sge sge{lb.a().addr(0), 64, lb.a().mr.lkey};
    expect_remote_error(lb, qa, make_rdma_wr(WR_RDMA_WRITE, &sge, lb.b().addr(0), lb.b().mr.rkey, 5), status);
  }

  // Posts `n` SENDs of `len` bytes each from A (receives posted on B first) and returns B's completions.
  std::vector<Wc> sends(int n, uint32_t len, int extra_recvs = 0) {
    for (int i = 0; i < n + extra_recvs; i++) post_recv(lb.b(), qb, 0x1000 * i, 0x1000, 100 + i);
    for (int i = 0; i < n; i++) {
      fill(lb.a().mem, 0x1000 * i, len, static_cast<uint8_t>(i + 1));
      Sge sge{lb.a().addr(0x1000 * i), len, lb.a().mr.lkey};
      post(lb.a(), qa, make_wr(WR_SEND, &sge, 1, 200 + i));
    }
    auto wa = lb.poll(lb.a(), n);
    EXPECT_EQ(wa.size(), static_cast<size_t>(n));
    for (auto& w : wa) EXPECT_EQ(w.status, WC_SUCCESS) << wc_status_str(w.status);
    auto wb = lb.poll(lb.b(), n);
    lb.settle();
    Wc more[4];
    EXPECT_EQ(lb.b().eng->poll_cq(lb.b().cq, 4, more), 0);  // each message once
    for (size_t i = 0; i < wb.size(); i++) {
      EXPECT_EQ(wb[i].status, WC_SUCCESS);
      EXPECT_EQ(wb[i].wr_id, 100 + i);
      EXPECT_EQ(0,
                std::memcmp(lb.a().mem.data() + 0x1000 * i, lb.b().mem.data() + 0x1000 * i, wb[i].byte_len));
    }
    return wb;
  }
};

TEST(FaultPortTest, DropOneWriteMiddleGoBackN) {
  FaultLoop t;
  t.rules(0, {"dir tx opcode rc_rdma_write_middle psn +2 first 1 drop"});
  t.write_ok(8192, 3);  // 8 packets of 1024: FIRST, 6 MIDDLE, LAST
  const FaultRuleStats s = t.only_rule(0);
  EXPECT_EQ(s.id, 1u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.applied, 1u);
  EXPECT_EQ(t.fp[0]->dropped(), 1u);
  EXPECT_EQ(count_naks(t.lb.link, 1, wire::AethType::nak, 0), 1);  // PSN sequence error
  EXPECT_EQ(t.count(0, Counter::rcvd_seq_err), 1u);
  EXPECT_GE(t.count(1, Counter::out_of_seq_request), 1u);
  // PSN 0x102 went twice through A's FaultPort (dropped, then resent) but reached the wire once
  const auto psns = psns_of(t.lb.link, 0, wire::op::write_middle);
  EXPECT_EQ(std::count(psns.begin(), psns.end(), 0x102u), 1);
}

TEST(FaultPortTest, DropOneAckAtRequester) {
  FaultLoop t;
  t.rules(0, {"dir rx class ack first 1 drop"});
  const auto wb = t.sends(1, 64);
  EXPECT_EQ(wb.size(), 1u);
  EXPECT_EQ(t.only_rule(0).hits, 1u);
  EXPECT_EQ(t.fp[0]->dropped(), 1u);
  // the requester resent (tail loss probe or timeout) and the responder answered the duplicate
  EXPECT_GE(t.count(1, Counter::duplicate_request), 1u);
  EXPECT_EQ(t.count(0, Counter::retry_exceeded_err), 0u);
}

TEST(FaultPortTest, DuplicateSendExecutedOnce) {
  FaultLoop t;
  t.rules(0, {"dir tx opcode rc_send_only first 1 duplicate"});
  const auto wb = t.sends(1, 64, /*extra_recvs=*/1);
  EXPECT_EQ(wb.size(), 1u);
  EXPECT_EQ(t.fp[0]->duplicated(), 1u);
  EXPECT_EQ(t.count(1, Counter::duplicate_request), 1u);
  EXPECT_EQ(count_ops(t.lb.link, 0, wire::op::send_only), 2);
}

TEST(FaultPortTest, DelayedPacketInStream) {
  FaultLoop t;
  t.rules(0, {"dir tx opcode rc_rdma_write_middle psn +2 first 1 delay 5ms"});
  const uint64_t t0 = t.lb.link.clock.t;
  t.write_ok(8192, 5);
  t.lb.settle();
  EXPECT_EQ(t.fp[0]->held(), 0u);
  EXPECT_EQ(t.fp[0]->next_due_ns(), UINT64_MAX);
  EXPECT_EQ(t.only_rule(0).hits, 1u);
  EXPECT_GE(t.count(1, Counter::out_of_seq_request), 1u);  // the packets after it came first
  // the resent 0x102 and, 5 ms later, the delayed original (a duplicate to the responder)
  const auto psns = psns_of(t.lb.link, 0, wire::op::write_middle);
  EXPECT_EQ(std::count(psns.begin(), psns.end(), 0x102u), 2);
  EXPECT_GE(t.count(1, Counter::duplicate_request), 1u);
  EXPECT_GE(t.lb.link.clock.t, t0 + 5'000'000);
}

TEST(FaultPortTest, ReorderTwo) {
  FaultLoop t;
  t.rules(0, {"dir tx opcode rc_send_only first 1 reorder 2"});
  const auto wb = t.sends(3, 256);
  EXPECT_EQ(wb.size(), 3u);
  EXPECT_EQ(t.only_rule(0).hits, 1u);
  const auto psns = psns_of(t.lb.link, 0, wire::op::send_only);
  ASSERT_GE(psns.size(), 3u);
  EXPECT_EQ(psns[0], 0x101u);
  EXPECT_EQ(psns[1], 0x102u);
  EXPECT_EQ(psns[2], 0x100u);
  EXPECT_GE(t.count(1, Counter::out_of_seq_request), 1u);
}

TEST(FaultPortTest, CorruptIcrcOnReceive) {
  FaultLoop t;
  t.rules(1, {"dir rx opcode rc_send_only first 1 corrupt icrc"});
  const auto wb = t.sends(1, 128);
  EXPECT_EQ(wb.size(), 1u);
  EXPECT_EQ(t.count(1, Counter::rx_drop_icrc), 1u);
  EXPECT_EQ(t.only_rule(1).applied, 1u);
}

TEST(FaultPortTest, CorruptRkeyIsRemoteAccessError) {
  FaultLoop t;
  t.rules(0, {"dir tx opcode rc_rdma_write_only first 1 corrupt reth.rkey"});
  t.write_fails(WC_REM_ACCESS_ERR);
  EXPECT_EQ(t.count(1, Counter::resp_remote_access_errors), 1u);
  EXPECT_EQ(t.only_rule(0).applied, 1u);
}

TEST(FaultPortTest, EcnCeMakesCnps) {
  FaultLoop t;
  t.rules(0, {"dir tx class request ecn-ce"});
  t.write_ok(16384, 9);
  EXPECT_EQ(t.only_rule(0).applied, 16u);
  EXPECT_EQ(t.count(1, Counter::np_ecn_marked_roce_packets), 16u);
  EXPECT_GE(t.count(1, Counter::np_cnp_sent), 1u);
  EXPECT_GE(t.count(0, Counter::rp_cnp_handled), 1u);
}

// A frame cut short with its lengths and ICRC fixed is a valid frame: a SEND ONLY arrives as a shorter
// message; a WRITE ONLY no longer matches its RETH length, which the responder NAKs as an invalid request.
TEST(FaultPortTest, TruncateSendAndWrite) {
  FaultLoop t;
  t.rules(0, {"dir tx opcode rc_send_only first 1 truncate 4"});
  const auto wb = t.sends(1, 64);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wb[0].byte_len, 60u);
  EXPECT_EQ(t.only_rule(0).applied, 1u);

  t.rules(0, {"dir tx opcode rc_rdma_write_only first 1 truncate 4"});
  t.write_fails(WC_REM_INV_REQ_ERR);
  EXPECT_EQ(t.only_rule(0).applied, 1u);
}

// The same traffic with and without a FaultPort that has no rules: the same bytes on the wire.
void plain_traffic(Loopback& l, uint32_t qa, uint32_t qb) {
  for (int i = 0; i < 4; i++) post_recv(l.b(), qb, 0x1000 * i, 0x1000, i);
  fill(l.a().mem, 0, 0x8000, 1);
  for (int i = 0; i < 4; i++) {
    Sge sge{l.a().addr(0x1000 * i), 3000, l.a().mr.lkey};
    post(l.a(), qa, make_wr(WR_SEND, &sge, 1, i));
    Sge w{l.a().addr(0), 5000, l.a().mr.lkey};
    post(l.a(), qa, make_rdma_wr(WR_RDMA_WRITE, &w, l.b().addr(0x20000), l.b().mr.rkey, 10 + i));
  }
  EXPECT_EQ(l.poll(l.a(), 8).size(), 8u);
  l.settle();
}

WireTrace plain_run(bool with_fault_port, bool rules_set_and_cleared) {
  if (!with_fault_port) {
    WireTrace plain;
    Loopback l;
    record(l, plain);
    auto [qa, qb] = l.connect(QPT_RC);
    plain_traffic(l, qa, qb);
    return plain;
  }
  FaultLoop t;
  if (rules_set_and_cleared) {
    t.rules(0, {"dir rx class request drop"});  // matches nothing on A
    t.fp[0]->set_rules({});
  }
  plain_traffic(t.lb, t.qa, t.qb);
  EXPECT_TRUE(t.fp[0]->stats().empty());
  EXPECT_EQ(t.fp[0]->held(), 0u);
  return t.wire;
}

TEST(FaultPortTest, NoRulesFramesUntouched) {
  const WireTrace plain = plain_run(false, false);
  EXPECT_GT(plain.size(), 20u);
  EXPECT_EQ(first_difference(plain_run(true, false), plain), -1);
  EXPECT_EQ(first_difference(plain_run(true, true), plain), -1);
}

// Rules set mid-run act on what follows; cleared, they stop, and nothing stays held.
TEST(FaultPortTest, RulesSetAndClearedMidRun) {
  FaultLoop t;
  EXPECT_EQ(t.write_and_wait(4096, 1).status, WC_SUCCESS);
  t.rules(0, {"dir tx class request every 3 drop"});
  t.write_ok(8192, 2);
  const uint64_t dropped = t.fp[0]->dropped();
  EXPECT_GE(dropped, 2u);
  t.fp[0]->set_rules({});
  t.write_ok(8192, 3);
  EXPECT_EQ(t.fp[0]->dropped(), dropped);
  EXPECT_TRUE(t.fp[0]->stats().empty());
}

// set_rules from another thread while frames flow: every message completes, data intact; the rules seen
// are the ones set (ids only from the sets given).
TEST(FaultPortTest, SetRulesFromAnotherThread) {
  FaultLoop t({}, 4 << 20);
  wire::FaultRule drop = *wire::parse_fault_rule("dir tx class request prob 0.05 seed 3 drop").rule;
  wire::FaultRule dup = *wire::parse_fault_rule("dir rx class ack prob 0.1 duplicate").rule;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> bad_ids{0};
  std::thread control([&] {
    for (uint32_t i = 0; !stop.load(); i++) {
      if (i % 3 == 2)
        t.fp[0]->set_rules({});
      else
        t.fp[0]->set_rules({{10 + i % 3, drop}, {20, dup}});
      for (const auto& s : t.fp[0]->stats())
        if (s.id != 10 && s.id != 11 && s.id != 20) bad_ids++;
      std::this_thread::yield();
    }
  });
  for (int i = 0; i < 20; i++) t.write_ok(16384, static_cast<uint8_t>(i));
  stop = true;
  control.join();
  EXPECT_EQ(bad_ids.load(), 0u);
  t.fp[0]->set_rules({});
  t.lb.settle();
  EXPECT_EQ(t.fp[0]->held(), 0u);
}

// A pool of 2 buffers and a rule that wants 4 copies of each SEND received: 2 made, 2 counted as exhausted.
TEST(FaultPortTest, FullPoolLetsDuplicatesPass) {
  FaultLoop t({.pool_frames = 2});
  t.rules(1, {"dir rx opcode rc_send_only duplicate 4"});
  const auto wb = t.sends(3, 64);
  EXPECT_EQ(wb.size(), 3u);
  // the three SENDs come in one burst: the first one's copies take both buffers until the engine frees them
  EXPECT_EQ(t.only_rule(1).hits, 3u);
  EXPECT_EQ(t.fp[1]->duplicated(), 2u);
  EXPECT_EQ(t.fp[1]->pool_exhausted(), 10u);
  EXPECT_EQ(t.count(1, Counter::duplicate_request), 2u);
  // the next SEND finds the pool refilled
  const auto more = t.sends(1, 64);
  EXPECT_EQ(more.size(), 1u);
  EXPECT_EQ(t.fp[1]->duplicated(), 4u);
  EXPECT_EQ(t.fp[1]->pool_exhausted(), 12u);
  EXPECT_EQ(t.count(1, Counter::duplicate_request), 4u);
}

// What an observer is told, and the marks on the frames a rule changed.
class Notes final : public FaultObserver {
 public:
  void fault_hit(FaultDir dir, const uint8_t*, uint32_t len, uint32_t rule_id, FaultAction action) override {
    hits.push_back({dir, len, rule_id, action});
  }
  struct Hit {
    FaultDir dir;
    uint32_t len, rule;
    FaultAction action;
    bool operator==(const Hit&) const = default;
  };
  std::vector<Hit> hits;
};

// A run with random drops, duplicates and delays on both sides: the same seed, the same wire trace, hits
// and counters; another seed, another run.
struct Replay {
  WireTrace wire;
  std::vector<Notes::Hit> hits;
  std::vector<FaultRuleStats> stats;
  uint64_t end_ns;
};
Replay replay(const char* seed) {
  Notes notes;
  FaultLoop t({.observer = &notes});
  const std::string s = seed;
  const std::string r1 = "dir tx class request prob 0.1 seed " + s + " drop";
  const std::string r2 = "dir tx class request prob 0.1 seed " + s + "1 delay 200us";
  const std::string r3 = "dir rx class ack prob 0.2 seed " + s + "2 duplicate 2";
  t.rules(0, {r1.c_str(), r2.c_str(), r3.c_str()});
  for (int i = 0; i < 5; i++) EXPECT_EQ(t.write_and_wait(20000, static_cast<uint8_t>(i)).status, WC_SUCCESS);
  t.lb.settle();
  return {t.wire, notes.hits, t.fp[0]->stats(), t.lb.link.clock.t};
}

TEST(FaultPortTest, SameSeedSameRun) {
  const Replay a = replay("5"), b = replay("5"), c = replay("6");
  EXPECT_FALSE(a.hits.empty());
  EXPECT_EQ(first_difference(a.wire, b.wire), -1);
  EXPECT_EQ(a.hits, b.hits);
  EXPECT_EQ(a.end_ns, b.end_ns);
  ASSERT_EQ(a.stats.size(), 3u);
  ASSERT_EQ(b.stats.size(), 3u);
  for (int i = 0; i < 3; i++) {
    EXPECT_EQ(a.stats[i].hits, b.stats[i].hits);
    EXPECT_EQ(a.stats[i].applied, b.stats[i].applied);
  }
  EXPECT_NE(first_difference(a.wire, c.wire), -1);
}

// A port with no engine behind it: tx_burst keeps copies of what it takes (with their marks), rx_burst hands
// out what a test queued.
class StubPort final : public Port {
 public:
  struct Frame {
    std::vector<uint8_t> bytes;
    PacketBuf buf;  // as handed over (data points into `store`)
  };
  const PortAttr& attr() const override { return attr_; }
  uint32_t tx_batch_bytes() const override { return 8192; }
  bool tx_alloc(uint32_t size, PacketBuf& buf) override {
    store_.emplace_back(size);
    buf = PacketBuf{.data = store_.back().data(), .len = size, .opaque = &store_.back()};
    return true;
  }
  uint32_t tx_burst(PacketBuf* bufs, uint32_t n) override {
    n = std::min(n, accept);
    if (accept != UINT32_MAX) accept -= n;
    for (uint32_t i = 0; i < n; i++)
      sent.push_back({std::vector<uint8_t>(bufs[i].data, bufs[i].data + bufs[i].len), bufs[i]});
    return n;
  }
  void tx_free(PacketBuf&) override { tx_freed++; }
  uint32_t rx_burst(PacketBuf* bufs, uint32_t n) override {
    uint32_t k = 0;
    for (; k < n && !rx.empty(); k++) {
      store_.push_back(std::move(rx.front()));
      rx.erase(rx.begin());
      bufs[k] = PacketBuf{.data = store_.back().data(),
                          .len = static_cast<uint32_t>(store_.back().size()),
                          .batch = rx_batch,
                          .opaque = &store_.back()};
    }
    return k;
  }
  void rx_free(PacketBuf*, uint32_t n) override { rx_freed += n; }
  std::vector<Frame> sent;
  uint32_t accept = UINT32_MAX;  // room left in the transmit ring (UINT32_MAX: unbounded; 0: full)
  std::vector<std::vector<uint8_t>> rx;
  uint8_t rx_batch = 0;
  uint64_t tx_freed = 0, rx_freed = 0;

 private:
  PortAttr attr_;
  std::deque<std::vector<uint8_t>> store_;  // (a deque: buffers stay where they are)
};

struct ManualClock final : Clock {
  uint64_t t = 1000;
  uint64_t now_ns() const override { return t; }
};

// A WRITE MIDDLE frame with PSN `psn` and `payload` bytes of payload.
std::vector<uint8_t> middle_frame(uint32_t psn, uint32_t payload) {
  wire::FrameSpec spec;
  spec.src_ip = wire::gid_from_ipv4({10, 0, 0, 1});
  spec.dst_ip = wire::gid_from_ipv4({10, 0, 0, 2});
  spec.bth.opcode = wire::op::kRc | wire::op::write_middle;
  spec.bth.dqpn = 0x42;
  spec.bth.psn = psn;
  std::vector<uint8_t> payload_bytes(payload);
  for (uint32_t i = 0; i < payload; i++) payload_bytes[i] = static_cast<uint8_t>(i * 13 + psn);
  std::vector<uint8_t> f(payload + 256);
  f.resize(wire::build_frame(wire::MutByteSpan(f.data(), f.size()), spec,
                             wire::ByteSpan(payload_bytes.data(), payload)));
  return f;
}

// Copies `f` into a buffer from `port`'s tx_alloc, ready for its tx_burst.
bool tx_buf(Port& port, const std::vector<uint8_t>& f, PacketBuf& buf) {
  if (!port.tx_alloc(static_cast<uint32_t>(f.size()), buf)) return false;
  std::memcpy(buf.data, f.data(), f.size());
  buf.len = static_cast<uint32_t>(f.size());
  return true;
}

wire::FaultRule rule(const char* text) {
  wire::FaultParse r = wire::parse_fault_rule(text);
  EXPECT_TRUE(r) << r.error;
  return r ? *r.rule : wire::FaultRule{};
}

// The marks a rule leaves on the frames it made or changed, what the observer is told, and a delayed
// frame that goes when its time comes (next_due_ns says when; rx_wait_fd is -1 meanwhile).
TEST(FaultPortTest, MarksObserverAndDueTime) {
  StubPort stub;
  ManualClock clock;
  Notes notes;
  FaultPort fp(stub, clock, {.observer = &notes});
  fp.set_rules(
      {{7, rule("psn 1 duplicate 2")}, {8, rule("psn 2 delay 1us")}, {9, rule("psn 3 corrupt payload")}});
  PacketBuf bufs[4];
  for (uint32_t i = 0; i < 4; i++) ASSERT_TRUE(tx_buf(fp, middle_frame(i, 64), bufs[i]));
  EXPECT_EQ(fp.tx_burst(bufs, 4), 4u);
  // 0, 1, its two copies, 3 (corrupted); 2 is held
  ASSERT_EQ(stub.sent.size(), 5u);
  const std::pair<uint32_t, FaultAction> want[] = {{0, FaultAction::none},
                                                   {0, FaultAction::none},
                                                   {7, FaultAction::duplicate},
                                                   {7, FaultAction::duplicate},
                                                   {9, FaultAction::corrupt}};
  for (size_t i = 0; i < 5; i++) {
    EXPECT_EQ(stub.sent[i].buf.fault_rule, want[i].first) << i;
    EXPECT_EQ(stub.sent[i].buf.fault_action, static_cast<uint8_t>(want[i].second)) << i;
  }
  EXPECT_EQ(stub.sent[2].bytes, stub.sent[1].bytes);
  wire::Packet p;
  ASSERT_EQ(parse(stub.sent[4].bytes, p), wire::ParseError::ok);  // a wrong field, a right ICRC
  EXPECT_EQ(p.payload[0], static_cast<uint8_t>(3 ^ 1));
  ASSERT_EQ(notes.hits.size(), 3u);
  EXPECT_EQ(notes.hits[0], (Notes::Hit{FaultDir::tx, bufs[1].len, 7, FaultAction::duplicate}));
  EXPECT_EQ(notes.hits[1].rule, 8u);
  EXPECT_EQ(notes.hits[2].rule, 9u);
  EXPECT_EQ(fp.held(), 1u);
  EXPECT_EQ(fp.next_due_ns(), clock.t + 1000);
  EXPECT_EQ(fp.rx_wait_fd(), -1);
  EXPECT_EQ(fp.rx_burst(bufs, 4), 0u);  // not yet
  EXPECT_EQ(stub.sent.size(), 5u);
  clock.t += 1000;
  EXPECT_EQ(fp.rx_burst(bufs, 4), 0u);  // any burst releases what is due
  ASSERT_EQ(stub.sent.size(), 6u);
  EXPECT_EQ(stub.sent[5].buf.fault_rule, 8u);
  EXPECT_EQ(stub.sent[5].buf.fault_action, static_cast<uint8_t>(FaultAction::delay));
  EXPECT_EQ(fp.held(), 0u);
  EXPECT_EQ(fp.next_due_ns(), UINT64_MAX);
  const auto s = fp.stats();
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].id, 7u);
  EXPECT_EQ(s[0].applied, 1u);
  EXPECT_EQ(s[1].id, 8u);
  EXPECT_EQ(s[2].id, 9u);
}

// A rule with a time window reads the port's clock: marks only the frames sent inside it, counted from the
// first frame the rule matched.
TEST(FaultPortTest, TimeWindowOnThePortsClock) {
  StubPort stub;
  ManualClock clock;
  FaultPort fp(stub, clock);
  fp.set_rules({{1, rule("dir tx after 2ms for 3ms ecn-ce")}});
  std::vector<bool> marked;
  for (uint32_t i = 0; i < 8; i++) {  // one frame a millisecond: 0..7 ms from the first
    PacketBuf b;
    ASSERT_TRUE(tx_buf(fp, middle_frame(i, 64), b));
    ASSERT_EQ(fp.tx_burst(&b, 1), 1u);
    ASSERT_EQ(stub.sent.size(), i + 1);
    wire::Packet p;
    ASSERT_EQ(parse(stub.sent[i].bytes, p), wire::ParseError::ok);
    marked.push_back((p.ip4.tos & 3) == 3);
    clock.t += 1'000'000;
  }
  EXPECT_EQ(marked, (std::vector<bool>{false, false, true, true, true, false, false, false}));
  EXPECT_EQ(fp.stats()[0].applied, 3u);
}

// A reorder hold whose stream stops (fewer than N frames follow) ends 10 ms after it began: the held frame
// goes then, after the frames that passed it, and next_due_ns said when.
TEST(FaultPortTest, ReorderHoldEndsWhenTheStreamStops) {
  StubPort stub;
  ManualClock clock;
  FaultPort fp(stub, clock);
  fp.set_rules({{1, rule("psn 1 reorder 5")}});
  PacketBuf bufs[3];
  for (uint32_t i = 0; i < 3; i++) ASSERT_TRUE(tx_buf(fp, middle_frame(i, 64), bufs[i]));
  EXPECT_EQ(fp.tx_burst(bufs, 3), 3u);
  ASSERT_EQ(stub.sent.size(), 2u);  // 0 and 2; 1 waits for 5 frames that do not come
  EXPECT_EQ(fp.held(), 1u);
  const uint64_t began = clock.t;
  EXPECT_EQ(fp.next_due_ns(), began + 10'000'000);
  clock.t = began + 10'000'000 - 1;
  EXPECT_EQ(fp.rx_burst(bufs, 3), 0u);
  EXPECT_EQ(stub.sent.size(), 2u);  // not before the bound
  clock.t = began + 10'000'000;
  EXPECT_EQ(fp.rx_burst(bufs, 3), 0u);
  ASSERT_EQ(stub.sent.size(), 3u);
  wire::Packet p;
  ASSERT_EQ(parse(stub.sent[2].bytes, p), wire::ParseError::ok);
  EXPECT_EQ(p.bth.psn, 1u);
  EXPECT_EQ(stub.sent[2].buf.fault_rule, 1u);
  EXPECT_EQ(stub.sent[2].buf.fault_action, static_cast<uint8_t>(FaultAction::reorder));
  EXPECT_EQ(fp.held(), 0u);
  EXPECT_EQ(fp.next_due_ns(), UINT64_MAX);
}

// An inner port that takes nothing (its ring full): the frames the FaultPort already took (a duplicate's
// copies included) wait in order, and while they wait the FaultPort takes nothing more, so the engine keeps
// its frames (backpressure, not loss); once the inner port takes again, everything goes, in order, once.
TEST(FaultPortTest, InnerPortBackpressureKeepsOrderAndLosesNothing) {
  StubPort stub;
  ManualClock clock;
  FaultPort fp(stub, clock);
  fp.set_rules({{1, rule("psn 1 duplicate")}});
  stub.accept = 0;
  PacketBuf bufs[6];
  for (uint32_t i = 0; i < 6; i++) ASSERT_TRUE(tx_buf(fp, middle_frame(i, 64), bufs[i]));
  EXPECT_EQ(fp.tx_burst(bufs, 4), 4u);  // taken, none sent
  EXPECT_TRUE(stub.sent.empty());
  EXPECT_EQ(fp.tx_burst(bufs + 4, 2), 0u);  // refused while the first wait
  stub.accept = 2;                          // room for two
  EXPECT_EQ(fp.tx_burst(bufs + 4, 2), 0u);  // two of the five went; three still wait
  EXPECT_EQ(stub.sent.size(), 2u);
  stub.accept = UINT32_MAX;
  EXPECT_EQ(fp.rx_burst(bufs, 1), 0u);  // any burst hands on what waits
  EXPECT_EQ(stub.sent.size(), 5u);
  EXPECT_EQ(fp.tx_burst(bufs + 4, 2), 2u);
  ASSERT_EQ(stub.sent.size(), 7u);
  const uint32_t want[] = {0, 1, 1, 2, 3, 4, 5};
  for (size_t i = 0; i < 7; i++) {
    wire::Packet p;
    ASSERT_EQ(parse(stub.sent[i].bytes, p), wire::ParseError::ok) << i;
    EXPECT_EQ(p.bth.psn, want[i]) << i;
  }
  EXPECT_EQ(fp.duplicated(), 1u);
  EXPECT_EQ(fp.pool_exhausted(), 0u);
}

// A batch frame that comes while rules are set is cut into its packets, each matched alone; while rules are
// set the engine is told to make none.
TEST(FaultPortTest, BatchFramesCutBeforeMatching) {
  StubPort stub;
  ManualClock clock;
  FaultPort fp(stub, clock);
  fp.set_rules({{1, rule("psn 0x12 drop")}});
  EXPECT_EQ(fp.tx_batch_bytes_to(nullptr, 0), 0u);
  // rx: a batch of 4 packets of 256 bytes from PSN 0x10
  stub.rx.push_back(middle_frame(0x10, 1024));
  stub.rx_batch = 4;
  PacketBuf bufs[8];
  const uint32_t k = fp.rx_burst(bufs, 8);
  ASSERT_EQ(k, 3u);
  const uint32_t psns[] = {0x10, 0x11, 0x13};
  for (uint32_t i = 0; i < k; i++) {
    EXPECT_EQ(bufs[i].batch, 0u);
    wire::Packet p;
    ASSERT_EQ(parse(bufs[i], p), wire::ParseError::ok);  // ICRC too
    EXPECT_EQ(p.bth.psn, psns[i]);
    EXPECT_EQ(p.payload_len, 256u);
  }
  EXPECT_EQ(stub.rx_freed, 1u);  // the batch itself, at once
  fp.rx_free(bufs, k);
  EXPECT_EQ(stub.rx_freed, 1u);  // the packets were the port's own buffers
  EXPECT_EQ(fp.dropped(), 1u);
  // tx: the same cut through the inner port's buffers
  PacketBuf b;
  ASSERT_TRUE(tx_buf(fp, middle_frame(0x10, 1024), b));
  b.batch = 4;
  EXPECT_EQ(fp.tx_burst(&b, 1), 1u);
  ASSERT_EQ(stub.sent.size(), 3u);
  for (uint32_t i = 0; i < 3; i++) {
    wire::Packet p;
    ASSERT_EQ(parse(stub.sent[i].bytes, p), wire::ParseError::ok);
    EXPECT_EQ(p.bth.psn, psns[i]);
  }
  EXPECT_EQ(stub.tx_freed, 2u);  // the batch and the dropped packet
  fp.set_rules({});
  EXPECT_EQ(fp.rx_burst(bufs, 8), 0u);
  EXPECT_EQ(fp.tx_batch_bytes_to(nullptr, 0), 8192u);  // idle again: the inner port's answer
}

// A port between the two faces (a capture's place): passes everything on and notes what the engine receives.
class MiddlePort final : public Port {
 public:
  explicit MiddlePort(Port& in) : in_(in) {}
  const PortAttr& attr() const override { return in_.attr(); }
  bool tx_alloc(uint32_t size, PacketBuf& buf) override { return in_.tx_alloc(size, buf); }
  uint32_t tx_burst(PacketBuf* bufs, uint32_t n) override {
    const uint32_t k = in_.tx_burst(bufs, n);
    sent += k;
    return k;
  }
  void tx_free(PacketBuf& buf) override { in_.tx_free(buf); }
  uint32_t tx_batch_bytes_to(const uint8_t* dst_mac, uint32_t dqpn) override {
    return in_.tx_batch_bytes_to(dst_mac, dqpn);
  }
  uint32_t rx_burst(PacketBuf* bufs, uint32_t n) override {
    const uint32_t k = in_.rx_burst(bufs, n);
    for (uint32_t i = 0; i < k; i++) {
      wire::Packet p;
      EXPECT_EQ(parse(bufs[i], p), wire::ParseError::ok);
      seen.push_back({p.bth.psn, bufs[i].fault_rule, static_cast<FaultAction>(bufs[i].fault_action)});
    }
    return k;
  }
  void rx_free(PacketBuf* bufs, uint32_t n) override { in_.rx_free(bufs, n); }
  struct Seen {
    uint32_t psn, rule;
    FaultAction action;
    bool operator==(const Seen&) const = default;
  };
  std::vector<Seen> seen;
  uint32_t sent = 0;

 private:
  Port& in_;
};

// Split around a middle port: the receive face (under it) applies the receive rules and marks what it
// made; one table for both faces, so a rule without `dir` counts its matches over both directions.
TEST(FaultPortTest, SplitFacesShareOneTable) {
  StubPort stub;
  ManualClock clock;
  Notes notes;
  FaultPort fp(stub, clock);
  std::unique_ptr<MiddlePort> mid;
  fp.split_rx([&](Port& rx_face) {
    mid = std::make_unique<MiddlePort>(rx_face);
    return mid.get();
  });
  ASSERT_TRUE(mid);
  fp.set_observer(&notes);
  fp.set_rules({{3, rule("dir rx psn 5 duplicate")}, {4, rule("psn 0-3 every 2 drop")}});
  PacketBuf bufs[4];
  const auto send = [&](uint32_t psn) {
    ASSERT_TRUE(tx_buf(fp, middle_frame(psn, 64), bufs[0]));
    EXPECT_EQ(fp.tx_burst(bufs, 1), 1u);
  };
  send(0);  // rule 4's 1st match
  stub.rx.push_back(middle_frame(1, 64));
  EXPECT_EQ(fp.rx_burst(bufs, 4), 0u);  // its 2nd: dropped below the middle port
  send(2);                              // 3rd: passes
  stub.rx.push_back(middle_frame(3, 64));
  EXPECT_EQ(fp.rx_burst(bufs, 4), 0u);  // 4th: dropped
  EXPECT_EQ(stub.sent.size(), 2u);
  EXPECT_EQ(mid->sent, 2u);
  EXPECT_EQ(stub.rx_freed, 2u);
  stub.rx.push_back(middle_frame(5, 64));
  ASSERT_EQ(fp.rx_burst(bufs, 4), 2u);  // the frame and its copy, the copy marked
  const std::vector<MiddlePort::Seen> want = {{5, 0, FaultAction::none}, {5, 3, FaultAction::duplicate}};
  EXPECT_EQ(mid->seen, want);
  fp.rx_free(bufs, 2);
  EXPECT_EQ(stub.rx_freed, 3u);
  ASSERT_EQ(notes.hits.size(), 3u);
  EXPECT_EQ(notes.hits[0], (Notes::Hit{FaultDir::rx, bufs[0].len, 4, FaultAction::drop}));
  EXPECT_EQ(notes.hits[1].dir, FaultDir::rx);
  EXPECT_EQ(notes.hits[1].rule, 4u);
  EXPECT_EQ(notes.hits[2], (Notes::Hit{FaultDir::rx, bufs[0].len, 3, FaultAction::duplicate}));
  const auto s = fp.stats();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[1].id, 4u);
  EXPECT_EQ(s[1].matched, 4u);
  EXPECT_EQ(s[1].hits, 2u);
  EXPECT_EQ(s[1].applied, 2u);
  EXPECT_EQ(fp.dropped(), 2u);
  EXPECT_EQ(fp.duplicated(), 1u);
  // rules off: both faces pass frames through untouched
  fp.set_rules({});
  stub.rx.push_back(middle_frame(1, 64));
  ASSERT_EQ(fp.rx_burst(bufs, 4), 1u);
  EXPECT_EQ(mid->seen.back(), (MiddlePort::Seen{1, 0, FaultAction::none}));
  EXPECT_EQ(fp.rx_burst(bufs + 1, 3), 0u);
  EXPECT_EQ(fp.tx_batch_bytes_to(nullptr, 0), 8192u);  // idle again: the port's answer, through both faces
}

}  // namespace
}  // namespace urxe::engine::test
