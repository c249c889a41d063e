#include "tools/pcapng_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

namespace urxe::tools {
namespace {

uint32_t rd32(const uint8_t* p, bool swap) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return swap ? __builtin_bswap32(v) : v;
}
uint16_t rd16(const uint8_t* p, bool swap) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return swap ? __builtin_bswap16(v) : v;
}

struct Interface {
  uint32_t linktype = 0;
  uint64_t units_per_s = 1000000;  // if_tsresol default: microseconds
};

// Calls f(code, value pointer, length) for each option in [p, end) until opt_endofopt.
template <class F>
void each_option(const uint8_t* p, const uint8_t* end, bool swap, F&& f) {
  while (end - p >= 4) {
    const uint16_t code = rd16(p, swap), len = rd16(p + 2, swap);
    if (code == kPcapngOptEnd || end - p - 4 < len) break;
    f(code, p + 4, len);
    p += 4 + ((len + 3u) & ~3u);
  }
}

int64_t to_ns(uint64_t ts, uint64_t units_per_s) {
  if (units_per_s == 1000000000) return static_cast<int64_t>(ts);
  const uint64_t s = ts / units_per_s, frac = ts % units_per_s;
  return static_cast<int64_t>(s * 1000000000 + frac * 1000000000 / units_per_s);
}

}  // namespace

bool read_pcapng_packets(const std::string& path, std::vector<PcapngPacket>& out, std::string& err) {
  out.clear();
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    err = path + ": cannot open";
    return false;
  }
  const std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (b.size() < 12 || rd32(b.data(), false) != kPcapngShb) {
    err = path + ": not a pcapng file";
    return false;
  }
  bool swap = false;
  std::vector<Interface> ifs;
  for (size_t off = 0; b.size() - off >= 12;) {
    const uint8_t* p = b.data() + off;
    uint32_t type = rd32(p, swap);
    if (rd32(p, false) == kPcapngShb) {  // each section names its own byte order and interfaces
      swap = rd32(p + 8, false) != kPcapngByteOrderMagic;
      type = kPcapngShb;
      ifs.clear();
    }
    const uint32_t len = rd32(p + 4, swap);
    if (len < 12 || len % 4 || len > b.size() - off) break;
    const uint8_t* end = p + len - 4;
    if (type == kPcapngIdb && len >= 20) {
      Interface i;
      i.linktype = rd16(p + 8, swap);
      each_option(p + 16, end, swap, [&](uint16_t code, const uint8_t* v, uint16_t n) {
        if (code != kPcapngIfTsresol || n < 1) return;
        const uint8_t r = v[0];
        const uint64_t base = (r & 0x80) ? 2 : 10, exp = r & 0x7f;
        if (exp > 18) return;
        uint64_t u = 1;
        for (uint64_t k = 0; k < exp; ++k) u *= base;
        i.units_per_s = u;
      });
      ifs.push_back(i);
    } else if ((type == kPcapngEpb || type == kPcapngObsoletePb) && len >= 32) {
      // Both have 28 bytes before the packet data (EPB: interface, timestamp, lengths; the obsolete
      // Packet Block: interface (16 bits), drops, timestamp, lengths), the data padded to 4, then options.
      PcapngPacket pk;
      const uint32_t ifid = type == kPcapngEpb ? rd32(p + 8, swap) : rd16(p + 8, swap);
      const Interface i = ifid < ifs.size() ? ifs[ifid] : Interface{};
      pk.linktype = i.linktype;
      const uint64_t ts = (uint64_t{rd32(p + 12, swap)} << 32) | rd32(p + 16, swap);
      pk.ts_ns = to_ns(ts, i.units_per_s);
      const uint32_t caplen = rd32(p + 20, swap);
      pk.wirelen = rd32(p + 24, swap);
      const uint64_t opts = 28 + ((uint64_t{caplen} + 3) & ~uint64_t{3});
      if (opts > len - 4) break;
      pk.data.assign(p + 28, p + 28 + caplen);
      each_option(p + opts, end, swap, [&](uint16_t code, const uint8_t* v, uint16_t n) {
        if (code == kPcapngOptComment && pk.comment.empty())
          pk.comment.assign(reinterpret_cast<const char*>(v), n);
        else if (code == kPcapngEpbFlags && type == kPcapngEpb && n >= 4)
          pk.flags = rd32(v, swap);
      });
      out.push_back(std::move(pk));
    } else if (type == kPcapngSpb && len >= 16) {
      PcapngPacket pk;
      pk.linktype = ifs.empty() ? 0 : ifs[0].linktype;
      pk.wirelen = rd32(p + 8, swap);
      const uint32_t cap = std::min<uint32_t>(pk.wirelen, len - 16);
      pk.data.assign(p + 12, p + 12 + cap);
      out.push_back(std::move(pk));
    }
    off += len;
  }
  return true;
}

