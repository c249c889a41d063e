#include "wire/packet.h"

#include <cstring>

#include "wire/psn.h"

namespace urxe::wire {
namespace {

uint32_t sum16(const uint8_t* p, uint32_t n, uint32_t sum) {
  uint32_t i = 0;
  for (; i + 1 < n; i += 2) sum += load_be16(p + i);
  if (i < n) sum += uint32_t{p[i]} << 8;
  return sum;
}
uint16_t fold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(sum);
}

// One's-complement sum of the IP pseudo-header and the UDP datagram (checksum field included as stored).
uint16_t udp_sum(uint8_t ip_version, const uint8_t* ip, const uint8_t* udp, uint32_t udp_len) {
  uint32_t s = 0;
  if (ip_version == 4) {
    s = sum16(ip + 12, 8, s);  // src + dst
    s += kIpProtoUdp;
    s += udp_len;
  } else {
    s = sum16(ip + 8, 32, s);
    s += udp_len >> 16;
    s += udp_len & 0xffff;
    s += kIpProtoUdp;
  }
  return fold(sum16(udp, udp_len, s));
}

}  // namespace

std::string_view to_string(ParseError e) {
  switch (e) {
    case ParseError::ok:
      return "ok";
    case ParseError::truncated:
      return "truncated";
    case ParseError::not_roce:
      return "not RoCE";
    case ParseError::bad_version:
      return "bad version";
    case ParseError::bad_length:
      return "bad length";
    case ParseError::bad_checksum:
      return "bad checksum";
    case ParseError::unknown_opcode:
      return "unknown opcode";
    case ParseError::bad_pad:
      return "bad pad";
    case ParseError::bad_icrc:
      return "bad ICRC";
  }
  return "?";
}

Gid Packet::src_gid() const {
  return ip_version == 4 ? gid_from_ipv4(ip4.src) : ip6.src;
}
Gid Packet::dst_gid() const {
  return ip_version == 4 ? gid_from_ipv4(ip4.dst) : ip6.dst;
}

