// A device's fault rules file (provider/fault_rules.h): text round trip, refusals, generation and ids across
// updates, replacement by rename, the watcher (a change delivered once, a bad file keeping the old rules, its
// thread picking a change up in bounded time, with inotify and by polling), and the per-rule counters summed
// over live and exited processes' files (provider/stats.h).
#include "provider/fault_rules.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "provider/stats.h"

namespace fs = std::filesystem;
using namespace urxe::provider;
using urxe::wire::FaultRule;

namespace {

FaultRule rule(const char* text) {
  const urxe::wire::FaultParse p = urxe::wire::parse_fault_rule(text);
  EXPECT_TRUE(p) << text << ": " << p.error;
  return p.rule.value_or(FaultRule{});
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void put(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

bool add_rule(const std::string& dev, const char* text, uint32_t* id = nullptr) {
  std::string err;
  const bool ok = update_fault_rules(
      dev,
      [&](FaultRuleSet& s, std::string&) {
        if (id) *id = s.next_id;
        s.rules.emplace_back(s.next_id++, rule(text));
        return true;
      },
      err);
  EXPECT_TRUE(ok) << err;
  return ok;
}

class FaultRulesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/urxe-faults-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dev_ = tmpl;
    std::string err;
    ASSERT_TRUE(init_fault_rules(dev_, {}, err)) << err;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dev_, ec);
  }
  std::string dev_;
};

TEST_F(FaultRulesTest, TextRoundTripInCanonicalForm) {
  FaultRuleSet s;
  s.generation = 7;
  s.next_id = 9;
  s.rules = {{2, rule("drop dir tx every 3")}, {8, rule("corrupt icrc qpn 17")}};
  const std::string text = format_fault_rules(s);
  EXPECT_NE(text.find("generation 7\nnext-id 9\nrule 2 dir tx every 3 drop\nrule 8 qpn 0x11 corrupt icrc\n"),
            std::string::npos)
      << text;
  FaultRuleSet back;
  std::string err;
  ASSERT_TRUE(parse_fault_rules(text, back, err)) << err;
  EXPECT_EQ(back.generation, 7u);
  EXPECT_EQ(back.next_id, 9u);
  EXPECT_EQ(back.rules, s.rules);
}

TEST_F(FaultRulesTest, RefusesBadFilesNamingTheLineAndWord) {
  FaultRuleSet s;
  std::string err;
  EXPECT_FALSE(parse_fault_rules("generation 1\nnext-id 3\nrule 1 dir tx frobnicate drop\n", s, err));
  EXPECT_NE(err.find("line 3"), std::string::npos) << err;
  EXPECT_NE(err.find("frobnicate"), std::string::npos) << err;
  EXPECT_FALSE(parse_fault_rules("generation 1\nnext-id 3\nrule 1 drop\nrule 1 drop\n", s, err));
  EXPECT_NE(err.find("twice"), std::string::npos) << err;
  EXPECT_FALSE(parse_fault_rules("generation 1\nnext-id 2\nrule 2 drop\n", s, err));
  EXPECT_NE(err.find("next-id"), std::string::npos) << err;
  EXPECT_FALSE(parse_fault_rules("generation 1\nrule 1 drop\n", s, err));
  EXPECT_FALSE(parse_fault_rules("generation x\nnext-id 1\n", s, err));
  EXPECT_FALSE(parse_fault_rules("generation 1\nnext-id 1\nbogus 1\n", s, err));
  std::string many = "generation 1\nnext-id 40\n";
  for (int i = 1; i <= 33; ++i) many += "rule " + std::to_string(i) + " drop\n";
  EXPECT_FALSE(parse_fault_rules(many, s, err));
  EXPECT_NE(err.find("more than 32"), std::string::npos) << err;
}

