// rtnetlink notifications of link and address changes (RTMGRP_LINK, RTMGRP_IPV4_IFADDR, RTMGRP_IPV6_IFADDR),
// decoded into small structs. For the GID watcher on the progress thread (non-blocking; drain() allocates
// nothing) and `urxe link watch` (blocking).
#pragma once
#include <cstdint>
#include <string>

#include "hostnet/netlink.h"
#include "wire/headers.h"

namespace urxe::hostnet {

struct LinkChange {
  bool deleted = false;  // RTM_DELLINK
  int ifindex = 0;
  bool up = false;       // IFF_UP
  bool running = false;  // IFF_RUNNING
  bool has_mac = false;
  wire::MacAddr mac{};
  bool has_carrier_down_count = false;
  uint32_t carrier_down_count = 0;
};

struct AddressChange {
  bool deleted = false;  // RTM_DELADDR
  int ifindex = 0;
};

// What drain() calls for each message, in the order the kernel sent them.
class MonitorSink {
 public:
  virtual void on_link(const LinkChange&) {}
  virtual void on_address(const AddressChange&) {}
  // The kernel dropped messages (ENOBUFS, NLMSG_OVERRUN): whatever they said must be read afresh.
  virtual void on_lost() {}

 protected:
  ~MonitorSink() = default;
};

class Monitor {
 public:
  // Subscribes to link and address changes. false (with a reason) when rtnetlink refuses.
  bool open(bool nonblock, std::string* err = nullptr);
  int fd() const { return sock_.fd(); }
  // Reads what is queued, up to `max_reads` datagrams (a flood of other interfaces' changes waits), and
  // passes each message to `sink`. Returns the number of datagrams read; blocks for the first one only
  // when opened blocking. -1 on a socket error other than EAGAIN/EINTR/ENOBUFS.
  int drain(MonitorSink& sink, int max_reads = 64);

 private:
  netlink::Socket sock_;
  alignas(nlmsghdr) char buf_[8192];
};

}  // namespace urxe::hostnet
