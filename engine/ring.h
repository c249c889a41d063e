// The engine's queues: LockedRing (a work or completion queue of preallocated slots, addressed by
// free-running indices), the spin lock its app side takes, and AppSide (that lock, unless the app promised
// one thread).
#pragma once
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace urxe::engine {

// Tells the CPU this is a spin-wait (x86 PAUSE: less power, no memory-order mis-speculation on exit, and
// the sibling hyperthread runs); elsewhere it gives the time slice away.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

class SpinLock {
 public:
  void lock() {
    while (flag_.test_and_set(std::memory_order_acquire))
      while (flag_.test(std::memory_order_relaxed)) cpu_relax();
  }
  void unlock() { flag_.clear(std::memory_order_release); }

 private:
  std::atomic_flag flag_ = ATOMIC_FLAG_INIT;
};

inline uint32_t round_up_pow2(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// A work or completion queue: single-producer/single-consumer ring whose slots are preallocated and addressed
// by index. Indices run freely (mod 2^32). The producer fills slot(prod) then publishes with a release
// store; the consumer reads after an acquire load and frees with a release store of cons. `lock` serialises
// several threads on the application side (posters of a SQ/RQ/SRQ, pollers of a CQ), so either side may be
// the locked one. Not a Boost.Lockfree queue: the engine reads and rewrites WQEs in place by index (go-back-N
// resends from the middle, the completer scans what is outstanding, the SGE pools are laid out by slot),
// and the CQ is resized and cleaned in place (engine/README.md).
template <class T>
struct LockedRing {
  std::vector<T> slots;
  uint32_t mask = 0;
  uint32_t capacity = 0;  // usable entries (≤ slots.size())
  alignas(64) std::atomic<uint32_t> prod{0};
  alignas(64) std::atomic<uint32_t> cons{0};
  SpinLock lock;
  // The app side promised one thread at a time (a thread domain; IBV_CREATE_CQ_ATTR_SINGLE_THREADED): its
  // posts or polls take no lock (AppSide). The engine side still takes it to resize or clean a CQ, which
  // the app then must not do while it polls, as on mlx5.
  bool app_unlocked = false;
  void init(uint32_t cap) {
    capacity = cap;
    const uint32_t n = round_up_pow2(cap < 1 ? 1 : cap);
    slots.assign(n, T{});
    mask = n - 1;
    prod.store(0, std::memory_order_relaxed);
    cons.store(0, std::memory_order_relaxed);
  }
  T& at(uint32_t i) { return slots[i & mask]; }
  const T& at(uint32_t i) const { return slots[i & mask]; }
};

// The app side of a ring for one post or poll: its lock, unless the app promised one thread at a time.
template <class T>
class AppSide {
 public:
  explicit AppSide(LockedRing<T>& r) : lock_(r.app_unlocked ? nullptr : &r.lock) {
    if (lock_) lock_->lock();
  }
  ~AppSide() {
    if (lock_) lock_->unlock();
  }
  AppSide(const AppSide&) = delete;
  AppSide& operator=(const AppSide&) = delete;

 private:
  SpinLock* lock_;
};

}  // namespace urxe::engine
