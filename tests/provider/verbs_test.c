/* An ordinary libibverbs program run against urxe0 (port=loop) with SYSFS_PATH + LD_PRELOAD: discovery,
 * the private-ABI layouts as libibverbs uses them, open/query/GIDs, PD/MR, CQ + completion channel,
 * QP create/modify/query, a loopback SEND with a completion event, and the errors rdma-core documents for
 * wrong use. Usage: verbs_test DEVICE NETDEV IPV4 EXPECTED_ACTIVE_MTU(enum ibv_mtu) */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "check.h"

#include "provider/abi34.h"

static int netdev_mac(const char* ifname, uint8_t mac[6]) {
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", ifname);
  int s = socket(AF_INET, SOCK_DGRAM, 0);
  int rc = ioctl(s, SIOCGIFHWADDR, &ifr);
  close(s);
  memcpy(mac, ifr.ifr_hwaddr.sa_data, 6);
  return rc;
}

static int wait_cq(struct ibv_cq* cq, struct ibv_wc* wc, int n) {
  int got = 0;
  for (int spins = 0; got < n && spins < 5000; spins++) {
    int r = ibv_poll_cq(cq, n - got, wc + got);
    if (r < 0) return r;
    got += r;
    if (got < n) usleep(1000);
  }
  return got;
}

/* Reads one async event if one is queued within timeout_ms; returns 1 and fills ev, else 0. */
static int next_async(struct ibv_context* ctx, struct ibv_async_event* ev, int timeout_ms) {
  struct pollfd p = {ctx->async_fd, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) != 1) return 0;
  return ibv_get_async_event(ctx, ev) == 0;
}

/* SRQ shared by an RC QP talking to itself: receives come from the SRQ, and the armed limit raises
 * IBV_EVENT_SRQ_LIMIT_REACHED on the async fd. */
static int srq_section(struct ibv_context* ctx, struct ibv_pd* pd, struct ibv_mr* mr, char* mem,
                       const union ibv_gid* gid) {
  struct ibv_cq* cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
  REQUIRE(cq, "srq cq");
  struct ibv_srq_init_attr sia;
  memset(&sia, 0, sizeof sia);
  sia.attr.max_wr = 16;
  sia.attr.max_sge = 1;
  sia.srq_context = (void*)0x9abc;
  struct ibv_srq* srq = ibv_create_srq(pd, &sia);
  REQUIRE(srq, "create_srq: %s", strerror(errno));
  CHECK(srq->context == ctx && srq->pd == pd && srq->srq_context == (void*)0x9abc, "srq fields");
  CHECK(sia.attr.max_wr >= 16, "srq max_wr %u", sia.attr.max_wr);
  for (int i = 0; i < 4; i++) {
    struct ibv_sge sg = {(uintptr_t)(mem + 4096 + 512 * i), 512, mr->lkey};
    struct ibv_recv_wr r, *bad;
    memset(&r, 0, sizeof r);
    r.wr_id = 100 + (uint64_t)i;
    r.sg_list = &sg;
    r.num_sge = 1;
    REQUIRE(ibv_post_srq_recv(srq, &r, &bad) == 0, "post_srq_recv");
  }
  struct ibv_srq_attr sa;
  memset(&sa, 0, sizeof sa);
  sa.srq_limit = 3;
  REQUIRE(ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT) == 0, "arm srq limit");
  CHECK(ibv_query_srq(srq, &sa) == 0 && sa.srq_limit == 3 && sa.max_wr >= 16, "query_srq");

  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof ia);
  ia.send_cq = cq;
  ia.recv_cq = cq;
  ia.srq = srq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = 4;
  ia.cap.max_send_sge = 1;
  struct ibv_qp* qp = ibv_create_qp(pd, &ia);
  REQUIRE(qp, "create_qp with srq: %s", strerror(errno));
  CHECK(qp->srq == srq, "qp->srq");
  struct ibv_recv_wr r, *bad_r;
  memset(&r, 0, sizeof r);
  CHECK(ibv_post_recv(qp, &r, &bad_r) != 0, "post_recv on a QP with an SRQ accepted");
  REQUIRE(rc_to_init(qp) == 0 && rc_to_rts(qp, qp->qp_num, gid, 1) == 0, "srq qp to RTS");
  for (int i = 0; i < 2; i++) {
    struct ibv_sge sg = {(uintptr_t)mem, 100, mr->lkey};
    struct ibv_send_wr w, *bad;
    memset(&w, 0, sizeof w);
    w.wr_id = 200 + (uint64_t)i;
    w.sg_list = &sg;
    w.num_sge = 1;
    w.opcode = IBV_WR_SEND;
    w.send_flags = IBV_SEND_SIGNALED;
    REQUIRE(ibv_post_send(qp, &w, &bad) == 0, "send to srq");
  }
  struct ibv_wc wc[4];
  int got = wait_cq(cq, wc, 4);
  CHECK(got == 4, "srq completions %d", got);
  int recvs = 0;
  for (int i = 0; i < got; i++) {
    CHECK(wc[i].status == IBV_WC_SUCCESS, "srq wc %s", ibv_wc_status_str(wc[i].status));
    if (wc[i].opcode == IBV_WC_RECV) {
      recvs++;
      CHECK(wc[i].qp_num == qp->qp_num && wc[i].byte_len == 100 && wc[i].wr_id >= 100 && wc[i].wr_id < 104,
            "srq recv wc");
    }
  }
  CHECK(recvs == 2, "srq recvs %d", recvs);
  struct ibv_async_event ev;
  int have = next_async(ctx, &ev, 2000);
  CHECK(have, "no SRQ_LIMIT_REACHED event");
  if (have) {
    CHECK(ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ev.element.srq == srq, "event %s for %p",
          ibv_event_type_str(ev.event_type), (void*)ev.element.srq);
    ibv_ack_async_event(&ev);
  }
  /* Re-armed and hit again, but this time the app never reads the event: destroy must not wait for it
   * (the kernel drops unread events of a destroyed object), and the record must be gone. */
  sa.srq_limit = 3;
  REQUIRE(ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT) == 0, "re-arm srq limit");
  {
    struct ibv_sge sg = {(uintptr_t)mem, 10, mr->lkey};
    struct ibv_send_wr w, *bad;
    memset(&w, 0, sizeof w);
    w.sg_list = &sg;
    w.num_sge = 1;
    w.opcode = IBV_WR_SEND;
    w.send_flags = IBV_SEND_SIGNALED;
    REQUIRE(ibv_post_send(qp, &w, &bad) == 0, "third send to srq");
    CHECK(wait_cq(cq, wc, 2) == 2, "third send completions");
  }
  struct pollfd ap = {ctx->async_fd, POLLIN, 0};
  CHECK(poll(&ap, 1, 2000) == 1, "second SRQ_LIMIT_REACHED not queued");
  /* IBV_DEVICE_SRQ_RESIZE: 1 WQE is still posted; grown to 40, it holds 39 more and no further one. */
  memset(&sa, 0, sizeof sa);
  CHECK(ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR) == EINVAL, "resize srq to 0 accepted");
  sa.max_wr = 40;
  CHECK(ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR) == 0, "resize srq");
  CHECK(ibv_query_srq(srq, &sa) == 0 && sa.max_wr == 40, "max_wr after resize %u", sa.max_wr);
  for (int i = 0; i < 40; i++) {
    struct ibv_sge sg = {(uintptr_t)(mem + 4096), 512, mr->lkey};
    struct ibv_recv_wr rw, *bad;
    memset(&rw, 0, sizeof rw);
    rw.sg_list = &sg;
    rw.num_sge = 1;
    const int rc = ibv_post_srq_recv(srq, &rw, &bad);
    CHECK(rc == (i < 39 ? 0 : ENOMEM), "post_srq_recv %d after resize: %d", i, rc);
  }
  CHECK(ibv_destroy_srq(srq) == EBUSY, "destroy_srq with a QP");
  CHECK(ibv_destroy_qp(qp) == 0, "destroy srq qp");
  CHECK(ibv_destroy_srq(srq) == 0, "destroy_srq");
  CHECK(poll(&ap, 1, 0) == 0, "unread event of the destroyed SRQ still queued");
  CHECK(ibv_destroy_cq(cq) == 0, "destroy srq cq");
  return 0;
}

