// The progress thread's loop, one function per phase: round, idle look, spin, nap or step aside while the
// app drives, arm and sleep. The rules it follows and their price: provider/progress_policy.h.
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>

#include "provider/internal.h"

namespace urxe::provider {

namespace {

using Round = en::Engine::Round;

// CPU time of the process's threads other than the calling one (the app's; the stats thread's share is
// negligible). Two syscalls: only at idle looks or quiet waits, never per frame.
uint64_t app_cpu_now() {
  timespec p{}, th{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &p);
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &th);
  return static_cast<uint64_t>(p.tv_sec - th.tv_sec) * 1000000000u + static_cast<uint64_t>(p.tv_nsec) -
         static_cast<uint64_t>(th.tv_nsec);
}

// Rule 3: how long to keep polling without work before sleeping. Halved by a spin that found nothing;
// doubled by a sleep that work ended sooner than half the cap. The cap is max_ns, or idle_app_ns while the
// app's threads use under an eighth of a core (blocked: the spin then holds no core the app wants and
// spares the peer's sender a kick per burst). Pausing, not sched_yield: a yield hands the core to a
// spinning app thread for a whole time slice.
class SpinBudget {
 public:
  explicit SpinBudget(bool one_cpu) {
    if (one_cpu) max_ns_ = idle_app_ns_ = 0;  // a spin would only keep the app off the CPU
    if (const char* e = std::getenv("URXE_IDLE_SPIN_US"); e && *e)
      max_ns_ = idle_app_ns_ = std::strtoull(e, nullptr, 10) * 1000;
    cap_ns_ = spin_ns_ = max_ns_;
  }
  uint64_t spin_ns() const { return spin_ns_; }

  // At an idle spell's first look: the cap from the app's CPU time, at most once per kAppCpuEveryNs.
  void cap_from_app_cpu(uint64_t t) {
    if (idle_app_ns_ == max_ns_ || t - app_cpu_at_ < kAppCpuEveryNs) return;
    const uint64_t cpu = app_cpu_now();
    cap_ns_ = app_cpu_at_ && cpu - app_cpu_ns_ < (t - app_cpu_at_) / 8 ? idle_app_ns_ : max_ns_;
    spin_ns_ = std::min(spin_ns_, cap_ns_);
    app_cpu_at_ = t;
    app_cpu_ns_ = cpu;
  }
  // Also at the first look: grow when the last sleep's early frame began a stream (kStreamFrames frames
  // since it woke), not a single exchange (one ACK a few us after the thread slept: spinning for it would
  // take the core of an app spinning on memory).
  void grow_if_stream(const en::Engine& eng) {
    if (grow_on_stream_ && eng.counter(en::Counter::rcvd_pkts) - rcvd_at_wake_ >= kStreamFrames) grow();
    grow_on_stream_ = false;
  }
  void spun_for_nothing() { spin_ns_ = spin_ns_ < 1000 ? 0 : spin_ns_ / 2; }

  // How soon work ended a sleep that began at `slept`. Where the port knows when the frame that woke it was
  // sent (the same-host path's kick), that time: a spin that long would have caught it, so the spin grows
  // at the next look if that was a stream. Else the wake-up time, which includes the wake-up's own
  // latency: shorter than half the cap grows the spin at once.
  void after_sleep(uint64_t slept, uint64_t woke, uint64_t event, const en::Engine& eng) {
    if (event != 0 && event < woke) {
      grow_on_stream_ = std::max(event, slept) - slept < cap_ns_ / 2;
      rcvd_at_wake_ = eng.counter(en::Counter::rcvd_pkts);
    } else if (woke - slept < cap_ns_ / 2) {
      grow();
    }
  }

 private:
  static constexpr uint64_t kIdleAppSpinNs = 100000, kAppCpuEveryNs = 1000000, kStreamFrames = 8;
  void grow() { spin_ns_ = std::min(cap_ns_, 2 * spin_ns_ + 1000); }

  uint64_t max_ns_ = 20000, idle_app_ns_ = kIdleAppSpinNs, cap_ns_ = 0, spin_ns_ = 0;
  uint64_t app_cpu_at_ = 0, app_cpu_ns_ = 0;  // when the app's CPU time was read, and what it was
  bool grow_on_stream_ = false;
  uint64_t rcvd_at_wake_ = 0;  // the engine's received frames when the last sleep ended
};

// Rule 6: whether a wait may leave the port out. The app busy-polled through the last wait (a poll per
// kQuietPollGapNs at least), no CQ is armed (req_notify_cq ends the wait: on_cq_armed), no WRITE was
// placed for kWriteQuietNs (an app may spin on memory for one, which only this thread delivers), and the
// app's threads were on a CPU 3/4 of the time (an app that other processes keep off the CPUs reads frames
// only when it polls again, and its peer would wait as long for ACKs the woken thread gives sooner).
class QuietRule {
 public:
  QuietRule(bool few_cpus, bool has_port_fd) : allowed_(few_cpus && has_port_fd) {}

