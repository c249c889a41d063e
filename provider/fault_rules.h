// A device's fault rules (wire/fault_rule.h) as a file in the device tree: written by `urxe fault add/del/
// clear` and `urxe link add --fault`, watched by every context of the device (FaultRulesWatcher), and their
// per-rule counters, published by each context next to its counters file (provider/stats.h) and summed by
// `urxe stats` / `urxe fault list`.
//
// The rules file, <ibdev_path>/urxe.fault/rules (the directory is made by create_device: the device's own
// directory never changes after creation). Text, one item per line, '#' starts a comment line:
//   generation N      1, 2, ...: bumped by every write
//   next-id N         the id the next added rule gets
//   rule ID TEXT      one rule, TEXT in canonical form (format_fault_rule), in table order
// It is replaced through a temporary file and a rename (readers see the old or the new file whole), by
// writers serialised by an flock on urxe.fault/lock. No file: no rules, generation 0, next id 1.
// Rule ids: 1, 2, ... in the order added, never reused on a device (`clear` included), so an id names one
// rule for the device's life and its counters, kept after the processes exit, never mix two rules.
//
// Counters: each context writes urxe.stats/p<pid>-<tag>.faults (lines "ID MATCHED HITS APPLIED") next to
// its .ctr file, and folds it into urxe.stats/total.faults when it closes (a dead process's file is folded
// by the next reader with write access), as the other counters are.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "wire/fault_rule.h"

namespace urxe::provider {

using FaultRuleList = std::vector<std::pair<uint32_t, wire::FaultRule>>;  // (id, rule), table order

struct FaultRuleSet {
  uint64_t generation = 0;
  uint32_t next_id = 1;
  FaultRuleList rules;
};

std::string fault_dir(const std::string& ibdev_path);         // <ibdev_path>/urxe.fault
std::string fault_rules_path(const std::string& ibdev_path);  // <ibdev_path>/urxe.fault/rules

// The file's text, and back. parse: false + err ("line N: ...", naming the bad word) on anything else than
// the lines above, a duplicate or zero id, an id not below next-id, or more than wire::kFaultTableSize rules.
std::string format_fault_rules(const FaultRuleSet& set);
bool parse_fault_rules(std::string_view text, FaultRuleSet& out, std::string& err);

// Reads the device's rules: true with an empty set when there is no file; false + err when it cannot be read
// or does not parse.
bool read_fault_rules(const std::string& ibdev_path, FaultRuleSet& out, std::string& err);

// Creates urxe.fault/ (0755: applications read it, the device's owner writes it) with `rules` as the first
// ids (1, 2, ...) when there are any. Called by create_device, before the device is visible.
bool init_fault_rules(const std::string& ibdev_path, const std::vector<wire::FaultRule>& rules,
                      std::string& err);

// Read-modify-write under the lock: `edit` changes the set (or returns false with err: nothing is
// written); the generation is then bumped and the file replaced. False + err when urxe.fault/ is missing
// (a device made by an older urxe), the file does not parse, or it cannot be written. `out`: the set
// written.
bool update_fault_rules(const std::string& ibdev_path,
                        const std::function<bool(FaultRuleSet& set, std::string& err)>& edit,
                        std::string& err, FaultRuleSet* out = nullptr);

// Watches one device's rules file for a context. check() is cheap when nothing changed (one stat(2)); the
// callback gets each new rule list (a change of the rules, not of the generation alone), on the thread
// that called check(). A file that does not parse keeps the last rules and logs one warning per bad
// version of the file; a file removed means no rules.
class FaultRulesWatcher {
 public:
  using Callback = std::function<void(const FaultRuleList& rules)>;
  using Warn = std::function<void(const std::string& line)>;
  FaultRulesWatcher() = default;
  ~FaultRulesWatcher() { stop(); }
  FaultRulesWatcher(const FaultRulesWatcher&) = delete;
  FaultRulesWatcher& operator=(const FaultRulesWatcher&) = delete;

  // `warn` gets the one line about a file that does not parse (the context logs it). Before check() and
  // start().
  void init(const std::string& ibdev_path, Callback cb, Warn warn);
  // Looks at the file once (reads it when its inode, size or mtime changed, or with `force`); true when
  // the callback ran. One thread at a time (the watcher's own once started).
  bool check(bool force = false);
  // A thread (urxe-faults) that runs check() when urxe.fault/ changes: it sleeps in poll(2) on an inotify
  // descriptor, or, when inotify is not available (or not `notify`: tests), wakes every `period_ms`. No
  // thread when the device has no urxe.fault/ (made by an older urxe). Returns whether the thread runs.
  bool start(uint32_t period_ms = 100, bool notify = true);
  // Stops and joins the thread. Idempotent.
  void stop();
  // The generation of the file the last delivered rules came from (0: none yet).
  uint64_t generation() const { return generation_.load(std::memory_order_relaxed); }
  bool running() const { return thread_.joinable(); }

 private:
  void loop(uint32_t period_ms);
  std::string ibdev_path_;
  Callback cb_;
  Warn warn_;
  // The identity of the file last looked at (st_ino, st_mtim, st_size); ino 0: no file.
  struct Id {
    uint64_t ino = 0, size = 0;
    int64_t mtime_ns = -1;
    bool operator==(const Id&) const = default;
  } last_{}, bad_{};        // bad_: the last version that did not parse
  bool delivered_ = false;  // the callback ran at least once
  FaultRuleList rules_;     // the last delivered
  std::atomic<uint64_t> generation_{0};
  int inotify_fd_ = -1, stop_fd_ = -1;
  std::thread thread_;
};

// One rule's counters in one process (or summed), engine::FaultPort's FaultRuleStats.
struct FaultRuleCounters {
  uint32_t id = 0;
  uint64_t matched = 0;  // frames its fields matched
  uint64_t hits = 0;     // frames its selectors picked
  uint64_t applied = 0;  // frames whose action it decided
  bool operator==(const FaultRuleCounters&) const = default;
};

// Lines "ID MATCHED HITS APPLIED", and back (lines that do not read are skipped).
std::string format_fault_counters(std::span<const FaultRuleCounters> c);
std::vector<FaultRuleCounters> parse_fault_counters(std::string_view text);
// Adds `from` into `into` by id, keeping `into` ordered by id.
void add_fault_counters(std::vector<FaultRuleCounters>& into, std::span<const FaultRuleCounters> from);
// The counters of `id` in `c` (zeros when absent).
FaultRuleCounters fault_counters_of(std::span<const FaultRuleCounters> c, uint32_t id);

}  // namespace urxe::provider
