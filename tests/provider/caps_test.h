/* What caps_test.c (device_cap_flags rows, main) and caps_limits.c (limit and zero rows) share. */
#pragma once
#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>

struct env {
  struct ibv_context* ctx;
  struct ibv_device_attr_ex dx;
  struct ibv_port_attr port;
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  struct ibv_mr* mr;
  char* mem; /* kMem bytes, registered with every access */
  union ibv_gid gid;
  const char* peer; /* the other end of the device's veth */
};
enum { kMem = 1 << 20, kGid = 1 };

/* Helpers (caps_test.c). */
int wait_wc(struct ibv_cq* cq, struct ibv_wc* wc);
struct ibv_qp* rc_self(struct env* e, uint32_t wr, uint32_t sge, uint8_t rnr_retry);
struct ibv_qp* ud_qp(struct env* e, uint32_t qkey);
struct ibv_ah* self_ah(struct env* e);

/* One limit or zero capability (caps_limits.c). */
struct limit_row {
  const char* name;
  uint64_t (*value)(const struct env*);
  int (*check)(struct env*, uint64_t value);
  const char* how; /* printed: what the row checks, where it is not plain "at the limit and one beyond" */
  int zero_only;   /* the check is for 0 (the verb refused): a non-zero value needs a row that exercises it */
};
extern const struct limit_row kLimitRows[];
extern const size_t kNumLimitRows;
int caps_limits_failures(void); /* CHECKs failed in caps_limits.c (check.h's count is per file) */