TEST_F(FaultRulesTest, NoFileIsNoRules) {
  FaultRuleSet s;
  s.generation = 5;
  std::string err;
  ASSERT_TRUE(read_fault_rules(dev_, s, err)) << err;
  EXPECT_EQ(s.generation, 0u);
  EXPECT_EQ(s.next_id, 1u);
  EXPECT_TRUE(s.rules.empty());
}

TEST_F(FaultRulesTest, InitWritesTheFirstRules) {
  const std::string dev = dev_ + "/d2";
  ASSERT_EQ(::mkdir(dev.c_str(), 0755), 0);
  std::string err;
  ASSERT_TRUE(init_fault_rules(dev, {rule("drop"), rule("ecn-ce dir rx")}, err)) << err;
  FaultRuleSet s;
  ASSERT_TRUE(read_fault_rules(dev, s, err)) << err;
  EXPECT_EQ(s.generation, 1u);
  EXPECT_EQ(s.next_id, 3u);
  ASSERT_EQ(s.rules.size(), 2u);
  EXPECT_EQ(s.rules[0].first, 1u);
  EXPECT_EQ(s.rules[1].first, 2u);
  EXPECT_EQ(s.rules[1].second, rule("dir rx ecn-ce"));
}

TEST_F(FaultRulesTest, UpdatesBumpTheGenerationReplaceTheFileAndNeverReuseIds) {
  uint32_t id = 0;
  ASSERT_TRUE(add_rule(dev_, "drop", &id));
  EXPECT_EQ(id, 1u);
  struct stat before {};
  ASSERT_EQ(::stat(fault_rules_path(dev_).c_str(), &before), 0);
  ASSERT_TRUE(add_rule(dev_, "duplicate 2", &id));
  EXPECT_EQ(id, 2u);
  struct stat after {};
  ASSERT_EQ(::stat(fault_rules_path(dev_).c_str(), &after), 0);
  EXPECT_NE(before.st_ino, after.st_ino) << "replaced by a rename, not rewritten in place";
  EXPECT_FALSE(fs::exists(fault_rules_path(dev_) + ".tmp"));
  std::string err;
  ASSERT_TRUE(update_fault_rules(
      dev_,
      [](FaultRuleSet& s, std::string&) {
        s.rules.clear();
        return true;
      },
      err))
      << err;
  ASSERT_TRUE(add_rule(dev_, "drop", &id));
  EXPECT_EQ(id, 3u) << "ids are not reused after a clear";
  FaultRuleSet s;
  ASSERT_TRUE(read_fault_rules(dev_, s, err)) << err;
  EXPECT_EQ(s.generation, 4u);
}

TEST_F(FaultRulesTest, AnEditThatFailsWritesNothing) {
  ASSERT_TRUE(add_rule(dev_, "drop"));
  const std::string text = slurp(fault_rules_path(dev_));
  std::string err;
  EXPECT_FALSE(update_fault_rules(
      dev_,
      [](FaultRuleSet& s, std::string& e) {
        s.rules.clear();
        e = "refused";
        return false;
      },
      err));
  EXPECT_EQ(err, "refused");
  EXPECT_EQ(slurp(fault_rules_path(dev_)), text);
}

TEST_F(FaultRulesTest, UpdateWithoutTheDirectorySaysWhy) {
  std::string err;
  EXPECT_FALSE(update_fault_rules(
      dev_ + "/nodev", [](FaultRuleSet&, std::string&) { return true; }, err));
  EXPECT_NE(err.find("older urxe"), std::string::npos) << err;
}

struct Seen {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<FaultRuleList> lists;
  std::vector<std::string> warnings;
  // Waits up to `ms` for `n` lists; true when they came.
  bool wait(size_t n, int ms) {
    std::unique_lock<std::mutex> g(mu);
    return cv.wait_for(g, std::chrono::milliseconds(ms), [&] { return lists.size() >= n; });
  }
  // Waits up to `ms` for a list of `n` rules to be the latest.
  bool wait_rules(size_t n, int ms) {
    std::unique_lock<std::mutex> g(mu);
    return cv.wait_for(g, std::chrono::milliseconds(ms),
                       [&] { return !lists.empty() && lists.back().size() == n; });
  }
};

