// Invariant CRC (IBTA Annex A17.3.3): CRC-32 (the Ethernet/zlib polynomial, reflected) over 8 bytes of ones
// standing for the absent LRH, the IP and UDP headers and BTH with their variant fields set to ones, then the
// rest of the packet through the pad bytes. Stored after the payload in little-endian byte order.
#pragma once
#include <cstddef>
#include <cstdint>

#include "wire/bytes.h"

namespace urxe::wire {

// fold: wire/crc32_fold.h (carry-less-multiply folding, the fastest level this CPU has).
enum class CrcImpl : uint8_t { isal, zlib, table, fold };
const char* crc_impl_name(CrcImpl impl);

// zlib-compatible running CRC-32: crc32(crc32(0, a), b) == crc32(0, a ++ b).
uint32_t crc32(uint32_t crc, const uint8_t* data, size_t len);  // the fastest backend (fold)
uint32_t crc32_with(CrcImpl impl, uint32_t crc, const uint8_t* data, size_t len);

// `l3` starts at the IP header and ends just before the ICRC. `ip_hdr_len` is 20+options for IPv4, 40 for
// IPv6. Returns the value to store (little-endian) in the ICRC field. The caller guarantees that
// l3.size() >= ip_hdr_len + UDP + BTH.
uint32_t compute_icrc(ByteSpan l3, uint8_t ip_version, uint32_t ip_hdr_len, CrcImpl impl = CrcImpl::fold);

}  // namespace urxe::wire
