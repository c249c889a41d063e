// The command-line side of urxe devices, for the `urxe` tool's `link`, `env` and `run` subcommands (and
// the provider tests): argument parsing and output over device_tree.h. Each *_main takes the arguments
// after the subcommand word and returns a process exit status.
//
//   link add NAME netdev IFACE [--dpdk 'ARGS'] [--mtu N] [--port auto|dpdk|socket|loop|null] [--gids N]
//            [--pcap DIR] [--pcap-size MB] [--pcap-files N]
//   link del NAME
//   link show [NAME]          one line per device, like `rdma link show`
//   link refresh [NAME]       rewrite GID tables from the interfaces' current addresses
//   link watch                refresh on every address change (rtnetlink), until killed
//   env [--driver]            `export VAR='value'` lines for eval, or the /etc/libibverbs.d/urxe.driver line
//   run -- CMD [ARGS...]      exec CMD with that environment
//
// The run directory comes from $URXE_RUN_DIR (default /run/urxe).
#pragma once
#include <ostream>

namespace urxe::provider::cli {

int link_main(int argc, char** argv, std::ostream& out, std::ostream& err);
int env_main(int argc, char** argv, std::ostream& out, std::ostream& err);
// Returns only on failure (127 when CMD cannot be executed, 2 on usage errors).
int run_main(int argc, char** argv, std::ostream& err);

}  // namespace urxe::provider::cli