bool read_pcapng_comments(const std::string& path, std::vector<std::string>& comments, std::string& err) {
  comments.clear();
  std::vector<PcapngPacket> pk;
  if (!read_pcapng_packets(path, pk, err)) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    err.clear();
    return true;  // classic pcap: no comments
  }
  for (PcapngPacket& p : pk) comments.push_back(std::move(p.comment));
  return true;
}

namespace {

struct Writer {
  std::string buf;
  void u16(uint16_t v) { buf.append(reinterpret_cast<const char*>(&v), 2); }
  void u32(uint32_t v) { buf.append(reinterpret_cast<const char*>(&v), 4); }
  void pad4() { buf.append((4 - buf.size() % 4) % 4, '\0'); }
  void opt(uint16_t code, const void* v, size_t n) {
    u16(code);
    u16(static_cast<uint16_t>(n));
    buf.append(static_cast<const char*>(v), n);
    pad4();
  }
  // Starts a block; finish() writes both lengths.
  size_t begin(uint32_t type) {
    const size_t at = buf.size();
    u32(type);
    u32(0);
    return at;
  }
  void finish(size_t at) {
    u16(kPcapngOptEnd);
    u16(0);
    const uint32_t len = static_cast<uint32_t>(buf.size() - at + 4);
    std::memcpy(buf.data() + at + 4, &len, 4);
    u32(len);
  }
};

}  // namespace

bool write_pcapng(const std::string& path, const std::vector<const PcapngPacket*>& packets,
                  const std::string& section_comment, std::string& err) {
  constexpr uint32_t kLinktypeEthernet = 1;
  Writer w;
  size_t at = w.begin(kPcapngShb);
  w.u32(kPcapngByteOrderMagic);
  w.u16(1);
  w.u16(0);
  w.u32(0xffffffff);  // section length unknown
  w.u32(0xffffffff);
  if (!section_comment.empty())
    w.opt(kPcapngOptComment, section_comment.data(), std::min<size_t>(section_comment.size(), 60000));
  w.finish(at);
  at = w.begin(kPcapngIdb);
  w.u16(kLinktypeEthernet);
  w.u16(0);
  w.u32(0);  // no snap length
  const uint8_t tsresol = 9;
  w.opt(kPcapngIfTsresol, &tsresol, 1);
  w.finish(at);
  for (const PcapngPacket* p : packets) {
    if (p->linktype != kLinktypeEthernet) continue;
    at = w.begin(kPcapngEpb);
    w.u32(0);
    const auto ts = static_cast<uint64_t>(p->ts_ns);
    w.u32(static_cast<uint32_t>(ts >> 32));
    w.u32(static_cast<uint32_t>(ts));
    w.u32(static_cast<uint32_t>(p->data.size()));
    w.u32(std::max<uint32_t>(p->wirelen, static_cast<uint32_t>(p->data.size())));
    w.buf.append(reinterpret_cast<const char*>(p->data.data()), p->data.size());
    w.pad4();
    if (p->flags) w.opt(kPcapngEpbFlags, &p->flags, 4);
    if (!p->comment.empty())
      w.opt(kPcapngOptComment, p->comment.data(), std::min<size_t>(p->comment.size(), 60000));
    w.finish(at);
  }
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) {
    err = path + ": " + std::strerror(errno);
    return false;
  }
  const bool ok = std::fwrite(w.buf.data(), 1, w.buf.size(), f) == w.buf.size();
  if (std::fclose(f) != 0 || !ok) {
    err = path + ": write failed";
    return false;
  }
  return true;
}

}  // namespace urxe::tools
