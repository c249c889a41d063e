// The fake device tree libibverbs discovers urxe devices through (provider/device_tree.h), on `lo`.
#include "provider/device_tree.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;
using namespace urxe::provider;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

DeviceConfig dev(const char* name, const char* netdev) {
  DeviceConfig c;
  c.name = name;
  c.netdev = netdev;
  return c;
}

class DeviceTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/urxe-dt-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    paths_.run_dir = root_ + "/run";
    paths_.dev_dir = root_ + "/dev/infiniband";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  std::string ib(const std::string& name) { return paths_.sysfs() + "/class/infiniband/" + name; }
  std::string root_;
  Paths paths_;
};

// DeviceTreeFormat.GuidAndGidText moved to tests/hostnet/interface_gid_test.cc with the code it tests.

TEST_F(DeviceTreeTest, CreateWritesWhatLibibverbsReads) {
  DeviceConfig cfg;
  cfg.name = "urxe0";
  cfg.netdev = "lo";
  cfg.port = "loop";
  cfg.mtu = 4200;
  std::string err;
  ASSERT_EQ(create_device(paths_, cfg, err), 0) << err;
  EXPECT_EQ(cfg.uverbs, 0);

  const std::string verbs = paths_.sysfs() + "/class/infiniband_verbs";
  EXPECT_EQ(slurp(verbs + "/abi_version"), "6\n");
  EXPECT_EQ(slurp(verbs + "/uverbs0/ibdev"), "urxe0\n");
  EXPECT_EQ(slurp(verbs + "/uverbs0/dev"), "1:3\n");
  EXPECT_EQ(slurp(ib("urxe0") + "/node_type"), "1: CA\n");
  // lo's MAC is all zeros: EUI-64 flips the U/L bit.
  EXPECT_EQ(slurp(ib("urxe0") + "/node_guid"), "0200:00ff:fe00:0000\n");
  EXPECT_EQ(slurp(ib("urxe0") + "/ports/1/pkeys/0"), "0xffff\n");

  // GID 0 is the default link-local GID, GID 1 lo's IPv4 address; all RoCE v2 on lo; the rest empty.
  const std::string port = ib("urxe0") + "/ports/1";
  EXPECT_EQ(slurp(port + "/gids/0"), "fe80:0000:0000:0000:0200:00ff:fe00:0000\n");
  EXPECT_EQ(slurp(port + "/gids/1"), "0000:0000:0000:0000:0000:ffff:7f00:0001\n");
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(slurp(port + "/gid_attrs/types/" + std::to_string(i)), "RoCE v2\n");
    EXPECT_EQ(slurp(port + "/gid_attrs/ndevs/" + std::to_string(i)), "lo\n");
  }
  EXPECT_EQ(slurp(port + "/gids/15"), "0000:0000:0000:0000:0000:0000:0000:0000\n");
  EXPECT_EQ(slurp(port + "/gid_attrs/ndevs/15"), "");
  EXPECT_FALSE(fs::exists(port + "/gids/16"));

  struct stat st {};
  ASSERT_EQ(::lstat((paths_.dev_dir + "/uverbs0").c_str(), &st), 0);
  if (S_ISCHR(st.st_mode)) {
    EXPECT_EQ(major(st.st_rdev), 1u);
    EXPECT_EQ(minor(st.st_rdev), 3u);
  } else {
    ASSERT_TRUE(S_ISLNK(st.st_mode));
    EXPECT_EQ(fs::read_symlink(paths_.dev_dir + "/uverbs0").string(), "/dev/null");
  }

  // The port as the kernel's sysfs shows a RoCE port of rxe; lo has no ethtool speed: 1X SDR.
  NetdevInfo lo;
  ASSERT_TRUE(query_netdev("lo", lo));
  EXPECT_EQ(slurp(port + "/state"), lo.up ? "4: ACTIVE\n" : "1: DOWN\n");
  EXPECT_EQ(slurp(port + "/phys_state"), lo.up ? "5: LinkUp\n" : "3: Disabled\n");
  EXPECT_EQ(slurp(port + "/rate"), "2.5 Gb/sec (1X SDR)\n");
  EXPECT_EQ(slurp(port + "/link_layer"), "Ethernet\n");
  EXPECT_EQ(slurp(port + "/lid"), "0x0\n");
  EXPECT_EQ(slurp(port + "/sm_lid"), "0x0\n");
  EXPECT_EQ(slurp(port + "/lid_mask_count"), "0\n");
  EXPECT_EQ(slurp(port + "/sm_sl"), "0\n");
  EXPECT_EQ(slurp(port + "/cap_mask"), "0x00010000\n");
  for (const char* c : {"port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets"})
    EXPECT_EQ(slurp(port + "/counters/" + c), "0\n") << c;
  // The interface under device/net/, pointing into the reader's /sys.
  EXPECT_EQ(fs::read_symlink(ib("urxe0") + "/device/net/lo").string(), "/sys/class/net/lo");
  // The RDMA CM's ABI, as librdmacm looks for it, and no rdma_cm node (/dev/null would answer its commands).
  EXPECT_EQ(slurp(paths_.sysfs() + "/class/misc/rdma_cm/abi_version"), "4\n");
  EXPECT_NE(::lstat((paths_.dev_dir + "/rdma_cm").c_str(), &st), 0);

  DeviceConfig back;
  ASSERT_TRUE(read_device_config(ib("urxe0"), back));
  EXPECT_EQ(back.name, "urxe0");
  EXPECT_EQ(back.netdev, "lo");
  EXPECT_EQ(back.port, "loop");
  EXPECT_EQ(back.mtu, 4200u);
  EXPECT_EQ(back.uverbs, 0);
}

