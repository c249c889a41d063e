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
// for messages. With no argument, -h or --help: prints the list of commands, then `epilog` (examples,
// environment), to stdout (exit 0 for help, kExitUsage to stderr when nothing was given). Unknown name:
// names the valid ones on stderr, exit kExitUsage.
//
// Help texts: every command answers -h/--help/help anywhere in its arguments with its text on stdout,
// exit 0, in this order: "usage: urxe CMD ..." line(s), what it does, one "  --option ARG  text" line (plus
// indented continuation lines) per option, "examples:" with at least one command line, "exit status: ...".
// tests/cli/cli_help_test.sh checks that for every command `urxe --help` lists (recursively), and that
// every option a command names as valid in its unknown-option error is documented in its help.
int dispatch(std::string_view prog, std::string_view description, std::span<const Command> commands,
             Args args, std::string_view epilog = {});

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
