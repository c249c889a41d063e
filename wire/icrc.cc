#include "wire/icrc.h"

#include <cstring>

#include "wire/crc32_fold.h"

namespace urxe::wire {

uint32_t crc32(uint32_t crc, const uint8_t* data, size_t len) {
  return crc32_fold(crc, data, len);
}

size_t icrc_pseudo_header(ByteSpan l3, uint8_t ip_version, uint32_t ip_hdr_len, uint8_t* pseudo) {
  const uint32_t hdr_len = ip_hdr_len + kUdpLen + kBthLen;
  std::memset(pseudo, 0xff, 8);
  std::memcpy(pseudo + 8, l3.data(), hdr_len);
  uint8_t* ip = pseudo + 8;
  if (ip_version == 4) {
    ip[1] = 0xff;            // TOS (DSCP + ECN)
    ip[8] = 0xff;            // TTL
    ip[10] = ip[11] = 0xff;  // header checksum
  } else {
    ip[0] |= 0x0f;                 // traffic class, high nibble
    ip[1] = ip[2] = ip[3] = 0xff;  // traffic class low nibble + flow label
    ip[7] = 0xff;                  // hop limit
  }
  uint8_t* udp = ip + ip_hdr_len;
  udp[6] = udp[7] = 0xff;  // UDP checksum
  uint8_t* bth = udp + kUdpLen;
  bth[4] = 0xff;  // FECN, BECN, reserved
  return 8 + hdr_len;
}

uint32_t compute_icrc(ByteSpan l3, uint8_t ip_version, uint32_t ip_hdr_len) {
  uint8_t pseudo[kIcrcPseudoMax];
  const size_t n = icrc_pseudo_header(l3, ip_version, ip_hdr_len, pseudo);
  const size_t hdr_len = n - 8;
  // IPv4 without options makes a 48-byte pseudo-header: fold carries it into the rest without a reduction.
  return crc32_fold2(0, pseudo, n, l3.data() + hdr_len, l3.size() - hdr_len);
}

}  // namespace urxe::wire
