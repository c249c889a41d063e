// The fault rule language (wire/fault_rule.h): each word parsed and refused with its message, the canonical
// text round trip. Matching and mutations: wire_fault_match_test.cc.
#include "wire/fault_rule.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using namespace urxe::wire;

FaultRule rule(std::string_view text) {
  const FaultParse r = parse_fault_rule(text);
  EXPECT_TRUE(r) << text << ": " << r.error;
  return r.rule.value_or(FaultRule{});
}

std::string error(std::string_view text) {
  const FaultParse r = parse_fault_rule(text);
  EXPECT_FALSE(r) << text << " parsed";
  return r.error;
}

TEST(WireFaultRule, MatchFields) {
  FaultRule r = rule("dir rx drop");
  EXPECT_TRUE(r.has_dir);
  EXPECT_EQ(r.dir, FaultDir::rx);
  EXPECT_EQ(rule("dir TX drop").dir, FaultDir::tx);
  EXPECT_EQ(r.action, FaultAction::drop);

  r = rule("qpn 0x11 drop");
  EXPECT_TRUE(r.has_qpn);
  EXPECT_EQ(r.qpn, 0x11u);
  EXPECT_EQ(rule("qpn 17 drop"), r);
  EXPECT_EQ(rule("qpn 0xffffff drop").qpn, 0xffffffu);

  r = rule("psn 5 drop");
  EXPECT_EQ(r.psn_match, FaultPsn::absolute);
  EXPECT_EQ(r.psn_lo, 5u);
  EXPECT_EQ(r.psn_hi, 5u);
  r = rule("psn 0xfffffe-1 drop");  // across the wrap
  EXPECT_EQ(r.psn_lo, 0xfffffeu);
  EXPECT_EQ(r.psn_hi, 1u);
  r = rule("psn +3 drop");
  EXPECT_EQ(r.psn_match, FaultPsn::relative);
  EXPECT_EQ(r.psn_lo, 3u);
  EXPECT_EQ(r.psn_hi, 3u);
  r = rule("psn +2-5 drop");
  EXPECT_EQ(r.psn_lo, 2u);
  EXPECT_EQ(r.psn_hi, 5u);
  EXPECT_EQ(rule("psn +2-+5 drop"), r);
}

TEST(WireFaultRule, Opcodes) {
  struct Case {
    const char* word;
    FaultOpcode match;
    uint8_t opcode;
  };
  const Case cases[] = {
      {"send_only", FaultOpcode::any_transport, 0x04},
      {"SEND-ONLY", FaultOpcode::any_transport, 0x04},
      {"rc_send_only", FaultOpcode::exact, 0x04},
      {"uc_send_only", FaultOpcode::exact, 0x24},
      {"ud_send_only", FaultOpcode::exact, 0x64},
      {"xrc_send_only", FaultOpcode::exact, 0xa4},
      {"rdma_write_first", FaultOpcode::any_transport, 0x06},
      {"write_first", FaultOpcode::any_transport, 0x06},
      {"read_request", FaultOpcode::any_transport, 0x0c},
      {"rdma_read_request", FaultOpcode::any_transport, 0x0c},
      {"read_response_middle", FaultOpcode::any_transport, 0x0e},
      {"acknowledge", FaultOpcode::any_transport, 0x11},
      {"rc_acknowledge", FaultOpcode::exact, 0x11},
      {"atomic_acknowledge", FaultOpcode::any_transport, 0x12},
      {"compare_swap", FaultOpcode::any_transport, 0x13},
      {"fetch_add", FaultOpcode::any_transport, 0x14},
      {"atomic_write", FaultOpcode::any_transport, 0x1d},
      {"send_only_imm", FaultOpcode::any_transport, 0x05},
      {"send_only_with_immediate", FaultOpcode::any_transport, 0x05},
      {"ud_send_only_imm", FaultOpcode::exact, 0x65},
      {"send_last_inv", FaultOpcode::any_transport, 0x16},
      {"xrc_rdma_write_only_with_immediate", FaultOpcode::exact, 0xab},
      {"cnp", FaultOpcode::exact, 0x81},
      {"0x0c", FaultOpcode::exact, 0x0c},
      {"129", FaultOpcode::exact, 0x81},
      {"0x1c", FaultOpcode::exact, 0x1c},  // FLUSH: not in the table, still a number
  };
  for (const Case& c : cases) {
    const FaultRule r = rule(std::string("opcode ") + c.word + " drop");
    EXPECT_EQ(r.opcode_match, c.match) << c.word;
    EXPECT_EQ(r.opcode, c.opcode) << c.word;
  }
}