ParseError parse_frame(ByteSpan frame, Packet& out, const ParseOptions& opt) {
  out = Packet{};
  const uint8_t* f = frame.data();
  const uint32_t n = static_cast<uint32_t>(frame.size() > 0xffffffffu ? 0xffffffffu : frame.size());
  if (n < kEthLen) return ParseError::truncated;
  std::memcpy(out.eth.dst.data(), f, 6);
  std::memcpy(out.eth.src.data(), f + 6, 6);
  uint32_t l3 = kEthLen;
  out.eth.ethertype = load_be16(f + 12);
  if (out.eth.ethertype == kEtherTypeVlan) {
    if (n < kEthLen + kVlanLen) return ParseError::truncated;
    out.eth.has_vlan = true;
    out.eth.vlan_tci = load_be16(f + 14);
    out.eth.ethertype = load_be16(f + 16);
    l3 += kVlanLen;
  }
  out.l3_offset = l3;
  uint32_t l4 = 0, ip_end = 0, ip_hdr_len = 0;
  const uint8_t* ip = f + l3;
  if (out.eth.ethertype == kEtherTypeIpv4) {
    if (n < l3 + kIpv4MinLen) return ParseError::truncated;
    out.ip_version = 4;
    Ipv4Header& h = out.ip4;
    h.ihl = ip[0] & 0xf;
    h.tos = ip[1];
    h.total_len = load_be16(ip + 2);
    h.id = load_be16(ip + 4);
    h.frag = load_be16(ip + 6);
    h.ttl = ip[8];
    h.protocol = ip[9];
    h.checksum = load_be16(ip + 10);
    std::memcpy(h.src.data(), ip + 12, 4);
    std::memcpy(h.dst.data(), ip + 16, 4);
    if ((ip[0] >> 4) != 4) return ParseError::bad_version;
    ip_hdr_len = uint32_t{h.ihl} * 4;
    if (h.ihl < 5) return ParseError::bad_length;
    if (n < l3 + ip_hdr_len) return ParseError::truncated;
    if (opt.verify_checksums && !ipv4_header_checksum_ok(ip, ip_hdr_len)) return ParseError::bad_checksum;
    if (h.total_len < ip_hdr_len) return ParseError::bad_length;
    if (h.protocol != kIpProtoUdp) return ParseError::not_roce;
    if (h.frag & (kIpv4FlagMf | kIpv4FragOffsetMask)) return ParseError::not_roce;
    ip_end = l3 + h.total_len;
    if (ip_end > n) return ParseError::truncated;
  } else if (out.eth.ethertype == kEtherTypeIpv6) {
    if (n < l3 + kIpv6Len) return ParseError::truncated;
    out.ip_version = 6;
    Ipv6Header& h = out.ip6;
    h.traffic_class = static_cast<uint8_t>(((ip[0] & 0xf) << 4) | (ip[1] >> 4));
    h.flow_label = ((uint32_t{ip[1]} & 0xf) << 16) | load_be16(ip + 2);
    h.payload_len = load_be16(ip + 4);
    h.next_header = ip[6];
    h.hop_limit = ip[7];
    std::memcpy(h.src.data(), ip + 8, 16);
    std::memcpy(h.dst.data(), ip + 24, 16);
    if ((ip[0] >> 4) != 6) return ParseError::bad_version;
    ip_hdr_len = kIpv6Len;
    if (h.next_header != kIpProtoUdp) return ParseError::not_roce;
    ip_end = l3 + kIpv6Len + h.payload_len;
    if (ip_end > n) return ParseError::truncated;
  } else {
    return ParseError::not_roce;
  }
  l4 = l3 + ip_hdr_len;
  out.l4_offset = l4;
  if (ip_end < l4 + kUdpLen) return ParseError::bad_length;
  const uint8_t* udp = f + l4;
  out.udp = UdpHeader{load_be16(udp), load_be16(udp + 2), load_be16(udp + 4), load_be16(udp + 6)};
  if (out.udp.dport != kRoceV2Port) return ParseError::not_roce;
  if (out.udp.length != ip_end - l4) return ParseError::bad_length;
  if (opt.verify_checksums && out.udp.checksum != 0 &&
      udp_sum(out.ip_version, ip, udp, out.udp.length) != 0xffff)
    return ParseError::bad_checksum;

  const uint32_t bth_off = l4 + kUdpLen;
  out.bth_offset = bth_off;
  if (ip_end < bth_off + kBthLen + kIcrcLen) return ParseError::bad_length;
  out.bth = parse_bth(f + bth_off);
  out.frame_len = ip_end;
  if (out.bth.tver != 0) return ParseError::bad_version;
  if (opt.bth_only) return ParseError::ok;
  const OpcodeInfo& info = opcode_info(out.bth.opcode);
  if (!info.valid()) return ParseError::unknown_opcode;
  out.info = &info;
  uint32_t pos = bth_off + kBthLen;
  const uint32_t icrc_off = ip_end - kIcrcLen;
  if (icrc_off < pos + info.ext_len) return ParseError::bad_length;
  out.present = info.headers;
  const uint16_t h = info.headers;
  if (h & kDeth) out.deth = parse_deth(f + pos), pos += kDethLen;
  if (h & kXrceth) out.xrc_srqn = load_be32(f + pos) & 0xffffffu, pos += kXrcethLen;
  if (h & kReth) out.reth = parse_reth(f + pos), pos += kRethLen;
  if (h & kAtomicEth) out.atomic_eth = parse_atomic_eth(f + pos), pos += kAtomicEthLen;
  if (h & kAeth) out.aeth = parse_aeth(f + pos), pos += kAethLen;
  if (h & kAtomicAckEth) out.atomic_ack_eth = parse_atomic_ack_eth(f + pos), pos += kAtomicAckEthLen;
  if (h & kImmDt) out.imm = load_be32(f + pos), pos += kImmDtLen;
  if (h & kIeth) out.ieth_rkey = load_be32(f + pos), pos += kIethLen;
  if (info.kind == OpKind::cnp) pos += kCnpPayloadLen;
  out.payload_offset = pos;
  const uint32_t region = icrc_off - pos;
  if (!info.has_payload) {
    if (region != 0) return ParseError::bad_length;
    if (out.bth.pad != 0) return ParseError::bad_pad;
  } else {
    if (out.bth.pad > region || (region & 3) != 0) return ParseError::bad_pad;
    out.payload_len = region - out.bth.pad;
    out.payload = ByteSpan(f + pos, out.payload_len);
  }
  if (opt.verify_icrc) {
    out.icrc = load_le32(f + icrc_off);
    out.icrc_checked = true;
    out.icrc_expected = compute_icrc(ByteSpan(ip, icrc_off - l3), out.ip_version, ip_hdr_len);
    out.icrc_ok = out.icrc_expected == out.icrc;
    if (!out.icrc_ok) return ParseError::bad_icrc;
  }
  return ParseError::ok;
}

