// Device counters shared between processes, and their mirror in the fake sysfs tree.
//
// Every context (process × device) owns one counters file, <ibdev_path>/urxe.stats/p<pid>-<tag>.ctr: a
// header, a table of counter names and an array of uint64 values that the engine updates in place (mmap,
// relaxed atomic stores; no syscall per packet). The owner holds an OFD write lock on the file for its
// life, so a reader knows a file without a lock belongs to a process that died. At context close the
// owner adds its values into <ibdev_path>/urxe.stats/total (same format, under a lock on that file) and
// removes its own file, so the device's counters survive the processes that made them; a reader with
// write access does the same for the files of dead processes. Names are stored, not implied by position,
// so processes built from different urxe versions still add up by name.
//
// Device counters = total + every live file. They are mirrored into <ibdev_path>/ports/1/hw_counters/<name>
// (where kernel rxe has them, read by the tools that read sysfs) and ports/1/counters/ by `urxe stats`, at
// context close and, at most once a second while a context's counters change, by the context's stats thread.
#pragma once
#include <sys/types.h>

#include <array>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "provider/fault_rules.h"

namespace urxe::provider {

// Kernel rxe's hw_counters (rxe_hw_counters.c), in its order: every urxe device shows these.
std::span<const char* const> rxe_counter_names();

// Ordered name → value list (rxe's names first, then others in the order first seen).
struct CounterSet {
  std::vector<std::pair<std::string, uint64_t>> values;
  uint64_t get(const std::string& name) const;  // 0 when absent
  void add(const std::string& name, uint64_t v);
  void set(const std::string& name, uint64_t v);
};

// One QP's share of its process's counters (EngineImpl::cur_qp), as last published (≤ 1 s old).
struct QpCounters {
  uint32_t qpn = 0;
  std::string type, state;  // "RC", "RTS"
  CounterSet counters;      // non-zero ones
};

struct ProcessCounters {
  pid_t pid = 0;
  std::string comm;  // /proc/<pid>/comm at open
  uint32_t qpn_base = 0;
  uint64_t start_ns = 0;  // CLOCK_REALTIME when the context opened
  bool alive = true;      // false: its process died without folding (not yet folded: no write access)
  CounterSet counters;
  std::vector<QpCounters> qps;            // from its .qps file, when the process publishes one
  std::vector<FaultRuleCounters> faults;  // from its .faults file (provider/fault_rules.h), by rule id
};

struct DeviceCounters {
  CounterSet total;                        // total file + every process file
  CounterSet exited;                       // the total file alone (processes that closed or died)
  std::vector<ProcessCounters> processes;  // the files still present
  uint32_t folded_dead = 0;                // files of dead processes folded into total by this call
  // Per fault rule, by id: total.faults + every process's .faults; and total.faults alone.
  std::vector<FaultRuleCounters> faults, faults_exited;
};

std::string stats_dir(const std::string& ibdev_path);        // <ibdev_path>/urxe.stats
std::string hw_counters_dir(const std::string& ibdev_path);  // <ibdev_path>/ports/1/hw_counters
// The PMA counters of ports/1/counters/ (port_{xmit,rcv}_{data,packets}; data in 32-bit words, as the kernel
// shows them) from a device's counters.
std::vector<std::pair<std::string, uint64_t>> port_counters(const CounterSet& c);

// Creates urxe.stats/ (world-writable, sticky: every user's apps add their own file) and
// ports/1/hw_counters/ with rxe's names at 0 and `lifespan`, the CM groups below at 0, and notes the
// interface's carrier_down_count now (urxe.stats/carrier: "NETDEV COUNT"), from which link_downed counts.
// Called by create_device.
bool init_device_stats(const std::string& ibdev_path, const std::string& netdev, std::string& err);

// The CM service's counters of a device, where the kernel shows them for a port:
// ports/1/<group>/<message>, groups cm_tx_msgs, cm_rx_msgs, cm_tx_retries, cm_rx_duplicates, messages req ..
// apr (index = CM attribute ID - 0x10). Written by `urxe cm` (tools/cm_platform.cc), read by `urxe stats`;
// the directories and files writable by every user, whose service may be the one that writes them.
inline constexpr const char* kCmCounterGroups[] = {"cm_tx_msgs", "cm_rx_msgs", "cm_tx_retries",
                                                   "cm_rx_duplicates"};
inline constexpr const char* kCmCounterMessages[] = {"req",  "mra",      "rej",      "rep", "rtu", "dreq",
                                                     "drep", "sidr_req", "sidr_rep", "lap", "apr"};
using CmCounterTable =
    std::array<std::array<uint64_t, std::size(kCmCounterMessages)>, std::size(kCmCounterGroups)>;
bool write_cm_counters(const std::string& ibdev_path, const CmCounterTable& t, std::string& err);
// False when the device has none (no CM service has run for it).
bool read_cm_counters(const std::string& ibdev_path, CmCounterTable& t);

// Reads the device's counters. fold_dead: fold the files of dead processes into the total (needs write
// access to urxe.stats; silently skipped without it). Returns false (err set) when urxe.stats is missing.
// link_downed is the device's, not a process's: how often the interface lost its carrier since
// `link add` (as rxe counts NETDEV_CHANGE to no carrier), read from the kernel when the interface is
// visible from this network namespace, else the last value a reader with write access kept in the total.
bool read_device_counters(const std::string& ibdev_path, bool fold_dead, DeviceCounters& out,
                          std::string& err);

// Writes each counter into ports/1/hw_counters/<name> (rxe's names always, 0 when absent), the PMA-style
// ports/1/counters/port_{xmit,rcv}_{data,packets} (data in 4-octet words: sent_bytes / 4, ...; packets are
// sent_pkts and rcvd_pkts). `written` (the stats thread's):
// the value last written to each counter file; a file whose value is unchanged is left as it is.
using MirrorCache = std::unordered_map<std::string, uint64_t>;
bool mirror_hw_counters(const std::string& ibdev_path, const CounterSet& counters, std::string& err,
                        MirrorCache* written = nullptr);

// One context's counters file. values() is the storage the engine counts into (EngineConfig).
class CounterFile {
 public:
  CounterFile() = default;
  ~CounterFile() { close(); }
  CounterFile(const CounterFile&) = delete;
  CounterFile& operator=(const CounterFile&) = delete;

