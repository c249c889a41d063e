#include "provider/user_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

namespace urxe::provider {

namespace {
// Parses "START-END PERMS ..." at p (hex addresses); advances p past the line. false at the end.
bool next_mapping(const char*& p, const char* end, uintptr_t& start, uintptr_t& stop, bool& r, bool& w) {
  while (p < end) {
    const char* line = p;
    while (p < end && *p != '\n') ++p;
    const char* eol = p;
    if (p < end) ++p;
    char* q = nullptr;
    start = std::strtoull(line, &q, 16);
    if (q >= eol || *q != '-') continue;
    stop = std::strtoull(q + 1, &q, 16);
    if (q + 3 >= eol || *q != ' ') continue;
    r = q[1] == 'r';
    w = q[2] == 'w';
    return true;
  }
  return false;
}
}  // namespace

int check_user_range(const void* addr, size_t length, bool write) {
  const auto first = reinterpret_cast<uintptr_t>(addr);
  if (length == 0) return 0;
  if (first + length < first) return EINVAL;
  const uintptr_t last = first + length;  // exclusive
  // Read the whole file first: the maps of a process with many mappings can be large, and reading in
  // one go keeps the snapshot consistent enough for this check.
  const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;  // no /proc: nothing to check against (the kernel would have pinned)
  size_t cap = 1 << 16, n = 0;
  char* buf = static_cast<char*>(std::malloc(cap));
  for (;;) {
    if (!buf) {
      ::close(fd);
      return 0;
    }
    if (n == cap) {
      char* bigger = static_cast<char*>(std::realloc(buf, cap * 2));
      if (!bigger) break;
      buf = bigger;
      cap *= 2;
    }
    const ssize_t k = ::read(fd, buf + n, cap - n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    n += static_cast<size_t>(k);
  }
  ::close(fd);
  // Mappings are listed in ascending order: walk the range across them; a gap, an unreadable mapping, or
  // a read-only one when writing is what makes the kernel's pinning fail.
  uintptr_t cur = first;
  const char* p = buf;
  uintptr_t start = 0, stop = 0;
  bool r = false, w = false;
  int rc = EFAULT;
  while (next_mapping(p, buf + n, start, stop, r, w)) {
    if (stop <= cur) continue;
    if (start > cur || !r || (write && !w)) break;
    cur = stop;
    if (cur >= last) {
      rc = 0;
      break;
    }
  }
  std::free(buf);
  return rc;
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14 (uapi asm-generic/mman-common.h)
#define MADV_POPULATE_WRITE 23
#endif

bool odp_fault_in(uintptr_t addr, uint64_t len, bool write) {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t start = addr & ~(page - 1);
  if (len > UINTPTR_MAX - addr || addr + len > UINTPTR_MAX - page) return false;
  const uintptr_t end = (addr + len + page - 1) & ~(page - 1);
  // EINTR/EAGAIN (a signal, a page under migration) are worth a few more tries; EFAULT (a fault would have
  // raised SIGSEGV or SIGBUS: not writable, beyond a file's end) and ENOMEM (not mapped) are the answer.
  for (int tries = 0; tries < 8; tries++) {
    if (::madvise(reinterpret_cast<void*>(start), end - start,
                  write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) == 0)
      return true;
    if (errno != EINTR && errno != EAGAIN) return false;
  }
  return false;
}

bool odp_available() {
  static const bool ok = [] {
    static volatile uint8_t probe[1];
    probe[0] = 1;
    return odp_fault_in(reinterpret_cast<uintptr_t>(probe), 1, true);
  }();
  return ok;
}

}  // namespace urxe::provider
