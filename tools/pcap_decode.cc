#include "tools/pcap_decode.h"

#include <arpa/inet.h>
#include <pcap/pcap.h>

#include <array>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <type_traits>
#include <variant>
#include <vector>

#include "tools/json_writer.h"
#include "wire/gso.h"

namespace urxe::tools {
namespace {

using wire::ByteSpan;
using wire::load_be16;
using wire::ParseError;

// What the bytes claim to be, independent of whether lengths and checksums hold: a RoCE frame whose IP
// checksum is wrong is still a RoCE frame (shown with its error), a TCP segment is skipped.
struct Classification {
  bool roce = false;
  std::string_view reason;  // when !roce
  uint32_t l4_offset = 0;   // UDP header offset when the UDP header is within the bytes
};

std::string_view ip_proto_name(uint8_t p) {
  switch (p) {
    case 1:
      return "icmp";
    case 2:
      return "igmp";
    case 6:
      return "tcp";
    case 47:
      return "gre";
    case 50:
      return "esp";
    case 58:
      return "icmpv6";
    case 132:
      return "sctp";
    default:
      return "non-udp";
  }
}

Classification classify(ByteSpan f) {
  const uint8_t* p = f.data();
  const size_t n = f.size();
  if (n < wire::kEthLen) return {false, "truncated", 0};
  uint16_t type = load_be16(p + 12);
  uint32_t l3 = wire::kEthLen;
  if (type == wire::kEtherTypeVlan) {  // one tag, as wire/ accepts
    if (n < l3 + wire::kVlanLen) return {false, "truncated", 0};
    type = load_be16(p + 16);
    l3 += wire::kVlanLen;
  }
  uint32_t l4 = 0;
  uint8_t proto = 0;
  if (type == wire::kEtherTypeIpv4) {
    if (n < l3 + wire::kIpv4MinLen) return {false, "truncated", 0};
    const uint8_t* ip = p + l3;
    if (load_be16(ip + 6) & wire::kIpv4FragOffsetMask) return {false, "fragment", 0};
    if (load_be16(ip + 6) & wire::kIpv4FlagMf) return {false, "fragment", 0};
    proto = ip[9];
    const uint32_t ihl = ip[0] & 0xf;
    l4 = l3 + (ihl < 5 ? 5 : ihl) * 4;
  } else if (type == wire::kEtherTypeIpv6) {
    if (n < l3 + wire::kIpv6Len) return {false, "truncated", 0};
    proto = p[l3 + 6];
    l4 = l3 + wire::kIpv6Len;
  } else if (type == 0x0806) {
    return {false, "arp", 0};
  } else if (type == 0x88cc) {
    return {false, "lldp", 0};
  } else if (type == 0x8915) {
    return {false, "roce-v1", 0};
  } else if (type < 0x0600) {
    return {false, "llc", 0};
  } else {
    return {false, "non-ip", 0};
  }
  if (proto != wire::kIpProtoUdp) return {false, ip_proto_name(proto), 0};
  if (n < l4 + wire::kUdpLen) return {false, "truncated", 0};
  if (load_be16(p + l4 + 2) != wire::kRoceV2Port) return {false, "udp", l4};
  return {true, {}, l4};
}

std::string mac_str(const wire::MacAddr& m) {
  char b[18];
  std::snprintf(b, sizeof b, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
  return b;
}

std::string ip_str(const DecodedFrame& f, bool src) {
  char b[INET6_ADDRSTRLEN] = {};
  if (f.pkt.ip_version == 4) {
    inet_ntop(AF_INET, (src ? f.pkt.ip4.src : f.pkt.ip4.dst).data(), b, sizeof b);
  } else {
    inet_ntop(AF_INET6, (src ? f.pkt.ip6.src : f.pkt.ip6.dst).data(), b, sizeof b);
  }
  return b;
}

std::string_view aeth_type_name(wire::AethType t) {
  switch (t) {
    case wire::AethType::ack:
      return "ACK";
    case wire::AethType::rnr_nak:
      return "RNR_NAK";
    case wire::AethType::nak:
      return "NAK";
    case wire::AethType::reserved:
      return "RESERVED";
  }
  return "?";
}

std::string_view opcode_name(const DecodedFrame& f) {
  const auto& info = wire::opcode_info(f.pkt.bth.opcode);
  return info.valid() ? info.name : std::string_view("UNKNOWN");
}

// Whether the extension headers and payload length were parsed (the BTH opcode is known and the lengths
// fit); later errors (pad, ICRC) leave them valid.
bool ext_parsed(const DecodedFrame& f) {
  return f.bth_parsed && f.pkt.info != nullptr && f.pkt.present != 0;
}
bool payload_parsed(const DecodedFrame& f) {
  return f.bth_parsed && f.pkt.info != nullptr &&
         (f.error == ParseError::ok || f.error == ParseError::bad_icrc);
}

std::string hex(uint64_t v, int width) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%0*" PRIx64, width, v);
  return b;
}

}  // namespace

// " CM REQ comm_id=... ...": the message type and the fields that tie a connection together.
static std::string cm_text(const DecodedFrame& f) {
  const wire::MadHeader& h = f.cm.header;
  std::string s = " CM ";
  s += wire::cm_attr_name(h.attribute_id);
  if (f.mad_error != wire::MadError::ok) {
    s += " (";
    s += wire::to_string(f.mad_error);
    s += " class=" + hex(h.mgmt_class, 2) + " attr=" + hex(h.attribute_id, 4) + ")";
    return s;
  }
  s += " tid=" + hex(h.transaction_id, 16);
  auto ids = [&](uint32_t local, uint32_t remote) {
    s += " comm_id=" + hex(local, 8) + " remote_comm_id=" + hex(remote, 8);
  };
  std::visit(
      [&](const auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, wire::CmReq>) {
          s += " comm_id=" + hex(m.local_comm_id, 8) + " qpn=" + hex(m.local_qpn, 6) +
               " psn=" + std::to_string(m.starting_psn) + " service_id=" + hex(m.service_id, 16);
        } else if constexpr (std::is_same_v<T, wire::CmRep>) {
          ids(m.local_comm_id, m.remote_comm_id);
          s += " qpn=" + hex(m.local_qpn, 6) + " psn=" + std::to_string(m.starting_psn);
        } else if constexpr (std::is_same_v<T, wire::CmRej>) {
          ids(m.local_comm_id, m.remote_comm_id);
          s += " reason=" + std::to_string(m.reason) + " rejected=" + std::to_string(m.message_rejected);
        } else if constexpr (std::is_same_v<T, wire::CmMra>) {
          ids(m.local_comm_id, m.remote_comm_id);
          s += " mraed=" + std::to_string(m.message_mraed) +
               " service_timeout=" + std::to_string(m.service_timeout);
        } else if constexpr (std::is_same_v<T, wire::CmDreq>) {
          ids(m.local_comm_id, m.remote_comm_id);
          s += " remote_qpn=" + hex(m.remote_qpn, 6);
        } else if constexpr (std::is_same_v<T, wire::CmRtu> || std::is_same_v<T, wire::CmDrep>) {
          ids(m.local_comm_id, m.remote_comm_id);
        } else if constexpr (std::is_same_v<T, wire::CmSidrReq>) {
          s += " request_id=" + hex(m.request_id, 8) + " service_id=" + hex(m.service_id, 16);
        } else if constexpr (std::is_same_v<T, wire::CmSidrRep>) {
          s += " request_id=" + hex(m.request_id, 8) + " status=" + std::to_string(m.status) +
               " qpn=" + hex(m.qpn, 6) + " qkey=" + hex(m.qkey, 8);
        }
      },
      f.cm.msg);
  return s;
}

