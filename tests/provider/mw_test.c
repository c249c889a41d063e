/* Memory windows through libibverbs (provider/mw.cc, engine/mw.cc), between two RC QPs of one context over
 * the device's port: the capabilities, ibv_alloc_mw / ibv_dealloc_mw, a type-1 window bound by ibv_bind_mw,
 * a type-2 window bound by IBV_WR_BIND_MW and by ibv_wr_bind_mw, RDMA WRITE/READ/atomic through them,
 * LOCAL_INV and SEND_WITH_INV of the type-2 window, ibv_dereg_mr and ibv_dealloc_pd while windows hold them,
 * and a WRITE through an invalidated window failing with a remote access error. Run by in_netns.sh as root.
 * Usage: mw_test DEVICE */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static struct ibv_cq* cq;

/* The next completion (10 s at most); status -1 when none came. */
static struct ibv_wc next_wc(void) {
  struct ibv_wc wc;
  memset(&wc, 0, sizeof wc);
  wc.status = (enum ibv_wc_status) - 1;
  const double end = now_ms() + 10000;
  while (now_ms() < end) {
    int n = ibv_poll_cq(cq, 1, &wc);
    if (n != 0) break;
  }
  return wc;
}

/* One signaled RDMA op of `len` bytes from `local` (lkey) to `remote_addr` through `rkey`; its completion. */
static struct ibv_wc rdma(struct ibv_qp* qp, enum ibv_wr_opcode op, void* local, uint32_t len, uint32_t lkey,
                          uint64_t remote_addr, uint32_t rkey) {
  struct ibv_sge sge = {(uintptr_t)local, len, lkey};
  struct ibv_send_wr wr, *bad;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = 10;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = op;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
    wr.wr.atomic.remote_addr = remote_addr;
    wr.wr.atomic.rkey = rkey;
    wr.wr.atomic.compare_add = 1;
  } else {
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
  }
  if (ibv_post_send(qp, &wr, &bad)) {
    struct ibv_wc none;
    memset(&none, 0, sizeof none);
    none.status = (enum ibv_wc_status) - 1;
    return none;
  }
  return next_wc();
}

