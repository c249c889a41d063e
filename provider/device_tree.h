// A urxe device as libibverbs sees it without a kernel: a fake sysfs tree (found through SYSFS_PATH), a
// /dev/infiniband/uverbsN node with /dev/null's numbers, and the device's config, kept inside the tree so the
// provider finds it from the ibdev_path libibverbs gives it.
//
// Layout under Paths::sysfs():
//   class/infiniband_verbs/abi_version                 "6"
//   class/infiniband_verbs/uverbsN/{ibdev,dev,abi_version}
//   class/misc/rdma_cm/abi_version                     "4" (librdmacm reads it; no /dev/infiniband/rdma_cm)
//   class/infiniband/<name>/{node_type,node_guid,sys_image_guid,board_id,fw_ver,urxe.conf,urxe.qpn}
//   class/infiniband/<name>/device/net/<netdev>        -> /sys/class/net/<netdev> (how tools find the netdev)
//   class/infiniband/<name>/ports/1/{gids,gid_attrs/types,gid_attrs/ndevs}/0..gid_tbl_len-1, pkeys/0
//   class/infiniband/<name>/ports/1/{state,phys_state,rate,link_layer,lid,sm_lid,lid_mask_count,sm_sl,cap_mask}
//   class/infiniband/<name>/ports/1/{hw_counters,counters}/  (provider/stats.h)
//   class/infiniband/<name>/urxe.fault/rules              the fault rules (provider/fault_rules.h)
// in the kernel's formats (drivers/infiniband/core/sysfs.c) with kernel rxe's values.
// class/infiniband/<name>/ itself is never changed after creation (its mtime is the device's identity to
// libibverbs); GIDs, the port's state and the counters are rewritten inside ports/1/.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dpdk/port_kind.h"
#include "engine/engine.h"
#include "wire/fault_rule.h"

