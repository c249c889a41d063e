// Device counters shared between processes (provider/stats.h): live files, folding at close and after a
// crash (exactly once), sums by name across differently ordered files, the sysfs hw_counters mirror, and
// the engine's counter names against kernel rxe's.
#include "provider/stats.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/engine.h"

namespace fs = std::filesystem;
using namespace urxe::provider;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void bump(uint64_t* values, size_t i, uint64_t n) {
  std::atomic_ref<uint64_t> a(values[i]);
  a.store(a.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

class StatsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/urxe-stats-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dev_ = tmpl;
    std::string err;
    ASSERT_TRUE(init_device_stats(dev_, "lo", err)) << err;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dev_, ec);
  }
  DeviceCounters read(bool fold = true) {
    DeviceCounters dc;
    std::string err;
    EXPECT_TRUE(read_device_counters(dev_, fold, dc, err)) << err;
    return dc;
  }
  std::string dev_;
};

const char* const kNames[] = {"sent_pkts", "rcvd_pkts", "rx_drop_icrc"};

TEST_F(StatsTest, InitMakesWritableDirsAndRxeHwCounters) {
  struct stat st {};
  ASSERT_EQ(::stat(stats_dir(dev_).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0777u);  // every user's apps add their file there
  EXPECT_EQ(slurp(hw_counters_dir(dev_) + "/lifespan"), "10\n");
  for (const char* n : rxe_counter_names()) EXPECT_EQ(slurp(hw_counters_dir(dev_) + "/" + n), "0\n") << n;
  EXPECT_EQ(rxe_counter_names().size(), 15u);
}

TEST_F(StatsTest, LiveCountsThenFoldedAtClose) {
  std::string err;
  {
    CounterFile f;
    ASSERT_TRUE(f.open(dev_, kNames, 0x11, err)) << err;
    bump(f.values(), 0, 5);
    bump(f.values(), 2, 2);
    DeviceCounters dc = read();
    ASSERT_EQ(dc.processes.size(), 1u);
    EXPECT_TRUE(dc.processes[0].alive);
    EXPECT_EQ(dc.processes[0].pid, ::getpid());
    EXPECT_EQ(dc.processes[0].qpn_base, 0x11u);
    EXPECT_EQ(dc.processes[0].counters.get("sent_pkts"), 5u);
    EXPECT_EQ(dc.total.get("sent_pkts"), 5u);
    EXPECT_EQ(dc.total.get("rx_drop_icrc"), 2u);
    EXPECT_EQ(dc.exited.get("sent_pkts"), 0u);
    // rxe's names come first, in rxe's order, even when no file has them yet
    EXPECT_EQ(dc.total.values[0].first, "sent_pkts");
    EXPECT_EQ(dc.total.values[14].first, "rdma_recvs");
    bump(f.values(), 0, 1);
    EXPECT_EQ(read().total.get("sent_pkts"), 6u);  // the file is the engine's storage: no copy step
  }                                                // destructor = close: fold
  DeviceCounters dc = read();
  EXPECT_TRUE(dc.processes.empty());
  EXPECT_EQ(dc.total.get("sent_pkts"), 6u);
  EXPECT_EQ(dc.exited.get("sent_pkts"), 6u);
  // close also mirrored the sum into sysfs, including names rxe does not have
  EXPECT_EQ(slurp(hw_counters_dir(dev_) + "/sent_pkts"), "6\n");
  EXPECT_EQ(slurp(hw_counters_dir(dev_) + "/rx_drop_icrc"), "2\n");

  CounterFile g;
  ASSERT_TRUE(g.open(dev_, kNames, 0x1011, err)) << err;
  bump(g.values(), 0, 10);
  EXPECT_EQ(read().total.get("sent_pkts"), 16u);
  g.close();
  g.close();  // idempotent
  EXPECT_EQ(read().total.get("sent_pkts"), 16u);
}

TEST_F(StatsTest, DeadProcessCountedThenFoldedExactlyOnce) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Dies without closing (as after SIGKILL): the file stays, its lock goes away with the process.
    auto* f = new CounterFile;
    std::string err;
    if (!f->open(dev_, kNames, 0x11, err)) ::_exit(1);
    bump(f->values(), 1, 42);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  DeviceCounters dc = read(/*fold=*/false);
  ASSERT_EQ(dc.processes.size(), 1u);
  EXPECT_FALSE(dc.processes[0].alive);
  EXPECT_EQ(dc.processes[0].pid, child);
  EXPECT_EQ(dc.total.get("rcvd_pkts"), 42u);
  EXPECT_EQ(dc.folded_dead, 0u);

  dc = read(/*fold=*/true);
  EXPECT_EQ(dc.folded_dead, 1u);
  EXPECT_TRUE(dc.processes.empty());
  EXPECT_EQ(dc.total.get("rcvd_pkts"), 42u);
  dc = read(true);
  EXPECT_EQ(dc.folded_dead, 0u);
  EXPECT_EQ(dc.total.get("rcvd_pkts"), 42u);
}

TEST_F(StatsTest, SumsByNameAcrossLayouts) {
  // A process built with another counter order (or an extra counter) still adds up by name.
  const char* const other[] = {"new_counter", "rcvd_pkts", "sent_pkts"};
  std::string err;
  CounterFile a, b;
  ASSERT_TRUE(a.open(dev_, kNames, 0x11, err)) << err;
  ASSERT_TRUE(b.open(dev_, other, 0x1011, err)) << err;
  bump(a.values(), 0, 1);    // sent_pkts
  bump(b.values(), 2, 100);  // sent_pkts
  bump(b.values(), 0, 7);    // new_counter
  DeviceCounters dc = read();
  EXPECT_EQ(dc.total.get("sent_pkts"), 101u);
  EXPECT_EQ(dc.total.get("new_counter"), 7u);
  a.close();
  b.close();
  dc = read();
  EXPECT_EQ(dc.total.get("sent_pkts"), 101u);
  EXPECT_EQ(dc.total.get("new_counter"), 7u);
  EXPECT_EQ(slurp(hw_counters_dir(dev_) + "/new_counter"), "7\n");
}