static std::string ip_cm_addr_str(const wire::IpCmHeader& h, const std::array<uint8_t, 16>& a) {
  char b[INET6_ADDRSTRLEN] = {};
  if (h.ip_version == 4) {
    inet_ntop(AF_INET, a.data() + 12, b, sizeof b);
  } else {
    inet_ntop(AF_INET6, a.data(), b, sizeof b);
  }
  return b;
}

// The same fields and a REQ's connection parameters, as a "cm" object (see cm_text).
static void cm_json(JsonWriter& j, const DecodedFrame& f) {
  const wire::MadHeader& h = f.cm.header;
  j.begin_object("cm").str("type", wire::cm_attr_name(h.attribute_id));
  if (f.mad_error != wire::MadError::ok) {
    j.str("error", wire::to_string(f.mad_error))
        .num("mgmt_class", h.mgmt_class)
        .num("attribute_id", h.attribute_id);
    j.end_object();
    return;
  }
  j.num("method", h.method)
      .num("status", h.status)
      .num("tid", h.transaction_id)
      .num("attribute_id", h.attribute_id);
  std::visit(
      [&](const auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, wire::CmSidrReq> || std::is_same_v<T, wire::CmSidrRep>) {
          j.num("request_id", m.request_id);
        } else {
          j.num("local_comm_id", m.local_comm_id);
          if constexpr (!std::is_same_v<T, wire::CmReq>) j.num("remote_comm_id", m.remote_comm_id);
        }
        if constexpr (std::is_same_v<T, wire::CmReq>) {
          j.num("service_id", m.service_id).num("local_qpn", m.local_qpn).num("starting_psn", m.starting_psn);
          j.num("local_ca_guid", m.local_ca_guid).num("responder_resources", m.responder_resources);
          j.num("initiator_depth", m.initiator_depth).num("transport_service_type", m.transport_service_type);
          j.num("remote_cm_response_timeout", m.remote_cm_response_timeout);
          j.num("local_cm_response_timeout", m.local_cm_response_timeout).num("retry_count", m.retry_count);
          j.num("rnr_retry_count", m.rnr_retry_count).num("max_cm_retries", m.max_cm_retries);
          j.num("partition_key", m.partition_key).num("path_mtu", m.path_mtu).boolean("srq", m.srq);
          const wire::CmPath& pp = m.primary;
          j.begin_object("primary").num("local_lid", pp.local_lid).num("remote_lid", pp.remote_lid);
          j.num("traffic_class", pp.traffic_class).num("hop_limit", pp.hop_limit).num("sl", pp.sl);
          j.num("local_ack_timeout", pp.local_ack_timeout).end_object();
          if (wire::IpCmHeader ip;
              wire::is_ip_cm_service_id(m.service_id) && wire::parse_ip_cm_header(m.private_data, ip)) {
            j.begin_object("ip_cm").num("ip_version", ip.ip_version).num("source_port", ip.source_port);
            j.str("source_ip", ip_cm_addr_str(ip, ip.source_ip));
            j.str("destination_ip", ip_cm_addr_str(ip, ip.destination_ip)).end_object();
          }
        } else if constexpr (std::is_same_v<T, wire::CmRep>) {
          j.num("local_qpn", m.local_qpn)
              .num("starting_psn", m.starting_psn)
              .num("local_ca_guid", m.local_ca_guid);
          j.num("responder_resources", m.responder_resources).num("initiator_depth", m.initiator_depth);
          j.num("target_ack_delay", m.target_ack_delay).num("rnr_retry_count", m.rnr_retry_count);
          j.boolean("srq", m.srq);
        } else if constexpr (std::is_same_v<T, wire::CmRej>) {
          j.num("reason", m.reason).num("message_rejected", m.message_rejected);
        } else if constexpr (std::is_same_v<T, wire::CmMra>) {
          j.num("message_mraed", m.message_mraed).num("service_timeout", m.service_timeout);
        } else if constexpr (std::is_same_v<T, wire::CmDreq>) {
          j.num("remote_qpn", m.remote_qpn);
        } else if constexpr (std::is_same_v<T, wire::CmSidrReq>) {
          j.num("service_id", m.service_id);
        } else if constexpr (std::is_same_v<T, wire::CmSidrRep>) {
          j.num("status", m.status).num("qpn", m.qpn).num("service_id", m.service_id).num("qkey", m.qkey);
        }
      },
      f.cm.msg);
  j.end_object();
}

