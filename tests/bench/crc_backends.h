// CRC-32 implementations that the benchmark compares with the one the product uses (wire::crc32, folding),
// and the wire tests prove equal to a bitwise reference: ISA-L's crc32_gzip_refl, zlib and a byte table.
#pragma once
#include <cstddef>
#include <cstdint>

#include "wire/bytes.h"

namespace urxe::bench {

// fold: wire::crc32 / wire::compute_icrc, what the product runs.
enum class CrcImpl : uint8_t { isal, zlib, table, fold };
const char* crc_impl_name(CrcImpl impl);

// zlib-compatible running CRC-32 with exactly `impl`.
uint32_t crc32_with(CrcImpl impl, uint32_t crc, const uint8_t* data, size_t len);

// wire::compute_icrc with the CRC-32 of `impl` (the same masked pseudo-header, wire::icrc_pseudo_header).
uint32_t compute_icrc(wire::ByteSpan l3, uint8_t ip_version, uint32_t ip_hdr_len, CrcImpl impl);

}  // namespace urxe::bench
