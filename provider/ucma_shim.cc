// The UCMA shim: /dev/infiniband/rdma_cm without a kernel. librdmacm opens that file and writes UCMA
// commands to it (cm/ucma_abi.h); with no RDMA in the kernel the file does not exist, so the preloaded
// provider interposes the libc calls an application makes on it and forwards each command to the CM service
// (`urxe cm`, cm/protocol.h). Exported (urxe.map), so built into liburxe-rdmav34.so itself.
//
// - open*("/dev/infiniband/rdma_cm") connects to the service of this run directory and network namespace
//   (starting it when nobody listens) and returns the eventfd the service hands over: its count is the
//   number of queued events, so poll/epoll/select on the fd behave as on the kernel's file.
// - write() on such an fd is one request and one reply on the connection; the reply's bytes go to the
//   command's response pointer, as the kernel's copy_to_user would.
// - read() fails as on the kernel's file (it has none). The fd side (fstat says "character device",
//   dup/dup2/dup3/F_DUPFD share the channel, close/close_range of the last fd ends it) is ucma_fds.cc.
// Every other fd goes straight to the next definition (libc) after one relaxed load: write, read, close and
// fstat are on every application's hot paths, so they take no lock and allocate nothing unless the fd is
// ours.
//
// Limitation: after fork() parent and child share the channel (its connection and ids), as they would share
// the kernel's file, but the service cannot tell their commands apart and both must not use it at once.
// Our definitions of open() and read() must not meet the fortified inline ones.
#undef _FORTIFY_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>

#include "cm/protocol.h"
#include "cm/ucma_abi.h"
#include "hostnet/netns.h"
#include "provider/device_tree.h"
#include "provider/internal.h"
#include "provider/log.h"
#include "provider/ucma_shim.h"

extern char** environ;
namespace {

using urxe::engine::LogLevel;
using namespace urxe::provider::ucma;

constexpr char kRdmaCmPath[] = "/dev/infiniband/rdma_cm";
// The service answers every message at once: one silent this long is taken for dead.
constexpr int kReplyTimeoutS = 10;

// ---- finding and starting the service ----

const std::string& provider_so_path() {
  static const std::string path = [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&provider_so_path), &info) && info.dli_fname)
      return std::string(info.dli_fname);
    return std::string();
  }();
  return path;
}

// Once per process: an application that only probes for RDMA CM (UCX does at start) must not repeat it.
void log_unreachable_once(const std::string& why) {
  static std::atomic<bool> logged{false};
  if (logged.exchange(true)) return;
  // warn: the application is about to fail with ENODEV from librdmacm, which says nothing of why.
  urxe::provider::log_printf(LogLevel::warn, "", "rdma_cm: %s", why.c_str());
}

uint64_t now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