namespace urxe::provider {

struct Paths {
  std::string run_dir = "/run/urxe";        // the tree lives in run_dir/sys
  std::string dev_dir = "/dev/infiniband";  // libibverbs hard-codes this; overridable for unit tests only
  std::string sysfs() const { return run_dir + "/sys"; }
  // run_dir from $URXE_RUN_DIR, dev_dir from $URXE_DEV_DIR, else the defaults above.
  static Paths from_env();
};

struct DeviceConfig {
  std::string name;    // IB device name, e.g. "urxe0" (must not start with "rxe")
  std::string netdev;  // the Ethernet interface the device sits on
  std::string dpdk;    // EAL/vdev arguments passed through to the DPDK port ("" = default)
  uint32_t mtu = 0;    // Ethernet MTU to use; 0 = the interface's
  // Packet I/O: a dpdk::PortKind's name (dpdk/port_kind.h). Kept as written: an unknown kind is reported
  // when a context opens its port.
  std::string port{dpdk::port_kind_name(dpdk::PortKind::automatic)};
  uint32_t gid_tbl_len = 16;
  int uverbs = -1;  // N of uverbsN; -1 at creation = lowest free
  // Live capture (dpdk/capture_port.h): directory ("" = off), MB per file (0 = no rotation), files kept
  // per process ring (0 = all).
  std::string pcap;
  uint32_t pcap_size_mb = 100;
  uint32_t pcap_files = 10;
  // The network namespace netdev was in at creation (hostnet::NetnsId text, "DEV:INO"): the device belongs
  // to it, as an rdma link belongs to its netdev's namespace in the kernel's exclusive mode. "" = every
  // namespace (trees made before it was recorded).
  std::string netns;
  // The same-host path (dpdk/local_port.h): frames to another urxe device of this run directory go through
  // shared memory instead of the interface. Off for a device whose interface must see every frame (netem, a
  // firewall, a capture on the veth): `urxe link add ... --no-local-path`.
  bool local_path = true;
  // UDP GSO on the kernel-socket port (dpdk/README.md): runs of equal-size frames of one flow leave as one
  // datagram where the interface is a veth. Off for a veth whose other end cannot take such datagrams (a
  // DPDK af_packet or AF_XDP receiver) or is captured frame by frame: `urxe link add ... --no-gso`.
  bool gso = true;
  // Whether the device takes the same-host path: asked for, and a port with an interface (not loop/null).
  bool uses_local_path() const { return local_path && !dpdk::in_memory_port(port); }
};

enum class GidType { roce_v1, roce_v2 };

struct GidEntry {
  std::array<uint8_t, 16> gid{};
  GidType type = GidType::roce_v2;
  std::string ndev;  // "" for an unused slot
};

// The provider's view of its interface (hostnet::Interface cut down): `up` is the port's ACTIVE, i.e.
// IFF_UP and IFF_RUNNING.
struct NetdevInfo {
  std::array<uint8_t, 6> mac{};
  uint32_t mtu = 0;
  int ifindex = 0;
  bool up = false;
};

struct DeviceInfo {
  DeviceConfig config;
  std::string uverbs_name;      // "uverbs0"
  std::string ibdev_path;       // sysfs()/class/infiniband/<name>
  std::vector<GidEntry> gids;   // as currently in the tree, unused slots left out
  bool dev_node_ok = false;     // /dev/infiniband/uverbsN exists
  bool netdev_present = false;  // in the caller's network namespace
  bool other_netns = false;     // the device belongs to another network namespace (config.netns)
};

// Interface facts from the caller's network namespace (hostnet::query_interface, without addresses).
bool query_netdev(const std::string& netdev, NetdevInfo& out, std::string* err = nullptr);

// The device's GID table (hostnet::query_gid_table: the kernel's order, one RoCE v2 entry per address, so
// a sysfs GID index is the engine's sgid_index) with `netdev` as every entry's ndev. Empty when the
// interface is not there.
std::vector<GidEntry> build_gid_table(const std::string& netdev);

// What kernel rxe reports for its port (rxe_query_port): the IB width and speed codes of ibv_port_attr
// that ib_get_eth_speed derives from the interface's ethtool speed (0 = unknown, e.g. lo or a virtio NIC
// without one: 1X SDR, as the kernel's default of 1000 Mb/s gives), and the port capabilities
// (IB_PORT_CM_SUP only).
struct PortSpeed {
  uint8_t width = 1;  // IB_WIDTH_1X
  uint8_t speed = 1;  // IB_SPEED_SDR
};
PortSpeed eth_port_speed(uint32_t mbps);
inline constexpr uint32_t kPortCapFlags = 1u << 16;
// sysfs ports/N/rate text of a width and speed, e.g. "10 Gb/sec (1X FDR10)" (no newline).
std::string port_rate_text(PortSpeed s);
// sysfs ports/N/state and phys_state of a port whose interface is (not) up and running.
std::string port_state_text(bool active);       // "4: ACTIVE" / "1: DOWN"
std::string port_phys_state_text(bool active);  // "5: LinkUp" / "3: Disabled"

// Rewrites the facts of ports/1 that follow the interface (state, phys_state, rate) when they changed; in
// place, 0666, so the apps of every user refresh them as they do hw_counters. Nothing is written for a
// device of another network namespace (its interface cannot be seen from here). Returns 0 or an errno.
int refresh_port_state(const std::string& ibdev_path, const DeviceConfig& cfg, std::string& err);

// DCQCN's parameters as files <ibdev>/cc_params/<name> (engine kCcParams; mlx5 keeps them in debugfs
// cc_params/): written with the engine's defaults by create_device; a user may write a value there (one
// unsigned number) for the processes that open the device afterwards. read_cc_params sets what the files
// say and keeps the rest (a missing or unreadable file, a value that is not a number).
void write_cc_params(const std::string& ibdev_path, const engine::EngineConfig::Dcqcn& p);
void read_cc_params(const std::string& ibdev_path, engine::EngineConfig::Dcqcn& p);

// Creates the tree, the config and the /dev node. Returns 0 or an errno (EEXIST, ENODEV for a missing
// netdev, EINVAL for a bad name, ...) with a message in err. cfg.uverbs is filled in. `fault_rules`: the
// device's first fault rules (provider/fault_rules.h), in place before any application can see it.
int create_device(const Paths& paths, DeviceConfig& cfg, std::string& err,
                  const std::vector<wire::FaultRule>& fault_rules = {});
int remove_device(const Paths& paths, const std::string& name, std::string& err);
std::vector<DeviceInfo> list_devices(const Paths& paths);
// Rewrites ports/1/gids, types and ndevs from the interface's current addresses (sync_gid_table), and the
// port's state files (refresh_port_state). Returns 0 or an errno.
int refresh_gids(const Paths& paths, const std::string& name, std::string& err);

// The kernel's rules for updating a RoCE GID table (ib_cache): an address that stays keeps its slot, a
// removed one leaves its slot empty, a new one takes the lowest free slot; slot 0 is the default GID's.
// `current` as read_gid_table returns it, `live` as build_gid_table does (default GID first). The result
// has gid_tbl_len entries (unused: zero GID, empty ndev); addresses that do not fit are left out.
std::vector<GidEntry> merge_gid_table(const std::vector<std::pair<uint32_t, GidEntry>>& current,
                                      const std::vector<GidEntry>& live, uint32_t gid_tbl_len);
// Brings the device's GID files (ibdev_path/ports/1) up to date with the interface's addresses by
// merge_gid_table, under a lock on that directory, rewriting only the slots that change; then the port's
// state files (refresh_port_state). `table` receives
// the merged table even when the files may not be written (then EACCES/EROFS, with a message in err).
// Returns 0 or an errno.
int sync_gid_table(const std::string& ibdev_path, const DeviceConfig& cfg, std::vector<GidEntry>& table,
                   std::string& err);

// Reads ibdev_path/urxe.conf as the provider does in match_device and alloc_device: false if missing or
// invalid, and false for a device of another network namespace (config.netns), so libibverbs in a process
// lists only the devices whose interface is in its own namespace.
bool read_device_config(const std::string& ibdev_path, DeviceConfig& cfg);
// The same whatever the namespace (the `urxe` command manages every device of the run directory).
bool load_device_config(const std::string& ibdev_path, DeviceConfig& cfg);

// Removes the devices whose interface has gone (deleted, or its namespace destroyed), as the kernel removes
// an rdma link whose netdev goes (hostnet::interface_presence; a device it cannot tell about stays).
// Returns the removed devices' configs; a device that cannot be removed (no write access) stays listed.
std::vector<DeviceConfig> remove_vanished_devices(const Paths& paths);
// Reads the GID table back from ports/1 (used entries only, index order preserved in `index`).
std::vector<std::pair<uint32_t, GidEntry>> read_gid_table(const std::string& ibdev_path,
                                                          uint32_t gid_tbl_len);

// Where liburxe-rdmav34.so is: $URXE_PROVIDER if set; else the build tree's copy when the running
// program is in the build tree; else the install location.
std::string provider_library_path();
// Where the `urxe` command is, for a process that has only the provider library (the UCMA shim starts
// `urxe cm` with it): $URXE_BIN if set; else the copy next to `provider_so` (the build tree's
// <build>/provider/ -> <build>/tools/urxe, an install's <libdir>/libibverbs/ -> <prefix>/bin/urxe, so moved
// build trees and relocated installs find their own); else the build tree's when `provider_so` is in it;
// else the configured install location.
std::string urxe_command_path(const std::string& provider_so);
// The variables an unmodified verbs application needs (in order): SYSFS_PATH and LD_PRELOAD (the provider
// appended to any existing LD_PRELOAD). LD_PRELOAD registers the provider before device discovery and is the
// only way ibv_create_comp_channel works without a kernel.
std::vector<std::pair<std::string, std::string>> app_environment(const Paths& paths,
                                                                 const std::string& current_ld_preload = "");
// Contents for /etc/libibverbs.d/urxe.driver ("driver /abs/path/liburxe"): loads the provider without
// LD_PRELOAD (completion channels then fail cleanly with EBADF).
std::string driver_file_content();

}  // namespace urxe::provider
