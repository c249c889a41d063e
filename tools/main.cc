// urxe: the command-line tool of the urxe userspace RoCEv2 NIC. A new subcommand is one cmd_<name>.cc file
// plus one line in kCommands below (and its source in tools/CMakeLists.txt).
#include <cstdio>
#include <string_view>
#include <vector>

#include "dpdk/port_kind.h"
#include "tools/command.h"

#ifndef URXE_VERSION
#define URXE_VERSION "unknown"
#endif

namespace {

constexpr urxe::tools::Command kCommands[] = {
    {"link", "add/del/show RDMA devices on Ethernet interfaces (link add urxe0 netdev eth0)",
     urxe::tools::link_main},
    {"env", "print the environment verbs applications need (eval \"$(urxe env)\")", urxe::tools::env_main},
    {"run", "run a verbs application with that environment (urxe run -- ibv_devinfo)", urxe::tools::run_main},
    {"stats", "device counters (rxe hw_counters names), live and after apps exit; --watch, --json",
     urxe::tools::stats_main},
    {"fault",
     "fault injection rules of a device: drop, delay, corrupt, ... chosen frames (add/list/del/clear)",
     urxe::tools::fault_main},
    {"conform", "drive a live RoCE peer through IBTA conformance scenarios with faults; judge it from the capture",
     urxe::tools::conform_main},
    {"cm", "the RDMA CM service of this namespace (librdmacm); 'urxe cm show': its ids and counters",
     urxe::tools::cm_main},
    {"pcap", "decode RoCEv2 captures (pcap/pcapng): headers, fields, ICRC verdict; plot a connection's PSNs",
     urxe::tools::pcap_main},
};

constexpr char kEpilog[] =
    "examples (devices need root; applications then run as any user):\n"
    "  urxe link add urxe0 netdev eth0                   a device on eth0\n"
    "  urxe run -- ibv_devinfo -d urxe0                  any verbs application, unmodified\n"
    "  urxe run -- ibv_rc_pingpong -d urxe0 -g 1         server; the client adds the server's address\n"
    "  eval \"$(urxe env)\"                                the same environment for a whole shell\n"
    "  urxe link show; urxe link del urxe0\n"
    "\n"
    "environment:\n"
    "  URXE_RUN_DIR   where devices live (default /run/urxe); 'link', 'env' and 'run' must agree on it\n"
    "  URXE_PROVIDER  the liburxe-rdmav34.so to use (default: the one installed or built next to urxe)\n"
    "  URXE_PORT      in applications: packet I/O for this run (auto, dpdk, socket, loop, null), overriding\n"
    "                 the device's --port\n"
    "  URXE_LOG       in applications: log level error, warn (default), info, debug, off (URXE_DEBUG=1 = "
    "debug)\n"
    "  URXE_PCAP      in applications: capture every frame to pcapng files in this directory for this run\n"
    "                 (URXE_PCAP_SIZE, URXE_PCAP_FILES bound them; see 'urxe link add --help', --pcap)\n"
    "  URXE_NO_SYSFS_MOUNT=1  'urxe run' leaves /sys as it is (see 'urxe run --help')\n"
    "\n"
    "Devices stay invisible to applications when the kernel has RDMA loaded (ib_core): libibverbs then\n"
    "ignores SYSFS_PATH; 'urxe link add', 'urxe env' and 'urxe run' warn about it. Installed: the provider\n"
    "in <prefix>/lib/<multiarch>/libibverbs, found by urxe next to itself; docs in <prefix>/share/doc/urxe;\n"
    "man pages urxe(1) and urxe-COMMAND(1), this text and each command's --help.\n"
    "'urxe --version' prints the version.\n";
static_assert(urxe::dpdk::names_every_port_kind(kEpilog),
              "kEpilog: URXE_PORT must name every dpdk::PortKind");

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  if (args.size() == 1 && (args[0] == "--version" || args[0] == "-V")) {
    std::printf("urxe %s\n", URXE_VERSION);
    return 0;
  }
  return urxe::tools::dispatch("urxe", "urxe - userspace software RoCEv2 NIC", kCommands, args, kEpilog);
}