  // Call once per wait, just before it.
  bool port_unneeded(const ProgressShared& sh, const en::Engine& eng, uint64_t now) {
    const uint64_t polls = sh.app_polls.load(std::memory_order_relaxed), writes = eng.writes_placed();
    const bool drove = polls - polls_at_wait_ >=
                       std::max(ProgressShared::kDrivingPolls, (now - wait_at_ns_) / kQuietPollGapNs);
    polls_at_wait_ = polls;
    wait_at_ns_ = now;
    if (writes != writes_seen_) {
      writes_seen_ = writes;
      write_seen_ns_ = now;
    }
    quiet_ = allowed_ && drove && now - write_seen_ns_ >= kWriteQuietNs &&
             sh.armed_cqs.load(std::memory_order_seq_cst) == 0;
    // The CPU clock of a thread on another CPU advances only at the scheduler's tick, so it is read over
    // windows of kQuietCpuEveryNs at least; until the first closes the app counts as on a CPU.
    if (quiet_ && (cpu_at_ == 0 || now - cpu_at_ >= kQuietCpuEveryNs)) {
      const uint64_t cpu = app_cpu_now();
      if (cpu_at_) app_on_cpu_ = (cpu - cpu_ns_) * 4 >= (now - cpu_at_) * 3;
      cpu_at_ = now;
      cpu_ns_ = cpu;
    }
    quiet_ = quiet_ && app_on_cpu_;
    return quiet_;
  }

  // Rules 6 and 7: whether the steps aside may grow past kNapNs and stay long: the last answer was quiet,
  // no CQ armed or WRITE placed since, and the app answers the ACKs its rounds hold.
  bool long_steps(const ProgressShared& sh, const en::Engine& eng) const {
    return quiet_ && sh.holds_answered.load(std::memory_order_relaxed) &&
           sh.armed_cqs.load(std::memory_order_seq_cst) == 0 && eng.writes_placed() == writes_seen_;
  }

 private:
  static constexpr uint64_t kWriteQuietNs = 50'000'000, kQuietPollGapNs = 50'000,
                            kQuietCpuEveryNs = 50'000'000;
  const bool allowed_;
  uint64_t polls_at_wait_ = 0, wait_at_ns_ = 0, writes_seen_ = 0, write_seen_ns_ = 0;
  uint64_t cpu_at_ = 0, cpu_ns_ = 0;  // the app's CPU time as last read for the rule, and when
  bool app_on_cpu_ = true;            // what that read found
  bool quiet_ = false;                // port_unneeded's last answer
};

int cpu_count() {
  cpu_set_t cpus;
  return ::sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 0;
}

class ProgressLoop {
 public:
  ProgressLoop(ContextState& st, int ncpus)
      : st_(st),
        eng_(*st.engine),
        port_fd_(st.port->rx_wait_fd()),
        one_cpu_(ncpus == 1),
        // On one CPU each wake-up can only take the CPU from the app doing the work: no short steps.
        step_ns_(one_cpu_ ? ProgressShared::kNapNs : ProgressShared::kBusyNapNs),
        spin_(one_cpu_),
        quiet_(ncpus == 1 || ncpus == 2, port_fd_ >= 0),
        busy_nap_ns_(step_ns_) {}

  void run() {
    ::prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);  // short waits as asked, not stretched by 50 us
    while (!st_.stop.load(std::memory_order_relaxed)) {
      if (round()) {
        idle_since_ = 0;
        continue;
      }
      const uint64_t t = st_.clock.now_ns();
      if (idle_since_ == 0) begin_idle(t);
      if (app_in_engine_ || st_.app_driving(idle_polls_)) {
        app_in_engine_ = false;
        while_app_drives();
        idle_since_ = 0;
        continue;
      }
      if (t - idle_since_ < spin_.spin_ns()) {
        for (int i = 0; i < 32; ++i) __builtin_ia32_pause();
        continue;
      }
      spin_.spun_for_nothing();
      // An app thread is in the engine (lock busy): it drives, so nap rather than spin on the lock. Work
      // pending: a round at once.
      if (bool busy = false; eng_.next_deadline_ns(false, &busy) == 0) {
        app_in_engine_ = busy;
        continue;
      }
      arm_and_sleep(t);
      idle_since_ = 0;
    }
  }