/* UD QP sending to itself through an AH, completions read with the ibv_cq_ex API. */
static int ud_section(struct ibv_context* ctx, struct ibv_pd* pd, struct ibv_mr* mr, char* mem,
                      const union ibv_gid* gid) {
  struct ibv_cq_init_attr_ex ca;
  memset(&ca, 0, sizeof ca);
  ca.cqe = 16;
  ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP;
  struct ibv_cq_ex* cqx = ibv_create_cq_ex(ctx, &ca);
  REQUIRE(cqx, "create_cq_ex: %s", strerror(errno));
  ca.wc_flags |= IBV_WC_EX_WITH_CVLAN;
  errno = 0;
  CHECK(ibv_create_cq_ex(ctx, &ca) == NULL && errno == EOPNOTSUPP, "CVLAN accepted (errno %d)", errno);
  struct ibv_cq* cq = ibv_cq_ex_to_cq(cqx);

  struct ibv_qp_init_attr ia = qp_init_attr(cq, IBV_QPT_UD, 4);
  struct ibv_qp* qp = ibv_create_qp(pd, &ia);
  REQUIRE(qp, "create UD qp: %s", strerror(errno));
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = 0x11111111;
  REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) == 0,
          "UD INIT");
  a.qp_state = IBV_QPS_RTR;
  REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0, "UD RTR");
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 7;
  REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0, "UD RTS");

  struct ibv_ah_attr aa;
  memset(&aa, 0, sizeof aa);
  aa.is_global = 1;
  aa.grh.dgid = *gid;
  aa.grh.sgid_index = 1;
  aa.grh.hop_limit = 64;
  aa.port_num = 1;
  struct ibv_ah* ah = ibv_create_ah(pd, &aa);
  REQUIRE(ah, "create_ah: %s", strerror(errno));
  aa.is_global = 0;
  errno = 0;
  CHECK(ibv_create_ah(pd, &aa) == NULL, "AH without GRH accepted on RoCE");

  struct ibv_sge rs = {(uintptr_t)(mem + 4096), 40 + 256, mr->lkey};
  struct ibv_recv_wr r, *bad_r;
  memset(&r, 0, sizeof r);
  r.wr_id = 300;
  r.sg_list = &rs;
  r.num_sge = 1;
  REQUIRE(ibv_post_recv(qp, &r, &bad_r) == 0, "UD post_recv");
  for (int i = 0; i < 32; i++) mem[i] = (char)(0x40 + i);
  struct ibv_sge ss = {(uintptr_t)mem, 32, mr->lkey};
  struct ibv_send_wr w, *bad;
  memset(&w, 0, sizeof w);
  w.wr_id = 301;
  w.sg_list = &ss;
  w.num_sge = 1;
  w.opcode = IBV_WR_SEND;
  w.send_flags = IBV_SEND_SIGNALED;
  w.wr.ud.ah = ah;
  w.wr.ud.remote_qpn = qp->qp_num;
  w.wr.ud.remote_qkey = 0x11111111;
  REQUIRE(ibv_post_send(qp, &w, &bad) == 0, "UD post_send");

  int seen = 0, send_ok = 0, recv_ok = 0;
  for (int spins = 0; seen < 2 && spins < 5000; spins++) {
    struct ibv_poll_cq_attr pa = {0};
    int rc = ibv_start_poll(cqx, &pa);
    if (rc == ENOENT) {
      usleep(1000);
      continue;
    }
    CHECK(rc == 0, "start_poll %d", rc);
    while (rc == 0) {
      seen++;
      CHECK(cqx->status == IBV_WC_SUCCESS, "UD wc %s", ibv_wc_status_str(cqx->status));
      if (cqx->wr_id == 301 && ibv_wc_read_opcode(cqx) == IBV_WC_SEND) send_ok = 1;
      if (cqx->wr_id == 300 && ibv_wc_read_opcode(cqx) == IBV_WC_RECV) {
        recv_ok = ibv_wc_read_byte_len(cqx) == 40 + 32 && ibv_wc_read_qp_num(cqx) == qp->qp_num &&
                  ibv_wc_read_src_qp(cqx) == qp->qp_num && (ibv_wc_read_wc_flags(cqx) & IBV_WC_GRH);
      }
      rc = ibv_next_poll(cqx);
    }
    ibv_end_poll(cqx);
  }
  CHECK(send_ok && recv_ok, "UD send %d recv %d", send_ok, recv_ok);
  CHECK(!memcmp(mem, mem + 4096 + 40, 32), "UD payload after the 40-byte GRH differs");
  CHECK(ibv_destroy_qp(qp) == 0, "destroy UD qp");
  CHECK(ibv_destroy_ah(ah) == 0, "destroy_ah");
  CHECK(ibv_destroy_cq(cq) == 0, "destroy cq_ex");
  return 0;
}

