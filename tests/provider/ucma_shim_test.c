/* The UCMA shim (provider/ucma_shim.cc) as librdmacm and other programs use /dev/infiniband/rdma_cm, run with
 * the provider preloaded against the CM service (`urxe cm`, started by the first open): the file opens and
 * says "character device", commands are answered through their response pointers with the kernel's errors,
 * GET_EVENT waits (or EAGAIN on O_NONBLOCK) without blocking other threads' commands, dup'ed fds share the
 * channel, close releases it, a dead service is EIO, and librdmacm itself creates and destroys ids.
 * Usage: ucma_shim_test */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_user_cm.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "check.h"

/* ucma_shim_rdmacm.c (librdmacm's header and the kernel UAPI's cannot meet in one file). */
int librdmacm_section(int* failures_out);

static const char kPath[] = "/dev/infiniband/rdma_cm";

static int open_fds(void) {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  while (readdir(d)) n++;
  closedir(d);
  return n;
}

static int create_id(int fd, uint64_t uid, uint32_t* id) {
  struct rdma_ucm_create_id_resp resp = {.id = 0xffffffffu};
  struct {
    struct rdma_ucm_cmd_hdr hdr;
    struct rdma_ucm_create_id cmd;
  } c;
  memset(&c, 0, sizeof c);
  c.hdr.cmd = RDMA_USER_CM_CMD_CREATE_ID;
  c.hdr.in = sizeof c.cmd;
  c.hdr.out = sizeof resp;
  c.cmd.uid = uid;
  c.cmd.response = (uintptr_t)&resp;
  c.cmd.ps = RDMA_PS_TCP;
  c.cmd.qp_type = 2; /* IBV_QPT_RC */
  ssize_t n = write(fd, &c, sizeof c);
  if (n != (ssize_t)sizeof c) return -1;
  *id = resp.id;
  return resp.id == 0xffffffffu ? -2 : 0;
}

static int destroy_id(int fd, uint32_t id, uint32_t* events_reported) {
  struct rdma_ucm_destroy_id_resp resp = {.events_reported = 0xffffffffu};
  struct {
    struct rdma_ucm_cmd_hdr hdr;
    struct rdma_ucm_destroy_id cmd;
  } c;
  memset(&c, 0, sizeof c);
  c.hdr.cmd = RDMA_USER_CM_CMD_DESTROY_ID;
  c.hdr.in = sizeof c.cmd;
  c.hdr.out = sizeof resp;
  c.cmd.id = id;
  c.cmd.response = (uintptr_t)&resp;
  if (write(fd, &c, sizeof c) != (ssize_t)sizeof c) return -1;
  *events_reported = resp.events_reported;
  return 0;
}

struct get_event {
  struct rdma_ucm_cmd_hdr hdr;
  struct rdma_ucm_get_event cmd;
};
static struct rdma_ucm_event_resp event_resp;
static void fill_get_event(struct get_event* c) {
  memset(c, 0, sizeof *c);
  c->hdr.cmd = RDMA_USER_CM_CMD_GET_EVENT;
  c->hdr.in = sizeof c->cmd;
  c->hdr.out = sizeof event_resp;
  c->cmd.response = (uintptr_t)&event_resp;
}

/* A thread blocked in GET_EVENT. */
struct waiter {
  int fd;
  volatile int done;
  ssize_t ret;
  int err;
};
static void* wait_event(void* arg) {
  struct waiter* w = arg;
  struct get_event c;
  fill_get_event(&c);
  w->ret = write(w->fd, &c, sizeof c);
  w->err = errno;
  __atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
  return NULL;
}
/* A thread that makes an id and destroys it on w->fd (CREATE_ID, DESTROY_ID): ret 0 when both worked. */
static void* create_destroy_id(void* arg) {
  struct waiter* w = arg;
  uint32_t id = 0, reported = 0;
  w->ret = create_id(w->fd, 44, &id) == 0 && destroy_id(w->fd, id, &reported) == 0 ? 0 : -1;
  w->err = errno;
  __atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
  return NULL;
}
static int wait_done(struct waiter* w, int ms) {
  for (int i = 0; i < ms && !__atomic_load_n(&w->done, __ATOMIC_ACQUIRE); i++) usleep(1000);
  return __atomic_load_n(&w->done, __ATOMIC_ACQUIRE);
}
static void on_signal(int sig) {
  (void)sig;
}