namespace {

// The IP header's offset in a frame of `spec`.
uint32_t l3_offset(const FrameSpec& spec) {
  return kEthLen + (spec.has_vlan ? kVlanLen : 0);
}

// Ethernet (+ VLAN), IPv4 or IPv6 and UDP of `spec` for a UDP datagram of `udp_len` bytes. `ipv4_sum`: the
// IPv4 header's sum before the total length is added (see HeaderPrefix).
void write_l2_l4(uint8_t* f, const FrameSpec& spec, uint8_t ip_version, uint32_t udp_len,
                 uint32_t& ipv4_sum) {
  std::memcpy(f, spec.dst_mac.data(), 6);
  std::memcpy(f + 6, spec.src_mac.data(), 6);
  const uint16_t ethertype = ip_version == 4 ? kEtherTypeIpv4 : kEtherTypeIpv6;
  if (spec.has_vlan) {
    store_be16(f + 12, kEtherTypeVlan);
    store_be16(f + 14, spec.vlan_tci);
    store_be16(f + 16, ethertype);
  } else {
    store_be16(f + 12, ethertype);
  }
  uint8_t* ip = f + l3_offset(spec);
  const uint32_t ip_hdr_len = ip_version == 4 ? kIpv4MinLen : kIpv6Len;
  ipv4_sum = 0;
  if (ip_version == 4) {
    const uint32_t ver_tos = 0x4500u | spec.traffic_class, tot_len = ip_hdr_len + udp_len, id = spec.ip_id,
                   frag = spec.df ? kIpv4FlagDf : 0u, ttl_proto = uint32_t{spec.ttl} << 8 | kIpProtoUdp;
    const uint32_t src = load_be32(spec.src_ip.data() + 12), dst = load_be32(spec.dst_ip.data() + 12);
    // The checksum from the fields themselves, not read back from the bytes just stored (that read waits
    // for the stores: it took a quarter of this function's time), and in scalars (an array of the words
    // went through the stack the same way).
    ipv4_sum =
        ver_tos + id + frag + ttl_proto + (src >> 16) + (src & 0xffffu) + (dst >> 16) + (dst & 0xffffu);
    uint32_t sum = ipv4_sum + tot_len;
    sum = (sum & 0xffffu) + (sum >> 16);
    sum = (sum & 0xffffu) + (sum >> 16);
    store_be16(ip, static_cast<uint16_t>(ver_tos));
    store_be16(ip + 2, static_cast<uint16_t>(tot_len));
    store_be16(ip + 4, static_cast<uint16_t>(id));
    store_be16(ip + 6, static_cast<uint16_t>(frag));
    store_be16(ip + 8, static_cast<uint16_t>(ttl_proto));
    store_be16(ip + 10, static_cast<uint16_t>(~sum));
    store_be32(ip + 12, src);
    store_be32(ip + 16, dst);
  } else {
    store_be32(ip, (6u << 28) | (uint32_t{spec.traffic_class} << 20) | (spec.flow_label & 0xfffff));
    store_be16(ip + 4, static_cast<uint16_t>(udp_len));
    ip[6] = kIpProtoUdp;
    ip[7] = spec.ttl;
    std::memcpy(ip + 8, spec.src_ip.data(), 16);
    std::memcpy(ip + 24, spec.dst_ip.data(), 16);
  }
  uint8_t* udp = ip + ip_hdr_len;
  store_be16(udp, spec.udp_sport);
  store_be16(udp + 2, spec.udp_dport);
  store_be16(udp + 4, static_cast<uint16_t>(udp_len));
  store_be16(udp + 6, 0);
}

// BTH and the extension headers `info` names, from `spec`, at `p`; returns where the payload goes.
uint8_t* write_transport(uint8_t* p, const FrameSpec& spec, const OpcodeInfo& info, uint8_t pad) {
  Bth bth = spec.bth;
  bth.pad = pad;
  write_bth(p, bth);
  p += kBthLen;
  const uint16_t h = info.headers;
  if (h & kDeth) write_deth(p, spec.deth), p += kDethLen;
  if (h & kXrceth) store_be32(p, spec.xrc_srqn & 0xffffffu), p += kXrcethLen;
  if (h & kReth) write_reth(p, spec.reth), p += kRethLen;
  if (h & kAtomicEth) write_atomic_eth(p, spec.atomic_eth), p += kAtomicEthLen;
  if (h & kAeth) write_aeth(p, spec.aeth), p += kAethLen;
  if (h & kAtomicAckEth) write_atomic_ack_eth(p, spec.atomic_ack_eth), p += kAtomicAckEthLen;
  if (h & kImmDt) store_be32(p, spec.imm), p += kImmDtLen;
  if (h & kIeth) store_be32(p, spec.ieth_rkey), p += kIethLen;
  if (info.kind == OpKind::cnp) std::memset(p, 0, kCnpPayloadLen), p += kCnpPayloadLen;
  return p;
}

// The opcode's row when `spec` can carry `payload_len` bytes (a known opcode, a payload only where it takes
// one, at most 64 KiB), with the BTH pad it needs; nullptr otherwise. Both build_headers start here.
const OpcodeInfo* transport_of(const FrameSpec& spec, uint32_t payload_len, uint8_t& pad) {
  const OpcodeInfo& info = opcode_info(spec.bth.opcode);
  if (!info.valid() || (!info.has_payload && payload_len != 0) || payload_len > 0xffffu) return nullptr;
  pad = static_cast<uint8_t>(info.has_payload ? ((4 - (payload_len & 3)) & 3) : 0);
  return &info;
}

}  // namespace

