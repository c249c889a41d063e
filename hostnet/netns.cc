#include "hostnet/netns.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "hostnet/interface.h"

namespace urxe::hostnet {
namespace {

bool same_ns(const std::string& path, const NetnsId& ns, bool& denied) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == EACCES || errno == EPERM) denied = true;
    return false;
  }
  return st.st_dev == ns.dev && st.st_ino == ns.ino;
}

// A file that refers to `ns` (a bind mount from `ip netns add`, or a process's ns/net), "" when none.
std::string find_netns(const NetnsId& ns, bool& denied) {
  if (DIR* d = ::opendir("/run/netns")) {
    while (const dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      const std::string p = std::string("/run/netns/") + e->d_name;
      if (same_ns(p, ns, denied)) {
        ::closedir(d);
        return p;
      }
    }
    ::closedir(d);
  }
  DIR* d = ::opendir("/proc");
  if (!d) {
    denied = true;
    return {};
  }
  std::string found;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const std::string p = std::string("/proc/") + e->d_name + "/ns/net";
    bool proc_denied = false;
    if (same_ns(p, ns, proc_denied)) {
      found = p;
      break;
    }
    // A process that exited meanwhile is ENOENT; one we may not look at could be the one holding ns, unless
    // we are root: then it is one outside our user namespace or container (a container's init), which
    // cannot hold a namespace made in here.
    denied = denied || (proc_denied && ::geteuid() != 0);
  }
  ::closedir(d);
  return found;
}

}  // namespace

std::string NetnsId::to_string() const {
  if (!known()) return {};
  return std::to_string(dev) + ":" + std::to_string(ino);
}

bool NetnsId::parse(const std::string& s, NetnsId& out) {
  unsigned long long d = 0, i = 0;
  char tail = 0;
  if (std::sscanf(s.c_str(), "%llu:%llu%c", &d, &i, &tail) != 2 || i == 0) return false;
  out = {d, i};
  return true;
}

NetnsId current_netns() {
  struct stat st {};
  if (::stat("/proc/thread-self/ns/net", &st) != 0 && ::stat("/proc/self/ns/net", &st) != 0) return {};
  return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

bool in_current_netns(const std::string& recorded) {
  NetnsId ns;
  if (!NetnsId::parse(recorded, ns)) return true;
  const NetnsId here = current_netns();
  return !here.known() || ns == here;
}

Presence query_interface_in(const NetnsId& ns, const std::string& ifname, Interface& out) {
  if (!ns.known()) return Presence::unknown;
  if (ns == current_netns())
    return query_interface(ifname, out, nullptr, false) ? Presence::present : Presence::gone;
  bool denied = false;
  const std::string path = find_netns(ns, denied);
  if (path.empty()) return denied ? Presence::unknown : Presence::gone;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Presence::unknown;
  Presence result = Presence::unknown;
  // setns changes only the calling thread's namespace: a thread of its own leaves the caller's untouched.
  std::thread t([&] {
    if (::setns(fd, CLONE_NEWNET) != 0) return;
    result = query_interface(ifname, out, nullptr, false) ? Presence::present : Presence::gone;
  });
  t.join();
  ::close(fd);
  return result;
}

Presence interface_presence(const NetnsId& ns, const std::string& ifname) {
  Interface info;
  return query_interface_in(ns, ifname, info);
}

}  // namespace urxe::hostnet
