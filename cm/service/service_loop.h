// The loop of `urxe cm`: gives cm::CmService (cm/service.h) its I/O. One epoll loop on one thread that
// sleeps only in epoll_wait: the listening unix socket and its clients (cm/service/clients.h), QP1 of each
// urxe device of this namespace (cm/service/qp1_devices.h, through the CmPlatform), a timerfd at the
// service's next deadline, rtnetlink link/address changes and a one-second tick (new devices, counters,
// idle exit), and SIGTERM/SIGINT by signalfd.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "cm/service.h"
#include "cm/service/platform.h"

namespace urxe::cm {

struct CmServiceConfig {
  std::string run_dir;        // the run directory (provider::Paths::run_dir), for `urxe cm show`
  std::string netns;          // hostnet::NetnsId text of this namespace, for `urxe cm show`
  int listen_fd = -1;         // listening SOCK_SEQPACKET socket (non-blocking), owned by the caller
  uint32_t idle_exit_s = 60;  // exit after this long with no client and no id; 0 = never
  // The core to run; nullptr = CmService::create. Tests put a scripted one here to drive the loop.
  std::unique_ptr<CmService> (*make_service)(CmHost& host) = nullptr;
};

// Runs the service until SIGTERM/SIGINT or the idle timeout. The caller blocks SIGTERM and SIGINT first
// (they are read from a signalfd) and removes the socket and pid file afterwards. Returns the exit status.
int run_cm_service(const CmServiceConfig& cfg, CmPlatform& platform);

}  // namespace urxe::cm
