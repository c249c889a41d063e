// Helpers shared by the wire/ unit tests (wire_*_test.cc): independent references written from the specs
// (CRC-32, ICRC, IPv4/UDP checksums), frame construction, and IBTA Table 35 as the spec writes it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "wire/packet.h"
#include "wire/psn.h"

namespace wire_test {

using namespace urxe::wire;

using Bytes = std::vector<uint8_t>;

// ---- Independent references (written from the specs, sharing no code with wire/) ----

// Bitwise reflected CRC-32 (polynomial 0x04C11DB7, as Ethernet and zlib), the one Annex A17 prescribes.
inline uint32_t ref_crc32(uint32_t crc, const uint8_t* p, size_t n) {
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1)));
  }
  return ~crc;
}

// Annex A17.3.3: CRC over 64 bits of ones (no LRH) + IP header with the variant fields set to ones (IPv4:
// TOS, TTL, header checksum; IPv6: traffic class, flow label, hop limit) + UDP with checksum ones + BTH with
// FECN/BECN/reserved ones + the rest through the pad. `l3` runs from the IP header to just before the ICRC.
inline uint32_t ref_icrc(const uint8_t* l3, size_t len, int ip_version, size_t ip_hdr_len) {
  Bytes m(8 + len, 0xff);  // (not insert(): GCC 12 -O2 reports a bogus -Warray-bounds on it)
  std::copy(l3, l3 + len, m.begin() + 8);
  uint8_t* ip = m.data() + 8;
  if (ip_version == 4) {
    ip[1] = 0xff;
    ip[8] = 0xff;
    ip[10] = ip[11] = 0xff;
  } else {
    ip[0] |= 0x0f;
    ip[1] = ip[2] = ip[3] = 0xff;
    ip[7] = 0xff;
  }
  uint8_t* udp = ip + ip_hdr_len;
  udp[6] = udp[7] = 0xff;
  udp[8 + 4] = 0xff;  // BTH byte 4: FECN, BECN, Resv6
  return ref_crc32(0, m.data(), m.size());
}

inline uint32_t sum_be16(const uint8_t* p, size_t n, uint32_t s = 0) {
  for (size_t i = 0; i + 1 < n; i += 2) s += (uint32_t{p[i]} << 8) | p[i + 1];
  if (n & 1) s += uint32_t{p[n - 1]} << 8;
  return s;
}
inline uint16_t fold16(uint32_t s) {
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  return static_cast<uint16_t>(s);
}

// RFC 791 header checksum over `len` bytes with the checksum field taken as zero.
inline uint16_t ref_ipv4_checksum(const uint8_t* ip, size_t len) {
  Bytes h(ip, ip + len);
  h[10] = h[11] = 0;
  return static_cast<uint16_t>(~fold16(sum_be16(h.data(), len)));
}

// RFC 768 / RFC 8200 pseudo-header + UDP one's complement sum (0xffff when the stored checksum is right).
inline uint16_t ref_udp_sum(const Bytes& f, size_t l3, int ip_version, size_t ip_hdr_len) {
  const uint8_t* ip = f.data() + l3;
  const uint8_t* udp = ip + ip_hdr_len;
  const size_t udp_len = (size_t{udp[4]} << 8) | udp[5];
  uint32_t s = ip_version == 4 ? sum_be16(ip + 12, 8) : sum_be16(ip + 8, 32);
  s += 17 + static_cast<uint32_t>(udp_len);
  return fold16(sum_be16(udp, udp_len, s));
}

inline Bytes be(uint64_t v, int n) {
  Bytes b(n);
  for (int i = n - 1; i >= 0; --i, v >>= 8) b[i] = static_cast<uint8_t>(v);
  return b;
}
inline Bytes slice(const Bytes& f, size_t off, size_t n) {
  return Bytes(f.begin() + off, f.begin() + off + n);
}

// ---- Frame construction helpers ----

constexpr Reth kValReth{0x0102030405060708ull, 0x11223344, 0x00001000};
constexpr Aeth kValAeth{0x1f, 0xabcdef};
constexpr AtomicEth kValAtomicEth{0x1111222233334444ull, 0x55667788, 0x99aabbccddeeff00ull,
                                  0x0f0e0d0c0b0a0908ull};
constexpr AtomicAckEth kValAtomicAckEth{0xfedcba9876543210ull};
constexpr Deth kValDeth{0x80010000, 0x000123};
constexpr uint32_t kImm = 0xcafef00d, kIethRkey = 0x0badcafe;
constexpr uint32_t kXrcSrqn = 0xfedcba;  // 24 bits, top bit set

struct Variant {
  const char* name;
  uint8_t ip_version;
  bool vlan;
};
constexpr Variant kVariants[] = {
    {"ipv4", 4, false}, {"ipv6", 6, false}, {"vlan+ipv4", 4, true}, {"vlan+ipv6", 6, true}};