DecodedFrame decode_frame(ByteSpan eth_frame, uint64_t number, uint32_t wirelen) {
  DecodedFrame d;
  d.number = number;
  d.caplen = static_cast<uint32_t>(eth_frame.size());
  d.wirelen = wirelen ? wirelen : d.caplen;
  d.error = wire::parse_frame(eth_frame, d.pkt);
  if (d.error == ParseError::ok || d.error == ParseError::bad_icrc) {
    if (const ByteSpan mad = wire::qp1_mad(d.pkt); !mad.empty()) {
      d.mad = true;
      d.mad_error = wire::parse_cm_mad(mad, d.cm);
    }
  }
  d.pkt.payload = {};
  const Classification c = classify(eth_frame);
  if (d.error == ParseError::ok) {
    d.roce = true;
  } else if (d.error == ParseError::not_roce) {
    d.roce = false;
    d.skip_reason = c.roce ? std::string_view("not-roce") : c.reason;
  } else {
    d.roce = c.roce;
    if (!c.roce) d.skip_reason = c.reason;
  }
  d.ip_parsed = d.pkt.ip_version != 0;
  if (c.l4_offset != 0) {
    // wire/ stops before UDP when the IP header is bad; the port numbers are still worth showing.
    const uint8_t* u = eth_frame.data() + c.l4_offset;
    d.pkt.udp = wire::UdpHeader{load_be16(u), load_be16(u + 2), load_be16(u + 4), load_be16(u + 6)};
    d.udp_parsed = true;
  }
  d.bth_parsed = d.roce && d.pkt.frame_len != 0;  // wire/ sets frame_len right after reading the BTH
  return d;
}

