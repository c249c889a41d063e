/* On-demand paging through libibverbs, on real memory: odp_caps as advertised; an explicit ON_DEMAND MR
 * over memory that is not mapped yet at registration (no pinning), which a peer then writes once it is;
 * the same MR after its pages were unmapped: the peer's WRITE and READ end in a remote access error, not in
 * a fault of this process, and after the pages come back (MAP_FIXED) the MR reaches the new ones, as ODP
 * follows the process's mappings; an implicit MR (ibv_reg_mr(pd, NULL, SIZE_MAX)) through which the peer
 * writes an ordinary malloc'd buffer; ibv_advise_mr's prefetch and its errors. Two contexts of the device
 * stand for two processes. Usage: odp_test DEVICE */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"

enum { kPage = 4096, kLen = 4 * kPage };

struct side {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  struct ibv_qp* qp;
  uint8_t* buf; /* kLen, pinned MR */
  struct ibv_mr* mr;
};

static int open_side(struct side* s, struct ibv_device* dev) {
  s->ctx = ibv_open_device(dev);
  REQUIRE(s->ctx, "open: %s", strerror(errno));
  s->pd = ibv_alloc_pd(s->ctx);
  s->cq = ibv_create_cq(s->ctx, 16, NULL, NULL, 0);
  REQUIRE(s->pd && s->cq, "pd, cq: %s", strerror(errno));
  struct ibv_qp_init_attr ia = qp_init_attr(s->cq, IBV_QPT_RC, 8);
  s->qp = ibv_create_qp(s->pd, &ia);
  REQUIRE(s->qp && !rc_to_init(s->qp), "QP: %s", strerror(errno));
  s->buf = aligned_alloc(kPage, kLen);
  s->mr = ibv_reg_mr(s->pd, s->buf, kLen, IBV_ACCESS_LOCAL_WRITE);
  REQUIRE(s->buf && s->mr, "MR: %s", strerror(errno));
  return 0;
}

/* An RDMA WRITE or READ of `len` bytes between a's pinned buffer and `raddr`/`rkey`: its status. */
static enum ibv_wc_status rdma(struct side* a, enum ibv_wr_opcode op, uint64_t raddr, uint32_t rkey,
                               uint32_t len) {
  struct ibv_sge sge = {.addr = (uintptr_t)a->buf, .length = len, .lkey = a->mr->lkey};
  struct ibv_send_wr wr = {.wr_id = 1,
                           .sg_list = &sge,
                           .num_sge = 1,
                           .opcode = op,
                           .send_flags = IBV_SEND_SIGNALED},
                     *bad;
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  if (ibv_post_send(a->qp, &wr, &bad)) return IBV_WC_GENERAL_ERR;
  struct ibv_wc wc;
  const int n = poll_one(a->cq, &wc, 10000);
  return n == 1 ? wc.status : IBV_WC_GENERAL_ERR;
}

/* a and b connected again after an error (RESET, then to RTS, PSNs from 1 as before). */
static int reconnect(struct side* a, struct side* b) {
  struct ibv_qp_attr r = {.qp_state = IBV_QPS_RESET};
  REQUIRE(!ibv_modify_qp(a->qp, &r, IBV_QP_STATE) && !ibv_modify_qp(b->qp, &r, IBV_QP_STATE), "to RESET");
  REQUIRE(!rc_to_init(a->qp) && !rc_to_init(b->qp), "to INIT");
  REQUIRE(rc_connect_pair(a->ctx, a->qp, b->qp) == 0, "to RTS");
  return 0;
}

