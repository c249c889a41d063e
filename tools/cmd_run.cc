// `urxe run -- CMD [ARGS...]`: exec CMD with the environment `urxe env` prints
// (provider/device_tree.h's app_environment).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "provider/device_tree.h"
#include "tools/command.h"
#include "tools/diagnose.h"
#include "tools/sysfs_view.h"

namespace urxe::tools {
namespace {

constexpr char kRunUsage[] =
    "usage: urxe run [--] CMD [ARGS...]\n"
    "Run CMD (any stock verbs application) with the environment 'urxe env' prints (SYSFS_PATH and\n"
    "LD_PRELOAD of liburxe-rdmav34.so), so it sees the urxe devices of $URXE_RUN_DIR (default /run/urxe):\n"
    "  urxe run -- ibv_devinfo -d urxe0\n"
    "  urxe run -- ib_write_bw -d urxe0 -x 1            (server)\n"
    "  urxe run -- ib_write_bw -d urxe0 -x 1 10.0.0.1   (client)\n"
    "CMD replaces urxe (same PID, signals, exit status). '--' is needed when CMD's first word starts with "
    "'-'.\n"
    "Create devices first with 'urxe link add NAME netdev IFACE'.\n"
    "Before running CMD, warns on stderr when the kernel has RDMA loaded (libibverbs then ignores\n"
    "SYSFS_PATH), when this process lacks CAP_NET_RAW for a device that moves real packets, and when a\n"
    "device's /dev node or interface is missing in this mount / network namespace.\n"
    "When urxe run may (root, or CAP_SYS_ADMIN), CMD runs in a private mount namespace in which the urxe\n"
    "devices of this network namespace also appear at /sys/class/infiniband (with\n"
    "/sys/class/infiniband_verbs and /sys/class/misc/rdma_cm when the kernel has none), for tools that\n"
    "read /sys itself (ibstatus, ibstat, pyverbs' RDMA CM tests): /sys/class becomes a tmpfs holding every\n"
    "class the kernel has, each its own directory, plus these. Nothing of it reaches the host; classes the\n"
    "kernel registers later do not appear in it. Otherwise (or with URXE_NO_SYSFS_MOUNT=1) CMD sees the\n"
    "real /sys; URXE_LOG=info says why.\n"
    "\n"
    "examples:\n"
    "  urxe run -- ibv_devices\n"
    "  URXE_LOG=info urxe run -- ibv_rc_pingpong -d urxe0 -g 1 10.0.0.1\n"
    "  urxe run -- ibstatus urxe0                        (as root: reads /sys/class/infiniband)\n"
    "\n"
    "exit status: CMD's; 127 when CMD cannot be run, 1 when the provider library is missing, 2 usage error\n";

// The applications' log rule (provider/log.h): notes are info lines.
bool info_wanted() {
  const char* level = std::getenv("URXE_LOG");
  if (!level || !*level) {
    const char* debug = std::getenv("URXE_DEBUG");
    return debug && std::strcmp(debug, "1") == 0;
  }
  return std::strcmp(level, "info") == 0 || std::strcmp(level, "debug") == 0;
}

}  // namespace

int run_main(Args args) {
  if (args.empty()) {
    std::fputs(kRunUsage, stderr);
    return kExitUsage;
  }
  // CMD's own options are CMD's: the parse ends at CMD (or after "--").
  OptionParser opts(args, {}, {.stop_at_operand = true});
  if (opts.help()) return print_help(kRunUsage);
  if (const Token t = opts.next())
    return usage_error(
        "urxe run", "unknown option '" + std::string(t.word) + "' (put '--' before the command)", kRunUsage);
  const Args cmd = opts.rest();
  if (cmd.empty()) return usage_error("urxe run", "no command after '--'", kRunUsage);
  if (!provider_library_ok("urxe run")) return 1;
  const provider::Paths paths = provider::Paths::from_env();
  warn_if_kernel_rdma("urxe run");
  warn_if_no_net_raw("urxe run", paths);
  warn_unusable_devices("urxe run", paths);
  const auto devices = provider::list_devices(paths);
  if (std::none_of(devices.begin(), devices.end(),
                   [](const provider::DeviceInfo& d) { return !d.other_netns; }))
    std::fprintf(stderr,
                 "urxe run: note: no urxe device in %s (the application will find none; create one with "
                 "'urxe link add urxe0 netdev IFACE' as root, or set URXE_RUN_DIR)\n",
                 paths.run_dir.c_str());
  if (const char* no = std::getenv("URXE_NO_SYSFS_MOUNT"); !no || std::strcmp(no, "1") != 0) {
    // Without the privilege this is an extra, not an error: SYSFS_PATH is what verbs applications use.
    if (const std::string why = show_fake_sysfs(paths); !why.empty() && info_wanted())
      std::fprintf(stderr, "urxe run: note: urxe devices not shown at /sys/class/infiniband: %s\n",
                   why.c_str());
  }
  const char* preload = std::getenv("LD_PRELOAD");
  for (const auto& [k, v] : provider::app_environment(paths, preload ? preload : ""))
    ::setenv(k.c_str(), v.c_str(), 1);
  std::vector<std::string> words(cmd.begin(), cmd.end());
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  ::execvp(argv[0], argv.data());
  // Only reached when the exec failed.
  std::fprintf(stderr,
               "urxe run: cannot run %s: %s (is it installed and on PATH? e.g. apt-get install ibverbs-utils "
               "perftest)\n",
               argv[0], std::strerror(errno));
  return 127;
}

}  // namespace urxe::tools
