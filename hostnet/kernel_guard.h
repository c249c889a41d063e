// Keeps the kernel's own UDP stack from answering RoCE frames addressed to its IP with ICMP port unreachable
// (and from doing more work on them than necessary), while the port (af_packet tap, which sees frames before
// IP) still receives them.
#pragma once
#include <string>

namespace urxe::hostnet {

// Per process, needs no capability: a dual-stack UDP socket bound to [::]:4791 (SO_REUSEADDR|SO_REUSEPORT so
// several processes can hold one) with a classic-BPF filter that drops everything. The kernel then finds a
// socket for every RoCE datagram, drops it at the filter (counted in Udp InErrors / Udp6 InErrors) and sends
// no ICMP. Closed with the object, or by the kernel when the process dies.
class UdpPortGuard {
 public:
  UdpPortGuard() = default;
  UdpPortGuard(const UdpPortGuard&) = delete;
  UdpPortGuard& operator=(const UdpPortGuard&) = delete;
  ~UdpPortGuard();
  // false with a reason when the port is held by a socket without SO_REUSEPORT (e.g. kernel rxe).
  bool open(std::string* err);
  bool active() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Per interface, needs CAP_NET_ADMIN and nft(8): an nftables netdev-family ingress chain on `ifname` that
// drops UDP to port 4791 (IPv4 and IPv6) before IP sees it; packet taps (af_packet) still get every frame.
// Cheaper for the kernel than UdpPortGuard but persistent: it belongs to whoever owns the device (`urxe link
// add/del`), not to a process. The table is named `urxe_<ifname>`.
bool install_ingress_drop(const std::string& ifname, std::string* err);
bool remove_ingress_drop(const std::string& ifname, std::string* err);
// Whether the table `urxe_<ifname>` exists (`nft list table` exits 0), so a removal only touches a table
// that is there.
bool ingress_drop_present(const std::string& ifname);

}  // namespace urxe::hostnet
