// libFuzzer target over wire::parse_frame. Besides "no crash, no out-of-bounds read" (ASan/UBSan), it checks
// what callers rely on:
//  - the result and every field are a function of the bytes alone (parse twice, compare);
//  - on ok, every offset/length lies inside the input, the payload span inside the frame, the ICRC is the
//    stored one, and the layout adds up (headers + payload + pad + ICRC == frame_len);
//  - switching verification off only removes bad_icrc / bad_checksum, never adds an error;
//  - stopping at the BTH (bth_only) is ok with the same BTH wherever the whole parse is;
//  - a frame that parses structurally, once its IPv4/UDP checksums and ICRC are repaired, parses ok;
//  - an ok frame rebuilt with build_frame from its parsed fields parses to the same fields, and for
//    canonical frames (what build_frame itself emits) reproduces the input byte for byte;
//  - a QP1 frame's MAD, and the input read as a bare MAD, decode (parse_cm_mad) without reading past the 256
//    bytes; a decoded CM message rebuilt with build_cm_mad decodes to the same message and rebuilds to the
//    same bytes;
//  - the input read as a UDP GSO datagram (wire/gso.h): a segment length only when segment 0 is then a good
//    RoCEv2 frame, and cutting every segment stays within the input and the output buffer.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "wire/gso.h"
#include "wire/mad.h"
#include "wire/packet.h"

using namespace urxe::wire;

namespace {

[[noreturn]] void violated(const char* what, int line) {
  std::fprintf(stderr, "parse_frame_fuzz: invariant violated (line %d): %s\n", line, what);
  std::abort();
}
#define INVARIANT(c) ((c) ? (void)0 : violated(#c, __LINE__))

void put_mac(std::vector<uint64_t>& v, const MacAddr& m) {
  for (uint8_t b : m) v.push_back(b);
}

// Fields that survive a rebuild: everything a receiver acts on.
std::vector<uint64_t> semantic_fields(const Packet& p) {
  std::vector<uint64_t> v;
  put_mac(v, p.eth.dst);
  put_mac(v, p.eth.src);
  v.insert(v.end(), {p.eth.has_vlan, p.eth.vlan_tci, p.eth.ethertype, p.ip_version});
  if (p.ip_version == 4)
    v.insert(v.end(),
             {p.ip4.tos, p.ip4.id, uint64_t{(p.ip4.frag & kIpv4FlagDf) != 0}, p.ip4.ttl, p.ip4.protocol});
  if (p.ip_version == 6)
    v.insert(v.end(),
             {p.ip6.traffic_class, p.ip6.flow_label, p.ip6.payload_len, p.ip6.next_header, p.ip6.hop_limit});
  for (uint8_t b : p.src_gid()) v.push_back(b);
  for (uint8_t b : p.dst_gid()) v.push_back(b);
  v.insert(v.end(), {p.udp.sport, p.udp.dport, p.udp.length});
  const Bth& b = p.bth;
  v.insert(v.end(), {b.opcode, b.se, b.migreq, b.pad, b.tver, b.pkey, b.fecn, b.becn, b.resv6, b.dqpn,
                     b.ack_req, b.resv7, b.psn});
  v.insert(v.end(),
           {p.present, p.reth.va, p.reth.rkey, p.reth.dma_len, p.aeth.syndrome, p.aeth.msn, p.atomic_eth.va,
            p.atomic_eth.rkey, p.atomic_eth.swap_add, p.atomic_eth.compare, p.atomic_ack_eth.orig_data,
            p.deth.qkey, p.deth.src_qp, p.imm, p.ieth_rkey, p.xrc_srqn, p.payload_len});
  for (uint8_t x : p.payload) v.push_back(x);
  return v;
}

// Everything parse_frame reports, for the determinism check.
std::vector<uint64_t> all_fields(const Packet& p, const uint8_t* base) {
  std::vector<uint64_t> v = semantic_fields(p);
  v.insert(v.end(), {p.ip4.ihl, p.ip4.total_len, p.ip4.checksum, p.udp.checksum, p.l3_offset, p.l4_offset,
                     p.bth_offset, p.payload_offset, p.frame_len, p.icrc, p.icrc_expected, p.icrc_checked,
                     p.icrc_ok, static_cast<uint64_t>(p.payload.data() ? p.payload.data() - base : -1),
                     static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p.info))});
  return v;
}