/* Many QPs each raise COMM_EST (a SEND reached them in RTR) and the app reads none of these events, as
 * perftest does: more than fit the async queue are dropped, never reported, so that destroying the QPs
 * (which waits for every reported event's ack) returns. alarm() turns a hang into a failure. */
static int async_flood_section(struct ibv_context* ctx, struct ibv_pd* pd, struct ibv_mr* mr, char* mem,
                               const union ibv_gid* gid) {
  enum { kPairs = 400 };
  static struct ibv_qp* tx[kPairs];
  static struct ibv_qp* rx[kPairs];
  struct ibv_cq* cq = ibv_create_cq(ctx, 2 * kPairs + 8, NULL, NULL, 0);
  REQUIRE(cq, "flood cq: %s", strerror(errno));
  struct ibv_qp_init_attr ia = qp_init_attr(cq, IBV_QPT_RC, 1);
  for (int i = 0; i < kPairs; i++) {
    tx[i] = ibv_create_qp(pd, &ia);
    rx[i] = ibv_create_qp(pd, &ia);
    REQUIRE(tx[i] && rx[i], "flood qp %d: %s", i, strerror(errno));
    REQUIRE(rc_to_init(tx[i]) == 0 && rc_to_init(rx[i]) == 0, "flood INIT %d", i);
    REQUIRE(rc_to_rtr(rx[i], tx[i]->qp_num, gid, 1) == 0, "flood RTR %d", i); /* stays in RTR */
    REQUIRE(rc_to_rts(tx[i], rx[i]->qp_num, gid, 1) == 0, "flood RTS %d", i);
    struct ibv_sge rs = {(uintptr_t)(mem + 8192), 16, mr->lkey};
    struct ibv_recv_wr r = {.wr_id = 1, .sg_list = &rs, .num_sge = 1}, *bad_r;
    REQUIRE(ibv_post_recv(rx[i], &r, &bad_r) == 0, "flood post_recv %d", i);
  }
  for (int i = 0; i < kPairs; i++) {
    struct ibv_sge ss = {(uintptr_t)mem, 16, mr->lkey};
    struct ibv_send_wr w = {.wr_id = 2, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND}, *bad;
    w.send_flags = IBV_SEND_SIGNALED;
    REQUIRE(ibv_post_send(tx[i], &w, &bad) == 0, "flood post_send %d", i);
  }
  struct ibv_wc wc[2 * kPairs];
  CHECK(wait_cq(cq, wc, 2 * kPairs) == 2 * kPairs, "flood: not every SEND and receive completed");
  /* COMM_EST is reported for a QP in RTR (not for the senders, already in RTS); read one and ack it. */
  struct ibv_async_event ev;
  int comm_est = 0;
  while (!comm_est && next_async(ctx, &ev, 2000)) {
    comm_est = ev.event_type == IBV_EVENT_COMM_EST;
    ibv_ack_async_event(&ev);
  }
  CHECK(comm_est, "no COMM_EST reported");
  alarm(30);
  for (int i = 0; i < kPairs; i++)
    CHECK(ibv_destroy_qp(tx[i]) == 0 && ibv_destroy_qp(rx[i]) == 0, "flood destroy %d", i);
  alarm(0);
  CHECK(ibv_destroy_cq(cq) == 0, "flood destroy cq");
  return 0;
}

/* A QP created with send_ops_flags is a verbs_qp with VERBS_QP_EX set: ibv_qp_to_qp_ex hands out the
 * ibv_qp_ex, and the ibv_wr_* builders post through it (here: an inline SEND and a gathered
 * RDMA WRITE to itself). */
