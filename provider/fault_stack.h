// A device's fault rules (provider/fault_rules.h) and live capture over one port, wired as every process
// of the device has them: its user (an engine, the CM service's QP1) → FaultPort: transmit rules → capture
// → the fault port's receive face: receive rules → port. So a capture records frames as they went out and
// as the user took them, the frames the rules dropped, made or changed marked ("not sent", "not
// delivered": dpdk/capture_port.h), the same for every process of the device. The rules follow the
// device's rules file (FaultRulesWatcher, its thread urxe-faults); the per-rule counters go to the
// process's counters file (CounterFile's .faults), where `urxe stats` and `urxe fault list` sum them.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/fault_port.h"
#include "provider/device_tree.h"
#include "provider/fault_rules.h"
#include "provider/stats.h"

namespace urxe::provider {

class FaultStack {
 public:
  using Log = std::function<void(engine::LogLevel level, const std::string& line)>;
  FaultStack() = default;
  ~FaultStack() { close(); }
  FaultStack(const FaultStack&) = delete;
  FaultStack& operator=(const FaultStack&) = delete;

  // Builds the fault port over `port` (`fault`: its pool) with the device's capture (open_capture: `config`,
  // $URXE_PCAP) between its two faces, told of each rule's hits. With no rules it passes every frame
  // through. Throws what FaultPort's constructor throws (std::bad_alloc).
  void open(engine::Port& port, const engine::Clock& clock, const DeviceConfig& config,
            const engine::FaultPortConfig& fault = {});
  // What the user sends to and receives from (after open).
  engine::FaultPort& port() const { return *faults_; }
  // When the next held frame (delay, reorder) is due, Clock ns (UINT64_MAX: none): a user that sleeps
  // must make a burst on port() by then.
  uint64_t next_due_ns() const { return faults_ ? faults_->next_due_ns() : UINT64_MAX; }
  // Follows the device's rules: read now, then on the watcher's thread (none for a device without
  // urxe.fault/); `log` gets the "rules in force" line (info) and a rules file that does not parse (warn).
  // The per-rule counters are published through `counters` (its mirror thread, and when it stops): call
  // before counters.start_mirror().
  void follow(const std::string& ibdev_path, CounterFile& counters, Log log);
  // The per-rule counters as of the last burst.
  std::vector<FaultRuleCounters> counters() const;
  // Stops following the rules file (first at close: the watcher hands rules to the fault port).
  void stop_watch() { watcher_.stop(); }
  // Stops the watcher; the fault port gives back its held frames through the capture and the port, then
  // goes with its receive face, then the capture. After the user stopped using port(); before `port` goes.
  // Idempotent.
  void close();

 private:
  std::unique_ptr<engine::Port> capture_;  // between the faces, or null (capture off)
  std::unique_ptr<engine::FaultPort> faults_;
  FaultRulesWatcher watcher_;
  Log log_;
};

}  // namespace urxe::provider
