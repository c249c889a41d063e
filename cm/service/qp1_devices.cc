#include "cm/service/qp1_devices.h"

#include <sys/epoll.h>

#include <algorithm>
#include <cstring>

#include "cm/service/qp1_frame.h"
#include "cm/service/route.h"

namespace urxe::cm {
namespace {

constexpr uint32_t kRxBurst = 32;

bool same_device(const CmDevice& a, const CmDevice& b) {
  return a.index == b.index && a.name == b.name && a.node_guid == b.node_guid && a.mac == b.mac &&
         a.ifindex == b.ifindex && a.mtu == b.mtu && a.gids == b.gids && a.up == b.up;
}

bool same_counts(const CmService::Counters& a, const CmService::Counters& b) {
  return std::memcmp(a.tx, b.tx, sizeof a.tx) == 0 && std::memcmp(a.rx, b.rx, sizeof a.rx) == 0 &&
         std::memcmp(a.tx_retries, b.tx_retries, sizeof a.tx_retries) == 0 &&
         std::memcmp(a.rx_duplicates, b.rx_duplicates, sizeof a.rx_duplicates) == 0;
}

}  // namespace

void Qp1Devices::open_port(DeviceSlot& s) {
  s.port.reset();
  std::string err;
  s.port = platform_.open_qp1(s.found, err);
  if (!s.port) {
    if (err != s.port_error)
      service_log("%s: no port on %s: %s", s.found.dev.name.c_str(), s.found.netdev.c_str(), err.c_str());
    s.port_error = err;
    return;
  }
  s.port_error.clear();
  ep_.add(s.port->wait_fd(), loop_tag(LoopTag::port, s.found.dev.index));
}

void Qp1Devices::rescan() {
  std::vector<bool> seen(slots_.size(), false);
  bool changed = false;
  for (FoundDevice& f : platform_.scan_devices()) {
    size_t i = 0;
    while (i < slots_.size() && slots_[i].found.dev.name != f.dev.name) ++i;
    if (i == slots_.size()) {
      slots_.emplace_back();
      seen.push_back(false);
    }
    DeviceSlot& s = slots_[i];
    seen[i] = true;
    f.dev.index = static_cast<uint32_t>(i);
    const CmDevice& old = s.found.dev;
    const bool reopen = !s.present || !s.port || s.found.netdev != f.netdev || old.ifindex != f.dev.ifindex ||
                        old.mac != f.dev.mac;
    if (!s.present || !same_device(old, f.dev)) changed = true;
    if (!s.present)
      service_log("device %s on %s (ifindex %d)", f.dev.name.c_str(), f.netdev.c_str(), f.dev.ifindex);
    s.found = std::move(f);
    s.present = true;
    if (reopen) open_port(s);
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    DeviceSlot& s = slots_[i];
    if (seen[i] || !s.present) continue;
    service_log("device %s gone", s.found.dev.name.c_str());
    s.present = false;
    s.port.reset();
    s.port_error.clear();
    s.found.dev.up = false;
    s.found.dev.ifindex = 0;
    s.found.dev.gids.clear();
    changed = true;
  }
  if (changed) service_.set_devices(devices());
}

std::vector<CmDevice> Qp1Devices::devices() const {
  std::vector<CmDevice> devs;
  devs.reserve(slots_.size());
  for (const DeviceSlot& s : slots_) devs.push_back(s.found.dev);
  return devs;
}

void Qp1Devices::mirror_counters() {
  for (size_t i = 0; i < slots_.size(); ++i) {
    DeviceSlot& s = slots_[i];
    if (!s.present || s.found.ibdev_path.empty()) continue;
    const CmService::Counters k = service_.device_counters(static_cast<uint32_t>(i));
    if (s.mirror_done && same_counts(k, s.mirrored)) continue;
    std::string err;
    if (platform_.write_counters(s.found, k, err)) {
      s.mirrored = k;
      s.mirror_done = true;
    } else if (!s.mirror_failed) {
      service_log("%s: cannot write its CM counters: %s", s.found.dev.name.c_str(), err.c_str());
      s.mirror_failed = true;
    }
  }
}

void Qp1Devices::port_event(uint32_t slot, bool error) {
  if (slot >= slots_.size()) return;
  DeviceSlot& s = slots_[slot];
  if (!s.port) return;
  if (error) {
    if (const int e = s.port->take_error())
      service_log("%s: port on %s: %s", s.found.dev.name.c_str(), s.found.netdev.c_str(), std::strerror(e));
  }
  for (;;) {
    const uint32_t n = s.port->receive(kRxBurst, [&](wire::ByteSpan f) { handle_frame(slot, f); });
    if (n < kRxBurst || !s.port) return;
  }
}

uint64_t Qp1Devices::next_due_ns() const {
  uint64_t due = UINT64_MAX;
  for (const DeviceSlot& s : slots_)
    if (s.port) due = std::min(due, s.port->next_due_ns());
  return due;
}

void Qp1Devices::serve_due(uint64_t now_ns) {
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].port && slots_[i].port->next_due_ns() <= now_ns)
      port_event(static_cast<uint32_t>(i), false);
}

void Qp1Devices::handle_frame(uint32_t slot, wire::ByteSpan frame) {
  MadIn m;
  switch (parse_qp1_frame(frame, m)) {
    case Qp1Rx::mad:
      m.device = slot;
      ++counts_.rx_mads;
      service_.on_mad(m);
      return;
    case Qp1Rx::parse:
      ++counts_.drop_parse;
      return;
    case Qp1Rx::icrc:
      ++counts_.drop_icrc;
      return;
    case Qp1Rx::opcode:
      ++counts_.drop_opcode;
      return;
    case Qp1Rx::qkey:
      ++counts_.drop_qkey;
      return;
    case Qp1Rx::length:
      ++counts_.drop_length;
      return;
  }
}

void Qp1Devices::send_mad(const MadOut& m) {
  if (m.device >= slots_.size() || !slots_[m.device].port) {
    ++counts_.tx_dropped;
    return;
  }
  DeviceSlot& s = slots_[m.device];
  // A frame to our own MAC (the peer is on this device) goes through the port's loopback.
  const bool sent = s.port->send(kQp1FrameMax, [&](wire::MutByteSpan out) {
    return build_qp1_frame(m, s.found.dev.mac, s.psn, ip_id_++, out);
  });
  if (!sent) {
    ++counts_.tx_dropped;
    return;
  }
  s.psn = (s.psn + 1) & 0xffffff;
  ++counts_.tx_frames;
}

RouteResult Qp1Devices::lookup_route(const wire::Gid& dst, const wire::Gid& src, int ifindex,
                                     bool trigger) const {
  return lookup_cm_route(devices(), dst, src, ifindex, trigger);
}

}  // namespace urxe::cm
