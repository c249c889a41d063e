/* Every capability urxe advertises is true: a table of rows, one per device_cap_flags bit (exercised when
 * set; an unknown bit set fails), one per limit of ibv_query_device_ex / ibv_query_port (at the limit works,
 * one beyond fails with the errno rdma-core documents), and one per capability reported as 0 (the verb
 * behind it is refused). A capability turned on later (memory windows: IBV_DEVICE_MEM_WINDOW, max_mw) needs
 * its row only. Usage: caps_test DEVICE PEER_NETDEV (the veth end P_Key-violating frames are sent from;
 * the device's port must be the socket port, which takes frames from the wire). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "tests/provider/caps_test.h"

/* ---- helpers ---- */

int wait_wc(struct ibv_cq* cq, struct ibv_wc* wc) {
  for (int i = 0; i < 5000; i++) {
    int n = ibv_poll_cq(cq, 1, wc);
    if (n) return n;
    usleep(1000);
  }
  return 0;
}

/* An RC QP connected to itself on the env's CQ (send and receive queues of `wr`, `sge` SGEs). */
struct ibv_qp* rc_self(struct env* e, uint32_t wr, uint32_t sge, uint8_t rnr_retry) {
  struct ibv_qp_init_attr ia = qp_init_attr(e->cq, IBV_QPT_RC, wr);
  ia.cap.max_send_sge = ia.cap.max_recv_sge = sge;
  struct ibv_qp* qp = ibv_create_qp(e->pd, &ia);
  if (!qp) return NULL;
  if (rc_to_init(qp) || rc_to_rtr(qp, qp->qp_num, &e->gid, kGid)) goto fail;
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = rnr_retry;
  a.sq_psn = 1;
  a.max_rd_atomic = 4;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                        IBV_QP_MAX_QP_RD_ATOMIC))
    goto fail;
  return qp;
fail:
  ibv_destroy_qp(qp);
  return NULL;
}

/* A UD QP in RTS with Q_Key `qkey`. */
struct ibv_qp* ud_qp(struct env* e, uint32_t qkey) {
  struct ibv_qp_init_attr ia = qp_init_attr(e->cq, IBV_QPT_UD, 4);
  struct ibv_qp* qp = ibv_create_qp(e->pd, &ia);
  if (!qp) return NULL;
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = qkey;
  int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
  a.qp_state = IBV_QPS_RTR;
  rc = rc || ibv_modify_qp(qp, &a, IBV_QP_STATE);
  a.qp_state = IBV_QPS_RTS;
  rc = rc || ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
  if (rc) {
    ibv_destroy_qp(qp);
    return NULL;
  }
  return qp;
}

struct ibv_ah* self_ah(struct env* e) {
  struct ibv_ah_attr aa;
  memset(&aa, 0, sizeof aa);
  aa.is_global = 1;
  aa.grh.dgid = e->gid;
  aa.grh.sgid_index = kGid;
  aa.grh.hop_limit = 64;
  aa.port_num = 1;
  return ibv_create_ah(e->pd, &aa);
}

static struct ibv_port_attr port_now(struct env* e) {
  struct ibv_port_attr p;
  memset(&p, 0, sizeof p);
  CHECK(ibv_query_port(e->ctx, 1, &p) == 0, "query_port");
  return p;
}

/* ---- device_cap_flags: what each bit promises, exercised ---- */

