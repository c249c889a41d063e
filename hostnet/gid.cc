#include "hostnet/gid.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstdio>

namespace urxe::hostnet {

uint64_t eui64(const wire::MacAddr& m) {
  const uint8_t b[8] = {static_cast<uint8_t>(m[0] ^ 2), m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]};
  uint64_t g = 0;
  for (uint8_t x : b) g = (g << 8) | x;
  return g;
}

wire::Gid default_gid(const wire::MacAddr& mac) {
  wire::Gid g{};
  g[0] = 0xfe;
  g[1] = 0x80;
  const uint64_t id = eui64(mac);
  for (int i = 0; i < 8; ++i) g[8 + i] = static_cast<uint8_t>(id >> (56 - 8 * i));
  return g;
}

std::vector<wire::Gid> build_gid_table(const Interface& info) {
  std::vector<wire::Gid> t;
  t.push_back(default_gid(info.mac));
  for (const auto& a : info.addrs)
    if (a.ipv4 && std::find(t.begin(), t.end(), a.addr) == t.end()) t.push_back(a.addr);
  for (const auto& a : info.addrs)
    if (!a.ipv4 && std::find(t.begin(), t.end(), a.addr) == t.end()) t.push_back(a.addr);
  return t;
}

std::vector<wire::Gid> query_gid_table(const std::string& name) {
  Interface info;
  if (!query_interface(name, info)) return {};
  return build_gid_table(info);
}

std::string gid_to_string(const wire::Gid& gid) {
  char buf[INET6_ADDRSTRLEN];
  if (!inet_ntop(AF_INET6, gid.data(), buf, sizeof buf)) return "?";
  return buf;
}

bool gid_from_string(const std::string& s, wire::Gid& out) {
  std::array<uint8_t, 4> v4{};
  if (inet_pton(AF_INET, s.c_str(), v4.data()) == 1) {
    out = wire::gid_from_ipv4(v4);
    return true;
  }
  return inet_pton(AF_INET6, s.c_str(), out.data()) == 1;
}

std::string format_gid(const wire::Gid& g) {
  char buf[48];
  int n = 0;
  for (int i = 0; i < 8; ++i)
    n += std::snprintf(buf + n, sizeof buf - static_cast<size_t>(n), i ? ":%02x%02x" : "%02x%02x", g[2 * i],
                       g[2 * i + 1]);
  return buf;
}

bool parse_gid(const std::string& text, wire::Gid& g) {
  unsigned v[8];
  if (std::sscanf(text.c_str(), "%4x:%4x:%4x:%4x:%4x:%4x:%4x:%4x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                  &v[6], &v[7]) != 8)
    return false;
  for (int i = 0; i < 8; ++i) {
    g[2 * i] = static_cast<uint8_t>(v[i] >> 8);
    g[2 * i + 1] = static_cast<uint8_t>(v[i]);
  }
  return true;
}

std::string format_guid(uint64_t guid) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%04x:%04x:%04x:%04x", static_cast<unsigned>((guid >> 48) & 0xffff),
                static_cast<unsigned>((guid >> 32) & 0xffff), static_cast<unsigned>((guid >> 16) & 0xffff),
                static_cast<unsigned>(guid & 0xffff));
  return buf;
}

}  // namespace urxe::hostnet