TEST_F(DeviceTreeTest, SeveralDevicesListAndRemove) {
  std::string err;
  DeviceConfig a = dev("urxe0", "lo");
  DeviceConfig b = dev("urxe1", "lo");
  ASSERT_EQ(create_device(paths_, a, err), 0) << err;
  ASSERT_EQ(create_device(paths_, b, err), 0) << err;
  EXPECT_EQ(b.uverbs, 1);
  auto list = list_devices(paths_);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].config.name, "urxe0");
  EXPECT_EQ(list[0].uverbs_name, "uverbs0");
  EXPECT_EQ(list[1].config.name, "urxe1");
  EXPECT_TRUE(list[1].netdev_present);
  EXPECT_GE(list[1].gids.size(), 2u);

  ASSERT_EQ(remove_device(paths_, "urxe0", err), 0) << err;
  EXPECT_TRUE(fs::exists(paths_.sysfs() + "/class/misc/rdma_cm/abi_version"));  // urxe1 still there
  EXPECT_FALSE(fs::exists(ib("urxe0")));
  EXPECT_FALSE(fs::exists(paths_.sysfs() + "/class/infiniband_verbs/uverbs0"));
  struct stat st {};
  EXPECT_NE(::lstat((paths_.dev_dir + "/uverbs0").c_str(), &st), 0);
  list = list_devices(paths_);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].config.name, "urxe1");

  // The freed index is reused.
  DeviceConfig c = dev("urxe2", "lo");
  ASSERT_EQ(create_device(paths_, c, err), 0) << err;
  EXPECT_EQ(c.uverbs, 0);
  EXPECT_EQ(remove_device(paths_, "nosuch", err), ENODEV);

  // The last device takes the RDMA CM's ABI file with it.
  ASSERT_EQ(remove_device(paths_, "urxe1", err), 0) << err;
  EXPECT_TRUE(fs::exists(paths_.sysfs() + "/class/misc/rdma_cm/abi_version"));
  ASSERT_EQ(remove_device(paths_, "urxe2", err), 0) << err;
  EXPECT_FALSE(fs::exists(paths_.sysfs() + "/class/misc/rdma_cm"));
}

// The port's state follows the interface whenever the tree is refreshed, and a missing interface is DOWN.
TEST_F(DeviceTreeTest, RefreshFollowsTheInterfaceState) {
  std::string err;
  DeviceConfig cfg = dev("urxe0", "lo");
  ASSERT_EQ(create_device(paths_, cfg, err), 0) << err;
  NetdevInfo lo;
  ASSERT_TRUE(query_netdev("lo", lo));
  const std::string port = ib("urxe0") + "/ports/1";
  {
    std::ofstream f(port + "/state", std::ios::trunc);
    f << (lo.up ? "1: DOWN\n" : "4: ACTIVE\n");  // stale
  }
  ASSERT_EQ(refresh_gids(paths_, "urxe0", err), 0) << err;
  EXPECT_EQ(slurp(port + "/state"), lo.up ? "4: ACTIVE\n" : "1: DOWN\n");

  DeviceConfig gone = cfg;
  gone.netdev = "no-such-if0";
  ASSERT_EQ(refresh_port_state(ib("urxe0"), gone, err), 0) << err;
  EXPECT_EQ(slurp(port + "/state"), "1: DOWN\n");
  EXPECT_EQ(slurp(port + "/phys_state"), "3: Disabled\n");
  // Another namespace's device: its interface cannot be seen from here, so nothing is written.
  DeviceConfig other = cfg;
  other.netns = "1:1";
  other.netdev = "lo";
  ASSERT_EQ(refresh_port_state(ib("urxe0"), other, err), 0) << err;
  EXPECT_EQ(slurp(port + "/state"), "1: DOWN\n");
}

