#include "provider/ports.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "dpdk/local_port.h"
#include "dpdk/port_factory.h"
#include "hostnet/interface.h"
#include "provider/internal.h"
#include "provider/log.h"

namespace urxe::provider {

namespace {
// Prints `text` on stderr the first time `key` is seen in this process (one line per process and device).
void notice_once(const std::string& key, const std::string& text) {
  static std::mutex mu;
  static std::vector<std::string> seen;
  std::lock_guard g(mu);
  if (std::find(seen.begin(), seen.end(), key) != seen.end()) return;
  seen.push_back(key);
  std::fprintf(stderr, "%s\n", text.c_str());
}

uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (*end) {
    log_printf(engine::LogLevel::warn, "", "%s='%s' is not a number; using %llu", name, v,
               static_cast<unsigned long long>(fallback));
    return fallback;
  }
  return n;
}
}  // namespace

std::unique_ptr<engine::Port> make_port(const std::string& kind, const PortRequest& req, std::string& err) {
  dpdk::PortOptions opt;
  if (!dpdk::parse_port_kind(kind, opt.kind)) {
    err = "unknown port kind '" + kind + "' (" + dpdk::port_kind_list() + ")";
    return nullptr;
  }
  opt.ifname = req.config.netdev;
  opt.dpdk_args = req.config.dpdk;
  opt.gids = req.attr.gids;
  opt.attr = req.attr;
  opt.bus = req.config.name;  // loop: every context of this device in this process
  opt.gso = req.config.gso ? -1 : 0;
  if (const char* e = std::getenv("URXE_GSO"); e && *e) opt.gso = std::string(e) != "0";  // one run
  std::string notice;
  auto port = dpdk::open_port(opt, &notice, &err);
  // One line per process and device, the first time a port is opened (stderr, as rdma-core warns).
  if (port && !notice.empty()) notice_once(req.config.name + " port", notice);
  return port;
}

void add_local_path(std::unique_ptr<engine::Port>& port, const DeviceConfig& config, int ifindex,
                    const std::string& ibdev_path, uint32_t block, uint32_t block_size) {
  bool on = config.uses_local_path();
  const char* e = std::getenv("URXE_LOCAL_PATH");
  if (e && *e) on = std::string(e) != "0";
  if (!on) return;
  if (const std::string q = hostnet::ingress_qdisc(ifindex); !q.empty() && !(e && *e)) {
    // tc filters on what comes in (policing, netem through an ifb): frames must keep crossing them.
    notice_once(config.name + " local", "urxe: " + config.netdev + ": tc qdisc " + q +
                                            " on its ingress: frames to other urxe devices "
                                            "of this host go through " +
                                            config.netdev +
                                            ", not shared memory (URXE_LOCAL_PATH=1 overrides)");
    return;
  }
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

dpdk::CaptureConfig capture_config(const DeviceConfig& dev) {
  dpdk::CaptureConfig c;
  c.dir = dev.pcap;
  const char* e = std::getenv("URXE_PCAP");
  if (e && *e) c.dir = std::strcmp(e, "off") == 0 ? "" : e;
  c.file_bytes = env_u64("URXE_PCAP_SIZE", dev.pcap_size_mb) << 20;
  c.files = static_cast<uint32_t>(env_u64("URXE_PCAP_FILES", dev.pcap_files));
  c.device = dev.name;
  c.netdev = dev.netdev;
  c.log = [name = dev.name](engine::LogLevel level, const std::string& line) {
    log_printf(level, name, "%s", line.c_str());
  };
  return c;
}

std::unique_ptr<engine::Port> open_capture(engine::Port& inner, const DeviceConfig& dev) {
  return dpdk::open_capture(inner, capture_config(dev));
}

}  // namespace urxe::provider
