// Fault rules on frames: FaultMatcher (fields, selectors, relative PSNs), FaultTable, and the mutations.
#include <algorithm>

#include "wire/fault_rule.h"
#include "wire/mad.h"
#include "wire/psn.h"

namespace urxe::wire {

namespace {

// Where extension header `h` (one ExtHeader bit) starts in a parsed frame, or 0 if it has none.
uint32_t header_offset(const Packet& p, uint16_t h) {
  if (h == 0) return p.bth_offset;
  if (h == kFaultPayload) return p.payload_len > 0 ? p.payload_offset : 0;
  if (!(p.present & h)) return 0;
  static constexpr struct {
    uint16_t bit;
    uint32_t len;
  } kOrder[] = {{kDeth, kDethLen},           {kXrceth, kXrcethLen}, {kReth, kRethLen},
                {kAtomicEth, kAtomicEthLen}, {kAeth, kAethLen},     {kAtomicAckEth, kAtomicAckEthLen},
                {kImmDt, kImmDtLen},         {kIeth, kIethLen}};
  uint32_t pos = p.bth_offset + kBthLen;
  for (const auto& e : kOrder) {
    if (e.bit == h) return pos;
    if (p.present & e.bit) pos += e.len;
  }
  return 0;
}

bool class_matches(const FaultRule& r, const Packet& p) {
  const OpcodeInfo& info = *p.info;
  const bool acknowledge = info.kind == OpKind::ack && (p.present & kAeth);
  switch (r.cls) {
    case FaultClass::any:
      return true;
    case FaultClass::request:
      return info.is_request;
    case FaultClass::ack:
      return acknowledge && p.aeth.type() == AethType::ack;
    case FaultClass::nak:
      return acknowledge && p.aeth.type() == AethType::nak;
    case FaultClass::rnr_nak:
      return acknowledge && p.aeth.type() == AethType::rnr_nak;
    case FaultClass::read_response:
      return info.kind == OpKind::rdma_read_response;
    case FaultClass::atomic:
      return info.kind == OpKind::compare_swap || info.kind == OpKind::fetch_add ||
             info.kind == OpKind::atomic_write;
    case FaultClass::atomic_ack:
      return info.kind == OpKind::atomic_ack;
    case FaultClass::cnp:
      return info.kind == OpKind::cnp;
    case FaultClass::cm: {
      const ByteSpan mad = qp1_mad(p);
      if (mad.size() < kMadHeaderSize || mad[1] != kMgmtClassCm) return false;
      return r.cm_attr == 0 || load_be16(mad.data() + 16) == r.cm_attr;
    }
  }
  return false;
}

bool opcode_matches(const FaultRule& r, const Packet& p) {
  switch (r.opcode_match) {
    case FaultOpcode::none:
      return true;
    case FaultOpcode::exact:
      return p.bth.opcode == r.opcode;
    case FaultOpcode::any_transport: {
      const Transport t = p.info->transport;
      return (p.bth.opcode & 0x1f) == r.opcode &&
             (t == Transport::rc || t == Transport::uc || t == Transport::ud || t == Transport::xrc);
    }
  }
  return false;
}

// Whether a mutating action has something to act on in this frame.
bool action_applies(const FaultRule& r, const Packet& p) {
  if (r.action == FaultAction::truncate) return p.frame_len > p.bth_offset + kBthLen + kIcrcLen;
  if (r.action != FaultAction::corrupt || r.field == FaultField::icrc) return true;
  return header_offset(p, kFaultFields[static_cast<size_t>(r.field)].header) != 0;
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

FaultMatcher::FaultMatcher(const FaultRule& rule) : rule_(rule), rng_(rule.seed) {}

void FaultMatcher::reset() {
  *this = FaultMatcher(rule_);
}

bool FaultMatcher::relative_psn_base(FaultDir dir, const Packet& p, uint32_t& base) {
  const uint32_t key = ((p.bth.dqpn & kPsnMask) << 1 | static_cast<uint32_t>(dir)) + 1;
  size_t i = (key * 0x9e3779b1u) >> 26;  // 6 bits: kFaultPsnFlows slots
  static_assert(kFaultPsnFlows == 64);
  for (size_t n = 0; n < kFaultPsnFlows; ++n, i = (i + 1) % kFaultPsnFlows) {
    Flow& f = flows_[i];
    if (f.key == 0) f = {key, p.bth.psn & kPsnMask};
    if (f.key == key) {
      base = f.first_psn;
      return true;
    }
  }
  return false;  // full: a flow seen too late
}

bool FaultMatcher::fields_match(FaultDir dir, const Packet& p) {
  if (p.info == nullptr || !p.info->valid()) return false;
  if (rule_.has_dir && dir != rule_.dir) return false;
  if (rule_.has_qpn && p.bth.dqpn != rule_.qpn) return false;
  uint32_t base = 0;
  if (rule_.psn_match == FaultPsn::relative && !relative_psn_base(dir, p, base)) return false;
  if (!opcode_matches(rule_, p) || !class_matches(rule_, p)) return false;
  if (rule_.psn_match != FaultPsn::none) {
    const uint32_t off = psn_sub(p.bth.psn, base);
    if (psn_sub(off, rule_.psn_lo) > psn_sub(rule_.psn_hi, rule_.psn_lo)) return false;
  }
  return action_applies(rule_, p);
}

bool FaultMatcher::match(FaultDir dir, const Packet& p, uint64_t now_ns) {
  if (!fields_match(dir, p)) return false;
  ++matched_;
  if (timed()) {
    if (!started_) started_ = true, start_ns_ = now_ns;
    const uint64_t in = now_ns >= start_ns_ ? now_ns - start_ns_ : 0;  // a clock never goes back; if it did
    if (in < rule_.after_ns) return false;
    if (rule_.for_ns != 0 && in - rule_.after_ns >= rule_.for_ns) return false;
  }
  ++windowed_;
  if (windowed_ <= rule_.skip) return false;
  if (rule_.every > 1 && (windowed_ - rule_.skip) % rule_.every != 0) return false;
  if (rule_.first != 0 && hits_ >= rule_.first) return false;
  if (rule_.has_prob && ((splitmix64(rng_) >> 32) * kFaultProbOne >> 32) >= rule_.prob) return false;
  ++hits_;
  return true;
}

uint32_t FaultTable::add(const FaultRule& rule) {
  if (count_ == kFaultTableSize) return 0;
  entries_[count_++] = Entry{next_id_, FaultMatcher(rule), 0};
  if (entries_[count_ - 1].matcher.timed()) ++timed_;
  return next_id_++;
}

bool FaultTable::del(uint32_t id) {
  for (size_t i = 0; i < count_; ++i) {
    if (entries_[i].id != id) continue;
    if (entries_[i].matcher.timed()) --timed_;
    std::move(entries_.begin() + static_cast<std::ptrdiff_t>(i) + 1,
              entries_.begin() + static_cast<std::ptrdiff_t>(count_),
              entries_.begin() + static_cast<std::ptrdiff_t>(i));
    entries_[--count_] = Entry{};
    return true;
  }
  return false;
}

void FaultTable::clear() {
  while (count_ > 0) entries_[--count_] = Entry{};
  timed_ = 0;
}

const FaultTable::Entry* FaultTable::match(FaultDir dir, const Packet& p, uint64_t now_ns) {
  Entry* chosen = nullptr;
  for (size_t i = 0; i < count_; ++i)
    if (entries_[i].matcher.match(dir, p, now_ns) && chosen == nullptr) chosen = &entries_[i];
  if (chosen != nullptr) ++chosen->applied;
  return chosen;
}

bool apply_fault_mutation(const FaultRule& r, MutByteSpan frame, size_t& len) {
  if (!fault_mutates(r.action) || len > frame.size()) return false;
  Packet p;
  ParseOptions opt;
  opt.verify_icrc = false;
  opt.verify_checksums = false;
  if (parse_frame(frame.first(len), p, opt) != ParseError::ok) return false;
  uint8_t* f = frame.data();
  uint8_t* ip = f + p.l3_offset;
  const uint32_t ip_hdr_len = p.l4_offset - p.l3_offset;
  uint8_t* udp = f + p.l4_offset;
  uint32_t flen = p.frame_len;
  const auto fix_ipv4_checksum = [&] { store_be16(ip + 10, ipv4_header_checksum(ip, ip_hdr_len)); };

  if (r.action == FaultAction::ecn_ce) {
    if (p.ip_version == 4) {
      ip[1] |= 0x03;  // TOS: DSCP(6) ECN(2)
      fix_ipv4_checksum();
    } else {
      ip[1] |= 0x30;  // version(4) traffic class(8): its ECN bits are byte 1's bits 5:4
    }
    len = flen;
    return true;
  }
  if (r.action == FaultAction::truncate) {
    const uint32_t after_bth = flen - kIcrcLen - (p.bth_offset + kBthLen);
    const uint32_t n = std::min(r.count, after_bth);
    if (n == 0) return false;
    flen -= n;
    if (p.ip_version == 4) {
      store_be16(ip + 2, static_cast<uint16_t>(load_be16(ip + 2) - n));
      fix_ipv4_checksum();
    } else {
      store_be16(ip + 4, static_cast<uint16_t>(load_be16(ip + 4) - n));
    }
    store_be16(udp + 4, static_cast<uint16_t>(load_be16(udp + 4) - n));
  } else {  // corrupt
    if (r.field != FaultField::icrc) {
      const FaultFieldInfo& fi = kFaultFields[static_cast<size_t>(r.field)];
      const uint32_t at = header_offset(p, fi.header);
      if (at == 0) return false;
      uint8_t* q = f + at + fi.off;
      uint64_t v = 0;
      for (uint8_t i = 0; i < fi.bytes; ++i) v = v << 8 | q[i];
      const uint64_t mask = (fi.width == 64 ? ~uint64_t{0} : (uint64_t{1} << fi.width) - 1) << fi.shift;
      const uint64_t old = (v & mask) >> fi.shift;
      const uint64_t now = r.has_value ? r.value : old ^ 1;
      v = (v & ~mask) | ((now << fi.shift) & mask);
      for (uint8_t i = fi.bytes; i-- > 0; v >>= 8) q[i] = static_cast<uint8_t>(v);
    }
  }
  store_be16(udp + 6, 0);
  write_icrc(frame.first(flen));
  if (r.action == FaultAction::corrupt && r.field == FaultField::icrc)
    store_le32(f + flen - kIcrcLen, ~load_le32(f + flen - kIcrcLen));
  len = flen;
  return true;
}

}  // namespace urxe::wire
