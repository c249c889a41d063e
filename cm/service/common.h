// What the pieces of the CM service's loop share: the epoll set and the tags its events carry, the
// service's log and its clock.
#pragma once
#include <cstdint>

namespace urxe::cm {

// An epoll event's data: the source's kind in the high half, its index or fd in the low half.
enum class LoopTag : uint32_t { listen, signal, timer, tick, monitor, port, client };
inline uint64_t loop_tag(LoopTag t, uint32_t v = 0) {
  return (static_cast<uint64_t>(t) << 32) | v;
}

// The loop's epoll set; a failed add is logged (the source then stays silent).
class LoopEpoll {
 public:
  LoopEpoll() = default;
  LoopEpoll(const LoopEpoll&) = delete;
  LoopEpoll& operator=(const LoopEpoll&) = delete;
  ~LoopEpoll();
  bool open();
  int fd() const { return fd_; }
  void add(int fd, uint64_t tag, uint32_t events = 1 /* EPOLLIN */);
  void modify(int fd, uint64_t tag, uint32_t events);
  void remove(int fd);

 private:
  int fd_ = -1;
};

// One line on stderr: "YYYY-mm-dd HH:MM:SS urxe cm[PID]: text" (the service's log file when daemonized).
void service_log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

uint64_t monotonic_ns();

}  // namespace urxe::cm
