// `urxe cm`: the RDMA CM service of this network namespace and run directory (what the kernel's rdma_ucm,
// rdma_cm and ib_cm do, for librdmacm applications through the provider's shim), and `urxe cm show`, its
// live ids and counters. The service's paths and protocol are cm/protocol.h; its loop is
// cm/service/service_loop.h, given the host's devices and ports by tools/cm_platform.h.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "cm/protocol.h"
#include "cm/service/service_loop.h"
#include "hostnet/netns.h"
#include "provider/device_tree.h"
#include "tools/cm_platform.h"
#include "tools/command.h"

namespace urxe::tools {
namespace {

namespace prov = urxe::provider;

constexpr char kUsage[] =
    "usage: urxe cm [--foreground] [--idle-exit SECS]\n"
    "       urxe cm show\n"
    "The RDMA CM service (librdmacm: rdma_resolve_addr, rdma_connect, rdma_listen, ...) of this network\n"
    "namespace and run directory ($URXE_RUN_DIR, default /run/urxe): it owns QP1 of the urxe devices of\n"
    "this namespace (the CM MADs: REQ, REP, RTU, DREQ, ...) and every rdma_cm id of the applications here,\n"
    "which reach it through the provider (urxe run). Applications start it when it is not running; run it\n"
    "by hand to choose its options or to see its log. One per namespace and run directory: a second one\n"
    "says 'already running (pid N)' and exits 0. Its files, in $URXE_RUN_DIR/cm/ (NETNS: the namespace's\n"
    "DEV:INO): NETNS.sock (applications connect), NETNS.lock, NETNS.pid, NETNS.log (its messages when in "
    "the\n"
    "background). Needs CAP_NET_RAW (packet sockets on the devices' interfaces). SIGTERM or SIGINT stops "
    "it.\n"
    "'urxe cm show' prints the running service's devices, live ids and counters: CM MADs sent and received\n"
    "by type, retries, duplicates and the frames to QP1 it dropped:\n"
    "  rx_drop_parse   not a RoCEv2 frame (length, checksum, version)    rx_drop_icrc    bad ICRC\n"
    "  rx_drop_opcode  not a UD SEND_ONLY to QP1                          rx_drop_qkey    Q_Key not "
    "0x80010000\n"
    "  rx_drop_length  payload not one 256-byte MAD                       rx_dropped      MADs the CM "
    "refused\n"
    "\n"
    "  --foreground      stay in the foreground, messages on stderr (default: detach once the socket\n"
    "                    listens, messages to NETNS.log)\n"
    "  --idle-exit SECS  exit after SECS seconds with no application connected and no id (default 60;\n"
    "                    0 = never)\n"
    "\n"
    "examples:\n"
    "  urxe cm                                  # start it in the background (if not running)\n"
    "  urxe cm --foreground --idle-exit 0       # in the foreground, until Ctrl-C\n"
    "  urxe run -- rping -s -a 10.0.0.1 -v      # an rdma_cm application (starts the service itself)\n"
    "  urxe cm show\n"
    "\n"
    "exit status: 0 (also when already running), 1 the service cannot start or is not running (show),\n"
    "2 usage error\n";

int usage_error(const std::string& msg) {
  return tools::usage_error("urxe cm", msg + " ('urxe cm --help' lists the options)");
}

void on_ignored(int) {}

std::string read_pid(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s.empty() ? "?" : s;
}

sockaddr_un unix_address(const std::string& path, bool* ok) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  *ok = path.size() < sizeof sa.sun_path;
  if (*ok) std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
  return sa;
}

int show(const std::string& sock_path) {
  bool ok;
  const sockaddr_un sa = unix_address(sock_path, &ok);
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (!ok || fd < 0 || connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) < 0) {
    std::fprintf(stderr, "urxe cm: no CM service running for this namespace (%s: %s); 'urxe cm' starts one\n",
                 sock_path.c_str(), std::strerror(errno));
    if (fd >= 0) close(fd);
    return 1;
  }
  const timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const cm::Hello h{cm::kStatusMagic, cm::kProtoVersion};
  if (send(fd, &h, sizeof h, MSG_NOSIGNAL) != sizeof h) {
    std::fprintf(stderr, "urxe cm: %s: %s\n", sock_path.c_str(), std::strerror(errno));
    close(fd);
    return 1;
  }
  char buf[cm::kMaxMessage];
  ssize_t n;
  bool any = false;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) {
    std::fwrite(buf, 1, static_cast<size_t>(n), stdout);
    any = true;
  }
  close(fd);
  if (n < 0 || !any) {
    std::fprintf(stderr, "urxe cm: the CM service did not answer (%s)\n",
                 n < 0 ? std::strerror(errno) : "closed");
    return 1;
  }
  return 0;
}

