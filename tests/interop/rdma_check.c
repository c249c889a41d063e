// rdma_check: RDMA WRITE / READ / atomics between two verbs devices with data checks, for the interop
// tests (perftest moves data but checks none of it). Plain libibverbs, so the same binary runs over urxe on
// the host and over kernel rxe in the guest.
//
//   server: rdma_check -d DEV -g GIDX [-s SIZE] [-m MTU] [-p PORT]
//   client: rdma_check -d DEV -g GIDX [-s SIZE] [-c CHUNK] [-n ATOMICS] [-m MTU] [-p PORT] SERVER_IP
//
// The server registers SIZE bytes filled with pattern A plus an 8-byte counter (initial value C0) for
// remote READ/WRITE/atomics. The client, over one RC QP:
//   1. READs the whole region in CHUNK-sized READs and checks pattern A (multi-packet READ responses);
//   2. WRITEs pattern B over it, READs it back, checks B;
//   3. FETCH_AND_ADDs the counter N times (checks every returned value), then CMP_AND_SWAPs it: one
//      compare that matches (swaps), one that does not (must not swap), checking the returned values;
//   4. tells the server over TCP, which checks its memory holds pattern B and the counter the expected value.
// With -w 1 or -w 2 (given to both), the server exposes its region through a memory window of that type
// instead of the MR's own key: it binds the window once its QP is in RTS (type 1 with ibv_bind_mw, type 2
// with an IBV_WR_BIND_MW on that QP, which a type-2 window's remote accesses must then come through) and
// sends the window's key, and the client's steps use it. After step 4 the window is invalidated (type 2:
// the client's SEND_WITH_INV naming its key, which the server's receive must report; type 1: the server's
// zero-length bind), and a READ through it must then fail with a remote access error.
// Both exit 0 only when every check passed; every wait is bounded.
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_WR 64
#define COUNTER_INIT 0x1000000000000000ull
#define ADD_STEP 3ull
#define CQ_TIMEOUT_S 60

static const char* role = "?";

static void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "rdma_check %s: FAIL: ", role);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

// Pattern byte at offset i of a pattern with the given seed: position-dependent, so a misplaced or
// repeated packet payload shows.
static uint8_t pattern(uint32_t seed, size_t i) {
  uint32_t x = (uint32_t)i * 2654435761u ^ seed;
  x ^= x >> 13;
  return (uint8_t)(x ^ (uint32_t)(i >> 8));
}

static void fill(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++) p[i] = pattern(seed, i);
}

static long first_mismatch(const uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != pattern(seed, i)) return (long)i;
  return -1;
}

struct conn {
  uint32_t qpn, psn, rkey;
  uint64_t addr;
  union ibv_gid gid;
};

static void send_line(int fd, const char* s) {
  size_t n = strlen(s);
  if (write(fd, s, n) != (ssize_t)n) die("tcp write: %s", strerror(errno));
}

static void recv_line(int fd, char* buf, size_t cap) {
  size_t n = 0;
  while (n + 1 < cap) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, CQ_TIMEOUT_S * 1000) != 1) die("tcp: no answer in %d s", CQ_TIMEOUT_S);
    ssize_t r = read(fd, buf + n, 1);
    if (r != 1) die("tcp: connection closed");
    if (buf[n] == '\n') break;
    n++;
  }
  buf[n] = 0;
}

static void exchange(int fd, const struct conn* me, struct conn* peer) {
  char line[256], g[33];
  for (int i = 0; i < 16; i++) snprintf(g + 2 * i, 3, "%02x", me->gid.raw[i]);
  snprintf(line, sizeof line, "%06x %06x %08x %016llx %s\n", me->qpn, me->psn, me->rkey,
           (unsigned long long)me->addr, g);
  send_line(fd, line);
  recv_line(fd, line, sizeof line);
  unsigned long long addr;
  if (sscanf(line, "%x %x %x %llx %32s", &peer->qpn, &peer->psn, &peer->rkey, &addr, g) != 5)
    die("bad peer info '%s'", line);
  peer->addr = addr;
  for (int i = 0; i < 16; i++) {
    unsigned v;
    if (sscanf(g + 2 * i, "%2x", &v) != 1) die("bad peer GID");
    peer->gid.raw[i] = (uint8_t)v;
  }
}