 private:
  bool long_steps() const { return quiet_.long_steps(st_, eng_); }

  // A round, unless an app thread holds the engine (rule 8). True when it did work.
  bool round() {
    bool ran = false;
    const bool worked = eng_.try_progress(&ran, Round::thread);
    if (ran && !long_steps()) busy_nap_ns_ = step_ns_;  // the engine was free: steps start short again
    if (worked) {
      ++st_.n_rounds;
      if ((st_.n_rounds & 1023) == 0 && st_.gid_watch.due(st_.clock.now_ns()))
        st_.gid_update();  // never sleeps
    }
    return worked;
  }

  // The first look of an idle spell.
  void begin_idle(uint64_t t) {
    idle_since_ = t;
    spin_.cap_from_app_cpu(t);
    idle_polls_ = st_.app_polls.load(std::memory_order_relaxed);
    spin_.grow_if_stream(eng_);
  }

  // Rule 5: the app drives; step aside if one of its threads is in the engine, else nap.
  void while_app_drives() {
    st_.sleep_mode.store(ProgressShared::kNapping, std::memory_order_seq_cst);
    bool busy = false;
    const uint64_t deadline = eng_.next_deadline_ns(false, &busy), now = st_.clock.now_ns();
    if (busy)
      step_aside();
    else
      nap(deadline, now);
    st_.sleep_mode.store(ProgressShared::kAwake, std::memory_order_relaxed);
  }

  // An app thread is in the engine, doing the work: sleep without the port (its frames are the app's to
  // read; a spin would hold a core the apps need, a wake-up per frame would cost a preemption each), also
  // with a CQ armed (that thread's round signals the channel itself). Found so again and again, the steps
  // double up to kNapNs, or are kQuietNapNs at once with long_steps (reset to the shortest they cost each
  // polling app a timer preemption per step). With a CQ armed, they grow only if the app polled on through
  // the step: an app that arms, polls once more and blocks on its channel needs the thread back soon.
  void step_aside() {
    const uint64_t polls_before = st_.app_polls.load(std::memory_order_relaxed);
    if (!long_steps()) busy_nap_ns_ = std::min(busy_nap_ns_, ProgressShared::kNapNs);
    wait_fds(false, held_ack_step_ns());
    if (eng_.acks_held()) st_.holds_answered.store(false, std::memory_order_relaxed);
    if (st_.armed_cqs.load(std::memory_order_relaxed) == 0 || st_.app_driving(polls_before))
      busy_nap_ns_ =
          long_steps() ? ProgressShared::kQuietNapNs : std::min(2 * busy_nap_ns_, ProgressShared::kNapNs);
  }

  // Rule 7: ACKs the app's round held wait for its next round; an app that left the engine right after
  // must not keep them for a whole step (not on one CPU: the app would send them with its answer).
  uint64_t held_ack_step_ns() const {
    return eng_.acks_held() && !one_cpu_ ? std::min(busy_nap_ns_, en::Engine::kAckHoldNs) : busy_nap_ns_;
  }

  // The app polls and the engine is free: wait until the next deadline, at most kNapNs, or kQuietNapNs
  // without the port (rule 6). A frame ends the nap: an app may spin on memory a peer WRITEs and make no
  // poll that would place it.
  void nap(uint64_t deadline, uint64_t now) {
    const bool with_port = !quiet_.port_unneeded(st_, eng_, now);
    if (!long_steps()) busy_nap_ns_ = step_ns_;
    uint64_t wait_ns = deadline > now ? std::min(deadline - now, with_port ? ProgressShared::kNapNs
                                                                           : ProgressShared::kQuietNapNs)
                                      : 0;
    // A port without a wait fd cannot end the nap: short while a CQ is armed (an app may block on it).
    if (port_fd_ < 0 && st_.armed_cqs.load(std::memory_order_seq_cst) != 0)
      wait_ns = std::min<uint64_t>(wait_ns, 20000);
    if (!wait_ns) return;
    ++st_.n_naps;
    if (with_port) st_.port->rx_wait_arm(true);
    // One more round after arming: a frame between the last round and the arming found no sleeper to wake
    // (the same-host path's rings wake only an armed receiver).
    if (!eng_.try_progress(nullptr, Round::thread)) wait_fds(with_port, wait_ns);
    if (with_port) st_.port->rx_wait_arm(false);
  }