std::string format_text(const DecodedFrame& f, int64_t t0_sec, uint32_t t0_nsec) {
  std::string s;
  char b[160];
  const int64_t dns = (f.ts_sec - t0_sec) * 1000000000 + (int64_t{f.ts_nsec} - int64_t{t0_nsec});
  std::snprintf(b, sizeof b, "%5" PRIu64 " %4" PRId64 ".%06" PRId64, f.number, dns / 1000000000,
                (dns % 1000000000) / 1000);
  s += b;
  if (f.gso_count) s += " gso " + std::to_string(f.gso_index) + "/" + std::to_string(f.gso_count);
  if (f.has_src_mac || f.has_dst_mac) {
    s += ' ';
    s += f.has_src_mac ? mac_str(f.pkt.eth.src) : "?";
    s += " > ";
    s += f.has_dst_mac ? mac_str(f.pkt.eth.dst) : "?";
  }
  if (f.pkt.eth.has_vlan) {
    std::snprintf(b, sizeof b, " vlan %u pcp %u", f.pkt.eth.vlan_tci & 0xfffu, f.pkt.eth.vlan_tci >> 13);
    s += b;
  }
  if (!f.roce) {
    s += " skipped ";
    s += f.skip_reason;
  }
  if (f.ip_parsed) {
    const bool v6 = f.pkt.ip_version == 6;
    // IPv6 with a port in brackets, as in URLs: [2001:db8::1]:4791.
    const bool bracket = v6 && f.udp_parsed;
    s += v6 ? " ip6 " : " ip ";
    s += bracket ? "[" + ip_str(f, true) + "]" : ip_str(f, true);
    if (f.udp_parsed) s += ":" + std::to_string(f.pkt.udp.sport);
    s += " > ";
    s += bracket ? "[" + ip_str(f, false) + "]" : ip_str(f, false);
    if (f.udp_parsed) s += ":" + std::to_string(f.pkt.udp.dport);
  }
  if (!f.roce) return s;
  if (f.bth_parsed) {
    const wire::Bth& h = f.pkt.bth;
    std::snprintf(b, sizeof b, " %.*s (0x%02x) dqpn=0x%06x psn=%u ack_req=%d se=%d pad=%u",
                  static_cast<int>(opcode_name(f).size()), opcode_name(f).data(), h.opcode, h.dqpn, h.psn,
                  h.ack_req, h.se, h.pad);
    s += b;
    // Fields that are almost always at their default are shown only when they are not.
    if (h.migreq) s += " migreq=1";
    if (h.tver) s += " tver=" + std::to_string(h.tver);
    if (h.pkey != 0xffff) s += " pkey=" + hex(h.pkey, 4);
    if (h.fecn) s += " fecn=1";
    if (h.becn) s += " becn=1";
    // IBTA Annex A19 (2020): Debian's tshark 4.0 predates it and shows this opcode as "Unknown (29)"
    if (h.opcode == (wire::op::kRc | wire::op::atomic_write)) s += " (Annex A19; tshark 4.0: Unknown (29))";
    // IBTA Annex A14: tshark 4.0 names XRC opcodes but dissects nothing after the BTH (no XRCETH, AETH...)
    if (wire::opcode_info(h.opcode).transport == wire::Transport::xrc)
      s += " (Annex A14; tshark 4.0: no XRCETH or later headers)";
  }
  if (ext_parsed(f)) {
    const wire::Packet& p = f.pkt;
    if (p.present & wire::kDeth) {
      std::snprintf(b, sizeof b, " deth[qkey=0x%08x src_qp=0x%06x]", p.deth.qkey, p.deth.src_qp);
      s += b;
    }
    if (p.present & wire::kXrceth) {
      std::snprintf(b, sizeof b, " xrceth[srqn=0x%06x]", p.xrc_srqn);
      s += b;
    }
    if (p.present & wire::kReth) {
      std::snprintf(b, sizeof b, " reth[va=0x%016" PRIx64 " rkey=0x%08x dma_len=%u]", p.reth.va, p.reth.rkey,
                    p.reth.dma_len);
      s += b;
    }
    if (p.present & wire::kAtomicEth) {
      std::snprintf(b, sizeof b,
                    " atomic_eth[va=0x%016" PRIx64 " rkey=0x%08x swap_add=0x%" PRIx64 " compare=0x%" PRIx64
                    "]",
                    p.atomic_eth.va, p.atomic_eth.rkey, p.atomic_eth.swap_add, p.atomic_eth.compare);
      s += b;
    }
    if (p.present & wire::kAeth) {
      const auto t = p.aeth.type();
      const uint8_t v = p.aeth.value();
      s += " aeth[";
      s += aeth_type_name(t);
      if (t == wire::AethType::ack) {
        std::snprintf(b, sizeof b, " credit=%u", v);
      } else if (t == wire::AethType::rnr_nak) {
        std::snprintf(b, sizeof b, " timer=%u (%.2f ms)", v,
                      static_cast<double>(wire::rnr_timer_ns(v)) / 1e6);
      } else if (t == wire::AethType::nak) {
        const std::string_view nm = wire::nak_code_name(v);
        std::snprintf(b, sizeof b, " %.*s (%u)", static_cast<int>(nm.size()), nm.data(), v);
      } else {
        std::snprintf(b, sizeof b, " value=%u", v);
      }
      s += b;
      std::snprintf(b, sizeof b, " syndrome=0x%02x msn=%u]", p.aeth.syndrome, p.aeth.msn);
      s += b;
    }
    if (p.present & wire::kAtomicAckEth) {
      std::snprintf(b, sizeof b, " atomic_ack_eth[orig_data=0x%" PRIx64 "]", p.atomic_ack_eth.orig_data);
      s += b;
    }
    if (p.present & wire::kImmDt) s += " immdt=" + hex(p.imm, 8);
    if (p.present & wire::kIeth) s += " ieth[rkey=" + hex(p.ieth_rkey, 8) + "]";
  }
  if (payload_parsed(f) && f.pkt.info->has_payload) s += " payload=" + std::to_string(f.pkt.payload_len);
  if (f.mad) s += cm_text(f);
  if (f.error == ParseError::ok) {
    s += " icrc=ok";
  } else {
    s += " ERROR ";
    s += wire::to_string(f.error);
    if (f.error == ParseError::bad_icrc) {
      s += " (icrc=" + hex(f.pkt.icrc, 8) + " expected=" + hex(f.pkt.icrc_expected, 8) + ")";
    } else if (f.error == ParseError::truncated && f.caplen < f.wirelen) {
      s += " (captured " + std::to_string(f.caplen) + " of " + std::to_string(f.wirelen) + " bytes)";
    }
  }
  return s;
}