static int tcp_server(int port) {
  int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (bind(s, (struct sockaddr*)&a, sizeof a) || listen(s, 1)) die("listen on %d: %s", port, strerror(errno));
  struct pollfd p = {.fd = s, .events = POLLIN};
  if (poll(&p, 1, 120 * 1000) != 1) die("no client within 120 s");
  int c = accept(s, NULL, NULL);
  if (c < 0) die("accept: %s", strerror(errno));
  close(s);
  return c;
}

static int tcp_client(const char* host, int port) {
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
  if (getaddrinfo(host, ps, &hints, &res)) die("cannot resolve %s", host);
  for (int tries = 0; tries < 100; tries++) {  // the server may not listen yet
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(s, res->ai_addr, res->ai_addrlen) == 0) {
      freeaddrinfo(res);
      return s;
    }
    close(s);
    usleep(100000);
  }
  die("cannot connect to %s:%d", host, port);
  return -1;
}

static struct ibv_cq* cq;

// Waits for one completion, whatever its status.
static struct ibv_wc wait_one(void) {
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  struct ibv_wc wc;
  for (;;) {
    int r = ibv_poll_cq(cq, 1, &wc);
    if (r < 0) die("ibv_poll_cq");
    if (r == 1) return wc;
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (t.tv_sec - t0.tv_sec > CQ_TIMEOUT_S) die("no completion after %d s", CQ_TIMEOUT_S);
    usleep(50);
  }
}

// Waits for n completions, all successful; returns them in wc.
static void wait_cq(int n, struct ibv_wc* wc) {
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int got = 0;
  while (got < n) {
    int r = ibv_poll_cq(cq, n - got, wc + got);
    if (r < 0) die("ibv_poll_cq");
    for (int i = got; i < got + r; i++)
      if (wc[i].status != IBV_WC_SUCCESS)
        die("completion of wr_id %llu: %s (%d)", (unsigned long long)wc[i].wr_id,
            ibv_wc_status_str(wc[i].status), wc[i].status);
    got += r;
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (t.tv_sec - t0.tv_sec > CQ_TIMEOUT_S) die("%d of %d completions after %d s", got, n, CQ_TIMEOUT_S);
    if (!r) usleep(50);
  }
}

// Binds `mw` (type 1 or 2) over [addr, addr + len) of mr with remote read, write and atomic rights;
// returns the window's new rkey.
static uint32_t bind_window(struct ibv_qp* qp, struct ibv_mw* mw, struct ibv_mr* mr, uint8_t* addr,
                            size_t len, int type) {
  struct ibv_mw_bind_info bi = {
      .mr = mr,
      .addr = (uintptr_t)addr,
      .length = len,
      .mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC};
  if (type == 1) {
    struct ibv_mw_bind b = {.wr_id = 500, .send_flags = IBV_SEND_SIGNALED, .bind_info = bi};
    if (ibv_bind_mw(qp, mw, &b)) die("ibv_bind_mw: %s", strerror(errno));
  } else {
    struct ibv_send_wr wr = {.wr_id = 500, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED}, *bad;
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
    wr.bind_mw.bind_info = bi;
    if (ibv_post_send(qp, &wr, &bad)) die("post BIND_MW: %s", strerror(errno));
    mw->rkey = wr.bind_mw.rkey;  // a type-2 bind posted by the app: the app keeps the new key
  }
  struct ibv_wc wc = wait_one();
  if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_BIND_MW)
    die("bind completion: %s (%d), opcode %d", ibv_wc_status_str(wc.status), wc.status, wc.opcode);
  return mw->rkey;
}

