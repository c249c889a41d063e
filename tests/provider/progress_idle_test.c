/* The progress thread sleeps while an application thread drives the engine, also when a CQ is armed for
 * completion events (UCX keeps CQs armed while it busy-polls others). The process is confined to one CPU,
 * where the thread's wake-ups preempt the polling app, often inside the engine: a thread that then looks
 * again at once instead of stepping aside spins until the scheduler's tick while the app it waits for
 * cannot run (Open MPI over UCX saw round trips of 4-12 ms). The app polls a CQ without pause for 0.5 s,
 * once with no CQ armed and once with another CQ armed; each time the thread (urxe-progress) must use
 * under a tenth of the CPU (it naps, waking every 50 us to 1 ms).
 * The thread runs at its app's nice (this test's: kAppNice; its request for a short slice once reset that
 * to 0) and under its app's scheduling policy; URXE_PROGRESS_NICE=-10 puts it 10 below the app's where the
 * process may raise a priority (root, CAP_SYS_NICE).
 * Run by in_netns.sh (socket port: the thread sleeps on a real wait fd). Usage: progress_idle_test DEVICE */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

enum { kPollMs = 500, kAppNice = 2 };
static const double kMaxShare = 0.1;  // measured: 0.3-0.6 %; looping there: 25-32 %

/* The thread named urxe-progress of this process: its tid, or -1. */
static int progress_tid(void) {
  int tid = -1;
  return progress_tids(&tid, 1) ? tid : -1;
}

/* Waits (5 s at most) for the progress thread of the context just opened (the only one open). */
static int wait_progress_tid(void) {
  int tid = progress_tid();  // the thread names itself once it runs
  for (const double t0 = now_ms(); tid < 0 && now_ms() - t0 < 5000; tid = progress_tid()) sched_yield();
  return tid;
}

/* The thread's nice (field 19 of /proc's stat), once it had 200 ms to change it from the app's. */
static int thread_nice(int tid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
  int nice = 99;
  for (const double t0 = now_ms(); now_ms() - t0 < 200; sched_yield()) {
    FILE* f = fopen(path, "r");
    if (!f) return 99;
    const size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = 0;
    const char* p = strrchr(buf, ')');  // the name may hold spaces; field 3 follows ") "
    if (p) p += 2;
    for (int field = 3; field < 19 && p; field++)
      if ((p = strchr(p, ' '))) p++;
    if (p) nice = atoi(p);
    if (nice != kAppNice) break;
  }
  return nice;
}

/* Opens `dev` (the only context open) and returns it, its progress thread's tid in *tid and, once that
   thread had time to set its scheduling, its nice in *nice; NULL (and why, on stderr) if either is missing.
 */
static struct ibv_context* open_with_thread(struct ibv_device* dev, int* tid, int* nice) {
  struct ibv_context* c = ibv_open_device(dev);
  if (!c) {
    fprintf(stderr, "ibv_open_device: %s\n", strerror(errno));
    return NULL;
  }
  *tid = wait_progress_tid();
  if (*tid <= 0) {
    fprintf(stderr, "no urxe-progress thread in this process\n");
    ibv_close_device(c);
    return NULL;
  }
  *nice = thread_nice(*tid);
  return c;
}