// Fields and the payload span stay inside the input whatever the result.
void check_bounds(const uint8_t* data, size_t size, const Packet& p) {
  for (uint32_t off : {p.l3_offset, p.l4_offset, p.bth_offset, p.payload_offset, p.frame_len})
    INVARIANT(off <= size);
  if (!p.payload.empty()) {
    INVARIANT(p.payload.data() >= data);
    INVARIANT(p.payload.data() + p.payload.size() <= data + size);
  }
}

void check_ok(const uint8_t* data, size_t size, const Packet& p) {
  INVARIANT(p.info != nullptr && p.info->valid());
  INVARIANT(p.info == &opcode_info(p.bth.opcode));
  INVARIANT(p.present == p.info->headers);
  INVARIANT(p.ip_version == 4 || p.ip_version == 6);
  INVARIANT(p.l3_offset == (p.eth.has_vlan ? kEthLen + kVlanLen : kEthLen));
  const uint32_t ip_hdr_len = p.ip_version == 4 ? uint32_t{p.ip4.ihl} * 4 : kIpv6Len;
  INVARIANT(p.l4_offset == p.l3_offset + ip_hdr_len);
  INVARIANT(p.bth_offset == p.l4_offset + kUdpLen);
  INVARIANT(p.payload_offset == p.bth_offset + kBthLen + p.info->ext_len);
  INVARIANT(p.frame_len <= size);
  INVARIANT(uint64_t{p.payload_offset} + p.payload_len + p.bth.pad + kIcrcLen == p.frame_len);
  INVARIANT(p.udp.length == p.frame_len - p.l4_offset);
  INVARIANT(p.udp.dport == kRoceV2Port);
  INVARIANT(p.bth.tver == 0);
  if (p.ip_version == 4) INVARIANT(p.ip4.total_len == p.frame_len - p.l3_offset);
  if (p.ip_version == 6) INVARIANT(p.ip6.payload_len == p.frame_len - p.l4_offset);
  INVARIANT(p.payload.size() == p.payload_len);
  if (p.payload_len > 0) INVARIANT(p.payload.data() == data + p.payload_offset);
  INVARIANT((p.payload_len + p.bth.pad) % 4 == 0);
  if (!p.info->has_payload) INVARIANT(p.payload_len == 0 && p.bth.pad == 0);
  INVARIANT(p.icrc_checked && p.icrc_ok && p.icrc == p.icrc_expected);
  INVARIANT(p.icrc == load_le32(data + p.frame_len - kIcrcLen));
}

FrameSpec spec_from(const Packet& p) {
  FrameSpec s;
  s.dst_mac = p.eth.dst;
  s.src_mac = p.eth.src;
  s.has_vlan = p.eth.has_vlan;
  s.vlan_tci = p.eth.vlan_tci;
  s.ip_version = p.ip_version;
  s.src_ip = p.src_gid();
  s.dst_ip = p.dst_gid();
  s.traffic_class = p.ip_version == 4 ? p.ip4.tos : p.ip6.traffic_class;
  s.ttl = p.ip_version == 4 ? p.ip4.ttl : p.ip6.hop_limit;
  s.ip_id = p.ip4.id;
  s.df = (p.ip4.frag & kIpv4FlagDf) != 0;
  s.flow_label = p.ip6.flow_label;
  s.udp_sport = p.udp.sport;
  s.udp_dport = p.udp.dport;
  s.udp_checksum = p.udp.checksum != 0;
  s.bth = p.bth;
  s.reth = p.reth;
  s.aeth = p.aeth;
  s.atomic_eth = p.atomic_eth;
  s.atomic_ack_eth = p.atomic_ack_eth;
  s.deth = p.deth;
  s.imm = p.imm;
  s.ieth_rkey = p.ieth_rkey;
  s.xrc_srqn = p.xrc_srqn;
  return s;
}