// ports/N/rate: the kernel's text for ib_get_eth_speed's width and speed of an ethtool speed.
TEST(PortFormat, RateTextFromTheEthernetSpeed) {
  const std::pair<uint32_t, const char*> cases[] = {
      {0, "2.5 Gb/sec (1X SDR)"},      {1000, "2.5 Gb/sec (1X SDR)"}, {5000, "5 Gb/sec (1X DDR)"},
      {10000, "10 Gb/sec (1X FDR10)"}, {20000, "20 Gb/sec (4X DDR)"}, {25000, "25 Gb/sec (1X EDR)"},
      {40000, "40 Gb/sec (4X FDR10)"}, {50000, "50 Gb/sec (1X HDR)"}, {100000, "100 Gb/sec (4X EDR)"},
      {200000, "200 Gb/sec (4X HDR)"},
  };
  for (const auto& [mbps, text] : cases) EXPECT_EQ(port_rate_text(eth_port_speed(mbps)), text) << mbps;
  // Widths and speeds RoCE never maps to, as the kernel prints them; unknown codes read as 1X SDR.
  EXPECT_EQ(port_rate_text({.width = 2, .speed = 4}), "40 Gb/sec (4X QDR)");
  EXPECT_EQ(port_rate_text({.width = 2, .speed = 16}), "56 Gb/sec (4X FDR)");
  EXPECT_EQ(port_rate_text({.width = 8, .speed = 1}), "30 Gb/sec (12X SDR)");
  EXPECT_EQ(port_rate_text({.width = 16, .speed = 128}), "200 Gb/sec (2X NDR)");
  EXPECT_EQ(port_rate_text({.width = 3, .speed = 3}), "2.5 Gb/sec (1X SDR)");
  EXPECT_EQ(port_state_text(true), "4: ACTIVE");
  EXPECT_EQ(port_state_text(false), "1: DOWN");
  EXPECT_EQ(port_phys_state_text(true), "5: LinkUp");
  EXPECT_EQ(port_phys_state_text(false), "3: Disabled");
}

TEST_F(DeviceTreeTest, RefusesBadRequests) {
  std::string err;
  DeviceConfig rxe = dev("rxe0", "lo");  // would be claimed by libibverbs' rxe provider
  EXPECT_EQ(create_device(paths_, rxe, err), EINVAL);
  DeviceConfig slash = dev("a/b", "lo");
  EXPECT_EQ(create_device(paths_, slash, err), EINVAL);
  DeviceConfig nodev = dev("urxe0", "no-such-if0");
  EXPECT_EQ(create_device(paths_, nodev, err), ENODEV);
  DeviceConfig ok = dev("urxe0", "lo");
  ASSERT_EQ(create_device(paths_, ok, err), 0) << err;
  DeviceConfig again = dev("urxe0", "lo");
  EXPECT_EQ(create_device(paths_, again, err), EEXIST);
}

TEST_F(DeviceTreeTest, RefreshRewritesGidsWithoutTouchingTheDeviceDirectory) {
  std::string err;
  DeviceConfig cfg = dev("urxe0", "lo");
  ASSERT_EQ(create_device(paths_, cfg, err), 0) << err;
  const std::string gid1 = ib("urxe0") + "/ports/1/gids/1";
  const std::string want = slurp(gid1);
  {
    std::ofstream f(gid1, std::ios::trunc);
    f << "0000:0000:0000:0000:0000:ffff:0a0a:0a0a\n";  // a stale address
  }
  struct stat before {
  }, after{};
  ASSERT_EQ(::stat(ib("urxe0").c_str(), &before), 0);
  ASSERT_EQ(refresh_gids(paths_, "urxe0", err), 0) << err;
  ASSERT_EQ(::stat(ib("urxe0").c_str(), &after), 0);
  EXPECT_EQ(slurp(gid1), want);
  // libibverbs identifies a device by this directory's mtime: a change would make it a new device.
  EXPECT_EQ(before.st_mtim.tv_sec, after.st_mtim.tv_sec);
  EXPECT_EQ(before.st_mtim.tv_nsec, after.st_mtim.tv_nsec);
}

