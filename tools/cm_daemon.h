// The loop of `urxe cm`: gives cm::CmService (cm/service.h) its I/O. One epoll loop on one thread that
// sleeps only in epoll_wait: the listening unix socket and its clients (cm/protocol.h), one eventfd per
// channel whose count follows the channel's event queue, QP1 of each urxe device of this namespace on a
// dpdk::SocketPort (only destination QP 1 is let in), a timerfd at the service's next deadline, rtnetlink
// link/address changes and a one-second tick (new devices, idle exit), and SIGTERM/SIGINT by signalfd.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cm/service.h"
#include "wire/packet.h"

namespace urxe::tools {

struct CmDaemonConfig {
  std::string run_dir;        // provider::Paths::run_dir: the devices, and cm/ for the socket
  std::string netns;          // hostnet::NetnsId text of this namespace
  int listen_fd = -1;         // listening SOCK_SEQPACKET socket (non-blocking), owned by the caller
  uint32_t idle_exit_s = 60;  // exit after this long with no client and no id; 0 = never
  // The core to run; nullptr = cm::CmService::create. Tests put a scripted one here to drive the loop.
  std::unique_ptr<cm::CmService> (*make_service)(cm::CmHost& host) = nullptr;
};

// Runs the service until SIGTERM/SIGINT or the idle timeout. The caller blocks SIGTERM and SIGINT first
// (they are read from a signalfd) and removes the socket and pid file afterwards. Returns the exit status.
int run_cm_daemon(const CmDaemonConfig& cfg);

// QP1 on the wire, as kernel rxe sends and takes it (tests compare with rxe's captures).
//
// What a received frame is to the CM: a MAD (`m` filled in, but for m.device; m.mad points into the
// frame), or the reason it is dropped.
enum class Qp1Rx : uint8_t {
  mad,
  parse,   // not a RoCEv2 frame (length, checksum, version, opcode)
  icrc,    // bad ICRC
  opcode,  // not a UD SEND_ONLY with a DETH to QP 1
  qkey,    // Q_Key is not the GSI's
  length,  // payload is not one 256-byte MAD
};
Qp1Rx parse_qp1_frame(wire::ByteSpan frame, cm::MadIn& m);

// The whole frame carrying `m` from QP1 of the device with MAC `src_mac`: UD SEND_ONLY, BTH PSN `psn`,
// IPv4 identification `ip_id` (IPv4 when m.dgid is IPv4-mapped, else IPv6). Returns its length, 0 when
// `out` is too small.
uint32_t build_qp1_frame(const cm::MadOut& m, const wire::MacAddr& src_mac, uint32_t psn, uint16_t ip_id,
                         wire::MutByteSpan out);
// CmHost::lookup_route for the devices `devs` (a device that has gone has ifindex 0): the kernel's route to
// `dst` (from `src` unless zero; `ifindex` scopes a link-local dst), not_urxe unless it leaves through one
// of `devs`; a local destination is resolved to the device's own MAC (the frames loop back), any other
// next hop by the neighbour table (with `trigger`, resolution is provoked; never waits). device is the
// CmDevice::index of the device found.
cm::RouteResult lookup_cm_route(const std::vector<cm::CmDevice>& devs, const wire::Gid& dst,
                                const wire::Gid& src, int ifindex, bool trigger);

inline constexpr uint32_t kQp1FrameMax = 14 + 4 + 40 + 8 + 12 + 8 + 256 + 4;  // Ethernet+VLAN .. ICRC

}  // namespace urxe::tools