// What build_frame would emit byte for byte: no IPv4 options or flags other than DF, zero pad bytes, zero
// DETH and XRCETH reserved bytes and CNP reserved bytes (build_frame writes zeros there).
bool canonical(const uint8_t* data, const Packet& p) {
  if (p.ip_version == 4 && (p.ip4.ihl != 5 || (p.ip4.frag & ~kIpv4FlagDf) != 0)) return false;
  const uint8_t* f = data;
  for (uint32_t i = 0; i < p.bth.pad; ++i)
    if (f[p.payload_offset + p.payload_len + i] != 0) return false;
  uint32_t ext = p.bth_offset + kBthLen;
  if ((p.present & kDeth) && f[ext + 4] != 0) return false;
  if ((p.present & kXrceth) && f[ext + ((p.present & kDeth) ? kDethLen : 0)] != 0) return false;
  if (p.info->kind == OpKind::cnp)
    for (uint32_t i = 0; i < kCnpPayloadLen; ++i)
      if (f[ext + i] != 0) return false;
  return true;
}

void check_rebuild(const uint8_t* data, const Packet& p) {
  const FrameSpec spec = spec_from(p);
  const uint32_t want = frame_size(spec, p.payload_len);
  // Exactly sized heap buffers, so a write past the end is an ASan report.
  std::vector<uint8_t> small(want - 1);
  INVARIANT(build_frame(small, spec, p.payload) == 0);
  std::vector<uint8_t> out(want);
  INVARIANT(build_frame(out, spec, p.payload) == want);
  Packet q;
  INVARIANT(parse_frame(out, q) == ParseError::ok);
  check_ok(out.data(), out.size(), q);
  INVARIANT(semantic_fields(q) == semantic_fields(p));
  if (canonical(data, p)) {
    INVARIANT(want == p.frame_len);
    INVARIANT(std::memcmp(out.data(), data, want) == 0);
  }
}

uint16_t ones_sum_fold(uint32_t s) {
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  return static_cast<uint16_t>(s);
}

// Recomputes the UDP checksum (RFC 768 / RFC 8200 pseudo-header) into a frame whose layout `p` describes.
void fix_udp_checksum(uint8_t* f, const Packet& p) {
  uint8_t* udp = f + p.l4_offset;
  const uint32_t len = p.udp.length;
  uint32_t s = 0;
  if (p.ip_version == 4) {
    for (int i = 12; i < 20; i += 2) s += load_be16(f + p.l3_offset + i);
  } else {
    for (int i = 8; i < 40; i += 2) s += load_be16(f + p.l3_offset + i);
  }
  s += kIpProtoUdp + len;
  store_be16(udp + 6, 0);
  for (uint32_t i = 0; i + 1 < len; i += 2) s += load_be16(udp + i);
  if (len & 1) s += uint32_t{udp[len - 1]} << 8;
  uint16_t c = static_cast<uint16_t>(~ones_sum_fold(s));
  store_be16(udp + 6, c == 0 ? 0xffff : c);
}

// parse_cm_mad on `mad` (copied to its exact length so ASan sees any read past it).
void check_mad(ByteSpan mad) {
  const std::vector<uint8_t> copy(mad.begin(), mad.end());
  CmMad m;
  const MadError e = parse_cm_mad(copy, m);
  if (copy.size() < kMadSize) INVARIANT(e == MadError::truncated);
  if (e != MadError::ok) return;
  std::vector<uint8_t> built(kMadSize), again(kMadSize);
  INVARIANT(build_cm_mad(built, m));
  CmMad back;
  INVARIANT(parse_cm_mad(built, back) == MadError::ok);
  INVARIANT(back.msg == m.msg);
  INVARIANT(build_cm_mad(again, back));
  INVARIANT(built == again);
}

