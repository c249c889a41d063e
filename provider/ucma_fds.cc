// The UCMA shim's fds: which fds are channels (a table indexed by fd, so write/read/close/fstat of any other
// fd cost one relaxed load), and the calls that copy, drop or describe a channel's fds: close, close_range,
// closefrom, dup/dup2/dup3, F_DUPFD, and the fstat family (a character device, as librdmacm checks).
// Exported (urxe.map), so built into liburxe-rdmav34.so itself.
#include <fcntl.h>
#include <linux/kcmp.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdarg>
#include <cstring>

#include "provider/ucma_shim.h"

namespace urxe::provider::ucma {

std::atomic<Channel*> g_fds[kMaxTrackedFd];

namespace {
// Guards changes to g_fds and taking a reference from it (so a Channel is never freed under a reader).
std::mutex g_table_mu;
}  // namespace

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

}  // namespace urxe::provider::ucma

using namespace urxe::provider::ucma;

namespace {

// The misc device numbers a kernel's rdma_cm node typically has (its minor is dynamic): librdmacm compares
// st_rdev only with a number it got from the kernel over netlink, which it cannot get here.
constexpr unsigned kMiscMajor = 10, kRdmaCmMinor = 58;

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

}  // namespace

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