/* A UD SEND whose Q_Key is not the receiver's is dropped and counted in qkey_viol_cntr. */
static int bad_qkey_counts(struct env* e) {
  struct ibv_qp* qp = ud_qp(e, 0x1111);
  struct ibv_ah* ah = self_ah(e);
  REQUIRE(qp && ah, "UD QP / AH: %s", strerror(errno));
  const uint32_t before = port_now(e).qkey_viol_cntr;
  struct ibv_sge s = {(uintptr_t)e->mem, 8, e->mr->lkey};
  struct ibv_send_wr w = {.sg_list = &s,
                          .num_sge = 1,
                          .opcode = IBV_WR_SEND,
                          .send_flags = IBV_SEND_SIGNALED},
                     *bad;
  w.wr.ud.ah = ah;
  w.wr.ud.remote_qpn = qp->qp_num;
  w.wr.ud.remote_qkey = 0x2222;
  REQUIRE(post_recv_buf(qp, e->mem + 4096, 64, e->mr->lkey, 1) == 0 && ibv_post_send(qp, &w, &bad) == 0,
          "UD post");
  struct ibv_wc wc;
  CHECK(wait_wc(e->cq, &wc) == 1 && wc.opcode == IBV_WC_SEND, "UD send completion");
  uint32_t after = before;
  for (int i = 0; i < 2000 && after == before; i++, usleep(1000)) after = port_now(e).qkey_viol_cntr;
  CHECK(after == before + 1, "qkey_viol_cntr %u -> %u", before, after);
  CHECK(ibv_poll_cq(e->cq, 1, &wc) == 0, "the violating SEND was received");
  ibv_destroy_qp(qp); /* flushes the receive: drained below */
  while (ibv_poll_cq(e->cq, 1, &wc) > 0) {
  }
  ibv_destroy_ah(ah);
  return 0;
}

/* ICRC of an IPv4 RoCEv2 frame (IBTA Annex A17.3.3): CRC-32 over 8 bytes of ones (the LRH), the IPv4
 * header with TOS, TTL and checksum as ones, UDP with its checksum as ones, the BTH with its reserved byte
 * (FECN/BECN) as ones, and the rest; little-endian after the payload. */
static void put_icrc(uint8_t* l3, size_t len) {
  uint8_t buf[256];
  memset(buf, 0xff, 8);
  memcpy(buf + 8, l3, len);
  uint8_t* ip = buf + 8;
  ip[1] = ip[8] = ip[10] = ip[11] = 0xff;
  ip[20 + 6] = ip[20 + 7] = 0xff;
  ip[28 + 4] = 0xff;
  uint32_t c = (uint32_t)crc32(0, buf, (uInt)(8 + len));
  for (int i = 0; i < 4; i++) l3[len + i] = (uint8_t)(c >> (8 * i));
}

static int if_mac(int fd, const char* ifname, uint8_t mac[6], int* ifindex) {
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", ifname);
  if (ioctl(fd, SIOCGIFHWADDR, &ifr)) return -1;
  memcpy(mac, ifr.ifr_hwaddr.sa_data, 6);
  if (ioctl(fd, SIOCGIFINDEX, &ifr)) return -1;
  *ifindex = ifr.ifr_ifindex;
  return 0;
}

/* A UD SEND_ONLY with P_Key 0x1234 (not the default), sent to the device from the peer veth end with a
 * good ICRC: dropped and counted in bad_pkey_cntr. */
