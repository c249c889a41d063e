/* UD multicast through libibverbs (ibv_attach_mcast / ibv_detach_mcast) between three processes on one
 * device: a sender and two receivers, each its own context (so frames between them go through the port,
 * not one engine). Checks the device limits, the attach rules (UD only, multicast GID only, re-attach,
 * detach of a non-member, ibv_destroy_qp EBUSY while attached), fan-out to every member (the sender's own
 * too), a member with another Q_Key getting nothing, and detach stopping delivery.
 *   usage: provider_mcast_test DEVICE */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/provider/check.h"

#define QKEY 0x11111111u
#define MSG 200
#define WAIT_MS 20000.0

static const char* devname;
static union ibv_gid group; /* ::ffff:239.7.7.7 */

struct member {
  struct ibv_cq* cq;
  struct ibv_qp* qp;
  struct ibv_mr* mr;
  uint8_t buf[4 * (40 + MSG)];
};

struct ctx {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
};

static int open_ctx(struct ctx* c) {
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  struct ibv_device* dev = find_device(list, n, devname);
  REQUIRE(dev, "no device %s", devname);
  c->ctx = ibv_open_device(dev);
  ibv_free_device_list(list);
  REQUIRE(c->ctx, "ibv_open_device: %s", strerror(errno));
  c->pd = ibv_alloc_pd(c->ctx);
  REQUIRE(c->pd, "ibv_alloc_pd");
  return 0;
}

/* A UD QP in RTS with Q_Key `qkey`, its own CQ, four receives posted. */
static int make_member(struct ctx* c, struct member* m, uint32_t qkey) {
  m->cq = ibv_create_cq(c->ctx, 16, NULL, NULL, 0);
  REQUIRE(m->cq, "ibv_create_cq");
  struct ibv_qp_init_attr ia = {
      .send_cq = m->cq,
      .recv_cq = m->cq,
      .qp_type = IBV_QPT_UD,
      .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
  m->qp = ibv_create_qp(c->pd, &ia);
  REQUIRE(m->qp, "ibv_create_qp: %s", strerror(errno));
  m->mr = ibv_reg_mr(c->pd, m->buf, sizeof m->buf, IBV_ACCESS_LOCAL_WRITE);
  REQUIRE(m->mr, "ibv_reg_mr");
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qkey = qkey};
  REQUIRE(!ibv_modify_qp(m->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), "INIT");
  a.qp_state = IBV_QPS_RTR;
  REQUIRE(!ibv_modify_qp(m->qp, &a, IBV_QP_STATE), "RTR");
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0;
  REQUIRE(!ibv_modify_qp(m->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), "RTS");
  for (int i = 0; i < 4; i++) {
    struct ibv_sge sge = {(uintptr_t)(m->buf + i * (40 + MSG)), 40 + MSG, m->mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1}, *bad;
    REQUIRE(!ibv_post_recv(m->qp, &wr, &bad), "ibv_post_recv");
  }
  return 0;
}

/* Waits for the next receive of `m` and checks it carries message `seq` (bounded: a lost frame fails). */
static int expect_msg(struct member* m, int seq, const char* who) {
  struct ibv_wc wc;
  int n = 0;
  for (double end = now_ms() + WAIT_MS; n == 0 && now_ms() < end;) n = ibv_poll_cq(m->cq, 1, &wc);
  REQUIRE(n == 1, "%s: message %d never came", who, seq);
  REQUIRE(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV, "%s: status %d", who, wc.status);
  CHECK(wc.byte_len == 40 + MSG, "%s: byte_len %u", who, wc.byte_len);
  CHECK(wc.wc_flags & IBV_WC_GRH, "%s: no GRH", who);
  const uint8_t* p = m->buf + wc.wr_id * (40 + MSG);
  CHECK(memcmp(p + 20 + 16, group.raw + 12, 4) == 0, "%s: IPv4 destination is not the group", who);
  CHECK(p[40] == seq && p[40 + MSG - 1] == seq, "%s: data %d, want %d", who, p[40], seq);
  return 0;
}