void sleep_ms(long ms) {
  timespec ts{0, ms * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

// A connected socket to the service, or -1 with errno.
int connect_service(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) {
    errno = ENAMETOOLONG;
    return -1;
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  if (::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return s;
  const int e = errno;
  real_close(s);
  errno = e;
  return -1;
}

// Runs `urxe cm`, which returns once its service listens (or another one already does). Returns a message
// when it could not be run or failed.
std::string start_service(const std::string& urxe) {
  char* argv[] = {const_cast<char*>(urxe.c_str()), const_cast<char*>("cm"), nullptr};
  // The service outlives the application: it gets none of the application's files but stderr (an inherited
  // socket or pipe end would stay open as long as the service runs), and not the preloaded provider.
  char* envp[512];
  size_t n = 0;
  for (char** e = environ; e && *e && n + 1 < sizeof envp / sizeof *envp; e++)
    if (std::strncmp(*e, "LD_PRELOAD=", 11) != 0) envp[n++] = *e;
  envp[n] = nullptr;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);  // "already running" is no news here
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  pid_t pid;
  const int e = posix_spawn(&pid, urxe.c_str(), &fa, nullptr, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  if (e != 0) return "cannot run " + urxe + ": " + std::strerror(e);
  // Reap it ourselves, bounded: an application's SIGCHLD handler may reap it first (ECHILD), and a service
  // that hangs at start must not hang the application's open().
  for (const uint64_t deadline = now_ms() + 10000;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return {};
      return urxe + " cm failed (" +
             (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                : "signal " + std::to_string(WTERMSIG(status))) +
             ")";
    }
    if (r < 0 && errno != EINTR) return {};
    if (now_ms() > deadline) return urxe + " cm did not return within 10 s";
    sleep_ms(5);
  }
}

bool send_all(int s, const void* p, size_t n) {
  for (;;) {
    const ssize_t w = ::send(s, p, n, MSG_NOSIGNAL);
    if (w == static_cast<ssize_t>(n)) return true;
    if (w < 0 && errno == EINTR) continue;
    return false;
  }
}

// Hello -> HelloReply with the eventfd. Returns the eventfd (close-on-exec) or -1 with errno.
int hello(int s, uint64_t& token) {
  // The service answers every message at once; one that stopped answering is a dead one (EIO), not a hang.
  const timeval timeout{kReplyTimeoutS, 0};
  ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  urxe::cm::Hello h;
  if (!send_all(s, &h, sizeof h)) {
    errno = ENODEV;
    return -1;
  }
  urxe::cm::HelloReply r;
  iovec iov{&r, sizeof r};
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))];
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = cbuf;
  m.msg_controllen = sizeof cbuf;
  ssize_t n;
  do n = ::recvmsg(s, &m, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  int efd = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len >= CMSG_LEN(sizeof(int)))
      std::memcpy(&efd, CMSG_DATA(c), sizeof efd);
  if (n != static_cast<ssize_t>(sizeof r) || r.magic != urxe::cm::kProtoMagic ||
      r.version != urxe::cm::kProtoVersion || r.err != 0 || efd < 0) {
    if (efd >= 0) real_close(efd);
    // Closed without an answer (ECONNRESET): a service that was dying when we connected.
    errno = n == 0 || (n < 0 && errno == ECONNRESET)             ? ECONNRESET
            : (n == static_cast<ssize_t>(sizeof r) && r.err > 0) ? r.err
                                                                 : ENODEV;
    return -1;
  }
  token = r.channel_token;
  return efd;
}

// open() of rdma_cm: a new channel, or -1 with errno.
int ucma_open(int flags) {
  const urxe::provider::Paths paths = urxe::provider::Paths::from_env();
  const std::string netns = urxe::hostnet::current_netns().to_string();
  if (netns.empty()) {
    log_unreachable_once("no CM service: cannot tell this thread's network namespace (is /proc mounted?)");
    errno = ENODEV;
    return -1;
  }
  const std::string path = urxe::cm::cm_socket_path(paths.run_dir, netns);
  // Connect, starting the service when none listens. A service that was killed a moment ago may still take
  // the connection and then close it unanswered, or refuse it before its successor listens: either is
  // retried (the successor is started here) for up to 2 s, so that an application that saw its channel
  // fail with EIO can open a new one at once.
  const uint64_t deadline = now_ms() + 2000;
  std::string why;
  uint64_t token = 0;
  int s = -1, efd = -1;
  for (uint64_t next_start = 0;; sleep_ms(10)) {
    s = connect_service(path);
    if (s < 0 && (errno == ENOENT || errno == ECONNREFUSED)) {
      const int e = errno;
      if (now_ms() > deadline) {
        log_unreachable_once("no CM service at " + path + " (" + (why.empty() ? std::strerror(e) : why) +
                             "); start one with 'urxe cm'");
        errno = ENODEV;
        return -1;
      }
      if (now_ms() >= next_start) {  // `urxe cm` returns at once while the old one still holds the lock
        why = start_service(urxe::provider::urxe_command_path(provider_so_path()));
        next_start = now_ms() + 100;
      }
      continue;
    }
    if (s < 0) {
      log_unreachable_once(
          errno == ENAMETOOLONG
              ? "the CM service's socket path " + path + " is longer than a unix socket allows (" +
                    std::to_string(sizeof(sockaddr_un::sun_path) - 1) + " bytes): use a shorter URXE_RUN_DIR"
              : "cannot reach the CM service at " + path + ": " + std::strerror(errno));
      errno = ENODEV;
      return -1;
    }
    efd = hello(s, token);
    if (efd >= 0) break;
    const int e = errno;
    real_close(s);
    if (e == ECONNRESET && now_ms() <= deadline) continue;
    log_unreachable_once("the CM service at " + path +
                         " refused the channel: " + std::strerror(e == ECONNRESET ? ENODEV : e));
    errno = e == ECONNRESET ? ENODEV : e;
    return -1;
  }
  // The application's fd: another descriptor of the eventfd, with the flags it asked for. O_NONBLOCK is a
  // flag of the open file, shared with our descriptor (which GET_EVENT consults) and with the service's.
  const int fd = real_fcntl(efd, (flags & O_CLOEXEC) ? F_DUPFD_CLOEXEC : F_DUPFD, 0);
  if (fd < 0 || fd >= kMaxTrackedFd || real_fcntl(efd, F_SETFL, (flags & O_NONBLOCK) ? O_NONBLOCK : 0) < 0) {
    const int e = fd < 0 ? errno : fd >= kMaxTrackedFd ? EMFILE : errno;
    if (fd >= 0) real_close(fd);
    real_close(efd);
    real_close(s);
    errno = e;
    return -1;
  }
  auto* ch = new (std::nothrow) Channel;
  if (!ch) {
    real_close(fd);
    real_close(efd);
    real_close(s);
    errno = ENOMEM;
    return -1;
  }
  struct stat st;
  if (real_fstat(efd, &st) == 0) {
    ch->dev = st.st_dev;
    ch->ino = st.st_ino;
  }
  ch->sock = s;
  ch->efd = efd;
  ch->token = token;
  install(fd, ch);
  return fd;
}

