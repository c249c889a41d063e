#include "cm/service/common.h"

#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace urxe::cm {

static_assert(EPOLLIN == 1);

LoopEpoll::~LoopEpoll() {
  if (fd_ >= 0) close(fd_);
}

bool LoopEpoll::open() {
  fd_ = epoll_create1(EPOLL_CLOEXEC);
  return fd_ >= 0;
}

void LoopEpoll::add(int fd, uint64_t tag, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = tag;
  if (epoll_ctl(fd_, EPOLL_CTL_ADD, fd, &ev) < 0)
    service_log("epoll_ctl(ADD %d): %s", fd, std::strerror(errno));
}

void LoopEpoll::modify(int fd, uint64_t tag, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = tag;
  epoll_ctl(fd_, EPOLL_CTL_MOD, fd, &ev);
}

void LoopEpoll::remove(int fd) {
  epoll_ctl(fd_, EPOLL_CTL_DEL, fd, nullptr);
}

void service_log(const char* fmt, ...) {
  char when[32];
  const time_t t = time(nullptr);
  tm tmv;
  strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime_r(&t, &tmv));
  std::fprintf(stderr, "%s urxe cm[%d]: ", when, static_cast<int>(getpid()));
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fputc('\n', stderr);
  std::fflush(stderr);
}

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace urxe::cm
