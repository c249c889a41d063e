// The service's devices: each urxe device of this namespace and QP1 of it (the frames of cm::CmService's
// MADs in and out), kept in step with the platform's scan; each device's CM counters mirrored into its tree.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cm/service.h"
#include "cm/service/common.h"
#include "cm/service/platform.h"

namespace urxe::cm {

// One urxe device of this namespace. Its position in the list is its CmDevice::index and stays while the
// service runs: a device that goes keeps its slot (down, no GIDs, no port) for when it comes back.
struct DeviceSlot {
  FoundDevice found;  // found.dev.index = the slot
  bool present = false;
  std::unique_ptr<Qp1Port> port;
  std::string port_error;
  uint32_t psn = 0;                // of the next MAD sent from QP1
  CmService::Counters mirrored{};  // what ports/1/cm_* last showed
  bool mirror_failed = false, mirror_done = false;
};

// Frames that reached QP1 and what became of them, MADs sent.
struct Qp1Counts {
  uint64_t rx_mads = 0;
  // Why a frame that reached QP1's filter was not a CM MAD the service could take (cm/service/qp1_frame.h).
  uint64_t drop_parse = 0, drop_icrc = 0, drop_opcode = 0, drop_qkey = 0, drop_length = 0;
  uint64_t tx_frames = 0;
  uint64_t tx_dropped = 0;  // no port, no buffer, or the port refused it
};

class Qp1Devices {
 public:
  // A port's wait fd joins `ep` tagged (LoopTag::port, slot).
  Qp1Devices(CmPlatform& platform, CmService& service, LoopEpoll& ep)
      : platform_(platform), service_(service), ep_(ep) {}

  // The platform's devices now: slots added, updated and marked gone; a port opened where there is none or
  // its interface changed (a port that failed is tried again each time, its error logged once); the service
  // told when its view of any device changed.
  void rescan();
  // The slot's port is readable or in error: the error read and logged, the frames handed to the service.
  void port_event(uint32_t slot, bool error);
  void send_mad(const MadOut& m);
  RouteResult lookup_route(const wire::Gid& dst, const wire::Gid& src, int ifindex, bool trigger) const;
  // The earliest port's next_due_ns (UINT64_MAX: none), for the loop's wait; serve_due: the ports whose
  // time has come served (their held frames go out or are taken).
  uint64_t next_due_ns() const;
  void serve_due(uint64_t now_ns);
  // Each device's counters into its tree when they changed (once a second: `urxe stats` and sysfs readers).
  void mirror_counters();

  const std::vector<DeviceSlot>& slots() const { return slots_; }
  const Qp1Counts& counts() const { return counts_; }

 private:
  void open_port(DeviceSlot& s);
  void handle_frame(uint32_t slot, wire::ByteSpan frame);
  std::vector<CmDevice> devices() const;

  CmPlatform& platform_;
  CmService& service_;
  LoopEpoll& ep_;
  std::vector<DeviceSlot> slots_;
  Qp1Counts counts_;
  uint16_t ip_id_ = 0;
};

}  // namespace urxe::cm
