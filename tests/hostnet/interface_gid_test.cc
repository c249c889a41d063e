// hostnet/interface.h and hostnet/gid.h without the network: the GID table's order and contents from a
// given address list, the default GID from a MAC, GID text conversion (inet and sysfs forms), and queries
// of `lo` (its address's interface, its route). (The same against a real interface: tests/port/port_test.py.)
#include <gtest/gtest.h>

#include "hostnet/gid.h"
#include "hostnet/interface.h"
#include "hostnet/neighbour.h"

namespace urxe::hostnet {
namespace {

wire::Gid G(const char* s) {
  wire::Gid g{};
  EXPECT_TRUE(gid_from_string(s, g)) << s;
  return g;
}

Address A(const char* s, uint8_t prefix) {
  Address a;
  a.addr = G(s);
  a.ipv4 = wire::gid_is_ipv4_mapped(a.addr);
  a.prefix_len = prefix;
  return a;
}

TEST(NetdevInfo, DefaultGidIsModifiedEui64OfTheMac) {
  // Kernel: fe80::/64 + MAC with the universal/local bit flipped and ff:fe in the middle.
  EXPECT_EQ(gid_to_string(default_gid({0x52, 0x54, 0x00, 0x12, 0x34, 0x56})), "fe80::5054:ff:fe12:3456");
  EXPECT_EQ(gid_to_string(default_gid({0x02, 0, 0, 0, 0, 1})), "fe80::ff:fe00:1");
}

TEST(NetdevInfo, GidTableOrderDefaultThenIpv4ThenIpv6WithoutDuplicates) {
  Interface info;
  info.mac = {0x52, 0x54, 0x00, 0x12, 0x34, 0x56};
  // As getifaddrs lists them: IPv4 in address-list order, then IPv6 (global before link-local).
  info.addrs = {A("10.0.0.1", 24), A("192.168.7.9", 16), A("2001:db8::1", 64), A("fd00::5", 64),
                A("fe80::5054:ff:fe12:3456", 64)};
  auto t = build_gid_table(info);
  std::vector<std::string> s;
  for (const auto& g : t) s.push_back(gid_to_string(g));
  EXPECT_EQ(s, (std::vector<std::string>{"fe80::5054:ff:fe12:3456", "::ffff:10.0.0.1", "::ffff:192.168.7.9",
                                         "2001:db8::1", "fd00::5"}));
}

TEST(NetdevInfo, NonEui64LinkLocalIsKeptBesideTheDefaultGid) {
  Interface info;
  info.mac = {0x02, 0, 0, 0, 0, 1};
  info.addrs = {A("fe80::1234", 64)};  // e.g. addr_gen_mode stable-privacy
  auto t = build_gid_table(info);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(gid_to_string(t[0]), "fe80::ff:fe00:1");
  EXPECT_EQ(gid_to_string(t[1]), "fe80::1234");
}

TEST(NetdevInfo, NoAddressesStillHasTheDefaultGid) {
  Interface info;
  info.mac = {0x02, 0, 0, 0, 0, 1};
  EXPECT_EQ(build_gid_table(info).size(), 1u);
}

TEST(NetdevInfo, GidText) {
  wire::Gid g{};
  EXPECT_TRUE(gid_from_string("10.1.2.3", g));
  EXPECT_TRUE(wire::gid_is_ipv4_mapped(g));
  EXPECT_EQ(gid_to_string(g), "::ffff:10.1.2.3");
  EXPECT_TRUE(gid_from_string("::ffff:10.1.2.3", g));
  EXPECT_EQ(g[15], 3);
  EXPECT_FALSE(gid_from_string("10.1.2", g));
  EXPECT_FALSE(gid_from_string("eth0", g));
}

// Moved from tests/provider/device_tree_test.cc (the text forms are hostnet's now).
TEST(DeviceTreeFormat, GuidAndGidText) {
  EXPECT_EQ(format_guid(eui64({0x00, 0x11, 0x22, 0x33, 0x44, 0x55})), "0211:22ff:fe33:4455");
  std::array<uint8_t, 16> g{};
  ASSERT_TRUE(parse_gid("0000:0000:0000:0000:0000:ffff:0a00:0001", g));
  EXPECT_EQ(g[10], 0xff);
  EXPECT_EQ(g[12], 10);
  EXPECT_EQ(g[15], 1);
  EXPECT_EQ(format_gid(g), "0000:0000:0000:0000:0000:ffff:0a00:0001");
  EXPECT_FALSE(parse_gid("fe80::1", g));
}

TEST(NetdevInfo, QueryUnknownInterfaceFails) {
  Interface info;
  std::string err;
  EXPECT_FALSE(query_interface("urxe-nonexist0", info, &err));
  EXPECT_NE(err.find("urxe-nonexist0"), std::string::npos);
  EXPECT_FALSE(query_interface("", info, &err));
}

TEST(NetdevInfo, LoopbackInterface) {
  Interface info;
  std::string err;
  ASSERT_TRUE(query_interface("lo", info, &err)) << err;
  EXPECT_GT(info.ifindex, 0);
  EXPECT_GE(info.mtu, 1500u);
}

// 127.0.0.1 is on lo wherever the tests run (lo may be down in a fresh namespace: then it has no address).
TEST(NetdevInfo, AddressIfindexAndRouteOfLoopback) {
  Interface lo;
  ASSERT_TRUE(query_interface("lo", lo));
  const wire::Gid v4lo = G("127.0.0.1");
  bool has_v4lo = false;
  for (const Address& a : lo.addrs) has_v4lo |= a.addr == v4lo;
  if (!has_v4lo) GTEST_SKIP() << "lo has no 127.0.0.1 here";
  EXPECT_EQ(address_ifindex(v4lo), lo.ifindex);
  EXPECT_EQ(address_ifindex(G("192.0.2.77")), 0);  // TEST-NET-1: nobody's
  const Route r = lookup_route(v4lo, wire::Gid{}, 0);
  EXPECT_TRUE(r.ok);
  EXPECT_TRUE(r.local);
  EXPECT_EQ(r.ifindex, lo.ifindex);
  EXPECT_EQ(r.src, v4lo);  // the preferred source of a local route is the address itself
  const Route given = lookup_route(v4lo, v4lo, 0);
  EXPECT_TRUE(given.ok);
  EXPECT_EQ(given.src, v4lo);
}

}  // namespace
}  // namespace urxe::hostnet
