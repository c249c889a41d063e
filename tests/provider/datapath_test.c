/* The data path as urxe promises it (provider/README.md, "Invariants"): in steady state, on the app's thread,
 * ibv_post_send / ibv_post_recv / ibv_poll_cq allocate nothing (the malloc family is interposed and counted
 * on this thread) and the posts make no syscall (the kernel's raw_syscalls:sys_enter tracepoint, counted
 * for this thread by perf_event_open). The syscalls a post may make while the progress thread sleeps (it
 * then runs the round itself: the port's transmit, rarely the eventfd that wakes the thread) are kept out
 * by running with URXE_IDLE_SPIN_US=1000000, so that the thread does not sleep (CMakeLists.txt). poll_cq
 * runs the engine inline (receive, protocol, transmit), so it may make the port's transmit syscall; its
 * syscalls are printed per frame and bounded (2 per frame). Work: RC SEND 64 B, RDMA WRITE 4 KiB (4 packets
 * at MTU 1024), RDMA READ 4 KiB, FETCH_AND_ADD, and a UD SEND, between QPs of one context, classic verbs and
 * the ibv_wr_* / ibv_start_poll APIs; every completion must succeed and the atomics must count. Run by
 * in_netns.sh as root (port loop by default, or URXE_TEST_PORT). Usage: datapath_test DEVICE */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <linux/perf_event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

/* ---- allocations on this thread (the executable's malloc family wins over libc's for every library) ---- */
extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void* __libc_memalign(size_t, size_t);
extern void __libc_free(void*);
static __thread int counting;
static __thread long n_allocs;
/* The engine's own thread too, while `progress_counting` is on: it runs the per-packet path whenever the
 * app is not polling. Found by name (prctl, which allocates nothing), asked at each call while counting,
 * as the name is set after the thread starts. */
static _Atomic int progress_counting;
static _Atomic long n_progress_allocs;
static void count_alloc(void) {
  if (counting) n_allocs++;
  if (progress_counting) {
    char name[16] = {0};
    if (prctl(PR_GET_NAME, name) == 0 && strcmp(name, "urxe-progress") == 0) n_progress_allocs++;
  }
}
void* malloc(size_t n) {
  count_alloc();
  return __libc_malloc(n);
}
void* calloc(size_t a, size_t b) {
  count_alloc();
  return __libc_calloc(a, b);
}
void* realloc(void* p, size_t n) {
  count_alloc();
  return __libc_realloc(p, n);
}
void* memalign(size_t al, size_t n) {
  count_alloc();
  return __libc_memalign(al, n);
}
void* aligned_alloc(size_t al, size_t n) {
  count_alloc();
  return __libc_memalign(al, n);
}
int posix_memalign(void** p, size_t al, size_t n) {
  count_alloc();
  *p = __libc_memalign(al, n);
  return *p ? 0 : ENOMEM;
}
void free(void* p) {
  __libc_free(p);
}

/* ---- syscalls on this thread ---- */
static int sys_fd = -1;
static uint64_t sys_read_cost; /* what one read of the counter adds (its own syscall) */
static uint64_t sys_count(void) {
  uint64_t v = 0;
  if (sys_fd < 0 || read(sys_fd, &v, sizeof v) != sizeof v) return 0;
  return v;
}
/* The raw_syscalls:sys_enter tracepoint for this thread; mounts tracefs if needed (in_netns.sh gives this
 * process a private mount namespace). Returns a reason when it cannot. */