bool build_headers(MutByteSpan out, const FrameSpec& spec, uint32_t payload_len, FrameLayout& layout) {
  uint8_t pad;
  const OpcodeInfo* info = transport_of(spec, payload_len, pad);
  if (!info) return false;
  const uint32_t total = frame_size(spec, payload_len);
  if (out.size() < total) return false;
  uint8_t* f = out.data();
  const uint8_t ip_version = spec.ip_version == 6 ? 6 : 4;
  const uint32_t l3 = l3_offset(spec);
  const uint32_t ip_hdr_len = ip_version == 4 ? kIpv4MinLen : kIpv6Len;
  uint32_t ipv4_sum;
  write_l2_l4(f, spec, ip_version, total - l3 - ip_hdr_len, ipv4_sum);
  uint8_t* p = write_transport(f + l3 + ip_hdr_len + kUdpLen, spec, *info, pad);
  // Whole, in one assignment: zeroing it first and then setting fields made the compiler copy it through
  // the stack in overlapping pieces, each read waiting for the stores before it.
  layout = FrameLayout{.l3_offset = l3,
                       .ip_hdr_len = ip_hdr_len,
                       .payload_offset = static_cast<uint32_t>(p - f),
                       .payload_len = payload_len,
                       .pad = pad,
                       .frame_len = total,
                       .ip_version = ip_version,
                       .udp_checksum = spec.udp_checksum};
  return true;
}

void make_prefix(const FrameSpec& spec, HeaderPrefix& prefix) {
  prefix = HeaderPrefix{};
  prefix.ip_version = spec.ip_version == 6 ? 6 : 4;
  prefix.ip_hdr_len = prefix.ip_version == 4 ? kIpv4MinLen : kIpv6Len;
  prefix.l3 = l3_offset(spec);
  write_l2_l4(prefix.bytes.data(), spec, prefix.ip_version, kUdpLen, prefix.ipv4_sum);
  prefix.len = prefix.l3 + prefix.ip_hdr_len + kUdpLen;
  prefix.udp_checksum = spec.udp_checksum;
}

bool build_headers(MutByteSpan out, const HeaderPrefix& prefix, const FrameSpec& spec, uint32_t payload_len,
                   FrameLayout& layout) {
  uint8_t pad;
  const OpcodeInfo* info = transport_of(spec, payload_len, pad);
  if (!info) return false;
  const uint32_t total = prefix.len + kBthLen + info->ext_len + payload_len + pad + kIcrcLen;
  if (out.size() < total) return false;
  uint8_t* f = out.data();
  // The usual IPv4 prefix without a tag in one fixed-size copy.
  if (prefix.len == kEthLen + kIpv4MinLen + kUdpLen)
    std::memcpy(f, prefix.bytes.data(), kEthLen + kIpv4MinLen + kUdpLen);
  else
    std::memcpy(f, prefix.bytes.data(), prefix.len);
  uint8_t* ip = f + prefix.l3;
  const uint32_t udp_len = total - prefix.l3 - prefix.ip_hdr_len;
  if (prefix.ip_version == 4) {
    const uint32_t tot_len = prefix.ip_hdr_len + udp_len;
    uint32_t sum = prefix.ipv4_sum + tot_len;
    sum = (sum & 0xffffu) + (sum >> 16);
    sum = (sum & 0xffffu) + (sum >> 16);
    store_be16(ip + 2, static_cast<uint16_t>(tot_len));
    store_be16(ip + 10, static_cast<uint16_t>(~sum));
  } else {
    store_be16(ip + 4, static_cast<uint16_t>(udp_len));
  }
  store_be16(ip + prefix.ip_hdr_len + 4, static_cast<uint16_t>(udp_len));
  uint8_t* p = write_transport(f + prefix.len, spec, *info, pad);
  layout = FrameLayout{.l3_offset = prefix.l3,
                       .ip_hdr_len = prefix.ip_hdr_len,
                       .payload_offset = static_cast<uint32_t>(p - f),
                       .payload_len = payload_len,
                       .pad = pad,
                       .frame_len = total,
                       .ip_version = prefix.ip_version,
                       .udp_checksum = prefix.udp_checksum};
  return true;
}

