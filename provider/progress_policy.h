// The progress policy: who runs a context's engine, and how its progress thread waits. The app's side (a
// poll, a post, arming a CQ) is here, inline, because it runs per packet; the thread's loop is in
// progress_policy.cc, one function per phase. The rules, and what each costs:
//
// 1. Whoever polls drives. An app thread that polls its CQ runs the engine's round itself (app_poll), and
//    the progress thread steps aside. On 2 cores a thread competing with two polling apps turns each
//    packet's wait into a scheduler time slice; the app's poll costs it nothing more than the round.
// 2. Posts make no syscall while the thread is awake or napping: the app's next poll sends what it posted,
//    and every kPostsPerRound post_send calls the post runs a round (a long run of posts would leave the
//    peer idle). Price: a post's frames wait for the app's next poll, or for the 32nd post.
// 3. Spin, then sleep. Without an app driving, the thread polls on for an adaptive budget (SpinBudget: up to
//    20 us, $URXE_IDLE_SPIN_US; 100 us while the app's own threads are blocked; none on one CPU), halved by
//    a spin that found nothing, doubled when work came sooner than half of it. Price: up to that much of a
//    core per idle spell, which on 2 cores may be the core of an app spinning on memory; against a
//    wake-up per frame of a stream without it.
// 4. Asleep on the port's rx fd and the doorbell until the engine's next deadline, at most kMaxSleepNs.
//    A post then runs its round itself (its frames leave at once) and rings the doorbell (an eventfd write)
//    only when that round could not run or left work or a timer due before the thread wakes.
// 5. Nap while the app drives: no spin; a wait of at most kNapNs that a frame ends (an app may spin on
//    memory a peer WRITEs, which only this thread places). An app thread found in the engine makes the
//    thread step aside without the port: kBusyNapNs, doubling to kNapNs while that goes on (kNapNs at once
//    on one CPU). Price: a timer wake-up per step; shorter steps preempt the apps more often, longer ones
//    keep a memory-polling app that just left the engine waiting for its frames.
// 6. Quiet (QuietRule). On at most two CPUs, while the app busy-polls on a CPU, no CQ is armed and no WRITE
//    was placed for a while, the waits leave the port out and last up to kQuietNapNs: otherwise each frame
//    the app reads itself wakes the thread and preempts an app. Price: the first WRITE after a quiet spell,
//    or a frame after the app stopped polling without arming a CQ, waits for that wait's end.
// 7. Held ACKs. An app's round may hold its ACKs for the app's answer (Engine::try_progress): the post that
//    answers sends them; otherwise the thread's step aside ends within Engine::kAckHoldNs (not on one CPU)
//    and a UCMA command sends them (send_held_acks). Long quiet steps last only while the app answers its
//    holds. Price: an unanswered ACK waits up to a step; the peer's send completion with it.
// 8. The thread never blocks on the engine lock: a round it cannot take is an idle one (blocking would cost
//    two context switches per round on 2 cores).
//
// Figures: docs/performance.md, "The progress thread".
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>

#include "engine/engine.h"

namespace urxe::provider {

// What app threads and the progress thread share, and the app's side of the rules (no allocation; a
// syscall only to wake the thread). ContextState (internal.h) is one.
struct ProgressShared {
  enum SleepMode : int { kAwake = 0, kSleeping = 1, kNapping = 2 };
  static constexpr uint64_t kNapNs = 1000000;        // rule 5: a nap's longest wait
  static constexpr uint64_t kBusyNapNs = 50000;      // rule 5: the first step aside
  static constexpr uint64_t kQuietNapNs = 8000000;   // rule 6: a quiet wait's longest
  static constexpr uint64_t kMaxSleepNs = 10000000;  // rule 4: a post's retransmit timer rarely wakes it
  static constexpr uint32_t kPostsPerRound = 32;     // rule 2
  // Polls in one sleep on the port that wake the thread (app_poll), so it sees the app drive.
  static constexpr uint64_t kWakeAfterPolls = 256;
  // Busy-polling: this many poll_cq calls since a point (app_driving). An armed CQ does not stop it
  // counting: a poll of any CQ runs the whole engine, and UCX keeps CQs armed while it busy-polls.
  static constexpr uint64_t kDrivingPolls = 4;

