// hostnet/netns.h and the small interface queries without a network: namespace identity text, presence of
// an interface in the caller's own namespace, a namespace nothing refers to any more, ethtool answers.
#include <gtest/gtest.h>
#include <unistd.h>

#include "hostnet/interface.h"
#include "hostnet/netns.h"

namespace urxe::hostnet {
namespace {

TEST(Netns, IdTextRoundTrip) {
  const NetnsId here = current_netns();
  ASSERT_TRUE(here.known());
  NetnsId back;
  ASSERT_TRUE(NetnsId::parse(here.to_string(), back));
  EXPECT_EQ(back, here);
  EXPECT_FALSE(NetnsId::parse("", back));
  EXPECT_FALSE(NetnsId::parse("4:0", back));
  EXPECT_FALSE(NetnsId::parse("4:12x", back));
  EXPECT_EQ(NetnsId{}.to_string(), "");
}

TEST(Netns, PresenceInOwnNamespace) {
  const NetnsId here = current_netns();
  EXPECT_EQ(interface_presence(here, "lo"), Presence::present);
  EXPECT_EQ(interface_presence(here, "urxe-nonexist0"), Presence::gone);
  EXPECT_EQ(interface_presence(NetnsId{}, "lo"), Presence::unknown);
}

TEST(Netns, NamespaceNothingRefersToIsGone) {
  if (::geteuid() != 0) GTEST_SKIP() << "not root: other users' processes cannot be looked at";
  NetnsId dead = current_netns();
  dead.ino = 1;  // no namespace has inode 1 (nsfs numbers start far above)
  EXPECT_EQ(interface_presence(dead, "lo"), Presence::gone);
}

TEST(Interface, LinkSpeedUnknownForLoopbackAndMissing) {
  EXPECT_EQ(link_speed_mbps("lo"), 0u);
  EXPECT_EQ(link_speed_mbps("urxe-nonexist0"), 0u);
  EXPECT_EQ(link_speed_mbps(""), 0u);
}

TEST(Interface, FeatureByEthtoolName) {
  // The loopback segments UDP itself (what the socket port's UDP GSO asks of an interface) and has no
  // IPv4-only checksum offload (it has the generic one), on every kernel with these features.
  EXPECT_EQ(link_feature("lo", "tx-udp-segmentation"), 1);
  EXPECT_EQ(link_feature("lo", "tx-checksum-ipv4"), 0);
  EXPECT_EQ(link_feature("lo", "no-such-feature"), -1);
  EXPECT_EQ(link_feature("urxe-nonexist0", "tx-udp-segmentation"), -1);
  EXPECT_EQ(link_feature("", "tx-udp-segmentation"), -1);
}

TEST(Interface, NamesIncludeLoopback) {
  EXPECT_NE(interface_names().find("lo"), std::string::npos);
}

}  // namespace
}  // namespace urxe::hostnet