// Creates, binds and listens on the socket (any user may connect), replacing a stale one: the caller holds
// the lock, so no live service owns it.
int listen_socket(const std::string& path) {
  bool ok;
  const sockaddr_un sa = unix_address(path, &ok);
  if (!ok) {
    std::fprintf(stderr, "urxe cm: socket path too long: %s\n", path.c_str());
    return -1;
  }
  unlink(path.c_str());
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0 || bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) < 0 ||
      chmod(path.c_str(), 0666) < 0 || listen(fd, 128) < 0) {
    std::fprintf(stderr, "urxe cm: %s: %s\n", path.c_str(), std::strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

bool write_pid(const std::string& path) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "we");
  if (!f) return false;
  std::fprintf(f, "%d\n", static_cast<int>(getpid()));
  const bool ok = std::fclose(f) == 0 && rename(tmp.c_str(), path.c_str()) == 0;
  chmod(path.c_str(), 0644);
  return ok;
}

// Returned by the steps of cm_main when the command goes on; anything else is its exit status.
constexpr int kProceed = -1;

struct CmOptions {
  bool show = false;  // `urxe cm show`
  bool foreground = false;
  uint32_t idle = 60;  // --idle-exit seconds
};

// Reads `show` or the service's options into o: kProceed, or the exit status of --help or a usage error.
int parse_cm_args(Args args, CmOptions& o) {
  o.show = !args.empty() && args[0] == "show";
  if (o.show) {
    for (std::string_view a : args.subspan(1))
      if (is_help(a)) return print_help(kUsage);
    if (args.size() > 1) return usage_error("unknown argument '" + std::string(args[1]) + "'");
    return kProceed;
  }
  static constexpr Option kOptions[] = {{"foreground"}, {"idle-exit", Option::required}};
  OptionParser opts(args, kOptions);
  if (opts.help()) return print_help(kUsage);
  for (Token t; (t = opts.next());) {
    const std::string_view k = t.opt ? t.opt->name : std::string_view();
    if (t.kind == Token::missing_value) return usage_error("--" + std::string(k) + " needs a value");
    if (k == "foreground") {
      o.foreground = true;
    } else if (k == "idle-exit") {
      const std::string_view v = *t.value;
      auto r = std::from_chars(v.data(), v.data() + v.size(), o.idle);
      if (v.empty() || r.ec != std::errc() || r.ptr != v.data() + v.size())
        return usage_error("--idle-exit needs whole seconds (0 = never)");
    } else if (t.kind == Token::operand) {
      return usage_error("unknown argument '" + std::string(t.word) + "'");
    } else {
      return usage_error("unknown option '" + std::string(t.word) + "' (valid: " + opts.valid() + ")");
    }
  }
  return kProceed;
}

// Creates the service's directory. Applications of any user connect to the socket (and may start the
// service): a sticky world-writable directory, like /tmp.
bool make_cm_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  struct stat st;
  if (stat(dir.c_str(), &st) < 0) {
    std::fprintf(stderr, "urxe cm: %s: %s\n", dir.c_str(), ec ? ec.message().c_str() : std::strerror(errno));
    return false;
  }
  if ((st.st_mode & 07777) != 01777 && st.st_uid == geteuid()) chmod(dir.c_str(), 01777);
  return true;
}

// Takes the service's lock into *lock: kProceed, 0 when another service holds it, 1 on failure.
int take_lock(const std::string& lock_path, const std::string& pid_path, int* lock) {
  *lock = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (*lock < 0) {
    std::fprintf(stderr, "urxe cm: %s: %s\n", lock_path.c_str(), std::strerror(errno));
    return 1;
  }
  fchmod(*lock, 0666);  // so that any user's application can take it to start the service
  if (flock(*lock, LOCK_EX | LOCK_NB) < 0) {
    if (errno == EWOULDBLOCK) {
      std::printf("urxe cm: already running (pid %s)\n", read_pid(pid_path).c_str());
      return 0;
    }
    std::fprintf(stderr, "urxe cm: flock %s: %s\n", lock_path.c_str(), std::strerror(errno));
    return 1;
  }
  return kProceed;
}