static int expect_none(struct member* m, const char* who) {
  struct ibv_wc wc;
  int n = ibv_poll_cq(m->cq, 1, &wc);
  CHECK(n == 0, "%s: got a completion (status %d)", who, n > 0 ? wc.status : 0);
  return 0;
}

static void say(int fd, char c) {
  CHECK(write(fd, &c, 1) == 1, "pipe write");
}
static char hear(int fd) {
  char c = 0;
  return read(fd, &c, 1) == 1 ? c : 0;
}

/* Receiver 1: one member. Receiver 2: a member it detaches after message 1, one with another Q_Key, one
 * that stays. */
static int receiver(int id, int up, int down) {
  struct ctx c;
  struct member a, b, k;
  if (open_ctx(&c) || make_member(&c, &a, QKEY) || make_member(&c, &b, QKEY) || make_member(&c, &k, 0x5))
    return 1;
  REQUIRE(!ibv_attach_mcast(a.qp, &group, 0), "attach: %s", strerror(errno));
  if (id == 2) {
    REQUIRE(!ibv_attach_mcast(b.qp, &group, 0), "attach b");
    REQUIRE(!ibv_attach_mcast(k.qp, &group, 0), "attach k");
  }
  say(up, 'r');
  if (expect_msg(&a, 1, "receiver a")) return 1;
  if (id == 2) {
    if (expect_msg(&b, 1, "receiver b")) return 1;
    expect_none(&k, "member with another Q_Key");
    REQUIRE(!ibv_detach_mcast(a.qp, &group, 0), "detach");
  }
  say(up, '1');
  REQUIRE(hear(down) == '2', "no go for message 2");
  if (id == 2) {
    /* b and a are in one engine: once b has message 2, a has been passed over (it is no longer attached) */
    if (expect_msg(&b, 2, "receiver b")) return 1;
    expect_none(&a, "detached member");
    expect_none(&k, "member with another Q_Key");
    CHECK(!ibv_detach_mcast(b.qp, &group, 0) && !ibv_detach_mcast(k.qp, &group, 0), "detach the rest");
  } else {
    if (expect_msg(&a, 2, "receiver a")) return 1;
    CHECK(!ibv_detach_mcast(a.qp, &group, 0), "detach");
  }
  CHECK(!ibv_destroy_qp(a.qp) && !ibv_destroy_qp(b.qp) && !ibv_destroy_qp(k.qp), "destroy");
  return failures ? 1 : 0;
}

static int send_msg(struct ctx* c, struct member* m, struct ibv_ah* ah, int seq) {
  memset(m->buf + 3 * (40 + MSG), seq, MSG);
  struct ibv_sge sge = {(uintptr_t)(m->buf + 3 * (40 + MSG)), MSG, m->mr->lkey};
  struct ibv_send_wr wr = {.wr_id = 100,
                           .sg_list = &sge,
                           .num_sge = 1,
                           .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED},
                     *bad;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = 0xffffff;
  wr.wr.ud.remote_qkey = QKEY;
  REQUIRE(!ibv_post_send(m->qp, &wr, &bad), "ibv_post_send: %s", strerror(errno));
  (void)c;
  return 0;
}

