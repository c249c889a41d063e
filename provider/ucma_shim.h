// The UCMA shim's channels (provider/ucma_shim.cc has the commands, provider/ucma_fds.cc the fd table and
// the calls that copy, drop or describe a channel's fds). Inside liburxe-rdmav34.so only.
#pragma once
#include <dlfcn.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <mutex>

namespace urxe::provider::ucma {

// Only fds below this can be ours: the table is indexed by fd, so "is it ours" is one load. An open of
// rdma_cm whose fd would land above it fails with EMFILE (an application with that many files open).
constexpr int kMaxTrackedFd = 1 << 16;

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

// Indexed by fd: the channel an fd names (changed under the table lock in ucma_fds.cc).
extern std::atomic<Channel*> g_fds[kMaxTrackedFd];

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

int real_close(int fd);
int real_fcntl(int fd, int cmd, long arg);
int real_fstat(int fd, struct stat* st);

// The channel `fd` names, with a reference, or nullptr (an entry whose fd now names another file, closed
// behind our back and reused, is forgotten). release() drops a reference; the last one closes the channel.
Channel* acquire(int fd);
void release(Channel* ch);
// Whether `fd` is a channel's (for calls that only need to know).
bool is_ours(int fd);
// Makes `fd` name `ch` (taking one of the caller's references) or nothing; drops what it named before.
void install(int fd, Channel* ch);

inline ssize_t fail(int e) {
  errno = e;
  return -1;
}

}  // namespace urxe::provider::ucma

#define URXE_EXPORT extern "C" __attribute__((visibility("default")))
