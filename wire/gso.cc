#include "wire/gso.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "wire/packet.h"

namespace urxe::wire {
namespace {

// The UDP payload of an untagged UDP/4791 datagram: [hdr, end) of the frame, or {0, 0}.
struct Span {
  uint32_t hdr = 0, end = 0;
};
Span udp_payload(ByteSpan d) {
  const uint8_t* f = d.data();
  const uint32_t n = static_cast<uint32_t>(d.size() > 0xffffffffu ? 0xffffffffu : d.size());
  const uint32_t hdr = gso_headers_len(f, n);
  if (hdr == 0 || load_be16(f + hdr - 6) != kRoceV2Port) return {};
  const uint32_t end =
      hdr == 42 ? kEthLen + load_be16(f + kEthLen + 2) : kEthLen + kIpv6Len + load_be16(f + 18);
  if (end > n || end <= hdr) return {};
  return {hdr, end};
}

}  // namespace

uint32_t gso_headers_len(const uint8_t* f, uint32_t len) {
  if (len < kEthLen + kIpv6Len + kUdpLen) return 0;
  const uint16_t type = load_be16(f + 12);
  if (type == kEtherTypeIpv4 && f[kEthLen] == 0x45 && f[kEthLen + 9] == kIpProtoUdp)
    return kEthLen + kIpv4MinLen + kUdpLen;
  if (type == kEtherTypeIpv6 && (f[kEthLen] >> 4) == 6 && f[kEthLen + 6] == kIpProtoUdp)
    return kEthLen + kIpv6Len + kUdpLen;
  return 0;
}

void set_gso_segment_headers(uint8_t* f, uint32_t hdr, uint32_t payload, uint16_t ipv4_id0, uint32_t index,
                             bool checksum_valid) {
  const bool v4 = hdr == kEthLen + kIpv4MinLen + kUdpLen;
  set_udp_datagram_len(f + kEthLen, kUdpLen + payload, static_cast<uint16_t>(v4 ? ipv4_id0 + index : 0),
                       checksum_valid);
}

void copy_gso_segment_headers(uint8_t* out, const uint8_t* d, uint32_t hdr, uint32_t payload,
                              uint32_t index) {
  std::memcpy(out, d, hdr);
  const uint16_t id0 = hdr == kEthLen + kIpv4MinLen + kUdpLen ? load_be16(d + kEthLen + 4) : 0;
  set_gso_segment_headers(out, hdr, payload, id0, index);
  store_be16(out + hdr - 2, 0);
}

uint32_t gso_segment(ByteSpan d, uint32_t seg, uint32_t index, MutByteSpan out) {
  const Span p = udp_payload(d);
  if (p.hdr == 0 || seg == 0) return 0;
  const uint32_t total = p.end - p.hdr;
  if (index >= (total + seg - 1) / seg) return 0;
  const uint32_t len = std::min(seg, total - index * seg);
  if (out.size() < p.hdr + len) return 0;
  copy_gso_segment_headers(out.data(), d.data(), p.hdr, len, index);
  std::memcpy(out.data() + p.hdr, d.data() + p.hdr + index * seg, len);
  return p.hdr + len;
}

uint32_t gso_segment_len(ByteSpan d) {
  const Span p = udp_payload(d);
  if (p.hdr == 0) return 0;
  const uint32_t total = p.end - p.hdr;
  const uint8_t* u = d.data() + p.hdr;
  if (total < 2 * (kBthLen + kIcrcLen)) return 0;
  const Bth b0 = parse_bth(u);
  const OpcodeInfo& info = opcode_info(b0.opcode);
  if (!info.valid()) return 0;
  std::vector<uint8_t> first;
  // RoCEv2 packets are whole 4-byte words. The next packet must be a valid one to the same QP (a message's
  // next packet, or the acknowledgement a sender put after its own request: another PSN space); then the
  // first one's ICRC decides.
  for (uint32_t s = kBthLen + info.ext_len + kIcrcLen; s + kBthLen <= total; s += 4) {
    const Bth b1 = parse_bth(u + s);
    if (b1.dqpn == b0.dqpn && opcode_info(b1.opcode).valid()) {
      first.resize(p.hdr + s);
      if (gso_segment(d, s, 0, MutByteSpan(first)) != first.size()) return 0;
      Packet pkt;
      if (parse_frame(ByteSpan(first), pkt) == ParseError::ok && pkt.icrc_ok) return s;
    }
    if (!info.has_payload) break;
  }
  return 0;
}

}  // namespace urxe::wire
