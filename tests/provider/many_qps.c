/* One process, the most QPs a device allows (max_qp, as rxe: 65,536): all created with small queues, 10,000
 * of them connected in pairs on the device and each pair carrying a SEND; then every QP destroyed. Prints
 * the time per QP create and the memory each QP adds (resident set), the figures the README quotes.
 *   usage: many_qps DEVICE [CONNECTED] */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static long rss_kib(void) {
  long pages = 0, resident = 0;
  FILE* f = fopen("/proc/self/statm", "r");
  if (f && fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  if (f) fclose(f);
  return resident * 4;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s DEVICE [CONNECTED]\n", argv[0]);
    return 2;
  }
  const int connected = argc > 2 ? atoi(argv[2]) : 10000;
  int num = 0;
  struct ibv_device** list = ibv_get_device_list(&num);
  struct ibv_device* dev = find_device(list, num, argv[1]);
  REQUIRE(dev, "%s not listed", argv[1]);
  struct ibv_context* ctx = ibv_open_device(dev);
  REQUIRE(ctx, "open: %s", strerror(errno));
  struct ibv_device_attr da;
  REQUIRE(ibv_query_device(ctx, &da) == 0, "query_device");
  CHECK(da.max_qp >= 65536, "max_qp %d, want at least 65,536", da.max_qp);
  const int n = da.max_qp;
  REQUIRE(connected % 2 == 0 && connected <= n, "CONNECTED must be even and at most max_qp");
  union ibv_gid gid;
  REQUIRE(ibv_query_gid(ctx, 1, 1, &gid) == 0, "query_gid 1");
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  struct ibv_cq* cq = ibv_create_cq(ctx, 2 * connected, NULL, NULL, 0);
  REQUIRE(pd && cq, "pd/cq: %s", strerror(errno));
  char* mem = calloc(1, 4096);
  struct ibv_mr* mr = ibv_reg_mr(pd, mem, 4096, IBV_ACCESS_LOCAL_WRITE);
  REQUIRE(mem && mr, "mr");
  struct ibv_qp** qp = calloc((size_t)n, sizeof *qp);
  REQUIRE(qp, "calloc");

  const long rss0 = rss_kib();
  double t0 = now_ms();
  struct ibv_qp_init_attr ia = qp_init_attr(cq, IBV_QPT_RC, 1);
  int made = 0;
  while (made < n && (qp[made] = ibv_create_qp(pd, &ia)) != NULL) made++;
  const double create_ms = now_ms() - t0;
  CHECK(made == n, "created %d of %d QPs: %s", made, n, strerror(errno));
  errno = 0;
  /* rxe answers EINVAL when its QP pool is full */
  CHECK(ibv_create_qp(pd, &ia) == NULL && (errno == EINVAL || errno == ENOMEM),
        "QP %d beyond max_qp: errno %d", n + 1, errno);
  const long rss1 = rss_kib();
  printf("%d QPs created in %.0f ms (%.1f us each), %.2f KiB resident each (1-WR queues)\n", made, create_ms,
         create_ms * 1000 / made, (double)(rss1 - rss0) / made);

  /* Pairs spread over the whole QPN range (with 10,000 of 65,536: every 6th QP takes part). */
  const int stride = n / connected;
  t0 = now_ms();
  for (int i = 0; i < connected && made == n; i += 2) {
    struct ibv_qp *a = qp[i * stride], *b = qp[(i + 1) * stride];
    REQUIRE(rc_to_init(a) == 0 && rc_to_init(b) == 0, "INIT %d", i);
    REQUIRE(rc_to_rts(a, b->qp_num, &gid, 1) == 0 && rc_to_rts(b, a->qp_num, &gid, 1) == 0, "RTS %d", i);
    struct ibv_sge rs = {(uintptr_t)(mem + 2048), 64, mr->lkey};
    struct ibv_recv_wr r = {.wr_id = (uint64_t)i, .sg_list = &rs, .num_sge = 1}, *bad_r;
    REQUIRE(ibv_post_recv(b, &r, &bad_r) == 0, "post_recv %d", i);
    struct ibv_sge ss = {(uintptr_t)mem, 64, mr->lkey};
    struct ibv_send_wr w = {.wr_id = (uint64_t)i, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND}, *bad;
    w.send_flags = IBV_SEND_SIGNALED;
    REQUIRE(ibv_post_send(a, &w, &bad) == 0, "post_send %d", i);
  }
  int ok = 0, seen = 0;
  struct ibv_wc wc[64];
  while (seen < connected && now_ms() - t0 < 60000) {
    const int k = ibv_poll_cq(cq, 64, wc);
    REQUIRE(k >= 0, "poll_cq");
    for (int j = 0; j < k; j++) ok += wc[j].status == IBV_WC_SUCCESS;
    seen += k;
  }
  CHECK(ok == connected, "%d of %d completions successful (%d seen)", ok, connected, seen);
  printf("%d QPs connected in pairs, a SEND over each pair completed in %.0f ms\n", connected, now_ms() - t0);

  t0 = now_ms();
  for (int i = 0; i < made; i++) CHECK(ibv_destroy_qp(qp[i]) == 0, "destroy %d", i);
  printf("%d QPs destroyed in %.0f ms\n", made, now_ms() - t0);
  CHECK(ibv_dereg_mr(mr) == 0 && ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0, "teardown");
  CHECK(ibv_close_device(ctx) == 0, "close");
  ibv_free_device_list(list);
  free(qp);
  free(mem);
  return test_result("many_qps: ok");
}
