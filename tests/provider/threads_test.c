/* Verbs are thread-safe (libibverbs' promise, which apps such as MPI and UCX rely on): several threads post
 * to the same QP while others poll its CQs and run control verbs. Here 3 threads post 3000 SENDs each to
 * one RC QP (retrying when the send queue is full, keeping unpolled completions under the CQ size), a
 * receiver thread keeps the peer QP's receive queue filled and polls its CQ, another thread polls the send
 * CQ, and one more queries the QPs, the port and the device all the while. Every message must arrive once, in
 * each sender's order, with its payload, and every send must complete once, successfully; all within 60 s.
 * Run by in_netns.sh as root (port loop, both QPs in one context). Usage: threads_test DEVICE */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

enum { kSenders = 3, kPerSender = 3000, kMsg = 16, kRecvBufs = 256, kCqe = 4096, kMaxUnpolled = 2048 };
enum { kTimeoutMs = 60000 };

static struct ibv_qp *qa, *qb;
static struct ibv_cq *scq, *rcq;
static struct ibv_context* ctx;
static struct ibv_mr* mr;
static char* mem; /* [send buffers: kSenders * kPerSender * kMsg][receive buffers: kRecvBufs * kMsg] */
static double deadline;
static atomic_int stop_all;
static atomic_int send_errors, recv_errors, order_errors, dup_completions, control_errors;
static atomic_long send_completed, received, posted;
static unsigned char send_done[kSenders][kPerSender];
static int next_seq[kSenders];

static char* send_buf(int t, int i) {
  return mem + ((size_t)t * kPerSender + (size_t)i) * kMsg;
}
static char* recv_buf(int i) {
  return mem + (size_t)kSenders * kPerSender * kMsg + (size_t)i * kMsg;
}

static void* sender(void* arg) {
  const int t = (int)(intptr_t)arg;
  for (int i = 0; i < kPerSender && !stop_all; ++i) {
    char* b = send_buf(t, i);
    memset(b, 0, kMsg);
    memcpy(b, &t, sizeof t);
    memcpy(b + 4, &i, sizeof i);
    struct ibv_sge sge = {(uintptr_t)b, kMsg, mr->lkey};
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = ((uint64_t)t << 32) | (uint32_t)i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    /* Keep the unpolled completions below the CQ's size, as apps do (perftest counts polled completions):
     * urxe, like rxe, frees a send-queue slot when it writes the completion, so a poller that falls behind
     * would otherwise overflow the CQ (IBV_EVENT_CQ_ERR, which the controller thread reports). */
    while (atomic_load(&posted) - atomic_load(&send_completed) >= kMaxUnpolled && now_ms() < deadline)
      sched_yield();
    for (;;) {
      const int rc = ibv_post_send(qa, &wr, &bad);
      if (rc == 0) {
        atomic_fetch_add(&posted, 1);
        break;
      }
      if (rc != ENOMEM || now_ms() > deadline) { /* full send queue: wait for completions */
        fprintf(stderr, "sender %d: post_send %d: %s\n", t, i, strerror(rc));
        atomic_fetch_add(&send_errors, 1);
        return NULL;
      }
      sched_yield();
    }
  }
  return NULL;
}

static int post_recv(int i) {
  struct ibv_sge sge = {(uintptr_t)recv_buf(i), kMsg, mr->lkey};
  struct ibv_recv_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = (uint64_t)i;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  return ibv_post_recv(qb, &wr, &bad);
}

static void* receiver(void* arg) {
  (void)arg;
  const long want = (long)kSenders * kPerSender;
  while (received < want && !stop_all && now_ms() < deadline) {
    struct ibv_wc wc[16];
    const int n = ibv_poll_cq(rcq, 16, wc);
    if (n < 0) {
      atomic_fetch_add(&recv_errors, 1);
      break;
    }
    for (int k = 0; k < n; ++k) {
      if (wc[k].status != IBV_WC_SUCCESS || wc[k].opcode != IBV_WC_RECV || wc[k].byte_len != kMsg) {
        fprintf(stderr, "receive: status %d opcode %d len %u\n", wc[k].status, wc[k].opcode, wc[k].byte_len);
        atomic_fetch_add(&recv_errors, 1);
        continue;
      }
      const int slot = (int)wc[k].wr_id;
      int t = -1, i = -1;
      memcpy(&t, recv_buf(slot), sizeof t);
      memcpy(&i, recv_buf(slot) + 4, sizeof i);
      if (t < 0 || t >= kSenders || i != next_seq[t]) {
        if (atomic_fetch_add(&order_errors, 1) < 5)
          fprintf(stderr, "receive: sender %d message %d, expected %d\n", t, i,
                  t >= 0 && t < kSenders ? next_seq[t] : -1);
      } else {
        next_seq[t]++;
      }
      atomic_fetch_add(&received, 1);
      if (post_recv(slot)) atomic_fetch_add(&recv_errors, 1);
    }
  }
  return NULL;
}

static void* send_poller(void* arg) {
  (void)arg;
  const long want = (long)kSenders * kPerSender;
  while (send_completed < want && !stop_all && now_ms() < deadline) {
    struct ibv_wc wc[16];
    const int n = ibv_poll_cq(scq, 16, wc);
    for (int k = 0; k < n; ++k) {
      const int t = (int)(wc[k].wr_id >> 32), i = (int)(uint32_t)wc[k].wr_id;
      if (wc[k].status != IBV_WC_SUCCESS || t < 0 || t >= kSenders || i < 0 || i >= kPerSender) {
        fprintf(stderr, "send completion: status %d wr_id %llx\n", wc[k].status,
                (unsigned long long)wc[k].wr_id);
        atomic_fetch_add(&send_errors, 1);
        continue;
      }
      if (send_done[t][i]++) atomic_fetch_add(&dup_completions, 1);
      atomic_fetch_add(&send_completed, 1);
    }
  }
  return NULL;
}