static int bad_pkey_counts(struct env* e) {
  struct ibv_qp* qp = ud_qp(e, 0x1111);
  REQUIRE(qp, "UD QP");
  int fd = socket(AF_PACKET, SOCK_RAW, 0);
  REQUIRE(fd >= 0, "AF_PACKET socket (needs CAP_NET_RAW): %s", strerror(errno));
  uint8_t dmac[6], smac[6];
  int ifindex = 0, dev_ifindex = 0;
  const char* dev_netdev = getenv("URXE_TEST_NETDEV") ? getenv("URXE_TEST_NETDEV") : "va";
  REQUIRE(if_mac(fd, e->peer, smac, &ifindex) == 0 && if_mac(fd, dev_netdev, dmac, &dev_ifindex) == 0,
          "interfaces %s / %s", e->peer, dev_netdev);
  uint8_t f[14 + 20 + 8 + 12 + 8 + 4];
  memset(f, 0, sizeof f);
  memcpy(f, dmac, 6);
  memcpy(f + 6, smac, 6);
  f[12] = 0x08;
  uint8_t* ip = f + 14;
  ip[0] = 0x45;
  const uint16_t ip_len = (uint16_t)(sizeof f - 14);
  ip[2] = (uint8_t)(ip_len >> 8), ip[3] = (uint8_t)ip_len;
  ip[6] = 0x40; /* DF */
  ip[8] = 64;
  ip[9] = 17;
  memcpy(ip + 12, e->gid.raw + 12, 4); /* from the device's own address: any source will do */
  memcpy(ip + 16, e->gid.raw + 12, 4);
  uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += (uint32_t)(ip[i] << 8 | ip[i + 1]);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  ip[10] = (uint8_t)(~sum >> 8), ip[11] = (uint8_t)~sum;
  uint8_t* udp = ip + 20;
  udp[0] = 0xc0, udp[1] = 0x00;
  udp[2] = 4791 >> 8, udp[3] = 4791 & 0xff;
  udp[5] = (uint8_t)(ip_len - 20);
  uint8_t* bth = udp + 8;
  bth[0] = 0x64; /* UD SEND_ONLY */
  bth[2] = 0x12, bth[3] = 0x34;
  bth[5] = (uint8_t)(qp->qp_num >> 16), bth[6] = (uint8_t)(qp->qp_num >> 8), bth[7] = (uint8_t)qp->qp_num;
  uint8_t* deth = bth + 12;
  deth[2] = 0x11, deth[3] = 0x11; /* Q_Key 0x1111: only the P_Key is wrong */
  deth[7] = 0x22;
  put_icrc(ip, (size_t)(deth + 8 - ip));
  const uint32_t before = port_now(e).bad_pkey_cntr;
  struct sockaddr_ll to = {.sll_family = AF_PACKET, .sll_ifindex = ifindex, .sll_halen = 6};
  memcpy(to.sll_addr, dmac, 6);
  CHECK(sendto(fd, f, sizeof f, 0, (struct sockaddr*)&to, sizeof to) == (ssize_t)sizeof f, "sendto: %s",
        strerror(errno));
  uint32_t after = before;
  for (int i = 0; i < 2000 && after == before; i++, usleep(1000)) after = port_now(e).bad_pkey_cntr;
  CHECK(after == before + 1, "bad_pkey_cntr %u -> %u", before, after);
  close(fd);
  ibv_destroy_qp(qp);
  return 0;
}

/* A SEND to a QP with no receive posted gets an RNR NAK: with rnr_retry 0 the sender fails with
 * IBV_WC_RNR_RETRY_EXC_ERR. */
static int rnr_nak_generated(struct env* e) {
  struct ibv_qp* qp = rc_self(e, 4, 1, 0);
  REQUIRE(qp, "RC QP: %s", strerror(errno));
  REQUIRE(post_send_buf(qp, e->mem, 16, e->mr->lkey, 5) == 0, "post");
  struct ibv_wc wc;
  CHECK(wait_wc(e->cq, &wc) == 1 && wc.status == IBV_WC_RNR_RETRY_EXC_ERR, "status %s",
        ibv_wc_status_str(wc.status));
  ibv_destroy_qp(qp);
  while (ibv_poll_cq(e->cq, 1, &wc) > 0) {
  }
  return 0;
}

/* ibv_modify_srq(IBV_SRQ_MAX_WR): grown, it takes more WQEs than before and delivers into them. */
static int srq_resize_works(struct env* e) {
  struct ibv_srq_init_attr sia = {.attr = {.max_wr = 4, .max_sge = 1}};
  struct ibv_srq* srq = ibv_create_srq(e->pd, &sia);
  REQUIRE(srq, "create_srq");
  struct ibv_srq_attr sa = {.max_wr = 32};
  CHECK(ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR) == 0, "resize");
  CHECK(ibv_query_srq(srq, &sa) == 0 && sa.max_wr == 32, "max_wr after resize %u", sa.max_wr);
  for (int i = 0; i < 33; i++) {
    struct ibv_sge s = {(uintptr_t)(e->mem + 8192 + 64 * i), 64, e->mr->lkey};
    struct ibv_recv_wr r = {.wr_id = (uint64_t)i, .sg_list = &s, .num_sge = 1}, *bad;
    const int rc = ibv_post_srq_recv(srq, &r, &bad);
    CHECK(rc == (i < 32 ? 0 : ENOMEM), "post %d: %d", i, rc);
  }
  struct ibv_qp_init_attr ia = qp_init_attr(e->cq, IBV_QPT_RC, 4);
  ia.srq = srq;
  struct ibv_qp* qp = ibv_create_qp(e->pd, &ia);
  REQUIRE(qp && rc_to_init(qp) == 0 && rc_to_rts(qp, qp->qp_num, &e->gid, kGid) == 0, "SRQ QP");
  strcpy(e->mem, "resized");
  REQUIRE(post_send_buf(qp, e->mem, 8, e->mr->lkey, 100) == 0, "send");
  int recv = 0;
  for (int k = 0; k < 2; k++) {
    struct ibv_wc wc;
    CHECK(wait_wc(e->cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "completion %d", k);
    if (wc.opcode == IBV_WC_RECV) recv += wc.wr_id == 0 && !strcmp(e->mem + 8192, "resized");
  }
  CHECK(recv == 1, "SEND not received into the first SRQ WQE");
  ibv_destroy_qp(qp);
  ibv_destroy_srq(srq);
  return 0;
}

