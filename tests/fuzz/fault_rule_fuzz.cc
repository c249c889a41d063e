// libFuzzer target over the fault rule language and its use on frames (wire/fault_rule.h). The input is a
// rule's text, a newline, then a frame. Besides "no crash, no out-of-bounds access" (ASan/UBSan), it checks:
//  - a rule that parses formats to text that parses to the same rule and formats the same again; a refused
//    rule says why;
//  - matching is a function of the rule and the frames (two matchers agree), hits never exceed matches nor
//    "first N", and a table with the rule decides what the matcher alone does;
//  - a mutation never grows the frame and changes nothing when it does not apply; when it does: the ICRC is
//    right (write_icrc would not change it) except after "corrupt icrc", where it is the complement and only
//    it (and a UDP checksum, zeroed) changed; ecn-ce marks CE and leaves the ICRC; a corrupted field reads
//    back as VALUE or as its old value with the low bit flipped, in a frame that parses as before when the
//    field does not change the layout; truncate cuts min(N, bytes after the BTH) and the IP and UDP lengths
//    and IPv4 checksum follow.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "wire/fault_rule.h"
#include "wire/packet.h"

using namespace urxe::wire;

namespace {

[[noreturn]] void violated(const char* what, int line) {
  std::fprintf(stderr, "fault_rule_fuzz: invariant violated (line %d): %s\n", line, what);
  std::abort();
}
#define INVARIANT(c) ((c) ? (void)0 : violated(#c, __LINE__))

ParseError parse(ByteSpan f, Packet& p, bool icrc, bool checksums) {
  ParseOptions o;
  o.verify_icrc = icrc;
  o.verify_checksums = checksums;
  return parse_frame(f, p, o);
}

// The field's value in a frame as parse_frame read it.
uint64_t read_field(FaultField f, const Packet& p) {
  switch (f) {
    case FaultField::bth_opcode:
      return p.bth.opcode;
    case FaultField::bth_se:
      return p.bth.se;
    case FaultField::bth_migreq:
      return p.bth.migreq;
    case FaultField::bth_pad:
      return p.bth.pad;
    case FaultField::bth_tver:
      return p.bth.tver;
    case FaultField::bth_pkey:
      return p.bth.pkey;
    case FaultField::bth_destqp:
      return p.bth.dqpn;
    case FaultField::bth_ackreq:
      return p.bth.ack_req;
    case FaultField::bth_psn:
      return p.bth.psn;
    case FaultField::reth_va:
      return p.reth.va;
    case FaultField::reth_rkey:
      return p.reth.rkey;
    case FaultField::reth_len:
      return p.reth.dma_len;
    case FaultField::aeth_syndrome:
      return p.aeth.syndrome;
    case FaultField::aeth_msn:
      return p.aeth.msn;
    case FaultField::atomiceth_va:
      return p.atomic_eth.va;
    case FaultField::atomiceth_rkey:
      return p.atomic_eth.rkey;
    case FaultField::atomiceth_swap:
      return p.atomic_eth.swap_add;
    case FaultField::atomiceth_compare:
      return p.atomic_eth.compare;
    case FaultField::atomicacketh_orig:
      return p.atomic_ack_eth.orig_data;
    case FaultField::deth_qkey:
      return p.deth.qkey;
    case FaultField::deth_srcqp:
      return p.deth.src_qp;
    case FaultField::xrceth_srqn:
      return p.xrc_srqn;
    case FaultField::immdt:
      return p.imm;
    case FaultField::ieth_rkey:
      return p.ieth_rkey;
    case FaultField::payload:
      return p.payload.empty() ? 0 : p.payload[0];
    default:
      return 0;
  }
}

bool changes_layout(FaultField f) {
  return f == FaultField::bth_opcode || f == FaultField::bth_pad || f == FaultField::bth_tver;
}

constexpr uint64_t kStepNs = 50'000'000;

void check_matching(const FaultRule& r, ByteSpan frame) {
  Packet p;
  if (parse(frame, p, false, false) != ParseError::ok) p = Packet{};  // never matches
  FaultMatcher a(r), b(r);
  FaultTable t;
  const uint32_t id = t.add(r);
  INVARIANT(id == 1);
  for (int i = 0; i < 6; ++i) {
    const FaultDir dir = i % 3 == 2 ? FaultDir::rx : FaultDir::tx;
    const uint64_t now = uint64_t{static_cast<unsigned>(i)} * kStepNs;  // a time window opens and closes
    const bool hit = a.match(dir, p, now);
    INVARIANT(b.match(dir, p, now) == hit);
    const FaultTable::Entry* e = t.match(dir, p, now);
    INVARIANT((e != nullptr) == hit);
    INVARIANT(t.timed() == a.timed());
    INVARIANT(a.hits() <= a.matched());
    INVARIANT(r.first == 0 || a.hits() <= r.first);
    INVARIANT(a.matched() <= a.hits() + r.skip || r.every > 1 || r.has_prob || r.first != 0 || a.timed());
    // nothing hits before the window opens (the first match is at or after 0)
    INVARIANT(!hit || now >= r.after_ns);
  }
  INVARIANT(t.entries()[0].matcher.hits() == a.hits());
  // A Packet parse_frame left half filled (it stopped at an error) is safe to match too.
  Packet partial;
  parse(frame, partial, true, true);
  FaultMatcher c(r);
  c.match(FaultDir::tx, partial, 0);
  INVARIANT(t.entries()[0].applied == a.hits());
  INVARIANT(t.del(id) && t.empty());
}

void check_mutation(const FaultRule& r, ByteSpan in) {
  std::vector<uint8_t> buf(in.begin(), in.end());
  size_t len = buf.size();
  const bool applied = apply_fault_mutation(r, buf, len);
  INVARIANT(len <= in.size());
  if (!applied) {
    INVARIANT(len == in.size() && std::equal(buf.begin(), buf.end(), in.begin()));
    return;
  }
  INVARIANT(fault_mutates(r.action));
  Packet before;
  INVARIANT(parse(in, before, false, false) == ParseError::ok);
  const ByteSpan out(buf.data(), len);
  std::vector<uint8_t> resealed(out.begin(), out.end());
  INVARIANT(write_icrc(resealed));
  const uint32_t icrc_off = static_cast<uint32_t>(len) - kIcrcLen;
  const bool icrc_right = std::equal(resealed.begin(), resealed.end(), out.begin());
  Packet after;
  switch (r.action) {
    case FaultAction::ecn_ce: {
      INVARIANT(len == before.frame_len);
      INVARIANT(std::equal(out.begin() + icrc_off, out.end(), in.begin() + icrc_off));
      Packet strict;
      INVARIANT(parse(out, after, false, true) == ParseError::ok ||
                parse(in, strict, false, true) != ParseError::ok);
      const uint8_t* ip = out.data() + before.l3_offset;
      INVARIANT(before.ip_version == 4 ? (ip[1] & 3) == 3 : (ip[1] & 0x30) == 0x30);
      break;
    }
    case FaultAction::truncate: {
      const uint32_t after_bth = before.frame_len - kIcrcLen - (before.bth_offset + kBthLen);
      INVARIANT(len == before.frame_len - std::min(r.count, after_bth));
      INVARIANT(icrc_right);
      INVARIANT(parse(out, after, false, false) != ParseError::truncated);
      const uint8_t* ip = out.data() + before.l3_offset;
      const uint32_t ip_end = before.ip_version == 4 ? load_be16(ip + 2) + before.l3_offset
                                                     : load_be16(ip + 4) + before.l4_offset;
      INVARIANT(ip_end == len);
      INVARIANT(load_be16(out.data() + before.l4_offset + 4) == len - before.l4_offset);
      if (before.ip_version == 4) INVARIANT(ipv4_header_checksum_ok(ip, before.l4_offset - before.l3_offset));
      break;
    }
    case FaultAction::corrupt: {
      INVARIANT(len == before.frame_len);
      if (r.field == FaultField::icrc) {
        std::vector<uint8_t> want(in.begin(), in.begin() + icrc_off);  // with the UDP checksum zeroed
        want[before.l4_offset + 6] = want[before.l4_offset + 7] = 0;
        INVARIANT(std::equal(want.begin(), want.end(), out.begin()));
        INVARIANT(load_le32(out.data() + icrc_off) == ~load_le32(resealed.data() + icrc_off));
        break;
      }
      INVARIANT(icrc_right);
      if (changes_layout(r.field)) break;
      Packet strict;
      const bool checksums_ok = parse(in, strict, false, true) == ParseError::ok;
      INVARIANT(parse(out, after, true, true) == ParseError::ok || !checksums_ok);
      if (!checksums_ok) INVARIANT(parse(out, after, false, false) == ParseError::ok);
      const uint64_t old = read_field(r.field, before);
      INVARIANT(read_field(r.field, after) == (r.has_value ? r.value : old ^ 1));
      break;
    }
    default:
      INVARIANT(false);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t nl = all.find('\n');
  const std::string_view text = all.substr(0, nl);
  const ByteSpan frame = nl == std::string_view::npos ? ByteSpan{} : ByteSpan(data + nl + 1, size - nl - 1);

  const FaultParse parsed = parse_fault_rule(text);
  if (!parsed) {
    INVARIANT(!parsed.error.empty());
    return 0;
  }
  const FaultRule& r = *parsed.rule;
  const std::string canonical = format_fault_rule(r);
  const FaultParse again = parse_fault_rule(canonical);
  INVARIANT(again && *again.rule == r);
  INVARIANT(format_fault_rule(*again.rule) == canonical);

  check_matching(r, frame);
  check_mutation(r, frame);
  return 0;
}
