// The progress thread: who drives the engine (the thread, or an app thread that busy-polls), when the thread
// spins, naps or sleeps, and how posts wake it (ContextState's policy in internal.h). Also the QPN block lock
// that keeps processes sharing a device from handing out the same QPN.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "provider/internal.h"

namespace urxe::provider {

void ContextState::gid_update() {
  for (int n = gid_watch.handle(*engine); n > 0; --n) post_async(1, IBV_EVENT_GID_CHANGE);
  bool up = false;
  while (gid_watch.take_port_change(up)) {
    urxe::provider::log_printf(up ? en::LogLevel::info : en::LogLevel::warn, config.name,
                               "port 1 %s (interface %s %s)", up ? "ACTIVE" : "DOWN", config.netdev.c_str(),
                               up ? "up with carrier" : "down or without carrier");
    post_async(1, up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR);
    counter_file.poke();
  }
}

void ContextState::wait_fds(bool with_port, int port_fd, uint64_t wait_ns) {
  timespec ts{static_cast<time_t>(wait_ns / 1000000000u), static_cast<long>(wait_ns % 1000000000u)};
  pollfd fds[3] = {
      {doorbell_fd, POLLIN, 0}, {with_port ? port_fd : -1, POLLIN, 0}, {gid_watch.fd(), POLLIN, 0}};
  ::ppoll(fds, 3, wait_ns == UINT64_MAX ? nullptr : &ts, nullptr);
  if (fds[1].revents & POLLIN) ++n_wake_port;
  if (fds[2].revents & POLLIN) gid_update();
  if (fds[0].revents & POLLIN) {
    ++n_wake_doorbell;
    uint64_t v;
    [[maybe_unused]] auto r = ::read(doorbell_fd, &v, sizeof v);
  }
}

void ContextState::run() {
  const int port_fd = port->rx_wait_fd();
  // Short sleeps (kBusyNapNs) as asked, not stretched by the default 50 us timer slack.
  ::prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  // How long to keep polling without work before sleeping: adaptive, up to $URXE_IDLE_SPIN_US (default
  // 20 us; 100 us while the app's threads are idle, below). A spin pays off when frames come closer together
  // than a wake-up costs (a stream); it costs when they do not, and on 2 cores it
  // then also holds the core of the application it preempted (ib_write_lat: that app waited out every spin
  // before it could see the data just written). So a spin that ends
  // without work halves the next one, and a sleep that a stream ends sooner than half the maximum doubles it
  // (below). Polling uses the pause instruction, not sched_yield: on a busy machine a yield hands the core to
  // a spinning application thread for a whole time slice. On a single CPU (a 1-vCPU guest, a container pinned
  // to one core) a spin only keeps the app, which is what would bring the work, off the CPU: no spin there.
  // While the app's own threads use (almost) no CPU, blocked in a read or on a channel (ib_write_bw's
  // server, a daemon), the spin may grow to kIdleAppSpinNs: it then holds no core an app of this process
  // wants, and it spares the peer's sender a kick and this thread a wake-up per burst (a WRITE stream
  // between two processes on the same-host path gains a fifth of its rate). An app that spins on memory or
  // busy-polls keeps the shorter cap. Known from the process's and this thread's CPU clocks, at most once per
  // kAppCpuEveryNs, at an idle look (never per frame).
  constexpr uint64_t kIdleAppSpinNs = 100000, kAppCpuEveryNs = 1000000;
  uint64_t max_spin_ns = 20000, idle_app_spin_ns = kIdleAppSpinNs;
  cpu_set_t cpus;
  const int ncpus = ::sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 0;
  const bool one_cpu = ncpus == 1;
  if (one_cpu) max_spin_ns = idle_app_spin_ns = 0;
  if (const char* e = std::getenv("URXE_IDLE_SPIN_US"); e && *e)
    max_spin_ns = idle_app_spin_ns = std::strtoull(e, nullptr, 10) * 1000;
  uint64_t cap_ns = max_spin_ns;  // max_spin_ns, or idle_app_spin_ns while the app's threads are idle
  uint64_t spin_ns = cap_ns;
  uint64_t app_cpu_at = 0, app_cpu_ns = 0;  // when the app's threads' CPU time was read, and what it was
  auto app_cpu_now = [] {
    timespec p{}, th{};
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &p);
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &th);
    return static_cast<uint64_t>(p.tv_sec - th.tv_sec) * 1000000000u + static_cast<uint64_t>(p.tv_nsec) -
           static_cast<uint64_t>(th.tv_nsec);
  };
  // Where the port tells when the frame that woke a sleep was sent, the spin grows when that was soon after
  // the sleep began (a spin would have caught it: `grow_spin`) and the work was a stream, at least
  // kStreamFrames frames before the next idle look (a 64 B WRITE stream from a peer that sends every 16
  // posts: 16 per wake-up), not a single exchange (ib_write_lat: one ACK a few us after the thread slept;
  // spinning for it would take the core of an app spinning on memory).
  constexpr uint64_t kStreamFrames = 8;
  bool grow_spin = false;
  uint64_t rcvd_at_wake = 0;  // the engine's received frames when the last sleep ended
  uint64_t idle_since = 0, idle_polls = 0;
  bool app_in_engine = false;  // the last look found an app thread in the engine, or polling: it drives, nap
  // On one CPU the thread's step aside while the app drives starts at kNapNs, and is not cut short while
  // ACKs wait: each of its wake-ups can only take the CPU from the app that does the work (and would send
  // those ACKs with its answer). In the 1-vCPU TCG guests of tools/rxe-peer, where a wake-up costs far more
  // than the app takes to answer, a shorter step and cap had the thread preempt the apps again and again
  // (docs/performance.md). Natively, each process on a core of its own, it changes nothing.
  const uint64_t step_ns = one_cpu ? kNapNs : kBusyNapNs;
  // With no idle CPU for it, every wake-up of this thread takes a CPU from an app: on one CPU its own; on
  // two, once two processes busy-poll, one of theirs. Asleep on the port, the thread is woken by each frame
  // that arrives while its app busy-polls and would read that frame itself (11,000-17,000 times a second
  // during ib_send_lat). So on at most two CPUs ("quiet"), while the app busy-polled through the thread's
  // last wait, no CQ is armed (req_notify_cq ends the wait: cq_armed) and no WRITE was placed in memory
  // for kWriteQuietNs, the thread waits without the port, for up to kQuietNapNs (a 1 ms timer cost as much
  // as the frames on one CPU). A WRITE is what an app may wait for by spinning on memory (ib_write_lat,
  // MPI's eager protocols), which only this thread can deliver: the first one after a quiet spell, or a
  // frame that comes once the app stopped polling without arming a CQ, waits for the end of that wait.
  // Busy-polling means at least one poll per kQuietPollGapNs since the last wait, and the app's threads on
  // a CPU for 3/4 of the time (read at most every kQuietCpuEveryNs): an app that sleeps between polls, or
  // that other processes keep off the CPUs, reads frames only when it polls again, and its peer would wait
  // as long for ACKs the woken thread gives sooner. Figures: provider/README.md, Runtime.
  const bool few_cpus = ncpus == 1 || ncpus == 2;
  constexpr uint64_t kWriteQuietNs = 50'000'000, kQuietPollGapNs = 50'000, kQuietCpuEveryNs = 50'000'000;
  uint64_t polls_at_wait = 0, wait_at_ns = 0, writes_seen = 0, write_seen_ns = 0;
  uint64_t quiet_cpu_at = 0, quiet_cpu_ns = 0;  // the app's CPU time as last read for the rule, and when
  bool app_on_cpu = true;                       // what that read found
  bool quiet = false;                           // port_unneeded's last answer
  // Whether the next wait may leave the port out; call once per wait, just before it.
  auto port_unneeded = [&](uint64_t now) {
    const uint64_t polls = app_polls.load(std::memory_order_relaxed), writes = engine->writes_placed();
    const bool drove = polls - polls_at_wait >= std::max(kDrivingPolls, (now - wait_at_ns) / kQuietPollGapNs);
    polls_at_wait = polls;
    wait_at_ns = now;
    if (writes != writes_seen) {
      writes_seen = writes;
      write_seen_ns = now;
    }
    quiet = few_cpus && port_fd >= 0 && drove && now - write_seen_ns >= kWriteQuietNs &&
            armed_cqs.load(std::memory_order_seq_cst) == 0;
    // (Two syscalls: only where the rest allows quiet, and not for every frame's wake-up of a thread
    // whose app other processes keep off the CPUs.) Over at least kQuietCpuEveryNs: the CPU clock of a
    // thread running on another CPU advances only at the scheduler's tick (4 ms here), and 1 ms windows
    // read 0 % or over 110 % half the time. Until the first window closes the app counts as on a CPU.
    if (quiet && (quiet_cpu_at == 0 || now - quiet_cpu_at >= kQuietCpuEveryNs)) {
      const uint64_t cpu = app_cpu_now();
      if (quiet_cpu_at) app_on_cpu = (cpu - quiet_cpu_ns) * 4 >= (now - quiet_cpu_at) * 3;
      quiet_cpu_at = now;
      quiet_cpu_ns = cpu;
    }
    quiet = quiet && app_on_cpu;
    return quiet;
  };
  // Whether the steps aside may grow past kNapNs and stay long: port_unneeded's last answer, unless a CQ
  // was armed or a WRITE placed since, and the app answers the ACKs its rounds hold. A held ACK waits for
  // the app's answer or this thread: an app that got its completion and went on to other work leaves it
  // to the end of the step (a UCMA command sends it at once: send_held_acks). So the first unanswered
  // hold the thread finds ends the long steps, and an answered one (doorbell) allows them again.
  auto long_steps = [&] {
    return quiet && holds_answered.load(std::memory_order_relaxed) &&
           armed_cqs.load(std::memory_order_seq_cst) == 0 && engine->writes_placed() == writes_seen;
  };
  uint64_t busy_nap_ns = step_ns;
  // The thread never waits for the engine lock: an app thread holding it (poll_cq's inline round, a post's)
  // is doing the work, and blocking on the mutex would cost two context switches per round on 2 cores (the
  // app's unlock waking this thread, which then preempts the app it was waiting for). A round it cannot take
  // counts as an idle one.
  while (!stop.load(std::memory_order_relaxed)) {
    bool ran = false;
    const bool worked = engine->try_progress(&ran, en::Engine::Round::thread);
    // The engine was free: the next step aside starts short again, unless the app drives with nothing
    // for this thread to watch (quiet), where each step's timer preempts an app (below).
    if (ran && !long_steps()) busy_nap_ns = step_ns;
    if (worked) {
      ++n_rounds;
      if ((n_rounds & 1023) == 0 && gid_watch.due(clock.now_ns())) gid_update();  // busy: never sleeps
      idle_since = 0;
      continue;
    }
    const uint64_t t = clock.now_ns();
    if (idle_since == 0) {
      idle_since = t;
      if (idle_app_spin_ns != max_spin_ns && t - app_cpu_at >= kAppCpuEveryNs) {
        // The other threads of this process (the app's; the stats thread's share is negligible) used
        // less than an eighth of a core since the last look: they are blocked.
        const uint64_t cpu = app_cpu_now();
        cap_ns = app_cpu_at && cpu - app_cpu_ns < (t - app_cpu_at) / 8 ? idle_app_spin_ns : max_spin_ns;
        spin_ns = std::min(spin_ns, cap_ns);
        app_cpu_at = t;
        app_cpu_ns = cpu;
      }
      idle_polls = app_polls.load(std::memory_order_relaxed);
      if (grow_spin && engine->counter(en::Counter::rcvd_pkts) - rcvd_at_wake >= kStreamFrames)
        spin_ns = std::min(cap_ns, 2 * spin_ns + 1000);
      grow_spin = false;
    }
    if (app_in_engine || app_driving(idle_polls)) {
      app_in_engine = false;
      sleep_mode.store(kNapping, std::memory_order_seq_cst);
      bool busy = false;
      const uint64_t deadline = engine->next_deadline_ns(false, &busy), now = clock.now_ns();
      if (busy) {
        // An app thread is in the engine, doing the work: step aside for a moment (sleeping, so that the
        // app has the CPU, also if it was preempted in the engine) without being woken by its frames,
        // which it reads itself; a spin here would hold a core the apps need, and a nap that each frame
        // ends would cost a wake-up per frame (and a local peer a datagram). Also with a CQ armed: that
        // thread's round signals the channel itself. (Looping here instead, as the thread once did when a
        // CQ was armed, held the core of an app preempted in the engine for whole 4 ms ticks: Open MPI
        // over UCX, which arms its CQs, had 8-byte round trips of 2-12 ms, ~1 in 250.)
        // Found there again and again (an app that polls without pause): longer steps, fewer preemptions
        // of the apps by this thread's timer; reset once the engine is found free. While a CQ is armed,
        // only if the app polled on through the step: an app that arms, polls once more and blocks on
        // its channel (rdma-core's pattern) needs this thread back soon, but a CQ armed long ago by an
        // app that goes on polling (UCX: Open MPI's ranks kept one armed all along) must not hold the
        // step at its shortest, whose timer would preempt the ranks every 50 us.
        // With long_steps the next step is kQuietNapNs at once, and stays so also when the thread finds the
        // engine free between steps: reset to the shortest each time, they cost each polling app ~1,000
        // timer preemptions a second, which made ib_send_lat's p99 (provider/README.md, Runtime); doubling
        // up from there, ~10 steps at the start of each run (p99 over 5,000 turns 1.5-3.9x typical, against
        // 1.3-1.5x at once).
        const uint64_t polls_before = app_polls.load(std::memory_order_relaxed);
        if (!long_steps()) busy_nap_ns = std::min(busy_nap_ns, kNapNs);
        // ACKs the app's round held wait for its next round; an app that left the engine right after
        // must not keep them for a whole step (its peer's send completions would wait too).
        wait_fds(
            false, port_fd,
            engine->acks_held() && !one_cpu ? std::min(busy_nap_ns, en::Engine::kAckHoldNs) : busy_nap_ns);
        if (engine->acks_held()) holds_answered.store(false, std::memory_order_relaxed);
        if (armed_cqs.load(std::memory_order_relaxed) == 0 || app_driving(polls_before))
          busy_nap_ns = long_steps() ? kQuietNapNs : std::min(2 * busy_nap_ns, kNapNs);
        sleep_mode.store(kAwake, std::memory_order_relaxed);
        idle_since = 0;
        continue;
      }
      const bool with_port = !port_unneeded(now);
      if (!long_steps()) busy_nap_ns = step_ns;
      uint64_t wait_ns = deadline > now ? std::min(deadline - now, with_port ? kNapNs : kQuietNapNs) : 0;
      // An app that armed a CQ may block on its channel (a req_notify_cq after kNapping wakes the nap:
      // cq_armed). The frames that would complete its work end the nap (below); a port without a wait fd
      // cannot end it, so naps stay short there while a CQ is armed.
      if (port_fd < 0 && armed_cqs.load(std::memory_order_seq_cst) != 0)
        wait_ns = std::min<uint64_t>(wait_ns, 20000);
      if (wait_ns) {
        ++n_naps;
        // A frame still wakes the nap: an app may spin on memory a peer WRITEs (ib_write_lat) and
        // make no poll that would run the engine for it. (Not while port_unneeded.)
        if (with_port) port->rx_wait_arm(true);
        // One more round after arming: a frame that came in between the last round and the arming found
        // no sleeper to wake (the same-host path's rings wake only an armed receiver).
        if (!engine->try_progress(nullptr, en::Engine::Round::thread)) wait_fds(with_port, port_fd, wait_ns);
        if (with_port) port->rx_wait_arm(false);
      }
      sleep_mode.store(kAwake, std::memory_order_relaxed);
      idle_since = 0;
      continue;
    }
    if (t - idle_since < spin_ns) {
      for (int i = 0; i < 32; ++i) __builtin_ia32_pause();
      continue;
    }
    spin_ns = spin_ns < 1000 ? 0 : spin_ns / 2;  // spun for nothing
    if (bool busy = false; engine->next_deadline_ns(false, &busy) == 0) {
      // An app thread is in the engine: it drives, so nap (sleeping, which also lets that thread have
      // this CPU back if it was preempted while in the engine) instead of spinning on the lock. Work
      // pending: a round at once.
      app_in_engine = busy;
      continue;
    }
    // Without the port (port_unneeded) the wait is a nap as while the app drives: at most
    // kQuietNapNs, the app's polls and posts doing the work meanwhile, its req_notify_cq ending it.
    const bool with_port = !port_unneeded(t);
    if (with_port) port->rx_wait_arm(true);
    sleep_until.store(0, std::memory_order_relaxed);
    polls_at_sleep.store(app_polls.load(std::memory_order_relaxed), std::memory_order_relaxed);
    sleep_mode.store(with_port ? kSleeping : kNapping, std::memory_order_seq_cst);
    if (engine->try_progress(nullptr, en::Engine::Round::thread) || stop.load() || app_driving(idle_polls)) {
      sleep_mode.store(kAwake);
      if (with_port) port->rx_wait_arm(false);
      idle_since = 0;
      continue;
    }
    const uint64_t now = clock.now_ns();
    // Sleep until the engine's next deadline, at most kMaxSleepNs (posts compare their timers with it:
    // doorbell); without a port fd, at most 20 us. A post whose round ran after the deadline was read
    // either loads sleep_until before this store (0: it wakes us) or compares with the value stored here.
    const uint64_t deadline =
        std::min(engine->next_deadline_ns(false), now + (with_port ? kMaxSleepNs : kQuietNapNs));
    sleep_until.store(deadline, std::memory_order_seq_cst);
    uint64_t wait_ns = deadline > now ? deadline - now : 0;
    if (port_fd < 0) wait_ns = std::min<uint64_t>(wait_ns, 20000);
    wait_fds(with_port, port_fd, wait_ns);
    ++(with_port ? n_sleeps : n_naps);
    const uint64_t woke = clock.now_ns();
    sleep_until.store(0, std::memory_order_relaxed);
    sleep_mode.store(kAwake);
    if (with_port) port->rx_wait_arm(false);
    // How soon work came. Where the port knows when the frame that woke us was sent (the same-host path's
    // kick), that time: had we spun that long, we would have caught it; the spin then grows at the next
    // idle look if that was a stream (kStreamFrames). Else when we woke, which adds the wake-up's latency
    // (tens of microseconds for an idle vCPU): a sleep shorter than half the spin grows it at once. (On the
    // same-host path the wake-up time alone never grew a 20 us spin again once a pause had shrunk it: a
    // 64 B WRITE stream between two processes stalled on a wake-up every ~90 frames. Through the veth the
    // stream condition cost 64 KiB ib_write_bw a quarter of its rate: there a wake-up that comes that
    // soon is rare and worth a spin.)
    const uint64_t event = port->rx_wait_event_ns();
    if (event != 0 && event < woke) {
      grow_spin = std::max(event, now) - now < cap_ns / 2;
      rcvd_at_wake = engine->counter(en::Counter::rcvd_pkts);
    } else if (woke - now < cap_ns / 2) {
      spin_ns = std::min(cap_ns, 2 * spin_ns + 1000);
    }
    // The app polled through the sleep (or woke it so: app_poll): it drives. (On one CPU the next idle
    // look would not see it poll: the app cannot run while this thread looks.)
    if (app_driving(polls_at_sleep.load(std::memory_order_relaxed))) app_in_engine = true;
    idle_since = 0;
  }
}

