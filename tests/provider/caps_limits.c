/* caps_test's limit rows (at the limit works, one beyond fails with the errno rdma-core documents) and zero
 * rows (a capability reported as 0: the verb behind it is refused). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tests/provider/caps_test.h"

/* ---- limits: at the limit works, one beyond fails ---- */

/* Objects of one kind created until `limit` exist (`held` already do), then one more must fail with
 * ENOMEM (resources exhausted, as ibv_alloc_pd/ibv_create_* report it). Frees them. */
typedef void* (*make_fn)(struct env*);
typedef void (*free_fn)(void*);
static int fill_to_limit(struct env* e, const char* what, uint64_t limit, uint64_t held, make_fn make,
                         free_fn release) {
  void** objs = calloc(limit, sizeof *objs);
  REQUIRE(objs, "calloc");
  uint64_t n = 0;
  for (; n + held < limit; n++)
    if (!(objs[n] = make(e))) break;
  CHECK(n + held == limit, "%s: %llu of %llu created: %s", what, (unsigned long long)(n + held),
        (unsigned long long)limit, strerror(errno));
  if (n + held == limit) {
    errno = 0;
    void* extra = make(e);
    CHECK(!extra && errno == ENOMEM, "%s beyond the limit: %s, errno %d", what, extra ? "created" : "refused",
          errno);
    if (extra) release(extra);
  }
  for (uint64_t i = 0; i < n; i++) release(objs[i]);
  free(objs);
  return 0;
}
static void* make_pd(struct env* e) {
  return ibv_alloc_pd(e->ctx);
}
static void free_pd(void* p) {
  ibv_dealloc_pd(p);
}
static void* make_cq(struct env* e) {
  return ibv_create_cq(e->ctx, 1, NULL, NULL, 0);
}
static void free_cq(void* p) {
  ibv_destroy_cq(p);
}
static void* make_mr(struct env* e) {
  return ibv_reg_mr(e->pd, e->mem, 4096, IBV_ACCESS_LOCAL_WRITE);
}
static void free_mr(void* p) {
  ibv_dereg_mr(p);
}
static void* make_srq(struct env* e) {
  struct ibv_srq_init_attr sia = {.attr = {.max_wr = 1, .max_sge = 1}};
  return ibv_create_srq(e->pd, &sia);
}
static void free_srq(void* p) {
  ibv_destroy_srq(p);
}
static void* make_ah(struct env* e) {
  return self_ah(e);
}
static void free_ah(void* p) {
  ibv_destroy_ah(p);
}
static void* make_qp(struct env* e) {
  struct ibv_qp_init_attr ia = qp_init_attr(e->cq, IBV_QPT_UD, 1);
  return ibv_create_qp(e->pd, &ia);
}
static void free_qp(void* p) {
  ibv_destroy_qp(p);
}

static int lim_max_qp(struct env* e, uint64_t v) {
  return fill_to_limit(e, "QPs", v, 0, make_qp, free_qp);
}
static int lim_max_pd(struct env* e, uint64_t v) {
  return fill_to_limit(e, "PDs", v, 1, make_pd, free_pd);
}
static int lim_max_cq(struct env* e, uint64_t v) {
  return fill_to_limit(e, "CQs", v, 1, make_cq, free_cq);
}
static int lim_max_mr(struct env* e, uint64_t v) {
  return fill_to_limit(e, "MRs", v, 1, make_mr, free_mr);
}
static int lim_max_srq(struct env* e, uint64_t v) {
  return fill_to_limit(e, "SRQs", v, 0, make_srq, free_srq);
}
static int lim_max_ah(struct env* e, uint64_t v) {
  return fill_to_limit(e, "AHs", v, 0, make_ah, free_ah);
}

/* create_qp with one capacity at `v` works and at v + 1 fails with EINVAL. */
static int qp_cap_limit(struct env* e, uint64_t v, size_t field_off) {
  for (uint64_t x = v; x <= v + 1; x++) {
    struct ibv_qp_init_attr ia = qp_init_attr(e->cq, IBV_QPT_RC, 1);
    *(uint32_t*)((char*)&ia.cap + field_off) = (uint32_t)x;
    errno = 0;
    struct ibv_qp* qp = ibv_create_qp(e->pd, &ia);
    if (x == v)
      CHECK(qp != NULL, "at the limit %llu: %s", (unsigned long long)x, strerror(errno));
    else
      CHECK(!qp && errno == EINVAL, "beyond the limit: %s, errno %d", qp ? "created" : "refused", errno);
    if (qp) ibv_destroy_qp(qp);
  }
  return 0;
}
static int lim_send_wr(struct env* e, uint64_t v) {
  return qp_cap_limit(e, v, offsetof(struct ibv_qp_cap, max_send_wr));
}
static int lim_recv_wr(struct env* e, uint64_t v) {
  return qp_cap_limit(e, v, offsetof(struct ibv_qp_cap, max_recv_wr));
}
static int lim_send_sge(struct env* e, uint64_t v) {
  return qp_cap_limit(e, v, offsetof(struct ibv_qp_cap, max_send_sge));
}
static int lim_recv_sge(struct env* e, uint64_t v) {
  return qp_cap_limit(e, v, offsetof(struct ibv_qp_cap, max_recv_sge));
}
static int lim_inline(struct env* e, uint64_t v) {
  return qp_cap_limit(e, v, offsetof(struct ibv_qp_cap, max_inline_data));
}