// ---- commands ----

// One request and its reply under the channel's lock. Returns 0 and fills `r` and `out`, or an errno (EIO:
// the service is gone or broke the protocol).
int exchange(Channel& ch, const void* cmd, uint32_t cmd_len, const void* extra, uint32_t extra_len,
             urxe::cm::Reply& r, uint8_t* out, size_t out_cap) {
  std::lock_guard lock(ch.mu);
  if (ch.dead) return EIO;
  urxe::cm::Request q;
  q.seq = ++ch.seq;
  q.cmd_len = cmd_len;
  q.extra_len = extra_len;
  iovec iov[3] = {{&q, sizeof q}, {const_cast<void*>(cmd), cmd_len}, {const_cast<void*>(extra), extra_len}};
  msghdr m{};
  m.msg_iov = iov;
  m.msg_iovlen = extra_len ? 3 : 2;
  ssize_t n;
  do n = ::sendmsg(ch.sock, &m, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  // A bad pointer in the application's bytes (SET_OPTION's optval) fails the send whole: the connection is
  // fine.
  if (n < 0 && errno == EFAULT) return EFAULT;
  if (n != static_cast<ssize_t>(sizeof q + cmd_len + extra_len)) {
    ch.dead = true;
    return EIO;
  }
  // The reply comes at once (the service never blocks a command), so a signal does not cut the wait short:
  // the command has been done and its answer must be read. No answer within kReplyTimeoutS (SO_RCVTIMEO):
  // the service is taken for dead. Replies to earlier seqs cannot be pending (one
  // exchange at a time, each read to its end), but are skipped rather than trusted.
  for (;;) {
    iovec riov[2] = {{&r, sizeof r}, {out, out_cap}};
    msghdr rm{};
    rm.msg_iov = riov;
    rm.msg_iovlen = 2;
    do n = ::recvmsg(ch.sock, &rm, 0);
    while (n < 0 && errno == EINTR);
    if (n < static_cast<ssize_t>(sizeof r) || (rm.msg_flags & MSG_TRUNC) ||
        static_cast<size_t>(n) != sizeof r + r.out_len) {
      ch.dead = true;
      return EIO;
    }
    if (r.seq == q.seq) return 0;
    if (static_cast<int32_t>(r.seq - q.seq) > 0) {
      ch.dead = true;
      return EIO;
    }
  }
}

// write() of one UCMA command, with the kernel's ucma_write checks and errors (cm/ucma_abi.h).
ssize_t ucma_write(Channel& ch, const void* buf, size_t len) {
  using namespace urxe::cm;
  UcmaCommand c;
  if (const int e = parse_ucma_command(std::span(static_cast<const uint8_t*>(buf), len), c)) return fail(e);
  const rdma_ucm_cmd_hdr& hdr = c.hdr;
  const UcmaCommandInfo& info = *c.info;
  // An app that manages connections has stopped answering what its last poll received: the ACKs its
  // rounds hold for an answer go now, not when the progress thread next looks (a peer may be waiting
  // for them before it listens: perftest -R).
  urxe::provider::send_held_acks();
  const auto cmd_len = static_cast<uint32_t>(ucma_command_length(c));

  // The response pointer, read now so a command whose answer could not be delivered is not done.
  uint64_t resp_ptr = 0;
  if (const int e = ucma_response_pointer(c, resp_ptr)) return fail(e);
  auto* resp = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(resp_ptr));

  const void* extra = nullptr;
  uint32_t extra_len = 0;
  uint64_t token = 0;
  if (hdr.cmd == RDMA_USER_CM_CMD_SET_OPTION) {
    uint64_t optval = 0;
    if (const int e = ucma_set_option_value(c, optval, extra_len)) return fail(e);
    extra = reinterpret_cast<const void*>(static_cast<uintptr_t>(optval));
  } else if (hdr.cmd == RDMA_USER_CM_CMD_MIGRATE_ID) {
    int from_fd = -1;
    if (const int e = ucma_migrate_fd(c, from_fd)) return fail(e);
    Channel* from = acquire(from_fd);
    if (!from) {
      // As the kernel's ucma_migrate_id: ENOENT for no such fd, EINVAL for a file that is not rdma_cm.
      return fail(real_fcntl(from_fd, F_GETFD, 0) < 0 ? ENOENT : EINVAL);
    }
    token = from->token;
    release(from);
    extra = &token;
    extra_len = sizeof token;
  }

  Reply r;
  uint8_t out[kMaxMessage];
  if (int e = exchange(ch, buf, cmd_len, extra, extra_len, r, out, sizeof out)) return fail(e);
  // URXE_LOG=debug: each command and its outcome (GET_EVENT's EAGAIN polls excepted), as one would strace
  // the kernel's file.
  if (urxe::provider::log_enabled(LogLevel::debug) &&
      !(hdr.cmd == RDMA_USER_CM_CMD_GET_EVENT && r.err == EAGAIN))
    urxe::provider::log_printf(LogLevel::debug, "", "rdma_cm: %s: %s", info.name,
                               r.err ? std::strerror(r.err) : "ok");
  if (r.err != 0) return fail(r.err > 0 ? r.err : EIO);
  if (r.out_len > hdr.out) return fail(EIO);  // the service broke the protocol
  if (r.out_len) {
    if (!resp) return fail(EFAULT);
    std::memcpy(resp, out, r.out_len);
  }
  return static_cast<ssize_t>(len);
}

