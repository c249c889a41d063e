// The `urxe` command's subcommand plumbing. Each subcommand lives in its own cmd_<name>.cc, exposes one
// `int <name>_main(Args)` declared here, and is listed once in main.cc's table; a subcommand with its own
// subcommands (pcap decode, link add/del/show) dispatches with the same `dispatch`. Each command declares
// its options once, as a table of Option, and reads its arguments with OptionParser (getopt_long).
#pragma once
#include <getopt.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

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

// Prints a command's help text to stdout; returns 0, the exit status of --help.
int print_help(const char* usage);

// On stderr: "PROG: MESSAGE", then `usage` when given; returns kExitUsage.
int usage_error(std::string_view prog, std::string_view message, const char* usage = nullptr);

// One option of a command, for OptionParser: --NAME, and -LETTER when letter is set.
struct Option {
  enum Value : uint8_t { none, required, optional };
  std::string_view name;  // without the leading "--"
  Value value = none;
  char letter = 0;
  // Value::optional: whether the next word is the value (`--watch 2`); "--NAME=VALUE" always is.
  bool (*takes)(std::string_view next) = nullptr;
};

// What OptionParser::next() read: an option with its value, an operand, or the error that ends the parse.
struct Token {
  enum Kind : uint8_t { end, option, operand, unknown, missing_value };
  Kind kind = end;
  const Option* opt = nullptr;  // for option and missing_value
  std::string_view word;        // as typed ("--mtu=9000", "--mtu", "-p", "NAME"), for messages
  std::optional<std::string_view> value = {};
  explicit operator bool() const { return kind != end; }
};

// How OptionParser reads a command's words.
struct ParseMode {
  size_t leading = 0;            // words before any option, the command's own (link add's NAME netdev IFACE)
  bool stop_at_operand = false;  // the first operand and all after it are rest() (urxe run CMD ...)
};

// A command's arguments by getopt_long, in order: whole option names only (an abbreviation is an unknown
// option), a value as the next word or after '=', no bundled short options; "--" is an unknown option
// unless stop_at_operand. With stop_at_operand the parse ends at the first operand or after "--", and
// rest() holds what follows, untouched (urxe run -- CMD --its-own-options). After unknown or
// missing_value, next() returns end. Uses getopt's global state: one parser at a time.
class OptionParser {
 public:
  OptionParser(Args args, std::span<const Option> options, ParseMode mode = {});
  OptionParser(const OptionParser&) = delete;
  OptionParser& operator=(const OptionParser&) = delete;

  // -h, --help or help anywhere (with stop_at_operand: before the first operand).
  bool help() const { return help_; }
  Token next();
  Args rest() const { return args_.subspan(rest_); }
  // "--a, --b, ..." for an error that lists the valid options.
  std::string valid() const;

 private:
  const Option* find(int code) const;
  std::string_view in_args(const char* p) const;
  // getopt's argv[i], in the caller's arguments.
  std::string_view arg(int i) const { return args_[first_ + static_cast<size_t>(i) - 1]; }

  Args args_;
  std::span<const Option> options_;
  size_t first_;  // args_[first_] is getopt's argv[1]
  bool stop_;
  bool help_ = false;
  bool done_ = false;
  size_t rest_ = 0;
  std::vector<std::string> words_;  // getopt's argv: a program name, then args_
  std::vector<char*> argv_;
  std::vector<std::string> names_;
  std::vector<option> long_;
  std::string short_;
};

// Subcommands.
int pcap_main(Args args);
int link_main(Args args);
int env_main(Args args);
int run_main(Args args);
int stats_main(Args args);
int cm_main(Args args);
int fault_main(Args args);
int conform_main(Args args);

// True when the provider library `urxe env` would name is readable; otherwise says so on stderr, prefixed
// by prog, with how to get it.
bool provider_library_ok(const char* prog);

}  // namespace urxe::tools