void seal_frame(MutByteSpan frame, const FrameLayout& layout, bool icrc) {
  uint8_t* f = frame.data();
  // (A call to memset for the usual 0 bytes was ~15 instructions of every frame.)
  for (uint32_t i = 0; i < layout.pad; i++) f[layout.payload_offset + layout.payload_len + i] = 0;
  const uint32_t icrc_off = layout.frame_len - kIcrcLen;
  uint8_t* ip = f + layout.l3_offset;
  if (icrc || layout.udp_checksum)
    store_le32(f + icrc_off,
               compute_icrc(ByteSpan(ip, icrc_off - layout.l3_offset), layout.ip_version, layout.ip_hdr_len));
  if (layout.udp_checksum) {
    uint8_t* udp = ip + layout.ip_hdr_len;
    const uint32_t udp_len = layout.frame_len - layout.l3_offset - layout.ip_hdr_len;
    store_be16(udp + 6, 0);
    uint16_t c = static_cast<uint16_t>(~udp_sum(layout.ip_version, ip, udp, udp_len));
    store_be16(udp + 6, c == 0 ? 0xffff : c);
  }
}

uint32_t batch_packet(ByteSpan batch, uint32_t segments, uint32_t index, MutByteSpan out) {
  Packet pkt;
  ParseOptions opt;
  opt.verify_icrc = opt.verify_checksums = false;  // (the ICRC is not there; checked where the batch came in)
  if (segments < 2 || index >= segments || parse_frame(batch, pkt, opt) != ParseError::ok ||
      pkt.info->position != Position::middle || !pkt.info->has_payload || pkt.bth.pad != 0 ||
      pkt.udp.checksum != 0 || pkt.payload_len == 0 || pkt.payload_len % segments != 0)
    return 0;
  const uint32_t seg = pkt.payload_len / segments;
  const uint32_t len = pkt.payload_offset + seg + kIcrcLen;
  if (out.size() < len) return 0;
  uint8_t* f = out.data();
  std::memcpy(f, batch.data(), pkt.payload_offset);
  std::memcpy(f + pkt.payload_offset, batch.data() + pkt.payload_offset + size_t{index} * seg, seg);
  // (the IPv4 ID stays: all of a QP's frames carry the one in its headers)
  set_udp_datagram_len(f + pkt.l3_offset, len - pkt.l4_offset, load_be16(f + pkt.l3_offset + 4), false);
  store_be24(f + pkt.bth_offset + 9, psn_add(pkt.bth.psn, index));
  write_icrc(MutByteSpan(f, len));
  return len;
}

bool write_icrc(MutByteSpan frame) {
  const size_t len = frame.size();
  uint8_t* f = frame.data();
  if (len < kEthLen) return false;
  size_t l3 = kEthLen;
  uint16_t type = load_be16(f + 12);
  if (type == 0x8100) {
    if (len < kEthLen + kVlanLen) return false;
    type = load_be16(f + 16);
    l3 += kVlanLen;
  }
  uint8_t version = 0;
  uint32_t ip_hdr_len = 0;
  if (type == 0x0800 && len > l3 && (f[l3] >> 4) == 4) {
    version = 4;
    ip_hdr_len = (f[l3] & 0x0fu) * 4u;
    if (ip_hdr_len < kIpv4MinLen) return false;
  } else if (type == 0x86dd && len > l3 && (f[l3] >> 4) == 6) {
    version = 6;
    ip_hdr_len = kIpv6Len;
  } else {
    return false;
  }
  if (len < l3 + ip_hdr_len + kUdpLen + kBthLen + kIcrcLen) return false;
  const size_t icrc_off = len - kIcrcLen;
  store_le32(f + icrc_off, compute_icrc(ByteSpan(f + l3, icrc_off - l3), version, ip_hdr_len));
  return true;
}

uint32_t build_frame(MutByteSpan out, const FrameSpec& spec, ByteSpan payload) {
  FrameLayout layout;
  if (payload.size() > 0xffffu) return 0;
  if (!build_headers(out, spec, static_cast<uint32_t>(payload.size()), layout)) return 0;
  if (!payload.empty()) std::memcpy(out.data() + layout.payload_offset, payload.data(), payload.size());
  seal_frame(out, layout);
  return layout.frame_len;
}

}  // namespace urxe::wire