static void* controller(void* arg) {
  (void)arg;
  while (!stop_all) {
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr ia;
    struct ibv_port_attr pa;
    struct ibv_device_attr da;
    if (ibv_query_qp(qa, &a, IBV_QP_STATE, &ia) || a.qp_state != IBV_QPS_RTS ||
        ibv_query_qp(qb, &a, IBV_QP_STATE | IBV_QP_CAP, &ia) || a.qp_state != IBV_QPS_RTS ||
        ibv_query_port(ctx, 1, &pa) || ibv_query_device(ctx, &da))
      atomic_fetch_add(&control_errors, 1);
    struct pollfd pf = {ctx->async_fd, POLLIN, 0};
    if (poll(&pf, 1, 0) == 1) { /* no async event is expected: a CQ overflow or a QP error is a failure */
      struct ibv_async_event ev;
      if (ibv_get_async_event(ctx, &ev) == 0) {
        fprintf(stderr, "async event: %s\n", ibv_event_type_str(ev.event_type));
        atomic_fetch_add(&control_errors, 1);
        ibv_ack_async_event(&ev);
      }
    }
    usleep(500);
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DEVICE\n", argv[0]);
    return 2;
  }
  int num = 0;
  struct ibv_device** list = ibv_get_device_list(&num);
  struct ibv_device* dev = find_device(list, num, argv[1]);
  REQUIRE(dev, "no device %s", argv[1]);
  ctx = ibv_open_device(dev);
  REQUIRE(ctx, "open: %s", strerror(errno));
  union ibv_gid gid;
  REQUIRE(ibv_query_gid(ctx, 1, 1, &gid) == 0, "query_gid");
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  const size_t size = ((size_t)kSenders * kPerSender + kRecvBufs) * kMsg;
  mem = calloc(1, size);
  REQUIRE(pd && mem, "pd, memory");
  mr = ibv_reg_mr(pd, mem, size, IBV_ACCESS_LOCAL_WRITE);
  scq = ibv_create_cq(ctx, kCqe, NULL, NULL, 0);
  rcq = ibv_create_cq(ctx, kCqe, NULL, NULL, 0);
  REQUIRE(mr && scq && rcq, "mr, cqs: %s", strerror(errno));
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof ia);
  ia.send_cq = scq;
  ia.recv_cq = rcq;
  ia.cap.max_send_wr = 128;
  ia.cap.max_recv_wr = kRecvBufs;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  ia.qp_type = IBV_QPT_RC;
  qa = ibv_create_qp(pd, &ia);
  qb = ibv_create_qp(pd, &ia);
  REQUIRE(qa && qb, "create_qp: %s", strerror(errno));
  REQUIRE(!rc_to_init(qa) && !rc_to_init(qb) && !rc_to_rts(qa, qb->qp_num, &gid, 1) &&
              !rc_to_rts(qb, qa->qp_num, &gid, 1),
          "QPs to RTS");
  for (int i = 0; i < kRecvBufs; ++i) REQUIRE(post_recv(i) == 0, "post_recv %d", i);

  deadline = now_ms() + kTimeoutMs;
  const double t0 = now_ms();
  pthread_t th[kSenders + 3];
  for (int t = 0; t < kSenders; ++t) pthread_create(&th[t], NULL, sender, (void*)(intptr_t)t);
  pthread_create(&th[kSenders], NULL, receiver, NULL);
  pthread_create(&th[kSenders + 1], NULL, send_poller, NULL);
  pthread_create(&th[kSenders + 2], NULL, controller, NULL);
  for (int t = 0; t < kSenders + 2; ++t) pthread_join(th[t], NULL);
  stop_all = 1;
  pthread_join(th[kSenders + 2], NULL);
  const double took = now_ms() - t0;

  const long want = (long)kSenders * kPerSender;
  CHECK(received == want, "received %ld of %ld messages", (long)received, want);
  CHECK(send_completed == want, "%ld of %ld sends completed", (long)send_completed, want);
  CHECK(order_errors == 0, "%d messages out of their sender's order", order_errors);
  CHECK(dup_completions == 0, "%d sends completed twice", dup_completions);
  CHECK(send_errors == 0 && recv_errors == 0, "%d send and %d receive errors", send_errors, recv_errors);
  CHECK(control_errors == 0, "%d control verbs failed while the data path ran", control_errors);
  for (int t = 0; t < kSenders; ++t)
    for (int i = 0; i < kPerSender; ++i)
      if (!send_done[t][i]) {
        CHECK(0, "sender %d message %d never completed", t, i);
        t = kSenders;
        break;
      }
  printf(
      "threads: %d senders x %d SENDs on one QP, receiver, send poller and control thread: %ld received, "
      "%ld completed in %.0f ms\n",
      kSenders, kPerSender, (long)received, (long)send_completed, took);

  ibv_destroy_qp(qa);
  ibv_destroy_qp(qb);
  ibv_destroy_cq(scq);
  ibv_destroy_cq(rcq);
  ibv_dereg_mr(mr);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  free(mem);
  return test_result(NULL);
}