TEST(WireFaultRule, Classes) {
  struct Case {
    const char* word;
    FaultClass cls;
    uint16_t attr;
  };
  const Case cases[] = {
      {"request", FaultClass::request, 0},
      {"ack", FaultClass::ack, 0},
      {"nak", FaultClass::nak, 0},
      {"rnr-nak", FaultClass::rnr_nak, 0},
      {"read-response", FaultClass::read_response, 0},
      {"atomic", FaultClass::atomic, 0},
      {"atomic-ack", FaultClass::atomic_ack, 0},
      {"cnp", FaultClass::cnp, 0},
      {"cm", FaultClass::cm, 0},
      {"cm:req", FaultClass::cm, 0x10},
      {"cm:mra", FaultClass::cm, 0x11},
      {"cm:rej", FaultClass::cm, 0x12},
      {"cm:rep", FaultClass::cm, 0x13},
      {"cm:rtu", FaultClass::cm, 0x14},
      {"cm:dreq", FaultClass::cm, 0x15},
      {"cm:drep", FaultClass::cm, 0x16},
      {"cm:sidr-req", FaultClass::cm, 0x17},
      {"cm:sidr-rep", FaultClass::cm, 0x18},
      {"cm:lap", FaultClass::cm, 0x19},
      {"CM:APR", FaultClass::cm, 0x1a},
  };
  for (const Case& c : cases) {
    const FaultRule r = rule(std::string("class ") + c.word + " drop");
    EXPECT_EQ(r.cls, c.cls) << c.word;
    EXPECT_EQ(r.cm_attr, c.attr) << c.word;
  }
}

TEST(WireFaultRule, Selectors) {
  FaultRule r = rule("skip 2 every 3 first 4 drop");
  EXPECT_EQ(r.skip, 2u);
  EXPECT_EQ(r.every, 3u);
  EXPECT_EQ(r.first, 4u);
  EXPECT_FALSE(r.has_prob);

  r = rule("prob 0.25 seed 7 drop");
  EXPECT_TRUE(r.has_prob);
  EXPECT_EQ(r.prob, 250000000u);
  EXPECT_EQ(r.seed, 7u);
  EXPECT_EQ(rule("prob .5 drop").prob, 500000000u);
  EXPECT_EQ(rule("prob .5 drop").seed, 1u);  // the default
  EXPECT_EQ(rule("prob 1 drop").prob, kFaultProbOne);
  EXPECT_EQ(rule("prob 1.000 drop").prob, kFaultProbOne);
  EXPECT_EQ(rule("prob 0 drop").prob, 0u);
  EXPECT_EQ(rule("prob 0.000000001 drop").prob, 1u);
  EXPECT_EQ(rule("seed 0xffffffffffffffff prob 0.5 drop").seed, UINT64_MAX);

  r = rule("after 300ms for 2s ecn-ce");
  EXPECT_EQ(r.after_ns, 300000000u);
  EXPECT_EQ(r.for_ns, 2000000000u);
  EXPECT_EQ(rule("for 1ns drop").after_ns, 0u);  // a window from the first match
  EXPECT_EQ(rule("after 3600s drop").after_ns, 3600000000000u);
}

TEST(WireFaultRule, Actions) {
  EXPECT_EQ(rule("drop").action, FaultAction::drop);
  FaultRule r = rule("duplicate");
  EXPECT_EQ(r.action, FaultAction::duplicate);
  EXPECT_EQ(r.count, 1u);
  EXPECT_EQ(rule("duplicate 3").count, 3u);
  EXPECT_EQ(rule("duplicate 3 qpn 5").qpn, 5u);  // the optional count, then more words

  r = rule("delay 250us");
  EXPECT_EQ(r.action, FaultAction::delay);
  EXPECT_EQ(r.delay_ns, 250000u);
  EXPECT_EQ(rule("delay 15ns").delay_ns, 15u);
  EXPECT_EQ(rule("delay 2ms").delay_ns, 2000000u);
  EXPECT_EQ(rule("delay 60s").delay_ns, 60000000000u);

  r = rule("reorder 4");
  EXPECT_EQ(r.action, FaultAction::reorder);
  EXPECT_EQ(r.count, 4u);

  r = rule("corrupt icrc");
  EXPECT_EQ(r.action, FaultAction::corrupt);
  EXPECT_EQ(r.field, FaultField::icrc);
  r = rule("corrupt reth.rkey");
  EXPECT_EQ(r.field, FaultField::reth_rkey);
  EXPECT_FALSE(r.has_value);
  r = rule("corrupt bth.psn=0x100");
  EXPECT_EQ(r.field, FaultField::bth_psn);
  EXPECT_TRUE(r.has_value);
  EXPECT_EQ(r.value, 0x100u);
  EXPECT_EQ(rule("corrupt reth.va=0xffffffffffffffff").value, UINT64_MAX);
  // Every field named in the table parses to itself.
  for (size_t i = 0; i < kFaultFields.size(); ++i)
    EXPECT_EQ(rule("corrupt " + std::string(kFaultFields[i].name)).field, static_cast<FaultField>(i));

  EXPECT_EQ(rule("ecn-ce").action, FaultAction::ecn_ce);
  r = rule("truncate 8");
  EXPECT_EQ(r.action, FaultAction::truncate);
  EXPECT_EQ(r.count, 8u);
}