static const char* open_syscall_counter(void) {
  const char* id_path = "/sys/kernel/tracing/events/raw_syscalls/sys_enter/id";
  FILE* f = fopen(id_path, "r");
  if (!f && mount("nodev", "/sys/kernel/tracing", "tracefs", 0, NULL) == 0) f = fopen(id_path, "r");
  if (!f) return "no tracefs with raw_syscalls:sys_enter";
  unsigned long long id = 0;
  const int ok = fscanf(f, "%llu", &id) == 1;
  fclose(f);
  if (!ok) return "unreadable tracepoint id";
  struct perf_event_attr a;
  memset(&a, 0, sizeof a);
  a.type = PERF_TYPE_TRACEPOINT;
  a.size = sizeof a;
  a.config = id;
  sys_fd = (int)syscall(SYS_perf_event_open, &a, 0 /* this thread */, -1, -1, 0);
  if (sys_fd < 0) return "perf_event_open refused";
  const uint64_t a0 = sys_count(), a1 = sys_count();
  sys_read_cost = a1 - a0;
  return a1 > a0 ? NULL : "the counter does not count";
}

static double now_s(void) {
  return now_ms() / 1e3;
}

/* Measured totals of one phase. */
struct tally {
  uint64_t post_syscalls, poll_syscalls, polls, frames;
};
static struct tally t;

/* Wraps a data-path call: counts its allocations and syscalls. */
#define MEASURE(field, expr)                      \
  __extension__({                                 \
    const uint64_t s0_ = sys_count();             \
    counting = 1;                                 \
    __typeof__(expr) r_ = (expr);                 \
    counting = 0;                                 \
    t.field += sys_count() - s0_ - sys_read_cost; \
    r_;                                           \
  })

static int ud_to_init(struct ibv_qp* qp) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = 0x11111111;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
}

static int ud_ready(struct ibv_qp* qp) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE)) return -1;
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 3;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

/* Polls (busy: no sleep, which would be a syscall) until n completions of cq arrived or 5 s passed, with
 * ibv_poll_cq or, when ex, ibv_start_poll/next_poll/end_poll. Returns how many were successful. */