// A device belongs to the network namespace it was made in: the provider's reader (match_device) skips
// another namespace's, the urxe command still loads it, and once that namespace is gone it is removed.
TEST_F(DeviceTreeTest, DevicesFollowNetworkNamespaces) {
  std::string err;
  DeviceConfig cfg = dev("urxe0", "lo");
  ASSERT_EQ(create_device(paths_, cfg, err), 0) << err;
  DeviceConfig back;
  ASSERT_TRUE(read_device_config(ib("urxe0"), back));
  EXPECT_FALSE(back.netns.empty());
  {
    std::ofstream f(ib("urxe0") + "/urxe.conf", std::ios::app);
    f << "netns=" << back.netns.substr(0, back.netns.find(':'))
      << ":1\n";  // a namespace that is not this one
  }
  EXPECT_FALSE(read_device_config(ib("urxe0"), back));
  EXPECT_TRUE(load_device_config(ib("urxe0"), back));
  auto list = list_devices(paths_);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_TRUE(list[0].other_netns);
  if (::geteuid() != 0) GTEST_SKIP() << "not root: cannot tell whether another namespace is gone";
  const auto removed = remove_vanished_devices(paths_);
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0].name, "urxe0");
  EXPECT_FALSE(fs::exists(ib("urxe0")));
}

TEST_F(DeviceTreeTest, AppEnvironment) {
  ::setenv("URXE_PROVIDER", "/opt/urxe/lib/liburxe-rdmav34.so", 1);
  auto env = app_environment(paths_);
  ASSERT_EQ(env.size(), 2u);
  EXPECT_EQ(env[0].first, "SYSFS_PATH");
  EXPECT_EQ(env[0].second, paths_.run_dir + "/sys");
  EXPECT_EQ(env[1].first, "LD_PRELOAD");
  EXPECT_EQ(env[1].second, "/opt/urxe/lib/liburxe-rdmav34.so");
  EXPECT_EQ(app_environment(paths_, "libfoo.so")[1].second, "libfoo.so:/opt/urxe/lib/liburxe-rdmav34.so");
  EXPECT_EQ(app_environment(paths_, "/opt/urxe/lib/liburxe-rdmav34.so")[1].second,
            "/opt/urxe/lib/liburxe-rdmav34.so");
  EXPECT_EQ(driver_file_content(), "driver /opt/urxe/lib/liburxe\n");
  ::unsetenv("URXE_PROVIDER");
  // Without an override the path is a real liburxe-rdmav34.so location.
  EXPECT_NE(provider_library_path().find("liburxe-rdmav34.so"), std::string::npos);
}

// The urxe command as the UCMA shim looks for it from the provider library: $URXE_BIN, the build tree's
// tools/urxe next to provider/, an install's bin/urxe relative to the library directory.
TEST_F(DeviceTreeTest, UrxeCommandPathFollowsTheProviderLibrary) {
  auto touch = [](const fs::path& p) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << "";
  };
  const fs::path build = root_ + "/build", inst = root_ + "/inst";
  touch(build / "provider/liburxe-rdmav34.so");
  touch(build / "tools/urxe");
  touch(inst / "lib/x86_64-linux-gnu/libibverbs/liburxe-rdmav34.so");
  touch(inst / "bin/urxe");
  ::unsetenv("URXE_BIN");
  EXPECT_EQ(urxe_command_path((build / "provider/liburxe-rdmav34.so").string()),
            (build / "tools/urxe").string());
  EXPECT_EQ(urxe_command_path((inst / "lib/x86_64-linux-gnu/libibverbs/liburxe-rdmav34.so").string()),
            (inst / "bin/urxe").string());
  ::setenv("URXE_BIN", "/opt/urxe/bin/urxe", 1);
  EXPECT_EQ(urxe_command_path((build / "provider/liburxe-rdmav34.so").string()), "/opt/urxe/bin/urxe");
  ::unsetenv("URXE_BIN");
  // Nothing next to the library: a configured location, which names the urxe command.
  EXPECT_NE(urxe_command_path("/nonexistent/liburxe-rdmav34.so").find("urxe"), std::string::npos);
}