inline FrameSpec make_spec(uint8_t opcode, const Variant& v = kVariants[0]) {
  FrameSpec s;
  s.dst_mac = {0x02, 0x00, 0x00, 0x00, 0x00, 0x02};
  s.src_mac = {0x02, 0x00, 0x00, 0x00, 0x00, 0x01};
  s.has_vlan = v.vlan;
  s.vlan_tci = 0x6064;  // PCP 3, VID 100
  s.ip_version = v.ip_version;
  if (v.ip_version == 4) {
    s.src_ip = gid_from_ipv4({10, 77, 0, 11});
    s.dst_ip = gid_from_ipv4({10, 77, 0, 12});
  } else {
    s.src_ip = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x11};
    s.dst_ip = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x12};
  }
  s.traffic_class = 0x62;
  s.ttl = 63;
  s.ip_id = 0x1234;
  s.flow_label = 0xabcde;
  s.udp_sport = 0xc123;
  s.bth.opcode = opcode;
  s.bth.se = true;
  s.bth.pkey = 0xffff;
  s.bth.dqpn = 0x000011;
  s.bth.ack_req = true;
  s.bth.psn = 0xfffffe;
  s.reth = kValReth;
  s.aeth = kValAeth;
  s.atomic_eth = kValAtomicEth;
  s.atomic_ack_eth = kValAtomicAckEth;
  s.deth = kValDeth;
  s.imm = kImm;
  s.ieth_rkey = kIethRkey;
  s.xrc_srqn = kXrcSrqn;
  return s;
}

inline Bytes payload_of(size_t n) {
  Bytes p(n);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(0xa0 + i * 7);
  return p;
}

inline Bytes build(const FrameSpec& s, const Bytes& payload) {
  Bytes f(frame_size(s, static_cast<uint32_t>(payload.size())));
  EXPECT_EQ(build_frame(f, s, payload), f.size());
  return f;
}

inline std::string name_of(uint8_t op) {
  char b[64];
  std::snprintf(b, sizeof b, "opcode 0x%02x %s", op, std::string(opcode_info(op).name).c_str());
  return b;
}

inline ParseError parse(const Bytes& f, Packet& p, const ParseOptions& o = {}) {
  return parse_frame(f, p, o);
}
inline ParseError parse(const Bytes& f, const ParseOptions& o = {}) {
  Packet p;
  return parse_frame(f, p, o);
}

// After editing an untagged IPv4 frame: recompute the IPv4 header checksum and the ICRC (both with the
// references above), from whatever lengths the headers now claim.
inline void refresh_v4(Bytes& f, size_t l3 = kEthLen) {
  uint8_t* ip = f.data() + l3;
  const size_t ihl = (ip[0] & 0xf) * 4u;
  const uint16_t c = ref_ipv4_checksum(ip, ihl);
  ip[10] = static_cast<uint8_t>(c >> 8);
  ip[11] = static_cast<uint8_t>(c);
  const size_t total = (size_t{ip[2]} << 8) | ip[3];
  if (l3 + total <= f.size() && total >= ihl + kUdpLen + kBthLen + kIcrcLen)
    store_le32(f.data() + l3 + total - 4, ref_icrc(ip, total - 4, 4, ihl));
}
inline void set_be16(Bytes& f, size_t off, uint16_t v) {
  store_be16(f.data() + off, v);
}
inline uint16_t get_be16(const Bytes& f, size_t off) {
  return load_be16(f.data() + off);
}

// Grows both the IPv4 total length and the UDP length of an untagged IPv4 frame by `d` (may be negative).
inline void adjust_lengths_v4(Bytes& f, int d) {
  set_be16(f, 14 + 2, static_cast<uint16_t>(get_be16(f, 14 + 2) + d));
  const size_t ihl = (f[14] & 0xf) * 4u;
  set_be16(f, 14 + ihl + 4, static_cast<uint16_t>(get_be16(f, 14 + ihl + 4) + d));
}

// Offsets in an untagged IPv4 frame without options.
constexpr size_t kL3 = 14, kUdp = 34, kBth = 42;

// ---- IBTA Table 35, written out here from the spec ----