std::string format_json(const DecodedFrame& f) {
  JsonWriter j;
  const wire::Packet& p = f.pkt;
  j.begin_object();
  j.num("frame", f.number);
  {
    char b[40];
    std::snprintf(b, sizeof b, "%" PRId64 ".%09u", f.ts_sec, f.ts_nsec);
    j.str("time", b);  // a string: a double cannot hold nanoseconds since 1970
  }
  j.num("caplen", f.caplen).num("len", f.wirelen);
  if (f.gso_count) j.num("gso_index", f.gso_index).num("gso_count", f.gso_count);
  j.boolean("roce", f.roce);
  if (!f.roce) j.str("skipped", f.skip_reason);
  j.begin_object("eth");
  if (f.has_src_mac) j.str("src", mac_str(p.eth.src));
  if (f.has_dst_mac) j.str("dst", mac_str(p.eth.dst));
  j.num("type", p.eth.ethertype);
  j.end_object();
  if (p.eth.has_vlan) {
    j.begin_object("vlan")
        .num("tci", p.eth.vlan_tci)
        .num("pcp", static_cast<uint8_t>(p.eth.vlan_tci >> 13))
        .boolean("dei", (p.eth.vlan_tci >> 12) & 1)
        .num("vid", static_cast<uint16_t>(p.eth.vlan_tci & 0xfff))
        .end_object();
  }
  if (f.ip_parsed) {
    j.begin_object("ip")
        .num("version", p.ip_version)
        .str("src", ip_str(f, true))
        .str("dst", ip_str(f, false));
    if (p.ip_version == 4) {
      j.num("tos", p.ip4.tos).num("ttl", p.ip4.ttl).num("id", p.ip4.id);
      j.boolean("df", p.ip4.frag & wire::kIpv4FlagDf).num("protocol", p.ip4.protocol);
    } else {
      j.num("tc", p.ip6.traffic_class).num("flow_label", p.ip6.flow_label).num("hop_limit", p.ip6.hop_limit);
      j.num("next_header", p.ip6.next_header);
    }
    j.end_object();
  }
  if (f.udp_parsed) {
    j.begin_object("udp")
        .num("sport", p.udp.sport)
        .num("dport", p.udp.dport)
        .num("length", p.udp.length)
        .num("checksum", p.udp.checksum)
        .end_object();
  }
  if (f.roce) {
    if (f.bth_parsed) {
      const wire::Bth& h = p.bth;
      j.num("opcode", h.opcode).str("opcode_name", opcode_name(f));
      j.boolean("se", h.se).boolean("migreq", h.migreq).num("pad", h.pad).num("tver", h.tver);
      j.num("pkey", h.pkey).boolean("fecn", h.fecn).boolean("becn", h.becn);
      j.num("dqpn", h.dqpn).boolean("ack_req", h.ack_req).num("psn", h.psn);
    } else {
      for (const char* k : {"opcode", "opcode_name", "dqpn", "ack_req", "psn"}) j.null(k);
    }
    if (ext_parsed(f)) {
      if (p.present & wire::kDeth)
        j.begin_object("deth").num("qkey", p.deth.qkey).num("src_qp", p.deth.src_qp).end_object();
      if (p.present & wire::kXrceth) j.begin_object("xrceth").num("srqn", p.xrc_srqn).end_object();
      if (p.present & wire::kReth) {
        j.begin_object("reth").num("va", p.reth.va).num("rkey", p.reth.rkey);
        j.num("dma_len", p.reth.dma_len).end_object();
      }
      if (p.present & wire::kAtomicEth) {
        j.begin_object("atomic_eth").num("va", p.atomic_eth.va).num("rkey", p.atomic_eth.rkey);
        j.num("swap_add", p.atomic_eth.swap_add).num("compare", p.atomic_eth.compare).end_object();
      }
      if (p.present & wire::kAeth) {
        const auto t = p.aeth.type();
        const uint8_t v = p.aeth.value();
        j.begin_object("aeth")
            .num("syndrome", p.aeth.syndrome)
            .str("type", aeth_type_name(t))
            .num("value", v);
        if (t == wire::AethType::ack) j.num("credit", v);
        if (t == wire::AethType::rnr_nak) j.num("rnr_timer", v).num("rnr_timer_ns", wire::rnr_timer_ns(v));
        if (t == wire::AethType::nak) j.num("nak_code", v).str("nak_name", wire::nak_code_name(v));
        j.num("msn", p.aeth.msn).end_object();
      }
      if (p.present & wire::kAtomicAckEth)
        j.begin_object("atomic_ack_eth").num("orig_data", p.atomic_ack_eth.orig_data).end_object();
      if (p.present & wire::kImmDt) j.num("immdt", p.imm);
      if (p.present & wire::kIeth) j.begin_object("ieth").num("rkey", p.ieth_rkey).end_object();
    }
    if (payload_parsed(f)) {
      j.num("payload_len", p.payload_len);
    } else {
      j.null("payload_len");
    }
    if (f.mad) cm_json(j, f);
    if (p.icrc_checked) {
      j.num("icrc", p.icrc).num("icrc_expected", p.icrc_expected);
    }
    j.boolean("icrc_ok", p.icrc_ok);
    if (f.error == ParseError::ok) {
      j.null("error");
    } else {
      j.str("error", wire::to_string(f.error));
    }
  }
  j.end_object();
  return j.take();
}

