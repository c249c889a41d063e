/* GIDs follow the interface's addresses while an app has the device open, with no `urxe link watch`: an
 * address added to the netdev raises IBV_EVENT_GID_CHANGE (port 1) on the async fd, ibv_query_gid shows it
 * in the lowest free slot, a QP can use it as its sgid_index, a context opened later sees it too; removing it
 * raises the event again, empties the slot (other slots keep their index) and refuses the index for new QPs;
 * an address on another interface raises nothing. Run by in_netns.sh as root (it changes va's addresses).
 * Usage: gid_watch_test DEVICE NETDEV OTHER_NETDEV */
#define _GNU_SOURCE
#include <arpa/inet.h>
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

/* RESET -> RTS looped back to itself from sgid_index; the RTR step's result when it fails. */
static int rc_connect_self(struct ibv_qp* qp, int sgid_index, const union ibv_gid* dgid) {
  return rc_to_init(qp) ? -1 : rc_to_rts(qp, qp->qp_num, dgid, sgid_index);
}

static int sh(const char* fmt, const char* a, const char* b) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, fmt, a, b);
  return system(cmd);
}

/* Counts IBV_EVENT_GID_CHANGE events: waits up to timeout_ms for the first, then until 200 ms pass without
 * another (one address can change several entries). Any other event is a failure. */
static double first_event_ms; /* when gid_events saw its first GID_CHANGE */
static int gid_events(struct ibv_context* ctx, int timeout_ms) {
  int n = 0;
  double end = now_ms() + timeout_ms;
  for (;;) {
    const int left = (int)(end - now_ms());
    struct pollfd p = {ctx->async_fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, left) != 1) return n;
    struct ibv_async_event ev;
    if (ibv_get_async_event(ctx, &ev) != 0) return n;
    CHECK(ev.event_type == IBV_EVENT_GID_CHANGE, "unexpected event %s", ibv_event_type_str(ev.event_type));
    if (ev.event_type == IBV_EVENT_GID_CHANGE) {
      CHECK(ev.element.port_num == 1, "GID_CHANGE for port %d", ev.element.port_num);
      if (n++ == 0) first_event_ms = now_ms();
      end = now_ms() + 200;
    }
    ibv_ack_async_event(&ev);
  }
}

static int gid_is_v4(const union ibv_gid* g, const char* ip) {
  struct in_addr a;
  inet_pton(AF_INET, ip, &a);
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return !memcmp(g->raw, prefix, 12) && !memcmp(&g->raw[12], &a, 4);
}

static int find_v4(struct ibv_context* ctx, const char* ip) {
  for (int i = 0; i < 16; i++) {
    union ibv_gid g;
    if (ibv_query_gid(ctx, 1, i, &g) == 0 && gid_is_v4(&g, ip)) return i;
  }
  return -1;
}

