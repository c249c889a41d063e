// `urxe conform`'s judges on made-up traces, where a live run cannot show every verdict on demand: H3 (the
// reaction to CNPs) for a peer that reacts and recovers, one that ignores the CNPs, one that never recovers,
// and a run in which urxe sent no CNP. A live H3 against urxe itself depends on the host (tests/cli/
// cli_conform_test.sh says why); these fix the judge's arithmetic.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "tools/conform_judges.h"
#include "wire/opcode.h"

namespace urxe::tools::conform {
namespace {

constexpr int64_t kMs = 1000000;
constexpr uint32_t kRule = 7, kUrxeQp = 0x11, kPeerQp = 0x22;
constexpr int64_t kMarksFrom = 800 * kMs, kMarksTo = 1300 * kMs, kEnd = 3000 * kMs;

// The peer's WRITE MIDDLEs (1,082 bytes on the wire) at the times `sending` yields, the ones inside the
// marks' window hit by the run's rule 0, and urxe's CNPs every `cnp_every` inside it (0: none).
struct TraceMaker {
  Trace t;
  void peer_request(int64_t at) {
    Frame f;
    f.t_ns = at;
    f.out = false;
    f.d.bth_parsed = true;
    f.d.pkt.bth.opcode = wire::op::kRc | wire::op::write_middle;
    f.d.pkt.bth.dqpn = kUrxeQp;
    f.d.pkt.bth.psn = static_cast<uint32_t>(t.frames.size());
    f.d.pkt.info = &wire::opcode_info(f.d.pkt.bth.opcode);
    if (at >= kMarksFrom && at <= kMarksTo) f.fault_rule = kRule;
    add(f, 1082);
  }
  void cnp(int64_t at) {
    Frame f;
    f.t_ns = at;
    f.out = true;
    f.d.bth_parsed = true;
    f.d.pkt.bth.opcode = 0x81;
    f.d.pkt.bth.dqpn = kPeerQp;
    f.d.pkt.info = &wire::opcode_info(0x81);
    add(f, 82);
  }
  void add(Frame f, uint32_t wirelen) {
    PcapngPacket p;
    p.wirelen = wirelen;
    t.packets.push_back(p);
    f.n = t.frames.size() + 1;
    t.frames.push_back(f);
  }
  // Frames by time, Frame::raw into t.packets (set once both stopped growing).
  Trace& done() {
    std::vector<size_t> order(t.frames.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return t.frames[a].t_ns < t.frames[b].t_ns; });
    std::vector<Frame> frames;
    std::vector<PcapngPacket> packets;
    for (size_t i : order) {
      frames.push_back(t.frames[i]);
      packets.push_back(t.packets[i]);
    }
    t.frames = std::move(frames);
    t.packets = std::move(packets);
    for (size_t i = 0; i < t.frames.size(); ++i) {
      t.frames[i].raw = &t.packets[i];
      t.frames[i].n = i + 1;
    }
    t.rule_ids = {kRule};
    t.duration_ns = kEnd;
    return t;
  }
};

// The pacer's rhythm: a burst of 512 packets 1 us apart every 50 ms; `limited(at)` true where a rate limit
// holds the peer to one packet every 0.5 ms instead.
Trace& make(TraceMaker& m, const std::function<bool(int64_t)>& limited, int64_t cnp_every) {
  int64_t backlog_until = 0;
  for (int64_t burst = 0; burst < kEnd; burst += 50 * kMs) {
    int64_t at = std::max(burst, backlog_until);
    for (int i = 0; i < 512 && at < kEnd; ++i) {
      m.peer_request(at);
      at += limited(at) ? kMs / 2 : 1000;
    }
    backlog_until = at;
  }
  for (int64_t at = kMarksFrom; cnp_every && at <= kMarksTo; at += cnp_every) m.cnp(at + 1);
  return m.done();
}

Finding judge(Trace& t) {
  return judge_cnp_reaction(t, Setup{});
}

TEST(ConformJudgeH3, AReactionPointThatSlowsAndRecoversPasses) {
  TraceMaker m;
  // cut 20 ms after the first CNP, recovered 100 ms after the last
  Trace& t = make(
      m, [](int64_t at) { return at >= kMarksFrom + 20 * kMs && at < kMarksTo + 100 * kMs; }, kMs / 2);
  const Finding f = judge(t);
  EXPECT_EQ(f.verdict, Verdict::pass) << f.observed;
  EXPECT_NE(f.observed.find("100 % busy) under"), std::string::npos) << f.observed;
  EXPECT_FALSE(f.evidence.empty());
}

TEST(ConformJudgeH3, APeerThatIgnoresTheCnpsFails) {
  TraceMaker m;
  Trace& t = make(
      m, [](int64_t) { return false; }, kMs / 2);
  const Finding f = judge(t);
  EXPECT_EQ(f.verdict, Verdict::fail) << f.observed;
  EXPECT_NE(f.observed.find("did not come down"), std::string::npos) << f.observed;
}

TEST(ConformJudgeH3, APeerThatStaysSlowFails) {
  TraceMaker m;
  Trace& t = make(
      m, [](int64_t at) { return at >= kMarksFrom + 20 * kMs; }, kMs / 2);
  const Finding f = judge(t);
  EXPECT_EQ(f.verdict, Verdict::fail) << f.observed;
  EXPECT_NE(f.observed.find("did not recover"), std::string::npos) << f.observed;
}

TEST(ConformJudgeH3, NoCnpNoVerdict) {
  TraceMaker m;
  Trace& t = make(
      m, [](int64_t at) { return at >= kMarksFrom && at < kMarksTo; }, 0);
  const Finding f = judge(t);
  EXPECT_EQ(f.verdict, Verdict::inconclusive) << f.observed;
}

}  // namespace
}  // namespace urxe::tools::conform
