#include "wire/headers.h"

#include "wire/opcode.h"  // (the headers' lengths)

namespace urxe::wire {

bool gid_is_ipv4_mapped(const Gid& g) {
  for (int i = 0; i < 10; ++i)
    if (g[i] != 0) return false;
  return g[10] == 0xff && g[11] == 0xff;
}

Gid gid_from_ipv4(const std::array<uint8_t, 4>& a) {
  Gid g{};
  g[10] = g[11] = 0xff;
  for (int i = 0; i < 4; ++i) g[12 + i] = a[i];
  return g;
}

Bth parse_bth(const uint8_t* p) {
  Bth h;
  h.opcode = p[0];
  h.se = (p[1] >> 7) & 1;
  h.migreq = (p[1] >> 6) & 1;
  h.pad = (p[1] >> 4) & 3;
  h.tver = p[1] & 0xf;
  h.pkey = load_be16(p + 2);
  h.fecn = (p[4] >> 7) & 1;
  h.becn = (p[4] >> 6) & 1;
  h.resv6 = p[4] & 0x3f;
  h.dqpn = load_be24(p + 5);
  h.ack_req = (p[8] >> 7) & 1;
  h.resv7 = p[8] & 0x7f;
  h.psn = load_be24(p + 9);
  return h;
}

void write_bth(uint8_t* p, const Bth& h) {
  p[0] = h.opcode;
  p[1] = static_cast<uint8_t>((h.se << 7) | (h.migreq << 6) | ((h.pad & 3) << 4) | (h.tver & 0xf));
  store_be16(p + 2, h.pkey);
  p[4] = static_cast<uint8_t>((h.fecn << 7) | (h.becn << 6) | (h.resv6 & 0x3f));
  store_be24(p + 5, h.dqpn);
  p[8] = static_cast<uint8_t>((h.ack_req << 7) | (h.resv7 & 0x7f));
  store_be24(p + 9, h.psn);
}

Reth parse_reth(const uint8_t* p) { return Reth{load_be64(p), load_be32(p + 8), load_be32(p + 12)}; }
void write_reth(uint8_t* p, const Reth& h) {
  store_be64(p, h.va);
  store_be32(p + 8, h.rkey);
  store_be32(p + 12, h.dma_len);
}

Aeth parse_aeth(const uint8_t* p) { return Aeth{p[0], load_be24(p + 1)}; }
void write_aeth(uint8_t* p, const Aeth& h) {
  p[0] = h.syndrome;
  store_be24(p + 1, h.msn);
}

std::string_view nak_code_name(uint8_t code) {
  switch (code) {
    case 0: return "PSN_SEQUENCE_ERROR";
    case 1: return "INVALID_REQUEST";
    case 2: return "REMOTE_ACCESS_ERROR";
    case 3: return "REMOTE_OPERATIONAL_ERROR";
    case 4: return "INVALID_RD_REQUEST";
    default: return "RESERVED";
  }
}

uint64_t rnr_timer_ns(uint8_t code) {
  // Table 45, in units of 10 ns.
  static constexpr uint32_t k10ns[32] = {
      65536000, 1000,   2000,   3000,   4000,    6000,    8000,    12000,   16000,   24000,   32000,
      48000,    64000,  96000,  128000, 192000,  256000,  384000,  512000,  768000,  1024000, 1536000,
      2048000,  3072000, 4096000, 6144000, 8192000, 12288000, 16384000, 24576000, 32768000, 49152000};
  return uint64_t{k10ns[code & 0x1f]} * 10;
}

AtomicEth parse_atomic_eth(const uint8_t* p) {
  return AtomicEth{load_be64(p), load_be32(p + 8), load_be64(p + 12), load_be64(p + 20)};
}
void write_atomic_eth(uint8_t* p, const AtomicEth& h) {
  store_be64(p, h.va);
  store_be32(p + 8, h.rkey);
  store_be64(p + 12, h.swap_add);
  store_be64(p + 20, h.compare);
}

AtomicAckEth parse_atomic_ack_eth(const uint8_t* p) { return AtomicAckEth{load_be64(p)}; }
void write_atomic_ack_eth(uint8_t* p, const AtomicAckEth& h) { store_be64(p, h.orig_data); }

Deth parse_deth(const uint8_t* p) { return Deth{load_be32(p), load_be24(p + 5)}; }
void write_deth(uint8_t* p, const Deth& h) {
  store_be32(p, h.qkey);
  p[4] = 0;
  store_be24(p + 5, h.src_qp);
}

uint16_t ipv4_header_checksum(const uint8_t* hdr, uint32_t len) {
  // 32-bit big-endian words summed into 64 bits (no carry lost), then folded: the same one's-complement sum
  // as 16-bit words (RFC 1071), with half the loads and no skip test (checked for every IPv4 frame received;
  // build_headers sums its own words). The checksum field, the low half of the third word, reads as 0.
  uint64_t sum = 0;
  uint32_t i = 0;
  for (; i + 3 < len; i += 4) sum += load_be32(hdr + i);
  if (i + 1 < len) sum += uint64_t{load_be16(hdr + i)} << 16;
  if (len >= 12) sum -= load_be16(hdr + 10);
  sum = (sum & 0xffffffffu) + (sum >> 32);
  sum = (sum & 0xffffffffu) + (sum >> 32);
  sum = (sum & 0xffffu) + (sum >> 16);
  sum = (sum & 0xffffu) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

bool ipv4_header_checksum_ok(const uint8_t* hdr, uint32_t len) {
  const uint16_t stored = len >= 12 ? load_be16(hdr + 10) : 0;
  const uint16_t computed = ipv4_header_checksum(hdr, len);
  return stored == computed || (computed == 0 && stored == 0xffff);
}

void set_udp_datagram_len(uint8_t* ip, uint32_t udp_len, uint16_t ipv4_id, bool checksum_valid) {
  uint32_t ip_hdr_len = kIpv6Len;
  if ((ip[0] >> 4) == 4) {
    ip_hdr_len = (ip[0] & 0x0fu) * 4u;
    const auto len = static_cast<uint16_t>(ip_hdr_len + udp_len);
    if (checksum_valid) {
      // RFC 1624 (eqn. 3): HC' = ~(~HC + ~m + m') over the words that change, from what is there (summing
      // the header again read back the words just stored, each load waiting for its stores). From a sum
      // that was computed (never 0xffff) this gives exactly what summing again gives, -0 included.
      uint32_t sum = uint32_t{static_cast<uint16_t>(~load_be16(ip + 10))} +
                     static_cast<uint16_t>(~load_be16(ip + 2)) + len +
                     static_cast<uint16_t>(~load_be16(ip + 4)) + ipv4_id;
      sum = (sum & 0xffff) + (sum >> 16);
      sum = (sum & 0xffff) + (sum >> 16);
      store_be16(ip + 10, static_cast<uint16_t>(~sum));
      store_be16(ip + 2, len);
      store_be16(ip + 4, ipv4_id);
    } else {
      store_be16(ip + 2, len);
      store_be16(ip + 4, ipv4_id);
      store_be16(ip + 10, ipv4_header_checksum(ip, ip_hdr_len));
    }
  } else {
    store_be16(ip + 4, static_cast<uint16_t>(udp_len));
  }
  store_be16(ip + ip_hdr_len + 4, static_cast<uint16_t>(udp_len));
}

}  // namespace urxe::wire