// The server's side of the invalidation: type 2, a receive for the client's SEND_WITH_INV, which must
// name the window; type 1, a zero-length bind. Then "invalidated" to the client.
static int serve_invalidation(int fd, struct ibv_qp* qp, struct ibv_mw* mw, struct ibv_mr* mr, uint8_t* rbuf,
                              struct ibv_mr* rmr, int type, unsigned long long counter) {
  char line[64];
  const uint32_t key = mw->rkey;
  if (type == 2) {
    struct ibv_sge sge = {.addr = (uintptr_t)rbuf, .length = 64, .lkey = rmr->lkey};
    struct ibv_recv_wr rwr = {.wr_id = 600, .sg_list = &sge, .num_sge = 1}, *bad;
    if (ibv_post_recv(qp, &rwr, &bad)) die("post_recv: %s", strerror(errno));
    send_line(fd, "ok send-with-inv\n");
    struct ibv_wc wc = wait_one();
    // Kernel rxe marks it with the kernel's IB_WC_WITH_INVALIDATE (1 << 2), which libibverbs' command path
    // hands on unconverted, where IBV_WC_IP_CSUM_OK sits; IBV_WC_WITH_INV (1 << 3) is the verbs' own bit.
    const unsigned with_inv = IBV_WC_WITH_INV | (1u << 2);
    if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV || !(wc.wc_flags & with_inv) ||
        wc.invalidated_rkey != key)
      die("SEND_WITH_INV's receive: %s, opcode %d, flags %#x, invalidated %#x (window %#x)",
          ibv_wc_status_str(wc.status), wc.opcode, wc.wc_flags, wc.invalidated_rkey, key);
  } else {
    // Zero length at the MR's start: what rxe's bounds check (C10-75) takes as an unbind.
    struct ibv_mw_bind b = {
        .wr_id = 601, .send_flags = IBV_SEND_SIGNALED, .bind_info = {.mr = mr, .addr = (uintptr_t)mr->addr}};
    if (ibv_bind_mw(qp, mw, &b)) die("ibv_bind_mw (unbind): %s", strerror(errno));
    struct ibv_wc wc = wait_one();
    if (wc.status != IBV_WC_SUCCESS) die("unbind: %s", ibv_wc_status_str(wc.status));
    send_line(fd, "ok unbound\n");
  }
  send_line(fd, "invalidated\n");
  recv_line(fd, line, sizeof line);
  if (strcmp(line, "refused")) die("client reported '%s'", line);
  printf(
      "server: region holds pattern B, counter %#llx; window %#x invalidated (%s) and then refused: all "
      "checks passed\n",
      counter, key, type == 2 ? "SEND_WITH_INV" : "zero-length bind");
  return 0;
}