/* The sender's own rules checks, then messages 1 and 2; its own attached QP gets each too. */
static int sender(int up[2], int down[2]) {
  struct ctx c;
  struct member s, self;
  if (open_ctx(&c)) return 1;
  struct ibv_device_attr da;
  REQUIRE(!ibv_query_device(c.ctx, &da), "ibv_query_device");
  CHECK(da.max_mcast_grp == 8192 && da.max_mcast_qp_attach == 56 && da.max_total_mcast_qp_attach == 0x70000,
        "limits %d %d %d", da.max_mcast_grp, da.max_mcast_qp_attach, da.max_total_mcast_qp_attach);
  if (make_member(&c, &s, QKEY) || make_member(&c, &self, QKEY)) return 1;
  /* 4 receives on self but only the first slot sends; s's receive buffers 0..2 are free (s is not
     attached: its receives stay posted) */
  struct ibv_cq* rc_cq = ibv_create_cq(c.ctx, 4, NULL, NULL, 0);
  struct ibv_qp_init_attr ia = {
      .send_cq = rc_cq,
      .recv_cq = rc_cq,
      .qp_type = IBV_QPT_RC,
      .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp* rc = ibv_create_qp(c.pd, &ia);
  REQUIRE(rc_cq && rc, "RC QP");
  union ibv_gid unicast = group;
  unicast.raw[12] = 10;
  union ibv_gid v6 = {.raw = {0xff, 0x0e, [15] = 1}};
  CHECK(ibv_attach_mcast(rc, &group, 0) == EINVAL, "attach of an RC QP");
  CHECK(ibv_attach_mcast(self.qp, &unicast, 0) == EINVAL, "attach to a unicast GID");
  CHECK(ibv_detach_mcast(self.qp, &group, 0) == EINVAL, "detach of a non-member");
  CHECK(ibv_attach_mcast(self.qp, &v6, 0) == 0, "attach to an IPv6 group");
  CHECK(ibv_destroy_qp(self.qp) == EBUSY, "destroy of an attached QP");
  CHECK(ibv_detach_mcast(self.qp, &v6, 0) == 0, "detach");
  CHECK(ibv_attach_mcast(self.qp, &group, 0) == 0, "attach");
  CHECK(ibv_attach_mcast(self.qp, &group, 0) == 0, "attach again");
  CHECK(!ibv_destroy_qp(rc) && !ibv_destroy_cq(rc_cq), "destroy RC");

  struct ibv_ah_attr aa = {
      .is_global = 1, .port_num = 1, .grh = {.dgid = group, .sgid_index = 0, .hop_limit = 64}};
  struct ibv_ah* ah = ibv_create_ah(c.pd, &aa);
  REQUIRE(ah, "ibv_create_ah to the group: %s", strerror(errno));
  for (int i = 0; i < 2; i++) REQUIRE(hear(up[0]) == 'r', "a receiver did not start");
  for (int seq = 1; seq <= 2; seq++) {
    if (send_msg(&c, &s, ah, seq)) return 1;
    struct ibv_wc wc;
    int n = 0;
    for (double end = now_ms() + WAIT_MS; n == 0 && now_ms() < end;) n = ibv_poll_cq(s.cq, 1, &wc);
    REQUIRE(n == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 100, "send completion");
    if (expect_msg(&self, seq, "sender's own member")) return 1;
    if (seq == 1) {
      for (int i = 0; i < 2; i++) REQUIRE(hear(up[0]) == '1', "a receiver failed message 1");
      say(down[1], '2');
      say(down[1], '2');
    }
  }
  CHECK(!ibv_detach_mcast(self.qp, &group, 0), "detach");
  CHECK(!ibv_destroy_ah(ah) && !ibv_destroy_qp(self.qp) && !ibv_destroy_qp(s.qp), "teardown");
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s DEVICE\n", argv[0]);
    return 2;
  }
  devname = argv[1];
  group.raw[10] = group.raw[11] = 0xff;
  group.raw[12] = 239;
  group.raw[13] = group.raw[14] = group.raw[15] = 7;
  int up[2], down[2];
  if (pipe(up) || pipe(down)) return 2;
  pid_t kids[2];
  for (int i = 0; i < 2; i++) {
    kids[i] = fork();
    if (kids[i] == 0) _exit(receiver(i + 1, up[1], down[0]));
  }
  close(up[1]); /* a receiver that dies early ends the sender's read */
  close(down[0]);
  int rc = sender(up, down);
  for (int i = 0; i < 2; i++) {
    int st = 0;
    if (rc) kill(kids[i], SIGKILL);
    waitpid(kids[i], &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "receiver %d failed", i + 1);
  }
  if (rc || failures) {
    fprintf(stderr, "provider_mcast_test: FAILED\n");
    return 1;
  }
  printf("provider_mcast_test: OK\n");
  return 0;
}