static int qpex_section(struct ibv_context* ctx, struct ibv_pd* pd, struct ibv_mr* mr, char* mem,
                        const union ibv_gid* gid) {
  struct ibv_cq* cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  REQUIRE(cq, "qpex cq");
  struct ibv_qp_init_attr_ex ia;
  memset(&ia, 0, sizeof ia);
  ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  ia.pd = pd;
  ia.send_cq = cq;
  ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = 4;
  ia.cap.max_recv_wr = 4;
  ia.cap.max_send_sge = 2;
  ia.cap.max_recv_sge = 1;
  ia.cap.max_inline_data = 64;
  ia.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
  struct ibv_qp* qp = ibv_create_qp_ex(ctx, &ia);
  REQUIRE(qp, "create_qp_ex with send ops: %s", strerror(errno));
  CHECK(((struct verbs_qp*)qp)->comp_mask & URXE_VERBS_QP_EX, "VERBS_QP_EX not set");
  struct ibv_qp_ex* qpx = ibv_qp_to_qp_ex(qp);
  REQUIRE(qpx == (struct ibv_qp_ex*)qp, "ibv_qp_to_qp_ex %p for %p", (void*)qpx, (void*)qp);
  ia.send_ops_flags = IBV_QP_EX_WITH_TSO;
  errno = 0;
  CHECK(ibv_create_qp_ex(ctx, &ia) == NULL && errno == EOPNOTSUPP, "TSO send ops accepted");
  REQUIRE(rc_to_init(qp) == 0 && rc_to_rts(qp, qp->qp_num, gid, 1) == 0, "qpex to RTS");

  struct ibv_sge rs = {(uintptr_t)(mem + 6144), 64, mr->lkey};
  struct ibv_recv_wr r, *bad_r;
  memset(&r, 0, sizeof r);
  r.wr_id = 400;
  r.sg_list = &rs;
  r.num_sge = 1;
  REQUIRE(ibv_post_recv(qp, &r, &bad_r) == 0, "qpex post_recv");
  char msg[20] = "inline through wr_*";
  memset(mem + 7000, 0, 32);
  for (int i = 0; i < 16; i++) mem[i] = (char)(0x61 + i);
  struct ibv_sge gather[2] = {{(uintptr_t)mem, 8, mr->lkey}, {(uintptr_t)(mem + 8), 8, mr->lkey}};
  ibv_wr_start(qpx);
  qpx->wr_id = 401;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(qpx);
  ibv_wr_set_inline_data(qpx, msg, sizeof msg);
  qpx->wr_id = 402;
  ibv_wr_rdma_write(qpx, mr->rkey, (uintptr_t)(mem + 7000));
  ibv_wr_set_sge_list(qpx, 2, gather);
  REQUIRE(ibv_wr_complete(qpx) == 0, "wr_complete");
  struct ibv_wc wc[4];
  int got = wait_cq(cq, wc, 3);
  CHECK(got == 3, "qpex completions %d", got);
  int mask = 0;
  for (int i = 0; i < got; i++) {
    CHECK(wc[i].status == IBV_WC_SUCCESS, "qpex wc %s", ibv_wc_status_str(wc[i].status));
    if (wc[i].wr_id >= 400 && wc[i].wr_id <= 402) mask |= 1 << (wc[i].wr_id - 400);
  }
  CHECK(mask == 7, "qpex completions mask %x", mask);
  CHECK(!memcmp(mem + 6144, msg, sizeof msg), "inline SEND payload");
  CHECK(!memcmp(mem + 7000, mem, 16), "gathered RDMA WRITE payload");
  /* Too many WRs for the send queue: wr_complete reports it, nothing is posted. */
  ibv_wr_start(qpx);
  for (int i = 0; i < 5; i++) {
    qpx->wr_id = 500 + (uint64_t)i;
    ibv_wr_send(qpx);
    ibv_wr_set_sge(qpx, mr->lkey, (uintptr_t)mem, 4);
  }
  CHECK(ibv_wr_complete(qpx) == ENOMEM, "5 WRs on a 4-deep queue");
  CHECK(ibv_destroy_qp(qp) == 0, "destroy qpex");
  while (ibv_poll_cq(cq, 4, wc) > 0) {
  }
  CHECK(ibv_destroy_cq(cq) == 0, "destroy qpex cq");
  return 0;
}

/* ibv_rereg_mr and ibv_resize_cq as libibverbs reports them: the fields the core updates, keys kept (as
 * rxe), IBV_REREG_MR_ERR_* with errno, the re-registered MR used by traffic, and a resize that keeps the
 * completions waiting in order and refuses to shrink below them. */
/* ibv_reg_mr / ibv_rereg_mr check the range as the kernel's pinning does: EFAULT for memory that is not
 * mapped, and for read-only memory when the access writes (local write, remote write, atomic); read-only
 * memory registered for remote reads is fine. Without the check the app would crash at the first access. */
