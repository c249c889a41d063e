/* While apps busy-poll and answer, the progress threads stay out of their way. Two contexts of one device
 * (two engines and progress threads, as two processes would have), a client and a server thread, each
 * polling its CQ without pause and answering every receive with a SEND: ib_send_lat's ping-pong. On two
 * CPUs each wake-up of a progress thread takes a core from one of the polling apps, and those preemptions
 * made ib_send_lat's p99 (docs/performance.md, "The progress thread"). Checked: after the first kSettleMs,
 * the two threads together switch out voluntarily (once per wait) fewer than kMaxWakesPerRoundTrip times
 * per round trip. Per round trip, not per second: the figure must not depend on what else runs. A thread
 * woken by every frame, or stepping aside for less than a round trip, wakes at least once per round trip;
 * while the apps drive, the threads wake about once per quiet nap, far less; when other processes take
 * the apps' CPUs, the threads drive in their place, more often but still well under once per round trip.
 * Bounded: ROUNDS round trips or kRunMs, whichever ends first (the count covers what ran); a ping-pong that
 * stalls for kStallMs fails. Run alone (SERIAL) by in_netns.sh. Usage: progress_quiet_test DEVICE [ROUNDS] */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

enum { kMsg = 64, kSettleMs = 100 };
static const double kMaxWakesPerRoundTrip = 0.5, kRunMs = 10000, kStallMs = 10000;

struct side {
  const char* name;
  int client;
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_mr* mr;
  struct ibv_cq* cq;
  struct ibv_qp* qp;
  char buf[2 * kMsg]; /* [send][receive] */
  int failed;
  int rounds; /* client: round trips made */
};

static int rounds;
static atomic_int stop_all;    /* a side gave up */
static atomic_int client_done; /* the client sent its last request: client_rounds */
static atomic_int client_rounds;

/* The voluntary context switches of this process's urxe-progress threads, summed; -1 if none is found. */
static long progress_switches(void) {
  int tids[8];
  const int n = progress_tids(tids, 8);
  long sum = n ? 0 : -1;
  for (int i = 0; i < n; i++) {
    char path[64], line[128];
    snprintf(path, sizeof path, "/proc/self/task/%d/status", tids[i]);
    FILE* f = fopen(path, "r");
    if (!f) continue;
    while (fgets(line, sizeof line, f))
      if (strncmp(line, "voluntary_ctxt_switches:", 24) == 0) sum += atol(line + 24);
    fclose(f);
  }
  return sum;
}

static int post_recv(struct side* s) {
  return post_recv_buf(s->qp, s->buf + kMsg, kMsg, s->mr->lkey, 2);
}

static int post_send(struct side* s) {
  return post_send_buf(s->qp, s->buf, kMsg, s->mr->lkey, 1);
}

/* Polls without pause until it has seen `want_recvs` receive and `want_sends` send completions in all,
   counting each: 0; 1 when the client is done and `want_recvs` is beyond its last request (server); -1 on
   an error status, when the other side gave up, or after kStallMs without a completion. */
static int poll_until(struct side* s, int* recvs, int* sends, int want_recvs, int want_sends) {
  double stall_end = now_ms() + kStallMs;
  while (*recvs < want_recvs || *sends < want_sends) {
    struct ibv_wc wc;
    const int n = ibv_poll_cq(s->cq, 1, &wc);
    if (n < 0 || (n == 1 && wc.status != IBV_WC_SUCCESS)) {
      fprintf(stderr, "%s: poll %d, status %s\n", s->name, n, n == 1 ? ibv_wc_status_str(wc.status) : "-");
      return -1;
    }
    if (n == 1) {
      ++*(wc.wr_id == 2 ? recvs : sends);
      stall_end = now_ms() + kStallMs;
      continue;
    }
    if (!s->client && atomic_load(&client_done) && want_recvs > atomic_load(&client_rounds) &&
        *sends >= want_sends)
      return 1;
    if (atomic_load_explicit(&stop_all, memory_order_relaxed)) return -1;
    if (now_ms() > stall_end) {
      fprintf(stderr, "%s: no completion for %.0f ms\n", s->name, kStallMs);
      return -1;
    }
  }
  return 0;
}

/* ib_send_lat's turn: the client sends and waits for the answer; the server waits, then answers. The client
   stops after `rounds` round trips or kRunMs; the server answers every request it gets. */
