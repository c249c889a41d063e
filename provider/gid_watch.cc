#include "provider/gid_watch.h"

#include "hostnet/interface.h"

namespace urxe::provider {

std::vector<wire::Gid> GidWatch::table_as_gids(const std::vector<GidEntry>& t) const {
  std::vector<wire::Gid> g(cfg_.gid_tbl_len, wire::Gid{});
  for (size_t i = 0; i < t.size() && i < g.size(); ++i)
    if (!t[i].ndev.empty()) g[i] = t[i].gid;
  return g;
}

std::vector<wire::Gid> GidWatch::open(const std::string& ibdev_path, const DeviceConfig& cfg, int ifindex) {
  ibdev_path_ = ibdev_path;
  cfg_ = cfg;
  ifindex_ = ifindex;
  monitor_.open(true);
  hostnet::Interface nd;
  const bool present = hostnet::query_interface(cfg.netdev, nd, nullptr, false);
  port_.reset(present && nd.active(), nd.has_carrier_down_count, nd.carrier_down_count);
  mac_ = nd.mac;
  std::vector<GidEntry> table;
  std::string err;
  // EACCES/EROFS (an app that may only read the tree) still yields the table this context uses.
  sync_gid_table(ibdev_path_, cfg_, table, err);
  return table_as_gids(table);
}

void GidWatch::on_address(const hostnet::AddressChange& c) {
  if (c.ifindex == ifindex_) relevant_ = true;
}

void GidWatch::on_link(const hostnet::LinkChange& c) {
  if (c.ifindex != ifindex_) return;
  // The GIDs depend on the addresses and the MAC (the default GID): a link message matters to them only
  // when the interface is gone or its MAC changed, not for the flag changes that come often (promiscuous
  // mode when DPDK starts, carrier), whose sync would write files and allocate.
  if (c.deleted) relevant_ = true;
  if (c.has_mac && c.mac != mac_) {
    mac_ = c.mac;
    relevant_ = true;
  }
  // Each message's own state, in order (provider/port_tracker.h), not a query after the batch.
  port_.on_link(!c.deleted && c.up && c.running, c.has_carrier_down_count, c.carrier_down_count);
}

void GidWatch::on_lost() {  // the kernel dropped messages: ours may be among them
  relevant_ = lost_ = true;
}

int GidWatch::handle(engine::Engine& engine) {
  if (fd() < 0) return 0;
  relevant_ = lost_ = false;
  monitor_.drain(*this);  // bounded: a flood of other interfaces' changes waits
  const bool relevant = relevant_;
  if (lost_) {  // messages were dropped: take the state as it is now
    hostnet::Interface nd;
    const bool present = hostnet::query_interface(cfg_.netdev, nd, nullptr, false);
    port_.on_link(present && nd.active(), nd.has_carrier_down_count, nd.carrier_down_count);
  }
  if (!relevant) return 0;
  std::vector<GidEntry> table;
  std::string err;
  sync_gid_table(ibdev_path_, cfg_, table, err);
  const std::vector<wire::Gid> want = table_as_gids(table);
  const std::vector<wire::Gid> have = engine.gid_table();
  int changed = 0;
  for (uint32_t i = 0; i < want.size() && i < have.size(); ++i)
    if (want[i] != have[i] && engine.set_gid(i, want[i]) == 0) ++changed;
  return changed;
}

bool GidWatch::take_port_change(bool& up) {
  return port_.take(up);
}

}  // namespace urxe::provider