  int doorbell_fd = -1;  // eventfd that wakes a sleeping progress thread
  std::atomic<int> sleep_mode{kAwake};
  std::atomic<uint64_t> app_polls{0};       // poll_cq calls (changes = an app thread is polling)
  std::atomic<uint64_t> polls_at_sleep{0};  // app_polls when the thread last slept on the port
  // The app answered ACKs its round held (a post), and the thread found none unanswered since (rule 7).
  std::atomic<bool> holds_answered{false};
  std::atomic<uint32_t> posts_since_poll{0};  // post_send calls since the last app poll (approximate)
  std::atomic<uint32_t> armed_cqs{0};         // CQs with a channel armed by req_notify_cq (an app may block)
  // When the sleeping thread wakes by itself (0 while not yet known: a post then wakes it).
  std::atomic<uint64_t> sleep_until{0};

  void wake() {
    uint64_t one = 1;
    [[maybe_unused]] auto r = ::write(doorbell_fd, &one, sizeof one);
  }

  bool app_driving(uint64_t since) const {
    return app_polls.load(std::memory_order_relaxed) - since >= kDrivingPolls;
  }

  // An app thread's poll (rule 1): it runs the round. A thread asleep on the port is woken once per sleep
  // by a run of polls, so that it sees the app drive and naps without the port. The round may hold ACKs
  // for the app's answer (rule 7), unless the thread sleeps and would not send them.
  void on_app_poll(engine::Engine& eng) {
    const uint64_t polls = app_polls.load(std::memory_order_relaxed) + 1;
    app_polls.store(polls, std::memory_order_relaxed);
    posts_since_poll.store(0, std::memory_order_relaxed);
    const int mode = sleep_mode.load(std::memory_order_relaxed);
    if (mode == kSleeping && polls - polls_at_sleep.load(std::memory_order_relaxed) == kWakeAfterPolls)
      wake();
    eng.try_progress(nullptr, mode != kSleeping ? engine::Engine::Round::app : engine::Engine::Round::other);
  }

  // req_notify_cq on a CQ with a channel: the app may block on it, so a nap ends now.
  void on_cq_armed(std::atomic<bool>& armed) {
    if (!armed.exchange(true)) armed_cqs.fetch_add(1, std::memory_order_seq_cst);
    if (sleep_mode.load(std::memory_order_seq_cst) == kNapping) wake();
  }
  void on_cq_disarmed(std::atomic<bool>& armed) {
    if (armed.exchange(false)) armed_cqs.fetch_sub(1, std::memory_order_relaxed);
  }

  // The doorbell: the engine rings it on the posting thread once per post call that queued work (rules 2,
  // 4, 7). The queued work (a release store in the engine) must be visible before sleep_mode is read, or
  // both sides can miss each other (a load may pass an earlier store): hence the full fence.
  void on_post(engine::Engine& eng, bool send) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleep_mode.load(std::memory_order_relaxed) == kSleeping) return post_while_asleep(eng);
    if (!send) return;  // (a receive makes no frame)
    if (eng.acks_held()) return post_answers_holds(eng);
    uint32_t n = posts_since_poll.load(std::memory_order_relaxed) + 1;
    if (n >= kPostsPerRound) {
      n = 0;
      eng.try_progress();
    }
    posts_since_poll.store(n, std::memory_order_relaxed);
  }

 private:
  // Rule 7: the app's last poll held ACKs for its answer, and this may be it: it leaves now, the ACKs after.
  void post_answers_holds(engine::Engine& eng) {
    holds_answered.store(true, std::memory_order_relaxed);
    posts_since_poll.store(0, std::memory_order_relaxed);
    eng.try_progress();
  }
  // Rule 4: the thread sleeps on the port; the post runs the round, and wakes it only when needed.
  void post_while_asleep(engine::Engine& eng) {
    bool ran = false;
    eng.try_progress(&ran);
    if (!ran || eng.next_deadline_ns(false) < sleep_until.load(std::memory_order_seq_cst)) wake();
  }
};

}  // namespace urxe::provider