void run(const uint8_t* data, size_t size) {
  const ByteSpan in(data, size);
  Packet p1, p2;
  const ParseError e1 = parse_frame(in, p1);
  const ParseError e2 = parse_frame(in, p2);
  INVARIANT(e1 == e2);
  INVARIANT(all_fields(p1, data) == all_fields(p2, data));
  check_bounds(data, size, p1);
  check_mad(ByteSpan(data, size));
  if (e1 == ParseError::ok || e1 == ParseError::bad_icrc) {
    const ByteSpan mad = qp1_mad(p1);
    INVARIANT(mad.empty() || (mad.data() >= data && mad.data() + kMadSize <= data + size));
    if (!mad.empty()) check_mad(mad);
  }

  Packet lax;
  const ParseError no_icrc = parse_frame(in, lax, ParseOptions{.verify_icrc = false});
  check_bounds(data, size, lax);
  INVARIANT(no_icrc == (e1 == ParseError::bad_icrc ? ParseError::ok : e1));
  INVARIANT(!lax.icrc_checked);
  const ParseError no_csum = parse_frame(in, lax, ParseOptions{.verify_checksums = false});
  check_bounds(data, size, lax);
  INVARIANT(no_csum != ParseError::bad_checksum);
  if (e1 != ParseError::bad_checksum) INVARIANT(no_csum == e1);

  if (e1 == ParseError::ok) {
    check_ok(data, size, p1);
    check_rebuild(data, p1);
  }
  // Stopping at the BTH (the same-host path's routing) agrees with the whole parse (`lax`: checksums off) on
  // every frame that parses: ok, and the same BTH and header offsets.
  Packet head;
  const ParseError e_head =
      parse_frame(in, head, ParseOptions{.verify_icrc = false, .verify_checksums = false, .bth_only = true});
  check_bounds(data, size, head);
  if (no_csum == ParseError::ok || no_csum == ParseError::bad_icrc) {
    INVARIANT(e_head == ParseError::ok);
    INVARIANT(head.bth.dqpn == lax.bth.dqpn && head.bth.opcode == lax.bth.opcode);
    INVARIANT(head.bth_offset == lax.bth_offset && head.l3_offset == lax.l3_offset);
  }

  // Repair checksums and ICRC so mutated headers reach the ok path, which random bytes almost never do.
  Packet s;
  if (parse_frame(in, s, ParseOptions{.verify_icrc = false, .verify_checksums = false}) != ParseError::ok)
    return;
  std::vector<uint8_t> fixed(data, data + size);
  uint8_t* f = fixed.data();
  if (s.ip_version == 4) {
    const uint32_t ip_hdr_len = uint32_t{s.ip4.ihl} * 4;
    store_be16(f + s.l3_offset + 10, ipv4_header_checksum(f + s.l3_offset, ip_hdr_len));
  }
  const uint32_t ip_hdr_len = s.l4_offset - s.l3_offset;
  const uint32_t icrc_off = s.frame_len - kIcrcLen;
  store_le32(f + icrc_off,
             compute_icrc(ByteSpan(f + s.l3_offset, icrc_off - s.l3_offset), s.ip_version, ip_hdr_len));
  // The UDP checksum covers the ICRC (the ICRC masks the checksum field), so it comes last.
  if (s.udp.checksum != 0) fix_udp_checksum(f, s);
  Packet r;
  INVARIANT(parse_frame(fixed, r) == ParseError::ok);
  check_ok(f, fixed.size(), r);
  check_rebuild(f, r);
}

}  // namespace

void run_gso(const uint8_t* data, size_t size) {
  const ByteSpan d(data, size);
  const uint32_t seg = gso_segment_len(d);
  if (seg == 0) return;
  std::vector<uint8_t> out(size);
  uint32_t total = 0;
  for (uint32_t i = 0;; ++i) {
    const uint32_t n = gso_segment(d, seg, i, MutByteSpan(out));
    if (n == 0) break;
    INVARIANT(n <= size);
    if (i == 0) {
      Packet p;
      INVARIANT(parse_frame(ByteSpan(out.data(), n), p) == ParseError::ok && p.icrc_ok);
    }
    total += n;
    INVARIANT(i < size);
  }
  INVARIANT(total > 0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  run(data, size);
  run_gso(data, size);
  return 0;
}