static void* run_side(void* arg) {
  struct side* s = arg;
  const double end = now_ms() + kRunMs;
  int recvs = 0, sends = 0, i = 0, r = 0;
  if (s->client) {
    for (; i < rounds && !s->failed && now_ms() < end; i++)
      s->failed = post_send(s) || poll_until(s, &recvs, &sends, i + 1, 0) || post_recv(s);
    atomic_store(&client_rounds, i);
    atomic_store(&client_done, 1);
    s->rounds = i;
  } else {
    for (; !s->failed && (r = poll_until(s, &recvs, &sends, i + 1, 0)) == 0; i++)
      s->failed = post_recv(s) || post_send(s);
    s->failed |= r < 0;
  }
  if (!s->failed) s->failed = poll_until(s, &recvs, &sends, recvs, i) < 0;
  if (s->failed) {
    fprintf(stderr, "%s: stopped early (%d receives, %d sends completed)\n", s->name, recvs, sends);
    atomic_store(&stop_all, 1);  // the other side stops too, instead of waiting out the time limit
  }
  return NULL;
}

static int open_side(struct side* s, struct ibv_device* dev) {
  s->ctx = ibv_open_device(dev);
  REQUIRE(s->ctx, "%s: open: %s", s->name, strerror(errno));
  s->pd = ibv_alloc_pd(s->ctx);
  REQUIRE(s->pd, "%s: pd: %s", s->name, strerror(errno));
  s->mr = ibv_reg_mr(s->pd, s->buf, sizeof s->buf, IBV_ACCESS_LOCAL_WRITE);
  s->cq = ibv_create_cq(s->ctx, 32, NULL, NULL, 0);
  REQUIRE(s->mr && s->cq, "%s: mr, cq: %s", s->name, strerror(errno));
  struct ibv_qp_init_attr ia = qp_init_attr(s->cq, IBV_QPT_RC, 8);
  s->qp = ibv_create_qp(s->pd, &ia);
  REQUIRE(s->qp && !rc_to_init(s->qp), "%s: QP: %s", s->name, strerror(errno));
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s DEVICE [ROUNDS]\n", argv[0]);
    return 2;
  }
  rounds = argc > 2 ? atoi(argv[2]) : 100000;
  int num = 0;
  struct ibv_device** list = ibv_get_device_list(&num);
  struct ibv_device* dev = find_device(list, num, argv[1]);
  REQUIRE(dev, "no device %s", argv[1]);
  static struct side server = {.name = "server"}, client = {.name = "client", .client = 1};
  if (open_side(&server, dev) || open_side(&client, dev)) return 1;
  REQUIRE(rc_connect_pair(server.ctx, server.qp, client.qp) == 0, "QPs to RTS");
  REQUIRE(post_recv(&server) == 0 && post_recv(&client) == 0, "post_recv");
  REQUIRE(progress_switches() >= 0, "no urxe-progress thread in this process");

  const double t0 = now_ms();
  pthread_t ts, tc;
  pthread_create(&ts, NULL, run_side, &server);
  pthread_create(&tc, NULL, run_side, &client);
  /* Counted from kSettleMs into the ping-pong (the threads' first steps aside are short) to its end. */
  while (now_ms() - t0 < kSettleMs) usleep(1000);
  const long sw1 = progress_switches();
  const double t1 = now_ms();
  pthread_join(ts, NULL);
  pthread_join(tc, NULL);
  const double t2 = now_ms();
  const long wakes = progress_switches() - sw1;
  CHECK(!server.failed && !client.failed, "the ping-pong stopped early");
  REQUIRE(t2 - t1 > kSettleMs, "the ping-pong ended %.0f ms after the count began: too few rounds", t2 - t1);
  const double per_s = (double)wakes * 1000 / (t2 - t1);
  /* The round trips made while the count ran, by the ping-pong's average pace. */
  const double counted = client.rounds * (t2 - t1) / (t2 - t0);
  const double per_rt = counted > 0 ? (double)wakes / counted : 1e9;
  printf(
      "progress_quiet: %d round trips in %.0f ms (%.1f us each); the progress threads switched out %ld "
      "times in its last %.0f ms (%.0f a second, %.3f per round trip)\n",
      client.rounds, t2 - t0, (t2 - t0) * 1000 / (client.rounds ? client.rounds : 1), wakes, t2 - t1, per_s,
      per_rt);
  CHECK(per_rt < kMaxWakesPerRoundTrip,
        "the progress threads woke %.3f times per round trip beside two polling apps (at most %.2f)", per_rt,
        kMaxWakesPerRoundTrip);
  for (int k = 0; k < 2; k++) {
    struct side* s = k ? &client : &server;
    ibv_destroy_qp(s->qp);
    ibv_destroy_cq(s->cq);
    ibv_dereg_mr(s->mr);
    ibv_dealloc_pd(s->pd);
    ibv_close_device(s->ctx);
  }
  ibv_free_device_list(list);
  return test_result(NULL);
}