/* An RDMA WRITE from the QP to itself; 1 when it completed and the bytes arrived. */
static int write_self(struct ibv_qp* qp, struct ibv_cq* cq, struct ibv_mr* mr, char* mem, int seed) {
  for (int i = 0; i < 64; i++) mem[i] = (char)(i + seed);
  memset(mem + 1024, 0, 64);
  struct ibv_sge sge = {(uintptr_t)mem, 64, mr->lkey};
  struct ibv_send_wr wr, *bad;
  memset(&wr, 0, sizeof wr);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = (uintptr_t)(mem + 1024);
  wr.wr.rdma.rkey = mr->rkey;
  if (ibv_post_send(qp, &wr, &bad)) return 0;
  struct ibv_wc wc;
  for (int t = 0; t < 5000; t++) {
    int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0) return 0;
    if (n == 1) return wc.status == IBV_WC_SUCCESS && !memcmp(mem, mem + 1024, 64);
    usleep(1000);
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s DEVICE NETDEV OTHER_NETDEV\n", argv[0]);
    return 2;
  }
  const char *devname = argv[1], *netdev = argv[2], *other = argv[3];
  int num = 0;
  struct ibv_device** list = ibv_get_device_list(&num);
  struct ibv_device* dev = find_device(list, num, devname);
  REQUIRE(dev, "%s not found", devname);
  struct ibv_context* ctx = ibv_open_device(dev);
  REQUIRE(ctx, "open: %s", strerror(errno));
  const int base = find_v4(ctx, "10.77.0.1");
  CHECK(base == 1, "10.77.0.1 at GID %d", base);
  union ibv_gid gid_base;
  ibv_query_gid(ctx, 1, base, &gid_base);
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  static char mem[4096];
  struct ibv_mr* mr = ibv_reg_mr(pd, mem, sizeof mem, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  struct ibv_cq* cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  REQUIRE(pd && mr && cq, "pd/mr/cq");
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof ia);
  ia.send_cq = ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;

  /* ---- add: event, the new GID in the lowest free slot, usable by a QP, seen by a new context ---- */
  double t0 = now_ms();
  REQUIRE(sh("ip addr add 10.77.3.3/24 dev %s%s", netdev, "") == 0, "ip addr add");
  int ev = gid_events(ctx, 3000);
  double took = first_event_ms - t0;
  CHECK(ev >= 1, "no IBV_EVENT_GID_CHANGE after adding an address");
  const int added = find_v4(ctx, "10.77.3.3");
  CHECK(added == 2, "10.77.3.3 at GID %d (want the lowest free slot, 2)", added);
  CHECK(find_v4(ctx, "10.77.0.1") == base, "10.77.0.1 moved");
  printf("address added: %d GID_CHANGE event(s), GID %d, %.1f ms after `ip addr add`\n", ev, added, took);
  struct ibv_qp* qp_new = ibv_create_qp(pd, &ia);
  REQUIRE(qp_new, "create_qp");
  union ibv_gid gid_new;
  ibv_query_gid(ctx, 1, added > 0 ? added : 2, &gid_new);
  CHECK(rc_connect_self(qp_new, added > 0 ? added : 2, &gid_new) == 0, "QP with the new sgid_index: %s",
        strerror(errno));
  CHECK(write_self(qp_new, cq, mr, mem, 1), "WRITE over the new GID");
  {
    struct ibv_context* ctx2 = ibv_open_device(dev);
    REQUIRE(ctx2, "second open");
    CHECK(find_v4(ctx2, "10.77.3.3") == added, "a context opened later does not see the new GID");
    ibv_close_device(ctx2);
  }

  /* ---- another interface's address: nothing ---- */
  REQUIRE(sh("ip addr add 10.77.4.4/24 dev %s%s", other, "") == 0, "ip addr add on %s", other);
  CHECK(gid_events(ctx, 500) == 0, "GID_CHANGE for an address on %s", other);
  CHECK(find_v4(ctx, "10.77.4.4") < 0, "%s's address in the GID table", other);

  /* ---- remove: event, slot emptied, others keep their index, the index refused, old QP keeps going ---- */
  t0 = now_ms();
  REQUIRE(sh("ip addr del 10.77.3.3/24 dev %s%s", netdev, "") == 0, "ip addr del");
  ev = gid_events(ctx, 3000);
  took = first_event_ms - t0;
  CHECK(ev >= 1, "no IBV_EVENT_GID_CHANGE after removing the address");
  union ibv_gid g;
  static const union ibv_gid zero;
  CHECK(ibv_query_gid(ctx, 1, added > 0 ? added : 2, &g) == 0 && !memcmp(&g, &zero, sizeof g),
        "slot %d not empty after removal", added);
  CHECK(find_v4(ctx, "10.77.0.1") == base, "10.77.0.1 moved");
  printf("address removed: %d GID_CHANGE event(s), %.1f ms after `ip addr del`\n", ev, took);
  struct ibv_qp* qp_gone = ibv_create_qp(pd, &ia);
  REQUIRE(qp_gone, "create_qp");
  errno = 0;
  const int rc = rc_connect_self(qp_gone, added > 0 ? added : 2, &gid_base);
  CHECK(rc == EINVAL, "RTR with a removed GID's index: %d", rc);
  CHECK(write_self(qp_new, cq, mr, mem, 2), "the QP connected before keeps working");
  struct ibv_qp* qp_base = ibv_create_qp(pd, &ia);
  CHECK(qp_base && rc_connect_self(qp_base, base, &gid_base) == 0 && write_self(qp_base, cq, mr, mem, 3),
        "a QP on the remaining GID");

  /* ---- link messages: a flag change (promiscuous mode, as DPDK sets it) raises nothing; a new MAC moves
   * the default GID (index 0, fe80::EUI-64 of the MAC) ---- */
  REQUIRE(sh("ip link set %s promisc on%s", netdev, "") == 0, "promisc on");
  CHECK(gid_events(ctx, 500) == 0, "GID_CHANGE for a flag change");
  CHECK(sh("ip link set %s promisc off%s", netdev, "") == 0, "promisc off");
  REQUIRE(sh("ip link set %s address 02:11:22:33:44:55%s", netdev, "") == 0, "ip link set address");
  ev = gid_events(ctx, 3000);
  CHECK(ev >= 1, "no IBV_EVENT_GID_CHANGE after a new MAC");
  static const uint8_t want0[16] = {0xfe, 0x80, 0,    0,    0,    0,    0,    0,
                                    0x00, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55};
  CHECK(ibv_query_gid(ctx, 1, 0, &g) == 0 && !memcmp(g.raw, want0, 16), "GID 0 does not follow the new MAC");
  CHECK(find_v4(ctx, "10.77.0.1") == base, "10.77.0.1 moved with the MAC");

  ibv_destroy_qp(qp_base);
  ibv_destroy_qp(qp_gone);
  ibv_destroy_qp(qp_new);
  ibv_destroy_cq(cq);
  ibv_dereg_mr(mr);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  return test_result("gid_watch_test: all checks passed");
}
