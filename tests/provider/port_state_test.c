/* The port follows its interface while an app has the device open, as with kernel rxe: losing the carrier
 * (the veth peer goes down) or taking the interface down raises IBV_EVENT_PORT_ERR (port 1) on the async fd
 * and ibv_query_port says IBV_PORT_DOWN; back up, IBV_EVENT_PORT_ACTIVE and IBV_PORT_ACTIVE, also for a flap
 * of microseconds (both events, in order). Each loss
 * counts once in link_downed, in sysfs hw_counters and `urxe stats --json`, also after the app closed the
 * device and for losses while no app has it open. Run by in_netns.sh as root (it changes va and vb).
 * Usage: port_state_test DEVICE NETDEV PEER_NETDEV */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static int ip_link(const char* dev, const char* state) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "ip link set %s %s", dev, state);
  return system(cmd);
}

/* The next port event within timeout_ms (GID changes, which an interface going down may cause, are
 * skipped): its type, or -1 when none came. */
static int port_event(struct ibv_context* ctx, int timeout_ms) {
  const double end = now_ms() + timeout_ms;
  for (;;) {
    const int left = (int)(end - now_ms());
    struct pollfd p = {ctx->async_fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, left) <= 0) return -1;
    struct ibv_async_event ev;
    if (ibv_get_async_event(ctx, &ev) != 0) return -1;
    const int type = ev.event_type;
    const int port = ev.element.port_num;
    ibv_ack_async_event(&ev);
    if (type == IBV_EVENT_GID_CHANGE) continue;
    if (port != 1) fprintf(stderr, "event %d names port %d\n", type, port);
    return port == 1 ? type : -2;
  }
}

static int port_state(struct ibv_context* ctx) {
  struct ibv_port_attr pa;
  if (ibv_query_port(ctx, 1, &pa) != 0) return -1;
  return pa.state;
}

/* link_downed as the sysfs mirror shows it (-1: unreadable), waiting up to timeout_ms for `want`. */
static long sysfs_link_downed(const char* ibdev_path, long want, int timeout_ms) {
  char path[512];
  snprintf(path, sizeof path, "%s/ports/1/hw_counters/link_downed", ibdev_path);
  const double end = now_ms() + timeout_ms;
  long v = -1;
  for (;;) {
    FILE* f = fopen(path, "r");
    v = -1;
    if (f) {
      if (fscanf(f, "%ld", &v) != 1) v = -1;
      fclose(f);
    }
    if (v == want || now_ms() > end) return v;
    usleep(20 * 1000);
  }
}

/* link_downed as `urxe stats DEVICE --json` prints it (-1: no such key or the command failed). */
static long stats_link_downed(const char* dev) {
  const char* devctl = getenv("URXE_DEVCTL");
  if (!devctl) return -1;
  char cmd[512];
  snprintf(cmd, sizeof cmd, "\"%s\" stats %s --json", devctl, dev);
  FILE* p = popen(cmd, "r");
  if (!p) return -1;
  static char out[65536];
  const size_t n = fread(out, 1, sizeof out - 1, p);
  out[n] = 0;
  if (pclose(p) != 0) return -1;
  const char* k = strstr(out, "\"link_downed\":");
  return k ? strtol(k + strlen("\"link_downed\":"), NULL, 10) : -1;
}

/* The same, asked until it is `want` or timeout_ms passed. */
static long stats_link_downed_wait(const char* dev, long want, int timeout_ms) {
  const double end = now_ms() + timeout_ms;
  for (;;) {
    const long v = stats_link_downed(dev);
    if (v == want || now_ms() > end) return v;
    usleep(20 * 1000);
  }
}

