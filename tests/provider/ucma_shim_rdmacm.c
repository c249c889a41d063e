/* The librdmacm part of ucma_shim_test.c, in a file of its own: <rdma/rdma_cma.h> and the kernel UAPI's
 * <rdma/rdma_user_cm.h> declare the same enumerators. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <rdma/rdma_cma.h>
#include <string.h>

#include "check.h"

int librdmacm_section(int* failures_out);

/* librdmacm itself: its start (the AF_IB probe: CREATE_ID with RDMA_PS_IB, then BIND with AF_IB, which must
 * fail so that it falls back to IP), an event channel, ids. */
int librdmacm_section(int* failures_out) {
  failures = 0; /* this file's count, added to the caller's */
  struct rdma_event_channel* ch = rdma_create_event_channel();
  REQUIRE(ch, "rdma_create_event_channel: %s", strerror(errno));
  struct rdma_cm_id* id = NULL;
  CHECK(rdma_create_id(ch, &id, (void*)0x1234, RDMA_PS_TCP) == 0 && id, "rdma_create_id: %s",
        strerror(errno));
  struct rdma_cm_id* id_udp = NULL;
  CHECK(rdma_create_id(ch, &id_udp, NULL, RDMA_PS_UDP) == 0, "rdma_create_id UDP: %s", strerror(errno));
  CHECK(fcntl(ch->fd, F_SETFL, O_NONBLOCK) == 0, "F_SETFL");
  struct rdma_cm_event* ev = NULL;
  errno = 0;
  CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN, "rdma_get_cm_event non-blocking: %s",
        strerror(errno));
  if (id) CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id: %s", strerror(errno));
  if (id_udp) CHECK(rdma_destroy_id(id_udp) == 0, "rdma_destroy_id UDP: %s", strerror(errno));
  rdma_destroy_event_channel(ch);
  /* An id with its own channel (what rsockets does). */
  CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id without a channel: %s",
        strerror(errno));
  if (id) CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id: %s", strerror(errno));
  *failures_out += failures;
  return 0;
}
