/* librdmacm's error paths over urxe (urxe0 on va 10.77.0.1, vb 10.77.0.2 not urxe; in_netns.sh): the errno
 * and events the kernel gives, and no hang: REJECTED 8 for a port nobody listens on, ADDR_ERROR for an
 * address nobody answers, bind errors, poll() readiness of a non-blocking channel, 1,000 ids, 8 threads
 * waiting on one channel, and the CM service killed under a waiting app (the app gets an error, not a hang).
 * Run twice: the second run starts a new service for the one the first killed. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int failures;
#define CHECK(c, ...)                                      \
  do {                                                     \
    if (!(c)) {                                            \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                        \
      fprintf(stderr, "\n");                               \
      failures++;                                          \
    }                                                      \
  } while (0)

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static struct sockaddr_in sin4(const char* a, uint16_t port) {
  struct sockaddr_in s = {.sin_family = AF_INET, .sin_port = htons(port)};
  inet_pton(AF_INET, a, &s.sin_addr);
  return s;
}

/* The next event within ms milliseconds (the channel is non-blocking), or NULL. */
static struct rdma_cm_event* next_event(struct rdma_event_channel* ch, int ms) {
  struct pollfd p = {.fd = ch->fd, .events = POLLIN};
  struct rdma_cm_event* ev;
  if (poll(&p, 1, ms) != 1) return NULL;
  return rdma_get_cm_event(ch, &ev) == 0 ? ev : NULL;
}

static int bind_errno(struct rdma_event_channel* ch, const char* a, uint16_t port) {
  struct rdma_cm_id* id;
  struct sockaddr_in s = sin4(a, port);
  if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) return -1;
  int r = rdma_bind_addr(id, (struct sockaddr*)&s) ? errno : 0;
  rdma_destroy_id(id);
  return r;
}

