#include "wire/icrc.h"

#include <isa-l/crc.h>
#include <zlib.h>

#include <array>
#include <cstring>

#include "wire/crc32_fold.h"
#include "wire/opcode.h"

namespace urxe::wire {
namespace {

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kTable = make_table();

uint32_t crc32_table(uint32_t crc, const uint8_t* p, size_t n) {
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = kTable[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t crc32_zlib(uint32_t crc, const uint8_t* p, size_t n) {
  // zlib's length type is uInt; feed in chunks so sizes beyond 4 GiB stay correct.
  while (n > 0) {
    uInt chunk = n > 0x40000000u ? 0x40000000u : static_cast<uInt>(n);
    crc = static_cast<uint32_t>(::crc32(crc, p, chunk));
    p += chunk;
    n -= chunk;
  }
  return crc;
}

}  // namespace

const char* crc_impl_name(CrcImpl impl) {
  switch (impl) {
    case CrcImpl::isal: return "isal";
    case CrcImpl::zlib: return "zlib";
    case CrcImpl::table: return "table";
    case CrcImpl::fold: return "fold";
  }
  return "?";
}

uint32_t crc32(uint32_t crc, const uint8_t* data, size_t len) { return crc32_fold(crc, data, len); }

uint32_t crc32_with(CrcImpl impl, uint32_t crc, const uint8_t* data, size_t len) {
  switch (impl) {
    case CrcImpl::isal: return len == 0 ? crc : crc32_gzip_refl(crc, data, len);
    case CrcImpl::zlib: return crc32_zlib(crc, data, len);
    case CrcImpl::table: return crc32_table(crc, data, len);
    case CrcImpl::fold: return crc32_fold(crc, data, len);
  }
  return 0;
}

uint32_t compute_icrc(ByteSpan l3, uint8_t ip_version, uint32_t ip_hdr_len, CrcImpl impl) {
  // Masked pseudo-header: 8 × 0xff (LRH), IP (≤ 60 bytes), UDP (8), BTH (12).
  uint8_t pseudo[8 + 60 + kUdpLen + kBthLen];
  const uint32_t hdr_len = ip_hdr_len + kUdpLen + kBthLen;
  std::memset(pseudo, 0xff, 8);
  std::memcpy(pseudo + 8, l3.data(), hdr_len);
  uint8_t* ip = pseudo + 8;
  if (ip_version == 4) {
    ip[1] = 0xff;                // TOS (DSCP + ECN)
    ip[8] = 0xff;                // TTL
    ip[10] = ip[11] = 0xff;      // header checksum
  } else {
    ip[0] |= 0x0f;               // traffic class, high nibble
    ip[1] = ip[2] = ip[3] = 0xff;  // traffic class low nibble + flow label
    ip[7] = 0xff;                // hop limit
  }
  uint8_t* udp = ip + ip_hdr_len;
  udp[6] = udp[7] = 0xff;        // UDP checksum
  uint8_t* bth = udp + kUdpLen;
  bth[4] = 0xff;                 // FECN, BECN, reserved
  // IPv4 without options makes a 48-byte pseudo-header: fold carries it into the rest without a reduction.
  if (impl == CrcImpl::fold)
    return crc32_fold2(0, pseudo, 8 + hdr_len, l3.data() + hdr_len, l3.size() - hdr_len);
  uint32_t crc = crc32_with(impl, 0, pseudo, 8 + hdr_len);
  return crc32_with(impl, crc, l3.data() + hdr_len, l3.size() - hdr_len);
}

}  // namespace urxe::wire
