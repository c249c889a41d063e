#include "provider/cli.h"

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "provider/device_tree.h"

namespace urxe::provider::cli {
namespace {

std::string gid_text(const GidEntry& e) {
  // Compact form for `link show`: IPv4-mapped GIDs as dotted quads.
  const auto& g = e.gid;
  bool v4 = true;
  for (int i = 0; i < 10; ++i) v4 = v4 && g[i] == 0;
  v4 = v4 && g[10] == 0xff && g[11] == 0xff;
  if (v4)
    return std::to_string(g[12]) + "." + std::to_string(g[13]) + "." + std::to_string(g[14]) + "." +
           std::to_string(g[15]);
  return format_gid(g);
}

int link_show(const Paths& paths, const char* only, std::ostream& out, std::ostream& err) {
  bool found = false;
  for (const DeviceInfo& d : list_devices(paths)) {
    if (only && d.config.name != only) continue;
    found = true;
    // Like `rdma link show`: "link urxe0/1 state ACTIVE physical_state LINK_UP netdev eth0"
    NetdevInfo nd;
    const bool up = query_netdev(d.config.netdev, nd) && nd.up;
    out << "link " << d.config.name << "/1 state " << (up ? "ACTIVE" : "DOWN") << " physical_state "
        << (up ? "LINK_UP" : "DISABLED") << " netdev " << d.config.netdev << " port " << d.config.port;
    if (d.config.mtu) out << " mtu " << d.config.mtu;
    if (!d.config.dpdk.empty()) out << " dpdk '" << d.config.dpdk << "'";
    if (!d.config.pcap.empty())
      out << " pcap " << d.config.pcap << " pcap-size " << d.config.pcap_size_mb << " pcap-files "
          << d.config.pcap_files;
    out << " dev " << d.uverbs_name << (d.dev_node_ok ? "" : " (no /dev node)")
        << (d.netdev_present ? "" : " (netdev missing)") << "\n";
    for (size_t i = 0; i < d.gids.size(); ++i) out << "    gid " << gid_text(d.gids[i]) << "\n";
  }
  if (only && !found) {
    err << "urxe: no device '" << only << "'\n";
    return 1;
  }
  return 0;
}

int refresh(const Paths& paths, const char* only, std::ostream& err) {
  int rc = 0;
  for (const DeviceInfo& d : list_devices(paths)) {
    if (only && d.config.name != only) continue;
    std::string e;
    if (refresh_gids(paths, d.config.name, e) != 0) {
      err << "urxe: " << e << "\n";
      rc = 1;
    }
  }
  return rc;
}

// Address changes arrive as RTM_NEWADDR/RTM_DELADDR multicasts; every one triggers a full refresh (cheap).
int watch(const Paths& paths, std::ostream& err) {
  int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) {
    err << "urxe: netlink: " << std::strerror(errno) << "\n";
    return 1;
  }
  sockaddr_nl sa{};
  sa.nl_family = AF_NETLINK;
  sa.nl_groups = RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR | RTMGRP_LINK;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    err << "urxe: netlink bind: " << std::strerror(errno) << "\n";
    ::close(fd);
    return 1;
  }
  refresh(paths, nullptr, err);
  char buf[16384];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != ENOBUFS) break;  // ENOBUFS: we missed some; refreshing covers it
    refresh(paths, nullptr, err);
  }
  ::close(fd);
  return 1;
}

void usage(std::ostream& err) {
  err << "usage: urxe link add NAME netdev IFACE [--dpdk 'ARGS'] [--mtu N] [--port KIND] [--gids N]\n"
         "                     [--pcap DIR] [--pcap-size MB] [--pcap-files N]\n"
         "       urxe link del NAME | show [NAME] | refresh [NAME] | watch\n";
}

}  // namespace

int link_main(int argc, char** argv, std::ostream& out, std::ostream& err) {
  const Paths paths = Paths::from_env();
  const std::string cmd = argc > 0 ? argv[0] : "show";
  if (cmd == "show" || cmd == "list") return link_show(paths, argc > 1 ? argv[1] : nullptr, out, err);
  if (cmd == "refresh") return refresh(paths, argc > 1 ? argv[1] : nullptr, err);
  if (cmd == "watch") return watch(paths, err);
  if (cmd == "del" || cmd == "delete") {
    if (argc != 2) return usage(err), 2;
    std::string e;
    if (remove_device(paths, argv[1], e) != 0) {
      err << "urxe: " << e << "\n";
      return 1;
    }
    return 0;
  }
  if (cmd == "add") {
    if (argc < 4 || std::string(argv[2]) != "netdev") return usage(err), 2;
    DeviceConfig cfg;
    cfg.name = argv[1];
    cfg.netdev = argv[3];
    for (int i = 4; i < argc; ++i) {
      std::string k = argv[i];
      if (i + 1 >= argc) return usage(err), 2;
      std::string v = argv[++i];
      char* end = nullptr;
      if (k == "--dpdk") {
        cfg.dpdk = v;
      } else if (k == "--mtu") {
        cfg.mtu = static_cast<uint32_t>(std::strtoul(v.c_str(), &end, 10));
      } else if (k == "--port") {
        cfg.port = v;
      } else if (k == "--gids") {
        cfg.gid_tbl_len = static_cast<uint32_t>(std::strtoul(v.c_str(), &end, 10));
      } else if (k == "--pcap") {
        cfg.pcap = v;
      } else if (k == "--pcap-size") {
        cfg.pcap_size_mb = static_cast<uint32_t>(std::strtoul(v.c_str(), &end, 10));
      } else if (k == "--pcap-files") {
        cfg.pcap_files = static_cast<uint32_t>(std::strtoul(v.c_str(), &end, 10));
      } else {
        return usage(err), 2;
      }
    }
    std::string e;
    if (create_device(paths, cfg, e) != 0) {
      err << "urxe: " << e << "\n";
      return 1;
    }
    out << cfg.name << ": uverbs" << cfg.uverbs << " on " << cfg.netdev << "\n";
    return 0;
  }
  usage(err);
  return 2;
}

int env_main(int argc, char** argv, std::ostream& out, std::ostream& /*err*/) {
  if (argc > 0 && std::string(argv[0]) == "--driver") {
    out << driver_file_content();
    return 0;
  }
  const char* pre = std::getenv("LD_PRELOAD");
  for (auto& [k, v] : app_environment(Paths::from_env(), pre ? pre : ""))
    out << "export " << k << "='" << v << "'\n";
  return 0;
}

int run_main(int argc, char** argv, std::ostream& err) {
  int i = 0;
  if (i < argc && std::string(argv[i]) == "--") ++i;
  if (i >= argc) {
    err << "usage: urxe run -- CMD [ARGS...]\n";
    return 2;
  }
  const char* pre = std::getenv("LD_PRELOAD");
  for (auto& [k, v] : app_environment(Paths::from_env(), pre ? pre : "")) ::setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> args(argv + i, argv + argc);
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  err << "urxe: " << args[0] << ": " << std::strerror(errno) << "\n";
  return 127;
}

}  // namespace urxe::provider::cli
