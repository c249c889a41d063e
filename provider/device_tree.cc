#include "provider/device_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cm/protocol.h"
#include "cm/ucma_abi.h"
#include "hostnet/gid.h"
#include "hostnet/interface.h"
#include "hostnet/netns.h"
#include "provider/fault_rules.h"
#include "provider/shared_file.h"
#include "provider/stats.h"

#ifndef URXE_PROVIDER_BUILD_PATH
#define URXE_PROVIDER_BUILD_PATH ""
#endif
#ifndef URXE_PROVIDER_INSTALL_PATH
#define URXE_PROVIDER_INSTALL_PATH "/usr/local/lib/liburxe-rdmav34.so"
#endif
#ifndef URXE_BUILD_DIR
#define URXE_BUILD_DIR ""
#endif
#ifndef URXE_COMMAND_BUILD_PATH
#define URXE_COMMAND_BUILD_PATH ""
#endif
#ifndef URXE_COMMAND_INSTALL_PATH
#define URXE_COMMAND_INSTALL_PATH "/usr/local/bin/urxe"
#endif
#ifndef URXE_BINDIR_FROM_PROVIDER_INSTALL_DIR
#define URXE_BINDIR_FROM_PROVIDER_INSTALL_DIR "../../../bin"
#endif

namespace fs = std::filesystem;

namespace urxe::provider {
namespace {

constexpr const char* kV1 = "IB/RoCE v1";
constexpr const char* kV2 = "RoCE v2";

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  if (!f) return {};
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Writes a whole file through a temporary and a rename, so a concurrent reader (libibverbs reading GIDs)
// sees the old or the new contents, never a torn one. The rename changes only the parent directory.
bool write_atomic(const std::string& path, const std::string& text) {
  fs::path p(path);
  std::string tmp = (p.parent_path() / ("." + p.filename().string() + ".tmp")).string();
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) return false;
    f << text;
    if (!f.flush()) return false;
  }
  return ::rename(tmp.c_str(), path.c_str()) == 0;
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::trunc);
  if (!f) return false;
  f << text;
  return static_cast<bool>(f.flush());
}

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() >= 64) return false;
  // libibverbs' rxe provider claims "rdma_device:*Nrxe*" by name; a urxe device must not look like rxe.
  if (name.rfind("rxe", 0) == 0) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  });
}

std::string class_ib(const Paths& p) {
  return p.sysfs() + "/class/infiniband";
}
std::string class_verbs(const Paths& p) {
  return p.sysfs() + "/class/infiniband_verbs";
}
std::string class_rdma_cm(const Paths& p) {
  return p.sysfs() + "/class/misc/rdma_cm";
}

