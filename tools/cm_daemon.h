// The loop of `urxe cm`: gives cm::CmService (cm/service.h) its I/O. One epoll loop on one thread that
// sleeps only in epoll_wait: the listening unix socket and its clients (cm/protocol.h), one eventfd per
// channel whose count follows the channel's event queue, QP1 of each urxe device of this namespace on a
// dpdk::SocketPort (only destination QP 1 is let in), a timerfd at the service's next deadline, rtnetlink
// link/address changes and a one-second tick (new devices, idle exit), and SIGTERM/SIGINT by signalfd.
#pragma once
#include <cstdint>
#include <string>

namespace urxe::tools {

struct CmDaemonConfig {
  std::string run_dir;        // provider::Paths::run_dir: the devices, and cm/ for the socket
  std::string netns;          // hostnet::NetnsId text of this namespace
  int listen_fd = -1;         // listening SOCK_SEQPACKET socket (non-blocking), owned by the caller
  uint32_t idle_exit_s = 60;  // exit after this long with no client and no id; 0 = never
};

// Runs the service until SIGTERM/SIGINT or the idle timeout. The caller blocks SIGTERM and SIGINT first
// (they are read from a signalfd) and removes the socket and pid file afterwards. Returns the exit status.
int run_cm_daemon(const CmDaemonConfig& cfg);

}  // namespace urxe::tools
