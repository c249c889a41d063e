// Driver: a thread running both loopback engines' rounds, for tests of verbs called from other threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <thread>

#include "tests/sim/loopback.h"

namespace urxe::engine::test {

// Drives both engines on a thread of its own, as the provider's progress thread does, while the test thread
// calls verbs. The loopback's link and clock are touched only by this thread.
class Driver {
 public:
  explicit Driver(Loopback& lb) : lb_(lb), t_([this] { loop(); }) {}
  ~Driver() {
    stop_.store(true);
    t_.join();
  }

 private:
  void loop() {
    while (!stop_.load(std::memory_order_relaxed)) {
      bool did = lb_.node[0].eng->progress();
      did |= lb_.node[1].eng->progress();
      if (did) continue;
      uint64_t next = std::min(lb_.node[0].eng->next_deadline_ns(), lb_.node[1].eng->next_deadline_ns());
      for (auto* p : lb_.link.ports)
        if (!p->inbox.empty()) next = std::min(next, p->inbox.front().at);
      if (next == UINT64_MAX) {
        std::this_thread::yield();  // only posts from the test thread can make work
        continue;
      }
      lb_.link.clock.t = next > lb_.link.clock.t ? next : lb_.link.clock.t + 1;
    }
  }
  Loopback& lb_;
  std::atomic<bool> stop_{false};
  std::thread t_;
};

}  // namespace urxe::engine::test
