// RoCEv2 header values and their encoders/decoders (IBTA 9.2-9.5, Annex A17). Each `parse_*` reads exactly
// the header's length from a pointer the caller has bounds-checked; each `write_*` writes exactly that many.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>

#include "wire/bytes.h"

namespace urxe::wire {

using MacAddr = std::array<uint8_t, 6>;
using Gid = std::array<uint8_t, 16>;  // IPv6 address, or IPv4-mapped ::ffff:a.b.c.d

inline constexpr uint16_t kEtherTypeIpv4 = 0x0800, kEtherTypeIpv6 = 0x86dd, kEtherTypeVlan = 0x8100;
inline constexpr uint8_t kIpProtoUdp = 17;

bool gid_is_ipv4_mapped(const Gid& g);
Gid gid_from_ipv4(const std::array<uint8_t, 4>& a);

struct Bth {
  uint8_t opcode = 0;
  bool se = false;      // solicited event
  bool migreq = false;  // M
  uint8_t pad = 0;      // pad count 0..3
  uint8_t tver = 0;     // transport header version, 0
  uint16_t pkey = 0xffff;
  bool fecn = false, becn = false;
  uint8_t resv6 = 0;  // the 6 reserved bits beside FECN/BECN, preserved for faithful decode
  uint32_t dqpn = 0;  // 24 bits
  bool ack_req = false;
  uint8_t resv7 = 0;  // 7 reserved bits beside AckReq
  uint32_t psn = 0;   // 24 bits
};
Bth parse_bth(const uint8_t* p);
// Only the destination QP of the BTH at p (its bytes 5-7): what a port routes by, per frame.
inline uint32_t bth_dqpn(const uint8_t* p) {
  return static_cast<uint32_t>(p[5]) << 16 | static_cast<uint32_t>(p[6]) << 8 | p[7];
}
void write_bth(uint8_t* p, const Bth& h);

struct Reth {
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint32_t dma_len = 0;
};
Reth parse_reth(const uint8_t* p);
void write_reth(uint8_t* p, const Reth& h);

// AETH syndrome (IBTA 9.7.5.1): bit 7 reserved, bits 6..5 type, bits 4..0 credit/timer/NAK code.
enum class AethType : uint8_t { ack = 0, rnr_nak = 1, reserved = 2, nak = 3 };
enum class NakCode : uint8_t {
  psn_seq_error = 0,
  invalid_request = 1,
  remote_access_error = 2,
  remote_operational_error = 3,
  invalid_rd_request = 4,
};
inline constexpr uint8_t kCreditInvalid = 0x1f;  // "no credit count"/unlimited, as rxe sends
struct Aeth {
  uint8_t syndrome = 0;
  uint32_t msn = 0;  // 24 bits
  AethType type() const { return static_cast<AethType>((syndrome >> 5) & 3); }
  uint8_t value() const { return syndrome & 0x1f; }
};
constexpr uint8_t make_syndrome(AethType t, uint8_t value) {
  return static_cast<uint8_t>((static_cast<uint8_t>(t) << 5) | (value & 0x1f));
}
Aeth parse_aeth(const uint8_t* p);
void write_aeth(uint8_t* p, const Aeth& h);
std::string_view nak_code_name(uint8_t code);
// IBTA Table 45: RNR NAK timer field → minimum delay in nanoseconds (code 0 is 655.36 ms).
uint64_t rnr_timer_ns(uint8_t code);

struct AtomicEth {
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint64_t swap_add = 0;  // swap value (CmpSwap) or add value (FetchAdd)
  uint64_t compare = 0;
};
AtomicEth parse_atomic_eth(const uint8_t* p);
void write_atomic_eth(uint8_t* p, const AtomicEth& h);

struct AtomicAckEth {
  uint64_t orig_data = 0;
};
AtomicAckEth parse_atomic_ack_eth(const uint8_t* p);
void write_atomic_ack_eth(uint8_t* p, const AtomicAckEth& h);

struct Deth {
  uint32_t qkey = 0;
  uint32_t src_qp = 0;  // 24 bits
};
Deth parse_deth(const uint8_t* p);
void write_deth(uint8_t* p, const Deth& h);

// ImmDt and IETH are one big-endian 32-bit word each; `imm` holds the wire bytes as a number.

struct EthHeader {
  MacAddr dst{}, src{};
  bool has_vlan = false;
  uint16_t vlan_tci = 0;  // PCP(3) DEI(1) VID(12)
  uint16_t ethertype = 0;
};

struct Ipv4Header {
  uint8_t ihl = 5;  // 32-bit words
  uint8_t tos = 0;  // DSCP(6) ECN(2)
  uint16_t total_len = 0;
  uint16_t id = 0;
  uint16_t frag = 0;  // flags(3) fragment offset(13)
  uint8_t ttl = 64;
  uint8_t protocol = kIpProtoUdp;
  uint16_t checksum = 0;
  std::array<uint8_t, 4> src{}, dst{};
};
inline constexpr uint16_t kIpv4FlagDf = 0x4000, kIpv4FlagMf = 0x2000, kIpv4FragOffsetMask = 0x1fff;
uint16_t ipv4_header_checksum(const uint8_t* hdr, uint32_t len);  // with the checksum field read as 0
// Whether the stored checksum is right. Where the other words sum to 0xffff (-0) both 0x0000 (what the
// computation gives) and 0xffff (+0's twin, what RFC 1624's incremental update leaves, e.g. a router or
// netem marking ECN CE) are: one's-complement arithmetic has two zeros, and Wireshark accepts both.
bool ipv4_header_checksum_ok(const uint8_t* hdr, uint32_t len);
// Gives the IP and UDP headers at `ip` (IPv4 of any IHL, or IPv6; UDP right after) the fields a UDP datagram
// of `udp_len` bytes with IPv4 ID `ipv4_id` has: IP length, IPv4 ID and header checksum, UDP length (the UDP
// checksum is left as it is). What differs between two frames cut from one run (a GSO batch's segments, a
// same-host batch frame's packets). checksum_valid: the IPv4 header checksum there is right for the header as
// it is, and is updated for the words that change (RFC 1624) instead of summed again.
void set_udp_datagram_len(uint8_t* ip, uint32_t udp_len, uint16_t ipv4_id, bool checksum_valid);

struct Ipv6Header {
  uint8_t traffic_class = 0;
  uint32_t flow_label = 0;  // 20 bits
  uint16_t payload_len = 0;
  uint8_t next_header = kIpProtoUdp;
  uint8_t hop_limit = 64;
  Gid src{}, dst{};
};

struct UdpHeader {
  uint16_t sport = 0, dport = 0, length = 0, checksum = 0;
};

}  // namespace urxe::wire
