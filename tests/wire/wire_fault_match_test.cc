// Fault rules on frames (wire/fault_rule.h): each match field, relative PSNs, the selectors' hit sequences,
// the table's first-hit rule, and each mutation checked by parsing the frame again.
#include <gtest/gtest.h>

#include <vector>

#include "tests/wire/wire_test_util.h"
#include "wire/fault_rule.h"
#include "wire/mad.h"

namespace {

using namespace wire_test;

FaultRule rule(std::string_view text) {
  const FaultParse r = parse_fault_rule(text);
  EXPECT_TRUE(r) << text << ": " << r.error;
  return r.rule.value_or(FaultRule{});
}

Bytes frame(uint8_t opcode, uint32_t dqpn = 0x11, uint32_t psn = 100, size_t payload = 16,
            const Variant& v = kVariants[0]) {
  FrameSpec s = make_spec(opcode, v);
  s.bth.dqpn = dqpn;
  s.bth.psn = psn;
  return build(s, payload_of(payload));
}

Bytes ack(uint8_t syndrome) {
  FrameSpec s = make_spec(op::kRc | op::acknowledge);
  s.aeth.syndrome = syndrome;
  return build(s, {});
}

bool hit(FaultMatcher& m, const Bytes& f, FaultDir dir = FaultDir::tx, uint64_t now_ns = 0) {
  Packet p;
  EXPECT_EQ(parse_frame(f, p), ParseError::ok);
  return m.match(dir, p, now_ns);
}

bool matches(std::string_view text, const Bytes& f, FaultDir dir = FaultDir::tx) {
  FaultMatcher m(rule(text));
  return hit(m, f, dir);
}

// The 1-based indices among `n` copies of `f` that hit.
std::vector<int> hits(std::string_view text, int n, const Bytes& f) {
  FaultMatcher m(rule(text));
  std::vector<int> out;
  for (int i = 1; i <= n; ++i)
    if (hit(m, f)) out.push_back(i);
  return out;
}

TEST(WireFaultMatch, DirQpnPsn) {
  const Bytes f = frame(op::kRc | op::send_only, 0x11, 100);
  EXPECT_TRUE(matches("drop", f));
  EXPECT_TRUE(matches("dir tx drop", f, FaultDir::tx));
  EXPECT_FALSE(matches("dir tx drop", f, FaultDir::rx));
  EXPECT_TRUE(matches("dir rx drop", f, FaultDir::rx));
  EXPECT_TRUE(matches("qpn 0x11 drop", f));
  EXPECT_FALSE(matches("qpn 0x12 drop", f));
  EXPECT_TRUE(matches("psn 100 drop", f));
  EXPECT_FALSE(matches("psn 101 drop", f));
  EXPECT_TRUE(matches("psn 90-100 drop", f));
  EXPECT_FALSE(matches("psn 101-200 drop", f));
  // Ranges wrap modulo 2^24.
  EXPECT_TRUE(matches("psn 0xfffffe-1 drop", frame(op::kRc | op::send_only, 0x11, 0xffffff)));
  EXPECT_TRUE(matches("psn 0xfffffe-1 drop", frame(op::kRc | op::send_only, 0x11, 0)));
  EXPECT_FALSE(matches("psn 0xfffffe-1 drop", frame(op::kRc | op::send_only, 0x11, 2)));
  // A frame parse_frame did not read to its opcode never matches.
  FaultMatcher m(rule("drop"));
  EXPECT_FALSE(m.match(FaultDir::tx, Packet{}, 0));
}

TEST(WireFaultMatch, Opcode) {
  const Bytes rc = frame(op::kRc | op::send_only), uc = frame(op::kUc | op::send_only),
              ud = frame(op::kUd | op::send_only), xrc = frame(op::kXrc | op::send_only),
              cnp = frame(op::cnp, 0x11, 0, 0), middle = frame(op::kRc | op::send_middle);
  for (const Bytes* f : {&rc, &uc, &ud, &xrc}) EXPECT_TRUE(matches("opcode send_only drop", *f));
  EXPECT_FALSE(matches("opcode send_only drop", middle));
  EXPECT_TRUE(matches("opcode rc_send_only drop", rc));
  EXPECT_FALSE(matches("opcode rc_send_only drop", uc));
  EXPECT_TRUE(matches("opcode ud_send_only drop", ud));
  EXPECT_TRUE(matches("opcode 0xa4 drop", xrc));
  // The CNP's low bits are SEND_MIDDLE's: it is no SEND_MIDDLE.
  EXPECT_FALSE(matches("opcode send_middle drop", cnp));
  EXPECT_TRUE(matches("opcode send_middle drop", middle));
  EXPECT_TRUE(matches("opcode cnp drop", cnp));
  EXPECT_TRUE(matches("opcode read_response_middle drop", frame(op::kRc | op::read_response_middle)));
  EXPECT_TRUE(matches("opcode rdma_read_request drop", frame(op::kRc | op::read_request, 0x11, 1, 0)));
}

TEST(WireFaultMatch, Class) {
  const Bytes send = frame(op::kRc | op::send_only), read_req = frame(op::kRc | op::read_request, 0x11, 1, 0),
              cswap = frame(op::kRc | op::compare_swap, 0x11, 1, 0),
              fadd = frame(op::kRc | op::fetch_add, 0x11, 1, 0),
              awrite = frame(op::kRc | op::atomic_write, 0x11, 1, 8),
              aack = frame(op::kRc | op::atomic_acknowledge, 0x11, 1, 0),
              rresp = frame(op::kRc | op::read_response_first), cnp = frame(op::cnp, 0x11, 0, 0);
  const Bytes ok = ack(0x1f), seq_nak = ack(0x60), access_nak = ack(0x62), rnr = ack(0x2c);
  for (const Bytes* f : {&send, &read_req, &cswap, &fadd, &awrite})
    EXPECT_TRUE(matches("class request drop", *f));
  for (const Bytes* f : {&ok, &aack, &rresp, &cnp}) EXPECT_FALSE(matches("class request drop", *f));
  EXPECT_TRUE(matches("class ack drop", ok));
  for (const Bytes* f : {&seq_nak, &rnr, &aack, &rresp}) EXPECT_FALSE(matches("class ack drop", *f));
  EXPECT_TRUE(matches("class nak drop", seq_nak));
  EXPECT_TRUE(matches("class nak drop", access_nak));
  for (const Bytes* f : {&ok, &rnr}) EXPECT_FALSE(matches("class nak drop", *f));
  EXPECT_TRUE(matches("class rnr-nak drop", rnr));
  for (const Bytes* f : {&ok, &seq_nak}) EXPECT_FALSE(matches("class rnr-nak drop", *f));
  EXPECT_TRUE(matches("class read-response drop", rresp));
  EXPECT_TRUE(matches("class read-response drop", frame(op::kRc | op::read_response_middle)));
  EXPECT_FALSE(matches("class read-response drop", read_req));
  for (const Bytes* f : {&cswap, &fadd, &awrite}) EXPECT_TRUE(matches("class atomic drop", *f));
  for (const Bytes* f : {&aack, &read_req}) EXPECT_FALSE(matches("class atomic drop", *f));
  EXPECT_TRUE(matches("class atomic-ack drop", aack));
  EXPECT_FALSE(matches("class atomic-ack drop", ok));
  EXPECT_TRUE(matches("class cnp drop", cnp));
  EXPECT_FALSE(matches("class cnp drop", frame(op::kRc | op::send_middle)));
}

// A UD SEND_ONLY to QP1 carrying `mad`, as the CM sends it.
Bytes qp1_frame(const std::array<uint8_t, kMadSize>& mad, uint8_t opcode = op::kUd | op::send_only) {
  FrameSpec s = make_spec(opcode);
  s.bth.dqpn = kQp1;
  s.deth = Deth{kQp1Qkey, kQp1};
  return build(s, Bytes(mad.begin(), mad.end()));
}
std::array<uint8_t, kMadSize> cm_mad(const CmMessage& msg) {
  std::array<uint8_t, kMadSize> mad{};
  EXPECT_TRUE(build_cm_mad(mad, CmMad{.header = {}, .msg = msg}));
  return mad;
}
std::array<uint8_t, kMadSize> header_only_mad(uint16_t attr, uint8_t mgmt_class = kMgmtClassCm) {
  std::array<uint8_t, kMadSize> mad{};
  MadHeader h;
  h.attribute_id = attr;
  h.mgmt_class = mgmt_class;
  write_mad_header(mad.data(), h);
  return mad;
}

TEST(WireFaultMatch, CmMessages) {
  const std::pair<const char*, Bytes> cases[] = {
      {"req", qp1_frame(cm_mad(CmReq{}))},          {"mra", qp1_frame(cm_mad(CmMra{}))},
      {"rej", qp1_frame(cm_mad(CmRej{}))},          {"rep", qp1_frame(cm_mad(CmRep{}))},
      {"rtu", qp1_frame(cm_mad(CmRtu{}))},          {"dreq", qp1_frame(cm_mad(CmDreq{}))},
      {"drep", qp1_frame(cm_mad(CmDrep{}))},        {"sidr-req", qp1_frame(cm_mad(CmSidrReq{}))},
      {"sidr-rep", qp1_frame(cm_mad(CmSidrRep{}))}, {"lap", qp1_frame(header_only_mad(0x19))},
      {"apr", qp1_frame(header_only_mad(0x1a))},
  };
  for (const auto& [name, f] : cases) {
    EXPECT_TRUE(matches("class cm drop", f)) << name;
    for (const auto& [other, g] : cases)
      EXPECT_EQ(matches(std::string("class cm:") + name + " drop", g), std::string(name) == other)
          << "class cm:" << name << " on " << other;
  }
  // Not CM: another management class on QP1, a MAD in an RC SEND, a data frame.
  EXPECT_FALSE(matches("class cm drop", qp1_frame(header_only_mad(0x10, 0x03))));
  EXPECT_FALSE(matches("class cm drop", qp1_frame(cm_mad(CmReq{}), op::kRc | op::send_only)));
  EXPECT_FALSE(matches("class cm drop", frame(op::kUd | op::send_only)));
  EXPECT_FALSE(matches("class request opcode rc_send_only drop", qp1_frame(cm_mad(CmReq{}))));
  EXPECT_TRUE(matches("class request qpn 1 opcode ud_send_only drop", qp1_frame(cm_mad(CmReq{}))));
}

TEST(WireFaultMatch, RelativePsnPerFlow) {
  FaultMatcher m(rule("psn +2 drop"));
  // Two QPs and two directions, each its own first PSN; the rule hits each flow's third PSN.
  const auto f = [](uint32_t qpn, uint32_t psn) { return frame(op::kRc | op::send_middle, qpn, psn); };
  EXPECT_FALSE(hit(m, f(0x11, 0xfffffe)));
  EXPECT_FALSE(hit(m, f(0x22, 500)));
  EXPECT_FALSE(hit(m, f(0x11, 0x7), FaultDir::rx));
  EXPECT_FALSE(hit(m, f(0x11, 0xffffff)));
  EXPECT_FALSE(hit(m, f(0x22, 501)));
  EXPECT_TRUE(hit(m, f(0x11, 0)));  // 0xfffffe + 2, across the wrap
  EXPECT_TRUE(hit(m, f(0x22, 502)));
  EXPECT_FALSE(hit(m, f(0x11, 0x8), FaultDir::rx));
  EXPECT_TRUE(hit(m, f(0x11, 0x9), FaultDir::rx));
  EXPECT_TRUE(hit(m, f(0x11, 0)));          // a retransmission matches again
  EXPECT_FALSE(hit(m, f(0x11, 0xfffffd)));  // before the first PSN: no match
  EXPECT_EQ(m.hits(), 4u);
  m.reset();  // forgets the flows: 0 is now QP 0x11's first PSN
  EXPECT_FALSE(hit(m, f(0x11, 0)));
  EXPECT_TRUE(hit(m, f(0x11, 2)));
  EXPECT_EQ(m.hits(), 1u);

  // The first PSN is taken from the first frame passing dir and qpn, whatever its opcode.
  FaultMatcher w(rule("qpn 0x11 opcode rdma_write_middle psn +1-2 drop"));
  EXPECT_FALSE(hit(w, frame(op::kRc | op::write_first, 0x11, 10)));
  EXPECT_TRUE(hit(w, frame(op::kRc | op::write_middle, 0x11, 11)));
  EXPECT_TRUE(hit(w, frame(op::kRc | op::write_middle, 0x11, 12)));
  EXPECT_FALSE(hit(w, frame(op::kRc | op::write_middle, 0x11, 13)));
  EXPECT_FALSE(hit(w, frame(op::kRc | op::write_middle, 0x22, 11)));  // another QP: none of its flows

  // A rule remembers kFaultPsnFlows flows; frames of later ones never match.
  FaultMatcher full(rule("psn +0 drop"));
  for (uint32_t q = 0; q < kFaultPsnFlows; ++q) EXPECT_TRUE(hit(full, f(0x100 + q, 7))) << q;
  EXPECT_FALSE(hit(full, f(0x100 + kFaultPsnFlows, 7)));
  EXPECT_TRUE(hit(full, f(0x100, 7)));  // known flows still do
}

TEST(WireFaultMatch, Selectors) {
  const Bytes f = frame(op::kRc | op::send_only);
  EXPECT_EQ(hits("drop", 4, f), (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(hits("every 3 drop", 10, f), (std::vector<int>{3, 6, 9}));
  EXPECT_EQ(hits("first 2 drop", 10, f), (std::vector<int>{1, 2}));
  EXPECT_EQ(hits("skip 7 drop", 10, f), (std::vector<int>{8, 9, 10}));
  EXPECT_EQ(hits("skip 2 first 1 drop", 10, f), (std::vector<int>{3}));
  EXPECT_EQ(hits("every 2 first 3 drop", 10, f), (std::vector<int>{2, 4, 6}));
  EXPECT_EQ(hits("skip 1 every 2 first 2 drop", 10, f), (std::vector<int>{3, 5}));
  // Only matching frames count toward skip/every/first.
  FaultMatcher m(rule("opcode send_only every 2 drop"));
  const Bytes other = frame(op::kRc | op::send_first);
  EXPECT_FALSE(hit(m, f));
  EXPECT_FALSE(hit(m, other));
  EXPECT_TRUE(hit(m, f));
  EXPECT_EQ(m.matched(), 2u);
  EXPECT_EQ(m.hits(), 1u);
}

TEST(WireFaultMatch, TimeWindow) {
  constexpr uint64_t ms = 1000000;
  const Bytes f = frame(op::kRc | op::send_only);
  const Bytes other = frame(op::kRc | op::send_first);
  // The clock starts at the first match, not at the first frame nor at the rule's making.
  FaultMatcher m(rule("opcode send_only after 100ms for 50ms drop"));
  EXPECT_TRUE(m.timed());
  EXPECT_FALSE(hit(m, other, FaultDir::tx, 0));
  EXPECT_FALSE(hit(m, f, FaultDir::tx, 1000 * ms));  // the start
  EXPECT_FALSE(hit(m, f, FaultDir::tx, 1099 * ms));  // before the window
  EXPECT_TRUE(hit(m, f, FaultDir::tx, 1100 * ms));   // it opens
  EXPECT_TRUE(hit(m, f, FaultDir::tx, 1149 * ms));
  EXPECT_FALSE(hit(m, f, FaultDir::tx, 1150 * ms));  // it closes
  EXPECT_FALSE(hit(m, f, FaultDir::tx, 5000 * ms));
  EXPECT_EQ(m.matched(), 6u);
  EXPECT_EQ(m.hits(), 2u);
  // The other selectors count the window's matches only.
  FaultMatcher e(rule("after 10ms skip 1 every 2 first 2 drop"));
  std::vector<int> got;
  for (int i = 0; i < 12; ++i)
    if (hit(e, f, FaultDir::tx, static_cast<uint64_t>(i) * 2 * ms)) got.push_back(i);
  EXPECT_EQ(got, (std::vector<int>{7, 9}));  // window from i = 5: skip i = 5, every 2nd after it
  // reset restarts the clock with the next match.
  e.reset();
  EXPECT_FALSE(hit(e, f, FaultDir::tx, 900 * ms));
  EXPECT_FALSE(hit(e, f, FaultDir::tx, 905 * ms));
  EXPECT_FALSE(hit(e, f, FaultDir::tx, 910 * ms));  // skipped
  EXPECT_FALSE(hit(e, f, FaultDir::tx, 911 * ms));
  EXPECT_TRUE(hit(e, f, FaultDir::tx, 912 * ms));
  // A table says whether it needs the time.
  FaultTable t;
  EXPECT_FALSE(t.timed());
  const uint32_t plain = t.add(rule("drop"));
  EXPECT_FALSE(t.timed());
  const uint32_t timed = t.add(rule("for 1s drop"));
  EXPECT_TRUE(t.timed());
  EXPECT_TRUE(t.del(timed));
  EXPECT_FALSE(t.timed());
  t.add(rule("after 1s drop"));
  t.clear();
  EXPECT_FALSE(t.timed());
  (void)plain;
}

TEST(WireFaultMatch, ProbabilityIsDeterministic) {
  const Bytes f = frame(op::kRc | op::send_only);
  const std::vector<int> a = hits("prob 0.3 seed 7 drop", 2000, f);
  EXPECT_EQ(hits("prob 0.3 seed 7 drop", 2000, f), a);  // same seed, same frames: same hits
  EXPECT_NE(hits("prob 0.3 seed 8 drop", 2000, f), a);
  EXPECT_GT(a.size(), 540u);  // 600 expected
  EXPECT_LT(a.size(), 660u);
  EXPECT_TRUE(hits("prob 0 seed 3 drop", 500, f).empty());
  EXPECT_EQ(hits("prob 1 seed 3 drop", 500, f).size(), 500u);
  // first limits hits, the draws only decide among candidates: the first 3 of the seed's sequence.
  const std::vector<int> b = hits("prob 0.3 seed 7 first 3 drop", 2000, f);
  EXPECT_EQ(b, std::vector<int>(a.begin(), a.begin() + 3));
  // reset replays the sequence.
  FaultMatcher m(rule("prob 0.5 seed 11 drop"));
  std::vector<bool> one, two;
  for (int i = 0; i < 64; ++i) one.push_back(hit(m, f));
  m.reset();
  for (int i = 0; i < 64; ++i) two.push_back(hit(m, f));
  EXPECT_EQ(one, two);
}

TEST(WireFaultMatch, TableFirstHitDecides) {
  FaultTable t;
  EXPECT_TRUE(t.empty());
  const uint32_t a = t.add(rule("class ack every 2 delay 1ms"));
  const uint32_t b = t.add(rule("class ack drop"));
  const uint32_t c = t.add(rule("class nak duplicate"));
  EXPECT_EQ(a, 1u);
  EXPECT_EQ(b, 2u);
  EXPECT_EQ(c, 3u);
  const Bytes ok = ack(0x1f), nak = ack(0x60), send = frame(op::kRc | op::send_only);
  const auto action = [&t](const Bytes& f) {
    Packet p;
    EXPECT_EQ(parse_frame(f, p), ParseError::ok);
    const FaultTable::Entry* e = t.match(FaultDir::rx, p, 0);
    return e == nullptr ? 0u : e->id;
  };
  EXPECT_EQ(action(ok), b);  // rule 1 skips its first match
  EXPECT_EQ(action(ok), a);  // both hit: the earlier rule decides, the later counts its hit
  EXPECT_EQ(action(nak), c);
  EXPECT_EQ(action(send), 0u);
  const auto entries = t.entries();
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].matcher.hits(), 1u);
  EXPECT_EQ(entries[0].applied, 1u);
  EXPECT_EQ(entries[1].matcher.hits(), 2u);
  EXPECT_EQ(entries[1].applied, 1u);
  EXPECT_EQ(entries[2].applied, 1u);

  EXPECT_TRUE(t.del(b));
  EXPECT_FALSE(t.del(b));
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t.entries()[1].id, c);
  EXPECT_EQ(t.entries()[1].matcher.hits(), 1u);  // state moves with the rule
  EXPECT_EQ(action(ok), 0u);                     // rule 1's third match: not a hit
  EXPECT_EQ(t.add(rule("drop")), 4u);            // ids are not reused

  t.clear();
  for (size_t i = 0; i < kFaultTableSize; ++i) EXPECT_NE(t.add(rule("drop")), 0u);
  EXPECT_EQ(t.add(rule("drop")), 0u);  // full
  EXPECT_EQ(action(send), 5u);
}

}  // namespace
