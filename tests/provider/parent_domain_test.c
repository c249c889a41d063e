/* Thread domains and parent domains through libibverbs: the errnos of ibv_alloc_td / ibv_dealloc_td /
 * ibv_alloc_parent_domain / ibv_dealloc_pd (EINVAL, EBUSY while in use), a parent domain standing for its PD
 * in reg_mr, reg_dm_mr, create_qp(_ex), create_srq, create_ah and create_cq_ex (IBV_CQ_INIT_ATTR_MASK_PD), RC
 * traffic through those objects, and the allocator: called per QP, CQ and SRQ with sane sizes, alignments and
 * resource types, its (unzeroed) memory given back at destroy; IBV_ALLOCATOR_USE_DEFAULT
 * leaves the memory to the provider. Usage: parent_domain_test DEVICE */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

/* What the allocator was asked: every live block, and the totals. */
struct Blocks {
  int allocs, frees, bad_frees, default_answers;
  int use_default; /* answer IBV_ALLOCATOR_USE_DEFAULT */
  struct {
    void* p;
    size_t size, align;
    uint64_t type;
  } live[32];
  int n_live;
  struct ibv_pd* pd; /* the parent domain the callbacks must be given */
  int wrong_pd;
};

static void* test_alloc(struct ibv_pd* pd, void* pd_context, size_t size, size_t alignment, uint64_t type) {
  struct Blocks* b = pd_context;
  if (pd != b->pd) b->wrong_pd++;
  if (b->use_default) {
    b->default_answers++;
    return IBV_ALLOCATOR_USE_DEFAULT;
  }
  CHECK(size > 0 && size <= 65536, "alloc size %zu", size);
  CHECK(alignment >= 8 && (alignment & (alignment - 1)) == 0, "alignment %zu", alignment);
  void* p = NULL;
  if (b->n_live == 32 || posix_memalign(&p, alignment, size)) return NULL;
  memset(p, 0xa5, size); /* not zeroed: the provider must zero it */
  b->live[b->n_live].p = p;
  b->live[b->n_live].size = size;
  b->live[b->n_live].align = alignment;
  b->live[b->n_live].type = type;
  b->n_live++;
  b->allocs++;
  return p;
}

static void test_free(struct ibv_pd* pd, void* pd_context, void* ptr, uint64_t type) {
  struct Blocks* b = pd_context;
  if (pd != b->pd) b->wrong_pd++;
  for (int i = 0; i < b->n_live; i++)
    if (b->live[i].p == ptr && b->live[i].type == type) {
      b->live[i] = b->live[--b->n_live];
      b->frees++;
      free(ptr);
      return;
    }
  b->bad_frees++;
}

static int count_type(const struct Blocks* b, uint64_t type) {
  int n = 0;
  for (int i = 0; i < b->n_live; i++) n += b->live[i].type == type;
  return n;
}

static int poll_n(struct ibv_cq* cq, struct ibv_wc* wc, int n) {
  int got = 0;
  for (int spins = 0; got < n && spins < 50000; spins++) {
    int r = ibv_poll_cq(cq, n - got, wc + got);
    if (r < 0) return r;
    got += r;
    if (got < n) usleep(100);
  }
  return got;
}

/* RC traffic between two QPs created through `pdom` (one from ibv_create_qp, one from ibv_create_qp_ex),
 * on a CQ_EX created in it and an MR registered through it: SENDs to one QP's own receive queue and to an
 * SRQ of the parent domain, and an RDMA WRITE. Leaves nothing behind. */