// GID table updates follow the kernel's slot rules: a kept address keeps its index (apps' sgid_index stays
// valid), a removed one leaves a hole, a new one fills the lowest hole.
GidEntry gid_entry(uint8_t last, const char* ndev = "eth0") {
  GidEntry e;
  e.gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, last};
  e.ndev = ndev;
  return e;
}

TEST(GidMerge, KeptAddressesKeepTheirSlotsNewOnesFillTheLowestHole) {
  const GidEntry def = gid_entry(0), a = gid_entry(1), b = gid_entry(2), c = gid_entry(3), d = gid_entry(4);
  // first table: as created (in order)
  auto t = merge_gid_table({}, {def, a, b, c}, 8);
  ASSERT_EQ(t.size(), 8u);
  EXPECT_EQ(t[0].gid, def.gid);
  EXPECT_EQ(t[1].gid, a.gid);
  EXPECT_EQ(t[2].gid, b.gid);
  EXPECT_EQ(t[3].gid, c.gid);
  EXPECT_TRUE(t[4].ndev.empty());
  auto as_current = [](const std::vector<GidEntry>& v) {
    std::vector<std::pair<uint32_t, GidEntry>> cur;
    for (uint32_t i = 0; i < v.size(); ++i)
      if (!v[i].ndev.empty()) cur.emplace_back(i, v[i]);
    return cur;
  };
  // a goes away: b and c stay at 2 and 3, slot 1 is empty
  t = merge_gid_table(as_current(t), {def, b, c}, 8);
  EXPECT_TRUE(t[1].ndev.empty());
  EXPECT_EQ(t[1].gid, (std::array<uint8_t, 16>{}));
  EXPECT_EQ(t[2].gid, b.gid);
  EXPECT_EQ(t[3].gid, c.gid);
  // d comes: it takes slot 1
  t = merge_gid_table(as_current(t), {def, b, c, d}, 8);
  EXPECT_EQ(t[1].gid, d.gid);
  EXPECT_EQ(t[2].gid, b.gid);
  EXPECT_EQ(t[3].gid, c.gid);
  // the same input again changes nothing
  EXPECT_EQ(merge_gid_table(as_current(t), {def, b, c, d}, 8).size(), 8u);
  for (uint32_t i = 0; i < 8; ++i)
    EXPECT_EQ(merge_gid_table(as_current(t), {def, b, c, d}, 8)[i].gid, t[i].gid);
  // a full table drops what does not fit; the default GID is always slot 0
  t = merge_gid_table({}, {def, a, b, c, d}, 3);
  EXPECT_EQ(t[0].gid, def.gid);
  EXPECT_EQ(t[1].gid, a.gid);
  EXPECT_EQ(t[2].gid, b.gid);
  // the interface vanished: everything empty
  t = merge_gid_table(as_current(t), {}, 3);
  for (auto& e : t) EXPECT_TRUE(e.ndev.empty());
}

}  // namespace

namespace {

// DCQCN's parameters: link add writes mlx5's names with the engine's defaults; a value a user writes there
// is what the next process reads; a file that is missing or not a number keeps the default.
TEST_F(DeviceTreeTest, CcParamsHoldTheDcqcnDefaultsAndTakeAUsersValues) {
  DeviceConfig cfg = dev("urxe0", "lo");
  std::string err;
  ASSERT_EQ(create_device(paths_, cfg, err), 0) << err;
  const std::string dir = ib("urxe0") + "/cc_params";
  EXPECT_EQ(slurp(dir + "/rp_ai_rate"), "5\n");
  EXPECT_EQ(slurp(dir + "/rp_time_reset"), "300\n");
  EXPECT_EQ(slurp(dir + "/np_min_time_between_cnps"), "2\n");
  EXPECT_EQ(slurp(dir + "/rp_dce_tcp_g"), "1019\n");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator{}),
            static_cast<std::ptrdiff_t>(std::size(urxe::engine::kCcParams)));

  { std::ofstream(dir + "/rp_ai_rate") << "40\n"; }
  { std::ofstream(dir + "/rp_hai_rate") << "fast\n"; }
  std::filesystem::remove(dir + "/rp_threshold");
  urxe::engine::EngineConfig::Dcqcn p;
  read_cc_params(ib("urxe0"), p);
  EXPECT_EQ(p.rp_ai_rate, 40u);
  EXPECT_EQ(p.rp_hai_rate, 50u);  // not a number: the default stays
  EXPECT_EQ(p.rp_threshold, 1u);  // missing: the default stays
  EXPECT_EQ(p.rp_time_reset, 300u);
}

}  // namespace
