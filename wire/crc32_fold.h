// zlib-compatible CRC-32 (reflected polynomial 0xEDB88320) by carry-less-multiply folding: 256-bit VPCLMULQDQ
// (AVX2) with several independent accumulators, 128-bit PCLMULQDQ, or ISA-L. Dispatched at run time to the
// level the CPU has (CPUID) that measured fastest, once, for small inputs (ACK-sized) and for large ones
// (data frames) apart. No global -march: each level is a function compiled with its own target attribute.
#pragma once
#include <cstddef>
#include <cstdint>

namespace urxe::wire {

enum class CrcFoldLevel : uint8_t { vpclmul_avx2, pclmul, isal };
const char* crc_fold_level_name(CrcFoldLevel level);

// Whether this CPU (and OS, for the YMM state) can run `level`; isal always can.
bool crc_fold_level_supported(CrcFoldLevel level);
// The level crc32_fold() and crc32_fold2() use for an input of `len` bytes (head and data together): of the
// supported ones, the fastest when timed at first use (64 and 2,048 bytes; 256 and more count as large).
// The first call times them (~100 us natively, a few ms under an emulator): Engine's constructor makes it.
CrcFoldLevel crc_fold_best_level(size_t len);

// Same contract as zlib's crc32(): running value, crc32_fold(crc32_fold(0, a), b) == crc32_fold(0, a ++ b).
uint32_t crc32_fold(uint32_t crc, const uint8_t* data, size_t len);
// crc32_fold(crc32_fold(crc, head, head_len), data, len) in one pass when head_len is a multiple of 16 (the
// head's fold carries into data without a reduction in between): the ICRC's masked pseudo-header + packet.
uint32_t crc32_fold2(uint32_t crc, const uint8_t* head, size_t head_len, const uint8_t* data, size_t len);
// Test and benchmark hooks: computes with exactly `level`, which must be supported (else it aborts).
uint32_t crc32_fold_at(CrcFoldLevel level, uint32_t crc, const uint8_t* data, size_t len);
uint32_t crc32_fold2_at(CrcFoldLevel level, uint32_t crc, const uint8_t* head, size_t head_len,
                        const uint8_t* data, size_t len);

}  // namespace urxe::wire