static int traffic(struct ibv_context* ctx, struct ibv_pd* pdom, struct Blocks* b) {
  static char mem[16384];
  struct ibv_cq_init_attr_ex ca = {.cqe = 64,
                                   .wc_flags = IBV_WC_STANDARD_FLAGS,
                                   .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD,
                                   .parent_domain = pdom};
  struct ibv_cq_ex* cqx = ibv_create_cq_ex(ctx, &ca);
  REQUIRE(cqx != NULL, "create_cq_ex in parent domain: %s", strerror(errno));
  struct ibv_cq* cq = ibv_cq_ex_to_cq(cqx);
  struct ibv_mr* mr = ibv_reg_mr(pdom, mem, sizeof mem, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  REQUIRE(mr != NULL && mr->pd == pdom, "reg_mr through parent domain: %s", strerror(errno));
  struct ibv_srq_init_attr sa = {.attr = {.max_wr = 8, .max_sge = 1}};
  struct ibv_srq* srq = ibv_create_srq(pdom, &sa);
  REQUIRE(srq != NULL, "create_srq through parent domain: %s", strerror(errno));
  struct ibv_qp_init_attr ia = qp_init_attr(cq, IBV_QPT_RC, 16);
  struct ibv_qp* a = ibv_create_qp(pdom, &ia);
  struct ibv_qp_init_attr_ex iax = {.send_cq = cq,
                                    .recv_cq = cq,
                                    .srq = srq,
                                    .qp_type = IBV_QPT_RC,
                                    .cap = {.max_send_wr = 16, .max_send_sge = 1},
                                    .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                                    .pd = pdom,
                                    .send_ops_flags = IBV_QP_EX_WITH_SEND};
  struct ibv_qp* bq = ibv_create_qp_ex(ctx, &iax);
  REQUIRE(a && bq && a->pd == pdom && bq->pd == pdom, "create_qp(_ex) through parent domain: %s",
          strerror(errno));
  if (b && !b->use_default) {
    CHECK(count_type(b, 1) == 2 && count_type(b, 4) == 1 && count_type(b, 5) == 1,
          "allocator: %d QP, %d SRQ, %d CQ blocks", count_type(b, 1), count_type(b, 4), count_type(b, 5));
    for (int i = 0; i < b->n_live; i++)
      CHECK(((uintptr_t)b->live[i].p & (b->live[i].align - 1)) == 0, "block not aligned");
  }
  /* An AH through the parent domain (to our own GID). */
  union ibv_gid gid;
  REQUIRE(ibv_query_gid(ctx, 1, 1, &gid) == 0, "query_gid");
  struct ibv_ah_attr aa = {
      .is_global = 1, .port_num = 1, .grh = {.dgid = gid, .sgid_index = 1, .hop_limit = 64}};
  struct ibv_ah* ah = ibv_create_ah(pdom, &aa);
  CHECK(ah != NULL && ah->pd == pdom, "create_ah through parent domain: %s", strerror(errno));
  /* A device-memory MR through the parent domain holds it like any other MR. */
  struct ibv_alloc_dm_attr dma = {.length = 4096};
  struct ibv_dm* dm = ibv_alloc_dm(ctx, &dma);
  struct ibv_mr* dm_mr =
      dm ? ibv_reg_dm_mr(pdom, dm, 0, 4096, IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE) : NULL;
  CHECK(dm_mr != NULL && dm_mr->pd == pdom, "reg_dm_mr through parent domain: %s", strerror(errno));
  CHECK(ibv_dealloc_pd(pdom) == EBUSY, "dealloc of a parent domain in use");

  REQUIRE(rc_to_init(a) == 0 && rc_to_init(bq) == 0 && rc_connect_pair(ctx, a, bq) == 0, "connect");
  for (int i = 0; i < 4; i++) {
    memset(mem, 'a' + i, 256);
    REQUIRE(post_recv_buf(a, mem + 4096, 256, mr->lkey, 100 + i) == 0, "post_recv");
    struct ibv_recv_wr rw = {.wr_id = 200 + i, .num_sge = 1}, *bad_r;
    struct ibv_sge rs = {(uintptr_t)mem + 8192, 256, mr->lkey};
    rw.sg_list = &rs;
    REQUIRE(ibv_post_srq_recv(srq, &rw, &bad_r) == 0, "post_srq_recv");
    REQUIRE(post_send_buf(bq, mem, 256, mr->lkey, 300 + i) == 0, "post_send b->a");
    REQUIRE(post_send_buf(a, mem, 256, mr->lkey, 400 + i) == 0, "post_send a->b (SRQ)");
    struct ibv_sge ws = {(uintptr_t)mem, 256, mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 500 + i,
                             .sg_list = &ws,
                             .num_sge = 1,
                             .opcode = IBV_WR_RDMA_WRITE,
                             .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    wr.wr.rdma.remote_addr = (uintptr_t)mem + 12288;
    wr.wr.rdma.rkey = mr->rkey;
    REQUIRE(ibv_post_send(a, &wr, &bad) == 0, "post WRITE");
    struct ibv_wc wc[5];
    const int got = poll_n(cq, wc, 5);
    REQUIRE(got == 5, "%d completions of 5", got);
    for (int k = 0; k < 5; k++)
      CHECK(wc[k].status == IBV_WC_SUCCESS, "wr %llu status %d", (unsigned long long)wc[k].wr_id,
            wc[k].status);
    CHECK(
        mem[4096] == 'a' + i && mem[8192] == 'a' + i && mem[12288] == 'a' + i && mem[12288 + 255] == 'a' + i,
        "data of round %d", i);
  }
  CHECK(!ah || ibv_destroy_ah(ah) == 0, "destroy_ah");
  CHECK(!dm_mr || ibv_dereg_mr(dm_mr) == 0, "dereg DM MR");
  CHECK(!dm || ibv_free_dm(dm) == 0, "free_dm");
  CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(bq) == 0, "destroy_qp");
  CHECK(ibv_destroy_srq(srq) == 0, "destroy_srq");
  CHECK(ibv_dereg_mr(mr) == 0, "dereg_mr");
  CHECK(ibv_destroy_cq(cq) == 0, "destroy_cq");
  return 0;
}

int main(int argc, char** argv) {
  struct ibv_device** list;
  struct ibv_device* dev = device_from_args(argc, argv, &list);
  if (!dev) return argc == 2 ? 1 : 2;
  struct ibv_context* ctx = ibv_open_device(dev);
  REQUIRE(ctx != NULL, "ibv_open_device: %s", strerror(errno));
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  REQUIRE(pd != NULL, "alloc_pd");

  /* ---- thread domains ---- */
  struct ibv_td_init_attr tda = {.comp_mask = 1};
  errno = 0;
  CHECK(ibv_alloc_td(ctx, &tda) == NULL && errno == EINVAL, "alloc_td comp_mask 1: errno %d", errno);
  tda.comp_mask = 0;
  struct ibv_td* td = ibv_alloc_td(ctx, &tda);
  REQUIRE(td != NULL && td->context == ctx, "alloc_td: %s", strerror(errno));

  /* ---- parent domain: what is refused ---- */
  struct ibv_parent_domain_init_attr pa = {.pd = NULL, .td = td};
  errno = 0;
  CHECK(ibv_alloc_parent_domain(ctx, &pa) == NULL && errno == EINVAL, "no PD: errno %d", errno);
  pa.pd = pd;
  pa.comp_mask = 1u << 2;
  errno = 0;
  CHECK(ibv_alloc_parent_domain(ctx, &pa) == NULL && errno == EINVAL, "unknown comp_mask: errno %d", errno);

  /* ---- a parent domain with the TD and an allocator ---- */
  struct Blocks blocks;
  memset(&blocks, 0, sizeof blocks);
  pa.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
  pa.alloc = test_alloc;
  pa.free = test_free;
  pa.pd_context = &blocks;
  struct ibv_pd* pdom = ibv_alloc_parent_domain(ctx, &pa);
  REQUIRE(pdom != NULL, "alloc_parent_domain: %s", strerror(errno));
  blocks.pd = pdom;
  CHECK(pdom->context == ctx && pdom->handle == pd->handle, "parent domain's context/handle");
  struct ibv_parent_domain_init_attr nested = {.pd = pdom};
  errno = 0;
  CHECK(ibv_alloc_parent_domain(ctx, &nested) == NULL && errno == EINVAL, "parent domain of a parent domain");
  CHECK(ibv_dealloc_td(td) == EBUSY, "dealloc_td while a parent domain uses it");
  CHECK(ibv_dealloc_pd(pd) == EBUSY, "dealloc_pd while a parent domain uses it");
  /* A CQ's MASK_PD takes a parent domain, not a PD. */
  struct ibv_cq_init_attr_ex bad_cq = {.cqe = 4, .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD, .parent_domain = pd};
  errno = 0;
  CHECK(ibv_create_cq_ex(ctx, &bad_cq) == NULL && errno == EINVAL, "CQ with a PD as parent domain: errno %d",
        errno);

  if (traffic(ctx, pdom, &blocks) == 0) {
    CHECK(blocks.allocs == 4 && blocks.frees == 4 && blocks.n_live == 0 && blocks.bad_frees == 0,
          "allocator: %d allocs, %d frees, %d live, %d unknown frees", blocks.allocs, blocks.frees,
          blocks.n_live, blocks.bad_frees);
    CHECK(blocks.wrong_pd == 0, "callbacks given another pd");
  }
  CHECK(ibv_dealloc_pd(pdom) == 0, "dealloc parent domain");
  CHECK(ibv_dealloc_td(td) == 0, "dealloc_td");

  /* ---- an allocator that answers USE_DEFAULT, no TD: the provider's own memory, never freed by it ---- */
  memset(&blocks, 0, sizeof blocks);
  blocks.use_default = 1;
  struct ibv_parent_domain_init_attr pb = {
      .pd = pd,
      .comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT,
      .alloc = test_alloc,
      .free = test_free,
      .pd_context = &blocks};
  pdom = ibv_alloc_parent_domain(ctx, &pb);
  REQUIRE(pdom != NULL, "alloc_parent_domain (default): %s", strerror(errno));
  blocks.pd = pdom;
  if (traffic(ctx, pdom, &blocks) == 0)
    CHECK(blocks.default_answers == 4 && blocks.frees == 0 && blocks.bad_frees == 0,
          "default allocator: asked %d times, %d frees", blocks.default_answers,
          blocks.frees + blocks.bad_frees);
  CHECK(ibv_dealloc_pd(pdom) == 0, "dealloc parent domain (default)");

  /* ---- no allocator, and a SINGLE_THREADED CQ outside any parent domain ---- */
  struct ibv_parent_domain_init_attr pc = {.pd = pd};
  pdom = ibv_alloc_parent_domain(ctx, &pc);
  REQUIRE(pdom != NULL, "alloc_parent_domain (plain): %s", strerror(errno));
  traffic(ctx, pdom, NULL);
  CHECK(ibv_dealloc_pd(pdom) == 0, "dealloc parent domain (plain)");
  struct ibv_cq_init_attr_ex st = {.cqe = 8,
                                   .wc_flags = IBV_WC_STANDARD_FLAGS,
                                   .comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS,
                                   .flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED};
  struct ibv_cq_ex* stcq = ibv_create_cq_ex(ctx, &st);
  CHECK(stcq != NULL && ibv_destroy_cq(ibv_cq_ex_to_cq(stcq)) == 0, "SINGLE_THREADED CQ: %s",
        strerror(errno));

  CHECK(ibv_dealloc_pd(pd) == 0, "dealloc_pd");
  CHECK(ibv_close_device(ctx) == 0, "close_device");
  ibv_free_device_list(list);
  return test_result("parent_domain_test: all checks passed");
}
