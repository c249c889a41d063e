// urxe: the command-line tool of the urxe userspace RoCEv2 NIC. A new subcommand is one cmd_<name>.cc file
// plus one line in kCommands below (and its source in tools/CMakeLists.txt).
#include <string_view>
#include <vector>

#include "tools/command.h"

namespace {

constexpr urxe::tools::Command kCommands[] = {
    {"link", "add/del/show RDMA devices on Ethernet interfaces (link add urxe0 netdev eth0)",
     urxe::tools::link_main},
    {"env", "print the environment verbs applications need (eval \"$(urxe env)\")", urxe::tools::env_main},
    {"run", "run a verbs application with that environment (urxe run -- ibv_devinfo)", urxe::tools::run_main},
    {"stats", "device counters (rxe hw_counters names), live and after apps exit; --watch, --json",
     urxe::tools::stats_main},
    {"pcap", "decode RoCEv2 captures (pcap/pcapng): headers, fields, ICRC verdict", urxe::tools::pcap_main},
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  return urxe::tools::dispatch("urxe", "urxe - userspace software RoCEv2 NIC", kCommands, args);
}