void watch(FaultRulesWatcher& w, const std::string& dev, Seen& seen) {
  w.init(
      dev,
      [&seen](const FaultRuleList& l) {
        std::lock_guard<std::mutex> g(seen.mu);
        seen.lists.push_back(l);
        seen.cv.notify_all();
      },
      [&seen](const std::string& line) {
        std::lock_guard<std::mutex> g(seen.mu);
        seen.warnings.push_back(line);
      });
}

TEST_F(FaultRulesTest, WatcherDeliversEachChangeOnceAndKeepsOldRulesOnABadFile) {
  Seen seen;
  FaultRulesWatcher w;
  watch(w, dev_, seen);
  EXPECT_FALSE(w.check()) << "no file: nothing to deliver";
  ASSERT_TRUE(add_rule(dev_, "dir tx drop"));
  EXPECT_TRUE(w.check());
  EXPECT_FALSE(w.check()) << "unchanged";
  ASSERT_EQ(seen.lists.size(), 1u);
  ASSERT_EQ(seen.lists[0].size(), 1u);
  EXPECT_EQ(seen.lists[0][0].first, 1u);
  EXPECT_EQ(seen.lists[0][0].second, rule("dir tx drop"));
  EXPECT_EQ(w.generation(), 1u);

  // A hand edit that does not parse: one warning naming the bad word, the rules stay.
  const std::string good = slurp(fault_rules_path(dev_));
  put(fault_rules_path(dev_), good + "rule 5 dir sideways drop\n");
  EXPECT_FALSE(w.check(true));
  EXPECT_FALSE(w.check(true));
  ASSERT_EQ(seen.warnings.size(), 1u);
  EXPECT_NE(seen.warnings[0].find("sideways"), std::string::npos) << seen.warnings[0];
  EXPECT_NE(seen.warnings[0].find("keeping the 1 rule(s)"), std::string::npos) << seen.warnings[0];
  EXPECT_EQ(seen.lists.size(), 1u);

  // Updates refuse to write over it (they would lose what it says); fixed by hand, then updated: delivered.
  std::string err;
  EXPECT_FALSE(update_fault_rules(
      dev_, [](FaultRuleSet&, std::string&) { return true; }, err));
  EXPECT_NE(err.find("sideways"), std::string::npos) << err;
  put(fault_rules_path(dev_), good);
  ASSERT_TRUE(add_rule(dev_, "dir rx ecn-ce"));
  EXPECT_TRUE(w.check());
  ASSERT_EQ(seen.lists.size(), 2u);
  EXPECT_EQ(seen.lists[1].size(), 2u);

  // A new generation with the same rules is not a change; the file removed is no rules.
  ASSERT_TRUE(update_fault_rules(
      dev_, [](FaultRuleSet&, std::string&) { return true; }, err))
      << err;
  EXPECT_FALSE(w.check(true));
  EXPECT_EQ(w.generation(), 3u);
  ASSERT_EQ(::unlink(fault_rules_path(dev_).c_str()), 0);
  EXPECT_TRUE(w.check());
  ASSERT_EQ(seen.lists.size(), 3u);
  EXPECT_TRUE(seen.lists[2].empty());
}

// The thread picks a change up within its bound (~100 ms; 1 s allowed on a loaded machine), with inotify
// and by polling.
void thread_picks_up(const std::string& dev, bool notify) {
  Seen seen;
  FaultRulesWatcher w;
  watch(w, dev, seen);
  w.check();
  ASSERT_TRUE(w.start(100, notify));
  EXPECT_TRUE(w.running());
  // (The lock file's creation may wake it before the rules file exists: a list of no rules first.)
  for (size_t n = 1; n <= 3; ++n) {
    ASSERT_TRUE(add_rule(dev, "dir tx every 2 drop"));
    ASSERT_TRUE(seen.wait_rules(n, 1000)) << "change " << n << " not seen within 1 s";
  }
  w.stop();
  EXPECT_FALSE(w.running());
  size_t lists;
  {
    std::lock_guard<std::mutex> g(seen.mu);
    lists = seen.lists.size();
  }
  ASSERT_TRUE(add_rule(dev, "drop"));
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  std::lock_guard<std::mutex> g(seen.mu);
  EXPECT_EQ(seen.lists.size(), lists) << "nothing after stop";
}