// Detaches into a child that logs to dir/NETNS.log and writes the pid file: kProceed in the child, the
// exit status in the parent or when the fork fails. The parent returns once the child has written its
// pid file: the socket already listens, so a caller may connect as soon as `urxe cm` exits.
int detach(const std::string& dir, const std::string& netns, const std::string& pid_path) {
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) < 0) {
    std::perror("urxe cm: pipe");
    return 1;
  }
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) {
    std::perror("urxe cm: fork");
    return 1;
  }
  if (pid > 0) {
    close(ready[1]);
    char c = 0;
    const bool ok = read(ready[0], &c, 1) == 1;
    if (!ok)
      std::fprintf(stderr, "urxe cm: the service did not start (see %s/%s.log)\n", dir.c_str(),
                   netns.c_str());
    return ok ? 0 : 1;
  }
  close(ready[0]);
  setsid();
  const int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  const std::string log_path = dir + "/" + netns + ".log";
  const int logfd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (null >= 0) dup2(null, STDIN_FILENO);
  if (null >= 0) dup2(null, STDOUT_FILENO);
  dup2(logfd >= 0 ? logfd : null, STDERR_FILENO);
  if (null > STDERR_FILENO) close(null);
  if (logfd > STDERR_FILENO) close(logfd);
  if (chdir("/") < 0) { /* the service needs no working directory */
  }
  if (!write_pid(pid_path)) {
    std::fprintf(stderr, "urxe cm: %s: %s\n", pid_path.c_str(), std::strerror(errno));
    _exit(1);
  }
  const char c = 1;
  if (write(ready[1], &c, 1) != 1) { /* the parent is gone: run anyway */
  }
  close(ready[1]);
  return kProceed;
}

// Runs the service loop on the listening socket until SIGTERM/SIGINT or the idle exit; its exit status.
int serve(const prov::Paths& paths, const std::string& netns, int lfd, uint32_t idle) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, on_ignored);
  cm::CmServiceConfig cfg;
  cfg.run_dir = paths.run_dir;
  cfg.netns = netns;
  cfg.listen_fd = lfd;
  cfg.idle_exit_s = idle;
  CmPlatformImpl platform(paths.run_dir);
  return cm::run_cm_service(cfg, platform);
}

}  // namespace

int cm_main(Args args) {
  CmOptions o;
  if (const int rc = parse_cm_args(args, o); rc != kProceed) return rc;

  const prov::Paths paths = prov::Paths::from_env();
  const std::string netns = hostnet::current_netns().to_string();
  if (netns.empty()) {
    std::fprintf(stderr, "urxe cm: cannot tell this network namespace (is /proc mounted?)\n");
    return 1;
  }
  const std::string dir = cm::cm_dir(paths.run_dir);
  const std::string sock_path = cm::cm_socket_path(paths.run_dir, netns);
  const std::string pid_path = cm::cm_pid_path(paths.run_dir, netns);
  if (o.show) return show(sock_path);

  if (!make_cm_dir(dir)) return 1;
  int lock = -1;
  if (const int rc = take_lock(cm::cm_lock_path(paths.run_dir, netns), pid_path, &lock); rc != kProceed)
    return rc;
  const int lfd = listen_socket(sock_path);
  if (lfd < 0) return 1;

  if (!o.foreground) {
    if (const int rc = detach(dir, netns, pid_path); rc != kProceed) return rc;
  } else if (!write_pid(pid_path)) {
    std::fprintf(stderr, "urxe cm: %s: %s\n", pid_path.c_str(), std::strerror(errno));
    return 1;
  }

  const int rc = serve(paths, netns, lfd, o.idle);
  // Still under the lock: nobody else can have replaced them.
  unlink(sock_path.c_str());
  unlink(pid_path.c_str());
  close(lfd);
  close(lock);
  return rc;
}

}  // namespace urxe::tools