/* A READ scattered into max_sge_rd SGEs completes with the data in each; one SGE more is refused. */
static int lim_sge_rd(struct env* e, uint64_t v) {
  struct ibv_qp* qp = rc_self(e, 2, (uint32_t)e->dx.orig_attr.max_sge, 7);
  REQUIRE(qp, "RC QP with max_sge SGEs");
  struct ibv_sge* sg = calloc(v + 1, sizeof *sg);
  REQUIRE(sg, "calloc");
  for (uint64_t i = 0; i <= v; i++)
    sg[i] = (struct ibv_sge){(uintptr_t)(e->mem + 65536 + 2 * i), 1, e->mr->lkey};
  for (uint64_t i = 0; i < v; i++) e->mem[32768 + i] = (char)(i + 1);
  memset(e->mem + 65536, 0, 2 * (v + 1));
  struct ibv_send_wr w = {.wr_id = 9,
                          .sg_list = sg,
                          .num_sge = (int)v,
                          .opcode = IBV_WR_RDMA_READ,
                          .send_flags = IBV_SEND_SIGNALED},
                     *bad;
  w.wr.rdma.remote_addr = (uintptr_t)(e->mem + 32768);
  w.wr.rdma.rkey = e->mr->rkey;
  CHECK(ibv_post_send(qp, &w, &bad) == 0, "READ into %llu SGEs", (unsigned long long)v);
  struct ibv_wc wc;
  CHECK(wait_wc(e->cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "READ completion");
  int ok = 1;
  for (uint64_t i = 0; i < v; i++) ok &= e->mem[65536 + 2 * i] == (char)(i + 1);
  CHECK(ok, "READ data not in every SGE");
  w.num_sge = (int)v + 1;
  CHECK(ibv_post_send(qp, &w, &bad) == EINVAL, "READ into %llu SGEs accepted", (unsigned long long)v + 1);
  free(sg);
  ibv_destroy_qp(qp);
  return 0;
}

static int lim_cqe(struct env* e, uint64_t v) {
  struct ibv_cq* cq = ibv_create_cq(e->ctx, (int)v, NULL, NULL, 0);
  CHECK(cq != NULL, "cqe %llu: %s", (unsigned long long)v, strerror(errno));
  if (cq) ibv_destroy_cq(cq);
  errno = 0;
  cq = ibv_create_cq(e->ctx, (int)v + 1, NULL, NULL, 0);
  CHECK(!cq && errno == EINVAL, "cqe beyond: errno %d", errno);
  if (cq) ibv_destroy_cq(cq);
  return 0;
}

static int srq_limit(struct env* e, uint64_t v, int sge) {
  for (uint64_t x = v; x <= v + 1; x++) {
    struct ibv_srq_init_attr sia = {
        .attr = {.max_wr = sge ? 1 : (uint32_t)x, .max_sge = sge ? (uint32_t)x : 1}};
    errno = 0;
    struct ibv_srq* srq = ibv_create_srq(e->pd, &sia);
    if (x == v)
      CHECK(srq != NULL, "at the limit %llu: %s", (unsigned long long)x, strerror(errno));
    else
      CHECK(!srq && errno == EINVAL, "beyond: errno %d", errno);
    if (srq) ibv_destroy_srq(srq);
  }
  return 0;
}
static int lim_srq_wr(struct env* e, uint64_t v) {
  return srq_limit(e, v, 0);
}
static int lim_srq_sge(struct env* e, uint64_t v) {
  return srq_limit(e, v, 1);
}

/* RTR with max_dest_rd_atomic (init) / RTS with max_rd_atomic at the limit works, one more is EINVAL. */
static int rd_atom_limit(struct env* e, uint64_t v, int initiator) {
  for (uint64_t x = v; x <= v + 1; x++) {
    struct ibv_qp_init_attr ia = qp_init_attr(e->cq, IBV_QPT_RC, 1);
    struct ibv_qp* qp = ibv_create_qp(e->pd, &ia);
    REQUIRE(qp && rc_to_init(qp) == 0, "QP");
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = qp->qp_num;
    a.rq_psn = 1;
    a.max_dest_rd_atomic = (uint8_t)(initiator ? 1 : x);
    a.min_rnr_timer = 1;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = e->gid;
    a.ah_attr.grh.sgid_index = kGid;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.port_num = 1;
    int rc = ibv_modify_qp(qp, &a,
                           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                               IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (initiator && !rc) {
      a.qp_state = IBV_QPS_RTS;
      a.timeout = 14;
      a.retry_cnt = 7;
      a.rnr_retry = 7;
      a.sq_psn = 1;
      a.max_rd_atomic = (uint8_t)x;
      rc = ibv_modify_qp(qp, &a,
                         IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                             IBV_QP_MAX_QP_RD_ATOMIC);
    }
    CHECK(rc == (x == v ? 0 : EINVAL), "%llu: rc %d", (unsigned long long)x, rc);
    ibv_destroy_qp(qp);
  }
  return 0;
}
static int lim_qp_rd_atom(struct env* e, uint64_t v) {
  return rd_atom_limit(e, v, 1);
}
static int lim_qp_init_rd_atom(struct env* e, uint64_t v) {
  return rd_atom_limit(e, v, 0);
}

/* A message one byte longer than max_msg_sz is refused at post (at the limit: 2^31 bytes, covered by the
 * engine's tests, not moved here). */
static int lim_msg_sz(struct env* e, uint64_t v) {
  struct ibv_qp* qp = rc_self(e, 2, 1, 7);
  REQUIRE(qp, "QP");
  struct ibv_sge s = {(uintptr_t)e->mem, (uint32_t)(v + 1), e->mr->lkey};
  struct ibv_send_wr w = {.sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE}, *bad;
  w.wr.rdma.remote_addr = (uintptr_t)e->mem;
  w.wr.rdma.rkey = e->mr->rkey;
  CHECK(ibv_post_send(qp, &w, &bad) == EINVAL, "a message of max_msg_sz + 1 bytes accepted");
  ibv_destroy_qp(qp);
  return 0;
}

static int lim_pkeys(struct env* e, uint64_t v) {
  struct ibv_qp_init_attr ia = qp_init_attr(e->cq, IBV_QPT_RC, 1);
  struct ibv_qp* qp = ibv_create_qp(e->pd, &ia);
  REQUIRE(qp, "QP");
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .pkey_index = (uint16_t)v};
  CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == EINVAL,
        "P_Key index %llu accepted", (unsigned long long)v);
  a.pkey_index = (uint16_t)(v - 1);
  CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
        "P_Key index %llu", (unsigned long long)v - 1);
  __be16 pkey;
  CHECK(ibv_query_pkey(e->ctx, 1, (int)v - 1, &pkey) == 0 && pkey == htons(0xffff), "P_Key table");
  ibv_destroy_qp(qp);
  return 0;
}
static int lim_gid_tbl(struct env* e, uint64_t v) {
  union ibv_gid g;
  CHECK(ibv_query_gid(e->ctx, 1, (int)v - 1, &g) == 0, "last GID index");
  CHECK(ibv_query_gid(e->ctx, 1, (int)v, &g) != 0, "GID index %llu answered", (unsigned long long)v);
  return 0;
}
static int lim_ports(struct env* e, uint64_t v) {
  struct ibv_port_attr p;
  CHECK(ibv_query_port(e->ctx, (uint8_t)v, &p) == 0, "port %llu", (unsigned long long)v);
  CHECK(ibv_query_port(e->ctx, (uint8_t)(v + 1), &p) != 0, "port %llu answered", (unsigned long long)v + 1);
  return 0;
}

