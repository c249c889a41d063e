// What the CM service needs from the host that cm/ may not reach itself (cm/README.md, "Layering"): the
// urxe devices of this namespace (provider/'s device tree), a packet port on QP1 of each (dpdk/) and a place
// for each device's CM counters (provider/'s stats). `urxe cm` implements it (tools/cm_platform.h); tests
// may implement it over anything.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cm/service.h"
#include "wire/bytes.h"

namespace urxe::cm {

// QP1 of one device: a port that lets in only frames to destination QP 1.
class Qp1Port {
 public:
  virtual ~Qp1Port() = default;
  // Readable (epoll) while frames wait; EPOLLERR when the port has an error to report (take_error).
  virtual int wait_fd() const = 0;
  // The port's pending error (an errno value, 0 = none), cleared by reading it: a packet socket is flagged
  // ENETDOWN when its interface goes down, and stays in POLLERR until read.
  virtual int take_error() = 0;
  // Hands each of at most `max` received frames to `frame`; returns how many there were.
  virtual uint32_t receive(uint32_t max, const std::function<void(wire::ByteSpan)>& frame) = 0;
  // Sends the frame `build` writes into a buffer of `max_len` bytes (returning its length; 0 = nothing to
  // send). False when there was no buffer, nothing was built or the port refused it.
  virtual bool send(uint32_t max_len, const std::function<uint32_t(wire::MutByteSpan)>& build) = 0;
  // When the port must be served (receive) though its wait fd stays quiet, in monotonic_ns() time: a frame
  // a fault rule holds (delay, reorder) is due then, in either direction. UINT64_MAX: no such time.
  virtual uint64_t next_due_ns() const { return UINT64_MAX; }
};

// A urxe device of this namespace as the platform finds it.
struct FoundDevice {
  CmDevice dev;            // all but index (the service's)
  std::string netdev;      // its interface
  std::string ibdev_path;  // its device tree ("" = none: no counters are written)
};

class CmPlatform {
 public:
  virtual ~CmPlatform() = default;
  // The urxe devices of this run directory whose interface is in this namespace, as the provider sees
  // them (node GUID, GID table, MTU).
  virtual std::vector<FoundDevice> scan_devices() = 0;
  // QP1 of `d` (one of the last scan's); nullptr with err set when it cannot be opened.
  virtual std::unique_ptr<Qp1Port> open_qp1(const FoundDevice& d, std::string& err) = 0;
  // The device's CM counters where the kernel keeps them (ports/1/cm_tx_msgs/ ...); false with err set.
  virtual bool write_counters(const FoundDevice& d, const CmService::Counters& k, std::string& err) = 0;
};

}  // namespace urxe::cm
