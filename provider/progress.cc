// The progress thread's setting up (its nice, its time slice) and its GID/port-state updates; its loop and
// the policy it follows are in progress_policy.h / progress_policy.cc. Also the QPN block lock that keeps
// processes sharing a device from handing out the same QPN.
#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "provider/internal.h"

namespace urxe::provider {

void ContextState::gid_update() {
  for (int n = gid_watch.handle(*engine); n > 0; --n) post_async(1, IBV_EVENT_GID_CHANGE);
  bool up = false;
  while (gid_watch.take_port_change(up)) {
    urxe::provider::log_printf(up ? en::LogLevel::info : en::LogLevel::warn, config.name,
                               "port 1 %s (interface %s %s)", up ? "ACTIVE" : "DOWN", config.netdev.c_str(),
                               up ? "up with carrier" : "down or without carrier");
    post_async(1, up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR);
    counter_file.poke();
  }
}

// Asks the scheduler (EEVDF, Linux >= 6.12) for a short time slice for the calling thread, so that when it
// wakes for a packet or a doorbell it preempts a busy-polling application thread at once instead of waiting
// out that thread's slice (milliseconds with two ping-pong processes on two cores).
// Unprivileged; ignored by older kernels. `nice`: the one the thread runs at (set_progress_nice), which
// sched_setattr sets too.
void request_short_slice(int nice) {
  struct {
    uint32_t size;
    uint32_t sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime;
    uint64_t sched_deadline;
    uint64_t sched_period;
  } attr{};
  attr.size = sizeof attr;
  attr.sched_policy = SCHED_OTHER;
  // Only a thread that runs under SCHED_OTHER: a real-time or SCHED_BATCH app's thread keeps the policy
  // it inherited.
  if (::sched_getscheduler(0) != SCHED_OTHER) return;
  attr.sched_nice = nice;
  attr.sched_runtime = 100000;  // 100 us: the minimum slice
  if (const char* e = std::getenv("URXE_SLICE_US"); e && *e)
    attr.sched_runtime = std::strtoull(e, nullptr, 10) * 1000;
  if (attr.sched_runtime) ::syscall(SYS_sched_setattr, 0, &attr, 0u);
}

// The thread's nice, relative to its app's: `URXE_PROGRESS_NICE` (default 0, the app's; a negative offset
// needs CAP_SYS_NICE or an RLIMIT_NICE that allows it, else the thread stays at the app's). A thread that
// outranks its app preempts it at once when it wakes, as the kernel's softirq preempts an app for kernel
// rxe; on one CPU, where only it can place a WRITE for an app that spins on memory, -10 was tried as the
// default and not kept (docs/performance.md, "The progress thread": it cost a CQ-polling app's tail more than
// it gained). Returns the nice it runs at.
int set_progress_nice() {
  int offset = 0;
  if (const char* e = std::getenv("URXE_PROGRESS_NICE"); e && *e) offset = std::atoi(e);
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  errno = 0;
  const int app = ::getpriority(PRIO_PROCESS, tid);  // inherited from the thread that opened the device
  if (errno) return 0;
  if (offset == 0) return app;
  ::setpriority(PRIO_PROCESS, tid, std::clamp(app + offset, -20, 19));  // (EPERM: it stays at the app's)
  errno = 0;
  const int now = ::getpriority(PRIO_PROCESS, tid);
  return errno ? app : now;
}

// Claims a block of QPNs for this context (byte i of urxe.qpn locked → QPNs 0x11 + i*max_qp ...), so
// several processes on one device never hand out the same QPN. The lock goes away with the fd.
int claim_qpn_block(const std::string& ibdev_path, uint32_t block_size, int& fd_out) {
  int fd = ::open((ibdev_path + "/urxe.qpn").c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return -1;
  const uint32_t blocks = ((1u << 24) - 0x11) / block_size;
  for (uint32_t i = 0; i < blocks; ++i) {
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = static_cast<off_t>(i);
    fl.l_len = 1;
    if (::fcntl(fd, F_OFD_SETLK, &fl) == 0) {
      fd_out = fd;
      return static_cast<int>(i);
    }
  }
  ::close(fd);
  return -1;
}

}  // namespace urxe::provider