// Whether a signal that interrupted our wait may have run a handler without SA_RESTART. The kernel's
// GET_EVENT sleeps interruptibly and is restarted after an SA_RESTART handler, so the application sees
// EINTR only from one without; poll() fails with EINTR after any handler. We cannot tell which signal came,
// so EINTR is returned when any handler lacks SA_RESTART (a profiler's SIGPROF, a SIGCHLD handler installed
// with SA_RESTART do not break rping's rdma_get_cm_event, which does not retry).
bool interrupting_handler() {
  for (int sig = 1; sig < NSIG; sig++) {
    struct sigaction sa;
    if (::sigaction(sig, nullptr, &sa) != 0) continue;
    const bool handler = (sa.sa_flags & SA_SIGINFO) ? sa.sa_sigaction != nullptr
                                                    : (sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN);
    if (handler && !(sa.sa_flags & SA_RESTART)) return true;
  }
  return false;
}

// GET_EVENT: the service never blocks, so a blocking fd waits here for the eventfd (an event queued) and
// asks again; the lock is not held while waiting, so other threads' commands go on.
ssize_t ucma_get_event(Channel& ch, const void* buf, size_t len) {
  for (;;) {
    const ssize_t n = ucma_write(ch, buf, len);
    if (n >= 0 || errno != EAGAIN) return n;
    const int fl = real_fcntl(ch.efd, F_GETFL, 0);
    if (fl < 0 || (fl & O_NONBLOCK)) return fail(EAGAIN);
    // The socket with no events asked: only hang-up or error wake us (a reply to another thread's command
    // makes it readable, and is that thread's to read).
    pollfd p[2] = {{ch.efd, POLLIN, 0}, {ch.sock, 0, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR && !interrupting_handler()) continue;
      return fail(errno);
    }
    if (p[1].revents & (POLLHUP | POLLERR | POLLNVAL)) {
      std::lock_guard lock(ch.mu);
      ch.dead = true;
      return fail(EIO);
    }
  }
}

ssize_t ucma_dispatch(Channel& ch, const void* buf, size_t len) {
  rdma_ucm_cmd_hdr hdr;
  if (len >= sizeof hdr) {
    std::memcpy(&hdr, buf, sizeof hdr);
    if (hdr.cmd == RDMA_USER_CM_CMD_GET_EVENT) return ucma_get_event(ch, buf, len);
  }
  return ucma_write(ch, buf, len);
}

