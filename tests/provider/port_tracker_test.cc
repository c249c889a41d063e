// provider/port_tracker.h: link messages read in batches still yield every PORT_ERR / PORT_ACTIVE, in order;
// a flap the kernel folded into one message (carrier_down_count moved, state unchanged) is a down and an up.
#include "provider/port_tracker.h"

#include <gtest/gtest.h>

#include <string>

using urxe::provider::PortTracker;

namespace {
// The transitions taken, as "D" (PORT_ERR) and "U" (PORT_ACTIVE).
std::string drain(PortTracker& t) {
  std::string s;
  bool up = false;
  while (t.take(up)) s += up ? 'U' : 'D';
  return s;
}
}  // namespace

TEST(PortTracker, NoChangeNoEvent) {
  PortTracker t;
  t.reset(true, true, 4);
  t.on_link(true, true, 4);  // e.g. an MTU change: same state, same count
  EXPECT_EQ(drain(t), "");
  EXPECT_TRUE(t.up());
}

TEST(PortTracker, DownAndUpInOneBatchAreTwoEventsInOrder) {
  PortTracker t;
  t.reset(true, true, 4);
  t.on_link(false, true, 5);
  t.on_link(true, true, 5);
  EXPECT_EQ(drain(t), "DU");
  EXPECT_TRUE(t.up());
  EXPECT_EQ(drain(t), "");
}

TEST(PortTracker, FlapFoldedIntoOneMessageCountsByCarrierDownCount) {
  PortTracker t;
  t.reset(true, true, 4);
  t.on_link(true, true, 5);  // linkwatch reported only the final state; the count moved
  EXPECT_EQ(drain(t), "DU");
  t.on_link(true, true, 5);  // a later message with the same count is no new flap
  EXPECT_EQ(drain(t), "");
}

TEST(PortTracker, DownMessageThenUpWithMovedCountIsOneFlap) {
  // Admin down may report the old count and the next message the new one: still one down, one up.
  PortTracker t;
  t.reset(true, true, 4);
  t.on_link(false, true, 4);
  t.on_link(true, true, 5);
  EXPECT_EQ(drain(t), "DU");
}

TEST(PortTracker, StaysDownAndComesUp) {
  PortTracker t;
  t.reset(true, true, 0);
  t.on_link(false, true, 1);
  EXPECT_EQ(drain(t), "D");
  t.on_link(false, true, 2);  // more losses while down: nothing to report
  EXPECT_EQ(drain(t), "");
  EXPECT_FALSE(t.up());
  t.on_link(true, true, 2);
  EXPECT_EQ(drain(t), "U");
}

TEST(PortTracker, StormReportsAtMostOneDownAndUp) {
  PortTracker t;
  t.reset(true, true, 10);
  for (uint32_t i = 11; i < 30; ++i) {
    t.on_link(false, true, i);
    t.on_link(true, true, i);
  }
  EXPECT_EQ(drain(t), "DU");
  for (uint32_t i = 30; i < 33; ++i) {
    t.on_link(true, true, i);
    t.on_link(false, true, i);
  }
  EXPECT_EQ(drain(t), "D");  // ends down: the last event says so
}

TEST(PortTracker, WithoutCountsStateChangesStillCount) {
  // An interface gone (RTM_DELLINK carries no count), and a kernel without IFLA_CARRIER_DOWN_COUNT.
  PortTracker t;
  t.reset(true, false, 0);
  t.on_link(true, true, 7);  // first count seen: a baseline, not a flap
  EXPECT_EQ(drain(t), "");
  t.on_link(false, false, 0);
  t.on_link(true, false, 0);
  EXPECT_EQ(drain(t), "DU");
}

TEST(PortTracker, CountWraps) {
  PortTracker t;
  t.reset(true, true, 0xffffffffu);
  t.on_link(true, true, 0);
  EXPECT_EQ(drain(t), "DU");
}