struct waiter {
  struct rdma_event_channel* ch;
  int ret, err, done;
};
static void* wait_event(void* arg) {
  struct waiter* w = arg;
  struct rdma_cm_event* ev;
  w->ret = rdma_get_cm_event(w->ch, &ev);
  w->err = errno;
  if (w->ret == 0) rdma_ack_cm_event(ev);
  __atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

static int service_pid(void) {
  char path[4096];
  snprintf(path, sizeof path, "%s/cm", getenv("URXE_RUN_DIR"));
  DIR* d = opendir(path);
  struct dirent* e;
  int pid = 0;
  while (d && (e = readdir(d))) {
    size_t n = strlen(e->d_name);
    if (n > 4 && !strcmp(e->d_name + n - 4, ".pid")) {
      char f[8192];
      snprintf(f, sizeof f, "%s/%s", path, e->d_name);
      FILE* fp = fopen(f, "r");
      if (fp && fscanf(fp, "%d", &pid) != 1) pid = 0;
      if (fp) fclose(fp);
    }
  }
  if (d) closedir(d);
  return pid;
}

int main(void) {
  struct rdma_event_channel* ch = rdma_create_event_channel();
  if (!ch) {
    fprintf(stderr, "FAIL rdma_create_event_channel: %s\n", strerror(errno));
    return 1;
  }
  /* Bind: an address nobody here has, one on an interface without urxe, a port taken. */
  CHECK(bind_errno(ch, "10.99.0.1", 0) == EADDRNOTAVAIL, "bind non-local: %s",
        strerror(bind_errno(ch, "10.99.0.1", 0)));
  /* A loopback address binds without a device, as on kernel 6.1 (libfabric's verbs provider binds
     "localhost" and then uses the interfaces' addresses); the route to one fails with ENODEV. */
  {
    struct rdma_cm_id* lo;
    struct sockaddr_in s = sin4("127.0.0.1", 0);
    CHECK(rdma_create_id(ch, &lo, NULL, RDMA_PS_TCP) == 0 && rdma_bind_addr(lo, (struct sockaddr*)&s) == 0,
          "bind 127.0.0.1: %s", strerror(errno));
    CHECK(lo->verbs == NULL, "bind 127.0.0.1 gave a device");
    rdma_destroy_id(lo);
  }
  CHECK(bind_errno(ch, "10.77.0.2", 0) == ENODEV, "bind vb's address: %s",
        strerror(bind_errno(ch, "10.77.0.2", 0)));
  struct rdma_cm_id* held;
  struct sockaddr_in s = sin4("10.77.0.1", 7471);
  CHECK(rdma_create_id(ch, &held, NULL, RDMA_PS_TCP) == 0 && rdma_bind_addr(held, (struct sockaddr*)&s) == 0,
        "bind 10.77.0.1:7471: %s", strerror(errno));
  CHECK(bind_errno(ch, "10.77.0.1", 7471) == EADDRINUSE, "bind a taken port: %s",
        strerror(bind_errno(ch, "10.77.0.1", 7471)));
  CHECK(bind_errno(ch, "0.0.0.0", 7471) == EADDRINUSE, "wildcard bind of a taken port: %s",
        strerror(bind_errno(ch, "0.0.0.0", 7471)));
  rdma_destroy_id(held);

  /* Non-blocking channel: poll says readable exactly while an event is queued. */
  CHECK(fcntl(ch->fd, F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK");
  struct pollfd p = {.fd = ch->fd, .events = POLLIN};
  CHECK(poll(&p, 1, 0) == 0, "poll with nothing queued: %#x", p.revents);
  struct rdma_cm_id* id;
  struct rdma_cm_event* ev;
  struct sockaddr_in dst = sin4("10.77.0.1", 7472);
  CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "create_id: %s", strerror(errno));
  CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr*)&dst, 1000) == 0, "resolve_addr: %s", strerror(errno));
  CHECK(poll(&p, 1, 1000) == 1 && (p.revents & POLLIN), "poll after resolve_addr: %#x", p.revents);
  CHECK(rdma_get_cm_event(ch, &ev) == 0 && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED, "ADDR_RESOLVED");
  rdma_ack_cm_event(ev);
  CHECK(poll(&p, 1, 0) == 0, "poll after the event was taken: %#x", p.revents);
  CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN, "get_cm_event empty: %s", strerror(errno));

  /* Connect to a port nobody listens on: REJECTED, status 8 (invalid service ID), at once. */
  CHECK(rdma_resolve_route(id, 1000) == 0, "resolve_route: %s", strerror(errno));
  ev = next_event(ch, 1000);
  CHECK(ev && ev->event == RDMA_CM_EVENT_ROUTE_RESOLVED, "ROUTE_RESOLVED");
  if (ev) rdma_ack_cm_event(ev);
  struct rdma_conn_param cp = {
      .qp_num = 0x123, .responder_resources = 1, .initiator_depth = 1, .retry_count = 7};
  double t0 = now_ms();
  CHECK(rdma_connect(id, &cp) == 0, "connect: %s", strerror(errno));
  ev = next_event(ch, 1000);
  CHECK(ev && ev->event == RDMA_CM_EVENT_REJECTED && ev->status == 8, "connect to no listener: %s status %d",
        ev ? rdma_event_str(ev->event) : "nothing in 1 s", ev ? ev->status : 0);
  CHECK(now_ms() - t0 < 1000, "REJECTED after %.0f ms", now_ms() - t0);
  if (ev) rdma_ack_cm_event(ev);
  rdma_destroy_id(id);

  /* Addresses nobody answers: on the link (no ARP reply) within the timeout given, and off any route. */
  struct {
    const char* a;
    int timeout_ms;
  } unreach[] = {{"10.77.0.99", 500}, {"10.123.0.1", 500}};
  for (int i = 0; i < 2; i++) {
    dst = sin4(unreach[i].a, 7472);
    CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "create_id: %s", strerror(errno));
    t0 = now_ms();
    if (rdma_resolve_addr(id, NULL, (struct sockaddr*)&dst, unreach[i].timeout_ms) == 0) {
      ev = next_event(ch, unreach[i].timeout_ms + 1500);
      CHECK(ev && ev->event == RDMA_CM_EVENT_ADDR_ERROR, "resolve %s: %s", unreach[i].a,
            ev ? rdma_event_str(ev->event) : "no event");
      CHECK(now_ms() - t0 < unreach[i].timeout_ms + 1000, "ADDR_ERROR for %s after %.0f ms", unreach[i].a,
            now_ms() - t0);
      if (ev) rdma_ack_cm_event(ev);
    } else {
      /* The kernel fails at once when no route exists; an error then is as good as the event. */
      CHECK(errno == ENETUNREACH || errno == EHOSTUNREACH || errno == ENODEV, "resolve %s: %s", unreach[i].a,
            strerror(errno));
    }
    rdma_destroy_id(id);
  }

  /* A loopback destination resolves to the device with the loopback source; its route is ENODEV. */
  dst = sin4("127.0.0.1", 7472);
  CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "create_id: %s", strerror(errno));
  CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr*)&dst, 1000) == 0, "resolve_addr 127.0.0.1: %s",
        strerror(errno));
  ev = next_event(ch, 2000);
  CHECK(ev && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED, "resolve 127.0.0.1: %s",
        ev ? rdma_event_str(ev->event) : "no event");
  if (ev) rdma_ack_cm_event(ev);
  CHECK(id->verbs != NULL, "resolve 127.0.0.1: no device");
  CHECK(rdma_resolve_route(id, 1000) == -1 && errno == ENODEV, "resolve_route to 127.0.0.1: %s",
        strerror(errno));
  rdma_destroy_id(id);

  /* 1,000 ids made and destroyed in one process. */
  t0 = now_ms();
  for (int i = 0; i < 1000; i++) {
    if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) || rdma_destroy_id(id)) {
      CHECK(0, "id %d: %s", i, strerror(errno));
      break;
    }
  }
  printf("1000 ids in %.0f ms\n", now_ms() - t0);

  /* 8 threads blocked in rdma_get_cm_event on one (blocking) channel; another thread resolves 8 ids. */
  CHECK(fcntl(ch->fd, F_SETFL, 0) == 0, "blocking");
  struct waiter w[8];
  pthread_t t[8];
  struct rdma_cm_id* ids[8];
  for (int i = 0; i < 8; i++) {
    w[i] = (struct waiter){.ch = ch};
    pthread_create(&t[i], NULL, wait_event, &w[i]);
  }
  usleep(200000);
  dst = sin4("10.77.0.1", 7472);
  for (int i = 0; i < 8; i++) {
    CHECK(rdma_create_id(ch, &ids[i], NULL, RDMA_PS_TCP) == 0, "create_id: %s", strerror(errno));
    CHECK(rdma_resolve_addr(ids[i], NULL, (struct sockaddr*)&dst, 1000) == 0, "resolve_addr: %s",
          strerror(errno));
  }
  t0 = now_ms();
  int done = 0;
  while (now_ms() - t0 < 5000 && done < 8) {
    done = 0;
    for (int i = 0; i < 8; i++) done += __atomic_load_n(&w[i].done, __ATOMIC_ACQUIRE);
    usleep(10000);
  }
  CHECK(done == 8, "%d of 8 waiting threads got their event", done);
  for (int i = 0; i < 8; i++) {
    if (done == 8) pthread_join(t[i], NULL);
    CHECK(w[i].ret == 0 || !w[i].done, "thread %d: %s", i, strerror(w[i].err));
  }
  if (done == 8)
    for (int i = 0; i < 8; i++) rdma_destroy_id(ids[i]);

  /* The service killed under an app waiting in rdma_get_cm_event: an error, not a hang; then a new channel
   * starts a new service. */
  int pid = service_pid();
  CHECK(pid > 0, "no CM service pid file");
  struct rdma_event_channel* ch2 = rdma_create_event_channel();
  struct waiter wk = {.ch = ch2};
  pthread_t tk;
  if (pid > 0 && ch2) {
    pthread_create(&tk, NULL, wait_event, &wk);
    usleep(200000);
    kill(pid, SIGKILL);
    t0 = now_ms();
    while (now_ms() - t0 < 15000 && !__atomic_load_n(&wk.done, __ATOMIC_ACQUIRE)) usleep(10000);
    CHECK(wk.done && wk.ret == -1, "rdma_get_cm_event after the service died: %s",
          wk.done ? strerror(wk.err) : "still waiting after 15 s");
    if (wk.done) {
      pthread_join(tk, NULL);
      printf("rdma_get_cm_event after SIGKILL of the service: %s after %.0f ms\n", strerror(wk.err),
             now_ms() - t0);
    }
    /* The same process goes on: its next channel starts a new service, which binds and resolves. */
    struct rdma_event_channel* ch3 = rdma_create_event_channel();
    CHECK(ch3 != NULL, "a new channel after the service died: %s", strerror(errno));
    if (ch3) {
      CHECK(service_pid() > 0 && service_pid() != pid, "no new service (pid %d, the killed one %d)",
            service_pid(), pid);
      CHECK(bind_errno(ch3, "10.77.0.1", 0) == 0, "bind on the new service: %s",
            strerror(bind_errno(ch3, "10.77.0.1", 0)));
      rdma_destroy_event_channel(ch3);
    }
  }
  printf("%s: %d failure(s)\n", failures ? "FAIL" : "ok", failures);
  return failures ? 1 : 0;
}