int main(int argc, char** argv) {
  struct ibv_device** list;
  struct ibv_device* dev = device_from_args(argc, argv, &list);
  if (!dev) return argc == 2 ? 1 : 2;
  static struct side a, b;
  if (open_side(&a, dev) || open_side(&b, dev)) return 1;
  struct ibv_device_attr_ex ax;
  REQUIRE(ibv_query_device_ex(b.ctx, NULL, &ax) == 0, "query_device_ex");
  const struct ibv_odp_caps* oc = &ax.odp_caps;
  CHECK(oc->general_caps == (IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT), "general_caps %llx",
        (unsigned long long)oc->general_caps);
  const uint32_t rc_want = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
                           IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
  CHECK(oc->per_transport_caps.rc_odp_caps == rc_want, "rc_odp_caps %x", oc->per_transport_caps.rc_odp_caps);
  REQUIRE(rc_connect_pair(a.ctx, a.qp, b.qp) == 0, "QPs to RTS");
  const int remote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

  /* Explicit ODP over an address range nothing is mapped at: registration pins nothing, so it succeeds. */
  uint8_t* region = mmap(NULL, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(region != MAP_FAILED, "mmap");
  REQUIRE(munmap(region, kLen) == 0, "munmap");
  errno = 0;
  CHECK(ibv_reg_mr(b.pd, region, kLen, IBV_ACCESS_LOCAL_WRITE) == NULL, "a pinned MR over unmapped memory");
  struct ibv_mr* odp = ibv_reg_mr(b.pd, region, kLen, remote | IBV_ACCESS_ON_DEMAND);
  REQUIRE(odp, "ODP MR over unmapped memory: %s", strerror(errno));
  /* The peer's access while it is not mapped: a remote access error for the peer, this process lives. */
  CHECK(rdma(&a, IBV_WR_RDMA_WRITE, (uintptr_t)region + 100, odp->rkey, 64) == IBV_WC_REM_ACCESS_ERR,
        "WRITE to unmapped ODP memory");
  if (reconnect(&a, &b)) return 1;
  CHECK(rdma(&a, IBV_WR_RDMA_READ, (uintptr_t)region, odp->rkey, 64) == IBV_WC_REM_ACCESS_ERR,
        "READ of unmapped ODP memory");
  if (reconnect(&a, &b)) return 1;
  /* Mapped now (at the same address): the same MR reaches the new pages. */
  REQUIRE(
      mmap(region, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == region,
      "mmap at the old address");
  for (int i = 0; i < kLen; i++) a.buf[i] = (uint8_t)(i * 13 + 1);
  CHECK(rdma(&a, IBV_WR_RDMA_WRITE, (uintptr_t)region + kPage, odp->rkey, 2 * kPage) == IBV_WC_SUCCESS,
        "WRITE once mapped");
  CHECK(!memcmp(region + kPage, a.buf, 2 * kPage), "the WRITE's bytes");
  /* Read-only pages: a WRITE would fault, so it is refused; a READ of them works. */
  REQUIRE(mprotect(region, kPage, PROT_READ) == 0, "mprotect");
  CHECK(rdma(&a, IBV_WR_RDMA_WRITE, (uintptr_t)region, odp->rkey, 64) == IBV_WC_REM_ACCESS_ERR,
        "WRITE to read-only ODP memory");
  if (reconnect(&a, &b)) return 1;
  CHECK(rdma(&a, IBV_WR_RDMA_READ, (uintptr_t)region + kPage, odp->rkey, 256) == IBV_WC_SUCCESS &&
            !memcmp(a.buf, region + kPage, 256),
        "READ of ODP memory");

  /* ibv_advise_mr. */
  struct ibv_sge pf = {.addr = (uintptr_t)region + kPage, .length = 2 * kPage, .lkey = odp->lkey};
  CHECK(ibv_advise_mr(b.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &pf, 1) == 0,
        "prefetch for writing: %s", strerror(errno));
  CHECK(ibv_advise_mr(b.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &pf, 1) == 0, "async prefetch");
  struct ibv_sge ro = {.addr = (uintptr_t)region, .length = kPage, .lkey = odp->lkey};
  CHECK(ibv_advise_mr(b.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &ro, 1) == EFAULT,
        "prefetch for writing of read-only pages");
  struct ibv_sge pinned = {.addr = (uintptr_t)b.buf, .length = 64, .lkey = b.mr->lkey};
  CHECK(ibv_advise_mr(b.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &pinned, 1) == EFAULT,
        "prefetch of a pinned MR");
  CHECK(ibv_advise_mr(b.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 4, &pf, 1) == EINVAL, "unknown flag");
  CHECK(ibv_dereg_mr(odp) == 0, "dereg ODP MR");
  munmap(region, kLen);

  /* Implicit: the whole address space under one key; the peer writes a malloc'd buffer through it. */
  struct ibv_mr* imp = ibv_reg_mr(b.pd, NULL, SIZE_MAX, remote | IBV_ACCESS_ON_DEMAND);
  REQUIRE(imp, "implicit MR: %s", strerror(errno));
  uint8_t* heap = malloc(3000);
  REQUIRE(heap, "malloc");
  CHECK(rdma(&a, IBV_WR_RDMA_WRITE, (uintptr_t)heap, imp->rkey, 3000) == IBV_WC_SUCCESS &&
            !memcmp(heap, a.buf, 3000),
        "WRITE through the implicit MR");
  CHECK(rdma(&a, IBV_WR_RDMA_WRITE, 4096, imp->rkey, 8) == IBV_WC_REM_ACCESS_ERR, "WRITE to page 1");
  free(heap);
  CHECK(ibv_dereg_mr(imp) == 0, "dereg implicit MR");

  for (int k = 0; k < 2; k++) {
    struct side* s = k ? &b : &a;
    ibv_destroy_qp(s->qp);
    ibv_dereg_mr(s->mr);
    free(s->buf);
    ibv_destroy_cq(s->cq);
    ibv_dealloc_pd(s->pd);
    ibv_close_device(s->ctx);
  }
  ibv_free_device_list(list);
  return test_result("odp_test: all checks passed");
}
