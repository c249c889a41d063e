// Communication Management MADs (IBTA vol. 1 ch. 12 and 13.4; IP addressing per Annex A11): the 24-byte MAD
// common header and the CM messages REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ and SIDR_REP as typed
// values. On RoCEv2 they travel to QP1 (the GSI) as 256-byte UD SEND payloads. Parsing reads only the given
// bytes and reports a short or foreign MAD as a MadError; builders write into the caller's buffer.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <variant>

#include "wire/bytes.h"
#include "wire/headers.h"

namespace urxe::wire {

struct Packet;

inline constexpr uint32_t kMadSize = 256, kMadHeaderSize = 24, kMadDataSize = kMadSize - kMadHeaderSize;
inline constexpr uint8_t kMadBaseVersion = 1, kMgmtClassCm = 0x07, kCmClassVersion = 2;
inline constexpr uint8_t kMadMethodGet = 0x01, kMadMethodSet = 0x02, kMadMethodSend = 0x03,
                         kMadMethodGetResp = 0x81;
inline constexpr uint32_t kQp1Qkey = 0x80010000;  // the well-known GSI Q_Key
inline constexpr uint32_t kQp1 = 1;

// CM attribute IDs.
enum class CmAttr : uint16_t {
  class_port_info = 0x0001,
  req = 0x0010,
  mra = 0x0011,
  rej = 0x0012,
  rep = 0x0013,
  rtu = 0x0014,
  dreq = 0x0015,
  drep = 0x0016,
  sidr_req = 0x0017,
  sidr_rep = 0x0018,
  lap = 0x0019,
  apr = 0x001a,
};
std::string_view cm_attr_name(uint16_t attr_id);  // "REQ", ..., "?" for others

enum class MadError : uint8_t {
  ok = 0,
  truncated,          // fewer than 256 bytes
  bad_base_version,   // BaseVersion != 1
  not_cm,             // MgmtClass != 0x07
  bad_class_version,  // ClassVersion != 2
  unknown_attribute,  // an attribute ID that is no CM message
  unsupported,        // LAP, APR, ClassPortInfo: recognised, not decoded
};
std::string_view to_string(MadError e);

// A field of a MAD: `width` bits starting `bit` bits below the most significant bit of byte `off`,
// big-endian, with bit + width <= 64. The layouts below are tables of these, so each position is written
// once.
struct MadField {
  uint16_t off;
  uint8_t bit;
  uint8_t width;
};
uint64_t get_field(const uint8_t* base, MadField f);
void put_field(uint8_t* base, MadField f, uint64_t v);

struct MadHeader {
  uint8_t base_version = kMadBaseVersion;
  uint8_t mgmt_class = kMgmtClassCm;
  uint8_t class_version = kCmClassVersion;
  uint8_t method = kMadMethodSend;  // bit 7 is the response bit R
  uint16_t status = 0;
  uint16_t class_specific = 0;
  uint64_t transaction_id = 0;
  uint16_t attribute_id = 0;
  uint32_t attribute_modifier = 0;
};
// `mad` must hold at least kMadHeaderSize bytes (checked by the callers below).
MadHeader parse_mad_header(const uint8_t* mad);
void write_mad_header(uint8_t* mad, const MadHeader& h);

// A path as the REQ carries it (primary at data offset 52, alternate at 96; 44 bytes each).
struct CmPath {
  uint16_t local_lid = 0, remote_lid = 0;  // 0xffff (permissive) on RoCE
  Gid local_gid{}, remote_gid{};
  uint32_t flow_label = 0;  // 20 bits
  uint8_t packet_rate = 0;  // 6 bits
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 0;
  uint8_t sl = 0;  // 4 bits
  bool subnet_local = false;
  uint8_t local_ack_timeout = 0;  // 5 bits
  bool operator==(const CmPath&) const = default;
};

// TransportServiceType; 3 means "see ExtendedTransportType" (1 there is XRC).
enum class CmTransport : uint8_t { rc = 0, uc = 1, rd = 2, extended = 3 };

struct CmReq {
  uint32_t local_comm_id = 0;
  uint32_t vendor_id = 0;  // 24 bits
  uint64_t service_id = 0;
  uint64_t local_ca_guid = 0;
  uint32_t local_qkey = 0;
  uint32_t local_qpn = 0;  // 24 bits
  uint8_t responder_resources = 0;
  uint32_t local_eecn = 0;  // 24 bits
  uint8_t initiator_depth = 0;
  uint32_t remote_eecn = 0;                // 24 bits
  uint8_t remote_cm_response_timeout = 0;  // 5 bits
  uint8_t transport_service_type = 0;      // 2 bits, CmTransport
  bool end_to_end_flow_control = false;
  uint32_t starting_psn = 0;  // 24 bits: the PSN this side's receive queue expects first (the peer's sq_psn)
  uint8_t local_cm_response_timeout = 0;  // 5 bits
  uint8_t retry_count = 0;                // 3 bits
  uint16_t partition_key = 0xffff;
  uint8_t path_mtu = 0;  // 4 bits, IBTA MTU code (1 = 256 ... 5 = 4096)
  bool rdc_exists = false;
  uint8_t rnr_retry_count = 0;  // 3 bits
  uint8_t max_cm_retries = 0;   // 4 bits
  bool srq = false;
  uint8_t extended_transport_type = 0;  // 3 bits
  CmPath primary, alternate;            // the alternate stays all-zero on RoCE
  std::array<uint8_t, 92> private_data{};
  bool operator==(const CmReq&) const = default;
};

struct CmMra {
  uint32_t local_comm_id = 0, remote_comm_id = 0;
  uint8_t message_mraed = 0;    // 2 bits: 0 REQ, 1 REP, 2 LAP
  uint8_t service_timeout = 0;  // 5 bits
  std::array<uint8_t, 222> private_data{};
  bool operator==(const CmMra&) const = default;
};

// REJ reasons (IBTA ch. 12); 4 (timeout), 8 (no listener), 10 (stale), 12 (bad GID) and 28 (rdma_reject) are
// the ones a kernel peer sends over RoCE.
enum class CmRejReason : uint16_t {
  no_qp = 1,
  no_eec = 2,
  no_resources = 3,
  timeout = 4,
  unsupported_request = 5,
  invalid_comm_id = 6,
  invalid_comm_instance = 7,
  invalid_service_id = 8,
  invalid_transport_type = 9,
  stale_connection = 10,
  rdc_not_supported = 11,
  invalid_gid = 12,
  invalid_lid = 13,
  invalid_sl = 14,
  invalid_traffic_class = 15,
  invalid_hop_limit = 16,
  invalid_packet_rate = 17,
  port_redirect = 25,
  invalid_mtu = 26,
  insufficient_resp_resources = 27,
  consumer_reject = 28,
  invalid_rnr_retry = 29,
  duplicate_local_comm_id = 30,
  invalid_class_version = 31,
  invalid_flow_label = 32,
  invalid_alt_flow_label = 33,
  ece_unsupported = 35,
};

struct CmRej {
  uint32_t local_comm_id = 0, remote_comm_id = 0;
  uint8_t message_rejected = 0;    // 2 bits: 0 REQ, 1 REP, 2 other
  uint8_t reject_info_length = 0;  // 7 bits, bytes of ARI used
  uint16_t reason = 0;             // CmRejReason
  std::array<uint8_t, 72> additional_reject_information{};
  std::array<uint8_t, 148> private_data{};
  bool operator==(const CmRej&) const = default;
};

struct CmRep {
  uint32_t local_comm_id = 0, remote_comm_id = 0;
  uint32_t local_qkey = 0;
  uint32_t local_qpn = 0;     // 24 bits
  uint32_t local_eecn = 0;    // 24 bits
  uint32_t starting_psn = 0;  // 24 bits, as in the REQ: the PSN the REQ's sender will send with
  uint8_t responder_resources = 0, initiator_depth = 0;
  uint8_t target_ack_delay = 0;   // 5 bits
  uint8_t failover_accepted = 0;  // 2 bits
  bool end_to_end_flow_control = false;
  uint8_t rnr_retry_count = 0;  // 3 bits
  bool srq = false;
  uint64_t local_ca_guid = 0;
  std::array<uint8_t, 196> private_data{};
  bool operator==(const CmRep&) const = default;
};

struct CmRtu {
  uint32_t local_comm_id = 0, remote_comm_id = 0;
  std::array<uint8_t, 224> private_data{};
  bool operator==(const CmRtu&) const = default;
};

struct CmDreq {
  uint32_t local_comm_id = 0, remote_comm_id = 0;
  uint32_t remote_qpn = 0;  // 24 bits: the receiver checks it is its own QP
  std::array<uint8_t, 220> private_data{};
  bool operator==(const CmDreq&) const = default;
};

struct CmDrep {
  uint32_t local_comm_id = 0, remote_comm_id = 0;
  std::array<uint8_t, 224> private_data{};
  bool operator==(const CmDrep&) const = default;
};

struct CmSidrReq {
  uint32_t request_id = 0;
  uint16_t partition_key = 0xffff;
  uint64_t service_id = 0;
  std::array<uint8_t, 216> private_data{};
  bool operator==(const CmSidrReq&) const = default;
};

struct CmSidrRep {
  uint32_t request_id = 0;
  uint8_t status = 0;  // 0 QP valid, 1 service ID unsupported, 2 rejected, 3 no QP, 4 redirect, 5 version
  uint8_t additional_info_length = 0;
  uint32_t qpn = 0;  // 24 bits
  uint64_t service_id = 0;
  uint32_t qkey = 0;
  std::array<uint8_t, 72> class_port_info{};
  std::array<uint8_t, 136> private_data{};
  bool operator==(const CmSidrRep&) const = default;
};

using CmMessage = std::variant<CmReq, CmMra, CmRej, CmRep, CmRtu, CmDreq, CmDrep, CmSidrReq, CmSidrRep>;

struct CmMad {
  MadHeader header;
  CmMessage msg;
};

// `mad` is the whole MAD; bytes after the first 256 are ignored. `out.header` is filled whenever the first
// 24 bytes were there, even on error.
MadError parse_cm_mad(ByteSpan mad, CmMad& out);
// Writes 256 bytes: the header (attribute_id taken from the message's type) and the message. Returns false,
// writing nothing, if `out` is shorter than kMadSize.
bool build_cm_mad(MutByteSpan out, const CmMad& mad);
uint16_t cm_attr_id(const CmMessage& msg);

// Each message's layout on the 232 MAD data bytes (data = mad + kMadHeaderSize).
void decode_cm(const uint8_t* data, CmReq& m);
void decode_cm(const uint8_t* data, CmMra& m);
void decode_cm(const uint8_t* data, CmRej& m);
void decode_cm(const uint8_t* data, CmRep& m);
void decode_cm(const uint8_t* data, CmRtu& m);
void decode_cm(const uint8_t* data, CmDreq& m);
void decode_cm(const uint8_t* data, CmDrep& m);
void decode_cm(const uint8_t* data, CmSidrReq& m);
void decode_cm(const uint8_t* data, CmSidrRep& m);
void encode_cm(uint8_t* data, const CmReq& m);
void encode_cm(uint8_t* data, const CmMra& m);
void encode_cm(uint8_t* data, const CmRej& m);
void encode_cm(uint8_t* data, const CmRep& m);
void encode_cm(uint8_t* data, const CmRtu& m);
void encode_cm(uint8_t* data, const CmDreq& m);
void encode_cm(uint8_t* data, const CmDrep& m);
void encode_cm(uint8_t* data, const CmSidrReq& m);
void encode_cm(uint8_t* data, const CmSidrRep& m);

// --- IP addressing over CM (IBTA Annex A11) ---

// RDMA IP CM service ID: 0x0000000001 | port space (8 bits: 0x06 TCP for RC, 0x11 UDP for UD/SIDR,
// 0x02 IPoIB, 0x13 IB) | port (16 bits).
inline constexpr uint64_t kIpCmServiceIdPrefix = 0x0000000001000000ull,
                          kIpCmServiceIdMask = 0xffffffffff000000ull;
inline constexpr uint8_t kPortSpaceTcp = 0x06, kPortSpaceUdp = 0x11, kPortSpaceIpoib = 0x02,
                         kPortSpaceIb = 0x3f;
constexpr uint64_t make_ip_cm_service_id(uint8_t port_space, uint16_t port) {
  return kIpCmServiceIdPrefix | (uint64_t{port_space} << 16) | port;
}
constexpr bool is_ip_cm_service_id(uint64_t sid) {
  return (sid & kIpCmServiceIdMask) == kIpCmServiceIdPrefix;
}
constexpr uint8_t ip_cm_port_space(uint64_t sid) {
  return static_cast<uint8_t>(sid >> 16);
}
constexpr uint16_t ip_cm_port(uint64_t sid) {
  return static_cast<uint16_t>(sid);
}

// The 36-byte header that starts REQ and SIDR_REQ private data on an IP CM service ID. Addresses are
// 16 bytes; an IPv4 address sits in the last 4 with 12 zero bytes before it (not the ::ffff: form of a GID).
inline constexpr uint32_t kIpCmHeaderSize = 36;
struct IpCmHeader {
  uint8_t cm_version = 0;  // 0
  uint8_t ip_version = 4;  // 4 or 6 (upper nibble of byte 1)
  uint16_t source_port = 0;
  std::array<uint8_t, 16> source_ip{}, destination_ip{};
  bool operator==(const IpCmHeader&) const = default;
};
// False if `pd` is shorter than 36 bytes or the IP version nibble is neither 4 nor 6.
bool parse_ip_cm_header(ByteSpan pd, IpCmHeader& out);
bool write_ip_cm_header(MutByteSpan pd, const IpCmHeader& h);
// The IP CM header's IPv4 address as a GID (::ffff:a.b.c.d), for comparison with the REQ's path GIDs.
Gid ip_cm_addr_to_gid(const IpCmHeader& h, const std::array<uint8_t, 16>& addr);

// The MAD in a parsed RoCEv2 frame if it is a QP1 packet: UD SEND_ONLY to QP 1 with the GSI Q_Key and at
// least 256 payload bytes. Returns an empty span otherwise.
ByteSpan qp1_mad(const Packet& p);

}  // namespace urxe::wire