  // Rule 4 (rule 6 without the port: then a nap, the app's polls and posts doing the work meanwhile).
  void arm_and_sleep(uint64_t t) {
    const bool with_port = !quiet_.port_unneeded(st_, eng_, t);
    if (arm(with_port)) return sleep(with_port);
    if (with_port) st_.port->rx_wait_arm(false);
  }

  // Arms the port and says the thread sleeps (posts then wake it), then one last round: false when that
  // found work, or the app drives (the thread is then awake again).
  bool arm(bool with_port) {
    if (with_port) st_.port->rx_wait_arm(true);
    st_.sleep_until.store(0, std::memory_order_relaxed);
    st_.polls_at_sleep.store(st_.app_polls.load(std::memory_order_relaxed), std::memory_order_relaxed);
    st_.sleep_mode.store(with_port ? ProgressShared::kSleeping : ProgressShared::kNapping,
                         std::memory_order_seq_cst);
    if (eng_.try_progress(nullptr, Round::thread) || st_.stop.load() || st_.app_driving(idle_polls_)) {
      st_.sleep_mode.store(ProgressShared::kAwake);
      return false;
    }
    return true;
  }

  // Until the engine's next deadline or a held frame's (FaultPort), at most kMaxSleepNs (posts compare their
  // timers with sleep_until: on_post); without a port fd, at most 20 us. A post whose round ran after the
  // deadline was read either loads sleep_until before this store (0: it wakes the thread) or compares with
  // the value stored here.
  void sleep(bool with_port) {
    const uint64_t now = st_.clock.now_ns();
    const uint64_t deadline =
        std::min({eng_.next_deadline_ns(false), st_.faults.next_due_ns(),
                  now + (with_port ? ProgressShared::kMaxSleepNs : ProgressShared::kQuietNapNs)});
    st_.sleep_until.store(deadline, std::memory_order_seq_cst);
    uint64_t wait_ns = deadline > now ? deadline - now : 0;
    if (port_fd_ < 0) wait_ns = std::min<uint64_t>(wait_ns, 20000);
    wait_fds(with_port, wait_ns);
    ++(with_port ? st_.n_sleeps : st_.n_naps);
    const uint64_t woke = st_.clock.now_ns();
    st_.sleep_until.store(0, std::memory_order_relaxed);
    st_.sleep_mode.store(ProgressShared::kAwake);
    if (with_port) st_.port->rx_wait_arm(false);
    spin_.after_sleep(now, woke, st_.port->rx_wait_event_ns(), eng_);
    // The app polled through the sleep (or woke it so: on_app_poll): it drives. (On one CPU the next idle
    // look would not see it poll: the app cannot run while this thread looks.)
    if (st_.app_driving(st_.polls_at_sleep.load(std::memory_order_relaxed))) app_in_engine_ = true;
  }

  // Waits on the doorbell, the port's rx fd (with_port) and the GID watch's rtnetlink fd.
  void wait_fds(bool with_port, uint64_t wait_ns) {
    timespec ts{static_cast<time_t>(wait_ns / 1000000000u), static_cast<long>(wait_ns % 1000000000u)};
    pollfd fds[3] = {{st_.doorbell_fd, POLLIN, 0},
                     {with_port ? port_fd_ : -1, POLLIN, 0},
                     {st_.gid_watch.fd(), POLLIN, 0}};
    ::ppoll(fds, 3, wait_ns == UINT64_MAX ? nullptr : &ts, nullptr);
    if (fds[1].revents & POLLIN) ++st_.n_wake_port;
    if (fds[2].revents & POLLIN) st_.gid_update();
    if (fds[0].revents & POLLIN) {
      ++st_.n_wake_doorbell;
      uint64_t v;
      [[maybe_unused]] auto r = ::read(st_.doorbell_fd, &v, sizeof v);
    }
  }

  ContextState& st_;
  en::Engine& eng_;
  const int port_fd_;
  const bool one_cpu_;
  const uint64_t step_ns_;  // the first step aside while an app thread is in the engine
  SpinBudget spin_;
  QuietRule quiet_;
  uint64_t busy_nap_ns_;        // the next step aside
  uint64_t idle_since_ = 0;     // when this idle spell began (0: busy)
  uint64_t idle_polls_ = 0;     // app_polls then
  bool app_in_engine_ = false;  // the last look found an app thread in the engine, or polling: it drives
};

}  // namespace

void ContextState::run() {
  ProgressLoop(*this, cpu_count()).run();
}

}  // namespace urxe::provider
