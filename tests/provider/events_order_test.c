/* The order of completion events in a ping-pong, as apps that block on a channel see it. Two contexts of one
 * device (two engines, two progress threads, as two processes would have), a server and a client thread,
 * each with one completion channel shared by its send and receive CQs, and each taking one event per
 * completion and polling once the CQ it expects, as Debian's perftest 4.5-0.17 does with -e. Every SEND
 * is signaled. A NIC that ACKs at once gives each side its SEND's completion (the peer's ACK) before the
 * answer's receive completion (the peer's SEND, which the peer posts only after it saw ours): perftest
 * relies on that order, and got the other one, and hung, when the engine held ACKs back for the answer in
 * rounds that raised a completion event. Checked: every event names the CQ expected, and its poll finds a
 * completion there. Bounded: 5 s per event, ROUNDS round trips. (With the hold allowed in such rounds,
 * 10,000 round trips failed 6 runs in 6, 2,000 1 in 3.) Usage: events_order_test DEVICE [ROUNDS] */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

enum { kMsg = 64, kEventWaitMs = 5000 };

struct side {
  const char* name;
  int client;
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_mr* mr;
  struct ibv_comp_channel* ch;
  struct ibv_cq *scq, *rcq;
  struct ibv_qp* qp;
  char buf[2 * kMsg]; /* [send][receive] */
  int wrong_cq, empty_poll, bad_status, timeouts;
};

static int rounds;
static atomic_int stop_all; /* a side gave up: the other one stops too, instead of waiting out its timeouts */

static int post_recv(struct side* s) {
  return post_recv_buf(s->qp, s->buf + kMsg, kMsg, s->mr->lkey, 2);
}

static int post_send(struct side* s) {
  return post_send_buf(s->qp, s->buf, kMsg, s->mr->lkey, 1);
}

/* perftest's ctx_notify_events, then its single poll of the CQ it waits for: 0, or -1 when no event came. */
static int wait_for(struct side* s, struct ibv_cq* want, int round) {
  struct pollfd pfd = {s->ch->fd, POLLIN, 0};
  for (double end = now_ms() + kEventWaitMs;;) {
    if (atomic_load(&stop_all)) return -1;
    if (poll(&pfd, 1, 50) == 1) break;
    if (now_ms() > end) {
      s->timeouts++;
      fprintf(stderr, "%s round %d: no event for the %s CQ within %d ms\n", s->name, round,
              want == s->scq ? "send" : "receive", kEventWaitMs);
      return -1;
    }
  }
  struct ibv_cq* ev_cq;
  void* ev_ctx;
  if (ibv_get_cq_event(s->ch, &ev_cq, &ev_ctx) != 0) return -1;
  ibv_ack_cq_events(ev_cq, 1);
  if (ibv_req_notify_cq(ev_cq, 0) != 0) return -1;
  if (ev_cq != want && s->wrong_cq++ < 3)
    fprintf(stderr, "%s round %d: an event for the %s CQ while waiting for its %s completion\n", s->name,
            round, ev_cq == s->scq ? "send" : "receive", want == s->scq ? "send" : "receive");
  struct ibv_wc wc;
  const int n = ibv_poll_cq(want, 1, &wc);
  if (n != 1) {
    if (s->empty_poll++ < 3)
      fprintf(stderr, "%s round %d: poll after the event found %d\n", s->name, round, n);
    return 0; /* as perftest: it goes on (and would then wait for an event that already came) */
  }
  if (wc.status != IBV_WC_SUCCESS) {
    s->bad_status++;
    fprintf(stderr, "%s round %d: %s\n", s->name, round, ibv_wc_status_str(wc.status));
    return -1;
  }
  return 0;
}

static void* run_side(void* arg) {
  struct side* s = arg;
  for (int i = 0; i < rounds; i++) {
    if (s->client) {
      if (post_send(s) || wait_for(s, s->scq, i) || wait_for(s, s->rcq, i) || post_recv(s)) break;
    } else {
      if (wait_for(s, s->rcq, i) || post_recv(s) || post_send(s) || wait_for(s, s->scq, i)) break;
    }
  }
  atomic_store(&stop_all, 1);
  return NULL;
}

static int open_side(struct side* s, struct ibv_device* dev) {
  s->ctx = ibv_open_device(dev);
  REQUIRE(s->ctx, "%s: open: %s", s->name, strerror(errno));
  s->pd = ibv_alloc_pd(s->ctx);
  s->ch = ibv_create_comp_channel(s->ctx);
  REQUIRE(s->pd && s->ch, "%s: pd, channel: %s", s->name, strerror(errno));
  s->mr = ibv_reg_mr(s->pd, s->buf, sizeof s->buf, IBV_ACCESS_LOCAL_WRITE);
  s->scq = ibv_create_cq(s->ctx, 16, NULL, s->ch, 0);
  s->rcq = ibv_create_cq(s->ctx, 16, NULL, s->ch, 0);
  REQUIRE(s->mr && s->scq && s->rcq, "%s: mr, cqs: %s", s->name, strerror(errno));
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof ia);
  ia.send_cq = s->scq;
  ia.recv_cq = s->rcq;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  ia.qp_type = IBV_QPT_RC;
  s->qp = ibv_create_qp(s->pd, &ia);
  REQUIRE(s->qp && !rc_to_init(s->qp), "%s: QP: %s", s->name, strerror(errno));
  REQUIRE(!ibv_req_notify_cq(s->scq, 0) && !ibv_req_notify_cq(s->rcq, 0), "%s: req_notify_cq", s->name);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s DEVICE [ROUNDS]\n", argv[0]);
    return 2;
  }
  rounds = argc > 2 ? atoi(argv[2]) : 2000;
  int num = 0;
  struct ibv_device** list = ibv_get_device_list(&num);
  struct ibv_device* dev = find_device(list, num, argv[1]);
  REQUIRE(dev, "no device %s", argv[1]);
  static struct side server = {.name = "server"}, client = {.name = "client", .client = 1};
  if (open_side(&server, dev) || open_side(&client, dev)) return 1;
  REQUIRE(rc_connect_pair(server.ctx, server.qp, client.qp) == 0, "QPs to RTS");
  REQUIRE(post_recv(&server) == 0 && post_recv(&client) == 0, "post_recv");

  const double t0 = now_ms();
  pthread_t ts, tc;
  pthread_create(&ts, NULL, run_side, &server);
  pthread_create(&tc, NULL, run_side, &client);
  pthread_join(ts, NULL);
  pthread_join(tc, NULL);
  const double took = now_ms() - t0;
  for (int k = 0; k < 2; k++) {
    const struct side* s = k ? &client : &server;
    CHECK(s->wrong_cq == 0, "%s: %d events named the other CQ", s->name, s->wrong_cq);
    CHECK(s->empty_poll == 0, "%s: %d polls after an event found nothing", s->name, s->empty_poll);
    CHECK(s->bad_status == 0 && s->timeouts == 0, "%s: %d completion errors, %d waits timed out", s->name,
          s->bad_status, s->timeouts);
  }
  printf("events_order: %d round trips, one channel per side for both CQs, in %.0f ms\n", rounds, took);
  for (int k = 0; k < 2; k++) {
    struct side* s = k ? &client : &server;
    ibv_destroy_qp(s->qp);
    ibv_destroy_cq(s->scq);
    ibv_destroy_cq(s->rcq);
    ibv_destroy_comp_channel(s->ch);
    ibv_dereg_mr(s->mr);
    ibv_dealloc_pd(s->pd);
    ibv_close_device(s->ctx);
  }
  ibv_free_device_list(list);
  return test_result(NULL);
}