// The client's side: SEND_WITH_INV of the window's key (type 2), then a READ through it must fail.
static int check_invalidation(int fd, struct ibv_qp* qp, const struct conn* peer, uint8_t* rbuf,
                              struct ibv_mr* rmr, const char* first, int type) {
  char line[64];
  if (strcmp(first, type == 2 ? "ok send-with-inv" : "ok unbound")) die("server reported '%s'", first);
  struct ibv_sge sge = {.addr = (uintptr_t)rbuf, .length = 16, .lkey = rmr->lkey};
  struct ibv_send_wr wr = {.wr_id = 700, .sg_list = &sge, .num_sge = 1, .send_flags = IBV_SEND_SIGNALED},
                     *bad;
  if (type == 2) {
    wr.opcode = IBV_WR_SEND_WITH_INV;
    wr.invalidate_rkey = peer->rkey;
    if (ibv_post_send(qp, &wr, &bad)) die("post SEND_WITH_INV: %s", strerror(errno));
    struct ibv_wc wc = wait_one();
    if (wc.status != IBV_WC_SUCCESS) die("SEND_WITH_INV: %s", ibv_wc_status_str(wc.status));
  }
  recv_line(fd, line, sizeof line);
  if (strcmp(line, "invalidated")) die("server reported '%s'", line);
  wr = (struct ibv_send_wr){.wr_id = 701,
                            .sg_list = &sge,
                            .num_sge = 1,
                            .opcode = IBV_WR_RDMA_READ,
                            .send_flags = IBV_SEND_SIGNALED};
  wr.wr.rdma.remote_addr = peer->addr;
  wr.wr.rdma.rkey = peer->rkey;
  if (ibv_post_send(qp, &wr, &bad)) die("post READ: %s", strerror(errno));
  struct ibv_wc wc = wait_one();
  if (wc.status != IBV_WC_REM_ACCESS_ERR)
    die("READ through the invalidated window %#x: %s (%d), want remote access error", peer->rkey,
        ibv_wc_status_str(wc.status), wc.status);
  send_line(fd, "refused\n");
  printf(
      "client: window %#x: data correct through it, remote access error once invalidated: all checks "
      "passed\n",
      peer->rkey);
  return 0;
}