/* Completion notification: one event per arming, solicited-only arming ignores an unsolicited receive. */
static int notify_cq_works(struct env* e) {
  struct ibv_comp_channel* ch = ibv_create_comp_channel(e->ctx);
  REQUIRE(ch, "comp channel");
  struct ibv_cq* cq = ibv_create_cq(e->ctx, 16, NULL, ch, 0);
  REQUIRE(cq, "cq");
  struct ibv_qp_init_attr ia = qp_init_attr(cq, IBV_QPT_RC, 4);
  struct ibv_qp* qp = ibv_create_qp(e->pd, &ia);
  REQUIRE(qp && rc_to_init(qp) == 0 && rc_to_rts(qp, qp->qp_num, &e->gid, kGid) == 0, "QP");
  struct pollfd p = {ch->fd, POLLIN, 0};
  for (int solicited = 0; solicited < 2; solicited++) {
    REQUIRE(ibv_req_notify_cq(cq, 1) == 0, "arm solicited-only");
    REQUIRE(post_recv_buf(qp, e->mem + 4096, 64, e->mr->lkey, 1) == 0, "recv");
    struct ibv_sge s = {(uintptr_t)e->mem, 8, e->mr->lkey};
    struct ibv_send_wr w = {.sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND}, *bad;
    w.send_flags = IBV_SEND_SIGNALED | (solicited ? IBV_SEND_SOLICITED : 0);
    REQUIRE(ibv_post_send(qp, &w, &bad) == 0, "send");
    struct ibv_wc wc[2];
    int got = 0;
    for (int i = 0; i < 5000 && got < 2; i++, usleep(got < 2 ? 1000 : 0))
      got += ibv_poll_cq(cq, 2 - got, wc + got);
    CHECK(got == 2, "completions %d", got);
    const int ev = poll(&p, 1, solicited ? 2000 : 50);
    CHECK(ev == solicited, "event after %s receive: %d", solicited ? "a solicited" : "an unsolicited", ev);
    if (ev == 1) {
      struct ibv_cq* ecq;
      void* ectx;
      CHECK(ibv_get_cq_event(ch, &ecq, &ectx) == 0 && ecq == cq, "get_cq_event");
      ibv_ack_cq_events(cq, 1);
    }
  }
  CHECK(poll(&p, 1, 0) == 0, "a second event for one arming");
  ibv_destroy_qp(qp);
  ibv_destroy_cq(cq);
  ibv_destroy_comp_channel(ch);
  return 0;
}

/* Memory windows: with IBV_DEVICE_MEM_WINDOW, type 1 and type 2 windows can be allocated; without, the
 * verb is refused with EOPNOTSUPP. */