// Serialises link add/del on one run directory.
struct RunLock {
  int fd = -1;
  explicit RunLock(const Paths& p) {
    std::error_code ec;
    fs::create_directories(p.run_dir, ec);
    fd = ::open((p.run_dir + "/.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) ::flock(fd, LOCK_EX);
  }
  ~RunLock() {
    if (fd >= 0) ::close(fd);
  }
};

std::string config_text(const DeviceConfig& c) {
  std::ostringstream o;
  o << "name=" << c.name << "\nnetdev=" << c.netdev << "\ndpdk=" << c.dpdk << "\nmtu=" << c.mtu
    << "\nport=" << c.port << "\ngid_tbl_len=" << c.gid_tbl_len << "\nuverbs=" << c.uverbs << "\n";
  if (!c.netns.empty()) o << "netns=" << c.netns << "\n";
  if (!c.local_path) o << "local_path=0\n";
  if (!c.gso) o << "gso=0\n";
  if (!c.pcap.empty())
    o << "pcap=" << c.pcap << "\npcap_size=" << c.pcap_size_mb << "\npcap_files=" << c.pcap_files << "\n";
  return o.str();
}

void write_gid_files(const std::string& port_dir, uint32_t n, const std::vector<GidEntry>& table) {
  for (uint32_t i = 0; i < n; ++i) {
    GidEntry e;
    if (i < table.size()) e = table[i];
    std::string idx = std::to_string(i);
    write_atomic(port_dir + "/gids/" + idx, hostnet::format_gid(e.gid) + "\n");
    write_atomic(port_dir + "/gid_attrs/types/" + idx,
                 std::string(e.type == GidType::roce_v1 ? kV1 : kV2) + "\n");
    // An empty ndevs file reads as "no netdev" (ifindex 0); a wrong name would make query_gid_ex fail.
    write_atomic(port_dir + "/gid_attrs/ndevs/" + idx, e.ndev.empty() ? std::string() : e.ndev + "\n");
  }
}

}  // namespace

PortSpeed eth_port_speed(uint32_t mbps) {
  // IB width codes (ibv_port_attr.active_width): 1 = 1X, 2 = 4X; speed codes (active_speed): 1 SDR, 2 DDR,
  // 8 FDR10, 32 EDR, 64 HDR. The thresholds are ib_get_eth_speed's.
  constexpr uint8_t w1 = 1, w4 = 2, sdr = 1, ddr = 2, fdr10 = 8, edr = 32, hdr = 64;
  struct Step {
    uint32_t max_mbps;
    PortSpeed s;
  };
  static constexpr Step kSteps[] = {
      {2500, {w1, sdr}},  {5000, {w1, ddr}},    {10000, {w1, fdr10}}, {20000, {w4, ddr}},
      {25000, {w1, edr}}, {40000, {w4, fdr10}}, {50000, {w1, hdr}},   {100000, {w4, edr}},
  };
  if (mbps == 0) return {w1, sdr};
  for (const Step& st : kSteps)
    if (mbps <= st.max_mbps) return st.s;
  return {w4, hdr};
}

std::string port_rate_text(PortSpeed s) {
  // Per lane in 0.1 Gb/s, by speed code; an unknown code reads as SDR, as the kernel shows it.
  struct SpeedName {
    uint8_t code;
    int tenths;
    const char* name;
  };
  static constexpr SpeedName kSpeeds[] = {{1, 25, "SDR"},    {2, 50, "DDR"},    {4, 100, "QDR"},
                                          {8, 100, "FDR10"}, {16, 140, "FDR"},  {32, 250, "EDR"},
                                          {64, 500, "HDR"},  {128, 1000, "NDR"}};
  // Lanes by width code (1X, 4X, 8X, 12X, 2X).
  static constexpr std::pair<uint8_t, int> kWidths[] = {{1, 1}, {2, 4}, {4, 8}, {8, 12}, {16, 2}};
  SpeedName sp = kSpeeds[0];
  for (const SpeedName& k : kSpeeds)
    if (k.code == s.speed) sp = k;
  int lanes = 1;
  for (const auto& [code, n] : kWidths)
    if (code == s.width) lanes = n;
  const int tenths = sp.tenths * lanes;
  return std::to_string(tenths / 10) + (tenths % 10 ? ".5" : "") + " Gb/sec (" + std::to_string(lanes) +
         "X " + sp.name + ")";
}

std::string port_state_text(bool active) {
  return active ? "4: ACTIVE" : "1: DOWN";
}
std::string port_phys_state_text(bool active) {
  return active ? "5: LinkUp" : "3: Disabled";
}

int refresh_port_state(const std::string& ibdev_path, const DeviceConfig& cfg, std::string& err) {
  if (!hostnet::in_current_netns(cfg.netns)) return 0;
  NetdevInfo nd;
  const bool active = query_netdev(cfg.netdev, nd) && nd.up;
  const std::string port_dir = ibdev_path + "/ports/1";
  const std::pair<const char*, std::string> files[] = {
      {"state", port_state_text(active)},
      {"phys_state", port_phys_state_text(active)},
      {"rate", port_rate_text(eth_port_speed(hostnet::link_speed_mbps(cfg.netdev)))},
  };
  int rc = 0;
  for (const auto& [name, text] : files) {
    const std::string path = port_dir + "/" + name;
    if (read_text(path) == text) continue;  // unchanged: no write a reader could see half of
    if (!write_shared_file(path, text + "\n", err) && rc == 0) rc = errno ? errno : EIO;
  }
  return rc;
}

Paths Paths::from_env() {
  Paths p;
  if (const char* r = std::getenv("URXE_RUN_DIR"); r && *r) p.run_dir = r;
  if (const char* d = std::getenv("URXE_DEV_DIR"); d && *d) p.dev_dir = d;
  return p;
}

bool query_netdev(const std::string& netdev, NetdevInfo& out, std::string* err) {
  hostnet::Interface i;
  if (!hostnet::query_interface(netdev, i, err, false)) return false;
  out.mac = i.mac;
  out.mtu = i.mtu;
  out.ifindex = i.ifindex;
  out.up = i.active();
  return true;
}

std::vector<GidEntry> build_gid_table(const std::string& netdev) {
  std::vector<GidEntry> table;
  for (const wire::Gid& g : hostnet::query_gid_table(netdev)) table.push_back({g, GidType::roce_v2, netdev});
  return table;
}

int create_device(const Paths& paths, DeviceConfig& cfg, std::string& err,
                  const std::vector<wire::FaultRule>& fault_rules) {
  if (!valid_name(cfg.name)) {
    err = "bad device name '" + cfg.name + "' (letters, digits, _-. ; not starting with 'rxe')";
    return EINVAL;
  }
  if (cfg.gid_tbl_len < 2 || cfg.gid_tbl_len > 1024) {
    err = "gid_tbl_len must be 2..1024";
    return EINVAL;
  }
  NetdevInfo nd;
  if (!query_netdev(cfg.netdev, nd, &err)) return ENODEV;
  cfg.netns = hostnet::current_netns().to_string();

  RunLock lock(paths);
  std::error_code ec;
  const std::string dev_path = class_ib(paths) + "/" + cfg.name;
  if (fs::exists(dev_path)) {
    err = "device '" + cfg.name + "' exists";
    return EEXIST;
  }
  fs::create_directories(class_verbs(paths), ec);
  fs::create_directories(paths.dev_dir, ec);
  if (ec) {
    err = paths.dev_dir + ": " + ec.message();
    return EACCES;
  }
  if (cfg.uverbs < 0) {
    for (int n = 0; n < 1024 && cfg.uverbs < 0; ++n) {
      std::string u = "uverbs" + std::to_string(n);
      struct stat st {};
      if (!fs::exists(class_verbs(paths) + "/" + u) && ::lstat((paths.dev_dir + "/" + u).c_str(), &st) != 0)
        cfg.uverbs = n;
    }
    if (cfg.uverbs < 0) {
      err = "no free uverbs index";
      return ENOSPC;
    }
  }
  const std::string uverbs = "uverbs" + std::to_string(cfg.uverbs);

  // The device directory and everything in it first; the infiniband_verbs entry that makes libibverbs
  // look at it last.
  const std::string port_dir = dev_path + "/ports/1";
  for (const char* d : {"/gids", "/gid_attrs/types", "/gid_attrs/ndevs", "/pkeys"})
    fs::create_directories(port_dir + d, ec);
  // Tools find a device's interface under device/net/ (the parent device's netdevs in the kernel's tree).
  if (!ec) fs::create_directories(dev_path + "/device/net", ec);
  if (ec) {
    err = port_dir + ": " + ec.message();
    return EACCES;
  }
  // Absolute, so it resolves in whichever view of /sys the reader has (its network namespace's).
  fs::create_symlink("/sys/class/net/" + cfg.netdev, dev_path + "/device/net/" + cfg.netdev, ec);
  char cap_mask[16];
  std::snprintf(cap_mask, sizeof cap_mask, "0x%08x\n", kPortCapFlags);
  const uint64_t guid = hostnet::eui64(nd.mac);  // the node GUID, as rxe derives it
  bool ok = write_file(dev_path + "/node_type", "1: CA\n") &&
            write_file(dev_path + "/node_guid", hostnet::format_guid(guid) + "\n") &&
            write_file(dev_path + "/sys_image_guid", hostnet::format_guid(guid) + "\n") &&
            write_file(dev_path + "/board_id", "urxe\n") && write_file(dev_path + "/fw_ver", "0.1.0\n") &&
            write_file(dev_path + "/urxe.conf", config_text(cfg)) &&
            // Byte i locked (OFD lock) by a context = that context owns QPN block i; see provider.
            write_file(dev_path + "/urxe.qpn", "") && write_file(port_dir + "/pkeys/0", "0xffff\n") &&
            // A RoCE port has no LID, subnet manager or LMC: the kernel shows zeros.
            write_file(port_dir + "/link_layer", "Ethernet\n") && write_file(port_dir + "/lid", "0x0\n") &&
            write_file(port_dir + "/sm_lid", "0x0\n") && write_file(port_dir + "/lid_mask_count", "0\n") &&
            write_file(port_dir + "/sm_sl", "0\n") && write_file(port_dir + "/cap_mask", cap_mask) &&
            refresh_port_state(dev_path, cfg, err) == 0;
  if (!ok) {
    err = dev_path + ": cannot write";
    return EIO;
  }
  // Every process that opens the device takes a lock in this file, whoever it runs as.
  ::chmod((dev_path + "/urxe.qpn").c_str(), 0666);
  write_gid_files(port_dir, cfg.gid_tbl_len, build_gid_table(cfg.netdev));
  // Counters (provider/stats.h): made now, since the device directory must not change once created.
  if (!init_device_stats(dev_path, cfg.netdev, err)) return EIO;
  // Fault rules (provider/fault_rules.h): their directory now for the same reason; a device that cannot
  // start with the rules asked for is not made.
  if (!init_fault_rules(dev_path, fault_rules, err)) {
    fs::remove_all(dev_path, ec);
    return EIO;
  }

  ok = write_file(class_verbs(paths) + "/abi_version", "6\n");
  const std::string vdir = class_verbs(paths) + "/" + uverbs;
  fs::create_directories(vdir, ec);
  ok = ok && !ec && write_file(vdir + "/ibdev", cfg.name + "\n") && write_file(vdir + "/dev", "1:3\n") &&
       write_file(vdir + "/abi_version", "1\n");
  if (!ok) {
    err = vdir + ": cannot write";
    return EIO;
  }
  // The RDMA CM's ABI file, made with the first device and kept while any is there (librdmacm checks it).
  // No /dev/infiniband/rdma_cm: with /dev/null's numbers librdmacm would take whatever its response
  // buffers held for the kernel's answers (UCX's UCP crashed so); without one it fails cleanly (ENOENT) and
  // applications fall back to their other connection managers.
  fs::create_directories(class_rdma_cm(paths), ec);
  if (ec || !write_file(class_rdma_cm(paths) + "/abi_version", std::to_string(cm::kUcmaAbiVersion) + "\n")) {
    err = class_rdma_cm(paths) + ": cannot write";
    fs::remove_all(vdir, ec);
    fs::remove_all(dev_path, ec);
    return EIO;
  }
  write_cc_params(dev_path, engine::EngineConfig::Dcqcn{});
  // The CM service's directory, sticky and world-writable like /tmp: the first RDMA CM application of any
  // user starts the service there, also when root made the run directory.
  const std::string service_dir = urxe::cm::cm_dir(paths.run_dir);
  if (::mkdir(service_dir.c_str(), 01777) == 0) ::chmod(service_dir.c_str(), 01777);
  // /dev/null's numbers: libibverbs requires a character device whose rdev matches "dev".
  const std::string node = paths.dev_dir + "/" + uverbs;
  if (::mknod(node.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {
    ::chmod(node.c_str(), 0666);
  } else if (errno != EEXIST && ::symlink("/dev/null", node.c_str()) != 0 && errno != EEXIST) {
    err = node + ": " + std::strerror(errno);
    fs::remove_all(vdir, ec);
    fs::remove_all(dev_path, ec);
    return EACCES;
  }
  return 0;
}

int remove_device(const Paths& paths, const std::string& name, std::string& err) {
  RunLock lock(paths);
  const std::string dev_path = class_ib(paths) + "/" + name;
  DeviceConfig cfg;
  if (!valid_name(name) || !load_device_config(dev_path, cfg)) {
    err = "no urxe device '" + name + "'";
    return ENODEV;
  }
  std::error_code ec;
  if (cfg.uverbs >= 0) {
    const std::string uverbs = "uverbs" + std::to_string(cfg.uverbs);
    if (read_text(class_verbs(paths) + "/" + uverbs + "/ibdev") == name) {
      fs::remove_all(class_verbs(paths) + "/" + uverbs, ec);
      ::unlink((paths.dev_dir + "/" + uverbs).c_str());
    }
  }
  fs::remove_all(dev_path, ec);
  if (ec) {
    err = dev_path + ": " + ec.message();
    return EIO;
  }
  // The last device takes the RDMA CM's ABI file with it.
  bool last = true;
  for (auto& ent : fs::directory_iterator(class_verbs(paths), ec))
    if (ent.path().filename().string().rfind("uverbs", 0) == 0) last = false;
  if (last) fs::remove_all(class_rdma_cm(paths), ec);
  return 0;
}

bool read_device_config(const std::string& ibdev_path, DeviceConfig& cfg) {
  if (!load_device_config(ibdev_path, cfg)) return false;
  // Unknown on either side (a tree made before namespaces were recorded, no /proc here): visible, as before.
  return hostnet::in_current_netns(cfg.netns);
}

bool load_device_config(const std::string& ibdev_path, DeviceConfig& cfg) {
  std::ifstream f(ibdev_path + "/urxe.conf");
  if (!f) return false;
  std::string line;
  bool have_name = false;
  while (std::getline(f, line)) {
    auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string k = line.substr(0, eq), v = line.substr(eq + 1);
    char* end = nullptr;
    if (k == "name") {
      cfg.name = v;
      have_name = true;
    } else if (k == "netdev") {
      cfg.netdev = v;
    } else if (k == "dpdk") {
      cfg.dpdk = v;
    } else if (k == "port") {
      cfg.port = v;
    } else if (k == "mtu") {
      cfg.mtu = static_cast<uint32_t>(std::strtoul(v.c_str(), &end, 10));
    } else if (k == "gid_tbl_len") {
      cfg.gid_tbl_len = static_cast<uint32_t>(std::strtoul(v.c_str(), &end, 10));
    } else if (k == "uverbs") {
      cfg.uverbs = static_cast<int>(std::strtol(v.c_str(), &end, 10));
    } else if (k == "pcap") {
      cfg.pcap = v;
    } else if (k == "pcap_size") {
      cfg.pcap_size_mb = static_cast<uint32_t>(std::strtoul(v.c_str(), &end, 10));
    } else if (k == "pcap_files") {
      cfg.pcap_files = static_cast<uint32_t>(std::strtoul(v.c_str(), &end, 10));
    } else if (k == "netns") {
      cfg.netns = v;
    } else if (k == "local_path") {
      cfg.local_path = v != "0";
    } else if (k == "gso") {
      cfg.gso = v != "0";
    }
  }
  return have_name && !cfg.netdev.empty() && cfg.gid_tbl_len > 0;
}

std::vector<std::pair<uint32_t, GidEntry>> read_gid_table(const std::string& ibdev_path, uint32_t n) {
  std::vector<std::pair<uint32_t, GidEntry>> out;
  const std::string port_dir = ibdev_path + "/ports/1";
  for (uint32_t i = 0; i < n; ++i) {
    GidEntry e;
    std::string idx = std::to_string(i);
    if (!hostnet::parse_gid(read_text(port_dir + "/gids/" + idx), e.gid)) continue;
    if (e.gid == std::array<uint8_t, 16>{}) continue;
    e.type = read_text(port_dir + "/gid_attrs/types/" + idx) == kV1 ? GidType::roce_v1 : GidType::roce_v2;
    e.ndev = read_text(port_dir + "/gid_attrs/ndevs/" + idx);
    out.emplace_back(i, e);
  }
  return out;
}

std::vector<DeviceInfo> list_devices(const Paths& paths) {
  std::vector<DeviceInfo> out;
  std::error_code ec;
  for (auto& ent : fs::directory_iterator(class_verbs(paths), ec)) {
    const std::string u = ent.path().filename().string();
    if (u.rfind("uverbs", 0) != 0) continue;
    DeviceInfo info;
    info.uverbs_name = u;
    std::string ibdev = read_text(ent.path().string() + "/ibdev");
    info.ibdev_path = class_ib(paths) + "/" + ibdev;
    if (ibdev.empty() || !load_device_config(info.ibdev_path, info.config)) continue;
    for (auto& [idx, e] : read_gid_table(info.ibdev_path, info.config.gid_tbl_len)) info.gids.push_back(e);
    struct stat st {};
    info.dev_node_ok = ::stat((paths.dev_dir + "/" + u).c_str(), &st) == 0 && S_ISCHR(st.st_mode);
    NetdevInfo nd;
    info.netdev_present = query_netdev(info.config.netdev, nd);
    info.other_netns = !hostnet::in_current_netns(info.config.netns);
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(),
            [](const DeviceInfo& a, const DeviceInfo& b) { return a.config.uverbs < b.config.uverbs; });
  return out;
}

std::vector<DeviceConfig> remove_vanished_devices(const Paths& paths) {
  std::vector<DeviceConfig> removed;
  for (const DeviceInfo& d : list_devices(paths)) {
    hostnet::NetnsId ns;
    if (!hostnet::NetnsId::parse(d.config.netns, ns)) continue;  // no namespace recorded: cannot tell
    if (hostnet::interface_presence(ns, d.config.netdev) != hostnet::Presence::gone) continue;
    std::string err;
    if (remove_device(paths, d.config.name, err) == 0) removed.push_back(d.config);
  }
  return removed;
}

int refresh_gids(const Paths& paths, const std::string& name, std::string& err) {
  const std::string dev_path = class_ib(paths) + "/" + name;
  DeviceConfig cfg;
  if (!valid_name(name) || !load_device_config(dev_path, cfg)) {
    err = "no urxe device '" + name + "'";
    return ENODEV;
  }
  std::vector<GidEntry> table;
  return sync_gid_table(dev_path, cfg, table, err);
}

std::vector<GidEntry> merge_gid_table(const std::vector<std::pair<uint32_t, GidEntry>>& current,
                                      const std::vector<GidEntry>& live, uint32_t n) {
  std::vector<GidEntry> out(n);
  if (n == 0) return out;
  std::vector<bool> placed(live.size(), false);
  // The default GID always sits in slot 0.
  if (!live.empty()) {
    out[0] = live[0];
    placed[0] = true;
  }
  // Addresses still present keep their slots.
  for (const auto& [idx, e] : current) {
    if (idx == 0 || idx >= n) continue;
    for (size_t k = 1; k < live.size(); ++k)
      if (!placed[k] && live[k].gid == e.gid && live[k].type == e.type) {
        out[idx] = live[k];
        placed[k] = true;
        break;
      }
  }
  // New ones take the lowest free slots, in the kernel's order (IPv4, then IPv6).
  uint32_t free_slot = 1;
  for (size_t k = 1; k < live.size(); ++k) {
    if (placed[k]) continue;
    while (free_slot < n && !out[free_slot].ndev.empty()) ++free_slot;
    if (free_slot >= n) break;
    out[free_slot] = live[k];
  }
  return out;
}

int sync_gid_table(const std::string& ibdev_path, const DeviceConfig& cfg, std::vector<GidEntry>& table,
                   std::string& err) {
  const std::string port_dir = ibdev_path + "/ports/1";
  // One writer at a time per device (apps' providers and `urxe link refresh/watch` all sync): a lock on the
  // directory itself, which an app that may only read the tree can take too.
  const int lock_fd = ::open(port_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (lock_fd >= 0) ::flock(lock_fd, LOCK_EX);
  // A vanished interface leaves an all-empty table (the kernel drops the GIDs too).
  const std::vector<GidEntry> live = build_gid_table(cfg.netdev);
  const auto current = read_gid_table(ibdev_path, cfg.gid_tbl_len);
  table = merge_gid_table(current, live, cfg.gid_tbl_len);
  int rc = 0;
  for (uint32_t i = 0; i < cfg.gid_tbl_len; ++i) {
    const GidEntry& e = table[i];
    const auto it = std::find_if(current.begin(), current.end(), [&](const auto& c) { return c.first == i; });
    const bool same = it == current.end()
                          ? e.ndev.empty()
                          : it->second.gid == e.gid && it->second.type == e.type && it->second.ndev == e.ndev;
    if (same) continue;
    const std::string idx = std::to_string(i);
    // An entry appears with its attributes before its GID and goes away GID first, so a reader never
    // pairs a GID with another entry's type or netdev.
    bool ok = true;
    if (e.ndev.empty()) ok = write_atomic(port_dir + "/gids/" + idx, hostnet::format_gid(e.gid) + "\n");
    ok = ok && write_atomic(port_dir + "/gid_attrs/types/" + idx,
                            std::string(e.type == GidType::roce_v1 ? kV1 : kV2) + "\n");
    ok = ok &&
         write_atomic(port_dir + "/gid_attrs/ndevs/" + idx, e.ndev.empty() ? std::string() : e.ndev + "\n");
    if (!e.ndev.empty())
      ok = ok && write_atomic(port_dir + "/gids/" + idx, hostnet::format_gid(e.gid) + "\n");
    if (!ok && rc == 0) {
      rc = errno ? errno : EIO;
      err = port_dir + ": cannot update GID " + idx + ": " + std::strerror(rc);
    }
  }
  if (lock_fd >= 0) ::close(lock_fd);
  std::string state_err;
  if (const int src = refresh_port_state(ibdev_path, cfg, state_err); src != 0 && rc == 0) {
    rc = src;
    err = state_err;
  }
  if (rc == 0 && live.size() > cfg.gid_tbl_len) {
    err = cfg.name + ": " + std::to_string(live.size()) + " GIDs, table holds " +
          std::to_string(cfg.gid_tbl_len);
    rc = ENOSPC;
  }
  return rc;
}

std::string provider_library_path() {
  if (const char* p = std::getenv("URXE_PROVIDER"); p && *p) return p;
  const std::string build = URXE_PROVIDER_BUILD_PATH, install = URXE_PROVIDER_INSTALL_PATH;
  const std::string build_dir = URXE_BUILD_DIR;
  std::error_code ec;
  const std::string exe = fs::read_symlink("/proc/self/exe", ec).string();
  // Next to the running program first, so a moved build tree or a relocated install (DESTDIR, another
  // prefix) finds its own copy: <build>/tools/urxe -> <build>/provider/, <prefix>/bin -> <prefix>/<libdir>.
  if (!exe.empty()) {
    const fs::path dir = fs::path(exe).parent_path();
    for (const fs::path& p : {dir / "../provider/liburxe-rdmav34.so",
                              dir / URXE_PROVIDER_INSTALL_FROM_BINDIR / "liburxe-rdmav34.so"})
      if (fs::exists(p, ec)) return fs::weakly_canonical(p, ec).string();
  }
  const bool in_build = !build_dir.empty() && exe.rfind(build_dir + "/", 0) == 0;
  const std::string& first = in_build ? build : install;
  const std::string& second = in_build ? install : build;
  if (!first.empty() && fs::exists(first, ec)) return first;
  if (!second.empty() && fs::exists(second, ec)) return second;
  return first.empty() ? second : first;
}

std::string urxe_command_path(const std::string& provider_so) {
  if (const char* p = std::getenv("URXE_BIN"); p && *p) return p;
  const std::string build = URXE_COMMAND_BUILD_PATH, install = URXE_COMMAND_INSTALL_PATH;
  const std::string build_dir = URXE_BUILD_DIR;
  std::error_code ec;
  if (!provider_so.empty()) {
    const fs::path dir = fs::absolute(provider_so, ec).parent_path();
    for (const fs::path& p : {dir / "../tools/urxe", dir / URXE_BINDIR_FROM_PROVIDER_INSTALL_DIR / "urxe"})
      if (fs::exists(p, ec)) return fs::weakly_canonical(p, ec).string();
  }
  const bool in_build = !build_dir.empty() && provider_so.rfind(build_dir + "/", 0) == 0;
  const std::string& first = in_build ? build : install;
  const std::string& second = in_build ? install : build;
  if (!first.empty() && fs::exists(first, ec)) return first;
  if (!second.empty() && fs::exists(second, ec)) return second;
  return first.empty() ? second : first;
}

std::vector<std::pair<std::string, std::string>> app_environment(const Paths& paths,
                                                                 const std::string& current_ld_preload) {
  const std::string lib = provider_library_path();
  std::string preload = lib;
  if (!current_ld_preload.empty()) {
    // Keep what is there; add the provider only once.
    preload = current_ld_preload;
    if (current_ld_preload.find(lib) == std::string::npos) preload += ":" + lib;
  }
  return {{"SYSFS_PATH", paths.sysfs()}, {"LD_PRELOAD", preload}};
}

std::string driver_file_content() {
  // libibverbs appends "-rdmav34.so" to an absolute driver path.
  std::string lib = provider_library_path();
  const std::string suffix = "-rdmav34.so";
  if (lib.size() > suffix.size() && lib.compare(lib.size() - suffix.size(), suffix.size(), suffix) == 0)
    lib.resize(lib.size() - suffix.size());
  return "driver " + lib + "\n";
}

void write_cc_params(const std::string& ibdev_path, const engine::EngineConfig::Dcqcn& p) {
  const std::string dir = ibdev_path + "/cc_params";
  std::error_code ec;
  fs::create_directories(dir, ec);
  for (const engine::CcParam& c : engine::kCcParams)
    write_file(dir + "/" + c.name, std::to_string(p.*c.field) + "\n");
}

void read_cc_params(const std::string& ibdev_path, engine::EngineConfig::Dcqcn& p) {
  for (const engine::CcParam& c : engine::kCcParams) {
    const std::string text = read_text(ibdev_path + "/cc_params/" + c.name);
    char* end = nullptr;
    errno = 0;
    const unsigned long v = std::strtoul(text.c_str(), &end, 10);
    if (end == text.c_str() || errno || v > UINT32_MAX || (*end && *end != '\n')) continue;
    p.*c.field = static_cast<uint32_t>(v);
  }
}

}  // namespace urxe::provider
