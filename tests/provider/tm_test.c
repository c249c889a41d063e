/* Tag matching through libibverbs (provider/tag_matching.cc, engine/tag_matching.cc), between two RC QPs of
 * one context over the device's port: tm_caps, ibv_create_srq_ex(IBV_SRQT_TM) and its refusals, the tag
 * list operations and their completions, an eager message matched (data after the TMH, tag and app_ctx by
 * ibv_wc_read_tm_info), an unexpected one (TMH kept, into an ordinary SRQ WQE), a rendezvous the NIC
 * READs itself before it sends the sender a FIN, and ibv_post_srq_ops on an ordinary SRQ.
 * Run by in_netns.sh as root. Usage: tm_test DEVICE */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <infiniband/tm_types.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

struct wcx {
  int got;
  enum ibv_wc_status status;
  enum ibv_wc_opcode opcode;
  uint64_t wr_id;
  unsigned flags;
  uint32_t byte_len;
  struct ibv_wc_tm_info tm;
};

/* The next completion of an ibv_cq_ex (10 s at most); got 0 when none came. */
static struct wcx next_wcx(struct ibv_cq_ex* cq) {
  struct wcx w;
  memset(&w, 0, sizeof w);
  struct ibv_poll_cq_attr pa = {0};
  const double end = now_ms() + 10000;
  int rc = ENOENT;
  while (rc == ENOENT && now_ms() < end) rc = ibv_start_poll(cq, &pa);
  if (rc) return w;
  w.got = 1;
  w.status = cq->status;
  w.wr_id = cq->wr_id;
  w.opcode = ibv_wc_read_opcode(cq);
  w.flags = ibv_wc_read_wc_flags(cq);
  w.byte_len = ibv_wc_read_byte_len(cq);
  ibv_wc_read_tm_info(cq, &w.tm);
  ibv_end_poll(cq);
  return w;
}

static void tmh(char* p, uint8_t op, uint32_t app_ctx, uint64_t tag) {
  struct ibv_tmh h = {.opcode = op, .app_ctx = htobe32(app_ctx), .tag = htobe64(tag)};
  memcpy(p, &h, sizeof h);
}

static int send_buf(struct ibv_qp* qp, char* p, uint32_t len, uint32_t lkey) {
  struct ibv_sge sge = {(uintptr_t)p, len, lkey};
  struct ibv_send_wr wr = {.wr_id = 1,
                           .sg_list = &sge,
                           .num_sge = 1,
                           .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED},
                     *bad;
  return ibv_post_send(qp, &wr, &bad);
}

static int tag_op(struct ibv_srq* srq, enum ibv_ops_wr_opcode op, uint64_t tag, void* buf, uint32_t len,
                  uint32_t lkey, uint32_t* handle) {
  struct ibv_sge sge = {(uintptr_t)buf, len, lkey};
  struct ibv_ops_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = 100 + tag;
  wr.opcode = op;
  wr.flags = IBV_OPS_SIGNALED;
  wr.tm.handle = handle ? *handle : 0;
  wr.tm.add.recv_wr_id = tag;
  wr.tm.add.sg_list = &sge;
  wr.tm.add.num_sge = 1;
  wr.tm.add.tag = tag;
  wr.tm.add.mask = 0xffff;
  const int rc = ibv_post_srq_ops(srq, &wr, &bad);
  if (!rc && handle && op == IBV_WR_TAG_ADD) *handle = wr.tm.handle;
  return rc;
}

