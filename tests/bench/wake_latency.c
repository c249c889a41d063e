// How long a sleeping thread takes to run after another core wakes it: the cost urxe's progress thread pays
// for each frame that no application thread is polling for (an app spinning on memory a peer WRITEs, as
// ib_write_lat does, makes no poll that would read it). Measured twice, with the woken thread's core idle
// and with that core busy running a spinning thread (on 2 cores with two spinning apps, the usual case);
// the woken thread asks for a short time slice as urxe's progress thread does (provider/progress.cc).
// The waker (core 1) stamps the clock, writes an eventfd and waits for the answer; the sleeper (core 0)
// reads the eventfd and takes the clock. Prints "wake CORE p50_us=... p90_us=... p99_us=..." per case;
// tools/perf-report puts it beside ib_write_lat. Bounded: ROUNDS wake-ups per case, 100-300 us apart.
// Then the round trip of one cache line between the same two cores, both threads spinning: what any handoff
// through shared memory costs on this machine at least (the same-host path's rings: a frame's slot and
// the lane's head each cross once per message), against which tools/perf-report shows that path's latency.
// Timed in batches of 1000 round trips (a single one is near the clock's own cost); prints
// "line p50_us=... p90_us=... p99_us=..." per round trip over ROUNDS batches.
//   usage: wake_latency [ROUNDS]
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  return pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static int efd, rounds;
static _Atomic uint64_t stamp;  // the waker's clock at its write
static _Atomic int answered;    // rounds the sleeper has taken
static _Atomic int stop_spin;
static double* lat_us;

static void* spinner(void* arg) {
  (void)arg;
  pin(0);
  while (!atomic_load_explicit(&stop_spin, memory_order_relaxed)) {
  }
  return NULL;
}

static void* sleeper(void* arg) {
  (void)arg;
  pin(0);
  // SCHED_OTHER with a 100 us slice (sched_setattr; EEVDF kernels >= 6.12 honour it), as the provider asks.
  struct {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t priority;
    uint64_t runtime, deadline, period;
  } attr = {0};
  attr.size = sizeof attr;
  attr.runtime = 100000;
  syscall(SYS_sched_setattr, 0, &attr, 0u);
  for (int i = 0; i < rounds; i++) {
    uint64_t v;
    if (read(efd, &v, sizeof v) != sizeof v) break;
    lat_us[i] = (double)(now_ns() - atomic_load(&stamp)) / 1000.0;
    atomic_store(&answered, i + 1);
  }
  return NULL;
}

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static int run_case(const char* name, int busy) {
  pthread_t sp, sl;
  atomic_store(&answered, 0);
  atomic_store(&stop_spin, 0);
  if (busy && pthread_create(&sp, NULL, spinner, NULL) != 0) return -1;
  if (pthread_create(&sl, NULL, sleeper, NULL) != 0) return -1;
  pin(1);
  unsigned seed = 1;
  for (int i = 0; i < rounds; i++) {
    struct timespec gap = {0, 100000 + (long)(rand_r(&seed) % 200000)};  // sleeper asleep by then
    nanosleep(&gap, NULL);
    atomic_store(&stamp, now_ns());
    const uint64_t one = 1;
    if (write(efd, &one, sizeof one) != sizeof one) return -1;
    const uint64_t t0 = now_ns();
    while (atomic_load(&answered) <= i) {
      if (now_ns() - t0 > 1000000000u) {  // a second: give up on this machine
        fprintf(stderr, "wake_latency: the sleeper did not run within 1 s\n");
        return -1;
      }
      sched_yield();
    }
  }
  pthread_join(sl, NULL);
  if (busy) {
    atomic_store(&stop_spin, 1);
    pthread_join(sp, NULL);
  }
  qsort(lat_us, (size_t)rounds, sizeof *lat_us, by_value);
  printf("wake %s p50_us=%.1f p90_us=%.1f p99_us=%.1f\n", name, lat_us[rounds / 2], lat_us[rounds * 9 / 10],
         lat_us[rounds * 99 / 100]);
  return 0;
}

static _Atomic uint64_t line_turn;  // the cache line the two threads hand back and forth: even core 1's turn

static void* line_echo(void* arg) {
  const uint64_t n = *(const uint64_t*)arg;
  pin(0);
  for (uint64_t i = 1; i < n; i += 2) {
    while (atomic_load_explicit(&line_turn, memory_order_acquire) != i) {
    }
    atomic_store_explicit(&line_turn, i + 1, memory_order_release);
  }
  return NULL;
}

static int run_line(void) {
  enum { kBatch = 1000 };
  const uint64_t n = 2u * kBatch * (uint64_t)rounds;  // each round trip is two hand-overs
  pthread_t echo;
  atomic_store(&line_turn, 0);
  uint64_t total = n;
  if (pthread_create(&echo, NULL, line_echo, &total) != 0) return -1;
  pin(1);
  for (int b = 0; b < rounds; b++) {
    const uint64_t t0 = now_ns();
    for (int k = 0; k < kBatch; k++) {
      const uint64_t i = 2u * ((uint64_t)b * kBatch + (uint64_t)k);
      atomic_store_explicit(&line_turn, i + 1, memory_order_release);
      while (atomic_load_explicit(&line_turn, memory_order_acquire) != i + 2) {
      }
    }
    lat_us[b] = (double)(now_ns() - t0) / 1000.0 / kBatch;
  }
  pthread_join(echo, NULL);
  qsort(lat_us, (size_t)rounds, sizeof *lat_us, by_value);
  printf("line p50_us=%.3f p90_us=%.3f p99_us=%.3f\n", lat_us[rounds / 2], lat_us[rounds * 9 / 10],
         lat_us[rounds * 99 / 100]);
  return 0;
}

int main(int argc, char** argv) {
  rounds = argc > 1 ? atoi(argv[1]) : 2000;
  if (rounds < 10) {
    fprintf(stderr, "usage: wake_latency [ROUNDS >= 10]\n");
    return 2;
  }
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof cpus, &cpus) != 0 || !CPU_ISSET(0, &cpus) || !CPU_ISSET(1, &cpus)) {
    fprintf(stderr, "wake_latency: needs cores 0 and 1\n");
    return 2;
  }
  efd = eventfd(0, EFD_CLOEXEC);
  lat_us = calloc((size_t)rounds, sizeof *lat_us);
  if (efd < 0 || !lat_us) return 1;
  if (run_case("idle-core", 0) != 0 || run_case("busy-core", 1) != 0 || run_line() != 0) return 1;
  return 0;
}