TEST(WireFaultRule, Refusals) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "empty rule: give an action (drop duplicate delay reorder corrupt ecn-ce truncate)"},
      {"qpn 5", "no action (one of: drop duplicate delay reorder corrupt ecn-ce truncate)"},
      {"qpn x1 drop", "qpn: \"x1\" is not a number"},
      {"qpn 0x1000000 drop", "qpn: 0x1000000 is not in 0..0xffffff"},
      {"qpn -1 drop", "qpn: \"-1\" is not a number"},
      {"qpn", "qpn: needs a number"},
      {"qpn 1 qpn 2 drop", "qpn: given twice"},
      {"dir up drop", "dir: \"up\" is not tx or rx"},
      {"dorp", "unknown action \"dorp\" (did you mean drop?)"},
      {"opcdoe send_only drop", "unknown word \"opcdoe\" (did you mean opcode?)"},
      {"bogus drop",
       "unknown word \"bogus\" (fields: dir qpn opcode class psn; selectors: skip every first prob seed after for; "
       "actions: "
       "drop duplicate delay reorder corrupt ecn-ce truncate)"},
      {"drop delay 1ms", "two actions: drop and delay"},
      {"corrupt reth.foo",
       "corrupt: no field \"reth.foo\" (fields: icrc bth.opcode bth.se bth.migreq bth.pad bth.tver bth.pkey "
       "bth.destqp bth.ackreq bth.psn reth.va reth.rkey reth.len aeth.syndrome aeth.msn atomiceth.va "
       "atomiceth.rkey atomiceth.swap atomiceth.compare atomicacketh.orig deth.qkey deth.srcqp xrceth.srqn "
       "immdt ieth.rkey payload)"},
      {"corrupt bth.psn=0x1000000", "corrupt: 0x1000000 does not fit bth.psn (24 bits)"},
      {"corrupt bth.ackreq=2", "corrupt: 2 does not fit bth.ackreq (1 bits)"},
      {"corrupt reth.rkey=zz", "corrupt: \"zz\" is not a number"},
      {"corrupt icrc=5", "corrupt: icrc takes no value (it is made wrong)"},
      {"opcode send_nothing drop",
       "opcode: no opcode \"send_nothing\" (a name such as send_only, rdma_write_first, acknowledge, cnp, "
       "with "
       "an optional rc_/uc_/ud_/xrc_ prefix, or a number)"},
      {"opcode ud_rdma_write_first drop",
       "opcode: \"ud_rdma_write_first\" does not exist (that transport lacks it)"},
      {"opcode 256 drop", "opcode: 256 is not in 0..255"},
      {"class nack drop",
       "class: no class \"nack\" (request ack nak rnr-nak read-response atomic atomic-ack cnp "
       "cm, cm:TYPE)"},
      {"class cm:foo drop",
       "class: no CM message \"foo\" (req mra rej rep rtu dreq drep lap apr sidr-req sidr-rep)"},
      {"class ack:req drop", "class: ack takes no :TYPE (only cm does)"},
      {"psn abc drop", "psn: \"abc\" is not a PSN, a range A-B or an offset +N"},
      {"psn 0x1000000 drop", "psn: 0x1000000 is more than 24 bits"},
      {"psn +5-2 drop", "psn: +5-2 ends before it starts"},
      {"every 0 drop", "every: 0 is not in 1..0xffffffff"},
      {"first 0 drop", "first: 0 is not in 1..0xffffffff"},
      {"prob 1.5 drop", "prob: 1.5 is not between 0 and 1"},
      {"prob half drop", "prob: \"half\" is not a decimal number"},
      {"prob 0.1234567891 drop", "prob: 0.1234567891 has more than 9 decimals"},
      {"seed 5 drop", "seed: without prob"},
      {"delay 5 ", "delay: \"5\" is not a whole number with a unit (ns, us, ms, s)"},
      {"delay 1.5ms", "delay: \"1.5ms\" is not a whole number with a unit (ns, us, ms, s)"},
      {"delay 61s", "delay: 61s is not in 1ns..60s"},
      {"delay 0ms", "delay: 0ms is not in 1ns..60s"},
      {"delay", "delay: needs a time (e.g. 250us, 2ms)"},
      {"duplicate 17", "duplicate: 17 is not in 1..16"},
      {"reorder", "reorder: needs a number"},
      {"reorder 65", "reorder: 65 is not in 1..64"},
      {"truncate 0", "truncate: 0 is not in 1..65535"},
      {"after 200 drop", "after: \"200\" is not a whole number with a unit (ns, us, ms, s)"},
      {"after 0s drop", "after: 0s is not in 1ns..3600s"},
      {"for 3601s drop", "for: 3601s is not in 1ns..3600s"},
      {"after 1ms after 2ms drop", "after: given twice"},
      {"drop for", "for: needs a time (e.g. 200ms, 1s)"},
  };
  for (const auto& [text, want] : cases) EXPECT_EQ(error(text), want) << text;
}