int main(int argc, char** argv) {
  struct ibv_device** list;
  struct ibv_device* dev = device_from_args(argc, argv, &list);
  if (!dev) return 2;
  struct ibv_context* ctx = ibv_open_device(dev);
  REQUIRE(ctx, "open %s: %s", argv[1], strerror(errno));
  struct ibv_device_attr_ex da;
  REQUIRE(ibv_query_device_ex(ctx, NULL, &da) == 0, "query_device_ex");
  CHECK(da.tm_caps.flags == IBV_TM_CAP_RC && da.tm_caps.max_num_tags > 0 && da.tm_caps.max_ops > 0 &&
            da.tm_caps.max_sge == 1 && da.tm_caps.max_rndv_hdr_size >= 32,
        "tm_caps flags %u tags %u ops %u sge %u rndv %u", da.tm_caps.flags, da.tm_caps.max_num_tags,
        da.tm_caps.max_ops, da.tm_caps.max_sge, da.tm_caps.max_rndv_hdr_size);
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  struct ibv_cq_init_attr_ex ca = {.cqe = 64, .wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_TM_INFO};
  struct ibv_cq_ex* cq = ibv_create_cq_ex(ctx, &ca);
  REQUIRE(pd && cq, "pd / cq_ex with TM_INFO: %s", strerror(errno));
  struct ibv_srq_init_attr_ex sa;
  memset(&sa, 0, sizeof sa);
  sa.attr.max_wr = 16;
  sa.attr.max_sge = 1;
  sa.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TM;
  sa.srq_type = IBV_SRQT_TM;
  sa.pd = pd;
  sa.tm_cap.max_num_tags = 4;
  sa.tm_cap.max_ops = 4;
  errno = 0;
  CHECK(!ibv_create_srq_ex(ctx, &sa) && errno == EINVAL, "TM SRQ without its CQ: errno %d", errno);
  sa.comp_mask |= IBV_SRQ_INIT_ATTR_CQ;
  sa.cq = ibv_cq_ex_to_cq(cq);
  sa.tm_cap.max_num_tags = da.tm_caps.max_num_tags + 1;
  errno = 0;
  CHECK(!ibv_create_srq_ex(ctx, &sa) && errno == EINVAL, "max_num_tags beyond tm_caps: errno %d", errno);
  sa.tm_cap.max_num_tags = 4;
  struct ibv_srq* srq = ibv_create_srq_ex(ctx, &sa);
  REQUIRE(srq, "TM SRQ: %s", strerror(errno));
  /* a: the sender, its own RQ; b: on the TM SRQ, max_send_wr 0 (the rendezvous READ is the NIC's own) */
  struct ibv_qp_init_attr ia = {
      .send_cq = ibv_cq_ex_to_cq(cq),
      .recv_cq = ibv_cq_ex_to_cq(cq),
      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
      .qp_type = IBV_QPT_RC};
  struct ibv_qp* qa = ibv_create_qp(pd, &ia);
  ia.srq = srq;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = ia.cap.max_send_sge = ia.cap.max_recv_sge = 0;
  struct ibv_qp* qb = ibv_create_qp(pd, &ia);
  REQUIRE(qa && qb, "create_qp: %s", strerror(errno));
  REQUIRE(rc_to_init(qa) == 0 && rc_to_init(qb) == 0 && rc_connect_pair(ctx, qa, qb) == 0, "connect");
  enum { kMem = 1 << 16 };
  char* amem = calloc(1, kMem);
  char* bmem = calloc(1, kMem);
  const int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
  struct ibv_mr* amr = ibv_reg_mr(pd, amem, kMem, acc);
  struct ibv_mr* bmr = ibv_reg_mr(pd, bmem, kMem, acc);
  REQUIRE(amr && bmr, "reg_mr");

  /* Eager: tag 7 into b's [0, 4096). */
  uint32_t h = 0;
  REQUIRE(tag_op(srq, IBV_WR_TAG_ADD, 7, bmem, 4096, bmr->lkey, &h) == 0, "TAG_ADD");
  struct wcx w = next_wcx(cq);
  CHECK(w.got && w.status == IBV_WC_SUCCESS && w.opcode == IBV_WC_TM_ADD && w.wr_id == 107, "ADD wc %d/%d",
        w.status, w.opcode);
  for (int i = 0; i < 1000; i++) amem[i] = (char)(i * 7);
  tmh(amem, IBV_TMH_EAGER, 0xfeed, 0x50007);
  REQUIRE(send_buf(qa, amem, 1000, amr->lkey) == 0, "send eager");
  int sent = 0, recvd = 0;
  for (int k = 0; k < 2; k++) {
    w = next_wcx(cq);
    if (w.opcode == IBV_WC_SEND) {
      sent = w.status == IBV_WC_SUCCESS;
    } else {
      recvd = 1;
      CHECK(w.status == IBV_WC_SUCCESS && w.opcode == IBV_WC_TM_RECV && w.wr_id == 7 &&
                w.flags == (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID) && w.byte_len == 1000 - 16,
            "eager wc %d op %d wr %lu flags 0x%x len %u", w.status, w.opcode, (unsigned long)w.wr_id, w.flags,
            w.byte_len);
      CHECK(w.tm.tag == 0x50007 && w.tm.priv == 0xfeed, "tm_info %lx %x", (unsigned long)w.tm.tag, w.tm.priv);
    }
  }
  CHECK(sent && recvd, "eager: send %d, receive %d", sent, recvd);
  CHECK(memcmp(bmem, amem + 16, 1000 - 16) == 0, "eager data not placed after the TMH");
  /* Its tag is consumed: DEL reports TM_ERR. */
  REQUIRE(tag_op(srq, IBV_WR_TAG_DEL, 7, NULL, 0, 0, &h) == 0, "TAG_DEL");
  w = next_wcx(cq);
  CHECK(w.got && w.opcode == IBV_WC_TM_DEL && w.status == IBV_WC_TM_ERR, "DEL of a consumed tag: %d/%d",
        w.status, w.opcode);

  /* Unexpected: no tag, into an ordinary SRQ WQE with the TMH. */
  struct ibv_sge rs = {(uintptr_t)bmem + 8192, 4096, bmr->lkey};
  struct ibv_recv_wr rw = {.wr_id = 55, .sg_list = &rs, .num_sge = 1}, *rbad;
  REQUIRE(ibv_post_srq_recv(srq, &rw, &rbad) == 0, "post_srq_recv");
  tmh(amem, IBV_TMH_EAGER, 1, 0x99);
  REQUIRE(send_buf(qa, amem, 200, amr->lkey) == 0, "send unexpected");
  for (int k = 0; k < 2; k++) {
    w = next_wcx(cq);
    if (w.opcode != IBV_WC_SEND)
      CHECK(w.status == IBV_WC_SUCCESS && w.opcode == IBV_WC_TM_RECV && w.wr_id == 55 && w.flags == 0 &&
                w.byte_len == 200 && w.tm.tag == 0,
            "unexpected wc %d op %d wr %lu flags 0x%x", w.status, w.opcode, (unsigned long)w.wr_id, w.flags);
  }
  CHECK(memcmp(bmem + 8192, amem, 200) == 0, "unexpected message not whole");

  /* Rendezvous: tag 9 (the app synced its one unexpected message first), a's 20000 bytes at 0x8000. */
  struct ibv_ops_wr sync = {
      .wr_id = 3, .opcode = IBV_WR_TAG_SYNC, .flags = IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC};
  sync.tm.unexpected_cnt = 1;
  struct ibv_ops_wr* obad;
  REQUIRE(ibv_post_srq_ops(srq, &sync, &obad) == 0, "TAG_SYNC");
  w = next_wcx(cq);
  CHECK(w.got && w.opcode == IBV_WC_TM_SYNC && w.wr_id == 3, "SYNC wc %d", w.opcode);
  REQUIRE(tag_op(srq, IBV_WR_TAG_ADD, 9, bmem + 0x8000, 0x8000, bmr->lkey, &h) == 0, "TAG_ADD 9");
  w = next_wcx(cq);
  CHECK(w.got && w.opcode == IBV_WC_TM_ADD && !(w.flags & IBV_WC_TM_SYNC_REQ), "ADD 9 wc %d flags 0x%x",
        w.opcode, w.flags);
  for (int i = 0; i < 20000; i++) amem[0x8000 + i] = (char)(i * 13 + 1);
  tmh(amem, IBV_TMH_RNDV, 0xc0de, 9);
  struct ibv_rvh rvh = {
      .va = htobe64((uintptr_t)amem + 0x8000), .rkey = htobe32(amr->rkey), .len = htobe32(20000)};
  memcpy(amem + 16, &rvh, sizeof rvh);
  REQUIRE(post_recv_buf(qa, amem + 0x4000, 64, amr->lkey, 77) == 0, "post_recv for the FIN");
  REQUIRE(send_buf(qa, amem, 32, amr->lkey) == 0, "send RNDV");
  int match = 0, data = 0, fin = 0;
  for (int k = 0; k < 4; k++) {
    w = next_wcx(cq);
    if (!w.got) break;
    CHECK(w.status == IBV_WC_SUCCESS, "rendezvous wc %d op %d", w.status, w.opcode);
    if (w.opcode == IBV_WC_RECV) {
      fin = w.wr_id == 77 && w.byte_len == 16 && (uint8_t)amem[0x4000] == IBV_TMH_FIN;
    } else if (w.opcode == IBV_WC_TM_RECV && w.flags == IBV_WC_TM_MATCH) {
      match = w.wr_id == 9 && w.tm.tag == 9 && w.tm.priv == 0xc0de && !data;
    } else if (w.opcode == IBV_WC_TM_RECV && w.flags == IBV_WC_TM_DATA_VALID) {
      data = w.wr_id == 9 && w.byte_len == 20000;
    }
  }
  CHECK(match && data && fin, "rendezvous: match %d, data %d, FIN %d", match, data, fin);
  CHECK(memcmp(bmem + 0x8000, amem + 0x8000, 20000) == 0, "rendezvous data");

  /* ibv_post_srq_ops on an ordinary SRQ; the TM SRQ holds its CQ. */
  struct ibv_srq_init_attr bi = {.attr = {.max_wr = 1, .max_sge = 1}};
  struct ibv_srq* basic = ibv_create_srq(pd, &bi);
  REQUIRE(basic, "basic SRQ");
  CHECK(ibv_post_srq_ops(basic, &sync, &obad) == EINVAL, "post_srq_ops on a basic SRQ");
  CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == EBUSY, "destroy the TM SRQ's CQ");

  ibv_destroy_qp(qa);
  ibv_destroy_qp(qb);
  CHECK(ibv_destroy_srq(srq) == 0 && ibv_destroy_srq(basic) == 0, "destroy_srq");
  ibv_dereg_mr(amr);
  ibv_dereg_mr(bmr);
  CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0, "destroy_cq");
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  free(amem);
  free(bmem);
  if (failures)
    fprintf(stderr, "%d failure(s)\n", failures);
  else
    printf("tag matching: ok\n");
  return failures ? 1 : 0;
}