/* IBV_ATOMIC_HCA: fetch-and-add and compare-and-swap on the same QP's memory return the old value and
 * change it. */
static int atomics_work(struct env* e, uint64_t v) {
  CHECK(v == IBV_ATOMIC_HCA, "atomic_cap %llu", (unsigned long long)v);
  struct ibv_qp* qp = rc_self(e, 2, 1, 7);
  REQUIRE(qp, "QP");
  uint64_t* target = (uint64_t*)(e->mem + 16384);
  uint64_t* result = (uint64_t*)(e->mem + 16392);
  *target = 40;
  for (int op = 0; op < 2; op++) {
    struct ibv_sge s = {(uintptr_t)result, 8, e->mr->lkey};
    struct ibv_send_wr w = {.sg_list = &s, .num_sge = 1, .send_flags = IBV_SEND_SIGNALED}, *bad;
    w.opcode = op ? IBV_WR_ATOMIC_CMP_AND_SWP : IBV_WR_ATOMIC_FETCH_AND_ADD;
    w.wr.atomic.remote_addr = (uintptr_t)target;
    w.wr.atomic.rkey = e->mr->rkey;
    w.wr.atomic.compare_add = op ? 42 : 2;
    w.wr.atomic.swap = 7;
    REQUIRE(ibv_post_send(qp, &w, &bad) == 0, "atomic post");
    struct ibv_wc wc;
    CHECK(wait_wc(e->cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "atomic %d", op);
    CHECK(*result == (op ? 42u : 40u), "atomic %d returned %llu", op, (unsigned long long)*result);
  }
  CHECK(*target == 7, "after fetch-add 2 and compare 42 swap 7: %llu", (unsigned long long)*target);
  ibv_destroy_qp(qp);
  return 0;
}

/* max_mw: 0 means the verb is refused (EOPNOTSUPP); otherwise a window can be allocated (sampled: one). */
static int lim_mw(struct env* e, uint64_t v) {
  errno = 0;
  struct ibv_mw* mw = ibv_alloc_mw(e->pd, IBV_MW_TYPE_1);
  if (v == 0)
    CHECK(!mw && errno == EOPNOTSUPP, "max_mw 0 but alloc_mw: errno %d", errno);
  else
    CHECK(mw != NULL, "alloc_mw: %s", strerror(errno));
  if (mw) ibv_dealloc_mw(mw);
  return 0;
}

/* ATOMIC WRITE (IBTA Annex A19) has no capability bit in rdma-core 44: create_qp_ex with
 * IBV_QP_EX_WITH_ATOMIC_WRITE tells. RC: ibv_wr_atomic_write stores the 8 bytes; UD: EOPNOTSUPP. */
static struct ibv_qp* qp_ex_with(struct env* e, enum ibv_qp_type type, uint64_t ops) {
  struct ibv_qp_init_attr_ex ax;
  memset(&ax, 0, sizeof ax);
  ax.qp_type = type;
  ax.send_cq = ax.recv_cq = e->cq;
  ax.cap.max_send_wr = ax.cap.max_recv_wr = ax.cap.max_send_sge = ax.cap.max_recv_sge = 1;
  ax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  ax.pd = e->pd;
  ax.send_ops_flags = ops;
  return ibv_create_qp_ex(e->ctx, &ax);
}
static int atomic_write_works(struct env* e, uint64_t v) {
  (void)v;
  errno = 0;
  struct ibv_qp* ud = qp_ex_with(e, IBV_QPT_UD, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_ATOMIC_WRITE);
  CHECK(!ud && errno == EOPNOTSUPP, "UD QP with atomic write: errno %d", errno);
  if (ud) ibv_destroy_qp(ud);
  struct ibv_qp* qp = qp_ex_with(e, IBV_QPT_RC, IBV_QP_EX_WITH_ATOMIC_WRITE);
  REQUIRE(qp && rc_to_init(qp) == 0 && rc_to_rts(qp, qp->qp_num, &e->gid, kGid) == 0, "RC QP: %s",
          strerror(errno));
  struct ibv_qp_ex* x = ibv_qp_to_qp_ex(qp);
  REQUIRE(x, "ibv_qp_to_qp_ex");
  uint64_t* target = (uint64_t*)(e->mem + 24576);
  *target = 0;
  const uint64_t value = 0x0123456789abcdefull;
  ibv_wr_start(x);
  x->wr_id = 77;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_atomic_write(x, e->mr->rkey, (uintptr_t)target, &value);
  CHECK(ibv_wr_complete(x) == 0, "wr_complete");
  struct ibv_wc wc;
  CHECK(wait_wc(e->cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_ATOMIC_WRITE &&
            wc.wr_id == 77,
        "atomic write completion: %s opcode %d", ibv_wc_status_str(wc.status), wc.opcode);
  CHECK(*target == value, "target %llx", (unsigned long long)*target);
  ibv_destroy_qp(qp);
  return 0;
}
static uint64_t supported(const struct env* e) {
  (void)e;
  return 1;
}

/* ---- capabilities reported as 0: the verb behind each is refused ---- */

/* UD multicast: IPv6 groups ff0e::n (any port: the loop port passes every group). */
static union ibv_gid mc_gid(uint32_t n) {
  union ibv_gid g = {.raw = {0xff, 0x0e}};
  g.raw[12] = (uint8_t)(n >> 24);
  g.raw[13] = (uint8_t)(n >> 16);
  g.raw[14] = (uint8_t)(n >> 8);
  g.raw[15] = (uint8_t)n;
  return g;
}
/* One QP in max_mcast_grp groups, one group more: ENOMEM. */
static int lim_mcast_grp(struct env* e, uint64_t v) {
  struct ibv_qp* qp = ud_qp(e, 1);
  REQUIRE(qp, "UD QP");
  uint32_t n = 0;
  int rc = 0;
  for (; n < v; n++) {
    union ibv_gid g = mc_gid(n);
    if ((rc = ibv_attach_mcast(qp, &g, 0))) break;
  }
  CHECK(n == v, "attached to %u of %llu groups: %d", n, (unsigned long long)v, rc);
  union ibv_gid extra = mc_gid(n);
  if (n == v) CHECK((rc = ibv_attach_mcast(qp, &extra, 0)) == ENOMEM, "one group more: %d", rc);
  for (uint32_t i = 0; i < n; i++) {
    union ibv_gid g = mc_gid(i);
    ibv_detach_mcast(qp, &g, 0);
  }
  CHECK(ibv_destroy_qp(qp) == 0, "destroy after detaching all");
  return 0;
}
/* max_mcast_qp_attach QPs in one group, one QP more: ENOMEM. */
static int lim_mcast_qp_attach(struct env* e, uint64_t v) {
  struct ibv_qp** qps = calloc(v + 1, sizeof *qps);
  REQUIRE(qps, "calloc");
  union ibv_gid g = mc_gid(7);
  uint64_t n = 0;
  int rc = 0;
  for (; n <= v; n++) {
    if (!(qps[n] = ud_qp(e, 1))) break;
    if ((rc = ibv_attach_mcast(qps[n], &g, 0))) break;
  }
  CHECK(n == v && rc == ENOMEM, "%llu QPs attached (of %llu), the next: %d", (unsigned long long)n,
        (unsigned long long)v, rc);
  for (uint64_t i = 0; i <= v && qps[i]; i++) {
    ibv_detach_mcast(qps[i], &g, 0);
    ibv_destroy_qp(qps[i]);
  }
  free(qps);
  return 0;
}
/* As rxe: the product of the two limits above, so they bind first (the engine's tests check ENOMEM for a
 * smaller total). */
static int lim_mcast_total(struct env* e, uint64_t v) {
  const uint64_t all =
      (uint64_t)e->dx.orig_attr.max_mcast_grp * (uint64_t)e->dx.orig_attr.max_mcast_qp_attach;
  CHECK(v == all, "max_total_mcast_qp_attach %llu, groups x QPs per group %llu", (unsigned long long)v,
        (unsigned long long)all);
  return 0;
}
/* max_dm_size: 0, alloc_dm refused; otherwise the whole of it can be allocated at once, nothing beyond it,
 * and its bytes round-trip through the copy calls and an MR over it registers. */
static int lim_dm(struct env* e, uint64_t v) {
  struct ibv_alloc_dm_attr a = {.length = v ? v : 64};
  errno = 0;
  struct ibv_dm* dm = ibv_alloc_dm(e->ctx, &a);
  if (v == 0) {
    CHECK(!dm && errno == EOPNOTSUPP, "alloc_dm: errno %d", errno);
    return 0;
  }
  CHECK(dm != NULL, "alloc_dm of max_dm_size: %s", strerror(errno));
  if (!dm) return 0;
  struct ibv_alloc_dm_attr more = {.length = 4};
  errno = 0;
  struct ibv_dm* beyond = ibv_alloc_dm(e->ctx, &more);
  CHECK(!beyond && errno == ENOMEM, "a DM beyond max_dm_size: errno %d", errno);
  if (beyond) ibv_free_dm(beyond);
  uint32_t in[16], out[16];
  for (int i = 0; i < 16; i++) in[i] = 0x01010101u * (uint32_t)i;
  CHECK(!ibv_memcpy_to_dm(dm, v - sizeof in, in, sizeof in) &&
            !ibv_memcpy_from_dm(out, dm, v - sizeof in, sizeof out) && !memcmp(in, out, sizeof in),
        "DM copy round trip at its end");
  struct ibv_mr* mr = ibv_reg_dm_mr(e->pd, dm, 0, v, IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE);
  CHECK(mr != NULL, "reg_dm_mr over it: %s", strerror(errno));
  if (mr) ibv_dereg_mr(mr);
  CHECK(ibv_free_dm(dm) == 0, "free_dm");
  return 0;
}
/* completion_timestamp_mask: 0, a timestamped CQ refused; otherwise one is made, and the raw clock read by
 * ibv_query_rt_values_ex fits the mask (hca_core_clock non-zero). */
static int lim_timestamp(struct env* e, uint64_t v) {
  struct ibv_cq_init_attr_ex ca = {.cqe = 4, .wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP};
  errno = 0;
  struct ibv_cq_ex* cq = ibv_create_cq_ex(e->ctx, &ca);
  if (v == 0) {
    CHECK(!cq && errno == EOPNOTSUPP, "timestamped CQ: errno %d", errno);
  } else {
    CHECK(cq != NULL, "timestamped CQ: %s", strerror(errno));
    struct ibv_values_ex rt = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK};
    CHECK(ibv_query_rt_values_ex(e->ctx, &rt) == 0 && (rt.comp_mask & IBV_VALUES_MASK_RAW_CLOCK) &&
              ((uint64_t)rt.raw_clock.tv_nsec & ~v) == 0 && e->dx.hca_core_clock != 0,
          "raw clock within completion_timestamp_mask, hca_core_clock %llu",
          (unsigned long long)e->dx.hca_core_clock);
  }
  if (cq) ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
  return 0;
}
/* odp_caps.general_caps: 0, an ODP MR refused; otherwise one registers (and an implicit one when
 * IBV_ODP_SUPPORT_IMPLICIT is set) and ibv_advise_mr prefetches it. */
static int lim_odp(struct env* e, uint64_t v) {
  errno = 0;
  struct ibv_mr* mr = ibv_reg_mr(e->pd, e->mem, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
  if (v == 0) {
    CHECK(!mr && errno == EOPNOTSUPP, "ODP MR: errno %d", errno);
  } else {
    CHECK(mr != NULL, "ODP MR: %s", strerror(errno));
    if (mr) {
      struct ibv_sge sge = {.addr = (uintptr_t)e->mem, .length = 4096, .lkey = mr->lkey};
      CHECK(ibv_advise_mr(e->pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1) == 0,
            "advise_mr: %s", strerror(errno));
    }
    if (v & IBV_ODP_SUPPORT_IMPLICIT) {
      struct ibv_mr* imp = ibv_reg_mr(e->pd, NULL, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
      CHECK(imp != NULL, "implicit ODP MR: %s", strerror(errno));
      if (imp) ibv_dereg_mr(imp);
    }
  }
  if (mr) ibv_dereg_mr(mr);
  return 0;
}
static int zero_tso(struct env* e, uint64_t v) {
  (void)v;
  struct ibv_qp_init_attr_ex ax;
  memset(&ax, 0, sizeof ax);
  ax.qp_type = IBV_QPT_UD;
  ax.send_cq = ax.recv_cq = e->cq;
  ax.cap.max_send_wr = ax.cap.max_recv_wr = ax.cap.max_send_sge = ax.cap.max_recv_sge = 1;
  ax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_MAX_TSO_HEADER;
  ax.pd = e->pd;
  ax.max_tso_header = 64;
  errno = 0;
  struct ibv_qp* qp = ibv_create_qp_ex(e->ctx, &ax);
  CHECK(!qp && errno == EOPNOTSUPP, "TSO QP: errno %d", errno);
  if (qp) ibv_destroy_qp(qp);
  return 0;
}
static int zero_raw_packet(struct env* e, uint64_t v) {
  (void)v;
  struct ibv_qp_init_attr ia = qp_init_attr(e->cq, IBV_QPT_RAW_PACKET, 1);
  errno = 0;
  struct ibv_qp* qp = ibv_create_qp(e->pd, &ia);
  CHECK(!qp && errno == EOPNOTSUPP, "raw packet QP: errno %d", errno);
  if (qp) ibv_destroy_qp(qp);
  return 0;
}
static int zero_wq(struct env* e, uint64_t v) {
  (void)v;
  struct ibv_wq_init_attr wa = {.wq_type = IBV_WQT_RQ, .max_wr = 1, .max_sge = 1, .pd = e->pd, .cq = e->cq};
  errno = 0;
  struct ibv_wq* wq = ibv_create_wq(e->ctx, &wa);
  CHECK(!wq && errno == EOPNOTSUPP, "create_wq: errno %d", errno);
  return 0;
}
/* A tag-matching SRQ with max_num_tags tags (v + 1: EINVAL) holds that many, one more: ENOMEM; a tag of
 * tm_caps.max_sge + 1 SGEs: EINVAL. */
static struct ibv_srq* tm_srq(struct env* e, uint32_t tags) {
  struct ibv_srq_init_attr_ex sa;
  memset(&sa, 0, sizeof sa);
  sa.attr.max_wr = 1;
  sa.attr.max_sge = 1;
  sa.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
  sa.srq_type = IBV_SRQT_TM;
  sa.pd = e->pd;
  sa.cq = e->cq;
  sa.tm_cap.max_num_tags = tags;
  sa.tm_cap.max_ops = 1;
  errno = 0;
  return ibv_create_srq_ex(e->ctx, &sa);
}
static int lim_tm_tags(struct env* e, uint64_t v) {
  CHECK(e->dx.tm_caps.flags == IBV_TM_CAP_RC, "tm_caps.flags %u", e->dx.tm_caps.flags);
  struct ibv_srq* srq = tm_srq(e, (uint32_t)v + 1);
  CHECK(!srq && errno == EINVAL, "max_num_tags + 1: %s, errno %d", srq ? "created" : "refused", errno);
  srq = tm_srq(e, (uint32_t)v);
  CHECK(srq != NULL, "TM SRQ of max_num_tags: %s", strerror(errno));
  struct ibv_sge sge[2] = {{(uintptr_t)e->mem, 8, e->mr->lkey}, {(uintptr_t)e->mem + 8, 8, e->mr->lkey}};
  struct ibv_ops_wr op, *bad = NULL;
  memset(&op, 0, sizeof op);
  op.opcode = IBV_WR_TAG_ADD;
  op.tm.add.sg_list = sge;
  op.tm.add.num_sge = (int)e->dx.tm_caps.max_sge + 1;
  int rc = ibv_post_srq_ops(srq, &op, &bad);
  CHECK(rc == EINVAL && bad == &op, "a tag of max_sge + 1 SGEs: %d", rc);
  op.tm.add.num_sge = 1;
  for (uint64_t i = 0; i < v; i++) {
    op.tm.add.tag = i;
    rc = ibv_post_srq_ops(srq, &op, &bad);
    CHECK(rc == 0, "tag %llu of %llu: %d", (unsigned long long)i, (unsigned long long)v, rc);
  }
  rc = ibv_post_srq_ops(srq, &op, &bad);
  CHECK(rc == ENOMEM, "one tag more: %d", rc);
  CHECK(ibv_destroy_srq(srq) == 0, "destroy TM SRQ");
  return 0;
}
static int zero_cq_moderation(struct env* e, uint64_t v) {
  (void)v;
  struct ibv_modify_cq_attr a = {.attr_mask = IBV_CQ_ATTR_MODERATE,
                                 .moderate = {.cq_count = 4, .cq_period = 4}};
  const int rc = ibv_modify_cq(e->cq, &a);
  CHECK(rc == EOPNOTSUPP, "modify_cq moderation: %d", rc);
  return 0;
}

/* ---- the table ---- */

#define DEV(f) dev_##f
#define DEV_FIELD(f, expr)                       \
  static uint64_t dev_##f(const struct env* e) { \
    return (uint64_t)(expr);                     \
  }
DEV_FIELD(max_qp, e->dx.orig_attr.max_qp)
DEV_FIELD(max_qp_wr, e->dx.orig_attr.max_qp_wr)
DEV_FIELD(max_sge, e->dx.orig_attr.max_sge)
DEV_FIELD(max_sge_rd, e->dx.orig_attr.max_sge_rd)
DEV_FIELD(max_cq, e->dx.orig_attr.max_cq)
DEV_FIELD(max_cqe, e->dx.orig_attr.max_cqe)
DEV_FIELD(max_mr, e->dx.orig_attr.max_mr)
DEV_FIELD(max_pd, e->dx.orig_attr.max_pd)
DEV_FIELD(max_qp_rd_atom, e->dx.orig_attr.max_qp_rd_atom)
DEV_FIELD(max_qp_init_rd_atom, e->dx.orig_attr.max_qp_init_rd_atom)
DEV_FIELD(max_srq, e->dx.orig_attr.max_srq)
DEV_FIELD(max_srq_wr, e->dx.orig_attr.max_srq_wr)
DEV_FIELD(max_srq_sge, e->dx.orig_attr.max_srq_sge)
DEV_FIELD(max_ah, e->dx.orig_attr.max_ah)
DEV_FIELD(max_pkeys, e->dx.orig_attr.max_pkeys)
DEV_FIELD(phys_port_cnt, e->dx.orig_attr.phys_port_cnt)
DEV_FIELD(atomic_cap, e->dx.orig_attr.atomic_cap)
DEV_FIELD(max_mw, e->dx.orig_attr.max_mw)
DEV_FIELD(max_mcast_grp, e->dx.orig_attr.max_mcast_grp)
DEV_FIELD(max_mcast_qp_attach, e->dx.orig_attr.max_mcast_qp_attach)
DEV_FIELD(max_total_mcast_qp_attach, e->dx.orig_attr.max_total_mcast_qp_attach)
DEV_FIELD(max_dm_size, e->dx.max_dm_size)
DEV_FIELD(completion_timestamp_mask, e->dx.completion_timestamp_mask)
DEV_FIELD(odp_general_caps, e->dx.odp_caps.general_caps)
DEV_FIELD(max_tso, e->dx.tso_caps.max_tso)
DEV_FIELD(raw_packet_caps, e->dx.raw_packet_caps)
DEV_FIELD(max_wq_type_rq, e->dx.max_wq_type_rq)
DEV_FIELD(max_num_tags, e->dx.tm_caps.max_num_tags)
DEV_FIELD(max_cq_count, e->dx.cq_mod_caps.max_cq_count)
DEV_FIELD(max_msg_sz, e->port.max_msg_sz)
DEV_FIELD(gid_tbl_len, e->port.gid_tbl_len)
/* Not a device attribute: the largest max_inline_data a QP accepts (the engine's, as rxe's 400 bytes). */
static uint64_t dev_max_inline(const struct env* e) {
  (void)e;
  return 400;
}

const struct limit_row kLimitRows[] = {
    {.name = "max_qp",
     .value = DEV(max_qp),
     .check = lim_max_qp,
     .how = "every QP created (UD, 1 WR), one more: ENOMEM"},
    {.name = "max_qp_wr (send)", .value = DEV(max_qp_wr), .check = lim_send_wr},
    {.name = "max_qp_wr (recv)", .value = DEV(max_qp_wr), .check = lim_recv_wr},
    {.name = "max_sge (send)", .value = DEV(max_sge), .check = lim_send_sge},
    {.name = "max_sge (recv)", .value = DEV(max_sge), .check = lim_recv_sge},
    {.name = "max_sge_rd",
     .value = DEV(max_sge_rd),
     .check = lim_sge_rd,
     .how = "a READ into that many SGEs, data checked"},
    {.name = "max_cq",
     .value = DEV(max_cq),
     .check = lim_max_cq,
     .how = "every CQ created, one more: ENOMEM"},
    {.name = "max_cqe", .value = DEV(max_cqe), .check = lim_cqe},
    {.name = "max_mr",
     .value = DEV(max_mr),
     .check = lim_max_mr,
     .how = "every MR registered, one more: ENOMEM"},
    {.name = "max_pd",
     .value = DEV(max_pd),
     .check = lim_max_pd,
     .how = "every PD allocated, one more: ENOMEM"},
    {.name = "max_qp_rd_atom",
     .value = DEV(max_qp_rd_atom),
     .check = lim_qp_rd_atom,
     .how = "RTS max_rd_atomic"},
    {.name = "max_qp_init_rd_atom",
     .value = DEV(max_qp_init_rd_atom),
     .check = lim_qp_init_rd_atom,
     .how = "RTR max_dest_rd_atomic"},
    {.name = "max_srq",
     .value = DEV(max_srq),
     .check = lim_max_srq,
     .how = "every SRQ created, one more: ENOMEM"},
    {.name = "max_srq_wr", .value = DEV(max_srq_wr), .check = lim_srq_wr},
    {.name = "max_srq_sge", .value = DEV(max_srq_sge), .check = lim_srq_sge},
    {.name = "max_ah",
     .value = DEV(max_ah),
     .check = lim_max_ah,
     .how = "every AH created, one more: ENOMEM"},
    {.name = "max_inline_data",
     .value = dev_max_inline,
     .check = lim_inline,
     .how = "QP cap (no device attribute reports it)"},
    {.name = "max_pkeys", .value = DEV(max_pkeys), .check = lim_pkeys, .how = "P_Key index"},
    {.name = "phys_port_cnt", .value = DEV(phys_port_cnt), .check = lim_ports, .how = "query_port"},
    {.name = "port max_msg_sz",
     .value = DEV(max_msg_sz),
     .check = lim_msg_sz,
     .how = "one byte more refused at post; 2^31 itself: engine tests"},
    {.name = "port gid_tbl_len", .value = DEV(gid_tbl_len), .check = lim_gid_tbl, .how = "query_gid"},
    {.name = "atomic_cap",
     .value = DEV(atomic_cap),
     .check = atomics_work,
     .how = "IBV_ATOMIC_HCA: fetch-add and compare-swap work"},
    {.name = "ATOMIC_WRITE (RC send op)",
     .value = supported,
     .check = atomic_write_works,
     .how = "no capability bit: create_qp_ex tells; RC stores, UD refused"},
    {.name = "max_mw", .value = DEV(max_mw), .check = lim_mw, .how = "0: alloc_mw refused"},
    {.name = "max_mcast_grp",
     .value = DEV(max_mcast_grp),
     .check = lim_mcast_grp,
     .how = "one QP in every group, one more: ENOMEM"},
    {.name = "max_mcast_qp_attach",
     .value = DEV(max_mcast_qp_attach),
     .check = lim_mcast_qp_attach,
     .how = "that many QPs in one group, one more: ENOMEM"},
    {.name = "max_total_mcast_qp_attach",
     .value = DEV(max_total_mcast_qp_attach),
     .check = lim_mcast_total,
     .how = "groups x QPs per group (as rxe): those limits bind first"},
    {.name = "max_dm_size",
     .value = DEV(max_dm_size),
     .check = lim_dm,
     .how = "all of it at once, nothing beyond; copies and a DM MR"},
    {.name = "completion_timestamp_mask",
     .value = DEV(completion_timestamp_mask),
     .check = lim_timestamp,
     .how = "a timestamped CQ; the raw clock fits the mask"},
    {.name = "odp_caps.general_caps",
     .value = DEV(odp_general_caps),
     .check = lim_odp,
     .how = "ODP and implicit MRs, advise_mr"},
    {.name = "tso_caps.max_tso",
     .value = DEV(max_tso),
     .check = zero_tso,
     .how = "0: QP with a TSO header refused",
     .zero_only = 1},
    {.name = "raw_packet_caps",
     .value = DEV(raw_packet_caps),
     .check = zero_raw_packet,
     .how = "0: raw packet QP refused",
     .zero_only = 1},
    {.name = "max_wq_type_rq",
     .value = DEV(max_wq_type_rq),
     .check = zero_wq,
     .how = "0: create_wq refused",
     .zero_only = 1},
    {.name = "tm_caps.max_num_tags",
     .value = DEV(max_num_tags),
     .check = lim_tm_tags,
     .how = "a TM SRQ holds that many tags, one more: ENOMEM"},
    {.name = "cq_mod_caps.max_cq_count",
     .value = DEV(max_cq_count),
     .check = zero_cq_moderation,
     .how = "0: CQ moderation refused",
     .zero_only = 1},
};
const size_t kNumLimitRows = sizeof kLimitRows / sizeof kLimitRows[0];

int caps_limits_failures(void) {
  return failures;
}