// ---------------------------------------------------------------------------------------------------------

struct PcapReader::Impl {
  pcap_t* pcap = nullptr;
  ~Impl() {
    if (pcap) pcap_close(pcap);
  }
};

PcapReader::PcapReader() : impl_(std::make_unique<Impl>()) {}
PcapReader::~PcapReader() = default;

namespace {
// pcap_datalink() values (DLT_*) we turn into Ethernet frames.
constexpr int kDltEn10mb = 1, kDltRaw = 12, kDltRawAlt = 14, kDltLinuxSll = 113, kDltLinuxSll2 = 276,
              kDltIpv4 = 228, kDltIpv6 = 229;
}  // namespace

bool PcapReader::open(const std::string& path, std::string& err) {
  char errbuf[PCAP_ERRBUF_SIZE] = {};
  impl_->pcap = pcap_open_offline_with_tstamp_precision(path.c_str(), PCAP_TSTAMP_PRECISION_NANO, errbuf);
  if (!impl_->pcap) {
    err = errbuf;
    return false;
  }
  linktype_ = pcap_datalink(impl_->pcap);
  switch (linktype_) {
    case kDltEn10mb:
    case kDltRaw:
    case kDltRawAlt:
    case kDltLinuxSll:
    case kDltLinuxSll2:
    case kDltIpv4:
    case kDltIpv6:
      return true;
    default: {
      const char* name = pcap_datalink_val_to_name(linktype_);
      err = "unsupported link type " + std::to_string(linktype_) + " (" + (name ? name : "?") +
            "); urxe reads Ethernet, Linux cooked (SLL, SLL2) and raw IP captures";
      return false;
    }
  }
}

