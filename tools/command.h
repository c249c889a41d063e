// The `urxe` command's subcommand plumbing. Each subcommand lives in its own cmd_<name>.cc, exposes one
// `int <name>_main(Args)` declared here, and is listed once in main.cc's table; a subcommand with its own
// subcommands (pcap decode, link add/del/show) dispatches with the same `dispatch`.
#pragma once
#include <span>
#include <string_view>

namespace urxe::tools {

using Args = std::span<const std::string_view>;  // arguments after the subcommand's name

inline constexpr int kExitUsage = 2;  // bad arguments, unknown subcommand, unreadable file

struct Command {
  std::string_view name;
  std::string_view summary;  // one line for --help
  int (*run)(Args args);
};

// Runs the command named by args[0] from `commands`. `prog` is the invoking prefix ("urxe", "urxe pcap")
// for messages. With no argument, -h or --help: prints the list of commands to stdout (exit 0 for help,
// kExitUsage when nothing was given). Unknown name: names the valid ones on stderr, exit kExitUsage.
int dispatch(std::string_view prog, std::string_view description, std::span<const Command> commands,
             Args args);

bool is_help(std::string_view a);

// Subcommands.
int pcap_main(Args args);
int link_main(Args args);
int env_main(Args args);
int run_main(Args args);
int stats_main(Args args);

// True when the provider library `urxe env` would name is readable; otherwise says so on stderr, prefixed
// by prog, with how to get it.
bool provider_library_ok(const char* prog);

}  // namespace urxe::tools