static int mw_types(struct env* e, int want_ok) {
  for (int t = 0; t < 2; t++) {
    const enum ibv_mw_type type = t ? IBV_MW_TYPE_2 : IBV_MW_TYPE_1;
    errno = 0;
    struct ibv_mw* mw = ibv_alloc_mw(e->pd, type);
    if (want_ok)
      CHECK(mw != NULL, "alloc_mw type %d: %s", t + 1, strerror(errno));
    else
      CHECK(mw == NULL && errno == EOPNOTSUPP, "alloc_mw type %d without the flag: errno %d", t + 1, errno);
    if (mw) ibv_dealloc_mw(mw);
  }
  return 0;
}
static int mw_works(struct env* e) {
  return mw_types(e, 1);
}
static int mw_refused(struct env* e) {
  return mw_types(e, 0);
}
static int mw_type2_works(struct env* e) {
  struct ibv_mw* mw = ibv_alloc_mw(e->pd, IBV_MW_TYPE_2);
  CHECK(mw != NULL, "alloc_mw type 2: %s", strerror(errno));
  if (mw) ibv_dealloc_mw(mw);
  return 0;
}

/* XRC: a domain on a file (a second open reaches the same one, O_EXCL refuses it, closing is EBUSY while an
 * SRQ is in it), an XRC SRQ with its number, a target QP and an initiator connected to it; a SEND and a
 * WRITE through the SRQ's number complete on the SRQ's CQ (the SEND) and land; a shared target through
 * ibv_open_qp; an unknown SRQ number is an invalid request. */
