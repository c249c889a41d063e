/* What the C programs of tests/provider share: CHECK (count a failure and go on), REQUIRE (count it and
 * return 1 from the calling function: use in main, or in a helper whose caller stops on non-zero), a
 * monotonic clock, finding a device by name, this process's progress threads, and RC set-up helpers. */
#pragma once
#include <dirent.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int failures;
#define CHECK(cond, ...)                                              \
  do {                                                                \
    if (!(cond)) {                                                    \
      failures++;                                                     \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                   \
      fputc('\n', stderr);                                            \
    }                                                                 \
  } while (0)
#define REQUIRE(cond, ...)                                            \
  do {                                                                \
    if (!(cond)) {                                                    \
      failures++;                                                     \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                   \
      fprintf(stderr, "\nfatal, stopping\n");                         \
      return 1;                                                       \
    }                                                                 \
  } while (0)

/* CLOCK_MONOTONIC in milliseconds (vDSO: no syscall). */
static inline double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The device called `name` in a list from ibv_get_device_list, or NULL. */
static inline struct ibv_device* find_device(struct ibv_device** list, int n, const char* name) {
  for (int i = 0; list && i < n; i++)
    if (strcmp(ibv_get_device_name(list[i]), name) == 0) return list[i];
  return NULL;
}

/* main's prologue for tests run as PROG DEVICE: the device named by argv[1] from a list kept in *list (for
   ibv_free_device_list), or NULL after a usage or lookup message. */
static inline struct ibv_device* device_from_args(int argc, char** argv, struct ibv_device*** list) {
  *list = NULL;
  if (argc != 2) {
    fprintf(stderr, "usage: %s DEVICE\n", argv[0]);
    return NULL;
  }
  int num = 0;
  *list = ibv_get_device_list(&num);
  struct ibv_device* dev = find_device(*list, num, argv[1]);
  if (!dev) fprintf(stderr, "FAIL: no device %s\n", argv[1]);
  return dev;
}

/* One completion from cq within ms milliseconds of busy polling: 1 (in *wc), 0 (none came), or the poll's
   negative error. */
static inline int poll_one(struct ibv_cq* cq, struct ibv_wc* wc, double ms) {
  const double end = now_ms() + ms;
  int n;
  while ((n = ibv_poll_cq(cq, 1, wc)) == 0 && now_ms() < end) {
  }
  return n;
}

/* The tids of this process's threads named urxe-progress (one per open context), at most `max` of them;
   returns how many were found. */
static inline int progress_tids(int* tids, int max) {
  DIR* d = opendir("/proc/self/task");
  if (!d) return 0;
  int n = 0;
  for (struct dirent* e; n < max && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char path[300], comm[64] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE* f = fopen(path, "r");
    if (!f) continue;
    if (fgets(comm, sizeof comm, f) && strncmp(comm, "urxe-progress", 13) == 0) tids[n++] = atoi(e->d_name);
    fclose(f);
  }
  closedir(d);
  return n;
}

/* QP attributes: one CQ for both queues, `wr` WRs and one SGE each way. */
static inline struct ibv_qp_init_attr qp_init_attr(struct ibv_cq* cq, enum ibv_qp_type type, uint32_t wr) {
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof ia);
  ia.send_cq = cq;
  ia.recv_cq = cq;
  ia.qp_type = type;
  ia.cap.max_send_wr = wr;
  ia.cap.max_recv_wr = wr;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  return ia;
}

/* RESET -> INIT of an RC QP on port 1, remote write, read and atomic access. */
static inline int rc_to_init(struct ibv_qp* qp) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

/* INIT -> RTR of an RC QP towards dest_qpn at dgid from sgid_index: path MTU 1024, PSN 1, up to 4 RDMA
 * READs/atomics. */
static inline int rc_to_rtr(struct ibv_qp* qp, uint32_t dest_qpn, const union ibv_gid* dgid, int sgid_index) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = dest_qpn;
  a.rq_psn = 1;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = *dgid;
  a.ah_attr.grh.sgid_index = (uint8_t)sgid_index;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

/* INIT -> RTR -> RTS (rc_to_rtr, then PSN 1, timeout 14, retries 7). Returns the first failing
 * ibv_modify_qp's result. */
static inline int rc_to_rts(struct ibv_qp* qp, uint32_t dest_qpn, const union ibv_gid* dgid, int sgid_index) {
  int rc = rc_to_rtr(qp, dest_qpn, dgid, sgid_index);
  if (rc) return rc;
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = 1;
  a.max_rd_atomic = 4;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_QP_RD_ATOMIC);
}

/* Connects two RC QPs of the device ctx belongs to, each to the other (rc_to_rts, GID index 1). */
static inline int rc_connect_pair(struct ibv_context* ctx, struct ibv_qp* a, struct ibv_qp* b) {
  union ibv_gid gid;
  if (ibv_query_gid(ctx, 1, 1, &gid)) return -1;
  return rc_to_rts(a, b->qp_num, &gid, 1) || rc_to_rts(b, a->qp_num, &gid, 1) ? -1 : 0;
}

/* A signaled SEND of the `len` bytes at `addr`, or a receive WR for them: ibv_post_*'s result. */
static inline int post_send_buf(struct ibv_qp* qp, void* addr, uint32_t len, uint32_t lkey, uint64_t wr_id) {
  struct ibv_sge sge = {(uintptr_t)addr, len, lkey};
  struct ibv_send_wr wr, *bad;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  return ibv_post_send(qp, &wr, &bad);
}
static inline int post_recv_buf(struct ibv_qp* qp, void* addr, uint32_t len, uint32_t lkey, uint64_t wr_id) {
  struct ibv_sge sge = {(uintptr_t)addr, len, lkey};
  struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad;
  return ibv_post_recv(qp, &wr, &bad);
}

/* main's exit status: 1 after naming how many checks failed, else 0 after printing ok_line (if any). */
static inline int test_result(const char* ok_line) {
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  if (ok_line) printf("%s\n", ok_line);
  return 0;
}
