#include "tools/diagnose.h"

#include <linux/capability.h>
#include <linux/netlink.h>
#include <net/if.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "dpdk/port_kind.h"
#include "hostnet/capability.h"

namespace fs = std::filesystem;

namespace urxe::tools {
namespace {

// The directory whose permissions decide whether `path` can be written or created: the path itself when it
// exists, else its nearest existing parent.
std::string deciding_dir(const std::string& path) {
  std::error_code ec;
  fs::path p(path);
  while (!fs::exists(p, ec) && p.has_parent_path() && p.parent_path() != p) p = p.parent_path();
  return p.string();
}

// "" when `path` is writable (or creatable), else "path: reason".
std::string why_unwritable(const std::string& path) {
  const std::string d = deciding_dir(path);
  if (::access(d.c_str(), W_OK | X_OK) == 0) return "";
  return (d == path ? path : path + " (in " + d + ")") + ": " + std::strerror(errno);
}

std::string kernel_devices() {
  std::string names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/sys/class/infiniband", ec))
    names += (names.empty() ? "" : ", ") + e.path().filename().string();
  return names;
}

}  // namespace

bool kernel_rdma_active() {
  if (const char* t = std::getenv("URXE_TEST_KERNEL_RDMA"); t && *t == '1') return true;
  // What libibverbs' rdmanl_socket_alloc does first; on a kernel without ib_core this fails with
  // EPROTONOSUPPORT and libibverbs falls back to the sysfs scan that finds urxe devices.
  const int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_RDMA);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

bool warn_if_kernel_rdma(const char* prog) {
  if (!kernel_rdma_active()) return false;
  const std::string devs = kernel_devices();
  std::fprintf(stderr,
               "%s: warning: this kernel has RDMA support loaded (ib_core answers NETLINK_RDMA%s%s%s), so "
               "libibverbs takes its device list from the kernel and ignores SYSFS_PATH: applications will "
               "not see urxe devices. Fix: unload the kernel's RDMA modules (stop what uses them, then e.g. "
               "'modprobe -r rdma_rxe siw ib_uverbs rdma_ucm ib_core'; 'lsmod | grep ib_core' shows what "
               "holds it), or run urxe where they are not loaded (another VM or host). On such a kernel, "
               "the kernel's own Soft-RoCE is the alternative: rdma link add rxe0 type rxe netdev IFACE\n",
               prog, devs.empty() ? "" : "; kernel devices: ", devs.c_str(), devs.empty() ? "" : "");
  return true;
}

std::string check_device_dirs_writable(const provider::Paths& paths) {
  const bool root = ::geteuid() == 0;
  if (std::string why = why_unwritable(paths.dev_dir); !why.empty()) {
    return "cannot write " + why + ": 'urxe link' creates and removes the device nodes " + paths.dev_dir +
           "/uverbsN there (libibverbs looks for them nowhere else). " +
           (root ? "Make it writable: in a container start it with a writable " + paths.dev_dir +
                       " (docker run --tmpfs " + paths.dev_dir + " ...), or mount one: mount -t tmpfs none " +
                       paths.dev_dir
                 : std::string("Run it as root (sudo urxe link ...)"));
  }
  if (std::string why = why_unwritable(paths.run_dir); !why.empty()) {
    return "cannot write the run directory " + why + ": it holds the devices' sysfs-like trees. " +
           (root ? std::string("Point URXE_RUN_DIR at a writable directory (applications then need the "
                               "same URXE_RUN_DIR; urxe env and urxe run pass it on)")
                 : std::string("Run it as root (sudo urxe link ...)"));
  }
  return "";
}

bool warn_if_no_net_raw(const char* prog, const provider::Paths& paths) {
  if (hostnet::have_capability(CAP_NET_RAW)) return false;
  std::string wire;
  for (const provider::DeviceInfo& d : provider::list_devices(paths)) {
    const std::string& p = d.config.port;
    if (dpdk::in_memory_port(p) || d.other_netns) continue;
    wire += (wire.empty() ? "" : ", ") + d.config.name + " (port " + p + " on " + d.config.netdev + ")";
  }
  if (wire.empty()) return false;
  std::fprintf(stderr,
               "%s: warning: no CAP_NET_RAW, so applications cannot open %s: urxe sends and receives "
               "through a packet socket or DPDK, which need it. Fix: run as root, or keep the capability "
               "as an ambient one: sudo setpriv --reuid=$(id -u) --regid=$(id -g) --init-groups "
               "--inh-caps=+net_raw --ambient-caps=+net_raw urxe run -- APP (file capabilities from "
               "setcap would make the loader ignore LD_PRELOAD); Docker's default capabilities include "
               "NET_RAW\n",
               prog, wire.c_str());
  return true;
}

int warn_unusable_devices(const char* prog, const provider::Paths& paths) {
  int n = 0;
  for (const provider::DeviceInfo& d : provider::list_devices(paths)) {
    // A device of another network namespace is not this process's to see (libibverbs here skips it).
    if (d.other_netns) continue;
    const std::string& name = d.config.name;
    if (!d.dev_node_ok) {
      ++n;
      std::fprintf(stderr,
                   "%s: warning: %s has no device node %s/%s here, so libibverbs skips it (it was created "
                   "in another mount namespace or container, or the node was removed); recreate it here: "
                   "urxe link del %s && urxe link add %s netdev %s\n",
                   prog, name.c_str(), paths.dev_dir.c_str(), d.uverbs_name.c_str(), name.c_str(),
                   name.c_str(), d.config.netdev.c_str());
    } else if (!d.netdev_present) {
      ++n;
      std::fprintf(stderr,
                   "%s: warning: %s's interface %s is not in this network namespace, so opening %s will "
                   "fail; run the application where %s is (ip netns exec NS ...), or recreate the device "
                   "on an interface here: urxe link del %s && urxe link add %s netdev IFACE\n",
                   prog, name.c_str(), d.config.netdev.c_str(), name.c_str(), d.config.netdev.c_str(),
                   name.c_str(), name.c_str());
    }
  }
  return n;
}

}  // namespace urxe::tools
