// Invariant CRC (IBTA Annex A17.3.3): CRC-32 (the Ethernet/zlib polynomial, reflected) over 8 bytes of ones
// standing for the absent LRH, the IP and UDP headers and BTH with their variant fields set to ones, then the
// rest of the packet through the pad bytes. Stored after the payload in little-endian byte order.
#pragma once
#include <cstddef>
#include <cstdint>

#include "wire/bytes.h"
#include "wire/opcode.h"

namespace urxe::wire {

// zlib-compatible running CRC-32: crc32(crc32(0, a), b) == crc32(0, a ++ b). Carry-less-multiply folding or
// ISA-L, whichever measured fastest on this CPU at first use (wire/crc32_fold.h). tests/bench compares it
// with other CRC-32 implementations.
uint32_t crc32(uint32_t crc, const uint8_t* data, size_t len);

// The masked pseudo-header the ICRC starts with: 8 × 0xff (LRH), then the IP, UDP and BTH headers of `l3`
// with their variant fields set to ones. Writes it to `out` (at least kIcrcPseudoMax bytes) and returns its
// length; the CRC then continues over l3 from offset (length - 8).
inline constexpr size_t kIcrcPseudoMax = 8 + 60 + kUdpLen + kBthLen;
size_t icrc_pseudo_header(ByteSpan l3, uint8_t ip_version, uint32_t ip_hdr_len, uint8_t* out);

// `l3` starts at the IP header and ends just before the ICRC. `ip_hdr_len` is 20+options for IPv4, 40 for
// IPv6. Returns the value to store (little-endian) in the ICRC field. The caller guarantees that
// l3.size() >= ip_hdr_len + UDP + BTH.
uint32_t compute_icrc(ByteSpan l3, uint8_t ip_version, uint32_t ip_hdr_len);

}  // namespace urxe::wire
