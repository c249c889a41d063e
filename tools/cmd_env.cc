// `urxe env`: the environment an unmodified verbs application needs to see urxe devices
// (provider/device_tree.h's app_environment), with a check that the provider library it names exists.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "provider/device_tree.h"
#include "tools/command.h"
#include "tools/diagnose.h"

namespace urxe::tools {
namespace {

constexpr char kEnvUsage[] =
    "usage: urxe env [--driver]\n"
    "Print the environment a stock libibverbs application (ibv_devinfo, perftest, your program) needs to "
    "use\n"
    "urxe devices, as shell 'export' lines:\n"
    "  eval \"$(urxe env)\"; ibv_devinfo -d urxe0\n"
    "  SYSFS_PATH  $URXE_RUN_DIR/sys (default /run/urxe/sys): where libibverbs finds the devices\n"
    "  LD_PRELOAD  liburxe-rdmav34.so (appended to any LD_PRELOAD already set): registers the provider and\n"
    "              makes completion channels (ibv_create_comp_channel) work without a kernel\n"
    "The library is $URXE_PROVIDER if set, else the one next to this urxe: <build>/provider/ in a build\n"
    "tree, <prefix>/lib/<multiarch>/libibverbs/ when installed (found from urxe's own location, so a\n"
    "DESTDIR-staged or moved installation uses its own copy).\n"
    "'urxe run -- CMD' runs one command with this environment.\n"
    "\n"
    "  --driver  print the line for /etc/libibverbs.d/urxe.driver instead (loads the provider for every\n"
    "            application without LD_PRELOAD; completion channels then fail cleanly with EBADF):\n"
    "              urxe env --driver > /etc/libibverbs.d/urxe.driver   # and SYSFS_PATH still applies\n"
    "            (an installed urxe package already has /etc/libibverbs.d/urxe.driver)\n"
    "\n"
    "Warnings go to stderr, so the output stays eval-able: when the kernel has RDMA loaded, libibverbs\n"
    "ignores SYSFS_PATH and applications will not see urxe devices (see 'urxe --help').\n"
    "\n"
    "examples:\n"
    "  eval \"$(urxe env)\"; ibv_devices\n"
    "  URXE_RUN_DIR=/tmp/urxe urxe env     # devices created with the same URXE_RUN_DIR\n"
    "\n"
    "exit status: 0, 1 when the provider library is not found, 2 usage error\n";

}  // namespace

bool provider_library_ok(const char* prog) {
  const std::string lib = provider::provider_library_path();
  if (::access(lib.c_str(), R_OK) == 0) return true;
  std::fprintf(stderr,
               "%s: the urxe provider library %s is missing (build it: ninja urxe_provider, or install "
               "urxe; or point URXE_PROVIDER at liburxe-rdmav34.so)\n",
               prog, lib.c_str());
  return false;
}

int env_main(Args args) {
  static constexpr Option kOptions[] = {{"driver"}};
  OptionParser opts(args, kOptions);
  if (opts.help()) return print_help(kEnvUsage);
  bool driver = false;
  for (Token t; (t = opts.next());) {
    if (t.kind != Token::option)
      return usage_error("urxe env", "unknown argument '" + std::string(t.word) + "'", kEnvUsage);
    driver = true;
  }
  // Printing a LD_PRELOAD of a missing file would make every later command in that shell warn.
  if (!provider_library_ok("urxe env")) return 1;
  warn_if_kernel_rdma("urxe env");
  warn_unusable_devices("urxe env", provider::Paths::from_env());
  if (driver) {
    std::fputs(provider::driver_file_content().c_str(), stdout);
    return 0;
  }
  const char* preload = std::getenv("LD_PRELOAD");
  for (const auto& [k, v] : provider::app_environment(provider::Paths::from_env(), preload ? preload : ""))
    std::printf("export %s='%s'\n", k.c_str(), v.c_str());
  return 0;
}

}  // namespace urxe::tools
