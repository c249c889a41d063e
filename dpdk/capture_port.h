// Live capture: every frame a device context sends and receives, written as pcapng that Wireshark and tshark
// open directly. Turned on per device (`urxe link add ... --pcap DIR [--pcap-size MB] [--pcap-files N]`,
// stored in urxe.conf, so every process opening the device captures) or per run ($URXE_PCAP=DIR, with
// $URXE_PCAP_SIZE and $URXE_PCAP_FILES; URXE_PCAP=off disables a device's capture for one run).
//
// Each context (process × device open) writes its own ring of files in DIR:
//   DEV_PID_COMM_NNNNN_YYYYmmddHHMMSS.pcapng   (PID gets ".K" for a process's second, third... context)
// A new file starts when the next frame would take the current one over the size bound; with a file limit
// the oldest of this ring is deleted, like dumpcap's ring buffer (-b filesize -b files).
// pcapng contents: SHB (comment: device, interface, pid, comm), one IDB (Ethernet, ns timestamps, if_name =
// the interface), an EPB per frame with epb_flags inbound (1) / outbound (2) and a comment "pid P (COMM)
// in|out, to QP 0x.. [, from QP 0x..]" from the BTH DestQP (and the DETH SrcQP for UD).
//
// Cost: none when off (the port is not wrapped). When on, per burst: one lock, one clock read, a copy of each
// frame into a preallocated buffer (no allocation); a writer thread writes full buffers (or every 250 ms) to
// the file, so the progress thread makes no file syscalls. When the writer falls behind, frames are not
// captured (counted, reported at close) rather than slowing the device.
//
// The device's settings (urxe.conf and the environment) are read by the provider (provider/ports.h), which
// passes them here with its log.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "engine/fault_port.h"
#include "engine/port.h"

namespace urxe::dpdk {

struct CaptureConfig {
  std::string dir;          // "" = off
  uint64_t file_bytes = 0;  // bound per file (0 = one file, no rotation)
  uint32_t files = 0;       // files kept per ring (0 = all)
  std::string device;       // the urxe device (file names, comments)
  std::string netdev;       // its interface (the IDB's if_name, comments)
  // Where the capture's warnings and errors go (one line each, no newline); nothing when empty.
  std::function<void(engine::LogLevel, const std::string&)> log;
};

// A Port that forwards everything to `inner` and captures the frames as above; it is also an
// engine::FaultObserver: between a FaultPort's two faces (engine::FaultPort::split_rx, `inner` the receive
// face) it is told of the frames rules drop (", fault rule N: drop (not sent)" / "(not delivered)"), and
// frames a rule made or changed carry the rule in their comment (", fault rule N: ACTION"); nullptr when
// capture is off, or (after one log line saying why) when DIR cannot be written: the device then works
// uncaptured.
std::unique_ptr<engine::Port> open_capture(engine::Port& inner, CaptureConfig cfg);

}  // namespace urxe::dpdk