TEST_F(FaultRulesTest, WatcherThreadWithInotify) {
  thread_picks_up(dev_, true);
}

TEST_F(FaultRulesTest, WatcherThreadPolling) {
  thread_picks_up(dev_, false);
}

TEST_F(FaultRulesTest, NoThreadForADeviceWithoutTheDirectory) {
  FaultRulesWatcher w;
  w.init(dev_ + "/old-device", nullptr, nullptr);
  EXPECT_FALSE(w.start());
  EXPECT_FALSE(w.running());
}

TEST(FaultCounters, TextSumsAndLookups) {
  std::vector<FaultRuleCounters> a = parse_fault_counters("3 10 5 4\n1 2 1 1\nnot a line\n0 1 1 1\n");
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0], (FaultRuleCounters{1, 2, 1, 1}));
  EXPECT_EQ(a[1], (FaultRuleCounters{3, 10, 5, 4}));
  const FaultRuleCounters more[] = {{3, 1, 1, 1}, {2, 7, 7, 0}};
  add_fault_counters(a, more);
  EXPECT_EQ(format_fault_counters(a), "1 2 1 1\n2 7 7 0\n3 11 6 5\n");
  EXPECT_EQ(fault_counters_of(a, 9), (FaultRuleCounters{9, 0, 0, 0}));
}

// Per-process .faults files next to the counters files: live ones summed, a closed one and a dead one
// folded into total.faults once and kept.
TEST_F(FaultRulesTest, CountersSummedOverProcessesAndKeptAfterExit) {
  std::string err;
  ASSERT_TRUE(init_device_stats(dev_, "lo", err)) << err;
  const char* const names[] = {"sent_pkts"};
  CounterFile a, b;
  ASSERT_TRUE(a.open(dev_, names, 0, err)) << err;
  ASSERT_TRUE(b.open(dev_, names, 0x10000, err)) << err;
  const FaultRuleCounters ca[] = {{1, 10, 5, 5}, {2, 4, 4, 0}};
  const FaultRuleCounters cb[] = {{1, 1, 1, 1}};
  a.publish_fault_counters(ca);
  b.publish_fault_counters(cb);
  DeviceCounters dc;
  ASSERT_TRUE(read_device_counters(dev_, true, dc, err)) << err;
  ASSERT_EQ(dc.processes.size(), 2u);
  EXPECT_EQ(fault_counters_of(dc.faults, 1), (FaultRuleCounters{1, 11, 6, 6}));
  EXPECT_EQ(fault_counters_of(dc.faults, 2), (FaultRuleCounters{2, 4, 4, 0}));
  EXPECT_TRUE(dc.faults_exited.empty());

  // A closes: its counters go to the total, still counted once.
  const FaultRuleCounters ca2[] = {{1, 12, 6, 6}, {2, 4, 4, 0}};
  a.publish_fault_counters(ca2);
  a.close();
  ASSERT_TRUE(read_device_counters(dev_, true, dc, err)) << err;
  EXPECT_EQ(dc.processes.size(), 1u);
  EXPECT_EQ(fault_counters_of(dc.faults_exited, 1), (FaultRuleCounters{1, 12, 6, 6}));
  EXPECT_EQ(fault_counters_of(dc.faults, 1), (FaultRuleCounters{1, 13, 7, 7}));

  // A process that dies without closing: folded by the next reader, once.
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    CounterFile c;
    std::string e;
    if (!c.open(dev_, names, 0x20000, e)) ::_exit(1);
    const FaultRuleCounters cc[] = {{2, 100, 50, 25}};
    c.publish_fault_counters(cc);
    ::_exit(0);  // no close: the file stays behind, unlocked
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_TRUE(read_device_counters(dev_, true, dc, err)) << err;
  EXPECT_EQ(dc.folded_dead, 1u);
  EXPECT_EQ(fault_counters_of(dc.faults, 2), (FaultRuleCounters{2, 104, 54, 25}));
  ASSERT_TRUE(read_device_counters(dev_, true, dc, err)) << err;
  EXPECT_EQ(dc.folded_dead, 0u);
  EXPECT_EQ(fault_counters_of(dc.faults, 2), (FaultRuleCounters{2, 104, 54, 25}));
  EXPECT_EQ(fault_counters_of(dc.faults_exited, 2),
            (FaultRuleCounters{2, 104, 54, 25}));  // A and the dead one
  b.close();
  ASSERT_TRUE(read_device_counters(dev_, true, dc, err)) << err;
  EXPECT_TRUE(dc.processes.empty());
  EXPECT_EQ(fault_counters_of(dc.faults, 1), (FaultRuleCounters{1, 13, 7, 7}));
  EXPECT_EQ(fault_counters_of(dc.faults, 2), (FaultRuleCounters{2, 104, 54, 25}));
}