/* Whether this process may lower its nice by 10 (tried in a child). */
static int may_raise_priority(void) {
  const pid_t pid = fork();
  if (pid == 0) _exit(setpriority(PRIO_PROCESS, 0, kAppNice - 10) == 0 ? 0 : 1);
  int st = 0;
  return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* Time the thread has run on a CPU, in ms (schedstat's first field, ns). */
static double cpu_ms(int tid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", tid);
  FILE* f = fopen(path, "r");
  unsigned long long ns = 0;
  if (!f) return -1;
  if (fscanf(f, "%llu", &ns) != 1) ns = 0;
  fclose(f);
  return (double)ns / 1e6;
}

/* Polls cq without pause for kPollMs; returns the progress thread's share of that time. */
static double poll_share(struct ibv_cq* cq, int tid) {
  struct ibv_wc wc;
  const double c0 = cpu_ms(tid), t0 = now_ms();
  long polls = 0;
  while (now_ms() - t0 < kPollMs) {
    (void)ibv_poll_cq(cq, 1, &wc);
    polls++;
  }
  const double share = (cpu_ms(tid) - c0) / (now_ms() - t0);
  printf("  %ld polls; urxe-progress ran %.1f%% of the time\n", polls, share * 100);
  return share;
}

int main(int argc, char** argv) {
  REQUIRE(argc == 2, "usage: progress_idle_test DEVICE");
  unsetenv("URXE_PROGRESS_NICE");
  /* This thread's nice, which the progress thread inherits (a higher one needs no privilege). */
  REQUIRE(setpriority(PRIO_PROCESS, 0, kAppNice) == 0, "setpriority: %s", strerror(errno));
  const int may_raise = may_raise_priority();
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  struct ibv_device* dev = find_device(list, n, argv[1]);
  REQUIRE(dev, "no device %s", argv[1]);
  cpu_set_t all;
  REQUIRE(sched_getaffinity(0, sizeof all, &all) == 0, "sched_getaffinity: %s", strerror(errno));
  int t = -1, nice = 99;
  if (CPU_COUNT(&all) >= 2) {  // (with more CPUs too)
    struct ibv_context* c = open_with_thread(dev, &t, &nice);
    REQUIRE(c, "no context with its progress thread");
    printf("%d CPUs: urxe-progress at nice %d\n", CPU_COUNT(&all), nice);
    CHECK(nice == kAppNice, "with %d CPUs urxe-progress runs at nice %d, not the app's %d", CPU_COUNT(&all),
          nice, kAppNice);
    ibv_close_device(c);
  }
  /* One CPU for the whole process; the progress thread, created by ibv_open_device, inherits it. */
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu(), &one);
  REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0, "sched_setaffinity: %s", strerror(errno));
  int tid = -1;
  struct ibv_context* ctx = open_with_thread(dev, &tid, &nice);
  REQUIRE(ctx, "no context with its progress thread");
  struct ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
  REQUIRE(ch, "ibv_create_comp_channel: %s", strerror(errno));
  struct ibv_cq* armed = ibv_create_cq(ctx, 16, NULL, ch, 0);
  struct ibv_cq* polled = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  REQUIRE(armed && polled, "ibv_create_cq: %s", strerror(errno));
  REQUIRE(cpu_ms(tid) >= 0, "no schedstat for thread %d", tid);
  printf("one CPU: urxe-progress at nice %d\n", nice);
  CHECK(nice == kAppNice, "on one CPU urxe-progress runs at nice %d, not the app's %d", nice, kAppNice);

  printf("no CQ armed:\n");
  const double idle = poll_share(polled, tid);
  CHECK(idle < kMaxShare, "urxe-progress took %.0f%% of the CPU beside a polling app", idle * 100);
  REQUIRE(ibv_req_notify_cq(armed, 0) == 0, "ibv_req_notify_cq");
  printf("another CQ armed:\n");
  const double with_armed = poll_share(polled, tid);
  CHECK(with_armed < kMaxShare, "urxe-progress took %.0f%% of the CPU beside a polling app, a CQ armed",
        with_armed * 100);

  ibv_destroy_cq(polled);
  ibv_destroy_cq(armed);
  ibv_destroy_comp_channel(ch);
  ibv_close_device(ctx);

  setenv("URXE_PROGRESS_NICE", "-10", 1);  // the user's choice: the thread outranks the app
  int raised = 99;
  struct ibv_context* c = open_with_thread(dev, &t, &raised);
  REQUIRE(c, "no context with its progress thread");
  printf("URXE_PROGRESS_NICE=-10: urxe-progress at nice %d (this process %s raise a priority)\n", raised,
         may_raise ? "may" : "may not");
  const int want = may_raise ? kAppNice - 10 : kAppNice;
  CHECK(raised == want, "with URXE_PROGRESS_NICE=-10 urxe-progress runs at nice %d, not %d", raised, want);
  ibv_close_device(c);
  unsetenv("URXE_PROGRESS_NICE");

  /* An app that chose another policy (here SCHED_BATCH, which needs no privilege): the thread keeps it. */
  const struct sched_param none = {0};
  REQUIRE(sched_setscheduler(0, SCHED_BATCH, &none) == 0, "sched_setscheduler: %s", strerror(errno));
  c = open_with_thread(dev, &t, &nice);
  REQUIRE(c, "no context with its progress thread");
  const int policy = sched_getscheduler(t);
  printf("app under SCHED_BATCH: urxe-progress under policy %d\n", policy);
  CHECK(policy == SCHED_BATCH, "urxe-progress under policy %d, not the app's SCHED_BATCH (%d)", policy,
        SCHED_BATCH);
  ibv_close_device(c);
  ibv_free_device_list(list);
  printf("%s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