int main(int argc, char** argv) {
  const char* dev_name = NULL;
  int gidx = 0, port = 18516, mtu = 1024, opt;
  size_t size = 1 << 20, chunk = 65536;
  int atomics = 16, mw_type = 0;
  while ((opt = getopt(argc, argv, "d:g:s:c:n:m:p:w:")) != -1) {
    switch (opt) {
      case 'w':
        mw_type = atoi(optarg);
        break;
      case 'd':
        dev_name = optarg;
        break;
      case 'g':
        gidx = atoi(optarg);
        break;
      case 's':
        size = strtoul(optarg, NULL, 0);
        break;
      case 'c':
        chunk = strtoul(optarg, NULL, 0);
        break;
      case 'n':
        atomics = atoi(optarg);
        break;
      case 'm':
        mtu = atoi(optarg);
        break;
      case 'p':
        port = atoi(optarg);
        break;
      default:
        fprintf(stderr, "usage: see the header of rdma_check.c\n");
        return 2;
    }
  }
  const char* server = optind < argc ? argv[optind] : NULL;
  role = server ? "client" : "server";
  if (!dev_name || size % 8 || !chunk || size / chunk > MAX_WR / 2 || mw_type < 0 || mw_type > 2)
    die("bad arguments");
  enum ibv_mtu path_mtu = mtu == 256    ? IBV_MTU_256
                          : mtu == 512  ? IBV_MTU_512
                          : mtu == 2048 ? IBV_MTU_2048
                          : mtu == 4096 ? IBV_MTU_4096
                                        : IBV_MTU_1024;

  struct ibv_device** list = ibv_get_device_list(NULL);
  struct ibv_device* dev = NULL;
  for (int i = 0; list && list[i]; i++)
    if (!strcmp(ibv_get_device_name(list[i]), dev_name)) dev = list[i];
  if (!dev) die("no device %s", dev_name);
  struct ibv_context* ctx = ibv_open_device(dev);
  if (!ctx) die("ibv_open_device");
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  // region + counter (8-byte aligned) in one registration; the client also has a READ-back buffer
  uint8_t* buf = aligned_alloc(4096, size + 4096);
  uint8_t* rbuf = aligned_alloc(4096, size + 4096);
  if (!pd || !buf || !rbuf) die("alloc");
  uint64_t* counter = (uint64_t*)(buf + size);
  fill(buf, size, 0xA5A5A5A5u);
  *counter = COUNTER_INIT;
  memset(rbuf, 0, size + 4096);
  int access =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  struct ibv_mr* mr = ibv_reg_mr(pd, buf, size + 8, access | (mw_type ? IBV_ACCESS_MW_BIND : 0));
  struct ibv_mw* mw = NULL;
  if (mw_type && !server) {
    mw = ibv_alloc_mw(pd, mw_type == 1 ? IBV_MW_TYPE_1 : IBV_MW_TYPE_2);
    if (!mw) die("ibv_alloc_mw type %d: %s", mw_type, strerror(errno));
  }
  struct ibv_mr* rmr = ibv_reg_mr(pd, rbuf, size + 4096, IBV_ACCESS_LOCAL_WRITE);
  cq = ibv_create_cq(ctx, 2 * MAX_WR, NULL, NULL, 0);
  if (!mr || !rmr || !cq) die("reg_mr/create_cq: %s", strerror(errno));
  struct ibv_qp_init_attr ia = {
      .send_cq = cq,
      .recv_cq = cq,
      .qp_type = IBV_QPT_RC,
      .cap = {.max_send_wr = MAX_WR, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp* qp = ibv_create_qp(pd, &ia);
  if (!qp) die("ibv_create_qp: %s", strerror(errno));
  struct ibv_qp_attr a = {
      .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qp_access_flags = (unsigned)access};
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    die("modify INIT: %s", strerror(errno));

  struct conn me = {.qpn = qp->qp_num, .rkey = mr->rkey, .addr = (uintptr_t)buf}, peer;
  srand48(getpid() ^ time(NULL));
  me.psn = (uint32_t)lrand48() & 0xffffff;
  if (ibv_query_gid(ctx, 1, gidx, &me.gid)) die("ibv_query_gid %d", gidx);
  int fd = server ? tcp_client(server, port) : tcp_server(port);
  exchange(fd, &me, &peer);

  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = path_mtu;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = peer.psn;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = peer.gid;
  a.ah_attr.grh.sgid_index = (uint8_t)gidx;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    die("modify RTR: %s", strerror(errno));
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = me.psn;
  a.max_rd_atomic = 4;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                        IBV_QP_MAX_QP_RD_ATOMIC))
    die("modify RTS: %s", strerror(errno));
  if (mw_type) {  // the window over the region, and its key in place of the MR's
    char mline[64];
    if (!server) {
      me.rkey = bind_window(qp, mw, mr, buf, size + 8, mw_type);
      snprintf(mline, sizeof mline, "mw %08x\n", me.rkey);
      send_line(fd, mline);
      printf("server: type %d memory window bound over the region, rkey %#x (the MR's: %#x)\n", mw_type,
             me.rkey, mr->rkey);
    } else {
      recv_line(fd, mline, sizeof mline);
      if (sscanf(mline, "mw %x", &peer.rkey) != 1) die("bad message '%s'", mline);
    }
  }
  printf(
      "%s: local QPN %#x PSN %#x RKey %#x VAddr %#llx, remote QPN %#x PSN %#x RKey %#x VAddr %#llx, %zu "
      "bytes in "
      "%zu-byte chunks, MTU %d\n",
      role, me.qpn, me.psn, me.rkey, (unsigned long long)me.addr, peer.qpn, peer.psn, peer.rkey,
      (unsigned long long)peer.addr, size, chunk, mtu);
  fflush(stdout);
  char line[256];

  if (!server) {  // the server's CPU only answers; it checks its memory when told to
    recv_line(fd, line, sizeof line);
    unsigned long long want;
    if (sscanf(line, "done %llx", &want) != 1) die("bad message '%s'", line);
    long bad = first_mismatch(buf, size, 0x5A5A5A5Au);
    if (bad >= 0)
      die("region byte %ld is %#x, pattern B says %#x", bad, buf[bad], pattern(0x5A5A5A5Au, (size_t)bad));
    if (*counter != want) die("counter %#llx, expected %#llx", (unsigned long long)*counter, want);
    if (mw_type) return serve_invalidation(fd, qp, mw, mr, rbuf, rmr, mw_type, want);
    send_line(fd, "ok\n");
    printf("server: region holds pattern B, counter %#llx: all checks passed\n", want);
    return 0;
  }

  struct ibv_wc wc[MAX_WR];
  int nchunks = (int)((size + chunk - 1) / chunk);
  // 1 and 2: READ (pattern A), WRITE (pattern B), READ back (pattern B)
  for (int phase = 0; phase < 3; phase++) {
    if (phase == 1)
      fill(rbuf, size, 0x5A5A5A5Au);  // the WRITE source
    else
      memset(rbuf, 0, size);
    for (int i = 0; i < nchunks; i++) {
      size_t off = (size_t)i * chunk, len = size - off < chunk ? size - off : chunk;
      struct ibv_sge sge = {.addr = (uintptr_t)rbuf + off, .length = (uint32_t)len, .lkey = rmr->lkey};
      struct ibv_send_wr wr = {.wr_id = (uint64_t)i,
                               .sg_list = &sge,
                               .num_sge = 1,
                               .opcode = phase == 1 ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ,
                               .send_flags = IBV_SEND_SIGNALED},
                         *badwr;
      wr.wr.rdma.remote_addr = peer.addr + off;
      wr.wr.rdma.rkey = peer.rkey;
      if (ibv_post_send(qp, &wr, &badwr)) die("post_send phase %d: %s", phase, strerror(errno));
    }
    wait_cq(nchunks, wc);
    if (phase != 1) {
      uint32_t seed = phase == 0 ? 0xA5A5A5A5u : 0x5A5A5A5Au;
      long bad = first_mismatch(rbuf, size, seed);
      if (bad >= 0)
        die("READ %s: byte %ld is %#x, expected %#x", phase ? "after WRITE" : "of pattern A", bad, rbuf[bad],
            pattern(seed, (size_t)bad));
    }
  }
  printf("client: READ of pattern A, WRITE + READ back of pattern B: data correct\n");
  // 3: atomics, one at a time (each result checked against the model)
  uint64_t model = COUNTER_INIT;
  uint64_t* result = (uint64_t*)(rbuf + size);
  for (int i = 0; i < atomics + 2; i++) {
    int fadd = i < atomics;
    uint64_t compare = i == atomics ? model : model + 1;  // the first CAS matches, the second does not
    struct ibv_sge sge = {.addr = (uintptr_t)result, .length = 8, .lkey = rmr->lkey};
    struct ibv_send_wr wr = {.wr_id = 1000u + (unsigned)i,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = fadd ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP,
                             .send_flags = IBV_SEND_SIGNALED},
                       *badwr;
    wr.wr.atomic.remote_addr = peer.addr + size;
    wr.wr.atomic.rkey = peer.rkey;
    wr.wr.atomic.compare_add = fadd ? ADD_STEP : compare;
    wr.wr.atomic.swap = 0x0123456789abcdefull + (uint64_t)i;
    *result = 0;
    if (ibv_post_send(qp, &wr, &badwr)) die("post atomic: %s", strerror(errno));
    wait_cq(1, wc);
    if (*result != model)
      die("%s #%d returned %#llx, expected %#llx", fadd ? "FETCH_AND_ADD" : "CMP_AND_SWAP", i,
          (unsigned long long)*result, (unsigned long long)model);
    if (fadd)
      model += ADD_STEP;
    else if (compare == model)
      model = wr.wr.atomic.swap;
  }
  printf("client: %d FETCH_AND_ADD + 2 CMP_AND_SWAP (one matching): every original value correct\n", atomics);
  snprintf(line, sizeof line, "done %llx\n", (unsigned long long)model);
  send_line(fd, line);
  recv_line(fd, line, sizeof line);
  if (mw_type) return check_invalidation(fd, qp, &peer, rbuf, rmr, line, mw_type);
  if (strcmp(line, "ok")) die("server reported '%s'", line);
  printf("client: server confirms its memory: all checks passed\n");
  return 0;
}
