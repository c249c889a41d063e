// The port's state as rtnetlink reports its interface, message by message, turned into the async events a
// verbs app expects (IBV_EVENT_PORT_ERR, IBV_EVENT_PORT_ACTIVE) in order. Kernel rxe sees every carrier
// change through its netdev notifier; we read link messages in batches (at once when the progress thread
// sleeps, every 100 ms while it is busy), so a quick down-and-up must not cancel out: each message counts,
// and when the kernel folds a flap into one message (linkwatch reports only the final state), its
// carrier_down_count still moved, which stands for a down and an up.
#pragma once
#include <cstdint>

namespace urxe::provider {

class PortTracker {
 public:
  // The state at open: no transition pending.
  void reset(bool up, bool have_down_count, uint32_t down_count) {
    up_ = up;
    have_count_ = have_down_count;
    count_ = down_count;
    pending_ = 0;
  }
  // One link message of the interface (or a fresh query after lost messages): up = IFF_UP and IFF_RUNNING.
  void on_link(bool up, bool have_down_count, uint32_t down_count) {
    const bool count_moved = have_down_count && have_count_ && static_cast<int32_t>(down_count - count_) > 0;
    if (up != up_) {
      up_ = up;
      ++pending_;
    } else if (up && count_moved) {
      pending_ += 2;  // a loss and a recovery we never saw as separate messages
    }
    if (have_down_count) {
      have_count_ = true;
      count_ = down_count;
    }
    // Transitions alternate and end at up_, so only their number matters; a storm of flaps is reported
    // as at most one down and one up.
    while (pending_ > 2) pending_ -= 2;
  }
  // The oldest transition not yet taken: false if none; `up` = the state it enters.
  bool take(bool& up) {
    if (pending_ == 0) return false;
    // With n pending, the first enters the final state when n is odd, the other one when n is even.
    up = (pending_ % 2 == 1) ? up_ : !up_;
    --pending_;
    return true;
  }
  bool up() const { return up_; }

 private:
  bool up_ = false, have_count_ = false;
  uint32_t count_ = 0;
  uint32_t pending_ = 0;
};

}  // namespace urxe::provider
