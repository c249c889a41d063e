#include "provider/ports.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "dpdk/local_port.h"
#include "dpdk/port_factory.h"
#include "provider/internal.h"

namespace urxe::provider {

std::unique_ptr<engine::Port> make_port(const std::string& kind, const PortRequest& req, std::string& err) {
  dpdk::PortOptions opt;
  if (!dpdk::parse_port_kind(kind, opt.kind)) {
    err = "unknown port kind '" + kind + "' (auto, dpdk, socket, loop, null)";
    return nullptr;
  }
  opt.ifname = req.config.netdev;
  opt.dpdk_args = req.config.dpdk;
  opt.gids = req.attr.gids;
  opt.attr = req.attr;
  opt.bus = req.config.name;  // loop: every context of this device in this process
  std::string notice;
  auto port = dpdk::open_port(opt, &notice, &err);
  // One line per process and device, the first time a port is opened (stderr, as rdma-core warns).
  static std::mutex notice_mu;
  static std::vector<std::string> noticed;
  if (port && !notice.empty()) {
    std::lock_guard g(notice_mu);
    if (std::find(noticed.begin(), noticed.end(), req.config.name) == noticed.end()) {
      noticed.push_back(req.config.name);
      std::fprintf(stderr, "%s\n", notice.c_str());
    }
  }
  return port;
}

void add_local_path(std::unique_ptr<engine::Port>& port, const DeviceConfig& config,
                    const std::string& ibdev_path, uint32_t block, uint32_t block_size) {
  bool on = config.local_path && config.port != "loop" && config.port != "null";
  if (const char* e = std::getenv("URXE_LOCAL_PATH"); e && *e) on = std::string(e) != "0";
  if (!on) return;
  // The run directory's local/ (ibdev_path is RUN_DIR/sys/class/infiniband/NAME): shared by the devices
  // of every network namespace that uses this run directory.
  const std::string tail = "/sys/class/infiniband/" + config.name;
  const bool in_tree = ibdev_path.size() > tail.size() &&
                       ibdev_path.compare(ibdev_path.size() - tail.size(), tail.size(), tail) == 0;
  dpdk::LocalPathConfig cfg;
  cfg.dir =
      in_tree ? ibdev_path.substr(0, ibdev_path.size() - tail.size()) + "/local" : ibdev_path + "/urxe.local";
  cfg.block = block;
  cfg.qpn_base0 = 0x11;
  cfg.block_size = block_size;
  cfg.blocks = ((1u << 24) - 0x11) / block_size;
  std::string err;
  if (auto local = dpdk::LocalPathPort::open(port, cfg, err)) {
    port = std::move(local);
  } else {
    URXE_DEBUG("no same-host path: %s", err.c_str());
  }
}

}  // namespace urxe::provider
