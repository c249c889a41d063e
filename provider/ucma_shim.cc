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
// - fstat and friends say "character device", which librdmacm checks; read() fails as on the kernel's file
//   (it has none); dup/dup2/dup3/F_DUPFD share the channel; close/close_range of the last fd ends it.
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
#include <linux/kcmp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
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
#include "provider/log.h"

extern char** environ;

namespace {

using urxe::engine::LogLevel;

constexpr char kRdmaCmPath[] = "/dev/infiniband/rdma_cm";
// The misc device numbers a kernel's rdma_cm node typically has (its minor is dynamic): librdmacm compares
// st_rdev only with a number it got from the kernel over netlink, which it cannot get here.
constexpr unsigned kMiscMajor = 10, kRdmaCmMinor = 58;

// Only fds below this can be ours: the table is indexed by fd, so "is it ours" is one load. An open of
// rdma_cm whose fd would land above it fails with EMFILE (an application with that many files open).
constexpr int kMaxTrackedFd = 1 << 16;
constexpr int kReplyTimeoutS = 10;

// One open of rdma_cm (an "event channel"): the connection to the service and the service's eventfd. Shared
// by the fds dup'ed from the first; ends when the last of them is closed and no call is using it.
struct Channel {
  std::atomic<int> refs{1};
  std::mutex mu;  // one request/reply at a time on `sock`
  int sock = -1;  // SOCK_SEQPACKET to the service
  // Our own descriptor of the eventfd (the application's fd is another one): a thread waiting in GET_EVENT
  // polls it, so a concurrent close() of the application's fd cannot make it poll a reused fd number.
  int efd = -1;
  uint64_t token = 0;
  uint64_t dev = 0, ino = 0;  // the eventfd's inode, for same_file without kcmp
  uint32_t seq = 0;
  bool dead = false;  // the service went away: every command fails with EIO
};

std::atomic<Channel*> g_fds[kMaxTrackedFd];
// Guards changes to g_fds and taking a reference from it (so a Channel is never freed under a reader).
std::mutex g_table_mu;

inline bool maybe_ours(int fd) {
  return static_cast<unsigned>(fd) < static_cast<unsigned>(kMaxTrackedFd) &&
         g_fds[fd].load(std::memory_order_relaxed) != nullptr;
}

// The next definition of a libc function (the one we hide).
template <class Fn>
Fn next_fn(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}
template <class Fn>
Fn next_fn_versioned(const char* name, const char* version) {
  // Compat-only symbols (__fxstat64 since glibc 2.33) are not found by a plain dlsym.
  void* p = dlvsym(RTLD_NEXT, name, version);
  return reinterpret_cast<Fn>(p ? p : dlsym(RTLD_NEXT, name));
}
#define URXE_REAL(name, type)                    \
  static const auto real = next_fn<type>(#name); \
  if (!real) [[unlikely]] {                      \
    errno = ENOSYS;                              \
    return -1;                                   \
  }

int real_close(int fd) {
  URXE_REAL(close, int (*)(int));
  return real(fd);
}
int real_fcntl(int fd, int cmd, long arg) {
  URXE_REAL(fcntl, int (*)(int, int, ...));
  return real(fd, cmd, arg);
}

int real_fstat(int fd, struct stat* st) {
  URXE_REAL(fstat, int (*)(int, struct stat*));
  return real(fd, st);
}

void release(Channel* ch);

// Whether `fd` is still a descriptor of the channel's eventfd. kcmp compares open files exactly; without it
// (a seccomp filter, a kernel built without it) the file's identity tells an eventfd from other kinds of
// file only, since all eventfds share one anonymous inode.
bool same_file(int fd, const Channel& ch) {
  const pid_t self = getpid();
  const long r = ::syscall(SYS_kcmp, self, self, KCMP_FILE, fd, ch.efd);
  if (r >= 0) return r == 0;
  struct stat st;
  return real_fstat(fd, &st) == 0 && st.st_dev == ch.dev && st.st_ino == ch.ino;
}

// The channel `fd` names, with a reference, or nullptr. An fd closed behind our back (fclose of an fdopen'ed
// channel, a raw close syscall) and reused for another file would still be in the table: such an entry is
// recognised (same_file: two syscalls, on channel fds only) and forgotten.
[[gnu::noinline]] Channel* acquire(int fd) {
  if (!maybe_ours(fd)) return nullptr;
  Channel* ch;
  {
    std::lock_guard lock(g_table_mu);
    ch = g_fds[fd].load(std::memory_order_relaxed);
    if (!ch) return nullptr;
    ch->refs.fetch_add(1, std::memory_order_relaxed);
  }
  if (same_file(fd, *ch)) return ch;
  Channel* stale = ch;
  {
    std::lock_guard lock(g_table_mu);
    if (!g_fds[fd].compare_exchange_strong(stale, nullptr, std::memory_order_relaxed)) stale = nullptr;
  }
  release(stale);  // the table's reference
  release(ch);     // ours
  return nullptr;
}

// Whether `fd` is a channel's (for calls that only need to know).
[[gnu::noinline]] bool is_ours(int fd) {
  Channel* ch = acquire(fd);
  release(ch);
  return ch != nullptr;
}

void release(Channel* ch) {
  if (!ch || ch->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // The last reference: closing the connection is the service's cue to destroy the channel's ids, as the
  // kernel's ucma_close does.
  if (ch->sock >= 0) real_close(ch->sock);
  if (ch->efd >= 0) real_close(ch->efd);
  delete ch;
}

// Makes `fd` name `ch` (taking one of the caller's references) or nothing; drops what it named before.
void install(int fd, Channel* ch) {
  Channel* old;
  {
    std::lock_guard lock(g_table_mu);
    old = g_fds[fd].exchange(ch, std::memory_order_relaxed);
  }
  release(old);
}

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
  urxe::provider::log_printf(LogLevel::info, "", "rdma_cm: %s", why.c_str());
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
    errno = (n == static_cast<ssize_t>(sizeof r) && r.err > 0) ? r.err : ENODEV;
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
  int s = connect_service(path);
  if (s < 0 && (errno == ENOENT || errno == ECONNREFUSED)) {
    const std::string urxe = urxe::provider::urxe_command_path(provider_so_path());
    const std::string why = start_service(urxe);
    for (const uint64_t deadline = now_ms() + 2000;;) {
      s = connect_service(path);
      if (s >= 0 || (errno != ENOENT && errno != ECONNREFUSED) || now_ms() > deadline) break;
      sleep_ms(10);
    }
    if (s < 0) {
      const int e = errno;
      log_unreachable_once("no CM service at " + path + " (" + (why.empty() ? std::strerror(e) : why) +
                           "); start one with 'urxe cm'");
      errno = ENODEV;
      return -1;
    }
  } else if (s < 0) {
    log_unreachable_once("cannot reach the CM service at " + path + ": " + std::strerror(errno));
    errno = ENODEV;
    return -1;
  }
  uint64_t token = 0;
  const int efd = hello(s, token);
  if (efd < 0) {
    const int e = errno;
    log_unreachable_once("the CM service at " + path + " refused the channel: " + std::strerror(e));
    real_close(s);
    errno = e;
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

uint64_t load_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

ssize_t fail(int e) {
  errno = e;
  return -1;
}

// write() of one UCMA command, with the kernel's ucma_write checks and errors.
ssize_t ucma_write(Channel& ch, const void* buf, size_t len) {
  using namespace urxe::cm;
  rdma_ucm_cmd_hdr hdr;
  if (len < sizeof hdr) return fail(EINVAL);
  std::memcpy(&hdr, buf, sizeof hdr);
  if (hdr.cmd >= kUcmaCommandCount || hdr.in + sizeof hdr > len) return fail(EINVAL);
  if (hdr.cmd == RDMA_USER_CM_CMD_GET_OPTION) return fail(ENOSYS);  // the kernel has no handler for it
  const UcmaCommandInfo& info = kUcmaCommands[hdr.cmd];
  const auto* bytes = static_cast<const uint8_t*>(buf);
  const auto* body = bytes + sizeof hdr;
  const size_t body_len = len - sizeof hdr;
  // Bytes the app wrote beyond the command's structure mean nothing to any handler.
  const uint32_t cmd_len = static_cast<uint32_t>(std::min(len, sizeof hdr + info.body_size));

  // The response pointer, read now so a command whose answer could not be delivered is not done.
  uint8_t* resp = nullptr;
  if (info.response_offset >= 0 && hdr.out > 0) {
    if (body_len < static_cast<size_t>(info.response_offset) + 8) return fail(EFAULT);
    resp = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(load_u64(body + info.response_offset)));
  }

  const void* extra = nullptr;
  uint32_t extra_len = 0;
  uint64_t token = 0;
  if (hdr.cmd == RDMA_USER_CM_CMD_SET_OPTION) {
    if (body_len < kSetOptionOptlenOffset + 4) return fail(EINVAL);
    extra_len = load_u32(body + kSetOptionOptlenOffset);
    if (extra_len > kMaxOptionLen) return fail(EINVAL);
    extra = reinterpret_cast<const void*>(static_cast<uintptr_t>(load_u64(body + kSetOptionOptvalOffset)));
    if (extra_len && !extra) return fail(EFAULT);
  } else if (hdr.cmd == RDMA_USER_CM_CMD_MIGRATE_ID) {
    if (body_len < kMigrateIdFdOffset + 4) return fail(EINVAL);
    const int from_fd = static_cast<int>(load_u32(body + kMigrateIdFdOffset));
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

// ---- fds ----

void fill_stat(struct stat* st) {
  st->st_mode = S_IFCHR | 0666;
  st->st_rdev = makedev(kMiscMajor, kRdmaCmMinor);
  st->st_size = 0;
}

// A new fd `nfd` (from dup/F_DUPFD) of tracked `ch`: shares the channel.
int share(Channel* ch, int nfd) {
  if (nfd < 0) {
    const int e = errno;
    release(ch);
    errno = e;
    return nfd;
  }
  if (nfd >= kMaxTrackedFd) {
    release(ch);
    real_close(nfd);
    errno = EMFILE;
    return -1;
  }
  install(nfd, ch);
  return nfd;
}

int dup_to(int oldfd, int newfd, int flags, bool is_dup3) {
  Channel* ch = acquire(oldfd);
  int r;
  if (is_dup3) {
    static const auto real = next_fn<int (*)(int, int, int)>("dup3");
    r = real ? real(oldfd, newfd, flags) : (errno = ENOSYS, -1);
  } else {
    static const auto real = next_fn<int (*)(int, int)>("dup2");
    r = real ? real(oldfd, newfd) : (errno = ENOSYS, -1);
  }
  if (r < 0 || r == oldfd) {
    const int e = errno;
    release(ch);
    errno = e;
    return r;
  }
  if (ch) return share(ch, r);
  install(r, nullptr);  // newfd, if it was ours, was closed by the call
  return r;
}

inline bool is_rdma_cm(const char* path) {
  return path && std::strcmp(path, kRdmaCmPath) == 0;
}

inline bool mode_needed(int flags) {
  return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE;
}

}  // namespace

#define URXE_EXPORT extern "C" __attribute__((visibility("default")))

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

// ---- close, dup ----

URXE_EXPORT int close(int fd) {
  if (maybe_ours(fd)) [[unlikely]]
    install(fd, nullptr);
  return real_close(fd);
}

URXE_EXPORT int close_range(unsigned first, unsigned last, int flags) {
  static const auto real = next_fn<int (*)(unsigned, unsigned, int)>("close_range");
  if (!real) return static_cast<int>(fail(ENOSYS));
  if (flags & CLOSE_RANGE_CLOEXEC) return real(first, last, flags);
  // Under the table lock, so an fd number closed here and reused by a concurrent open of rdma_cm is not
  // forgotten after that open recorded it.
  std::lock_guard lock(g_table_mu);
  const int r = real(first, last, flags);
  if (r == 0)
    for (unsigned fd = first; fd <= last && fd < static_cast<unsigned>(kMaxTrackedFd); fd++)
      release(g_fds[fd].exchange(nullptr, std::memory_order_relaxed));  // release takes no table lock
  return r;
}

URXE_EXPORT void closefrom(int lowfd) {
  if (lowfd < 0) lowfd = 0;
  if (close_range(static_cast<unsigned>(lowfd), ~0U, 0) == 0) return;
  static const auto real = next_fn<void (*)(int)>("closefrom");
  if (real) real(lowfd);
}

URXE_EXPORT int dup(int fd) {
  static const auto real = next_fn<int (*)(int)>("dup");
  if (!real) return static_cast<int>(fail(ENOSYS));
  if (Channel* ch = acquire(fd)) [[unlikely]]
    return share(ch, real(fd));
  return real(fd);
}

URXE_EXPORT int dup2(int oldfd, int newfd) {
  if (maybe_ours(oldfd) || maybe_ours(newfd)) [[unlikely]]
    return dup_to(oldfd, newfd, 0, false);
  static const auto real = next_fn<int (*)(int, int)>("dup2");
  return real ? real(oldfd, newfd) : static_cast<int>(fail(ENOSYS));
}

URXE_EXPORT int dup3(int oldfd, int newfd, int flags) {
  if (maybe_ours(oldfd) || maybe_ours(newfd)) [[unlikely]]
    return dup_to(oldfd, newfd, flags, true);
  static const auto real = next_fn<int (*)(int, int, int)>("dup3");
  return real ? real(oldfd, newfd, flags) : static_cast<int>(fail(ENOSYS));
}

namespace {
// fcntl's third argument is an int, a long or a pointer depending on cmd; passed on as glibc reads it.
int fcntl_common(int (*real)(int, int, ...), int fd, int cmd, void* arg) {
  if (!real) return static_cast<int>(fail(ENOSYS));
  if ((cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) && maybe_ours(fd)) [[unlikely]] {
    if (Channel* ch = acquire(fd)) return share(ch, real(fd, cmd, arg));
  }
  return real(fd, cmd, arg);
}
}  // namespace

URXE_EXPORT int fcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  static const auto real = next_fn<int (*)(int, int, ...)>("fcntl");
  return fcntl_common(real, fd, cmd, arg);
}

URXE_EXPORT int fcntl64(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  static const auto real = next_fn<int (*)(int, int, ...)>("fcntl64");
  return fcntl_common(real, fd, cmd, arg);
}

// ---- stat ----

URXE_EXPORT int fstat(int fd, struct stat* st) {
  URXE_REAL(fstat, int (*)(int, struct stat*));
  const int r = real(fd, st);
  if (r == 0 && maybe_ours(fd) && is_ours(fd)) [[unlikely]]
    fill_stat(st);
  return r;
}

URXE_EXPORT int fstat64(int fd, struct stat64* st) {
  URXE_REAL(fstat64, int (*)(int, struct stat64*));
  const int r = real(fd, st);
  if (r == 0 && maybe_ours(fd) && is_ours(fd)) [[unlikely]]
    fill_stat(reinterpret_cast<struct stat*>(st));
  return r;
}
static_assert(sizeof(struct stat) == sizeof(struct stat64));

// What binaries built against glibc before 2.33 call for fstat (compat symbols now).
URXE_EXPORT int __fxstat(int ver, int fd, struct stat* st) {
  static const auto real = next_fn_versioned<int (*)(int, int, struct stat*)>("__fxstat", "GLIBC_2.2.5");
  const int r = real ? real(ver, fd, st) : fstat(fd, st);
  if (r == 0 && maybe_ours(fd) && is_ours(fd)) [[unlikely]]
    fill_stat(st);
  return r;
}
URXE_EXPORT int __fxstat64(int ver, int fd, struct stat64* st) {
  static const auto real = next_fn_versioned<int (*)(int, int, struct stat64*)>("__fxstat64", "GLIBC_2.2.5");
  const int r = real ? real(ver, fd, st) : fstat64(fd, st);
  if (r == 0 && maybe_ours(fd) && is_ours(fd)) [[unlikely]]
    fill_stat(reinterpret_cast<struct stat*>(st));
  return r;
}

namespace {
inline bool about_fd(int dirfd, const char* path, int flags) {
  return (flags & AT_EMPTY_PATH) && path && !*path && maybe_ours(dirfd) && is_ours(dirfd);
}
}  // namespace

URXE_EXPORT int fstatat(int dirfd, const char* path, struct stat* st, int flags) {
  URXE_REAL(fstatat, int (*)(int, const char*, struct stat*, int));
  const int r = real(dirfd, path, st, flags);
  if (r == 0 && about_fd(dirfd, path, flags)) [[unlikely]]
    fill_stat(st);
  return r;
}
URXE_EXPORT int fstatat64(int dirfd, const char* path, struct stat64* st, int flags) {
  URXE_REAL(fstatat64, int (*)(int, const char*, struct stat64*, int));
  const int r = real(dirfd, path, st, flags);
  if (r == 0 && about_fd(dirfd, path, flags)) [[unlikely]]
    fill_stat(reinterpret_cast<struct stat*>(st));
  return r;
}
URXE_EXPORT int __fxstatat(int ver, int dirfd, const char* path, struct stat* st, int flags) {
  static const auto real =
      next_fn_versioned<int (*)(int, int, const char*, struct stat*, int)>("__fxstatat", "GLIBC_2.4");
  const int r = real ? real(ver, dirfd, path, st, flags) : fstatat(dirfd, path, st, flags);
  if (r == 0 && about_fd(dirfd, path, flags)) [[unlikely]]
    fill_stat(st);
  return r;
}
URXE_EXPORT int __fxstatat64(int ver, int dirfd, const char* path, struct stat64* st, int flags) {
  static const auto real =
      next_fn_versioned<int (*)(int, int, const char*, struct stat64*, int)>("__fxstatat64", "GLIBC_2.4");
  const int r = real ? real(ver, dirfd, path, st, flags) : fstatat64(dirfd, path, st, flags);
  if (r == 0 && about_fd(dirfd, path, flags)) [[unlikely]]
    fill_stat(reinterpret_cast<struct stat*>(st));
  return r;
}

URXE_EXPORT int statx(int dirfd, const char* path, int flags, unsigned mask, struct statx* stx) {
  URXE_REAL(statx, int (*)(int, const char*, int, unsigned, struct statx*));
  const int r = real(dirfd, path, flags, mask, stx);
  if (r == 0 && about_fd(dirfd, path, flags)) [[unlikely]] {
    stx->stx_mode = S_IFCHR | 0666;
    stx->stx_size = 0;
    stx->stx_rdev_major = kMiscMajor;
    stx->stx_rdev_minor = kRdmaCmMinor;
  }
  return r;
}