inline bool is_rdma_cm(const char* path) {
  return path && std::strcmp(path, kRdmaCmPath) == 0;
}

inline bool mode_needed(int flags) {
  return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE;
}

}  // namespace

// ---- open ----
#define URXE_OPEN_MODE(flags)                    \
  mode_t mode = 0;                               \
  if (mode_needed(flags)) {                      \
    va_list ap;                                  \
    va_start(ap, flags);                         \
    mode = static_cast<mode_t>(va_arg(ap, int)); \
    va_end(ap);                                  \
  }

URXE_EXPORT int open(const char* path, int flags, ...) {
  URXE_OPEN_MODE(flags);
  if (is_rdma_cm(path)) [[unlikely]]
    return ucma_open(flags);
  URXE_REAL(open, int (*)(const char*, int, ...));
  return real(path, flags, mode);
}

URXE_EXPORT int open64(const char* path, int flags, ...) {
  URXE_OPEN_MODE(flags);
  if (is_rdma_cm(path)) [[unlikely]]
    return ucma_open(flags);
  URXE_REAL(open64, int (*)(const char*, int, ...));
  return real(path, flags, mode);
}

URXE_EXPORT int openat(int dirfd, const char* path, int flags, ...) {
  URXE_OPEN_MODE(flags);
  if (is_rdma_cm(path)) [[unlikely]]
    return ucma_open(flags);
  URXE_REAL(openat, int (*)(int, const char*, int, ...));
  return real(dirfd, path, flags, mode);
}

URXE_EXPORT int openat64(int dirfd, const char* path, int flags, ...) {
  URXE_OPEN_MODE(flags);
  if (is_rdma_cm(path)) [[unlikely]]
    return ucma_open(flags);
  URXE_REAL(openat64, int (*)(int, const char*, int, ...));
  return real(dirfd, path, flags, mode);
}

// The _FORTIFY_SOURCE entries (calls without a mode).
URXE_EXPORT int __open_2(const char* path, int flags) {
  if (is_rdma_cm(path)) [[unlikely]]
    return ucma_open(flags);
  URXE_REAL(__open_2, int (*)(const char*, int));
  return real(path, flags);
}
URXE_EXPORT int __open64_2(const char* path, int flags) {
  if (is_rdma_cm(path)) [[unlikely]]
    return ucma_open(flags);
  URXE_REAL(__open64_2, int (*)(const char*, int));
  return real(path, flags);
}
URXE_EXPORT int __openat_2(int dirfd, const char* path, int flags) {
  if (is_rdma_cm(path)) [[unlikely]]
    return ucma_open(flags);
  URXE_REAL(__openat_2, int (*)(int, const char*, int));
  return real(dirfd, path, flags);
}
URXE_EXPORT int __openat64_2(int dirfd, const char* path, int flags) {
  if (is_rdma_cm(path)) [[unlikely]]
    return ucma_open(flags);
  URXE_REAL(__openat64_2, int (*)(int, const char*, int));
  return real(dirfd, path, flags);
}

// ---- read/write ----

namespace {
// Out of line, so write() itself stays a check and a jump.
[[gnu::noinline, gnu::cold]] ssize_t channel_write(Channel* ch, const void* buf, size_t len) {
  const ssize_t n = ucma_dispatch(*ch, buf, len);
  const int e = errno;
  release(ch);
  errno = e;
  return n;
}
}  // namespace

URXE_EXPORT ssize_t write(int fd, const void* buf, size_t len) {
  if (maybe_ours(fd)) [[unlikely]] {
    if (Channel* ch = acquire(fd)) return channel_write(ch, buf, len);
  }
  URXE_REAL(write, ssize_t(*)(int, const void*, size_t));
  return real(fd, buf, len);
}

// The kernel's rdma_cm file has no read.
URXE_EXPORT ssize_t read(int fd, void* buf, size_t len) {
  if (maybe_ours(fd) && is_ours(fd)) [[unlikely]]
    return fail(EINVAL);
  URXE_REAL(read, ssize_t(*)(int, void*, size_t));
  return real(fd, buf, len);
}
URXE_EXPORT ssize_t __read_chk(int fd, void* buf, size_t len, size_t buflen) {
  if (maybe_ours(fd) && is_ours(fd)) [[unlikely]]
    return fail(EINVAL);
  URXE_REAL(__read_chk, ssize_t(*)(int, void*, size_t, size_t));
  return real(fd, buf, len, buflen);
}
