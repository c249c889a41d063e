#include "hostnet/kernel_guard.h"

#include <fcntl.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "wire/opcode.h"

namespace urxe::hostnet {

UdpPortGuard::~UdpPortGuard() {
  if (fd_ >= 0) close(fd_);
}

bool UdpPortGuard::open(std::string* err) {
  if (fd_ >= 0) return true;
  int one = 1, zero = 0;
  // Dual-stack first; a namespace without IPv6 only has AF_INET.
  int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  bool v6 = fd >= 0;
  if (!v6) fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    if (err) *err = std::string("socket: ") + std::strerror(errno);
    return false;
  }
  if (v6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  sock_filter drop_all[] = {BPF_STMT(BPF_RET | BPF_K, 0)};
  sock_fprog prog{1, drop_all};
  if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) != 0) {
    if (err) *err = std::string("SO_ATTACH_FILTER: ") + std::strerror(errno);
    close(fd);
    return false;
  }
  int r;
  if (v6) {
    sockaddr_in6 sa{};
    sa.sin6_family = AF_INET6;
    sa.sin6_port = htons(wire::kRoceV2Port);
    r = bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  } else {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(wire::kRoceV2Port);
    r = bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  }
  if (r != 0) {
    if (err) *err = std::string("bind UDP 4791: ") + std::strerror(errno);
    close(fd);
    return false;
  }
  fd_ = fd;
  return true;
}

namespace {

// Runs nft(8) with `args` (after "nft"), `script` on its stdin, its output discarded when `quiet`. Returns
// its exit status: 127 when nft is not found, -1 when it could not be started.
int run_nft(std::vector<const char*> args, const std::string& script, bool quiet, std::string* err) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) {
    if (err) *err = std::string("pipe: ") + std::strerror(errno);
    return -1;
  }
  args.insert(args.begin(), "nft");
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    if (err) *err = std::string("fork: ") + std::strerror(errno);
    close(p[0]);
    close(p[1]);
    return -1;
  }
  if (pid == 0) {
    dup2(p[0], 0);
    if (quiet) {
      const int null = open("/dev/null", O_WRONLY);
      if (null >= 0) {
        dup2(null, 1);
        dup2(null, 2);
      }
    }
    execvp("nft", const_cast<char* const*>(args.data()));
    execv("/usr/sbin/nft", const_cast<char* const*>(args.data()));
    _exit(127);
  }
  close(p[0]);
  size_t off = 0;
  while (off < script.size()) {
    ssize_t n = write(p[1], script.data() + off, script.size() - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  close(p[1]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (rc != 0 && err) *err = rc == 127 ? "nft(8) not found" : "nft failed";
  return rc;
}

bool run_nft_script(const std::string& script, std::string* err) {
  return run_nft({"-f", "-"}, script, false, err) == 0;
}

}  // namespace

bool install_ingress_drop(const std::string& ifname, std::string* err) {
  std::string t = "urxe_" + ifname;
  // "add table; delete table; table {...}" makes the install idempotent in one transaction. The counter says
  // how many RoCE frames came in through the interface (`nft list table netdev urxe_IFACE`): none between
  // devices on the same-host path.
  std::string script = "add table netdev " + t + "\ndelete table netdev " + t + "\ntable netdev " + t +
                       " {\n chain ingress {\n  type filter hook ingress device \"" + ifname +
                       "\" priority -500; policy accept;\n  udp dport " + std::to_string(wire::kRoceV2Port) +
                       " counter drop\n }\n}\n";
  return run_nft_script(script, err);
}

bool remove_ingress_drop(const std::string& ifname, std::string* err) {
  return run_nft_script("delete table netdev urxe_" + ifname + "\n", err);
}

bool ingress_drop_present(const std::string& ifname) {
  const std::string table = "urxe_" + ifname;
  return run_nft({"list", "table", "netdev", table.c_str()}, "", true, nullptr) == 0;
}

}  // namespace urxe::hostnet
