// `urxe link ...`: create, remove, list and refresh urxe devices on the device tree
// (provider/device_tree.h): argument checks whose errors say how to fix them, --help texts, the output like
// `rdma link show`, and the nftables ingress drop of UDP/4791 that keeps the kernel from answering RoCE
// frames (hostnet/kernel_guard.h), which belongs to the device's owner, so `link add` installs it and
// `link del` removes it. Devices whose interface has gone are removed by `link show` and `link add`, as the
// kernel removes an rdma link whose netdev goes.
#include <linux/capability.h>
#include <net/if.h>

#include <charconv>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "dpdk/port_kind.h"
#include "dpdk/socket_port.h"
#include "hostnet/capability.h"
#include "hostnet/gid.h"
#include "hostnet/interface.h"
#include "hostnet/kernel_guard.h"
#include "hostnet/monitor.h"
#include "hostnet/netns.h"
#include "provider/device_tree.h"
#include "tools/command.h"
#include "tools/diagnose.h"
#include "wire/fault_rule.h"

namespace urxe::tools {
namespace {

namespace prov = urxe::provider;

constexpr char kAddUsage[] =
    "usage: urxe link add NAME netdev IFACE [--dpdk 'EAL/vdev ARGS'] [--mtu N] [--port KIND] [--gids N]\n"
    "                     [--pcap DIR [--pcap-size MB] [--pcap-files N]] [--no-filter]\n"
    "                     [--no-local-path] [--no-gso] [--fault RULE]...\n"
    "Create the RDMA device NAME (e.g. urxe0) on the Ethernet interface IFACE of this network namespace:\n"
    "a sysfs-like tree under $URXE_RUN_DIR (default /run/urxe), /dev/infiniband/uverbsN, and the device's\n"
    "config. GIDs are built from IFACE's IPv4/IPv6 addresses in the kernel's RoCE order ('urxe link "
    "refresh'\n"
    "or 'urxe link watch' after address changes). Applications then see it through 'urxe run' / 'urxe env'.\n"
    "Needs root (mknod in /dev/infiniband). Several devices may coexist.\n"
    "The device belongs to this network namespace: applications see only the devices whose interface is\n"
    "in their own namespace. A device whose interface has gone (removed, or its namespace deleted) is\n"
    "removed by the next 'link add' or 'link show', which frees its NAME.\n"
    "\n"
    "  --dpdk ARGS   EAL/vdev arguments passed to DPDK as they are, e.g. --dpdk "
    "'--vdev=net_af_xdp0,iface=eth0'\n"
    "                (with --port dpdk and no ARGS: DPDK's af_packet vdev on IFACE)\n"
    "  --mtu N       Ethernet MTU urxe uses (348 .. IFACE's MTU; default IFACE's MTU). The RoCE path MTU is\n"
    "                the largest of 256..4096 that fits N minus 92 bytes of headers (1500 -> 1024, 4200 -> "
    "4096)\n"
    "  --port KIND   packet I/O: auto (default: the kernel-socket port, or DPDK when --dpdk ARGS are given;\n"
    "                a one-line notice says which), dpdk, socket, loop (in-process only, for tests), null\n"
    "                (drops all). On a veth the socket port measured faster than DPDK's af_packet vdev.\n"
    "  --gids N      GID table size, 2..1024 (default 16)\n"
    "  --no-filter   do not install the nftables ingress drop described below\n"
    "  --no-local-path  send every frame through IFACE, also to another urxe device (or process) of this\n"
    "                run directory, which is otherwise reached through shared memory (the same-host path):\n"
    "                for an IFACE whose traffic must pass the kernel (a firewall, tcpdump on it; a tc "
    "ingress\n"
    "                qdisc on IFACE, as netem through an ifb needs, turns the path off by itself).\n"
    "                URXE_LOCAL_PATH=0 turns the path off for one run\n"
    "  --no-gso      send every frame on its own. By default the kernel-socket port sends a run of\n"
    "                equal-size frames of one connection (a message's middle packets, a request and the ACK\n"
    "                after it) as one UDP GSO datagram: on a veth, which carries it whole to another urxe's\n"
    "                socket port, the kernel's UDP stack (rxe) or a bridge, and on an interface without UDP\n"
    "                segmentation offload (QEMU's virtio-net, many NICs), where the kernel cuts it into\n"
    "                the frames on its way out; not where the interface would cut it itself. A DPDK or\n"
    "                AF_XDP receiver on a veth's other end does not take such datagrams, and a capture on\n"
    "                the veth shows them whole (urxe pcap decode splits them). URXE_GSO=0/1 overrides for\n"
    "                one run\n"
    "  --pcap DIR    capture every frame the device sends and receives, in every process that opens it, as\n"
    "                pcapng files in DIR (Wireshark/tshark open them): one ring of files per process,\n"
    "                DIR/NAME_PID_COMM_NNNNN_YYYYmmddHHMMSS.pcapng; inbound/outbound in each packet's\n"
    "                flags, pid, command and QPN in its comment. DIR must be writable by those\n"
    "                processes. For one run instead: URXE_PCAP=DIR (URXE_PCAP=off turns a device's\n"
    "                capture off)\n"
    "  --pcap-size MB  start a new file when the current one would exceed MB megabytes (default 100;\n"
    "                0 = one file, no limit). URXE_PCAP_SIZE overrides it for one run\n"
    "  --pcap-files N  keep only the newest N files per process, deleting older ones (default 10; 0 = keep\n"
    "                all), so a long run cannot fill the disk. URXE_PCAP_FILES overrides it for one run\n"
    "  --fault RULE  a fault rule the device starts with (one quoted string; repeat for more, up to 32), as\n"
    "                'urxe fault add' takes it: ids 1, 2, ... in the order given. Every rule is checked\n"
    "                before the device is made; a malformed one makes nothing (exit 2)\n"
    "\n"
    "With CAP_NET_ADMIN, also installs an nftables netdev ingress chain on IFACE (table 'netdev "
    "urxe_IFACE')\n"
    "that drops UDP destination port 4791 before the kernel's IP stack sees it: the kernel then neither\n"
    "answers RoCE frames with ICMP port unreachable nor spends CPU on them, while urxe's packet taps still\n"
    "get every frame. (Kernel RoCE, rdma_rxe, on the same interface stops working while it is there.)\n"
    "Without CAP_NET_ADMIN each urxe process holds UDP port 4791 itself instead.\n"
    "\n"
    "examples:\n"
    "  urxe link add urxe0 netdev eth0\n"
    "  urxe link add urxe1 netdev eth1 --mtu 4200 --gids 32\n"
    "  urxe link add urxe0 netdev eth0 --port socket          no DPDK: the kernel packet-socket port\n"
    "  urxe link add urxe0 netdev eth0 --dpdk '--vdev=net_af_xdp0,iface=eth0'\n"
    "  urxe link add urxe0 netdev eth0 --fault 'dir rx prob 0.01 drop'\n"
    "\n"
    "exit status: 0 created, 1 failed, 2 usage error\n";

static_assert(dpdk::names_every_port_kind(kAddUsage), "kAddUsage: --port must name every dpdk::PortKind");

constexpr char kDelUsage[] =
    "usage: urxe link del NAME\n"
    "Remove the device NAME: its tree under $URXE_RUN_DIR and /dev/infiniband/uverbsN. Processes that have "
    "it\n"
    "open keep working until they close it. When no other device uses its interface, also removes the\n"
    "nftables ingress drop 'link add' installed (needs CAP_NET_ADMIN). Needs root, like 'link add'.\n"
    "\n"
    "examples:\n"
    "  urxe link del urxe0\n"
    "\n"
    "exit status: 0 removed, 1 no such device or failure, 2 usage error\n";

constexpr char kShowUsage[] =
    "usage: urxe link show [NAME]\n"
    "List the urxe devices of $URXE_RUN_DIR (default /run/urxe), like 'rdma link show':\n"
    "  link urxe0/1 state ACTIVE physical_state LINK_UP netdev eth0 port auto dev uverbs0\n"
    "      gid 10.0.0.1\n"
    "state is the interface's (ACTIVE when up); each GID in use follows (IPv4-mapped ones as a.b.c.d).\n"
    "A device of another network namespace ends with 'netns DEV:INO (another network namespace)'; one whose\n"
    "interface has gone is removed first.\n"
    "'urxe link' with no arguments does the same.\n"
    "\n"
    "examples:\n"
    "  urxe link show\n"
    "  urxe link show urxe0\n"
    "\n"
    "exit status: 0, or 1 when NAME is given and does not exist\n";

constexpr char kRefreshUsage[] =
    "usage: urxe link refresh [NAME]\n"
    "Rewrite the GID tables of NAME (default: every device) from their interfaces' current addresses\n"
    "(after 'ip addr add/del'; running applications see the new table at their next GID query).\n"
    "\n"
    "examples:\n"
    "  ip addr add 10.0.0.2/24 dev eth0 && urxe link refresh urxe0\n"
    "\n"
    "exit status: 0, 1 when NAME does not exist or a table could not be written\n";

constexpr char kWatchUsage[] =
    "usage: urxe link watch\n"
    "Stay in the foreground and refresh every device's GID table whenever an address or link changes\n"
    "(rtnetlink), until killed. Run it as a service where addresses change after 'link add'.\n"
    "\n"
    "examples:\n"
    "  urxe link watch &\n"
    "\n"
    "exit status: 1 when the netlink socket fails; otherwise it runs until killed\n";

void print_error(const char* what, const std::string& msg) {
  std::fprintf(stderr, "urxe link %s: %s\n", what, msg.c_str());
}

bool parse_u32(std::string_view s, uint32_t& v) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

bool have_cap_net_admin() {
  return hostnet::have_capability(CAP_NET_ADMIN);
}

// Removes the nftables table `link add` installed on ifname when no device uses ifname any more.
void remove_unused_ingress_drop(const prov::Paths& paths, const std::string& ifname) {
  for (const prov::DeviceInfo& d : prov::list_devices(paths))
    if (d.config.netdev == ifname && !d.other_netns) return;  // still in use by another device
  if (have_cap_net_admin() && hostnet::ingress_drop_present(ifname)) {
    std::string why;
    if (!hostnet::remove_ingress_drop(ifname, &why))
      std::fprintf(stderr,
                   "urxe: warning: could not remove the nftables table netdev urxe_%s (%s); remove it with "
                   "'nft delete table netdev urxe_%s'\n",
                   ifname.c_str(), why.c_str(), ifname.c_str());
  }
}

// Drops the devices whose interface has gone (prov::remove_vanished_devices), and the ingress drop of an
// interface of this namespace that went with them (a destroyed namespace took its tables along).
void remove_vanished(const prov::Paths& paths) {
  const std::string here = hostnet::current_netns().to_string();
  for (const prov::DeviceConfig& c : prov::remove_vanished_devices(paths))
    if (c.netns == here) remove_unused_ingress_drop(paths, c.netdev);
}

std::string gid_text(const prov::GidEntry& e) {
  // Compact form for `link show`: IPv4-mapped GIDs as dotted quads.
  const auto& g = e.gid;
  if (wire::gid_is_ipv4_mapped(g))
    return std::to_string(g[12]) + "." + std::to_string(g[13]) + "." + std::to_string(g[14]) + "." +
           std::to_string(g[15]);
  return hostnet::format_gid(g);
}

bool device_exists(const prov::Paths& paths, const std::string& name, prov::DeviceInfo* info = nullptr) {
  for (const prov::DeviceInfo& d : prov::list_devices(paths)) {
    if (d.config.name == name) {
      if (info) *info = d;
      return true;
    }
  }
  return false;
}

std::string no_device(const prov::Paths& paths, const std::string& name) {
  std::string names;
  for (const prov::DeviceInfo& d : prov::list_devices(paths))
    names += (names.empty() ? "" : ", ") + d.config.name;
  return "no urxe device '" + name + "' in " + paths.run_dir +
         (names.empty() ? std::string(" (there are none)") : " (there are: " + names + ")") +
         "; set URXE_RUN_DIR if it was created with another";
}

std::string permission_hint(const std::string& msg) {
  if (msg.find("ermission denied") != std::string::npos || msg.find("not permitted") != std::string::npos ||
      msg.find("ead-only") != std::string::npos)
    return " (run it as root: it writes $URXE_RUN_DIR, default /run/urxe, and /dev/infiniband)";
  return "";
}

// The options after NAME netdev IFACE.
constexpr Option kAddOptions[] = {{"dpdk", Option::required},
                                  {"mtu", Option::required},
                                  {"port", Option::required},
                                  {"gids", Option::required},
                                  {"pcap", Option::required},
                                  {"pcap-size", Option::required},
                                  {"pcap-files", Option::required},
                                  {"no-filter"},
                                  {"no-local-path"},
                                  {"no-gso"},
                                  {"fault", Option::required}};

// What `link add`'s words ask for: the device's config and the choices that are not part of it.
struct AddRequest {
  prov::DeviceConfig cfg;
  uint32_t mtu = 0;  // --mtu, 0 when not given
  dpdk::PortKind kind = dpdk::PortKind::automatic;
  bool filter = true;                   // install the nftables ingress drop
  std::vector<wire::FaultRule> faults;  // --fault, in order
};

// Returned by the add steps when the command goes on; anything else is its exit status.
constexpr int kProceed = -1;

// Applies one parsed option to req; kProceed, or the exit status of a bad one.
int apply_add_option(const Token& t, const OptionParser& opts, AddRequest& req) {
  if (t.kind == Token::missing_value)
    return usage_error("urxe link add", std::string(t.word) + " needs a value (see urxe link add --help)");
  if (t.kind != Token::option)
    return usage_error("urxe link add",
                       "unknown option '" + std::string(t.word) + "' (valid: " + opts.valid() + ")");
  prov::DeviceConfig& cfg = req.cfg;
  const std::string k = "--" + std::string(t.opt->name);
  if (k == "--no-filter") {
    req.filter = false;
    return kProceed;
  }
  if (k == "--no-local-path") {
    cfg.local_path = false;
    return kProceed;
  }
  if (k == "--no-gso") {
    cfg.gso = false;
    return kProceed;
  }
  const std::string_view v = *t.value;
  uint32_t n = 0;
  if (k == "--mtu") {
    if (!parse_u32(v, n) || n < 348) {
      std::fprintf(stderr,
                   "urxe link add: --mtu '%.*s' is not an Ethernet MTU urxe can use (a number >= 348: the "
                   "smallest RoCE path MTU, 256, plus 92 bytes of headers)\n",
                   static_cast<int>(v.size()), v.data());
      return kExitUsage;
    }
    req.mtu = n;
    cfg.mtu = n;
  } else if (k == "--gids") {
    if (!parse_u32(v, n) || n < 2 || n > 1024) {
      std::fprintf(stderr, "urxe link add: --gids '%.*s': the GID table size must be a number 2..1024\n",
                   static_cast<int>(v.size()), v.data());
      return kExitUsage;
    }
    cfg.gid_tbl_len = n;
  } else if (k == "--port") {
    if (!dpdk::parse_port_kind(v, req.kind)) {
      std::fprintf(stderr, "urxe link add: --port '%.*s': valid kinds are %s\n", static_cast<int>(v.size()),
                   v.data(), dpdk::port_kind_list().c_str());
      return kExitUsage;
    }
    cfg.port = std::string(v);
  } else if (k == "--pcap-size" || k == "--pcap-files") {
    if (!parse_u32(v, n)) {
      std::fprintf(stderr, "urxe link add: %.*s '%.*s' must be a number (0 = no limit)\n",
                   static_cast<int>(k.size()), k.data(), static_cast<int>(v.size()), v.data());
      return kExitUsage;
    }
    (k == "--pcap-size" ? cfg.pcap_size_mb : cfg.pcap_files) = n;
  } else if (k == "--pcap") {
    // Stored absolute: applications open the device from any directory. Created now when missing.
    std::error_code ec;
    const std::filesystem::path dir = std::filesystem::absolute(std::filesystem::path(v), ec);
    if (v.empty() || ec ||
        (!std::filesystem::is_directory(dir, ec) && !std::filesystem::create_directories(dir, ec))) {
      std::fprintf(stderr, "urxe link add: --pcap '%.*s': cannot create the directory (%s)\n",
                   static_cast<int>(v.size()), v.data(), ec ? ec.message().c_str() : "empty path");
      return 1;
    }
    cfg.pcap = dir.lexically_normal().string();
  } else if (k == "--fault") {
    const wire::FaultParse parsed = wire::parse_fault_rule(v);
    if (!parsed) {
      std::fprintf(stderr, "urxe link add: --fault '%.*s': %s ('urxe fault add --help')\n",
                   static_cast<int>(v.size()), v.data(), parsed.error.c_str());
      return kExitUsage;
    }
    if (req.faults.size() == wire::kFaultTableSize) {
      std::fprintf(stderr, "urxe link add: more than %zu --fault rules\n", wire::kFaultTableSize);
      return kExitUsage;
    }
    req.faults.push_back(*parsed.rule);
  } else if (k == "--dpdk") {
    if (v.empty()) {
      std::fputs("urxe link add: --dpdk needs EAL/vdev arguments (omit it for the default af_packet vdev)\n",
                 stderr);
      return kExitUsage;
    }
    cfg.dpdk = std::string(v);
  }
  return kProceed;
}

// Reads NAME netdev IFACE and the options into req: kProceed, or the exit status of --help or a usage
// error (one that --pcap hits creating its directory exits 1).
int parse_add_args(Args args, AddRequest& req) {
  OptionParser opts(args, kAddOptions, {.leading = 3});
  if (opts.help()) return print_help(kAddUsage);
  if (args.size() < 3) return usage_error("urxe link add", "expected NAME netdev IFACE", kAddUsage);
  const std::string name(args[0]);
  if (args[1] != "netdev") {
    std::fprintf(stderr,
                 "urxe link add: expected the word 'netdev' after NAME, got '%.*s' (e.g. urxe link add %s "
                 "netdev eth0)\n",
                 static_cast<int>(args[1].size()), args[1].data(), name.c_str());
    return kExitUsage;
  }
  req.cfg.name = name;
  req.cfg.netdev = std::string(args[2]);
  for (Token t; (t = opts.next());)
    if (const int rc = apply_add_option(t, opts, req); rc != kProceed) return rc;
  if (!req.cfg.dpdk.empty() && req.kind != dpdk::PortKind::automatic && req.kind != dpdk::PortKind::dpdk) {
    std::fprintf(stderr, "urxe link add: --dpdk is for the DPDK port; it cannot be combined with --port %s\n",
                 std::string(dpdk::port_kind_name(req.kind)).c_str());
    return kExitUsage;
  }
  return kProceed;
}

// Checks what the host must offer before anything is created: IFACE here, NAME free (after dropping the
// devices whose interface has gone), the device directories writable, --mtu within IFACE's MTU.
bool check_add_target(const prov::Paths& paths, const AddRequest& req) {
  const std::string& name = req.cfg.name;
  const std::string& ifname = req.cfg.netdev;
  hostnet::Interface iface;
  if (!hostnet::query_interface(ifname, iface, nullptr, false)) {
    print_error("add", "no interface '" + ifname +
                           "' in this network namespace (there are: " + hostnet::interface_names() +
                           "; 'ip link' lists them; in a container, use the container's interface, e.g. "
                           "eth0)");
    return false;
  }
  remove_vanished(paths);  // a device whose interface has gone no longer holds its name
  prov::DeviceInfo existing;
  if (device_exists(paths, name, &existing)) {
    print_error("add", "device '" + name + "' already exists (on " + existing.config.netdev + ", in " +
                           paths.run_dir + "); remove it with 'urxe link del " + name +
                           "' or choose another NAME");
    return false;
  }
  if (const std::string why = check_device_dirs_writable(paths); !why.empty()) {
    print_error("add", why);
    return false;
  }
  if (req.mtu && req.mtu > iface.mtu) {
    print_error("add", "--mtu " + std::to_string(req.mtu) + " is larger than " + ifname + "'s MTU " +
                           std::to_string(iface.mtu) + " (raise it first: ip link set " + ifname + " mtu " +
                           std::to_string(req.mtu) + ")");
    return false;
  }
  return true;
}

// Installs the nftables ingress drop on the new device's interface, or says why not. The device works
// either way, so nothing here fails the command.
void add_ingress_drop(const AddRequest& req) {
  // The ingress drop only matters for ports that put frames on the wire.
  if (!req.filter || req.kind == dpdk::PortKind::loop || req.kind == dpdk::PortKind::null) return;
  const std::string& ifname = req.cfg.netdev;
  if (!have_cap_net_admin()) {
    std::fprintf(stderr,
                 "urxe: note: no CAP_NET_ADMIN, so no nftables ingress drop of UDP/4791 on %s; urxe "
                 "processes hold UDP port 4791 themselves so the kernel sends no ICMP port unreachable\n",
                 ifname.c_str());
    return;
  }
  std::string why;
  if (hostnet::install_ingress_drop(ifname, &why)) {
    std::printf("%s: nftables ingress drop of UDP/4791 (table netdev urxe_%s)\n", ifname.c_str(),
                ifname.c_str());
  } else {
    std::fprintf(stderr,
                 "urxe: warning: could not install the nftables ingress drop of UDP/4791 on %s (%s; install "
                 "nftables, or pass --no-filter); the device works, urxe processes hold UDP port 4791 "
                 "themselves instead\n",
                 ifname.c_str(), why.c_str());
  }
}

int add_main(Args args) {
  AddRequest req;
  if (const int rc = parse_add_args(args, req); rc != kProceed) return rc;
  const prov::Paths paths = prov::Paths::from_env();
  if (!check_add_target(paths, req)) return 1;
  std::string err;
  if (prov::create_device(paths, req.cfg, err, req.faults) != 0) {
    print_error("add", err + permission_hint(err));
    return 1;
  }
  std::printf("%s: uverbs%d on %s\n", req.cfg.name.c_str(), req.cfg.uverbs, req.cfg.netdev.c_str());
  for (size_t i = 0; i < req.faults.size(); ++i)
    std::printf("%s: fault rule %zu: %s\n", req.cfg.name.c_str(), i + 1,
                wire::format_fault_rule(req.faults[i]).c_str());
  std::fflush(stdout);
  warn_if_kernel_rdma("urxe link add");
  add_ingress_drop(req);
  return 0;
}

int del_main(Args args) {
  OptionParser opts(args, {});
  if (opts.help()) return print_help(kDelUsage);
  if (args.size() != 1) return usage_error("urxe link del", "expected exactly one device NAME", kDelUsage);
  if (const Token t = opts.next(); t.kind != Token::operand)
    return usage_error("urxe link del",
                       "unknown option '" + std::string(t.word) + "' (link del takes only a device NAME)",
                       kDelUsage);
  const std::string name(args[0]);
  const prov::Paths paths = prov::Paths::from_env();
  prov::DeviceInfo dev;
  if (!device_exists(paths, name, &dev)) {
    print_error("del", no_device(paths, name));
    return 1;
  }
  if (const std::string why = check_device_dirs_writable(paths); !why.empty()) {
    print_error("del", why);
    return 1;
  }
  std::string err;
  if (prov::remove_device(paths, name, err) != 0) {
    print_error("del", err + permission_hint(err));
    return 1;
  }
  // The table is this namespace's: a device of another one left it alone.
  if (!dev.other_netns) remove_unused_ingress_drop(paths, dev.config.netdev);
  return 0;
}

// Like `rdma link show`: "link urxe0/1 state ACTIVE physical_state LINK_UP netdev eth0 ...", then its GIDs.
// A device of another network namespace is described as it is there.
int link_show(const prov::Paths& paths, const std::string& only) {
  for (const prov::DeviceInfo& d : prov::list_devices(paths)) {
    if (!only.empty() && d.config.name != only) continue;
    hostnet::Interface nd;
    hostnet::NetnsId ns;
    bool present = false;
    if (d.other_netns && hostnet::NetnsId::parse(d.config.netns, ns))
      present = hostnet::query_interface_in(ns, d.config.netdev, nd) == hostnet::Presence::present;
    else
      present = hostnet::query_interface(d.config.netdev, nd, nullptr, false);
    const bool up = present && nd.active();
    std::printf("link %s/1 state %s physical_state %s netdev %s port %s", d.config.name.c_str(),
                up ? "ACTIVE" : "DOWN", up ? "LINK_UP" : "DISABLED", d.config.netdev.c_str(),
                d.config.port.c_str());
    if (d.config.mtu) std::printf(" mtu %u", d.config.mtu);
    if (!d.config.dpdk.empty()) std::printf(" dpdk '%s'", d.config.dpdk.c_str());
    if (!d.config.pcap.empty())
      std::printf(" pcap %s pcap-size %u pcap-files %u", d.config.pcap.c_str(), d.config.pcap_size_mb,
                  d.config.pcap_files);
    // The same-host path (dpdk/README.md).
    const bool local = d.config.uses_local_path();
    const std::string qdisc = local && present && !d.other_netns ? hostnet::ingress_qdisc(nd.ifindex) : "";
    if (!qdisc.empty())
      std::printf(" local-path off (ingress qdisc %s)", qdisc.c_str());
    else
      std::printf(" local-path %s", local ? "on" : "off");
    // UDP GSO of the socket port: asked for, and where it applies (dpdk::gso_cut).
    if (!d.config.gso) {
      std::printf(" gso off");
    } else if (present && !d.other_netns &&
               (dpdk::port_kind_is(d.config.port, dpdk::PortKind::automatic) ||
                dpdk::port_kind_is(d.config.port, dpdk::PortKind::socket)) &&
               d.config.dpdk.empty()) {
      const dpdk::GsoCut cut = dpdk::gso_cut(d.config.netdev, -1);
      std::printf(" gso %s", cut == dpdk::GsoCut::peer     ? "on"
                             : cut == dpdk::GsoCut::kernel ? "on (cut by the kernel)"
                             : hostnet::link_feature(d.config.netdev, "tx-udp-segmentation") == 1
                                 ? "off (the interface segments UDP itself)"
                                 : "off (offloads unknown)");
    }
    std::printf(" dev %s%s", d.uverbs_name.c_str(), d.dev_node_ok ? "" : " (no /dev node)");
    if (d.other_netns)
      std::printf(" netns %s (another network namespace)", d.config.netns.c_str());
    else if (!d.netdev_present)
      std::printf(" (netdev missing)");
    std::printf("\n");
    for (const prov::GidEntry& g : d.gids) std::printf("    gid %s\n", gid_text(g).c_str());
  }
  std::fflush(stdout);
  return 0;
}

int refresh(const prov::Paths& paths, const std::string& only) {
  int rc = 0;
  for (const prov::DeviceInfo& d : prov::list_devices(paths)) {
    if (!only.empty() && d.config.name != only) continue;
    std::string e;
    if (prov::refresh_gids(paths, d.config.name, e) != 0) {
      print_error("refresh", e + permission_hint(e));
      rc = 1;
    }
  }
  return rc;
}

// Every address or link change (rtnetlink) triggers a full refresh (cheap), as do lost messages.
int watch(const prov::Paths& paths) {
  hostnet::Monitor monitor;
  std::string err;
  if (!monitor.open(false, &err)) {
    print_error("watch", err);
    return 1;
  }
  refresh(paths, {});
  struct Any : hostnet::MonitorSink {
  } sink;
  while (monitor.drain(sink) >= 0) refresh(paths, {});
  return 1;
}

// show / refresh / watch: only the optional NAME.
int simple_main(const char* sub, const char* usage, Args args, size_t max_args) {
  OptionParser opts(args, {});
  if (opts.help()) return print_help(usage);
  const std::string prog = std::string("urxe link ") + sub;
  std::vector<std::string_view> names;
  for (Token t; (t = opts.next());) {
    if (t.kind != Token::operand)
      return usage_error(prog, "unknown option '" + std::string(t.word) + "'", usage);
    names.push_back(t.word);
  }
  if (names.size() > max_args) return usage_error(prog, "too many arguments", usage);
  const prov::Paths paths = prov::Paths::from_env();
  const std::string sub_name = sub;
  if (sub_name == "show") remove_vanished(paths);
  const std::string only = names.empty() ? std::string() : std::string(names[0]);
  if (!only.empty() && !device_exists(paths, only)) {
    print_error(sub, no_device(paths, only));
    return 1;
  }
  if (sub_name == "show") return link_show(paths, only);
  if (sub_name == "refresh") return refresh(paths, only);
  return watch(paths);
}

int show_main(Args args) {
  return simple_main("show", kShowUsage, args, 1);
}
int refresh_main(Args args) {
  return simple_main("refresh", kRefreshUsage, args, 1);
}
int watch_main(Args args) {
  return simple_main("watch", kWatchUsage, args, 0);
}

constexpr Command kLinkCommands[] = {
    {"add", "create a device on an Ethernet interface: NAME netdev IFACE [--dpdk ARGS] [--pcap DIR] ...",
     add_main},
    {"del", "remove a device", del_main},
    {"show", "list devices with state, interface and GIDs (like 'rdma link show')", show_main},
    {"refresh", "rewrite GID tables from the interfaces' current addresses", refresh_main},
    {"watch", "refresh GID tables on every address change, until killed", watch_main},
};

}  // namespace

int link_main(Args args) {
  if (args.empty()) return show_main(args);  // like 'ip link' / 'rdma link'
  return dispatch("urxe link",
                  "RDMA devices on Ethernet interfaces ($URXE_RUN_DIR, default /run/urxe, holds them).",
                  kLinkCommands, args);
}

}  // namespace urxe::tools