static int xrc_works(struct env* e) {
  char path[] = "/tmp/urxe-caps-xrc.XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0, "mkstemp");
  unlink(path);
  struct ibv_xrcd_init_attr xa = {
      .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = fd, .oflags = O_CREAT};
  struct ibv_xrcd* x = ibv_open_xrcd(e->ctx, &xa);
  REQUIRE(x, "open_xrcd: %s", strerror(errno));
  xa.oflags = 0;
  struct ibv_xrcd* x2 = ibv_open_xrcd(e->ctx, &xa); /* the file's domain exists: no O_CREAT needed */
  CHECK(x2, "second open_xrcd: %s", strerror(errno));
  xa.oflags = O_CREAT | O_EXCL;
  CHECK(!ibv_open_xrcd(e->ctx, &xa) && errno == EEXIST, "O_EXCL on an existing domain: %s", strerror(errno));
  struct ibv_cq* scq = ibv_create_cq(e->ctx, 16, NULL, NULL, 0);
  REQUIRE(scq, "srq cq");
  struct ibv_srq_init_attr_ex sa = {.attr = {.max_wr = 8, .max_sge = 1},
                                    .comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD |
                                                 IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD,
                                    .srq_type = IBV_SRQT_XRC,
                                    .pd = e->pd,
                                    .xrcd = x2 ? x2 : x,
                                    .cq = scq};
  struct ibv_srq* srq = ibv_create_srq_ex(e->ctx, &sa);
  REQUIRE(srq, "XRC SRQ: %s", strerror(errno));
  uint32_t srqn = 0;
  CHECK(ibv_get_srq_num(srq, &srqn) == 0 && srqn, "get_srq_num");
  if (x2) CHECK(ibv_close_xrcd(x2) == 0, "close of one of two handles");
  CHECK(ibv_close_xrcd(x) == EBUSY, "close while an SRQ is in the domain");
  struct ibv_qp_init_attr_ex ta = {
      .qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = x};
  struct ibv_qp* tgt = ibv_create_qp_ex(e->ctx, &ta);
  REQUIRE(tgt, "XRC target: %s", strerror(errno));
  struct ibv_qp_init_attr_ex ia = {.qp_type = IBV_QPT_XRC_SEND,
                                   .send_cq = e->cq,
                                   .cap = {.max_send_wr = 4, .max_send_sge = 1},
                                   .comp_mask = IBV_QP_INIT_ATTR_PD,
                                   .pd = e->pd};
  struct ibv_qp* ini = ibv_create_qp_ex(e->ctx, &ia);
  REQUIRE(ini, "XRC initiator: %s", strerror(errno));
  /* RC's transitions: each XRC half ignores what it has no use for, as the kernel does */
  REQUIRE(rc_to_init(ini) == 0 && rc_to_init(tgt) == 0, "INIT");
  REQUIRE(rc_to_rts(ini, tgt->qp_num, &e->gid, kGid) == 0 && rc_to_rts(tgt, ini->qp_num, &e->gid, kGid) == 0,
          "RTS");
  struct ibv_qp_open_attr oa = {
      .comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE,
      .qp_num = tgt->qp_num,
      .xrcd = x,
      .qp_type = IBV_QPT_XRC_RECV};
  struct ibv_qp* opened = ibv_open_qp(e->ctx, &oa);
  CHECK(opened && opened->qp_num == tgt->qp_num, "open_qp: %s", strerror(errno));
  struct ibv_sge rs = {(uintptr_t)(e->mem + 4096), 64, e->mr->lkey};
  struct ibv_recv_wr rw = {.wr_id = 42, .sg_list = &rs, .num_sge = 1}, *rbad;
  REQUIRE(ibv_post_srq_recv(srq, &rw, &rbad) == 0, "post_srq_recv");
  strcpy(e->mem, "xrc send");
  strcpy(e->mem + 64, "xrc write");
  struct ibv_sge ss = {(uintptr_t)e->mem, 9, e->mr->lkey}, ws = {(uintptr_t)(e->mem + 64), 10, e->mr->lkey};
  struct ibv_send_wr w1 = {.wr_id = 1,
                           .sg_list = &ss,
                           .num_sge = 1,
                           .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED},
                     w2 = {.wr_id = 2,
                           .sg_list = &ws,
                           .num_sge = 1,
                           .opcode = IBV_WR_RDMA_WRITE,
                           .send_flags = IBV_SEND_SIGNALED},
                     *sbad;
  w1.qp_type.xrc.remote_srqn = w2.qp_type.xrc.remote_srqn = srqn;
  w2.wr.rdma.remote_addr = (uintptr_t)(e->mem + 8192);
  w2.wr.rdma.rkey = e->mr->rkey;
  w1.next = &w2;
  REQUIRE(ibv_post_send(ini, &w1, &sbad) == 0, "post_send");
  struct ibv_wc wc;
  for (int k = 0; k < 2; k++)
    CHECK(wait_wc(e->cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "initiator completion %d: %s", k,
          ibv_wc_status_str(wc.status));
  CHECK(wait_wc(scq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 42 && wc.byte_len == 9 &&
            wc.qp_num == tgt->qp_num && !strcmp(e->mem + 4096, "xrc send"),
        "receive on the SRQ's CQ");
  CHECK(!strcmp(e->mem + 8192, "xrc write"), "WRITE through the XRC target");
  w1.qp_type.xrc.remote_srqn = srqn + 1000; /* no such SRQ */
  w1.next = NULL;
  REQUIRE(ibv_post_send(ini, &w1, &sbad) == 0, "post_send");
  CHECK(wait_wc(e->cq, &wc) == 1 && wc.status == IBV_WC_REM_INV_REQ_ERR, "unknown SRQ: %s",
        ibv_wc_status_str(wc.status));
  if (opened) CHECK(ibv_destroy_qp(opened) == 0, "destroy the opened handle");
  CHECK(ibv_destroy_qp(tgt) == 0 && ibv_destroy_qp(ini) == 0, "destroy QPs");
  CHECK(ibv_destroy_srq(srq) == 0, "destroy SRQ");
  CHECK(ibv_close_xrcd(x) == 0, "close_xrcd");
  ibv_destroy_cq(scq);
  close(fd);
  return 0;
}

struct flag_row {
  const char* name;
  uint64_t flag;
  int (*when_set)(struct env*);   /* exercises what the bit promises */
  int (*when_clear)(struct env*); /* NULL: nothing to check */
};
static const struct flag_row kFlagRows[] = {
    {.name = "BAD_PKEY_CNTR", .flag = IBV_DEVICE_BAD_PKEY_CNTR, .when_set = bad_pkey_counts},
    {.name = "BAD_QKEY_CNTR", .flag = IBV_DEVICE_BAD_QKEY_CNTR, .when_set = bad_qkey_counts},
    {.name = "RC_RNR_NAK_GEN", .flag = IBV_DEVICE_RC_RNR_NAK_GEN, .when_set = rnr_nak_generated},
    {.name = "SRQ_RESIZE", .flag = IBV_DEVICE_SRQ_RESIZE, .when_set = srq_resize_works},
    {.name = "N_NOTIFY_CQ", .flag = IBV_DEVICE_N_NOTIFY_CQ, .when_set = notify_cq_works},
    {.name = "MEM_WINDOW", .flag = IBV_DEVICE_MEM_WINDOW, .when_set = mw_works, .when_clear = mw_refused},
    {.name = "MEM_WINDOW_TYPE_2A", .flag = IBV_DEVICE_MEM_WINDOW_TYPE_2A, .when_set = mw_type2_works},
    {.name = "MEM_WINDOW_TYPE_2B", .flag = IBV_DEVICE_MEM_WINDOW_TYPE_2B, .when_set = mw_type2_works},
    {.name = "XRC", .flag = IBV_DEVICE_XRC, .when_set = xrc_works},
};

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s DEVICE PEER_NETDEV\n", argv[0]);
    return 2;
  }
  struct env e;
  memset(&e, 0, sizeof e);
  e.peer = argv[2];
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  struct ibv_device* dev = find_device(list, n, argv[1]);
  REQUIRE(dev, "%s not found", argv[1]);
  e.ctx = ibv_open_device(dev);
  REQUIRE(e.ctx, "open: %s", strerror(errno));
  REQUIRE(ibv_query_device_ex(e.ctx, NULL, &e.dx) == 0, "query_device_ex");
  REQUIRE(ibv_query_port(e.ctx, 1, &e.port) == 0, "query_port");
  REQUIRE(ibv_query_gid(e.ctx, 1, kGid, &e.gid) == 0, "query_gid");
  e.pd = ibv_alloc_pd(e.ctx);
  e.cq = ibv_create_cq(e.ctx, 256, NULL, NULL, 0);
  e.mem = aligned_alloc(4096, kMem);
  REQUIRE(e.pd && e.cq && e.mem, "PD / CQ / memory");
  e.mr = ibv_reg_mr(
      e.pd, e.mem, kMem,
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  REQUIRE(e.mr, "reg_mr");

  uint64_t known = 0;
  for (size_t i = 0; i < sizeof kFlagRows / sizeof kFlagRows[0]; i++) {
    const struct flag_row* r = &kFlagRows[i];
    known |= r->flag;
    const int set = (e.dx.orig_attr.device_cap_flags & r->flag) != 0;
    const int before = failures;
    if (set ? r->when_set != NULL : r->when_clear != NULL) (set ? r->when_set : r->when_clear)(&e);
    printf("%-24s %-5s %s\n", r->name, set ? "set" : "clear", failures == before ? "ok" : "FAILED");
  }
  CHECK(!(e.dx.orig_attr.device_cap_flags & ~known), "device_cap_flags has bits no row knows: 0x%llx",
        (unsigned long long)(e.dx.orig_attr.device_cap_flags & ~known));
  CHECK(!(e.dx.device_cap_flags_ex & ~known), "device_cap_flags_ex has bits no row knows: 0x%llx",
        (unsigned long long)(e.dx.device_cap_flags_ex & ~known));
  for (size_t i = 0; i < kNumLimitRows; i++) {
    const struct limit_row* r = &kLimitRows[i];
    const uint64_t v = r->value(&e);
    const int before = failures;
    const double t0 = now_ms();
    if (r->zero_only && v != 0)
      CHECK(0, "%s is %llu: it needs a row that exercises it", r->name, (unsigned long long)v);
    else
      r->check(&e, v);
    printf("%-26s %-12llu %-6s %s (%.0f ms)\n", r->name, (unsigned long long)v,
           failures == before ? "ok" : "FAILED", r->how ? r->how : "at the limit, one beyond: EINVAL",
           now_ms() - t0);
  }
  ibv_dereg_mr(e.mr);
  ibv_destroy_cq(e.cq);
  ibv_dealloc_pd(e.pd);
  ibv_close_device(e.ctx);
  ibv_free_device_list(list);
  free(e.mem);
  failures += caps_limits_failures();
  return test_result("caps_test: every advertised capability holds");
}
