/* Device memory (provider/device_memory.cc) as rdma-core documents it and mlx5 behaves, which apps and
 * pyverbs rely on: ibv_alloc_dm's limits and budget (max_dm_size), the copy calls' 4-byte and range rules,
 * ibv_reg_dm_mr's zero-based MRs and their errors, ibv_free_dm's EBUSY, and RC traffic in and out of device
 * memory between two contexts of the device (as two processes would be): SEND from it and into it, RDMA
 * WRITE and READ, an atomic, with every byte checked through ibv_memcpy_from_dm.
 * Usage: device_memory_test DEVICE */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

enum { kLen = 4096 };

struct side {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  struct ibv_qp* qp;
  struct ibv_dm* dm;
  struct ibv_mr* dm_mr; /* over the whole of dm, zero-based */
  struct ibv_mr* host_mr;
  uint8_t host[kLen];
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
  struct ibv_alloc_dm_attr da = {.length = kLen};
  s->dm = ibv_alloc_dm(s->ctx, &da);
  REQUIRE(s->dm, "alloc_dm: %s", strerror(errno));
  const unsigned access = IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                          IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  s->dm_mr = ibv_reg_dm_mr(s->pd, s->dm, 0, kLen, access);
  s->host_mr = ibv_reg_mr(s->pd, s->host, kLen, IBV_ACCESS_LOCAL_WRITE);
  REQUIRE(s->dm_mr && s->host_mr, "MRs: %s", strerror(errno));
  return 0;
}

/* One signaled WR from `s`, then its completion (and, for a SEND, the receive on `peer`): 0 on success. */
static int run_wr(struct side* s, struct side* peer, struct ibv_send_wr* wr) {
  struct ibv_send_wr* bad;
  REQUIRE(ibv_post_send(s->qp, wr, &bad) == 0, "post_send opcode %d: %s", wr->opcode, strerror(errno));
  for (struct side* x = s; x; x = (x == s && wr->opcode == IBV_WR_SEND) ? peer : NULL) {
    struct ibv_wc wc;
    const int n = poll_one(x->cq, &wc, 10000);
    REQUIRE(n == 1 && wc.status == IBV_WC_SUCCESS, "opcode %d: poll %d, status %s", wr->opcode, n,
            n == 1 ? ibv_wc_status_str(wc.status) : "-");
  }
  return 0;
}

static void fill(uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(seed + i * 7);
}

/* The API's rules on one context, of whose max_dm_size `left` is not yet allocated. */
static void check_rules(struct ibv_context* ctx, struct ibv_pd* pd, size_t max, size_t left) {
  struct ibv_alloc_dm_attr a = {.length = 100};
  errno = 0;
  a.comp_mask = 1;
  CHECK(!ibv_alloc_dm(ctx, &a) && errno == EINVAL, "unknown comp_mask: errno %d", errno);
  a.comp_mask = 0;
  a.length = max + 4;
  errno = 0;
  CHECK(!ibv_alloc_dm(ctx, &a) && errno == EINVAL, "beyond max_dm_size: errno %d", errno);
  /* The budget: all that is left at once, then nothing more until it is freed. */
  a.length = left;
  struct ibv_dm* all = ibv_alloc_dm(ctx, &a);
  CHECK(all != NULL, "the rest of max_dm_size at once: %s", strerror(errno));
  a.length = 4;
  errno = 0;
  CHECK(!ibv_alloc_dm(ctx, &a) && errno == ENOMEM, "beyond the budget: errno %d", errno);
  if (all) CHECK(ibv_free_dm(all) == 0, "free_dm");

  a.length = 100;
  struct ibv_dm* dm = ibv_alloc_dm(ctx, &a);
  if (!dm) {
    CHECK(0, "alloc_dm 100: %s", strerror(errno));
    return;
  }
  uint8_t in[100], out[100];
  fill(in, sizeof in, 3);
  CHECK(ibv_memcpy_to_dm(dm, 0, in, 100) == 0, "memcpy_to_dm");
  memset(out, 0, sizeof out);
  CHECK(ibv_memcpy_from_dm(out, dm, 0, 100) == 0 && !memcmp(in, out, 100), "memcpy_from_dm round trip");
  CHECK(ibv_memcpy_from_dm(out, dm, 3, 4) == EINVAL, "unaligned offset");
  CHECK(ibv_memcpy_to_dm(dm, 4, in, 3) == EINVAL, "unaligned length");
  CHECK(ibv_memcpy_from_dm(out, dm, 104, 4) == EFAULT, "offset beyond");
  CHECK(ibv_memcpy_to_dm(dm, 0, in, 104) == EFAULT, "length beyond");
  const unsigned zb = IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE;
  errno = 0;
  CHECK(!ibv_reg_dm_mr(pd, dm, 0, 100, IBV_ACCESS_LOCAL_WRITE) && errno == EINVAL, "not zero-based: %d",
        errno);
  errno = 0;
  CHECK(!ibv_reg_dm_mr(pd, dm, 0, 104, zb) && errno == EINVAL, "MR beyond the DM: %d", errno);
  errno = 0;
  CHECK(!ibv_reg_dm_mr(pd, dm, 8, 96, zb | IBV_ACCESS_MW_BIND) && errno == EINVAL, "MW_BIND: %d", errno);
  struct ibv_mr* mr = ibv_reg_dm_mr(pd, dm, 8, 92, zb);
  CHECK(mr && mr->addr == NULL && mr->length == 92, "reg_dm_mr at offset 8: %s", strerror(errno));
  CHECK(ibv_free_dm(dm) == EBUSY, "free_dm with an MR over it");
  if (mr) CHECK(ibv_dereg_mr(mr) == 0, "dereg_mr");
  CHECK(ibv_free_dm(dm) == 0, "free_dm after its MR");
}

