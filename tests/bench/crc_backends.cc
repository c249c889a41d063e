#include "tests/bench/crc_backends.h"

#include <isa-l/crc.h>
#include <zlib.h>

#include <array>

#include "wire/icrc.h"

namespace urxe::bench {
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
    case CrcImpl::isal:
      return "isal";
    case CrcImpl::zlib:
      return "zlib";
    case CrcImpl::table:
      return "table";
    case CrcImpl::fold:
      return "fold";
  }
  return "?";
}

uint32_t crc32_with(CrcImpl impl, uint32_t crc, const uint8_t* data, size_t len) {
  switch (impl) {
    case CrcImpl::isal:
      return len == 0 ? crc : crc32_gzip_refl(crc, data, len);
    case CrcImpl::zlib:
      return crc32_zlib(crc, data, len);
    case CrcImpl::table:
      return crc32_table(crc, data, len);
    case CrcImpl::fold:
      return wire::crc32(crc, data, len);
  }
  return 0;
}

uint32_t compute_icrc(wire::ByteSpan l3, uint8_t ip_version, uint32_t ip_hdr_len, CrcImpl impl) {
  if (impl == CrcImpl::fold) return wire::compute_icrc(l3, ip_version, ip_hdr_len);
  uint8_t pseudo[wire::kIcrcPseudoMax];
  const size_t n = wire::icrc_pseudo_header(l3, ip_version, ip_hdr_len, pseudo);
  const size_t hdr_len = n - 8;
  const uint32_t crc = crc32_with(impl, 0, pseudo, n);
  return crc32_with(impl, crc, l3.data() + hdr_len, l3.size() - hdr_len);
}

}  // namespace urxe::bench