// Asks the scheduler (EEVDF, Linux >= 6.12) for a short time slice for the calling thread, so that when it
// wakes for a packet or a doorbell it preempts a busy-polling application thread at once instead of waiting
// out that thread's slice (milliseconds with two ping-pong processes on two cores).
// Unprivileged; ignored by older kernels. `nice`: the one the thread runs at (set_progress_nice), which
// sched_setattr sets too.
void request_short_slice(int nice) {
  struct {
    uint32_t size;
    uint32_t sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime;
    uint64_t sched_deadline;
    uint64_t sched_period;
  } attr{};
  attr.size = sizeof attr;
  attr.sched_policy = SCHED_OTHER;
  // Only a thread that runs under SCHED_OTHER: a real-time or SCHED_BATCH app's thread keeps the policy
  // it inherited.
  if (::sched_getscheduler(0) != SCHED_OTHER) return;
  attr.sched_nice = nice;
  attr.sched_runtime = 100000;  // 100 us: the minimum slice
  if (const char* e = std::getenv("URXE_SLICE_US"); e && *e)
    attr.sched_runtime = std::strtoull(e, nullptr, 10) * 1000;
  if (attr.sched_runtime) ::syscall(SYS_sched_setattr, 0, &attr, 0u);
}

// The thread's nice, relative to its app's: `URXE_PROGRESS_NICE` (default 0, the app's; a negative offset
// needs CAP_SYS_NICE or an RLIMIT_NICE that allows it, else the thread stays at the app's). A thread that
// outranks its app preempts it at once when it wakes, as the kernel's softirq preempts an app for kernel
// rxe; on one CPU, where only it can place a WRITE for an app that spins on memory, -10 was tried as the
// default and not kept (provider/README.md, Runtime: it cost a CQ-polling app's tail more than it gained).
// Returns the nice it runs at.
int set_progress_nice() {
  int offset = 0;
  if (const char* e = std::getenv("URXE_PROGRESS_NICE"); e && *e) offset = std::atoi(e);
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  errno = 0;
  const int app = ::getpriority(PRIO_PROCESS, tid);  // inherited from the thread that opened the device
  if (errno) return 0;
  if (offset == 0) return app;
  ::setpriority(PRIO_PROCESS, tid, std::clamp(app + offset, -20, 19));  // (EPERM: it stays at the app's)
  errno = 0;
  const int now = ::getpriority(PRIO_PROCESS, tid);
  return errno ? app : now;
}

// Claims a block of QPNs for this context (byte i of urxe.qpn locked → QPNs 0x11 + i*max_qp ...), so
// several processes on one device never hand out the same QPN. The lock goes away with the fd.
int claim_qpn_block(const std::string& ibdev_path, uint32_t block_size, int& fd_out) {
  int fd = ::open((ibdev_path + "/urxe.qpn").c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return -1;
  const uint32_t blocks = ((1u << 24) - 0x11) / block_size;
  for (uint32_t i = 0; i < blocks; ++i) {
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = static_cast<off_t>(i);
    fl.l_len = 1;
    if (::fcntl(fd, F_OFD_SETLK, &fl) == 0) {
      fd_out = fd;
      return static_cast<int>(i);
    }
  }
  ::close(fd);
  return -1;
}

}  // namespace urxe::provider