/* Takes the port down by `down_dev` and back up; checks events, states and link_downed == expect after. */
static void flap(struct ibv_context* ctx, const char* dev, const char* down_dev, long expect) {
  const char* ibdev_path = ctx->device->ibdev_path;
  CHECK(ip_link(down_dev, "down") == 0, "ip link set %s down", down_dev);
  int ev = port_event(ctx, 3000);
  CHECK(ev == IBV_EVENT_PORT_ERR, "%s down: event %d, want IBV_EVENT_PORT_ERR", down_dev, ev);
  CHECK(port_state(ctx) == IBV_PORT_DOWN, "%s down: port state %d", down_dev, port_state(ctx));
  long v = sysfs_link_downed(ibdev_path, expect, 3000);
  CHECK(v == expect, "%s down: sysfs link_downed %ld, want %ld", down_dev, v, expect);
  v = stats_link_downed(dev);
  CHECK(v == expect, "%s down: urxe stats link_downed %ld, want %ld", down_dev, v, expect);
  CHECK(ip_link(down_dev, "up") == 0, "ip link set %s up", down_dev);
  ev = port_event(ctx, 3000);
  CHECK(ev == IBV_EVENT_PORT_ACTIVE, "%s up: event %d, want IBV_EVENT_PORT_ACTIVE", down_dev, ev);
  CHECK(port_state(ctx) == IBV_PORT_ACTIVE, "%s up: port state %d", down_dev, port_state(ctx));
  v = stats_link_downed(dev);
  CHECK(v == expect, "%s up again: urxe stats link_downed %ld, want %ld", down_dev, v, expect);
  ev = port_event(ctx, 300);
  CHECK(ev == -1, "%s flap: one more event %d", down_dev, ev);
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s DEVICE NETDEV PEER_NETDEV\n", argv[0]);
    return 2;
  }
  const char *dev = argv[1], *netdev = argv[2], *peer = argv[3];
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  REQUIRE(list, "ibv_get_device_list: %s", strerror(errno));
  struct ibv_device* d = find_device(list, n, dev);
  REQUIRE(d, "no device %s", dev);
  char ibdev_path[512];
  snprintf(ibdev_path, sizeof ibdev_path, "%s", d->ibdev_path);
  struct ibv_context* ctx = ibv_open_device(d);
  REQUIRE(ctx, "ibv_open_device: %s", strerror(errno));

  CHECK(port_state(ctx) == IBV_PORT_ACTIVE, "at start: port state %d", port_state(ctx));
  CHECK(sysfs_link_downed(ibdev_path, 0, 0) == 0, "at start: sysfs link_downed %ld",
        sysfs_link_downed(ibdev_path, 0, 0));
  CHECK(stats_link_downed(dev) == 0, "at start: urxe stats link_downed %ld", stats_link_downed(dev));
  CHECK(port_event(ctx, 300) == -1, "an event with no change");

  flap(ctx, dev, peer, 1);   /* carrier lost: the other end of the veth went down */
  flap(ctx, dev, netdev, 2); /* the interface itself taken down */
  /* A flap quicker than anything reads the link state (the kernel may even report only the final state):
   * still one PORT_ERR then one PORT_ACTIVE, in that order, and one more link_downed, as rxe, which sees
   * every carrier change. */
  for (int i = 0; i < 3; ++i) {
    char cmd[160];
    /* one ip process for both: microseconds apart, so the messages tend to arrive in one batch */
    snprintf(cmd, sizeof cmd, "printf 'link set %s down\\nlink set %s up\\n' | ip -batch -", peer, peer);
    CHECK(system(cmd) == 0, "%s", cmd);
    int ev = port_event(ctx, 3000);
    CHECK(ev == IBV_EVENT_PORT_ERR, "quick flap %d: event %d, want IBV_EVENT_PORT_ERR", i, ev);
    ev = port_event(ctx, 3000);
    CHECK(ev == IBV_EVENT_PORT_ACTIVE, "quick flap %d: event %d, want IBV_EVENT_PORT_ACTIVE", i, ev);
    CHECK(port_event(ctx, 300) == -1, "quick flap %d: one more event", i);
    CHECK(port_state(ctx) == IBV_PORT_ACTIVE, "quick flap %d: port state %d", i, port_state(ctx));
    const long v = sysfs_link_downed(ibdev_path, 3 + i, 3000);
    CHECK(v == 3 + i, "quick flap %d: sysfs link_downed %ld, want %d", i, v, 3 + i);
  }

  ibv_close_device(ctx);
  ibv_free_device_list(list);
  /* After the app: the sysfs mirror keeps the count; a loss with no app open counts too. */
  CHECK(sysfs_link_downed(ibdev_path, 5, 0) == 5, "after close: sysfs link_downed %ld",
        sysfs_link_downed(ibdev_path, 5, 0));
  CHECK(ip_link(peer, "down") == 0 && ip_link(peer, "up") == 0, "flap %s", peer);
  const long no_app = stats_link_downed_wait(dev, 6, 3000);
  CHECK(no_app == 6, "no app open: urxe stats link_downed %ld, want 6", no_app);
  CHECK(sysfs_link_downed(ibdev_path, 6, 0) == 6, "urxe stats did not mirror into sysfs: %ld",
        sysfs_link_downed(ibdev_path, 6, 0));
  if (!failures)
    printf("port state: events, ibv_query_port and link_downed follow %s (carrier and admin state)\n",
           netdev);
  return test_result(NULL);
}
