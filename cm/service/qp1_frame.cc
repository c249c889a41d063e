#include "cm/service/qp1_frame.h"

#include "wire/mad.h"

namespace urxe::cm {
namespace {

// Kernel rxe's UDP source port for QP1: RXE_ROCE_V2_SPORT + (hash_32(qpn, 14) & 0x3fff) with qpn 1, as the
// rxe CM frames in pcap-fixtures/ show; peers see the same 5-tuple as from a kernel rxe.
constexpr uint16_t kQp1SourcePort = 0xd872;
constexpr uint8_t kUdSendOnly = 0x64;

}  // namespace

Qp1Rx parse_qp1_frame(wire::ByteSpan frame, MadIn& m) {
  wire::Packet p;
  const wire::ParseError e = wire::parse_frame(frame, p);
  if (e == wire::ParseError::bad_icrc) return Qp1Rx::icrc;
  if (e != wire::ParseError::ok) return Qp1Rx::parse;
  if (p.bth.opcode != kUdSendOnly || p.bth.dqpn != wire::kQp1 || !(p.present & wire::kDeth))
    return Qp1Rx::opcode;
  if (p.deth.qkey != wire::kQp1Qkey) return Qp1Rx::qkey;
  if (p.payload_len != wire::kMadSize) return Qp1Rx::length;
  m.sgid = p.src_gid();
  m.dgid = p.dst_gid();
  m.smac = p.eth.src;
  m.traffic_class = p.ip_version == 4 ? p.ip4.tos : p.ip6.traffic_class;
  m.hop_limit = p.ip_version == 4 ? p.ip4.ttl : p.ip6.hop_limit;
  m.src_qp = p.deth.src_qp;
  m.pkey = p.bth.pkey;
  m.mad = p.payload;
  return Qp1Rx::mad;
}
uint32_t build_qp1_frame(const MadOut& m, const wire::MacAddr& src_mac, uint32_t psn, uint16_t ip_id,
                         wire::MutByteSpan out) {
  wire::FrameSpec f;
  f.dst_mac = m.dmac;
  f.src_mac = src_mac;
  f.ip_version = wire::gid_is_ipv4_mapped(m.dgid) ? 4 : 6;
  f.src_ip = m.sgid;
  f.dst_ip = m.dgid;
  f.traffic_class = m.traffic_class;
  f.ttl = m.hop_limit;
  f.ip_id = ip_id;
  f.flow_label = m.flow_label;
  f.udp_sport = kQp1SourcePort;
  f.bth.opcode = kUdSendOnly;
  f.bth.pkey = 0xffff;
  f.bth.dqpn = m.dest_qp;
  f.bth.psn = psn & 0xffffff;
  f.bth.ack_req = true;  // rxe sets AckReq on the last packet of every message, UD's too
  f.deth.qkey = wire::kQp1Qkey;
  f.deth.src_qp = wire::kQp1;
  return wire::build_frame(out, f, wire::ByteSpan(m.mad.data(), m.mad.size()));
}

}  // namespace urxe::cm
