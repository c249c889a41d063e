// urxe: the command-line tool of the urxe userspace RoCEv2 NIC. A new subcommand is one cmd_<name>.cc file
// plus one line in kCommands below (and its source in tools/CMakeLists.txt).
#include <string_view>
#include <vector>

#include "tools/command.h"

namespace {

constexpr urxe::tools::Command kCommands[] = {
    {"pcap", "decode RoCEv2 captures (pcap/pcapng): headers, fields, ICRC verdict", urxe::tools::pcap_main},
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  return urxe::tools::dispatch("urxe", "urxe - userspace software RoCEv2 NIC", kCommands, args);
}
