// 24-bit packet sequence number arithmetic (IBTA 9.7.1): PSNs wrap modulo 2^24 and compare within a
// half-space window, as every RC/UC transport does.
#pragma once
#include <cstdint>

namespace urxe::wire {

inline constexpr uint32_t kPsnMask = 0xFFFFFF;

constexpr uint32_t psn_add(uint32_t psn, uint32_t n) { return (psn + n) & kPsnMask; }
constexpr uint32_t psn_sub(uint32_t psn, uint32_t n) { return (psn - n) & kPsnMask; }
// Signed distance a - b in [-2^23, 2^23): exactly half the space apart counts as "a before b".
constexpr int32_t psn_diff(uint32_t a, uint32_t b) {
  uint32_t d = (a - b) & kPsnMask;
  return d >= 0x800000u ? static_cast<int32_t>(d) - 0x1000000 : static_cast<int32_t>(d);
}
constexpr bool psn_lt(uint32_t a, uint32_t b) { return psn_diff(a, b) < 0; }
constexpr bool psn_le(uint32_t a, uint32_t b) { return psn_diff(a, b) <= 0; }
constexpr bool psn_gt(uint32_t a, uint32_t b) { return psn_diff(a, b) > 0; }
constexpr bool psn_ge(uint32_t a, uint32_t b) { return psn_diff(a, b) >= 0; }

}  // namespace urxe::wire
