// Keeps a device context's GID table current with its interface's addresses, as the kernel's RoCE GID
// management does for rxe: an rtnetlink socket (address and link changes), which the progress thread adds to
// the fds it sleeps on (and checks every so often while busy). On a change that concerns the interface, the
// device's GID files are brought up to date (sync_gid_table: kept addresses keep their index, so a running
// app's sgid_index stays valid), the engine gets the new entries, and the caller raises one
// IBV_EVENT_GID_CHANGE per changed entry. So ibv_query_gid in a running app and a newly started app both
// see the new GIDs without `urxe link watch` (when the app may write the tree; else see README).
// The same link messages tell when the port goes down or up (interface down, or carrier lost), for
// IBV_EVENT_PORT_ERR / IBV_EVENT_PORT_ACTIVE as rxe raises them, each flap even when it was quicker than
// our reads (provider/port_tracker.h).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "hostnet/monitor.h"
#include "provider/device_tree.h"
#include "provider/port_tracker.h"

namespace urxe::provider {

class GidWatch : private hostnet::MonitorSink {
 public:
  GidWatch() = default;
  GidWatch(const GidWatch&) = delete;
  GidWatch& operator=(const GidWatch&) = delete;

  // Subscribes first (no change can slip between), then syncs the GID files and returns the table for the
  // engine's port (gid_tbl_len entries, zero = unused). If rtnetlink is refused, fd() is -1 and the GIDs
  // stay what they were at open.
  std::vector<wire::Gid> open(const std::string& ibdev_path, const DeviceConfig& cfg, int ifindex);
  int fd() const { return monitor_.fd(); }
  // Whether the busy progress thread (which does not sleep on fd()) should call handle() now: at most
  // every 100 ms, so the check costs nothing on the data path.
  bool due(uint64_t now_ns) {
    if (fd() < 0 || now_ns - last_check_ns_ < 100'000'000) return false;
    last_check_ns_ = now_ns;
    return true;
  }
  // Reads what rtnetlink sent (non-blocking); if anything concerned the interface, or messages were lost,
  // syncs again and sets every changed entry in the engine. Returns how many entries changed.
  int handle(engine::Engine& engine);
  // After handle(): the next port state change (IFF_UP and IFF_RUNNING) not yet taken, oldest first;
  // `up` = the state it enters. A quick flap gives a down and an up (provider/port_tracker.h).
  bool take_port_change(bool& up);

 private:
  void on_link(const hostnet::LinkChange& c) override;
  void on_address(const hostnet::AddressChange& c) override;
  void on_lost() override;

  hostnet::Monitor monitor_;
  bool relevant_ = false, lost_ = false;  // what the messages of one handle() said
  int ifindex_ = 0;
  std::string ibdev_path_;
  DeviceConfig cfg_;
  uint64_t last_check_ns_ = 0;
  PortTracker port_;
  std::array<uint8_t, 6> mac_{};  // as the last link message said: a change means a new default GID
  std::vector<wire::Gid> table_as_gids(const std::vector<GidEntry>& t) const;
};

}  // namespace urxe::provider
