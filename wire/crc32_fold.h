// zlib-compatible CRC-32 (reflected polynomial 0xEDB88320) by carry-less-multiply folding, dispatched at run
// time by CPUID: 256-bit VPCLMULQDQ (AVX2) with several independent accumulators, else 128-bit PCLMULQDQ,
// else ISA-L. No global -march: each level is a function compiled with its own target attribute.
#pragma once
#include <cstddef>
#include <cstdint>

namespace urxe::wire {

enum class CrcFoldLevel : uint8_t { vpclmul_avx2, pclmul, isal };
const char* crc_fold_level_name(CrcFoldLevel level);

// Whether this CPU (and OS, for the YMM state) can run `level`; isal always can.
bool crc_fold_level_supported(CrcFoldLevel level);
// The level crc32_fold() uses: the first supported one in enum order.
CrcFoldLevel crc_fold_best_level();

// Same contract as zlib's crc32(): running value, crc32_fold(crc32_fold(0, a), b) == crc32_fold(0, a ++ b).
uint32_t crc32_fold(uint32_t crc, const uint8_t* data, size_t len);
// Test and benchmark hook: computes with exactly `level`, which must be supported (else it aborts).
uint32_t crc32_fold_at(CrcFoldLevel level, uint32_t crc, const uint8_t* data, size_t len);

}  // namespace urxe::wire