// A process's published counts only grow: a removed rule keeps its counts, a reset adds to them.
TEST_F(FaultRulesTest, PublishedCountsSurviveRemovalAndReset) {
  std::string err;
  ASSERT_TRUE(init_device_stats(dev_, "lo", err)) << err;
  const char* const names[] = {"sent_pkts"};
  CounterFile a;
  ASSERT_TRUE(a.open(dev_, names, 0, err)) << err;
  const FaultRuleCounters first[] = {{1, 10, 5, 5}, {2, 4, 4, 4}};
  a.publish_fault_counters(first);
  const FaultRuleCounters second[] = {{1, 3, 1, 1}};  // rule 2 removed; rule 1's counters started afresh
  a.publish_fault_counters(second);
  DeviceCounters dc;
  ASSERT_TRUE(read_device_counters(dev_, false, dc, err)) << err;
  EXPECT_EQ(fault_counters_of(dc.faults, 1), (FaultRuleCounters{1, 13, 6, 6}));
  EXPECT_EQ(fault_counters_of(dc.faults, 2), (FaultRuleCounters{2, 4, 4, 4}));
  a.close();
  ASSERT_TRUE(read_device_counters(dev_, true, dc, err)) << err;
  EXPECT_EQ(fault_counters_of(dc.faults_exited, 1), (FaultRuleCounters{1, 13, 6, 6}));
}

// The mirror thread asks the source at each pass, whether the engine's counters changed or not.
TEST_F(FaultRulesTest, MirrorThreadPublishesTheSource) {
  std::string err;
  ASSERT_TRUE(init_device_stats(dev_, "lo", err)) << err;
  const char* const names[] = {"sent_pkts"};
  CounterFile a;
  ASSERT_TRUE(a.open(dev_, names, 0, err)) << err;
  std::atomic<uint64_t> hits{3};
  a.set_fault_source([&] { return std::vector<FaultRuleCounters>{{4, hits.load(), hits.load(), 1}}; });
  a.start_mirror(20);
  DeviceCounters dc;
  bool seen = false;
  for (int i = 0; i < 100 && !seen; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_TRUE(read_device_counters(dev_, false, dc, err)) << err;
    seen = fault_counters_of(dc.faults, 4).hits == 3;
  }
  EXPECT_TRUE(seen);
  hits = 9;
  a.close();  // a last publish at stop, then folded
  ASSERT_TRUE(read_device_counters(dev_, true, dc, err)) << err;
  EXPECT_EQ(fault_counters_of(dc.faults_exited, 4), (FaultRuleCounters{4, 9, 9, 1}));
}

}  // namespace