  // Creates and locks the file with these names (all 0). false + err when the device has no urxe.stats or
  // it is not writable; the caller then counts privately.
  bool open(const std::string& ibdev_path, std::span<const char* const> names, uint32_t qpn_base,
            std::string& err);
  uint64_t* values() const { return values_; }
  // Per-QP counters: `source` returns lines from qp_line(); the mirror thread publishes them next to the
  // counters file (<file>.qps) when it mirrors. Set before start_mirror.
  void set_qp_source(std::function<std::string()> source) { qp_source_ = std::move(source); }
  // Counters the engine does not keep itself (what the port lost before the engine saw it): `source` stores
  // them into values() on the mirror thread, before each look at whether anything changed. Set before
  // start_mirror.
  void set_port_source(std::function<void(uint64_t* values)> source) { port_source_ = std::move(source); }
  // The port's state files (provider/device_tree.h, refresh_port_state), refreshed by the mirror thread
  // after the counters: it runs when the port goes up or down (poke). Set before start_mirror.
  void set_port_state(std::function<void()> refresh) { port_state_ = std::move(refresh); }
  std::string qp_line(uint32_t qpn, const char* type, const char* state, const uint64_t* values) const;
  // A thread that mirrors the device's counters into sysfs (and publishes per-QP counters) at most every
  // `period_ms` while this file's values change.
  void start_mirror(uint32_t period_ms = 1000);
  // Fault rules' counters (the context's FaultPort): `source` fills them on the mirror thread at each
  // pass (every period_ms, whether the engine's counters changed or not) and once more in stop_mirror;
  // they are written to <file>.faults when they changed. Set before start_mirror.
  void set_fault_source(std::function<std::vector<FaultRuleCounters>()> source) {
    fault_source_ = std::move(source);
  }
  // Writes these counters to <file>.faults now, unless that gives what was last written. Any thread.
  // A rule's counts only grow there: a rule missing from `counters` (removed) keeps its last counts, and
  // a count lower than the last one (the port's counters reset) is added to those.
  void publish_fault_counters(std::span<const FaultRuleCounters> counters);
  // Makes that thread mirror now, changed values or not (the port went down or up: link_downed).
  void poke();
  // Stops that thread (before what qp_source uses goes away). Idempotent.
  void stop_mirror();
  // Stops the thread, folds the values into the device total, removes the file and mirrors sysfs. Call
  // after the engine stopped counting. Idempotent.
  void close();

 private:
  void mirror_loop(uint32_t period_ms);
  std::string ibdev_path_, path_;
  int fd_ = -1;
  void* map_ = nullptr;
  size_t map_len_ = 0;
  uint64_t* values_ = nullptr;
  std::vector<std::string> names_;
  std::function<std::string()> qp_source_;
  std::function<void(uint64_t*)> port_source_;
  std::function<void()> port_state_;
  std::function<std::vector<FaultRuleCounters>()> fault_source_;
  std::mutex faults_mu_;
  std::string faults_written_;  // the text last written to <file>.faults
  struct FaultTally {
    FaultRuleCounters base, last;  // published = base + last
  };
  std::map<uint32_t, FaultTally> fault_tally_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool poked_ = false;
  MirrorCache mirrored_;  // the thread's: what its passes last wrote into the counter files
  uint32_t passes_ = 0;
  std::thread thread_;
};

}  // namespace urxe::provider
