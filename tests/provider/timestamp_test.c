/* Completion timestamps through libibverbs: the device's clock attributes, ibv_query_rt_values_ex, and CQs
 * created with IBV_WC_EX_WITH_COMPLETION_TIMESTAMP and/or _WALLCLOCK carrying, for RC SEND/RECV and RDMA
 * WRITE, the time each completion was written: after the post and before the poll, by the device clock
 * (ibv_query_rt_values_ex) and by this process's own CLOCK_REALTIME. Other wc_flags: EOPNOTSUPP.
 * Usage: timestamp_test DEVICE */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static uint64_t realtime_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* The device clock now (ibv_query_rt_values_ex), 0 on failure. */
static uint64_t raw_clock(struct ibv_context* ctx) {
  struct ibv_values_ex v = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK};
  if (ibv_query_rt_values_ex(ctx, &v) || v.comp_mask != IBV_VALUES_MASK_RAW_CLOCK) return 0;
  return (uint64_t)v.raw_clock.tv_sec * 1000000000u + (uint64_t)v.raw_clock.tv_nsec;
}

struct Stamp {
  uint64_t wr_id, ts, wall;
  int status, opcode;
};

/* Polls `n` completions from cq (ibv_start_poll / ibv_next_poll), reading the timestamps the CQ has; at
 * most ~5 s. Returns how many. */
static int poll_stamps(struct ibv_cq_ex* cq, uint64_t flags, struct Stamp* out, int n) {
  int got = 0;
  for (int spins = 0; got < n && spins < 50000; spins++) {
    struct ibv_poll_cq_attr pa = {0};
    int rc = ibv_start_poll(cq, &pa);
    if (rc == ENOENT) {
      usleep(100);
      continue;
    }
    if (rc) return got;
    do {
      struct Stamp* s = &out[got++];
      s->wr_id = cq->wr_id;
      s->status = cq->status;
      s->opcode = ibv_wc_read_opcode(cq);
      s->ts = (flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) ? ibv_wc_read_completion_ts(cq) : 0;
      s->wall = (flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)
                    ? ibv_wc_read_completion_wallclock_ns(cq)
                    : 0;
    } while (got < n && ibv_next_poll(cq) == 0);
    ibv_end_poll(cq);
  }
  return got;
}