int PcapReader::next(Frame& f, std::string& err) {
  pcap_pkthdr* h = nullptr;
  const u_char* data = nullptr;
  const int rc = pcap_next_ex(impl_->pcap, &h, &data);
  if (rc == PCAP_ERROR_BREAK) return 0;
  if (rc != 1) {
    err = pcap_geterr(impl_->pcap);
    return -1;
  }
  f.ts_sec = h->ts.tv_sec;
  f.ts_nsec = static_cast<uint32_t>(h->ts.tv_usec);  // nanoseconds: opened with nano precision
  f.caplen = h->caplen;
  f.wirelen = h->len;
  f.has_src_mac = f.has_dst_mac = true;
  if (linktype_ == kDltEn10mb) {
    f.eth = ByteSpan(data, h->caplen);
    return 1;
  }
  // Synthesize an Ethernet header in front of the network-layer bytes.
  uint16_t ethertype = 0;
  uint32_t skip = 0;
  const uint8_t* src_mac = nullptr;
  const uint32_t n = h->caplen;
  if (linktype_ == kDltLinuxSll) {
    // pkttype(2) hatype(2) halen(2) addr(8) protocol(2): addr is the sender's link-layer address.
    if (n < 16) {
      skip = n;
    } else {
      ethertype = load_be16(data + 14);
      if (load_be16(data + 4) == 6) src_mac = data + 6;
      skip = 16;
    }
  } else if (linktype_ == kDltLinuxSll2) {
    // protocol(2) reserved(2) ifindex(4) hatype(2) pkttype(1) halen(1) addr(8)
    if (n < 20) {
      skip = n;
    } else {
      ethertype = load_be16(data);
      if (data[11] == 6) src_mac = data + 12;
      skip = 20;
    }
  } else {  // raw IP: the version nibble says which
    if (n >= 1) ethertype = (data[0] >> 4) == 6 ? wire::kEtherTypeIpv6 : wire::kEtherTypeIpv4;
  }
  buf_.assign(wire::kEthLen, 0);
  if (src_mac) std::memcpy(buf_.data() + 6, src_mac, 6);
  wire::store_be16(buf_.data() + 12, ethertype);
  buf_.insert(buf_.end(), data + skip, data + n);
  f.eth = ByteSpan(buf_.data(), buf_.size());
  f.caplen = static_cast<uint32_t>(buf_.size());
  f.wirelen = h->len - skip + wire::kEthLen;
  f.has_dst_mac = false;
  f.has_src_mac = src_mac != nullptr;
  return 1;
}