TEST_F(StatsTest, MirrorThreadPublishesSysfsAndQps) {
  std::string err;
  CounterFile f;
  ASSERT_TRUE(f.open(dev_, kNames, 0x11, err)) << err;
  const uint64_t qp_values[3] = {4, 0, 1};
  f.set_qp_source([&] { return f.qp_line(0x11, "RC", "RTS", qp_values); });
  f.start_mirror(20);
  bump(f.values(), 0, 4);
  DeviceCounters dc;
  for (int i = 0; i < 250 && (dc.processes.empty() || dc.processes[0].qps.empty()); ++i) {
    ::usleep(20000);
    dc = read(false);
  }
  EXPECT_EQ(slurp(hw_counters_dir(dev_) + "/sent_pkts"), "4\n");  // without any reader mirroring
  ASSERT_EQ(dc.processes.size(), 1u);
  ASSERT_EQ(dc.processes[0].qps.size(), 1u);
  const QpCounters& q = dc.processes[0].qps[0];
  EXPECT_EQ(q.qpn, 0x11u);
  EXPECT_EQ(q.type, "RC");
  EXPECT_EQ(q.state, "RTS");
  ASSERT_EQ(q.counters.values.size(), 2u);  // non-zero ones only
  EXPECT_EQ(q.counters.get("sent_pkts"), 4u);
  EXPECT_EQ(q.counters.get("rx_drop_icrc"), 1u);
  f.close();
  EXPECT_TRUE(read().processes.empty());
  size_t left = 0;
  for (const auto& e : fs::directory_iterator(stats_dir(dev_)))
    left += e.path().extension() == ".qps" || e.path().extension() == ".ctr";
  EXPECT_EQ(left, 0u);  // the .qps file goes with its process
}

TEST_F(StatsTest, MirrorRewritesInPlace) {
  CounterSet s;
  s.add("sent_pkts", 123456);
  std::string err;
  ASSERT_TRUE(mirror_hw_counters(dev_, s, err)) << err;
  EXPECT_EQ(slurp(hw_counters_dir(dev_) + "/sent_pkts"), "123456\n");
  EXPECT_EQ(slurp(hw_counters_dir(dev_) + "/rcvd_pkts"), "0\n");
  s.values[0].second = 7;  // fewer digits (a device re-created under the same tree): no stale tail
  ASSERT_TRUE(mirror_hw_counters(dev_, s, err)) << err;
  EXPECT_EQ(slurp(hw_counters_dir(dev_) + "/sent_pkts"), "7\n");
}

// ports/1/counters/ as the kernel's PMA group shows it: data in 4-octet words, packets as sent/rcvd_pkts.
TEST_F(StatsTest, MirrorWritesPortCountersInWords) {
  CounterSet s;
  s.add("sent_pkts", 5);
  s.add("rcvd_pkts", 3);
  s.add("sent_bytes", 4000);
  s.add("rcvd_bytes", 803);  // not a multiple of 4: whole words only
  std::string err;
  ASSERT_TRUE(mirror_hw_counters(dev_, s, err)) << err;
  const std::string dir = dev_ + "/ports/1/counters";
  EXPECT_EQ(slurp(dir + "/port_xmit_data"), "1000\n");
  EXPECT_EQ(slurp(dir + "/port_rcv_data"), "200\n");
  EXPECT_EQ(slurp(dir + "/port_xmit_packets"), "5\n");
  EXPECT_EQ(slurp(dir + "/port_rcv_packets"), "3\n");
  // Any user's app mirrors into them.
  EXPECT_EQ(fs::status(dir + "/port_xmit_data").permissions() & fs::perms::others_write,
            fs::perms::others_write);
  // The engine's byte counters are urxe's, after rxe's.
  namespace en = urxe::engine;
  EXPECT_STREQ(en::counter_name(en::Counter::sent_bytes), "sent_bytes");
  EXPECT_STREQ(en::counter_name(en::Counter::rcvd_bytes), "rcvd_bytes");
  EXPECT_FALSE(en::kCounterTable[static_cast<size_t>(en::Counter::sent_bytes)].rxe);
}

TEST_F(StatsTest, MissingStatsDirIsAnError) {
  DeviceCounters dc;
  std::string err;
  EXPECT_FALSE(read_device_counters(dev_ + "/nothing", true, dc, err));
  EXPECT_NE(err.find("urxe.stats"), std::string::npos) << err;
  CounterFile f;
  EXPECT_FALSE(f.open(dev_ + "/nothing", kNames, 0x11, err));
  EXPECT_EQ(f.values(), nullptr);
}

// The engine's counters start with kernel rxe's hw_counters, same names, same order.
TEST(StatsNames, EngineCountersStartWithRxes) {
  namespace en = urxe::engine;
  const auto rxe = rxe_counter_names();
  ASSERT_GE(static_cast<size_t>(en::Counter::num_counters), rxe.size());
  for (size_t i = 0; i < rxe.size(); ++i)
    EXPECT_STREQ(en::counter_name(static_cast<en::Counter>(i)), rxe[i]) << i;
}

}  // namespace