static struct ibv_qp* create_qp(struct ibv_context* ctx, struct ibv_pd* pd) {
  struct ibv_qp_init_attr_ex ia;
  memset(&ia, 0, sizeof ia);
  ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  ia.pd = pd;
  ia.send_cq = ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 16;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  ia.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_BIND_MW |
                      IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV;
  return ibv_create_qp_ex(ctx, &ia);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s DEVICE\n", argv[0]);
    return 2;
  }
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  struct ibv_device* dev = find_device(list, n, argv[1]);
  REQUIRE(dev, "no device %s", argv[1]);
  struct ibv_context* ctx = ibv_open_device(dev);
  REQUIRE(ctx, "open %s: %s", argv[1], strerror(errno));

  struct ibv_device_attr_ex da;
  REQUIRE(ibv_query_device_ex(ctx, NULL, &da) == 0, "query_device_ex");
  CHECK(da.orig_attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW, "MEM_WINDOW not advertised");
  CHECK(da.orig_attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B, "MEM_WINDOW_TYPE_2B not advertised");
  CHECK(!(da.orig_attr.device_cap_flags & IBV_DEVICE_MEM_MGT_EXTENSIONS), "MEM_MGT_EXTENSIONS advertised");
  CHECK(da.orig_attr.max_mw > 0, "max_mw %d", da.orig_attr.max_mw);

  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
  REQUIRE(pd && cq, "pd/cq");
  struct ibv_qp* qa = create_qp(ctx, pd); /* the peer: reaches b's memory through windows */
  struct ibv_qp* qb = create_qp(ctx, pd); /* owns the memory and binds the windows */
  REQUIRE(qa && qb, "create_qp_ex with BIND_MW / LOCAL_INV / SEND_WITH_INV: %s", strerror(errno));
  REQUIRE(rc_to_init(qa) == 0 && rc_to_init(qb) == 0 && rc_connect_pair(ctx, qa, qb) == 0, "connect");
  char* amem = calloc(1, 4096);
  char* bmem = calloc(1, 4096);
  struct ibv_mr* amr = ibv_reg_mr(pd, amem, 4096, IBV_ACCESS_LOCAL_WRITE);
  /* b's MR grants no remote right: only the windows do */
  struct ibv_mr* bmr = ibv_reg_mr(pd, bmem, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  REQUIRE(amr && bmr, "reg_mr with MW_BIND: %s", strerror(errno));

  errno = 0;
  CHECK(ibv_alloc_mw(pd, (enum ibv_mw_type)3) == NULL && errno == EINVAL, "MW type 3: errno %d", errno);
  struct ibv_mw* mw1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
  struct ibv_mw* mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
  REQUIRE(mw1 && mw2, "alloc_mw: %s", strerror(errno));
  CHECK(mw1->type == IBV_MW_TYPE_1 && mw2->type == IBV_MW_TYPE_2 && mw1->pd == pd, "mw fields");

  /* Type 1: ibv_bind_mw. */
  struct ibv_mw_bind bind;
  memset(&bind, 0, sizeof bind);
  bind.wr_id = 1;
  bind.send_flags = IBV_SEND_SIGNALED;
  bind.bind_info.mr = bmr;
  bind.bind_info.addr = (uintptr_t)bmem;
  bind.bind_info.length = 1024;
  bind.bind_info.mw_access_flags =
      IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  const uint32_t key0 = mw1->rkey;
  bind.bind_info.mw_access_flags |= IBV_ACCESS_ZERO_BASED;
  CHECK(ibv_bind_mw(qb, mw1, &bind) == EINVAL, "type-1 zero-based bind accepted");
  CHECK(ibv_bind_mw(qb, mw2, &bind) == EINVAL, "ibv_bind_mw of a type-2 window accepted");
  bind.bind_info.mw_access_flags &= ~(unsigned)IBV_ACCESS_ZERO_BASED;
  REQUIRE(ibv_bind_mw(qb, mw1, &bind) == 0, "ibv_bind_mw");
  CHECK(mw1->rkey != key0 && (mw1->rkey >> 8) == (key0 >> 8), "rkey 0x%x after bind (was 0x%x)", mw1->rkey,
        key0);
  struct ibv_wc wc = next_wc();
  CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 1, "bind wc %d op %d",
        wc.status, wc.opcode);
  memset(amem, 0x5a, 64);
  wc = rdma(qa, IBV_WR_RDMA_WRITE, amem, 64, amr->lkey, (uintptr_t)bmem + 16, mw1->rkey);
  CHECK(wc.status == IBV_WC_SUCCESS, "WRITE through the type-1 window: %s", ibv_wc_status_str(wc.status));
  CHECK(bmem[16] == 0x5a && bmem[79] == 0x5a && bmem[15] == 0 && bmem[80] == 0, "WRITE placed wrong");
  memset(amem, 0, 64);
  wc = rdma(qa, IBV_WR_RDMA_READ, amem, 64, amr->lkey, (uintptr_t)bmem + 16, mw1->rkey);
  CHECK(wc.status == IBV_WC_SUCCESS && amem[0] == 0x5a && amem[63] == 0x5a, "READ through the window: %s",
        ibv_wc_status_str(wc.status));
  uint64_t v = 41;
  memcpy(bmem + 512, &v, 8);
  wc = rdma(qa, IBV_WR_ATOMIC_FETCH_AND_ADD, amem, 8, amr->lkey, (uintptr_t)bmem + 512, mw1->rkey);
  memcpy(&v, bmem + 512, 8);
  CHECK(wc.status == IBV_WC_SUCCESS && v == 42, "FETCH_ADD through the window: %s, %lu",
        ibv_wc_status_str(wc.status), (unsigned long)v);
  CHECK(ibv_dereg_mr(bmr) == EBUSY, "dereg_mr with a bound window");

  /* Type 2: IBV_WR_BIND_MW on qb, the only QP it then opens b's memory to. */
  struct ibv_send_wr wr, *bad;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = 2;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.bind_mw.mw = mw2;
  wr.bind_mw.rkey = ibv_inc_rkey(mw2->rkey);
  wr.bind_mw.bind_info.mr = bmr;
  wr.bind_mw.bind_info.addr = (uintptr_t)bmem + 1024;
  wr.bind_mw.bind_info.length = 1024;
  wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
  REQUIRE(ibv_post_send(qb, &wr, &bad) == 0, "post BIND_MW");
  wc = next_wc();
  CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW, "type-2 bind wc %d", wc.status);
  mw2->rkey = wr.bind_mw.rkey; /* as with rdma-core's rxe: the app keeps a type-2 window's key */
  wc = rdma(qa, IBV_WR_RDMA_WRITE, amem, 64, amr->lkey, (uintptr_t)bmem + 1024, mw2->rkey);
  CHECK(wc.status == IBV_WC_SUCCESS, "WRITE through the type-2 window: %s", ibv_wc_status_str(wc.status));

  /* LOCAL_INV frees it; ibv_wr_bind_mw binds it again. */
  memset(&wr, 0, sizeof wr);
  wr.wr_id = 3;
  wr.opcode = IBV_WR_LOCAL_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.invalidate_rkey = mw2->rkey;
  REQUIRE(ibv_post_send(qb, &wr, &bad) == 0, "post LOCAL_INV");
  wc = next_wc();
  CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_LOCAL_INV, "LOCAL_INV wc %d", wc.status);
  struct ibv_qp_ex* qbx = ibv_qp_to_qp_ex(qb);
  struct ibv_mw_bind_info info = {bmr, (uintptr_t)bmem + 1024, 1024, IBV_ACCESS_REMOTE_WRITE};
  ibv_wr_start(qbx);
  qbx->wr_id = 4;
  qbx->wr_flags = IBV_SEND_SIGNALED;
  const uint32_t key2 = ibv_inc_rkey(mw2->rkey);
  ibv_wr_bind_mw(qbx, mw2, key2, &info);
  REQUIRE(ibv_wr_complete(qbx) == 0, "ibv_wr_bind_mw");
  wc = next_wc();
  CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW, "wr_bind_mw wc %d", wc.status);
  mw2->rkey = key2;

  /* SEND_WITH_INV from the peer frees it too: the receive names the key. */
  REQUIRE(post_recv_buf(qb, bmem + 3072, 64, bmr->lkey, 5) == 0, "post_recv");
  struct ibv_sge sge = {(uintptr_t)amem, 8, amr->lkey};
  memset(&wr, 0, sizeof wr);
  wr.wr_id = 6;
  wr.opcode = IBV_WR_SEND_WITH_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.invalidate_rkey = mw2->rkey;
  REQUIRE(ibv_post_send(qa, &wr, &bad) == 0, "post SEND_WITH_INV");
  int got_recv = 0, got_send = 0;
  for (int i = 0; i < 2; i++) {
    wc = next_wc();
    if (wc.wr_id == 5)
      got_recv =
          wc.status == IBV_WC_SUCCESS && (wc.wc_flags & IBV_WC_WITH_INV) && wc.invalidated_rkey == mw2->rkey;
    if (wc.wr_id == 6) got_send = wc.status == IBV_WC_SUCCESS;
  }
  CHECK(got_recv && got_send, "SEND_WITH_INV: recv %d send %d", got_recv, got_send);

  /* Dealloc and the PD. */
  struct ibv_pd* pd2 = ibv_alloc_pd(ctx);
  struct ibv_mw* mw3 = pd2 ? ibv_alloc_mw(pd2, IBV_MW_TYPE_2) : NULL;
  REQUIRE(mw3, "pd2 window");
  CHECK(ibv_dealloc_pd(pd2) == EBUSY, "dealloc_pd with a window");
  CHECK(ibv_dealloc_mw(mw3) == 0, "dealloc pd2's window");
  /* Through a parent domain, which the window holds as every object created through it. */
  struct ibv_parent_domain_init_attr pda = {.pd = pd2};
  struct ibv_pd* par = ibv_alloc_parent_domain(ctx, &pda);
  REQUIRE(par, "parent domain: %s", strerror(errno));
  struct ibv_mw* mw4 = ibv_alloc_mw(par, IBV_MW_TYPE_1);
  REQUIRE(mw4, "window through a parent domain: %s", strerror(errno));
  CHECK(ibv_dealloc_pd(par) == EBUSY, "dealloc of a parent domain with a window");
  CHECK(ibv_dealloc_mw(mw4) == 0 && ibv_dealloc_pd(par) == 0 && ibv_dealloc_pd(pd2) == 0,
        "dealloc window, parent domain, then PD");
  CHECK(ibv_dealloc_mw(mw1) == 0, "dealloc type 1");

  /* The invalidated type-2 window opens nothing: the WRITE fails, as pyverbs expects. */
  wc = rdma(qa, IBV_WR_RDMA_WRITE, amem, 64, amr->lkey, (uintptr_t)bmem + 1024, mw2->rkey);
  CHECK(wc.status == IBV_WC_REM_ACCESS_ERR, "WRITE through an invalidated window: %s",
        ibv_wc_status_str(wc.status));
  CHECK(ibv_dealloc_mw(mw2) == 0, "dealloc type 2");
  CHECK(ibv_dereg_mr(bmr) == 0, "dereg_mr once no window is bound");
  ibv_destroy_qp(qa);
  ibv_destroy_qp(qb);
  ibv_dereg_mr(amr);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  free(amem);
  free(bmem);
  return test_result("mw_test: ok");
}
