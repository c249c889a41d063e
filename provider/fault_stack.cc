#include "provider/fault_stack.h"

#include "provider/ports.h"

namespace urxe::provider {

void FaultStack::open(engine::Port& port, const engine::Clock& clock, const DeviceConfig& config,
                      const engine::FaultPortConfig& fault) {
  faults_ = std::make_unique<engine::FaultPort>(port, clock, fault);
  faults_->split_rx([this, &config](engine::Port& rx_face) {
    capture_ = open_capture(rx_face, config);
    return capture_.get();
  });
  faults_->set_observer(dynamic_cast<engine::FaultObserver*>(capture_.get()));  // it records drops
}

void FaultStack::follow(const std::string& ibdev_path, CounterFile& counters, Log log) {
  log_ = std::move(log);
  watcher_.init(
      ibdev_path,
      [this](const FaultRuleList& rules) {
        faults_->set_rules(rules);
        if (log_)
          log_(engine::LogLevel::info, "fault rules: " + std::to_string(rules.size()) +
                                           " rule(s) in force (generation " +
                                           std::to_string(watcher_.generation()) + ")");
      },
      [this](const std::string& line) {
        if (log_) log_(engine::LogLevel::warn, line);
      });
  counters.set_fault_source([this] { return this->counters(); });
  watcher_.check();
  watcher_.start();
}

std::vector<FaultRuleCounters> FaultStack::counters() const {
  std::vector<FaultRuleCounters> v;
  if (faults_)
    for (const engine::FaultRuleStats& r : faults_->stats())
      v.push_back({r.id, r.matched, r.hits, r.applied});
  return v;
}

void FaultStack::close() {
  watcher_.stop();
  faults_.reset();
  capture_.reset();
}

}  // namespace urxe::provider