static int poll_n(struct ibv_cq* cq, struct ibv_cq_ex* cqx, int n) {
  int got = 0, ok = 0;
  const double end = now_s() + 5;
  while (got < n && now_s() < end) {
    t.polls++;
    if (!cqx) {
      struct ibv_wc wc[8];
      const int r = MEASURE(poll_syscalls, ibv_poll_cq(cq, n - got < 8 ? n - got : 8, wc));
      for (int i = 0; i < r; ++i) {
        if (wc[i].status != IBV_WC_SUCCESS)
          fprintf(stderr, "wc status %d opcode %d\n", wc[i].status, wc[i].opcode);
        ok += wc[i].status == IBV_WC_SUCCESS;
      }
      if (r > 0) got += r;
      continue;
    }
    struct ibv_poll_cq_attr pa = {0};
    if (MEASURE(poll_syscalls, ibv_start_poll(cqx, &pa)) != 0) continue;
    for (;;) {
      got++;
      ok += cqx->status == IBV_WC_SUCCESS;
      if (got == n || MEASURE(poll_syscalls, ibv_next_poll(cqx)) != 0) break;
    }
    const uint64_t s0 = sys_count();
    counting = 1;
    ibv_end_poll(cqx);
    counting = 0;
    t.poll_syscalls += sys_count() - s0 - sys_read_cost;
  }
  return ok;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DEVICE\n", argv[0]);
    return 2;
  }
  /* Without the syscall counter the allocation checks still run; the run then ends as a skip that names
   * the part not checked. */
  const char* why = open_syscall_counter();
  if (why) printf("the syscall checks will not run: %s\n", why);
  int num = 0;
  struct ibv_device** list = ibv_get_device_list(&num);
  REQUIRE(list, "ibv_get_device_list: %s", strerror(errno));
  struct ibv_device* dev = find_device(list, num, argv[1]);
  REQUIRE(dev, "no device %s", argv[1]);
  struct ibv_context* ctx = ibv_open_device(dev);
  REQUIRE(ctx, "ibv_open_device: %s", strerror(errno));
  const int sgid = 1; /* the IPv4 GID */
  union ibv_gid gid;
  REQUIRE(ibv_query_gid(ctx, 1, sgid, &gid) == 0, "query_gid");
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  REQUIRE(pd, "alloc_pd");
  enum { kSize = 1 << 16 };
  char* mem = aligned_alloc(4096, kSize);
  REQUIRE(mem, "memory");
  memset(mem, 0, kSize);
  struct ibv_mr* mr = ibv_reg_mr(
      pd, mem, kSize,
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  REQUIRE(mr, "reg_mr");
  struct ibv_cq_init_attr_ex cqa = {.cqe = 256, .wc_flags = IBV_WC_STANDARD_FLAGS};
  struct ibv_cq_ex* scqx = ibv_create_cq_ex(ctx, &cqa);
  struct ibv_cq_ex* rcqx = ibv_create_cq_ex(ctx, &cqa);
  REQUIRE(scqx && rcqx, "create_cq_ex: %s", strerror(errno));
  struct ibv_cq* scq = ibv_cq_ex_to_cq(scqx);
  struct ibv_cq* rcq = ibv_cq_ex_to_cq(rcqx);

  struct ibv_qp_init_attr_ex qa;
  memset(&qa, 0, sizeof qa);
  qa.send_cq = scq;
  qa.recv_cq = rcq;
  qa.cap.max_send_wr = 64;
  qa.cap.max_recv_wr = 64;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  qa.qp_type = IBV_QPT_RC;
  qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  qa.pd = pd;
  qa.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ |
                      IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
  struct ibv_qp* a = ibv_create_qp_ex(ctx, &qa);
  struct ibv_qp* b = ibv_create_qp_ex(ctx, &qa);
  qa.qp_type = IBV_QPT_UD;
  qa.send_ops_flags = IBV_QP_EX_WITH_SEND;
  struct ibv_qp* c = ibv_create_qp_ex(ctx, &qa);
  struct ibv_qp* d = ibv_create_qp_ex(ctx, &qa);
  REQUIRE(a && b && c && d, "create_qp_ex: %s", strerror(errno));
  REQUIRE(!rc_to_init(a) && !rc_to_init(b) && !rc_to_rts(a, b->qp_num, &gid, sgid) &&
              !rc_to_rts(b, a->qp_num, &gid, sgid),
          "RC QPs to RTS");
  REQUIRE(!ud_to_init(c) && !ud_to_init(d) && !ud_ready(c) && !ud_ready(d), "UD QPs to RTS");
  struct ibv_ah_attr aha;
  memset(&aha, 0, sizeof aha);
  aha.is_global = 1;
  aha.grh.dgid = gid;
  aha.grh.sgid_index = sgid;
  aha.grh.hop_limit = 64;
  aha.port_num = 1;
  struct ibv_ah* ah = ibv_create_ah(pd, &aha);
  REQUIRE(ah, "create_ah");
  struct ibv_qp_ex* ax = ibv_qp_to_qp_ex(a);
  struct ibv_qp_ex* cx = ibv_qp_to_qp_ex(c);
  REQUIRE(ax && cx, "qp_ex");

  /* Layout of mem: [0,64) A's SEND source, [4096,8192) B's receive, [8192,12288) WRITE source,
   * [12288,16384) WRITE target, [16384,20480) READ target, 20480 atomic counter, 20488 fetched value,
   * [24576,24640) UD send source, [28672,+40+64) UD receive (GRH + payload). */
  const uint64_t base = (uint64_t)(uintptr_t)mem;
  const uint32_t lk = mr->lkey, rk = mr->rkey;
  uint64_t* counter = (uint64_t*)(mem + 20480);
  uint64_t* fetched = (uint64_t*)(mem + 20488);
  const int iters = 2000;
  uint64_t want_counter = 0;
  for (int phase = 0; phase < 2; ++phase) { /* 0: classic verbs, 1: ibv_wr_* and ibv_start_poll */
    struct tally sum;
    /* Warm-up: at least 200 rounds and 0.3 s, so control work queued at start is done before counting
     * (e.g. the link message DPDK's promiscuous mode causes, which the busy progress thread reads within
     * 100 ms and answers with a GID table sync that allocates: control path, not data path). */
    const double warm_until = now_s() + 0.3;
    double t0 = 0;
    int warm = 1, measured = 0;
    for (int i = 0; warm || measured < iters; ++i) {
      if (warm && i >= 200 && now_s() >= warm_until) {
        warm = 0;
        t0 = now_s();
        memset(&t, 0, sizeof t);
        n_allocs = 0;
        n_progress_allocs = 0;
        progress_counting = 1;
      }
      if (!warm) measured++;
      struct ibv_recv_wr *bad_r = NULL, rwr = {0};
      struct ibv_sge rsge = {base + 4096, 64, lk};
      rwr.sg_list = &rsge;
      rwr.num_sge = 1;
      CHECK(MEASURE(post_syscalls, ibv_post_recv(b, &rwr, &bad_r)) == 0, "post_recv RC");
      struct ibv_sge usge = {base + 28672, 40 + 64, lk};
      rwr.sg_list = &usge;
      CHECK(MEASURE(post_syscalls, ibv_post_recv(d, &rwr, &bad_r)) == 0, "post_recv UD");
      if (phase == 0) {
        struct ibv_send_wr* bad = NULL;
        struct ibv_sge s_send = {base, 64, lk}, s_write = {base + 8192, 4096, lk},
                       s_read = {base + 16384, 4096, lk}, s_atom = {base + 20488, 8, lk},
                       s_ud = {base + 24576, 64, lk};
        struct ibv_send_wr w[4];
        memset(w, 0, sizeof w);
        for (int k = 0; k < 4; ++k) {
          w[k].num_sge = 1;
          w[k].send_flags = IBV_SEND_SIGNALED;
          w[k].next = k < 3 ? &w[k + 1] : NULL;
        }
        w[0].opcode = IBV_WR_SEND, w[0].sg_list = &s_send;
        w[1].opcode = IBV_WR_RDMA_WRITE, w[1].sg_list = &s_write;
        w[1].wr.rdma.remote_addr = base + 12288, w[1].wr.rdma.rkey = rk;
        w[2].opcode = IBV_WR_RDMA_READ, w[2].sg_list = &s_read;
        w[2].wr.rdma.remote_addr = base + 12288, w[2].wr.rdma.rkey = rk;
        w[3].opcode = IBV_WR_ATOMIC_FETCH_AND_ADD, w[3].sg_list = &s_atom;
        w[3].wr.atomic.remote_addr = base + 20480, w[3].wr.atomic.rkey = rk, w[3].wr.atomic.compare_add = 1;
        w[3].send_flags |= IBV_SEND_FENCE; /* fetched value is read after the previous one landed */
        CHECK(MEASURE(post_syscalls, ibv_post_send(a, w, &bad)) == 0, "post_send RC");
        struct ibv_send_wr u = {0};
        u.opcode = IBV_WR_SEND, u.sg_list = &s_ud, u.num_sge = 1, u.send_flags = IBV_SEND_SIGNALED;
        u.wr.ud.ah = ah, u.wr.ud.remote_qpn = d->qp_num, u.wr.ud.remote_qkey = 0x11111111;
        CHECK(MEASURE(post_syscalls, ibv_post_send(c, &u, &bad)) == 0, "post_send UD");
      } else {
        counting = 1;
        const uint64_t s0 = sys_count();
        ibv_wr_start(ax);
        ax->wr_flags = IBV_SEND_SIGNALED;
        ibv_wr_send(ax);
        ibv_wr_set_sge(ax, lk, base, 64);
        ibv_wr_rdma_write(ax, rk, base + 12288);
        ibv_wr_set_sge(ax, lk, base + 8192, 4096);
        ibv_wr_rdma_read(ax, rk, base + 12288);
        ibv_wr_set_sge(ax, lk, base + 16384, 4096);
        ax->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_FENCE;
        ibv_wr_atomic_fetch_add(ax, rk, base + 20480, 1);
        ibv_wr_set_sge(ax, lk, base + 20488, 8);
        const int rc = ibv_wr_complete(ax);
        ibv_wr_start(cx);
        cx->wr_flags = IBV_SEND_SIGNALED;
        ibv_wr_send(cx);
        ibv_wr_set_ud_addr(cx, ah, d->qp_num, 0x11111111);
        ibv_wr_set_sge(cx, lk, base + 24576, 64);
        const int rc2 = ibv_wr_complete(cx);
        t.post_syscalls += sys_count() - s0 - sys_read_cost;
        counting = 0;
        CHECK(rc == 0 && rc2 == 0, "ibv_wr_complete %d %d", rc, rc2);
      }
      /* at least: SEND 1, WRITE 4, READ request 1 + responses 4, atomic 1 + its ACK 1, one ACK for the SEND
       * and WRITE (coalesced or not), UD SEND 1 */
      t.frames += 14;
      const int s_ok = poll_n(scq, phase ? scqx : NULL, 5);
      const int r_ok = poll_n(rcq, phase ? rcqx : NULL, 2);
      CHECK(s_ok == 5 && r_ok == 2, "phase %d iteration %d: %d/5 send and %d/2 receive completions", phase, i,
            s_ok, r_ok);
      CHECK(*fetched == want_counter, "phase %d iteration %d: fetched %llu, want %llu", phase, i,
            (unsigned long long)*fetched, (unsigned long long)want_counter);
      want_counter++;
      if (failures > 10) break;
    }
    progress_counting = 0;
    sum = t;
    const double dt = now_s() - t0;
    printf(
        "phase %s: %d iterations (7 WRs, >= 14 frames each) in %.2f s; progress thread: %ld allocations; "
        "app thread: %ld allocations, %llu syscalls in posts, %llu in %llu polls (%.3f per frame)\n",
        phase ? "ibv_wr_*/start_poll" : "classic", iters, dt, (long)n_progress_allocs, n_allocs,
        (unsigned long long)sum.post_syscalls, (unsigned long long)sum.poll_syscalls,
        (unsigned long long)sum.polls, (double)sum.poll_syscalls / (double)sum.frames);
    CHECK(n_allocs == 0, "phase %d: %ld allocations on the data path", phase, n_allocs);
    CHECK(n_progress_allocs == 0, "phase %d: %ld allocations on the progress thread", phase,
          (long)n_progress_allocs);
    if (!why)
      CHECK(sum.post_syscalls == 0, "phase %d: %llu syscalls in posts", phase,
            (unsigned long long)sum.post_syscalls);
    /* A poll's syscalls are the port's transmit: a kick per burst, and on the socket port one send per
     * frame addressed to the device's own MAC (the QPs here talk to themselves), so at most 2 per frame. */
    if (!why)
      CHECK(sum.poll_syscalls <= 2 * sum.frames, "phase %d: %llu syscalls in polls for %llu frames", phase,
            (unsigned long long)sum.poll_syscalls, (unsigned long long)sum.frames);
    n_allocs = 0;
  }
  CHECK(*counter == want_counter, "counter %llu, want %llu", (unsigned long long)*counter,
        (unsigned long long)want_counter);

  ibv_destroy_ah(ah);
  ibv_destroy_qp(a);
  ibv_destroy_qp(b);
  ibv_destroy_qp(c);
  ibv_destroy_qp(d);
  ibv_destroy_cq(scq);
  ibv_destroy_cq(rcq);
  ibv_dereg_mr(mr);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  free(mem);
  if (why && !failures) {
    printf("SKIP: no allocation on the data path (checked); syscalls not counted: %s\n", why);
    return 77;
  }
  return test_result("data path: no allocation and no syscall in posts, no allocation in polls");
}