static int write_err(int fd, const void* buf, size_t len) {
  errno = 0;
  return write(fd, buf, len) == -1 ? errno : 0;
}

/* The service's pid from <run_dir>/cm/<netns>.pid (cm/protocol.h), 0 if none. */
static pid_t service_pid(void) {
  struct stat st;
  if (stat("/proc/self/ns/net", &st) != 0) return 0;
  const char* run = getenv("URXE_RUN_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/cm/%llu:%llu.pid", run ? run : "/run/urxe", (unsigned long long)st.st_dev,
           (unsigned long long)st.st_ino);
  FILE* f = fopen(path, "r");
  long pid = 0;
  if (f) {
    if (fscanf(f, "%ld", &pid) != 1) pid = 0;
    fclose(f);
  }
  return (pid_t)pid;
}

static int raw_section(void) {
  const int fds_before = open_fds();
  int fd = open(kPath, O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0, "open %s: %s", kPath, strerror(errno));
  CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC, "O_CLOEXEC not applied");
  CHECK(!(fcntl(fd, F_GETFL) & O_NONBLOCK), "blocking open gave a non-blocking fd");

  struct stat st;
  CHECK(fstat(fd, &st) == 0 && S_ISCHR(st.st_mode) && major(st.st_rdev) == 10, "fstat: mode %o rdev %u:%u",
        st.st_mode, major(st.st_rdev), minor(st.st_rdev));
  CHECK(fstatat(fd, "", &st, AT_EMPTY_PATH) == 0 && S_ISCHR(st.st_mode), "fstatat(AT_EMPTY_PATH): mode %o",
        st.st_mode);
  struct statx stx;
  CHECK(statx(fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, &stx) == 0 && S_ISCHR(stx.stx_mode) &&
            stx.stx_rdev_major == 10,
        "statx: mode %o", stx.stx_mode);
  /* Other files are untouched. */
  int null_fd = open("/dev/null", O_RDONLY);
  CHECK(null_fd >= 0 && fstat(null_fd, &st) == 0 && S_ISCHR(st.st_mode) && major(st.st_rdev) == 1 &&
            minor(st.st_rdev) == 3,
        "/dev/null: %u:%u", major(st.st_rdev), minor(st.st_rdev));
  char b;
  CHECK(read(null_fd, &b, 1) == 0, "read /dev/null");

  /* CREATE_ID / DESTROY_ID: write returns len, responses through the pointers. */
  uint32_t id = 0, id2 = 0, reported = 1;
  CHECK(create_id(fd, 42, &id) == 0, "CREATE_ID: %s", strerror(errno));
  CHECK(create_id(fd, 43, &id2) == 0 && id2 != id, "second CREATE_ID: %u %u", id, id2);
  CHECK(destroy_id(fd, id, &reported) == 0 && reported == 0, "DESTROY_ID: %s, events_reported %u",
        strerror(errno), reported);
  CHECK(destroy_id(fd, id, &reported) == -1 && errno == EINVAL, "DESTROY_ID twice: %s", strerror(errno));

  /* The kernel's ucma_write checks. */
  struct {
    struct rdma_ucm_cmd_hdr hdr;
    struct rdma_ucm_create_id cmd;
  } c;
  uint32_t resp = 0;
  memset(&c, 0, sizeof c);
  c.hdr.cmd = RDMA_USER_CM_CMD_CREATE_ID;
  c.hdr.in = sizeof c.cmd;
  c.hdr.out = sizeof resp;
  c.cmd.response = (uintptr_t)&resp;
  c.cmd.ps = RDMA_PS_TCP;
  CHECK(write_err(fd, &c, 7) == EINVAL, "len 7");
  CHECK(write_err(fd, &c, sizeof c.hdr + 4) == EINVAL, "hdr.in beyond len");
  c.hdr.cmd = 23;
  CHECK(write_err(fd, &c, sizeof c) == EINVAL, "cmd 23");
  c.hdr.cmd = RDMA_USER_CM_CMD_GET_OPTION;
  CHECK(write_err(fd, &c, sizeof c) == ENOSYS, "GET_OPTION");
  c.hdr.cmd = RDMA_USER_CM_CMD_CREATE_ID;
  c.hdr.out = 2;
  CHECK(write_err(fd, &c, sizeof c) == ENOSPC, "CREATE_ID with out 2");
  CHECK(read(fd, &b, 1) == -1 && errno == EINVAL, "read on rdma_cm");
  /* MIGRATE_ID naming no fd, or a file that is not rdma_cm (the kernel's ENOENT and EINVAL). */
  struct rdma_ucm_migrate_resp mresp;
  struct {
    struct rdma_ucm_cmd_hdr hdr;
    struct rdma_ucm_migrate_id cmd;
  } m;
  memset(&m, 0, sizeof m);
  m.hdr.cmd = RDMA_USER_CM_CMD_MIGRATE_ID;
  m.hdr.in = sizeof m.cmd;
  m.hdr.out = sizeof mresp;
  m.cmd.id = id2;
  m.cmd.response = (uintptr_t)&mresp;
  m.cmd.fd = 1000000;
  CHECK(write_err(fd, &m, sizeof m) == ENOENT, "MIGRATE_ID from no fd");
  m.cmd.fd = (uint32_t)null_fd;
  CHECK(write_err(fd, &m, sizeof m) == EINVAL, "MIGRATE_ID from /dev/null");
  close(null_fd);
  /* SET_OPTION: optlen over the service's bound is EINVAL, an unreadable optval EFAULT (and the channel goes
   * on). */
  struct {
    struct rdma_ucm_cmd_hdr hdr;
    struct rdma_ucm_set_option cmd;
  } so;
  memset(&so, 0, sizeof so);
  so.hdr.cmd = RDMA_USER_CM_CMD_SET_OPTION;
  so.hdr.in = sizeof so.cmd;
  so.cmd.id = id2;
  so.cmd.optlen = 1u << 20;
  CHECK(write_err(fd, &so, sizeof so) == EINVAL, "SET_OPTION optlen 1 MiB");
  so.cmd.optlen = 4;
  so.cmd.optval = 8; /* unmapped */
  CHECK(write_err(fd, &so, sizeof so) == EFAULT, "SET_OPTION optval unmapped");

  /* Nothing queued: not readable, GET_EVENT on O_NONBLOCK is EAGAIN. */
  struct pollfd p = {fd, POLLIN, 0};
  CHECK(poll(&p, 1, 0) == 0, "poll: revents %#x with no event", p.revents);
  struct get_event ge;
  fill_get_event(&ge);
  CHECK(fcntl(fd, F_SETFL, O_NONBLOCK) == 0, "F_SETFL");
  CHECK(write_err(fd, &ge, sizeof ge) == EAGAIN, "GET_EVENT O_NONBLOCK");
  ge.hdr.out = 8;
  CHECK(write_err(fd, &ge, sizeof ge) == ENOSPC, "GET_EVENT with out 8");
  fill_get_event(&ge);
  CHECK(fcntl(fd, F_SETFL, 0) == 0, "F_SETFL");

  /* One thread blocked in GET_EVENT; others' commands go on; a signal whose handler has SA_RESTART leaves
   * it blocked (the kernel restarts the write), one without ends it with EINTR. */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR2, &sa, NULL);
  struct waiter w = {.fd = fd};
  pthread_t t;
  REQUIRE(pthread_create(&t, NULL, wait_event, &w) == 0, "pthread_create");
  CHECK(!wait_done(&w, 300), "GET_EVENT returned with nothing queued: %zd %s", w.ret, strerror(w.err));
  /* (on a third thread, so that commands stuck behind the GET_EVENT fail the test instead of hanging it) */
  struct waiter cmds = {.fd = fd};
  pthread_t tc;
  REQUIRE(pthread_create(&tc, NULL, create_destroy_id, &cmds) == 0, "pthread_create");
  const int cmds_done = wait_done(&cmds, 10000);
  CHECK(cmds_done, "CREATE/DESTROY_ID still waiting after 10 s: they wait for the blocked GET_EVENT");
  CHECK(!cmds_done || cmds.ret == 0, "CREATE/DESTROY_ID while another thread waits: %s", strerror(cmds.err));
  CHECK(!__atomic_load_n(&w.done, __ATOMIC_ACQUIRE), "GET_EVENT returned: %zd %s", w.ret, strerror(w.err));
  for (int i = 0; i < 5; i++) {
    pthread_kill(t, SIGUSR2);
    usleep(20000);
  }
  CHECK(!wait_done(&w, 100), "GET_EVENT returned after an SA_RESTART handler: %zd %s", w.ret,
        strerror(w.err));
  sa.sa_flags = 0;
  sigaction(SIGUSR1, &sa, NULL);
  for (int i = 0; i < 100 && !__atomic_load_n(&w.done, __ATOMIC_ACQUIRE); i++) {
    pthread_kill(t, SIGUSR1);
    wait_done(&w, 20);
  }
  CHECK(wait_done(&w, 2000) && w.ret == -1 && w.err == EINTR, "GET_EVENT after a signal: %zd %s", w.ret,
        strerror(w.err));
  pthread_join(t, NULL);
  if (cmds_done) pthread_join(tc, NULL);
  signal(SIGUSR1, SIG_DFL);

  /* A channel fd closed behind the shim's back (fclose of an fdopen'ed one closes inside libc) and reused:
   * the new file is not taken for the channel. */
  {
    int sd = dup(fd);
    FILE* f = sd >= 0 ? fdopen(sd, "w") : NULL;
    CHECK(f, "fdopen: %s", strerror(errno));
    if (f) fclose(f);
    int pp[2];
    REQUIRE(pipe(pp) == 0, "pipe");
    CHECK(pp[0] == sd || pp[1] == sd, "the pipe did not get fd %d (%d %d): nothing tested", sd, pp[0], pp[1]);
    char two[2] = {0, 0};
    CHECK(write(pp[1], "ab", 2) == 2, "write to a pipe on a former channel fd: %s", strerror(errno));
    CHECK(read(pp[0], two, 2) == 2 && two[0] == 'a', "read from a pipe on a former channel fd: %s",
          strerror(errno));
    CHECK(fstat(sd, &st) == 0 && S_ISFIFO(st.st_mode), "fstat of a pipe on a former channel fd: mode %o",
          st.st_mode);
    close(pp[0]);
    close(pp[1]);
    /* The same with another eventfd on the number (all eventfds share one inode). */
    sd = dup(fd);
    f = sd >= 0 ? fdopen(sd, "w") : NULL;
    if (f) fclose(f);
    int ev = eventfd(0, 0);
    CHECK(ev == sd, "the eventfd did not get fd %d (%d): nothing tested", sd, ev);
    uint64_t one = 1;
    CHECK(write(ev, &one, 8) == 8 && read(ev, &one, 8) == 8, "an eventfd on a former channel fd: %s",
          strerror(errno));
    close(ev);
  }

  /* dup'ed fds share the channel: an id made on one is destroyed on another, also after the first closes. */
  int d1 = dup(fd);
  int d2 = fcntl(fd, F_DUPFD_CLOEXEC, 100);
  int d3 = dup2(fd, 200);
  CHECK(d1 >= 0 && d2 >= 100 && d3 == 200, "dup: %d %d %d", d1, d2, d3);
  CHECK(fstat(d2, &st) == 0 && S_ISCHR(st.st_mode), "fstat of a dup");
  uint32_t id4 = 0;
  CHECK(create_id(d1, 45, &id4) == 0, "CREATE_ID on dup: %s", strerror(errno));
  CHECK(close(fd) == 0, "close");
  CHECK(destroy_id(d2, id4, &reported) == 0, "DESTROY_ID on F_DUPFD after closing the first fd: %s",
        strerror(errno));
  CHECK(destroy_id(d3, id2, &reported) == 0, "DESTROY_ID on dup2: %s", strerror(errno));
  /* dup2 over a tracked fd forgets it: d3 becomes /dev/null. */
  int nfd = open("/dev/null", O_RDWR);
  CHECK(dup2(nfd, d3) == d3 && fstat(d3, &st) == 0 && major(st.st_rdev) == 1, "dup2 over a channel fd");
  CHECK(write(d3, "x", 1) == 1, "write to /dev/null after dup2 over a channel fd");
  close(nfd);
  close(d3);
  close(d1);
  CHECK(create_id(d2, 46, &id) == 0, "the last fd still works: %s", strerror(errno));
  close(d2);
  /* The last fd closed: the connection and our descriptor of the eventfd are gone too. */
  CHECK(open_fds() == fds_before, "fds: %d before, %d after the channel's last close", fds_before,
        open_fds());

  /* O_NONBLOCK at open. */
  fd = open(kPath, O_RDWR | O_NONBLOCK);
  REQUIRE(fd >= 0, "open O_NONBLOCK: %s", strerror(errno));
  CHECK(fcntl(fd, F_GETFL) & O_NONBLOCK, "O_NONBLOCK not applied");
  CHECK(!(fcntl(fd, F_GETFD) & FD_CLOEXEC), "FD_CLOEXEC without O_CLOEXEC");
  CHECK(write_err(fd, &ge, sizeof ge) == EAGAIN, "GET_EVENT on an fd opened O_NONBLOCK");
  /* close_range over it. */
  int hi = fcntl(fd, F_DUPFD, 300);
  CHECK(hi >= 300 && close_range((unsigned)hi, (unsigned)hi + 10, 0) == 0, "close_range");
  CHECK(create_id(fd, 47, &id) == 0, "the other fd after close_range: %s", strerror(errno));
  close(fd);
  CHECK(open_fds() == fds_before, "fds: %d before, %d after close_range + close", fds_before, open_fds());
  return 0;
}