int decode_file(const std::string& path, const DecodeOptions& opt, std::ostream& out, std::ostream& err,
                DecodeSummary* summary) {
  PcapReader r;
  std::string e;
  if (!r.open(path, e)) {
    // libpcap's messages usually start with the path already.
    err << "urxe pcap decode: " << (e.starts_with(path) ? "" : path + ": ") << e << "\n";
    return kExitError;
  }
  DecodeSummary sum;
  PcapReader::Frame fr;
  int64_t t0_sec = 0;
  uint32_t t0_nsec = 0;
  int rc;
  std::vector<uint8_t> seg;
  while ((rc = r.next(fr, e)) == 1) {
    ++sum.frames;
    if (sum.frames == 1) t0_sec = fr.ts_sec, t0_nsec = fr.ts_nsec;
    auto emit = [&](DecodedFrame d) {
      d.ts_sec = fr.ts_sec;
      d.ts_nsec = fr.ts_nsec;
      d.has_src_mac = fr.has_src_mac;
      d.has_dst_mac = fr.has_dst_mac;
      if (d.roce) {
        ++sum.roce;
        ++(d.good() ? sum.good : sum.bad);
      } else {
        ++sum.skipped;
      }
      out << (opt.json ? format_json(d) : format_text(d, t0_sec, t0_nsec)) << '\n';
    };
    DecodedFrame d = decode_frame(fr.eth, sum.frames, fr.wirelen);
    // Not one good RoCEv2 frame: maybe several, as a UDP GSO datagram (wire/gso.h) a capture on the
    // sending side of a veth shows whole. Each is shown and judged as the frame it becomes on a wire.
    const uint32_t s = d.roce && !d.good() ? wire::gso_segment_len(fr.eth) : 0;
    if (s == 0) {
      emit(d);
      continue;
    }
    ++sum.gso_datagrams;
    seg.resize(fr.eth.size());
    std::vector<DecodedFrame> parts;
    for (uint32_t len; (len = wire::gso_segment(fr.eth, s, static_cast<uint32_t>(parts.size()),
                                                wire::MutByteSpan(seg))) != 0;) {
      parts.push_back(decode_frame(wire::ByteSpan(seg.data(), len), sum.frames, 0));
      parts.back().gso_index = static_cast<uint32_t>(parts.size());
    }
    for (DecodedFrame& x : parts) {
      x.gso_count = static_cast<uint32_t>(parts.size());
      emit(std::move(x));
    }
  }
  if (summary) *summary = sum;
  out.flush();
  if (rc < 0) {
    err << "urxe pcap decode: " << path << ": after frame " << sum.frames << ": " << e << "\n";
    return kExitError;
  }
  if (!opt.json) {
    err << "# " << sum.frames << " frames: " << sum.roce << " RoCEv2 (" << sum.good << " good, " << sum.bad
        << " malformed or bad ICRC), " << sum.skipped << " skipped";
    if (sum.gso_datagrams) err << "; " << sum.gso_datagrams << " UDP GSO datagrams split into their frames";
    err << "\n";
  }
  return opt.strict && sum.bad ? kExitBadFrames : kExitOk;
}

}  // namespace urxe::tools