static int user_memory_section(struct ibv_pd* pd) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  char* m = mmap(NULL, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(m != MAP_FAILED, "mmap");
  REQUIRE(munmap(m + 2 * page, page) == 0, "munmap");            /* the third page: not mapped */
  REQUIRE(mprotect(m + page, page, PROT_READ) == 0, "mprotect"); /* the second page: read-only */
  errno = 0;
  CHECK(!ibv_reg_mr(pd, m + 2 * page, page, IBV_ACCESS_LOCAL_WRITE) && errno == EFAULT, "unmapped: errno %d",
        errno);
  errno = 0;
  CHECK(!ibv_reg_mr(pd, m, 3 * page, 0) && errno == EFAULT, "partly unmapped: errno %d", errno);
  errno = 0;
  CHECK(!ibv_reg_mr(pd, m, 2 * page, IBV_ACCESS_LOCAL_WRITE) && errno == EFAULT,
        "read-only page for local write: errno %d", errno);
  errno = 0;
  CHECK(!ibv_reg_mr(pd, m + page, 8, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC) && errno == EFAULT,
        "read-only page for atomics: errno %d", errno);
  errno = 0;
  CHECK(!ibv_reg_mr(pd, m + page, 8, IBV_ACCESS_REMOTE_WRITE) && errno == EINVAL,
        "access checked before the range (REMOTE_WRITE without LOCAL_WRITE): errno %d", errno);
  struct ibv_mr* ro = ibv_reg_mr(pd, m, 2 * page, IBV_ACCESS_REMOTE_READ);
  CHECK(ro != NULL, "read-only memory for remote reads: errno %d", errno);
  if (ro) {
    errno = 0;
    int rc = ibv_rereg_mr(ro, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE);
    CHECK(rc == IBV_REREG_MR_ERR_CMD && errno == EFAULT, "rereg for writing read-only memory: %d errno %d",
          rc, errno);
    errno = 0;
    rc = ibv_rereg_mr(ro, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, m + page, 2 * page, 0);
    CHECK(rc == IBV_REREG_MR_ERR_CMD && errno == EFAULT, "rereg onto unmapped memory: %d errno %d", rc,
          errno);
    rc = ibv_rereg_mr(ro, IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS, NULL, m, page,
                      IBV_ACCESS_LOCAL_WRITE);
    CHECK(rc == 0, "rereg onto the writable page: %d errno %d", rc, errno);
    CHECK(ibv_dereg_mr(ro) == 0, "dereg");
  }
  struct ibv_mr* rw = ibv_reg_mr(pd, m, page, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  CHECK(rw != NULL, "writable page for writing: errno %d", errno);
  if (rw) CHECK(ibv_dereg_mr(rw) == 0, "dereg");
  munmap(m, 2 * page);
  return 0;
}

static int rereg_resize_section(struct ibv_context* ctx, struct ibv_pd* pd, struct ibv_mr* src_mr, char* src,
                                const union ibv_gid* gid) {
  static char first[4096], second[8192];
  struct ibv_mr* mr = ibv_reg_mr(pd, first, sizeof first, IBV_ACCESS_LOCAL_WRITE);
  REQUIRE(mr, "rereg: reg_mr");
  const uint32_t lkey = mr->lkey, rkey = mr->rkey;
  struct ibv_pd* pd2 = ibv_alloc_pd(ctx);
  REQUIRE(pd2, "rereg: pd2");
  int rc =
      ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS,
                   pd2, second, sizeof second, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  CHECK(rc == 0, "rereg all three: %d errno %d", rc, errno);
  CHECK(mr->pd == pd2 && mr->addr == second && mr->length == sizeof second, "rereg: mr fields not updated");
  CHECK(mr->lkey == lkey && mr->rkey == rkey, "rereg changed the keys");
  CHECK(ibv_dealloc_pd(pd2) == EBUSY, "pd2 not referenced by the re-registered MR");
  errno = 0;
  rc = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_REMOTE_WRITE);
  CHECK(rc == IBV_REREG_MR_ERR_CMD && errno == EINVAL, "REMOTE_WRITE without LOCAL_WRITE: %d errno %d", rc,
        errno);
  errno = 0;
  rc = ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0);
  CHECK(rc == IBV_REREG_MR_ERR_CMD && errno == EINVAL, "no flags: %d errno %d", rc, errno);
  errno = 0;
  rc = ibv_rereg_mr(mr, 1 << 4, NULL, NULL, 0, 0);
  CHECK(rc == IBV_REREG_MR_ERR_INPUT && errno == EINVAL, "unknown flag: %d errno %d", rc, errno);
  CHECK(mr->pd == pd2 && mr->addr == second, "failed rereg changed the MR");
  /* Back to the QPs' PD with remote write: an RDMA WRITE through the old rkey lands in `second`. */
  rc = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS, pd, NULL, 0,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  CHECK(rc == 0 && mr->pd == pd, "rereg back: %d", rc);
  CHECK(ibv_dealloc_pd(pd2) == 0, "pd2 still referenced");

  struct ibv_cq* cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
  REQUIRE(cq && cq->cqe >= 4, "rereg cq");
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof ia);
  ia.send_cq = ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = 8;
  ia.cap.max_recv_wr = 1;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  struct ibv_qp* qp = ibv_create_qp(pd, &ia);
  REQUIRE(qp && rc_to_init(qp) == 0 && rc_to_rts(qp, qp->qp_num, gid, 1) == 0, "rereg qp");
  for (int i = 0; i < 3; i++) {
    for (int j = 0; j < 256; j++) src[j] = (char)(j * 3 + i);
    struct ibv_sge sge = {(uintptr_t)src, 256, src_mr->lkey};
    struct ibv_send_wr wr, *bad;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = 700 + (uint64_t)i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = (uintptr_t)(second + 1024 * i);
    wr.wr.rdma.rkey = mr->rkey;
    REQUIRE(ibv_post_send(qp, &wr, &bad) == 0, "rereg post write %d", i);
    for (int t = 0; t < 5000 && memcmp(second + 1024 * i, src, 256); t++) usleep(1000);
    CHECK(!memcmp(second + 1024 * i, src, 256), "WRITE %d through the re-registered rkey did not land", i);
  }
  /* The data is there, the completions follow the ACKs: give them time to reach the CQ unpolled. */
  usleep(300000);
  CHECK(ibv_resize_cq(cq, 2) == EINVAL, "resize below the 3 waiting completions");
  CHECK(cq->cqe >= 4, "failed resize changed cqe to %d", cq->cqe);
  CHECK(ibv_resize_cq(cq, 0) == EINVAL, "resize to 0");
  rc = ibv_resize_cq(cq, 64);
  CHECK(rc == 0 && cq->cqe >= 64, "resize to 64: %d, cqe %d", rc, cq->cqe);
  rc = ibv_resize_cq(cq, 3);
  CHECK(rc == 0 && cq->cqe >= 3 && cq->cqe < 64, "resize to exactly what waits: %d, cqe %d", rc, cq->cqe);
  struct ibv_wc wc[4];
  int got = wait_cq(cq, wc, 3);
  CHECK(got == 3, "completions after resize: %d", got);
  for (int i = 0; i < got; i++)
    CHECK(wc[i].wr_id == 700 + (uint64_t)i && wc[i].status == IBV_WC_SUCCESS, "wc %d: wr_id %llu %s", i,
          (unsigned long long)wc[i].wr_id, ibv_wc_status_str(wc[i].status));
  CHECK(ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0 && ibv_dereg_mr(mr) == 0, "rereg teardown");
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    fprintf(stderr, "usage: %s DEVICE NETDEV IPV4 ACTIVE_MTU [nopreload]\n", argv[0]);
    return 2;
  }
  const char* devname = argv[1];
  const char* netdev = argv[2];
  const int want_mtu = atoi(argv[4]);
  uint8_t mac[6];
  REQUIRE(netdev_mac(netdev, mac) == 0, "netdev %s", netdev);

  /* ---- discovery and the verbs_device layout ---- */
  int num = 0;
  struct ibv_device** list = ibv_get_device_list(&num);
  REQUIRE(list != NULL, "ibv_get_device_list: %s", strerror(errno));
  struct ibv_device* dev = find_device(list, num, devname);
  REQUIRE(dev != NULL, "%s not listed (%d devices)", devname, num);
  CHECK(dev->node_type == IBV_NODE_CA, "node_type %d", dev->node_type);
  CHECK(dev->transport_type == IBV_TRANSPORT_IB, "transport %d", dev->transport_type);
  struct verbs_device* vdev = (struct verbs_device*)dev;
  CHECK(vdev->ops && !strcmp(vdev->ops->name, "urxe"), "verbs_device.ops is not urxe's");
  CHECK(vdev->sysfs && !strcmp(vdev->sysfs->ibdev_name, devname), "verbs_device.sysfs->ibdev_name");
  CHECK(vdev->sysfs && !strncmp(vdev->sysfs->sysfs_name, "uverbs", 6), "sysfs_name %s",
        vdev->sysfs->sysfs_name);
  CHECK(vdev->sysfs && vdev->sysfs->sysfs_cdev == makedev(1, 3), "sysfs_cdev");
  CHECK(!strcmp(vdev->sysfs->ibdev_path, dev->ibdev_path), "ibdev_path %s vs %s", vdev->sysfs->ibdev_path,
        dev->ibdev_path);
  /* ibv_get_device_guid reads node_guid through verbs_device.sysfs: the EUI-64 of the MAC. */
  uint64_t want_guid = ((uint64_t)(mac[0] ^ 2) << 56) | ((uint64_t)mac[1] << 48) | ((uint64_t)mac[2] << 40) |
                       (0xffULL << 32) | (0xfeULL << 24) | ((uint64_t)mac[3] << 16) |
                       ((uint64_t)mac[4] << 8) | mac[5];
  CHECK(be64toh(ibv_get_device_guid(dev)) == want_guid, "guid %016llx want %016llx",
        (unsigned long long)be64toh(ibv_get_device_guid(dev)), (unsigned long long)want_guid);

  /* ---- open ---- */
  struct ibv_context* ctx = ibv_open_device(dev);
  REQUIRE(ctx != NULL, "ibv_open_device: %s", strerror(errno));
  struct stat st;
  CHECK(ctx->async_fd >= 0 && fstat(ctx->async_fd, &st) == 0 && S_ISSOCK(st.st_mode),
        "async_fd is not a socket");
  CHECK(ctx->num_comp_vectors == 1, "num_comp_vectors %d", ctx->num_comp_vectors);
  CHECK((fcntl(ctx->cmd_fd, F_GETFL) & O_ACCMODE) == O_RDONLY, "cmd_fd not read-only");

  if (argc == 6 && !strcmp(argv[5], "nopreload")) {
    /* Loaded through RDMAV_DRIVERS / a .driver file, the interposer is not in front of libibverbs: its
     * kernel command must fail cleanly (EBADF on the read-only cmd_fd), not return a garbage fd. */
    errno = 0;
    CHECK(ibv_create_comp_channel(ctx) == NULL && errno == EBADF, "comp channel without preload: errno %d",
          errno);
    CHECK(fcntl(0, F_GETFD) != -1 || errno != EBADF, "stdin was closed");
    struct ibv_pd* p = ibv_alloc_pd(ctx);
    CHECK(p != NULL && ibv_dealloc_pd(p) == 0, "PD without preload");
    CHECK(ibv_close_device(ctx) == 0, "close_device");
    ibv_free_device_list(list);
    if (failures) return 1;
    printf("verbs_test (nopreload): all checks passed\n");
    return 0;
  }

  /* ---- query_device(_ex): the op libibverbs calls is ours and honours attr_size ---- */
  struct ibv_device_attr da;
  REQUIRE(ibv_query_device(ctx, &da) == 0, "ibv_query_device");
  CHECK(da.phys_port_cnt == 1 && da.max_qp > 0 && da.max_cqe > 0 && da.max_sge > 0, "device attrs");
  CHECK(da.node_guid == ibv_get_device_guid(dev), "node_guid");
  struct verbs_context* vctx = verbs_get_ctx(ctx);
  REQUIRE(vctx && vctx->query_device_ex, "no query_device_ex");
  unsigned char buf[sizeof(struct ibv_device_attr_ex)];
  memset(buf, 0xaa, sizeof buf);
  size_t small = sizeof(struct ibv_device_attr) + 4;
  CHECK(vctx->query_device_ex(ctx, NULL, (struct ibv_device_attr_ex*)buf, small) == 0,
        "query_device_ex small");
  int untouched = 1;
  for (size_t i = small; i < sizeof buf; i++) untouched &= buf[i] == 0xaa;
  CHECK(untouched, "query_device_ex wrote past attr_size");
  CHECK(((struct ibv_device_attr_ex*)buf)->orig_attr.max_qp == da.max_qp, "orig_attr via _ex");
  CHECK(vctx->query_device_ex(ctx, NULL, (struct ibv_device_attr_ex*)buf, 8) == EINVAL, "tiny attr_size");
  struct ibv_device_attr_ex dax;
  CHECK(ibv_query_device_ex(ctx, NULL, &dax) == 0, "ibv_query_device_ex");

  /* ---- port and GIDs (GIDs come from the fake sysfs files) ---- */
  struct ibv_port_attr pa;
  REQUIRE(ibv_query_port(ctx, 1, &pa) == 0, "ibv_query_port");
  CHECK(pa.state == IBV_PORT_ACTIVE, "state %d", pa.state);
  CHECK(pa.link_layer == IBV_LINK_LAYER_ETHERNET, "link_layer %d", pa.link_layer);
  CHECK(pa.active_mtu == (enum ibv_mtu)want_mtu, "active_mtu %d want %d", pa.active_mtu, want_mtu);
  CHECK(pa.max_mtu == IBV_MTU_4096, "max_mtu %d", pa.max_mtu);
  CHECK(pa.gid_tbl_len == 16, "gid_tbl_len %d", pa.gid_tbl_len);
  CHECK(ibv_query_port(ctx, 2, &pa) != 0, "port 2 exists?");
  union ibv_gid gid0, gid1;
  CHECK(ibv_query_gid(ctx, 1, 0, &gid0) == 0, "query_gid 0");
  CHECK(gid0.raw[0] == 0xfe && gid0.raw[1] == 0x80 && be64toh(gid0.global.interface_id) == want_guid,
        "GID 0 is not fe80::EUI-64");
  CHECK(ibv_query_gid(ctx, 1, 1, &gid1) == 0, "query_gid 1");
  struct in_addr v4;
  inet_pton(AF_INET, argv[3], &v4);
  CHECK(gid1.raw[10] == 0xff && gid1.raw[11] == 0xff && !memcmp(&gid1.raw[12], &v4, 4), "GID 1 is not %s",
        argv[3]);
  struct ibv_gid_entry ge;
  CHECK(ibv_query_gid_ex(ctx, 1, 1, &ge, 0) == 0, "query_gid_ex");
  CHECK(ge.gid_type == IBV_GID_TYPE_ROCE_V2, "gid type %u", ge.gid_type);
  CHECK(ge.ndev_ifindex == if_nametoindex(netdev), "ndev_ifindex %u", ge.ndev_ifindex);
  uint16_t pkey;
  CHECK(ibv_query_pkey(ctx, 1, 0, &pkey) == 0 && pkey == 0xffff, "pkey");

  /* ---- PD and MR ---- */
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  REQUIRE(pd, "alloc_pd: %s", strerror(errno));
  static char mem[8192];
  struct ibv_mr* mr = ibv_reg_mr(pd, mem, sizeof mem, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  REQUIRE(mr, "reg_mr: %s", strerror(errno));
  CHECK(mr->addr == mem && mr->length == sizeof mem && mr->pd == pd && mr->context == ctx, "mr fields");
  errno = 0;
  CHECK(ibv_reg_mr(pd, mem, sizeof mem, IBV_ACCESS_REMOTE_WRITE) == NULL && errno == EINVAL,
        "REMOTE_WRITE without LOCAL_WRITE: errno %d", errno);
  CHECK(ibv_dealloc_pd(pd) == EBUSY, "dealloc_pd with an MR");

  /* ---- CQ and completion channel ---- */
  struct ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
  REQUIRE(ch, "create_comp_channel: %s", strerror(errno));
  CHECK(ch->fd > 2 && fstat(ch->fd, &st) == 0 && S_ISSOCK(st.st_mode), "channel fd %d is not a socket",
        ch->fd);
  CHECK(ibv_create_cq(ctx, 0, NULL, NULL, 0) == NULL, "cqe 0 accepted");
  CHECK(ibv_create_cq(ctx, 16, NULL, NULL, 5) == NULL && errno == EINVAL, "comp_vector 5 accepted");
  struct ibv_cq* cq = ibv_create_cq(ctx, 64, (void*)0x1234, ch, 0);
  REQUIRE(cq, "create_cq: %s", strerror(errno));
  CHECK(cq->cqe >= 64 && cq->channel == ch && cq->cq_context == (void*)0x1234, "cq fields");
  CHECK(ibv_destroy_comp_channel(ch) == EBUSY, "destroy channel in use");
  struct ibv_wc wc[4];
  CHECK(ibv_poll_cq(cq, 4, wc) == 0, "empty CQ polled something");

  /* ---- QP ---- */
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof ia);
  ia.send_cq = cq;
  ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = 8;
  ia.cap.max_recv_wr = 8;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  ia.qp_context = (void*)0x5678;
  struct ibv_qp* qp = ibv_create_qp(pd, &ia);
  REQUIRE(qp, "create_qp: %s", strerror(errno));
  CHECK(qp->context == ctx && qp->pd == pd && qp->send_cq == cq && qp->recv_cq == cq && qp->srq == NULL,
        "qp pointers");
  CHECK(qp->qp_context == (void*)0x5678 && qp->qp_type == IBV_QPT_RC && qp->state == IBV_QPS_RESET,
        "qp fields");
  CHECK(qp->qp_num >= 0x11 && qp->qp_num < (1u << 24), "qp_num %u", qp->qp_num);
  CHECK(ia.cap.max_send_wr >= 8 && ia.cap.max_recv_wr >= 8, "granted caps not reported");
  /* verbs_qp.comp_mask says "no ibv_qp_ex": ibv_qp_to_qp_ex must not hand one out. */
  CHECK(((struct verbs_qp*)qp)->comp_mask == 0, "comp_mask");
  CHECK(ibv_qp_to_qp_ex(qp) == NULL, "qp_ex for a plain QP");

  struct ibv_sge sge = {(uintptr_t)mem, 64, mr->lkey};
  struct ibv_send_wr swr, *bad_s = NULL;
  memset(&swr, 0, sizeof swr);
  swr.wr_id = 1;
  swr.sg_list = &sge;
  swr.num_sge = 1;
  swr.opcode = IBV_WR_SEND;
  swr.send_flags = IBV_SEND_SIGNALED;
  CHECK(ibv_post_send(qp, &swr, &bad_s) == EINVAL && bad_s == &swr, "post_send in RESET");
  struct ibv_recv_wr rwr, *bad_r = NULL;
  memset(&rwr, 0, sizeof rwr);
  rwr.wr_id = 2;
  struct ibv_sge rsge = {(uintptr_t)(mem + 4096), 4096, mr->lkey};
  rwr.sg_list = &rsge;
  rwr.num_sge = 1;
  CHECK(ibv_post_recv(qp, &rwr, &bad_r) == EINVAL && bad_r == &rwr, "post_recv in RESET");

  struct ibv_qp_attr qa;
  struct ibv_qp_init_attr qia;
  CHECK(ibv_query_qp(qp, &qa, IBV_QP_STATE | IBV_QP_CAP, &qia) == 0 && qa.qp_state == IBV_QPS_RESET,
        "query RESET");
  CHECK(qia.send_cq == cq && qia.qp_context == (void*)0x5678 && qia.qp_type == IBV_QPT_RC, "query init_attr");

  /* ---- loopback SEND to itself (port=loop), completion event through the channel ---- */
  REQUIRE(rc_to_init(qp) == 0, "RESET->INIT");
  CHECK(qp->state == IBV_QPS_INIT, "state after INIT %d", qp->state);
  CHECK(ibv_post_send(qp, &swr, &bad_s) == EINVAL, "post_send in INIT");
  REQUIRE(ibv_post_recv(qp, &rwr, &bad_r) == 0, "post_recv in INIT");
  REQUIRE(rc_to_rts(qp, qp->qp_num, &gid1, 1) == 0, "INIT->RTR->RTS: %s", strerror(errno));
  CHECK(ibv_query_qp(qp, &qa, IBV_QP_STATE, &qia) == 0 && qa.qp_state == IBV_QPS_RTS &&
            qa.dest_qp_num == qp->qp_num,
        "query RTS");
  for (int i = 0; i < 64; i++) mem[i] = (char)(i * 7 + 1);
  REQUIRE(ibv_req_notify_cq(cq, 0) == 0, "req_notify_cq");
  REQUIRE(ibv_post_send(qp, &swr, &bad_s) == 0, "post_send in RTS");
  struct pollfd pfd = {ch->fd, POLLIN, 0};
  CHECK(poll(&pfd, 1, 5000) == 1, "no completion event within 5 s");
  struct ibv_cq* ev_cq = NULL;
  void* ev_ctx = NULL;
  if (pfd.revents & POLLIN) {
    CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0, "get_cq_event");
    CHECK(ev_cq == cq && ev_ctx == (void*)0x1234, "event for another CQ");
    ibv_ack_cq_events(cq, 1);
  }
  int got = wait_cq(cq, wc, 2);
  CHECK(got == 2, "completions %d", got);
  int saw_send = 0, saw_recv = 0;
  for (int i = 0; i < got; i++) {
    CHECK(wc[i].status == IBV_WC_SUCCESS, "wc %d status %s", i, ibv_wc_status_str(wc[i].status));
    CHECK(wc[i].qp_num == qp->qp_num, "wc qp_num");
    if (wc[i].opcode == IBV_WC_SEND && wc[i].wr_id == 1) saw_send = 1;
    if (wc[i].opcode == IBV_WC_RECV && wc[i].wr_id == 2 && wc[i].byte_len == 64) saw_recv = 1;
  }
  CHECK(saw_send && saw_recv, "send %d recv %d", saw_send, saw_recv);
  CHECK(!memcmp(mem, mem + 4096, 64), "received bytes differ");

  /* A bad lkey fails locally with IBV_WC_LOC_PROT_ERR. */
  struct ibv_sge bad_sge = {(uintptr_t)mem, 64, mr->lkey ^ 0x5a5a00};
  swr.sg_list = &bad_sge;
  swr.wr_id = 3;
  CHECK(ibv_post_send(qp, &swr, &bad_s) == 0, "post_send bad lkey");
  got = wait_cq(cq, wc, 1);
  CHECK(got == 1 && wc[0].wr_id == 3 && wc[0].status == IBV_WC_LOC_PROT_ERR, "bad lkey: %d %s", got,
        got == 1 ? ibv_wc_status_str(wc[0].status) : "-");

  /* The error moved the QP to ERR; whatever async event that raised must be about this QP. */
  struct ibv_async_event aev;
  while (next_async(ctx, &aev, 100)) {
    CHECK(aev.element.qp == qp, "async %s not for the QP", ibv_event_type_str(aev.event_type));
    ibv_ack_async_event(&aev);
  }

  /* A second context on the same device (as a second process would be) hands out QPNs from another
   * block: QPNs are unique per device. */
  {
    struct ibv_context* ctx2 = ibv_open_device(dev);
    REQUIRE(ctx2, "second open: %s", strerror(errno));
    struct ibv_pd* pd2 = ibv_alloc_pd(ctx2);
    struct ibv_cq* cq2 = ibv_create_cq(ctx2, 4, NULL, NULL, 0);
    REQUIRE(pd2 && cq2, "second context pd/cq");
    struct ibv_qp_init_attr ia2 = ia;
    ia2.send_cq = cq2;
    ia2.recv_cq = cq2;
    struct ibv_qp* qp2 = ibv_create_qp(pd2, &ia2);
    REQUIRE(qp2, "second context qp: %s", strerror(errno));
    const uint32_t block = (uint32_t)da.max_qp; /* each context's QPN block: max_qp QPNs */
    CHECK(qp2->qp_num != qp->qp_num && (qp2->qp_num - 0x11) / block != (qp->qp_num - 0x11) / block,
          "QPN 0x%x of the second context is in the first one's block (0x%x)", qp2->qp_num, qp->qp_num);
    CHECK(ibv_destroy_qp(qp2) == 0 && ibv_destroy_cq(cq2) == 0 && ibv_dealloc_pd(pd2) == 0, "ctx2 teardown");
    CHECK(ibv_close_device(ctx2) == 0, "close ctx2");
  }

  if (srq_section(ctx, pd, mr, mem, &gid1)) return 1;
  if (ud_section(ctx, pd, mr, mem, &gid1)) return 1;
  if (qpex_section(ctx, pd, mr, mem, &gid1)) return 1;
  if (async_flood_section(ctx, pd, mr, mem, &gid1)) return 1;
  if (rereg_resize_section(ctx, pd, mr, mem, &gid1)) return 1;
  if (user_memory_section(pd)) return 1;

  /* ---- teardown, with the documented EBUSY ordering ---- */
  CHECK(ibv_destroy_cq(cq) == EBUSY, "destroy_cq with a QP");
  CHECK(ibv_destroy_qp(qp) == 0, "destroy_qp");
  /* drain anything the error flushed */
  while (ibv_poll_cq(cq, 4, wc) > 0) {
  }
  CHECK(ibv_destroy_cq(cq) == 0, "destroy_cq");
  CHECK(ibv_destroy_comp_channel(ch) == 0, "destroy_comp_channel");
  CHECK(ibv_dereg_mr(mr) == 0, "dereg_mr");
  CHECK(ibv_dealloc_pd(pd) == 0, "dealloc_pd");
  CHECK(ibv_close_device(ctx) == 0, "close_device");
  ibv_free_device_list(list);
  return test_result("verbs_test: all checks passed");
}