/* The service goes away: a waiting GET_EVENT and later commands fail with EIO, never hang; the next open
 * starts a new service. */
static int service_death_section(void) {
  int fd = open(kPath, O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0, "open: %s", strerror(errno));
  pid_t pid = service_pid();
  REQUIRE(pid > 0, "no service pid file");
  struct waiter w = {.fd = fd};
  pthread_t t;
  REQUIRE(pthread_create(&t, NULL, wait_event, &w) == 0, "pthread_create");
  CHECK(!wait_done(&w, 200), "GET_EVENT returned early");
  kill(pid, SIGKILL);
  CHECK(wait_done(&w, 3000) && w.ret == -1 && w.err == EIO, "GET_EVENT when the service died: %zd %s", w.ret,
        strerror(w.err));
  pthread_join(t, NULL);
  uint32_t id;
  CHECK(create_id(fd, 1, &id) == -1 && errno == EIO, "CREATE_ID after the service died: %s", strerror(errno));
  close(fd);
  for (int i = 0; i < 200 && kill(pid, 0) == 0; i++) usleep(10000);
  fd = open(kPath, O_RDWR | O_CLOEXEC);
  CHECK(fd >= 0, "open after the service died (a new one is started): %s", strerror(errno));
  CHECK(fd >= 0 && create_id(fd, 2, &id) == 0, "CREATE_ID on the new service: %s", strerror(errno));
  CHECK(service_pid() != pid, "the service pid file still names the dead one");
  if (fd >= 0) close(fd);
  return 0;
}

int main(int argc, char** argv) {
  (void)argc;
  (void)argv;
  setvbuf(stdout, NULL, _IONBF, 0);
  /* Each section on its own: one that stops early (REQUIRE) does not hide the others' results. */
  if (raw_section()) failures++;
  printf("raw UCMA commands: %d failures\n", failures);
  if (librdmacm_section(&failures)) failures++;
  printf("librdmacm: %d failures\n", failures);
  if (service_death_section()) failures++;
  printf("service death: %d failures\n", failures);
  if (failures) {
    fprintf(stderr, "%d failures\n", failures);
    return 1;
  }
  printf("ucma_shim_test: all passed\n");
  return 0;
}
