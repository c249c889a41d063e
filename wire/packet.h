// Whole RoCEv2 frames: Ethernet [802.1Q] / IPv4|IPv6 / UDP 4791 / BTH / extension headers / payload / pad /
// ICRC. parse_frame never reads outside the given bytes; build_headers + seal_frame write into a caller's
// buffer so the engine can gather payload straight into the frame.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>

#include "wire/headers.h"
#include "wire/icrc.h"
#include "wire/opcode.h"

namespace urxe::wire {

enum class ParseError : uint8_t {
  ok = 0,
  truncated,       // the frame ends before a header it announces
  not_roce,        // not IPv4/IPv6 + UDP to port 4791 (or an IP fragment)
  bad_version,     // IP version field or BTH TVer not what RoCEv2 allows
  bad_length,      // IP/UDP lengths disagree with the frame or the opcode's fixed layout
  bad_checksum,    // IPv4 header checksum or non-zero UDP checksum wrong
  unknown_opcode,  // BTH opcode not in the RC/UC/UD/XRC/CNP table
  bad_pad,         // pad count larger than the payload, or pad on an opcode without payload
  bad_icrc,        // everything parsed, but the ICRC does not match
};
std::string_view to_string(ParseError e);

struct Packet {
  EthHeader eth;
  uint8_t ip_version = 0;  // 4 or 6
  Ipv4Header ip4;
  Ipv6Header ip6;
  UdpHeader udp;
  Bth bth;
  const OpcodeInfo* info = nullptr;
  uint16_t present = 0;  // ExtHeader bits actually present (== info->headers once the BTH parsed)
  Reth reth;
  Aeth aeth;
  AtomicEth atomic_eth;
  AtomicAckEth atomic_ack_eth;
  Deth deth;
  uint32_t imm = 0;        // ImmDt, big-endian wire value
  uint32_t ieth_rkey = 0;  // IETH
  uint32_t xrc_srqn = 0;   // XRCETH: the responder's XRC SRQ number (24 bits)
  uint32_t l3_offset = 0, l4_offset = 0, bth_offset = 0, payload_offset = 0;
  uint32_t payload_len = 0;  // without pad
  uint32_t frame_len = 0;    // through the ICRC; Ethernet padding after it is not counted
  // As stored; read only with ParseOptions::verify_icrc. A frame that came without one (the same-host
  // path) ends in a cache line the payload copy reads in order later: read first, out of order, it was
  // half of parse_frame's time on the receiving side of a 64 KiB stream between two processes.
  uint32_t icrc = 0;
  uint32_t icrc_expected = 0;
  bool icrc_checked = false;
  bool icrc_ok = false;
  ByteSpan payload;
  Gid src_gid() const;
  Gid dst_gid() const;
};

struct ParseOptions {
  bool verify_icrc = true;
  bool verify_checksums = true;  // IPv4 header checksum; UDP checksum when non-zero
  // Stop once the BTH is read (ok: a RoCEv2 frame up to its BTH): for routing by destination QP, which
  // needs nothing past it. The opcode, extension headers, payload and ICRC are not looked at.
  bool bth_only = false;
};

// Fills `out` as far as parsing got, even on error (so a decoder can show the fields), and returns the
// first problem found.
ParseError parse_frame(ByteSpan frame, Packet& out, const ParseOptions& opt = {});

struct FrameSpec {
  MacAddr dst_mac{}, src_mac{};
  bool has_vlan = false;
  uint16_t vlan_tci = 0;
  uint8_t ip_version = 4;
  Gid src_ip{}, dst_ip{};     // IPv4 as IPv4-mapped (::ffff:a.b.c.d); the last 4 bytes are used
  uint8_t traffic_class = 0;  // IPv4 TOS / IPv6 traffic class
  uint8_t ttl = 64;           // TTL / hop limit
  uint16_t ip_id = 0;
  bool df = true;
  uint32_t flow_label = 0;
  uint16_t udp_sport = 0xc000;
  uint16_t udp_dport = kRoceV2Port;
  bool udp_checksum = false;  // RoCEv2 NICs send 0 (rxe even over IPv6)
  Bth bth;                    // pad is computed from the payload length
  Reth reth;
  Aeth aeth;
  AtomicEth atomic_eth;
  AtomicAckEth atomic_ack_eth;
  Deth deth;
  uint32_t imm = 0;
  uint32_t ieth_rkey = 0;
  uint32_t xrc_srqn = 0;  // XRCETH (24 bits; the reserved top byte is sent as 0)
};

struct FrameLayout {
  uint32_t l3_offset = 0, ip_hdr_len = 0, payload_offset = 0, payload_len = 0, pad = 0, frame_len = 0;
  uint8_t ip_version = 4;
  bool udp_checksum = false;
};

// Size of the frame `spec` would produce with `payload_len` payload bytes. (Inline: the engine asks before
// each frame it builds, and build_headers again.)
inline uint32_t frame_size(const FrameSpec& spec, uint32_t payload_len) {
  const OpcodeInfo& info = opcode_info(spec.bth.opcode);
  const uint32_t pad = info.has_payload ? ((4 - (payload_len & 3)) & 3) : 0;
  if (!info.has_payload) payload_len = 0;
  return kEthLen + (spec.has_vlan ? kVlanLen : 0) + (spec.ip_version == 4 ? kIpv4MinLen : kIpv6Len) +
         kUdpLen + kBthLen + info.ext_len + payload_len + pad + kIcrcLen;
}
// Writes every header; the caller then puts payload_len bytes at out[layout.payload_offset] and calls
// seal_frame. Returns false (writing nothing) when `out` is too small or the opcode is unknown.
bool build_headers(MutByteSpan out, const FrameSpec& spec, uint32_t payload_len, FrameLayout& layout);
// The Ethernet, IP and UDP headers of one connection's frames, built once from its FrameSpec (make_prefix)
// and copied into each frame by the build_headers below, which fills in the lengths and the IPv4 checksum: a
// QP's frames differ there only (and in BTH and what follows). The checksum comes from `ipv4_sum`, the
// one's-complement sum (unfolded) of every IPv4 header word but the total length and the checksum.
struct HeaderPrefix {
  std::array<uint8_t, kEthLen + kVlanLen + kIpv6Len + kUdpLen> bytes{};
  uint32_t len = 0, l3 = 0, ip_hdr_len = 0, ipv4_sum = 0;
  uint8_t ip_version = 4;
  bool udp_checksum = false;
};
void make_prefix(const FrameSpec& spec, HeaderPrefix& prefix);
// build_headers with the headers up to UDP from `prefix` (made from a spec equal to `spec` in those fields);
// of `spec` only the BTH and the extension headers are read. The same bytes and layout as
// build_headers(out, spec, ...).
bool build_headers(MutByteSpan out, const HeaderPrefix& prefix, const FrameSpec& spec, uint32_t payload_len,
                   FrameLayout& layout);
// Zeroes the pad, writes the ICRC (and the UDP checksum if asked). `icrc` false leaves the ICRC's 4 bytes
// for write_icrc later (a port that fills it where the frame needs one); not with a UDP checksum, which
// covers them.
void seal_frame(MutByteSpan frame, const FrameLayout& layout, bool icrc = true);
// Writes the ICRC of a whole RoCEv2 frame (Ethernet, an optional 802.1Q tag, IPv4 or IPv6, UDP, BTH, ...)
// into its last 4 bytes. False, writing nothing, when the frame is too short or not IP.
bool write_icrc(MutByteSpan frame);
// A batch frame: the same-host path's unit for a run of one message's middle packets (engine/README.md,
// batch frames). It is the frame of the run's first packet (a SEND, WRITE or READ response MIDDLE, no UDP
// checksum) carrying the payloads of all `segments` packets, each as long as the others, with the IP and UDP
// lengths over them all and room for one ICRC, unwritten. Packet `index` of the run is that frame's headers
// with PSN + index and the lengths of one payload, then payload `index`, then its ICRC. A batch frame never
// reaches a wire or a capture: whatever takes one there cuts it into its packets with batch_packet. Writes
// packet `index` of `batch` into `out` and returns its length; 0 (writing nothing) when `batch` is not such a
// frame of `segments` (>= 2) packets, `index` is past them or `out` is too small.
uint32_t batch_packet(ByteSpan batch, uint32_t segments, uint32_t index, MutByteSpan out);
// The bytes a batch frame of `frame_len` bytes, `payload_len` of them payload, stands for on a wire: its
// `segments` packets, each with its own headers and ICRC. frame_len itself when it is not a batch (< 2).
inline uint32_t batch_wire_len(uint32_t frame_len, uint32_t payload_len, uint32_t segments) {
  return segments < 2 ? frame_len : segments * (frame_len - payload_len + payload_len / segments);
}
// Convenience: headers + copy of `payload` + seal. Returns the frame length, 0 if it does not fit.
uint32_t build_frame(MutByteSpan out, const FrameSpec& spec, ByteSpan payload);

}  // namespace urxe::wire