/* Two RC QPs of one device on a CQ created with `flags`: a SEND/RECV and an RDMA WRITE, three times. */
static int traffic(struct ibv_context* ctx, struct ibv_pd* pd, uint64_t flags) {
  struct ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
  REQUIRE(ch != NULL, "create_comp_channel: %s", strerror(errno));
  struct ibv_cq_init_attr_ex ca = {.cqe = 64, .wc_flags = IBV_WC_STANDARD_FLAGS | flags, .channel = ch};
  struct ibv_cq_ex* cqx = ibv_create_cq_ex(ctx, &ca);
  REQUIRE(cqx != NULL, "create_cq_ex flags 0x%llx: %s", (unsigned long long)flags, strerror(errno));
  CHECK((cqx->read_completion_ts != NULL) == !!(flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP),
        "read_completion_ts present only when asked");
  CHECK((cqx->read_completion_wallclock_ns != NULL) ==
            !!(flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK),
        "read_completion_wallclock_ns present only when asked");
  struct ibv_cq* cq = ibv_cq_ex_to_cq(cqx);
  static char mem[8192];
  struct ibv_mr* mr = ibv_reg_mr(pd, mem, sizeof mem, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  REQUIRE(mr != NULL, "reg_mr");
  struct ibv_qp_init_attr ia = qp_init_attr(cq, IBV_QPT_RC, 16);
  struct ibv_qp* a = ibv_create_qp(pd, &ia);
  struct ibv_qp* b = ibv_create_qp(pd, &ia);
  REQUIRE(a && b, "create_qp");
  REQUIRE(rc_to_init(a) == 0 && rc_to_init(b) == 0 && rc_connect_pair(ctx, a, b) == 0, "connect");
  uint64_t last_ts = 0;
  for (int round = 0; round < 3; round++) {
    const uint64_t wall0 = realtime_ns(), raw0 = raw_clock(ctx);
    CHECK(raw0 != 0, "query_rt_values");
    REQUIRE(post_recv_buf(b, mem + 4096, 256, mr->lkey, 10 + round) == 0, "post_recv");
    REQUIRE(post_send_buf(a, mem, 64, mr->lkey, 20 + round) == 0, "post_send");
    struct ibv_sge sge = {(uintptr_t)mem, 128, mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 30 + round,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = IBV_WR_RDMA_WRITE,
                             .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    wr.wr.rdma.remote_addr = (uintptr_t)mem + 6144;
    wr.wr.rdma.rkey = mr->rkey;
    REQUIRE(ibv_post_send(a, &wr, &bad) == 0, "post WRITE");
    struct Stamp s[3];
    const int got = poll_stamps(cqx, flags, s, 3);
    const uint64_t raw1 = raw_clock(ctx), wall1 = realtime_ns();
    REQUIRE(got == 3, "flags 0x%llx: %d completions of 3", (unsigned long long)flags, got);
    for (int i = 0; i < 3; i++) {
      CHECK(s[i].status == IBV_WC_SUCCESS, "status %d", s[i].status);
      if (flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) {
        CHECK(s[i].ts >= raw0 && s[i].ts <= raw1, "wr %llu: ts %llu outside [%llu, %llu]",
              (unsigned long long)s[i].wr_id, (unsigned long long)s[i].ts, (unsigned long long)raw0,
              (unsigned long long)raw1);
        CHECK(s[i].ts >= last_ts, "ts went back: %llu after %llu", (unsigned long long)s[i].ts,
              (unsigned long long)last_ts);
        last_ts = s[i].ts;
      }
      if (flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK) {
        CHECK(s[i].wall >= wall0 && s[i].wall <= wall1, "wr %llu: wallclock %llu outside [%llu, %llu]",
              (unsigned long long)s[i].wr_id, (unsigned long long)s[i].wall, (unsigned long long)wall0,
              (unsigned long long)wall1);
      }
    }
  }
  /* The time is the completion's, not the poll's: a completion event says the first one was written; the
   * clock read after that event, well before the poll, is not earlier than its timestamp. */
  REQUIRE(ibv_req_notify_cq(cq, 0) == 0, "req_notify_cq");
  REQUIRE(post_recv_buf(b, mem + 4096, 256, mr->lkey, 40) == 0, "post_recv");
  REQUIRE(post_send_buf(a, mem, 64, mr->lkey, 41) == 0, "post_send");
  struct pollfd pfd = {ch->fd, POLLIN, 0};
  REQUIRE(poll(&pfd, 1, 5000) == 1, "no completion event");
  struct ibv_cq* ev_cq;
  void* ev_ctx;
  REQUIRE(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == cq, "get_cq_event");
  ibv_ack_cq_events(cq, 1);
  const uint64_t raw_event = raw_clock(ctx), wall_event = realtime_ns();
  usleep(2000);
  struct Stamp s[2];
  REQUIRE(poll_stamps(cqx, flags, s, 2) == 2, "completions after the event");
  if (flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP)
    CHECK(s[0].ts <= raw_event, "ts %llu is after the event (%llu)", (unsigned long long)s[0].ts,
          (unsigned long long)raw_event);
  if (flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)
    CHECK(s[0].wall <= wall_event, "wallclock %llu is after the event (%llu)", (unsigned long long)s[0].wall,
          (unsigned long long)wall_event);
  CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "destroy_qp");
  CHECK(ibv_dereg_mr(mr) == 0, "dereg_mr");
  CHECK(ibv_destroy_cq(cq) == 0, "destroy_cq");
  CHECK(ibv_destroy_comp_channel(ch) == 0, "destroy_comp_channel");
  return 0;
}

int main(int argc, char** argv) {
  struct ibv_device** list;
  struct ibv_device* dev = device_from_args(argc, argv, &list);
  if (!dev) return argc == 2 ? 1 : 2;
  struct ibv_context* ctx = ibv_open_device(dev);
  REQUIRE(ctx != NULL, "ibv_open_device: %s", strerror(errno));

  /* The clock: ns ticks (1 GHz), 64 bits. */
  struct ibv_device_attr_ex dax;
  REQUIRE(ibv_query_device_ex(ctx, NULL, &dax) == 0, "query_device_ex");
  CHECK(dax.hca_core_clock == 1000000, "hca_core_clock %llu kHz", (unsigned long long)dax.hca_core_clock);
  CHECK(dax.completion_timestamp_mask == UINT64_MAX, "completion_timestamp_mask %llx",
        (unsigned long long)dax.completion_timestamp_mask);

  /* ibv_query_rt_values_ex: the raw clock moves forward; unknown mask bits are refused; what was asked and
   * returned is marked in comp_mask. */
  const uint64_t r0 = raw_clock(ctx);
  usleep(1000);
  const uint64_t r1 = raw_clock(ctx);
  CHECK(r0 && r1 > r0 && r1 - r0 >= 1000000, "raw clock %llu then %llu", (unsigned long long)r0,
        (unsigned long long)r1);
  struct ibv_values_ex v = {.comp_mask = IBV_VALUES_MASK_RESERVED};
  CHECK(ibv_query_rt_values_ex(ctx, &v) == EINVAL, "reserved mask bit");
  v.comp_mask = 0;
  CHECK(ibv_query_rt_values_ex(ctx, &v) == 0 && v.comp_mask == 0, "empty mask");

  /* wc_flags the device cannot honour: EOPNOTSUPP (TM_INFO it can: tm_test.c). */
  const uint64_t unsupported[] = {IBV_WC_EX_WITH_CVLAN, IBV_WC_EX_WITH_FLOW_TAG};
  for (size_t i = 0; i < sizeof unsupported / sizeof *unsupported; i++) {
    struct ibv_cq_init_attr_ex ca = {.cqe = 4, .wc_flags = IBV_WC_STANDARD_FLAGS | unsupported[i]};
    errno = 0;
    CHECK(ibv_create_cq_ex(ctx, &ca) == NULL && errno == EOPNOTSUPP, "wc_flags 0x%llx: errno %d",
          (unsigned long long)unsupported[i], errno);
  }

  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  REQUIRE(pd != NULL, "alloc_pd");
  const uint64_t cases[] = {
      IBV_WC_EX_WITH_COMPLETION_TIMESTAMP, IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
      IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK, 0};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    if (traffic(ctx, pd, cases[i])) break;
  CHECK(ibv_dealloc_pd(pd) == 0, "dealloc_pd");
  CHECK(ibv_close_device(ctx) == 0, "close_device");
  ibv_free_device_list(list);
  return test_result("timestamp_test: all checks passed");
}