int main(int argc, char** argv) {
  struct ibv_device** list;
  struct ibv_device* dev = device_from_args(argc, argv, &list);
  if (!dev) return argc == 2 ? 1 : 2;
  static struct side a, b;
  if (open_side(&a, dev) || open_side(&b, dev)) return 1;
  struct ibv_device_attr_ex ax;
  REQUIRE(ibv_query_device_ex(a.ctx, NULL, &ax) == 0, "query_device_ex");
  REQUIRE(ax.max_dm_size >= 2 * kLen, "max_dm_size %llu", (unsigned long long)ax.max_dm_size);
  check_rules(b.ctx, b.pd, ax.max_dm_size, ax.max_dm_size - kLen); /* b already holds kLen */
  REQUIRE(rc_connect_pair(a.ctx, a.qp, b.qp) == 0, "QPs to RTS");

  uint8_t want[kLen], got[kLen];
  /* SEND from a's device memory (an SGE whose address is an offset) into b's device memory. */
  fill(want, kLen, 11);
  REQUIRE(ibv_memcpy_to_dm(a.dm, 0, want, kLen) == 0, "memcpy_to_dm");
  struct ibv_sge rs = {.addr = 1024, .length = 2048, .lkey = b.dm_mr->lkey};
  struct ibv_recv_wr rwr = {.wr_id = 7, .sg_list = &rs, .num_sge = 1}, *rbad;
  REQUIRE(ibv_post_recv(b.qp, &rwr, &rbad) == 0, "post_recv into DM");
  struct ibv_sge ss = {.addr = 512, .length = 2048, .lkey = a.dm_mr->lkey};
  struct ibv_send_wr wr = {
      .wr_id = 1, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
  if (run_wr(&a, &b, &wr)) return 1;
  CHECK(ibv_memcpy_from_dm(got, b.dm, 1024, 2048) == 0 && !memcmp(got, want + 512, 2048),
        "SEND from device memory into device memory");

  /* RDMA WRITE from a's host memory into b's device memory (remote address = offset). */
  fill(a.host, kLen, 29);
  ss = (struct ibv_sge){.addr = (uintptr_t)a.host, .length = 1000, .lkey = a.host_mr->lkey};
  wr = (struct ibv_send_wr){
      .wr_id = 2, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED};
  wr.wr.rdma.remote_addr = 3000;
  wr.wr.rdma.rkey = b.dm_mr->rkey;
  if (run_wr(&a, &b, &wr)) return 1;
  CHECK(ibv_memcpy_from_dm(got, b.dm, 3000, 1000) == 0 && !memcmp(got, a.host, 1000),
        "RDMA WRITE into device memory");

  /* RDMA READ of b's device memory into a's device memory. */
  ss = (struct ibv_sge){.addr = 0, .length = 1000, .lkey = a.dm_mr->lkey};
  wr.wr_id = 3;
  wr.opcode = IBV_WR_RDMA_READ;
  if (run_wr(&a, &b, &wr)) return 1;
  CHECK(ibv_memcpy_from_dm(got, a.dm, 0, 1000) == 0 && !memcmp(got, a.host, 1000),
        "RDMA READ from device memory");

  /* FETCH_AND_ADD on b's device memory: the old value comes back, the new one is placed. */
  const uint64_t old = 0x0102030405060708ull, add = 5;
  REQUIRE(ibv_memcpy_to_dm(b.dm, 8, &old, 8) == 0, "memcpy_to_dm");
  ss = (struct ibv_sge){.addr = (uintptr_t)a.host, .length = 8, .lkey = a.host_mr->lkey};
  wr = (struct ibv_send_wr){.wr_id = 4,
                            .sg_list = &ss,
                            .num_sge = 1,
                            .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
                            .send_flags = IBV_SEND_SIGNALED};
  wr.wr.atomic.remote_addr = 8;
  wr.wr.atomic.rkey = b.dm_mr->rkey;
  wr.wr.atomic.compare_add = add;
  if (run_wr(&a, &b, &wr)) return 1;
  uint64_t fetched, now;
  memcpy(&fetched, a.host, 8);
  CHECK(ibv_memcpy_from_dm(&now, b.dm, 8, 8) == 0 && fetched == old && now == old + add,
        "FETCH_AND_ADD on device memory: fetched %llx, now %llx", (unsigned long long)fetched,
        (unsigned long long)now);

  for (int k = 0; k < 2; k++) {
    struct side* s = k ? &b : &a;
    ibv_destroy_qp(s->qp);
    ibv_dereg_mr(s->dm_mr);
    ibv_dereg_mr(s->host_mr);
    CHECK(ibv_free_dm(s->dm) == 0, "free_dm");
    ibv_destroy_cq(s->cq);
    ibv_dealloc_pd(s->pd);
    ibv_close_device(s->ctx);
  }
  ibv_free_device_list(list);
  return test_result("device_memory_test: all checks passed");
}