TEST(WireFaultRule, CanonicalText) {
  // Any order in, one order out: fields, selectors, action; numbers as documented.
  const std::pair<const char*, const char*> cases[] = {
      {"drop", "drop"},
      {"drop qpn 17 dir tx", "dir tx qpn 0x11 drop"},
      {"first 1 skip 2 class nak dir rx duplicate", "dir rx class nak skip 2 first 1 duplicate"},
      {"opcode write_first delay 1500us", "opcode rdma_write_first delay 1500us"},
      {"opcode 0x04 delay 2000000ns", "opcode rc_send_only delay 2ms"},
      {"opcode 0x64 delay 3000ms", "opcode ud_send_only delay 3s"},
      {"opcode 0x81 drop", "opcode cnp drop"},
      {"opcode 0x1c drop", "opcode 0x1c drop"},
      {"opcode 3 drop", "opcode rc_send_last_with_immediate drop"},
      {"class CM:Req prob .50 drop", "class cm:req prob 0.5 seed 1 drop"},
      {"psn +2-+5 every 2 reorder 3", "psn +2-5 every 2 reorder 3"},
      {"psn 0x10 corrupt BTH.PSN=16", "psn 16 corrupt bth.psn=0x10"},
      {"duplicate 1", "duplicate"},
      {"duplicate 2 prob 0.000000001 seed 9", "prob 0.000000001 seed 9 duplicate 2"},
      {"ecn-ce class read-response", "class read-response ecn-ce"},
      {"first 9 for 1000ms dir rx after 300000us every 4 ecn-ce",
       "dir rx after 300ms for 1s every 4 first 9 ecn-ce"},
  };
  for (const auto& [text, want] : cases) {
    const FaultRule r = rule(text);
    EXPECT_EQ(format_fault_rule(r), want) << text;
  }
}

TEST(WireFaultRule, FormatRoundTrip) {
  const char* texts[] = {
      "dir tx qpn 0x11 opcode send_only class request psn 0xfffffe-1 skip 3 every 2 prob 0.3 seed 42 drop",
      "dir rx opcode xrc_rdma_write_only_with_immediate psn +7 duplicate 16",
      "class cm:sidr-rep delay 7ns",
      "class atomic-ack corrupt atomicacketh.orig=0xffffffffffffffff",
      "class rnr-nak corrupt aeth.syndrome",
      "opcode uc_send_middle corrupt payload=0xff",
      "qpn 0 psn 0 every 1 first 1 prob 1 seed 0 reorder 64",
      "prob 0 truncate 65535",
      "class cnp ecn-ce",
      "opcode 255 corrupt icrc",
      "class request after 1500us for 7ns skip 1 ecn-ce",
  };
  for (const char* t : texts) {
    const FaultRule r = rule(t);
    const std::string once = format_fault_rule(r);
    EXPECT_EQ(rule(once), r) << t << " -> " << once;
    EXPECT_EQ(format_fault_rule(rule(once)), once);
  }
}

}  // namespace