struct SpecRow {
  uint8_t op;  // low 5 bits
  const char* name;
  uint16_t headers;
  bool payload;
  bool request;
  Position pos;
  OpKind kind;
};
const SpecRow kTable35[] = {
    {0x00, "SEND_FIRST", 0, true, true, Position::first, OpKind::send},
    {0x01, "SEND_MIDDLE", 0, true, true, Position::middle, OpKind::send},
    {0x02, "SEND_LAST", 0, true, true, Position::last, OpKind::send},
    {0x03, "SEND_LAST_WITH_IMMEDIATE", kImmDt, true, true, Position::last, OpKind::send},
    {0x04, "SEND_ONLY", 0, true, true, Position::only, OpKind::send},
    {0x05, "SEND_ONLY_WITH_IMMEDIATE", kImmDt, true, true, Position::only, OpKind::send},
    {0x06, "RDMA_WRITE_FIRST", kReth, true, true, Position::first, OpKind::rdma_write},
    {0x07, "RDMA_WRITE_MIDDLE", 0, true, true, Position::middle, OpKind::rdma_write},
    {0x08, "RDMA_WRITE_LAST", 0, true, true, Position::last, OpKind::rdma_write},
    {0x09, "RDMA_WRITE_LAST_WITH_IMMEDIATE", kImmDt, true, true, Position::last, OpKind::rdma_write},
    {0x0a, "RDMA_WRITE_ONLY", kReth, true, true, Position::only, OpKind::rdma_write},
    {0x0b, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", kReth | kImmDt, true, true, Position::only, OpKind::rdma_write},
    {0x0c, "RDMA_READ_REQUEST", kReth, false, true, Position::only, OpKind::rdma_read_request},
    {0x0d, "RDMA_READ_RESPONSE_FIRST", kAeth, true, false, Position::first, OpKind::rdma_read_response},
    {0x0e, "RDMA_READ_RESPONSE_MIDDLE", 0, true, false, Position::middle, OpKind::rdma_read_response},
    {0x0f, "RDMA_READ_RESPONSE_LAST", kAeth, true, false, Position::last, OpKind::rdma_read_response},
    {0x10, "RDMA_READ_RESPONSE_ONLY", kAeth, true, false, Position::only, OpKind::rdma_read_response},
    {0x11, "ACKNOWLEDGE", kAeth, false, false, Position::only, OpKind::ack},
    {0x12, "ATOMIC_ACKNOWLEDGE", kAeth | kAtomicAckEth, false, false, Position::only, OpKind::atomic_ack},
    {0x13, "COMPARE_SWAP", kAtomicEth, false, true, Position::only, OpKind::compare_swap},
    {0x14, "FETCH_ADD", kAtomicEth, false, true, Position::only, OpKind::fetch_add},
    {0x16, "SEND_LAST_WITH_INVALIDATE", kIeth, true, true, Position::last, OpKind::send},
    {0x17, "SEND_ONLY_WITH_INVALIDATE", kIeth, true, true, Position::only, OpKind::send},
};

struct Expected {
  std::string name;
  Transport transport;
  SpecRow row;
};

// Every opcode RoCEv2 carries: RC all of the above, UC the SEND and RDMA WRITE rows (0x20-0x2b), UD SEND_ONLY
// (+imm) with a DETH, XRC (Annex A14) all of RC's rows again at 0xa0-0xb7 with an XRCETH first in every
// request (responses have none), and the CNP (Annex A17.9.3). RD (0x40) is not supported.
inline std::vector<std::pair<uint8_t, Expected>> expected_opcodes() {
  std::vector<std::pair<uint8_t, Expected>> v;
  for (const SpecRow& r : kTable35) {
    v.push_back({r.op, {std::string("RC ") + r.name, Transport::rc, r}});
    if (r.op <= 0x0b)
      v.push_back({static_cast<uint8_t>(0x20 | r.op), {std::string("UC ") + r.name, Transport::uc, r}});
    if (r.op == 0x04 || r.op == 0x05) {
      SpecRow ud = r;
      ud.headers |= kDeth;
      v.push_back({static_cast<uint8_t>(0x60 | r.op), {std::string("UD ") + r.name, Transport::ud, ud}});
    }
    SpecRow xrc = r;
    if (r.request) xrc.headers |= kXrceth;
    v.push_back({static_cast<uint8_t>(0xa0 | r.op), {std::string("XRC ") + r.name, Transport::xrc, xrc}});
  }
  // IBTA Annex A19 (Memory Placement Extensions): RC ATOMIC WRITE, RETH and 8 payload bytes, single packet.
  // (FLUSH, 0x1c, is not implemented: it stays an unknown opcode.)
  v.push_back({0x1d,
               {"RC ATOMIC_WRITE",
                Transport::rc,
                {0x1d, "ATOMIC_WRITE", kReth, true, true, Position::only, OpKind::atomic_write}}});
  v.push_back({0x81, {"CNP", Transport::cnp, {0x01, "CNP", 0, false, false, Position::only, OpKind::cnp}}});
  return v;
}

inline std::vector<uint8_t> valid_opcodes() {
  std::vector<uint8_t> v;
  for (auto& [op, e] : expected_opcodes()) v.push_back(op);
  return v;
}

inline uint32_t header_len(uint16_t h) {
  return (h & kDeth ? 8 : 0) + (h & kXrceth ? 4 : 0) + (h & kReth ? 16 : 0) + (h & kAtomicEth ? 28 : 0) +
         (h & kAeth ? 4 : 0) + (h & kAtomicAckEth ? 8 : 0) + (h & kImmDt ? 4 : 0) + (h & kIeth ? 4 : 0);
}

// ---- Known-good frames for the ParseError tests ----

// RC SEND_ONLY, 16 bytes of payload, untagged IPv4: 74 bytes, ICRC at 70.
inline Bytes good_v4() {
  return build(make_spec(op::kRc | op::send_only), payload_of(16));
}
inline Bytes good_v6() {
  return build(make_spec(op::kRc | op::send_only, kVariants[1]), payload_of(16));
}

}  // namespace wire_test
